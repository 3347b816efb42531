//! Pod validation as kube-apiserver 1.37 runs it on a Pod (`pkg/apis/core/validation`:
//! `validatePodMetadataAndSpec`, `ValidatePodSpec` and what it calls), in its order, with its field
//! paths and messages, on the object after defaulting (`defaults.rs` does what
//! `SetDefaults_Pod`/`SetDefaults_PodSpec` do that validation depends on: requests from limits,
//! a volume without a source is an `emptyDir`, probe and `httpGet` defaults, ...). Enum fields that
//! defaulting fills in (`imagePullPolicy`, `terminationMessagePolicy`, `restartPolicy`,
//! `dnsPolicy`, port `protocol`) are checked only when set: an empty value would have been
//! defaulted.
//!
//! One concern per module: [`volumes`], [`containers`] (names, images, ports, env, mounts, restart
//! policies, host ports), [`resources`], [`probes`] (probes and lifecycle handlers),
//! [`security`], [`scheduling`] (node selector, affinity, tolerations) and [`dns`].
//!
//! Not checked (kube-apiserver does): ephemeral containers, `envFrom`, volume devices, resize
//! policies, restart policy rules, resource claims, pod-level `resources`, topology spread
//! constraints, pod (anti-)affinity label selectors, seccomp/AppArmor/SELinux/Windows options,
//! sysctls, `os`, scheduling gates, readiness gates, host aliases, volume sources other than
//! `emptyDir`, `hostPath`, `configMap`, `secret` and `persistentVolumeClaim`, annotations that
//! carry pod fields.
//!
//! A relative `mountPath` is accepted, as kube-apiserver accepts it: `ValidateVolumeMounts` checks
//! only that it is set and unique, and the kubelet makes it absolute (`MakeAbsolutePath`).

mod containers;
mod dns;
mod probes;
mod resources;
mod scheduling;
mod security;
mod volumes;

use serde_json::Value;

use super::{dns1123_label_errors, dns1123_subdomain_errors, label_value_errors, labels, qualified_name_errors};
use crate::status::FieldCause;

fn str_of<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get(key).and_then(Value::as_str).unwrap_or("")
}

fn array_of<'a>(v: Option<&'a Value>, key: &str) -> &'a [Value] {
    v.and_then(|v| v.get(key))
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

/// A set field (not absent, not `null`).
fn set<'a>(v: &'a Value, key: &str) -> Option<&'a Value> {
    v.get(key).filter(|v| !v.is_null())
}

fn int_of(v: &Value, key: &str) -> Option<i64> {
    v.get(key).and_then(Value::as_i64)
}

fn string(s: &str) -> Value {
    Value::String(s.into())
}

fn duplicate(field: String, value: &str) -> FieldCause {
    FieldCause {
        reason: "FieldValueDuplicate".into(),
        field,
        message: format!("Duplicate value: {value:?}"),
    }
}

fn not_found(field: String, value: &str) -> FieldCause {
    FieldCause {
        reason: "FieldValueNotFound".into(),
        field,
        message: format!("Not found: {value:?}"),
    }
}

/// `field.Required(path, detail)` with a detail.
fn required(field: impl Into<String>, detail: &str) -> FieldCause {
    FieldCause {
        reason: "FieldValueRequired".into(),
        field: field.into(),
        message: format!("Required value: {detail}"),
    }
}

/// `ValidateNonnegativeField`.
fn nonnegative(field: String, value: Option<i64>, causes: &mut Vec<FieldCause>) {
    if let Some(n) = value.filter(|n| *n < 0) {
        causes.push(FieldCause::invalid(
            field,
            &Value::from(n),
            "must be greater than or equal to 0",
        ));
    }
}

/// A set enum field: its value must be one of `supported` (an empty one would have been defaulted).
fn check_enum(field: String, value: Option<&Value>, supported: &[&str], causes: &mut Vec<FieldCause>) {
    if let Some(v) = value
        && v.as_str() != Some("")
        && !v.as_str().is_some_and(|s| supported.contains(&s))
    {
        causes.push(FieldCause::not_supported(field, v, supported));
    }
}

/// A Pod's spec: `ValidatePodSpec` and the rules `validatePodMetadataAndSpec` adds for pods only.
pub(super) fn pod(path: &str, spec: Option<&Value>, causes: &mut Vec<FieldCause>) {
    pod_spec(path, spec, causes);
    pod_only(path, spec, causes);
}

/// `ValidatePodSpec`: a pod's spec or a workload template's.
pub(super) fn pod_spec(path: &str, spec: Option<&Value>, causes: &mut Vec<FieldCause>) {
    let empty = Value::Null;
    let s = spec.unwrap_or(&empty);
    let grace = int_of(s, "terminationGracePeriodSeconds");
    let volumes = volumes::volumes(&format!("{path}.volumes"), spec, causes);
    containers::containers(path, s, &volumes, grace, causes);
    containers::init_containers(path, s, &volumes, grace, causes);
    containers::host_network_ports(path, s, causes);
    check_enum(
        format!("{path}.restartPolicy"),
        set(s, "restartPolicy"),
        &["Always", "OnFailure", "Never"],
        causes,
    );
    dns::dns_policy(path, s, causes);
    labels(s.get("nodeSelector"), &format!("{path}.nodeSelector"), causes);
    security::pod_security_context(&format!("{path}.securityContext"), set(s, "securityContext"), causes);
    scheduling::affinity(&format!("{path}.affinity"), set(s, "affinity"), causes);
    dns::dns_config(path, s, causes);
    for (field, check) in [
        (
            "serviceAccountName",
            dns1123_subdomain_errors as fn(&str) -> Vec<String>,
        ),
        ("nodeName", dns1123_subdomain_errors),
    ] {
        let value = str_of(s, field);
        if !value.is_empty() {
            for msg in check(value) {
                causes.push(FieldCause::invalid(format!("{path}.{field}"), &string(value), msg));
            }
        }
    }
    if let Some(v) = set(s, "activeDeadlineSeconds")
        && !v.as_i64().is_some_and(|n| (1..=i64::from(i32::MAX)).contains(&n))
    {
        causes.push(FieldCause::invalid(
            format!("{path}.activeDeadlineSeconds"),
            v,
            "must be between 1 and 2147483647, inclusive",
        ));
    }
    for field in ["hostname", "subdomain"] {
        let value = str_of(s, field);
        if !value.is_empty() {
            for msg in dns1123_label_errors(value) {
                causes.push(FieldCause::invalid(format!("{path}.{field}"), &string(value), msg));
            }
        }
    }
    scheduling::tolerations(&format!("{path}.tolerations"), array_of(spec, "tolerations"), causes);
    let priority_class = str_of(s, "priorityClassName");
    if !priority_class.is_empty() {
        for msg in dns1123_subdomain_errors(priority_class) {
            causes.push(FieldCause::invalid(
                format!("{path}.priorityClassName"),
                &string(priority_class),
                msg,
            ));
        }
    }
}

/// Pod-only (not templates): the grace period and images without surrounding whitespace.
fn pod_only(path: &str, spec: Option<&Value>, causes: &mut Vec<FieldCause>) {
    let grace = spec.and_then(|s| int_of(s, "terminationGracePeriodSeconds"));
    nonnegative(format!("{path}.terminationGracePeriodSeconds"), grace, causes);
    for list in ["containers", "initContainers"] {
        for (i, c) in array_of(spec, list).iter().enumerate() {
            let image = str_of(c, "image");
            if image.trim() != image {
                causes.push(FieldCause::invalid(
                    format!("{path}.{list}[{i}].image"),
                    &string(image),
                    "must not have leading or trailing whitespace",
                ));
            }
        }
    }
}

#[cfg(test)]
mod tests;
