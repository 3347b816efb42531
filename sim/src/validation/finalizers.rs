//! Finalizer names, as kube-apiserver checks them: every kind's are qualified names (apimachinery's
//! `ValidateFinalizers`, at `metadata.finalizers`), and `orphan` and `foregroundDeletion` exclude each
//! other; a built-in kind's unqualified name must be a standard one (`validateKubeFinalizerName`, at
//! `metadata.finalizers[i]`), where a custom resource only gets warnings for the finalizers it adds.

use serde_json::Value;

use super::qualified_name_errors;
use crate::meta::finalizers;
use crate::status::FieldCause;

/// The finalizers kube-apiserver knows without a domain.
const STANDARD: &[&str] = &["kubernetes", "orphan", "foregroundDeletion"];

/// Whether kube-apiserver checks `group`'s finalizer names as Kubernetes' own (its group's validation
/// package calls `pkg/apis/core/validation.ValidateObjectMeta`) rather than only apimachinery's rules: not for
/// CRDs, APIServices, Leases, webhook configurations or custom resources.
pub fn kube_names(group: &str, custom_resource: bool) -> bool {
    !custom_resource
        && !matches!(
            group,
            "apiextensions.k8s.io" | "apiregistration.k8s.io" | "coordination.k8s.io" | "admissionregistration.k8s.io"
        )
}

/// The errors of `obj`'s finalizers; `kube_names`: see [`kube_names`].
pub fn check(obj: &Value, kube_names: bool, causes: &mut Vec<FieldCause>) {
    let owned = finalizers(obj);
    let names: Vec<&str> = owned.iter().map(String::as_str).collect();
    for name in &names {
        for message in qualified_name_errors(name) {
            causes.push(FieldCause::invalid(
                "metadata.finalizers",
                &Value::String((*name).to_owned()),
                message,
            ));
        }
    }
    if names.contains(&"orphan") && names.contains(&"foregroundDeletion") {
        let list: Vec<Value> = names.iter().map(|n| Value::String((*n).to_owned())).collect();
        causes.push(FieldCause::invalid(
            "metadata.finalizers",
            &Value::Array(list),
            "finalizer orphan and foregroundDeletion cannot be both set",
        ));
    }
    if kube_names {
        for (i, name) in names.iter().enumerate() {
            if !name.contains('/') && !STANDARD.contains(name) {
                causes.push(FieldCause::invalid(
                    format!("metadata.finalizers[{i}]"),
                    &Value::String((*name).to_owned()),
                    "name is neither a standard finalizer name nor is it fully qualified",
                ));
            }
        }
    }
}

/// The warnings of the finalizers a custom resource gains (`old`: before an update), in name order.
pub fn custom_resource_warnings(obj: &Value, old: Option<&Value>) -> Vec<String> {
    let before = old.map(finalizers).unwrap_or_default();
    let mut added: Vec<String> = finalizers(obj).into_iter().filter(|f| !before.contains(f)).collect();
    added.sort_unstable();
    added.dedup();
    let mut warnings = Vec::new();
    for name in added.iter().map(String::as_str) {
        for message in qualified_name_errors(name) {
            warnings.push(format!("metadata.finalizers: {name:?}: {message}"));
        }
        if !name.contains('/') && !STANDARD.contains(&name) {
            let advice = if name.contains('.') {
                "prefer a domain-qualified finalizer name including a path (/) to avoid accidental conflicts with other finalizer writers"
            } else {
                "prefer a domain-qualified finalizer name to avoid accidental conflicts with other finalizer writers"
            };
            warnings.push(format!("metadata.finalizers: {name:?}: {advice}"));
        }
    }
    warnings
}
