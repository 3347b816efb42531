//! The scheduler: taints and tolerations, node affinity, resources, and the real
//! `PodScheduled=False, Unschedulable` condition for a pod that fits nowhere.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::time::Duration;

use kube_sim::node::{NodeSpec, NodesConfig};
use kube_sim::registry::Gvr;
use kube_sim::store::{PatchBody, Store, WriteOptions};
use kube_sim::{Sim, SimConfig};
use serde_json::{Value, json};

fn pods() -> Gvr {
    Gvr::new("", "v1", "pods")
}

async fn start(nodes: Vec<NodeSpec>) -> (Sim, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = SimConfig::new(dir.path().join("data"));
    config.root_ca_configmap = true;
    config.nodes = NodesConfig {
        nodes,
        ..NodesConfig::default()
    };
    let sim = Sim::start(config).await.expect("sim starts");
    (sim, dir)
}

/// Polls `f` every 20 ms for up to 20 s; fails the test with `what` if it never returns Some.
async fn until<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    for _ in 0..1000 {
        if let Some(v) = f() {
            return v;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("timed out waiting for {what}");
}

fn pod(name: &str, spec_extra: Value) -> Value {
    let mut spec = json!({ "containers": [{ "name": "main", "image": "busybox:1.36" }] });
    if let (Value::Object(s), Value::Object(extra)) = (&mut spec, spec_extra) {
        s.extend(extra);
    }
    json!({ "apiVersion": "v1", "kind": "Pod", "metadata": { "name": name }, "spec": spec })
}

async fn create(store: &Store, p: Value) {
    store
        .create(&pods(), "default", p, &WriteOptions::default())
        .await
        .expect("pod is created");
}

fn get(store: &Store, name: &str) -> Value {
    store.get(&pods(), "default", name).expect("pod exists")
}

fn condition(p: &Value, type_: &str) -> Option<Value> {
    p.pointer("/status/conditions")?
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
        .cloned()
}

async fn running_on(store: &Store, name: &str) -> String {
    until(&format!("pod {name} running"), || {
        let p = get(store, name);
        (p["status"]["phase"] == "Running").then(|| p["spec"]["nodeName"].as_str().unwrap_or("").to_string())
    })
    .await
}

async fn unschedulable_message(store: &Store, name: &str) -> String {
    until(&format!("pod {name} marked unschedulable"), || {
        let c = condition(&get(store, name), "PodScheduled")?;
        (c["status"] == "False").then(|| {
            assert_eq!(c["reason"], "Unschedulable", "{c}");
            c["message"].as_str().unwrap_or("").to_string()
        })
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn taints_affinity_resources_and_unschedulable() {
    let (sim, _dir) = start(vec![
        NodeSpec::new("sim-node-1").taint("dedicated", "spark", "NoSchedule"),
        NodeSpec::new("sim-node-2").label("disk", "ssd"),
        NodeSpec::new("sim-node-3").capacity("2", "4Gi", 110),
    ])
    .await;
    let store = sim.store().clone();

    // Nodes registered as a kubelet registers them.
    let node = store
        .get(&Gvr::new("", "v1", "nodes"), "", "sim-node-2")
        .expect("node registered");
    assert_eq!(node["metadata"]["labels"]["kubernetes.io/hostname"], "sim-node-2");
    assert_eq!(node["status"]["allocatable"]["pods"], "110");
    let ready = condition(&node, "Ready").expect("Ready condition");
    assert_eq!(
        (ready["status"].as_str(), ready["reason"].as_str()),
        (Some("True"), Some("KubeletReady"))
    );
    store
        .get(
            &Gvr::new("coordination.k8s.io", "v1", "leases"),
            "kube-node-lease",
            "sim-node-2",
        )
        .expect("node lease");

    // A toleration lets a pod onto the tainted node.
    create(
        &store,
        pod(
            "tolerates",
            json!({
                "nodeSelector": { "kubernetes.io/hostname": "sim-node-1" },
                "tolerations": [{ "key": "dedicated", "operator": "Equal", "value": "spark", "effect": "NoSchedule" }]
            }),
        ),
    )
    .await;
    assert_eq!(running_on(&store, "tolerates").await, "sim-node-1");

    // Without it, that node is out and the selector rules out the others.
    create(
        &store,
        pod(
            "intolerant",
            json!({ "nodeSelector": { "kubernetes.io/hostname": "sim-node-1" } }),
        ),
    )
    .await;
    assert_eq!(
        unschedulable_message(&store, "intolerant").await,
        "0/3 nodes are available: 1 node(s) had untolerated taint {dedicated: spark}, 2 node(s) didn't match Pod's node affinity/selector. preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling."
    );
    // The Event is recorded after the pod's condition, as the scheduler's event broadcaster does.
    let failed = until("a FailedScheduling event", || {
        let events = store
            .list(&Gvr::new("", "v1", "events"), Some("default"), &Default::default())
            .ok()?;
        events["items"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|e| e["reason"] == "FailedScheduling" && e["involvedObject"]["name"] == "intolerant")
            .cloned()
    })
    .await;
    assert_eq!(failed["type"], "Warning");
    assert_eq!(failed["source"]["component"], "default-scheduler");

    // Required node affinity.
    create(
        &store,
        pod(
            "wants-ssd",
            json!({ "affinity": { "nodeAffinity": { "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{ "matchExpressions": [{ "key": "disk", "operator": "In", "values": ["ssd"] }] }]
            } } } }),
        ),
    )
    .await;
    assert_eq!(running_on(&store, "wants-ssd").await, "sim-node-2");
    let p = get(&store, "wants-ssd");
    assert_eq!(condition(&p, "PodScheduled").expect("PodScheduled")["status"], "True");
    assert_eq!(condition(&p, "Ready").expect("Ready")["status"], "True");
    // The pod's address is in its node's /24 of the cluster CIDR, hostIP is the node's address.
    let node = sim
        .store()
        .get(&Gvr::new("", "v1", "nodes"), "", "sim-node-2")
        .expect("node");
    let pod_cidr: kube_sim::network::Ipv4Cidr = node["spec"]["podCIDR"].as_str().unwrap().parse().unwrap();
    assert!(sim.network().addresses().pod_range.contains(pod_cidr.base()), "{node}");
    let ip: std::net::Ipv4Addr = p["status"]["podIP"].as_str().unwrap().parse().unwrap();
    assert!(pod_cidr.contains(ip), "{p}");
    assert_eq!(p["status"]["hostIP"], node["status"]["addresses"][0]["address"], "{p}");

    // Requests against allocatable: 3 CPUs fit on the 8-CPU node, not on the 2-CPU one.
    let big = |name: &str, cpu: &str| {
        pod(
            name,
            json!({ "containers": [{ "name": "main", "image": "busybox:1.36", "resources": { "requests": { "cpu": cpu } } }] }),
        )
    };
    create(&store, big("fits", "3")).await;
    assert_eq!(running_on(&store, "fits").await, "sim-node-2");
    create(&store, big("too-big", "7")).await;
    assert_eq!(
        unschedulable_message(&store, "too-big").await,
        "0/3 nodes are available: 1 node(s) had untolerated taint {dedicated: spark}, 2 Insufficient cpu. preemption: 0/3 nodes are available: 1 Preemption is not helpful for scheduling, 2 No preemption victims found for incoming pod."
    );

    // Freeing resources lets the waiting pod in: the scheduler retries on cluster changes.
    store
        .delete(&pods(), "default", "fits", &Default::default())
        .await
        .expect("delete");
    assert_eq!(running_on(&store, "too-big").await, "sim-node-2");

    // Lifting the taint lets the intolerant pod onto node 1.
    store
        .patch(
            &Gvr::new("", "v1", "nodes"),
            "",
            "sim-node-1",
            &PatchBody::Merge(json!({ "spec": { "taints": null } })),
            None,
            &WriteOptions::default(),
        )
        .await
        .expect("untaint");
    assert_eq!(running_on(&store, "intolerant").await, "sim-node-1");
    sim.shutdown().await;
}

/// With a store that keeps almost no history, the node controllers fall behind the change
/// feed and relist (as an informer does after a 410): every pod still runs to completion.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn controllers_relist_when_they_fall_behind_the_history() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = SimConfig::new(dir.path().join("data"));
    config.root_ca_configmap = true;
    config.store.history_limit = 3;
    config.nodes = NodesConfig::with_nodes(2);
    let sim = Sim::start(config).await.expect("sim starts");
    let store = sim.store().clone();
    let names: Vec<String> = (0..30).map(|i| format!("batch-{i}")).collect();
    for name in &names {
        let mut p = pod(name, json!({ "restartPolicy": "Never" }));
        p["metadata"]["annotations"] = json!({ "sim.spark-operator.dev/run-time": "10ms" });
        create(&store, p).await;
    }
    for name in &names {
        until(&format!("pod {name} to succeed"), || {
            (get(&store, name)["status"]["phase"] == "Succeeded").then_some(())
        })
        .await;
    }
    sim.shutdown().await;
}
