//! The fake Spark driver paces executor creation as Spark's `ExecutorPodsAllocator` does: a driver
//! asking for 100,000 executors creates them a batch per round, and stops creating while
//! `maxPendingPods` are not running. Checked with the sim's own allocation counters and object
//! counts, never with timing (the waits only bound a failure).
#![allow(clippy::expect_used, clippy::unwrap_used)]

use kube_sim::Sim;
use kube_sim::node::AllocationStats;
use kube_sim::store::{ListOptions, Store, WriteOptions};
use serde_json::json;

const APP_ID: &str = "spark-962b896e900743c5be4c7ba477842b6c";

mod fake_driver;
use fake_driver::*;

async fn start_driver(sim: &Sim, extra: &[(&str, &str)]) {
    let store = sim.store();
    create_service_account(store).await;
    create_config_map(store, spark_properties(extra)).await;
    store
        .create(&gvr("pods"), "default", driver_pod(json!({})), &WriteOptions::default())
        .await
        .expect("driver pod");
}

/// Waits (bounded) until the driver's allocator has run `rounds` rounds.
async fn rounds(sim: &Sim, rounds: u64) -> AllocationStats {
    until(&format!("{rounds} allocation rounds"), || {
        sim.nodes().executor_allocation(APP_ID).filter(|s| s.rounds >= rounds)
    })
    .await
}

fn executor_pods(store: &Store) -> usize {
    let list = store
        .list(
            &gvr("pods"),
            Some("default"),
            &ListOptions {
                label_selector: Some("spark-role=executor".into()),
                ..Default::default()
            },
        )
        .unwrap();
    list["items"].as_array().map_or(0, Vec::len)
}

#[tokio::test]
async fn a_hundred_thousand_executors_come_a_batch_per_round() {
    let (sim, _dir) = start().await;
    start_driver(
        &sim,
        &[
            ("spark.executor.instances", "100000"),
            ("spark.kubernetes.allocation.batch.delay", "150ms"),
        ],
    )
    .await;
    let before = rounds(&sim, 5).await;
    let pods = executor_pods(sim.store());
    let after = sim.nodes().executor_allocation(APP_ID).unwrap();
    // Every round asked for a full batch of Spark 4.3's default size, and no more.
    assert_eq!(before.largest_round, 20, "{before:?}");
    assert!(before.recent.iter().all(|n| *n == 20), "{before:?}");
    assert_eq!(before.created, 20 * before.rounds);
    // What exists is what the rounds created: a few batches, not 100,000 pods.
    assert!(
        before.created as usize <= pods && pods <= after.created as usize,
        "{pods} executor pods, created {} then {}",
        before.created,
        after.created
    );
    assert!(pods <= 20 * after.rounds as usize);
    sim.shutdown().await;
}

#[tokio::test]
async fn no_new_batch_while_max_pending_pods_are_not_running() {
    let (sim, _dir) = start().await;
    start_driver(
        &sim,
        &[
            ("spark.executor.instances", "1000"),
            // No node has 100 CPUs: every executor stays Pending.
            ("spark.executor.cores", "100"),
            ("spark.kubernetes.allocation.maxPendingPods", "30"),
            ("spark.kubernetes.allocation.batch.delay", "150ms"),
        ],
    )
    .await;
    let stats = rounds(&sim, 4).await;
    assert_eq!(stats.recent.iter().take(4).copied().collect::<Vec<_>>(), [20, 10, 0, 0]);
    assert_eq!(stats.created, 30);
    assert_eq!(executor_pods(sim.store()), 30);
    sim.shutdown().await;
}
