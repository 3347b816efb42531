//! Validation the apiserver runs on every write (metadata rules, a few per-kind rules), with
//! Kubernetes' field paths and messages.

use serde_json::Value;

use crate::meta;
use crate::status::FieldCause;

const DNS1123_SUBDOMAIN_MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
const DNS1123_LABEL_MSG: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";
const DNS1035_LABEL_MSG: &str = "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')";
const LABEL_VALUE_MSG: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')";
const TOTAL_ANNOTATION_SIZE: usize = 256 * 1024;

pub mod finalizers;
mod pod;
pub mod warnings;

const LABEL_KEY_MSG: &str = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";

/// Whether `s` is a label key's name part (`([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]`).
fn matches_label_key_name(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
}

/// `content.IsLabelKey` (`IsQualifiedName`): label keys, finalizer names, ... in kube-apiserver's words.
pub fn label_key_errors(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    let parts: Vec<&str> = s.split('/').collect();
    let name = match parts.as_slice() {
        [name] => *name,
        [prefix, name] => {
            if prefix.is_empty() {
                errs.push("prefix part must be non-empty".to_owned());
            } else {
                errs.extend(
                    dns1123_subdomain_errors(prefix)
                        .into_iter()
                        .map(|m| format!("prefix part {m}")),
                );
            }
            *name
        }
        _ => {
            return vec![format!(
                "a valid label key {LABEL_KEY_MSG} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
            )];
        }
    };
    if name.is_empty() {
        errs.push("name part must be non-empty".to_owned());
    } else if name.len() > 63 {
        errs.push(format!("name part {}", max_len_error(63)));
    }
    if !matches_label_key_name(name) {
        errs.push(format!("name part {LABEL_KEY_MSG}"));
    }
    errs
}

/// `validation.MaxLenError`.
fn max_len_error(n: usize) -> String {
    format!("must be no more than {n} characters")
}

/// The regex `[a-z0-9]([-a-z0-9]*[a-z0-9])?` (no length limit: lengths are checked separately,
/// as the apimachinery functions do).
fn matches_dns1123_label(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// The regex `[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*`: the dot-separated
/// parts have no length limit of their own, only the whole (253).
fn matches_dns1123_subdomain(s: &str) -> bool {
    !s.is_empty() && s.split('.').all(matches_dns1123_label)
}

/// `validation.IsDNS1123Label`: what is wrong, in kube-apiserver's words.
pub fn dns1123_label_errors(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if s.len() > 63 {
        errs.push(max_len_error(63));
    }
    if !matches_dns1123_label(s) {
        if matches_dns1123_subdomain(s) {
            errs.push("must not contain dots".into());
        } else {
            errs.push(DNS1123_LABEL_MSG.into());
        }
    }
    errs
}

/// `validation.IsDNS1123Subdomain`.
pub fn dns1123_subdomain_errors(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if s.len() > 253 {
        errs.push(max_len_error(253));
    }
    if !matches_dns1123_subdomain(s) {
        errs.push(DNS1123_SUBDOMAIN_MSG.into());
    }
    errs
}

/// `validation.IsDNS1035Label`.
fn dns1035_label_errors(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if s.len() > 63 {
        errs.push(max_len_error(63));
    }
    if !(matches_dns1123_label(s) && s.as_bytes()[0].is_ascii_lowercase()) {
        errs.push(DNS1035_LABEL_MSG.into());
    }
    errs
}

pub fn is_dns1123_label(s: &str) -> bool {
    dns1123_label_errors(s).is_empty()
}

pub fn is_dns1123_subdomain(s: &str) -> bool {
    dns1123_subdomain_errors(s).is_empty()
}

/// `validation.IsValidLabelValue`.
fn label_value_errors(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if s.len() > 63 {
        errs.push(max_len_error(63));
    }
    let pattern = s.is_empty()
        || (s
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
            && s.as_bytes()[0].is_ascii_alphanumeric()
            && s.as_bytes()[s.len() - 1].is_ascii_alphanumeric());
    if !pattern {
        errs.push(LABEL_VALUE_MSG.into());
    }
    errs
}

/// How a kind's names are checked (`ValidateNameFunc`).
fn name_errors(group: &str, kind: &str, name: &str) -> Vec<String> {
    match (group, kind) {
        ("", "Namespace") => dns1123_label_errors(name),
        ("", "Service") => dns1035_label_errors(name),
        // RBAC names are path segments only.
        ("rbac.authorization.k8s.io", _) => {
            if name.contains('/') || name == "." || name == ".." {
                vec![String::new()]
            } else {
                Vec::new()
            }
        }
        _ => dns1123_subdomain_errors(name),
    }
}

/// Metadata rules common to every object (after name generation).
pub fn object_meta(group: &str, kind: &str, obj: &Value, causes: &mut Vec<FieldCause>) {
    let name = meta::name(obj);
    if name.is_empty() {
        causes.push(FieldCause {
            reason: "FieldValueRequired".into(),
            field: "metadata.name".into(),
            message: "Required value: name or generateName is required".into(),
        });
    } else {
        for msg in name_errors(group, kind, name) {
            causes.push(FieldCause::invalid("metadata.name", &Value::String(name.into()), msg));
        }
    }
    if let Some(labels) = obj.pointer("/metadata/labels").and_then(Value::as_object) {
        for (k, v) in labels {
            for msg in label_value_errors(v.as_str().unwrap_or_default()) {
                causes.push(FieldCause::invalid("metadata.labels", v, msg));
            }
            if k.is_empty() || k.len() > 317 {
                causes.push(FieldCause::invalid(
                    "metadata.labels",
                    &Value::String(k.clone()),
                    "name part must be non-empty",
                ));
            }
        }
    }
    if let Some(annotations) = obj.pointer("/metadata/annotations").and_then(Value::as_object) {
        let total: usize = annotations
            .iter()
            .map(|(k, v)| k.len() + v.as_str().map_or(0, str::len))
            .sum();
        if total > TOTAL_ANNOTATION_SIZE {
            causes.push(FieldCause {
                reason: "FieldValueTooLong".into(),
                field: "metadata.annotations".into(),
                message: format!("Too long: may not be more than {TOTAL_ANNOTATION_SIZE} bytes"),
            });
        }
    }
}

/// Rules for new objects of a kind.
pub fn on_create(group: &str, kind: &str, obj: &Value, causes: &mut Vec<FieldCause>) {
    match (group, kind) {
        ("", "Pod") => pod::pod_spec("spec", obj.get("spec"), causes),
        ("apiextensions.k8s.io", "CustomResourceDefinition") => crd(obj, causes),
        _ => {}
    }
}

/// Rules for updates of a kind.
pub fn on_update(group: &str, kind: &str, old: &Value, new: &Value, causes: &mut Vec<FieldCause>) {
    let old_fin = meta::finalizers(old);
    let added: Vec<String> = meta::finalizers(new)
        .into_iter()
        .filter(|f| !old_fin.contains(f))
        .collect();
    if meta::is_deleting(old) && !added.is_empty() {
        let list = added.iter().map(|f| format!("{f:?}")).collect::<Vec<_>>().join(", ");
        causes.push(FieldCause::forbidden(
            "metadata.finalizers",
            format!(
                "no new finalizers can be added if the object is being deleted, found new finalizers []string{{{list}}}"
            ),
        ));
    }
    match (group, kind) {
        ("", "Pod") => pod_update(old, new, causes),
        ("apiextensions.k8s.io", "CustomResourceDefinition") => {
            crd(new, causes);
            for field in ["scope", "group"] {
                if old.pointer(&format!("/spec/{field}")) != new.pointer(&format!("/spec/{field}")) {
                    causes.push(FieldCause::invalid(
                        format!("spec.{field}"),
                        new.pointer(&format!("/spec/{field}")).unwrap_or(&Value::Null),
                        "field is immutable",
                    ));
                }
            }
        }
        _ => {}
    }
}

/// The spec fields a pod update may change, masked out before comparing specs.
fn mutable_pod_spec(spec: &Value) -> Value {
    let mut s = spec.clone();
    if let Some(m) = s.as_object_mut() {
        for f in ["activeDeadlineSeconds", "tolerations", "terminationGracePeriodSeconds"] {
            m.remove(f);
        }
        for list in ["containers", "initContainers"] {
            if let Some(Value::Array(cs)) = m.get_mut(list) {
                for c in cs.iter_mut().filter_map(Value::as_object_mut) {
                    c.remove("image");
                }
            }
        }
    }
    s
}

fn pod_update(old: &Value, new: &Value, causes: &mut Vec<FieldCause>) {
    let (Some(old_spec), Some(new_spec)) = (old.get("spec"), new.get("spec")) else {
        return;
    };
    if let Some(cause) = tolerations_update(old_spec, new_spec) {
        causes.push(cause);
    }
    if mutable_pod_spec(old_spec) != mutable_pod_spec(new_spec) {
        causes.push(FieldCause::forbidden(
            "spec",
            "pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)",
        ));
    }
    pod::pod_spec("spec", Some(new_spec), causes);
}

/// `validateOnlyAddedTolerations`: every toleration a pod had is still there, but for its
/// `tolerationSeconds`.
fn tolerations_update(old_spec: &Value, new_spec: &Value) -> Option<FieldCause> {
    let without_seconds = |t: &Value| {
        let mut t = t.clone();
        if let Some(m) = t.as_object_mut() {
            m.remove("tolerationSeconds");
        }
        t
    };
    let list = |spec: &Value| -> Vec<Value> {
        spec.get("tolerations")
            .and_then(Value::as_array)
            .map(|ts| ts.iter().map(without_seconds).collect())
            .unwrap_or_default()
    };
    let kept = list(new_spec);
    if list(old_spec).iter().all(|t| kept.contains(t)) {
        return None;
    }
    Some(FieldCause::forbidden(
        "spec.tolerations",
        "existing toleration can not be modified except its tolerationSeconds",
    ))
}

fn crd(obj: &Value, causes: &mut Vec<FieldCause>) {
    let spec = obj.get("spec");
    let s = |p: &str| spec.and_then(|s| s.pointer(p)).and_then(Value::as_str).unwrap_or("");
    let (group, plural, kind) = (s("/group"), s("/names/plural"), s("/names/kind"));
    if group.is_empty() {
        causes.push(FieldCause::required("spec.group"));
    } else if !group.contains('.') {
        causes.push(FieldCause::invalid(
            "spec.group",
            &Value::String(group.into()),
            "should be a domain with at least one dot",
        ));
    }
    if plural.is_empty() {
        causes.push(FieldCause::required("spec.names.plural"));
    }
    if kind.is_empty() {
        causes.push(FieldCause::required("spec.names.kind"));
    }
    let name = meta::name(obj);
    if !group.is_empty() && !plural.is_empty() && name != format!("{plural}.{group}") {
        causes.push(FieldCause::invalid(
            "metadata.name",
            &Value::String(name.into()),
            "must be spec.names.plural+\".\"+spec.group",
        ));
    }
    let scope = spec.and_then(|s| s.get("scope")).cloned().unwrap_or(Value::Null);
    if !matches!(scope.as_str(), Some("Namespaced" | "Cluster")) {
        causes.push(FieldCause::not_supported(
            "spec.scope",
            &scope,
            &["Cluster", "Namespaced"],
        ));
    }
    let versions = spec.and_then(|s| s.get("versions")).and_then(Value::as_array);
    match versions {
        None => causes.push(FieldCause::invalid(
            "spec.versions",
            &Value::Null,
            "must have exactly one version marked as storage version",
        )),
        Some(vs) => {
            let storage = vs
                .iter()
                .filter(|v| v.get("storage").and_then(Value::as_bool) == Some(true))
                .count();
            if storage != 1 {
                causes.push(FieldCause::invalid(
                    "spec.versions",
                    &Value::Array(vs.clone()),
                    "must have exactly one version marked as storage version",
                ));
            }
            for (i, v) in vs.iter().enumerate() {
                if v.get("name").and_then(Value::as_str).unwrap_or("").is_empty() {
                    causes.push(FieldCause::required(format!("spec.versions[{i}].name")));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn names_and_labels() {
        let mut c = Vec::new();
        object_meta(
            "",
            "ConfigMap",
            &json!({ "metadata": { "name": "Bad_Name", "labels": { "a": "not ok!" } } }),
            &mut c,
        );
        assert_eq!(c.len(), 2);
        assert_eq!(c[0].field, "metadata.name");
        let mut c = Vec::new();
        object_meta("", "Namespace", &json!({ "metadata": {} }), &mut c);
        assert_eq!(c[0].message, "Required value: name or generateName is required");
    }

    #[test]
    fn long_names_follow_each_kinds_rule() {
        // Pod names are DNS-1123 subdomains: 253 characters, no limit per dot-separated part.
        let seventy = "a".repeat(70);
        let mut c = Vec::new();
        object_meta("", "Pod", &json!({ "metadata": { "name": seventy } }), &mut c);
        assert_eq!(c, Vec::new());
        object_meta("", "Pod", &json!({ "metadata": { "name": "a".repeat(254) } }), &mut c);
        assert_eq!(c.len(), 1);
        assert!(c[0].message.ends_with(": must be no more than 253 characters"), "{c:?}");
        // Namespaces and Services are labels: 63.
        let mut c = Vec::new();
        object_meta("", "Namespace", &json!({ "metadata": { "name": seventy } }), &mut c);
        object_meta("", "Service", &json!({ "metadata": { "name": seventy } }), &mut c);
        let messages: Vec<&str> = c.iter().map(|c| c.message.rsplit(": ").next().unwrap_or("")).collect();
        assert_eq!(messages, ["must be no more than 63 characters"; 2]);
        // A label value keeps its own 63.
        let mut c = Vec::new();
        object_meta(
            "",
            "Pod",
            &json!({ "metadata": { "name": "p", "labels": { "a": seventy } } }),
            &mut c,
        );
        assert!(c[0].message.ends_with("must be no more than 63 characters"), "{c:?}");
    }

    #[test]
    fn pods_need_containers_and_keep_their_spec() {
        let mut c = Vec::new();
        on_create("", "Pod", &json!({ "spec": {} }), &mut c);
        assert_eq!(c[0].field, "spec.containers");
        let old = json!({ "spec": { "containers": [{ "name": "a", "image": "x" }] } });
        let image = json!({ "spec": { "containers": [{ "name": "a", "image": "y" }] } });
        let mut c = Vec::new();
        on_update("", "Pod", &old, &image, &mut c);
        assert!(c.is_empty());
        let env = json!({ "spec": { "containers": [{ "name": "a", "image": "x", "env": [] }] } });
        on_update("", "Pod", &old, &env, &mut c);
        assert_eq!(c[0].reason, "FieldValueForbidden");
    }

    #[test]
    fn no_new_finalizers_while_deleting() {
        let old = json!({ "metadata": { "deletionTimestamp": "2024-01-01T00:00:00Z", "finalizers": ["a"] } });
        let new = json!({ "metadata": { "finalizers": ["a", "b"] } });
        let mut c = Vec::new();
        on_update("", "ConfigMap", &old, &new, &mut c);
        assert!(c[0].message.contains("no new finalizers"));
    }
}
