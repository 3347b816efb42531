//! Pod spec validation as kube-apiserver 1.33 runs it (`pkg/apis/core/validation`:
//! `ValidateVolumes`, `validateContainers`, `validateInitContainers`, `validateContainerCommon`,
//! `ValidateVolumeMounts`, `validateContainerPorts`, `ValidateEnv`, `validatePullPolicy`,
//! `validateRestartPolicy`), in its order, with its field paths and messages. Enum fields that
//! defaulting fills in (`imagePullPolicy`, `terminationMessagePolicy`, `restartPolicy`, port
//! `protocol`) are checked only when set: an empty value would have been defaulted.
//!
//! Not checked here (kube-apiserver does): resources, probes, lifecycle, security contexts, affinity,
//! tolerations, DNS config, volume source contents, host port conflicts, ephemeral containers.
//!
//! A relative `mountPath` is accepted, as kube-apiserver accepts it: `ValidateVolumeMounts` checks
//! only that it is set and unique, and the kubelet makes it absolute (`MakeAbsolutePath`).

use std::collections::HashSet;

use serde_json::Value;

use super::{dns1123_label_errors, dns1123_subdomain_errors, max_len_error};
use crate::status::FieldCause;

/// Every volume source of `core.VolumeSource` in `validateVolumeSource`'s order: the JSON key, and
/// the path kube-apiserver names in "may not specify more than 1 volume type" (a few differ).
const VOLUME_SOURCES: &[(&str, &str)] = &[
    ("emptyDir", "emptyDir"),
    ("hostPath", "hostPath"),
    ("gitRepo", "gitRepo"),
    ("gcePersistentDisk", "gcePersistentDisk"),
    ("awsElasticBlockStore", "awsElasticBlockStore"),
    ("secret", "secret"),
    ("nfs", "nfs"),
    ("iscsi", "iscsi"),
    ("glusterfs", "glusterfs"),
    ("flocker", "flocker"),
    ("persistentVolumeClaim", "persistentVolumeClaim"),
    ("rbd", "rbd"),
    ("cinder", "cinder"),
    ("cephfs", "cephFS"),
    ("quobyte", "quobyte"),
    ("downwardAPI", "downwarAPI"),
    ("fc", "fc"),
    ("flexVolume", "flexVolume"),
    ("configMap", "configMap"),
    ("azureFile", "azureFile"),
    ("vsphereVolume", "vsphereVolume"),
    ("photonPersistentDisk", "photonPersistentDisk"),
    ("portworxVolume", "portworxVolume"),
    ("azureDisk", "azureDisk"),
    ("storageos", "storageos"),
    ("projected", "projected"),
    ("scaleIO", "scaleIO"),
    ("csi", "csi"),
    ("ephemeral", "ephemeral"),
    ("image", "image"),
];

const PULL_POLICIES: &[&str] = &["Always", "IfNotPresent", "Never"];
const RESTART_POLICIES: &[&str] = &["Always", "OnFailure", "Never"];
const TERMINATION_MESSAGE_POLICIES: &[&str] = &["File", "FallbackToLogsOnError"];
/// `sets.List(supportedPortProtocols)`: sorted.
const PROTOCOLS: &[&str] = &["SCTP", "TCP", "UDP"];

const RELAXED_ENV_VAR_NAME_MSG: &str =
    "a valid environment variable name must consist only of printable ASCII characters other than '='";
const CONFIG_MAP_KEY_MSG: &str = "a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')";

fn str_of<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get(key).and_then(Value::as_str).unwrap_or("")
}

fn array_of<'a>(v: Option<&'a Value>, key: &str) -> &'a [Value] {
    v.and_then(|v| v.get(key))
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
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

/// A set enum field: its value must be one of `supported` (an empty one would have been defaulted).
fn check_enum(field: String, value: Option<&Value>, supported: &[&str], causes: &mut Vec<FieldCause>) {
    if let Some(v) = value
        && v.as_str() != Some("")
        && !v.as_str().is_some_and(|s| supported.contains(&s))
    {
        causes.push(FieldCause::not_supported(field, v, supported));
    }
}

/// `validatePodSpec`, the parts listed in the module documentation.
pub(super) fn pod_spec(path: &str, spec: Option<&Value>, causes: &mut Vec<FieldCause>) {
    let volumes = volumes(&format!("{path}.volumes"), spec, causes);
    let containers = array_of(spec, "containers");
    let containers_path = format!("{path}.containers");
    if containers.is_empty() {
        causes.push(FieldCause::required(&containers_path));
    }
    let mut names = HashSet::new();
    for (i, c) in containers.iter().enumerate() {
        let at = format!("{containers_path}[{i}]");
        container_common(&at, c, &volumes, causes);
        let name = str_of(c, "name");
        if !names.insert(name) {
            causes.push(duplicate(format!("{at}.name"), name));
        }
    }
    for (i, c) in array_of(spec, "initContainers").iter().enumerate() {
        let at = format!("{path}.initContainers[{i}]");
        container_common(&at, c, &volumes, causes);
        check_enum(
            format!("{at}.restartPolicy"),
            c.get("restartPolicy"),
            &["Always"],
            causes,
        );
        // Unique across regular and init containers.
        let name = str_of(c, "name");
        if names.contains(name) {
            causes.push(duplicate(format!("{at}.name"), name));
        } else if !name.is_empty() {
            names.insert(name);
        }
    }
    check_enum(
        format!("{path}.restartPolicy"),
        spec.and_then(|s| s.get("restartPolicy")),
        RESTART_POLICIES,
        causes,
    );
}

/// `ValidateVolumes`: the names of the valid volumes (only those can be mounted).
fn volumes<'a>(path: &str, spec: Option<&'a Value>, causes: &mut Vec<FieldCause>) -> HashSet<&'a str> {
    let mut valid = HashSet::new();
    for (i, v) in array_of(spec, "volumes").iter().enumerate() {
        let at = format!("{path}[{i}]");
        let name = str_of(v, "name");
        let mut errs = Vec::new();
        let mut sources = 0;
        for (key, shown) in VOLUME_SOURCES {
            if v.get(*key).is_some_and(|s| !s.is_null()) {
                if sources > 0 {
                    errs.push(FieldCause::forbidden(
                        format!("{at}.{shown}"),
                        "may not specify more than 1 volume type",
                    ));
                }
                sources += 1;
            }
        }
        if sources == 0 {
            errs.push(FieldCause {
                reason: "FieldValueRequired".into(),
                field: at.clone(),
                message: "Required value: must specify a volume type".into(),
            });
        }
        if name.is_empty() {
            errs.push(FieldCause::required(format!("{at}.name")));
        } else {
            for msg in dns1123_label_errors(name) {
                errs.push(FieldCause::invalid(format!("{at}.name"), &string(name), msg));
            }
        }
        if valid.contains(name) {
            errs.push(duplicate(format!("{at}.name"), name));
        }
        if errs.is_empty() {
            valid.insert(name);
        } else {
            causes.extend(errs);
        }
    }
    valid
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
}

/// `validation.IsValidPortName`.
fn port_name_errors(name: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if name.len() > 15 {
        errs.push(max_len_error(15));
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        || name.is_empty()
    {
        errs.push("must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)".into());
    }
    if !name.bytes().any(|b| b.is_ascii_lowercase()) {
        errs.push("must contain at least one letter (a-z)".into());
    }
    if name.contains("--") {
        errs.push("must not contain consecutive hyphens".into());
    }
    if name.starts_with('-') || name.ends_with('-') {
        errs.push("must not begin or end with a hyphen".into());
    }
    errs
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

/// `validation.IsRelaxedEnvVarName`: RelaxedEnvironmentVariableValidation is on by default in
/// 1.33 (beta since 1.32), so any printable ASCII but '=' is a valid name.
fn relaxed_env_var_name_ok(name: &str) -> bool {
    name.bytes().all(|b| (0x20..=0x7e).contains(&b) && b != b'=')
}

/// `validation.IsConfigMapKey`.
fn config_map_key_errors(key: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if key.len() > 253 {
        errs.push(max_len_error(253));
    }
    if key.is_empty()
        || !key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_'))
    {
        errs.push(CONFIG_MAP_KEY_MSG.into());
    }
    if key == "." {
        errs.push("must not be '.'".into());
    } else if key == ".." {
        errs.push("must not be '..'".into());
    } else if key.starts_with("..") {
        errs.push("must not start with '..'".into());
    }
    errs
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
                for msg in config_map_key_errors(key) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn errors(spec: Value) -> Vec<String> {
        let mut causes = Vec::new();
        pod_spec("spec", Some(&spec), &mut causes);
        causes
            .into_iter()
            .map(|c| format!("{}: {}", c.field, c.message))
            .collect()
    }

    fn one(container: Value) -> Value {
        json!({ "containers": [container] })
    }

    #[test]
    fn a_spark_like_pod_is_accepted() {
        let spec = json!({
            "restartPolicy": "Never",
            "volumes": [
                { "name": "spark-local-dir-1", "emptyDir": {} },
                { "name": "spark-conf-volume-driver", "configMap": { "name": "spark-drv-conf-map" } },
                { "name": "kube-api-access-abcde", "projected": { "sources": [] } }
            ],
            "containers": [{
                "name": "spark-kubernetes-driver", "image": "spark:4.0.0", "imagePullPolicy": "IfNotPresent",
                "terminationMessagePolicy": "File",
                "ports": [
                    { "name": "driver-rpc-port", "containerPort": 7078, "protocol": "TCP" },
                    { "name": "blockmanager", "containerPort": 7079, "protocol": "TCP" },
                    { "name": "spark-ui", "containerPort": 4040, "protocol": "TCP" }
                ],
                "env": [
                    { "name": "SPARK_USER", "value": "spark" },
                    { "name": "SPARK_DRIVER_BIND_ADDRESS", "valueFrom": { "fieldRef": { "fieldPath": "status.podIP" } } },
                    { "name": "my.env-name", "value": "x" },
                    { "name": "1-relaxed name!", "value": "printable ASCII is fine in 1.33" },
                    { "name": "PASSWORD", "valueFrom": { "secretKeyRef": { "name": "db", "key": "pass.word" } } }
                ],
                "volumeMounts": [
                    { "name": "spark-local-dir-1", "mountPath": "/var/data/spark-1" },
                    { "name": "spark-conf-volume-driver", "mountPath": "/opt/spark/conf" },
                    { "name": "kube-api-access-abcde", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount" }
                ]
            }],
            "initContainers": [{ "name": "init", "image": "busybox", "restartPolicy": "Always" }]
        });
        assert_eq!(errors(spec), Vec::<String>::new());
    }

    #[test]
    fn enums_are_worded_as_kube_apiserver_words_them() {
        let errs = errors(json!({ "restartPolicy": "Sometimes",
            "containers": [{ "name": "c", "image": "i", "imagePullPolicy": "Sometimes", "terminationMessagePolicy": "Stdout" }] }));
        assert_eq!(
            errs,
            [
                "spec.containers[0].terminationMessagePolicy: Unsupported value: \"Stdout\": supported values: \"File\", \"FallbackToLogsOnError\"",
                "spec.containers[0].imagePullPolicy: Unsupported value: \"Sometimes\": supported values: \"Always\", \"IfNotPresent\", \"Never\"",
                "spec.restartPolicy: Unsupported value: \"Sometimes\": supported values: \"Always\", \"OnFailure\", \"Never\"",
            ]
        );
    }

    #[test]
    fn env_names_follow_the_relaxed_rule_of_1_33() {
        let errs = errors(one(json!({ "name": "c", "image": "i",
            "env": [{ "name": "A=B" }, { "name": "tab\there" }, { "name": "é" }, { "name": "" }, { "name": "ok name.1-_" }] })));
        let msg = "a valid environment variable name must consist only of printable ASCII characters other than '='";
        assert_eq!(
            errs,
            [
                format!("spec.containers[0].env[0].name: Invalid value: \"A=B\": {msg}"),
                format!("spec.containers[0].env[1].name: Invalid value: \"tab\\there\": {msg}"),
                format!("spec.containers[0].env[2].name: Invalid value: \"é\": {msg}"),
                "spec.containers[0].env[3].name: Required value".to_string(),
            ]
        );
    }

    #[test]
    fn duplicate_names_are_refused() {
        let errs = errors(json!({
            "volumes": [{ "name": "v", "emptyDir": {} }, { "name": "v", "emptyDir": {} }],
            "containers": [{ "name": "c", "image": "i" }, { "name": "c", "image": "i" }],
            "initContainers": [{ "name": "c", "image": "i" }]
        }));
        assert_eq!(
            errs,
            [
                "spec.volumes[1].name: Duplicate value: \"v\"",
                "spec.containers[1].name: Duplicate value: \"c\"",
                "spec.initContainers[0].name: Duplicate value: \"c\"",
            ]
        );
    }

    #[test]
    fn ports_are_in_range_named_and_unique() {
        let errs = errors(one(json!({ "name": "c", "image": "i", "ports": [
            { "name": "http", "containerPort": 70000 },
            { "name": "http", "containerPort": 80 },
            { "containerPort": 0 },
            { "containerPort": 8080, "hostPort": -1, "protocol": "HTTP" },
            { "name": "Bad--Name", "containerPort": 81 }
        ] })));
        assert_eq!(
            errs,
            [
                "spec.containers[0].ports[0].containerPort: Invalid value: 70000: must be between 1 and 65535, inclusive",
                "spec.containers[0].ports[1].name: Duplicate value: \"http\"",
                "spec.containers[0].ports[2].containerPort: Required value",
                "spec.containers[0].ports[3].hostPort: Invalid value: -1: must be between 1 and 65535, inclusive",
                "spec.containers[0].ports[3].protocol: Unsupported value: \"HTTP\": supported values: \"SCTP\", \"TCP\", \"UDP\"",
                "spec.containers[0].ports[4].name: Invalid value: \"Bad--Name\": must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)",
                "spec.containers[0].ports[4].name: Invalid value: \"Bad--Name\": must not contain consecutive hyphens",
            ]
        );
    }

    #[test]
    fn mounts_need_a_valid_volume_and_a_unique_path_but_may_be_relative() {
        let errs = errors(json!({
            "volumes": [{ "name": "v", "emptyDir": {} }, { "name": "Bad_Vol", "emptyDir": {} }, { "name": "none" }],
            "containers": [{ "name": "c", "image": "i", "volumeMounts": [
                { "name": "v", "mountPath": "relative/is/accepted" },
                { "name": "v", "mountPath": "relative/is/accepted" },
                { "name": "missing", "mountPath": "/m" },
                { "name": "Bad_Vol", "mountPath": "/b", "subPath": "../up" }
            ] }]
        }));
        assert_eq!(
            errs,
            [
                "spec.volumes[1].name: Invalid value: \"Bad_Vol\": a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')",
                "spec.volumes[2]: Required value: must specify a volume type",
                "spec.containers[0].volumeMounts[1].mountPath: Invalid value: \"relative/is/accepted\": must be unique",
                "spec.containers[0].volumeMounts[2].name: Not found: \"missing\"",
                "spec.containers[0].volumeMounts[3].name: Not found: \"Bad_Vol\"",
                "spec.containers[0].volumeMounts.subPath: Invalid value: \"../up\": must not contain '..'",
            ]
        );
    }

    #[test]
    fn two_volume_sources_are_forbidden() {
        let errs = errors(json!({ "volumes": [{ "name": "v", "emptyDir": {}, "downwardAPI": {} }],
            "containers": [{ "name": "c", "image": "i" }] }));
        assert_eq!(
            errs,
            ["spec.volumes[0].downwarAPI: Forbidden: may not specify more than 1 volume type"]
        );
    }

    #[test]
    fn secret_key_refs_need_a_name_and_a_valid_key() {
        let errs = errors(one(json!({ "name": "c", "image": "i", "env": [
            { "name": "A", "valueFrom": { "secretKeyRef": { "name": "db:pass", "key": "k" } } },
            { "name": "B", "valueFrom": { "configMapKeyRef": { "name": "cm", "key": "" } } },
            { "name": "C", "valueFrom": { "configMapKeyRef": { "name": "cm", "key": "a/b" } } }
        ] })));
        assert_eq!(errs.len(), 3, "{errs:?}");
        assert!(errs[0].starts_with("spec.containers[0].env[0].valueFrom.secretKeyRef.name: Invalid value: \"db:pass\": a lowercase RFC 1123 subdomain"));
        assert_eq!(
            errs[1],
            "spec.containers[0].env[1].valueFrom.configMapKeyRef.key: Required value"
        );
        assert!(errs[2].contains("a valid config key must consist of alphanumeric characters"));
    }

    #[test]
    fn defaulted_enums_may_be_left_empty() {
        assert!(errors(one(json!({ "name": "c", "image": "i", "imagePullPolicy": "" }))).is_empty());
    }
}
