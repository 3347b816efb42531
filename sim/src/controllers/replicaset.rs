//! The ReplicaSet controller (`pkg/controller/replicaset`): keeps `spec.replicas` active pods
//! (not finished, not being deleted) owned by each ReplicaSet — failed pods are replaced —
//! deletes surplus pods in `ActivePods` order (unscheduled, pending, not ready first), and writes
//! `status` (`replicas`, `fullyLabeledReplicas`, `readyReplicas`, `availableReplicas`,
//! `observedGeneration`). Pods are not adopted or released by label (only controller references
//! count).

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use super::pods::{self, write_opts};
use super::queue::{self, Key, Reconciler};
use crate::meta;
use crate::registry::{Gvr, ResourceKey};
use crate::status::ApiError;
use crate::store::{Change, Store};

pub(crate) fn gvr() -> Gvr {
    Gvr::new("apps", "v1", "replicasets")
}

pub(crate) struct ReplicaSets;

impl Reconciler for ReplicaSets {
    const NAME: &'static str = "replicaset-controller";

    fn initial_keys(&mut self, objects: &[(ResourceKey, Arc<Value>)]) -> Vec<Key> {
        queue::keys_of(objects, "apps", "replicasets", |_| true)
    }

    fn keys_for(&mut self, _store: &Store, change: &Change) -> Vec<Key> {
        match (change.resource.group.as_str(), change.resource.resource.as_str()) {
            ("apps", "replicasets") => vec![queue::key_of(&change.object)],
            ("", "pods") => queue::controller_key(&change.object, "ReplicaSet"),
            _ => Vec::new(),
        }
    }

    async fn sync(&mut self, store: &Store, key: &Key) -> Result<Option<Duration>, ApiError> {
        let (ns, name) = key;
        let rs_key = ResourceKey {
            group: "apps".into(),
            resource: "replicasets".into(),
        };
        let Some(rs) = store.get_stored(&rs_key, ns, name) else {
            return Ok(None);
        };
        let owned = pods::owned(store, &pods::pods_gvr(), ns, meta::uid(&rs))?;
        let mut active: Vec<Value> = owned.iter().filter(|p| pods::is_active(p)).cloned().collect();
        let want = rs.pointer("/spec/replicas").and_then(Value::as_i64).unwrap_or(1).max(0) as usize;
        if !meta::is_deleting(&rs) {
            if active.len() < want {
                let template = rs.pointer("/spec/template").cloned().unwrap_or_else(|| json!({}));
                let owner = pods::controller_ref(&rs, "apps/v1", "ReplicaSet");
                for _ in active.len()..want {
                    let pod = pods::pod_from_template(&template, name, ns, owner.clone());
                    active.push(pods::create_pod(store, ns, pod).await?);
                }
            } else if active.len() > want {
                active.sort_by(pods::deletion_order);
                let surplus: Vec<Value> = active.drain(..active.len() - want).collect();
                for pod in &surplus {
                    pods::delete_pod(store, pod).await?;
                }
            }
        }
        let (status, again) = status_for(&rs, &active);
        write_status(store, &rs, status).await?;
        Ok(again)
    }
}

/// The status of `rs` with these active pods, and when to look again for availability.
fn status_for(rs: &Value, active: &[Value]) -> (Value, Option<Duration>) {
    let template_labels = rs
        .pointer("/spec/template/metadata/labels")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    let min_ready = pods::min_ready_seconds(rs);
    let now = jiff::Timestamp::now();
    let (mut labeled, mut ready, mut available) = (0, 0, 0);
    let mut again: Option<Duration> = None;
    for p in active {
        let labels = p.pointer("/metadata/labels").and_then(Value::as_object);
        if template_labels
            .iter()
            .all(|(k, v)| labels.and_then(|l| l.get(k)) == Some(v))
        {
            labeled += 1;
        }
        if pods::is_ready(p) {
            ready += 1;
        }
        let (is_available, wait) = pods::availability(p, min_ready, now);
        if is_available {
            available += 1;
        }
        if let Some(w) = wait {
            again = Some(again.map_or(w, |a| a.min(w)));
        }
    }
    let mut status = rs.get("status").cloned().unwrap_or_else(|| json!({}));
    status["replicas"] = json!(active.len());
    status["fullyLabeledReplicas"] = json!(labeled);
    status["readyReplicas"] = json!(ready);
    status["availableReplicas"] = json!(available);
    status["observedGeneration"] = json!(meta::generation(rs));
    // The apiserver omits zero counts (omitempty), as do real ReplicaSets.
    if let Some(m) = status.as_object_mut() {
        m.retain(|k, v| k == "replicas" || v != &json!(0));
    }
    (status, again)
}

async fn write_status(store: &Store, rs: &Value, status: Value) -> Result<(), ApiError> {
    if rs.get("status") == Some(&status) {
        return Ok(());
    }
    let mut obj = rs.clone();
    obj["status"] = status;
    store
        .update(
            &gvr(),
            meta::namespace(rs),
            meta::name(rs),
            obj,
            Some("status"),
            &write_opts(),
        )
        .await
        .map(|_| ())
}
