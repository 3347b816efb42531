//! Settings of the Spark container, and the other containers of the pod.

use k8s_openapi::api::core::v1::{Container, ContainerPort, EnvVar, PodSpec};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::merge;
use super::{DecorationError, RoleSettings};
use crate::field::FieldPath;
use crate::quantity::{KubernetesQuantity, SparkMemory, SparkMemoryUnit};

/// Puts an env var into the container: a variable of the same name is replaced in place (Kubeflow
/// appends, and Kubernetes lets the last of two same-named variables win, so the effect is the same).
pub(super) fn put_env(container: &mut Container, var: &EnvVar) {
    let env = container.env.get_or_insert_default();
    // Every entry of that name: Kubernetes lets the last of duplicates win, and a pod built from a
    // template can carry Spark's own entry after the template's.
    let mut found = false;
    for existing in env.iter_mut().filter(|existing| existing.name == var.name) {
        existing.clone_from(var);
        found = true;
    }
    if !found {
        env.push(var.clone());
    }
}

pub(super) fn add_env(container: &mut Container, settings: &RoleSettings<'_>) {
    // Kubeflow checks the driver's env list for executors too, and skips executor env when the driver
    // has none; each role uses its own list here.
    for var in &settings.pod.env {
        put_env(container, var);
    }
}

pub(super) fn add_env_from(container: &mut Container, settings: &RoleSettings<'_>) {
    if settings.pod.env_from.is_empty() {
        return;
    }
    let env_from = container.env_from.get_or_insert_default();
    for source in &settings.pod.env_from {
        merge::append_unless_covered(env_from, source);
    }
}

/// Adds a container port; a port of the same name (or the same number and protocol, when unnamed) that
/// says something else is a conflict.
pub(super) fn put_port(
    container: &mut Container,
    port: &ContainerPort,
    path: &FieldPath,
) -> Result<(), DecorationError> {
    let protocol = |p: &ContainerPort| p.protocol.clone().unwrap_or_else(|| "TCP".to_owned());
    let ports = container.ports.get_or_insert_default();
    let same = |existing: &ContainerPort| match (&existing.name, &port.name) {
        (Some(a), Some(b)) if !b.is_empty() => a == b,
        _ => existing.container_port == port.container_port && protocol(existing) == protocol(port),
    };
    merge::insert_or_conflict(ports, port, same)
        .map(|_| ())
        .map_err(|_| DecorationError::PortConflict {
            path: path.clone(),
            name: port.name.clone().unwrap_or_default(),
        })
}

pub(super) fn add_ports(container: &mut Container, settings: &RoleSettings<'_>) -> Result<(), DecorationError> {
    for (index, port) in settings.ports.iter().enumerate() {
        let protocol = if port.protocol.is_empty() {
            "TCP".to_owned()
        } else {
            port.protocol.clone()
        };
        let container_port = ContainerPort {
            name: Some(port.name.clone()).filter(|n| !n.is_empty()),
            container_port: port.container_port,
            protocol: Some(protocol),
            ..Default::default()
        };
        put_port(container, &container_port, &settings.path.child("ports").index(index))?;
    }
    Ok(())
}

/// Adds init containers or sidecars: an identical (or defaulted) copy already in the pod is kept, a
/// different container of the same name is a conflict (Kubeflow appends it and the API server rejects
/// the duplicate name).
fn add_containers(
    list: &mut Vec<Container>,
    ours: &[Container],
    spark_name: &str,
    path: &FieldPath,
) -> Result<(), DecorationError> {
    for (index, container) in ours.iter().enumerate() {
        let at = path.index(index);
        if container.name == spark_name {
            return Err(DecorationError::SparkContainerName {
                path: at.child("name"),
                name: container.name.clone(),
            });
        }
        merge::insert_or_conflict(list, container, |existing| existing.name == container.name).map_err(|_| {
            DecorationError::ContainerConflict {
                path: at.child("name"),
                name: container.name.clone(),
            }
        })?;
    }
    Ok(())
}

pub(super) fn add_init_containers(
    spec: &mut PodSpec,
    spark: usize,
    settings: &RoleSettings<'_>,
) -> Result<(), DecorationError> {
    if settings.pod.init_containers.is_empty() {
        return Ok(());
    }
    let spark_name = spec.containers[spark].name.clone();
    add_containers(
        spec.init_containers.get_or_insert_default(),
        &settings.pod.init_containers,
        &spark_name,
        &settings.path.child("initContainers"),
    )
}

pub(super) fn add_sidecars(
    spec: &mut PodSpec,
    spark: usize,
    settings: &RoleSettings<'_>,
) -> Result<(), DecorationError> {
    let spark_name = spec.containers[spark].name.clone();
    add_containers(
        &mut spec.containers,
        &settings.pod.sidecars,
        &spark_name,
        &settings.path.child("sidecars"),
    )
}

/// `memoryLimit` as a Kubernetes quantity: Spark units (Kubeflow's Java → Kubernetes conversion,
/// `1g` → `1Gi`, `512m` → `512Mi`, a bare number is bytes) first, then Kubernetes units as written.
pub fn memory_limit_quantity(value: &str) -> Option<String> {
    if let Ok(memory) = SparkMemory::parse(value, SparkMemoryUnit::Bytes) {
        return Some(memory.to_kubernetes_quantity());
    }
    KubernetesQuantity::parse(value.trim())
        .ok()
        .filter(|q| q.value() > 0.0)
        .map(|_| value.trim().to_owned())
}

fn quantity_value(quantity: &Quantity) -> Option<f64> {
    KubernetesQuantity::parse(&quantity.0)
        .ok()
        .map(KubernetesQuantity::value)
}

pub(super) fn add_memory_limit(container: &mut Container, settings: &RoleSettings<'_>) -> Result<(), DecorationError> {
    let Some(value) = settings.pod.memory_limit.as_deref() else {
        return Ok(());
    };
    let path = settings.path.child("memoryLimit");
    let limit = memory_limit_quantity(value).ok_or_else(|| DecorationError::InvalidMemoryLimit {
        path: path.clone(),
        value: value.to_owned(),
    })?;
    let limit = Quantity(limit);
    let resources = container.resources.get_or_insert_default();
    if let (Some(request), Some(limit_value)) = (
        resources.requests.as_ref().and_then(|r| r.get("memory")),
        quantity_value(&limit),
    ) && quantity_value(request).is_some_and(|request| request > limit_value)
    {
        return Err(DecorationError::MemoryLimitBelowRequest {
            path,
            limit: limit.0,
            request: request.0.clone(),
        });
    }
    let limits = resources.limits.get_or_insert_default();
    // The same amount written differently (the API server canonicalizes 1024Mi to 1Gi) is left alone.
    let same = limits
        .get("memory")
        .and_then(quantity_value)
        .zip(quantity_value(&limit))
        .is_some_and(|(existing, ours)| existing == ours);
    if !same {
        limits.insert("memory".to_owned(), limit);
    }
    Ok(())
}

pub(super) fn add_gpu(container: &mut Container, settings: &RoleSettings<'_>) -> Result<(), DecorationError> {
    let Some(gpu) = &settings.pod.gpu else {
        return Ok(());
    };
    let path = settings.path.child("gpu");
    // Kubeflow ignores these silently and starts the pod without a GPU.
    if gpu.name.is_empty() {
        return Err(DecorationError::InvalidGpu {
            path: path.child("name"),
            reason: "is empty: set the extended resource name, e.g. nvidia.com/gpu, or remove gpu".to_owned(),
        });
    }
    if gpu.quantity < 1 {
        return Err(DecorationError::InvalidGpu {
            path: path.child("quantity"),
            reason: format!(
                "must be at least 1, got {}; remove gpu to run without one",
                gpu.quantity
            ),
        });
    }
    container
        .resources
        .get_or_insert_default()
        .limits
        .get_or_insert_default()
        .insert(gpu.name.clone(), Quantity(gpu.quantity.to_string()));
    Ok(())
}

pub(super) fn add_security_context(container: &mut Container, settings: &RoleSettings<'_>) {
    if let Some(context) = &settings.pod.security_context {
        merge::replace_unless_covered(&mut container.security_context, context);
    }
}

pub(super) fn add_lifecycle(container: &mut Container, settings: &RoleSettings<'_>) {
    if let Some(lifecycle) = settings.lifecycle {
        merge::replace_unless_covered(&mut container.lifecycle, lifecycle);
    }
}
