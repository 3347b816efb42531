//! Validation of SparkApplications and ScheduledSparkApplications: pure functions that return every
//! problem at once, each with its field path and what to do about it.
//!
//! What is checked here needs nothing but the object. Checks that need the API server are split out so
//! the webhook can do the lookups and stay pure otherwise: see [`crate::ownership`] for ownerReferences
//! that point to another namespace (the object would be garbage-collected at once).
//!
//! Structural problems (wrong types, unknown fields, embedded core/v1 objects that do not decode) are
//! found earlier, on the raw manifest: see [`crate::manifest`].

mod kube;
mod names;
mod pod;
mod schedule;
mod spark_conf;

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::application::{SparkApplication, SparkApplicationSpec};
use crate::bounds;
use crate::field::{FieldPath, ValidationReport};
use crate::scheduled::ScheduledSparkApplication;
use crate::spark_version::SparkVersion;

pub use kube::{image_reference_problem, namespace_errors};
pub use names::{
    dns1035_label, dns1123_label_problem, dns1123_subdomain, dns1123_subdomain_problem, label_key, label_value,
};
pub use schedule::check_schedule;
pub use spark_conf::{DENIED_SPARK_CONF_KEYS, NAMESPACE_KEY};

/// What validation knows besides the object itself.
#[derive(Clone, Debug, Default)]
pub struct ValidationContext<'a> {
    /// Namespace the object lives in when its metadata has none (the admission request's namespace, or
    /// the CLI's `--namespace`). Used to check `spark.kubernetes.namespace`.
    pub namespace: Option<&'a str>,
}

/// Validates a SparkApplication.
pub fn validate_spark_application(app: &SparkApplication, context: &ValidationContext<'_>) -> ValidationReport {
    let mut report = ValidationReport::default();
    check_metadata(&app.metadata, 0, &mut report);
    let namespace = app.metadata.namespace.as_deref().or(context.namespace);
    check_spec(&app.spec, namespace, &FieldPath::new("spec"), &mut report);
    report
}

/// Validates a ScheduledSparkApplication, its template included.
pub fn validate_scheduled_spark_application(
    app: &ScheduledSparkApplication,
    context: &ValidationContext<'_>,
) -> ValidationReport {
    let mut report = ValidationReport::default();
    // Runs are named <name>-<timestamp>; nanosecond timestamps take 20 characters with the dash.
    check_metadata(&app.metadata, schedule::RUN_NAME_SUFFIX_LENGTH, &mut report);
    let namespace = app.metadata.namespace.as_deref().or(context.namespace);
    let spec_path = FieldPath::new("spec");
    schedule::check_scheduled_spec(&app.spec, &spec_path, &mut report);
    check_spec(&app.spec.template, namespace, &spec_path.child("template"), &mut report);
    report
}

/// `metadata.namespace` and `metadata.name` as kube-apiserver checks them for our (namespaced) custom
/// resources, in its words: the namespace a DNS-1123 label, the name a DNS-1123 subdomain. The name must also
/// be a DNS-1035 label, because Services are named after it. `run_suffix` is the length of what will be
/// appended to the name for the objects it creates (warned about, not rejected).
fn check_metadata(metadata: &ObjectMeta, run_suffix: usize, report: &mut ValidationReport) {
    let path = FieldPath::new("metadata");
    // An empty namespace is none: kubectl and the API server fill in the request's.
    if let Some(namespace) = metadata.namespace.as_deref().filter(|namespace| !namespace.is_empty()) {
        for error in namespace_errors(namespace) {
            report.error(path.child("namespace"), error);
        }
    }
    match (metadata.name.as_deref(), metadata.generate_name.as_deref()) {
        (Some(name), _) if !name.is_empty() => {
            let refused = kube::dns1123_subdomain_errors(name);
            if let Some((last, first)) = refused.split_last() {
                // The API server's words; the last also says what our own rule needs, so that the fix the
                // user picks is not refused next.
                for error in first {
                    report.error(path.child("name"), kube::invalid(name, error));
                }
                report.error(
                    path.child("name"),
                    format!(
                        "{}; the operator also names Services after it: use at most 63 lower-case letters, digits and '-', starting with a letter",
                        kube::invalid(name, last)
                    ),
                );
            } else if let Err(problem) = dns1035_label(name) {
                report.error(path.child("name"), problem);
            } else if run_suffix > 0 && name.len() + run_suffix > crate::naming::MAX_LABEL_LENGTH {
                report.warning(
                    path.child("name"),
                    format!(
                        "runs are named <name>-<timestamp>, which is too long for a SparkApplication with a name of {} characters: use at most {}",
                        name.len(),
                        crate::naming::MAX_LABEL_LENGTH - run_suffix
                    ),
                );
            }
        }
        (_, Some(prefix)) if !prefix.is_empty() => {
            // The API server appends 5 random characters.
            let sample = format!("{prefix}abcde");
            if let Err(problem) = dns1035_label(&sample) {
                report.error(
                    path.child("generateName"),
                    format!("with the 5 characters Kubernetes appends, {problem}"),
                );
            }
        }
        _ => report.error(path.child("name"), "is required"),
    }
}

fn check_spec(spec: &SparkApplicationSpec, namespace: Option<&str>, path: &FieldPath, report: &mut ValidationReport) {
    let version = check_spark_version(&spec.spark_version, &path.child("sparkVersion"), report);
    for (role, template) in [
        ("driver", spec.driver.pod.template.is_some()),
        ("executor", spec.executor.pod.template.is_some()),
    ] {
        if let Some(version) = version
            && template
            && version < SparkVersion::POD_TEMPLATES
        {
            report.error(
                path.child(role).child("template"),
                format!(
                    "pod templates need Spark 3.0.0 or newer, and sparkVersion is {version}: upgrade Spark or use the typed fields (affinity, tolerations, volumes, ...) instead"
                ),
            );
        }
    }

    if spec.main_application_file.as_deref().is_none_or(str::is_empty) {
        report.error(
            path.child("mainApplicationFile"),
            "is required: the jar, Python or R file to run, e.g. local:///opt/spark/examples/jars/spark-examples.jar",
        );
    }
    // Spark refuses to submit without a driver and an executor image.
    if spec.image.is_none() {
        let (driver, executor) = (
            path.child("driver").child("image"),
            path.child("executor").child("image"),
        );
        match (&spec.driver.pod.image, &spec.executor.pod.image) {
            (None, None) => {
                report.error(
                    path.child("image"),
                    "is required: set spec.image, or both spec.driver.image and spec.executor.image",
                );
            }
            (None, Some(_)) => report.error(
                driver,
                "is required when spec.image is not set: set spec.image or spec.driver.image",
            ),
            (Some(_), None) => report.error(
                executor,
                "is required when spec.image is not set: set spec.image or spec.executor.image",
            ),
            (Some(_), Some(_)) => {}
        }
    }

    if !spec.node_selector.is_empty()
        && (!spec.driver.pod.node_selector.is_empty() || !spec.executor.pod.node_selector.is_empty())
    {
        report.error(
            path.child("nodeSelector"),
            "cannot be combined with spec.driver.nodeSelector or spec.executor.nodeSelector: move these entries into the driver and executor selectors",
        );
    }

    spark_conf::check_spark_conf(&spec.spark_conf, namespace, &path.child("sparkConf"), report);
    spark_conf::warn_credentials(&spec.hadoop_conf, &path.child("hadoopConf"), report);
    spark_conf::check_executor_counts(spec, path, report);
    check_restart_policy(spec, &path.child("restartPolicy"), report);
    check_driver_ingress_options(spec, &path.child("driverIngressOptions"), report);

    let volume_names: BTreeSet<&str> = spec.volumes.iter().map(|v| v.name.as_str()).collect();
    let driver_path = path.child("driver");
    pod::check_pod(&spec.driver.pod, pod::Role::Driver, &volume_names, &driver_path, report);
    pod::check_driver_pod_name(spec.driver.pod_name.as_deref(), &driver_path.child("podName"), report);
    pod::check_core_request(
        spec.driver.core_request.as_deref(),
        &driver_path.child("coreRequest"),
        report,
    );
    pod::check_ports(&spec.driver.ports, &driver_path.child("ports"), report);
    let executor_path = path.child("executor");
    pod::check_pod(
        &spec.executor.pod,
        pod::Role::Executor,
        &volume_names,
        &executor_path,
        report,
    );
    pod::check_core_request(
        spec.executor.core_request.as_deref(),
        &executor_path.child("coreRequest"),
        report,
    );
    pod::check_ports(&spec.executor.ports, &executor_path.child("ports"), report);

    if let Some(factor) = spec.memory_overhead_factor.as_deref() {
        spark_conf::check_overhead_factor(factor, &path.child("memoryOverheadFactor"), report);
    }
    check_images(spec, path, report);
    kube::check_volumes(&spec.volumes, &path.child("volumes"), report);
    check_durations(spec, path, report);
    check_ui_options(spec, path, report);
    if let Some(master) = spec.driver.kubernetes_master.as_deref() {
        report.warning(
            driver_path.child("kubernetesMaster"),
            format!(
                "the driver will talk to the API server at {master:?} instead of the in-cluster address (https://kubernetes.default.svc): kept for Kubeflow compatibility; remove it unless the driver cannot reach the API server in-cluster"
            ),
        );
    }
    for (role, class) in [
        ("driver", spec.driver.priority_class_name.as_deref()),
        ("executor", spec.executor.priority_class_name.as_deref()),
    ] {
        if let Some(class) = class {
            kube::check_subdomain_name(class, &path.child(role).child("priorityClassName"), report);
        }
    }
    if let Some(timeout) = spec
        .dynamic_allocation
        .as_ref()
        .and_then(|d| d.shuffle_tracking_timeout)
        && timeout < 0
    {
        report.error(
            path.child("dynamicAllocation").child("shuffleTrackingTimeout"),
            format!("must not be negative, got {timeout}"),
        );
    }
    if let Some(prometheus) = spec.monitoring.as_ref().and_then(|m| m.prometheus.as_ref()) {
        let at = path.child("monitoring").child("prometheus");
        if prometheus.jmx_exporter_jar.is_empty() {
            report.error(
                at.child("jmxExporterJar"),
                "is required: the path of the JMX exporter jar in the image",
            );
        }
        if let Some(port) = prometheus.port
            && !(1024..=49151).contains(&port)
        {
            report.error(at.child("port"), format!("must be between 1024 and 49151, got {port}"));
        }
    }
    if let Some(options) = &spec.batch_scheduler_options {
        pod::check_quantities(
            Some(&options.resources),
            &path.child("batchSchedulerOptions").child("resources"),
            report,
        );
    }
}

fn check_images(spec: &SparkApplicationSpec, path: &FieldPath, report: &mut ValidationReport) {
    if let Some(image) = spec.image.as_deref() {
        kube::check_image(image, &path.child("image"), report);
    }
    if let Some(policy) = spec.image_pull_policy.as_deref() {
        kube::check_image_pull_policy(policy, &path.child("imagePullPolicy"), report);
    }
    for (index, secret) in spec.image_pull_secrets.iter().enumerate() {
        kube::check_subdomain_name(secret, &path.child("imagePullSecrets").index(index), report);
    }
    for (field, name) in [
        ("sparkConfigMap", spec.spark_config_map.as_deref()),
        ("hadoopConfigMap", spec.hadoop_config_map.as_deref()),
    ] {
        if let Some(name) = name {
            kube::check_subdomain_name(name, &path.child(field), report);
        }
    }
}

/// A count of seconds within [`bounds::MAX_SECONDS`] (so adding it to a clock cannot overflow).
fn check_seconds(value: i64, min: i64, path: &FieldPath, report: &mut ValidationReport) {
    if value < min {
        report.error(path.clone(), format!("must be at least {min}, got {value}"));
    } else if value > bounds::MAX_SECONDS {
        report.error(
            path.clone(),
            format!(
                "must be at most {} seconds (68 years), got {value}",
                bounds::MAX_SECONDS
            ),
        );
    }
}

fn check_durations(spec: &SparkApplicationSpec, path: &FieldPath, report: &mut ValidationReport) {
    if let Some(ttl) = spec.time_to_live_seconds {
        let at = path.child("timeToLiveSeconds");
        check_seconds(ttl, bounds::MIN_TTL_SECONDS, &at, report);
        if (bounds::MIN_TTL_SECONDS..=0).contains(&ttl) {
            report.warning(
                at,
                format!(
                    "is {ttl}: the application is deleted as soon as it ends, with its status and events (as Kubeflow does); use a positive number of seconds to keep its record"
                ),
            );
        }
    }
    if let Some(interval) = spec.retry_interval {
        check_seconds(interval, 1, &path.child("retryInterval"), report);
    }
    if let Some(retries) = spec.failure_retries
        && retries < 0
    {
        report.error(
            path.child("failureRetries"),
            format!("must not be negative, got {retries}"),
        );
    }
}

fn check_ui_options(spec: &SparkApplicationSpec, path: &FieldPath, report: &mut ValidationReport) {
    let service_type = |value: Option<&str>, at: FieldPath, report: &mut ValidationReport| {
        if let Some(value) = value
            && !bounds::SERVICE_TYPES.contains(&value)
        {
            report.error(at, kube::unsupported(value, &bounds::SERVICE_TYPES));
        }
    };
    if let Some(ui) = &spec.spark_ui_options {
        let at = path.child("sparkUIOptions");
        if let Some(port) = ui.service_port {
            kube::check_port_number(port, &at.child("servicePort"), report);
        }
        service_type(ui.service_type.as_deref(), at.child("serviceType"), report);
        if let Some(name) = ui.service_port_name.as_deref() {
            for problem in kube::dns1123_label_errors(name) {
                report.error(at.child("servicePortName"), kube::invalid(name, problem));
            }
        }
    }
    for (index, option) in spec.driver_ingress_options.iter().enumerate() {
        let at = path.child("driverIngressOptions").index(index);
        service_type(option.service_type.as_deref(), at.child("serviceType"), report);
        if let Some(name) = option.service_port_name.as_deref() {
            for problem in kube::dns1123_label_errors(name) {
                report.error(at.child("servicePortName"), kube::invalid(name, problem));
            }
        }
    }
}

fn check_spark_version(version: &str, path: &FieldPath, report: &mut ValidationReport) -> Option<SparkVersion> {
    if version.trim().is_empty() {
        report.error(path.clone(), "is required: the Spark version of the image, e.g. 4.0.4");
        return None;
    }
    let parsed = SparkVersion::parse(version);
    if parsed.is_none() {
        report.error(
            path.clone(),
            format!("{version:?} is not a Spark version: use major.minor.patch, e.g. 4.0.4"),
        );
    }
    parsed
}

fn check_restart_policy(spec: &SparkApplicationSpec, path: &FieldPath, report: &mut ValidationReport) {
    let policy = &spec.restart_policy;
    for (field, value) in [
        ("onSubmissionFailureRetries", policy.on_submission_failure_retries),
        ("onFailureRetries", policy.on_failure_retries),
    ] {
        if let Some(value) = value
            && value < 0
        {
            report.error(
                path.child(field),
                format!("must not be negative, got {value}: use 0 for no retries"),
            );
        }
    }
    for (field, value) in [
        (
            "onSubmissionFailureRetryInterval",
            policy.on_submission_failure_retry_interval,
        ),
        ("onFailureRetryInterval", policy.on_failure_retry_interval),
    ] {
        if let Some(value) = value {
            check_seconds(value, 1, &path.child(field), report);
        }
    }
}

fn check_driver_ingress_options(spec: &SparkApplicationSpec, path: &FieldPath, report: &mut ValidationReport) {
    let mut ports = BTreeMap::new();
    let mut formats = BTreeMap::new();
    for (index, option) in spec.driver_ingress_options.iter().enumerate() {
        let at = path.index(index);
        match option.service_port {
            None => report.error(at.child("servicePort"), "is required: the driver port to expose"),
            Some(port) if !(1..=65535).contains(&port) => {
                report.error(
                    at.child("servicePort"),
                    format!("must be between 1 and 65535, got {port}"),
                );
            }
            Some(port) => {
                if let Some(first) = ports.insert(port, index) {
                    report.error(
                        at.child("servicePort"),
                        format!("{port} is already exposed by entry {first}: each entry needs its own port"),
                    );
                }
            }
        }
        if option.ingress_url_format.is_empty() {
            report.error(
                at.child("ingressURLFormat"),
                "is required: the URL of the Ingress, e.g. {{$appName}}.example.com",
            );
        } else if let Some(first) = formats.insert(option.ingress_url_format.as_str(), index) {
            report.error(
                at.child("ingressURLFormat"),
                format!("is already used by entry {first}: each entry needs its own URL"),
            );
        }
    }
}

#[cfg(test)]
mod tests;
