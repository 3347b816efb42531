//! The log server: HTTPS with a self-signed certificate made at start (the API server's `pods/proxy` does
//! not verify pod certificates, and nothing else is meant to call it), every request authorized as
//! [`super::access`] says.
//!
//! - `GET /v1/namespaces/{ns}/applications/{app}`: the [`AppIndex`] of what this node holds.
//! - `GET /v1/namespaces/{ns}/applications/{app}/containers/{container-id}/log`: the container's log as
//!   `kubectl logs` prints it; `?follow=true` streams until its copy is finished, `?timestamps=true`
//!   prefixes each line with its timestamp.
//! - `GET /healthz`: `ok`, unauthenticated.
//!
//! Errors are Kubernetes `Status` objects, so they read like the API server's own through the proxy.
//!
//! Connections are served by the runtime's server helper ([`spark_operator_runtime::server`]) with
//! [`LIMITS`].

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use spark_operator_runtime::server::{Limits, Listener, Protocol, Server};
use spark_operator_runtime::shutdown::Shutdown;
use spark_operator_runtime::task::AbortOnDrop;
use tokio_stream::wrappers::ReceiverStream;

use super::Error;
use super::access::{self, Decision, TOKEN_HEADER};
use super::read::Reader;
use super::store::LogStore;

/// Connections served at once (a followed log holds one for as long as it runs).
const MAX_CONNECTIONS: usize = 128;
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(5);
/// A TLS handshake that takes longer is dropped, so it holds no connection slot.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long reads in flight may go on once the agent stops. A followed log runs until its container's
/// copy finishes, which the stopping agent no longer waits for: its reader gets this long, then the
/// stream ends (`spark-operator logs` says so and can be run again against the next agent).
const DRAIN: Duration = Duration::from_secs(5);
/// The log server's limits.
const LIMITS: Limits = Limits {
    max_connections: MAX_CONNECTIONS,
    header_read_timeout: HEADER_READ_TIMEOUT,
    handshake_timeout: HANDSHAKE_TIMEOUT,
    drain: DRAIN,
    nodelay: false,
};

type Body = BoxBody<Bytes, Infallible>;

/// A running log server; it stops when its shutdown fires (then drains), or at once when dropped.
#[derive(Debug)]
pub struct Served {
    /// The bound address (port 0 picks one).
    pub address: SocketAddr,
    task: AbortOnDrop,
}

impl Served {
    /// Waits until the server stopped: its shutdown fired and the reads in flight ended or were cut at
    /// the drain bound.
    pub async fn stopped(mut self) {
        if let Err(error) = (&mut self.task.0).await {
            tracing::warn!(%error, "the log server's task ended abnormally");
        }
    }
}

#[derive(Clone)]
struct Shared {
    store: LogStore,
    client: kube::Client,
    poll: Duration,
}

/// Serves `store` on `address` until `shutdown` fires, authorizing callers with the API server `client`
/// talks to (the agent's own ServiceAccount).
pub async fn serve(
    store: LogStore,
    address: SocketAddr,
    client: kube::Client,
    node: &str,
    shutdown: Shutdown,
) -> Result<Served, Error> {
    serve_with(store, address, client, node, shutdown, LIMITS).await
}

/// [`serve`] with `limits` (tests: small ones).
async fn serve_with(
    store: LogStore,
    address: SocketAddr,
    client: kube::Client,
    node: &str,
    shutdown: Shutdown,
    limits: Limits,
) -> Result<Served, Error> {
    let tls = tls_config(node)?;
    let listener = Listener::bind(address, "Spark logs").await.map_err(Error::Bind)?;
    let bound = listener.address();
    let shared = Shared {
        poll: store.poll_interval(),
        store,
        client,
    };
    let server = Server {
        listener,
        tls: Some(tokio_rustls::TlsAcceptor::from(tls)),
        protocol: Protocol::Http1,
        limits,
        shutdown,
    };
    let service = service_fn(move |request| {
        let shared = shared.clone();
        async move { Ok::<_, Infallible>(handle(request, &shared).await) }
    });
    let task = tokio::spawn(server.serve(service));
    tracing::info!(address = %bound, "serving Spark logs over HTTPS");
    Ok(Served {
        address: bound,
        task: AbortOnDrop(task),
    })
}

fn tls_config(node: &str) -> Result<Arc<rustls::ServerConfig>, Error> {
    let mut names = vec!["spark-operator-agent".to_owned()];
    if !node.is_empty() {
        names.push(node.to_owned());
    }
    let certified = rcgen::generate_simple_self_signed(names).map_err(Error::Certificate)?;
    let key = rustls_pki_types::PrivateKeyDer::Pkcs8(certified.signing_key.serialize_der().into());
    let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .map_err(Error::Tls)?
        .with_no_client_auth()
        .with_single_cert(vec![certified.cert.der().clone()], key)
        .map_err(Error::Tls)?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

fn full(status: StatusCode, content_type: &str, body: impl Into<Bytes>) -> Response<Body> {
    let mut response = Response::new(Full::new(body.into()).boxed());
    *response.status_mut() = status;
    if let Ok(value) = content_type.parse() {
        response.headers_mut().insert(hyper::header::CONTENT_TYPE, value);
    }
    response
}

/// A Kubernetes `Status` answer.
fn status(code: StatusCode, reason: &str, message: &str) -> Response<Body> {
    let body = serde_json::json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code.as_u16(),
    });
    full(code, "application/json", body.to_string())
}

/// The routes, parsed from a path.
#[derive(Debug, PartialEq, Eq)]
enum Route<'a> {
    Health,
    Index {
        namespace: &'a str,
        app: &'a str,
    },
    Log {
        namespace: &'a str,
        app: &'a str,
        container: &'a str,
    },
    Unknown,
}

fn route(path: &str) -> Route<'_> {
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    match parts.as_slice() {
        ["healthz"] => Route::Health,
        ["v1", "namespaces", namespace, "applications", app] => Route::Index { namespace, app },
        [
            "v1",
            "namespaces",
            namespace,
            "applications",
            app,
            "containers",
            container,
            "log",
        ] => Route::Log {
            namespace,
            app,
            container,
        },
        _ => Route::Unknown,
    }
}

fn query_flag(request: &Request<Incoming>, name: &str) -> bool {
    request.uri().query().is_some_and(|query| {
        query
            .split('&')
            .any(|pair| pair == name || pair == format!("{name}=true") || pair == format!("{name}=1"))
    })
}

async fn handle(request: Request<Incoming>, shared: &Shared) -> Response<Body> {
    let path = request.uri().path().to_owned();
    let route = route(&path);
    if route == Route::Health {
        return full(StatusCode::OK, "text/plain", "ok\n");
    }
    if request.method() != Method::GET {
        return status(
            StatusCode::METHOD_NOT_ALLOWED,
            "MethodNotAllowed",
            "the log server only answers GET",
        );
    }
    let namespace = match &route {
        Route::Index { namespace, .. } | Route::Log { namespace, .. } => *namespace,
        Route::Health | Route::Unknown => {
            return status(StatusCode::NOT_FOUND, "NotFound", &format!("no such path: {path}"));
        }
    };
    let token = request.headers().get(TOKEN_HEADER).and_then(|v| v.to_str().ok());
    match access::authorize(&shared.client, token, namespace).await {
        Ok(Decision::Allowed { user }) => tracing::debug!(%user, %path, "log read allowed"),
        Ok(Decision::Unauthenticated(message)) => {
            return status(StatusCode::UNAUTHORIZED, "Unauthorized", &message);
        }
        Ok(Decision::Forbidden(message)) => {
            tracing::info!(%path, %message, "log read refused");
            return status(StatusCode::FORBIDDEN, "Forbidden", &message);
        }
        Err(error) => {
            let message = spark_operator_runtime::error_chain::ErrorChain(&error).to_string();
            tracing::warn!(error = %message, "could not authorize a log read");
            return status(StatusCode::SERVICE_UNAVAILABLE, "ServiceUnavailable", &message);
        }
    }
    match route {
        Route::Index { namespace, app } => match shared.store.index(namespace, app) {
            Some(index) => match serde_json::to_vec(&index) {
                Ok(body) => full(StatusCode::OK, "application/json", body),
                Err(error) => status(StatusCode::INTERNAL_SERVER_ERROR, "InternalError", &error.to_string()),
            },
            None => status(
                StatusCode::NOT_FOUND,
                "NotFound",
                &format!("this node holds no logs of SparkApplication {namespace}/{app}"),
            ),
        },
        Route::Log {
            namespace,
            app,
            container,
        } => {
            let follow = query_flag(&request, "follow");
            let timestamps = query_flag(&request, "timestamps");
            log(shared, namespace, app, container, follow, timestamps)
        }
        Route::Health | Route::Unknown => status(StatusCode::NOT_FOUND, "NotFound", "no such path"),
    }
}

/// Streams a container's log; following, until its copy is finished.
fn log(shared: &Shared, namespace: &str, app: &str, container: &str, follow: bool, timestamps: bool) -> Response<Body> {
    let Some((path, _)) = shared.store.copy_of(namespace, app, container) else {
        return status(
            StatusCode::NOT_FOUND,
            "NotFound",
            &format!("this node holds no log of container {container} of SparkApplication {namespace}/{app}"),
        );
    };
    let mut reader = match Reader::open(&path, timestamps) {
        Ok(reader) => reader,
        Err(error) => {
            return status(
                StatusCode::NOT_FOUND,
                "NotFound",
                &format!("the log of container {container} is no longer here: {error}"),
            );
        }
    };
    let (sender, receiver) = tokio::sync::mpsc::channel::<Result<Frame<Bytes>, Infallible>>(4);
    let store = shared.store.clone();
    let poll = shared.poll;
    let id = container.to_owned();
    // Blocking file reads, and a client that stops reading stalls only this thread.
    tokio::task::spawn_blocking(move || {
        let send =
            |bytes: Vec<u8>| bytes.is_empty() || sender.blocking_send(Ok(Frame::data(Bytes::from(bytes)))).is_ok();
        loop {
            // Whether the copy was still being written before this read: if not, this read saw its end.
            let copying = follow && store.is_copying(&id);
            match reader.next_chunk() {
                Ok(Some(chunk)) => {
                    if !send(chunk) {
                        return;
                    }
                }
                Ok(None) if copying => std::thread::sleep(poll),
                Ok(None) => break,
                Err(error) => {
                    tracing::warn!(container_id = %id, %error, "reading a log copy");
                    break;
                }
            }
        }
        send(reader.finish());
    });
    let mut response = Response::new(BodyExt::boxed(StreamBody::new(ReceiverStream::new(receiver))));
    if let Ok(value) = "text/plain; charset=utf-8".parse() {
        response.headers_mut().insert(hyper::header::CONTENT_TYPE, value);
    }
    response
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)] // a panic in a test is a failed assertion

    use std::time::Instant;

    use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
    use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
    use rustls::{DigitallySignedStruct, SignatureScheme};
    use spark_operator_runtime::shutdown::Trigger;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;
    use tokio_rustls::client::TlsStream;

    use super::*;

    #[test]
    fn paths_route_to_their_endpoints() {
        assert_eq!(route("/healthz"), Route::Health);
        assert_eq!(
            route("/v1/namespaces/ns/applications/pi"),
            Route::Index {
                namespace: "ns",
                app: "pi"
            }
        );
        assert_eq!(
            route("/v1/namespaces/ns/applications/pi/containers/abc/log"),
            Route::Log {
                namespace: "ns",
                app: "pi",
                container: "abc"
            }
        );
        assert_eq!(route("/v1/namespaces/ns"), Route::Unknown);
        assert_eq!(
            route("/v1/namespaces/ns/applications/pi/containers/abc"),
            Route::Unknown
        );
    }

    /// The log server's limits, small enough for tests.
    const SHORT: Limits = Limits {
        max_connections: 1,
        header_read_timeout: Duration::from_millis(300),
        handshake_timeout: Duration::from_millis(300),
        drain: Duration::from_millis(500),
        nodelay: false,
    };
    const PATIENCE: Duration = Duration::from_secs(3);

    /// The certificate is self-signed at start (and the API server's proxy does not check it): trust any.
    #[derive(Debug)]
    struct AnyCertificate(Arc<rustls::crypto::CryptoProvider>);

    impl ServerCertVerifier for AnyCertificate {
        fn verify_server_cert(
            &self,
            _: &CertificateDer<'_>,
            _: &[CertificateDer<'_>],
            _: &ServerName<'_>,
            _: &[u8],
            _: UnixTime,
        ) -> Result<ServerCertVerified, rustls::Error> {
            Ok(ServerCertVerified::assertion())
        }

        fn verify_tls12_signature(
            &self,
            message: &[u8],
            cert: &CertificateDer<'_>,
            dss: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, rustls::Error> {
            rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0.signature_verification_algorithms)
        }

        fn verify_tls13_signature(
            &self,
            message: &[u8],
            cert: &CertificateDer<'_>,
            dss: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, rustls::Error> {
            rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0.signature_verification_algorithms)
        }

        fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
            self.0.signature_verification_algorithms.supported_schemes()
        }
    }

    /// A log server with `limits` whose API server accepts connections and never answers, so an
    /// authorization (a TokenReview) stays in flight.
    struct Serving {
        served: Served,
        trigger: Trigger,
        _dir: tempfile::TempDir,
        _silent: std::net::TcpListener,
    }

    async fn start(limits: Limits) -> Serving {
        let dir = tempfile::tempdir().unwrap();
        let store_limits = super::super::store::Limits {
            max_bytes: 0,
            max_app_bytes: 0,
            max_age: Duration::ZERO,
            poll: Duration::from_millis(50),
        };
        let store = LogStore::open_with(&dir.path().join("store"), "node-1", store_limits).unwrap();
        let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", silent.local_addr().unwrap());
        let client = kube::Client::try_from(kube::Config::new(url.parse().unwrap())).unwrap();
        let (trigger, shutdown) = Shutdown::new();
        let address = "127.0.0.1:0".parse().unwrap();
        let served = serve_with(store, address, client, "node-1", shutdown, limits)
            .await
            .unwrap();
        Serving {
            served,
            trigger,
            _dir: dir,
            _silent: silent,
        }
    }

    async fn handshake(address: SocketAddr) -> std::io::Result<TlsStream<TcpStream>> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(std::io::Error::other)?
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AnyCertificate(provider)))
            .with_no_client_auth();
        let tcp = TcpStream::connect(address).await?;
        let name = ServerName::try_from("spark-operator-agent").map_err(std::io::Error::other)?;
        tokio_rustls::TlsConnector::from(Arc::new(config))
            .connect(name, tcp)
            .await
    }

    #[tokio::test]
    async fn a_reader_beyond_the_connection_limit_waits_for_a_free_slot() {
        let limits = Limits {
            header_read_timeout: PATIENCE * 2,
            ..SHORT
        };
        let serving = start(limits).await;
        let address = serving.served.address;
        let first = handshake(address).await.unwrap();
        // Not accepted while the first holds the only slot: its handshake waits in the backlog.
        let second = tokio::spawn(handshake(address));
        tokio::time::sleep(Duration::from_millis(700)).await;
        assert!(!second.is_finished(), "served beyond the limit of one connection");
        drop(first);
        let second = tokio::time::timeout(PATIENCE, second).await;
        assert!(
            matches!(second, Ok(Ok(Ok(_)))),
            "served once the slot freed: {second:?}"
        );
    }

    #[tokio::test]
    async fn half_a_request_line_is_closed_after_the_header_timeout() {
        let serving = start(SHORT).await;
        let mut tls = handshake(serving.served.address).await.unwrap();
        tls.write_all(b"GET /heal").await.unwrap();
        let mut rest = Vec::new();
        // A close without TLS close_notify reads as an error: closed all the same.
        let closed = tokio::time::timeout(PATIENCE, tls.read_to_end(&mut rest)).await;
        assert!(closed.is_ok(), "held open past the header timeout");
    }

    #[tokio::test]
    async fn a_read_in_flight_at_shutdown_is_cut_at_the_drain_bound() {
        let serving = start(SHORT).await;
        let mut tls = handshake(serving.served.address).await.unwrap();
        let request =
            format!("GET /v1/namespaces/ns/applications/pi HTTP/1.1\r\nhost: agent\r\n{TOKEN_HEADER}: a-token\r\n\r\n");
        tls.write_all(request.as_bytes()).await.unwrap();
        tokio::time::sleep(Duration::from_millis(200)).await;
        let fired = Instant::now();
        serving.trigger.fire();
        let stopped = tokio::time::timeout(PATIENCE, serving.served.stopped()).await;
        assert!(stopped.is_ok(), "the drain is unbounded");
        assert!(
            fired.elapsed() >= SHORT.drain,
            "cut before the drain: {:?}",
            fired.elapsed()
        );
    }
}
