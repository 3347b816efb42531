//! Containers and init containers (`validateContainers`, `validateInitContainers`,
//! `validateContainerCommon`): names, images, ports, env, volume mounts, pull and termination
//! message policies, container restart policies, host port conflicts.
//!
//! Container restart policies follow 1.37, where ContainerRestartRules (beta since 1.35) and
//! RestartAllContainersOnContainerExits (beta since 1.36) are on: a regular or an init container
//! may set `restartPolicy` to any of `Always`, `Never`, `OnFailure`; an init container with
//! `Always` is a sidecar and may have probes and a lifecycle, any other init container may not.

use std::collections::HashSet;

use serde_json::Value;

use super::{
    array_of, check_enum, dns1123_label_errors, dns1123_subdomain_errors, duplicate, not_found, probes, resources,
    security, set, str_of, string,
};
use crate::status::FieldCause;
use crate::validation::config::config_key_errors;
use crate::validation::fields::port_name_errors;

const PULL_POLICIES: &[&str] = &["Always", "IfNotPresent", "Never"];
const TERMINATION_MESSAGE_POLICIES: &[&str] = &["File", "FallbackToLogsOnError"];
/// `sets.List(supportedContainerRestartPolicies)`: sorted.
const CONTAINER_RESTART_POLICIES: &[&str] = &["Always", "Never", "OnFailure"];
/// `sets.List(supportedPortProtocols)`: sorted.
const PROTOCOLS: &[&str] = &["SCTP", "TCP", "UDP"];

const RELAXED_ENV_VAR_NAME_MSG: &str =
    "a valid environment variable name must consist only of printable ASCII characters other than '='";
const NOT_FOR_INIT: &str = "may not be set for init containers without restartPolicy=Always";

/// `validateContainers`.
pub(super) fn containers(
    path: &str,
    spec: &Value,
    volumes: &HashSet<&str>,
    grace: Option<i64>,
    causes: &mut Vec<FieldCause>,
) {
    let containers = array_of(Some(spec), "containers");
    let list_path = format!("{path}.containers");
    if containers.is_empty() {
        causes.push(FieldCause::required(&list_path));
        return;
    }
    let mut names = HashSet::new();
    for (i, c) in containers.iter().enumerate() {
        let at = format!("{list_path}[{i}]");
        container_common(&at, c, volumes, causes);
        let name = str_of(c, "name");
        if !names.insert(name) {
            causes.push(duplicate(format!("{at}.name"), name));
        }
        probes::lifecycle(&format!("{at}.lifecycle"), set(c, "lifecycle"), grace, causes);
        probes::probes(&at, c, grace, causes);
        check_enum(
            format!("{at}.restartPolicy"),
            set(c, "restartPolicy"),
            CONTAINER_RESTART_POLICIES,
            causes,
        );
    }
    host_port_conflicts(&list_path, containers, causes);
}

/// `validateInitContainers`: names unique across regular and init containers, probes and a
/// lifecycle only for sidecars (`restartPolicy: Always`), host ports checked one container at a
/// time (kube-apiserver names each conflict at index 0: it checks a list of one).
pub(super) fn init_containers(
    path: &str,
    spec: &Value,
    volumes: &HashSet<&str>,
    grace: Option<i64>,
    causes: &mut Vec<FieldCause>,
) {
    let mut names: HashSet<&str> = array_of(Some(spec), "containers")
        .iter()
        .map(|c| str_of(c, "name"))
        .collect();
    let list_path = format!("{path}.initContainers");
    for (i, c) in array_of(Some(spec), "initContainers").iter().enumerate() {
        let at = format!("{list_path}[{i}]");
        container_common(&at, c, volumes, causes);
        let policy = set(c, "restartPolicy");
        check_enum(
            format!("{at}.restartPolicy"),
            policy,
            CONTAINER_RESTART_POLICIES,
            causes,
        );
        let name = str_of(c, "name");
        if names.contains(name) {
            causes.push(duplicate(format!("{at}.name"), name));
        } else if !name.is_empty() {
            names.insert(name);
        }
        host_port_conflicts(&list_path, std::slice::from_ref(c), causes);
        if policy.and_then(Value::as_str) == Some("Always") {
            probes::lifecycle(&format!("{at}.lifecycle"), set(c, "lifecycle"), grace, causes);
            probes::probes(&at, c, grace, causes);
        } else {
            for field in ["lifecycle", "livenessProbe", "readinessProbe", "startupProbe"] {
                if set(c, field).is_some() {
                    causes.push(FieldCause::forbidden(format!("{at}.{field}"), NOT_FOR_INIT));
                }
            }
        }
    }
}

/// `validatePodHostNetworkDeps`: with `hostNetwork`, a pod's host ports are its container ports
/// (an unset one was defaulted to it).
pub(super) fn host_network_ports(path: &str, spec: &Value, causes: &mut Vec<FieldCause>) {
    if spec.get("hostNetwork").and_then(Value::as_bool) != Some(true) {
        return;
    }
    for (i, c) in array_of(Some(spec), "containers").iter().enumerate() {
        for (j, p) in array_of(Some(c), "ports").iter().enumerate() {
            let host = p.get("hostPort").and_then(Value::as_i64).unwrap_or(0);
            let container = p.get("containerPort").and_then(Value::as_i64).unwrap_or(0);
            if host != container {
                causes.push(FieldCause::invalid(
                    format!("{path}.containers[{i}].ports[{j}].hostPort"),
                    &Value::from(host),
                    "must match `containerPort` when `hostNetwork` is true",
                ));
            }
        }
    }
}

/// `checkHostPortConflicts`: `protocol/hostIP/hostPort` unique across the containers given.
fn host_port_conflicts(list_path: &str, containers: &[Value], causes: &mut Vec<FieldCause>) {
    let mut seen = HashSet::new();
    for (i, c) in containers.iter().enumerate() {
        for (j, p) in array_of(Some(c), "ports").iter().enumerate() {
            let port = p.get("hostPort").and_then(Value::as_i64).unwrap_or(0);
            if port == 0 {
                continue;
            }
            let key = format!("{}/{}/{port}", str_of(p, "protocol"), str_of(p, "hostIP"));
            if !seen.insert(key.clone()) {
                causes.push(duplicate(format!("{list_path}[{i}].ports[{j}].hostPort"), &key));
            }
        }
    }
}

/// `validateContainerCommon`.
fn container_common(at: &str, c: &Value, volumes: &HashSet<&str>, causes: &mut Vec<FieldCause>) {
    let name = str_of(c, "name");
    if name.is_empty() {
        causes.push(FieldCause::required(format!("{at}.name")));
    } else {
        for msg in dns1123_label_errors(name) {
            causes.push(FieldCause::invalid(format!("{at}.name"), &string(name), msg));
        }
    }
    if str_of(c, "image").is_empty() {
        causes.push(FieldCause::required(format!("{at}.image")));
    }
    check_enum(
        format!("{at}.terminationMessagePolicy"),
        c.get("terminationMessagePolicy"),
        TERMINATION_MESSAGE_POLICIES,
        causes,
    );
    ports(&format!("{at}.ports"), array_of(Some(c), "ports"), causes);
    env(&format!("{at}.env"), array_of(Some(c), "env"), causes);
    volume_mounts(
        &format!("{at}.volumeMounts"),
        array_of(Some(c), "volumeMounts"),
        volumes,
        causes,
    );
    check_enum(
        format!("{at}.imagePullPolicy"),
        c.get("imagePullPolicy"),
        PULL_POLICIES,
        causes,
    );
    resources::container_resources(&format!("{at}.resources"), set(c, "resources"), causes);
    security::container_security_context(&format!("{at}.securityContext"), set(c, "securityContext"), causes);
}

/// `validateContainerPorts`.
fn ports(path: &str, ports: &[Value], causes: &mut Vec<FieldCause>) {
    const RANGE: &str = "must be between 1 and 65535, inclusive";
    let mut names = HashSet::new();
    for (i, p) in ports.iter().enumerate() {
        let at = format!("{path}[{i}]");
        let name = str_of(p, "name");
        if !name.is_empty() {
            let errs = port_name_errors(name);
            if !errs.is_empty() {
                for msg in errs {
                    causes.push(FieldCause::invalid(format!("{at}.name"), &string(name), msg));
                }
            } else if !names.insert(name) {
                causes.push(duplicate(format!("{at}.name"), name));
            }
        }
        match p.get("containerPort") {
            None | Some(Value::Null) => causes.push(FieldCause::required(format!("{at}.containerPort"))),
            Some(v) if v.as_i64() == Some(0) => causes.push(FieldCause::required(format!("{at}.containerPort"))),
            Some(v) if !v.as_i64().is_some_and(|n| (1..=65535).contains(&n)) => {
                causes.push(FieldCause::invalid(format!("{at}.containerPort"), v, RANGE));
            }
            Some(_) => {}
        }
        if let Some(v) = p.get("hostPort").filter(|v| !v.is_null() && v.as_i64() != Some(0))
            && !v.as_i64().is_some_and(|n| (1..=65535).contains(&n))
        {
            causes.push(FieldCause::invalid(format!("{at}.hostPort"), v, RANGE));
        }
        check_enum(format!("{at}.protocol"), p.get("protocol"), PROTOCOLS, causes);
    }
}

/// `validation.IsRelaxedEnvVarName`: RelaxedEnvironmentVariableValidation is GA (locked on) since
/// 1.34, so any printable ASCII but '=' is a valid name.
fn relaxed_env_var_name_ok(name: &str) -> bool {
    name.bytes().all(|b| (0x20..=0x7e).contains(&b) && b != b'=')
}

/// `ValidateEnv`, with the name and key checks of `secretKeyRef`/`configMapKeyRef`.
fn env(path: &str, vars: &[Value], causes: &mut Vec<FieldCause>) {
    for (i, ev) in vars.iter().enumerate() {
        let at = format!("{path}[{i}]");
        let name = str_of(ev, "name");
        if name.is_empty() {
            causes.push(FieldCause::required(format!("{at}.name")));
        } else if !relaxed_env_var_name_ok(name) {
            causes.push(FieldCause::invalid(
                format!("{at}.name"),
                &string(name),
                RELAXED_ENV_VAR_NAME_MSG,
            ));
        }
        for selector in ["secretKeyRef", "configMapKeyRef"] {
            let Some(sel) = ev.pointer(&format!("/valueFrom/{selector}")) else {
                continue;
            };
            let sel_at = format!("{at}.valueFrom.{selector}");
            let ref_name = str_of(sel, "name");
            for msg in dns1123_subdomain_errors(ref_name) {
                causes.push(FieldCause::invalid(format!("{sel_at}.name"), &string(ref_name), msg));
            }
            let key = str_of(sel, "key");
            if key.is_empty() {
                causes.push(FieldCause::required(format!("{sel_at}.key")));
            } else {
                for msg in config_key_errors(key) {
                    causes.push(FieldCause::invalid(format!("{sel_at}.key"), &string(key), msg));
                }
            }
        }
    }
}

/// `ValidateVolumeMounts` (volume devices are not simulated).
fn volume_mounts(path: &str, mounts: &[Value], volumes: &HashSet<&str>, causes: &mut Vec<FieldCause>) {
    let mut mount_points = HashSet::new();
    for (i, m) in mounts.iter().enumerate() {
        let at = format!("{path}[{i}]");
        let name = str_of(m, "name");
        if name.is_empty() {
            causes.push(FieldCause::required(format!("{at}.name")));
        }
        if !volumes.contains(name) {
            causes.push(not_found(format!("{at}.name"), name));
        }
        let mount_path = str_of(m, "mountPath");
        if mount_path.is_empty() {
            causes.push(FieldCause::required(format!("{at}.mountPath")));
        }
        if !mount_points.insert(mount_path) {
            causes.push(FieldCause::invalid(
                format!("{at}.mountPath"),
                &string(mount_path),
                "must be unique",
            ));
        }
        // kube-apiserver reports subPath errors under the list's path, not the item's.
        for key in ["subPath", "subPathExpr"] {
            let sub = str_of(m, key);
            if !sub.is_empty() {
                local_descending_path(&format!("{path}.{key}"), sub, causes);
            }
        }
    }
}

/// `validateLocalDescendingPath`.
fn local_descending_path(field: &str, value: &str, causes: &mut Vec<FieldCause>) {
    if value.starts_with('/') {
        causes.push(FieldCause::invalid(field, &string(value), "must be a relative path"));
    }
    if value.split('/').any(|part| part == "..") {
        causes.push(FieldCause::invalid(field, &string(value), "must not contain '..'"));
    }
}
