//! The workload controllers against a sim with nodes: Deployments (rolling updates within
//! maxSurge/maxUnavailable, Recreate, scaling, `kubectl rollout status` and `kubectl logs
//! deployment/x`), DaemonSets (one pod per eligible node, each pod's hostPath in its own node's
//! directory, a new node gets one), Jobs (completion, backoffLimit, activeDeadlineSeconds, TTL
//! deletion) and EndpointSlices.
#![allow(clippy::expect_used, clippy::unwrap_used)] // a panic in a test is a failed assertion

mod common;

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use kube_sim::node::{LocalImage, NodeSpec, NodesConfig};
use kube_sim::registry::Gvr;
use kube_sim::store::{ListOptions, PatchBody, Store, WriteOptions};
use kube_sim::{Sim, SimConfig};
use serde_json::{Value, json};

const SCRIPT: &str = "sim.spark-operator.dev/";

fn deployments() -> Gvr {
    Gvr::new("apps", "v1", "deployments")
}
fn replicasets() -> Gvr {
    Gvr::new("apps", "v1", "replicasets")
}
fn daemonsets() -> Gvr {
    Gvr::new("apps", "v1", "daemonsets")
}
fn jobs() -> Gvr {
    Gvr::new("batch", "v1", "jobs")
}
fn pods() -> Gvr {
    Gvr::new("", "v1", "pods")
}

fn opts() -> WriteOptions {
    WriteOptions {
        field_manager: Some("test".into()),
        ..Default::default()
    }
}

async fn start(nodes: usize, tune: impl FnOnce(&mut SimConfig)) -> (Sim, tempfile::TempDir) {
    common::start_sim(|c| {
        c.nodes = NodesConfig::with_nodes(nodes);
        // Pods mount it through their ServiceAccount token volume, as on a real cluster.
        c.root_ca_configmap = true;
        tune(c);
    })
    .await
}

/// The object once `pred` holds (polled every 50 ms, at most `secs`).
async fn until(store: &Store, gvr: &Gvr, name: &str, secs: u64, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
    loop {
        let got = store.get(gvr, "default", name);
        if let Ok(o) = &got
            && pred(o)
        {
            return o.clone();
        }
        if tokio::time::Instant::now() > deadline {
            panic!(
                "timed out waiting for {} {name} to be {what}; last: {got:#?}",
                gvr.resource
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn list(store: &Store, gvr: &Gvr, selector: &str) -> Vec<Value> {
    let l = store
        .list(
            gvr,
            Some("default"),
            &ListOptions {
                label_selector: Some(selector.to_string()),
                ..Default::default()
            },
        )
        .unwrap();
    l["items"].as_array().cloned().unwrap_or_default()
}

fn deployment(name: &str, replicas: i64, strategy: Value) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": { "name": name },
        "spec": {
            "replicas": replicas,
            "strategy": strategy,
            "selector": { "matchLabels": { "app": name } },
            "template": {
                "metadata": { "labels": { "app": name }, "annotations": { format!("{SCRIPT}log"): format!("hello from {name}") } },
                "spec": { "terminationGracePeriodSeconds": 1, "containers": [{ "name": "main", "image": "example.com/web:1", "env": [{ "name": "V", "value": "1" }] }] },
            },
        },
    })
}

fn rolled_out(d: &Value, revision: &str) -> bool {
    let replicas = d["spec"]["replicas"].as_i64().unwrap_or(1);
    let n = |k: &str| d["status"][k].as_i64().unwrap_or(0);
    d["metadata"]["generation"] == d["status"]["observedGeneration"]
        && n("updatedReplicas") == replicas
        && n("replicas") == replicas
        && n("availableReplicas") == replicas
        && d["metadata"]["annotations"]["deployment.kubernetes.io/revision"] == revision
        && d["status"]["conditions"].as_array().is_some_and(|cs| {
            cs.iter()
                .any(|c| c["type"] == "Progressing" && c["reason"] == "NewReplicaSetAvailable")
        })
}

fn is_ready(p: &Value) -> bool {
    p["status"]["conditions"]
        .as_array()
        .is_some_and(|cs| cs.iter().any(|c| c["type"] == "Ready" && c["status"] == "True"))
}

/// The app's pods and the store's resourceVersion, read together (the test runtime has one
/// thread: nothing commits between the two reads).
fn pods_now(store: &Store, app: &str) -> (u64, HashMap<String, Value>) {
    let pods = list(store, &pods(), &format!("app={app}"))
        .into_iter()
        .map(|p| (p["metadata"]["name"].as_str().unwrap().to_string(), p))
        .collect();
    (store.current_rv(), pods)
}

/// Replays the changes of the app's pods from `start` to now and returns the largest number of
/// pods not being deleted and the smallest number of those that were ready, at any commit.
async fn pod_bounds(store: &Store, start: (u64, HashMap<String, Value>), app: &str) -> (usize, usize) {
    let (from_rv, mut state) = start;
    let end = store.current_rv();
    let mut feed = store.changes(from_rv);
    let (mut max_total, mut min_ready) = (0, usize::MAX);
    // Nothing changed: nothing to replay.
    if from_rv >= end {
        return (state.len(), state.values().filter(|p| is_ready(p)).count());
    }
    loop {
        let change = common::within("a change", feed.next()).await.unwrap();
        if change.resource.resource == "pods" && change.object["metadata"]["labels"]["app"] == app {
            let name = change.object["metadata"]["name"].as_str().unwrap().to_string();
            match change.kind {
                kube_sim::store::ChangeKind::Deleted => {
                    state.remove(&name);
                }
                _ => {
                    state.insert(name, (*change.object).clone());
                }
            }
            let live: Vec<&Value> = state
                .values()
                .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
                .collect();
            if std::env::var_os("WORKLOADS_TRACE").is_some() {
                eprintln!(
                    "{} {:?} {} live={} ready={}",
                    change.rv,
                    change.kind,
                    change.object["metadata"]["name"],
                    live.len(),
                    live.iter().filter(|p| is_ready(p)).count()
                );
            }
            max_total = max_total.max(live.len());
            min_ready = min_ready.min(live.iter().filter(|p| is_ready(p)).count());
        }
        if change.rv >= end {
            break;
        }
    }
    (max_total, min_ready)
}

#[tokio::test]
async fn a_deployment_makes_a_replicaset_and_pods_and_rolls_within_its_bounds() {
    let (sim, _dir) = start(2, |_| {}).await;
    let store = sim.store();
    let strategy = json!({ "type": "RollingUpdate", "rollingUpdate": { "maxSurge": 1, "maxUnavailable": 1 } });
    store
        .create(&deployments(), "default", deployment("web", 4, strategy), &opts())
        .await
        .unwrap();
    let d = until(store, &deployments(), "web", 60, "rolled out", |d| rolled_out(d, "1")).await;
    assert_eq!(d["status"]["readyReplicas"], 4);
    let available = d["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Available")
        .cloned()
        .unwrap();
    assert_eq!(
        (available["status"].clone(), available["reason"].clone()),
        (json!("True"), json!("MinimumReplicasAvailable"))
    );

    // The ReplicaSet: <deployment>-<pod-template-hash>, owned, annotated.
    let rss = list(store, &replicasets(), "app=web");
    assert_eq!(rss.len(), 1);
    let rs = &rss[0];
    let hash = rs["metadata"]["labels"]["pod-template-hash"].as_str().unwrap();
    assert_eq!(rs["metadata"]["name"], format!("web-{hash}"));
    assert_eq!(rs["spec"]["selector"]["matchLabels"]["pod-template-hash"], hash);
    assert_eq!(rs["metadata"]["ownerReferences"][0]["kind"], "Deployment");
    assert_eq!(rs["metadata"]["ownerReferences"][0]["controller"], true);
    assert_eq!(rs["metadata"]["annotations"]["deployment.kubernetes.io/revision"], "1");
    assert_eq!(rs["status"]["availableReplicas"], 4);
    assert_eq!(rs["status"]["fullyLabeledReplicas"], 4);
    assert_eq!(rs["status"]["observedGeneration"], 1);
    let ps = list(store, &pods(), "app=web");
    assert_eq!(ps.len(), 4);
    for p in &ps {
        let name = p["metadata"]["name"].as_str().unwrap();
        let suffix = name.strip_prefix(&format!("web-{hash}-")).unwrap();
        assert_eq!(suffix.len(), 5, "{name}");
        assert_eq!(p["metadata"]["labels"]["pod-template-hash"], hash);
        assert_eq!(p["metadata"]["ownerReferences"][0]["name"], rs["metadata"]["name"]);
        assert_eq!(p["metadata"]["ownerReferences"][0]["controller"], true);
    }

    // A rolling update (an env change): never more than 4+1 pods, never fewer than 4-1 ready.
    let from = pods_now(store, "web");
    store
        .patch(
            &deployments(),
            "default",
            "web",
            &PatchBody::Strategic(json!({ "spec": { "template": { "spec": { "containers": [{ "name": "main", "env": [{ "name": "V", "value": "2" }] }] } } } })),
            None,
            &opts(),
        )
        .await
        .unwrap();
    let d = until(store, &deployments(), "web", 90, "rolled out again", |d| {
        rolled_out(d, "2")
    })
    .await;
    assert_eq!(d["status"]["observedGeneration"], 2);
    let (max_total, min_ready) = pod_bounds(store, from, "web").await;
    assert!(max_total <= 5, "{max_total} pods at once, maxSurge 1 allows 5");
    assert!(
        min_ready >= 3,
        "only {min_ready} ready pods at a moment, maxUnavailable 1 requires 3"
    );
    assert!(
        max_total == 5 || min_ready == 3,
        "the rollout used neither its surge nor its unavailability"
    );
    let rss = list(store, &replicasets(), "app=web");
    assert_eq!(rss.len(), 2, "the old ReplicaSet is kept (revisionHistoryLimit 10)");
    let old = rss
        .iter()
        .find(|r| r["metadata"]["annotations"]["deployment.kubernetes.io/revision"] == "1")
        .unwrap();
    assert_eq!(old["spec"]["replicas"], 0);
    let ps = until(store, &deployments(), "web", 30, "without old pods", |_| {
        list(store, &pods(), "app=web")
            .iter()
            .all(|p| p["metadata"]["deletionTimestamp"].is_null())
    })
    .await;
    drop(ps);
    for p in list(store, &pods(), "app=web") {
        assert_eq!(p["spec"]["containers"][0]["env"][0]["value"], "2");
    }

    // The same check catches a rollout that takes every pod down: Recreate.
    let from = pods_now(store, "web");
    store
        .patch(
            &deployments(),
            "default",
            "web",
            &PatchBody::Merge(
                json!({ "spec": { "strategy": { "type": "Recreate", "rollingUpdate": null },
                "template": { "metadata": { "annotations": { "v": "3" } } } } }),
            ),
            None,
            &opts(),
        )
        .await
        .unwrap();
    let d = until(store, &deployments(), "web", 90, "recreated", |d| rolled_out(d, "3")).await;
    assert_eq!(d["spec"]["strategy"]["type"], "Recreate");
    let (_, min_ready) = pod_bounds(store, from, "web").await;
    assert_eq!(min_ready, 0, "Recreate stops every old pod before it starts new ones");

    // revisionHistoryLimit 1: only one old ReplicaSet is kept.
    store
        .patch(
            &deployments(),
            "default",
            "web",
            &PatchBody::Merge(json!({ "spec": { "revisionHistoryLimit": 1 } })),
            None,
            &opts(),
        )
        .await
        .unwrap();
    until(store, &deployments(), "web", 30, "with one old ReplicaSet", |_| {
        list(store, &replicasets(), "app=web").len() == 2
    })
    .await;
    sim.shutdown().await;
}

#[tokio::test]
async fn scaling_down_removes_unscheduled_pods_first_and_lost_pods_are_replaced() {
    // One node with room for two pods: the third stays Pending.
    let (sim, _dir) = start(0, |c| {
        c.nodes.nodes = vec![NodeSpec::new("small").capacity("4", "8Gi", 2)];
    })
    .await;
    let store = sim.store();
    store
        .create(&deployments(), "default", deployment("scale", 3, json!({})), &opts())
        .await
        .unwrap();
    until(store, &deployments(), "scale", 60, "two ready", |d| {
        d["status"]["readyReplicas"] == 2
    })
    .await;
    let ps = list(store, &pods(), "app=scale");
    assert_eq!(ps.len(), 3);
    let pending: Vec<&Value> = ps.iter().filter(|p| p["spec"]["nodeName"].is_null()).collect();
    assert_eq!(pending.len(), 1);
    let pending_name = pending[0]["metadata"]["name"].as_str().unwrap().to_string();
    store
        .patch(
            &deployments(),
            "default",
            "scale",
            &PatchBody::Merge(json!({ "spec": { "replicas": 2 } })),
            None,
            &opts(),
        )
        .await
        .unwrap();
    let d = until(store, &deployments(), "scale", 60, "scaled to 2", |d| {
        rolled_out(d, "1")
    })
    .await;
    assert_eq!(d["status"]["replicas"], 2);
    let names: Vec<String> = list(store, &pods(), "app=scale")
        .iter()
        .map(|p| p["metadata"]["name"].as_str().unwrap().to_string())
        .collect();
    assert!(!names.contains(&pending_name), "the pending pod went first: {names:?}");
    assert_eq!(names.len(), 2);

    // A pod that goes is replaced.
    let victim = names[0].clone();
    store
        .delete(&pods(), "default", &victim, &Default::default())
        .await
        .unwrap();
    until(store, &deployments(), "scale", 60, "whole again", |d| {
        let live: Vec<Value> = list(store, &pods(), "app=scale")
            .into_iter()
            .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
            .collect();
        d["status"]["availableReplicas"] == 2
            && live.len() == 2
            && live.iter().all(|p| p["metadata"]["name"] != victim.as_str())
    })
    .await;
    sim.shutdown().await;
}

fn kubectl_on_path() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join("kubectl"))
        .find(|p| p.is_file())
}

async fn kubectl(bin: &PathBuf, sim: &Sim, home: &std::path::Path, args: &[&str]) -> (bool, String) {
    let out = tokio::time::timeout(
        Duration::from_secs(90),
        tokio::process::Command::new(bin)
            .arg("--kubeconfig")
            .arg(sim.kubeconfig_path())
            .arg("--cache-dir")
            .arg(home.join("cache"))
            .args(args)
            .env("HOME", home)
            .env_remove("KUBECONFIG")
            .stdin(std::process::Stdio::null())
            .output(),
    )
    .await
    .expect("kubectl ends")
    .expect("kubectl runs");
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

#[tokio::test]
async fn kubectl_rollout_status_and_logs_follow_a_deployment() {
    let Some(bin) = kubectl_on_path() else {
        println!("SKIPPED: kubectl is not on PATH");
        return;
    };
    let (sim, dir) = start(2, |_| {}).await;
    let home = dir.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    sim.store()
        .create(&deployments(), "default", deployment("app", 2, json!({})), &opts())
        .await
        .unwrap();
    let (ok, out) = kubectl(
        &bin,
        &sim,
        &home,
        &["rollout", "status", "deployment/app", "--timeout=60s"],
    )
    .await;
    assert!(ok, "{out}");
    assert!(out.contains("deployment \"app\" successfully rolled out"), "{out}");
    let (ok, out) = kubectl(&bin, &sim, &home, &["logs", "deployment/app"]).await;
    assert!(ok, "{out}");
    assert!(out.contains("hello from app"), "{out}");
    // An image change rolls out again, and rollout status waits for it.
    let (ok, out) = kubectl(
        &bin,
        &sim,
        &home,
        &["set", "image", "deployment/app", "main=example.com/web:2"],
    )
    .await;
    assert!(ok, "{out}");
    let (ok, out) = kubectl(
        &bin,
        &sim,
        &home,
        &["rollout", "status", "deployment/app", "--timeout=60s"],
    )
    .await;
    assert!(ok, "{out}");
    assert!(out.contains("successfully rolled out"), "{out}");
    let d = sim.store().get(&deployments(), "default", "app").unwrap();
    assert!(rolled_out(&d, "2"), "{d:#}");
    let (ok, out) = kubectl(&bin, &sim, &home, &["get", "rs", "-l", "app=app"]).await;
    assert!(ok && out.lines().count() == 3, "{out}");
    let (ok, out) = kubectl(&bin, &sim, &home, &["rollout", "history", "deployment/app"]).await;
    assert!(ok, "{out}");
    sim.shutdown().await;
}

// ---------------------------------------------------------------------------------------------
// DaemonSets

/// The machine-wide lock for tests that start real processes (see `tests/process_pods.rs`).
fn machine_lock() -> std::fs::File {
    let f = std::fs::File::create(std::env::temp_dir().join("kube-sim-process-pods.lock")).unwrap();
    f.lock().unwrap();
    f
}

const DS_IMAGE: &str = "example.com/tools/node-agent:1.0";

/// The first line a pod's shell wrote to `file`, once it is whole. The shell's `>` creates
/// the file empty before `echo` writes, so the file existing is not enough.
async fn written_line(file: &std::path::Path) -> String {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let text = std::fs::read_to_string(file).unwrap_or_default();
        if text.ends_with('\n') || tokio::time::Instant::now() >= deadline {
            return text.trim().to_string();
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_daemonset_runs_one_process_pod_per_node_with_its_own_host_path() {
    if let Err(reason) = kube_sim::node::sandbox::supported() {
        println!("SKIPPED: {reason}");
        return;
    }
    let _lock = machine_lock();
    let dir = tempfile::tempdir().unwrap();
    let entry = dir.path().join("agent.sh");
    std::fs::write(
        &entry,
        "#!/bin/sh\necho \"$NODE_NAME\" > /host/node.txt\necho written\nexec sleep 3600\n",
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(&entry, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut config = SimConfig::new(dir.path().join("data"));
    config.root_ca_configmap = true;
    config.nodes = NodesConfig::with_nodes(3);
    config
        .nodes
        .nodes
        .push(NodeSpec::new("tainted").taint("dedicated", "gpu", "NoSchedule"));
    config.nodes.kubelet.local_images = vec![LocalImage::new(DS_IMAGE, &entry)];
    let sim = Sim::start(config).await.unwrap();
    let store = sim.store();
    let ds = json!({
        "apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": { "name": "agent" },
        "spec": {
            "selector": { "matchLabels": { "app": "agent" } },
            "template": {
                "metadata": { "labels": { "app": "agent" } },
                "spec": {
                    "terminationGracePeriodSeconds": 1,
                    "containers": [{
                        "name": "agent", "image": DS_IMAGE,
                        "env": [{ "name": "NODE_NAME", "valueFrom": { "fieldRef": { "fieldPath": "spec.nodeName" } } }],
                        "volumeMounts": [{ "name": "host", "mountPath": "/host" }],
                    }],
                    "volumes": [{ "name": "host", "hostPath": { "path": "/var/lib/agent", "type": "DirectoryOrCreate" } }],
                },
            },
        },
    });
    store.create(&daemonsets(), "default", ds, &opts()).await.unwrap();
    let ds = until(store, &daemonsets(), "agent", 60, "available on 3 nodes", |d| {
        d["status"]["numberAvailable"] == 3 && d["status"]["desiredNumberScheduled"] == 3
    })
    .await;
    assert_eq!(ds["status"]["currentNumberScheduled"], 3);
    assert_eq!(ds["status"]["updatedNumberScheduled"], 3);
    assert_eq!(ds["status"]["numberReady"], 3);
    assert_eq!(ds["status"]["observedGeneration"], 1);
    let ps = list(store, &pods(), "app=agent");
    assert_eq!(ps.len(), 3, "no pod on the tainted node");
    let mut nodes: Vec<String> = Vec::new();
    for p in &ps {
        let node = p["spec"]["nodeName"].as_str().unwrap().to_string();
        assert_ne!(node, "tainted");
        let term = &p["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
            [0];
        assert_eq!(
            term["matchFields"],
            json!([{ "key": "metadata.name", "operator": "In", "values": [node] }])
        );
        let tolerations = p["spec"]["tolerations"].as_array().unwrap();
        for key in [
            "node.kubernetes.io/not-ready",
            "node.kubernetes.io/unreachable",
            "node.kubernetes.io/unschedulable",
        ] {
            assert!(tolerations.iter().any(|t| t["key"] == key), "{key} in {tolerations:?}");
        }
        assert!(
            !p["metadata"]["labels"]["controller-revision-hash"]
                .as_str()
                .unwrap()
                .is_empty()
        );
        nodes.push(node);
    }
    nodes.sort();
    assert_eq!(nodes, ["sim-node-1", "sim-node-2", "sim-node-3"]);
    // Each pod wrote its own node's name into its own node's directory.
    for node in &nodes {
        let root = sim.nodes().node(node).unwrap().root_dir().to_path_buf();
        let file = root.join("var/lib/agent/node.txt");
        assert_eq!(written_line(&file).await, node.as_str(), "{}", file.display());
    }

    // A new node gets a pod.
    sim.nodes().add_node(NodeSpec::new("late")).await.unwrap();
    until(store, &daemonsets(), "agent", 60, "on the new node", |d| {
        d["status"]["numberAvailable"] == 4
    })
    .await;
    assert!(
        list(store, &pods(), "app=agent")
            .iter()
            .any(|p| p["spec"]["nodeName"] == "late")
    );
    let late = sim
        .nodes()
        .node("late")
        .unwrap()
        .root_dir()
        .join("var/lib/agent/node.txt");
    assert_eq!(written_line(&late).await, "late");
    sim.shutdown().await;
}

#[tokio::test]
async fn a_daemonset_rolls_one_node_at_a_time_or_waits_for_deletion_with_on_delete() {
    let (sim, _dir) = start(3, |_| {}).await;
    let store = sim.store();
    let ds = |name: &str, strategy: Value| {
        json!({
            "apiVersion": "apps/v1", "kind": "DaemonSet",
            "metadata": { "name": name },
            "spec": {
                "updateStrategy": strategy,
                "selector": { "matchLabels": { "app": name } },
                "template": { "metadata": { "labels": { "app": name } },
                    "spec": { "terminationGracePeriodSeconds": 1, "containers": [{ "name": "c", "image": "example.com/a:1" }] } },
            },
        })
    };
    store
        .create(&daemonsets(), "default", ds("roll", json!({})), &opts())
        .await
        .unwrap();
    store
        .create(
            &daemonsets(),
            "default",
            ds("manual", json!({ "type": "OnDelete" })),
            &opts(),
        )
        .await
        .unwrap();
    for name in ["roll", "manual"] {
        until(store, &daemonsets(), name, 60, "available", |d| {
            d["status"]["numberAvailable"] == 3
        })
        .await;
    }
    let from = pods_now(store, "roll");
    let bump = PatchBody::Strategic(
        json!({ "spec": { "template": { "spec": { "containers": [{ "name": "c", "image": "example.com/a:2" }] } } } }),
    );
    for name in ["roll", "manual"] {
        store
            .patch(&daemonsets(), "default", name, &bump, None, &opts())
            .await
            .unwrap();
    }
    let d = until(store, &daemonsets(), "roll", 90, "updated", |d| {
        d["status"]["updatedNumberScheduled"] == 3
            && d["status"]["numberAvailable"] == 3
            && d["status"]["observedGeneration"] == 2
    })
    .await;
    assert_eq!(d["status"]["desiredNumberScheduled"], 3);
    let (_, min_ready) = pod_bounds(store, from, "roll").await;
    assert!(
        min_ready >= 2,
        "maxUnavailable 1 on 3 nodes, but only {min_ready} were ready"
    );
    // OnDelete: nothing changes until a pod is deleted.
    let manual = store.get(&daemonsets(), "default", "manual").unwrap();
    assert_eq!(manual["status"]["observedGeneration"], 2);
    assert!(
        manual["status"]["updatedNumberScheduled"].as_i64().unwrap_or(0) == 0,
        "{manual:#}"
    );
    let victim = list(store, &pods(), "app=manual")[0]["metadata"]["name"]
        .as_str()
        .unwrap()
        .to_string();
    store
        .delete(&pods(), "default", &victim, &Default::default())
        .await
        .unwrap();
    until(store, &daemonsets(), "manual", 60, "one updated", |d| {
        d["status"]["updatedNumberScheduled"] == 1 && d["status"]["numberAvailable"] == 3
    })
    .await;
    let revisions = list(store, &Gvr::new("apps", "v1", "controllerrevisions"), "app=roll");
    assert_eq!(revisions.len(), 2, "{revisions:#?}");
    sim.shutdown().await;
}

// ---------------------------------------------------------------------------------------------
// Jobs

fn job(name: &str, spec: Value, script: &[(&str, &str)]) -> Value {
    let annotations: serde_json::Map<String, Value> =
        script.iter().map(|(k, v)| (format!("{SCRIPT}{k}"), json!(v))).collect();
    let mut j = json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": { "name": name },
        "spec": {
            "template": {
                "metadata": { "annotations": annotations },
                "spec": { "restartPolicy": "Never", "terminationGracePeriodSeconds": 1, "containers": [{ "name": "main", "image": "example.com/job:1" }] },
            },
        },
    });
    if let (Some(s), Value::Object(extra)) = (j["spec"].as_object_mut(), spec) {
        s.extend(extra);
    }
    j
}

fn conditions(j: &Value) -> Vec<(String, String, String)> {
    j["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| {
            (
                c["type"].as_str().unwrap_or("").to_string(),
                c["status"].as_str().unwrap_or("").to_string(),
                c["reason"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

fn has(j: &Value, ty: &str) -> bool {
    conditions(j).iter().any(|(t, s, _)| t == ty && s == "True")
}

#[tokio::test]
async fn jobs_complete_fail_on_backoff_limit_and_deadline_and_go_after_their_ttl() {
    let (sim, _dir) = start(2, |_| {}).await;
    let store = sim.store();
    store
        .create(
            &jobs(),
            "default",
            job(
                "ok",
                json!({ "completions": 2, "parallelism": 1 }),
                &[("run-time", "200ms")],
            ),
            &opts(),
        )
        .await
        .unwrap();
    store
        .create(
            &jobs(),
            "default",
            job(
                "bad",
                json!({ "backoffLimit": 1 }),
                &[("run-time", "100ms"), ("exit-code", "1")],
            ),
            &opts(),
        )
        .await
        .unwrap();
    store
        .create(
            &jobs(),
            "default",
            job("slow", json!({ "activeDeadlineSeconds": 1 }), &[]),
            &opts(),
        )
        .await
        .unwrap();

    let ok = until(store, &jobs(), "ok", 60, "complete", |j| has(j, "Complete")).await;
    assert_eq!(
        conditions(&ok),
        vec![
            ("SuccessCriteriaMet".into(), "True".into(), "CompletionsReached".into()),
            ("Complete".into(), "True".into(), "CompletionsReached".into()),
        ]
    );
    assert_eq!(ok["status"]["succeeded"], 2);
    assert!(ok["status"]["failed"].is_null());
    assert!(ok["status"]["active"].is_null());
    assert_eq!(ok["status"]["ready"], 0);
    assert!(ok["status"]["startTime"].is_string() && ok["status"]["completionTime"].is_string());
    let uid = ok["metadata"]["uid"].as_str().unwrap();
    assert_eq!(
        ok["spec"]["selector"]["matchLabels"]["batch.kubernetes.io/controller-uid"],
        uid
    );
    let ps = list(store, &pods(), &format!("batch.kubernetes.io/controller-uid={uid}"));
    assert_eq!(ps.len(), 2);
    for p in &ps {
        assert_eq!(p["metadata"]["labels"]["batch.kubernetes.io/job-name"], "ok");
        assert_eq!(p["metadata"]["labels"]["job-name"], "ok");
        assert_eq!(p["metadata"]["labels"]["controller-uid"], uid);
        assert_eq!(p["status"]["phase"], "Succeeded");
        assert!(
            p["metadata"]["finalizers"].as_array().is_none_or(|f| f.is_empty()),
            "{p:#}"
        );
        assert!(p["metadata"]["name"].as_str().unwrap().starts_with("ok-"));
    }

    let slow = until(store, &jobs(), "slow", 60, "failed", |j| has(j, "Failed")).await;
    assert_eq!(
        conditions(&slow),
        vec![
            ("FailureTarget".into(), "True".into(), "DeadlineExceeded".into()),
            ("Failed".into(), "True".into(), "DeadlineExceeded".into()),
        ]
    );
    assert_eq!(slow["status"]["failed"], 1);
    assert!(slow["status"]["completionTime"].is_null());

    // Two failures (the second after the 10 s pod failure backoff) exceed backoffLimit 1.
    let bad = until(store, &jobs(), "bad", 90, "failed", |j| has(j, "Failed")).await;
    assert_eq!(
        conditions(&bad),
        vec![
            ("FailureTarget".into(), "True".into(), "BackoffLimitExceeded".into()),
            ("Failed".into(), "True".into(), "BackoffLimitExceeded".into()),
        ]
    );
    assert_eq!(bad["status"]["failed"], 2);
    let message = bad["status"]["conditions"][1]["message"].as_str().unwrap();
    assert_eq!(message, "Job has reached the specified backoff limit");

    // ttlSecondsAfterFinished: the finished Job goes, and its pods with it.
    store
        .patch(
            &jobs(),
            "default",
            "ok",
            &PatchBody::Merge(json!({ "spec": { "ttlSecondsAfterFinished": 1 } })),
            None,
            &opts(),
        )
        .await
        .unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while store.get(&jobs(), "default", "ok").is_ok() || !list(store, &pods(), "job-name=ok").is_empty() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the Job or its pods were never deleted"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Without a TTL a finished Job stays.
    assert!(store.get(&jobs(), "default", "bad").is_ok());
    sim.shutdown().await;
}

// ---------------------------------------------------------------------------------------------
// EndpointSlices

#[tokio::test]
async fn a_service_gets_endpoint_slices_of_its_pods() {
    let (sim, _dir) = start(1, |_| {}).await;
    let store = sim.store();
    let mut d = deployment("api", 2, json!({}));
    d["spec"]["template"]["spec"]["containers"][0]["ports"] = json!([{ "name": "http", "containerPort": 8080 }]);
    store.create(&deployments(), "default", d, &opts()).await.unwrap();
    store
        .create(
            &Gvr::new("", "v1", "services"),
            "default",
            json!({ "apiVersion": "v1", "kind": "Service", "metadata": { "name": "api", "labels": { "tier": "web" } },
                "spec": { "selector": { "app": "api" }, "ports": [{ "name": "web", "port": 80, "targetPort": "http" }] } }),
            &opts(),
        )
        .await
        .unwrap();
    until(store, &deployments(), "api", 60, "rolled out", |d| rolled_out(d, "1")).await;
    let slices = Gvr::new("discovery.k8s.io", "v1", "endpointslices");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let slice = loop {
        let got = list(store, &slices, "kubernetes.io/service-name=api");
        if let [s] = got.as_slice()
            && s["endpoints"].as_array().is_some_and(|e| e.len() == 2)
            && s["endpoints"]
                .as_array()
                .unwrap()
                .iter()
                .all(|e| e["conditions"]["ready"] == true)
        {
            break s.clone();
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no slice with two ready endpoints: {got:#?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(slice["metadata"]["name"].as_str().unwrap().starts_with("api-"));
    assert_eq!(slice["addressType"], "IPv4");
    assert_eq!(
        slice["metadata"]["labels"]["endpointslice.kubernetes.io/managed-by"],
        "endpointslice-controller.k8s.io"
    );
    assert_eq!(slice["metadata"]["labels"]["tier"], "web");
    assert_eq!(slice["metadata"]["ownerReferences"][0]["kind"], "Service");
    assert_eq!(
        slice["ports"],
        json!([{ "name": "web", "port": 8080, "protocol": "TCP" }])
    );
    let e = &slice["endpoints"][0];
    assert_eq!(e["targetRef"]["kind"], "Pod");
    assert_eq!(e["nodeName"], "sim-node-1");
    assert_eq!(
        e["conditions"],
        json!({ "ready": true, "serving": true, "terminating": false })
    );
    // Served over HTTP and in discovery.
    let (code, body) = common::raw_get(&sim, "/apis/discovery.k8s.io/v1/namespaces/default/endpointslices").await;
    assert_eq!(code, 200);
    assert_eq!(body["kind"], "EndpointSliceList");
    let (code, body) = common::raw_get(&sim, "/apis/discovery.k8s.io/v1").await;
    assert_eq!(code, 200, "{body}");
    assert!(
        body["resources"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["name"] == "endpointslices")
    );
    // Scaled to zero: the slice stays, empty.
    store
        .patch(
            &deployments(),
            "default",
            "api",
            &PatchBody::Merge(json!({ "spec": { "replicas": 0 } })),
            None,
            &opts(),
        )
        .await
        .unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let got = list(store, &slices, "kubernetes.io/service-name=api");
        if got.len() == 1 && got[0]["endpoints"].as_array().is_none_or(|e| e.is_empty()) {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "slice never emptied: {got:#?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    sim.shutdown().await;
}
