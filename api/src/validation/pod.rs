//! Checks of the driver and executor parts of the spec.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{Container, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use crate::application::{Port, SparkPodSpec};
use crate::field::{FieldPath, ValidationReport};
use crate::quantity::{KubernetesQuantity, SparkMemory, SparkMemoryUnit};

use super::names;

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
    check_spark_memory(pod.memory.as_deref(), &path.child("memory"), report);
    check_spark_memory(pod.memory_overhead.as_deref(), &path.child("memoryOverhead"), report);
    if let Some(limit) = pod.memory_limit.as_deref()
        && SparkMemory::parse(limit, SparkMemoryUnit::Bytes).is_err()
        && KubernetesQuantity::parse(limit).is_err()
    {
        report.error(
            path.child("memoryLimit"),
            format!("{limit:?} is not a memory size: use Spark units (2g) or Kubernetes units (2Gi)"),
        );
    }
    check_positive_quantity(pod.core_limit.as_deref(), &path.child("coreLimit"), report);

    if let Some(gpu) = &pod.gpu {
        if gpu.name.is_empty() {
            report.error(
                path.child("gpu").child("name"),
                "is required: the extended resource name, e.g. nvidia.com/gpu",
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

    for (index, container) in pod.sidecars.iter().enumerate() {
        check_container_resources(container, &path.child("sidecars").index(index), report);
    }
    for (index, container) in pod.init_containers.iter().enumerate() {
        check_container_resources(container, &path.child("initContainers").index(index), report);
    }
    check_template_owners(pod, role, path, report);
    if let Some(spec) = pod.template.as_ref().and_then(|t| t.spec.as_ref()) {
        let at = path.child("template").child("spec");
        for (index, container) in spec.containers.iter().enumerate() {
            check_container_resources(container, &at.child("containers").index(index), report);
        }
        for (index, container) in spec.init_containers.iter().flatten().enumerate() {
            check_container_resources(container, &at.child("initContainers").index(index), report);
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
    for (index, port) in ports.iter().enumerate() {
        let at = path.index(index);
        if !(1..=65535).contains(&port.container_port) {
            report.error(
                at.child("containerPort"),
                format!("must be between 1 and 65535, got {}", port.container_port),
            );
        }
        if !matches!(port.protocol.as_str(), "TCP" | "UDP" | "SCTP") {
            report.error(
                at.child("protocol"),
                format!("{:?} is not a protocol: use TCP, UDP or SCTP", port.protocol),
            );
        }
        if port.name.is_empty() || port.name.len() > 15 {
            report.error(
                at.child("name"),
                "must be 1 to 15 characters (an IANA service name such as metrics)",
            );
        }
    }
}

fn check_spark_memory(value: Option<&str>, path: &FieldPath, report: &mut ValidationReport) {
    if let Some(value) = value
        && let Err(error) = SparkMemory::parse(value, SparkMemoryUnit::MiB)
    {
        report.error(path.clone(), error.to_string());
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

fn check_labels(labels: &BTreeMap<String, String>, role: Role, path: &FieldPath, report: &mut ValidationReport) {
    let reserved: &[&str] = match role {
        Role::Driver => &crate::labels::SPARK_RESERVED_DRIVER_LABELS,
        Role::Executor => &crate::labels::SPARK_RESERVED_EXECUTOR_LABELS,
    };
    for (key, value) in labels {
        let at = path.key(key);
        if reserved.contains(&key.as_str()) {
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

/// Resource quantities inside an embedded container: the API server rejects the pod for a bad one.
fn check_container_resources(container: &Container, path: &FieldPath, report: &mut ValidationReport) {
    let Some(ResourceRequirements { limits, requests, .. }) = &container.resources else {
        return;
    };
    let at = path.child("resources");
    check_quantities(limits.as_ref(), &at.child("limits"), report);
    check_quantities(requests.as_ref(), &at.child("requests"), report);
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
