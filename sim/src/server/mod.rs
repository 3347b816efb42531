//! The HTTPS listener: TLS (rustls) on 127.0.0.1, HTTP/2 and HTTP/1.1, graceful shutdown.

mod authz;
mod handlers;
mod proxy;
mod request;
mod response;
mod websocket;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use crate::faults::Faults;
use crate::store::Store;

/// Shared by every request.
pub(crate) struct AppState {
    pub store: Store,
    pub faults: Arc<Faults>,
    pub audit: Arc<crate::audit::AuditLog>,
    /// The bearer token of the kubeconfig's token user.
    pub token: String,
    /// Verifies the ServiceAccount tokens the kubelets put in pods.
    pub service_account_tokens: Arc<crate::service_account_tokens::TokenSigner>,
    /// `host:port`, for `/api`'s serverAddressByClientCIDRs.
    pub server_address: String,
    pub bookmark_interval: Duration,
    /// For `pods/log`: node log files live under `<data_dir>/nodes/<node>/var/log/pods`.
    pub data_dir: std::path::PathBuf,
}

/// A running listener.
pub(crate) struct ServerHandle {
    pub addr: SocketAddr,
    stop: tokio::sync::watch::Sender<bool>,
    task: JoinHandle<()>,
}

/// Why the listener could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("binding 127.0.0.1:{port}")]
    Bind { port: u16, source: std::io::Error },
    #[error("reading the bound address")]
    LocalAddr(#[source] std::io::Error),
}

/// Binds 127.0.0.1 (port 0 = any free port).
pub(crate) async fn bind(port: u16) -> Result<TcpListener, ServeError> {
    TcpListener::bind(("127.0.0.1", port))
        .await
        .map_err(|source| ServeError::Bind { port, source })
}

/// Serves the API on `listener` until [`ServerHandle::shutdown`].
pub(crate) fn spawn(
    listener: TcpListener,
    tls: Arc<rustls::ServerConfig>,
    state: Arc<AppState>,
) -> Result<ServerHandle, ServeError> {
    let addr = listener.local_addr().map_err(ServeError::LocalAddr)?;
    let (stop, mut stopped) = tokio::sync::watch::channel(false);
    let acceptor = tokio_rustls::TlsAcceptor::from(tls);
    let task = tokio::spawn(async move {
        let graceful = GracefulShutdown::new();
        loop {
            tokio::select! {
                _ = stopped.changed() => break,
                accepted = listener.accept() => {
                    let (tcp, peer) = match accepted {
                        Ok(x) => x,
                        Err(e) => {
                            tracing::warn!(error = %e, "accepting a connection");
                            continue;
                        }
                    };
                    let acceptor = acceptor.clone();
                    let state = state.clone();
                    let watcher = graceful.watcher();
                    tokio::spawn(async move {
                        let tls = match acceptor.accept(tcp).await {
                            Ok(t) => t,
                            Err(e) => {
                                tracing::debug!(%peer, error = %e, "TLS handshake failed");
                                return;
                            }
                        };
                        let client_cert = tls.get_ref().1.peer_certificates().is_some_and(|c| !c.is_empty());
                        let svc = service_fn(move |mut req: hyper::Request<hyper::body::Incoming>| {
                            req.extensions_mut().insert(proxy::ClientAddr(peer));
                            let state = state.clone();
                            async move {
                                // Watches over WebSocket (fabric8's way); everything else as is.
                                if websocket::is_watch_upgrade(&req) {
                                    let response = websocket::handle(req, |req| handlers::handle(state, req, client_cert)).await;
                                    return Ok::<_, Infallible>(response);
                                }
                                Ok::<_, Infallible>(handlers::handle(state, req, client_cert).await)
                            }
                        });
                        let builder = auto::Builder::new(TokioExecutor::new());
                        let conn = builder.serve_connection_with_upgrades(TokioIo::new(tls), svc);
                        if let Err(e) = watcher.watch(conn).await {
                            tracing::debug!(%peer, error = %e, "connection ended with an error");
                        }
                    });
                }
            }
        }
        // Open watches never end on their own; give connections a moment, then drop them.
        if tokio::time::timeout(Duration::from_secs(5), graceful.shutdown())
            .await
            .is_err()
        {
            tracing::debug!("connections still open after 5s; closing them");
        }
    });
    Ok(ServerHandle { addr, stop, task })
}

impl ServerHandle {
    /// Stops accepting, asks connections to finish, and waits (at most a few seconds).
    pub async fn shutdown(self) {
        let _ = self.stop.send(true);
        let _ = self.task.await;
    }
}
