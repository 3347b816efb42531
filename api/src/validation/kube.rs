//! The pod-level rules kube-apiserver enforces (`k8s.io/kubernetes/pkg/apis/core/validation` and
//! `k8s.io/apimachinery/pkg/util/validation`), applied to what a SparkApplication puts into pods, with
//! messages worded as kube-apiserver words them (`Invalid value: "x": ...`, `Unsupported value: ...`,
//! `Duplicate value: ...`, `Required value`), so that a user sees before applying what the API server
//! would say when the operator creates the pod, when it is too late to fix.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Debug;

use k8s_openapi::api::core::v1::{
    Container, ContainerPort, EnvFromSource, EnvVar, PodSpec, ResourceRequirements, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use crate::bounds::{IMAGE_PULL_POLICIES, MAX_PORT, MIN_PORT, PROTOCOLS};
use crate::field::{FieldPath, ValidationReport};
use crate::quantity::KubernetesQuantity;

pub(super) const DNS1123_LABEL_MSG: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";
pub(super) const DNS1123_SUBDOMAIN_MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
/// `IsEnvVarName` since RelaxedEnvironmentVariableValidation (beta and on by default in 1.32, GA in 1.34).
pub(super) const ENV_VAR_NAME_MSG: &str =
    "a valid environment variable name must consist only of printable ASCII characters other than '='";
const CONFIG_MAP_KEY_MSG: &str = "a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')";
const PORT_RANGE_MSG: &str = "must be between 1 and 65535, inclusive";

/// `field.Invalid`.
pub(super) fn invalid(value: impl Debug, detail: &str) -> String {
    format!("Invalid value: {value:?}: {detail}")
}

/// `field.NotSupported`.
pub(super) fn unsupported(value: &str, supported: &[&str]) -> String {
    let mut sorted = supported.to_vec();
    sorted.sort_unstable();
    let list = sorted.iter().map(|s| format!("{s:?}")).collect::<Vec<_>>().join(", ");
    format!("Unsupported value: {value:?}: supported values: {list}")
}

/// `field.Duplicate`.
pub(super) fn duplicate(value: &str) -> String {
    format!("Duplicate value: {value:?}")
}

fn is_label(value: &str) -> bool {
    !value.is_empty() && super::names::has_dns1123_label_chars(value)
}

/// `IsDNS1123Label`: what is wrong, as kube-apiserver lists it.
pub(super) fn dns1123_label_errors(value: &str) -> Vec<&'static str> {
    let mut errors = Vec::new();
    if value.len() > 63 {
        errors.push("must be no more than 63 characters");
    }
    if !is_label(value) {
        errors.push(DNS1123_LABEL_MSG);
    }
    errors
}

/// `IsDNS1123Subdomain`.
pub(super) fn dns1123_subdomain_errors(value: &str) -> Vec<&'static str> {
    let mut errors = Vec::new();
    if value.len() > 253 {
        errors.push("must be no more than 253 characters");
    }
    if !value.split('.').all(is_label) {
        errors.push(DNS1123_SUBDOMAIN_MSG);
    }
    errors
}

/// `IsEnvVarName` (relaxed).
pub(super) fn env_var_name_valid(name: &str) -> bool {
    !name.is_empty() && name.bytes().all(|b| (b' '..=b'~').contains(&b) && b != b'=')
}

/// `IsValidPortName` (an IANA_SVC_NAME).
pub(super) fn port_name_errors(name: &str) -> Vec<&'static str> {
    let mut errors = Vec::new();
    if name.len() > 15 {
        errors.push("must be no more than 15 characters");
    }
    if !name
        .chars()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
    {
        errors.push("must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)");
    }
    if !name.chars().any(|c| c.is_ascii_lowercase()) {
        errors.push("must contain at least one letter (a-z)");
    }
    if name.contains("--") {
        errors.push("must not contain consecutive hyphens");
    }
    if name.starts_with('-') || name.ends_with('-') {
        errors.push("must not begin or end with a hyphen");
    }
    errors
}

fn report_all(report: &mut ValidationReport, path: &FieldPath, value: &str, errors: Vec<&'static str>) {
    for error in errors {
        report.error(path.clone(), invalid(value, error));
    }
}

/// `ValidateNamespaceName` (a DNS-1123 label): what kube-apiserver says about a namespace, each message a
/// `field.Invalid` (`Invalid value: "Bad_NS": a lowercase RFC 1123 label must consist of ...`); none when the
/// namespace is valid.
pub fn namespace_errors(namespace: &str) -> Vec<String> {
    dns1123_label_errors(namespace)
        .into_iter()
        .map(|error| invalid(namespace, error))
        .collect()
}

/// A name that must be a DNS-1123 subdomain (ConfigMaps, Secrets, service accounts, claims, ...).
pub(super) fn check_subdomain_name(value: &str, path: &FieldPath, report: &mut ValidationReport) {
    if value.is_empty() {
        report.error(path.clone(), "Required value");
    } else {
        report_all(report, path, value, dns1123_subdomain_errors(value));
    }
}

/// Why an image reference is not one a container runtime can pull (distribution's reference grammar:
/// `[host[:port]/]path[:tag][@digest]`), worded as the kubelet reports it (`InvalidImageName`). kube-apiserver
/// itself checks only for whitespace; the pod would be created and then never start.
pub fn image_reference_problem(image: &str) -> Option<String> {
    if image.trim() != image {
        return Some("must not have leading or trailing whitespace".to_owned());
    }
    let format = || Some("invalid reference format".to_owned());
    let (rest, digest) = match image.split_once('@') {
        Some((rest, digest)) => (rest, Some(digest)),
        None => (image, None),
    };
    if let Some(digest) = digest {
        let Some((algorithm, hex)) = digest.split_once(':') else {
            return format();
        };
        let algorithm_ok = !algorithm.is_empty()
            && algorithm
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '+' | '.' | '_' | '-'));
        if !algorithm_ok || hex.len() < 32 || !hex.chars().all(|c| c.is_ascii_hexdigit()) {
            return Some("invalid reference format: invalid digest".to_owned());
        }
    }
    // A tag follows the last ':' after the last '/'.
    let last_slash = rest.rfind('/').map_or(0, |i| i + 1);
    let (name, tag) = match rest[last_slash..].rfind(':') {
        Some(i) => (&rest[..last_slash + i], Some(&rest[last_slash + i + 1..])),
        None => (rest, None),
    };
    if let Some(tag) = tag {
        let tag_ok = !tag.is_empty()
            && tag.len() <= 128
            && tag.starts_with(|c: char| c.is_ascii_alphanumeric() || c == '_')
            && tag
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'));
        if !tag_ok {
            return format();
        }
    }
    if name.is_empty() || name.len() > 255 {
        return format();
    }
    let mut components: Vec<&str> = name.split('/').collect();
    // The first component is a registry host when it looks like one.
    if components.len() > 1 {
        let first = components[0];
        if first.contains(['.', ':']) || first == "localhost" || first.chars().any(|c| c.is_ascii_uppercase()) {
            let (host, port) = match first.rsplit_once(':') {
                Some((host, port)) => (host, Some(port)),
                None => (first, None),
            };
            let host_ok = !host.is_empty()
                && host.split('.').all(|part| {
                    !part.is_empty()
                        && part.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
                        && !part.starts_with('-')
                        && !part.ends_with('-')
                });
            if !host_ok || port.is_some_and(|p| p.is_empty() || !p.chars().all(|c| c.is_ascii_digit())) {
                return format();
            }
            components.remove(0);
        }
    }
    for component in components {
        if component.chars().any(|c| c.is_ascii_uppercase()) {
            return Some("invalid reference format: repository name must be lowercase".to_owned());
        }
        if !path_component_ok(component) {
            return format();
        }
    }
    None
}

/// `[a-z0-9]+(?:(?:[._]|__|[-]+)[a-z0-9]+)*`
fn path_component_ok(component: &str) -> bool {
    let bytes = component.as_bytes();
    let alnum = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    if bytes.is_empty() || !alnum(bytes[0]) || !alnum(bytes[bytes.len() - 1]) {
        return false;
    }
    let mut index = 0;
    while index < bytes.len() {
        if alnum(bytes[index]) {
            index += 1;
            continue;
        }
        let start = index;
        while index < bytes.len() && !alnum(bytes[index]) {
            index += 1;
        }
        let separator = &component[start..index];
        let ok = separator == "."
            || separator == "_"
            || separator == "__"
            || (!separator.is_empty() && separator.bytes().all(|b| b == b'-'));
        if !ok {
            return false;
        }
    }
    true
}

pub(super) fn check_image(image: &str, path: &FieldPath, report: &mut ValidationReport) {
    if let Some(problem) = image_reference_problem(image) {
        report.error(path.clone(), invalid(image, &problem));
    }
}

pub(super) fn check_image_pull_policy(policy: &str, path: &FieldPath, report: &mut ValidationReport) {
    if !IMAGE_PULL_POLICIES.contains(&policy) {
        report.error(path.clone(), unsupported(policy, &IMAGE_PULL_POLICIES));
    }
}

/// Environment variables: names, and the references of `valueFrom`.
pub(super) fn check_env(env: &[EnvVar], path: &FieldPath, report: &mut ValidationReport) {
    for (index, var) in env.iter().enumerate() {
        let at = path.index(index);
        if var.name.is_empty() {
            report.error(at.child("name"), "Required value");
        } else if !env_var_name_valid(&var.name) {
            report.error(at.child("name"), invalid(&var.name, ENV_VAR_NAME_MSG));
        }
        let Some(from) = &var.value_from else { continue };
        let at = at.child("valueFrom");
        if var.value.as_deref().is_some_and(|v| !v.is_empty()) {
            report.error(
                at.clone(),
                "Invalid value: \"\": may not be specified when `value` is not empty",
            );
        }
        if let Some(selector) = &from.secret_key_ref {
            check_subdomain_name(&selector.name, &at.child("secretKeyRef").child("name"), report);
            check_config_key(&selector.key, &at.child("secretKeyRef").child("key"), report);
        }
        if let Some(selector) = &from.config_map_key_ref {
            check_subdomain_name(&selector.name, &at.child("configMapKeyRef").child("name"), report);
            check_config_key(&selector.key, &at.child("configMapKeyRef").child("key"), report);
        }
    }
}

fn check_config_key(key: &str, path: &FieldPath, report: &mut ValidationReport) {
    if key.is_empty() {
        report.error(path.clone(), "Required value");
    } else if !key
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    {
        report.error(path.clone(), invalid(key, CONFIG_MAP_KEY_MSG));
    } else if key.len() > 253 {
        report.error(path.clone(), invalid(key, "must be no more than 253 characters"));
    }
}

pub(super) fn check_env_from(sources: &[EnvFromSource], path: &FieldPath, report: &mut ValidationReport) {
    for (index, source) in sources.iter().enumerate() {
        let at = path.index(index);
        if let Some(prefix) = source.prefix.as_deref().filter(|p| !p.is_empty())
            && !env_var_name_valid(prefix)
        {
            report.error(at.child("prefix"), invalid(prefix, ENV_VAR_NAME_MSG));
        }
        match (&source.config_map_ref, &source.secret_ref) {
            (Some(config_map), None) => {
                check_subdomain_name(&config_map.name, &at.child("configMapRef").child("name"), report);
            }
            (None, Some(secret)) => check_subdomain_name(&secret.name, &at.child("secretRef").child("name"), report),
            (Some(_), Some(_)) => report.error(
                at,
                "Invalid value: \"\": may not have more than one field specified at a time",
            ),
            (None, None) => report.error(
                at,
                "Invalid value: \"\": must specify one of: `configMapRef` or `secretRef`",
            ),
        }
    }
}

/// Volume mounts of one container: names, absolute and unique mount paths.
pub(super) fn check_volume_mounts(mounts: &[VolumeMount], path: &FieldPath, report: &mut ValidationReport) {
    let mut seen = BTreeSet::new();
    for (index, mount) in mounts.iter().enumerate() {
        let at = path.index(index);
        if mount.name.is_empty() {
            report.error(at.child("name"), "Required value");
        }
        if mount.mount_path.is_empty() {
            report.error(at.child("mountPath"), "Required value");
            continue;
        }
        // kube-apiserver takes a relative path; the container runtime then refuses to start the
        // container ("mount destination not absolute"), with the pod already created.
        if !mount.mount_path.starts_with('/') {
            report.error(
                at.child("mountPath"),
                invalid(&mount.mount_path, "must be an absolute path"),
            );
        }
        if !seen.insert(mount.mount_path.as_str()) {
            report.error(at.child("mountPath"), invalid(&mount.mount_path, "must be unique"));
        }
        if let Some(sub_path) = mount.sub_path.as_deref()
            && (sub_path.starts_with('/') || sub_path.split('/').any(|part| part == ".."))
        {
            report.error(
                at.child("subPath"),
                invalid(sub_path, "must be a relative path without '..'"),
            );
        }
    }
}

fn check_ports(ports: &[ContainerPort], path: &FieldPath, report: &mut ValidationReport) {
    let mut names = BTreeSet::new();
    for (index, port) in ports.iter().enumerate() {
        let at = path.index(index);
        if let Some(name) = port.name.as_deref().filter(|n| !n.is_empty()) {
            report_all(report, &at.child("name"), name, port_name_errors(name));
            if !names.insert(name) {
                report.error(at.child("name"), duplicate(name));
            }
        }
        check_port_number(port.container_port, &at.child("containerPort"), report);
        if let Some(host_port) = port.host_port.filter(|p| *p != 0) {
            check_port_number(host_port, &at.child("hostPort"), report);
        }
        if let Some(protocol) = port.protocol.as_deref()
            && !PROTOCOLS.contains(&protocol)
        {
            report.error(at.child("protocol"), unsupported(protocol, &PROTOCOLS));
        }
    }
}

pub(super) fn check_port_number(port: i32, path: &FieldPath, report: &mut ValidationReport) {
    if !(MIN_PORT..=MAX_PORT).contains(&port) {
        report.error(path.clone(), invalid(port, PORT_RANGE_MSG));
    }
}

/// Quantities of a resource list: each parses and is not negative.
pub(super) fn check_resource_list(
    list: Option<&BTreeMap<String, Quantity>>,
    path: &FieldPath,
    report: &mut ValidationReport,
) -> BTreeMap<String, f64> {
    let mut parsed = BTreeMap::new();
    for (name, quantity) in list.into_iter().flatten() {
        match KubernetesQuantity::parse(&quantity.0) {
            Ok(value) if value.value() < 0.0 => report.error(
                path.key(name),
                invalid(&quantity.0, "must be greater than or equal to 0"),
            ),
            Ok(value) => {
                parsed.insert(name.clone(), value.value());
            }
            Err(error) => report.error(path.key(name), error.to_string()),
        }
    }
    parsed
}

pub(super) fn check_resources(resources: &ResourceRequirements, path: &FieldPath, report: &mut ValidationReport) {
    let limits = check_resource_list(resources.limits.as_ref(), &path.child("limits"), report);
    let requests = check_resource_list(resources.requests.as_ref(), &path.child("requests"), report);
    for (name, request) in &requests {
        if let Some(limit) = limits.get(name)
            && request > limit
        {
            let raw = |list: &Option<BTreeMap<String, Quantity>>| {
                list.as_ref()
                    .and_then(|l| l.get(name))
                    .map(|q| q.0.clone())
                    .unwrap_or_default()
            };
            report.error(
                path.child("requests").key(name),
                invalid(
                    raw(&resources.requests),
                    &format!(
                        "must be less than or equal to {name} limit of {}",
                        raw(&resources.limits)
                    ),
                ),
            );
        }
    }
}

/// One container: name, image, pull policy, env, ports, mounts, resources.
pub(super) fn check_container(
    container: &Container,
    name_required: bool,
    path: &FieldPath,
    report: &mut ValidationReport,
) {
    if container.name.is_empty() {
        if name_required {
            report.error(path.child("name"), "Required value");
        }
    } else {
        report_all(
            report,
            &path.child("name"),
            &container.name,
            dns1123_label_errors(&container.name),
        );
    }
    if let Some(image) = container.image.as_deref().filter(|i| !i.is_empty()) {
        check_image(image, &path.child("image"), report);
    }
    if let Some(policy) = container.image_pull_policy.as_deref().filter(|p| !p.is_empty()) {
        check_image_pull_policy(policy, &path.child("imagePullPolicy"), report);
    }
    check_env(container.env.as_deref().unwrap_or_default(), &path.child("env"), report);
    check_env_from(
        container.env_from.as_deref().unwrap_or_default(),
        &path.child("envFrom"),
        report,
    );
    check_ports(
        container.ports.as_deref().unwrap_or_default(),
        &path.child("ports"),
        report,
    );
    check_volume_mounts(
        container.volume_mounts.as_deref().unwrap_or_default(),
        &path.child("volumeMounts"),
        report,
    );
    if let Some(resources) = &container.resources {
        check_resources(resources, &path.child("resources"), report);
    }
}

/// Container names must be unique across a pod's containers and init containers.
pub(super) fn check_unique_container_names<'a>(
    containers: impl IntoIterator<Item = (FieldPath, &'a str)>,
    taken: &mut BTreeSet<String>,
    report: &mut ValidationReport,
) {
    for (path, name) in containers {
        if !name.is_empty() && !taken.insert(name.to_owned()) {
            report.error(path, duplicate(name));
        }
    }
}

/// Volumes: DNS-1123 label names, unique, exactly one source, valid referenced names.
pub(super) fn check_volumes(volumes: &[Volume], path: &FieldPath, report: &mut ValidationReport) {
    let mut names = BTreeSet::new();
    for (index, volume) in volumes.iter().enumerate() {
        let at = path.index(index);
        if volume.name.is_empty() {
            report.error(at.child("name"), "Required value");
        } else {
            report_all(
                report,
                &at.child("name"),
                &volume.name,
                dns1123_label_errors(&volume.name),
            );
            if !names.insert(volume.name.as_str()) {
                report.error(at.child("name"), duplicate(&volume.name));
            }
        }
        // Count the sources from the object's JSON: each is one optional field besides the name.
        let sources = serde_json::to_value(volume)
            .ok()
            .and_then(|v| v.as_object().map(|o| o.keys().filter(|k| *k != "name").count()))
            .unwrap_or(1);
        if sources == 0 {
            report.error(at.clone(), "Required value: must specify a volume type");
        } else if sources > 1 {
            report.error(at.clone(), "Forbidden: may not specify more than 1 volume type");
        }
        if let Some(config_map) = &volume.config_map {
            check_subdomain_name(&config_map.name, &at.child("configMap").child("name"), report);
        }
        if let Some(secret) = &volume.secret {
            check_subdomain_name(
                secret.secret_name.as_deref().unwrap_or_default(),
                &at.child("secret").child("secretName"),
                report,
            );
        }
        if let Some(claim) = &volume.persistent_volume_claim {
            check_subdomain_name(
                &claim.claim_name,
                &at.child("persistentVolumeClaim").child("claimName"),
                report,
            );
        }
        if let Some(host_path) = &volume.host_path
            && !host_path.path.starts_with('/')
        {
            report.error(
                at.child("hostPath").child("path"),
                invalid(&host_path.path, "must be an absolute path"),
            );
        }
    }
}

/// A pod template's spec: containers, init containers, volumes, names it refers to.
pub(super) fn check_pod_spec(spec: &PodSpec, path: &FieldPath, report: &mut ValidationReport) {
    let mut taken = BTreeSet::new();
    let containers = spec
        .containers
        .iter()
        .enumerate()
        .map(|(i, c)| (path.child("containers").index(i), c));
    let init = spec
        .init_containers
        .iter()
        .flatten()
        .enumerate()
        .map(|(i, c)| (path.child("initContainers").index(i), c));
    let all: Vec<_> = containers.chain(init).collect();
    // Spark fills in the name of the Spark container; the others need theirs.
    for (at, container) in &all {
        check_container(container, false, at, report);
    }
    check_unique_container_names(
        all.iter().map(|(at, c)| (at.child("name"), c.name.as_str())),
        &mut taken,
        report,
    );
    check_volumes(
        spec.volumes.as_deref().unwrap_or_default(),
        &path.child("volumes"),
        report,
    );
    if let Some(account) = spec.service_account_name.as_deref().filter(|a| !a.is_empty()) {
        check_subdomain_name(account, &path.child("serviceAccountName"), report);
    }
    for (index, secret) in spec.image_pull_secrets.iter().flatten().enumerate() {
        check_subdomain_name(
            &secret.name,
            &path.child("imagePullSecrets").index(index).child("name"),
            report,
        );
    }
    if let Some(seconds) = spec.termination_grace_period_seconds
        && seconds < 0
    {
        report.error(
            path.child("terminationGracePeriodSeconds"),
            invalid(seconds, "must be greater than or equal to 0"),
        );
    }
    if let Some(policy) = spec.restart_policy.as_deref().filter(|p| !p.is_empty()) {
        const RESTART_POLICIES: [&str; 3] = ["Always", "OnFailure", "Never"];
        if !RESTART_POLICIES.contains(&policy) {
            report.error(path.child("restartPolicy"), unsupported(policy, &RESTART_POLICIES));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn image_references() {
        for good in [
            "spark:4.0.4",
            "apache/spark:4.0.4-scala2.13-java17-python3-ubuntu",
            "registry.example.com:5000/team/spark:v1",
            "localhost/spark",
            "gcr.io/spark-operator/spark-py:v3.1.1",
            "spark@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
            "a__b/c-d--e/f.g:latest",
        ] {
            assert_eq!(image_reference_problem(good), None, "{good}");
        }
        for bad in [
            "",
            " spark",
            "Spark:4",
            "spark:",
            "spark:-x",
            "spark@sha256:xyz",
            "spark/-x",
            "spark//x",
            "spark..x",
            "reg:port/x",
        ] {
            assert!(image_reference_problem(bad).is_some(), "{bad}");
        }
    }

    #[test]
    fn env_names_follow_the_relaxed_rule() {
        for good in ["JAVA_HOME", "1abc", "my.env-name", "a b"] {
            assert!(env_var_name_valid(good), "{good}");
        }
        for bad in ["", "A=B", "é", "tab\there"] {
            assert!(!env_var_name_valid(bad), "{bad}");
        }
    }

    #[test]
    fn port_names() {
        assert!(port_name_errors("metrics").is_empty());
        assert!(port_name_errors("http-2").is_empty());
        for bad in ["123", "a--b", "-a", "UPPER", "sixteen-chars-xx"] {
            assert!(!port_name_errors(bad).is_empty(), "{bad}");
        }
    }

    #[test]
    fn messages_are_worded_as_kube_apiserver_words_them() {
        assert_eq!(
            unsupported("Sometimes", &IMAGE_PULL_POLICIES),
            r#"Unsupported value: "Sometimes": supported values: "Always", "IfNotPresent", "Never""#
        );
        assert_eq!(duplicate("v"), r#"Duplicate value: "v""#);
        assert_eq!(
            invalid(0, PORT_RANGE_MSG),
            "Invalid value: 0: must be between 1 and 65535, inclusive"
        );
    }
}
