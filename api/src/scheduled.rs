//! The `ScheduledSparkApplication` custom resource: a SparkApplication spec run on a cron schedule.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::application::SparkApplicationSpec;
use crate::state::lenient_string_enum;

/// Default for successfulRunHistoryLimit and failedRunHistoryLimit.
pub const DEFAULT_RUN_HISTORY_LIMIT: i32 = 1;
/// Default time zone of the schedule: the controller's.
pub const DEFAULT_TIME_ZONE: &str = "Local";

/// A SparkApplication created on a schedule.
#[derive(CustomResource, Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "sparkoperator.k8s.io",
    version = "v1beta2",
    kind = "ScheduledSparkApplication",
    singular = "scheduledsparkapplication",
    plural = "scheduledsparkapplications",
    shortname = "scheduledsparkapp",
    namespaced,
    status = "ScheduledSparkApplicationStatus",
    derive = "PartialEq",
    doc = "A SparkApplication run on a cron schedule by the Spark operator.",
    annotation("api-approved.kubernetes.io", "https://github.com/kubeflow/spark-operator/pull/1298"),
    printcolumn = r#"{"name": "Schedule", "type": "string", "jsonPath": ".spec.schedule"}"#,
    printcolumn = r#"{"name": "Suspend", "type": "boolean", "jsonPath": ".spec.suspend"}"#,
    printcolumn = r#"{"name": "Last Run", "type": "date", "jsonPath": ".status.lastRun"}"#,
    printcolumn = r#"{"name": "Last Run Name", "type": "string", "jsonPath": ".status.lastRunName"}"#,
    printcolumn = r#"{"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct ScheduledSparkApplicationSpec {
    /// Cron schedule (5 fields, or @every <duration>, @hourly, ...).
    pub schedule: String,
    /// Time zone of the schedule; default Local.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_zone: Option<String>,
    /// Spec of the SparkApplications to create.
    pub template: SparkApplicationSpec,
    /// true: create no more runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suspend: Option<bool>,
    /// What to do when a run is due while the previous one is unfinished; default Allow.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrency_policy: Option<ConcurrencyPolicy>,
    /// Successful runs to keep; default 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub successful_run_history_limit: Option<i32>,
    /// Failed runs to keep; default 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub failed_run_history_limit: Option<i32>,
}

impl ScheduledSparkApplicationSpec {
    pub fn concurrency_policy_or_default(&self) -> ConcurrencyPolicy {
        self.concurrency_policy.unwrap_or_default()
    }

    pub fn successful_run_history_limit_or_default(&self) -> i32 {
        self.successful_run_history_limit.unwrap_or(DEFAULT_RUN_HISTORY_LIMIT)
    }

    pub fn failed_run_history_limit_or_default(&self) -> i32 {
        self.failed_run_history_limit.unwrap_or(DEFAULT_RUN_HISTORY_LIMIT)
    }
}

/// Concurrent runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum ConcurrencyPolicy {
    // Runs may overlap.
    #[default]
    Allow,
    // Skip a run while the previous one is unfinished.
    Forbid,
    // Delete the unfinished previous run and start the new one.
    Replace,
}

lenient_string_enum! {
    /// Scheduling state of a ScheduledSparkApplication.
    pub enum ScheduleState fallback New {
        #[default]
        New => "",
        Validating => "Validating",
        Scheduled => "Scheduled",
        FailedValidation => "FailedValidation",
    }
}

fn is_default_schedule_state(state: &ScheduleState) -> bool {
    *state == ScheduleState::New
}

/// The observed state of a ScheduledSparkApplication.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ScheduledSparkApplicationStatus {
    /// When the last run started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_run: Option<Time>,
    /// When the next run starts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_run: Option<Time>,
    /// Name of the last run's SparkApplication.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub last_run_name: String,
    /// Names of past successful runs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub past_successful_run_names: Vec<String>,
    /// Names of past failed runs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub past_failed_run_names: Vec<String>,
    /// Scheduling state.
    #[serde(default, skip_serializing_if = "is_default_schedule_state")]
    pub schedule_state: ScheduleState,
    /// Why the schedule is in this state.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
}
