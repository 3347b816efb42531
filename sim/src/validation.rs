//! Validation the apiserver runs on every write (metadata rules, a few per-kind rules), with
//! Kubernetes' field paths and messages.

use serde_json::Value;

use crate::meta;
use crate::status::FieldCause;

const DNS1123_SUBDOMAIN_MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
const DNS1123_LABEL_MSG: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";
const LABEL_VALUE_MSG: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')";
const QUALIFIED_NAME_MSG: &str = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";
const TOTAL_ANNOTATION_SIZE: usize = 256 * 1024;

mod config;
mod fields;
pub mod finalizers;
mod lease;
mod pod;
mod rbac;
mod service;
pub mod warnings;
mod workloads;

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

pub fn is_dns1123_label(s: &str) -> bool {
    dns1123_label_errors(s).is_empty()
}

pub fn is_dns1123_subdomain(s: &str) -> bool {
    dns1123_subdomain_errors(s).is_empty()
}

/// `content.MaxLenError`, the newer wording of the label key and value checks.
fn max_bytes_error(n: usize) -> String {
    format!("must be no more than {n} bytes")
}

/// `content.IsLabelValue`.
fn label_value_errors(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if s.len() > 63 {
        errs.push(max_bytes_error(63));
    }
    if !(s.is_empty() || matches_label_key_name(s)) {
        errs.push(LABEL_VALUE_MSG.into());
    }
    errs
}

/// The regex `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]`.
fn matches_label_key_name(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
}

/// `content.IsLabelKey` (`IsQualifiedName`): an optional DNS subdomain prefix and `/`, then a
/// name of up to 63 characters.
fn qualified_name_errors(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    let parts: Vec<&str> = value.split('/').collect();
    let name = match parts.as_slice() {
        [name] => *name,
        [prefix, name] => {
            if prefix.is_empty() {
                errs.push("prefix part must be non-empty".into());
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
            errs.push(format!("a valid label key {QUALIFIED_NAME_MSG} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"));
            return errs;
        }
    };
    if name.is_empty() {
        errs.push("name part must be non-empty".into());
    } else if name.len() > 63 {
        errs.push(format!("name part {}", max_bytes_error(63)));
    }
    if !matches_label_key_name(name) {
        errs.push(format!("name part {QUALIFIED_NAME_MSG}"));
    }
    errs
}

/// `ValidateLabels`: keys are qualified names, values label values; every error at `path`.
fn labels(labels: Option<&Value>, path: &str, causes: &mut Vec<FieldCause>) {
    let Some(labels) = labels.and_then(Value::as_object) else {
        return;
    };
    for (k, v) in labels {
        for msg in qualified_name_errors(k) {
            causes.push(FieldCause::invalid(path, &Value::String(k.clone()), msg));
        }
        // A null value is dropped when decoding; anything else not a string is refused earlier.
        let value = v.as_str().unwrap_or_default();
        for msg in label_value_errors(value) {
            causes.push(FieldCause::invalid(path, &Value::String(value.into()), msg));
        }
    }
}

/// `ValidateAnnotations`: keys are qualified names (compared lower-cased), at most 256 KiB in all.
fn annotations(annotations: Option<&Value>, path: &str, causes: &mut Vec<FieldCause>) {
    let Some(annotations) = annotations.and_then(Value::as_object) else {
        return;
    };
    let mut total = 0;
    for (k, v) in annotations {
        for msg in qualified_name_errors(&k.to_lowercase()) {
            causes.push(FieldCause::invalid(path, &Value::String(k.clone()), msg));
        }
        total += k.len() + v.as_str().map_or(0, str::len);
    }
    if total > TOTAL_ANNOTATION_SIZE {
        causes.push(FieldCause {
            reason: "FieldValueTooLong".into(),
            field: path.into(),
            message: format!("Too long: may not be more than {TOTAL_ANNOTATION_SIZE} bytes"),
        });
    }
}

/// `maskTrailingDash`: a generateName may end in '-' (a suffix follows). kube-apiserver drops the
/// last two characters and appends an 'a', so `ab-` is checked as `aa`.
fn mask_trailing_dash(name: &str) -> String {
    if name.len() > 1 && name.ends_with('-') {
        let cut = name.len().saturating_sub(2);
        match name.get(..cut) {
            Some(head) => format!("{head}a"),
            None => name.to_string(),
        }
    } else {
        name.to_string()
    }
}

/// `content.IsPathSegmentName`: RBAC names are only path segments.
fn path_segment_name_errors(name: &str) -> Vec<String> {
    if name == "." || name == ".." {
        return vec![format!("may not be '{name}'")];
    }
    ["/", "%"]
        .iter()
        .filter(|bad| name.contains(*bad))
        .map(|bad| format!("may not contain '{bad}'"))
        .collect()
}

/// How a kind's names are checked (its `ValidateNameFunc`); `prefix` for a `generateName`.
fn name_errors(group: &str, kind: &str, name: &str, prefix: bool) -> Vec<String> {
    let masked;
    let name = if prefix {
        masked = mask_trailing_dash(name);
        masked.as_str()
    } else {
        name
    };
    match (group, kind) {
        // Services: DNS-1123 labels on create since RelaxedServiceNameValidation (GA and locked on
        // in 1.37; 1.33 wanted DNS-1035 labels, so `1abc` was refused).
        ("", "Namespace" | "Service") | ("apps", "StatefulSet") => dns1123_label_errors(name),
        // RBAC names are path segments only, generated or not.
        ("rbac.authorization.k8s.io", _) => path_segment_name_errors(name),
        _ => dns1123_subdomain_errors(name),
    }
}

/// Metadata rules of a new object: its `generateName` as a name prefix, then the rules of
/// every write (`ValidateObjectMeta`).
pub fn object_meta_on_create(group: &str, kind: &str, obj: &Value, causes: &mut Vec<FieldCause>) {
    let generate_name = meta::str_field(obj, "generateName");
    if !generate_name.is_empty() {
        for msg in name_errors(group, kind, generate_name, true) {
            causes.push(FieldCause::invalid(
                "metadata.generateName",
                &Value::String(generate_name.into()),
                msg,
            ));
        }
    }
    object_meta(group, kind, obj, causes);
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
        for msg in name_errors(group, kind, name, false) {
            causes.push(FieldCause::invalid("metadata.name", &Value::String(name.into()), msg));
        }
    }
    labels(obj.pointer("/metadata/labels"), "metadata.labels", causes);
    annotations(obj.pointer("/metadata/annotations"), "metadata.annotations", causes);
}

/// Rules for new objects of a kind.
pub fn on_create(group: &str, kind: &str, obj: &Value, causes: &mut Vec<FieldCause>) {
    match (group, kind) {
        ("", "Pod") => pod::pod("spec", obj.get("spec"), causes),
        ("", "Service") => service::service(obj, None, causes),
        ("", "ConfigMap") => config::config_map(obj, causes),
        ("", "Secret") => config::secret(obj, causes),
        ("rbac.authorization.k8s.io", "Role") => rbac::role(obj, true, causes),
        ("rbac.authorization.k8s.io", "ClusterRole") => rbac::role(obj, false, causes),
        ("rbac.authorization.k8s.io", "RoleBinding") => rbac::binding(obj, true, causes),
        ("rbac.authorization.k8s.io", "ClusterRoleBinding") => rbac::binding(obj, false, causes),
        ("coordination.k8s.io", "Lease") => lease::lease(obj, causes),
        ("apps", _) | ("batch", _) => workloads::on_create(kind, obj, causes),
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
        ("", "Service") => service::service(new, Some(old), causes),
        ("", "ConfigMap") => config::config_map_update(old, new, causes),
        ("", "Secret") => config::secret_update(old, new, causes),
        ("rbac.authorization.k8s.io", "Role") => rbac::role(new, true, causes),
        ("rbac.authorization.k8s.io", "ClusterRole") => rbac::role(new, false, causes),
        ("rbac.authorization.k8s.io", "RoleBinding") => rbac::binding_update(old, new, true, causes),
        ("rbac.authorization.k8s.io", "ClusterRoleBinding") => rbac::binding_update(old, new, false, causes),
        ("coordination.k8s.io", "Lease") => lease::lease(new, causes),
        ("apps", _) | ("batch", _) => workloads::on_update(kind, old, new, causes),
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
    pod::pod("spec", Some(new_spec), causes);
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
    stored_versions(obj, versions.map_or(&[], Vec::as_slice), causes);
}

/// `ValidateCustomResourceDefinitionStoredVersions`. The registry has already put the storage
/// version into `status.storedVersions` (on create: the only entries), so a CRD without one
/// has none, and a version stored once must stay in `spec.versions`.
fn stored_versions(obj: &Value, versions: &[Value], causes: &mut Vec<FieldCause>) {
    let stored: Vec<&str> = obj
        .pointer("/status/storedVersions")
        .and_then(Value::as_array)
        .map(|l| l.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    if stored.is_empty() {
        causes.push(FieldCause::invalid(
            "status.storedVersions",
            &Value::Null,
            "must have at least one stored version",
        ));
        return;
    }
    let names: Vec<&str> = versions
        .iter()
        .filter_map(|v| v.get("name").and_then(Value::as_str))
        .collect();
    for v in versions {
        let name = v.get("name").and_then(Value::as_str).unwrap_or("");
        if v.get("storage").and_then(Value::as_bool) == Some(true) && !stored.contains(&name) {
            causes.push(FieldCause::invalid(
                "status.storedVersions",
                &Value::from(stored.clone()),
                format!("must have the storage version {name}"),
            ));
        }
    }
    for (i, v) in stored.iter().enumerate() {
        if !names.contains(v) {
            causes.push(FieldCause::invalid(
                format!("status.storedVersions[{i}]"),
                &Value::String((*v).into()),
                format!("missing from spec.versions; {v} was previously a storage version, and must remain in spec.versions until a storage migration ensures no data remains persisted in {v} and removes {v} from status.storedVersions"),
            ));
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
        // A label value keeps its own 63 (worded in bytes by 1.37's label checks).
        let mut c = Vec::new();
        object_meta(
            "",
            "Pod",
            &json!({ "metadata": { "name": "p", "labels": { "a": seventy } } }),
            &mut c,
        );
        assert!(c[0].message.ends_with("must be no more than 63 bytes"), "{c:?}");
    }

    #[test]
    fn service_names_are_labels_since_relaxed_service_name_validation() {
        let fields = |name: &str| {
            let mut c = Vec::new();
            object_meta_on_create("", "Service", &json!({ "metadata": { "name": name } }), &mut c);
            c.into_iter().map(|c| c.field).collect::<Vec<_>>()
        };
        assert_eq!(fields("1starts-with-digit"), Vec::<String>::new());
        assert_eq!(fields("svc.with.dots"), ["metadata.name"]);
    }

    #[test]
    fn generate_name_is_checked_as_a_prefix() {
        let fields = |kind: &str, generate: &str, name: &str| {
            let mut c = Vec::new();
            let obj = json!({ "metadata": { "generateName": generate, "name": name } });
            object_meta_on_create("", kind, &obj, &mut c);
            c.into_iter().map(|c| c.field).collect::<Vec<_>>()
        };
        // A trailing '-' is allowed: a suffix follows.
        assert_eq!(fields("ConfigMap", "gen-", "gen-abcde"), Vec::<String>::new());
        assert_eq!(
            fields("ConfigMap", "Spark-", "Spark-abcde"),
            ["metadata.generateName", "metadata.name"]
        );
        // Only on create: an update does not look at it.
        let mut c = Vec::new();
        object_meta(
            "",
            "ConfigMap",
            &json!({ "metadata": { "generateName": "Bad-", "name": "ok" } }),
            &mut c,
        );
        assert_eq!(c, Vec::new());
        assert_eq!(mask_trailing_dash("ab-"), "aa");
        assert_eq!(mask_trailing_dash("-"), "-");
    }

    #[test]
    fn rbac_names_are_path_segments_and_label_keys_qualified_names() {
        assert_eq!(path_segment_name_errors("role:with:colons"), Vec::<String>::new());
        assert_eq!(path_segment_name_errors(".."), ["may not be '..'"]);
        assert_eq!(
            path_segment_name_errors("a%b/c"),
            ["may not contain '/'", "may not contain '%'"]
        );
        assert_eq!(qualified_name_errors("example.com/name"), Vec::<String>::new());
        assert_eq!(qualified_name_errors("/name"), ["prefix part must be non-empty"]);
        assert_eq!(qualified_name_errors("a/b/c").len(), 1);
        assert!(qualified_name_errors("bad key!")[0].starts_with("name part must consist"));
    }

    #[test]
    fn services_configs_secrets_roles_and_leases_follow_their_kinds_rules() {
        let fields = |group: &str, kind: &str, obj: Value| {
            let mut c = Vec::new();
            on_create(group, kind, &obj, &mut c);
            c.into_iter().map(|c| c.field).collect::<Vec<_>>()
        };
        let svc = |spec: Value| {
            json!({ "spec": spec.as_object().cloned().unwrap_or_default().into_iter()
                .chain([("type".to_string(), json!("ClusterIP")), ("sessionAffinity".to_string(), json!("None")),
                        ("internalTrafficPolicy".to_string(), json!("Cluster"))])
                .collect::<serde_json::Map<_, _>>() })
        };
        assert_eq!(
            fields(
                "",
                "Service",
                svc(json!({ "ports": [{ "port": 80, "protocol": "TCP", "targetPort": 80 }] }))
            ),
            Vec::<String>::new()
        );
        assert_eq!(
            fields(
                "",
                "Service",
                svc(json!({ "ports": [{ "port": 0, "protocol": "TCP", "targetPort": 0 }] }))
            ),
            ["spec.ports[0].port", "spec.ports[0].targetPort"]
        );
        assert_eq!(fields("", "Service", svc(json!({}))), ["spec.ports"]);
        assert_eq!(
            fields(
                "",
                "ConfigMap",
                json!({ "data": { "a/b": "x", "a": "y" }, "binaryData": { "a": "eA==" } })
            ),
            ["data[a]", "data[a/b]"]
        );
        assert_eq!(
            fields("", "Secret", json!({ "type": "kubernetes.io/tls", "data": {} })),
            ["data[tls.crt]", "data[tls.key]"]
        );
        assert_eq!(
            fields(
                "rbac.authorization.k8s.io",
                "Role",
                json!({ "rules": [{ "apiGroups": [""], "resources": ["pods"], "verbs": [] }] })
            ),
            ["rules[0].verbs"]
        );
        assert_eq!(
            fields(
                "coordination.k8s.io",
                "Lease",
                json!({ "spec": { "leaseDurationSeconds": -1 } })
            ),
            ["spec.leaseDurationSeconds"]
        );
    }

    #[test]
    fn immutable_fields_of_services_and_secrets() {
        let svc = |ip: &str| {
            json!({ "spec": { "type": "ClusterIP", "sessionAffinity": "None", "internalTrafficPolicy": "Cluster",
                "clusterIP": ip, "clusterIPs": [ip], "ports": [{ "port": 80, "protocol": "TCP", "targetPort": 80 }] } })
        };
        let mut c = Vec::new();
        on_update("", "Service", &svc("10.96.0.10"), &svc("10.96.0.11"), &mut c);
        assert_eq!(
            c.iter().map(|c| c.field.as_str()).collect::<Vec<_>>(),
            ["spec.clusterIPs[0]"]
        );
        let old = json!({ "type": "Opaque", "immutable": true, "data": { "a": "eA==" } });
        let new = json!({ "type": "Opaque", "data": { "a": "eQ==" } });
        let mut c = Vec::new();
        on_update("", "Secret", &old, &new, &mut c);
        assert_eq!(
            c.iter().map(|c| c.field.as_str()).collect::<Vec<_>>(),
            ["immutable", "data"]
        );
    }

    #[test]
    fn a_crd_needs_a_stored_version() {
        let crd = json!({ "metadata": { "name": "xs.example.com" }, "spec": { "group": "example.com", "scope": "Namespaced",
            "names": { "plural": "xs", "kind": "X" }, "versions": [{ "name": "v1", "served": true, "storage": false }] },
            "status": { "storedVersions": [] } });
        let mut c = Vec::new();
        on_create("apiextensions.k8s.io", "CustomResourceDefinition", &crd, &mut c);
        assert_eq!(
            c.iter().map(|c| c.field.as_str()).collect::<Vec<_>>(),
            ["spec.versions", "status.storedVersions"]
        );
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
