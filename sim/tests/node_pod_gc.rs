//! `--pod-gc instant`: a pod is deleted from the API the moment it finishes, while the node's
//! runtime still lists its exited container (and keeps its log) until container GC.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::time::Duration;

use kube_sim::node::{NodesConfig, PodGc};
use kube_sim::registry::Gvr;
use kube_sim::store::{ChangeKind, WriteOptions};
use kube_sim::{Sim, SimConfig};
use serde_json::{Value, json};
use spark_operator_proto::cri::v1 as cri;
use spark_operator_proto::unix::connect_runtime_service;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instant_gc_deletes_finished_pods_but_the_runtime_keeps_the_container() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = SimConfig::new(dir.path().join("data"));
    config.root_ca_configmap = true;
    config.nodes = NodesConfig::with_nodes(1);
    config.nodes.pod_gc = "instant".parse::<PodGc>().expect("flag value");
    let sim = Sim::start(config).await.expect("sim starts");
    let store = sim.store().clone();
    let (rv, _) = store.snapshot();
    let mut feed = store.changes(rv);

    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": { "name": "short", "annotations": {
            "sim.spark-operator.dev/run-time": "100ms",
            "sim.spark-operator.dev/exit-code": "7",
            "sim.spark-operator.dev/log": "about to fail"
        } },
        "spec": { "restartPolicy": "Never", "containers": [{ "name": "main", "image": "busybox:1.36" }] }
    });
    store
        .create(&Gvr::new("", "v1", "pods"), "default", pod, &WriteOptions::default())
        .await
        .expect("create");

    // The pod's last states, from the feed: it reached Failed, then it was deleted.
    let mut finished: Option<(Value, std::time::Instant)> = None;
    let mut changes_after_finish = 0;
    let deleted = tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            let change = feed.next().await.expect("feed");
            if change.resource.resource != "pods" || change.object["metadata"]["name"] != "short" {
                continue;
            }
            if change.kind == ChangeKind::Deleted {
                return (Value::clone(&change.object), std::time::Instant::now());
            }
            if finished.is_some() {
                changes_after_finish += 1;
            } else if change.object["status"]["phase"] == "Failed" {
                finished = Some((Value::clone(&change.object), std::time::Instant::now()));
            }
        }
    })
    .await
    .expect("the finished pod is deleted");
    let (finished, finished_seen) = finished.expect("the pod reached Failed before it was deleted");
    let (deleted, deleted_seen) = deleted;
    println!(
        "finished pod deleted {:?} after its Failed status was stored",
        deleted_seen.duration_since(finished_seen)
    );
    // The GC acts on the first terminal status: the next thing that happens to the pod is its deletion.
    assert_eq!(
        changes_after_finish, 0,
        "the pod changed again before the GC deleted it"
    );
    let term = &finished["status"]["containerStatuses"][0]["state"]["terminated"];
    assert_eq!(
        (term["exitCode"].as_i64(), term["reason"].as_str()),
        (Some(7), Some("Error"))
    );
    assert_eq!(deleted["status"]["phase"], "Failed", "the GC deleted it as it finished");
    assert!(
        store.get(&Gvr::new("", "v1", "pods"), "default", "short").is_err(),
        "gone from the API"
    );

    // The runtime still has the exited container, as a real node does until container GC.
    let node = sim.nodes().node("sim-node-1").expect("node");
    let mut client = connect_runtime_service(node.cri_socket()).await.expect("connect");
    let containers = client
        .list_containers(cri::ListContainersRequest { filter: None })
        .await
        .expect("list")
        .into_inner()
        .containers;
    let c = containers
        .iter()
        .find(|c| c.labels.get("io.kubernetes.pod.name").map(String::as_str) == Some("short"))
        .expect("the exited container is still listed");
    assert_eq!(c.state, cri::ContainerState::ContainerExited as i32);
    let status = client
        .container_status(cri::ContainerStatusRequest {
            container_id: c.id.clone(),
            verbose: false,
        })
        .await
        .expect("status")
        .into_inner()
        .status
        .expect("status");
    assert_eq!((status.exit_code, status.reason.as_str()), (7, "Error"));
    // The runtime reports the node's own path; the node's `/` is its root directory in the sim.
    let on_node = node.root_dir().join(status.log_path.trim_start_matches('/'));
    let log = std::fs::read_to_string(on_node).expect("its log is still on the node");
    assert!(log.contains(" stdout F about to fail"), "{log}");
    sim.shutdown().await;
}
