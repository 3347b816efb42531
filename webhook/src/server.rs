//! The webhook's HTTP server. Plain HTTP until the certificate work lands (issue 10): kube-apiserver
//! calls webhooks over HTTPS only, so today it is reachable by tests and by `dev`, not registered.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use spark_operator_runtime::Runtime;
use spark_operator_runtime::args::{Listen, parse_listen};
use spark_operator_runtime::metrics::{Counter, Histogram, LATENCY_SECONDS, Render, write_counter, write_histogram};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use crate::review;

/// Path of the SparkApplication validation, as Kubeflow's webhook names it.
pub const VALIDATE_PATH: &str = "/validate-sparkoperator-k8s-io-v1beta2-sparkapplication";
/// The largest AdmissionReview read (kube-apiserver's own request limit is 3 MiB).
const MAX_BODY: usize = 3 * 1024 * 1024;
/// Reviews served at once.
const MAX_CONNECTIONS: usize = 256;

#[derive(Clone, Debug, clap::Args)]
pub struct WebhookArgs {
    /// Address the admission webhook listens on; `off` to serve no admission.
    #[arg(long, default_value = "0.0.0.0:9443", value_parser = parse_listen)]
    pub webhook_address: Listen,
}

/// Why the webhook could not serve.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("listening on {address} for admission reviews")]
    Bind {
        address: SocketAddr,
        #[source]
        source: std::io::Error,
    },
}

/// What the webhook counts.
struct Metrics {
    allowed: Counter,
    denied: Counter,
    malformed: Counter,
    latency: Histogram,
}

impl Render for Metrics {
    fn render(&self, out: &mut String) {
        write_counter(
            out,
            "spark_operator_webhook_allowed",
            "Admission reviews allowed",
            self.allowed.get(),
        );
        write_counter(
            out,
            "spark_operator_webhook_denied",
            "Admission reviews denied",
            self.denied.get(),
        );
        write_counter(
            out,
            "spark_operator_webhook_malformed",
            "Requests that were not admission reviews (answered 400)",
            self.malformed.get(),
        );
        write_histogram(
            out,
            "spark_operator_webhook_latency_seconds",
            "Time to answer one admission review",
            &self.latency,
        );
    }
}

fn respond(status: StatusCode, body: Vec<u8>) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    response
}

async fn handle(request: Request<Incoming>, metrics: &Metrics) -> Response<Full<Bytes>> {
    if request.method() != Method::POST || request.uri().path() != VALIDATE_PATH {
        return respond(StatusCode::NOT_FOUND, br#"{"error":"not found"}"#.to_vec());
    }
    let started = std::time::Instant::now();
    let body = match Limited::new(request.into_body(), MAX_BODY).collect().await {
        Ok(body) => body.to_bytes(),
        Err(_) => {
            metrics.malformed.inc();
            let message = format!(r#"{{"error":"the body could not be read or is larger than {MAX_BODY} bytes"}}"#);
            return respond(StatusCode::BAD_REQUEST, message.into_bytes());
        }
    };
    let response = match review::validate(&body) {
        Ok(answer) => {
            if answer["response"]["allowed"] == true {
                metrics.allowed.inc();
            } else {
                metrics.denied.inc();
            }
            respond(StatusCode::OK, answer.to_string().into_bytes())
        }
        Err(error) => {
            metrics.malformed.inc();
            respond(
                StatusCode::BAD_REQUEST,
                serde_json::json!({ "error": error.to_string() })
                    .to_string()
                    .into_bytes(),
            )
        }
    };
    metrics.latency.observe(started.elapsed().as_secs_f64());
    response
}

/// Serves admission reviews until the runtime shuts down, then drains the reviews in flight. Ready
/// (in `/readyz`) once listening.
pub async fn run(args: WebhookArgs, runtime: &Runtime) -> Result<(), Error> {
    let Listen::On(address) = args.webhook_address else {
        return Ok(());
    };
    let ready = runtime.readiness().register("webhook");
    let listener = TcpListener::bind(address)
        .await
        .map_err(|source| Error::Bind { address, source })?;
    let bound = listener
        .local_addr()
        .map_err(|source| Error::Bind { address, source })?;
    let metrics = Arc::new(Metrics {
        allowed: Counter::default(),
        denied: Counter::default(),
        malformed: Counter::default(),
        latency: Histogram::new(LATENCY_SECONDS),
    });
    runtime.metrics().register(metrics.clone());
    tracing::info!(%bound, "serving admission reviews (HTTP)");
    ready.set(true);

    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let mut connections = JoinSet::new();
    let shutdown = runtime.shutdown().clone();
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = shutdown.fired() => break,
        };
        let Ok((stream, _)) = accepted else { continue };
        let Ok(slot) = slots.clone().acquire_owned().await else {
            break;
        };
        let metrics = metrics.clone();
        connections.spawn(async move {
            let service = service_fn(move |request| {
                let metrics = metrics.clone();
                async move { Ok::<_, Infallible>(handle(request, &metrics).await) }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(Duration::from_secs(5))
                .keep_alive(false)
                .serve_connection(TokioIo::new(stream), service)
                .await;
            drop(slot);
        });
        while connections.try_join_next().is_some() {}
    }
    ready.set(false);
    // Drain what is in flight, bounded so a stuck client cannot hold the shutdown.
    let _ = tokio::time::timeout(Duration::from_secs(10), async {
        while connections.join_next().await.is_some() {}
    })
    .await;
    Ok(())
}
