//! Node failures: the node lifecycle controller, which notices a node whose kubelet stopped
//! renewing its lease (`NodeCluster::stop_node`), marks it NotReady (conditions Unknown,
//! `node.kubernetes.io/unreachable` taints), marks its pods not ready and, once their
//! toleration of the NoExecute taint runs out, evicts them (DisruptionTarget + delete); and
//! lifts the taints when the kubelet is back.

use std::sync::Weak;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::watch;

use super::Shared;
use super::events::Recorder;
use super::registration::{LEASE_NAMESPACE, leases_gvr, nodes_gvr};
use crate::meta;
use crate::registry::Gvr;
use crate::status::ApiError;
use crate::store::{DeleteOptions, ListOptions, PatchBody, Store, WriteOptions};

const UNREACHABLE: &str = "node.kubernetes.io/unreachable";

fn opts() -> WriteOptions {
    WriteOptions {
        field_manager: Some("node-controller".into()),
        ..Default::default()
    }
}

/// Runs the controller until the cluster stops.
pub(crate) async fn run(shared: Weak<Shared>, mut stop: watch::Receiver<bool>) {
    let Some(s) = shared.upgrade() else { return };
    let period = s.config.lifecycle.monitor_period;
    let recorder = Recorder::new(s.store.clone(), "node-controller", None, true);
    drop(s);
    loop {
        tokio::select! {
            _ = tokio::time::sleep(period) => {}
            _ = stop.changed() => return,
        }
        let Some(s) = shared.upgrade() else { return };
        let nodes = match s.store.list(&nodes_gvr(), None, &ListOptions::default()) {
            Ok(l) => l["items"].as_array().cloned().unwrap_or_default(),
            Err(_) => continue,
        };
        for node in nodes {
            if let Err(e) = monitor(&s.store, &recorder, &node, &s.config.lifecycle).await {
                tracing::warn!(node = %meta::name(&node), error = %e, "node lifecycle controller");
            }
        }
    }
}

fn lease_age(store: &Store, node: &str) -> Option<Duration> {
    let lease = store.get(&leases_gvr(), LEASE_NAMESPACE, node).ok()?;
    let renewed = meta::parse_time(lease.pointer("/spec/renewTime")?.as_str()?)?;
    let age = jiff::Timestamp::now().duration_since(renewed);
    Some(Duration::from_secs_f64(age.as_secs_f64().max(0.0)))
}

fn ready_status(node: &Value) -> &str {
    node.pointer("/status/conditions")
        .and_then(Value::as_array)
        .and_then(|cs| cs.iter().find(|c| c["type"] == "Ready"))
        .and_then(|c| c["status"].as_str())
        .unwrap_or("Unknown")
}

fn taints(node: &Value) -> Vec<Value> {
    node.pointer("/spec/taints")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

async fn monitor(
    store: &Store,
    recorder: &Recorder,
    node: &Value,
    config: &super::config::LifecycleConfig,
) -> Result<(), ApiError> {
    let name = meta::name(node).to_string();
    let stale = lease_age(store, &name).is_none_or(|age| age > config.grace_period);
    let has_taint = taints(node).iter().any(|t| t["key"] == UNREACHABLE);
    if !stale {
        if has_taint && ready_status(node) == "True" {
            let kept: Vec<Value> = taints(node).into_iter().filter(|t| t["key"] != UNREACHABLE).collect();
            let patch = json!({ "spec": { "taints": kept } });
            store
                .patch(&nodes_gvr(), "", &name, &PatchBody::Merge(patch), None, &opts())
                .await?;
        }
        return Ok(());
    }
    if ready_status(node) != "Unknown" {
        let now = meta::now_rfc3339();
        let conditions: Vec<Value> = node
            .pointer("/status/conditions")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(|c| {
                let mut c = c.clone();
                c["status"] = json!("Unknown");
                c["reason"] = json!("NodeStatusUnknown");
                c["message"] = json!("Kubelet stopped posting node status.");
                c["lastTransitionTime"] = json!(now);
                c
            })
            .collect();
        let patch = json!({ "status": { "conditions": conditions } });
        store
            .patch(
                &nodes_gvr(),
                "",
                &name,
                &PatchBody::Merge(patch),
                Some("status"),
                &opts(),
            )
            .await?;
        recorder
            .record(
                node,
                "Node",
                None,
                "Normal",
                "NodeNotReady",
                &format!("Node {name} status is now: NodeNotReady"),
            )
            .await;
        for pod in pods_on(store, &name)? {
            let ready = pod
                .pointer("/status/conditions")
                .and_then(Value::as_array)
                .and_then(|cs| cs.iter().find(|c| c["type"] == "Ready"))
                .is_some_and(|c| c["status"] == "True");
            if ready {
                let cond =
                    json!({ "type": "Ready", "status": "False", "lastProbeTime": null, "lastTransitionTime": now });
                super::pod_status::set_condition(
                    store,
                    meta::namespace(&pod),
                    meta::name(&pod),
                    meta::uid(&pod),
                    cond,
                    "node-controller",
                )
                .await?;
                recorder
                    .record(&pod, "Pod", None, "Warning", "NodeNotReady", "Node is not ready")
                    .await;
            }
        }
    }
    let mut current = taints(node);
    if !has_taint {
        let now = meta::now_rfc3339();
        current.push(json!({ "key": UNREACHABLE, "effect": "NoSchedule", "timeAdded": now }));
        current.push(json!({ "key": UNREACHABLE, "effect": "NoExecute", "timeAdded": now }));
        let patch = json!({ "spec": { "taints": current.clone() } });
        store
            .patch(&nodes_gvr(), "", &name, &PatchBody::Merge(patch), None, &opts())
            .await?;
    }
    let tainted_at = current
        .iter()
        .find(|t| t["key"] == UNREACHABLE && t["effect"] == "NoExecute")
        .and_then(|t| t["timeAdded"].as_str())
        .and_then(meta::parse_time)
        .unwrap_or_else(jiff::Timestamp::now);
    let tainted_for = jiff::Timestamp::now().duration_since(tainted_at).as_secs_f64().max(0.0);
    for pod in pods_on(store, &name)? {
        if meta::is_deleting(&pod) {
            continue;
        }
        // A pod without its own toleration has the one DefaultTolerationSeconds would add.
        let allowed = match super::placement::toleration_for(&pod, UNREACHABLE, "NoExecute") {
            Some(t) => match t.get("tolerationSeconds").and_then(Value::as_i64) {
                Some(secs) => secs.max(0) as f64,
                None => continue,
            },
            None => config.default_toleration.as_secs_f64(),
        };
        if tainted_for >= allowed {
            evict(store, recorder, &pod).await?;
        }
    }
    Ok(())
}

fn pods_on(store: &Store, node: &str) -> Result<Vec<Value>, ApiError> {
    let list = store.list(
        &Gvr::new("", "v1", "pods"),
        None,
        &ListOptions {
            field_selector: Some(format!("spec.nodeName={node}")),
            ..Default::default()
        },
    )?;
    Ok(list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| {
            !matches!(
                p.pointer("/status/phase").and_then(Value::as_str),
                Some("Succeeded" | "Failed")
            )
        })
        .cloned()
        .collect())
}

/// The taint manager's eviction: DisruptionTarget, then a normal (graceful) delete.
async fn evict(store: &Store, recorder: &Recorder, pod: &Value) -> Result<(), ApiError> {
    let (ns, name, uid) = (meta::namespace(pod), meta::name(pod), meta::uid(pod));
    let cond = json!({
        "type": "DisruptionTarget",
        "status": "True",
        "lastProbeTime": null,
        "lastTransitionTime": meta::now_rfc3339(),
        "reason": "DeletionByTaintManager",
        "message": "Taint manager: deleting due to NoExecute taint",
    });
    super::pod_status::set_condition(store, ns, name, uid, cond, "node-controller").await?;
    recorder
        .record(
            pod,
            "Pod",
            None,
            "Normal",
            "TaintManagerEviction",
            &format!("Marking for deletion Pod {ns}/{name}"),
        )
        .await;
    let opts = DeleteOptions {
        precondition_uid: Some(uid.to_string()),
        ..Default::default()
    };
    match store.delete(&Gvr::new("", "v1", "pods"), ns, name, &opts).await {
        Ok(_) | Err(ApiError::NotFound(_)) | Err(ApiError::Conflict { .. }) => Ok(()),
        Err(e) => Err(e),
    }
}
