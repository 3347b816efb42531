//! The PodSecurity admission plugin of kube-apiserver (`k8s.io/pod-security-admission`, v1.33):
//! the Pod Security Standards chosen per namespace by `pod-security.kubernetes.io/*` labels.
//!
//! - **Pods** (create, and updates that change what the plugin looks at): `enforce` refuses,
//!   `warn` adds `Warning` headers, `audit` adds audit annotations.
//! - **Workloads** (Deployments, ReplicaSets, DaemonSets, StatefulSets, Jobs, CronJobs,
//!   ReplicationControllers, PodTemplates): their pod template is checked for `warn` and `audit`
//!   only, never refused — enforcement happens when their pods are created.
//! - **Namespaces**: bad label values are refused (`Namespace "x" is invalid: ...`); raising the
//!   enforce level warns about the namespace's existing pods that would now be refused.
//!
//! The cluster-wide configuration is kube-apiserver's default (privileged:latest for every mode,
//! no exemptions).

pub mod checks;
pub mod levels;
pub mod messages;
pub mod registry;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::admission::builtin::forbidden;
use crate::admission_seam::{AdmissionPlugin, AdmissionRequest, BoxFuture, Operation};
use crate::meta;
use crate::registry::Gvr;
use crate::status::{ApiError, FieldCause};
use crate::store::{ListOptions, Store};

use checks::PodView;
use levels::{Level, LevelVersion, Policy, labels_of, policy_to_evaluate};
use messages::{Aggregate, PodCount, decorate_pod_warnings, go_quote};

/// At most this many existing pods are checked when a namespace's enforce level is raised.
const NAMESPACE_MAX_PODS_TO_CHECK: usize = 3000;
/// And for at most this long.
const NAMESPACE_POD_CHECK_TIMEOUT: Duration = Duration::from_secs(1);

/// Pod subresources that cannot change what the checks look at.
const IGNORED_POD_SUBRESOURCES: &[&str] = &[
    "exec",
    "attach",
    "binding",
    "eviction",
    "log",
    "portforward",
    "proxy",
    "status",
];

/// The PodSecurity admission plugin (validating only).
pub struct PodSecurity {
    store: Store,
}

impl PodSecurity {
    pub fn new(store: Store) -> Self {
        Self { store }
    }

    fn admit(&self, req: &mut AdmissionRequest) -> Result<(), ApiError> {
        if !matches!(req.operation, Operation::Create | Operation::Update) {
            return Ok(());
        }
        match (req.group.as_str(), req.resource.as_str()) {
            ("", "namespaces") => self.validate_namespace(req),
            ("", "pods") => self.validate_pod(req),
            _ if template_path(&req.group, &req.resource).is_some() => self.validate_pod_controller(req),
            _ => Ok(()),
        }
    }

    /// `ValidateNamespace`.
    fn validate_namespace(&self, req: &mut AdmissionRequest) -> Result<(), ApiError> {
        if !req.subresource.is_empty() {
            return Ok(());
        }
        let Some(ns) = req.object.as_ref() else { return Ok(()) };
        let (new_policy, new_errs) = policy_to_evaluate(&labels_of(ns));
        let name = request_name(req);
        if req.operation == Operation::Create {
            if !new_errs.is_empty() {
                return Err(ApiError::invalid(&req.group, &req.kind, &name, new_errs));
            }
            return Ok(());
        }
        let Some(old) = req.old_object.as_ref() else {
            return Ok(());
        };
        let (old_policy, old_errs) = policy_to_evaluate(&labels_of(old));
        if !new_errs.is_empty() && (old_errs.is_empty() || new_errs != old_errs) {
            return Err(ApiError::invalid(&req.group, &req.kind, &name, new_errs));
        }
        // No dry run of the existing pods when the enforce level is unchanged, privileged, or
        // relaxed at the same version.
        if new_policy.enforce == old_policy.enforce
            || new_policy.enforce.level == Level::Privileged
            || (new_policy.enforce.version == old_policy.enforce.version
                && new_policy.enforce.level <= old_policy.enforce.level)
        {
            return Ok(());
        }
        let warnings = self.evaluate_pods_in_namespace(&name, new_policy.enforce);
        req.warnings.extend(warnings);
        Ok(())
    }

    /// `EvaluatePodsInNamespace`: one warning per distinct set of violations, naming a pod.
    fn evaluate_pods_in_namespace(&self, namespace: &str, enforce: LevelVersion) -> Vec<String> {
        let deadline = Instant::now() + NAMESPACE_POD_CHECK_TIMEOUT;
        let listed = self
            .store
            .list(&Gvr::new("", "v1", "pods"), Some(namespace), &ListOptions::default());
        let Ok(list) = listed else {
            return vec!["failed to list pods while checking new PodSecurity enforce level".to_string()];
        };
        let pods = prioritize_pods(
            list.get("items")
                .and_then(Value::as_array)
                .map(Vec::as_slice)
                .unwrap_or(&[]),
        );
        let total = pods.len();
        let mut checked = total.min(NAMESPACE_MAX_PODS_TO_CHECK);
        let mut order = Vec::new();
        let mut counts: BTreeMap<String, PodCount> = BTreeMap::new();
        for (i, pod) in pods.iter().take(checked).enumerate() {
            let view = pod_view(pod);
            let result = Aggregate::of(&registry::evaluate(enforce, &view));
            if !result.allowed() {
                let warning = result.forbidden_reason();
                let pod_name = meta::name(pod);
                let c = counts.entry(warning.clone()).or_insert_with(|| {
                    order.push(warning.clone());
                    PodCount {
                        first_name: pod_name.to_string(),
                        count: 0,
                    }
                });
                if pod_name < c.first_name.as_str() {
                    c.first_name = pod_name.to_string();
                }
                c.count += 1;
            }
            if Instant::now() >= deadline {
                checked = i + 1;
                break;
            }
        }
        let mut warnings = Vec::new();
        if checked < total {
            warnings.push(format!(
                "new PodSecurity enforce level only checked against the first {checked} of {total} existing pods"
            ));
        }
        if !order.is_empty() {
            warnings.push(format!(
                "existing pods in namespace {} violate the new PodSecurity enforce level {}",
                go_quote(namespace),
                go_quote(&enforce.to_string())
            ));
        }
        warnings.extend(decorate_pod_warnings(&order, &counts));
        warnings
    }

    /// `ValidatePod`.
    fn validate_pod(&self, req: &mut AdmissionRequest) -> Result<(), ApiError> {
        if IGNORED_POD_SUBRESOURCES.contains(&req.subresource.as_str()) {
            return Ok(());
        }
        let (policy, policy_errs) = match self.namespace_policy(&req.namespace) {
            Some(p) => p,
            None => {
                return Err(ApiError::Internal(format!(
                    "Internal error occurred: failed to lookup namespace {}",
                    go_quote(&req.namespace)
                )));
            }
        };
        if policy_errs.is_empty() && policy.fully_privileged() {
            req.audit_annotations.push((
                annotation("enforce-policy"),
                LevelVersion::PRIVILEGED_LATEST.to_string(),
            ));
            return Ok(());
        }
        let Some(pod) = req.object.clone() else { return Ok(()) };
        if req.operation == Operation::Update
            && let Some(old) = req.old_object.as_ref()
            && !is_significant_pod_update(&pod, old)
        {
            return Ok(());
        }
        evaluate_pod(req, &policy, &policy_errs, &pod_view(&pod), true)
    }

    /// `ValidatePodController`: warn and audit only.
    fn validate_pod_controller(&self, req: &mut AdmissionRequest) -> Result<(), ApiError> {
        if !req.subresource.is_empty() {
            return Ok(());
        }
        let Some((policy, policy_errs)) = self.namespace_policy(&req.namespace) else {
            req.audit_annotations.push((
                annotation("error"),
                format!("failed to lookup namespace {}", go_quote(&req.namespace)),
            ));
            return Ok(());
        };
        if policy_errs.is_empty() && policy.warn.level == Level::Privileged && policy.audit.level == Level::Privileged {
            return Ok(());
        }
        let Some(obj) = req.object.clone() else { return Ok(()) };
        let Some(path) = template_path(&req.group, &req.resource) else {
            return Ok(());
        };
        let template = obj.pointer(path);
        // A ReplicationController's template is optional; the other kinds always have one (an
        // empty one is checked as an empty pod).
        if template.is_none_or(Value::is_null) && req.resource == "replicationcontrollers" {
            return Ok(());
        }
        let view = PodView {
            metadata: template.and_then(|t| t.get("metadata")).unwrap_or(&Value::Null),
            spec: template.and_then(|t| t.get("spec")).unwrap_or(&Value::Null),
        };
        evaluate_pod(req, &policy, &policy_errs, &view, false)
    }

    /// The policy a namespace's labels select; None when the namespace does not exist.
    fn namespace_policy(&self, namespace: &str) -> Option<(Policy, Vec<FieldCause>)> {
        let ns = self.store.get(&Gvr::new("", "v1", "namespaces"), "", namespace).ok()?;
        Some(policy_to_evaluate(&labels_of(&ns)))
    }
}

/// `EvaluatePod`: enforce (for pods), then audit, then warn — no warning on a refused request.
fn evaluate_pod(
    req: &mut AdmissionRequest,
    policy: &Policy,
    policy_errs: &[FieldCause],
    pod: &PodView,
    enforce: bool,
) -> Result<(), ApiError> {
    if !policy_errs.is_empty() {
        req.audit_annotations.push((
            annotation("error"),
            format!("Failed to parse policy: {}", aggregate_errors(policy_errs)),
        ));
    }
    let mut cache: HashMap<LevelVersion, Aggregate> = HashMap::new();
    let mut evaluate = |lv: LevelVersion| {
        cache
            .entry(lv)
            .or_insert_with(|| Aggregate::of(&registry::evaluate(lv, pod)))
            .clone()
    };
    let mut denied = None;
    if enforce {
        req.audit_annotations
            .push((annotation("enforce-policy"), policy.enforce.to_string()));
        let result = evaluate(policy.enforce);
        if !result.allowed() {
            let message = format!(
                "violates PodSecurity {}: {}",
                go_quote(&policy.enforce.to_string()),
                result.forbidden_detail()
            );
            denied = Some(forbidden(&req.group, &req.resource, &request_name(req), &message, None));
        }
    }
    let audit = evaluate(policy.audit);
    if !audit.allowed() {
        req.audit_annotations.push((
            annotation("audit-violations"),
            format!(
                "would violate PodSecurity {}: {}",
                go_quote(&policy.audit.to_string()),
                audit.forbidden_detail()
            ),
        ));
    }
    if let Some(e) = denied {
        return Err(e);
    }
    let warn = evaluate(policy.warn);
    if !warn.allowed() {
        req.warnings.push(format!(
            "would violate PodSecurity {}: {}",
            go_quote(&policy.warn.to_string()),
            warn.forbidden_detail()
        ));
    }
    Ok(())
}

/// `utilerrors.NewAggregate(errs).Error()`: one error as is, several in brackets.
fn aggregate_errors(errs: &[FieldCause]) -> String {
    let shown: Vec<String> = errs.iter().map(|e| format!("{}: {}", e.field, e.message)).collect();
    if shown.len() == 1 {
        shown.join("")
    } else {
        format!("[{}]", shown.join(", "))
    }
}

fn annotation(key: &str) -> String {
    format!("{}{key}", levels::LABEL_PREFIX)
}

/// The request's name, or the object's (a generated name is set by the time validation runs).
fn request_name(req: &AdmissionRequest) -> String {
    if !req.name.is_empty() {
        return req.name.clone();
    }
    req.object.as_ref().map(meta::name).unwrap_or("").to_string()
}

fn pod_view(pod: &Value) -> PodView<'_> {
    PodView {
        metadata: pod.get("metadata").unwrap_or(&Value::Null),
        spec: pod.get("spec").unwrap_or(&Value::Null),
    }
}

/// Where the kinds that embed a pod template keep it (`DefaultPodSpecExtractor`).
fn template_path(group: &str, resource: &str) -> Option<&'static str> {
    match (group, resource) {
        ("", "replicationcontrollers") => Some("/spec/template"),
        ("", "podtemplates") => Some("/template"),
        ("apps", "replicasets" | "deployments" | "statefulsets" | "daemonsets") => Some("/spec/template"),
        ("batch", "jobs") => Some("/spec/template"),
        ("batch", "cronjobs") => Some("/spec/jobTemplate/spec/template"),
        _ => None,
    }
}

/// `isSignificantPodUpdate`: only a changed number of (init) containers, a changed image, or an
/// added or changed ephemeral container makes the plugin look at an updated pod again.
fn is_significant_pod_update(pod: &Value, old: &Value) -> bool {
    let list = |p: &Value, f: &str| -> Vec<Value> {
        p.pointer(&format!("/spec/{f}"))
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
    };
    let image = |c: &Value| c.get("image").and_then(Value::as_str).unwrap_or("").to_string();
    for f in ["containers", "initContainers"] {
        let (new, prior) = (list(pod, f), list(old, f));
        if new.len() != prior.len() || new.iter().zip(&prior).any(|(a, b)| image(a) != image(b)) {
            return true;
        }
    }
    let name = |c: &Value| c.get("name").and_then(Value::as_str).unwrap_or("").to_string();
    let prior = list(old, "ephemeralContainers");
    list(pod, "ephemeralContainers")
        .iter()
        .any(|c| match prior.iter().find(|o| name(o) == name(c)) {
            None => true,
            Some(o) => image(c) != image(o),
        })
}

/// `prioritizePods`: one pod per controller first, the other replicas after them.
fn prioritize_pods(pods: &[Value]) -> Vec<&Value> {
    let mut first = Vec::new();
    let mut duplicates = Vec::new();
    let mut seen = HashSet::new();
    for pod in pods {
        let controller_uid = pod
            .pointer("/metadata/ownerReferences")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .find(|r| r.get("controller").and_then(Value::as_bool) == Some(true))
            .and_then(|r| r.get("uid"))
            .and_then(Value::as_str);
        match controller_uid {
            Some(uid) if !seen.insert(uid.to_string()) => duplicates.push(pod),
            _ => first.push(pod),
        }
    }
    first.extend(duplicates);
    first
}

impl AdmissionPlugin for PodSecurity {
    fn name(&self) -> &str {
        "PodSecurity"
    }

    fn validate_with_warnings<'a>(&'a self, request: &'a mut AdmissionRequest) -> BoxFuture<'a, Result<(), ApiError>> {
        Box::pin(async move { self.admit(request) })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn only_images_and_container_counts_are_significant() {
        let old = json!({ "spec": { "containers": [{ "name": "a", "image": "x:1" }] } });
        let mut relabeled = old.clone();
        relabeled["metadata"] = json!({ "labels": { "a": "b" } });
        relabeled["spec"]["activeDeadlineSeconds"] = json!(5);
        assert!(!is_significant_pod_update(&relabeled, &old));
        let mut new_image = old.clone();
        new_image["spec"]["containers"][0]["image"] = json!("x:2");
        assert!(is_significant_pod_update(&new_image, &old));
        let mut ephemeral = old.clone();
        ephemeral["spec"]["ephemeralContainers"] = json!([{ "name": "debug", "image": "busybox" }]);
        assert!(is_significant_pod_update(&ephemeral, &old));
        assert!(!is_significant_pod_update(&ephemeral, &ephemeral.clone()));
    }

    #[test]
    fn one_pod_per_controller_comes_first() {
        let owned = |name: &str, uid: &str| json!({ "metadata": { "name": name, "ownerReferences": [{ "uid": uid, "controller": true }] } });
        let pods = vec![
            owned("rs-a", "1"),
            owned("rs-b", "1"),
            json!({ "metadata": { "name": "bare" } }),
            owned("ds-a", "2"),
        ];
        let names: Vec<&str> = prioritize_pods(&pods).into_iter().map(meta::name).collect();
        assert_eq!(names, vec!["rs-a", "bare", "ds-a", "rs-b"]);
    }

    #[test]
    fn templates_are_found_per_kind() {
        assert_eq!(
            template_path("batch", "cronjobs"),
            Some("/spec/jobTemplate/spec/template")
        );
        assert_eq!(template_path("apps", "deployments"), Some("/spec/template"));
        assert_eq!(template_path("", "configmaps"), None);
    }
}
