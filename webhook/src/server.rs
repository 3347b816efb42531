//! The webhook's server: admission reviews in, answers out, over TLS (kube-apiserver calls webhooks over
//! HTTPS only) with the certificates of [`crate::certs`]. Serves on every replica, leader or not.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use spark_operator_runtime::Runtime;
use spark_operator_runtime::args::{Listen, parse_listen};
use spark_operator_runtime::error_chain::ErrorChain;
use spark_operator_runtime::metrics::{Counter, Histogram, LATENCY_SECONDS, Render, write_counter, write_histogram};
use spark_operator_runtime::server::{Draining, Limits, Listener, Protocol, Server};
use spark_operator_runtime::shutdown::Shutdown;
use tokio_rustls::TlsAcceptor;

use crate::apps::{Apps, Found};
use crate::certs::bundle::{ConfigurationRef, Kind as BundleKind};
use crate::certs::leaf::Subject;
use crate::certs::{CertConfig, CertManager, Managed};
use crate::mutate::{self, AppView};
use crate::owners::Owners;
use crate::review::{self, Answer};
use crate::validate;

/// Path of the pod mutation, as Kubeflow's webhook names it.
pub const MUTATE_POD_PATH: &str = "/mutate--v1-pod";
/// Path of the SparkApplication validation, as Kubeflow's webhook names it.
pub const VALIDATE_PATH: &str = "/validate-sparkoperator-k8s-io-v1beta2-sparkapplication";
/// Path of the ScheduledSparkApplication validation.
pub const VALIDATE_SCHEDULED_PATH: &str = "/validate-sparkoperator-k8s-io-v1beta2-scheduledsparkapplication";
/// The largest AdmissionReview read (kube-apiserver's own request limit is 3 MiB).
const MAX_BODY: usize = 3 * 1024 * 1024;
/// Connections served at once.
const MAX_CONNECTIONS: usize = 256;
/// How long a connection may sit idle between reviews, and how long a review's headers may take.
/// hyper has one timer for both (it starts when a connection goes idle). kube-apiserver keeps idle
/// webhook connections pooled for 90 s (Go's `IdleConnTimeout`, set by apimachinery's transport
/// defaults) and does not retry a POST on a pooled connection the server has closed. So the webhook
/// must never close an idle connection first: a review sent just as we close it would fail the
/// user's request with "failed calling webhook". Slots ([`MAX_CONNECTIONS`]) bound what clients
/// can hold.
const IDLE_OR_HEADER_TIMEOUT: Duration = Duration::from_secs(120);
/// A TLS handshake that takes longer is dropped, so it holds no connection slot.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long in-flight reviews may take to finish on shutdown.
const DRAIN: Duration = Duration::from_secs(10);
/// The webhook's limits, served by [`spark_operator_runtime::server`].
const LIMITS: Limits = Limits {
    max_connections: MAX_CONNECTIONS,
    header_read_timeout: IDLE_OR_HEADER_TIMEOUT,
    handshake_timeout: HANDSHAKE_TIMEOUT,
    drain: DRAIN,
    nodelay: false,
};

#[derive(Clone, Debug, clap::Args)]
pub struct WebhookArgs {
    /// Address the admission webhook listens on; `off` to serve no admission.
    #[arg(long, default_value = "0.0.0.0:9443", value_parser = parse_listen)]
    pub webhook_address: Listen,

    /// Namespace of the webhook's Service and of its CA Secret (the operator's namespace).
    #[arg(long, default_value = "default")]
    pub webhook_namespace: String,

    /// Name of the Service in front of the webhook (its serving certificate is for
    /// `<service>.<namespace>.svc`).
    #[arg(long, default_value = "spark-operator-webhook")]
    pub webhook_service_name: String,

    /// The Secret that holds the CA every replica signs its serving certificate with.
    #[arg(long, default_value = crate::certs::DEFAULT_SECRET_NAME)]
    pub webhook_ca_secret: String,

    /// IP addresses the serving certificate is also valid for, comma-separated (a webhook reached by
    /// address, as in `spark-operator dev`).
    #[arg(long, value_delimiter = ',')]
    pub webhook_ip_addresses: Vec<std::net::IpAddr>,

    /// The MutatingWebhookConfiguration whose caBundle the webhook keeps; empty: none.
    #[arg(long, default_value = crate::configuration::MUTATING_NAME)]
    pub webhook_mutating_configuration: String,

    /// The ValidatingWebhookConfiguration whose caBundle the webhook keeps; empty: none.
    #[arg(long, default_value = crate::configuration::VALIDATING_NAME)]
    pub webhook_validating_configuration: String,

    /// The ConfigMap that publishes the trusted CAs, key `ca.crt`, to the node agents, which trust the
    /// report receiver's certificate through it; empty: none.
    #[arg(long, default_value = "spark-operator-ca")]
    pub webhook_ca_config_map: String,

    /// Namespace of --webhook-ca-config-map: the node agents' (a pod mounts ConfigMaps of its own
    /// namespace only, and the agents run apart, where Pod Security allows their hostPaths); default:
    /// --webhook-namespace.
    #[arg(long)]
    pub webhook_ca_config_map_namespace: Option<String>,

    /// A serving certificate from outside (cert-manager): PEM certificate file; with
    /// --webhook-key-file. The files are watched; caBundle is then left to whoever issues them.
    #[arg(long, requires = "webhook_key_file")]
    pub webhook_cert_file: Option<std::path::PathBuf>,

    /// The private key of --webhook-cert-file (PEM).
    #[arg(long, requires = "webhook_cert_file")]
    pub webhook_key_file: Option<std::path::PathBuf>,

    /// How often, in seconds, a replica looks at the CA Secret and the webhook configurations' `caBundle`
    /// when no watch event came (a configuration created later is filled on its watch event at once).
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub webhook_certificate_check_interval: u64,

    /// Serve plain HTTP instead of TLS: only behind something that terminates TLS for it (kube-apiserver
    /// itself calls webhooks over HTTPS only).
    #[arg(long, default_value_t = false, action = clap::ArgAction::Set)]
    pub webhook_plain_http: bool,

    /// Namespaces whose applications the webhook caches (the controller's scope; empty: all). Set by the
    /// process that composes the webhook, not a flag of its own.
    #[arg(skip)]
    pub namespaces: Vec<String>,
}

/// Why the webhook could not serve.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// "listening on {address} for admission reviews".
    #[error(transparent)]
    Bind(spark_operator_runtime::server::Error),
    #[error("starting the webhook's certificates")]
    Certificates(#[source] crate::certs::Error),
}

impl WebhookArgs {
    /// The webhook's flags with their defaults, listening on `address` (tests, `dev`).
    pub fn listening_on(address: SocketAddr) -> Self {
        use clap::Parser;
        #[derive(Parser)]
        struct Wrapper {
            #[command(flatten)]
            args: WebhookArgs,
        }
        let mut args = Wrapper::parse_from(["webhook"]).args;
        args.webhook_address = Listen::On(address);
        args
    }

    /// Where the serving certificate comes from.
    pub fn certificates(&self) -> CertConfig {
        if let (Some(cert), Some(key)) = (&self.webhook_cert_file, &self.webhook_key_file) {
            return CertConfig::External(crate::certs::external::Files {
                cert: cert.clone(),
                key: key.clone(),
                poll: Duration::from_secs(10),
            });
        }
        let mut subject = Subject::for_service(&self.webhook_service_name, &self.webhook_namespace);
        subject.ip_addresses = self.webhook_ip_addresses.clone();
        let mut managed = Managed::new(&self.webhook_namespace, subject);
        managed.secret_name = self.webhook_ca_secret.clone();
        managed.timing.check_every = Duration::from_secs(self.webhook_certificate_check_interval);
        if !self.webhook_ca_config_map.is_empty() {
            managed.ca_config_map = Some(crate::certs::CaConfigMap {
                namespace: self
                    .webhook_ca_config_map_namespace
                    .clone()
                    .filter(|n| !n.is_empty())
                    .unwrap_or_else(|| self.webhook_namespace.clone()),
                name: self.webhook_ca_config_map.clone(),
            });
        }
        for (kind, name) in [
            (BundleKind::Mutating, &self.webhook_mutating_configuration),
            (BundleKind::Validating, &self.webhook_validating_configuration),
        ] {
            if !name.is_empty() {
                managed.configurations.push(ConfigurationRef {
                    kind,
                    name: name.clone(),
                });
            }
        }
        CertConfig::Managed(managed)
    }
}

/// What the webhook counts.
#[derive(Default)]
struct Metrics {
    /// By (kind, operation, result).
    admissions: Mutex<BTreeMap<(String, String, &'static str), u64>>,
    /// By cause.
    denials: Mutex<BTreeMap<&'static str, u64>>,
    malformed: Counter,
    mutation_latency: Option<Histogram>,
    validation_latency: Option<Histogram>,
}

impl Metrics {
    fn new() -> Self {
        Self {
            mutation_latency: Some(Histogram::new(LATENCY_SECONDS)),
            validation_latency: Some(Histogram::new(LATENCY_SECONDS)),
            ..Self::default()
        }
    }

    fn count(&self, request: &review::Request, answer: &Answer) {
        let result = if answer.allowed() { "allowed" } else { "denied" };
        let key = (request.kind.clone(), request.operation.clone(), result);
        *self
            .admissions
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(key)
            .or_default() += 1;
        if let Some(denial) = &answer.denial {
            *self
                .denials
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .entry(denial.cause)
                .or_default() += 1;
        }
    }
}

/// Label values come from requests: keep them printable and quote-free.
fn label_value(value: &str) -> String {
    value
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        .take(64)
        .collect()
}

impl Render for Metrics {
    fn render(&self, out: &mut String) {
        use std::fmt::Write as _;
        let name = "spark_operator_webhook_admissions";
        let _ = writeln!(
            out,
            "# HELP {name} Admission reviews answered, by kind, operation and result\n# TYPE {name} counter"
        );
        for ((kind, operation, result), count) in self.admissions.lock().unwrap_or_else(PoisonError::into_inner).iter()
        {
            let _ = writeln!(
                out,
                "{name}{{kind=\"{}\",operation=\"{}\",result=\"{result}\"}} {count}",
                label_value(kind),
                label_value(operation)
            );
        }
        let name = "spark_operator_webhook_denials";
        let _ = writeln!(
            out,
            "# HELP {name} Admission reviews denied, by cause\n# TYPE {name} counter"
        );
        for (cause, count) in self.denials.lock().unwrap_or_else(PoisonError::into_inner).iter() {
            let _ = writeln!(out, "{name}{{cause=\"{cause}\"}} {count}");
        }
        write_counter(
            out,
            "spark_operator_webhook_malformed",
            "Requests that were not admission reviews (answered 400)",
            self.malformed.get(),
        );
        if let Some(h) = &self.mutation_latency {
            write_histogram(
                out,
                "spark_operator_webhook_mutation_latency_seconds",
                "Time to answer one pod mutation",
                h,
            );
        }
        if let Some(h) = &self.validation_latency {
            write_histogram(
                out,
                "spark_operator_webhook_validation_latency_seconds",
                "Time to answer one application validation",
                h,
            );
        }
    }
}

/// What every request shares.
struct Shared {
    apps: Apps,
    owners: Owners,
    metrics: Arc<Metrics>,
    recorder: Recorder,
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

fn bad_request(message: &str) -> Response<Full<Bytes>> {
    respond(
        StatusCode::BAD_REQUEST,
        serde_json::json!({ "error": message }).to_string().into_bytes(),
    )
}

async fn mutate_pod(shared: &Shared, request: &review::Request) -> Answer {
    let Some(pod) = &request.object else {
        return Answer::allow();
    };
    let Some(claims) = mutate::claims(pod) else {
        return Answer::allow();
    };
    let namespace = request.namespace.clone().unwrap_or_default();
    let found = match shared.apps.find(&namespace, &claims).await {
        Ok(found) => found,
        Err(error) => {
            return Answer::deny(
                500,
                "InternalError",
                "lookup-failed",
                format!("pods {:?} is forbidden: {}; retry", claims.name, ErrorChain(&error)),
            );
        }
    };
    let answer = match &found {
        Found::Gone => mutate::decide(pod, &namespace, &claims, AppView::Gone),
        Found::App(watched) => match watched.as_ref() {
            spark_operator_api::watched::WatchedApp::Readable(app) => {
                mutate::decide(pod, &namespace, &claims, AppView::Found(app))
            }
            spark_operator_api::watched::WatchedApp::Unreadable(unreadable) => {
                mutate::decide(pod, &namespace, &claims, AppView::Unreadable(&unreadable.reason))
            }
        },
    };
    // The application's own record of why its pod was refused (never for dry runs).
    if let (Some(denial), Found::App(watched), false) = (&answer.denial, &found, request.dry_run) {
        let metadata = kube::Resource::meta(watched.as_ref());
        let reference = ObjectReference {
            api_version: Some("sparkoperator.k8s.io/v1beta2".into()),
            kind: Some("SparkApplication".into()),
            name: metadata.name.clone(),
            namespace: metadata.namespace.clone(),
            uid: metadata.uid.clone(),
            ..ObjectReference::default()
        };
        let event = Event {
            type_: EventType::Warning,
            reason: "SparkPodRefused".into(),
            note: Some(denial.message.chars().take(1000).collect()),
            action: "Admit".into(),
            secondary: None,
        };
        let recorder = shared.recorder.clone();
        tokio::spawn(async move {
            if let Err(error) = recorder.publish(&event, &reference).await {
                tracing::debug!(error = %ErrorChain(&error), "could not publish an event");
            }
        });
    }
    answer
}

async fn validate_app(shared: &Shared, request: &review::Request) -> Answer {
    let checked = validate::check(request);
    let outcomes = shared.owners.look_up_all(&checked.lookups).await;
    validate::verdict(checked, &outcomes)
}

async fn handle(request: Request<Incoming>, shared: &Shared) -> Response<Full<Bytes>> {
    let path = request.uri().path().to_owned();
    let mutation = path == MUTATE_POD_PATH;
    if request.method() != Method::POST || !(mutation || path == VALIDATE_PATH || path == VALIDATE_SCHEDULED_PATH) {
        return respond(StatusCode::NOT_FOUND, br#"{"error":"not found"}"#.to_vec());
    }
    let started = Instant::now();
    let body = match Limited::new(request.into_body(), MAX_BODY).collect().await {
        Ok(body) => body.to_bytes(),
        Err(_) => {
            shared.metrics.malformed.inc();
            return bad_request(&format!(
                "the body could not be read or is larger than {MAX_BODY} bytes"
            ));
        }
    };
    let review = match review::parse(&body) {
        Ok(review) => review,
        Err(error) => {
            shared.metrics.malformed.inc();
            return bad_request(&error.to_string());
        }
    };
    let answer = if mutation {
        mutate_pod(shared, &review).await
    } else {
        validate_app(shared, &review).await
    };
    shared.metrics.count(&review, &answer);
    let latency = if mutation {
        &shared.metrics.mutation_latency
    } else {
        &shared.metrics.validation_latency
    };
    if let Some(histogram) = latency {
        histogram.observe(started.elapsed().as_secs_f64());
    }
    respond(StatusCode::OK, answer.review(&review.uid).to_string().into_bytes())
}

/// Serves admission reviews until the runtime shuts down, then drains the reviews in flight. Ready (in
/// `/readyz`) once listening with the application cache synced. The serving certificates are the
/// webhook's own ([`WebhookArgs::certificates`]); see [`serve`] to share them with other servers.
pub async fn run(args: WebhookArgs, runtime: &Runtime) -> Result<(), Error> {
    if matches!(args.webhook_address, Listen::Off) {
        return Ok(());
    }
    let certificates = if args.webhook_plain_http {
        None
    } else {
        Some(CertManager::start_in(args.certificates(), runtime).map_err(Error::Certificates)?)
    };
    serve(args, runtime, certificates.as_ref().map(CertManager::acceptor)).await
}

/// [`run`] with the TLS acceptor given (None: plain HTTP), for a process whose servers share one
/// [`CertManager`] (the operator's webhook and report receiver).
pub async fn serve(args: WebhookArgs, runtime: &Runtime, acceptor: Option<TlsAcceptor>) -> Result<(), Error> {
    let Listen::On(address) = args.webhook_address else {
        return Ok(());
    };
    let ready = runtime.readiness().register("webhook");
    let listener = Listener::bind(address, "admission reviews")
        .await
        .map_err(Error::Bind)?;
    let bound = listener.address();
    let metrics = Arc::new(Metrics::new());
    runtime.metrics().register(metrics.clone());
    let client = runtime.client();
    let (apps, cache) = Apps::watch(client.clone(), &args.namespaces);
    let cache = spark_operator_runtime::task::AbortOnDrop(tokio::spawn(cache));
    let reporter = Reporter {
        controller: "spark-operator-webhook".into(),
        instance: Some(runtime.identity().to_owned()),
    };
    let shared = Arc::new(Shared {
        apps: apps.clone(),
        owners: Owners::new(client.clone()),
        metrics,
        recorder: Recorder::new(client, reporter),
    });
    tracing::info!(%bound, tls = acceptor.is_some(), "serving admission reviews");
    let _synced = spark_operator_runtime::task::AbortOnDrop(tokio::spawn(async move {
        apps.synced().await;
        ready.set(true);
    }));

    let shutdown = runtime.shutdown().clone();
    let connections = serve_connections(listener, acceptor, shutdown, LIMITS, move |request| {
        let shared = shared.clone();
        async move { handle(request, &shared).await }
    })
    .await;
    runtime.readiness().register("webhook").set(false);
    drain(connections).await;
    drop(cache);
    Ok(())
}

/// Serves HTTP/1.1 connections from `listener` (over TLS when `acceptor` is given) with `handle` until
/// `shutdown` fires; returns the connections still open, for [`drain`]. On shutdown an idle connection
/// closes at once and a busy one after its answer.
async fn serve_connections<H, F>(
    listener: Listener,
    acceptor: Option<TlsAcceptor>,
    shutdown: Shutdown,
    limits: Limits,
    handle: H,
) -> Draining
where
    H: Fn(Request<Incoming>) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Response<Full<Bytes>>> + Send + 'static,
{
    let service = service_fn(move |request| {
        let answer = handle(request);
        async move { Ok::<_, Infallible>(answer.await) }
    });
    let server = Server {
        listener,
        tls: acceptor,
        protocol: Protocol::Http1,
        limits,
        shutdown,
    };
    server.accept(service).await
}

/// Waits for the requests in flight, bounded so a stuck client cannot hold the shutdown.
async fn drain(connections: Draining) {
    connections.drain().await;
}

#[cfg(test)]
mod tests {
    use super::*;

    // kube-apiserver's pool keeps an idle connection for 90 s; closing ours first races its reviews.
    const _: () = assert!(IDLE_OR_HEADER_TIMEOUT.as_secs() > 90);

    /// One review-shaped exchange on `stream`: the status line of the answer.
    async fn post(stream: &mut tokio::net::TcpStream) -> std::io::Result<String> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        stream
            .write_all(b"POST /mutate--v1-pod HTTP/1.1\r\nhost: webhook\r\ncontent-length: 2\r\n\r\n{}")
            .await?;
        let mut answer = Vec::new();
        let mut buffer = [0u8; 1024];
        // The test's answer is `ok`, with a content-length: read until the body is in.
        while !answer.ends_with(b"\r\n\r\nok") {
            let read = stream.read(&mut buffer).await?;
            if read == 0 {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    "connection closed",
                ));
            }
            answer.extend_from_slice(&buffer[..read]);
        }
        Ok(String::from_utf8_lossy(&answer)
            .lines()
            .next()
            .unwrap_or_default()
            .to_owned())
    }

    /// The API server sends a review on a connection it pooled seconds ago and does not retry a POST
    /// that fails there. With hyper's header timer at 5 s (as it was), this connection was closed
    /// after 5 s idle and the second review failed.
    #[tokio::test]
    async fn a_connection_left_idle_between_reviews_is_still_served() {
        let listener = Listener::bind("127.0.0.1:0".parse().unwrap(), "admission reviews")
            .await
            .unwrap();
        let address = listener.address();
        let (trigger, shutdown) = Shutdown::new();
        let server = tokio::spawn(serve_connections(listener, None, shutdown, LIMITS, |_| async {
            respond(StatusCode::OK, b"ok".to_vec())
        }));
        let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
        assert_eq!(post(&mut stream).await.unwrap(), "HTTP/1.1 200 OK");
        tokio::time::sleep(Duration::from_secs(7)).await;
        let again = post(&mut stream).await;
        assert_eq!(again.as_deref().map_err(ToString::to_string), Ok("HTTP/1.1 200 OK"));
        // On shutdown the idle connection is closed at once, not held until the drain gives up.
        trigger.fire();
        let connections = server.await.unwrap();
        let mut rest = Vec::new();
        let closed = tokio::time::timeout(DRAIN, tokio::io::AsyncReadExt::read_to_end(&mut stream, &mut rest)).await;
        assert!(matches!(closed, Ok(Ok(0))), "{closed:?}");
        drain(connections).await;
    }

    /// The webhook's limits, small enough for tests.
    const SHORT: Limits = Limits {
        max_connections: 1,
        header_read_timeout: Duration::from_millis(300),
        handshake_timeout: Duration::from_millis(300),
        drain: Duration::from_millis(500),
        nodelay: false,
    };
    const PATIENCE: Duration = Duration::from_secs(3);

    /// The webhook's server with `limits`, answering `ok` once a review's body is in (read as [`handle`]
    /// reads it).
    async fn start(
        limits: Limits,
    ) -> (
        SocketAddr,
        spark_operator_runtime::shutdown::Trigger,
        tokio::task::JoinHandle<Draining>,
    ) {
        let listener = Listener::bind("127.0.0.1:0".parse().unwrap(), "admission reviews")
            .await
            .unwrap();
        let address = listener.address();
        let (trigger, shutdown) = Shutdown::new();
        let server = tokio::spawn(serve_connections(
            listener,
            None,
            shutdown,
            limits,
            |request: Request<Incoming>| async move {
                match Limited::new(request.into_body(), MAX_BODY).collect().await {
                    Ok(_) => respond(StatusCode::OK, b"ok".to_vec()),
                    Err(_) => bad_request("unreadable"),
                }
            },
        ));
        (address, trigger, server)
    }

    #[tokio::test]
    async fn a_client_beyond_the_connection_limit_waits_for_a_free_slot() {
        use tokio::io::AsyncReadExt;
        let limits = Limits {
            header_read_timeout: PATIENCE * 2,
            ..SHORT
        };
        let (address, _trigger, _server) = start(limits).await;
        let mut first = tokio::net::TcpStream::connect(address).await.unwrap();
        assert_eq!(post(&mut first).await.unwrap(), "HTTP/1.1 200 OK");
        let mut second = tokio::net::TcpStream::connect(address).await.unwrap();
        let early = tokio::time::timeout(Duration::from_millis(500), post(&mut second)).await;
        assert!(early.is_err(), "served beyond the limit of one connection: {early:?}");
        drop(first);
        let mut answer = [0u8; 64];
        let read = tokio::time::timeout(PATIENCE, second.read(&mut answer)).await;
        let read = read.expect("served once the slot freed").unwrap();
        assert!(
            answer[..read].starts_with(b"HTTP/1.1 200 OK"),
            "{:?}",
            String::from_utf8_lossy(&answer[..read])
        );
    }

    #[tokio::test]
    async fn half_a_request_line_is_closed_after_the_header_timeout() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let (address, _trigger, _server) = start(SHORT).await;
        let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
        stream.write_all(b"POST /mutate--v1").await.unwrap();
        let mut rest = Vec::new();
        let closed = tokio::time::timeout(PATIENCE, stream.read_to_end(&mut rest)).await;
        assert!(closed.is_ok(), "held open past the header timeout");
    }

    #[tokio::test]
    async fn a_review_whose_body_stalls_is_cut_at_the_drain_bound() {
        use tokio::io::AsyncWriteExt;
        let (address, trigger, server) = start(SHORT).await;
        let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
        stream
            .write_all(b"POST /mutate--v1-pod HTTP/1.1\r\nhost: webhook\r\ncontent-length: 100\r\n\r\n{\"kind\"")
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(200)).await;
        trigger.fire();
        let connections = server.await.unwrap();
        let started = Instant::now();
        let drained = tokio::time::timeout(PATIENCE, drain(connections)).await;
        assert!(drained.is_ok(), "the drain is unbounded");
        assert!(
            started.elapsed() >= SHORT.drain,
            "cut before the drain: {:?}",
            started.elapsed()
        );
    }

    fn ca_config_map(args: &WebhookArgs) -> Option<(String, String)> {
        match args.certificates() {
            CertConfig::Managed(managed) => managed.ca_config_map.map(|c| (c.namespace, c.name)),
            CertConfig::External(_) => None,
        }
    }

    #[test]
    fn the_ca_config_map_goes_where_the_agents_run() {
        let mut args = WebhookArgs::listening_on(SocketAddr::from(([127, 0, 0, 1], 9443)));
        args.webhook_namespace = "spark-operator".into();
        assert_eq!(
            ca_config_map(&args),
            Some(("spark-operator".into(), "spark-operator-ca".into()))
        );
        args.webhook_ca_config_map_namespace = Some("spark-operator-agent".into());
        assert_eq!(
            ca_config_map(&args),
            Some(("spark-operator-agent".into(), "spark-operator-ca".into()))
        );
        args.webhook_ca_config_map = String::new();
        assert_eq!(ca_config_map(&args), None);
    }
}
