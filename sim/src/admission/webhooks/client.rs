//! The HTTPS client the dispatcher calls webhooks with: rustls with the webhook's `caBundle` as
//! the only roots (the system's roots when it has none), HTTP/1.1, idle connections kept per
//! (address, server name, bundle) so a busy webhook is not a TLS handshake per request.
//!
//! Error texts follow what the apiserver's Go client reports (`dial tcp ...: connect:
//! connection refused`, `x509: certificate signed by unknown authority`, `context deadline
//! exceeded`), since users grep for them.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use rustls::pki_types::{CertificateDer, ServerName, pem::PemObject};

/// Where to send one request.
#[derive(Debug, Clone)]
pub(crate) struct Target {
    /// `host:port` to connect to.
    pub connect: String,
    /// The name the certificate must be valid for (also the SNI).
    pub server_name: String,
    /// The `Host` header.
    pub host_header: String,
    pub path_and_query: String,
    /// The URL as the apiserver would print it.
    pub url: String,
    pub ca_bundle: Option<Vec<u8>>,
}

/// Why a call failed; both are "failures to call" for `failurePolicy`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum CallError {
    /// No client could be built (bad CA bundle, bad server name).
    #[error("could not get REST client: {0}")]
    Client(String),
    /// The request did not complete or the webhook answered with an error status.
    #[error("failed to call webhook: {0}")]
    Call(String),
}

type PoolKey = (String, String, Option<Vec<u8>>);

#[derive(Default)]
pub(crate) struct HttpsClient {
    idle: Mutex<IdlePool<SendRequest<Full<Bytes>>>>,
    configs: Mutex<HashMap<Option<Vec<u8>>, Arc<rustls::ClientConfig>>>,
}

impl std::fmt::Debug for HttpsClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpsClient").finish_non_exhaustive()
    }
}

/// Idle connections kept per target.
const MAX_IDLE: usize = 8;
/// How long a connection stays pooled unused: Go's `http.DefaultTransport` `IdleConnTimeout`, which
/// apimachinery's transport defaults give the apiserver's webhook client.
const IDLE_CONN_TIMEOUT: Duration = Duration::from_secs(90);

/// Idle connections per target, each with the moment it was last used, newest last.
struct IdlePool<C> {
    by_key: HashMap<PoolKey, Vec<(C, Instant)>>,
}

impl<C> Default for IdlePool<C> {
    fn default() -> Self {
        Self { by_key: HashMap::new() }
    }
}

impl<C> IdlePool<C> {
    /// The most recently used connection for `key` that `usable` accepts and that has been idle for
    /// less than [`IDLE_CONN_TIMEOUT`]; the others are dropped (closed), as Go's idle timer closes them.
    fn take(&mut self, key: &PoolKey, now: Instant, usable: impl Fn(&C) -> bool) -> Option<C> {
        let list = self.by_key.get_mut(key)?;
        list.retain(|(_, since)| now.saturating_duration_since(*since) < IDLE_CONN_TIMEOUT);
        while let Some((c, _)) = list.pop() {
            if usable(&c) {
                return Some(c);
            }
        }
        None
    }

    fn put(&mut self, key: PoolKey, connection: C, now: Instant) {
        let list = self.by_key.entry(key).or_default();
        if list.len() < MAX_IDLE {
            list.push((connection, now));
        }
    }
}

impl HttpsClient {
    /// POSTs `body` (JSON) and returns the status code and body; the whole exchange is bounded
    /// by `timeout`.
    pub async fn post(&self, target: &Target, body: Bytes, timeout: Duration) -> Result<(u16, Bytes), CallError> {
        let config = self.tls_config(target.ca_bundle.as_deref())?;
        let key: PoolKey = (
            target.connect.clone(),
            target.server_name.clone(),
            target.ca_bundle.clone(),
        );
        let post = format!("Post {:?}", target.url);
        match tokio::time::timeout(timeout, self.exchange(&key, target, config, body)).await {
            Ok(Ok(r)) => Ok(r),
            Ok(Err(reason)) => Err(CallError::Call(format!("{post}: {reason}"))),
            Err(_) => Err(CallError::Call(format!("{post}: context deadline exceeded"))),
        }
    }

    async fn exchange(
        &self,
        key: &PoolKey,
        target: &Target,
        config: Arc<rustls::ClientConfig>,
        body: Bytes,
    ) -> Result<(u16, Bytes), String> {
        // A pooled connection the server closed meanwhile is retried once on a fresh one, as Go's
        // transport retries requests it had not written.
        if let Some(sender) = self.take_idle(key) {
            match send(sender, target, body.clone()).await {
                Ok((status, resp, sender)) => {
                    self.put_idle(key.clone(), sender);
                    return Ok((status, resp));
                }
                Err(SendError::Unsent(_)) => {}
                Err(SendError::Failed(e)) => return Err(e),
            }
        }
        let sender = connect(target, config).await?;
        match send(sender, target, body).await {
            Ok((status, resp, sender)) => {
                self.put_idle(key.clone(), sender);
                Ok((status, resp))
            }
            Err(SendError::Unsent(e) | SendError::Failed(e)) => Err(e),
        }
    }

    fn take_idle(&self, key: &PoolKey) -> Option<SendRequest<Full<Bytes>>> {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        idle.take(key, Instant::now(), SendRequest::is_ready)
    }

    fn put_idle(&self, key: PoolKey, sender: SendRequest<Full<Bytes>>) {
        if sender.is_closed() {
            return;
        }
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        idle.put(key, sender, Instant::now());
    }

    fn tls_config(&self, ca_bundle: Option<&[u8]>) -> Result<Arc<rustls::ClientConfig>, CallError> {
        let key = ca_bundle.map(<[u8]>::to_vec);
        if let Some(c) = self.configs.lock().unwrap_or_else(|e| e.into_inner()).get(&key) {
            return Ok(c.clone());
        }
        let mut roots = rustls::RootCertStore::empty();
        match ca_bundle {
            Some(pem) => {
                let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(pem)
                    .collect::<Result<_, _>>()
                    .map_err(|_| {
                        CallError::Client("unable to load root certificates: unable to parse bytes as PEM block".into())
                    })?;
                if certs.is_empty() {
                    return Err(CallError::Client(
                        "unable to load root certificates: unable to parse bytes as PEM block".into(),
                    ));
                }
                for c in certs {
                    roots
                        .add(c)
                        .map_err(|e| CallError::Client(format!("unable to load root certificates: {e}")))?;
                }
            }
            None => {
                for c in system_roots() {
                    let _ = roots.add(c.clone());
                }
            }
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| CallError::Client(e.to_string()))?
            .with_root_certificates(roots)
            .with_no_client_auth();
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        let config = Arc::new(config);
        self.configs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key, config.clone());
        Ok(config)
    }
}

/// The machine's trust roots, read once (used only for webhooks without a `caBundle`).
fn system_roots() -> &'static [CertificateDer<'static>] {
    static ROOTS: OnceLock<Vec<CertificateDer<'static>>> = OnceLock::new();
    ROOTS.get_or_init(|| rustls_native_certs::load_native_certs().certs)
}

async fn connect(target: &Target, config: Arc<rustls::ClientConfig>) -> Result<SendRequest<Full<Bytes>>, String> {
    let server_name = ServerName::try_from(target.server_name.clone())
        .map_err(|_| format!("invalid server name {:?}", target.server_name))?;
    let tcp = tokio::net::TcpStream::connect(&target.connect)
        .await
        .map_err(|e| dial_error(&target.connect, &e))?;
    let _ = tcp.set_nodelay(true);
    let tls = tokio_rustls::TlsConnector::from(config)
        .connect(server_name, tcp)
        .await
        .map_err(|e| tls_error(&target.server_name, &e))?;
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(async move {
        // Ends when the connection closes; an error here only means the peer went away.
        let _ = conn.await;
    });
    Ok(sender)
}

enum SendError {
    /// Nothing was sent (a closed pooled connection): safe to retry.
    Unsent(String),
    Failed(String),
}

async fn send(
    mut sender: SendRequest<Full<Bytes>>,
    target: &Target,
    body: Bytes,
) -> Result<(u16, Bytes, SendRequest<Full<Bytes>>), SendError> {
    sender.ready().await.map_err(|e| SendError::Unsent(e.to_string()))?;
    let request = hyper::Request::post(&target.path_and_query)
        .header(hyper::header::HOST, &target.host_header)
        .header(hyper::header::CONTENT_TYPE, "application/json")
        .header(hyper::header::ACCEPT, "application/json, */*")
        .header(hyper::header::USER_AGENT, "kube-apiserver-admission")
        .body(Full::new(body))
        .map_err(|e| SendError::Failed(e.to_string()))?;
    let response = sender.send_request(request).await.map_err(|e| {
        if e.is_canceled() {
            SendError::Unsent(e.to_string())
        } else {
            SendError::Failed(e.to_string())
        }
    })?;
    let status = response.status().as_u16();
    let body = response
        .into_body()
        .collect()
        .await
        .map_err(|e| SendError::Failed(e.to_string()))?
        .to_bytes();
    Ok((status, body, sender))
}

fn dial_error(addr: &str, e: &std::io::Error) -> String {
    let reason = match e.kind() {
        std::io::ErrorKind::ConnectionRefused => "connection refused".to_string(),
        _ => e.to_string(),
    };
    format!("dial tcp {addr}: connect: {reason}")
}

/// The TLS failure as Go's crypto/tls words the common ones.
fn tls_error(server_name: &str, e: &std::io::Error) -> String {
    use rustls::CertificateError as C;
    let inner = e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>());
    match inner {
        Some(rustls::Error::InvalidCertificate(C::UnknownIssuer)) => {
            "tls: failed to verify certificate: x509: certificate signed by unknown authority".into()
        }
        Some(rustls::Error::InvalidCertificate(C::NotValidForName | C::NotValidForNameContext { .. })) => {
            format!("tls: failed to verify certificate: x509: certificate is not valid for {server_name}")
        }
        Some(rustls::Error::InvalidCertificate(
            C::Expired | C::ExpiredContext { .. } | C::NotValidYet | C::NotValidYetContext { .. },
        )) => "tls: failed to verify certificate: x509: certificate has expired or is not yet valid".into(),
        Some(other) => format!("tls: {other}"),
        None => e.to_string(),
    }
}

/// The error client-go makes of a non-2xx answer: the Status' message when the body is one,
/// else its generic text for the code.
pub(crate) fn status_error(code: u16, body: &[u8]) -> String {
    if let Ok(v) = serde_json::from_slice::<serde_json::Value>(body)
        && v["kind"] == "Status"
        && let Some(m) = v["message"].as_str().filter(|m| !m.is_empty())
    {
        return m.to_string();
    }
    let text = String::from_utf8_lossy(&body[..body.len().min(1024)])
        .trim()
        .to_string();
    match code {
        400 => "the server rejected our request for an unknown reason".into(),
        401 => "the server has asked for the client to provide credentials".into(),
        403 => "the server does not allow access to the requested resource".into(),
        404 => "the server could not find the requested resource".into(),
        405 => "the server does not allow this method on the requested resource".into(),
        429 => "the server has received too many requests and has asked us to try again later".into(),
        503 => "the server is currently unable to handle the request".into(),
        504 => {
            "the server was unable to return a response in the time allotted, but may still be processing the request"
                .into()
        }
        c if c >= 500 => format!("an error on the server ({text:?}) has prevented the request from succeeding"),
        c => format!("the server responded with the status code {c} but did not return more information"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str) -> PoolKey {
        (format!("{name}:443"), name.to_owned(), None)
    }

    #[test]
    fn a_connection_idle_for_the_idle_timeout_is_closed_not_reused() {
        let start = Instant::now();
        let mut pool = IdlePool::default();
        pool.put(key("a"), "old", start);
        pool.put(key("a"), "newer", start + Duration::from_secs(30));
        let later = start + IDLE_CONN_TIMEOUT;
        assert_eq!(pool.take(&key("a"), later, |_| true), Some("newer"));
        // "old" was idle for the whole timeout: dropped, not handed out.
        assert_eq!(pool.take(&key("a"), later, |_| true), None);
    }

    #[test]
    fn the_newest_usable_connection_of_the_target_is_taken() {
        let start = Instant::now();
        let mut pool = IdlePool::default();
        pool.put(key("a"), 1, start);
        pool.put(key("a"), 2, start);
        pool.put(key("b"), 3, start);
        assert_eq!(pool.take(&key("a"), start, |c| *c != 2), Some(1));
        assert_eq!(pool.take(&key("a"), start, |_| true), None);
        assert_eq!(pool.take(&key("b"), start, |_| true), Some(3));
    }
}
