//! Shared by the agent's integration tests: an in-test `TerminationReports` receiver over TLS (an rcgen
//! CA, ALPN h2) that answers by container id.
#![allow(dead_code)]
#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic in a test is a failed assertion

use std::future::Future;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
use rustls_pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use spark_operator_proto::agent::v1::termination_reports_server::{TerminationReports, TerminationReportsServer};
use spark_operator_proto::agent::v1::{ReportAck, ReportRequest, TerminationReport, Verdict};
use spark_operator_proto::tonic::{self, Request, Response, Status, Streaming};
use spark_operator_runtime::server::{Http2, Limits, Listener, Protocol, Server};
use spark_operator_runtime::shutdown::Shutdown;
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

/// Serves `receiver` over TLS on a free port, as the operator serves its receiver (the runtime's server
/// helper, HTTP/2); returns the port.
pub async fn serve(receiver: Receiver, tls: rustls::ServerConfig) -> u16 {
    let listener = Listener::bind("127.0.0.1:0".parse().unwrap(), "test termination reports")
        .await
        .unwrap();
    let port = listener.address().port();
    let server = Server {
        listener,
        tls: Some(tokio_rustls::TlsAcceptor::from(Arc::new(tls))),
        protocol: Protocol::Http2(Http2 {
            keepalive_interval: None,
            keepalive_timeout: Duration::from_secs(20),
            max_concurrent_streams: None,
        }),
        limits: Limits {
            max_connections: 1024,
            header_read_timeout: Duration::from_secs(10),
            handshake_timeout: Duration::from_secs(10),
            drain: Duration::from_secs(1),
            nodelay: true,
        },
        shutdown: Shutdown::never(),
    };
    let service = hyper_util::service::TowerToHyperService::new(TerminationReportsServer::new(receiver));
    tokio::spawn(server.serve(service));
    port
}
