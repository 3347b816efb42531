//! Sending one proxied request upstream and streaming the answer back, as the apiserver's
//! `UpgradeAwareHandler` does through Go's `httputil.ReverseProxy` and `proxy.Transport`:
//! hop-by-hop headers dropped both ways, `X-Forwarded-For` and `X-Forwarded-Uri` added, the
//! client's Host kept, CORS headers of the answer removed, redirects kept under the proxy path,
//! and transport failures answered with 503 `error trying to reach service: ...`.
//!
//! Upstream TLS is never verified: kube-apiserver dials pods and services with
//! `InsecureSkipVerify`, and kubelets too when it has no `--kubelet-certificate-authority`.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::time::Duration;

use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Request, Response};
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;

use super::location::{Location, Scheme};
use super::paths;
use crate::server::response::Body;
use crate::status::ApiError;

/// Go's dialer timeout in the apiserver's proxy transport.
const DIAL_TIMEOUT: Duration = Duration::from_secs(30);
/// `TLSHandshakeTimeout` of the same transport.
const TLS_TIMEOUT: Duration = Duration::from_secs(10);

/// Headers that belong to one connection (Go's `hopHeaders`), never forwarded either way.
const HOP_BY_HOP: [&str; 9] = [
    "connection",
    "proxy-connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

/// CORS headers `corsRemovingTransport` strips from answers.
const CORS: [&str; 4] = [
    "access-control-allow-credentials",
    "access-control-allow-headers",
    "access-control-allow-methods",
    "access-control-allow-origin",
];

/// One request to forward.
pub struct Forward<'a> {
    pub location: &'a Location,
    /// The decoded upstream path (may be empty: then `/` is sent).
    pub path: &'a str,
    /// The request path minus the upstream path: the proxy prefix for `X-Forwarded-Uri` and
    /// `Location` rewriting.
    pub prepend: &'a str,
    /// The client's address, for `X-Forwarded-For`.
    pub client: Option<SocketAddr>,
}

/// Removes hop-by-hop headers, including those the `Connection` header names.
pub fn remove_hop_by_hop(headers: &mut HeaderMap) {
    let named: Vec<String> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|s| s.trim().to_ascii_lowercase())
        .filter(|s| !s.is_empty())
        .collect();
    for name in named {
        headers.remove(name.as_str());
    }
    // Go keeps `Te: trailers` (gRPC needs it); HTTP/1.1 upstreams ignore it otherwise.
    let te_trailers = headers
        .get(header::TE)
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"trailers"));
    for name in HOP_BY_HOP {
        headers.remove(name);
    }
    if te_trailers {
        headers.insert(header::TE, HeaderValue::from_static("trailers"));
    }
}

/// The headers sent upstream.
fn upstream_headers(req: &Request<Incoming>, fwd: &Forward<'_>) -> HeaderMap {
    let mut headers = req.headers().clone();
    remove_hop_by_hop(&mut headers);
    // The apiserver's authentication filter deletes the credential once it has used it.
    headers.remove(header::AUTHORIZATION);
    // Go forwards the client's Host (`UseLocationHost` is off for these proxies); HTTP/2
    // clients send it as the :authority.
    if !headers.contains_key(header::HOST)
        && let Some(v) = req
            .uri()
            .authority()
            .and_then(|a| HeaderValue::from_str(a.as_str()).ok())
    {
        headers.insert(header::HOST, v);
    }
    if let Some(client) = fwd.client {
        let prior: Vec<&str> = headers
            .get_all("x-forwarded-for")
            .iter()
            .filter_map(|v| v.to_str().ok())
            .collect();
        let mut value = prior.join(", ");
        if !value.is_empty() {
            value.push_str(", ");
        }
        value.push_str(&client.ip().to_string());
        if let Ok(v) = HeaderValue::from_str(&value) {
            headers.insert(HeaderName::from_static("x-forwarded-for"), v);
        }
    }
    let mut forwarded_uri = paths::join(&[fwd.prepend, fwd.path]);
    if fwd.path.ends_with('/') && !forwarded_uri.ends_with('/') {
        forwarded_uri.push('/');
    }
    // Go sets the decoded path as it is (UTF-8 bytes included).
    if let Ok(v) = HeaderValue::from_bytes(forwarded_uri.as_bytes()) {
        headers.insert(HeaderName::from_static("x-forwarded-uri"), v);
    }
    headers
}

/// Forwards `req` and streams the answer; a failure to reach the backend is the apiserver's 503.
pub async fn forward(req: Request<Incoming>, fwd: Forward<'_>) -> Result<Response<Body>, ApiError> {
    let unreachable = |reason: String| ApiError::ServiceUnavailable(format!("error trying to reach service: {reason}"));
    let request_host = req
        .headers()
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
        .or_else(|| req.uri().authority().map(|a| a.to_string()))
        .unwrap_or_default();
    let headers = upstream_headers(&req, &fwd);
    let mut target = paths::escape(fwd.path);
    if target.is_empty() {
        target.push('/');
    }
    if let Some(q) = req.uri().query() {
        target.push('?');
        target.push_str(q);
    }
    let (parts, body) = req.into_parts();
    let mut upstream = Request::builder()
        .method(parts.method.clone())
        .uri(&target)
        .body(body)
        .map_err(|e| ApiError::BadRequest(format!("invalid proxy request: {e}")))?;
    *upstream.headers_mut() = headers;

    let mut sender = connect(fwd.location).await.map_err(unreachable)?;
    let response = sender
        .send_request(upstream)
        .await
        .map_err(|e| unreachable(request_error(&e)))?;

    let (mut parts, body) = response.into_parts();
    remove_hop_by_hop(&mut parts.headers);
    for name in CORS {
        parts.headers.remove(name);
    }
    let location = parts.headers.get(header::LOCATION).and_then(|v| v.to_str().ok());
    if let Some(location) = location {
        let rewritten = paths::rewrite_location(location, &fwd.location.host, &request_host, fwd.prepend);
        if let Ok(v) = HeaderValue::from_str(&rewritten) {
            parts.headers.insert(header::LOCATION, v);
        }
    }
    Ok(Response::from_parts(parts, stream(body)))
}

/// The answer's body, frame by frame as it arrives; an upstream error ends it (the client sees a
/// truncated body, as with Go's proxy once the status line is out).
fn stream(body: Incoming) -> Body {
    let frames = futures::stream::unfold(Some(body), |state| async move {
        let mut body = state?;
        match body.frame().await? {
            Ok(frame) => Some((Ok::<_, Infallible>(frame), Some(body))),
            Err(e) => {
                tracing::debug!(error = %e, "proxied answer ended with an error");
                None
            }
        }
    });
    BodyExt::boxed_unsync(StreamBody::new(frames))
}

type Sender = hyper::client::conn::http1::SendRequest<Incoming>;

/// Dials the location (TCP, then TLS for https) and starts an HTTP/1.1 connection.
async fn connect(location: &Location) -> Result<Sender, String> {
    let addr = location.dial_addr();
    let tcp = match tokio::time::timeout(DIAL_TIMEOUT, dial(location)).await {
        Ok(Ok(tcp)) => tcp,
        Ok(Err(e)) => return Err(e),
        Err(_) => return Err(format!("dial tcp {addr}: i/o timeout")),
    };
    let _ = tcp.set_nodelay(true);
    match location.scheme {
        Scheme::Http => handshake(tcp).await,
        Scheme::Https => {
            let name = ServerName::try_from(location.hostname.clone())
                .map_err(|_| format!("invalid server name {:?}", location.hostname))?;
            let tls = tokio_rustls::TlsConnector::from(crate::tls::skip_verify_client_config()?).connect(name, tcp);
            match tokio::time::timeout(TLS_TIMEOUT, tls).await {
                Ok(Ok(tls)) => handshake(tls).await,
                Ok(Err(e)) => Err(tls_error(&e)),
                Err(_) => Err("net/http: TLS handshake timeout".into()),
            }
        }
    }
}

async fn dial(location: &Location) -> Result<tokio::net::TcpStream, String> {
    let addr = location.dial_addr();
    let port: u16 = match location.port.parse() {
        Ok(p) => p,
        // Go resolves service names through /etc/services; only the two that matter here.
        Err(_) => match location.port.as_str() {
            "http" => 80,
            "https" => 443,
            other => return Err(format!("dial tcp: lookup tcp/{other}: unknown port")),
        },
    };
    let resolved: Vec<SocketAddr> = match tokio::net::lookup_host((location.hostname.as_str(), port)).await {
        Ok(addrs) => addrs.collect(),
        Err(_) => return Err(format!("dial tcp: lookup {}: no such host", location.hostname)),
    };
    let mut last = format!("dial tcp: lookup {}: no such host", location.hostname);
    for a in resolved {
        match tokio::net::TcpStream::connect(a).await {
            Ok(tcp) => return Ok(tcp),
            Err(e) => last = format!("dial tcp {addr}: connect: {}", io_reason(&e)),
        }
    }
    Err(last)
}

async fn handshake<S>(io: S) -> Result<Sender, String>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io))
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(async move {
        // Ends when either side closes; an error here only means the peer went away.
        let _ = conn.await;
    });
    Ok(sender)
}

/// The reason text Go's syscall errors print.
fn io_reason(e: &std::io::Error) -> String {
    use std::io::ErrorKind as K;
    match e.kind() {
        K::ConnectionRefused => "connection refused".into(),
        K::ConnectionReset => "connection reset by peer".into(),
        K::HostUnreachable => "no route to host".into(),
        K::NetworkUnreachable => "network is unreachable".into(),
        K::TimedOut => "i/o timeout".into(),
        K::AddrNotAvailable => "cannot assign requested address".into(),
        _ => e.to_string(),
    }
}

fn request_error(e: &hyper::Error) -> String {
    if e.is_incomplete_message() {
        // Go reports a connection closed before any answer as EOF.
        "EOF".into()
    } else {
        e.to_string()
    }
}

fn tls_error(e: &std::io::Error) -> String {
    match e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>()) {
        Some(rustls::Error::AlertReceived(alert)) => format!("remote error: tls: {alert:?}"),
        Some(other) => format!("tls: {other}"),
        None => format!("tls: {e}"),
    }
}
