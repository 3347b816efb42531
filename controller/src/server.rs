//! The HTTP endpoints of the controller: `/metrics` (Prometheus), `/healthz` (alive) and `/readyz`
//! (the API server answered; a standby waiting for leadership is ready too).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

use crate::metrics::Metrics;

/// Why the endpoints could not be served.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("listening on {address} for /metrics, /healthz and /readyz: {source}")]
    Bind {
        address: SocketAddr,
        #[source]
        source: std::io::Error,
    },
}

/// Readiness, flipped by the controller.
#[derive(Debug, Default)]
pub struct Readiness(AtomicBool);

impl Readiness {
    pub fn set(&self, ready: bool) {
        self.0.store(ready, Ordering::Relaxed);
    }

    pub fn get(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}

fn respond(status: StatusCode, content_type: &str, body: String) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    if let Ok(value) = content_type.parse() {
        response.headers_mut().insert(hyper::header::CONTENT_TYPE, value);
    }
    response
}

fn route(request: &Request<Incoming>, metrics: &Metrics, ready: &Readiness) -> Response<Full<Bytes>> {
    match request.uri().path() {
        "/metrics" => respond(StatusCode::OK, "text/plain; version=0.0.4", metrics.render()),
        "/healthz" | "/livez" => respond(StatusCode::OK, "text/plain", "ok\n".into()),
        "/readyz" if ready.get() => respond(StatusCode::OK, "text/plain", "ok\n".into()),
        "/readyz" => respond(StatusCode::SERVICE_UNAVAILABLE, "text/plain", "starting\n".into()),
        _ => respond(StatusCode::NOT_FOUND, "text/plain", "not found\n".into()),
    }
}

/// Binds `address` and serves until the task is dropped. Returns the bound address (port 0 picks one).
pub async fn serve(
    address: SocketAddr,
    metrics: Arc<Metrics>,
    ready: Arc<Readiness>,
) -> Result<(SocketAddr, tokio::task::JoinHandle<()>), Error> {
    let listener = TcpListener::bind(address)
        .await
        .map_err(|source| Error::Bind { address, source })?;
    let bound = listener
        .local_addr()
        .map_err(|source| Error::Bind { address, source })?;
    let task = tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let metrics = metrics.clone();
            let ready = ready.clone();
            tokio::spawn(async move {
                let service = service_fn(move |request| {
                    let response = route(&request, &metrics, &ready);
                    async move { Ok::<_, Infallible>(response) }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    Ok((bound, task))
}
