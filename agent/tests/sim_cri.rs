//! The agent's CRI watcher on a simulated node: Spark driver and executor pods scripted to exit with given
//! codes (one OOM-killed) are each reported exactly once, through the spool, with the right identity,
//! exit code, reason and log tail; pods that are not Spark's are not; an end that happened before the
//! agent connected is found by its first relist (a repair); later relists report nothing twice.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic in a test is a failed assertion

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use kube_sim::node::NodesConfig;
use kube_sim::registry::Gvr;
use kube_sim::store::{Store, WriteOptions};
use kube_sim::{Sim, SimConfig};
use serde_json::{Value, json};
use spark_operator_agent::Capture;
use spark_operator_agent::cri::{Observation, WatchConfig, watch};
use spark_operator_agent::logs::{LogArgs, LogStore};
use spark_operator_agent::metrics::AgentMetrics;
use spark_operator_agent::report::TailLimits;
use spark_operator_agent::reported::{Reported, SharedReported};
use spark_operator_agent::spool::{SharedSpool, Spool, SpoolLimits};
use spark_operator_api::labels::{LABEL_APP_NAME, LABEL_SPARK_EXEC_ID, LABEL_SPARK_ROLE, LABEL_SUBMISSION_ID};
use spark_operator_proto::agent::v1::{Role, TerminationReport};
use spark_operator_proto::prost::Message as _;
use spark_operator_runtime::shutdown::Shutdown;
use tokio::sync::mpsc;

const NODE: &str = "sim-node-1";

async fn within<T>(what: &str, fut: impl Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(60), fut)
        .await
        .unwrap_or_else(|_| panic!("timed out waiting for {what}"))
}

async fn start() -> (Sim, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let mut config = SimConfig::new(dir.path().join("data"));
    config.root_ca_configmap = true;
    config.nodes = NodesConfig::with_nodes(1);
    let sim = Sim::start(config).await.unwrap();
    (sim, dir)
}

/// A pod of app `pi` (submission `s1`) with one container, scripted by `script` annotations.
fn pod(name: &str, labels: Value, container: &str, script: &[(&str, &str)]) -> Value {
    let annotations: serde_json::Map<String, Value> = script
        .iter()
        .map(|(k, v)| (format!("sim.spark-operator.dev/{k}"), json!(v)))
        .collect();
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": { "name": name, "labels": labels, "annotations": annotations },
        "spec": { "restartPolicy": "Never", "containers": [{ "name": container, "image": "apache/spark:4.0.1" }] }
    })
}

fn spark_labels(role: &str, exec_id: Option<&str>) -> Value {
    let mut labels = json!({
        LABEL_SPARK_ROLE: role,
        LABEL_APP_NAME: "pi",
        LABEL_SUBMISSION_ID: "s1",
    });
    if let Some(id) = exec_id {
        labels[LABEL_SPARK_EXEC_ID] = json!(id);
    }
    labels
}

async fn create(store: &Store, pod: Value) {
    store
        .create(&Gvr::new("", "v1", "pods"), "default", pod, &WriteOptions::default())
        .await
        .unwrap();
}

async fn phase(store: &Store, name: &str, phase: &str) {
    within(&format!("pod {name} to be {phase}"), async {
        loop {
            if let Ok(p) = store.get(&Gvr::new("", "v1", "pods"), "default", name)
                && p["status"]["phase"] == phase
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
}

/// The spooled reports by pod name (each pod has one container run).
async fn reports(spool: &SharedSpool) -> Vec<TerminationReport> {
    let mut out = Vec::new();
    for seq in spool.pending().await.unwrap() {
        let payload = spool.read(seq).await.unwrap().unwrap();
        out.push(TerminationReport::decode(payload.as_slice()).unwrap());
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_spark_container_end_is_reported_once_with_its_exit_and_log_tail() {
    let (sim, dir) = start().await;
    let store = sim.store().clone();
    let node = sim.nodes().node(NODE).unwrap();
    let script = |code: &'static str| vec![("program", "script"), ("run-time", "100ms"), ("exit-code", code)];

    // Ended before the agent runs: only a relist can find it.
    let mut early = script("4");
    early.push(("log", "early bird"));
    create(
        &store,
        pod(
            "pi-exec-9",
            spark_labels("executor", Some("9")),
            "spark-kubernetes-executor",
            &early,
        ),
    )
    .await;
    phase(&store, "pi-exec-9", "Failed").await;

    let metrics = Arc::new(AgentMetrics::default());
    let limits = SpoolLimits::new(16 * 1024 * 1024, Duration::from_secs(3600));
    let (spool, _) = Spool::open(&dir.path().join("spool"), limits, metrics.clone()).unwrap();
    let spool = SharedSpool::new(spool);
    let reported = SharedReported::new(Reported::open(&dir.path().join("spool")).unwrap());
    let (stop, shutdown) = Shutdown::new();
    let (observations, mut seen) = mpsc::unbounded_channel();
    let (forward, captured) = mpsc::unbounded_channel();
    let watcher = tokio::spawn(watch(
        WatchConfig {
            socket: node.cri_socket(),
            // Frequent relists: they must not report anything twice.
            relist_period: Duration::from_millis(200),
            poll_period: Duration::from_millis(200),
            oom_settle_delay: Duration::from_millis(200),
            host_root: node.root_dir().to_owned(),
        },
        metrics.clone(),
        None,
        Some(reported.clone()),
        observations,
        shutdown,
    ));
    // Count every observation, then hand it on to the capture into the spool.
    let counter = tokio::spawn(async move {
        let mut starts: HashMap<String, usize> = HashMap::new();
        let mut ends: HashMap<String, usize> = HashMap::new();
        while let Some(observation) = seen.recv().await {
            match &observation {
                Observation::Started(source) => *starts.entry(source.container.pod_name.clone()).or_default() += 1,
                Observation::Ended(end) => *ends.entry(end.container.pod_name.clone()).or_default() += 1,
            }
            let _ = forward.send(observation);
        }
        (starts, ends)
    });
    let capture = tokio::spawn(
        Capture {
            node_name: NODE.to_owned(),
            tail: TailLimits { lines: 3, bytes: 4096 },
            spool: spool.clone(),
            reported: Some(reported.clone()),
            logs: LogStore::open(
                &LogArgs {
                    log_store_dir: dir.path().join("logs"),
                    ..LogArgs::default()
                },
                NODE,
            )
            .unwrap(),
            metrics: metrics.clone(),
        }
        .run(captured),
    );

    create(
        &store,
        pod(
            "pi-driver",
            spark_labels("driver", None),
            "spark-kubernetes-driver",
            &[
                ("program", "script"),
                ("run-time", "300ms"),
                ("log", "driver done"),
                ("exit-code", "0"),
            ],
        ),
    )
    .await;
    let mut failing = script("1");
    failing.push(("log-lines", "5"));
    failing.push(("exit-log", "java.lang.IllegalStateException: boom"));
    create(
        &store,
        pod(
            "pi-exec-1",
            spark_labels("executor", Some("1")),
            "spark-kubernetes-executor",
            &failing,
        ),
    )
    .await;
    create(
        &store,
        pod(
            "pi-exec-2",
            spark_labels("executor", Some("2")),
            "spark-kubernetes-executor",
            &[("program", "script"), ("run-time", "100ms"), ("oom-kill", "true")],
        ),
    )
    .await;
    // Not Spark's: no labels; and a spark-role without the operator's app-name label.
    create(&store, pod("web", json!({ "app": "web" }), "main", &script("0"))).await;
    create(
        &store,
        pod(
            "foreign-spark",
            json!({ LABEL_SPARK_ROLE: "driver" }),
            "spark-kubernetes-driver",
            &script("0"),
        ),
    )
    .await;
    for (name, end) in [
        ("pi-driver", "Succeeded"),
        ("pi-exec-1", "Failed"),
        ("pi-exec-2", "Failed"),
        ("web", "Succeeded"),
        ("foreign-spark", "Succeeded"),
    ] {
        phase(&store, name, end).await;
    }
    within("four reports in the spool", async {
        while metrics.containers_ended.get() < 4 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    // Several more relists: none may report an end again.
    let relists = metrics.cri_relists.get();
    within("three more relists", async {
        while metrics.cri_relists.get() < relists + 3 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;

    let reports: HashMap<String, TerminationReport> = reports(&spool)
        .await
        .into_iter()
        .map(|r| (r.pod_name.clone(), r))
        .collect();
    let mut names: Vec<&str> = reports.keys().map(String::as_str).collect();
    names.sort_unstable();
    assert_eq!(names, ["pi-driver", "pi-exec-1", "pi-exec-2", "pi-exec-9"]);
    assert_eq!(metrics.containers_ended.get(), 4, "each end exactly once");

    let driver = &reports["pi-driver"];
    assert_eq!((driver.exit_code, driver.reason.as_str()), (0, "Completed"));
    assert_eq!((driver.role, driver.executor_id), (Role::Driver as i32, None));
    assert_eq!(
        (
            driver.namespace.as_str(),
            driver.app_name.as_str(),
            driver.submission_id.as_str()
        ),
        ("default", "pi", "s1")
    );
    assert_eq!(driver.container_name, "spark-kubernetes-driver");
    assert_eq!(driver.node_name, NODE);
    assert!(driver.log_tail.contains("driver done"), "{:?}", driver.log_tail);
    assert!(driver.finished_at >= driver.started_at && driver.started_at > 0);
    assert!(!driver.container_id.is_empty() && !driver.pod_uid.is_empty());

    let failed = &reports["pi-exec-1"];
    assert_eq!((failed.exit_code, failed.reason.as_str()), (1, "Error"));
    assert_eq!((failed.role, failed.executor_id), (Role::Executor as i32, Some(1)));
    // The tail is bounded to its last three lines.
    assert_eq!(
        failed.log_tail, "log line 4\nlog line 5\njava.lang.IllegalStateException: boom\n",
        "{:?}",
        failed.log_tail
    );

    let oom = &reports["pi-exec-2"];
    assert_eq!((oom.exit_code, oom.reason.as_str()), (137, "OOMKilled"));
    assert_eq!(oom.executor_id, Some(2));

    let early = &reports["pi-exec-9"];
    assert_eq!((early.exit_code, early.reason.as_str()), (4, "Error"));
    assert!(early.log_tail.contains("early bird"), "{:?}", early.log_tail);
    assert!(metrics.cri_repairs.get() >= 1, "the early end was found by a relist");
    assert!(metrics.cri_events.get() > 0, "the others came as events");
    assert_eq!(metrics.cri_polling.get(), 0, "the sim's containerd sends events");

    stop.fire();
    within("the watcher to stop", watcher).await.unwrap();
    let (starts, ends) = within("the observations to end", counter).await.unwrap();
    within("the capture to drain", capture).await.unwrap();
    for name in ["pi-driver", "pi-exec-1", "pi-exec-2", "pi-exec-9"] {
        assert_eq!(starts.get(name), Some(&1), "{name} started once: {starts:?}");
        assert_eq!(ends.get(name), Some(&1), "{name} ended once: {ends:?}");
    }
    assert!(!starts.contains_key("web") && !starts.contains_key("foreign-spark"));
    // Every captured end is in the index, so a restarted agent would not report it again.
    let mut indexed = Reported::open(&dir.path().join("spool"))
        .unwrap()
        .ids()
        .map(str::to_owned)
        .collect::<Vec<_>>();
    indexed.sort();
    let mut ids: Vec<String> = reports.values().map(|r| r.container_id.clone()).collect();
    ids.sort();
    assert_eq!(indexed, ids);
}
