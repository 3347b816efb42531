//! Decoration: applying a SparkApplication's pod-level settings to a driver or executor pod.
//!
//! One pure function, [`decorate_pod`], used by the controller for the driver pods it builds and by the
//! admission webhook for the executor pods Spark's driver creates. It applies the 26 settings Kubeflow's
//! pod webhook applies (`mutateSparkPod`), in Kubeflow's order, so that where two settings touch the same
//! field the same one wins. Unlike Kubeflow it is:
//!
//! - **idempotent**: decorating a decorated pod changes nothing, even after the API server has defaulted
//!   it in between; nothing is ever duplicated (env vars, volumes, mounts, ports, containers,
//!   tolerations, host aliases, envFrom sources, the ownerReference). See [`merge`] for the rules.
//! - **all or nothing**: a setting that cannot be applied (an unparseable `memoryLimit`, a volume that
//!   clashes with one already in the pod, ...) is a [`DecorationError`] naming the SparkApplication
//!   field; the input pod is never half-changed, so the webhook can deny the pod instead.
//!
//! Kubeflow faults not copied: executor `env` skipped when the driver has none; duplicates on every
//! repeated or template-overlapping setting; ConfigMap volume names cut at 63 characters (or left with
//! dots), both invalid; mounts of a volume that only the pod template defines dropped; a GPU with an empty
//! name or a zero quantity silently ignored; `lifecycle` looked up by a different container rule than
//! everything else; `priority` cleared even when the priority class is unchanged; explicit `false` for
//! `hostNetwork` and `shareProcessNamespace` ignored.

mod containers;
mod merge;
mod pod;
mod volumes;

#[cfg(test)]
mod tests;

use k8s_openapi::api::core::v1::{Lifecycle, Pod};

use crate::application::{Port, SparkApplication, SparkPodSpec};
use crate::field::FieldPath;
use crate::labels::{DRIVER_CONTAINER_NAME, EXECUTOR_CONTAINER_NAME, SparkRole};

pub use pod::application_owner_reference;
pub use volumes::config_map_volume_name;

/// Executor container name used by Spark 2.x; Kubeflow still looks for it.
pub const LEGACY_EXECUTOR_CONTAINER_NAME: &str = "executor";

/// Why a pod could not be decorated. Every variant names the SparkApplication field (or the pod part)
/// at fault and says what to do.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DecorationError {
    #[error("the {role} pod has no containers, so there is no Spark container to configure")]
    NoContainer { role: SparkRole },
    #[error(
        "{path}: the SparkApplication has no {field}, so the driver pod cannot be owned by it; decorate the stored object, not a manifest"
    )]
    MissingOwnerIdentity { path: FieldPath, field: &'static str },
    #[error(
        "{path}: the driver pod already has a controller, {kind} {name:?}, but its controller must be the SparkApplication and a pod can have only one: remove this ownerReference or set controller: false"
    )]
    OtherController {
        path: FieldPath,
        kind: String,
        name: String,
    },
    #[error("{path}: {value:?} is not a memory size: use Spark units (2g, 512m) or Kubernetes units (2Gi)")]
    InvalidMemoryLimit { path: FieldPath, value: String },
    #[error(
        "{path}: memory limit {limit} is below the container's memory request {request} (memory plus overhead), which Kubernetes rejects: raise memoryLimit or lower memory/memoryOverhead"
    )]
    MemoryLimitBelowRequest {
        path: FieldPath,
        limit: String,
        request: String,
    },
    #[error("{path}: {reason}")]
    InvalidGpu { path: FieldPath, reason: String },
    #[error(
        "{path}: the pod already has a different volume named {name:?} (from the pod template or Spark): rename one of them"
    )]
    VolumeConflict { path: FieldPath, name: String },
    #[error(
        "{path}: {mount_path:?} is already the mount path of volume {existing:?} in the Spark container: use another path"
    )]
    MountPathConflict {
        path: FieldPath,
        mount_path: String,
        existing: String,
    },
    #[error(
        "{path}: the pod already has a different container named {name:?} (from the pod template): rename one of them or define it in one place"
    )]
    ContainerConflict { path: FieldPath, name: String },
    #[error("{path}: {name:?} is the name of the Spark container: give the container another name")]
    SparkContainerName { path: FieldPath, name: String },
    #[error("{path}: the Spark container already has a different port named {name:?}: use another name")]
    PortConflict { path: FieldPath, name: String },
}

impl DecorationError {
    /// The SparkApplication field at fault, when there is one.
    pub fn path(&self) -> Option<&FieldPath> {
        match self {
            Self::NoContainer { .. } => None,
            Self::MissingOwnerIdentity { path, .. }
            | Self::OtherController { path, .. }
            | Self::InvalidMemoryLimit { path, .. }
            | Self::MemoryLimitBelowRequest { path, .. }
            | Self::InvalidGpu { path, .. }
            | Self::VolumeConflict { path, .. }
            | Self::MountPathConflict { path, .. }
            | Self::ContainerConflict { path, .. }
            | Self::SparkContainerName { path, .. }
            | Self::PortConflict { path, .. } => Some(path),
        }
    }
}

/// The settings of one role (driver or executor) and where they live in the SparkApplication.
struct RoleSettings<'a> {
    app: &'a SparkApplication,
    role: SparkRole,
    pod: &'a SparkPodSpec,
    ports: &'a [Port],
    lifecycle: Option<&'a Lifecycle>,
    priority_class_name: Option<&'a str>,
    /// `spec.driver` or `spec.executor`.
    path: FieldPath,
}

impl<'a> RoleSettings<'a> {
    fn new(app: &'a SparkApplication, role: SparkRole) -> Self {
        let spec = &app.spec;
        let path = FieldPath::new("spec").child(role.as_str());
        match role {
            SparkRole::Driver => Self {
                app,
                role,
                pod: &spec.driver.pod,
                ports: &spec.driver.ports,
                lifecycle: spec.driver.lifecycle.as_ref(),
                priority_class_name: spec.driver.priority_class_name.as_deref(),
                path,
            },
            SparkRole::Executor => Self {
                app,
                role,
                pod: &spec.executor.pod,
                ports: &spec.executor.ports,
                lifecycle: spec.executor.lifecycle.as_ref(),
                priority_class_name: spec.executor.priority_class_name.as_deref(),
                path,
            },
        }
    }
}

/// Applies `app`'s settings for `role` to a copy of `pod` and returns it; `pod` is never changed, so a
/// failure leaves nothing half-applied. Applying it to its own result returns that result unchanged.
pub fn decorate_pod(pod: &Pod, app: &SparkApplication, role: SparkRole) -> Result<Pod, DecorationError> {
    let settings = RoleSettings::new(app, role);
    let mut pod = pod.clone();
    let spec = pod.spec.get_or_insert_default();
    let spark = spark_container_index(&spec.containers, role).ok_or(DecorationError::NoContainer { role })?;

    // Kubeflow's order (sparkpod_defaulter.go mutateSparkPod), so the same setting wins where two meet.
    pod::add_owner_reference(&mut pod.metadata, &settings)?;
    let spec = pod.spec.get_or_insert_default();
    containers::add_env(&mut spec.containers[spark], &settings);
    containers::add_env_from(&mut spec.containers[spark], &settings);
    volumes::add_hadoop_config_map(spec, spark, &settings)?;
    volumes::add_spark_config_map(spec, spark, &settings)?;
    volumes::add_config_maps(spec, spark, &settings)?;
    volumes::add_volumes(spec, spark, &settings)?;
    containers::add_ports(&mut spec.containers[spark], &settings)?;
    pod::add_host_network(spec, &settings);
    pod::add_host_aliases(spec, &settings);
    containers::add_init_containers(spec, spark, &settings)?;
    containers::add_sidecars(spec, spark, &settings)?;
    pod::add_dns_config(spec, &settings);
    pod::add_priority_class_name(spec, &settings);
    pod::add_scheduler_name(spec, &settings);
    pod::add_batch_scheduler_marks(&mut pod.metadata, app, role);
    let spec = pod.spec.get_or_insert_default();
    pod::add_node_selector(spec, &settings);
    pod::add_affinity(spec, &settings);
    pod::add_tolerations(spec, &settings);
    containers::add_memory_limit(&mut spec.containers[spark], &settings)?;
    containers::add_gpu(&mut spec.containers[spark], &settings)?;
    volumes::add_prometheus(spec, spark, &settings)?;
    containers::add_security_context(&mut spec.containers[spark], &settings);
    pod::add_pod_security_context(spec, &settings);
    pod::add_termination_grace_period(spec, &settings);
    containers::add_lifecycle(&mut spec.containers[spark], &settings);
    pod::add_share_process_namespace(spec, &settings);
    pod::add_prometheus_annotations(&mut pod.metadata, &settings);
    Ok(pod)
}

/// The Spark container: the one with Spark's name for the role (Spark 2's `executor` included), else the
/// first container, which is the one Spark configures when a pod template names it otherwise.
pub fn spark_container_index(containers: &[k8s_openapi::api::core::v1::Container], role: SparkRole) -> Option<usize> {
    let names: &[&str] = match role {
        SparkRole::Driver => &[DRIVER_CONTAINER_NAME],
        SparkRole::Executor => &[EXECUTOR_CONTAINER_NAME, LEGACY_EXECUTOR_CONTAINER_NAME],
    };
    if containers.is_empty() {
        return None;
    }
    Some(
        containers
            .iter()
            .position(|c| names.contains(&c.name.as_str()))
            .unwrap_or(0),
    )
}
