//! The DaemonSet controller (`pkg/controller/daemon`): one pod per node that should run it —
//! the template's `nodeSelector` and required node affinity match the node, and every
//! `NoSchedule`/`NoExecute` taint is tolerated, counting the tolerations the controller adds to
//! every daemon pod (`node.kubernetes.io/not-ready` and `unreachable` `NoExecute`,
//! `disk-pressure`, `memory-pressure`, `pid-pressure`, `unschedulable` `NoSchedule`, and
//! `network-unavailable` for `hostNetwork` pods). Pods are pinned to their node with a required
//! node affinity on `metadata.name` (as since 1.12) and bound by the scheduler; they carry the
//! `controller-revision-hash` of their template (with a ControllerRevision of that name) and
//! `pod-template-generation`. Updates: `RollingUpdate` with `maxUnavailable` (rounded up;
//! `maxSurge` is treated as 0), or `OnDelete`. Failed daemon pods are deleted and replaced; a pod
//! on a node it may no longer run on (selector, `NoExecute` taint) is deleted; new nodes get one.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use super::pods::{self, write_opts};
use super::queue::{self, Key, Reconciler};
use crate::meta;
use crate::node::placement;
use crate::registry::{Gvr, ResourceKey};
use crate::status::ApiError;
use crate::store::{Change, ChangeKind, ListOptions, Store};

const HASH_LABEL: &str = "controller-revision-hash";
const GENERATION_LABEL: &str = "pod-template-generation";

fn gvr() -> Gvr {
    Gvr::new("apps", "v1", "daemonsets")
}

fn is_ds(k: &ResourceKey) -> bool {
    k.group == "apps" && k.resource == "daemonsets"
}

#[derive(Default)]
pub(crate) struct DaemonSets {
    /// Every DaemonSet, so a node change can queue them all.
    known: HashSet<Key>,
}

impl Reconciler for DaemonSets {
    const NAME: &'static str = "daemonset-controller";

    fn initial_keys(&mut self, objects: &[(ResourceKey, Arc<Value>)]) -> Vec<Key> {
        self.known = objects
            .iter()
            .filter(|(k, _)| is_ds(k))
            .map(|(_, o)| queue::key_of(o))
            .collect();
        self.known.iter().cloned().collect()
    }

    fn keys_for(&mut self, _store: &Store, change: &Change) -> Vec<Key> {
        let obj = &change.object;
        match (change.resource.group.as_str(), change.resource.resource.as_str()) {
            ("apps", "daemonsets") => {
                let k = queue::key_of(obj);
                if change.kind == ChangeKind::Deleted {
                    self.known.remove(&k);
                } else {
                    self.known.insert(k.clone());
                }
                vec![k]
            }
            ("", "pods") => queue::controller_key(obj, "DaemonSet"),
            ("", "nodes") => {
                // Heartbeats change only status timestamps; labels, taints and existence matter.
                let relevant = |o: &Value| (o.pointer("/metadata/labels").cloned(), o.pointer("/spec").cloned());
                if change.kind == ChangeKind::Modified
                    && change.previous.as_deref().map(relevant) == Some(relevant(obj))
                {
                    return Vec::new();
                }
                self.known.iter().cloned().collect()
            }
            _ => Vec::new(),
        }
    }

    async fn sync(&mut self, store: &Store, key: &Key) -> Result<Option<Duration>, ApiError> {
        let rk = ResourceKey {
            group: "apps".into(),
            resource: "daemonsets".into(),
        };
        let Some(ds) = store.get_stored(&rk, &key.0, &key.1) else {
            return Ok(None);
        };
        sync_ds(store, &ds).await
    }
}

/// The tolerations every daemon pod gets (`util.AddOrUpdateDaemonPodTolerations`).
fn add_daemon_tolerations(spec: &mut Value) {
    let mut wanted = vec![
        ("node.kubernetes.io/not-ready", "NoExecute"),
        ("node.kubernetes.io/unreachable", "NoExecute"),
        ("node.kubernetes.io/disk-pressure", "NoSchedule"),
        ("node.kubernetes.io/memory-pressure", "NoSchedule"),
        ("node.kubernetes.io/pid-pressure", "NoSchedule"),
        ("node.kubernetes.io/unschedulable", "NoSchedule"),
    ];
    if spec.get("hostNetwork").and_then(Value::as_bool) == Some(true) {
        wanted.push(("node.kubernetes.io/network-unavailable", "NoSchedule"));
    }
    if !spec["tolerations"].is_array() {
        spec["tolerations"] = json!([]);
    }
    if let Some(list) = spec["tolerations"].as_array_mut() {
        for (key, effect) in wanted {
            let t = json!({ "key": key, "operator": "Exists", "effect": effect });
            if !list.contains(&t) {
                list.push(t);
            }
        }
    }
}

/// `ReplaceDaemonSetPodNodeNameNodeAffinity`: the required node terms become one term naming
/// the node.
fn pin_to_node(spec: &mut Value, node: &str) {
    let term = json!({ "matchFields": [{ "key": "metadata.name", "operator": "In", "values": [node] }] });
    if !spec["affinity"].is_object() {
        spec["affinity"] = json!({});
    }
    if !spec["affinity"]["nodeAffinity"].is_object() {
        spec["affinity"]["nodeAffinity"] = json!({});
    }
    spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] =
        json!({ "nodeSelectorTerms": [term] });
}

/// `NodeShouldRunDaemonPod`: (should run, should continue running).
fn should_run(template_pod: &Value, node: &Value) -> (bool, bool) {
    if !placement::affinity_matches(template_pod, node) {
        return (false, false);
    }
    let no_schedule = placement::untolerated_taint(template_pod, node, &["NoSchedule", "NoExecute"]).is_none();
    let no_execute = placement::untolerated_taint(template_pod, node, &["NoExecute"]).is_none();
    (no_schedule, no_execute)
}

/// The node a daemon pod is for: its `nodeName`, else the node its affinity names.
fn target_node(pod: &Value) -> Option<String> {
    if let Some(n) = pod
        .pointer("/spec/nodeName")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
    {
        return Some(n.to_string());
    }
    pod.pointer("/spec/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution/nodeSelectorTerms")
        .and_then(Value::as_array)?
        .iter()
        .flat_map(|t| t.get("matchFields").and_then(Value::as_array).into_iter().flatten())
        .find(|f| f["key"] == "metadata.name" && f["operator"] == "In")
        .and_then(|f| f.pointer("/values/0"))
        .and_then(Value::as_str)
        .map(str::to_string)
}

fn pod_hash(pod: &Value) -> &str {
    pod.pointer("/metadata/labels")
        .and_then(|l| l.get(HASH_LABEL))
        .and_then(Value::as_str)
        .unwrap_or("")
}

async fn sync_ds(store: &Store, ds: &Value) -> Result<Option<Duration>, ApiError> {
    let ns = meta::namespace(ds);
    let name = meta::name(ds);
    let collision = ds.pointer("/status/collisionCount").and_then(Value::as_i64);
    let template = ds.pointer("/spec/template").cloned().unwrap_or_else(|| json!({}));
    let hash = pods::template_hash(&template, collision);
    ensure_revision(store, ds, &template, &hash).await?;

    let mut base = template.clone();
    if !base["spec"].is_object() {
        base["spec"] = json!({});
    }
    add_daemon_tolerations(&mut base["spec"]);
    let nodes = store.list(&Gvr::new("", "v1", "nodes"), None, &ListOptions::default())?;
    let nodes: Vec<Value> = nodes["items"].as_array().cloned().unwrap_or_default();
    let owned = pods::owned(store, &pods::pods_gvr(), ns, meta::uid(ds))?;
    let mut by_node: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    for p in owned {
        if let Some(n) = target_node(&p) {
            by_node.entry(n).or_default().push(p);
        }
    }
    for pods in by_node.values_mut() {
        pods.sort_by_key(|p| meta::str_field(p, "creationTimestamp").to_string());
    }
    let min_ready = pods::min_ready_seconds(ds);
    let now = jiff::Timestamp::now();
    let available = |p: &Value| pods::availability(p, min_ready, now).0;
    let deleting = meta::is_deleting(ds);
    let mut to_create: Vec<String> = Vec::new();
    let mut to_delete: Vec<Value> = Vec::new();
    let mut run_on: Vec<&str> = Vec::new();
    for node in &nodes {
        let node_name = meta::name(node);
        let (run, keep) = should_run(&base, node);
        if run {
            run_on.push(node_name);
        }
        let pods = by_node.get(node_name).cloned().unwrap_or_default();
        if run && pods.is_empty() {
            to_create.push(node_name.to_string());
        } else if keep {
            let mut running = Vec::new();
            for p in pods.iter().filter(|p| !meta::is_deleting(p)) {
                if pods::phase(p) == "Failed" {
                    to_delete.push(p.clone());
                } else {
                    running.push(p.clone());
                }
            }
            // More than one: all but the oldest go.
            to_delete.extend(running.into_iter().skip(1));
        } else {
            to_delete.extend(pods.iter().filter(|p| !meta::is_deleting(p)).cloned());
        }
    }
    // Pods for nodes that no longer exist.
    let node_names: HashSet<&str> = nodes.iter().map(meta::name).collect();
    for (n, pods) in &by_node {
        if !node_names.contains(n.as_str()) {
            to_delete.extend(pods.iter().filter(|p| !meta::is_deleting(p)).cloned());
        }
    }
    // rollingUpdate (without surge): old pods go while at most maxUnavailable nodes lack an
    // available pod; unavailable old pods go at once.
    let rolling = ds.pointer("/spec/updateStrategy/type").and_then(Value::as_str) != Some("OnDelete");
    if rolling && to_create.is_empty() && to_delete.is_empty() && !deleting {
        let mut max_unavailable = pods::scaled(
            ds.pointer("/spec/updateStrategy/rollingUpdate/maxUnavailable"),
            run_on.len() as i64,
            true,
            0,
        );
        if max_unavailable == 0 {
            max_unavailable = 1;
        }
        let mut unavailable = 0;
        let mut replace_now = Vec::new();
        let mut candidates = Vec::new();
        for node in &run_on {
            let pods: Vec<&Value> = by_node.get(*node).into_iter().flatten().collect();
            if pods.len() != 1 {
                unavailable += 1;
                continue;
            }
            let p = pods[0];
            if pod_hash(p) == hash {
                if !available(p) {
                    unavailable += 1;
                }
            } else if !available(p) {
                replace_now.push(p.clone());
            } else if unavailable < max_unavailable {
                candidates.push(p.clone());
            }
        }
        let room = (max_unavailable - unavailable).max(0) as usize;
        to_delete.extend(replace_now);
        to_delete.extend(candidates.into_iter().take(room));
    }
    if !deleting {
        for node in &to_create {
            let mut t = base.clone();
            pin_to_node(&mut t["spec"], node);
            if !t["metadata"].is_object() {
                t["metadata"] = json!({});
            }
            if !t["metadata"]["labels"].is_object() {
                t["metadata"]["labels"] = json!({});
            }
            t["metadata"]["labels"][HASH_LABEL] = json!(hash);
            t["metadata"]["labels"][GENERATION_LABEL] = json!(meta::generation(ds).to_string());
            let pod = pods::pod_from_template(&t, name, ns, pods::controller_ref(ds, "apps/v1", "DaemonSet"));
            pods::create_pod(store, ns, pod).await?;
        }
        for p in &to_delete {
            pods::delete_pod(store, p).await?;
        }
    }
    // Status, from what is there now.
    let owned = pods::owned(store, &pods::pods_gvr(), ns, meta::uid(ds))?;
    let mut by_node: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    for p in owned.into_iter().filter(|p| !meta::is_deleting(p)) {
        if let Some(n) = target_node(&p) {
            by_node.entry(n).or_default().push(p);
        }
    }
    let (mut desired, mut current, mut misscheduled, mut ready, mut updated, mut avail) = (0, 0, 0, 0, 0, 0);
    let mut again: Option<Duration> = None;
    for node in &nodes {
        let node_name = meta::name(node);
        let run = run_on.contains(&node_name);
        let mut pods = by_node.get(node_name).cloned().unwrap_or_default();
        pods.sort_by_key(|p| meta::str_field(p, "creationTimestamp").to_string());
        if run {
            desired += 1;
        }
        let Some(p) = pods.first() else { continue };
        if !run {
            misscheduled += 1;
            continue;
        }
        current += 1;
        if pods::is_ready(p) {
            ready += 1;
        }
        let (is_available, wait) = pods::availability(p, min_ready, now);
        if is_available {
            avail += 1;
        }
        if let Some(w) = wait {
            again = Some(again.map_or(w, |a| a.min(w)));
        }
        if pod_hash(p) == hash {
            updated += 1;
        }
    }
    let mut status = json!({
        "currentNumberScheduled": current,
        "numberMisscheduled": misscheduled,
        "desiredNumberScheduled": desired,
        "numberReady": ready,
        "observedGeneration": meta::generation(ds),
        "updatedNumberScheduled": updated,
        "numberAvailable": avail,
        "numberUnavailable": desired - avail,
    });
    if let Some(m) = status.as_object_mut() {
        // omitempty fields of DaemonSetStatus.
        for k in ["updatedNumberScheduled", "numberAvailable", "numberUnavailable"] {
            if m.get(k) == Some(&json!(0)) {
                m.remove(k);
            }
        }
    }
    if let Some(c) = ds.pointer("/status/collisionCount") {
        status["collisionCount"] = c.clone();
    }
    if ds.get("status") != Some(&status) {
        let mut obj = ds.clone();
        obj["status"] = status;
        store
            .update(&gvr(), ns, name, obj, Some("status"), &write_opts())
            .await?;
    }
    Ok(again)
}

/// A ControllerRevision `<ds>-<hash>` for the current template (what `kubectl rollout
/// history daemonset` lists), numbered after the newest one.
async fn ensure_revision(store: &Store, ds: &Value, template: &Value, hash: &str) -> Result<(), ApiError> {
    let ns = meta::namespace(ds);
    let name = format!("{}-{hash}", meta::name(ds));
    let rk = ResourceKey {
        group: "apps".into(),
        resource: "controllerrevisions".into(),
    };
    if store.get_stored(&rk, ns, &name).is_some() || meta::is_deleting(ds) {
        return Ok(());
    }
    let gvr = Gvr::new("apps", "v1", "controllerrevisions");
    let newest = pods::owned(store, &gvr, ns, meta::uid(ds))?
        .iter()
        .filter_map(|r| r.get("revision").and_then(Value::as_i64))
        .max()
        .unwrap_or(0);
    let mut labels = template
        .pointer("/metadata/labels")
        .cloned()
        .unwrap_or_else(|| json!({}));
    labels[HASH_LABEL] = json!(hash);
    let mut patch_template = template.clone();
    patch_template["$patch"] = json!("replace");
    let cr = json!({
        "apiVersion": "apps/v1",
        "kind": "ControllerRevision",
        "metadata": {
            "name": name,
            "namespace": ns,
            "labels": labels,
            "ownerReferences": [pods::controller_ref(ds, "apps/v1", "DaemonSet")],
        },
        "data": { "spec": { "template": patch_template } },
        "revision": newest + 1,
    });
    match store.create(&gvr, ns, cr, &write_opts()).await {
        Ok(_) | Err(ApiError::AlreadyExists(_)) => Ok(()),
        Err(e) => Err(e),
    }
}
