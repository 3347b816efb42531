//! The driver pod, as spark-submit builds it (the driver template, then Spark's driver feature steps in
//! their order, then the conf volume `Client` adds), then decorated with the SparkApplication's pod
//! settings, owned by the SparkApplication and protected by the driver finalizer.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    ConfigMapVolumeSource, Container, ContainerPort, EmptyDirVolumeSource, EnvVar, EnvVarSource, KeyToPath,
    LocalObjectReference, ObjectFieldSelector, Pod, PodSpec, ResourceRequirements, SecurityContext, Volume,
    VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use spark_operator_api::decoration::{DecorationError, decorate_pod};
use spark_operator_api::labels::{DRIVER_CONTAINER_NAME, FINALIZER_DRIVER_PROTECTION, SparkRole};
use spark_operator_api::quantity::{SparkMemory, SparkMemoryUnit};

use super::driver_conf::{DriverConf, DriverConfError, parse_factor};
use super::spark_conf::{EXECUTOR_POD_TEMPLATE_FILE, ResourceKind, SPARK_LOCAL_DIR_PREFIX};
use super::volumes::{Mounted, conf_volumes, secret_env, secret_volumes};

/// Where the driver finds `spark.properties` (`SPARK_CONF_DIR` inside Spark's images).
pub const SPARK_CONF_DIR: &str = "/opt/spark/conf";
pub const SPARK_PROPERTIES: &str = "spark.properties";
/// The executor pod template's volume, mount directory and ConfigMap key (`PodTemplateConfigMapStep`).
pub const POD_TEMPLATE_VOLUME: &str = "pod-template-volume";
pub const POD_TEMPLATE_DIR: &str = "/opt/spark/pod-template";
pub const POD_TEMPLATE_KEY: &str = "podspec-configmap-key";
/// `spark.kubernetes.hadoop.configMapName` is mounted here (`HadoopConfDriverFeatureStep`).
const HADOOP_CONF_VOLUME: &str = "hadoop-properties";
const HADOOP_CONF_DIR: &str = "/opt/hadoop/conf";
/// The largest memory a driver container gets, in MiB: Spark keeps memory in an `Int` of MiB.
const MAX_CONTAINER_MEMORY_MIB: u64 = i32::MAX as u64;
/// Spark's floor for the memory overhead, in MiB.
const MIN_MEMORY_OVERHEAD_MIB: u64 = 384;

/// Why the driver pod cannot be built.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DriverPodError {
    #[error(transparent)]
    Conf(#[from] DriverConfError),
    #[error("spec.sparkConf[{key}]: {value:?} is not a memory size: {reason}")]
    InvalidMemory { key: String, value: String, reason: String },
    #[error(
        "spec.sparkConf[{key}]: a driver resource needs its vendor (e.g. nvidia.com) in spark.driver.resource.<name>.vendor"
    )]
    MissingResourceVendor { key: String },
    #[error(
        "spec.sparkConf[{key}]: the driver's memory plus its overhead does not fit a container limit: lower the memory or the overhead factor"
    )]
    MemoryTooLarge { key: String },
    #[error("the driver pod cannot be decorated")]
    Decoration(#[from] DecorationError),
}

/// Builds the decorated driver pod.
pub fn build(conf: &DriverConf<'_>) -> Result<Pod, DriverPodError> {
    let (mut pod, mut container) = from_template(conf);
    basic_step(conf, &mut pod, &mut container)?;
    let spec = pod.spec.get_or_insert_default();
    if let Some(account) = conf.get("spark.kubernetes.authenticate.driver.serviceAccountName") {
        spec.service_account = Some(account.to_owned());
        spec.service_account_name = Some(account.to_owned());
    }
    for mounted in secret_volumes(conf) {
        attach(spec, &mut container, mounted);
    }
    container.env.get_or_insert_default().extend(secret_env(conf)?);
    for mounted in conf_volumes(conf)? {
        attach(spec, &mut container, mounted);
    }
    command_step(conf, &mut container);
    hadoop_conf_step(conf, spec, &mut container);
    if let Some(config_map) = conf.executor_template_config_map_name() {
        attach(spec, &mut container, pod_template_volume(&config_map));
    }
    local_dirs_step(conf, spec, &mut container);
    conf_volume_step(conf, spec, &mut container);
    // Spark takes the Spark container out of the template's list and appends it after the others. A
    // template that names it otherwise gets it first instead, where everything that looks for the
    // Spark container without its name (decoration, the webhook, tools) looks.
    if container.name == DRIVER_CONTAINER_NAME {
        spec.containers.push(container);
    } else {
        spec.containers.insert(0, container);
    }

    let mut pod = decorate_pod(&pod, conf.app, SparkRole::Driver)?;
    pod.metadata.namespace = Some(conf.namespace.clone());
    // A template's finalizers are not copied: nothing would ever remove them, and the driver pod could
    // never be deleted. The operator's own finalizer is the operator's to set.
    pod.metadata.finalizers = Some(if conf.input.options.driver_finalizer {
        vec![FINALIZER_DRIVER_PROTECTION.to_owned()]
    } else {
        Vec::new()
    });
    Ok(pod)
}

/// The starting pod: the driver template without its Spark container (the one named
/// `spark-kubernetes-driver`, else the first), and that container (`KubernetesUtils.selectSparkContainer`).
fn from_template(conf: &DriverConf<'_>) -> (Pod, Container) {
    let Some(template) = conf.app.spec.driver.pod.template.clone() else {
        return (Pod::default(), Container::default());
    };
    let mut spec = template.spec.unwrap_or_default();
    let index = spec
        .containers
        .iter()
        .position(|c| c.name == DRIVER_CONTAINER_NAME)
        .or(if spec.containers.is_empty() { None } else { Some(0) });
    let container = index.map(|i| spec.containers.remove(i)).unwrap_or_default();
    let pod = Pod {
        metadata: template.metadata.unwrap_or_default(),
        spec: Some(spec),
        ..Default::default()
    };
    (pod, container)
}

fn env(name: &str, value: &str) -> EnvVar {
    EnvVar {
        name: name.to_owned(),
        value: Some(value.to_owned()),
        ..Default::default()
    }
}

pub(super) fn memory_mib(conf: &DriverConf<'_>, key: &str, default: &str) -> Result<u64, DriverPodError> {
    let value = conf.get(key).unwrap_or(default);
    SparkMemory::parse(value, SparkMemoryUnit::MiB)
        .map(SparkMemory::mebibytes)
        .map_err(|error| DriverPodError::InvalidMemory {
            key: key.to_owned(),
            value: value.to_owned(),
            reason: error.to_string(),
        })
}

/// Memory plus overhead, in MiB (`BasicDriverFeatureStep`): the overhead is `spark.driver.memoryOverhead`,
/// else the driver's (or the default) factor times the memory, at least `spark.driver.minMemoryOverhead`.
fn driver_memory_mib(conf: &DriverConf<'_>) -> Result<u64, DriverPodError> {
    let memory = memory_mib(conf, "spark.driver.memory", "1g")?;
    let overhead = overhead_mib(conf, "spark.driver", memory)?;
    memory
        .checked_add(overhead)
        .filter(|total| *total <= MAX_CONTAINER_MEMORY_MIB)
        .ok_or_else(|| DriverPodError::MemoryTooLarge {
            key: "spark.driver.memory".to_owned(),
        })
}

/// The memory overhead of a role (`spark.driver` or `spark.executor`) with `memory` MiB, as Spark's basic
/// feature steps compute it: `<role>.memoryOverhead`, else the role's (or the default) factor times the
/// memory, at least `<role>.minMemoryOverhead`.
pub(super) fn overhead_mib(conf: &DriverConf<'_>, role: &str, memory: u64) -> Result<u64, DriverPodError> {
    let key = |name: &str| format!("{role}.{name}");
    if conf.get(&key("memoryOverhead")).is_some() {
        return memory_mib(conf, &key("memoryOverhead"), "0");
    }
    let factor = match conf.get(&key("memoryOverheadFactor")) {
        Some(value) => parse_factor(&key("memoryOverheadFactor"), value)?,
        None => super::driver_conf::default_overhead_factor(&conf.conf, conf.main.kind)?,
    };
    let minimum = match conf.get(&key("minMemoryOverhead")) {
        Some(_) => memory_mib(conf, &key("minMemoryOverhead"), "384m")?,
        None => MIN_MEMORY_OVERHEAD_MIB,
    };
    // Spark truncates (`.toInt`). A float-to-int `as` saturates, so a huge factor gives u64::MAX here, refused
    // by the caller, never a wrapped small number.
    Ok(((factor * memory as f64) as u64).max(minimum))
}

/// `spark.driver.resource.<name>.amount` with `.vendor` → a `<vendor>/<name>` limit.
fn resource_limits(conf: &DriverConf<'_>) -> Result<BTreeMap<String, Quantity>, DriverPodError> {
    let mut limits = BTreeMap::new();
    for (rest, amount) in conf.with_prefix("spark.driver.resource.") {
        let Some(name) = rest.strip_suffix(".amount") else {
            continue;
        };
        let vendor = conf
            .get(&format!("spark.driver.resource.{name}.vendor"))
            .ok_or_else(|| DriverPodError::MissingResourceVendor {
                key: format!("spark.driver.resource.{name}.amount"),
            })?;
        limits.insert(format!("{vendor}/{name}"), Quantity(amount.to_owned()));
    }
    Ok(limits)
}

/// `BasicDriverFeatureStep`: image, ports, Spark's env, resources, labels, annotations, node selector,
/// pull secrets, scheduler.
fn basic_step(conf: &DriverConf<'_>, pod: &mut Pod, container: &mut Container) -> Result<(), DriverPodError> {
    if container.name.is_empty() {
        container.name = DRIVER_CONTAINER_NAME.to_owned();
    }
    container.image = Some(conf.image.clone());
    container.image_pull_policy = Some(
        conf.get("spark.kubernetes.container.image.pullPolicy")
            .unwrap_or("IfNotPresent")
            .to_owned(),
    );
    let ports = container.ports.get_or_insert_default();
    for (name, port, _) in conf.ports.named() {
        ports.push(ContainerPort {
            name: Some(name.to_owned()),
            container_port: port,
            protocol: Some("TCP".to_owned()),
            ..Default::default()
        });
    }
    let user = conf.main.proxy_user.as_deref().unwrap_or(conf.input.spark_user);
    let env_list = container.env.get_or_insert_default();
    env_list.push(env("SPARK_USER", user));
    env_list.push(env("SPARK_APPLICATION_ID", &conf.input.ids.app_id));
    for (name, value) in conf.with_prefix("spark.kubernetes.driverEnv.") {
        env_list.push(env(name, value));
    }
    env_list.push(EnvVar {
        name: "SPARK_DRIVER_BIND_ADDRESS".to_owned(),
        value_from: Some(EnvVarSource {
            field_ref: Some(ObjectFieldSelector {
                api_version: Some("v1".to_owned()),
                field_path: "status.podIP".to_owned(),
            }),
            ..Default::default()
        }),
        ..Default::default()
    });

    let cores = conf.get("spark.driver.cores").unwrap_or("1");
    let cpu_request = conf.get("spark.kubernetes.driver.request.cores").unwrap_or(cores);
    let memory = Quantity(format!("{}Mi", driver_memory_mib(conf)?));
    let resources = container.resources.get_or_insert_with(ResourceRequirements::default);
    let requests = resources.requests.get_or_insert_default();
    requests.insert("cpu".to_owned(), Quantity(cpu_request.to_owned()));
    requests.insert("memory".to_owned(), memory.clone());
    let limits = resources.limits.get_or_insert_default();
    if let Some(limit) = conf.get("spark.kubernetes.driver.limit.cores") {
        limits.insert("cpu".to_owned(), Quantity(limit.to_owned()));
    }
    limits.insert("memory".to_owned(), memory);
    limits.extend(resource_limits(conf)?);
    if conf.features.no_privilege_escalation {
        let allow = conf
            .get("spark.kubernetes.driver.securityContext.allowPrivilegeEscalation")
            .or_else(|| conf.get("spark.kubernetes.securityContext.allowPrivilegeEscalation"))
            .is_some_and(|v| v.trim().eq_ignore_ascii_case("true"));
        container
            .security_context
            .get_or_insert_with(SecurityContext::default)
            .allow_privilege_escalation = Some(allow);
    }

    let metadata = &mut pod.metadata;
    metadata.name = Some(conf.driver_pod_name.clone());
    metadata.labels.get_or_insert_default().extend(conf.labels.clone());
    let annotations: BTreeMap<String, String> = conf
        .with_prefix("spark.kubernetes.driver.annotation.")
        .map(|(key, value)| (key.to_owned(), conf.substitute_ids(value)))
        .collect();
    if !annotations.is_empty() {
        metadata.annotations.get_or_insert_default().extend(annotations);
    }
    let spec = pod.spec.get_or_insert_with(PodSpec::default);
    spec.restart_policy = Some("Never".to_owned());
    let selector: BTreeMap<String, String> = conf
        .with_prefix("spark.kubernetes.node.selector.")
        .chain(conf.with_prefix("spark.kubernetes.driver.node.selector."))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
    if !selector.is_empty() {
        spec.node_selector.get_or_insert_default().extend(selector);
    }
    let secrets = conf
        .get("spark.kubernetes.container.image.pullSecrets")
        .unwrap_or_default();
    for secret in secrets.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        spec.image_pull_secrets
            .get_or_insert_default()
            .push(LocalObjectReference {
                name: secret.to_owned(),
            });
    }
    if let Some(scheduler) = conf
        .get("spark.kubernetes.driver.scheduler.name")
        .or_else(|| conf.get("spark.kubernetes.scheduler.name"))
    {
        spec.scheduler_name = Some(scheduler.to_owned());
    }
    Ok(())
}

fn attach(spec: &mut PodSpec, container: &mut Container, mounted: Mounted) {
    spec.volumes.get_or_insert_default().push(mounted.volume);
    container.volume_mounts.get_or_insert_default().push(mounted.mount);
}

/// `DriverCommandFeatureStep`: the entrypoint's arguments, and Python's interpreters.
fn command_step(conf: &DriverConf<'_>, container: &mut Container) {
    let main = &conf.main;
    let mut args = vec!["driver".to_owned()];
    if let Some(user) = &main.proxy_user {
        args.extend(["--proxy-user".to_owned(), user.clone()]);
    }
    args.extend([
        "--properties-file".to_owned(),
        format!("{SPARK_CONF_DIR}/{SPARK_PROPERTIES}"),
        "--class".to_owned(),
        main.main_class.clone(),
        main.file.clone(),
    ]);
    args.extend(main.arguments.iter().cloned());
    container.args = Some(args);
    if main.kind == ResourceKind::Python {
        let python = conf.get("spark.pyspark.python");
        let driver_python = conf.get("spark.pyspark.driver.python").or(python);
        let env_list = container.env.get_or_insert_default();
        for (name, value) in [("PYSPARK_PYTHON", python), ("PYSPARK_DRIVER_PYTHON", driver_python)] {
            if let Some(value) = value {
                env_list.push(env(name, value));
            }
        }
    }
}

/// `HadoopConfDriverFeatureStep` for `spark.kubernetes.hadoop.configMapName` (the submitter's own
/// `HADOOP_CONF_DIR` does not exist here).
fn hadoop_conf_step(conf: &DriverConf<'_>, spec: &mut PodSpec, container: &mut Container) {
    let Some(config_map) = conf.get("spark.kubernetes.hadoop.configMapName") else {
        return;
    };
    attach(
        spec,
        container,
        Mounted {
            volume: Volume {
                name: HADOOP_CONF_VOLUME.to_owned(),
                config_map: Some(ConfigMapVolumeSource {
                    name: config_map.to_owned(),
                    ..Default::default()
                }),
                ..Default::default()
            },
            mount: VolumeMount {
                name: HADOOP_CONF_VOLUME.to_owned(),
                mount_path: HADOOP_CONF_DIR.to_owned(),
                ..Default::default()
            },
        },
    );
    container
        .env
        .get_or_insert_default()
        .push(env("HADOOP_CONF_DIR", HADOOP_CONF_DIR));
}

fn pod_template_volume(config_map: &str) -> Mounted {
    Mounted {
        volume: Volume {
            name: POD_TEMPLATE_VOLUME.to_owned(),
            config_map: Some(ConfigMapVolumeSource {
                name: config_map.to_owned(),
                items: Some(vec![KeyToPath {
                    key: POD_TEMPLATE_KEY.to_owned(),
                    path: EXECUTOR_POD_TEMPLATE_FILE
                        .rsplit('/')
                        .next()
                        .unwrap_or(EXECUTOR_POD_TEMPLATE_FILE)
                        .to_owned(),
                    mode: None,
                }]),
                ..Default::default()
            }),
            ..Default::default()
        },
        mount: VolumeMount {
            name: POD_TEMPLATE_VOLUME.to_owned(),
            mount_path: POD_TEMPLATE_DIR.to_owned(),
            ..Default::default()
        },
    }
}

/// `LocalDirsFeatureStep`: the mounts of `spark-local-dir-*` volumes are the local directories; without
/// any, one emptyDir per `spark.local.dir` entry (default `/var/data/spark-<uuid>`).
fn local_dirs_step(conf: &DriverConf<'_>, spec: &mut PodSpec, container: &mut Container) {
    let local_volumes: Vec<&str> = spec
        .volumes
        .iter()
        .flatten()
        .filter(|v| v.name.starts_with(SPARK_LOCAL_DIR_PREFIX))
        .map(|v| v.name.as_str())
        .collect();
    let mut dirs: Vec<String> = container
        .volume_mounts
        .iter()
        .flatten()
        .filter(|m| local_volumes.contains(&m.name.as_str()))
        .map(|m| m.mount_path.clone())
        .collect();
    if dirs.is_empty() {
        let default = format!("/var/data/spark-{}", conf.input.ids.local_dir_uuid);
        dirs = conf
            .get("spark.local.dir")
            .unwrap_or(&default)
            .split(',')
            .map(str::to_owned)
            .collect();
        let tmpfs = conf
            .get("spark.kubernetes.local.dirs.tmpfs")
            .is_some_and(|v| v.trim().eq_ignore_ascii_case("true"));
        for (index, dir) in dirs.iter().enumerate() {
            let name = format!("{SPARK_LOCAL_DIR_PREFIX}{}", index + 1);
            let volume = Volume {
                name: name.clone(),
                empty_dir: Some(EmptyDirVolumeSource {
                    medium: tmpfs.then(|| "Memory".to_owned()),
                    size_limit: None,
                }),
                ..Default::default()
            };
            let mount = VolumeMount {
                name,
                mount_path: dir.clone(),
                ..Default::default()
            };
            attach(spec, container, Mounted { volume, mount });
        }
    }
    container
        .env
        .get_or_insert_default()
        .push(env("SPARK_LOCAL_DIRS", &dirs.join(",")));
}

/// `Client`: `spark.properties` mounted from its ConfigMap, and `SPARK_CONF_DIR` pointing at it.
fn conf_volume_step(conf: &DriverConf<'_>, spec: &mut PodSpec, container: &mut Container) {
    container
        .env
        .get_or_insert_default()
        .push(env("SPARK_CONF_DIR", SPARK_CONF_DIR));
    let volume = Volume {
        name: conf.conf_volume_name.to_owned(),
        config_map: Some(ConfigMapVolumeSource {
            name: conf.config_map_name.clone(),
            items: Some(vec![KeyToPath {
                key: SPARK_PROPERTIES.to_owned(),
                path: SPARK_PROPERTIES.to_owned(),
                mode: Some(0o644),
            }]),
            ..Default::default()
        }),
        ..Default::default()
    };
    let mount = VolumeMount {
        name: conf.conf_volume_name.to_owned(),
        mount_path: SPARK_CONF_DIR.to_owned(),
        ..Default::default()
    };
    attach(spec, container, Mounted { volume, mount });
}

#[cfg(test)]
#[path = "driver_pod_tests.rs"]
mod tests;
