//! The pod status the kubelet reports (phase by the kubelet's `getPhase`, conditions, IPs,
//! container statuses) and how it is written: read, merge with what others own, update with
//! optimistic concurrency, as the kubelet's status manager does.

use serde_json::{Map, Value, json};

use super::hub::pods_key;
use crate::registry::Gvr;
use crate::status::ApiError;
use crate::store::{DeleteOptions, Store, WriteOptions};

/// A finished container run.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct TermInfo {
    pub exit_code: i32,
    pub reason: String,
    pub message: Option<String>,
    pub started_at: String,
    pub finished_at: String,
    pub container_id: Option<String>,
}

/// A container's state as the API shows it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum CState {
    Waiting { reason: String, message: Option<String> },
    Running { started_at: String },
    Terminated(TermInfo),
}

impl CState {
    pub fn waiting(reason: &str, message: Option<String>) -> Self {
        CState::Waiting {
            reason: reason.into(),
            message,
        }
    }

    fn to_json(&self) -> Value {
        match self {
            CState::Waiting { reason, message } => {
                let mut w = json!({ "reason": reason });
                if let Some(m) = message {
                    w["message"] = json!(m);
                }
                json!({ "waiting": w })
            }
            CState::Running { started_at } => json!({ "running": { "startedAt": started_at } }),
            CState::Terminated(t) => json!({ "terminated": term_json(t) }),
        }
    }
}

fn term_json(t: &TermInfo) -> Value {
    let mut v =
        json!({ "exitCode": t.exit_code, "reason": t.reason, "startedAt": t.started_at, "finishedAt": t.finished_at });
    if let Some(m) = t.message.as_ref().filter(|m| !m.is_empty()) {
        v["message"] = json!(m);
    }
    if let Some(id) = &t.container_id {
        v["containerID"] = json!(format!("containerd://{id}"));
    }
    v
}

/// What a container status needs.
pub(crate) struct ContainerView<'a> {
    pub name: &'a str,
    pub image: &'a str,
    pub state: &'a CState,
    pub last: Option<&'a TermInfo>,
    pub restart_count: u32,
    pub ready: bool,
    pub started: bool,
    pub container_id: Option<&'a str>,
    pub image_ref: Option<String>,
}

pub(crate) fn container_status(c: &ContainerView<'_>) -> Value {
    let created = c.container_id.is_some();
    let mut v = json!({
        "name": c.name,
        "state": c.state.to_json(),
        "lastState": c.last.map(|t| json!({ "terminated": term_json(t) })).unwrap_or_else(|| json!({})),
        "ready": c.ready,
        "restartCount": c.restart_count,
        "image": if created { super::runtime::normalize_image(c.image) } else { c.image.to_string() },
        "imageID": c.image_ref.clone().unwrap_or_default(),
        "started": c.started,
    });
    if let Some(id) = c.container_id {
        v["containerID"] = json!(format!("containerd://{id}"));
    }
    v
}

/// The counts `getPhase` works from.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct PhaseCounts {
    pub pending_init: usize,
    pub failed_init: usize,
    pub running: usize,
    pub waiting: usize,
    pub stopped: usize,
    pub succeeded: usize,
}

/// The kubelet's `getPhase` (1.27+, where a pod being torn down ends Succeeded or Failed).
pub(crate) fn phase(c: PhaseCounts, restart_policy: &str, pod_is_terminal: bool) -> &'static str {
    if c.failed_init > 0 && restart_policy == "Never" {
        return "Failed";
    }
    if c.pending_init > 0 || c.waiting > 0 {
        return "Pending";
    }
    if c.running > 0 {
        return "Running";
    }
    if c.stopped > 0 {
        if pod_is_terminal && restart_policy == "Always" {
            return if c.stopped == c.succeeded {
                "Succeeded"
            } else {
                "Failed"
            };
        }
        if restart_policy == "Always" {
            return "Running";
        }
        if c.stopped == c.succeeded {
            return "Succeeded";
        }
        if restart_policy == "Never" || pod_is_terminal {
            return "Failed";
        }
        return "Running";
    }
    "Pending"
}

/// One condition the kubelet owns, with when it last changed.
#[derive(Debug, Clone)]
pub(crate) struct Cond {
    pub type_: &'static str,
    pub status: bool,
    pub reason: Option<String>,
    pub message: Option<String>,
    pub since: String,
}

impl Cond {
    pub fn to_json(&self) -> Value {
        let mut v = json!({
            "type": self.type_,
            "status": if self.status { "True" } else { "False" },
            "lastProbeTime": null,
            "lastTransitionTime": self.since,
        });
        if let Some(r) = &self.reason {
            v["reason"] = json!(r);
        }
        if let Some(m) = &self.message {
            v["message"] = json!(m);
        }
        v
    }
}

/// The condition types the kubelet writes; everything else (PodScheduled, DisruptionTarget,
/// readiness gates) belongs to others and is kept as it is.
pub(crate) const KUBELET_CONDITIONS: &[&str] =
    &["PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady"];

/// What happened to a status write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Written {
    Yes,
    /// The pod (this uid) is no longer in the API.
    Gone,
}

fn pods_gvr() -> Gvr {
    Gvr::new("", "v1", "pods")
}

/// Writes the kubelet's part of a pod's status (`fields` holds the kubelet's status fields;
/// its `conditions` hold only kubelet-owned types). Absent `reason`/`message` are removed.
pub(crate) async fn write(
    store: &Store,
    ns: &str,
    name: &str,
    uid: &str,
    fields: &Map<String, Value>,
    manager: &str,
) -> Result<Written, ApiError> {
    write_with(store, ns, name, uid, manager, |status| {
        let theirs: Vec<Value> = status
            .get("conditions")
            .and_then(Value::as_array)
            .map(|cs| {
                cs.iter()
                    .filter(|c| !KUBELET_CONDITIONS.contains(&c.get("type").and_then(Value::as_str).unwrap_or("")))
                    .cloned()
                    .collect()
            })
            .unwrap_or_default();
        for f in ["reason", "message"] {
            status.remove(f);
        }
        for (k, v) in fields {
            status.insert(k.clone(), v.clone());
        }
        let mut conds = fields
            .get("conditions")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        conds.extend(theirs);
        status.insert("conditions".into(), Value::Array(conds));
    })
    .await
}

/// Sets (or replaces) one condition owned by a controller (scheduler, node lifecycle).
pub(crate) async fn set_condition(
    store: &Store,
    ns: &str,
    name: &str,
    uid: &str,
    cond: Value,
    manager: &str,
) -> Result<Written, ApiError> {
    let type_ = cond.get("type").and_then(Value::as_str).unwrap_or("").to_string();
    write_with(store, ns, name, uid, manager, move |status| {
        let conds = status.entry("conditions").or_insert_with(|| json!([]));
        if let Value::Array(list) = conds {
            match list
                .iter_mut()
                .find(|c| c.get("type").and_then(Value::as_str) == Some(type_.as_str()))
            {
                Some(existing) => {
                    let mut next = cond.clone();
                    // The transition time only moves when the status does.
                    if existing.get("status") == cond.get("status")
                        && let Some(t) = existing.get("lastTransitionTime")
                    {
                        next["lastTransitionTime"] = t.clone();
                    }
                    *existing = next;
                }
                None => list.push(cond.clone()),
            }
        }
    })
    .await
}

/// Read, change `status`, update with the read resourceVersion; retried on conflicts.
pub(crate) async fn write_with(
    store: &Store,
    ns: &str,
    name: &str,
    uid: &str,
    manager: &str,
    change: impl Fn(&mut Map<String, Value>),
) -> Result<Written, ApiError> {
    let opts = WriteOptions {
        field_manager: Some(manager.into()),
        ..Default::default()
    };
    for _ in 0..16 {
        let Some(current) = store.get_stored(&pods_key(), ns, name) else {
            return Ok(Written::Gone);
        };
        if crate::meta::uid(&current) != uid {
            return Ok(Written::Gone);
        }
        let mut obj = Value::clone(&current);
        let Some(root) = obj.as_object_mut() else {
            return Ok(Written::Gone);
        };
        let status = root.entry("status").or_insert_with(|| json!({}));
        if !status.is_object() {
            *status = json!({});
        }
        if let Value::Object(s) = status {
            change(s);
        }
        if obj.get("status") == current.get("status") {
            return Ok(Written::Yes);
        }
        match store.update(&pods_gvr(), ns, name, obj, Some("status"), &opts).await {
            Ok(_) => return Ok(Written::Yes),
            Err(ApiError::Conflict { .. }) => continue,
            Err(ApiError::NotFound(_)) => return Ok(Written::Gone),
            Err(e) => return Err(e),
        }
    }
    Err(ApiError::Internal(format!(
        "pod {ns}/{name}: status kept changing under the kubelet"
    )))
}

/// The kubelet's last step for a pod being deleted: remove it with grace 0, for this uid only.
pub(crate) async fn finish_deletion(store: &Store, ns: &str, name: &str, uid: &str) {
    let opts = DeleteOptions {
        grace_period_seconds: Some(0),
        precondition_uid: Some(uid.into()),
        ..Default::default()
    };
    match store.delete(&pods_gvr(), ns, name, &opts).await {
        Ok(_) | Err(ApiError::NotFound(_)) | Err(ApiError::Conflict { .. }) => {}
        Err(e) => {
            tracing::warn!(pod = %format!("{ns}/{name}"), error = %e, "the kubelet could not finish deleting a pod")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn get_phase_like_the_kubelet() {
        let c = |running, waiting, stopped, succeeded| PhaseCounts {
            running,
            waiting,
            stopped,
            succeeded,
            ..Default::default()
        };
        assert_eq!(phase(c(0, 1, 0, 0), "Never", false), "Pending");
        assert_eq!(phase(c(1, 0, 1, 1), "Never", false), "Running");
        assert_eq!(phase(c(0, 0, 2, 2), "Never", false), "Succeeded");
        assert_eq!(phase(c(0, 0, 2, 1), "Never", false), "Failed");
        assert_eq!(phase(c(0, 0, 2, 1), "OnFailure", false), "Running");
        assert_eq!(phase(c(0, 0, 1, 0), "Always", false), "Running");
        assert_eq!(phase(c(0, 0, 1, 0), "Always", true), "Failed");
        assert_eq!(phase(c(0, 0, 1, 1), "Always", true), "Succeeded");
        let init_failed = PhaseCounts {
            failed_init: 1,
            pending_init: 1,
            ..Default::default()
        };
        assert_eq!(phase(init_failed, "Never", false), "Failed");
        assert_eq!(phase(init_failed, "OnFailure", false), "Pending");
    }
}
