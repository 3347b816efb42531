//! The `SparkApplication` custom resource (`sparkoperator.k8s.io/v1beta2`), field for field as Kubeflow's,
//! so that existing manifests apply unchanged. Optional fields are `Option`s or empty collections that are
//! left out when serializing, so a manifest reads and writes back exactly.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Volume;
use k8s_openapi::api::networking::v1::IngressTLS;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub use crate::pod_spec::{
    DriverSpec, ExecutorSpec, GpuSpec, NameKey, NamePath, Port, SecretInfo, SecretType, SparkPodSpec,
};
use crate::status::SparkApplicationStatus;

/// A Spark application: what spark-submit would be told, plus how the operator runs and retries it.
#[derive(CustomResource, Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "sparkoperator.k8s.io",
    version = "v1beta2",
    kind = "SparkApplication",
    singular = "sparkapplication",
    plural = "sparkapplications",
    shortname = "sparkapp",
    namespaced,
    status = "SparkApplicationStatus",
    derive = "PartialEq",
    doc = "A Spark application run by the Spark operator.",
    annotation("api-approved.kubernetes.io", "https://github.com/kubeflow/spark-operator/pull/1298"),
    printcolumn = r#"{"name": "Status", "type": "string", "jsonPath": ".status.applicationState.state"}"#,
    printcolumn = r#"{"name": "Attempts", "type": "integer", "jsonPath": ".status.executionAttempts"}"#,
    printcolumn = r#"{"name": "Start", "type": "string", "jsonPath": ".status.lastSubmissionAttemptTime"}"#,
    printcolumn = r#"{"name": "Finish", "type": "string", "jsonPath": ".status.terminationTime"}"#,
    printcolumn = r#"{"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct SparkApplicationSpec {
    /// true: delete the pods and stay SUSPENDED until set back to false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suspend: Option<bool>,
    /// Language of the application.
    #[serde(rename = "type")]
    pub r#type: SparkApplicationType,
    /// Spark version of the image, e.g. 4.0.4.
    pub spark_version: String,
    /// Deploy mode; default cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<DeployMode>,
    /// --proxy-user.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proxy_user: Option<String>,
    /// Image of the driver and executors.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// Pull policy of the image: Always, IfNotPresent or Never.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("enum" = crate::bounds::IMAGE_PULL_POLICIES))]
    pub image_pull_policy: Option<String>,
    /// Names of image pull secrets.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub image_pull_secrets: Vec<String>,
    /// Main class (Java/Scala).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub main_class: Option<String>,
    /// The application's jar, Python or R file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub main_application_file: Option<String>,
    /// Application arguments.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub arguments: Vec<String>,
    /// Spark configuration, as --conf key=value.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub spark_conf: BTreeMap<String, String>,
    /// Hadoop configuration, passed as spark.hadoop.<key>.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub hadoop_conf: BTreeMap<String, String>,
    /// ConfigMap mounted at /etc/spark/conf (SPARK_CONF_DIR).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spark_config_map: Option<String>,
    /// ConfigMap mounted at /etc/hadoop/conf (HADOOP_CONF_DIR).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hadoop_config_map: Option<String>,
    /// Volumes the driver and executors may mount.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "crate::embedded::list::<Volume>")]
    pub volumes: Vec<Volume>,
    /// The driver.
    pub driver: DriverSpec,
    /// The executors.
    pub executor: ExecutorSpec,
    /// Dependencies: jars, files, packages, ...
    #[serde(default, skip_serializing_if = "Dependencies::is_empty")]
    pub deps: Dependencies,
    /// When to rerun the application.
    #[serde(default, skip_serializing_if = "RestartPolicy::is_empty")]
    pub restart_policy: RestartPolicy,
    /// Node selector of all pods; exclusive with driver/executor nodeSelector.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_selector: BTreeMap<String, String>,
    /// Legacy, unused: see restartPolicy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub failure_retries: Option<i32>,
    /// Legacy, unused: see restartPolicy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = crate::bounds::MAX_SECONDS))]
    pub retry_interval: Option<i64>,
    /// Major Python version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub python_version: Option<PythonVersion>,
    /// spark.kubernetes.memoryOverheadFactor.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_overhead_factor: Option<String>,
    /// Metrics.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub monitoring: Option<MonitoringSpec>,
    /// Batch scheduler: volcano, yunikorn or a scheduler name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch_scheduler: Option<String>,
    /// Seconds to keep the application after it terminates; 0 or less: delete it as soon as it ends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = crate::bounds::MIN_TTL_SECONDS, max = crate::bounds::MAX_SECONDS))]
    pub time_to_live_seconds: Option<i64>,
    /// Batch scheduler options.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch_scheduler_options: Option<BatchSchedulerConfiguration>,
    /// Service and Ingress of the Spark UI.
    #[serde(default, rename = "sparkUIOptions", skip_serializing_if = "Option::is_none")]
    pub spark_ui_options: Option<SparkUiConfiguration>,
    /// Services and Ingresses for other driver ports.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub driver_ingress_options: Vec<DriverIngressConfiguration>,
    /// Dynamic allocation of executors.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dynamic_allocation: Option<DynamicAllocation>,
    /// Create a PodDisruptionBudget for the driver.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub driver_pod_disruption_budget: Option<bool>,
}

/// Language of a Spark application.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum SparkApplicationType {
    Java,
    Python,
    Scala,
    R,
}

impl SparkApplicationType {
    /// JVM applications get Spark's 0.1 memory overhead factor, others 0.4.
    pub fn is_jvm(self) -> bool {
        matches!(self, Self::Java | Self::Scala)
    }
}

/// Where the driver runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum DeployMode {
    #[default]
    Cluster,
    Client,
}

/// Major Python version of a PySpark application.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum PythonVersion {
    #[serde(rename = "2")]
    Two,
    #[serde(rename = "3")]
    Three,
}

/// When and how often to rerun an application.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RestartPolicy {
    /// Never, OnFailure or Always; default Never.
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub r#type: Option<RestartPolicyType>,
    /// Resubmissions after a failed submission.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub on_submission_failure_retries: Option<i32>,
    /// Reruns after a failed run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub on_failure_retries: Option<i32>,
    /// Seconds between resubmissions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = crate::bounds::MAX_SECONDS))]
    pub on_submission_failure_retry_interval: Option<i64>,
    /// Seconds between reruns.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = crate::bounds::MAX_SECONDS))]
    pub on_failure_retry_interval: Option<i64>,
}

impl RestartPolicy {
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }

    /// The policy type, Never when unset.
    pub fn policy_type(&self) -> RestartPolicyType {
        self.r#type.unwrap_or_default()
    }
}

/// Restart policy type.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum RestartPolicyType {
    #[default]
    Never,
    OnFailure,
    Always,
}

/// Dependencies of an application.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Dependencies {
    /// --jars.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub jars: Vec<String>,
    /// --files.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<String>,
    /// --py-files.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub py_files: Vec<String>,
    /// --packages (groupId:artifactId:version).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub packages: Vec<String>,
    /// --exclude-packages (groupId:artifactId).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub exclude_packages: Vec<String>,
    /// --repositories.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub repositories: Vec<String>,
    /// --archives.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub archives: Vec<String>,
}

impl Dependencies {
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }
}

/// Metrics of the driver and executors.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MonitoringSpec {
    /// Expose the driver's metrics.
    pub expose_driver_metrics: bool,
    /// Expose the executors' metrics.
    pub expose_executor_metrics: bool,
    /// Content of metrics.properties.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metrics_properties: Option<String>,
    /// Path of metrics.properties in the container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metrics_properties_file: Option<String>,
    /// Prometheus JMX exporter.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prometheus: Option<PrometheusSpec>,
}

/// Default path of metrics.properties in the container.
pub const DEFAULT_METRICS_PROPERTIES_FILE: &str = "/etc/metrics/conf/metrics.properties";
/// Default port of the Prometheus JMX exporter.
pub const DEFAULT_PROMETHEUS_PORT: i32 = 8090;
/// Default name of the Prometheus JMX exporter port.
pub const DEFAULT_PROMETHEUS_PORT_NAME: &str = "jmx-exporter";

/// The Prometheus JMX exporter.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PrometheusSpec {
    /// Path of the exporter jar in the image.
    pub jmx_exporter_jar: String,
    /// Exporter port; default 8090.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1024, max = 49151))]
    pub port: Option<i32>,
    /// Exporter port name; default jmx-exporter.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port_name: Option<String>,
    /// Exporter configuration file in the image; wins over configuration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_file: Option<String>,
    /// Exporter configuration content.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub configuration: Option<String>,
}

impl PrometheusSpec {
    pub fn port_or_default(&self) -> i32 {
        self.port.unwrap_or(DEFAULT_PROMETHEUS_PORT)
    }

    pub fn port_name_or_default(&self) -> &str {
        self.port_name.as_deref().unwrap_or(DEFAULT_PROMETHEUS_PORT_NAME)
    }
}

/// Batch scheduler options.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BatchSchedulerConfiguration {
    /// Queue (Volcano, YuniKorn).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<String>,
    /// PriorityClass of the pod group.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_class_name: Option<String>,
    /// Resources the scheduler reserves for the application.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "crate::embedded::quantity_map")]
    pub resources: BTreeMap<String, Quantity>,
}

/// Default name of the Spark UI service port.
pub const DEFAULT_UI_SERVICE_PORT_NAME: &str = "spark-driver-ui-port";

/// Service and Ingress of the Spark UI.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SparkUiConfiguration {
    /// Service port; default spark.ui.port or 4040.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 65535))]
    pub service_port: Option<i32>,
    /// Service port name; default spark-driver-ui-port.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 63))]
    pub service_port_name: Option<String>,
    /// Service type; default ClusterIP.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("enum" = crate::bounds::SERVICE_TYPES))]
    pub service_type: Option<String>,
    /// Service annotations.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub service_annotations: BTreeMap<String, String>,
    /// Service labels.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub service_labels: BTreeMap<String, String>,
    /// Ingress annotations.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub ingress_annotations: BTreeMap<String, String>,
    /// Ingress TLS.
    #[serde(default, rename = "ingressTLS", skip_serializing_if = "Vec::is_empty")]
    pub ingress_tls: Vec<IngressTLS>,
}

/// Service and Ingress for one more driver port.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DriverIngressConfiguration {
    /// Service port; required and unique.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 65535))]
    pub service_port: Option<i32>,
    /// Service port name; default driver-ing-<port>.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_port_name: Option<String>,
    /// Service type; default ClusterIP.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("enum" = crate::bounds::SERVICE_TYPES))]
    pub service_type: Option<String>,
    /// Service annotations.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub service_annotations: BTreeMap<String, String>,
    /// Service labels.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub service_labels: BTreeMap<String, String>,
    /// Ingress URL format; required and unique.
    #[serde(default, rename = "ingressURLFormat", skip_serializing_if = "String::is_empty")]
    pub ingress_url_format: String,
    /// Ingress annotations.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub ingress_annotations: BTreeMap<String, String>,
    /// Ingress TLS.
    #[serde(default, rename = "ingressTLS", skip_serializing_if = "Vec::is_empty")]
    pub ingress_tls: Vec<IngressTLS>,
}

/// Dynamic allocation of executors.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DynamicAllocation {
    /// Turn dynamic allocation on.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub enabled: bool,
    /// Executors to start with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub initial_executors: Option<i32>,
    /// Lower bound of executors.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub min_executors: Option<i32>,
    /// Upper bound of executors.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub max_executors: Option<i32>,
    /// Track shuffle files instead of using a shuffle service; default true.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shuffle_tracking_enabled: Option<bool>,
    /// Milliseconds to keep executors holding shuffle data.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub shuffle_tracking_timeout: Option<i64>,
}

impl SparkApplication {
    /// The application's current state; New when no status was written yet.
    pub fn state(&self) -> crate::state::ApplicationStateType {
        self.status
            .as_ref()
            .map(|s| s.application_state.state)
            .unwrap_or_default()
    }
}
