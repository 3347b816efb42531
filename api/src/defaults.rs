//! Defaults of a SparkApplication spec, as a pure function (Kubeflow's `SetSparkApplicationDefaults`,
//! without its bugs). The webhook applies them on admission while the application is New or
//! Invalidating, as Kubeflow does; nothing is defaulted through the CRD schema.
//!
//! Differences from Kubeflow, on purpose:
//! - `sparkConf["spark.dynamicAllocation.enabled"]` is read with its real camel-case key (Kubeflow looks up
//!   the lower-cased key, never finds it, and adds an executor count that fights dynamic allocation).
//! - `restartPolicy.type: OnFailure` without retry counts means [`DEFAULT_ON_FAILURE_RETRIES`] reruns and
//!   [`DEFAULT_ON_SUBMISSION_FAILURE_RETRIES`] resubmissions, not "never retries" (Kubeflow #858, #1191).
//!   `Always` keeps unset counts unbounded: it retries until the application is deleted or changed.
//! - `spec.type` is required by the CRD, so it is never defaulted (Kubeflow's Scala default cannot fire).

use std::collections::BTreeMap;

use crate::application::{DeployMode, DynamicAllocation, RestartPolicyType, SparkApplicationSpec};

/// Seconds between retries when the restart policy is OnFailure or Always.
pub const DEFAULT_RETRY_INTERVAL_SECONDS: i64 = 5;
/// Reruns after a failed run when `OnFailure` gives no count.
pub const DEFAULT_ON_FAILURE_RETRIES: i32 = 3;
/// Resubmissions after a failed submission when `OnFailure` gives no count.
pub const DEFAULT_ON_SUBMISSION_FAILURE_RETRIES: i32 = 3;
/// Driver and executor cores when neither the spec nor sparkConf sets them.
pub const DEFAULT_CORES: i32 = 1;
/// Driver and executor memory when neither the spec nor sparkConf sets them.
pub const DEFAULT_MEMORY: &str = "1g";
/// Executors when neither the spec nor sparkConf sets them and dynamic allocation is off.
pub const DEFAULT_EXECUTOR_INSTANCES: i32 = 1;

/// sparkConf keys the defaults look at.
pub mod spark_conf_keys {
    pub const DRIVER_CORES: &str = "spark.driver.cores";
    pub const DRIVER_MEMORY: &str = "spark.driver.memory";
    pub const EXECUTOR_CORES: &str = "spark.executor.cores";
    pub const EXECUTOR_MEMORY: &str = "spark.executor.memory";
    pub const EXECUTOR_INSTANCES: &str = "spark.executor.instances";
    pub const DYNAMIC_ALLOCATION_ENABLED: &str = "spark.dynamicAllocation.enabled";
    pub const DYNAMIC_ALLOCATION_INITIAL_EXECUTORS: &str = "spark.dynamicAllocation.initialExecutors";
    pub const DYNAMIC_ALLOCATION_MIN_EXECUTORS: &str = "spark.dynamicAllocation.minExecutors";
    pub const DYNAMIC_ALLOCATION_MAX_EXECUTORS: &str = "spark.dynamicAllocation.maxExecutors";
}

/// Spark's boolean parsing (`ConfigBuilder.toBoolean`): only `true`/`false`, trimmed, any case.
pub fn parse_spark_bool(value: &str) -> Option<bool> {
    match value.trim().to_ascii_lowercase().as_str() {
        "true" => Some(true),
        "false" => Some(false),
        _ => None,
    }
}

/// True when dynamic allocation is on, through the spec or through sparkConf.
pub fn dynamic_allocation_enabled(
    dynamic_allocation: Option<&DynamicAllocation>,
    spark_conf: &BTreeMap<String, String>,
) -> bool {
    dynamic_allocation.is_some_and(|d| d.enabled)
        || spark_conf
            .get(spark_conf_keys::DYNAMIC_ALLOCATION_ENABLED)
            .and_then(|v| parse_spark_bool(v))
            .unwrap_or(false)
}

/// Fills in the defaults of `spec`; fields already set are never changed.
pub fn apply_defaults(spec: &mut SparkApplicationSpec) {
    use spark_conf_keys as keys;

    spec.mode.get_or_insert(DeployMode::Cluster);

    let policy = &mut spec.restart_policy;
    let policy_type = *policy.r#type.get_or_insert(RestartPolicyType::Never);
    if policy_type != RestartPolicyType::Never {
        policy
            .on_failure_retry_interval
            .get_or_insert(DEFAULT_RETRY_INTERVAL_SECONDS);
        policy
            .on_submission_failure_retry_interval
            .get_or_insert(DEFAULT_RETRY_INTERVAL_SECONDS);
    }
    if policy_type == RestartPolicyType::OnFailure {
        policy.on_failure_retries.get_or_insert(DEFAULT_ON_FAILURE_RETRIES);
        policy
            .on_submission_failure_retries
            .get_or_insert(DEFAULT_ON_SUBMISSION_FAILURE_RETRIES);
    }

    let conf = &spec.spark_conf;
    let driver = &mut spec.driver.pod;
    if driver.cores.is_none() && !conf.contains_key(keys::DRIVER_CORES) {
        driver.cores = Some(DEFAULT_CORES);
    }
    if driver.memory.is_none() && !conf.contains_key(keys::DRIVER_MEMORY) {
        driver.memory = Some(DEFAULT_MEMORY.to_owned());
    }

    let executor = &mut spec.executor;
    if executor.pod.cores.is_none() && !conf.contains_key(keys::EXECUTOR_CORES) {
        executor.pod.cores = Some(DEFAULT_CORES);
    }
    if executor.pod.memory.is_none() && !conf.contains_key(keys::EXECUTOR_MEMORY) {
        executor.pod.memory = Some(DEFAULT_MEMORY.to_owned());
    }
    let dynamic = dynamic_allocation_enabled(spec.dynamic_allocation.as_ref(), conf);
    if !dynamic && executor.instances.is_none() && !conf.contains_key(keys::EXECUTOR_INSTANCES) {
        executor.instances = Some(DEFAULT_EXECUTOR_INSTANCES);
    }

    if let Some(allocation) = spec.dynamic_allocation.as_mut().filter(|d| d.enabled) {
        allocation.shuffle_tracking_enabled.get_or_insert(true);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::application::{DriverSpec, ExecutorSpec, RestartPolicy, SparkApplicationType};

    fn minimal() -> SparkApplicationSpec {
        SparkApplicationSpec {
            suspend: None,
            r#type: SparkApplicationType::Scala,
            spark_version: "4.0.4".into(),
            mode: None,
            proxy_user: None,
            image: None,
            image_pull_policy: None,
            image_pull_secrets: vec![],
            main_class: None,
            main_application_file: Some("local:///app.jar".into()),
            arguments: vec![],
            spark_conf: BTreeMap::new(),
            hadoop_conf: BTreeMap::new(),
            spark_config_map: None,
            hadoop_config_map: None,
            volumes: vec![],
            driver: DriverSpec::default(),
            executor: ExecutorSpec::default(),
            deps: Default::default(),
            restart_policy: RestartPolicy::default(),
            node_selector: BTreeMap::new(),
            failure_retries: None,
            retry_interval: None,
            python_version: None,
            memory_overhead_factor: None,
            monitoring: None,
            batch_scheduler: None,
            time_to_live_seconds: None,
            batch_scheduler_options: None,
            spark_ui_options: None,
            driver_ingress_options: vec![],
            dynamic_allocation: None,
            driver_pod_disruption_budget: None,
        }
    }

    #[test]
    fn empty_spec_gets_kubeflows_defaults() {
        let mut spec = minimal();
        apply_defaults(&mut spec);
        assert_eq!(spec.mode, Some(DeployMode::Cluster));
        assert_eq!(spec.restart_policy.r#type, Some(RestartPolicyType::Never));
        assert_eq!(spec.restart_policy.on_failure_retries, None);
        assert_eq!(spec.restart_policy.on_failure_retry_interval, None);
        assert_eq!(spec.driver.pod.cores, Some(1));
        assert_eq!(spec.driver.pod.memory.as_deref(), Some("1g"));
        assert_eq!(spec.executor.pod.cores, Some(1));
        assert_eq!(spec.executor.pod.memory.as_deref(), Some("1g"));
        assert_eq!(spec.executor.instances, Some(1));
    }

    #[test]
    fn set_fields_are_never_overwritten() {
        let mut spec = minimal();
        spec.mode = Some(DeployMode::Client);
        spec.driver.pod.cores = Some(4);
        spec.executor.pod.memory = Some("8g".into());
        spec.executor.instances = Some(7);
        let before = spec.clone();
        apply_defaults(&mut spec);
        assert_eq!(spec.mode, before.mode);
        assert_eq!(spec.driver.pod.cores, Some(4));
        assert_eq!(spec.executor.pod.memory.as_deref(), Some("8g"));
        assert_eq!(spec.executor.instances, Some(7));
    }

    #[test]
    fn spark_conf_values_suppress_spec_defaults() {
        let mut spec = minimal();
        for key in [
            "spark.driver.cores",
            "spark.driver.memory",
            "spark.executor.cores",
            "spark.executor.memory",
            "spark.executor.instances",
        ] {
            spec.spark_conf.insert(key.into(), "2".into());
        }
        apply_defaults(&mut spec);
        assert_eq!(spec.driver.pod.cores, None);
        assert_eq!(spec.driver.pod.memory, None);
        assert_eq!(spec.executor.pod.cores, None);
        assert_eq!(spec.executor.pod.memory, None);
        assert_eq!(spec.executor.instances, None);
    }

    #[test]
    fn camel_case_dynamic_allocation_key_is_honoured() {
        let mut spec = minimal();
        spec.spark_conf
            .insert("spark.dynamicAllocation.enabled".into(), " TRUE ".into());
        apply_defaults(&mut spec);
        assert_eq!(
            spec.executor.instances, None,
            "dynamic allocation decides the executor count"
        );

        let mut lower = minimal();
        lower
            .spark_conf
            .insert("spark.dynamicallocation.enabled".into(), "true".into());
        apply_defaults(&mut lower);
        assert_eq!(
            lower.executor.instances,
            Some(1),
            "Spark keys are case-sensitive; the lower-case key is not Spark's"
        );
    }

    #[test]
    fn dynamic_allocation_in_spec_turns_on_shuffle_tracking() {
        let mut spec = minimal();
        spec.dynamic_allocation = Some(DynamicAllocation {
            enabled: true,
            ..Default::default()
        });
        apply_defaults(&mut spec);
        assert_eq!(spec.executor.instances, None);
        assert_eq!(
            spec.dynamic_allocation
                .as_ref()
                .and_then(|d| d.shuffle_tracking_enabled),
            Some(true)
        );

        let mut off = minimal();
        off.dynamic_allocation = Some(DynamicAllocation::default());
        apply_defaults(&mut off);
        assert_eq!(
            off.dynamic_allocation.as_ref().and_then(|d| d.shuffle_tracking_enabled),
            None
        );
        assert_eq!(off.executor.instances, Some(1));
    }

    #[test]
    fn on_failure_without_counts_retries_a_bounded_number_of_times() {
        let mut spec = minimal();
        spec.restart_policy.r#type = Some(RestartPolicyType::OnFailure);
        apply_defaults(&mut spec);
        let policy = &spec.restart_policy;
        assert_eq!(policy.on_failure_retries, Some(DEFAULT_ON_FAILURE_RETRIES));
        const { assert!(DEFAULT_ON_FAILURE_RETRIES > 0) };
        assert_eq!(
            policy.on_submission_failure_retries,
            Some(DEFAULT_ON_SUBMISSION_FAILURE_RETRIES)
        );
        assert_eq!(policy.on_failure_retry_interval, Some(5));
        assert_eq!(policy.on_submission_failure_retry_interval, Some(5));

        let mut explicit = minimal();
        explicit.restart_policy.r#type = Some(RestartPolicyType::OnFailure);
        explicit.restart_policy.on_failure_retries = Some(0);
        apply_defaults(&mut explicit);
        assert_eq!(
            explicit.restart_policy.on_failure_retries,
            Some(0),
            "an explicit 0 means no reruns"
        );
    }

    #[test]
    fn always_keeps_counts_unbounded_but_gets_intervals() {
        let mut spec = minimal();
        spec.restart_policy.r#type = Some(RestartPolicyType::Always);
        apply_defaults(&mut spec);
        assert_eq!(spec.restart_policy.on_failure_retries, None);
        assert_eq!(spec.restart_policy.on_failure_retry_interval, Some(5));
    }

    #[test]
    fn spark_booleans_are_strict() {
        assert_eq!(parse_spark_bool(" True"), Some(true));
        assert_eq!(parse_spark_bool("false"), Some(false));
        assert_eq!(parse_spark_bool("yes"), None);
        assert_eq!(parse_spark_bool("1"), None);
    }
}
