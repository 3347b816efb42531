//! One way to serve HTTP for every server of the operator (`/metrics`, admission, the report receiver,
//! the agent's logs), so each bounds what a client can hold in the same way:
//!
//! - a connection limit: a slot is taken *before* accepting, so clients beyond the limit wait in the
//!   kernel's listen backlog instead of being accepted and then starved;
//! - a TLS handshake bounded in time, so a client that stalls in it gives its slot back;
//! - a bound on the wait for a request's headers (HTTP/1: hyper's `header_read_timeout`; HTTP/2: the time
//!   until a connection's first request, see [`Limits::header_read_timeout`]);
//! - accept errors (mostly running out of file descriptors) back off instead of spinning;
//! - on [`Shutdown`]: no more accepting, every connection asked to finish gracefully (HTTP/1: after its
//!   answer in flight; HTTP/2: GOAWAY), and what is still open after [`Limits::drain`] is cut;
//! - each request carries the client's address as a [`Peer`] extension.

use std::error::Error as StdError;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use hyper::body::{Body, Incoming};
use hyper::server::conn::{http1, http2};
use hyper::service::Service;
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;
use tokio_rustls::TlsAcceptor;

use crate::shutdown::Shutdown;

/// How long a failed accept waits before the next (out of file descriptors, mostly: waiting lets
/// connections close instead of spinning on the error).
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// What one server lets its clients hold. Every server passes its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Connections served at once, TLS handshakes included; further clients wait in the listen backlog.
    pub max_connections: usize,
    /// Time a client has to send a request's headers. HTTP/1: hyper's `header_read_timeout`, which also
    /// bounds how long a kept-alive connection may sit idle between requests. HTTP/2: hyper's h2 server
    /// has no header timeout, so the helper bounds the time from the connection's start (after TLS) to
    /// its first request instead; later streams are watched by the HTTP/2 keepalive.
    pub header_read_timeout: Duration,
    /// Time a client has to complete the TLS handshake (unused without TLS).
    pub handshake_timeout: Duration,
    /// How long connections still open at shutdown may go on before they are cut.
    pub drain: Duration,
    /// Set TCP_NODELAY on accepted connections (small writes that must not wait: gRPC acks).
    pub nodelay: bool,
}

/// The HTTP version spoken on every connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    Http1,
    Http2(Http2),
}

/// HTTP/2 connection settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Http2 {
    /// PING interval on a connection (None: no PINGs): finds peers that vanished without a FIN.
    pub keepalive_interval: Option<Duration>,
    /// How long a PING may go unanswered before the connection is closed.
    pub keepalive_timeout: Duration,
    /// Streams a client may have open at once on one connection.
    pub max_concurrent_streams: Option<u32>,
}

/// The remote address of a connection, in each of its requests' extensions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Peer(pub SocketAddr);

/// Why a server could not start.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("listening on {address} for {purpose}")]
    Bind {
        address: SocketAddr,
        /// What the server is for ("admission reviews").
        purpose: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error("reading the address of the listener for {purpose}")]
    Address {
        purpose: &'static str,
        #[source]
        source: std::io::Error,
    },
}

/// A bound listening socket and what it serves.
#[derive(Debug)]
pub struct Listener {
    tcp: TcpListener,
    address: SocketAddr,
    purpose: &'static str,
}

impl Listener {
    /// Binds `address`; `purpose` names the server in errors and logs ("admission reviews").
    pub async fn bind(address: SocketAddr, purpose: &'static str) -> Result<Self, Error> {
        let bind_error = |source| Error::Bind {
            address,
            purpose,
            source,
        };
        let tcp = TcpListener::bind(address).await.map_err(bind_error)?;
        let bound = tcp.local_addr().map_err(bind_error)?;
        Ok(Self {
            tcp,
            address: bound,
            purpose,
        })
    }

    /// A socket bound elsewhere (tests that choose their own addresses).
    pub fn from_tcp(tcp: TcpListener, purpose: &'static str) -> Result<Self, Error> {
        let address = tcp.local_addr().map_err(|source| Error::Address { purpose, source })?;
        Ok(Self { tcp, address, purpose })
    }

    /// The bound address (the port chosen when port 0 was asked for).
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    pub fn purpose(&self) -> &'static str {
        self.purpose
    }
}

/// One server: where it listens, whether over TLS, what it speaks, its limits, and when it stops.
pub struct Server {
    pub listener: Listener,
    /// TLS on every connection, or plain HTTP.
    pub tls: Option<TlsAcceptor>,
    pub protocol: Protocol,
    pub limits: Limits,
    pub shutdown: Shutdown,
}

/// What every connection task of one server shares.
struct Settings {
    tls: Option<TlsAcceptor>,
    protocol: Protocol,
    limits: Limits,
    purpose: &'static str,
    shutdown: Shutdown,
}

impl Server {
    /// Serves `service` until the shutdown fires, then drains (see [`Draining::drain`]).
    pub async fn serve<S, B>(self, service: S)
    where
        S: Service<Request<Incoming>, Response = Response<B>> + Clone + Send + 'static,
        S::Future: Send + 'static,
        S::Error: Into<Box<dyn StdError + Send + Sync>>,
        B: Body + Send + 'static,
        B::Data: Send,
        B::Error: Into<Box<dyn StdError + Send + Sync>>,
    {
        self.accept(service).await.drain().await;
    }

    /// Accepts and serves connections until the shutdown fires; returns the connections still open (each
    /// already asked to finish), for the caller to mark itself not ready before it [drains](Draining::drain).
    pub async fn accept<S, B>(self, service: S) -> Draining
    where
        S: Service<Request<Incoming>, Response = Response<B>> + Clone + Send + 'static,
        S::Future: Send + 'static,
        S::Error: Into<Box<dyn StdError + Send + Sync>>,
        B: Body + Send + 'static,
        B::Data: Send,
        B::Error: Into<Box<dyn StdError + Send + Sync>>,
    {
        let Server {
            listener,
            tls,
            protocol,
            limits,
            shutdown,
        } = self;
        let purpose = listener.purpose;
        let settings = Arc::new(Settings {
            tls,
            protocol,
            limits,
            purpose,
            shutdown: shutdown.clone(),
        });
        let slots = Arc::new(Semaphore::new(limits.max_connections));
        let mut connections = JoinSet::new();
        loop {
            // The slot first: while all are taken, new clients wait in the backlog, not in our memory.
            let slot = tokio::select! {
                slot = slots.clone().acquire_owned() => slot,
                () = shutdown.fired() => break,
            };
            let Ok(slot) = slot else { break };
            let accepted = tokio::select! {
                accepted = listener.tcp.accept() => accepted,
                () = shutdown.fired() => break,
            };
            let (tcp, peer) = match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    tracing::warn!(server = purpose, %error, "accepting a connection failed; backing off");
                    drop(slot);
                    tokio::select! {
                        () = tokio::time::sleep(ACCEPT_BACKOFF) => continue,
                        () = shutdown.fired() => break,
                    }
                }
            };
            if limits.nodelay
                && let Err(error) = tcp.set_nodelay(true)
            {
                tracing::debug!(server = purpose, %peer, %error, "could not set TCP_NODELAY");
            }
            connections.spawn(connection(tcp, Peer(peer), settings.clone(), service.clone(), slot));
            // Reap finished connections, so the set holds only open ones.
            while connections.try_join_next().is_some() {}
        }
        tracing::debug!(server = purpose, open = connections.len(), "stopped accepting");
        Draining {
            connections,
            bound: limits.drain,
            purpose,
        }
    }
}

/// The connections of a server that stopped accepting, each finishing its requests in flight.
#[derive(Debug)]
pub struct Draining {
    connections: JoinSet<()>,
    bound: Duration,
    purpose: &'static str,
}

impl Draining {
    /// Waits for the connections to finish, at most the drain bound: a stuck client cannot hold the
    /// shutdown. Those still open then are cut; returns how many.
    pub async fn drain(mut self) -> usize {
        let connections = &mut self.connections;
        let all_done = async { while connections.join_next().await.is_some() {} };
        if tokio::time::timeout(self.bound, all_done).await.is_ok() {
            return 0;
        }
        let cut = self.connections.len();
        tracing::info!(
            server = self.purpose,
            connections = cut,
            drain = ?self.bound,
            "connections still open after the drain bound; closing them"
        );
        self.connections.shutdown().await;
        cut
    }
}

/// One connection, from the TLS handshake to its end; holds its slot until then.
async fn connection<S, B>(tcp: TcpStream, peer: Peer, settings: Arc<Settings>, service: S, _slot: OwnedSemaphorePermit)
where
    S: Service<Request<Incoming>, Response = Response<B>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<Box<dyn StdError + Send + Sync>>,
    B: Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn StdError + Send + Sync>>,
{
    let Some(acceptor) = &settings.tls else {
        return http(TokioIo::new(tcp), peer, &settings, service).await;
    };
    let handshake = tokio::time::timeout(settings.limits.handshake_timeout, acceptor.accept(tcp));
    let handshake = tokio::select! {
        handshake = handshake => handshake,
        () = settings.shutdown.fired() => return,
    };
    match handshake {
        Ok(Ok(tls)) => http(TokioIo::new(tls), peer, &settings, service).await,
        Ok(Err(error)) => {
            tracing::debug!(server = settings.purpose, peer = %peer.0, %error, "TLS handshake failed");
        }
        Err(_) => tracing::debug!(
            server = settings.purpose,
            peer = %peer.0,
            timeout = ?settings.limits.handshake_timeout,
            "TLS handshake timed out"
        ),
    }
}

/// Speaks HTTP on an established connection until it ends, the shutdown drains it, or (HTTP/2) no request
/// came in time.
async fn http<I, S, B>(io: I, peer: Peer, settings: &Settings, service: S)
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
    S: Service<Request<Incoming>, Response = Response<B>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<Box<dyn StdError + Send + Sync>>,
    B: Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn StdError + Send + Sync>>,
{
    let first_request = Arc::new(Notify::new());
    let service = Tagged {
        inner: service,
        peer,
        first_request: first_request.clone(),
    };
    let limits = settings.limits;
    match settings.protocol {
        Protocol::Http1 => {
            let connection = http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(limits.header_read_timeout)
                .serve_connection(io, service);
            // hyper's own header timer covers HTTP/1.
            drive(connection, http1::Connection::graceful_shutdown, None, peer, settings).await;
        }
        Protocol::Http2(h2) => {
            let mut builder = http2::Builder::new(TokioExecutor::new());
            builder
                .timer(TokioTimer::new())
                .keep_alive_interval(h2.keepalive_interval)
                .keep_alive_timeout(h2.keepalive_timeout)
                .max_concurrent_streams(h2.max_concurrent_streams);
            let connection = builder.serve_connection(io, service);
            let first = Some((first_request, limits.header_read_timeout));
            drive(connection, http2::Connection::graceful_shutdown, first, peer, settings).await;
        }
    }
}

/// Runs a connection to its end; on shutdown asks it to finish gracefully and waits (the drain bounds
/// the wait from outside). With `first_request`, a connection with no request by then is dropped.
async fn drive<C>(
    connection: C,
    graceful_shutdown: fn(Pin<&mut C>),
    first_request: Option<(Arc<Notify>, Duration)>,
    peer: Peer,
    settings: &Settings,
) where
    C: Future<Output = hyper::Result<()>>,
{
    let mut connection = std::pin::pin!(connection);
    let no_request_in_time = async {
        match first_request {
            Some((arrived, timeout)) if tokio::time::timeout(timeout, arrived.notified()).await.is_err() => {}
            _ => std::future::pending().await,
        }
    };
    tokio::select! {
        ended = connection.as_mut() => {
            if let Err(error) = ended {
                tracing::debug!(server = settings.purpose, peer = %peer.0, %error, "connection ended with an error");
            }
            return;
        }
        () = no_request_in_time => {
            tracing::debug!(
                server = settings.purpose,
                peer = %peer.0,
                timeout = ?settings.limits.header_read_timeout,
                "no request in time; closing the connection"
            );
            return;
        }
        () = settings.shutdown.fired() => {}
    }
    graceful_shutdown(connection.as_mut());
    let _ = connection.await;
}

/// The service of one connection: adds the [`Peer`] to each request, and signals the first request.
#[derive(Clone)]
struct Tagged<S> {
    inner: S,
    peer: Peer,
    first_request: Arc<Notify>,
}

impl<S> Service<Request<Incoming>> for Tagged<S>
where
    S: Service<Request<Incoming>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn call(&self, mut request: Request<Incoming>) -> Self::Future {
        request.extensions_mut().insert(self.peer);
        // A stored permit: the connection's timer sees it even if it starts waiting later.
        self.first_request.notify_one();
        self.inner.call(request)
    }
}

#[cfg(test)]
mod tests;
