//! `SparkApplication` status: Kubeflow's fields exactly, so a status Kubeflow wrote still reads, plus our
//! optional additions (conditions, observed generation, the driver's termination record, executor counts,
//! recent executor failures and a bounded map of recent executors).
//!
//! Size: the status must stay far below etcd's 1.5 MiB request limit whatever the executor churn, so every
//! collection here is bounded by the controller (see the `MAX_*` constants); `executorState`, Kubeflow's
//! map of executor states, holds the same bounded set of pods as `recentExecutors`.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::state::{ApplicationStateType, ExecutorState, TerminationObserver};

/// Default number of executor failures kept in `recentExecutorFailures`.
pub const MAX_RECENT_EXECUTOR_FAILURES: usize = 10;
/// Default number of executors kept in `recentExecutors` and `executorState`.
pub const MAX_RECENT_EXECUTORS: usize = 100;
/// Default size of a termination record's log tail, in bytes.
pub const MAX_LOG_TAIL_BYTES: usize = 4096;

/// Condition types we set, for `kubectl wait --for=condition=<type>`.
pub mod condition_types {
    /// The driver pod was created for the current submission.
    pub const SUBMITTED: &str = "Submitted";
    /// The driver is running.
    pub const RUNNING: &str = "Running";
    /// The application finished successfully (terminal).
    pub const COMPLETE: &str = "Complete";
    /// The application failed and will not be retried (terminal).
    pub const FAILED: &str = "Failed";
    /// Whether the driver pod has been placed on a node: False with reason `WaitingForCapacity` while the
    /// scheduler finds no room for it yet (it waits instead of failing), True once it is placed.
    pub const DRIVER_SCHEDULED: &str = "DriverScheduled";
    /// True while the driver runs and some of its executors have waited for capacity longer than the
    /// controller's starvation threshold (drivers holding the room their executors need).
    pub const EXECUTORS_STARVED: &str = "ExecutorsStarved";
}

fn is_zero(value: &i32) -> bool {
    *value == 0
}

/// The observed state of a SparkApplication.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SparkApplicationStatus {
    /// Spark's application id (spark-app-selector label).
    #[serde(default, rename = "sparkApplicationId", skip_serializing_if = "String::is_empty")]
    pub spark_application_id: String,
    /// Id of the current submission.
    #[serde(default, rename = "submissionID", skip_serializing_if = "String::is_empty")]
    pub submission_id: String,
    /// When the last submission was attempted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_submission_attempt_time: Option<Time>,
    /// When the application terminated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub termination_time: Option<Time>,
    /// The driver and its UI.
    #[serde(default)]
    pub driver_info: DriverInfo,
    /// State and error message.
    #[serde(default)]
    pub application_state: ApplicationState,
    /// State of each tracked executor pod, by pod name (bounded, see recentExecutors).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub executor_state: BTreeMap<String, ExecutorState>,
    /// Successful submissions; reset on invalidation.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub execution_attempts: i32,
    /// Submission attempts; reset on invalidation.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub submission_attempts: i32,
    /// Standard conditions (Submitted, Running, Complete, Failed).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
    /// Generation of the spec this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// How the driver of the current submission terminated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub driver_termination: Option<TerminationRecord>,
    /// Executors of the current submission by state, counting every executor ever seen.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub executor_counts: Option<ExecutorCounts>,
    /// The most recent executor failures, oldest first (bounded).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub recent_executor_failures: Vec<TerminationRecord>,
    /// The most recently seen executors, by pod name (bounded).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub recent_executors: BTreeMap<String, ExecutorRecord>,
    /// Executor terminations of the current submission that node agents reported and the controller has
    /// not counted yet (as a Job's `uncountedTerminatedPods`): any replica records a report here, and the
    /// leader moves it into the counts. Bounded by the status byte budget.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub uncounted_executor_terminations: Vec<TerminationRecord>,
}

/// The driver and its UI.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct DriverInfo {
    /// Name of the UI Service.
    #[serde(default, rename = "webUIServiceName", skip_serializing_if = "String::is_empty")]
    pub web_ui_service_name: String,
    /// ClusterIP:port of the UI Service.
    #[serde(default, rename = "webUIAddress", skip_serializing_if = "String::is_empty")]
    pub web_ui_address: String,
    /// Port of the UI Service.
    #[serde(default, rename = "webUIPort", skip_serializing_if = "is_zero")]
    pub web_ui_port: i32,
    /// Name of the UI Ingress.
    #[serde(default, rename = "webUIIngressName", skip_serializing_if = "String::is_empty")]
    pub web_ui_ingress_name: String,
    /// Address of the UI Ingress.
    #[serde(default, rename = "webUIIngressAddress", skip_serializing_if = "String::is_empty")]
    pub web_ui_ingress_address: String,
    /// Name of the driver pod.
    #[serde(default, rename = "podName", skip_serializing_if = "String::is_empty")]
    pub pod_name: String,
}

/// The application's state and, on failure, why.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApplicationState {
    /// The state.
    #[serde(default)]
    pub state: ApplicationStateType,
    /// What went wrong.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub error_message: String,
}

/// How a driver or executor container terminated.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TerminationRecord {
    /// The pod.
    pub pod_name: String,
    /// Spark's executor id; unset for the driver.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub executor_id: Option<i64>,
    /// Exit code of the Spark container; unset when the pod went away before it exited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// Reason: Completed, Error, OOMKilled, Evicted, ...
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Message of the container or pod status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// When the container finished.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<Time>,
    /// Node the pod ran on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_name: Option<String>,
    /// Which path saw the termination first: Agent, PodWatch or Finalizer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_by: Option<TerminationObserver>,
    /// The last lines of the container's log (bounded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log_tail: Option<String>,
    /// The runtime's id of the terminated container (`containerd://...` form without the scheme), when a
    /// node agent or the pod status named it: a report replayed for the same container changes nothing.
    #[serde(default, rename = "containerID", skip_serializing_if = "Option::is_none")]
    pub container_id: Option<String>,
}

impl TerminationRecord {
    /// True when the container exited successfully.
    pub fn succeeded(&self) -> bool {
        self.exit_code == Some(0)
    }
}

/// Executors by state.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ExecutorCounts {
    #[serde(default)]
    pub pending: i64,
    #[serde(default)]
    pub running: i64,
    #[serde(default)]
    pub completed: i64,
    #[serde(default)]
    pub failed: i64,
    #[serde(default)]
    pub unknown: i64,
}

impl ExecutorCounts {
    fn slot(&mut self, state: ExecutorState) -> &mut i64 {
        match state {
            ExecutorState::Pending => &mut self.pending,
            ExecutorState::Running => &mut self.running,
            ExecutorState::Completed => &mut self.completed,
            ExecutorState::Failed => &mut self.failed,
            ExecutorState::Unknown => &mut self.unknown,
        }
    }

    /// Executors currently counted in `state`.
    pub fn count(&self, state: ExecutorState) -> i64 {
        match state {
            ExecutorState::Pending => self.pending,
            ExecutorState::Running => self.running,
            ExecutorState::Completed => self.completed,
            ExecutorState::Failed => self.failed,
            ExecutorState::Unknown => self.unknown,
        }
    }

    /// Records an executor moving from `from` (None: first seen) to `to`.
    pub fn transition(&mut self, from: Option<ExecutorState>, to: ExecutorState) {
        if from == Some(to) {
            return;
        }
        if let Some(from) = from {
            let slot = self.slot(from);
            // Saturating: counts are read back from stored statuses, which anyone with write access
            // to the status could have set to anything.
            *slot = slot.saturating_sub(1).max(0);
        }
        let slot = self.slot(to);
        *slot = slot.saturating_add(1);
    }

    /// Every executor counted.
    pub fn total(&self) -> i64 {
        [self.pending, self.running, self.completed, self.failed, self.unknown]
            .into_iter()
            .fold(0i64, i64::saturating_add)
    }
}

/// One recently seen executor.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ExecutorRecord {
    /// Spark's executor id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub executor_id: Option<i64>,
    /// The executor's state.
    #[serde(default)]
    pub state: ExecutorState,
    /// Node the pod runs or ran on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_name: Option<String>,
    /// When the state last changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<Time>,
}

impl SparkApplicationStatus {
    /// Appends an executor failure, dropping the oldest ones beyond `max`.
    pub fn push_executor_failure(&mut self, failure: TerminationRecord, max: usize) {
        self.recent_executor_failures.push(failure);
        let excess = self.recent_executor_failures.len().saturating_sub(max);
        self.recent_executor_failures.drain(..excess);
    }

    /// Records an executor in `recentExecutors` and `executorState`. When over `max`, terminated executors
    /// are evicted first, lowest executor id (oldest) first, so running ones stay visible.
    pub fn record_executor(&mut self, pod_name: &str, record: ExecutorRecord, max: usize) {
        self.executor_state.insert(pod_name.to_owned(), record.state);
        self.recent_executors.insert(pod_name.to_owned(), record);
        while self.recent_executors.len() > max {
            let victim = self
                .recent_executors
                .iter()
                .min_by_key(|(name, r)| {
                    (
                        !r.state.is_terminal(),
                        r.executor_id.unwrap_or(i64::MAX),
                        (*name).clone(),
                    )
                })
                .map(|(name, _)| name.clone());
            let Some(victim) = victim else { break };
            self.recent_executors.remove(&victim);
            self.executor_state.remove(&victim);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_status_written_by_kubeflow_reads() {
        let kubeflow = json!({
            "applicationState": {"state": "COMPLETED"},
            "driverInfo": {
                "podName": "spark-pi-driver",
                "webUIAddress": "10.96.0.12:4040",
                "webUIPort": 4040,
                "webUIServiceName": "spark-pi-ui-svc"
            },
            "executionAttempts": 1,
            "executorState": {"spark-pi-8a1b-exec-1": "COMPLETED", "spark-pi-8a1b-exec-2": "FAILED"},
            "lastSubmissionAttemptTime": "2024-06-01T10:00:00Z",
            "sparkApplicationId": "spark-5f9bc2e1c3f24d5c8f1e6a1b2c3d4e5f",
            "submissionAttempts": 1,
            "submissionID": "6a0b6f0c-7a52-4b44-8d5c-0f55d7a4f1c2",
            "terminationTime": null
        });
        let status: SparkApplicationStatus = serde_json::from_value(kubeflow).unwrap();
        assert_eq!(status.application_state.state, ApplicationStateType::Completed);
        assert_eq!(status.submission_id, "6a0b6f0c-7a52-4b44-8d5c-0f55d7a4f1c2");
        assert_eq!(status.driver_info.web_ui_port, 4040);
        assert_eq!(status.executor_state["spark-pi-8a1b-exec-2"], ExecutorState::Failed);
        assert!(status.last_submission_attempt_time.is_some());
        assert!(status.termination_time.is_none());

        let back: SparkApplicationStatus = serde_json::from_value(serde_json::to_value(&status).unwrap()).unwrap();
        assert_eq!(back, status);
    }

    #[test]
    fn kubeflow_json_names_are_kept() {
        let status = SparkApplicationStatus {
            spark_application_id: "spark-1".into(),
            submission_id: "id".into(),
            execution_attempts: 2,
            ..Default::default()
        };
        let value = serde_json::to_value(&status).unwrap();
        assert_eq!(value["sparkApplicationId"], "spark-1");
        assert_eq!(value["submissionID"], "id");
        assert_eq!(value["executionAttempts"], 2);
        assert_eq!(value["applicationState"]["state"], "");
    }

    #[test]
    fn executor_failures_keep_only_the_most_recent() {
        let mut status = SparkApplicationStatus::default();
        for id in 1..=15 {
            let failure = TerminationRecord {
                pod_name: format!("exec-{id}"),
                executor_id: Some(id),
                ..Default::default()
            };
            status.push_executor_failure(failure, 10);
        }
        let ids: Vec<_> = status
            .recent_executor_failures
            .iter()
            .filter_map(|f| f.executor_id)
            .collect();
        assert_eq!(ids, (6..=15).collect::<Vec<_>>());
    }

    #[test]
    fn recent_executors_evict_terminated_oldest_first() {
        let mut status = SparkApplicationStatus::default();
        let record = |id, state| ExecutorRecord {
            executor_id: Some(id),
            state,
            ..Default::default()
        };
        status.record_executor("exec-1", record(1, ExecutorState::Running), 3);
        status.record_executor("exec-2", record(2, ExecutorState::Completed), 3);
        status.record_executor("exec-3", record(3, ExecutorState::Failed), 3);
        status.record_executor("exec-4", record(4, ExecutorState::Running), 3);
        let kept: Vec<_> = status.recent_executors.keys().cloned().collect();
        assert_eq!(kept, ["exec-1", "exec-3", "exec-4"]);
        assert_eq!(status.executor_state.len(), 3);
        assert!(!status.executor_state.contains_key("exec-2"));
    }

    #[test]
    fn executor_counts_follow_transitions() {
        let mut counts = ExecutorCounts::default();
        counts.transition(None, ExecutorState::Pending);
        counts.transition(Some(ExecutorState::Pending), ExecutorState::Running);
        counts.transition(None, ExecutorState::Pending);
        counts.transition(Some(ExecutorState::Running), ExecutorState::Failed);
        counts.transition(Some(ExecutorState::Failed), ExecutorState::Failed);
        assert_eq!(counts.count(ExecutorState::Pending), 1);
        assert_eq!(counts.count(ExecutorState::Running), 0);
        assert_eq!(counts.count(ExecutorState::Failed), 1);
        assert_eq!(counts.total(), 2);
    }
}
