//! The fake Spark driver paces executor creation as Spark's `ExecutorPodsAllocator` does: a driver
//! asking for 100,000 executors creates them a batch per round, and stops creating while
//! `maxPendingPods` are not running. Checked with the sim's own allocation counters and object
//! counts, never with timing (the waits only bound a failure).
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::time::Duration;

use kube_sim::node::{AllocationStats, NodesConfig};
use kube_sim::registry::Gvr;
use kube_sim::store::{ListOptions, Store, WriteOptions};
use kube_sim::{Sim, SimConfig};
use serde_json::{Value, json};

const APP_ID: &str = "spark-962b896e900743c5be4c7ba477842b6c";

fn gvr(resource: &str) -> Gvr {
    Gvr::new("", "v1", resource)
}

async fn start() -> (Sim, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = SimConfig::new(dir.path().join("data"));
    config.root_ca_configmap = true;
    config.nodes = NodesConfig::with_nodes(2);
    let sim = Sim::start(config).await.expect("sim starts");
    (sim, dir)
}

async fn until<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    for _ in 0..1000 {
        if let Some(v) = f() {
            return v;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("timed out waiting for {what}");
}

/// What spark-submit (or the operator) writes into the driver's ConfigMap.
fn spark_properties(extra: &[(&str, &str)]) -> String {
    let mut props: BTreeMap<&str, &str> = BTreeMap::from([
        ("spark.app.name", "spark-pi"),
        ("spark.app.id", "spark-962b896e900743c5be4c7ba477842b6c"),
        ("spark.master", "k8s\\://https\\://10.96.0.1\\:443"),
        ("spark.submit.deployMode", "cluster"),
        ("spark.kubernetes.namespace", "default"),
        ("spark.kubernetes.driver.pod.name", "spark-pi-driver"),
        ("spark.kubernetes.container.image", "spark\\:4.0.0"),
        ("spark.kubernetes.authenticate.driver.serviceAccountName", "spark"),
        ("spark.executor.instances", "2"),
        ("spark.executor.memory", "512m"),
        ("spark.driver.host", "spark-pi-9b5e8aa20138403b-driver-svc.default.svc"),
        ("spark.driver.port", "7078"),
        (
            "spark.kubernetes.executor.label.sparkoperator.k8s.io/app-name",
            "spark-pi",
        ),
        (
            "spark.kubernetes.executor.label.sparkoperator.k8s.io/launched-by-spark-operator",
            "true",
        ),
        ("spark.kubernetes.executor.annotation.team", "data-{{EXECUTOR_ID}}"),
    ]);
    props.extend(extra.iter().copied());
    let mut text = String::from("#Java properties built from Kubernetes config map with name: spark-drv-conf-map\n");
    for (k, v) in props {
        text.push_str(&format!("{k}={v}\n"));
    }
    text
}

async fn create_config_map(store: &Store, properties: String) {
    let cm = json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": { "name": "spark-drv-74ac75a201384224-conf-map" },
        "data": { "spark.properties": properties }
    });
    store
        .create(&gvr("configmaps"), "default", cm, &WriteOptions::default())
        .await
        .expect("configmap");
}

/// The driver pod as spark-submit creates it (trimmed to what matters here).
fn driver_pod(annotations: Value) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": "spark-pi-driver",
            "labels": {
                "spark-app-name": "spark-pi", "spark-version": "4.3.0", "spark-role": "driver",
                "spark-app-selector": "spark-962b896e900743c5be4c7ba477842b6c",
                "sparkoperator.k8s.io/app-name": "spark-pi"
            },
            "annotations": annotations
        },
        "spec": {
            "restartPolicy": "Never",
            "serviceAccountName": "spark",
            "containers": [{
                "name": "spark-kubernetes-driver",
                "image": "spark:4.0.0",
                "args": ["driver", "--properties-file", "/opt/spark/conf/spark.properties",
                         "--class", "org.apache.spark.examples.SparkPi", "local:///opt/spark/examples/jars/spark-examples.jar", "1000"],
                "env": [{ "name": "SPARK_USER", "value": "root" }, { "name": "SPARK_CONF_DIR", "value": "/opt/spark/conf" }],
                "resources": { "requests": { "cpu": "1", "memory": "896Mi" }, "limits": { "memory": "896Mi" } },
                "volumeMounts": [
                    { "name": "spark-local-dir-1", "mountPath": "/var/data/spark-ac6b7d30" },
                    { "name": "spark-conf-volume-driver", "mountPath": "/opt/spark/conf" }
                ]
            }],
            "volumes": [
                { "name": "spark-local-dir-1", "emptyDir": {} },
                { "name": "spark-conf-volume-driver", "configMap": {
                    "name": "spark-drv-74ac75a201384224-conf-map",
                    "items": [{ "key": "spark.properties", "path": "spark.properties", "mode": 420 }] } }
            ]
        }
    })
}

async fn create_service_account(store: &Store) {
    let sa = json!({ "apiVersion": "v1", "kind": "ServiceAccount", "metadata": { "name": "spark" } });
    store
        .create(&gvr("serviceaccounts"), "default", sa, &WriteOptions::default())
        .await
        .expect("service account");
}

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
