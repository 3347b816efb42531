//! The controller's HTTP endpoints as a kubelet and Prometheus see them: `/healthz`, `/readyz`, and
//! `/metrics` counting a real run.

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
