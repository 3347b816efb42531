//! Watches over WebSocket, as kube-apiserver serves them (`watch=true` with `Upgrade: websocket`):
//! fabric8, the Kubernetes client of Spark's driver, watches this way. The request is answered as
//! the chunked watch would be; on 200 the connection switches protocols (RFC 6455) and every watch
//! event goes out as one text frame (kube-apiserver's text framing for JSON). Client frames are
//! read only to notice a close (answered with a close) and pings (answered with pongs).

use std::convert::Infallible;

use bytes::Bytes;
use http_body_util::BodyExt as _;
use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use super::response::Body;

const GUID: &str = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";

/// Whether the request is a watch (`GET` with `watch=true`/`1`, or under `/watch/`) that asks for
/// a WebSocket (`Connection: upgrade`, `Upgrade: websocket`).
pub(crate) fn is_watch_upgrade(req: &Request<Incoming>) -> bool {
    let watch = req.uri().path().contains("/watch/")
        || req.uri().query().is_some_and(|q| {
            q.split('&')
                .any(|kv| matches!(kv, "watch=true" | "watch=1" | "watch=True"))
        });
    req.method() == hyper::Method::GET && watch && is_upgrade(req)
}

fn is_upgrade(req: &Request<Incoming>) -> bool {
    let has = |name: hyper::header::HeaderName, word: &str| {
        req.headers()
            .get_all(name)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .any(|v| v.split(',').any(|t| t.trim().eq_ignore_ascii_case(word)))
    };
    has(hyper::header::CONNECTION, "upgrade") && has(hyper::header::UPGRADE, "websocket")
}

/// `Sec-WebSocket-Accept` for a key (RFC 6455 §4.2.2).
pub(crate) fn accept_key(key: &str) -> String {
    use base64::Engine as _;
    let digest = ring::digest::digest(
        &ring::digest::SHA1_FOR_LEGACY_USE_ONLY,
        format!("{key}{GUID}").as_bytes(),
    );
    base64::engine::general_purpose::STANDARD.encode(digest.as_ref())
}

/// One unmasked server frame.
pub(crate) fn frame(opcode: u8, payload: &[u8]) -> Vec<u8> {
    let mut out = vec![0x80 | opcode];
    let n = payload.len();
    if n < 126 {
        out.push(n as u8);
    } else if let Ok(n) = u16::try_from(n) {
        out.push(126);
        out.extend_from_slice(&n.to_be_bytes());
    } else {
        out.push(127);
        out.extend_from_slice(&(n as u64).to_be_bytes());
    }
    out.extend_from_slice(payload);
    out
}

/// Answers a WebSocket request: `serve` gets the request without its upgrade headers and answers
/// it as a plain request; a 200 becomes `101 Switching Protocols` and its body is sent as frames.
pub(crate) async fn handle<F, Fut>(mut req: Request<Incoming>, serve: F) -> Response<Body>
where
    F: FnOnce(Request<Incoming>) -> Fut,
    Fut: std::future::Future<Output = Response<Body>>,
{
    let key = req
        .headers()
        .get("sec-websocket-key")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let on_upgrade = hyper::upgrade::on(&mut req);
    for h in [hyper::header::UPGRADE, hyper::header::CONNECTION] {
        req.headers_mut().remove(h);
    }
    let response = serve(req).await;
    let Some(key) = key else { return response };
    if response.status() != hyper::StatusCode::OK {
        return response;
    }
    let mut body = response.into_body();
    tokio::spawn(async move {
        let Ok(upgraded) = on_upgrade.await else { return };
        let (mut rd, mut wr) = tokio::io::split(TokioIo::new(upgraded));
        let (tx, mut rx) = tokio::sync::mpsc::channel::<(u8, Vec<u8>)>(4);
        // The client's frames: a close ends the watch, pings get pongs.
        let reader = tokio::spawn(async move {
            loop {
                let Some((opcode, payload)) = read_frame(&mut rd).await else {
                    let _ = tx.send((0x8, Vec::new())).await;
                    return;
                };
                match opcode {
                    0x8 => {
                        let _ = tx.send((0x8, payload)).await;
                        return;
                    }
                    0x9 => {
                        let _ = tx.send((0xA, payload)).await;
                    }
                    _ => {}
                }
            }
        });
        let mut pending: Vec<u8> = Vec::new();
        loop {
            tokio::select! {
                chunk = body.frame() => {
                    let Some(Ok(chunk)) = chunk else {
                        let _ = wr.write_all(&frame(0x8, &1000u16.to_be_bytes())).await;
                        break;
                    };
                    let Ok(data) = chunk.into_data() else { continue };
                    pending.extend_from_slice(&data);
                    let mut failed = false;
                    while let Some(end) = pending.iter().position(|b| *b == b'\n') {
                        let line: Vec<u8> = pending.drain(..=end).collect();
                        if wr.write_all(&frame(0x1, &line[..line.len() - 1])).await.is_err() {
                            failed = true;
                            break;
                        }
                    }
                    if failed || wr.flush().await.is_err() {
                        break;
                    }
                }
                msg = rx.recv() => {
                    match msg {
                        Some((0xA, payload)) => {
                            if wr.write_all(&frame(0xA, &payload)).await.is_err() {
                                break;
                            }
                        }
                        _ => {
                            let _ = wr.write_all(&frame(0x8, &1000u16.to_be_bytes())).await;
                            break;
                        }
                    }
                }
            }
        }
        let _ = wr.shutdown().await;
        reader.abort();
    });
    let empty: Body = http_body_util::Empty::<Bytes>::new()
        .map_err(|e: Infallible| match e {})
        .boxed_unsync();
    let mut switching = Response::new(empty);
    *switching.status_mut() = hyper::StatusCode::SWITCHING_PROTOCOLS;
    let headers = switching.headers_mut();
    headers.insert(
        hyper::header::UPGRADE,
        hyper::header::HeaderValue::from_static("websocket"),
    );
    headers.insert(
        hyper::header::CONNECTION,
        hyper::header::HeaderValue::from_static("Upgrade"),
    );
    if let Ok(v) = hyper::header::HeaderValue::from_str(&accept_key(&key)) {
        headers.insert("sec-websocket-accept", v);
    }
    switching
}

/// Reads one client frame (masked, RFC 6455 §5.2); `None` at the end of the stream.
async fn read_frame(rd: &mut (impl tokio::io::AsyncRead + Unpin)) -> Option<(u8, Vec<u8>)> {
    let mut head = [0u8; 2];
    rd.read_exact(&mut head).await.ok()?;
    let opcode = head[0] & 0x0f;
    let masked = head[1] & 0x80 != 0;
    let mut len = u64::from(head[1] & 0x7f);
    if len == 126 {
        let mut b = [0u8; 2];
        rd.read_exact(&mut b).await.ok()?;
        len = u64::from(u16::from_be_bytes(b));
    } else if len == 127 {
        let mut b = [0u8; 8];
        rd.read_exact(&mut b).await.ok()?;
        len = u64::from_be_bytes(b);
    }
    let mut mask = [0u8; 4];
    if masked {
        rd.read_exact(&mut mask).await.ok()?;
    }
    // Control frames are small; a watch client sends nothing else worth keeping.
    let mut payload = vec![0u8; usize::try_from(len.min(1 << 20)).ok()?];
    rd.read_exact(&mut payload).await.ok()?;
    if masked {
        for (i, b) in payload.iter_mut().enumerate() {
            *b ^= mask[i % 4];
        }
    }
    Some((opcode, payload))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accept_key_is_rfc_6455s_example() {
        assert_eq!(accept_key("dGhlIHNhbXBsZSBub25jZQ=="), "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=");
    }

    #[test]
    fn frames_carry_their_length() {
        assert_eq!(frame(0x1, b"hi"), vec![0x81, 2, b'h', b'i']);
        let long = frame(0x1, &[b'x'; 300]);
        assert_eq!(&long[..4], &[0x81, 126, 1, 44]);
        assert_eq!(long.len(), 304);
    }
}
