//! The process's HTTP endpoints: `/metrics` (every registered metric set), `/healthz` and `/livez` (the
//! process is alive), `/readyz` (every serving component is ready; the body names those that are not).
//!
//! The server is exposed to the cluster network, so it bounds what a client can hold: at most
//! [`MAX_CONNECTIONS`] connections at once (further ones wait in the listen backlog), and a request's
//! headers must arrive within [`HEADER_READ_TIMEOUT`].

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

use crate::metrics::Registry;
use crate::readiness::Readiness;
use crate::task::AbortOnDrop;

/// Connections served at once.
pub const MAX_CONNECTIONS: usize = 64;
/// Time a client has to send a request's headers.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(5);

/// Why the endpoints could not be served.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("listening on {address} for /metrics, /healthz and /readyz")]
    Bind {
        address: SocketAddr,
        #[source]
        source: std::io::Error,
    },
}

fn respond(status: StatusCode, content_type: &str, body: String) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    if let Ok(value) = content_type.parse() {
        response.headers_mut().insert(hyper::header::CONTENT_TYPE, value);
    }
    response
}

fn route(request: &Request<Incoming>, metrics: &Registry, readiness: &Readiness) -> Response<Full<Bytes>> {
    match request.uri().path() {
        "/metrics" => respond(StatusCode::OK, "text/plain; version=0.0.4", metrics.render()),
        "/healthz" | "/livez" => respond(StatusCode::OK, "text/plain", "ok\n".into()),
        "/readyz" => match readiness.not_ready() {
            waiting if waiting.is_empty() => respond(StatusCode::OK, "text/plain", "ok\n".into()),
            waiting => respond(
                StatusCode::SERVICE_UNAVAILABLE,
                "text/plain",
                format!("not ready: {}\n", waiting.join(", ")),
            ),
        },
        _ => respond(StatusCode::NOT_FOUND, "text/plain", "not found\n".into()),
    }
}

/// Binds `address` and serves until the returned guard is dropped. Returns the bound address (port 0
/// picks one).
pub async fn serve(
    address: SocketAddr,
    metrics: Registry,
    readiness: Readiness,
) -> Result<(SocketAddr, AbortOnDrop), Error> {
    let listener = TcpListener::bind(address)
        .await
        .map_err(|source| Error::Bind { address, source })?;
    let bound = listener
        .local_addr()
        .map_err(|source| Error::Bind { address, source })?;
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let task = tokio::spawn(async move {
        loop {
            // Wait for a free slot before accepting, so excess clients queue in the backlog.
            let Ok(slot) = slots.clone().acquire_owned().await else {
                return;
            };
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let metrics = metrics.clone();
            let readiness = readiness.clone();
            tokio::spawn(async move {
                let service = service_fn(move |request| {
                    let response = route(&request, &metrics, &readiness);
                    async move { Ok::<_, Infallible>(response) }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .timer(TokioTimer::new())
                    .header_read_timeout(HEADER_READ_TIMEOUT)
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
                drop(slot);
            });
        }
    });
    Ok((bound, AbortOnDrop(task)))
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    async fn get(address: SocketAddr, path: &str) -> String {
        let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
        let request = format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).await.unwrap();
        response
    }

    #[tokio::test]
    async fn readyz_names_what_is_not_ready() {
        let readiness = Readiness::default();
        let webhook = readiness.register("webhook");
        let (address, _server) = serve("127.0.0.1:0".parse().unwrap(), Registry::default(), readiness)
            .await
            .unwrap();
        let response = get(address, "/readyz").await;
        assert!(response.starts_with("HTTP/1.1 503"), "{response}");
        assert!(response.contains("not ready: webhook"), "{response}");
        webhook.set(true);
        assert!(get(address, "/readyz").await.starts_with("HTTP/1.1 200"));
        assert!(get(address, "/healthz").await.starts_with("HTTP/1.1 200"));
        assert!(get(address, "/nothing").await.starts_with("HTTP/1.1 404"));
    }

    #[tokio::test]
    async fn a_client_that_never_sends_headers_is_dropped() {
        let (address, _server) = serve(
            "127.0.0.1:0".parse().unwrap(),
            Registry::default(),
            Readiness::default(),
        )
        .await
        .unwrap();
        let mut idle = tokio::net::TcpStream::connect(address).await.unwrap();
        idle.write_all(b"GET /metrics HTTP/1.1\r\n").await.unwrap();
        // The server closes the connection once the header timeout passes; the read then ends.
        let mut buffer = Vec::new();
        let read = tokio::time::timeout(HEADER_READ_TIMEOUT * 4, idle.read_to_end(&mut buffer)).await;
        assert!(read.is_ok(), "the connection was held open past the header timeout");
    }
}
