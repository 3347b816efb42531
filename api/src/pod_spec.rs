//! The driver and executor parts of a SparkApplication spec (Kubeflow's `SparkPodSpec`, `DriverSpec`,
//! `ExecutorSpec`), field for field, with Kubeflow's JSON names.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Affinity, Container, EnvFromSource, EnvVar, HostAlias, Lifecycle, PodDNSConfig, PodSecurityContext,
    PodTemplateSpec, SecurityContext, Toleration, VolumeMount,
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Settings shared by the driver and the executors.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SparkPodSpec {
    /// Pod template for what the typed fields cannot express (needs Spark >= 3.0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::embedded::pod_template::<PodTemplateSpec>")]
    pub template: Option<PodTemplateSpec>,
    /// spark.{driver,executor}.cores.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub cores: Option<i32>,
    /// Hard CPU limit (a Kubernetes quantity, e.g. 1500m).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub core_limit: Option<String>,
    /// JVM heap as a Spark memory string (512m, 1g).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<String>,
    /// Off-heap memory as a Spark memory string, MiB when no unit is given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_overhead: Option<String>,
    /// Container memory limit; Spark (1g) or Kubernetes (1Gi) units.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_limit: Option<String>,
    /// GPU resource to request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu: Option<GpuSpec>,
    /// Container image; overrides spec.image.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// ConfigMaps to mount.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub config_maps: Vec<NamePath>,
    /// Secrets to mount.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub secrets: Vec<SecretInfo>,
    /// Environment variables of the Spark container.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "crate::embedded::list::<EnvVar>")]
    pub env: Vec<EnvVar>,
    /// Deprecated: use env.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env_vars: BTreeMap<String, String>,
    /// Sources of environment variables of the Spark container.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "crate::embedded::list::<EnvFromSource>")]
    pub env_from: Vec<EnvFromSource>,
    /// Deprecated: use env with valueFrom.secretKeyRef.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env_secret_key_refs: BTreeMap<String, NameKey>,
    /// Pod labels.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Pod annotations.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    /// Mounts of spec.volumes into the Spark container.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "crate::embedded::list::<VolumeMount>")]
    pub volume_mounts: Vec<VolumeMount>,
    /// Pod affinity; replaces the pod's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::embedded::object::<Affinity>")]
    pub affinity: Option<Affinity>,
    /// Pod tolerations.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "crate::embedded::list::<Toleration>")]
    pub tolerations: Vec<Toleration>,
    /// Pod security context.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::embedded::object::<PodSecurityContext>")]
    pub pod_security_context: Option<PodSecurityContext>,
    /// Security context of the Spark container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::embedded::object::<SecurityContext>")]
    pub security_context: Option<SecurityContext>,
    /// Scheduler of the pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduler_name: Option<String>,
    /// Containers running beside the Spark container.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "crate::embedded::list::<Container>")]
    pub sidecars: Vec<Container>,
    /// Init containers.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "crate::embedded::list::<Container>")]
    pub init_containers: Vec<Container>,
    /// Use the host's network.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_network: Option<bool>,
    /// Pod node selector; exclusive with spec.nodeSelector.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_selector: BTreeMap<String, String>,
    /// Pod DNS settings.
    #[serde(default, rename = "dnsConfig", skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::embedded::object::<PodDNSConfig>")]
    pub dns_config: Option<PodDNSConfig>,
    /// Pod termination grace period.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub termination_grace_period_seconds: Option<i64>,
    /// Service account of the pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_account: Option<String>,
    /// Extra /etc/hosts entries.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "crate::embedded::list::<HostAlias>")]
    pub host_aliases: Vec<HostAlias>,
    /// Share one process namespace between the pod's containers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub share_process_namespace: Option<bool>,
}

/// The driver.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DriverSpec {
    #[serde(flatten)]
    pub pod: SparkPodSpec,
    /// Driver pod name (default <app>-driver); a DNS-1123 subdomain.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    // Anchored: the API server matches a pattern anywhere in the value, so an unanchored one checks nothing.
    #[schemars(
        regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"),
        length(max = 253)
    )]
    pub pod_name: Option<String>,
    /// CPU request (a Kubernetes quantity); spark.kubernetes.driver.request.cores.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub core_request: Option<String>,
    /// spark.driver.extraJavaOptions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub java_options: Option<String>,
    /// Lifecycle hooks of the driver container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::embedded::object::<Lifecycle>")]
    pub lifecycle: Option<Lifecycle>,
    /// API server URL the driver uses (default https://kubernetes.default.svc).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubernetes_master: Option<String>,
    /// Annotations of the headless driver Service.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub service_annotations: BTreeMap<String, String>,
    /// Labels of the headless driver Service.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub service_labels: BTreeMap<String, String>,
    /// Extra container ports.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ports: Vec<Port>,
    /// PriorityClass of the driver pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_class_name: Option<String>,
}

/// The executors.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ExecutorSpec {
    #[serde(flatten)]
    pub pod: SparkPodSpec,
    /// Number of executors; 0 only with dynamic allocation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub instances: Option<i32>,
    /// CPU request (a Kubernetes quantity); spark.kubernetes.executor.request.cores.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub core_request: Option<String>,
    /// spark.executor.extraJavaOptions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub java_options: Option<String>,
    /// Lifecycle hooks of the executor container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::embedded::object::<Lifecycle>")]
    pub lifecycle: Option<Lifecycle>,
    /// spark.kubernetes.executor.deleteOnTermination.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delete_on_termination: Option<bool>,
    /// Extra container ports.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ports: Vec<Port>,
    /// PriorityClass of the executor pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_class_name: Option<String>,
}

/// A named object and the path to mount it at.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct NamePath {
    pub name: String,
    pub path: String,
}

/// How a mounted secret is used.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum SecretType {
    // Sets GOOGLE_APPLICATION_CREDENTIALS to <path>/key.json.
    #[serde(rename = "GCPServiceAccount")]
    GcpServiceAccount,
    // Sets HADOOP_TOKEN_FILE_LOCATION to <path>/hadoop.token.
    HadoopDelegationToken,
    Generic,
}

/// A secret to mount.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SecretInfo {
    pub name: String,
    pub path: String,
    #[serde(rename = "secretType")]
    pub secret_type: SecretType,
}

/// A key of a Secret.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct NameKey {
    pub name: String,
    pub key: String,
}

/// An extra container port.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Port {
    /// An IANA service name: at most 15 lower-case letters, digits and '-'.
    #[schemars(length(max = 15))]
    pub name: String,
    /// TCP, UDP or SCTP.
    #[schemars(extend("enum" = crate::bounds::PROTOCOLS))]
    pub protocol: String,
    #[schemars(range(min = 1, max = 65535))]
    pub container_port: i32,
}

/// A GPU request.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct GpuSpec {
    /// Resource name, e.g. nvidia.com/gpu.
    pub name: String,
    /// Number of GPUs.
    #[schemars(range(min = 1, max = crate::bounds::MAX_INT32))]
    pub quantity: i64,
}
