//! The spec → Spark configuration mapping: what Kubeflow passes to `spark-submit` (`kubeflow-study.md`
//! §3.2, `submission.go`), and what `spark-submit` itself derives from its options (`SparkSubmit`:
//! `spark.app.name`, `spark.jars`, `spark.app.submitTime`, ...). The driver's own additions (ids, host,
//! ports) are the feature steps' business, in [`super::driver_conf`].
//!
//! Kubeflow passes `--conf` flags in a fixed order and the last value of a key wins; the same order is
//! kept here, so a typed field beats the same key in `sparkConf`, as in Kubeflow. Differences:
//! - the operator's own labels are written last, so no user label can overwrite them (Kubeflow lets
//!   `metadata.labels` do so, which breaks its own webhook lookup);
//! - the role-specific image keys are only written when they differ from `spec.image` (same effect);
//! - fractional memory sizes (`1.5g`), which Spark rejects, are written as whole units (`1536m`);
//! - `emptyDir.medium` of local-dir volumes is passed on (Kubeflow drops it);
//! - `kueue.x-k8s.io/*` application labels are not copied to pods (Kueue manages them itself);
//! - `--packages` are passed as `spark.jars.packages` for the driver to resolve, since nothing is
//!   downloaded at submission.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Volume, VolumeMount};
use spark_operator_api::SparkApplication;
use spark_operator_api::application::{DeployMode, SparkApplicationType};
use spark_operator_api::application::{SecretType, SparkPodSpec};
use spark_operator_api::field::FieldPath;
use spark_operator_api::labels::{
    LABEL_APP_NAME, LABEL_LAUNCHED_BY_SPARK_OPERATOR, LABEL_SUBMISSION_ID, LABEL_VALUE_TRUE,
};
use spark_operator_api::naming::{SPARK_DRIVER_POD_NAME_KEY, driver_pod_name};
use spark_operator_api::quantity::{SparkMemory, SparkMemoryUnit};

use super::SubmissionInput;

/// Where Spark mounts the executor pod template in the driver (`PodTemplateConfigMapStep`).
pub const EXECUTOR_POD_TEMPLATE_FILE: &str = "/opt/spark/pod-template/pod-spec-template.yml";
/// Volumes Spark mounts as local directories; the only `spec.volumes` passed as Spark confs.
pub const SPARK_LOCAL_DIR_PREFIX: &str = "spark-local-dir-";
/// Main classes Spark runs for non-JVM applications.
pub const PYTHON_RUNNER: &str = "org.apache.spark.deploy.PythonRunner";
pub const R_RUNNER: &str = "org.apache.spark.deploy.RRunner";
/// The JMX exporter configuration in the operator's Prometheus ConfigMap, as mounted.
pub const PROMETHEUS_CONFIG_FILE: &str = "/etc/metrics/conf/prometheus.yaml";

/// Why the spec cannot be turned into a Spark configuration.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SparkConfError {
    #[error("metadata.{field}: the SparkApplication has no {field}; submit the stored object")]
    MissingMetadata { field: &'static str },
    #[error(
        "spec.mode: client mode runs the driver inside the submitter; the operator submits natively and supports cluster mode only: remove mode or set it to cluster"
    )]
    ClientMode,
    #[error("spec.mainClass: a {kind} application needs its main class (e.g. org.apache.spark.examples.SparkPi)")]
    MissingMainClass { kind: &'static str },
    #[error("spec.mainApplicationFile: the application's jar, Python or R file is required")]
    MissingMainApplicationFile,
    #[error("{path}: no volume named {name:?} in spec.volumes: add it there or remove the mount")]
    LocalDirVolumeNotFound { path: FieldPath, name: String },
    #[error(
        "{path}: local-dir volume {name:?} must be an emptyDir, hostPath, nfs or persistentVolumeClaim volume (Spark mounts only these)"
    )]
    UnsupportedLocalDirVolume { path: FieldPath, name: String },
    #[error(transparent)]
    WebUi(#[from] super::web_ui::WebUiError),
}

/// What kind of program the driver runs (`spark.kubernetes.resource.type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResourceKind {
    Java,
    Python,
    R,
}

impl ResourceKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Java => "java",
            Self::Python => "python",
            Self::R => "r",
        }
    }
}

/// The program the driver runs, and as whom.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MainResource {
    pub kind: ResourceKind,
    /// `--class`: the user's main class, or Spark's runner for Python and R.
    pub main_class: String,
    pub file: String,
    pub arguments: Vec<String>,
    /// `--proxy-user`.
    pub proxy_user: Option<String>,
}

/// What spark-submit would be told, resolved: its configuration and the program to run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SubmitConf {
    pub conf: BTreeMap<String, String>,
    pub main: MainResource,
}

/// Builds the configuration spark-submit would hold for `input.app`, before the driver's own additions.
pub fn build(input: &SubmissionInput<'_>) -> Result<SubmitConf, SparkConfError> {
    let app = input.app;
    let spec = &app.spec;
    let name = app
        .metadata
        .name
        .as_deref()
        .ok_or(SparkConfError::MissingMetadata { field: "name" })?;
    let namespace = app
        .metadata
        .namespace
        .as_deref()
        .ok_or(SparkConfError::MissingMetadata { field: "namespace" })?;
    if spec.mode == Some(DeployMode::Client) {
        return Err(SparkConfError::ClientMode);
    }
    let main = main_resource(app)?;

    let mut conf = Conf::default();
    // Kubeflow's option order: the last --conf for a key wins.
    conf.set("spark.kubernetes.namespace", namespace);
    conf.set_opt("spark.kubernetes.container.image", spec.image.as_deref());
    conf.set_opt(
        "spark.kubernetes.container.image.pullPolicy",
        spec.image_pull_policy.as_deref(),
    );
    if !spec.image_pull_secrets.is_empty() {
        conf.set(
            "spark.kubernetes.container.image.pullSecrets",
            &spec.image_pull_secrets.join(","),
        );
    }
    if let Some(version) = spec.python_version {
        let version = match version {
            spark_operator_api::application::PythonVersion::Two => "2",
            spark_operator_api::application::PythonVersion::Three => "3",
        };
        conf.set("spark.kubernetes.pyspark.pythonVersion", version);
    }
    conf.set_opt(
        "spark.kubernetes.memoryOverheadFactor",
        spec.memory_overhead_factor.as_deref(),
    );
    conf.set("spark.kubernetes.submission.waitAppCompletion", "false");
    for (key, value) in &spec.spark_conf {
        if key != SPARK_DRIVER_POD_NAME_KEY {
            conf.set(key, value);
        }
    }
    // Kubeflow's configWebUI: a UI Ingress with a path serves the UI under it, unless the spec says otherwise.
    if let Some(base) = super::web_ui::proxy_base(&super::web_ui_input(input))? {
        for (key, value) in [
            (super::web_ui::SPARK_UI_PROXY_BASE_KEY, base.as_str()),
            (super::web_ui::SPARK_UI_PROXY_REDIRECT_URI_KEY, "/"),
        ] {
            if !spec.spark_conf.contains_key(key) {
                conf.set(key, value);
            }
        }
    }
    for (key, value) in &spec.hadoop_conf {
        conf.set(&format!("spark.hadoop.{key}"), value);
    }
    metrics(app, &mut conf);
    conf.set(
        SPARK_DRIVER_POD_NAME_KEY,
        &driver_pod_name(name, spec.driver.pod_name.as_deref(), &spec.spark_conf),
    );
    role_conf(app, Role::Driver, &mut conf);
    role_conf(app, Role::Executor, &mut conf);
    local_dir_volumes(app, Role::Driver, &mut conf)?;
    local_dir_volumes(app, Role::Executor, &mut conf)?;
    if super::writes_executor_template(input) {
        conf.set("spark.kubernetes.executor.podTemplateFile", EXECUTOR_POD_TEMPLATE_FILE);
        conf.set(
            "spark.kubernetes.executor.podTemplateContainerName",
            spark_operator_api::labels::EXECUTOR_CONTAINER_NAME,
        );
    }
    for (key, value) in &spec.node_selector {
        conf.set(&format!("spark.kubernetes.node.selector.{key}"), value);
    }
    dynamic_allocation(app, &mut conf);
    operator_labels(input, name, &mut conf);
    // spark-submit's command-line options win over the same keys given as --conf.
    conf.set("spark.master", input.spark_master_url);
    conf.set("spark.submit.deployMode", "cluster");
    conf.set("spark.app.name", name);
    dependencies(app, &main, &mut conf);
    conf.set("spark.app.submitTime", &input.submit_time.as_millisecond().to_string());
    Ok(SubmitConf { conf: conf.0, main })
}

#[derive(Default)]
struct Conf(BTreeMap<String, String>);

impl Conf {
    fn set(&mut self, key: &str, value: &str) {
        self.0.insert(key.to_owned(), value.to_owned());
    }

    fn set_opt(&mut self, key: &str, value: Option<&str>) {
        if let Some(value) = value.filter(|v| !v.is_empty()) {
            self.set(key, value);
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Role {
    Driver,
    Executor,
}

impl Role {
    fn field(self) -> &'static str {
        match self {
            Self::Driver => "driver",
            Self::Executor => "executor",
        }
    }

    fn pod(self, app: &SparkApplication) -> &SparkPodSpec {
        match self {
            Self::Driver => &app.spec.driver.pod,
            Self::Executor => &app.spec.executor.pod,
        }
    }

    /// Prefix of the role's env confs: Spark names them differently for the driver and executors.
    fn env_prefix(self) -> &'static str {
        match self {
            Self::Driver => "spark.kubernetes.driverEnv.",
            Self::Executor => "spark.executorEnv.",
        }
    }
}

fn main_resource(app: &SparkApplication) -> Result<MainResource, SparkConfError> {
    let spec = &app.spec;
    let file = spec
        .main_application_file
        .clone()
        .filter(|f| !f.is_empty())
        .ok_or(SparkConfError::MissingMainApplicationFile)?;
    let (kind, main_class) = match spec.r#type {
        SparkApplicationType::Python => (ResourceKind::Python, PYTHON_RUNNER.to_owned()),
        SparkApplicationType::R => (ResourceKind::R, R_RUNNER.to_owned()),
        jvm @ (SparkApplicationType::Java | SparkApplicationType::Scala) => {
            let class = spec
                .main_class
                .clone()
                .filter(|c| !c.is_empty())
                .ok_or(SparkConfError::MissingMainClass {
                    kind: if jvm == SparkApplicationType::Java {
                        "Java"
                    } else {
                        "Scala"
                    },
                })?;
            (ResourceKind::Java, class)
        }
    };
    Ok(MainResource {
        kind,
        main_class,
        file,
        arguments: spec.arguments.clone(),
        proxy_user: spec.proxy_user.clone().filter(|u| !u.is_empty()),
    })
}

/// Spark rejects fractional sizes; Kubeflow's users write them. Whole sizes stay as written.
fn spark_memory(value: &str) -> String {
    if value.contains('.')
        && let Ok(memory) = SparkMemory::parse(value, SparkMemoryUnit::MiB)
    {
        return memory.to_spark_string();
    }
    value.to_owned()
}

fn role_conf(app: &SparkApplication, role: Role, conf: &mut Conf) {
    let spec = &app.spec;
    let pod = role.pod(app);
    let r = role.field();
    let (spark_prefix, k8s_prefix) = (format!("spark.{r}"), format!("spark.kubernetes.{r}"));
    if let Role::Executor = role
        && let Some(instances) = spec.executor.instances
    {
        conf.set("spark.executor.instances", &instances.to_string());
    }
    if pod.image.as_deref().is_some_and(|i| !i.is_empty()) && pod.image != spec.image {
        conf.set_opt(&format!("{k8s_prefix}.container.image"), pod.image.as_deref());
    }
    if let Some(cores) = pod.cores {
        conf.set(&format!("{spark_prefix}.cores"), &cores.to_string());
    }
    let core_request = match role {
        Role::Driver => spec.driver.core_request.as_deref(),
        Role::Executor => spec.executor.core_request.as_deref(),
    };
    conf.set_opt(&format!("{k8s_prefix}.request.cores"), core_request);
    conf.set_opt(&format!("{k8s_prefix}.limit.cores"), pod.core_limit.as_deref());
    if let Some(memory) = pod.memory.as_deref() {
        conf.set(&format!("{spark_prefix}.memory"), &spark_memory(memory));
    }
    if let Some(overhead) = pod.memory_overhead.as_deref() {
        conf.set(&format!("{spark_prefix}.memoryOverhead"), &spark_memory(overhead));
    }
    conf.set_opt(
        &format!("spark.kubernetes.authenticate.{r}.serviceAccountName"),
        pod.service_account.as_deref(),
    );
    conf.set_opt(
        &format!("{spark_prefix}.extraJavaOptions"),
        java_options(app, role).as_deref(),
    );
    match role {
        Role::Driver => {
            conf.set_opt(
                "spark.kubernetes.driver.master",
                spec.driver.kubernetes_master.as_deref(),
            );
            for (key, value) in &spec.driver.service_labels {
                conf.set(&format!("spark.kubernetes.driver.service.label.{key}"), value);
            }
            for (key, value) in &spec.driver.service_annotations {
                conf.set(&format!("spark.kubernetes.driver.service.annotation.{key}"), value);
            }
        }
        Role::Executor => {
            if let Some(delete) = spec.executor.delete_on_termination {
                conf.set("spark.kubernetes.executor.deleteOnTermination", &delete.to_string());
            }
        }
    }
    let app_labels = app.metadata.labels.iter().flatten();
    for (key, value) in app_labels.filter(|(key, _)| !key.starts_with("kueue.x-k8s.io/")) {
        conf.set(&format!("{k8s_prefix}.label.{key}"), value);
    }
    for (key, value) in &pod.labels {
        conf.set(&format!("{k8s_prefix}.label.{key}"), value);
    }
    for (key, value) in &pod.annotations {
        conf.set(&format!("{k8s_prefix}.annotation.{key}"), value);
    }
    for (env, secret) in &pod.env_secret_key_refs {
        conf.set(
            &format!("{k8s_prefix}.secretKeyRef.{env}"),
            &format!("{}:{}", secret.name, secret.key),
        );
    }
    for (key, value) in &pod.env_vars {
        conf.set(&format!("{}{key}", role.env_prefix()), value);
    }
    for secret in &pod.secrets {
        conf.set(&format!("{k8s_prefix}.secrets.{}", secret.name), &secret.path);
        let path = secret.path.trim_end_matches('/');
        match secret.secret_type {
            SecretType::GcpServiceAccount => conf.set(
                &format!("{}GOOGLE_APPLICATION_CREDENTIALS", role.env_prefix()),
                &format!("{path}/key.json"),
            ),
            SecretType::HadoopDelegationToken => conf.set(
                &format!("{}HADOOP_TOKEN_FILE_LOCATION", role.env_prefix()),
                &format!("{path}/hadoop.token"),
            ),
            SecretType::Generic => {}
        }
    }
}

/// `spec.volumes` entries named `spark-local-dir-*` that the role mounts become Spark volume confs.
fn local_dir_volumes(app: &SparkApplication, role: Role, conf: &mut Conf) -> Result<(), SparkConfError> {
    let r = role.field();
    let mounts_path = FieldPath::new("spec").child(r).child("volumeMounts");
    for (index, mount) in role.pod(app).volume_mounts.iter().enumerate() {
        if !mount.name.starts_with(SPARK_LOCAL_DIR_PREFIX) {
            continue;
        }
        let (volume_index, volume) = app
            .spec
            .volumes
            .iter()
            .enumerate()
            .find(|(_, v)| v.name == mount.name)
            .ok_or_else(|| SparkConfError::LocalDirVolumeNotFound {
                path: mounts_path.index(index).child("name"),
                name: mount.name.clone(),
            })?;
        let (kind, options) = volume_options(volume).ok_or_else(|| SparkConfError::UnsupportedLocalDirVolume {
            path: FieldPath::new("spec").child("volumes").index(volume_index),
            name: volume.name.clone(),
        })?;
        let prefix = format!("spark.kubernetes.{r}.volumes.{kind}.{}", volume.name);
        mount_conf(&prefix, mount, conf);
        for (option, value) in options {
            conf.set(&format!("{prefix}.options.{option}"), &value);
        }
    }
    Ok(())
}

fn mount_conf(prefix: &str, mount: &VolumeMount, conf: &mut Conf) {
    conf.set_opt(&format!("{prefix}.mount.path"), Some(mount.mount_path.as_str()));
    conf.set_opt(&format!("{prefix}.mount.subPath"), mount.sub_path.as_deref());
    if mount.read_only == Some(true) {
        conf.set(&format!("{prefix}.mount.readOnly"), "true");
    }
}

/// Spark's volume type and options of a volume, for the four types Spark can mount.
fn volume_options(volume: &Volume) -> Option<(&'static str, Vec<(&'static str, String)>)> {
    let mut options = Vec::new();
    if let Some(empty_dir) = &volume.empty_dir {
        if let Some(medium) = empty_dir.medium.as_deref().filter(|m| !m.is_empty()) {
            options.push(("medium", medium.to_owned()));
        }
        if let Some(size) = &empty_dir.size_limit {
            options.push(("sizeLimit", size.0.clone()));
        }
        return Some(("emptyDir", options));
    }
    if let Some(host_path) = &volume.host_path {
        options.push(("path", host_path.path.clone()));
        if let Some(kind) = host_path.type_.as_deref().filter(|t| !t.is_empty()) {
            options.push(("type", kind.to_owned()));
        }
        return Some(("hostPath", options));
    }
    if let Some(nfs) = &volume.nfs {
        options.push(("path", nfs.path.clone()));
        options.push(("server", nfs.server.clone()));
        if nfs.read_only == Some(true) {
            options.push(("readOnly", "true".to_owned()));
        }
        return Some(("nfs", options));
    }
    if let Some(claim) = &volume.persistent_volume_claim {
        options.push(("claimName", claim.claim_name.clone()));
        if claim.read_only == Some(true) {
            options.push(("readOnly", "true".to_owned()));
        }
        return Some(("persistentVolumeClaim", options));
    }
    None
}

fn dynamic_allocation(app: &SparkApplication, conf: &mut Conf) {
    let Some(allocation) = app.spec.dynamic_allocation.as_ref().filter(|d| d.enabled) else {
        return;
    };
    conf.set("spark.dynamicAllocation.enabled", "true");
    let counts = [
        ("initialExecutors", allocation.initial_executors),
        ("minExecutors", allocation.min_executors),
        ("maxExecutors", allocation.max_executors),
    ];
    for (key, value) in counts {
        if let Some(value) = value {
            conf.set(&format!("spark.dynamicAllocation.{key}"), &value.to_string());
        }
    }
    let tracking = allocation.shuffle_tracking_enabled.unwrap_or(true);
    conf.set("spark.dynamicAllocation.shuffleTracking.enabled", &tracking.to_string());
    if let Some(timeout) = allocation.shuffle_tracking_timeout {
        conf.set("spark.dynamicAllocation.shuffleTracking.timeout", &timeout.to_string());
    }
}

/// Kubeflow's monitoring set-up before submission (`monitoring_config.go`): where Spark finds its
/// metrics configuration. The scrape annotations and the ConfigMap mount are pod settings (see
/// `spark_operator_api::decoration`); the exporter agent joins the JVM options in [`java_options`].
fn metrics(app: &SparkApplication, conf: &mut Conf) {
    let Some(monitoring) = app.spec.monitoring.as_ref().filter(|m| m.prometheus.is_some()) else {
        return;
    };
    let name = app.metadata.name.as_deref().unwrap_or_default();
    let namespace = app.metadata.namespace.as_deref().unwrap_or_default();
    conf.set("spark.metrics.namespace", &format!("{namespace}.{name}"));
    let metrics_conf = monitoring
        .metrics_properties_file
        .as_deref()
        .unwrap_or(spark_operator_api::application::DEFAULT_METRICS_PROPERTIES_FILE);
    conf.set("spark.metrics.conf", metrics_conf);
}

/// The role's JVM options, with the Prometheus JMX exporter agent appended when its metrics are exposed.
fn java_options(app: &SparkApplication, role: Role) -> Option<String> {
    let spec = &app.spec;
    let (options, exposed) = match role {
        Role::Driver => (
            spec.driver.java_options.as_deref(),
            spec.monitoring.as_ref().is_some_and(|m| m.expose_driver_metrics),
        ),
        Role::Executor => (
            spec.executor.java_options.as_deref(),
            spec.monitoring.as_ref().is_some_and(|m| m.expose_executor_metrics),
        ),
    };
    let prometheus = spec.monitoring.as_ref().and_then(|m| m.prometheus.as_ref());
    let agent = prometheus.filter(|_| exposed).map(|p| {
        let config = p.config_file.as_deref().unwrap_or(PROMETHEUS_CONFIG_FILE);
        format!("-javaagent:{}={}:{config}", p.jmx_exporter_jar, p.port_or_default())
    });
    match (options.filter(|o| !o.is_empty()), agent) {
        (Some(options), Some(agent)) => Some(format!("{options} {agent}")),
        (Some(options), None) => Some(options.to_owned()),
        (None, agent) => agent,
    }
}

/// Labels that tie pods to their application and submission. Written after every user label.
fn operator_labels(input: &SubmissionInput<'_>, name: &str, conf: &mut Conf) {
    for role in ["driver", "executor"] {
        let prefix = format!("spark.kubernetes.{role}.label.");
        conf.set(&format!("{prefix}{LABEL_APP_NAME}"), name);
        conf.set(&format!("{prefix}{LABEL_LAUNCHED_BY_SPARK_OPERATOR}"), LABEL_VALUE_TRUE);
        conf.set(&format!("{prefix}{LABEL_SUBMISSION_ID}"), input.submission_id);
    }
}

/// `--jars`, `--files`, ... as spark-submit stores them. A list given in `deps` wins over the same key
/// in `sparkConf` (an option beats a --conf); the application's jar joins `spark.jars` for JVM
/// applications, and `spark.submit.pyFiles` is always written.
fn dependencies(app: &SparkApplication, main: &MainResource, conf: &mut Conf) {
    let deps = &app.spec.deps;
    let lists = [
        ("spark.jars", &deps.jars),
        ("spark.files", &deps.files),
        ("spark.archives", &deps.archives),
        ("spark.submit.pyFiles", &deps.py_files),
        ("spark.jars.packages", &deps.packages),
        ("spark.jars.excludes", &deps.exclude_packages),
        ("spark.jars.repositories", &deps.repositories),
    ];
    for (key, list) in lists {
        let mut values: Vec<String> = if list.is_empty() {
            conf.0
                .get(key)
                .map(|v| {
                    v.split(',')
                        .map(str::trim)
                        .filter(|s| !s.is_empty())
                        .map(str::to_owned)
                        .collect()
                })
                .unwrap_or_default()
        } else {
            list.clone()
        };
        if key == "spark.jars" && main.kind == ResourceKind::Java {
            values.push(main.file.clone());
        }
        if !values.is_empty() || key == "spark.submit.pyFiles" {
            conf.set(key, &values.join(","));
        }
    }
}

#[cfg(test)]
#[path = "spark_conf_tests.rs"]
mod tests;
