//! Security contexts (`validatePodSpecSecurityContext`, `ValidateSecurityContext`): user and group
//! ids in 0..2147483647 (pod, container, `supplementalGroups`), the enums (`fsGroupChangePolicy`,
//! `supplementalGroupsPolicy`, `seccompProfile.type`, `procMount`), and `allowPrivilegeEscalation:
//! false` with `privileged: true`. Privileged containers are allowed, as on a cluster started with
//! `--allow-privileged=true`.

use serde_json::Value;

use super::{required, set, string};
use crate::status::FieldCause;

const ID_RANGE: &str = "must be between 0 and 2147483647, inclusive";
const SECCOMP_TYPES: &[&str] = &["Localhost", "RuntimeDefault", "Unconfined"];

fn id(field: String, value: Option<&Value>, causes: &mut Vec<FieldCause>) {
    if let Some(v) = value
        && !v.as_i64().is_some_and(|n| (0..=i64::from(i32::MAX)).contains(&n))
    {
        causes.push(FieldCause::invalid(field, v, ID_RANGE));
    }
}

fn seccomp(path: &str, sc: &Value, causes: &mut Vec<FieldCause>) {
    let Some(profile) = set(sc, "seccompProfile") else {
        return;
    };
    let at = format!("{path}.seccompProfile");
    let kind = profile.get("type").and_then(Value::as_str).unwrap_or_default();
    if kind.is_empty() {
        causes.push(required(
            format!("{at}.type"),
            "type is required when seccompProfile is set",
        ));
    } else if !SECCOMP_TYPES.contains(&kind) {
        causes.push(FieldCause::not_supported(
            format!("{at}.type"),
            &string(kind),
            SECCOMP_TYPES,
        ));
    }
    if kind == "Localhost" && set(profile, "localhostProfile").is_none() {
        causes.push(required(
            format!("{at}.localhostProfile"),
            "must be set when seccomp type is Localhost",
        ));
    }
}

/// `validatePodSpecSecurityContext`, the parts listed in the module documentation.
pub(super) fn pod_security_context(path: &str, sc: Option<&Value>, causes: &mut Vec<FieldCause>) {
    let Some(sc) = sc else { return };
    id(format!("{path}.fsGroup"), set(sc, "fsGroup"), causes);
    id(format!("{path}.runAsUser"), set(sc, "runAsUser"), causes);
    id(format!("{path}.runAsGroup"), set(sc, "runAsGroup"), causes);
    for (i, gid) in sc
        .get("supplementalGroups")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
    {
        id(format!("{path}.supplementalGroups[{i}]"), Some(gid), causes);
    }
    if let Some(policy) = set(sc, "fsGroupChangePolicy") {
        // NotSupported even for "": the field is a pointer, set means judged.
        if !policy
            .as_str()
            .is_some_and(|p| ["Always", "OnRootMismatch"].contains(&p))
        {
            causes.push(FieldCause::not_supported(
                format!("{path}.fsGroupChangePolicy"),
                policy,
                &["Always", "OnRootMismatch"],
            ));
        }
    }
    seccomp(path, sc, causes);
    if let Some(policy) = set(sc, "supplementalGroupsPolicy")
        && !policy.as_str().is_some_and(|p| ["Merge", "Strict"].contains(&p))
    {
        causes.push(FieldCause::not_supported(
            format!("{path}.supplementalGroupsPolicy"),
            policy,
            &["Merge", "Strict"],
        ));
    }
}

/// `ValidateSecurityContext` of a container, the parts listed in the module documentation.
pub(super) fn container_security_context(path: &str, sc: Option<&Value>, causes: &mut Vec<FieldCause>) {
    let Some(sc) = sc else { return };
    id(format!("{path}.runAsUser"), set(sc, "runAsUser"), causes);
    id(format!("{path}.runAsGroup"), set(sc, "runAsGroup"), causes);
    if let Some(mount) = set(sc, "procMount")
        && !mount.as_str().is_some_and(|m| ["Default", "Unmasked"].contains(&m))
    {
        causes.push(FieldCause::not_supported(
            format!("{path}.procMount"),
            mount,
            &["Default", "Unmasked"],
        ));
    }
    seccomp(path, sc, causes);
    let privileged = sc.get("privileged").and_then(Value::as_bool) == Some(true);
    if sc.get("allowPrivilegeEscalation").and_then(Value::as_bool) == Some(false) && privileged {
        causes.push(FieldCause::invalid(
            path,
            sc,
            "cannot set `allowPrivilegeEscalation` to false and `privileged` to true",
        ));
    }
}
