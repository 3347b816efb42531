//! The Deployment controller (`pkg/controller/deployment`): one ReplicaSet per pod template,
//! named `<deployment>-<pod-template-hash>` with that hash as the `pod-template-hash` label of
//! its selector and pods; rolling updates bounded by `maxSurge`/`maxUnavailable` (defaults
//! 25 %/25 %, surge rounded up, unavailable down, both zero meaning one unavailable) or
//! `Recreate`; `minReadySeconds` through the ReplicaSets' `availableReplicas`;
//! `revisionHistoryLimit` old ReplicaSets kept; `deployment.kubernetes.io/revision`,
//! `desired-replicas` and `max-replicas` annotations; status and the `Available` and
//! `Progressing` conditions with the real reasons and messages, so `kubectl rollout status` works.
//!
//! Not done: proportional scaling of several active ReplicaSets when `spec.replicas` changes in
//! the middle of a rollout (the rollout converges the same, only the interim split differs),
//! adopting orphan ReplicaSets by selector, `kubectl rollout undo` (`spec.rollbackTo`, removed
//! in apps/v1 anyway; kubectl's undo patches the template, which works).

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use super::pods::{self, write_opts};
use super::queue::{self, Key, Reconciler};
use super::replicaset;
use crate::meta;
use crate::registry::{Gvr, ResourceKey};
use crate::status::ApiError;
use crate::store::{Change, DeleteOptions, Store};

const HASH_LABEL: &str = "pod-template-hash";
const REVISION: &str = "deployment.kubernetes.io/revision";
const DESIRED: &str = "deployment.kubernetes.io/desired-replicas";
const MAX_REPLICAS: &str = "deployment.kubernetes.io/max-replicas";
/// `kubectl --record`'s annotation: copied to the ReplicaSet with the other annotations, and
/// to a Deployment that lacks it from its new ReplicaSet (after `kubectl rollout undo`).
const CHANGE_CAUSE: &str = "kubernetes.io/change-cause";

fn gvr() -> Gvr {
    Gvr::new("apps", "v1", "deployments")
}

fn key(resource: &str) -> ResourceKey {
    ResourceKey {
        group: "apps".into(),
        resource: resource.into(),
    }
}

pub(crate) struct Deployments;

impl Reconciler for Deployments {
    const NAME: &'static str = "deployment-controller";

    fn initial_keys(&mut self, objects: &[(ResourceKey, Arc<Value>)]) -> Vec<Key> {
        queue::keys_of(objects, "apps", "deployments", |_| true)
    }

    fn keys_for(&mut self, store: &Store, change: &Change) -> Vec<Key> {
        let obj = &change.object;
        let ns = meta::namespace(obj).to_string();
        match (change.resource.group.as_str(), change.resource.resource.as_str()) {
            ("apps", "deployments") => vec![queue::key_of(obj)],
            ("apps", "replicasets") => queue::controller_key(obj, "Deployment"),
            // Recreate waits for the old pods to be gone.
            ("", "pods") if change.kind == crate::store::ChangeKind::Deleted => {
                pods::controller_name(obj, "ReplicaSet")
                    .and_then(|rs| store.get_stored(&key("replicasets"), &ns, rs))
                    .and_then(|rs| pods::controller_name(&rs, "Deployment").map(str::to_string))
                    .map(|d| vec![(ns, d)])
                    .unwrap_or_default()
            }
            _ => Vec::new(),
        }
    }

    async fn sync(&mut self, store: &Store, key: &Key) -> Result<Option<Duration>, ApiError> {
        let Some(d) = store.get_stored(&self::key("deployments"), &key.0, &key.1) else {
            return Ok(None);
        };
        sync_deployment(store, &d).await
    }
}

fn int_at(obj: &Value, ptr: &str) -> i64 {
    obj.pointer(ptr).and_then(Value::as_i64).unwrap_or(0)
}

fn spec_replicas(obj: &Value) -> i64 {
    obj.pointer("/spec/replicas")
        .and_then(Value::as_i64)
        .unwrap_or(1)
        .max(0)
}

fn revision(rs: &Value) -> i64 {
    rs.pointer("/metadata/annotations")
        .and_then(|a| a.get(REVISION))
        .and_then(Value::as_str)
        .and_then(|r| r.parse().ok())
        .unwrap_or(0)
}

/// The template without the `pod-template-hash` label (`EqualIgnoreHash`).
fn template_without_hash(rs_or_d: &Value) -> Value {
    let mut t = rs_or_d.pointer("/spec/template").cloned().unwrap_or_else(|| json!({}));
    if let Some(labels) = t.pointer_mut("/metadata/labels").and_then(Value::as_object_mut) {
        labels.remove(HASH_LABEL);
        if labels.is_empty()
            && let Some(m) = t.get_mut("metadata").and_then(Value::as_object_mut)
        {
            m.remove("labels");
        }
    }
    t
}

/// `MaxSurge` and `MaxUnavailable` resolved (`ResolveFenceposts`); zero for Recreate.
fn fenceposts(d: &Value) -> (i64, i64) {
    if d.pointer("/spec/strategy/type").and_then(Value::as_str) != Some("RollingUpdate") {
        return (0, 0);
    }
    let replicas = spec_replicas(d);
    let ru = d.pointer("/spec/strategy/rollingUpdate");
    let surge = pods::scaled(ru.and_then(|r| r.get("maxSurge")), replicas, true, 25);
    let mut unavailable = pods::scaled(ru.and_then(|r| r.get("maxUnavailable")), replicas, false, 25);
    if surge == 0 && unavailable == 0 {
        unavailable = 1;
    }
    (surge, unavailable.min(replicas))
}

async fn sync_deployment(store: &Store, d: &Value) -> Result<Option<Duration>, ApiError> {
    let ns = meta::namespace(d);
    let all = pods::owned(store, &replicaset::gvr(), ns, meta::uid(d))?;
    if meta::is_deleting(d) {
        return sync_status(store, d, &all, None, None).await;
    }
    let template = template_without_hash(d);
    let (mut new_rs, mut old): (Vec<Value>, Vec<Value>) =
        all.into_iter().partition(|rs| template_without_hash(rs) == template);
    // Several equal templates cannot normally exist; the oldest is the new one, as FindNewReplicaSet.
    new_rs.sort_by_key(|rs| meta::str_field(rs, "creationTimestamp").to_string());
    if new_rs.len() > 1 {
        old.extend(new_rs.drain(1..));
    }
    let mut new_rs = new_rs.pop();
    old.sort_by_key(|rs| meta::str_field(rs, "creationTimestamp").to_string());
    let max_old_revision = old.iter().map(revision).max().unwrap_or(0);
    let new_revision = max_old_revision + 1;
    let paused = d.pointer("/spec/paused").and_then(Value::as_bool) == Some(true);
    let recreate = d.pointer("/spec/strategy/type").and_then(Value::as_str) == Some("Recreate");
    let mut progress_reason: Option<(&str, String)> = None;

    if let Some(rs) = &new_rs
        && (revision(rs) < new_revision || annotations_stale(d, rs))
        && !paused
    {
        new_rs = Some(update_rs_annotations(store, d, rs, new_revision.max(revision(rs))).await?);
    }
    if paused {
        return sync_status(store, d, &chain(&new_rs, &old), new_rs.as_ref(), None).await;
    }

    if recreate {
        // Scale every old ReplicaSet to zero and wait until their pods are gone.
        let mut scaled_down = false;
        for rs in old.iter_mut() {
            if int_at(rs, "/spec/replicas") != 0 {
                *rs = scale(store, d, rs, 0).await?;
                scaled_down = true;
            }
        }
        let old_pods_running =
            old.iter().any(|rs| int_at(rs, "/status/replicas") > 0) || old_pods_exist(store, ns, &old)?;
        if scaled_down || old_pods_running {
            return sync_status(store, d, &chain(&new_rs, &old), new_rs.as_ref(), None).await;
        }
        if new_rs.is_none() {
            let rs = create_rs(store, d, new_revision, spec_replicas(d)).await?;
            progress_reason = Some((
                "NewReplicaSetCreated",
                format!("Created new replica set \"{}\"", meta::name(&rs)),
            ));
            new_rs = Some(rs);
        }
        if let Some(rs) = &mut new_rs
            && int_at(rs, "/spec/replicas") != spec_replicas(d)
        {
            *rs = scale(store, d, rs, spec_replicas(d)).await?;
        }
    } else {
        let (surge, max_unavailable) = fenceposts(d);
        let replicas = spec_replicas(d);
        if new_rs.is_none() {
            let count = new_rs_replicas(d, &old, None, surge);
            let rs = create_rs(store, d, new_revision, count).await?;
            progress_reason = Some((
                "NewReplicaSetCreated",
                format!("Created new replica set \"{}\"", meta::name(&rs)),
            ));
            new_rs = Some(rs);
        }
        // reconcileNewReplicaSet
        if let Some(rs) = &mut new_rs {
            let current = int_at(rs, "/spec/replicas");
            let target = if current > replicas {
                replicas
            } else {
                new_rs_replicas(d, &old, Some(rs), surge)
            };
            if target != current {
                *rs = scale(store, d, rs, target).await?;
            }
        }
        // reconcileOldReplicaSets
        let old_count: i64 = old.iter().map(|rs| int_at(rs, "/spec/replicas")).sum();
        if old_count > 0
            && let Some(new) = &new_rs
        {
            let all_count = old_count + int_at(new, "/spec/replicas");
            let min_available = replicas - max_unavailable;
            let new_unavailable = int_at(new, "/spec/replicas") - int_at(new, "/status/availableReplicas");
            let mut max_scaled_down = all_count - min_available - new_unavailable;
            if max_scaled_down > 0 {
                // cleanupUnhealthyReplicas: unavailable old pods go first.
                for rs in old.iter_mut() {
                    if max_scaled_down <= 0 {
                        break;
                    }
                    let spec = int_at(rs, "/spec/replicas");
                    let unhealthy = spec - int_at(rs, "/status/availableReplicas");
                    if spec == 0 || unhealthy <= 0 {
                        continue;
                    }
                    let down = unhealthy.min(max_scaled_down);
                    *rs = scale(store, d, rs, spec - down).await?;
                    max_scaled_down -= down;
                }
                // scaleDownOldReplicaSetsForRollingUpdate: then available ones, down to minAvailable.
                // A ReplicaSet just scaled down still reports its old availability: at most
                // its new replica count is counted.
                let available: i64 = chain(&new_rs, &old)
                    .iter()
                    .map(|rs| int_at(rs, "/status/availableReplicas").min(int_at(rs, "/spec/replicas")))
                    .sum();
                let mut to_scale_down = available - min_available;
                for rs in old.iter_mut() {
                    if to_scale_down <= 0 {
                        break;
                    }
                    let spec = int_at(rs, "/spec/replicas");
                    if spec == 0 {
                        continue;
                    }
                    let down = spec.min(to_scale_down);
                    *rs = scale(store, d, rs, spec - down).await?;
                    to_scale_down -= down;
                }
            }
        }
    }
    let all = chain(&new_rs, &old);
    if let Some(new) = &new_rs
        && complete(d, &status_counts(d, &all, Some(new)))
    {
        cleanup(store, d, &old).await?;
    }
    if progress_reason.is_none()
        && let Some(new) = &new_rs
        && !has_condition(d, "Progressing")
    {
        progress_reason = Some((
            "FoundNewReplicaSet",
            format!("Found new replica set \"{}\"", meta::name(new)),
        ));
    }
    sync_status(store, d, &all, new_rs.as_ref(), progress_reason).await
}

fn chain(new_rs: &Option<Value>, old: &[Value]) -> Vec<Value> {
    new_rs.iter().chain(old.iter()).cloned().collect()
}

fn has_condition(d: &Value, ty: &str) -> bool {
    d.pointer("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|cs| cs.iter().any(|c| c["type"] == ty))
}

fn old_pods_exist(store: &Store, ns: &str, old: &[Value]) -> Result<bool, ApiError> {
    let uids: Vec<&str> = old.iter().map(meta::uid).collect();
    let list = store.list(&pods::pods_gvr(), Some(ns), &Default::default())?;
    Ok(list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|p| pods::controller_uid(p).is_some_and(|u| uids.contains(&u)) && !pods::is_terminal(p)))
}

/// `NewRSNewReplicas` for a rolling update.
fn new_rs_replicas(d: &Value, old: &[Value], new_rs: Option<&Value>, surge: i64) -> i64 {
    let replicas = spec_replicas(d);
    let new_current = new_rs.map(|rs| int_at(rs, "/spec/replicas")).unwrap_or(0);
    // Pods an old ReplicaSet has not yet removed count too (its status still has them): the
    // sim's controllers would otherwise outrun each other and exceed the surge for a moment.
    let pods_of = |rs: &Value| int_at(rs, "/spec/replicas").max(int_at(rs, "/status/replicas"));
    let current_total: i64 = old.iter().map(pods_of).sum::<i64>() + new_rs.map(pods_of).unwrap_or(0);
    let max_total = replicas + surge;
    if current_total >= max_total {
        return new_current;
    }
    new_current + (max_total - current_total).min(replicas - new_current).max(0)
}

/// Whether the Deployment's annotations the ReplicaSet carries differ from the Deployment's.
fn annotations_stale(d: &Value, rs: &Value) -> bool {
    let a = |o: &Value, k: &str| o.pointer("/metadata/annotations").and_then(|a| a.get(k)).cloned();
    a(rs, DESIRED) != Some(json!(spec_replicas(d).to_string()))
        || a(rs, MAX_REPLICAS) != Some(json!((spec_replicas(d) + fenceposts(d).0).to_string()))
}

/// The annotations a ReplicaSet gets from its Deployment (`SetNewReplicaSetAnnotations`,
/// `SetReplicasAnnotations`): the Deployment's own (but not kubectl's last-applied), the
/// revision, desired and max replicas.
fn rs_annotations(d: &Value, revision: i64, existing: Option<&Value>) -> Value {
    let mut ann = existing.cloned().unwrap_or_else(|| json!({}));
    if let Some(da) = d.pointer("/metadata/annotations").and_then(Value::as_object) {
        for (k, v) in da {
            if k != "kubectl.kubernetes.io/last-applied-configuration" && k != REVISION {
                ann[k] = v.clone();
            }
        }
    }
    ann[REVISION] = json!(revision.to_string());
    ann[DESIRED] = json!(spec_replicas(d).to_string());
    ann[MAX_REPLICAS] = json!((spec_replicas(d) + fenceposts(d).0).to_string());
    ann
}

async fn create_rs(store: &Store, d: &Value, revision: i64, replicas: i64) -> Result<Value, ApiError> {
    let ns = meta::namespace(d);
    let collision = d.pointer("/status/collisionCount").and_then(Value::as_i64);
    let mut template = d.pointer("/spec/template").cloned().unwrap_or_else(|| json!({}));
    let hash = pods::template_hash(&template, collision);
    if !template["metadata"].is_object() {
        template["metadata"] = json!({});
    }
    if !template["metadata"]["labels"].is_object() {
        template["metadata"]["labels"] = json!({});
    }
    template["metadata"]["labels"][HASH_LABEL] = json!(hash);
    let mut selector = d.pointer("/spec/selector").cloned().unwrap_or_else(|| json!({}));
    if !selector["matchLabels"].is_object() {
        selector["matchLabels"] = json!({});
    }
    selector["matchLabels"][HASH_LABEL] = json!(hash);
    let mut labels = d
        .pointer("/spec/template/metadata/labels")
        .cloned()
        .unwrap_or_else(|| json!({}));
    labels[HASH_LABEL] = json!(hash);
    let name = format!("{}-{hash}", meta::name(d));
    let rs = json!({
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {
            "name": name,
            "namespace": ns,
            "labels": labels,
            "annotations": rs_annotations(d, revision, None),
            "ownerReferences": [pods::controller_ref(d, "apps/v1", "Deployment")],
        },
        "spec": {
            "replicas": replicas,
            "minReadySeconds": d.pointer("/spec/minReadySeconds").cloned().unwrap_or(json!(0)),
            "selector": selector,
            "template": template,
        },
    });
    match store.create(&replicaset::gvr(), ns, rs, &write_opts()).await {
        Ok(w) => Ok(w.object),
        Err(ApiError::AlreadyExists(t)) => {
            // A ReplicaSet of that name with another template (a hash collision, or one left
            // from before): bump collisionCount and try again with another hash.
            let count = collision.unwrap_or(0) + 1;
            let mut obj = d.clone();
            obj["status"]["collisionCount"] = json!(count);
            store
                .update(&gvr(), ns, meta::name(d), obj, Some("status"), &write_opts())
                .await?;
            Err(ApiError::AlreadyExists(t))
        }
        Err(e) => Err(e),
    }
}

async fn update_rs_annotations(store: &Store, d: &Value, rs: &Value, revision: i64) -> Result<Value, ApiError> {
    let mut obj = rs.clone();
    let existing = rs.pointer("/metadata/annotations").cloned();
    obj["metadata"]["annotations"] = rs_annotations(d, revision, existing.as_ref());
    obj["spec"]["minReadySeconds"] = d.pointer("/spec/minReadySeconds").cloned().unwrap_or(json!(0));
    Ok(store
        .update(
            &replicaset::gvr(),
            meta::namespace(rs),
            meta::name(rs),
            obj,
            None,
            &write_opts(),
        )
        .await?
        .object)
}

async fn scale(store: &Store, d: &Value, rs: &Value, replicas: i64) -> Result<Value, ApiError> {
    let mut obj = rs.clone();
    obj["spec"]["replicas"] = json!(replicas);
    let existing = rs.pointer("/metadata/annotations").cloned();
    obj["metadata"]["annotations"] = rs_annotations(d, revision(rs), existing.as_ref());
    Ok(store
        .update(
            &replicaset::gvr(),
            meta::namespace(rs),
            meta::name(rs),
            obj,
            None,
            &write_opts(),
        )
        .await?
        .object)
}

/// `cleanupDeployment`: old ReplicaSets with no replicas beyond `revisionHistoryLimit` go,
/// oldest revision first.
async fn cleanup(store: &Store, d: &Value, old: &[Value]) -> Result<(), ApiError> {
    let limit = d
        .pointer("/spec/revisionHistoryLimit")
        .and_then(Value::as_i64)
        .unwrap_or(10)
        .max(0) as usize;
    let mut idle: Vec<&Value> = old
        .iter()
        .filter(|rs| {
            int_at(rs, "/spec/replicas") == 0
                && int_at(rs, "/status/replicas") == 0
                && meta::generation(rs) <= int_at(rs, "/status/observedGeneration")
                && !meta::is_deleting(rs)
        })
        .collect();
    if idle.len() <= limit {
        return Ok(());
    }
    idle.sort_by_key(|rs| (revision(rs), meta::str_field(rs, "creationTimestamp").to_string()));
    for rs in &idle[..idle.len() - limit] {
        let opts = DeleteOptions {
            precondition_uid: Some(meta::uid(rs).to_string()),
            ..Default::default()
        };
        match store
            .delete(&replicaset::gvr(), meta::namespace(rs), meta::name(rs), &opts)
            .await
        {
            Ok(_) | Err(ApiError::NotFound(_)) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

struct Counts {
    replicas: i64,
    updated: i64,
    ready: i64,
    available: i64,
}

fn status_counts(_d: &Value, all: &[Value], new_rs: Option<&Value>) -> Counts {
    let sum = |ptr: &str| all.iter().map(|rs| int_at(rs, ptr)).sum::<i64>();
    Counts {
        replicas: sum("/status/replicas"),
        updated: new_rs.map(|rs| int_at(rs, "/status/replicas")).unwrap_or(0),
        ready: sum("/status/readyReplicas"),
        available: sum("/status/availableReplicas"),
    }
}

/// `DeploymentComplete`.
fn complete(d: &Value, c: &Counts) -> bool {
    let replicas = spec_replicas(d);
    c.updated == replicas && c.replicas == replicas && c.available == replicas
}

fn condition(ty: &str, status: &str, reason: &str, message: &str, now: &str) -> Value {
    json!({ "type": ty, "status": status, "lastUpdateTime": now, "lastTransitionTime": now, "reason": reason, "message": message })
}

/// `syncRolloutStatus`: counts, `Available`, `Progressing` (and its deadline).
async fn sync_status(
    store: &Store,
    d: &Value,
    all: &[Value],
    new_rs: Option<&Value>,
    progress: Option<(&str, String)>,
) -> Result<Option<Duration>, ApiError> {
    let c = status_counts(d, all, new_rs);
    let replicas = spec_replicas(d);
    let (_, max_unavailable) = fenceposts(d);
    let old = d.get("status").cloned().unwrap_or_else(|| json!({}));
    let mut status = json!({
        "observedGeneration": meta::generation(d),
        "replicas": c.replicas,
        "updatedReplicas": c.updated,
        "readyReplicas": c.ready,
        "availableReplicas": c.available,
        "unavailableReplicas": (replicas - c.available).max(0),
    });
    if let Some(cc) = old.get("collisionCount") {
        status["collisionCount"] = cc.clone();
    }
    let now = pods::now_string();
    let mut conditions: Vec<Value> = old
        .get("conditions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let keep_times = |conditions: &[Value], mut cond: Value| -> Value {
        // An unchanged condition keeps both times; a changed message only moves lastUpdateTime.
        if let Some(e) = conditions.iter().find(|e| e["type"] == cond["type"]) {
            if e["status"] == cond["status"] && e["reason"] == cond["reason"] && e["message"] == cond["message"] {
                return e.clone();
            }
            if e["status"] == cond["status"] {
                cond["lastTransitionTime"] = e["lastTransitionTime"].clone();
            }
        }
        cond
    };
    let available = if c.available >= replicas - max_unavailable {
        condition(
            "Available",
            "True",
            "MinimumReplicasAvailable",
            "Deployment has minimum availability.",
            &now,
        )
    } else {
        condition(
            "Available",
            "False",
            "MinimumReplicasUnavailable",
            "Deployment does not have minimum availability.",
            &now,
        )
    };
    let available = keep_times(&conditions, available);
    pods::set_condition(&mut conditions, available);

    let deadline = d.pointer("/spec/progressDeadlineSeconds").and_then(Value::as_i64);
    let mut again = None;
    let paused = d.pointer("/spec/paused").and_then(Value::as_bool) == Some(true);
    if let Some((reason, message)) = progress {
        let cond = condition("Progressing", "True", reason, &message, &now);
        let cond = keep_times(&conditions, cond);
        pods::set_condition(&mut conditions, cond);
    }
    if let Some(new) = new_rs
        && !paused
        && deadline.is_some()
    {
        let name = meta::name(new);
        let current = conditions.iter().find(|e| e["type"] == "Progressing").cloned();
        let old_int = |k: &str| old.get(k).and_then(Value::as_i64).unwrap_or(0);
        let progressing = c.updated > old_int("updatedReplicas")
            || c.replicas < old_int("replicas")
            || c.ready > old_int("readyReplicas")
            || c.available > old_int("availableReplicas");
        if complete(d, &c) && meta::generation(d) <= int_at(&status, "/observedGeneration") {
            let msg = format!("ReplicaSet \"{name}\" has successfully progressed.");
            let cond = keep_times(
                &conditions,
                condition("Progressing", "True", "NewReplicaSetAvailable", &msg, &now),
            );
            pods::set_condition(&mut conditions, cond);
        } else if progressing {
            let msg = format!("ReplicaSet \"{name}\" is progressing.");
            let mut cond = condition("Progressing", "True", "ReplicaSetUpdated", &msg, &now);
            if let Some(cur) = &current
                && cur["status"] == "True"
            {
                cond["lastTransitionTime"] = cur["lastTransitionTime"].clone();
            }
            pods::set_condition(&mut conditions, cond);
        } else if let (Some(cur), Some(secs)) = (&current, deadline)
            && cur["status"] == "True"
            && cur["reason"] != "NewReplicaSetAvailable"
        {
            // DeploymentTimedOut: no progress for progressDeadlineSeconds since lastUpdateTime.
            let from = cur["lastUpdateTime"].as_str().and_then(meta::parse_time);
            if let Some(from) = from {
                let elapsed = jiff::Timestamp::now().duration_since(from).as_secs_f64();
                if elapsed >= secs as f64 {
                    let msg = format!("ReplicaSet \"{name}\" has timed out progressing.");
                    pods::set_condition(
                        &mut conditions,
                        condition("Progressing", "False", "ProgressDeadlineExceeded", &msg, &now),
                    );
                } else {
                    again = Some(Duration::from_secs_f64(secs as f64 - elapsed + 0.1));
                }
            }
        }
    }
    // The API lists Progressing before Available in a fresh Deployment; keep the order found.
    status["conditions"] = json!(conditions);
    if let Some(m) = status.as_object_mut() {
        m.retain(|k, v| matches!(k.as_str(), "observedGeneration" | "conditions" | "collisionCount") || v != &json!(0));
    }
    let mut obj = d.clone();
    if let Some(new) = new_rs {
        // The Deployment carries its new ReplicaSet's revision (and change cause).
        let rev = revision(new).to_string();
        let annotations = d
            .pointer("/metadata/annotations")
            .and_then(|a| a.get(REVISION))
            .cloned();
        if annotations != Some(json!(rev)) {
            if !obj["metadata"]["annotations"].is_object() {
                obj["metadata"]["annotations"] = json!({});
            }
            obj["metadata"]["annotations"][REVISION] = json!(rev);
            if let Some(cause) = new.pointer("/metadata/annotations").and_then(|a| a.get(CHANGE_CAUSE))
                && d.pointer("/metadata/annotations")
                    .and_then(|a| a.get(CHANGE_CAUSE))
                    .is_none()
            {
                obj["metadata"]["annotations"][CHANGE_CAUSE] = cause.clone();
            }
            obj = store
                .update(&gvr(), meta::namespace(d), meta::name(d), obj, None, &write_opts())
                .await?
                .object;
        }
    }
    if old != status {
        obj["status"] = status;
        store
            .update(
                &gvr(),
                meta::namespace(d),
                meta::name(d),
                obj,
                Some("status"),
                &write_opts(),
            )
            .await?;
    }
    Ok(again)
}
