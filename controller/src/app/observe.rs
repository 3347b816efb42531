//! What the controller reads off driver and executor pods, as plain facts: pure functions from a `Pod`,
//! so the state machine ([`crate::app::state`]) and the executor tracker ([`crate::app::executors`]) can be tested
//! without pods.

use jiff::Timestamp;
use spark_operator_api::labels::{
    DRIVER_CONTAINER_NAME, EXECUTOR_CONTAINER_NAME, FINALIZER_DRIVER_PROTECTION, LABEL_APP_NAME,
    LABEL_SPARK_APP_SELECTOR, LABEL_SPARK_EXEC_ID, LABEL_SPARK_ROLE, LABEL_SUBMISSION_ID, SparkRole,
};
use spark_operator_api::state::{DriverState, ExecutorState, TerminationObserver};
use spark_operator_api::status::{MAX_LOG_TAIL_BYTES, TerminationRecord};

use crate::pod::{ContainerStatus, SparkPod};
use crate::status::text::truncate_utf8;

/// Container waiting reasons that mean the driver cannot start without someone fixing something.
pub(crate) const STUCK_WAITING_REASONS: [&str; 4] = [
    "ImagePullBackOff",
    "ErrImagePull",
    "CreateContainerConfigError",
    "InvalidImageName",
];
/// The PodScheduled condition reason of a pod no node can take.
pub(crate) const UNSCHEDULABLE: &str = "Unschedulable";
/// Ours: a pending pod no scheduler has placed or said anything about (no PodScheduled condition): the
/// scheduler it names is not running (Kubeflow's YuniKorn pods on a cluster without YuniKorn).
pub(crate) const NOT_SCHEDULED: &str = "NotScheduled";

/// Why a pod has not started yet: something that needs a human, or room the cluster does not have yet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StartProblem {
    /// ImagePullBackOff, ErrImagePull, CreateContainerConfigError, InvalidImageName or Unschedulable.
    pub reason: String,
    pub message: String,
    /// Unschedulable only for lack of cpu, memory, pods or another resource on some node that would
    /// otherwise take the pod (see [`waits_for_capacity`]): it will start once room frees up.
    pub waiting_for_capacity: bool,
}

/// Whether a scheduler's Unschedulable message means some node would take the pod once it has room,
/// rather than no node ever could (selector, affinity, taints, cordoned nodes).
///
/// The DefaultPreemption part of the message says it per node: "No preemption victims found for incoming
/// pod" is written for nodes that failed only on resources, "Preemption is not helpful for scheduling"
/// for the others. Without that part (older schedulers, preemption disabled) the filter part decides:
/// the scheduler stops at a node's first failing filter plugin, and every reason that is not a resource
/// one (`Insufficient <resource>`, `Too many pods`, both from NodeResourcesFit) is one node, so fewer
/// such reasons than nodes leaves a node that failed on resources alone.
///
/// Volcano words it its own way: "0/3 nodes are unavailable: 3 Insufficient cpu." (one reason per node),
/// and for a gang still waiting to be admitted "pod group is not ready, ... Origin reason is <pod>: <fit
/// error>" (a group waits for room unless its origin says otherwise).
pub(crate) fn waits_for_capacity(message: &str) -> bool {
    if let Some(rest) = message.trim_start().strip_prefix("pod group is not ready") {
        return match rest.split_once("Origin reason is ") {
            Some((_, origin)) => origin.split_once(": ").is_none_or(|(_, fit)| waits_for_capacity(fit)),
            None => true,
        };
    }
    let (filters, preemption) = match message.split_once(" preemption: ") {
        Some((filters, preemption)) => (filters, Some(preemption)),
        None => (message, None),
    };
    if let Some(preemption) = preemption
        && let Some(counts) = reason_counts(preemption)
        && counts.iter().any(|(_, reason)| {
            reason.starts_with("Preemption is not helpful") || reason.starts_with("No preemption victims")
        })
    {
        return counts
            .iter()
            .any(|(n, reason)| *n > 0 && reason.starts_with("No preemption victims found"));
    }
    let Some((nodes, counts)) = node_total(filters).zip(reason_counts(filters)) else {
        return false;
    };
    let resource = |reason: &str| reason.starts_with("Insufficient ") || reason == "Too many pods";
    // Saturating: the message is a scheduler's (outside) text; absurd counts must not overflow.
    let other_nodes = counts
        .iter()
        .filter(|(_, r)| !resource(r))
        .fold(0u64, |sum, (n, _)| sum.saturating_add(*n));
    nodes > 0 && counts.iter().any(|(_, r)| resource(r)) && other_nodes < nodes
}

/// `N` of "0/N nodes are available: …".
fn node_total(message: &str) -> Option<u64> {
    let (_, rest) = message.split_once("0/")?;
    rest.split_once(' ')?.0.parse().ok()
}

/// The "<count> <reason>" items after "nodes are available: " (Volcano: "unavailable"), without the
/// final period.
fn reason_counts(message: &str) -> Option<Vec<(u64, String)>> {
    let (_, list) = message
        .split_once("nodes are available: ")
        .or_else(|| message.split_once("nodes are unavailable: "))?;
    let list = list.trim_end().trim_end_matches('.');
    Some(
        list.split(", ")
            .filter_map(|item| {
                let (n, reason) = item.trim().split_once(' ')?;
                Some((n.parse().ok()?, reason.trim_end_matches('.').to_owned()))
            })
            .collect(),
    )
}

/// A pod deletion in progress.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Deletion {
    /// `metadata.deletionTimestamp`: when the grace period ends.
    pub deadline: Timestamp,
}

/// The driver pod, as the state machine needs it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DriverPod {
    pub name: String,
    /// The `submission-id` label: which submission made this pod.
    pub submission_id: Option<String>,
    /// The `app-name` label.
    pub app_name: Option<String>,
    /// Whether the pod was launched by the operator (the launched-by label).
    pub ours: bool,
    pub state: DriverState,
    pub created_at: Option<Timestamp>,
    pub deletion: Option<Deletion>,
    pub start_problem: Option<StartProblem>,
    /// Set once the driver container terminated (the pod may still run sidecars).
    pub termination: Option<TerminationRecord>,
    pub spark_app_id: Option<String>,
    pub has_finalizer: bool,
    /// Bound to a node (`spec.nodeName`, or `PodScheduled=True`).
    pub placed: bool,
}

/// Reads a Spark pod's role from its `spark-role` label.
pub(crate) fn spark_role(pod: &SparkPod) -> Option<SparkRole> {
    label(pod, LABEL_SPARK_ROLE).and_then(SparkRole::parse)
}

/// The SparkApplication a pod belongs to (its `app-name` label).
pub(crate) fn app_name(pod: &SparkPod) -> Option<&str> {
    label(pod, LABEL_APP_NAME)
}

/// The submission that made a pod (its `submission-id` label).
pub(crate) fn submission_id(pod: &SparkPod) -> Option<&str> {
    label(pod, LABEL_SUBMISSION_ID)
}

fn label<'a>(pod: &'a SparkPod, key: &str) -> Option<&'a str> {
    pod.metadata.labels.as_ref()?.get(key).map(String::as_str)
}

fn timestamp(time: Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>) -> Option<Timestamp> {
    time.map(|t| t.0)
}

/// The status of the Spark container: the one with Spark's name, else the first.
fn spark_container<'a>(pod: &'a SparkPod, name: &str) -> Option<&'a ContainerStatus> {
    let statuses = &pod.status.as_ref()?.container_statuses;
    statuses.iter().find(|c| c.name == name).or_else(|| statuses.first())
}

/// The termination of the Spark container, if it has terminated, as a status record.
fn container_termination(pod: &SparkPod, container: &str, observer: TerminationObserver) -> Option<TerminationRecord> {
    let status = spark_container(pod, container)?;
    let terminated = status.state.as_ref()?.terminated.as_ref()?;
    let spec = pod.spec.as_ref();
    Some(TerminationRecord {
        pod_name: pod.metadata.name.clone().unwrap_or_default(),
        executor_id: None,
        exit_code: Some(terminated.exit_code),
        reason: terminated.reason.clone(),
        message: terminated
            .message
            .clone()
            .map(|m| truncate_utf8(&m, MAX_LOG_TAIL_BYTES)),
        finished_at: terminated.finished_at.clone(),
        node_name: spec.and_then(|s| s.node_name.clone()),
        observed_by: Some(observer),
        log_tail: None,
        container_id: None,
    })
}

/// Why a pod cannot start, if it is stuck on something that needs a human.
fn start_problem(pod: &SparkPod, container: &str) -> Option<StartProblem> {
    let Some(status) = pod.status.as_ref() else {
        return not_scheduled(pod);
    };
    if let Some(waiting) = spark_container(pod, container)
        .and_then(|c| c.state.as_ref())
        .and_then(|s| s.waiting.as_ref())
    {
        let reason = waiting.reason.as_deref().unwrap_or_default();
        if STUCK_WAITING_REASONS.contains(&reason) {
            return Some(StartProblem {
                reason: reason.to_owned(),
                message: waiting.message.clone().unwrap_or_default(),
                waiting_for_capacity: false,
            });
        }
    }
    if !status.conditions.iter().any(|c| c.type_ == "PodScheduled") {
        return not_scheduled(pod);
    }
    let unschedulable = status
        .conditions
        .iter()
        .find(|c| c.type_ == "PodScheduled" && c.status == "False" && c.reason.as_deref() == Some(UNSCHEDULABLE))?;
    let message = unschedulable.message.clone().unwrap_or_default();
    Some(StartProblem {
        reason: UNSCHEDULABLE.to_owned(),
        waiting_for_capacity: waits_for_capacity(&message),
        message,
    })
}

/// A pod not on a node that no scheduler has said anything about. A scheduler that runs answers within
/// moments (binds it, or marks it Unschedulable); the start timeout decides when silence means none runs.
fn not_scheduled(pod: &SparkPod) -> Option<StartProblem> {
    if placed(pod) {
        return None;
    }
    let scheduler = pod
        .spec
        .as_ref()
        .and_then(|s| s.scheduler_name.as_deref())
        .filter(|s| !s.is_empty())
        .unwrap_or("default-scheduler");
    Some(StartProblem {
        reason: NOT_SCHEDULED.to_owned(),
        message: format!(
            "no scheduler has placed the pod or said why not: is the scheduler it names ({scheduler:?}, \
             spec.schedulerName or spec.batchScheduler) running in this cluster?"
        ),
        waiting_for_capacity: false,
    })
}

/// The facts about a driver pod. The driver container's termination decides, not the pod phase: a
/// sidecar may keep the pod running after Spark exited.
pub fn driver_pod(pod: &SparkPod, observer: TerminationObserver) -> DriverPod {
    let termination = container_termination(pod, DRIVER_CONTAINER_NAME, observer);
    let phase = pod
        .status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("Pending");
    let state = match &termination {
        Some(t) if t.succeeded() => DriverState::Completed,
        Some(_) => DriverState::Failed,
        None => DriverState::from_pod_phase(phase),
    };
    DriverPod {
        name: pod.metadata.name.clone().unwrap_or_default(),
        submission_id: submission_id(pod).map(str::to_owned),
        app_name: app_name(pod).map(str::to_owned),
        ours: label(pod, spark_operator_api::labels::LABEL_LAUNCHED_BY_SPARK_OPERATOR)
            == Some(spark_operator_api::labels::LABEL_VALUE_TRUE),
        state,
        created_at: timestamp(pod.metadata.creation_timestamp.as_ref()),
        deletion: timestamp(pod.metadata.deletion_timestamp.as_ref()).map(|deadline| Deletion { deadline }),
        start_problem: if state == DriverState::Pending {
            start_problem(pod, DRIVER_CONTAINER_NAME)
        } else {
            None
        },
        termination,
        spark_app_id: label(pod, LABEL_SPARK_APP_SELECTOR).map(str::to_owned),
        has_finalizer: pod
            .metadata
            .finalizers
            .as_ref()
            .is_some_and(|f| f.iter().any(|f| f == FINALIZER_DRIVER_PROTECTION)),
        placed: placed(pod),
    }
}

fn placed(pod: &SparkPod) -> bool {
    let bound = pod
        .spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .is_some_and(|n| !n.is_empty());
    bound
        || pod
            .status
            .iter()
            .flat_map(|s| &s.conditions)
            .any(|c| c.type_ == "PodScheduled" && c.status == "True")
}

/// The facts about an executor pod.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct ExecutorPod {
    pub name: String,
    pub executor_id: Option<i64>,
    pub submission_id: Option<String>,
    pub state: ExecutorState,
    pub node_name: Option<String>,
    /// Set when the executor container terminated.
    pub termination: Option<TerminationRecord>,
    /// Since when the pod has been unschedulable for lack of room (see [`waits_for_capacity`]).
    pub capacity_wait_since: Option<Timestamp>,
}

/// Since when a pending pod has waited for capacity: its Unschedulable condition's transition time (else
/// its creation), if that condition says only room is missing.
fn capacity_wait_since(pod: &SparkPod) -> Option<Timestamp> {
    let condition = pod
        .status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == "PodScheduled" && c.status == "False" && c.reason.as_deref() == Some(UNSCHEDULABLE))?;
    if !waits_for_capacity(condition.message.as_deref().unwrap_or_default()) {
        return None;
    }
    timestamp(condition.last_transition_time.as_ref()).or_else(|| timestamp(pod.metadata.creation_timestamp.as_ref()))
}

/// The facts about an executor pod, or None when the pod is not an executor.
pub(crate) fn executor_pod(pod: &SparkPod) -> Option<ExecutorPod> {
    if spark_role(pod) != Some(SparkRole::Executor) {
        return None;
    }
    let executor_id = label(pod, LABEL_SPARK_EXEC_ID).and_then(|id| id.parse::<i64>().ok());
    let mut termination = container_termination(pod, EXECUTOR_CONTAINER_NAME, TerminationObserver::PodWatch);
    if let Some(t) = termination.as_mut() {
        t.executor_id = executor_id;
    }
    let phase = pod
        .status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("Pending");
    let state = match &termination {
        Some(t) if t.succeeded() => ExecutorState::Completed,
        Some(_) => ExecutorState::Failed,
        None => ExecutorState::from_pod_phase(phase),
    };
    Some(ExecutorPod {
        name: pod.metadata.name.clone().unwrap_or_default(),
        executor_id,
        submission_id: submission_id(pod).map(str::to_owned),
        state,
        node_name: pod.spec.as_ref().and_then(|s| s.node_name.clone()),
        capacity_wait_since: if state == ExecutorState::Pending {
            capacity_wait_since(pod)
        } else {
            None
        },
        termination,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(value: serde_json::Value) -> SparkPod {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn a_terminated_driver_container_decides_even_while_a_sidecar_runs() {
        let pod = pod(json!({
            "metadata": {"name": "d", "labels": {"spark-role": "driver", "sparkoperator.k8s.io/submission-id": "s1",
                "sparkoperator.k8s.io/launched-by-spark-operator": "true"},
                "finalizers": ["sparkoperator.k8s.io/driver-protection"]},
            "spec": {"nodeName": "node-1", "containers": []},
            "status": {"phase": "Running", "containerStatuses": [
                {"name": "sidecar", "image": "x", "imageID": "", "ready": true, "restartCount": 0, "state": {"running": {}}},
                {"name": "spark-kubernetes-driver", "image": "x", "imageID": "", "ready": false, "restartCount": 0,
                 "state": {"terminated": {"exitCode": 1, "reason": "Error", "finishedAt": "2024-01-01T00:00:00Z"}}}
            ]}
        }));
        let facts = driver_pod(&pod, TerminationObserver::PodWatch);
        assert_eq!(facts.state, DriverState::Failed);
        assert!(facts.ours && facts.has_finalizer);
        let t = facts.termination.unwrap();
        assert_eq!(t.exit_code, Some(1));
        assert_eq!(t.reason.as_deref(), Some("Error"));
        assert_eq!(t.node_name.as_deref(), Some("node-1"));
        assert_eq!(facts.submission_id.as_deref(), Some("s1"));
    }

    #[test]
    fn image_pull_back_off_and_unschedulable_are_start_problems() {
        let pulling = pod(json!({
            "metadata": {"name": "d"},
            "status": {"phase": "Pending", "containerStatuses": [
                {"name": "spark-kubernetes-driver", "image": "x", "imageID": "", "ready": false, "restartCount": 0,
                 "state": {"waiting": {"reason": "ImagePullBackOff", "message": "no such image"}}}]}
        }));
        let problem = driver_pod(&pulling, TerminationObserver::PodWatch)
            .start_problem
            .unwrap();
        assert_eq!(problem.reason, "ImagePullBackOff");
        assert_eq!(problem.message, "no such image");

        let unschedulable = pod(json!({
            "metadata": {"name": "d"},
            "status": {"phase": "Pending", "conditions": [
                {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "0/3 nodes"}]}
        }));
        let problem = driver_pod(&unschedulable, TerminationObserver::PodWatch)
            .start_problem
            .unwrap();
        assert_eq!(problem.reason, "Unschedulable");

        let creating = pod(json!({
            "metadata": {"name": "d"},
            "spec": {"nodeName": "node-1"},
            "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "True"}], "containerStatuses": [
                {"name": "spark-kubernetes-driver", "image": "x", "imageID": "", "ready": false, "restartCount": 0,
                 "state": {"waiting": {"reason": "ContainerCreating"}}}]}
        }));
        assert_eq!(driver_pod(&creating, TerminationObserver::PodWatch).start_problem, None);

        // No scheduler has looked at it (YuniKorn's pods on a cluster without YuniKorn).
        let ignored = pod(json!({
            "metadata": {"name": "d"},
            "spec": {"schedulerName": "yunikorn"},
            "status": {"phase": "Pending"}
        }));
        let problem = driver_pod(&ignored, TerminationObserver::PodWatch)
            .start_problem
            .unwrap();
        assert_eq!(problem.reason, NOT_SCHEDULED);
        assert!(problem.message.contains("\"yunikorn\""), "{}", problem.message);
        assert!(!problem.waiting_for_capacity);
        // Bound but without conditions yet: not a problem.
        let bound = pod(json!({"metadata": {"name": "d"}, "spec": {"nodeName": "n"}, "status": {"phase": "Pending"}}));
        assert_eq!(driver_pod(&bound, TerminationObserver::PodWatch).start_problem, None);
        assert!(driver_pod(&bound, TerminationObserver::PodWatch).placed);
        assert!(!driver_pod(&ignored, TerminationObserver::PodWatch).placed);
    }

    #[test]
    fn executors_carry_their_id_and_termination() {
        let exec = pod(json!({
            "metadata": {"name": "app-exec-1234", "labels": {"spark-role": "executor", "spark-exec-id": "1234"}},
            "status": {"phase": "Failed", "containerStatuses": [
                {"name": "spark-kubernetes-executor", "image": "x", "imageID": "", "ready": false, "restartCount": 0,
                 "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}}]}
        }));
        let facts = executor_pod(&exec).unwrap();
        assert_eq!(facts.executor_id, Some(1234));
        assert_eq!(facts.state, ExecutorState::Failed);
        assert_eq!(facts.termination.unwrap().executor_id, Some(1234));

        let driver = pod(json!({"metadata": {"name": "d", "labels": {"spark-role": "driver"}}}));
        assert!(executor_pod(&driver).is_none());
    }

    #[test]
    fn unschedulable_for_room_alone_waits_for_capacity() {
        // As kube-scheduler 1.33 writes them (the sim's placement.rs reproduces the format).
        for (message, waits) in [
            (
                "0/3 nodes are available: 3 Insufficient cpu. preemption: 0/3 nodes are available: 3 No preemption victims found for incoming pod.",
                true,
            ),
            (
                "0/3 nodes are available: 1 Insufficient cpu, 1 Insufficient memory, 2 node(s) had untolerated taint {dedicated: spark}. preemption: 0/3 nodes are available: 1 No preemption victims found for incoming pod, 2 Preemption is not helpful for scheduling.",
                true,
            ),
            (
                "0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector. preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling.",
                false,
            ),
            (
                "0/2 nodes are available: 1 node(s) were unschedulable, 1 node(s) had untolerated taint {a: b}. preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling.",
                false,
            ),
            // Without the preemption part: one non-resource reason per node; fewer of them than nodes
            // leaves a node short only of room.
            (
                "0/3 nodes are available: 2 Insufficient cpu, 2 Insufficient memory, 1 node(s) had untolerated taint {a: b}.",
                true,
            ),
            (
                "0/3 nodes are available: 1 Too many pods, 3 node(s) didn't match Pod's node affinity/selector.",
                false,
            ),
            ("0/5 nodes are available: 5 Too many pods.", true),
            ("no nodes available to schedule pods", false),
            // Volcano's (the sim's stand-in writes them as Volcano does).
            ("0/3 nodes are unavailable: 3 Insufficient cpu.", true),
            (
                "0/3 nodes are unavailable: 3 node(s) didn't match Pod's node affinity/selector.",
                false,
            ),
            (
                "pod group is not ready, 1 Pending, 1 minAvailable; Pending: 1 Unschedulable",
                true,
            ),
            (
                "pod group is not ready, 1 Pending, 1 minAvailable; Pending: 1 Unschedulable. Origin reason is d: 0/3 nodes are unavailable: 3 Insufficient memory.",
                true,
            ),
            (
                "pod group is not ready, 1 Pending, 1 minAvailable; Pending: 1 Unschedulable. Origin reason is d: 0/3 nodes are unavailable: 3 node(s) had untolerated taint {a: b}.",
                false,
            ),
            ("", false),
            // Garbage and absurd counts: no panic, not read as room.
            (
                "0/3 nodes are available: 18446744073709551615 node(s) had untolerated taint {a: b}, 18446744073709551615 node(s) were unschedulable.",
                false,
            ),
            ("0/x nodes are available: 3 Insufficient cpu.", false),
        ] {
            assert_eq!(waits_for_capacity(message), waits, "{message}");
        }
    }

    #[test]
    fn a_pending_executor_short_of_room_says_since_when() {
        let executor = pod(json!({
            "metadata": {"name": "e", "labels": {"spark-role": "executor", "spark-exec-id": "3"},
                "creationTimestamp": "2024-01-01T00:00:00Z"},
            "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False",
                "reason": "Unschedulable", "lastTransitionTime": "2024-01-01T00:00:05Z",
                "message": "0/3 nodes are available: 3 Insufficient memory."}]}
        }));
        let facts = executor_pod(&executor).unwrap();
        assert_eq!(facts.capacity_wait_since, Some("2024-01-01T00:00:05Z".parse().unwrap()));
        let mut tainted = executor.clone();
        if let Some(c) = tainted.status.as_mut().and_then(|s| s.conditions.first_mut()) {
            c.message = Some("0/3 nodes are available: 3 node(s) had untolerated taint {a: b}.".into());
        }
        assert_eq!(executor_pod(&tainted).unwrap().capacity_wait_since, None);
    }
}
