//! A pod as a client sees it when container terminations are hidden from it
//! ([`super::Faults::hide_terminations`]): what a pod whose status never synced its containers'
//! ends looks like, e.g. one deleted a moment after its containers exited.

use serde_json::{Map, Value, json};

/// The status lists whose entries can show a termination.
const STATUS_LISTS: [&str; 3] = [
    "containerStatuses",
    "initContainerStatuses",
    "ephemeralContainerStatuses",
];

/// Rewrites a pod so that no container has ended:
///
/// - every `state.terminated` becomes `state.running` with its `startedAt` (not ready, started),
///   or `state.waiting` with reason `ContainerCreating` if it never started;
/// - every `lastState.terminated` is removed;
/// - phase `Succeeded`/`Failed` becomes `Running`, without the terminal phase's `reason` and
///   `message` (e.g. `Evicted`);
/// - the conditions the kubelet gives a finished pod (reason `PodCompleted`) become those of a
///   running pod whose containers are not ready (`ContainersNotReady`).
///
/// Anything that is not a pod with a status is left as it is.
pub fn hide_pod_terminations(pod: &mut Value) {
    let Some(status) = pod.get_mut("status").and_then(Value::as_object_mut) else {
        return;
    };
    for list in STATUS_LISTS {
        for c in status.get_mut(list).and_then(Value::as_array_mut).into_iter().flatten() {
            hide_container_termination(c);
        }
    }
    let terminal = matches!(
        status.get("phase").and_then(Value::as_str),
        Some("Succeeded" | "Failed")
    );
    if terminal {
        status.insert("phase".into(), json!("Running"));
        status.remove("reason");
        status.remove("message");
    }
    let unready: Vec<String> = status
        .get("containerStatuses")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|c| c.get("ready").and_then(Value::as_bool) != Some(true))
        .filter_map(|c| c.get("name").and_then(Value::as_str).map(str::to_string))
        .collect();
    for cond in status
        .get_mut("conditions")
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
        .filter_map(Value::as_object_mut)
    {
        if cond.get("reason").and_then(Value::as_str) != Some("PodCompleted") {
            continue;
        }
        match cond.get("type").and_then(Value::as_str) {
            Some("Ready" | "ContainersReady") => {
                cond.insert("reason".into(), json!("ContainersNotReady"));
                cond.insert(
                    "message".into(),
                    json!(format!("containers with unready status: [{}]", unready.join(" "))),
                );
            }
            _ => {
                cond.remove("reason");
            }
        }
    }
}

fn hide_container_termination(c: &mut Value) {
    let Some(c) = c.as_object_mut() else { return };
    if let Some(last) = c.get_mut("lastState").and_then(Value::as_object_mut) {
        last.remove("terminated");
    }
    let started_at = c
        .get("state")
        .and_then(|s| s.get("terminated"))
        .map(|t| t.get("startedAt").cloned().unwrap_or(Value::Null));
    let Some(started_at) = started_at else { return };
    let mut state = Map::new();
    if started_at.is_null() {
        state.insert("waiting".into(), json!({ "reason": "ContainerCreating" }));
        c.insert("started".into(), json!(false));
    } else {
        state.insert("running".into(), json!({ "startedAt": started_at }));
        c.insert("started".into(), json!(true));
    }
    c.insert("state".into(), Value::Object(state));
    c.insert("ready".into(), json!(false));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_finished_pod_looks_running() {
        let mut pod = json!({
            "metadata": { "name": "p" },
            "status": {
                "phase": "Failed", "reason": "Evicted", "message": "low on memory",
                "conditions": [
                    { "type": "Initialized", "status": "True", "reason": "PodCompleted" },
                    { "type": "Ready", "status": "False", "reason": "PodCompleted" },
                    { "type": "PodScheduled", "status": "True" }
                ],
                "initContainerStatuses": [{ "name": "init", "ready": false,
                    "state": { "terminated": { "exitCode": 0, "reason": "Completed", "startedAt": "2026-01-01T00:00:00Z" } } }],
                "containerStatuses": [
                    { "name": "main", "ready": false, "restartCount": 1,
                      "state": { "terminated": { "exitCode": 137, "reason": "OOMKilled", "startedAt": "2026-01-01T00:00:05Z" } },
                      "lastState": { "terminated": { "exitCode": 1, "reason": "Error" } } },
                    { "name": "never-ran", "ready": false, "state": { "terminated": { "exitCode": 137, "reason": "ContainerStatusUnknown" } } },
                    { "name": "up", "ready": true, "state": { "running": { "startedAt": "2026-01-01T00:00:01Z" } } }
                ]
            }
        });
        hide_pod_terminations(&mut pod);
        let s = &pod["status"];
        assert_eq!(s["phase"], "Running");
        assert!(s.get("reason").is_none() && s.get("message").is_none());
        assert_eq!(
            s["initContainerStatuses"][0]["state"],
            json!({ "running": { "startedAt": "2026-01-01T00:00:00Z" } })
        );
        let main = &s["containerStatuses"][0];
        assert_eq!(
            main["state"],
            json!({ "running": { "startedAt": "2026-01-01T00:00:05Z" } })
        );
        assert_eq!(main["lastState"], json!({}));
        assert_eq!(
            (
                main["ready"].clone(),
                main["started"].clone(),
                main["restartCount"].clone()
            ),
            (json!(false), json!(true), json!(1))
        );
        assert_eq!(
            s["containerStatuses"][1]["state"],
            json!({ "waiting": { "reason": "ContainerCreating" } })
        );
        assert_eq!(
            s["containerStatuses"][2]["state"]["running"]["startedAt"],
            "2026-01-01T00:00:01Z"
        );
        assert!(s["conditions"][0].get("reason").is_none());
        assert_eq!(s["conditions"][1]["reason"], "ContainersNotReady");
        assert_eq!(
            s["conditions"][1]["message"],
            "containers with unready status: [main never-ran]"
        );
        assert!(!pod.to_string().contains("terminated"), "{pod}");
    }

    #[test]
    fn other_objects_and_running_pods_are_unchanged() {
        let running = json!({ "status": { "phase": "Running",
            "containerStatuses": [{ "name": "c", "ready": true, "state": { "running": { "startedAt": "t" } } }] } });
        for original in [json!({ "metadata": { "name": "x" } }), json!("text"), running] {
            let mut v = original.clone();
            hide_pod_terminations(&mut v);
            assert_eq!(v, original);
        }
    }
}
