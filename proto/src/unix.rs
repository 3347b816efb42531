//! gRPC over unix domain sockets, the transport CRI runtimes use (for example
//! `/run/containerd/containerd.sock`).
//!
//! Server side (a simulated node): [`bind_unix_listener`] then [`serve_runtime_service`], or
//! [`serve_runtime_service_at`] when the caller does not need to know when the socket is ready.
//! Client side (the node agent): [`connect_runtime_service`], or [`connect_unix`] for a bare
//! [`Channel`].

use std::future::Future;
use std::io;
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};

use hyper_util::rt::TokioIo;
use tokio::net::{UnixListener, UnixStream};
use tokio_stream::wrappers::UnixListenerStream;
use tonic::transport::{Channel, Endpoint, Server, Uri};
use tower::service_fn;

use crate::cri::v1::runtime_service_client::RuntimeServiceClient;
use crate::cri::v1::runtime_service_server::{RuntimeService, RuntimeServiceServer};

/// A failed unix-socket operation; every variant names the socket path.
#[derive(Debug, thiserror::Error)]
pub enum UnixSocketError {
    #[error("cannot create the parent directory of unix socket {}", path.display())]
    CreateDir {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot inspect the existing file at unix socket path {}", path.display())]
    Inspect {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error(
        "{} exists and is not a unix socket; refusing to replace it: remove it or choose another socket path",
        path.display()
    )]
    NotASocket { path: PathBuf },
    #[error(
        "unix socket {} is in use by a running server; stop it or choose another socket path",
        path.display()
    )]
    InUse { path: PathBuf },
    #[error("cannot remove the stale unix socket {}", path.display())]
    RemoveStale {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot bind unix socket {}", path.display())]
    Bind {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    // tonic's transport error says only "transport error"; what failed is further down its source
    // chain, which whoever shows this error walks.
    #[error("gRPC server on unix socket {} failed", path.display())]
    Serve {
        path: PathBuf,
        #[source]
        source: tonic::transport::Error,
    },
    #[error("cannot connect to gRPC server on unix socket {}", path.display())]
    Connect {
        path: PathBuf,
        #[source]
        source: tonic::transport::Error,
    },
}

/// Binds a unix socket at `path`, creating its parent directory and replacing a stale socket
/// left behind by a server that did not shut down cleanly.
///
/// Refuses to replace anything that is not a socket, or a socket a live server still accepts
/// connections on: silently stealing another server's socket would make both look broken.
/// Must be called within a Tokio runtime.
pub fn bind_unix_listener(path: impl AsRef<Path>) -> Result<UnixListener, UnixSocketError> {
    let path = path.as_ref();
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(|source| UnixSocketError::CreateDir {
            path: path.to_path_buf(),
            source,
        })?;
    }
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_socket() => {
            // A unix-socket connect never blocks on the network: it either reaches a listener
            // or fails at once (ECONNREFUSED for a socket nobody listens on).
            if std::os::unix::net::UnixStream::connect(path).is_ok() {
                return Err(UnixSocketError::InUse {
                    path: path.to_path_buf(),
                });
            }
            std::fs::remove_file(path).map_err(|source| UnixSocketError::RemoveStale {
                path: path.to_path_buf(),
                source,
            })?;
        }
        Ok(_) => {
            return Err(UnixSocketError::NotASocket {
                path: path.to_path_buf(),
            });
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(source) => {
            return Err(UnixSocketError::Inspect {
                path: path.to_path_buf(),
                source,
            });
        }
    }
    UnixListener::bind(path).map_err(|source| UnixSocketError::Bind {
        path: path.to_path_buf(),
        source,
    })
}

/// Serves `service` on an already bound `listener` until `shutdown` completes.
///
/// On shutdown the listener is closed at once, then this waits for open connections to finish
/// their calls: a `GetContainerEvents` stream the service keeps open must end (or its client
/// go away) for this to return. The socket file is left in place; [`bind_unix_listener`]
/// replaces it on the next start.
pub async fn serve_runtime_service<S, F>(
    service: RuntimeServiceServer<S>,
    listener: UnixListener,
    shutdown: F,
) -> Result<(), UnixSocketError>
where
    S: RuntimeService,
    F: Future<Output = ()>,
{
    // Only for error messages; an unnamed listener has no path to report.
    let path = listener
        .local_addr()
        .ok()
        .and_then(|addr| addr.as_pathname().map(Path::to_path_buf))
        .unwrap_or_default();
    Server::builder()
        .add_service(service)
        .serve_with_incoming_shutdown(UnixListenerStream::new(listener), shutdown)
        .await
        .map_err(|source| UnixSocketError::Serve { path, source })
}

/// [`bind_unix_listener`] then [`serve_runtime_service`].
///
/// Binding happens on the first poll, so a caller that spawns this cannot tell when clients may
/// connect; use the two steps when that matters (tests, a node that reports readiness).
pub async fn serve_runtime_service_at<S, F>(
    service: RuntimeServiceServer<S>,
    path: impl AsRef<Path>,
    shutdown: F,
) -> Result<(), UnixSocketError>
where
    S: RuntimeService,
    F: Future<Output = ()>,
{
    let listener = bind_unix_listener(path)?;
    serve_runtime_service(service, listener, shutdown).await
}

/// Opens a gRPC channel to the server listening on the unix socket at `path`.
///
/// Connects once before returning, so a missing socket or a dead server is reported here; after
/// that the channel reconnects by itself (to the same path) when the connection drops.
pub async fn connect_unix(path: impl AsRef<Path>) -> Result<Channel, UnixSocketError> {
    let path = path.as_ref().to_path_buf();
    let connector_path = path.clone();
    // tonic needs a URI but the connector below ignores it; its authority ("localhost") is what
    // gRPC clients of CRI sockets send as `:authority`.
    Endpoint::from_static("http://localhost")
        .connect_with_connector(service_fn(move |_: Uri| {
            let path = connector_path.clone();
            async move { UnixStream::connect(path).await.map(TokioIo::new) }
        }))
        .await
        .map_err(|source| UnixSocketError::Connect { path, source })
}

/// A CRI `RuntimeService` client for the runtime listening on the unix socket at `path`, such
/// as `/run/containerd/containerd.sock`.
pub async fn connect_runtime_service(path: impl AsRef<Path>) -> Result<RuntimeServiceClient<Channel>, UnixSocketError> {
    Ok(RuntimeServiceClient::new(connect_unix(path).await?))
}
