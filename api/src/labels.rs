//! Label, annotation and finalizer names shared with Kubeflow's operator and with Spark itself.
//!
//! The `sparkoperator.k8s.io/*` names are Kubeflow's, kept so that dashboards, selectors and tools written
//! for Kubeflow keep working; the `spark-*` names are set by Spark on the pods it creates.

use std::fmt;

/// The API group of both custom resources.
pub const GROUP: &str = "sparkoperator.k8s.io";
/// The only served version.
pub const VERSION: &str = "v1beta2";
/// `apiVersion` of both custom resources.
pub const API_VERSION: &str = "sparkoperator.k8s.io/v1beta2";

/// Name of the owning SparkApplication, on every pod, Service and ConfigMap the operator creates.
pub const LABEL_APP_NAME: &str = "sparkoperator.k8s.io/app-name";
/// UUID of one submission: tells the pods of a rerun apart from the previous run's.
pub const LABEL_SUBMISSION_ID: &str = "sparkoperator.k8s.io/submission-id";
/// `"true"` on driver and executor pods; the webhook's object selector and the pod watch filter use it.
pub const LABEL_LAUNCHED_BY_SPARK_OPERATOR: &str = "sparkoperator.k8s.io/launched-by-spark-operator";
/// `"true"` on pods decorated without a pod template (Kubeflow sets it; nothing selects on it).
pub const LABEL_MUTATED_BY_SPARK_OPERATOR: &str = "sparkoperator.k8s.io/mutated-by-spark-operator";
/// `"true"` on Services and ConfigMaps the operator creates.
pub const LABEL_CREATED_BY_SPARK_OPERATOR: &str = "sparkoperator.k8s.io/created-by-spark-operator";
/// Name of the ScheduledSparkApplication that created a SparkApplication.
pub const LABEL_SCHEDULED_APP_NAME: &str = "sparkoperator.k8s.io/scheduled-app-name";

/// Spark's role label: `driver` or `executor`.
pub const LABEL_SPARK_ROLE: &str = "spark-role";
/// Spark's application id (`spark-<32 hex>`), set by Spark on driver and executor pods.
pub const LABEL_SPARK_APP_SELECTOR: &str = "spark-app-selector";
/// Spark's executor id (a decimal number), set on executor pods.
pub const LABEL_SPARK_EXEC_ID: &str = "spark-exec-id";
/// Spark's sanitised application name (see [`crate::naming::spark_app_name_label`]).
pub const LABEL_SPARK_APP_NAME: &str = "spark-app-name";
/// Version of the Spark that built the pod.
pub const LABEL_SPARK_VERSION: &str = "spark-version";

/// Value of the boolean labels above.
pub const LABEL_VALUE_TRUE: &str = "true";

/// Finalizer on driver pods: removed only once the driver's terminal state is recorded in the
/// SparkApplication status, so a pod deleted early cannot take its exit code with it.
pub const FINALIZER_DRIVER_PROTECTION: &str = "sparkoperator.k8s.io/driver-protection";

/// Annotation required on CRDs of protected `*.k8s.io` groups.
pub const ANNOTATION_API_APPROVED: &str = "api-approved.kubernetes.io";
/// The approval Kubeflow's CRDs point at; ours reuse it because the group is the same.
pub const API_APPROVED_URL: &str = "https://github.com/kubeflow/spark-operator/pull/1298";

/// Name Spark gives the driver container.
pub const DRIVER_CONTAINER_NAME: &str = "spark-kubernetes-driver";
/// Name Spark gives the executor container.
pub const EXECUTOR_CONTAINER_NAME: &str = "spark-kubernetes-executor";

/// Labels Spark reserves on driver pods: a user label with one of these names makes spark-submit fail.
pub const SPARK_RESERVED_DRIVER_LABELS: [&str; 2] = [LABEL_SPARK_APP_SELECTOR, LABEL_SPARK_ROLE];
/// Labels Spark reserves on executor pods.
pub const SPARK_RESERVED_EXECUTOR_LABELS: [&str; 3] = [LABEL_SPARK_APP_SELECTOR, LABEL_SPARK_ROLE, LABEL_SPARK_EXEC_ID];

/// The value of the `spark-role` label.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SparkRole {
    Driver,
    Executor,
}

impl SparkRole {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Driver => "driver",
            Self::Executor => "executor",
        }
    }

    /// Reads a `spark-role` label value; other roles (e.g. `connect-server`) are not ours.
    pub fn parse(value: &str) -> Option<Self> {
        match value {
            "driver" => Some(Self::Driver),
            "executor" => Some(Self::Executor),
            _ => None,
        }
    }
}

impl fmt::Display for SparkRole {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spark_role_round_trips_through_its_label_value() {
        for role in [SparkRole::Driver, SparkRole::Executor] {
            assert_eq!(SparkRole::parse(role.as_str()), Some(role));
        }
        assert_eq!(SparkRole::parse("connect-server"), None);
    }

    #[test]
    fn api_version_is_group_slash_version() {
        assert_eq!(API_VERSION, format!("{GROUP}/{VERSION}"));
    }
}
