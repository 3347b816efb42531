//! Dynamic-allocation churn: a driver scripted to churn through 10,000 executors creates all
//! of them, and no more than `spark.dynamicAllocation.maxExecutors` run at once, counted from
//! the store's change feed. CI churns 2,000 (the same path, a fifth of the time);
//! `SPARK_E2E_FULL=1` runs the full 10,000.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::collections::HashSet;
use std::time::{Duration, Instant};

use kube_sim::node::{NodeSpec, NodesConfig};
use kube_sim::registry::Gvr;
use kube_sim::store::{ChangeKind, WriteOptions};
use kube_sim::{Sim, SimConfig};
use serde_json::json;

const MAX_AT_ONCE: usize = 40;

/// Executors to churn: 2,000 in CI, 10,000 with `SPARK_E2E_FULL=1`.
fn executors() -> usize {
    if std::env::var("SPARK_E2E_FULL").is_ok_and(|v| v == "1") {
        10_000
    } else {
        2_000
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn churns_thousands_of_executors_within_the_maximum() {
    let executors = executors();
    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = SimConfig::new(dir.path().join("data"));
    config.root_ca_configmap = true;
    config.nodes = NodesConfig {
        nodes: (1..=2)
            .map(|i| NodeSpec::numbered(i).capacity("64", "512Gi", 110))
            .collect(),
        // Normal events would triple the writes per executor.
        normal_events: false,
        ..NodesConfig::default()
    };
    let sim = Sim::start(config).await.expect("sim starts");
    let store = sim.store().clone();
    let (rv, _) = store.snapshot();
    let mut feed = store.changes(rv);

    let properties = [
        "spark.app.name=churn",
        "spark.app.id=spark-churn",
        "spark.kubernetes.namespace=default",
        "spark.kubernetes.driver.pod.name=churn-driver",
        "spark.kubernetes.container.image=spark\\:4.0.0",
        "spark.kubernetes.executor.podNamePrefix=churn",
        "spark.kubernetes.authenticate.driver.serviceAccountName=spark-operator-spark",
        "spark.kubernetes.executor.request.cores=100m",
        "spark.executor.memory=512m",
        "spark.dynamicAllocation.enabled=true",
        "spark.dynamicAllocation.minExecutors=0",
        &format!("spark.dynamicAllocation.maxExecutors={MAX_AT_ONCE}"),
    ]
    .join("\n");
    // The driver's ServiceAccount with the Role a job namespace gives Spark (RBAC is enforced).
    kube_sim::auth::spark::create_spark_job_rbac(&store, "default", "spark-operator-spark")
        .await
        .expect("the Spark ServiceAccount and Role");
    let cm = json!({ "apiVersion": "v1", "kind": "ConfigMap", "metadata": { "name": "churn-conf" }, "data": { "spark.properties": properties } });
    store
        .create(
            &Gvr::new("", "v1", "configmaps"),
            "default",
            cm,
            &WriteOptions::default(),
        )
        .await
        .expect("configmap");
    let driver = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": "churn-driver",
            "labels": { "spark-role": "driver", "spark-app-selector": "spark-churn" },
            "annotations": {
                "sim.spark-operator.dev/churn-executors": executors.to_string(),
                "sim.spark-operator.dev/run-time": "0s"
            }
        },
        "spec": {
            "restartPolicy": "Never",
            "serviceAccountName": "spark-operator-spark",
            "containers": [{
                "name": "spark-kubernetes-driver", "image": "spark:4.0.0",
                "volumeMounts": [{ "name": "spark-conf-volume-driver", "mountPath": "/opt/spark/conf" }]
            }],
            "volumes": [{ "name": "spark-conf-volume-driver", "configMap": { "name": "churn-conf" } }]
        }
    });
    let began = Instant::now();
    store
        .create(&Gvr::new("", "v1", "pods"), "default", driver, &WriteOptions::default())
        .await
        .expect("driver");

    // Follow every pod change: which executors exist, which run right now, the most at once.
    let mut created: HashSet<String> = HashSet::new();
    let mut running: HashSet<String> = HashSet::new();
    let mut max_running = 0;
    // Executors the driver has and has not let go of (not deleted, not finished), pending or running:
    // what its maximum bounds.
    let mut live: HashSet<String> = HashSet::new();
    let mut max_live = 0;
    let outcome = tokio::time::timeout(Duration::from_secs(1800), async {
        loop {
            let change = match feed.next().await {
                Ok(c) => c,
                Err(e) => panic!("the test fell behind the store's history ({e}); it cannot count what it missed"),
            };
            if change.resource.resource != "pods" {
                continue;
            }
            let obj = &change.object;
            let name = obj["metadata"]["name"].as_str().unwrap_or("").to_string();
            if name == "churn-driver" {
                match obj["status"]["phase"].as_str() {
                    Some("Succeeded") => return Ok(()),
                    Some("Failed") => return Err(obj.to_string()),
                    _ => continue,
                }
            }
            if obj["metadata"]["labels"]["spark-role"] != "executor" {
                continue;
            }
            if change.kind == ChangeKind::Added {
                created.insert(name.clone());
            }
            let finished = matches!(obj["status"]["phase"].as_str(), Some("Succeeded" | "Failed"));
            if change.kind == ChangeKind::Deleted || obj["metadata"]["deletionTimestamp"].is_string() || finished {
                live.remove(&name);
            } else {
                live.insert(name.clone());
                max_live = max_live.max(live.len());
            }
            if change.kind != ChangeKind::Deleted && obj["status"]["phase"] == "Running" {
                running.insert(name);
                max_running = max_running.max(running.len());
            } else {
                running.remove(&name);
            }
        }
    })
    .await
    .expect("the churn finishes");
    if let Err(driver) = outcome {
        panic!("the driver failed: {driver}");
    }
    let elapsed = began.elapsed();
    println!(
        "churned {} executors in {:.1}s ({:.0}/s), at most {max_live} live and {max_running} running at once",
        created.len(),
        elapsed.as_secs_f64(),
        created.len() as f64 / elapsed.as_secs_f64()
    );
    assert_eq!(created.len(), executors, "every scripted executor was created");
    assert!(
        max_running <= MAX_AT_ONCE,
        "{max_running} executors ran at once; the maximum is {MAX_AT_ONCE}"
    );
    assert!(
        max_live <= MAX_AT_ONCE,
        "{max_live} executors existed at once (pending or running); the maximum is {MAX_AT_ONCE}"
    );
    assert!(max_running > 1, "executors ran concurrently ({max_running})");
    let names: HashSet<&str> = created.iter().map(String::as_str).collect();
    assert!(names.contains("churn-exec-1") && names.contains(format!("churn-exec-{executors}").as_str()));
    sim.shutdown().await;
}
