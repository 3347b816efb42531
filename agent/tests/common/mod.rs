//! Shared by the agent's integration tests: an in-test `TerminationReports` receiver over TLS (an rcgen
//! CA, ALPN h2) that answers by container id.
#![allow(dead_code)]
#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic in a test is a failed assertion

use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
use rustls_pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use spark_operator_proto::agent::v1::termination_reports_server::{TerminationReports, TerminationReportsServer};
use spark_operator_proto::agent::v1::{ReportAck, ReportRequest, TerminationReport, Verdict};
use spark_operator_proto::tonic::transport::server::Connected;
use spark_operator_proto::tonic::{self, Request, Response, Status, Streaming};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

/// The token the receiver accepts.
pub const TOKEN: &str = "agent-token";

/// Fails the test instead of hanging.
pub async fn within<T>(what: &str, fut: impl Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(60), fut)
        .await
        .unwrap_or_else(|_| panic!("timed out waiting for {what}"))
}

/// Polls `check` every 20 ms until it holds.
pub async fn until(what: &str, mut check: impl FnMut() -> bool) {
    within(what, async {
        while !check() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
}

/// What the receiver saw.
#[derive(Default)]
pub struct Seen {
    /// Container ids in arrival order (resends included).
    pub reports: Vec<TerminationReport>,
    /// The authorization header of every stream opened.
    pub authorizations: Vec<String>,
}

#[derive(Clone, Default)]
pub struct Receiver {
    pub seen: Arc<Mutex<Seen>>,
    /// While false, `hold-*` reports are never answered (they stay in flight).
    pub release_held: Arc<AtomicBool>,
}

impl Receiver {
    pub fn count(&self, container_id: &str) -> usize {
        self.seen
            .lock()
            .unwrap()
            .reports
            .iter()
            .filter(|r| r.container_id == container_id)
            .count()
    }

    /// By container id: `ok-*` OK; `retry-*` RETRY the first time, OK after; `discard-*` DISCARD;
    /// `hold-*` no answer until released, then OK.
    fn verdict(&self, report: &TerminationReport) -> Option<(Verdict, String)> {
        let id = report.container_id.as_str();
        let times = self.count(id);
        if id.starts_with("retry-") && times == 1 {
            Some((Verdict::Retry, "the status write conflicted".into()))
        } else if id.starts_with("discard-") {
            Some((Verdict::Discard, "the application is gone".into()))
        } else if id.starts_with("hold-") && !self.release_held.load(Ordering::SeqCst) {
            None
        } else {
            Some((Verdict::Ok, String::new()))
        }
    }
}

#[tonic::async_trait]
impl TerminationReports for Receiver {
    type ReportStream = ReceiverStream<Result<ReportAck, Status>>;

    async fn report(&self, request: Request<Streaming<ReportRequest>>) -> Result<Response<Self::ReportStream>, Status> {
        let authorization = request
            .metadata()
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        self.seen.lock().unwrap().authorizations.push(authorization.clone());
        if authorization != format!("Bearer {TOKEN}") {
            return Err(Status::unauthenticated("not the agent's token"));
        }
        let mut inbound = request.into_inner();
        let (tx, rx) = mpsc::channel(64);
        let receiver = self.clone();
        tokio::spawn(async move {
            while let Ok(Some(request)) = inbound.message().await {
                let report = request.report.unwrap_or_default();
                receiver.seen.lock().unwrap().reports.push(report.clone());
                if let Some((verdict, reason)) = receiver.verdict(&report) {
                    let ack = ReportAck {
                        sequence: request.sequence,
                        verdict: verdict as i32,
                        reason,
                    };
                    if tx.send(Ok(ack)).await.is_err() {
                        return;
                    }
                }
            }
        });
        Ok(Response::new(ReceiverStream::new(rx)))
    }
}

/// A TLS server stream tonic can serve.
struct Tls(tokio_rustls::server::TlsStream<TcpStream>);

impl Connected for Tls {
    type ConnectInfo = ();
    fn connect_info(&self) -> Self::ConnectInfo {}
}

impl AsyncRead for Tls {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_read(cx, buf)
    }
}

impl AsyncWrite for Tls {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().0).poll_write(cx, buf)
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_flush(cx)
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_shutdown(cx)
    }
}

/// A CA (written to `ca.crt` in `dir`) and a server config for `localhost` issued by it, ALPN h2.
pub fn pki(dir: &Path) -> rustls::ServerConfig {
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::default();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = ca_params.self_signed(&ca_key).unwrap();
    std::fs::write(dir.join("ca.crt"), ca.pem()).unwrap();
    let issuer = Issuer::new(ca_params, ca_key);
    let leaf_key = KeyPair::generate().unwrap();
    let leaf = CertificateParams::new(vec!["localhost".to_owned()])
        .unwrap()
        .signed_by(&leaf_key, &issuer)
        .unwrap();
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(leaf_key.serialize_der()));
    let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![CertificateDer::from(leaf.der().to_vec())], key)
        .unwrap();
    config.alpn_protocols = vec![b"h2".to_vec()];
    config
}

/// Serves `receiver` over TLS on a free port; returns the port.
pub async fn serve(receiver: Receiver, tls: rustls::ServerConfig) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(tls));
    let (tx, rx) = mpsc::channel::<std::io::Result<Tls>>(16);
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            let tx = tx.clone();
            tokio::spawn(async move {
                if let Ok(tls) = acceptor.accept(tcp).await {
                    let _ = tx.send(Ok(Tls(tls))).await;
                }
            });
        }
    });
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(TerminationReportsServer::new(receiver))
            .serve_with_incoming(ReceiverStream::new(rx)),
    );
    port
}
