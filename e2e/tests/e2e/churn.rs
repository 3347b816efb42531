//! One application churning through many executors (dynamic allocation): every status the API server
//! stores stays within the byte budget, no status write fails, and the counts are exact.
//!
//! `SPARK_E2E_CHURN_EXECUTORS` sets how many (default 3,000 in this suite; the figure,
//! 100,000, is a longer run: `SPARK_E2E_CHURN_EXECUTORS=100000`).

use std::time::Duration;

use futures::StreamExt;
use kube::runtime::{WatchStreamExt, watcher};
use spark_operator_api::ApplicationStateType as S;
use spark_operator_e2e::{Cluster, ClusterOptions, app_yaml, free_port, http_get, metric, state};

const BUDGET: usize = 16 * 1024;

fn executors() -> u64 {
    std::env::var("SPARK_E2E_CHURN_EXECUTORS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3_000)
}

/// A metric the controller must export.
fn required(text: &str, name: &str) -> f64 {
    metric(text, name).unwrap_or_else(|| panic!("metric {name} missing"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn churning_executors_keep_the_status_within_its_budget_and_the_counts_exact() {
    let total = executors();
    let cluster = Cluster::start(ClusterOptions {
        normal_events: false,
        ..ClusterOptions::big()
    })
    .await;
    let port = free_port();
    let _controller = cluster.controller(cluster.args(&[
        // The smallest budget: 100 recent executors and their failures no longer fit, so the budget,
        // not the list limits, is what bounds the status.
        &format!("--status-byte-budget={BUDGET}"),
        &format!("--metrics-address=127.0.0.1:{port}"),
    ]));

    // Every version of the status the API server stores is seen by this watch.
    let apps = cluster.apps("default");
    let sizes = tokio::spawn(async move {
        let mut largest = 0usize;
        let mut versions = 0usize;
        let mut stream =
            std::pin::pin!(watcher(apps, watcher::Config::default().fields("metadata.name=churn")).applied_objects());
        while let Some(Ok(app)) = stream.next().await {
            let size = serde_json::to_vec(&app.status).map_or(0, |v| v.len());
            largest = largest.max(size);
            versions += 1;
            if state(&app).is_terminal() {
                break;
            }
        }
        (largest, versions)
    });

    let spec =
        "  dynamicAllocation:\n    enabled: true\n    initialExecutors: 0\n    minExecutors: 0\n    maxExecutors: 50\n";
    let yaml = app_yaml("churn", "0s", 0, 1, spec).replace(
        "      sim.spark-operator.dev/exit-code: \"0\"",
        &format!(
            "      sim.spark-operator.dev/exit-code: \"0\"\n      sim.spark-operator.dev/churn-executors: \"{total}\""
        ),
    );
    cluster.create_app(&yaml).await;
    let limit = Duration::from_secs(120 + total / 20);
    let app = cluster
        .wait_app("default", "churn", limit, |a| {
            state(a).is_terminal()
                && a.status
                    .as_ref()
                    .and_then(|s| s.executor_counts.as_ref())
                    .is_some_and(|c| c.total() as u64 == total && c.pending + c.running == 0)
        })
        .await;
    let status = app.status.clone().unwrap_or_default();
    assert_eq!(state(&app), S::Completed);
    let counts = status.executor_counts.clone().unwrap_or_default();
    assert_eq!(counts.total() as u64, total, "{counts:?}");
    assert_eq!(counts.failed, 0, "{counts:?}");
    // Executors that came and went while a watch relisted (a 410 under heavy churn) are counted by
    // their ids as UNKNOWN; every other one ended Completed.
    assert_eq!(counts.completed + counts.unknown, total as i64, "{counts:?}");
    assert!(
        !status.recent_executors.is_empty(),
        "the budget shrinks the list, it does not empty it"
    );

    let (largest, versions) = sizes.await.expect("the size watch");
    eprintln!(
        "{total} executors: {versions} status versions seen, the largest {largest} bytes (budget {BUDGET}); \
         {} unseen (counted UNKNOWN)",
        counts.unknown
    );
    assert!(
        largest <= BUDGET,
        "a stored status of {largest} bytes is over the {BUDGET}-byte budget"
    );
    assert!(versions > 10, "the watch saw the status change only {versions} times");

    let text = http_get(port, "/metrics")
        .await
        .map(|(_, body)| body)
        .unwrap_or_default();
    assert_eq!(
        required(&text, "spark_operator_status_write_errors"),
        0.0,
        "every status write succeeds"
    );
    assert!(
        required(&text, "spark_operator_status_budget_shrinks") > 0.0,
        "the budget was what bounded the status"
    );
    assert_eq!(
        required(&text, "spark_executor_success_count") as i64,
        counts.completed,
        "the metric counts the same completions as the status"
    );
}
