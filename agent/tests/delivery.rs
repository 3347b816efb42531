//! Delivery against an in-test `TerminationReports` receiver over TLS (an rcgen CA, ALPN h2) that answers
//! by container id: OK'd and DISCARD'd reports leave the spool, RETRY'd ones are sent again, a wrong token
//! is refused until the token file is fixed (it is read again on every connect), and an agent restarted
//! on the same spool directory sends again what was never acknowledged.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic in a test is a failed assertion

use std::collections::HashMap;
use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
use rustls_pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use spark_operator_agent::delivery::{DeliveryConfig, deliver};
use spark_operator_agent::metrics::AgentMetrics;
use spark_operator_agent::spool::{SharedSpool, Spool, SpoolLimits};
use spark_operator_proto::agent::v1::termination_reports_server::{TerminationReports, TerminationReportsServer};
use spark_operator_proto::agent::v1::{ReportAck, ReportRequest, TerminationReport, Verdict};
use spark_operator_proto::prost::Message as _;
use spark_operator_proto::tonic::transport::server::Connected;
use spark_operator_proto::tonic::{self, Request, Response, Status, Streaming};
use spark_operator_runtime::shutdown::Shutdown;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

const TOKEN: &str = "agent-token";

/// Fails the test instead of hanging.
async fn within<T>(what: &str, fut: impl Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(30), fut)
        .await
        .unwrap_or_else(|_| panic!("timed out waiting for {what}"))
}

/// Polls `check` every 20 ms until it holds.
async fn until(what: &str, mut check: impl FnMut() -> bool) {
    within(what, async {
        while !check() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
}

/// What the receiver saw.
#[derive(Default)]
struct Seen {
    /// Container ids in arrival order (resends included).
    reports: Vec<String>,
    /// The authorization header of every stream opened.
    authorizations: Vec<String>,
}

#[derive(Clone, Default)]
struct Receiver {
    seen: Arc<Mutex<Seen>>,
    /// While false, `hold-*` reports are never answered (they stay in flight).
    release_held: Arc<AtomicBool>,
}

impl Receiver {
    fn count(&self, container_id: &str) -> usize {
        self.seen
            .lock()
            .unwrap()
            .reports
            .iter()
            .filter(|c| *c == container_id)
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
                receiver.seen.lock().unwrap().reports.push(report.container_id.clone());
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
fn pki(dir: &Path) -> rustls::ServerConfig {
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
async fn serve(receiver: Receiver, tls: rustls::ServerConfig) -> u16 {
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

fn report(container_id: &str) -> Vec<u8> {
    TerminationReport {
        namespace: "jobs".into(),
        app_name: "pi".into(),
        container_id: container_id.into(),
        exit_code: 1,
        reason: "Error".into(),
        ..Default::default()
    }
    .encode_to_vec()
}

fn open(dir: &Path) -> (SharedSpool, Arc<AgentMetrics>) {
    let metrics = Arc::new(AgentMetrics::default());
    let limits = SpoolLimits::new(16 * 1024 * 1024, Duration::from_secs(3600));
    let (spool, _) = Spool::open(dir, limits, metrics.clone()).unwrap();
    (SharedSpool::new(spool), metrics)
}

fn config(port: u16, dir: &Path) -> DeliveryConfig {
    let mut config = DeliveryConfig::new(
        format!("https://localhost:{port}").parse().unwrap(),
        dir.join("ca.crt"),
        dir.join("token"),
    );
    config.retry_backoff = Duration::from_millis(50);
    config.reconnect_backoff = Duration::from_millis(50);
    config.reconnect_backoff_max = Duration::from_millis(200);
    config
}

fn segments(dir: &Path) -> usize {
    std::fs::read_dir(dir)
        .unwrap()
        .filter(|e| e.as_ref().unwrap().file_name().to_string_lossy().starts_with("seg-"))
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_reports_leave_the_spool_retried_ones_are_resent_and_a_restart_resends_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let spool_dir = dir.path().join("spool");
    let tls = pki(dir.path());
    let receiver = Receiver::default();
    let port = serve(receiver.clone(), tls).await;
    // A wrong token first: refused, and the agent keeps trying, reading the file again each time.
    std::fs::write(dir.path().join("token"), "stale-token\n").unwrap();

    let (spool, metrics) = open(&spool_dir);
    let mut seqs = HashMap::new();
    for id in ["ok-1", "retry-1", "discard-1", "hold-1", "ok-2"] {
        seqs.insert(id, spool.append(report(id)).await.unwrap());
    }
    let (stop, shutdown) = Shutdown::new();
    let agent = tokio::spawn(deliver(
        config(port, dir.path()),
        spool.clone(),
        metrics.clone(),
        shutdown,
    ));
    until("the stale token to be refused", || {
        receiver.seen.lock().unwrap().authorizations.len() >= 2
    })
    .await;
    assert_eq!(
        receiver.seen.lock().unwrap().reports.len(),
        0,
        "nothing goes without auth"
    );
    std::fs::write(dir.path().join("token"), format!("{TOKEN}\n")).unwrap();

    until("everything but the held report to be acknowledged", || {
        metrics.acks_ok.get() >= 3 && metrics.acks_discard.get() >= 1
    })
    .await;
    let pending = spool.pending().await.unwrap();
    assert_eq!(pending, [seqs["hold-1"]]);
    assert_eq!(receiver.count("retry-1"), 2, "RETRY'd once, then sent again");
    assert_eq!(receiver.count("ok-1"), 1);
    assert_eq!(receiver.count("discard-1"), 1, "a DISCARD is final");
    assert_eq!(metrics.acks_retry.get(), 1);
    assert_eq!(metrics.stream_connected.get(), 1);
    // A report appended while the stream is open goes at once.
    let late = spool.append(report("ok-3")).await.unwrap();
    until("the late report to be acknowledged", || metrics.acks_ok.get() >= 4).await;
    assert!(!spool.pending().await.unwrap().contains(&late));

    // The agent stops with hold-1 unanswered; a new process on the same spool sends it again.
    stop.fire();
    within("the delivery to stop", agent).await.unwrap();
    drop(spool);
    receiver.release_held.store(true, Ordering::SeqCst);
    let (spool, metrics) = open(&spool_dir);
    assert_eq!(spool.pending().await.unwrap(), [seqs["hold-1"]]);
    let (stop, shutdown) = Shutdown::new();
    let agent = tokio::spawn(deliver(
        config(port, dir.path()),
        spool.clone(),
        metrics.clone(),
        shutdown,
    ));
    until("the held report to be acknowledged after the restart", || {
        metrics.acks_ok.get() >= 1
    })
    .await;
    assert_eq!(receiver.count("hold-1"), 2);
    assert_eq!(spool.pending().await.unwrap(), Vec::<u64>::new());
    assert_eq!(segments(&spool_dir), 0, "acknowledged segments are deleted");
    assert_eq!(receiver.count("ok-1"), 1, "acknowledged reports are not sent again");
    stop.fire();
    within("the delivery to stop", agent).await.unwrap();
    let authorizations = receiver.seen.lock().unwrap().authorizations.clone();
    assert_eq!(authorizations.last().map(String::as_str), Some("Bearer agent-token"));
}
