//! Building HTTP responses: JSON bodies, Status errors, warnings, streamed watch bodies.

use std::convert::Infallible;

use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode, header};
use http_body_util::{BodyExt, Full, StreamBody, combinators::UnsyncBoxBody};
use hyper::body::Frame;
use serde_json::Value;

use crate::status::ApiError;

pub type Body = UnsyncBoxBody<Bytes, Infallible>;

pub fn bytes_response(code: u16, content_type: &str, body: Vec<u8>) -> Response<Body> {
    let mut resp = Response::new(Full::new(Bytes::from(body)).boxed_unsync());
    *resp.status_mut() = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    if let Ok(v) = HeaderValue::from_str(content_type) {
        resp.headers_mut().insert(header::CONTENT_TYPE, v);
    }
    resp
}

pub fn json(code: u16, body: &Value) -> Response<Body> {
    json_typed(code, "application/json", body)
}

pub fn json_typed(code: u16, content_type: &str, body: &Value) -> Response<Body> {
    let mut bytes = serde_json::to_vec(body).unwrap_or_default();
    bytes.push(b'\n');
    bytes_response(code, content_type, bytes)
}

pub fn error(err: &ApiError) -> Response<Body> {
    let mut resp = json(err.code(), &err.to_status());
    if let ApiError::TooLargeResourceVersion { .. } = err {
        resp.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    }
    resp
}

/// Adds `Warning: 299 - "..."` headers, as the apiserver returns admission warnings: each text once
/// (kube-apiserver's warning recorder drops a text it has recorded for the request, so a webhook registered in
/// both admission phases warns once).
pub fn with_warnings(mut resp: Response<Body>, warnings: &[String]) -> Response<Body> {
    let mut seen = std::collections::HashSet::new();
    for w in warnings.iter().filter(|w| seen.insert(w.as_str())) {
        let escaped = w.replace('\\', "\\\\").replace('"', "\\\"");
        if let Ok(v) = HeaderValue::from_str(&format!("299 - \"{escaped}\"")) {
            resp.headers_mut().append(header::WARNING, v);
        }
    }
    resp
}

/// A chunked body fed by a stream of byte chunks (watch responses).
pub fn streaming(content_type: &str, chunks: impl futures::Stream<Item = Bytes> + Send + 'static) -> Response<Body> {
    use futures::StreamExt;
    let body = StreamBody::new(chunks.map(|b| Ok::<_, Infallible>(Frame::data(b))));
    let mut resp = Response::new(BodyExt::boxed_unsync(body));
    if let Ok(v) = HeaderValue::from_str(content_type) {
        resp.headers_mut().insert(header::CONTENT_TYPE, v);
    }
    resp.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache, private"));
    resp
}
