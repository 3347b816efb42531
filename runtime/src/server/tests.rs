//! The helper's limits, each shown by a client that would hold the server without it.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic in a test is a failed assertion

use std::convert::Infallible;
use std::time::Instant;

use bytes::Bytes;
use http_body_util::Full;
use hyper::service::service_fn;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::rustls;

use super::*;
use crate::shutdown::Trigger;

/// Short limits, so each test takes well under a second or two.
const LIMITS: Limits = Limits {
    max_connections: 8,
    header_read_timeout: Duration::from_millis(300),
    handshake_timeout: Duration::from_millis(300),
    drain: Duration::from_secs(2),
    nodelay: true,
};

/// Longer than any limit above: what "held open" means in these tests.
const PATIENCE: Duration = Duration::from_secs(3);

/// How a test server answers.
#[derive(Clone, Copy)]
enum Answer {
    /// At once, with the client's address as the server saw it.
    Peer,
    /// After a while.
    After(Duration),
    /// Never.
    Never,
}

struct Running {
    address: SocketAddr,
    trigger: Trigger,
    server: tokio::task::JoinHandle<()>,
}

async fn start(tls: Option<TlsAcceptor>, protocol: Protocol, limits: Limits, answer: Answer) -> Running {
    let listener = Listener::bind("127.0.0.1:0".parse().unwrap(), "tests").await.unwrap();
    let address = listener.address();
    let (trigger, shutdown) = Shutdown::new();
    let server = Server {
        listener,
        tls,
        protocol,
        limits,
        shutdown,
    };
    let service = service_fn(move |request: Request<Incoming>| async move {
        let body = match answer {
            Answer::Peer => request
                .extensions()
                .get::<Peer>()
                .map(|peer| peer.0.to_string())
                .unwrap_or_default(),
            Answer::After(delay) => {
                tokio::time::sleep(delay).await;
                "late".to_owned()
            }
            Answer::Never => std::future::pending().await,
        };
        Ok::<_, Infallible>(Response::new(Full::new(Bytes::from(body))))
    });
    let server = tokio::spawn(server.serve(service));
    Running {
        address,
        trigger,
        server,
    }
}

async fn plain(answer: Answer, limits: Limits) -> Running {
    start(None, Protocol::Http1, limits, answer).await
}

const GET: &[u8] = b"GET / HTTP/1.1\r\nhost: test\r\n\r\n";

/// Reads one answer (headers and a short body) from a kept-alive connection; None if nothing came
/// within `within`.
async fn answer(stream: &mut TcpStream, within: Duration) -> Option<String> {
    let mut buffer = vec![0u8; 4096];
    let read = tokio::time::timeout(within, stream.read(&mut buffer))
        .await
        .ok()?
        .unwrap();
    Some(String::from_utf8_lossy(&buffer[..read]).into_owned())
}

/// Waits for the server to close `stream`; the time it took, or None if it stayed open for `PATIENCE`.
async fn closed(stream: &mut TcpStream) -> Option<Duration> {
    let started = Instant::now();
    let mut rest = Vec::new();
    // A reset counts as closed too.
    tokio::time::timeout(PATIENCE, stream.read_to_end(&mut rest))
        .await
        .ok()?
        .ok();
    Some(started.elapsed())
}

#[tokio::test]
async fn requests_carry_the_clients_address() {
    let server = plain(Answer::Peer, LIMITS).await;
    let mut stream = TcpStream::connect(server.address).await.unwrap();
    stream.write_all(GET).await.unwrap();
    let answer = answer(&mut stream, PATIENCE).await.unwrap();
    let local = stream.local_addr().unwrap().to_string();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.ends_with(&local), "the peer {local} in {answer}");
}

#[tokio::test]
async fn the_client_beyond_the_limit_is_served_once_a_slot_frees() {
    let limits = Limits {
        max_connections: 1,
        header_read_timeout: PATIENCE * 2,
        ..LIMITS
    };
    let server = plain(Answer::Peer, limits).await;
    let mut first = TcpStream::connect(server.address).await.unwrap();
    first.write_all(GET).await.unwrap();
    assert!(answer(&mut first, PATIENCE).await.is_some());
    // The first connection is kept alive: the second waits in the backlog, unanswered.
    let mut second = TcpStream::connect(server.address).await.unwrap();
    second.write_all(GET).await.unwrap();
    let early = answer(&mut second, Duration::from_millis(500)).await;
    assert_eq!(early, None, "served beyond the limit of one connection");
    drop(first);
    let late = answer(&mut second, PATIENCE).await.unwrap_or_default();
    assert!(late.starts_with("HTTP/1.1 200"), "served once the slot freed: {late:?}");
}

#[tokio::test]
async fn half_a_request_line_is_closed_after_the_header_timeout() {
    let server = plain(Answer::Peer, LIMITS).await;
    let mut stream = TcpStream::connect(server.address).await.unwrap();
    stream.write_all(b"GET /metrics HT").await.unwrap();
    let after = closed(&mut stream).await.expect("closed after the header timeout");
    assert!(
        after >= LIMITS.header_read_timeout / 2,
        "closed before the timeout: {after:?}"
    );
}

/// The client connection preface and an empty SETTINGS frame (RFC 9113 §3.4): an HTTP/2 client that
/// then sends no request.
const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00";

const H2: Protocol = Protocol::Http2(Http2 {
    keepalive_interval: None,
    keepalive_timeout: Duration::from_secs(20),
    max_concurrent_streams: Some(8),
});

#[tokio::test]
async fn an_http2_connection_that_sends_no_request_is_closed() {
    let server = start(None, H2, LIMITS, Answer::Peer).await;
    let mut stream = TcpStream::connect(server.address).await.unwrap();
    stream.write_all(H2_PREFACE).await.unwrap();
    let after = closed(&mut stream)
        .await
        .expect("closed after the first-request timeout");
    assert!(
        after >= LIMITS.header_read_timeout / 2,
        "closed before the timeout: {after:?}"
    );
}

/// A certificate resolver with no certificate: enough to start handshakes that never finish.
#[derive(Debug)]
struct NoCertificate;

impl rustls::server::ResolvesServerCert for NoCertificate {
    fn resolve(&self, _: rustls::server::ClientHello<'_>) -> Option<Arc<rustls::sign::CertifiedKey>> {
        None
    }
}

fn acceptor() -> TlsAcceptor {
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_cert_resolver(Arc::new(NoCertificate));
    TlsAcceptor::from(Arc::new(config))
}

#[tokio::test]
async fn a_stalled_tls_handshake_is_dropped_and_gives_its_slot_back() {
    let limits = Limits {
        max_connections: 1,
        ..LIMITS
    };
    let server = start(Some(acceptor()), Protocol::Http1, limits, Answer::Peer).await;
    // Connects and never says hello.
    let mut stalled = TcpStream::connect(server.address).await.unwrap();
    let after = closed(&mut stalled).await.expect("closed after the handshake timeout");
    assert!(
        after >= limits.handshake_timeout / 2,
        "closed before the timeout: {after:?}"
    );
    // Only with the slot back is the next client accepted (and its own stalled handshake dropped).
    let mut next = TcpStream::connect(server.address).await.unwrap();
    assert!(closed(&mut next).await.is_some(), "the next client was never accepted");
}

#[tokio::test]
async fn at_shutdown_a_request_in_flight_finishes_within_the_drain() {
    let server = plain(Answer::After(Duration::from_millis(400)), LIMITS).await;
    let mut stream = TcpStream::connect(server.address).await.unwrap();
    stream.write_all(GET).await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    server.trigger.fire();
    let answer = answer(&mut stream, PATIENCE).await.unwrap_or_default();
    assert!(
        answer.starts_with("HTTP/1.1 200") && answer.ends_with("late"),
        "{answer:?}"
    );
    // No new connection is accepted once shut down, and the server ends once the connection has.
    tokio::time::timeout(PATIENCE, server.server).await.unwrap().unwrap();
    assert!(TcpStream::connect(server.address).await.is_err(), "still listening");
}

#[tokio::test]
async fn at_shutdown_a_stuck_request_is_cut_at_the_drain_bound() {
    let limits = Limits {
        drain: Duration::from_millis(500),
        ..LIMITS
    };
    let server = plain(Answer::Never, limits).await;
    let mut stream = TcpStream::connect(server.address).await.unwrap();
    stream.write_all(GET).await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let fired = Instant::now();
    server.trigger.fire();
    tokio::time::timeout(PATIENCE, server.server)
        .await
        .expect("the drain is bounded")
        .unwrap();
    assert!(
        fired.elapsed() >= limits.drain,
        "cut before the drain bound: {:?}",
        fired.elapsed()
    );
    assert!(
        closed(&mut stream).await.is_some(),
        "the stuck connection was left open"
    );
}

#[tokio::test]
async fn a_bind_error_names_the_address_and_the_server() {
    let taken = Listener::bind("127.0.0.1:0".parse().unwrap(), "tests").await.unwrap();
    let error = Listener::bind(taken.address(), "admission reviews").await.unwrap_err();
    assert_eq!(
        error.to_string(),
        format!("listening on {} for admission reviews", taken.address())
    );
}
