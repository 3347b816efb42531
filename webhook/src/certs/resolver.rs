//! The serving certificate as a value that can be swapped under a running server: a rustls
//! [`ResolvesServerCert`] holding an `Arc<CertifiedKey>` (Stackable's cert resolver, without arc-swap:
//! a handshake only clones an `Arc` under a read lock, and writes happen a few times a week).

use std::sync::{Arc, PoisonError, RwLock};

use rustls::ServerConfig;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

/// Why no TLS configuration could be built.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("building the TLS server configuration")]
    ServerConfig(#[source] rustls::Error),
}

/// The certificate every handshake gets; None until the first one is loaded (handshakes then fail,
/// and `/readyz` says not ready).
#[derive(Debug, Default)]
pub struct CertResolver {
    current: RwLock<Option<Arc<CertifiedKey>>>,
}

impl CertResolver {
    /// Serves `key` from the next handshake on; connections already open keep theirs.
    pub fn set(&self, key: Arc<CertifiedKey>) {
        *self.current.write().unwrap_or_else(PoisonError::into_inner) = Some(key);
    }

    /// What handshakes get now.
    pub fn current(&self) -> Option<Arc<CertifiedKey>> {
        self.current.read().unwrap_or_else(PoisonError::into_inner).clone()
    }
}

impl ResolvesServerCert for CertResolver {
    fn resolve(&self, _client_hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.current()
    }
}

/// A rustls server configuration (ring, TLS 1.2 and 1.3, no client authentication) whose certificate
/// comes from `resolver`. `alpn` lists the protocols offered, e.g. `[b"http/1.1".to_vec()]`.
pub fn server_config(resolver: Arc<CertResolver>, alpn: Vec<Vec<u8>>) -> Result<Arc<ServerConfig>, Error> {
    let mut config = ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .map_err(Error::ServerConfig)?
        .with_no_client_auth()
        .with_cert_resolver(resolver);
    config.alpn_protocols = alpn;
    Ok(Arc::new(config))
}
