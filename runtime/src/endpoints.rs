//! The process's HTTP endpoints: `/metrics` (every registered metric set), `/healthz` and `/livez` (the
//! process is alive), `/readyz` (every serving component is ready; the body names those that are not).
//!
//! The server is exposed to the cluster network, so it bounds what a client can hold ([`LIMITS`], served
//! by [`crate::server`]): at most [`MAX_CONNECTIONS`] connections at once (further ones wait in the
//! listen backlog), a request's headers must arrive within [`HEADER_READ_TIMEOUT`], and once stopped,
//! answers in flight get [`DRAIN`] to finish.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};

use crate::metrics::Registry;
use crate::readiness::Readiness;
use crate::server::{Limits, Listener, Protocol, Server};
use crate::shutdown::Shutdown;
use crate::task::AbortOnDrop;

/// Connections served at once.
pub const MAX_CONNECTIONS: usize = 64;
/// Time a client has to send a request's headers.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(5);
/// How long answers in flight may take once the endpoints stop (they are ready at once: only a client
/// that does not read its answer takes longer).
pub const DRAIN: Duration = Duration::from_secs(5);
/// The endpoints' limits.
pub const LIMITS: Limits = Limits {
    max_connections: MAX_CONNECTIONS,
    header_read_timeout: HEADER_READ_TIMEOUT,
    // Plain HTTP: no handshake.
    handshake_timeout: Duration::from_secs(10),
    drain: DRAIN,
    nodelay: false,
};

/// Why the endpoints could not be served.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// "listening on {address} for /metrics, /healthz and /readyz".
    #[error(transparent)]
    Bind(crate::server::Error),
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

/// Binds `address` and serves until the returned guard is dropped; then the server stops accepting and
/// drains on its own (at most [`DRAIN`]). Returns the bound address (port 0 picks one).
pub async fn serve(
    address: SocketAddr,
    metrics: Registry,
    readiness: Readiness,
) -> Result<(SocketAddr, AbortOnDrop), Error> {
    let (trigger, shutdown) = Shutdown::new();
    let (bound, server) = serve_until(address, metrics, readiness, shutdown, LIMITS).await?;
    tokio::spawn(server);
    // The guard's task holds the trigger: aborting it drops the trigger, which fires the shutdown.
    let guard = tokio::spawn(async move {
        let _trigger = trigger;
        std::future::pending::<()>().await;
    });
    Ok((bound, AbortOnDrop(guard)))
}

/// Binds `address`; the returned future serves with `limits` until `shutdown` fires, then drains.
pub async fn serve_until(
    address: SocketAddr,
    metrics: Registry,
    readiness: Readiness,
    shutdown: Shutdown,
    limits: Limits,
) -> Result<(SocketAddr, impl Future<Output = ()> + Send + 'static), Error> {
    let listener = Listener::bind(address, "/metrics, /healthz and /readyz")
        .await
        .map_err(Error::Bind)?;
    let bound = listener.address();
    let server = Server {
        listener,
        tls: None,
        protocol: Protocol::Http1,
        limits,
        shutdown,
    };
    let service = service_fn(move |request: Request<Incoming>| {
        let response = route(&request, &metrics, &readiness);
        async move { Ok::<_, Infallible>(response) }
    });
    Ok((bound, server.serve(service)))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Instant;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;

    use super::*;
    use crate::metrics::Render;

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

    /// Limits small enough for tests.
    const SHORT: Limits = Limits {
        max_connections: 1,
        header_read_timeout: Duration::from_millis(300),
        handshake_timeout: Duration::from_millis(300),
        drain: Duration::from_millis(500),
        nodelay: false,
    };
    const PATIENCE: Duration = Duration::from_secs(3);

    /// Serves with `limits` on a task; the shutdown's trigger and the task.
    async fn start(
        limits: Limits,
        metrics: Registry,
    ) -> (SocketAddr, crate::shutdown::Trigger, tokio::task::JoinHandle<()>) {
        let (trigger, shutdown) = Shutdown::new();
        let (address, server) = serve_until(
            "127.0.0.1:0".parse().unwrap(),
            metrics,
            Readiness::default(),
            shutdown,
            limits,
        )
        .await
        .unwrap();
        (address, trigger, tokio::spawn(server))
    }

    /// The start of an answer on a kept-alive connection, or None if nothing came within `within`.
    async fn answer(stream: &mut TcpStream, within: Duration) -> Option<String> {
        let mut buffer = vec![0u8; 4096];
        let read = tokio::time::timeout(within, stream.read(&mut buffer))
            .await
            .ok()?
            .unwrap();
        Some(String::from_utf8_lossy(&buffer[..read]).into_owned())
    }

    #[tokio::test]
    async fn a_client_beyond_the_connection_limit_waits_for_a_free_slot() {
        let limits = Limits {
            header_read_timeout: PATIENCE * 2,
            ..SHORT
        };
        let (address, _trigger, _server) = start(limits, Registry::default()).await;
        let healthz = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n";
        let mut first = TcpStream::connect(address).await.unwrap();
        first.write_all(healthz).await.unwrap();
        assert!(answer(&mut first, PATIENCE).await.is_some());
        let mut second = TcpStream::connect(address).await.unwrap();
        second.write_all(healthz).await.unwrap();
        assert_eq!(
            answer(&mut second, Duration::from_millis(500)).await,
            None,
            "served beyond the limit"
        );
        drop(first);
        let late = answer(&mut second, PATIENCE).await.unwrap_or_default();
        assert!(late.starts_with("HTTP/1.1 200"), "{late:?}");
    }

    #[tokio::test]
    async fn half_a_request_line_is_closed_after_the_header_timeout() {
        let (address, _trigger, _server) = start(SHORT, Registry::default()).await;
        let mut stream = TcpStream::connect(address).await.unwrap();
        stream.write_all(b"GET /metr").await.unwrap();
        let mut rest = Vec::new();
        let closed = tokio::time::timeout(PATIENCE, stream.read_to_end(&mut rest)).await;
        assert!(closed.is_ok(), "held open past the header timeout");
    }

    /// Metrics larger than the sockets' buffers: a client that does not read them keeps its answer in flight.
    struct Huge;

    impl Render for Huge {
        fn render(&self, out: &mut String) {
            out.push_str(&"# padding\n".repeat(4 << 20));
        }
    }

    #[tokio::test]
    async fn an_answer_nobody_reads_is_cut_at_the_drain_bound() {
        let metrics = Registry::default();
        metrics.register(Arc::new(Huge));
        let (address, trigger, server) = start(SHORT, metrics).await;
        let mut reader = TcpStream::connect(address).await.unwrap();
        reader
            .write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(200)).await;
        let fired = Instant::now();
        trigger.fire();
        tokio::time::timeout(PATIENCE, server)
            .await
            .expect("the drain is bounded")
            .unwrap();
        assert!(
            fired.elapsed() >= SHORT.drain,
            "cut before the drain: {:?}",
            fired.elapsed()
        );
    }

    #[tokio::test]
    async fn dropping_the_guard_stops_the_endpoints() {
        let (address, server) = serve(
            "127.0.0.1:0".parse().unwrap(),
            Registry::default(),
            Readiness::default(),
        )
        .await
        .unwrap();
        assert!(get(address, "/healthz").await.starts_with("HTTP/1.1 200"));
        drop(server);
        let stopped = tokio::time::timeout(PATIENCE, async {
            while TcpStream::connect(address).await.is_ok() {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await;
        assert!(stopped.is_ok(), "still accepting after the guard was dropped");
    }
}
