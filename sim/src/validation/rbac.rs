//! RBAC validation as kube-apiserver 1.37 runs it (`ValidatePolicyRule`, the aggregation rule,
//! `ValidateRoleBinding`/`ValidateClusterRoleBinding`, `ValidateRoleBindingSubject`). Names are
//! path segments (`object_meta`).

use serde_json::{Value, json};

use super::fields::{array_at, immutable, label_selector, required_because, set_at, str_at};
use super::{dns1123_subdomain_errors, path_segment_name_errors};
use crate::status::FieldCause;

const GROUP: &str = "rbac.authorization.k8s.io";

/// `ValidateRole` (`namespaced`) or `ValidateClusterRole`, without the metadata; the same on update.
pub(super) fn role(obj: &Value, namespaced: bool, causes: &mut Vec<FieldCause>) {
    for (i, rule) in array_at(Some(obj), "/rules").iter().enumerate() {
        policy_rule(&format!("rules[{i}]"), rule, namespaced, causes);
    }
    if namespaced {
        return;
    }
    if let Some(aggregation) = set_at(Some(obj), "/aggregationRule") {
        let selectors = array_at(Some(aggregation), "/clusterRoleSelectors");
        if selectors.is_empty() {
            causes.push(required_because(
                "aggregationRule.clusterRoleSelectors",
                "at least one clusterRoleSelector required if aggregationRule is non-nil",
            ));
        }
        for (i, s) in selectors.iter().enumerate() {
            label_selector(Some(s), &format!("aggregationRule.clusterRoleSelectors[{i}]"), causes);
        }
    }
}

/// `ValidatePolicyRule`. A rule without verbs is worded by 1.37's declarative validation: a
/// bare `Required value`.
fn policy_rule(at: &str, rule: &Value, namespaced: bool, causes: &mut Vec<FieldCause>) {
    let list = |k: &str| array_at(Some(rule), &format!("/{k}"));
    if list("verbs").is_empty() {
        causes.push(FieldCause::required(format!("{at}.verbs")));
    }
    let urls = list("nonResourceURLs");
    if !urls.is_empty() {
        let value = Value::Array(urls.to_vec());
        if namespaced {
            causes.push(FieldCause::invalid(
                format!("{at}.nonResourceURLs"),
                &value,
                "namespaced rules cannot apply to non-resource URLs",
            ));
        }
        if !list("apiGroups").is_empty() || !list("resources").is_empty() || !list("resourceNames").is_empty() {
            causes.push(FieldCause::invalid(
                format!("{at}.nonResourceURLs"),
                &value,
                "rules cannot apply to both regular resources and non-resource URLs",
            ));
        }
        return;
    }
    if list("apiGroups").is_empty() {
        causes.push(required_because(
            format!("{at}.apiGroups"),
            "resource rules must supply at least one api group",
        ));
    }
    if list("resources").is_empty() {
        causes.push(required_because(
            format!("{at}.resources"),
            "resource rules must supply at least one resource",
        ));
    }
}

/// `ValidateRoleBinding` (`namespaced`) or `ValidateClusterRoleBinding`, without the metadata.
pub(super) fn binding(obj: &Value, namespaced: bool, causes: &mut Vec<FieldCause>) {
    let role_ref = obj.get("roleRef");
    let api_group = set_at(role_ref, "/apiGroup").cloned().unwrap_or(json!(""));
    if api_group != GROUP {
        causes.push(FieldCause::not_supported("roleRef.apiGroup", &api_group, &[GROUP]));
    }
    let kind = set_at(role_ref, "/kind").cloned().unwrap_or(json!(""));
    let kinds: &[&str] = if namespaced {
        &["Role", "ClusterRole"]
    } else {
        &["ClusterRole"]
    };
    if !kind.as_str().is_some_and(|k| kinds.contains(&k)) {
        causes.push(FieldCause::not_supported("roleRef.kind", &kind, kinds));
    }
    let name = str_at(role_ref, "/name");
    if name.is_empty() {
        causes.push(FieldCause::required("roleRef.name"));
    } else {
        for msg in path_segment_name_errors(name) {
            causes.push(FieldCause::invalid("roleRef.name", &json!(name), msg));
        }
    }
    for (i, s) in array_at(Some(obj), "/subjects").iter().enumerate() {
        subject(&format!("subjects[{i}]"), s, namespaced, causes);
    }
}

/// `ValidateRoleBindingUpdate`: the role a binding grants never changes.
pub(super) fn binding_update(old: &Value, new: &Value, namespaced: bool, causes: &mut Vec<FieldCause>) {
    binding(new, namespaced, causes);
    immutable("roleRef", old.get("roleRef"), new.get("roleRef"), causes);
}

/// `ValidateRoleBindingSubject`.
fn subject(at: &str, s: &Value, namespaced: bool, causes: &mut Vec<FieldCause>) {
    let name = str_at(Some(s), "/name");
    if name.is_empty() {
        causes.push(FieldCause::required(format!("{at}.name")));
    }
    let api_group = set_at(Some(s), "/apiGroup").cloned().unwrap_or(json!(""));
    let kind = set_at(Some(s), "/kind").cloned().unwrap_or(json!(""));
    match kind.as_str() {
        Some("ServiceAccount") => {
            if !name.is_empty() {
                for msg in dns1123_subdomain_errors(name) {
                    causes.push(FieldCause::invalid(format!("{at}.name"), &json!(name), msg));
                }
            }
            if api_group != "" {
                causes.push(FieldCause::not_supported(format!("{at}.apiGroup"), &api_group, &[""]));
            }
            if !namespaced && str_at(Some(s), "/namespace").is_empty() {
                causes.push(FieldCause::required(format!("{at}.namespace")));
            }
        }
        Some("User" | "Group") => {
            if api_group != GROUP {
                causes.push(FieldCause::not_supported(
                    format!("{at}.apiGroup"),
                    &api_group,
                    &[GROUP],
                ));
            }
        }
        _ => causes.push(FieldCause::not_supported(
            format!("{at}.kind"),
            &kind,
            &["ServiceAccount", "User", "Group"],
        )),
    }
}
