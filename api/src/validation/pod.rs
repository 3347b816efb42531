//! Checks of the driver and executor parts of the spec.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use crate::application::{Port, SparkPodSpec};
use crate::field::{FieldPath, ValidationReport};
use crate::quantity::{KubernetesQuantity, SparkMemory, SparkMemoryUnit};

use super::{kube, names};

/// Which of the two pods a [`SparkPodSpec`] describes.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Role {
    Driver,
    Executor,
}

/// Volume names that Spark itself mounts as local directories (no spec.volumes entry needed).
const SPARK_LOCAL_DIR_PREFIX: &str = "spark-local-dir-";

pub(super) fn check_pod(
    pod: &SparkPodSpec,
    role: Role,
    volume_names: &BTreeSet<&str>,
    path: &FieldPath,
    report: &mut ValidationReport,
) {
    if let Some(cores) = pod.cores
        && cores < 1
    {
        report.error(
            path.child("cores"),
            format!("must be at least 1, got {cores}: use coreRequest for fractions of a CPU"),
        );
    }
    check_spark_memory(pod.memory.as_deref(), true, &path.child("memory"), report);
    check_spark_memory(
        pod.memory_overhead.as_deref(),
        false,
        &path.child("memoryOverhead"),
        report,
    );
    if let Some(limit) = pod.memory_limit.as_deref() {
        let positive = match SparkMemory::parse(limit, SparkMemoryUnit::Bytes) {
            Ok(memory) => Some(memory.bytes() > 0),
            Err(_) => KubernetesQuantity::parse(limit).ok().map(|q| q.value() > 0.0),
        };
        match positive {
            Some(true) => {}
            Some(false) => report.error(path.child("memoryLimit"), format!("must be more than 0, got {limit:?}")),
            None => report.error(
                path.child("memoryLimit"),
                format!("{limit:?} is not a memory size: use Spark units (2g) or Kubernetes units (2Gi)"),
            ),
        }
    }
    if let Some(image) = pod.image.as_deref() {
        kube::check_image(image, &path.child("image"), report);
    }
    if let Some(account) = pod.service_account.as_deref() {
        kube::check_subdomain_name(account, &path.child("serviceAccount"), report);
    }
    if let Some(scheduler) = pod.scheduler_name.as_deref().filter(|s| !s.is_empty()) {
        kube::check_subdomain_name(scheduler, &path.child("schedulerName"), report);
    }
    if let Some(seconds) = pod.termination_grace_period_seconds
        && seconds < 0
    {
        report.error(
            path.child("terminationGracePeriodSeconds"),
            kube::invalid(seconds, "must be greater than or equal to 0"),
        );
    }
    kube::check_env(&pod.env, &path.child("env"), report);
    kube::check_env_from(&pod.env_from, &path.child("envFrom"), report);
    for name in pod.env_vars.keys() {
        if !kube::env_var_name_valid(name) {
            report.error(
                path.child("envVars").key(name),
                kube::invalid(name, kube::ENV_VAR_NAME_MSG),
            );
        }
    }
    for (name, reference) in &pod.env_secret_key_refs {
        let at = path.child("envSecretKeyRefs").key(name);
        if !kube::env_var_name_valid(name) {
            report.error(at.clone(), kube::invalid(name, kube::ENV_VAR_NAME_MSG));
        }
        kube::check_subdomain_name(&reference.name, &at.child("name"), report);
        if reference.key.is_empty() {
            report.error(at.child("key"), "Required value");
        }
    }
    kube::check_volume_mounts(&pod.volume_mounts, &path.child("volumeMounts"), report);
    check_positive_quantity(pod.core_limit.as_deref(), &path.child("coreLimit"), report);

    if let Some(gpu) = &pod.gpu {
        if gpu.name.is_empty() {
            report.error(
                path.child("gpu").child("name"),
                "is required: the extended resource name, e.g. nvidia.com/gpu",
            );
        }
        if gpu.quantity > crate::bounds::MAX_INT32 {
            report.error(
                path.child("gpu").child("quantity"),
                format!("must be at most {}, got {}", crate::bounds::MAX_INT32, gpu.quantity),
            );
        }
        if gpu.quantity < 1 {
            report.error(
                path.child("gpu").child("quantity"),
                format!(
                    "must be at least 1, got {}; remove gpu to run without one",
                    gpu.quantity
                ),
            );
        }
    }

    check_labels(&pod.labels, role, &path.child("labels"), report);
    for key in pod.annotations.keys() {
        if let Err(problem) = names::label_key(key) {
            report.error(path.child("annotations").key(key), format!("annotation {problem}"));
        }
    }

    for (index, config_map) in pod.config_maps.iter().enumerate() {
        let at = path.child("configMaps").index(index);
        if let Err(problem) = names::dns1123_subdomain(&config_map.name) {
            report.error(at.child("name"), format!("ConfigMap name {problem}"));
        }
        if !config_map.path.starts_with('/') {
            report.error(
                at.child("path"),
                format!("{:?} must be an absolute mount path", config_map.path),
            );
        }
    }
    for (index, secret) in pod.secrets.iter().enumerate() {
        let at = path.child("secrets").index(index);
        if let Err(problem) = names::dns1123_subdomain(&secret.name) {
            report.error(at.child("name"), format!("Secret name {problem}"));
        }
        if !secret.path.starts_with('/') {
            report.error(
                at.child("path"),
                format!("{:?} must be an absolute mount path", secret.path),
            );
        }
    }

    // Kubeflow silently skips a mount whose volume is missing from spec.volumes; say so instead.
    for (index, mount) in pod.volume_mounts.iter().enumerate() {
        if !mount.name.starts_with(SPARK_LOCAL_DIR_PREFIX) && !volume_names.contains(mount.name.as_str()) {
            report.warning(
                path.child("volumeMounts").index(index).child("name"),
                format!(
                    "no volume named {:?} in spec.volumes, so this mount is ignored: add the volume to spec.volumes",
                    mount.name
                ),
            );
        }
    }

    let spark_container = match role {
        Role::Driver => crate::labels::DRIVER_CONTAINER_NAME,
        Role::Executor => crate::labels::EXECUTOR_CONTAINER_NAME,
    };
    // The Spark container is in the pod too: a sidecar of the same name would collide with it.
    let mut taken = std::collections::BTreeSet::from([spark_container.to_owned()]);
    let extra: Vec<_> = pod
        .sidecars
        .iter()
        .enumerate()
        .map(|(i, c)| (path.child("sidecars").index(i), c))
        .chain(
            pod.init_containers
                .iter()
                .enumerate()
                .map(|(i, c)| (path.child("initContainers").index(i), c)),
        )
        .collect();
    for (at, container) in &extra {
        kube::check_container(container, true, at, report);
    }
    kube::check_unique_container_names(
        extra.iter().map(|(at, c)| (at.child("name"), c.name.as_str())),
        &mut taken,
        report,
    );
    check_template_owners(pod, role, path, report);
    if let Some(template) = &pod.template {
        let at = path.child("template");
        if let Some(metadata) = &template.metadata {
            let meta_path = at.child("metadata");
            check_labels(
                metadata.labels.as_ref().unwrap_or(&BTreeMap::new()),
                role,
                &meta_path.child("labels"),
                report,
            );
            // A finalizer nobody removes makes the pod undeletable; the operator alone sets the driver's.
            for (index, finalizer) in metadata.finalizers.iter().flatten().enumerate() {
                report.error(
                    meta_path.child("finalizers").index(index),
                    format!(
                        "Forbidden: {finalizer:?}: pod templates may not set finalizers (nothing would remove them, and the pod could never be deleted); the operator manages the driver pod's finalizer itself"
                    ),
                );
            }
        }
        if let Some(spec) = &template.spec {
            kube::check_pod_spec(spec, &at.child("spec"), report);
        }
    }
}

/// A pod can have only one controller, and the operator picks it: the SparkApplication controls its
/// driver pod (so deleting the application deletes the driver) and Spark makes the driver pod the
/// controller of its executors (so they go with it). A template that brings another controller would
/// take that away, or make the API server reject the pod.
fn check_template_owners(pod: &SparkPodSpec, role: Role, path: &FieldPath, report: &mut ValidationReport) {
    let Some(owners) = pod
        .template
        .as_ref()
        .and_then(|t| t.metadata.as_ref())
        .and_then(|m| m.owner_references.as_ref())
    else {
        return;
    };
    let controller = match role {
        Role::Driver => "the SparkApplication is the controller of its driver pod",
        Role::Executor => "the driver pod is the controller of its executor pods",
    };
    let at = path.child("template").child("metadata").child("ownerReferences");
    for (index, owner) in owners.iter().enumerate() {
        if owner.controller == Some(true) {
            report.error(
                at.index(index).child("controller"),
                format!(
                    "must not be true ({} {:?}): {controller}, and a pod can have only one controller; remove this ownerReference or set controller: false",
                    owner.kind, owner.name
                ),
            );
        }
    }
}

pub(super) fn check_driver_pod_name(pod_name: Option<&str>, path: &FieldPath, report: &mut ValidationReport) {
    if let Some(name) = pod_name
        && let Err(problem) = names::dns1123_subdomain(name)
    {
        report.error(path.clone(), format!("driver pod name {problem}"));
    }
}

pub(super) fn check_core_request(value: Option<&str>, path: &FieldPath, report: &mut ValidationReport) {
    check_positive_quantity(value, path, report);
}

pub(super) fn check_ports(ports: &[Port], path: &FieldPath, report: &mut ValidationReport) {
    let mut names = std::collections::BTreeSet::new();
    for (index, port) in ports.iter().enumerate() {
        let at = path.index(index);
        if !(1..=65535).contains(&port.container_port) {
            report.error(
                at.child("containerPort"),
                format!("must be between 1 and 65535, got {}", port.container_port),
            );
        }
        if !crate::bounds::PROTOCOLS.contains(&port.protocol.as_str()) {
            report.error(
                at.child("protocol"),
                kube::unsupported(&port.protocol, &crate::bounds::PROTOCOLS),
            );
        }
        if port.name.is_empty() {
            report.error(at.child("name"), "Required value: an IANA service name such as metrics");
        }
        for problem in kube::port_name_errors(&port.name) {
            report.error(at.child("name"), kube::invalid(&port.name, problem));
        }
        if !names.insert(port.name.as_str()) {
            report.error(at.child("name"), kube::duplicate(&port.name));
        }
    }
}

/// A Spark memory string (MiB when no unit is given): at most what Spark's `Int` of MiB holds, and more
/// than 0 where `positive` (a heap of 0 makes the JVM refuse to start).
pub(super) fn check_spark_memory(value: Option<&str>, positive: bool, path: &FieldPath, report: &mut ValidationReport) {
    let Some(value) = value else { return };
    match SparkMemory::parse(value, SparkMemoryUnit::MiB) {
        Err(error) => report.error(path.clone(), error.to_string()),
        Ok(memory) if positive && memory.bytes() < 1 << 20 => report.error(
            path.clone(),
            format!("must be at least 1m, got {value:?}: use e.g. 512m or 2g"),
        ),
        Ok(memory) if memory.mebibytes() > crate::bounds::MAX_SPARK_MEMORY_MIB => report.error(
            path.clone(),
            format!(
                "{value:?} is more than Spark can hold ({}m, just under 2p): use a smaller size",
                crate::bounds::MAX_SPARK_MEMORY_MIB
            ),
        ),
        Ok(_) => {}
    }
}

fn check_positive_quantity(value: Option<&str>, path: &FieldPath, report: &mut ValidationReport) {
    let Some(value) = value else { return };
    match KubernetesQuantity::parse(value) {
        Ok(quantity) if quantity.value() > 0.0 => {}
        Ok(_) => report.error(path.clone(), format!("must be more than 0, got {value:?}")),
        Err(error) => report.error(path.clone(), error.to_string()),
    }
}

const OPERATOR_LABEL_PREFIX: &str = "sparkoperator.k8s.io/";

/// Labels the operator and Spark set on every pod and select pods by: a user's value would forge them.
pub(super) fn is_operator_label(key: &str) -> bool {
    key.starts_with(OPERATOR_LABEL_PREFIX)
        || key == crate::labels::LABEL_SPARK_APP_NAME
        || key == crate::labels::LABEL_SPARK_VERSION
}

fn check_labels(labels: &BTreeMap<String, String>, role: Role, path: &FieldPath, report: &mut ValidationReport) {
    let reserved: &[&str] = match role {
        Role::Driver => &crate::labels::SPARK_RESERVED_DRIVER_LABELS,
        Role::Executor => &crate::labels::SPARK_RESERVED_EXECUTOR_LABELS,
    };
    for (key, value) in labels {
        let at = path.key(key);
        if is_operator_label(key) {
            report.error(
                at,
                format!(
                    "label {key:?} is reserved: the operator sets the {}* and {}/{} labels itself and uses them to find its pods; remove it",
                    OPERATOR_LABEL_PREFIX,
                    crate::labels::LABEL_SPARK_APP_NAME,
                    crate::labels::LABEL_SPARK_VERSION
                ),
            );
            continue;
        }
        // spark-exec-id on any pod of ours would be counted as an executor.
        if reserved.contains(&key.as_str()) || key == crate::labels::LABEL_SPARK_EXEC_ID {
            report.error(
                at,
                format!("label {key:?} is reserved by Spark, which refuses to submit with it: remove it"),
            );
            continue;
        }
        if let Err(problem) = names::label_key(key) {
            report.error(at.clone(), format!("label {problem}"));
        }
        if let Err(problem) = names::label_value(value) {
            report.error(at, format!("label {problem}"));
        }
    }
}

pub(super) fn check_quantities(
    quantities: Option<&BTreeMap<String, Quantity>>,
    path: &FieldPath,
    report: &mut ValidationReport,
) {
    for (name, quantity) in quantities.into_iter().flatten() {
        if let Err(error) = KubernetesQuantity::parse(&quantity.0) {
            report.error(path.key(name), error.to_string());
        }
    }
}
