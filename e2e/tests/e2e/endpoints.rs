//! The controller's HTTP endpoints as a kubelet and Prometheus see them: `/healthz`, `/readyz`, and
//! `/metrics` counting a real run, and its running gauges after a restart.

use std::time::Duration;

use spark_operator_api::ApplicationStateType as S;
use spark_operator_e2e::{Cluster, ClusterOptions, Poll, app_yaml, free_port, http_get as get, metric, poll, state};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probes_answer_and_metrics_count_a_run() {
    let cluster = Cluster::start(ClusterOptions::default()).await;
    let port = free_port();
    let _controller = cluster.controller(cluster.args(&[&format!("--metrics-address=127.0.0.1:{port}")]));
    let ready = poll(Duration::from_secs(20), || async {
        match get(port, "/readyz").await {
            Some((200, body)) => Poll::Done(body),
            other => Poll::Pending(other),
        }
    })
    .await;
    assert!(ready.is_ok(), "/readyz never became 200: {ready:?}");
    assert_eq!(get(port, "/healthz").await.map(|(code, _)| code), Some(200));
    assert_eq!(get(port, "/nowhere").await.map(|(code, _)| code), Some(404));

    cluster.create_app(&app_yaml("counted", "500ms", 0, 1, "")).await;
    let app = cluster
        .wait_app("default", "counted", Duration::from_secs(60), |a| {
            state(a).is_terminal()
        })
        .await;
    assert_eq!(state(&app), S::Completed);
    let (code, text) = get(port, "/metrics").await.expect("/metrics answers");
    assert_eq!(code, 200);
    for (name, value) in [
        ("spark_application_submit_count", 1.0),
        ("spark_application_success_count", 1.0),
        ("spark_application_failure_count", 0.0),
        ("spark_application_running_count", 0.0),
        ("spark_application_submit_latency_seconds_count", 1.0),
        ("spark_application_start_latency_seconds_count", 1.0),
        ("spark_operator_leader", 1.0),
    ] {
        assert_eq!(metric(&text, name), Some(value), "{name} in:\n{text}");
    }
    assert!(
        metric(&text, "spark_operator_status_writes").is_some_and(|n| n >= 3.0),
        "claim, submitted, running/completed: {text}"
    );
    assert!(
        text.contains("spark_operator_reconcile_duration_seconds_bucket"),
        "{text}"
    );
}

/// The running gauges tell the truth after a restart: what was already running when the controller
/// started is counted, and nothing goes negative when it ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn running_counts_are_right_after_a_restart() {
    let cluster = Cluster::start(ClusterOptions::default()).await;
    let first = cluster.controller(cluster.args(&[]));
    cluster.create_app(&app_yaml("steady", "4s", 0, 2, "")).await;
    cluster
        .wait_app("default", "steady", Duration::from_secs(60), |a| {
            state(a) == S::Running
                && a.status
                    .as_ref()
                    .and_then(|s| s.executor_counts.as_ref())
                    .is_some_and(|c| c.running == 2)
        })
        .await;
    first.kill();

    let port = free_port();
    let _second = cluster.controller(cluster.args(&[&format!("--metrics-address=127.0.0.1:{port}")]));
    let seen = running_gauges(port, (1.0, 2.0), Duration::from_secs(20)).await;
    assert!(
        seen.is_ok(),
        "the running application and executors were not counted: {seen:?}"
    );

    let app = cluster
        .wait_app("default", "steady", Duration::from_secs(60), |a| state(a).is_terminal())
        .await;
    assert_eq!(state(&app), S::Completed);
    let ended = running_gauges(port, (0.0, 0.0), Duration::from_secs(10)).await;
    assert!(ended.is_ok(), "after the end: {ended:?}");
}

/// Polls `/metrics` until the running gauges read `(applications, executors)`; the last reading
/// otherwise.
async fn running_gauges(port: u16, expected: (f64, f64), limit: Duration) -> Result<(), (Option<f64>, Option<f64>)> {
    poll(limit, || async {
        let text = get(port, "/metrics").await.map(|(_, body)| body).unwrap_or_default();
        let read = (
            metric(&text, "spark_application_running_count"),
            metric(&text, "spark_executor_running_count"),
        );
        if read == (Some(expected.0), Some(expected.1)) {
            Poll::Done(())
        } else {
            Poll::Pending(read)
        }
    })
    .await
}
