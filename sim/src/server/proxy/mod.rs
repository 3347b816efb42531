//! The API server's proxy subresources, as kube-apiserver serves them:
//! `/api/v1/namespaces/{ns}/pods/{[scheme:]name[:port]}/proxy[/{path}]`,
//! `/api/v1/namespaces/{ns}/services/{[scheme:]name[:port]}/proxy[/{path}]` and
//! `/api/v1/nodes/{[scheme:]name[:port]}/proxy[/{path}]`. Where a request goes is
//! [`location`]; how it is forwarded is [`forward`]. Upgrades (WebSocket, SPDY) are not proxied.

mod forward;
mod location;
mod paths;

use std::net::SocketAddr;

use http::{Method, Request, Response, StatusCode, header};
use hyper::body::Incoming;
use percent_encoding::percent_decode_str;

use super::request::ResourcePath;
use super::response::{self, Body};
use crate::status::ApiError;
use crate::store::Store;

/// The client's address, put into each request's extensions by the listener (`X-Forwarded-For`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct ClientAddr(pub SocketAddr);

/// The subresource's name.
pub(crate) const SUBRESOURCE: &str = "proxy";

/// The HTTP methods the apiserver proxies (`proxyMethods` of the three `ProxyREST`s).
const METHODS: [Method; 7] = [
    Method::GET,
    Method::POST,
    Method::PUT,
    Method::PATCH,
    Method::DELETE,
    Method::HEAD,
    Method::OPTIONS,
];

/// The authorization verb of a proxy request, as `RequestInfoFactory` derives it from the
/// method (a named object, so never `list` or `watch`; OPTIONS has none).
pub(crate) fn verb(method: &Method) -> &'static str {
    match method.as_str() {
        "GET" | "HEAD" => "get",
        "POST" => "create",
        "PUT" => "update",
        "PATCH" => "patch",
        "DELETE" => "delete",
        _ => "",
    }
}

/// Serves one proxy request: resolves the target, redirects a bare `.../proxy` GET to
/// `.../proxy/` as the apiserver does, and forwards everything else.
pub(crate) async fn serve(
    store: &Store,
    req: Request<Incoming>,
    path: &ResourcePath,
) -> Result<Response<Body>, ApiError> {
    if !METHODS.contains(req.method()) {
        return Err(ApiError::MethodNotAllowed);
    }
    let id = path.name.as_deref().unwrap_or("");
    let ns = path.namespace.as_deref().unwrap_or("");
    // Segments before the sub-path: api, v1, [namespaces, ns,] resource, name, proxy.
    let (location, prefix_segments) = match path.resource.as_str() {
        "pods" => (location::pod(store, ns, id)?, 7),
        "services" => (location::service(store, ns, id)?, 7),
        "nodes" => (location::node(store, id)?, 5),
        _ => return Err(ApiError::ResourceNotServed),
    };

    let raw_path = req.uri().path().to_string();
    let request_path = percent_decode_str(&raw_path).decode_utf8_lossy().into_owned();
    let sub = paths::sub_path(&raw_path, prefix_segments);
    let location_path = paths::join_preserving_trailing_slash(&["", &sub]);
    let mut upstream_path = location_path.clone();
    if !upstream_path.ends_with('/') && request_path.ends_with('/') {
        upstream_path.push('/');
    }
    if upstream_path.is_empty() && matches!(*req.method(), Method::GET | Method::HEAD) {
        return Ok(redirect_to_slash(&raw_path, req.uri().query()));
    }

    let mut suffix = location_path;
    if request_path.ends_with('/') && !suffix.ends_with('/') {
        suffix.push('/');
    }
    let prepend = request_path
        .strip_suffix(suffix.as_str())
        .unwrap_or(&request_path)
        .to_string();
    let client = req.extensions().get::<ClientAddr>().map(|c| c.0);
    let fwd = forward::Forward {
        location: &location,
        path: &upstream_path,
        prepend: &prepend,
        client,
    };
    tracing::debug!(scheme = location.scheme.as_str(), upstream = %location.host, path = %upstream_path, "proxying");
    forward::forward(req, fwd).await
}

/// `proxyRedirectsforRootPath`: 301 to the same path with a trailing slash, query kept.
fn redirect_to_slash(raw_path: &str, query: Option<&str>) -> Response<Body> {
    let mut target = format!("{raw_path}/");
    if let Some(q) = query.filter(|q| !q.is_empty()) {
        target.push('?');
        target.push_str(q);
    }
    let mut resp = response::bytes_response(StatusCode::MOVED_PERMANENTLY.as_u16(), "", Vec::new());
    resp.headers_mut().remove(header::CONTENT_TYPE);
    if let Ok(v) = http::HeaderValue::from_str(&target) {
        resp.headers_mut().insert(header::LOCATION, v);
    }
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verbs_by_method() {
        assert_eq!(verb(&Method::GET), "get");
        assert_eq!(verb(&Method::HEAD), "get");
        assert_eq!(verb(&Method::POST), "create");
        assert_eq!(verb(&Method::PUT), "update");
        assert_eq!(verb(&Method::PATCH), "patch");
        assert_eq!(verb(&Method::DELETE), "delete");
        assert_eq!(verb(&Method::OPTIONS), "");
    }

    #[test]
    fn hop_by_hop_headers_are_dropped() {
        let mut h = http::HeaderMap::new();
        h.insert("connection", "keep-alive, X-Hop".parse().unwrap());
        h.insert("x-hop", "1".parse().unwrap());
        h.insert("keep-alive", "timeout=5".parse().unwrap());
        h.insert("transfer-encoding", "chunked".parse().unwrap());
        h.insert("upgrade", "websocket".parse().unwrap());
        h.insert("te", "trailers".parse().unwrap());
        h.insert("x-kept", "yes".parse().unwrap());
        forward::remove_hop_by_hop(&mut h);
        let mut names: Vec<&str> = h.keys().map(|k| k.as_str()).collect();
        names.sort_unstable();
        assert_eq!(names, ["te", "x-kept"]);
    }
}
