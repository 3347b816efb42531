//! Pod-level settings: ownership, scheduling, networking, security and metrics annotations.

use k8s_openapi::api::core::v1::PodSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

use super::merge;
use super::volumes::prometheus_exposed;
use super::{DecorationError, RoleSettings};
use crate::application::SparkApplication;
use crate::field::FieldPath;
use crate::labels::{API_VERSION, SparkRole};

/// Kind of the owner reference on driver pods.
const KIND: &str = "SparkApplication";

/// Prometheus' scrape annotations, set on pods whose metrics are exposed.
pub const PROMETHEUS_SCRAPE_ANNOTATION: &str = "prometheus.io/scrape";
pub const PROMETHEUS_PORT_ANNOTATION: &str = "prometheus.io/port";
pub const PROMETHEUS_PATH_ANNOTATION: &str = "prometheus.io/path";

/// The controller reference a driver pod gets to its SparkApplication, so that deleting the application
/// deletes the driver (and through it, the executors).
pub fn application_owner_reference(name: &str, uid: &str) -> OwnerReference {
    OwnerReference {
        api_version: API_VERSION.to_owned(),
        kind: KIND.to_owned(),
        name: name.to_owned(),
        uid: uid.to_owned(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

/// Driver only: executors are owned by the driver pod (Spark sets that), and a second owner would stop
/// them from being deleted with the driver (Kubeflow #2961). An existing reference to the application is
/// refreshed in place. The application is the driver pod's controller and a pod may have only one, so a
/// pod that already has another (which only a driver template can bring, and validation refuses) is an
/// error: keeping that controller would leave the driver behind when the application is deleted, and
/// dropping it would silently undo what the template asked for.
pub(super) fn add_owner_reference(
    metadata: &mut ObjectMeta,
    settings: &RoleSettings<'_>,
) -> Result<(), DecorationError> {
    if settings.role != SparkRole::Driver {
        return Ok(());
    }
    let app_meta = &settings.app.metadata;
    let missing = |field| DecorationError::MissingOwnerIdentity {
        path: FieldPath::new("metadata").child(field),
        field,
    };
    let name = app_meta
        .name
        .as_deref()
        .filter(|n| !n.is_empty())
        .ok_or_else(|| missing("name"))?;
    let uid = app_meta
        .uid
        .as_deref()
        .filter(|u| !u.is_empty())
        .ok_or_else(|| missing("uid"))?;
    let owners = metadata.owner_references.get_or_insert_default();
    if let Some((index, other)) = owners
        .iter()
        .enumerate()
        .find(|(_, o)| o.uid != uid && o.controller == Some(true))
    {
        return Err(DecorationError::OtherController {
            path: settings
                .path
                .child("template")
                .child("metadata")
                .child("ownerReferences")
                .index(index),
            kind: other.kind.clone(),
            name: other.name.clone(),
        });
    }
    merge::upsert(owners, &application_owner_reference(name, uid), |existing| {
        existing.uid == uid
    });
    Ok(())
}

pub(super) fn add_host_network(spec: &mut PodSpec, settings: &RoleSettings<'_>) {
    let Some(host_network) = settings.pod.host_network else {
        return;
    };
    spec.host_network = Some(host_network);
    if host_network {
        // Without it a host-network pod cannot resolve cluster Services.
        spec.dns_policy = Some("ClusterFirstWithHostNet".to_owned());
    }
}

pub(super) fn add_host_aliases(spec: &mut PodSpec, settings: &RoleSettings<'_>) {
    if settings.pod.host_aliases.is_empty() {
        return;
    }
    let aliases = spec.host_aliases.get_or_insert_default();
    for alias in &settings.pod.host_aliases {
        merge::append_unless_covered(aliases, alias);
    }
}

pub(super) fn add_dns_config(spec: &mut PodSpec, settings: &RoleSettings<'_>) {
    if let Some(dns) = &settings.pod.dns_config {
        merge::replace_unless_covered(&mut spec.dns_config, dns);
    }
}

/// Sets the priority class. A pod template's (or Spark's) numeric priority is dropped when the class
/// changes, since it would contradict the class; when the class is already ours, the priority the API
/// server resolved from it is kept.
pub(super) fn add_priority_class_name(spec: &mut PodSpec, settings: &RoleSettings<'_>) {
    let Some(class) = settings.priority_class_name.filter(|c| !c.is_empty()) else {
        return;
    };
    if spec.priority_class_name.as_deref() != Some(class) {
        spec.priority_class_name = Some(class.to_owned());
        spec.priority = None;
        spec.preemption_policy = None;
    }
}

/// `spec.batchScheduler` wins over the role's `schedulerName`, as in Kubeflow.
pub(super) fn add_scheduler_name(spec: &mut PodSpec, settings: &RoleSettings<'_>) {
    let scheduler = settings
        .app
        .spec
        .batch_scheduler
        .as_deref()
        .or(settings.pod.scheduler_name.as_deref())
        .filter(|s| !s.is_empty());
    if let Some(scheduler) = scheduler {
        spec.scheduler_name = Some(scheduler.to_owned());
    }
}

/// The batch scheduler's group marks (Volcano's group annotation, YuniKorn's task group and queue, the
/// coscheduling label); a mark the spec already sets on the pod is kept, as Kubeflow keeps it.
pub(super) fn add_batch_scheduler_marks(meta: &mut ObjectMeta, app: &SparkApplication, role: SparkRole) {
    let marks = crate::batch_scheduler::pod_marks(app, role);
    if !marks.labels.is_empty() {
        let labels = meta.labels.get_or_insert_default();
        for (key, value) in marks.labels {
            labels.entry(key).or_insert(value);
        }
    }
    if !marks.annotations.is_empty() {
        let annotations = meta.annotations.get_or_insert_default();
        for (key, value) in marks.annotations {
            annotations.entry(key).or_insert(value);
        }
    }
}

pub(super) fn add_node_selector(spec: &mut PodSpec, settings: &RoleSettings<'_>) {
    if settings.pod.node_selector.is_empty() {
        return;
    }
    let selector = spec.node_selector.get_or_insert_default();
    for (key, value) in &settings.pod.node_selector {
        selector.insert(key.clone(), value.clone());
    }
}

pub(super) fn add_affinity(spec: &mut PodSpec, settings: &RoleSettings<'_>) {
    if let Some(affinity) = &settings.pod.affinity {
        merge::replace_unless_covered(&mut spec.affinity, affinity);
    }
}

pub(super) fn add_tolerations(spec: &mut PodSpec, settings: &RoleSettings<'_>) {
    if settings.pod.tolerations.is_empty() {
        return;
    }
    let tolerations = spec.tolerations.get_or_insert_default();
    for toleration in &settings.pod.tolerations {
        merge::append_unless_covered(tolerations, toleration);
    }
}

pub(super) fn add_pod_security_context(spec: &mut PodSpec, settings: &RoleSettings<'_>) {
    if let Some(context) = &settings.pod.pod_security_context {
        merge::replace_unless_covered(&mut spec.security_context, context);
    }
}

pub(super) fn add_termination_grace_period(spec: &mut PodSpec, settings: &RoleSettings<'_>) {
    if let Some(seconds) = settings.pod.termination_grace_period_seconds {
        spec.termination_grace_period_seconds = Some(seconds);
    }
}

/// An explicit `false` is applied too (Kubeflow ignores it), so it can turn off a template's `true`.
pub(super) fn add_share_process_namespace(spec: &mut PodSpec, settings: &RoleSettings<'_>) {
    if let Some(share) = settings.pod.share_process_namespace {
        spec.share_process_namespace = Some(share);
    }
}

/// Prometheus' scrape annotations. Kubeflow puts them into the spec's annotations before spark-submit;
/// setting them here reaches executors through the webhook just the same.
pub(super) fn add_prometheus_annotations(metadata: &mut ObjectMeta, settings: &RoleSettings<'_>) {
    if !prometheus_exposed(settings) {
        return;
    }
    let port = settings
        .app
        .spec
        .monitoring
        .as_ref()
        .and_then(|m| m.prometheus.as_ref())
        .map(|p| p.port_or_default())
        .unwrap_or(crate::application::DEFAULT_PROMETHEUS_PORT);
    let annotations = metadata.annotations.get_or_insert_default();
    annotations.insert(PROMETHEUS_SCRAPE_ANNOTATION.to_owned(), "true".to_owned());
    annotations.insert(PROMETHEUS_PORT_ANNOTATION.to_owned(), port.to_string());
    annotations.insert(PROMETHEUS_PATH_ANNOTATION.to_owned(), "/metrics".to_owned());
}
