//! Node failures and evictions: a stopped node goes NotReady (Unknown) with the unreachable
//! taints, its pods are marked not ready and evicted by the taint manager, and stay Terminating
//! until the kubelet comes back and finishes them; node-pressure eviction ends a pod Evicted.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::time::Duration;

use kube_sim::node::{LifecycleConfig, NodesConfig};
use kube_sim::registry::Gvr;
use kube_sim::store::{Store, WriteOptions};
use kube_sim::{Sim, SimConfig};
use serde_json::{Value, json};

async fn until<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    for _ in 0..1000 {
        if let Some(v) = f() {
            return v;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("timed out waiting for {what}");
}

fn condition(obj: &Value, type_: &str) -> Option<Value> {
    obj.pointer("/status/conditions")?
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
        .cloned()
}

fn pod(store: &Store, name: &str) -> Option<Value> {
    store.get(&Gvr::new("", "v1", "pods"), "default", name).ok()
}

async fn run_pod(store: &Store, name: &str) {
    let p = json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": { "name": name },
        "spec": { "containers": [{ "name": "main", "image": "busybox:1.36" }] }
    });
    store
        .create(&Gvr::new("", "v1", "pods"), "default", p, &WriteOptions::default())
        .await
        .expect("create");
    until("the pod to run", || {
        pod(store, name).filter(|p| p["status"]["phase"] == "Running")
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stopped_node_goes_not_ready_and_its_pods_are_evicted_then_finished_when_it_returns() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = SimConfig::new(dir.path().join("data"));
    config.root_ca_configmap = true;
    config.nodes = NodesConfig::with_nodes(1);
    config.nodes.kubelet.heartbeat_interval = Duration::from_millis(100);
    config.nodes.lifecycle = LifecycleConfig {
        monitor_period: Duration::from_millis(100),
        grace_period: Duration::from_millis(500),
        default_toleration: Duration::from_millis(500),
    };
    let sim = Sim::start(config).await.expect("sim starts");
    let store = sim.store().clone();
    run_pod(&store, "victim").await;

    sim.nodes().stop_node("sim-node-1").expect("stop");
    assert!(!sim.nodes().node("sim-node-1").expect("node").is_running());
    let node = until("the node to go NotReady", || {
        let n = store.get(&Gvr::new("", "v1", "nodes"), "", "sim-node-1").ok()?;
        let ready = condition(&n, "Ready")?;
        (ready["status"] == "Unknown").then_some(n)
    })
    .await;
    let ready = condition(&node, "Ready").expect("Ready");
    assert_eq!(ready["reason"], "NodeStatusUnknown");
    assert_eq!(ready["message"], "Kubelet stopped posting node status.");
    let taints = until("the unreachable taints", || {
        let n = store.get(&Gvr::new("", "v1", "nodes"), "", "sim-node-1").ok()?;
        let t = n["spec"]["taints"].as_array()?.clone();
        (t.len() == 2).then_some(t)
    })
    .await;
    assert!(taints.iter().all(|t| t["key"] == "node.kubernetes.io/unreachable"));
    assert!(
        taints
            .iter()
            .any(|t| t["effect"] == "NoExecute" && t["timeAdded"].is_string())
    );

    // Marked not ready, then evicted by the taint manager: Terminating, as nobody runs it.
    let evicted = until("the pod to be evicted", || {
        pod(&store, "victim").filter(|p| p["metadata"]["deletionTimestamp"].is_string())
    })
    .await;
    let disruption = condition(&evicted, "DisruptionTarget").expect("DisruptionTarget");
    assert_eq!(disruption["reason"], "DeletionByTaintManager");
    assert_eq!(condition(&evicted, "Ready").expect("Ready")["status"], "False");
    assert_eq!(evicted["status"]["phase"], "Running", "nobody has stopped it yet");
    // A new pod cannot land on the unreachable node.
    let p = json!({ "apiVersion": "v1", "kind": "Pod", "metadata": { "name": "newcomer" },
                    "spec": { "containers": [{ "name": "main", "image": "busybox:1.36" }] } });
    store
        .create(&Gvr::new("", "v1", "pods"), "default", p, &WriteOptions::default())
        .await
        .expect("create");
    let msg = until("the newcomer to be unschedulable", || {
        let c = condition(&pod(&store, "newcomer")?, "PodScheduled")?;
        c["message"].as_str().map(str::to_string)
    })
    .await;
    assert!(
        msg.contains("node(s) had untolerated taint {node.kubernetes.io/unreachable: }"),
        "{msg}"
    );

    // The kubelet comes back: it finishes the evicted pod and the node is Ready again.
    sim.nodes().start_node("sim-node-1").expect("start");
    until("the evicted pod to be gone", || {
        pod(&store, "victim").is_none().then_some(())
    })
    .await;
    until("the node to be Ready without taints", || {
        let n = store.get(&Gvr::new("", "v1", "nodes"), "", "sim-node-1").ok()?;
        let ready = condition(&n, "Ready")?["status"] == "True";
        let untainted = n["spec"]["taints"].as_array().is_none_or(|t| t.is_empty());
        (ready && untainted).then_some(())
    })
    .await;
    until("the newcomer to run", || {
        pod(&store, "newcomer").filter(|p| p["status"]["phase"] == "Running")
    })
    .await;
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_pressure_eviction_fails_the_pod_with_evicted() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = SimConfig::new(dir.path().join("data"));
    config.root_ca_configmap = true;
    config.nodes = NodesConfig::with_nodes(1);
    let sim = Sim::start(config).await.expect("sim starts");
    let store = sim.store().clone();
    run_pod(&store, "hungry").await;
    sim.nodes().evict_pod("default", "hungry", None).await.expect("evict");
    let p = until("the pod to fail", || {
        pod(&store, "hungry").filter(|p| p["status"]["phase"] == "Failed")
    })
    .await;
    assert_eq!(p["status"]["reason"], "Evicted");
    assert!(
        p["status"]["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("The node was low on resource: memory.")),
        "{p}"
    );
    assert_eq!(
        condition(&p, "DisruptionTarget").expect("DisruptionTarget")["reason"],
        "TerminationByKubelet"
    );
    assert_eq!(
        p["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"],
        143
    );
    let missing = sim
        .nodes()
        .evict_pod("default", "nobody", None)
        .await
        .expect_err("no such pod");
    assert_eq!(missing.to_string(), "pod default/nobody does not exist");
    sim.shutdown().await;
}
