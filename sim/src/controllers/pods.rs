//! What the workload controllers share about pods (`k8s.io/kubernetes/pkg/controller` and
//! `pkg/api/v1/pod`): ownership, activity, readiness and availability, building a pod from a
//! template, the template hash, and the order in which surplus pods go.

use std::cmp::Ordering;
use std::time::Duration;

use serde_json::{Map, Value, json};

use crate::meta;
use crate::registry::Gvr;
use crate::status::ApiError;
use crate::store::{DeleteOptions, ListOptions, Store, WriteOptions};

pub(crate) fn pods_gvr() -> Gvr {
    Gvr::new("", "v1", "pods")
}

/// Writes as kube-controller-manager (its managedFields entries name it).
pub(crate) fn write_opts() -> WriteOptions {
    WriteOptions {
        field_manager: Some("kube-controller-manager".into()),
        ..Default::default()
    }
}

/// The owner reference with `controller: true` (`metav1.GetControllerOf`).
pub(crate) fn controller_of(obj: &Value) -> Option<&Value> {
    obj.pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)?
        .iter()
        .find(|r| r.get("controller").and_then(Value::as_bool) == Some(true))
}

/// The uid of the object's controller, if any.
pub(crate) fn controller_uid(obj: &Value) -> Option<&str> {
    controller_of(obj).and_then(|r| r.get("uid")).and_then(Value::as_str)
}

/// The name of the object's controller when it is of `kind`.
pub(crate) fn controller_name<'a>(obj: &'a Value, kind: &str) -> Option<&'a str> {
    let r = controller_of(obj)?;
    (r.get("kind").and_then(Value::as_str) == Some(kind))
        .then(|| r.get("name").and_then(Value::as_str))
        .flatten()
}

/// A controller reference to `owner` (`metav1.NewControllerRef`).
pub(crate) fn controller_ref(owner: &Value, api_version: &str, kind: &str) -> Value {
    json!({
        "apiVersion": api_version,
        "kind": kind,
        "name": meta::name(owner),
        "uid": meta::uid(owner),
        "controller": true,
        "blockOwnerDeletion": true,
    })
}

/// The objects of `gvr` in `ns` whose controller is `owner_uid`.
pub(crate) fn owned(store: &Store, gvr: &Gvr, ns: &str, owner_uid: &str) -> Result<Vec<Value>, ApiError> {
    let list = store.list(gvr, Some(ns), &ListOptions::default())?;
    Ok(list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|o| controller_uid(o) == Some(owner_uid))
        .cloned()
        .collect())
}

pub(crate) fn phase(pod: &Value) -> &str {
    pod.pointer("/status/phase").and_then(Value::as_str).unwrap_or("")
}

pub(crate) fn is_terminal(pod: &Value) -> bool {
    matches!(phase(pod), "Succeeded" | "Failed")
}

/// `controller.IsPodActive`: not finished and not being deleted.
pub(crate) fn is_active(pod: &Value) -> bool {
    !is_terminal(pod) && !meta::is_deleting(pod)
}

fn ready_condition(pod: &Value) -> Option<&Value> {
    pod.pointer("/status/conditions")
        .and_then(Value::as_array)?
        .iter()
        .find(|c| c["type"] == "Ready")
}

/// `podutil.IsPodReady`.
pub(crate) fn is_ready(pod: &Value) -> bool {
    ready_condition(pod).is_some_and(|c| c["status"] == "True")
}

/// How long the pod has been ready (zero when not ready).
fn ready_for(pod: &Value, now: jiff::Timestamp) -> Option<Duration> {
    let c = ready_condition(pod).filter(|c| c["status"] == "True")?;
    let since = c
        .get("lastTransitionTime")
        .and_then(Value::as_str)
        .and_then(meta::parse_time)
        .unwrap_or(now);
    Some(Duration::try_from(now.duration_since(since)).unwrap_or(Duration::ZERO))
}

/// `podutil.IsPodAvailable`: ready for at least `min_ready`. The second value is how much
/// longer a ready but not yet available pod needs (to look again then).
pub(crate) fn availability(pod: &Value, min_ready: Duration, now: jiff::Timestamp) -> (bool, Option<Duration>) {
    match ready_for(pod, now) {
        None => (false, None),
        Some(_) if min_ready.is_zero() => (true, None),
        Some(d) if d >= min_ready => (true, None),
        Some(d) => (false, Some(min_ready - d + Duration::from_millis(50))),
    }
}

pub(crate) fn min_ready_seconds(obj: &Value) -> Duration {
    Duration::from_secs(
        obj.pointer("/spec/minReadySeconds")
            .and_then(Value::as_u64)
            .unwrap_or(0),
    )
}

/// The pod a controller creates from its template (`controller.GetPodFromTemplate`): the
/// template's labels, annotations, finalizers and spec, `generateName: <prefix>-` (the apiserver
/// appends five random characters) and the controller reference.
pub(crate) fn pod_from_template(template: &Value, prefix: &str, namespace: &str, owner_ref: Value) -> Value {
    let mut metadata = Map::new();
    for field in ["labels", "annotations", "finalizers"] {
        if let Some(v) = template.pointer(&format!("/metadata/{field}")).filter(|v| !v.is_null()) {
            metadata.insert(field.into(), v.clone());
        }
    }
    metadata.insert("generateName".into(), json!(format!("{prefix}-")));
    metadata.insert("namespace".into(), json!(namespace));
    metadata.insert("ownerReferences".into(), json!([owner_ref]));
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": template.get("spec").cloned().unwrap_or_else(|| json!({})),
    })
}

pub(crate) async fn create_pod(store: &Store, namespace: &str, pod: Value) -> Result<Value, ApiError> {
    Ok(store.create(&pods_gvr(), namespace, pod, &write_opts()).await?.object)
}

/// Deletes a pod (its kubelet then stops it within its grace period); already gone is fine.
pub(crate) async fn delete_pod(store: &Store, pod: &Value) -> Result<(), ApiError> {
    let opts = DeleteOptions {
        precondition_uid: Some(meta::uid(pod).to_string()),
        ..Default::default()
    };
    match store
        .delete(&pods_gvr(), meta::namespace(pod), meta::name(pod), &opts)
        .await
    {
        Ok(_) | Err(ApiError::NotFound(_)) => Ok(()),
        Err(e) => Err(e),
    }
}

/// `controller.ComputeHash`: FNV-32a of the template (and the collision count), written with
/// `rand.SafeEncodeString`'s alphabet — the shape of `pod-template-hash` and
/// `controller-revision-hash` values (`5d4c8b7f9`). Kubernetes hashes the Go struct dump, so the
/// values differ from a real cluster's, but equal templates hash equal.
pub(crate) fn template_hash(template: &Value, collision_count: Option<i64>) -> String {
    let mut h: u32 = 0x811c_9dc5;
    let mut feed = |bytes: &[u8]| {
        for b in bytes {
            h ^= u32::from(*b);
            h = h.wrapping_mul(0x0100_0193);
        }
    };
    feed(canonical(template).as_bytes());
    if let Some(c) = collision_count {
        feed(&c.to_le_bytes());
    }
    const ALPHANUMS: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    h.to_string()
        .bytes()
        .map(|b| ALPHANUMS[usize::from(b) % ALPHANUMS.len()] as char)
        .collect()
}

/// JSON with object keys sorted, so equal values hash equal whatever their key order.
fn canonical(v: &Value) -> String {
    match v {
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            let parts: Vec<String> = keys
                .iter()
                .map(|k| format!("{}:{}", json!(k), canonical(&m[k.as_str()])))
                .collect();
            format!("{{{}}}", parts.join(","))
        }
        Value::Array(a) => format!("[{}]", a.iter().map(canonical).collect::<Vec<_>>().join(",")),
        other => other.to_string(),
    }
}

fn restart_count(pod: &Value) -> i64 {
    pod.pointer("/status/containerStatuses")
        .and_then(Value::as_array)
        .map(|cs| {
            cs.iter()
                .filter_map(|c| c.get("restartCount").and_then(Value::as_i64))
                .max()
                .unwrap_or(0)
        })
        .unwrap_or(0)
}

fn phase_rank(pod: &Value) -> u8 {
    match phase(pod) {
        "Pending" => 0,
        "Unknown" => 1,
        "Running" => 2,
        _ => 3,
    }
}

/// `controller.ActivePods` order: the pod that should go first sorts first — unscheduled before
/// scheduled, Pending before Unknown before Running, not ready before ready, ready for less
/// time before longer, more restarts before fewer, newer before older.
pub(crate) fn deletion_order(a: &Value, b: &Value) -> Ordering {
    let node = |p: &Value| {
        !p.pointer("/spec/nodeName")
            .and_then(Value::as_str)
            .unwrap_or("")
            .is_empty()
    };
    let now = jiff::Timestamp::now();
    let ready_since = |p: &Value| ready_for(p, now);
    let created = |p: &Value| meta::str_field(p, "creationTimestamp").to_string();
    node(a)
        .cmp(&node(b))
        .then_with(|| phase_rank(a).cmp(&phase_rank(b)))
        .then_with(|| is_ready(a).cmp(&is_ready(b)))
        .then_with(|| match (ready_since(a), ready_since(b)) {
            (Some(x), Some(y)) => x.cmp(&y),
            _ => Ordering::Equal,
        })
        .then_with(|| restart_count(b).cmp(&restart_count(a)))
        .then_with(|| created(b).cmp(&created(a)))
}

/// Resolves `maxSurge`/`maxUnavailable` (an int or a percentage) against `total`
/// (`intstrutil.GetScaledValueFromIntOrPercent`).
pub(crate) fn scaled(value: Option<&Value>, total: i64, round_up: bool, default_percent: i64) -> i64 {
    let percent = |p: i64| {
        let scaled = p * total;
        if round_up { (scaled + 99) / 100 } else { scaled / 100 }
    };
    match value {
        Some(Value::Number(n)) => n.as_i64().unwrap_or(0),
        Some(Value::String(s)) => match s.strip_suffix('%').and_then(|p| p.parse::<i64>().ok()) {
            Some(p) => percent(p),
            None => s.parse().unwrap_or(0),
        },
        _ => percent(default_percent),
    }
}

/// A timestamp in the API's form.
pub(crate) fn now_string() -> String {
    meta::now_rfc3339()
}

/// Sets (or replaces) a condition of `type` in `conditions`, keeping `lastTransitionTime` when
/// the status does not change (as the controllers' `SetCondition` helpers do).
pub(crate) fn set_condition(conditions: &mut Vec<Value>, mut cond: Value) {
    let ty = cond["type"].clone();
    if let Some(existing) = conditions.iter_mut().find(|c| c["type"] == ty) {
        if existing["status"] == cond["status"]
            && let Some(t) = existing.get("lastTransitionTime")
        {
            cond["lastTransitionTime"] = t.clone();
        }
        *existing = cond;
    } else {
        conditions.push(cond);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scaled_values_round_as_kubernetes() {
        // 25% of 10: surge rounds up (3), unavailable down (2).
        assert_eq!(scaled(Some(&json!("25%")), 10, true, 25), 3);
        assert_eq!(scaled(Some(&json!("25%")), 10, false, 25), 2);
        assert_eq!(scaled(None, 1, true, 25), 1);
        assert_eq!(scaled(None, 1, false, 25), 0);
        assert_eq!(scaled(Some(&json!(2)), 10, false, 25), 2);
    }

    #[test]
    fn hash_is_stable_and_safe() {
        let a = json!({ "b": 1, "a": [1, { "y": 2, "x": 3 }] });
        let b: Value = serde_json::from_str(r#"{ "a": [1, { "x": 3, "y": 2 }], "b": 1 }"#).unwrap_or_default();
        assert_eq!(template_hash(&a, None), template_hash(&b, None));
        assert_ne!(template_hash(&a, None), template_hash(&a, Some(1)));
        assert!(
            template_hash(&a, None)
                .bytes()
                .all(|c| b"bcdfghjklmnpqrstvwxz2456789".contains(&c))
        );
    }

    #[test]
    fn unready_pods_go_before_ready_ones() {
        let ready = json!({ "metadata": { "creationTimestamp": "2025-01-01T00:00:00Z" }, "spec": { "nodeName": "n" },
            "status": { "phase": "Running", "conditions": [{ "type": "Ready", "status": "True", "lastTransitionTime": "2025-01-01T00:00:01Z" }] } });
        let unready = json!({ "metadata": { "creationTimestamp": "2024-01-01T00:00:00Z" }, "spec": { "nodeName": "n" },
            "status": { "phase": "Running", "conditions": [{ "type": "Ready", "status": "False" }] } });
        let pending =
            json!({ "metadata": { "creationTimestamp": "2024-01-01T00:00:00Z" }, "status": { "phase": "Pending" } });
        let mut pods = vec![ready.clone(), unready.clone(), pending.clone()];
        pods.sort_by(deletion_order);
        assert_eq!(pods, vec![pending, unready, ready]);
    }
}
