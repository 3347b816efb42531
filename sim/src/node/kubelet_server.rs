//! The kubelet's HTTPS server on `<node InternalIP>:10250` (`daemonEndpoints.kubeletEndpoint`),
//! what the API server's `nodes/proxy` reaches: `/healthz`, `/pods` (the pods bound to the node,
//! a v1 PodList) and `/containerLogs/{namespace}/{pod}/{container}` (the container's log, with
//! the kubelet's `tailLines`, `timestamps`, `previous`, `limitBytes`, `sinceSeconds`,
//! `sinceTime` and `follow`). Its certificate is signed by the sim's CA for the node's name and
//! IP. Unlike a real kubelet it does not check client certificates or tokens (no
//! authentication or authorization webhook): anyone on the machine may ask.

use std::convert::Infallible;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;

use bytes::Bytes;
use futures::StreamExt as _;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::{BodyExt as _, Full, StreamBody, combinators::UnsyncBoxBody};
use hyper::body::{Frame, Incoming};
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use serde_json::{Value, json};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::Shared;
use super::logs::{LogBody, LogQuery};
use crate::registry::Gvr;
use crate::status::ApiError;
use crate::store::{ListOptions, Store};

type Body = UnsyncBoxBody<Bytes, Infallible>;

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum KubeletServerError {
    #[error("issuing the kubelet's serving certificate")]
    Certificate(#[from] crate::tls::TlsError),
    #[error("binding {addr}")]
    Bind { addr: SocketAddr, source: std::io::Error },
}

struct Ctx {
    store: Store,
    data_dir: std::path::PathBuf,
    node: String,
}

/// Binds `<ip>:10250` and serves until `stop` turns true. While the kubelet is stopped
/// (`online` false, a simulated node failure) connections are closed at once.
pub(crate) async fn spawn(
    shared: &Arc<Shared>,
    node: &str,
    ip: Ipv4Addr,
    online: watch::Receiver<bool>,
    mut stop: watch::Receiver<bool>,
) -> Result<JoinHandle<()>, KubeletServerError> {
    let (cert, key) = shared
        .network
        .pki
        .issue_serving_cert(node, &[node.to_string(), ip.to_string()])?;
    let tls = crate::tls::Pki::plain_server_config(cert, key)?;
    let addr = SocketAddr::from((ip, crate::network::KUBELET_PORT));
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| KubeletServerError::Bind { addr, source })?;
    let ctx = Arc::new(Ctx {
        store: shared.store.clone(),
        data_dir: shared.data_dir.clone(),
        node: node.to_string(),
    });
    let acceptor = tokio_rustls::TlsAcceptor::from(tls);
    let mut network_stopped = shared.network.stopped.clone();
    Ok(tokio::spawn(async move {
        loop {
            let (tcp, peer) = tokio::select! {
                _ = stop.wait_for(|s| *s) => return,
                _ = network_stopped.wait_for(|s| *s) => return,
                accepted = listener.accept() => match accepted {
                    Ok(a) => a,
                    Err(e) => {
                        tracing::debug!(error = %e, "kubelet server: accepting");
                        continue;
                    }
                },
            };
            if !*online.borrow() {
                drop(tcp);
                continue;
            }
            let (acceptor, ctx, mut stop) = (acceptor.clone(), ctx.clone(), stop.clone());
            tokio::spawn(async move {
                let serve = async {
                    let tls = match acceptor.accept(tcp).await {
                        Ok(t) => t,
                        Err(e) => {
                            tracing::debug!(%peer, error = %e, "kubelet server: TLS handshake failed");
                            return;
                        }
                    };
                    let svc = service_fn(move |req| {
                        let ctx = ctx.clone();
                        async move { Ok::<_, Infallible>(handle(&ctx, req)) }
                    });
                    let _ = auto::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(tls), svc)
                        .await;
                };
                tokio::select! {
                    () = serve => {}
                    _ = stop.wait_for(|s| *s) => {}
                }
            });
        }
    }))
}

fn text(code: StatusCode, body: impl Into<Bytes>) -> Response<Body> {
    let mut resp = Response::new(Full::new(body.into()).boxed_unsync());
    *resp.status_mut() = code;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        http::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    resp
}

fn handle(ctx: &Ctx, req: Request<Incoming>) -> Response<Body> {
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return text(StatusCode::METHOD_NOT_ALLOWED, "405: Method Not Allowed");
    }
    let path = req.uri().path().trim_end_matches('/');
    let query = req.uri().query().unwrap_or("");
    let segments: Vec<&str> = path.split('/').skip(1).collect();
    match segments.as_slice() {
        ["healthz"] => text(StatusCode::OK, "ok"),
        ["pods"] => pods(ctx),
        ["containerLogs", ns, pod, container] => container_logs(ctx, ns, pod, container, query),
        _ => text(StatusCode::NOT_FOUND, "404 page not found\n"),
    }
}

/// `/pods`: what the kubelet runs, as a PodList.
fn pods(ctx: &Ctx) -> Response<Body> {
    let list = ctx.store.list(
        &Gvr::new("", "v1", "pods"),
        None,
        &ListOptions {
            field_selector: Some(format!("spec.nodeName={}", ctx.node)),
            ..Default::default()
        },
    );
    let items = match list {
        Ok(l) => l.get("items").cloned().unwrap_or(json!([])),
        Err(e) => return text(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    };
    let body = json!({ "kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": items });
    let mut resp = text(StatusCode::OK, serde_json::to_vec(&body).unwrap_or_default());
    resp.headers_mut()
        .insert(header::CONTENT_TYPE, http::HeaderValue::from_static("application/json"));
    resp
}

fn param(query: &str, key: &str) -> Option<String> {
    query.split('&').find_map(|kv| {
        let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
        (k == key && !v.is_empty()).then(|| percent_encoding::percent_decode_str(v).decode_utf8_lossy().into_owned())
    })
}

fn container_logs(ctx: &Ctx, ns: &str, pod: &str, container: &str, query: &str) -> Response<Body> {
    let Ok(obj) = ctx.store.get(&Gvr::new("", "v1", "pods"), ns, pod) else {
        return text(StatusCode::NOT_FOUND, format!("pod {pod:?} does not exist\n"));
    };
    if obj.pointer("/spec/nodeName").and_then(Value::as_str) != Some(ctx.node.as_str()) {
        return text(StatusCode::NOT_FOUND, format!("pod {pod:?} does not exist\n"));
    }
    let known = ["containers", "initContainers", "ephemeralContainers"]
        .iter()
        .any(|list| {
            obj.pointer(&format!("/spec/{list}"))
                .and_then(Value::as_array)
                .is_some_and(|cs| cs.iter().any(|c| c["name"] == container))
        });
    if !known {
        return text(
            StatusCode::NOT_FOUND,
            format!("container {container:?} not found in pod {pod:?}\n"),
        );
    }
    let flag = |k: &str| param(query, k).is_some_and(|v| v == "true" || v == "1");
    let mut bad = None;
    let mut int = |k: &str| {
        param(query, k).and_then(|v| match v.parse::<i64>() {
            Ok(n) => Some(n),
            Err(_) => {
                bad = Some(format!("invalid {k}: {v}"));
                None
            }
        })
    };
    let q = LogQuery {
        container: Some(container.to_string()),
        previous: flag("previous"),
        follow: flag("follow"),
        timestamps: flag("timestamps"),
        tail_lines: int("tailLines"),
        since_seconds: int("sinceSeconds"),
        since_time: param(query, "sinceTime"),
        limit_bytes: int("limitBytes"),
    };
    if let Some(message) = bad {
        return text(StatusCode::BAD_REQUEST, message);
    }
    match super::logs::pod_log(&ctx.store, &ctx.data_dir, ns, pod, &q) {
        Ok(LogBody::Full(bytes)) => text(StatusCode::OK, bytes),
        Ok(LogBody::Follow(stream)) => {
            let body = StreamBody::new(stream.map(|b| Ok::<_, Infallible>(Frame::data(b))));
            let mut resp = Response::new(body.boxed_unsync());
            resp.headers_mut().insert(
                header::CONTENT_TYPE,
                http::HeaderValue::from_static("text/plain; charset=utf-8"),
            );
            resp
        }
        Err(e) => {
            let code = match e {
                ApiError::NotFound(_) => StatusCode::NOT_FOUND,
                ApiError::BadRequest(_) => StatusCode::BAD_REQUEST,
                _ => StatusCode::INTERNAL_SERVER_ERROR,
            };
            text(code, e.to_string())
        }
    }
}
