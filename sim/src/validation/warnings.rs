//! Warnings kube-apiserver returns when an object is created (the registries' `WarningsOnCreate`): a pod's
//! or workload's name that is not a DNS label, and the pod spec warnings of `pkg/api/pod/warnings.go`
//! that the sim follows: environment variables hiding a previous definition, duplicate or overlapping
//! ports, a host IP without a host port, duplicate port names, a negative `terminationGracePeriodSeconds`
//! (of templates: a pod's is defaulted to 1 first), deprecated volume types,
//! duplicate or empty `imagePullSecrets`, duplicate `hostAliases` IPs; a TLS Secret without PEM data.
//!
//! Not followed (kube-apiserver warns, the sim does not): deprecated node labels in selectors and
//! affinity, null label selectors, deprecated annotations (seccomp, AppArmor, sysctls), fractional byte
//! quantities, overlapping volume item paths, IP address forms, PVC template warnings.

use std::collections::{HashMap, HashSet};

use serde_json::Value;

use super::dns1123_label_errors;

/// Volume types kube-apiserver warns about, with its words.
const DEPRECATED_VOLUMES: &[(&str, &str, &str)] = &[
    (
        "photonPersistentDisk",
        "photonPersistentDisk",
        "deprecated in v1.11, non-functional in v1.16+",
    ),
    (
        "gitRepo",
        "gitRepo",
        "deprecated in v1.11, and disabled by default in v1.33+",
    ),
    ("scaleIO", "scaleIO", "deprecated in v1.16, non-functional in v1.22+"),
    ("flocker", "flocker", "deprecated in v1.22, non-functional in v1.25+"),
    (
        "storageos",
        "storageOS",
        "deprecated in v1.22, non-functional in v1.25+",
    ),
    ("quobyte", "quobyte", "deprecated in v1.22, non-functional in v1.25+"),
    (
        "glusterfs",
        "glusterfs",
        "deprecated in v1.25, non-functional in v1.26+",
    ),
    ("cephfs", "cephfs", "deprecated in v1.28, non-functional in v1.31+"),
    ("rbd", "rbd", "deprecated in v1.28, non-functional in v1.31+"),
];

/// The warnings of creating `obj` of `group`/`kind`.
pub fn on_create(group: &str, kind: &str, obj: &Value) -> Vec<String> {
    let template = match (group, kind) {
        ("", "Secret") => return tls_secret(obj).into_iter().collect(),
        ("", "Pod") => {
            let mut warnings = name_warning(obj, "this is used in the Pod's hostname");
            warnings.extend(pod_spec("spec", obj.get("spec")));
            return warnings;
        }
        ("apps", "Deployment" | "ReplicaSet") | ("batch", "Job") | ("", "ReplicationController") => {
            obj.pointer("/spec/template/spec").map(|s| ("spec.template.spec", s))
        }
        ("batch", "CronJob") => obj
            .pointer("/spec/jobTemplate/spec/template/spec")
            .map(|s| ("spec.jobTemplate.spec.template.spec", s)),
        ("apps", "DaemonSet" | "StatefulSet") => {
            return obj
                .pointer("/spec/template/spec")
                .map(|s| pod_spec("spec.template.spec", Some(s)))
                .unwrap_or_default();
        }
        _ => return Vec::new(),
    };
    let mut warnings = name_warning(obj, "this is used in Pod names and hostnames");
    if let Some((path, spec)) = template {
        warnings.extend(pod_spec(path, Some(spec)));
    }
    warnings
}

/// The PEM block types in `data` (`-----BEGIN <TYPE>-----` lines).
fn pem_types(data: &[u8]) -> Vec<String> {
    String::from_utf8_lossy(data)
        .lines()
        .filter_map(|l| {
            l.trim()
                .strip_prefix("-----BEGIN ")?
                .strip_suffix("-----")
                .map(str::to_owned)
        })
        .collect()
}

/// A `kubernetes.io/tls` Secret whose certificate or key has no PEM block of its kind: the first error of
/// Go's `tls.X509KeyPair`, which kube-apiserver returns as a warning. Whether the blocks parse and the key
/// matches the certificate is not checked.
fn tls_secret(obj: &Value) -> Option<String> {
    use base64::Engine as _;
    if obj.get("type").and_then(Value::as_str) != Some("kubernetes.io/tls") {
        return None;
    }
    let data = |key: &str| {
        obj.get("data")
            .and_then(|d| d.get(key))
            .and_then(Value::as_str)
            .and_then(|b| base64::engine::general_purpose::STANDARD.decode(b).ok())
            .unwrap_or_default()
    };
    let skipped = |types: &[String]| types.join(" ");
    let certs = pem_types(&data("tls.crt"));
    if certs.is_empty() {
        return Some("tls: failed to find any PEM data in certificate input".into());
    }
    if !certs.iter().any(|t| t == "CERTIFICATE") {
        if let [only] = certs.as_slice()
            && only.ends_with("PRIVATE KEY")
        {
            return Some("tls: failed to find certificate PEM data in certificate input, but did find a private key; PEM inputs may have been switched".into());
        }
        return Some(format!(
            "tls: failed to find \"CERTIFICATE\" PEM block in certificate input after skipping PEM blocks of the following types: [{}]",
            skipped(&certs)
        ));
    }
    let keys = pem_types(&data("tls.key"));
    if keys.is_empty() {
        return Some("tls: failed to find any PEM data in key input".into());
    }
    if !keys.iter().any(|t| t == "PRIVATE KEY" || t.ends_with(" PRIVATE KEY")) {
        if keys == ["CERTIFICATE"] {
            return Some("tls: found a certificate rather than a key in the PEM for the private key".into());
        }
        return Some(format!(
            "tls: failed to find PEM block with type ending in \"PRIVATE KEY\" in key input after skipping PEM blocks of the following types: [{}]",
            skipped(&keys)
        ));
    }
    None
}

/// `metadata.name: <use>, which can result in surprising behavior; a DNS label is recommended: [...]`.
fn name_warning(obj: &Value, used: &str) -> Vec<String> {
    let name = obj.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("");
    let errors = dns1123_label_errors(name);
    if name.is_empty() || errors.is_empty() {
        return Vec::new();
    }
    vec![format!(
        "metadata.name: {used}, which can result in surprising behavior; a DNS label is recommended: [{}]",
        errors.join(" ")
    )]
}

fn items<'a>(v: Option<&'a Value>, key: &str) -> &'a [Value] {
    v.and_then(|v| v.get(key))
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

fn text<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get(key).and_then(Value::as_str).unwrap_or("")
}

/// Every container of a pod spec with its path, in the order kube-apiserver visits them.
fn containers<'a>(path: &str, spec: Option<&'a Value>) -> Vec<(String, &'a Value)> {
    let mut all = Vec::new();
    for list in ["initContainers", "containers", "ephemeralContainers"] {
        for (i, c) in items(spec, list).iter().enumerate() {
            all.push((format!("{path}.{list}[{i}]"), c));
        }
    }
    all
}

fn pod_spec(path: &str, spec: Option<&Value>) -> Vec<String> {
    let mut warnings = Vec::new();
    for (i, v) in items(spec, "volumes").iter().enumerate() {
        for (key, shown, message) in DEPRECATED_VOLUMES {
            if v.get(*key).is_some() {
                warnings.push(format!("{path}.volumes[{i}].{shown}: {message}"));
            }
        }
    }
    let mut ips = HashSet::new();
    for (i, alias) in items(spec, "hostAliases").iter().enumerate() {
        let ip = text(alias, "ip");
        if !ips.insert(ip) {
            warnings.push(format!("{path}.hostAliases[{i}].ip: duplicate ip {ip:?}"));
        }
    }
    let mut secrets = HashSet::new();
    for (i, secret) in items(spec, "imagePullSecrets").iter().enumerate() {
        let name = text(secret, "name");
        if !secrets.insert(name) {
            warnings.push(format!("{path}.imagePullSecrets[{i}].name: duplicate name {name:?}"));
        }
        if name.is_empty() {
            warnings.push(format!(
                "{path}.imagePullSecrets[{i}].name: invalid empty name {name:?}"
            ));
        }
    }
    let containers = containers(path, spec);
    for (at, c) in &containers {
        env_warnings(at, c, &mut warnings);
    }
    port_warnings(&containers, &mut warnings);
    if spec
        .and_then(|s| s.get("terminationGracePeriodSeconds"))
        .and_then(Value::as_i64)
        .is_some_and(|g| g < 0)
    {
        warnings.push(format!(
            "{path}.terminationGracePeriodSeconds: must be >= 0; negative values are invalid and will be treated as 1"
        ));
    }
    warnings
}

/// A variable defined again hides the earlier one unless the new value refers to it (`X=$(X)suffix`).
fn env_warnings(at: &str, c: &Value, warnings: &mut Vec<String>) {
    let mut seen = HashSet::new();
    for (i, item) in items(Some(c), "env").iter().enumerate() {
        let name = text(item, "name");
        if seen.insert(name) {
            continue;
        }
        let reference = format!("$({name})");
        let value = text(item, "value");
        if item.get("valueFrom").is_some() || value == reference || !value.contains(&reference) {
            warnings.push(format!(
                "{at}.env[{i}]: hides previous definition of {name:?}, which may be dropped when using apply"
            ));
        }
    }
}

/// Ports defined twice across the pod's containers, and port names used twice.
fn port_warnings(containers: &[(String, &Value)], warnings: &mut Vec<String>) {
    // (containerPort/protocol) → (field, hostIP, hostPort) of each definition so far.
    let mut by_port: HashMap<String, Vec<(String, String, i64)>> = HashMap::new();
    for (at, c) in containers {
        for (i, port) in items(Some(*c), "ports").iter().enumerate() {
            let field = format!("{at}.ports[{i}]");
            let host_ip = text(port, "hostIP").to_owned();
            let host_port = port.get("hostPort").and_then(Value::as_i64).unwrap_or(0);
            let protocol = match text(port, "protocol") {
                "" => "TCP",
                p => p,
            };
            if !host_ip.is_empty() && host_port == 0 {
                // Go's `%+v` of the ContainerPort.
                warnings.push(format!(
                    "{field}: hostIP set without hostPort: {{Name:{} HostPort:0 ContainerPort:{} Protocol:{protocol} HostIP:{host_ip}}}",
                    text(port, "name"),
                    port.get("containerPort").and_then(Value::as_i64).unwrap_or(0)
                ));
            }
            let key = format!(
                "{}/{protocol}",
                port.get("containerPort").and_then(Value::as_i64).unwrap_or(0)
            );
            let others = by_port.entry(key).or_default();
            for (other, other_ip, other_port) in others.iter() {
                if host_ip == *other_ip && host_port == *other_port {
                    warnings.push(format!("{field}: duplicate port definition with {other}"));
                } else if host_port == 0 || *other_port == 0 {
                    warnings.push(format!("{field}: overlapping port definition with {other}"));
                } else if host_port == *other_port && (host_ip.is_empty() != other_ip.is_empty()) {
                    warnings.push(format!("{field}: dangerously ambiguous port definition with {other}"));
                }
            }
            others.push((field, host_ip, host_port));
        }
    }
    let mut names: HashMap<&str, String> = HashMap::new();
    for (at, c) in containers {
        for (i, port) in items(Some(*c), "ports").iter().enumerate() {
            let name = text(port, "name");
            if name.is_empty() {
                continue;
            }
            match names.get(name) {
                Some(other) => warnings.push(format!(
                    "{at}.ports[{i}]: duplicate port name {name:?} with {other}, services and probes that select ports by name will use {other}"
                )),
                None => {
                    names.insert(name, format!("{at}.ports[{i}]"));
                }
            }
        }
    }
}
