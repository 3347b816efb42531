//! Native submission: the objects Spark's `spark-submit` creates for a SparkApplication (driver pod,
//! `spark.properties` ConfigMap, executor pod-template ConfigMap, headless driver Service, Spark 4's
//! NetworkPolicy), built by pure functions in microseconds instead of a 2.5 s JVM.
//!
//! Everything random or time-dependent is an input ([`SubmissionInput`]: ids, submission time), so the
//! same input always gives the same objects; the caller draws the ids ([`SubmissionIds::from_random`]).
//! The driver pod comes out fully decorated (`spark_operator_api::decoration`), owned by the
//! SparkApplication, with the driver-protection finalizer (unless [`SubmissionOptions`] turns it off)
//! and the operator's labels: exactly what is created. Only the driver pod's uid is added afterwards.
//!
//! Create the objects as spark-submit does: the driver pod first, then, owned by it
//! ([`Submission::set_driver_owner`] with the created pod's uid), the Service, the NetworkPolicy, the
//! executor pod-template ConfigMap and the `spark.properties` ConfigMap. The kubelet retries the
//! ConfigMap mounts until they exist. If one of them cannot be created, spark-submit deletes the driver
//! pod (propagation Background) and fails; see `docs/submission.md`.
//!
//! - [`spark_conf`]: the spec → Spark configuration mapping (Kubeflow's spark-submit arguments).
//! - [`driver_conf`]: what spark-submit resolves from it: names, labels, ports, `spark.properties`.
//! - [`driver_pod`], [`config_map`], [`service`], [`network_policy`]: one object each.
//! - [`prometheus`]: the application's `<app>-prom-conf` ConfigMap (Kubeflow's addition, not Spark's).
//! - [`web_ui`]: the application's UI Service and Ingress and its `driverIngressOptions` Services and
//!   Ingresses (Kubeflow's), their URLs read by [`ingress_url`]; [`driver_pdb`]: the driver's
//!   PodDisruptionBudget (Kubeflow's).
//! - [`properties`]: Java's properties-file format.

pub mod config_map;
pub mod driver_conf;
pub mod driver_pdb;
pub mod driver_pod;
pub mod ingress_url;
pub mod network_policy;
pub mod pod_group;
pub mod prometheus;
pub mod properties;
pub mod service;
pub mod spark_conf;
mod volumes;
pub mod web_ui;

use k8s_openapi::api::core::v1::{ConfigMap, Pod, Service};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use spark_operator_api::SparkApplication;
use spark_operator_api::decoration::application_owner_reference;
use spark_operator_api::naming::spark_unique_id;

pub use driver_conf::{DriverConf, DriverConfError, SparkFeatures};
pub use driver_pod::DriverPodError;
pub use spark_conf::SparkConfError;
pub use web_ui::{DriverAccess, UiOptions, WebUiError};

/// The random parts of one submission, drawn by the caller.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SubmissionIds {
    /// Spark's application id, `spark-<32 hex>` (`spark-app-selector`, `spark.app.id`).
    pub app_id: String,
    /// Spark's unique id in the resource name prefix (`<app>-<id>`: Service, NetworkPolicy, pod-template ConfigMap).
    pub prefix_id: String,
    /// Spark's unique id for the Service name when the prefix is too long (`spark-<id>-driver-svc`).
    pub service_id: String,
    /// Spark's unique id in the `spark.properties` ConfigMap name (`spark-drv-<id>-conf-map`).
    pub config_map_id: String,
    /// The UUID of the default local directory, `/var/data/spark-<uuid>`.
    pub local_dir_uuid: String,
}

impl SubmissionIds {
    /// The ids from 16 + 16 random bytes (two UUIDs' worth) and 9 more for Spark's three unique ids, the
    /// way Spark makes them (`KubernetesConf.getKubernetesAppId`, `KubernetesUtils.uniqueID`).
    pub fn from_random(app: [u8; 16], local_dir: [u8; 16], unique: [[u8; 3]; 3], unix_millis: u64) -> Self {
        let hex = |bytes: &[u8]| bytes.iter().map(|b| format!("{b:02x}")).collect::<String>();
        let uuid = |b: [u8; 16]| {
            let h = hex(&b);
            format!("{}-{}-{}-{}-{}", &h[..8], &h[8..12], &h[12..16], &h[16..20], &h[20..])
        };
        Self {
            app_id: format!("spark-{}", hex(&app)),
            prefix_id: spark_unique_id(unique[0], unix_millis),
            service_id: spark_unique_id(unique[1], unix_millis),
            config_map_id: spark_unique_id(unique[2], unix_millis),
            local_dir_uuid: uuid(local_dir),
        }
    }
}

/// Whether to create the NetworkPolicy Spark 4 creates (ingress to executors only from the
/// application's own pods).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum NetworkPolicyMode {
    /// As spark-submit: for Spark >= 4.0, unless the application excludes Spark's
    /// `NetworkPolicyFeatureStep` (`spark.kubernetes.driver.pod.excludedFeatureSteps`).
    #[default]
    AsSpark,
    /// Never (clusters where policies are managed elsewhere, or RBAC does not allow them).
    Never,
}

/// Operator-wide choices about submission. Every choice that shapes the objects is here, so the
/// builders' output is exactly what is created.
#[derive(Clone, Debug, PartialEq)]
pub struct SubmissionOptions {
    pub network_policy: NetworkPolicyMode,
    /// Whether driver pods carry the driver-protection finalizer (`--driver-finalizer`; on by default,
    /// off only to measure what it protects against).
    pub driver_finalizer: bool,
    /// Whether every submission writes the executor pod template with the application's executor
    /// settings already applied (on by default), so executors are configured even when the webhook is
    /// off or fails open. Off, only a `spec.executor.template` is written, as spark-submit would; tests
    /// turn it off to show what the webhook alone does.
    pub executor_template: bool,
    /// The Spark UI Service and Ingress (Kubeflow's `--enable-ui-service`, `--ingress-*`).
    pub ui: UiOptions,
    /// Kubeflow's `--enable-driver-pdb`: manage the driver PodDisruptionBudget that
    /// `spec.driverPodDisruptionBudget` asks for.
    pub driver_pdb: bool,
}

impl Default for SubmissionOptions {
    fn default() -> Self {
        Self {
            network_policy: NetworkPolicyMode::default(),
            driver_finalizer: true,
            executor_template: true,
            ui: UiOptions::default(),
            driver_pdb: false,
        }
    }
}

/// Everything one submission depends on. Nothing else is read: no clock, no randomness, no I/O.
#[derive(Clone, Debug)]
pub struct SubmissionInput<'a> {
    /// The stored SparkApplication (with namespace and uid), defaults applied.
    pub app: &'a SparkApplication,
    /// The submission id (a UUID), recorded in status before anything is created.
    pub submission_id: &'a str,
    pub ids: &'a SubmissionIds,
    /// When the submission happened (`spark.app.submitTime`, the properties file's date).
    pub submit_time: jiff::Timestamp,
    /// `spark.master`: `k8s://https://<API server>:<port>`, as Kubeflow builds it from
    /// `KUBERNETES_SERVICE_HOST` and `KUBERNETES_SERVICE_PORT`.
    pub spark_master_url: &'a str,
    /// `SPARK_USER` of the driver when there is no proxy user: the user spark-submit would run as
    /// (`spark` in Kubeflow's image).
    pub spark_user: &'a str,
    pub options: &'a SubmissionOptions,
}

/// Why a SparkApplication could not be turned into objects.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SubmissionError {
    #[error(transparent)]
    SparkConf(#[from] SparkConfError),
    #[error(transparent)]
    DriverConf(#[from] DriverConfError),
    #[error(transparent)]
    DriverPod(#[from] DriverPodError),
    #[error("spec.executor.template: cannot be written to the pod-template ConfigMap: {0}")]
    ExecutorTemplate(String),
    #[error("the executor pod template cannot be decorated")]
    ExecutorDecoration(#[source] spark_operator_api::decoration::DecorationError),
    #[error(transparent)]
    WebUi(#[from] WebUiError),
}

/// The objects of one submission.
#[derive(Clone, Debug, PartialEq)]
pub struct Submission {
    pub driver_pod: Pod,
    /// The `spark.properties` ConfigMap the driver mounts.
    pub config_map: ConfigMap,
    /// The executor pod template (`spec.executor.template`, or a minimal pod) with the application's
    /// executor settings applied; absent only when the spec has no template and
    /// [`SubmissionOptions::executor_template`] is off, or for Spark < 3.0 (no pod templates).
    pub executor_pod_template: Option<ConfigMap>,
    /// The headless driver Service.
    pub service: Service,
    pub network_policy: Option<NetworkPolicy>,
    /// The Prometheus exporter's `<app>-prom-conf` ConfigMap, when monitoring asks for it. Owned by
    /// the application (not the driver): applied before the driver pod, and kept across reruns.
    pub prometheus_config_map: Option<ConfigMap>,
    /// The batch scheduler's PodGroup (Volcano, coscheduling), created before the driver pod and owned
    /// by the application.
    pub pod_group: Option<pod_group::PodGroup>,
    /// The UI Service and Ingress and the `driverIngressOptions` Services and Ingresses: owned by the
    /// application, applied before the driver pod, kept across reruns.
    pub driver_access: DriverAccess,
    /// The driver's PodDisruptionBudget: owned by the application, applied (or deleted) before the
    /// driver pod.
    pub driver_pdb: driver_pdb::DriverPdb,
}

impl Submission {
    /// Makes the created driver pod the controller owner of the other objects, as Spark does, so that
    /// they go when the driver pod goes.
    pub fn set_driver_owner(&mut self, driver_uid: &str) {
        let owner = OwnerReference {
            api_version: "v1".to_owned(),
            kind: "Pod".to_owned(),
            name: self.driver_pod.metadata.name.clone().unwrap_or_default(),
            uid: driver_uid.to_owned(),
            controller: Some(true),
            block_owner_deletion: None,
        };
        let mut metas: Vec<&mut ObjectMeta> = vec![&mut self.config_map.metadata, &mut self.service.metadata];
        metas.extend(self.executor_pod_template.as_mut().map(|c| &mut c.metadata));
        metas.extend(self.network_policy.as_mut().map(|n| &mut n.metadata));
        for meta in metas {
            meta.owner_references = Some(vec![owner.clone()]);
        }
    }
}

/// Whose a pod found under the driver pod's name is (spark-submit's `scala-pi-pod-exists` case: its
/// create gets 409 and it fails; the controller decides instead).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ExistingDriverPod {
    /// The driver of this very submission (created before a restart or a leader change): adopt it.
    ThisSubmission,
    /// A driver of the same application from another submission (or from a deleted application of the
    /// same name): delete it before submitting again.
    EarlierSubmission { submission_id: Option<String> },
    /// Not this application's: submitting would fail; the name is taken.
    Unrelated,
}

/// Classifies a pod that already has the driver pod's name, by the operator's labels.
///
/// A pod is this application's only if it carries both the launched-by label and the application's
/// name. The launched-by label is what makes a pod the operator's everywhere else (the pod watch, the
/// finalizer release, `cleanup`), so a pod without it is one the controller would never see again:
/// adopting it would follow a driver whose events never arrive, and deleting it would delete a pod
/// someone else made (an `app-name` label alone is easy to copy onto one's own pod).
pub fn classify_existing_driver_pod(pod: &Pod, app: &SparkApplication, submission_id: &str) -> ExistingDriverPod {
    use spark_operator_api::labels::{
        LABEL_APP_NAME, LABEL_LAUNCHED_BY_SPARK_OPERATOR, LABEL_SUBMISSION_ID, LABEL_VALUE_TRUE,
    };
    let labels = pod.metadata.labels.as_ref();
    let label = |key: &str| labels.and_then(|l| l.get(key)).map(String::as_str);
    let launched_by_us = label(LABEL_LAUNCHED_BY_SPARK_OPERATOR) == Some(LABEL_VALUE_TRUE);
    let same_app = label(LABEL_APP_NAME).is_some() && label(LABEL_APP_NAME) == app.metadata.name.as_deref();
    if !launched_by_us || !same_app {
        return ExistingDriverPod::Unrelated;
    }
    match label(LABEL_SUBMISSION_ID) {
        Some(id) if id == submission_id => ExistingDriverPod::ThisSubmission,
        other => ExistingDriverPod::EarlierSubmission {
            submission_id: other.map(str::to_owned),
        },
    }
}

/// The SparkApplication as the controlling owner of an object it makes directly (the driver pod, the
/// Prometheus ConfigMap): the object goes with the application, and foreground deletion of the
/// application waits for it. The same reference decoration gives the driver pod; `None` for an
/// application that is not stored yet (no uid).
pub fn application_owner(app: &SparkApplication) -> Option<OwnerReference> {
    let name = app.metadata.name.as_deref().filter(|n| !n.is_empty())?;
    let uid = app.metadata.uid.as_deref().filter(|u| !u.is_empty())?;
    Some(application_owner_reference(name, uid))
}

/// Whether the submission writes an executor pod template: always when the spec has one; otherwise
/// when [`SubmissionOptions::executor_template`] is on and Spark reads pod templates (3.0 and later).
pub fn writes_executor_template(input: &SubmissionInput<'_>) -> bool {
    let spec = &input.app.spec;
    spec.executor.pod.template.is_some()
        || (input.options.executor_template
            && spark_operator_api::spark_version::SparkVersion::parse(&spec.spark_version).is_some_and(|v| {
                v >= spark_operator_api::spark_version::SparkVersion {
                    major: 3,
                    minor: 0,
                    patch: 0,
                }
            }))
}

/// The UI builders' input for a submission.
pub fn web_ui_input<'a>(input: &SubmissionInput<'a>) -> web_ui::WebUiInput<'a> {
    web_ui::WebUiInput {
        app: input.app,
        submission_id: input.submission_id,
        app_id: &input.ids.app_id,
        options: &input.options.ui,
    }
}

/// Builds every object of a submission.
pub fn build_submission(input: &SubmissionInput<'_>) -> Result<Submission, SubmissionError> {
    let submit = spark_conf::build(input)?;
    let driver_access = web_ui::build(&web_ui_input(input))?;
    let conf = DriverConf::resolve(input, submit)?;
    let mut driver_pod = driver_pod::build(&conf)?;
    if let Some(task_groups) = pod_group::yunikorn_task_groups(&conf, &driver_pod)? {
        driver_pod
            .metadata
            .annotations
            .get_or_insert_default()
            .entry(spark_operator_api::batch_scheduler::ANNOTATION_YUNIKORN_TASK_GROUPS.to_owned())
            .or_insert(task_groups);
    }
    Ok(Submission {
        pod_group: pod_group::build(&conf, &driver_pod)?,
        driver_pod,
        config_map: config_map::spark_properties(&conf),
        executor_pod_template: config_map::executor_pod_template(&conf)?,
        service: service::build(&conf),
        network_policy: network_policy::build(&conf),
        prometheus_config_map: prometheus::config_map(input.app),
        driver_access,
        driver_pdb: driver_pdb::plan(input.app, input.options.driver_pdb),
    })
}
