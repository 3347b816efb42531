//! Delivery against an in-test `TerminationReports` receiver over TLS (an rcgen CA, ALPN h2) that answers
//! by container id: OK'd and DISCARD'd reports leave the spool, RETRY'd ones are sent again, a wrong token
//! is refused until the token file is fixed (it is read again on every connect), and an agent restarted
//! on the same spool directory sends again what was never acknowledged.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic in a test is a failed assertion

mod common;

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use common::{Receiver, TOKEN, pki, serve, until, within};
use spark_operator_agent::delivery::{DeliveryConfig, deliver};
use spark_operator_agent::metrics::AgentMetrics;
use spark_operator_agent::spool::{SharedSpool, Spool, SpoolLimits};
use spark_operator_proto::agent::v1::TerminationReport;
use spark_operator_proto::prost::Message as _;
use spark_operator_runtime::shutdown::Shutdown;

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

    // An ack is counted when it arrives, and the spool forgets the report a moment later: its gauge,
    // set last, says when.
    until("everything but the held report to be acknowledged", || {
        metrics.acks_ok.get() >= 3 && metrics.acks_discard.get() >= 1 && metrics.spool_records.get() == 1
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
    until("the late report to be acknowledged", || {
        metrics.acks_ok.get() >= 4 && metrics.spool_records.get() == 1
    })
    .await;
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
        metrics.acks_ok.get() >= 1 && metrics.spool_records.get() == 0
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
