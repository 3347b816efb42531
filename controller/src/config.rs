//! The controller's flags: one clap `Args` struct, every flag also an environment variable
//! (`SPARK_OPERATOR_CONTROLLER_<FLAG>`), which is how the Helm chart sets them. Kubeflow's flag names are
//! accepted as aliases where the concept is the same.

use std::time::Duration;

use crate::scope::NamespaceScope;
use crate::submission::{NetworkPolicyMode, SubmissionOptions, UiOptions};

/// Smallest status byte budget accepted: room for the state, conditions, the driver's termination and
/// the counts whatever happens to the bounded lists.
pub const MIN_STATUS_BYTE_BUDGET: usize = 16 * 1024;

/// `spark-operator controller`: reconciles SparkApplications.
#[derive(Clone, Debug, clap::Args)]
pub struct ControllerArgs {
    /// Namespaces to watch, comma-separated; empty: all namespaces.
    #[arg(long, value_delimiter = ',')]
    pub namespaces: Vec<String>,

    /// Watch only namespaces with these labels (a label selector, e.g. `spark=enabled`); with
    /// --namespaces empty.
    #[arg(long, conflicts_with = "namespaces")]
    pub namespace_selector: Option<String>,

    /// Applications reconciled at the same time.
    #[arg(
        long,
        alias = "controller-threads",
        default_value_t = 32,
        value_parser = clap::value_parser!(u16).range(1..)
    )]
    pub concurrency: u16,

    /// Executors listed in status.recentExecutors (and Kubeflow's status.executorState) per application;
    /// counts always cover every executor. Kubeflow's --max-tracked-executor-per-app is accepted.
    #[arg(
        long,
        alias = "max-tracked-executor-per-app",
        default_value_t = spark_operator_api::status::MAX_RECENT_EXECUTORS
    )]
    pub max_tracked_executors: usize,

    /// Executor failures kept in status.recentExecutorFailures.
    #[arg(
        long,
        default_value_t = spark_operator_api::status::MAX_RECENT_EXECUTOR_FAILURES
    )]
    pub max_executor_failures: usize,

    /// Hard limit on the serialized size of one application's status, in bytes (etcd refuses requests
    /// over 1.5 MiB). The executor lists shrink to fit; counts never do.
    #[arg(
        long,
        default_value_t = 256 * 1024,
        value_parser = parse_budget
    )]
    pub status_byte_budget: usize,

    /// Seconds a driver may be stuck in ImagePullBackOff, ErrImagePull, CreateContainerConfigError,
    /// InvalidImageName or Unschedulable (no node could take it) before the attempt fails with that
    /// reason; 0: wait forever.
    #[arg(long, default_value_t = 300)]
    pub driver_start_timeout: u64,

    /// Seconds a driver may wait for capacity (unschedulable only for lack of cpu, memory or pods on nodes
    /// that would otherwise take it) before the attempt fails; 0: as long as it takes. Such a driver has
    /// the condition DriverScheduled=False, reason WaitingForCapacity, and is not subject to
    /// --driver-start-timeout.
    #[arg(long, default_value_t = 0)]
    pub driver_capacity_timeout: u64,

    /// Seconds executors of a running driver may wait for capacity before the application gets the
    /// condition ExecutorsStarved (pointing to gang scheduling); 0: never.
    #[arg(long, default_value_t = 600)]
    pub executor_starvation_threshold: u64,

    /// Enable batch schedulers (Volcano, YuniKorn, the kube-scheduler coscheduling plugin), as Kubeflow's
    /// flag. Off, an application naming one fails at once instead of waiting for a scheduler that is not there.
    #[arg(long, default_value_t = false, num_args = 0..=1, default_missing_value = "true", action = clap::ArgAction::Set)]
    pub enable_batch_scheduler: bool,

    /// kube-scheduler names running the coscheduling plugin that applications may name in
    /// spec.batchScheduler (comma-separated), as Kubeflow's flag.
    #[arg(long, value_delimiter = ',')]
    pub kube_scheduler_names: Vec<String>,

    /// The batch scheduler of applications that name none (with --enable-batch-scheduler), as Kubeflow's flag.
    #[arg(long)]
    pub default_batch_scheduler: Option<String>,

    /// Seconds after a submission during which a missing driver pod is put down to cache lag.
    #[arg(long, default_value_t = 10)]
    pub driver_pod_creation_grace_period: u64,

    /// Seconds to keep terminated applications without spec.timeToLiveSeconds; 0: forever.
    #[arg(long, alias = "default-time-to-live-seconds", default_value_t = 0)]
    pub default_ttl: u64,

    /// Put the driver-protection finalizer on driver pods. Switch it off only to measure what it
    /// protects against: a driver pod deleted the instant it finishes can then lose its exit.
    #[arg(
        long,
        default_value_t = true,
        action = clap::ArgAction::Set
    )]
    pub driver_finalizer: bool,

    /// Write the executor pod template with the application's executor settings at every submission, so
    /// executors are complete even where the webhook is off or fails open (see docs/executor-template.md).
    /// Switch it off only to measure what the webhook alone does.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub executor_template: bool,

    /// Seconds between reconciles of an application nothing happened to (a safety net for missed events).
    #[arg(long, default_value_t = 300)]
    pub resync_period: u64,

    /// The timestamp in the names of ScheduledSparkApplication runs (`<name>-<timestamp>`), as Kubeflow's flag.
    #[arg(long, value_enum, default_value_t = crate::scheduled::decide::Precision::Nanos)]
    pub scheduled_spark_application_timestamp_precision: crate::scheduled::decide::Precision,

    /// Name of the controller in Events (reportingController).
    #[arg(long, default_value = "spark-operator")]
    pub event_reporter: String,

    /// `SPARK_USER` of drivers without spec.proxyUser (the user spark-submit runs as in Kubeflow's image).
    #[arg(long, default_value = "spark")]
    pub spark_user: String,

    /// Create the NetworkPolicy Spark 4's spark-submit creates for each driver, or never.
    #[arg(
        long,
        value_enum,
        default_value_t = NetworkPolicyArg::AsSpark
    )]
    pub network_policy: NetworkPolicyArg,

    /// Make a Service for each application's Spark UI, `<app>-ui-svc`, and record it in
    /// status.driverInfo (Kubeflow's flag; a bare `--enable-ui-service` means true).
    #[arg(
        long,
        default_value_t = true,
        num_args = 0..=1,
        default_missing_value = "true",
        action = clap::ArgAction::Set
    )]
    pub enable_ui_service: bool,

    /// URL of each application's Spark UI Ingress, `<app>-ui-ingress`, with `{{$appName}}`,
    /// `{{$appNamespace}}` and `{{$appId}}` replaced (e.g. `{{$appName}}.spark.example.com` or
    /// `spark.example.com/{{$appNamespace}}/{{$appName}}`); empty: no Ingress. Needs --enable-ui-service.
    #[arg(long, default_value = "")]
    pub ingress_url_format: String,

    /// `spec.ingressClassName` of the Ingresses made (the UI's and spec.driverIngressOptions'); empty: unset.
    #[arg(long, default_value = "")]
    pub ingress_class_name: String,

    /// TLS of the Ingresses made, as JSON (`[{"hosts":["*.example.com"],"secretName":"example-secret"}]`),
    /// where the application's ingressTLS is empty.
    #[arg(long, default_value = "", value_parser = parse_ingress_tls)]
    pub ingress_tls: IngressTlsFlag,

    /// Annotations of the Ingresses made, as a JSON object (`{"cert-manager.io/cluster-issuer":
    /// "letsencrypt"}`), where the application's ingressAnnotations are empty.
    #[arg(long, default_value = "", value_parser = parse_ingress_annotations)]
    pub ingress_annotations: IngressAnnotationsFlag,

    /// Make the driver PodDisruptionBudget of applications that set spec.driverPodDisruptionBudget: true
    /// (and delete it when they end), as Kubeflow's flag; off: none is made or deleted.
    #[arg(
        long,
        default_value_t = false,
        num_args = 0..=1,
        default_missing_value = "true",
        action = clap::ArgAction::Set
    )]
    pub enable_driver_pdb: bool,

    /// `spark.master` of submitted applications; default: `k8s://` and the API server the controller
    /// itself uses (in a cluster: KUBERNETES_SERVICE_HOST and _PORT, as Kubeflow).
    #[arg(long)]
    pub spark_master_url: Option<String>,
}

/// `--network-policy` values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum NetworkPolicyArg {
    /// As spark-submit: for Spark 4 and later, unless excluded through Spark's feature steps.
    AsSpark,
    Never,
}

/// `--ingress-tls`: Ingress TLS entries.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct IngressTlsFlag(pub Vec<k8s_openapi::api::networking::v1::IngressTLS>);

/// `--ingress-annotations`: annotations.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IngressAnnotationsFlag(pub std::collections::BTreeMap<String, String>);

fn parse_ingress_tls(value: &str) -> Result<IngressTlsFlag, String> {
    if value.trim().is_empty() {
        return Ok(IngressTlsFlag::default());
    }
    serde_json::from_str(value).map(IngressTlsFlag).map_err(|e| {
        format!(
            "{value:?} is not a JSON list of Ingress TLS entries ({e}); e.g. '[{{\"hosts\":[\"*.example.com\"],\"secretName\":\"example-secret\"}}]'"
        )
    })
}

fn parse_ingress_annotations(value: &str) -> Result<IngressAnnotationsFlag, String> {
    if value.trim().is_empty() {
        return Ok(IngressAnnotationsFlag::default());
    }
    serde_json::from_str(value).map(IngressAnnotationsFlag).map_err(|e| {
        format!(
            "{value:?} is not a JSON object of string annotations ({e}); e.g. '{{\"cert-manager.io/cluster-issuer\":\"letsencrypt\"}}'"
        )
    })
}

/// A comma-separated list flag's entries, trimmed, without empty ones (`--x=` or `--x=a,,b`).
fn names(list: &[String]) -> Vec<String> {
    list.iter()
        .map(|n| n.trim().to_owned())
        .filter(|n| !n.is_empty())
        .collect()
}

fn parse_budget(value: &str) -> Result<usize, String> {
    let bytes: usize = value
        .trim()
        .parse()
        .map_err(|e| format!("{value:?} is not a number of bytes: {e}"))?;
    if bytes < MIN_STATUS_BYTE_BUDGET {
        return Err(format!(
            "{bytes} bytes is too small for a status; use at least {MIN_STATUS_BYTE_BUDGET}"
        ));
    }
    Ok(bytes)
}

/// Time limits of the state machine.
#[derive(Clone, Debug, PartialEq)]
pub struct Timing {
    /// How long a driver may stay stuck (image pull, unschedulable, config error); None: forever.
    pub driver_start_timeout: Option<Duration>,
    /// How long after a submission a missing driver pod is put down to a lagging cache.
    pub driver_pod_creation_grace: Duration,
    /// TTL of terminated applications without `spec.timeToLiveSeconds`; None: kept forever.
    pub default_ttl: Option<Duration>,
    /// How long past its deletion deadline a deleted driver pod may go without reporting an exit before
    /// it is recorded as deleted without one (its node is gone).
    pub deletion_slack: Duration,
    /// How long a driver may wait for capacity before the attempt fails; None: as long as it takes.
    pub capacity_timeout: Option<Duration>,
    /// How long executors of a running driver may wait for capacity before `ExecutorsStarved`; None: never.
    pub executor_starvation_threshold: Option<Duration>,
}

impl Default for Timing {
    fn default() -> Self {
        Self {
            driver_start_timeout: Some(Duration::from_secs(300)),
            driver_pod_creation_grace: Duration::from_secs(10),
            default_ttl: None,
            deletion_slack: Duration::from_secs(30),
            capacity_timeout: None,
            executor_starvation_threshold: Some(Duration::from_secs(600)),
        }
    }
}

impl ControllerArgs {
    /// The state machine's time limits.
    pub fn timing(&self) -> Timing {
        Timing {
            driver_start_timeout: (self.driver_start_timeout > 0)
                .then(|| Duration::from_secs(self.driver_start_timeout)),
            driver_pod_creation_grace: Duration::from_secs(self.driver_pod_creation_grace_period),
            default_ttl: (self.default_ttl > 0).then(|| Duration::from_secs(self.default_ttl)),
            capacity_timeout: (self.driver_capacity_timeout > 0)
                .then(|| Duration::from_secs(self.driver_capacity_timeout)),
            executor_starvation_threshold: (self.executor_starvation_threshold > 0)
                .then(|| Duration::from_secs(self.executor_starvation_threshold)),
            ..Timing::default()
        }
    }

    pub fn submission_options(&self) -> SubmissionOptions {
        SubmissionOptions {
            network_policy: match self.network_policy {
                NetworkPolicyArg::AsSpark => NetworkPolicyMode::AsSpark,
                NetworkPolicyArg::Never => NetworkPolicyMode::Never,
            },
            driver_finalizer: self.driver_finalizer,
            executor_template: self.executor_template,
            ui: UiOptions {
                enable_service: self.enable_ui_service,
                ingress_url_format: self.ingress_url_format.trim().to_owned(),
                ingress_class_name: self.ingress_class_name.trim().to_owned(),
                ingress_tls: self.ingress_tls.0.clone(),
                ingress_annotations: self.ingress_annotations.0.clone(),
            },
            driver_pdb: self.enable_driver_pdb,
        }
    }

    pub fn batch_settings(&self) -> crate::batch::BatchSettings {
        crate::batch::BatchSettings {
            enabled: self.enable_batch_scheduler,
            kube_scheduler_names: names(&self.kube_scheduler_names),
            default: self
                .default_batch_scheduler
                .as_deref()
                .map(str::trim)
                .filter(|d| !d.is_empty())
                .map(str::to_owned),
        }
    }

    pub fn namespace_scope(&self) -> NamespaceScope {
        let list = names(&self.namespaces);
        match (&self.namespace_selector, list.is_empty()) {
            (Some(selector), true) if !selector.trim().is_empty() => NamespaceScope::Selector(selector.clone()),
            (_, false) => NamespaceScope::List(list),
            _ => NamespaceScope::All,
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: ControllerArgs,
    }

    fn parse(args: &[&str]) -> Result<ControllerArgs, clap::Error> {
        let mut argv = vec!["controller"];
        argv.extend_from_slice(args);
        Cli::try_parse_from(argv).map(|c| c.args)
    }

    #[test]
    fn defaults_are_production_ready() {
        let args = parse(&[]).unwrap();
        assert_eq!(args.namespace_scope(), NamespaceScope::All);
        assert_eq!(args.status_byte_budget, 256 * 1024);
        assert!(args.driver_finalizer);
        assert_eq!(args.timing().driver_start_timeout, Some(Duration::from_secs(300)));
        assert_eq!(args.timing().default_ttl, None);
    }

    #[test]
    fn kubeflow_flag_names_are_accepted() {
        let args = parse(&[
            "--max-tracked-executor-per-app=1000",
            "--controller-threads=4",
            "--default-time-to-live-seconds=60",
        ])
        .unwrap();
        assert_eq!(args.max_tracked_executors, 1000);
        assert_eq!(args.concurrency, 4);
        assert_eq!(args.timing().default_ttl, Some(Duration::from_secs(60)));
    }

    #[test]
    fn namespaces_and_switches() {
        let args = parse(&["--namespaces", "a,b", "--driver-finalizer=false"]).unwrap();
        assert_eq!(
            args.namespace_scope(),
            NamespaceScope::List(vec!["a".into(), "b".into()])
        );
        assert!(!args.driver_finalizer);
        let args = parse(&["--namespace-selector", "spark=on"]).unwrap();
        assert_eq!(args.namespace_scope(), NamespaceScope::Selector("spark=on".into()));
        assert!(parse(&["--namespaces", "a", "--namespace-selector", "x=y"]).is_err());
    }

    #[test]
    fn ui_and_pdb_flags_are_kubeflows() {
        let defaults = parse(&[]).unwrap().submission_options();
        assert!(defaults.ui.enable_service);
        assert!(defaults.ui.ingress_url_format.is_empty());
        assert!(defaults.ui.ingress_tls.is_empty() && defaults.ui.ingress_annotations.is_empty());
        assert!(!defaults.driver_pdb);
        // As the Kubeflow chart passes them (`toJson` of its values).
        let options = parse(&[
            "--enable-ui-service=false",
            "--ingress-url-format={{$appName}}.example.com",
            "--ingress-class-name=nginx",
            r#"--ingress-tls=[{"hosts":["*.example.com"],"secretName":"example-secret"}]"#,
            r#"--ingress-annotations={"cert-manager.io/cluster-issuer":"letsencrypt"}"#,
            "--enable-driver-pdb=true",
        ])
        .unwrap()
        .submission_options();
        assert!(!options.ui.enable_service);
        assert_eq!(options.ui.ingress_url_format, "{{$appName}}.example.com");
        assert_eq!(options.ui.ingress_class_name, "nginx");
        assert_eq!(options.ui.ingress_tls[0].secret_name.as_deref(), Some("example-secret"));
        assert_eq!(
            options.ui.ingress_annotations["cert-manager.io/cluster-issuer"],
            "letsencrypt"
        );
        assert!(options.driver_pdb);
        // Go's bare boolean form.
        assert!(parse(&["--enable-driver-pdb"]).unwrap().enable_driver_pdb);
        let err = parse(&["--ingress-annotations=[1]"]).unwrap_err().to_string();
        assert!(err.contains("not a JSON object"), "{err}");
        assert!(parse(&["--ingress-tls={}"]).is_err());
    }

    #[test]
    fn bad_values_are_explained() {
        let err = parse(&["--status-byte-budget=100"]).unwrap_err().to_string();
        assert!(err.contains("at least 16384"), "{err}");
        assert!(parse(&["--concurrency=0"]).is_err());
    }
}
