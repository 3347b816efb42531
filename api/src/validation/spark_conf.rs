//! Checks of `spec.sparkConf` and of dynamic allocation, which may be set in the spec or in sparkConf.

use std::collections::BTreeMap;

use crate::application::SparkApplicationSpec;
use crate::defaults::{parse_spark_bool, spark_conf_keys};
use crate::field::{FieldPath, ValidationReport};
use crate::naming::SPARK_DRIVER_POD_NAME_KEY;

use super::names;

const SERVICE_ACCOUNT: &str =
    "set the service account with spec.driver.serviceAccount / spec.executor.serviceAccount instead";
const CREDENTIALS: &str = "the operator manages the API credentials of Spark; remove this key";
const MASTER: &str = "the operator sets the master URL; remove this key";
const IMAGE: &str = "set the image with spec.image (or spec.driver.image / spec.executor.image) instead";

/// sparkConf keys users may not set, and what to do instead (Kubeflow's deny list).
pub const DENIED_SPARK_CONF_KEYS: [(&str, &str); 13] = [
    (
        "spark.kubernetes.authenticate.driver.serviceAccountName",
        SERVICE_ACCOUNT,
    ),
    (
        "spark.kubernetes.authenticate.executor.serviceAccountName",
        SERVICE_ACCOUNT,
    ),
    ("spark.kubernetes.authenticate.oauthTokenFile", CREDENTIALS),
    ("spark.kubernetes.authenticate.oauthToken", CREDENTIALS),
    ("spark.kubernetes.authenticate.driver.oauthTokenFile", CREDENTIALS),
    ("spark.kubernetes.authenticate.driver.oauthToken", CREDENTIALS),
    ("spark.kubernetes.authenticate.executor.oauthTokenFile", CREDENTIALS),
    ("spark.kubernetes.authenticate.executor.oauthToken", CREDENTIALS),
    ("spark.master", MASTER),
    ("spark.kubernetes.driver.master", MASTER),
    ("spark.kubernetes.container.image", IMAGE),
    ("spark.kubernetes.driver.container.image", IMAGE),
    ("spark.kubernetes.executor.container.image", IMAGE),
];

/// `spark.kubernetes.namespace`: allowed only when it names the application's own namespace.
pub const NAMESPACE_KEY: &str = "spark.kubernetes.namespace";

pub(super) fn check_spark_conf(
    spark_conf: &BTreeMap<String, String>,
    namespace: Option<&str>,
    path: &FieldPath,
    report: &mut ValidationReport,
) {
    for (key, value) in spark_conf {
        let at = path.key(key);
        if let Some((_, fix)) = DENIED_SPARK_CONF_KEYS.iter().find(|(denied, _)| denied == key) {
            report.error(at, format!("sparkConf key {key:?} is not allowed: {fix}"));
            continue;
        }
        if key == NAMESPACE_KEY
            && let Some(namespace) = namespace
            && value != namespace
        {
            report.error(
                at.clone(),
                format!("must equal the application's namespace {namespace:?}, got {value:?}: remove the key or create the application in {value:?}"),
            );
        }
        if key == SPARK_DRIVER_POD_NAME_KEY
            && let Err(problem) = names::dns1123_subdomain(value)
        {
            report.error(at.clone(), format!("driver pod name {problem}"));
        }
        check_controller_refusals(key, value, &at, report);
    }
    warn_credentials(spark_conf, path, report);
}

/// Keys the controller refuses when it builds the driver (`submission::driver_conf`), refused here first.
const SET_BY_SPARK: [&str; 2] = ["spark.driver.host", "spark.driver.bindAddress"];
const FROM_SUBMITTING_MACHINE: [&str; 3] = [
    "spark.kubernetes.authenticate.driver.caCertFile",
    "spark.kubernetes.authenticate.driver.clientKeyFile",
    "spark.kubernetes.authenticate.driver.clientCertFile",
];
const OVERHEAD_FACTOR_KEYS: [&str; 3] = [
    "spark.kubernetes.memoryOverheadFactor",
    "spark.driver.memoryOverheadFactor",
    "spark.executor.memoryOverheadFactor",
];
const HEAP_KEYS: [&str; 2] = ["spark.driver.memory", "spark.executor.memory"];
const OVERHEAD_KEYS: [&str; 4] = [
    "spark.driver.memoryOverhead",
    "spark.executor.memoryOverhead",
    "spark.driver.minMemoryOverhead",
    "spark.executor.minMemoryOverhead",
];
const SECRET_KEY_REF_PREFIXES: [&str; 2] = [
    "spark.kubernetes.driver.secretKeyRef.",
    "spark.kubernetes.executor.secretKeyRef.",
];
const LABEL_PREFIXES: [&str; 2] = ["spark.kubernetes.driver.label.", "spark.kubernetes.executor.label."];

fn check_controller_refusals(key: &str, value: &str, at: &FieldPath, report: &mut ValidationReport) {
    if value.is_empty() {
        return;
    }
    if SET_BY_SPARK.contains(&key) {
        report.error(at.clone(), "is set by Spark to the driver Service's address: remove it");
    } else if FROM_SUBMITTING_MACHINE.contains(&key) {
        report.error(
            at.clone(),
            "is read from the submitting machine, which native submission does not have: use the driver's service account, or spark.kubernetes.authenticate.driver.mounted.* with a mounted secret",
        );
    } else if OVERHEAD_FACTOR_KEYS.contains(&key) {
        check_overhead_factor(value, at, report);
    } else if HEAP_KEYS.contains(&key) {
        super::pod::check_spark_memory(Some(value), true, at, report);
    } else if OVERHEAD_KEYS.contains(&key) {
        super::pod::check_spark_memory(Some(value), false, at, report);
    } else if key == "spark.kubernetes.container.image.pullPolicy" {
        super::kube::check_image_pull_policy(value, at, report);
    } else if let Some(env) = SECRET_KEY_REF_PREFIXES.iter().find_map(|p| key.strip_prefix(p)) {
        if !super::kube::env_var_name_valid(env) {
            report.error(at.clone(), super::kube::invalid(env, super::kube::ENV_VAR_NAME_MSG));
        }
        match value.split_once(':') {
            Some((name, secret_key)) if !name.is_empty() && !secret_key.is_empty() => {
                for problem in super::kube::dns1123_subdomain_errors(name) {
                    report.error(at.clone(), super::kube::invalid(name, problem));
                }
            }
            _ => report.error(
                at.clone(),
                format!("{value:?} is not <secret name>:<key>: write e.g. my-secret:password"),
            ),
        }
    } else if let Some(label) = LABEL_PREFIXES.iter().find_map(|p| key.strip_prefix(p))
        && (SPARK_RESERVED_LABELS.contains(&label) || super::pod::is_operator_label(label))
    {
        report.error(
            at.clone(),
            format!("label {label:?} is reserved by Spark and the operator, which set it themselves: remove this key"),
        );
    }
}

const SPARK_RESERVED_LABELS: [&str; 3] = [
    crate::labels::LABEL_SPARK_APP_SELECTOR,
    crate::labels::LABEL_SPARK_ROLE,
    crate::labels::LABEL_SPARK_EXEC_ID,
];

/// A memory overhead factor: a number in (0, MAX]; above 1 warned about (Spark documents 0 to 1.0).
pub(super) fn check_overhead_factor(value: &str, at: &FieldPath, report: &mut ValidationReport) {
    use crate::bounds::{MAX_MEMORY_OVERHEAD_FACTOR, WARN_MEMORY_OVERHEAD_FACTOR};
    match value.trim().parse::<f64>() {
        Ok(factor) if factor.is_finite() && factor > 0.0 && factor <= MAX_MEMORY_OVERHEAD_FACTOR => {
            if factor > WARN_MEMORY_OVERHEAD_FACTOR {
                report.warning(
                    at.clone(),
                    format!("{value:?} gives more off-heap overhead than heap: Spark documents factors between 0 and 1.0"),
                );
            }
        }
        Ok(factor) if factor.is_finite() && factor > 0.0 => report.error(
            at.clone(),
            format!(
                "{value:?} is more than {MAX_MEMORY_OVERHEAD_FACTOR}: the overhead would be over {MAX_MEMORY_OVERHEAD_FACTOR} times the heap; use a factor between 0 and 1.0 (e.g. 0.1 or 0.4), or memoryOverhead for a fixed size"
            ),
        ),
        _ => report.error(
            at.clone(),
            format!("{value:?} is not a positive number: use a factor between 0 and 1.0, e.g. 0.1 or 0.4"),
        ),
    }
}

/// Parts of a key that name a credential. References to secrets (secretKeyRef, mounted secrets) and
/// settings about credentials (providers, files, paths) are not credentials themselves.
const CREDENTIAL_WORDS: [&str; 10] = [
    "password",
    "passwd",
    "secret",
    "token",
    "credential",
    "access.key",
    "accesskey",
    "account.key",
    "private.key",
    "api.key",
];
const NOT_CREDENTIAL_WORDS: [&str; 10] = [
    "secretkeyref",
    ".secrets.",
    "provider",
    "file",
    "path",
    "location",
    "enabled",
    "class",
    ".name",
    "mounted",
];

/// Warns about values that look like credentials: sparkConf and hadoopConf end up in a ConfigMap, which
/// whoever can read ConfigMaps in the namespace reads.
pub(super) fn warn_credentials(conf: &BTreeMap<String, String>, path: &FieldPath, report: &mut ValidationReport) {
    for (key, value) in conf {
        let lower = key.to_ascii_lowercase();
        if value.is_empty()
            || !CREDENTIAL_WORDS.iter().any(|w| lower.contains(w))
            || NOT_CREDENTIAL_WORDS.iter().any(|w| lower.contains(w))
        {
            continue;
        }
        report.warning(
            path.key(key),
            "looks like a credential, and this value is stored in a ConfigMap anyone who can read ConfigMaps in the namespace can read: put it in a Secret and use spec.driver.secrets / spec.executor.secrets, or spec.driver.env / spec.executor.env with valueFrom.secretKeyRef (or envFrom with secretRef)",
        );
    }
}

/// Where a merged dynamic-allocation value came from, for the error path.
struct Sourced {
    value: i64,
    path: FieldPath,
}

fn from_conf(
    spark_conf: &BTreeMap<String, String>,
    key: &str,
    conf_path: &FieldPath,
    report: &mut ValidationReport,
) -> Option<Sourced> {
    let raw = spark_conf.get(key)?;
    let path = conf_path.key(key);
    match raw.trim().parse::<i32>() {
        Ok(value) => Some(Sourced {
            value: i64::from(value),
            path,
        }),
        Err(_) => {
            report.error(path, format!("must be a whole number, got {raw:?}"));
            None
        }
    }
}

fn from_spec(value: Option<i32>, path: FieldPath) -> Option<Sourced> {
    value.map(|value| Sourced {
        value: i64::from(value),
        path,
    })
}

/// Executor counts: instances, and dynamic allocation's bounds merged from the spec and sparkConf (the
/// spec wins per field, as it is applied after sparkConf).
pub(super) fn check_executor_counts(spec: &SparkApplicationSpec, path: &FieldPath, report: &mut ValidationReport) {
    use spark_conf_keys as keys;
    let conf = &spec.spark_conf;
    let conf_path = path.child("sparkConf");

    let conf_enabled = match conf.get(keys::DYNAMIC_ALLOCATION_ENABLED) {
        Some(raw) => match parse_spark_bool(raw) {
            Some(enabled) => enabled,
            None => {
                report.error(
                    conf_path.key(keys::DYNAMIC_ALLOCATION_ENABLED),
                    format!("must be true or false, got {raw:?}"),
                );
                false
            }
        },
        None => false,
    };
    let spec_allocation = spec.dynamic_allocation.as_ref().filter(|d| d.enabled);
    let dynamic = conf_enabled || spec_allocation.is_some();

    let instances_path = path.child("executor").child("instances");
    let instances = from_spec(spec.executor.instances, instances_path.clone())
        .or_else(|| from_conf(conf, keys::EXECUTOR_INSTANCES, &conf_path, report));
    if let Some(instances) = &instances {
        if instances.value < 0 {
            report.error(
                instances.path.clone(),
                format!("must not be negative, got {}", instances.value),
            );
        } else if instances.value == 0 && !dynamic {
            report.error(
                instances.path.clone(),
                "must be at least 1: set a number of executors, or enable spec.dynamicAllocation to start with none",
            );
        }
    }
    if !dynamic {
        return;
    }

    let allocation_path = path.child("dynamicAllocation");
    let pick = |spec_value: Option<i32>, field: &str, key: &str, report: &mut ValidationReport| {
        from_spec(spec_value, allocation_path.child(field)).or_else(|| from_conf(conf, key, &conf_path, report))
    };
    let min = pick(
        spec_allocation.and_then(|d| d.min_executors),
        "minExecutors",
        keys::DYNAMIC_ALLOCATION_MIN_EXECUTORS,
        report,
    );
    let max = pick(
        spec_allocation.and_then(|d| d.max_executors),
        "maxExecutors",
        keys::DYNAMIC_ALLOCATION_MAX_EXECUTORS,
        report,
    );
    let initial = pick(
        spec_allocation.and_then(|d| d.initial_executors),
        "initialExecutors",
        keys::DYNAMIC_ALLOCATION_INITIAL_EXECUTORS,
        report,
    );

    let min_valid = min.as_ref().is_none_or(|m| m.value >= 0);
    let max_valid = max.as_ref().is_none_or(|m| m.value > 0);
    if let Some(min) = min.as_ref().filter(|_| !min_valid) {
        report.error(min.path.clone(), format!("must not be negative, got {}", min.value));
    }
    if let Some(max) = max.as_ref().filter(|_| !max_valid) {
        report.error(max.path.clone(), format!("must be at least 1, got {}", max.value));
    }
    if let Some(initial) = initial.as_ref().filter(|i| i.value < 0) {
        report.error(
            initial.path.clone(),
            format!("must not be negative, got {}", initial.value),
        );
    }
    let min_above_max =
        matches!((&min, &max), (Some(min), Some(max)) if min_valid && max_valid && min.value > max.value);
    if let (Some(min), Some(max)) = (&min, &max)
        && min_above_max
    {
        report.error(
            min.path.clone(),
            format!(
                "({}) is greater than {} ({}): lower it or raise the maximum",
                min.value, max.path, max.value
            ),
        );
    }
    if let (Some(min), Some(initial)) = (&min, &initial)
        && min_valid
        && initial.value < min.value
    {
        report.warning(
            initial.path.clone(),
            format!(
                "({}) is below {} ({}); Spark starts with {} executors",
                initial.value, min.path, min.value, min.value
            ),
        );
    }
    // Spark starts with max(min, initial, instances) executors; that is what must fit under the maximum.
    if let Some(max) = max.as_ref().filter(|_| max_valid) {
        let start = [&min, &initial, &instances]
            .into_iter()
            .flatten()
            .filter(|s| s.value >= 0)
            .max_by_key(|s| s.value);
        let already_reported = min_above_max && start.is_some_and(|s| min.as_ref().is_some_and(|m| m.path == s.path));
        if let Some(start) = start
            && start.value > max.value
            && !already_reported
        {
            report.error(
                start.path.clone(),
                format!(
                    "({}) makes Spark start more executors than {} ({}): lower it or raise the maximum",
                    start.value, max.path, max.value
                ),
            );
        }
    }
}
