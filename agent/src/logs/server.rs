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
use hyper_util::rt::{TokioIo, TokioTimer};
use spark_operator_runtime::shutdown::Shutdown;
use spark_operator_runtime::task::AbortOnDrop;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_stream::wrappers::ReceiverStream;

use super::Error;
use super::access::{self, Decision, TOKEN_HEADER};
use super::read::Reader;
use super::store::LogStore;

/// Connections served at once (a followed log holds one for as long as it runs).
const MAX_CONNECTIONS: usize = 128;
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(5);

type Body = BoxBody<Bytes, Infallible>;

/// A running log server; dropping it stops it.
#[derive(Debug)]
pub struct Served {
    /// The bound address (port 0 picks one).
    pub address: SocketAddr,
    _task: AbortOnDrop,
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
    let tls = tls_config(node)?;
    let listener = TcpListener::bind(address)
        .await
        .map_err(|source| Error::Bind { address, source })?;
    let bound = listener
        .local_addr()
        .map_err(|source| Error::Bind { address, source })?;
    let shared = Shared {
        poll: store.poll_interval(),
        store,
        client,
    };
    let acceptor = tokio_rustls::TlsAcceptor::from(tls);
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let task = tokio::spawn(async move {
        loop {
            let Ok(slot) = slots.clone().acquire_owned().await else {
                return;
            };
            let accepted = tokio::select! {
                accepted = listener.accept() => accepted,
                () = shutdown.fired() => return,
            };
            let Ok((stream, peer)) = accepted else { continue };
            let acceptor = acceptor.clone();
            let shared = shared.clone();
            tokio::spawn(async move {
                let Ok(Ok(tls)) = tokio::time::timeout(Duration::from_secs(10), acceptor.accept(stream)).await else {
                    tracing::debug!(%peer, "log server: TLS handshake failed");
                    return;
                };
                let service = service_fn(move |request| {
                    let shared = shared.clone();
                    async move { Ok::<_, Infallible>(handle(request, &shared).await) }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .timer(TokioTimer::new())
                    .header_read_timeout(HEADER_READ_TIMEOUT)
                    .serve_connection(TokioIo::new(tls), service)
                    .await;
                drop(slot);
            });
        }
    });
    tracing::info!(address = %bound, "serving Spark logs over HTTPS");
    Ok(Served {
        address: bound,
        _task: AbortOnDrop(task),
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
}
