//! Volumes and their mounts in the Spark container: Hadoop and Spark configuration ConfigMaps, the
//! `configMaps` list, `spec.volumes` mounted by `volumeMounts`, and the Prometheus exporter's ConfigMap.

use k8s_openapi::api::core::v1::{
    ConfigMapVolumeSource, Container, ContainerPort, EnvVar, PodSpec, Volume, VolumeMount,
};

use super::containers::{put_env, put_port};
use super::merge;
use super::{DecorationError, RoleSettings};
use crate::field::FieldPath;
use crate::labels::SparkRole;
use crate::naming::{MAX_LABEL_LENGTH, prometheus_config_map_name};
use crate::validation::dns1123_subdomain;

/// Volume of `spec.hadoopConfigMap`.
pub const HADOOP_CONFIG_MAP_VOLUME: &str = "hadoop-configmap-volume";
/// Mount path of `spec.hadoopConfigMap`, also `HADOOP_CONF_DIR`.
pub const HADOOP_CONF_DIR: &str = "/etc/hadoop/conf";
/// Volume of `spec.sparkConfigMap`.
pub const SPARK_CONFIG_MAP_VOLUME: &str = "spark-configmap-volume";
/// Mount path of `spec.sparkConfigMap`, also `SPARK_CONF_DIR`.
pub const SPARK_CONF_DIR: &str = "/etc/spark/conf";
/// Mount path of the Prometheus exporter's ConfigMap.
pub const PROMETHEUS_CONF_DIR: &str = "/etc/metrics/conf";
/// Volumes Spark mounts as local directories itself (through spark.kubernetes.*.volumes confs).
pub const SPARK_LOCAL_DIR_PREFIX: &str = "spark-local-dir-";

const VOLUME_SUFFIX: &str = "-vol";

/// The volume name of a mounted ConfigMap: Kubeflow's `<name>-vol` when that is a valid volume name (a
/// DNS-1123 label). ConfigMap names may hold dots and be up to 253 characters, which volume names may
/// not: those are lower-cased, dots and other characters become `-`, and the name is cut short with the
/// first 8 hex digits of the MD5 of the ConfigMap's name, so two long names never share a volume.
pub fn config_map_volume_name(config_map: &str) -> String {
    let preferred = format!("{config_map}{VOLUME_SUFFIX}");
    if !preferred.contains('.') && dns1123_subdomain(&preferred).is_ok() {
        return preferred;
    }
    let mut sanitized = String::with_capacity(config_map.len());
    for c in config_map.to_ascii_lowercase().chars() {
        let c = if c.is_ascii_lowercase() || c.is_ascii_digit() {
            c
        } else {
            '-'
        };
        if !(c == '-' && (sanitized.is_empty() || sanitized.ends_with('-'))) {
            sanitized.push(c);
        }
    }
    let hash = format!("{:x}", md5::compute(config_map.as_bytes()));
    let keep = MAX_LABEL_LENGTH - VOLUME_SUFFIX.len() - 9;
    let cut: String = sanitized.chars().take(keep).collect();
    let cut = cut.trim_end_matches('-');
    if cut.is_empty() {
        format!("cm-{}{VOLUME_SUFFIX}", &hash[..8])
    } else {
        format!("{cut}-{}{VOLUME_SUFFIX}", &hash[..8])
    }
}

/// Adds a volume to the pod; a different volume of the same name is a conflict.
fn put_volume(spec: &mut PodSpec, volume: &Volume, path: &FieldPath) -> Result<(), DecorationError> {
    let volumes = spec.volumes.get_or_insert_default();
    merge::insert_or_conflict(volumes, volume, |existing| existing.name == volume.name)
        .map(|_| ())
        .map_err(|_| DecorationError::VolumeConflict {
            path: path.clone(),
            name: volume.name.clone(),
        })
}

/// Adds a mount to the container, keyed by mount path (Kubernetes rejects two mounts at one path): a
/// mount of the same volume there is replaced by ours, a mount of another volume there is a conflict.
fn put_mount(container: &mut Container, mount: &VolumeMount, path: &FieldPath) -> Result<(), DecorationError> {
    let mounts = container.volume_mounts.get_or_insert_default();
    match mounts.iter_mut().find(|m| m.mount_path == mount.mount_path) {
        Some(existing) if merge::covers(existing, mount) => Ok(()),
        Some(existing) if existing.name == mount.name => {
            *existing = mount.clone();
            Ok(())
        }
        Some(existing) => Err(DecorationError::MountPathConflict {
            path: path.clone(),
            mount_path: mount.mount_path.clone(),
            existing: existing.name.clone(),
        }),
        None => {
            mounts.push(mount.clone());
            Ok(())
        }
    }
}

fn config_map_volume(volume_name: &str, config_map: &str) -> Volume {
    Volume {
        name: volume_name.to_owned(),
        config_map: Some(ConfigMapVolumeSource {
            name: config_map.to_owned(),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn read_only_mount(volume_name: &str, mount_path: &str) -> VolumeMount {
    VolumeMount {
        name: volume_name.to_owned(),
        mount_path: mount_path.to_owned(),
        read_only: Some(true),
        ..Default::default()
    }
}

/// Mounts a ConfigMap read-only at `mount_path` in the Spark container.
fn mount_config_map(
    spec: &mut PodSpec,
    spark: usize,
    config_map: &str,
    volume_name: &str,
    mount_path: &str,
    path: &FieldPath,
) -> Result<(), DecorationError> {
    put_volume(spec, &config_map_volume(volume_name, config_map), path)?;
    put_mount(
        &mut spec.containers[spark],
        &read_only_mount(volume_name, mount_path),
        path,
    )
}

/// A configuration directory from a ConfigMap, with the environment variable that points Spark or
/// Hadoop at it.
fn add_conf_dir(
    spec: &mut PodSpec,
    spark: usize,
    config_map: Option<&str>,
    (volume_name, mount_path, env_name): (&str, &str, &str),
    path: FieldPath,
) -> Result<(), DecorationError> {
    let Some(config_map) = config_map else {
        return Ok(());
    };
    mount_config_map(spec, spark, config_map, volume_name, mount_path, &path)?;
    let var = EnvVar {
        name: env_name.to_owned(),
        value: Some(mount_path.to_owned()),
        ..Default::default()
    };
    put_env(&mut spec.containers[spark], &var);
    Ok(())
}

pub(super) fn add_hadoop_config_map(
    spec: &mut PodSpec,
    spark: usize,
    settings: &RoleSettings<'_>,
) -> Result<(), DecorationError> {
    add_conf_dir(
        spec,
        spark,
        settings.app.spec.hadoop_config_map.as_deref(),
        (HADOOP_CONFIG_MAP_VOLUME, HADOOP_CONF_DIR, "HADOOP_CONF_DIR"),
        FieldPath::new("spec").child("hadoopConfigMap"),
    )
}

pub(super) fn add_spark_config_map(
    spec: &mut PodSpec,
    spark: usize,
    settings: &RoleSettings<'_>,
) -> Result<(), DecorationError> {
    add_conf_dir(
        spec,
        spark,
        settings.app.spec.spark_config_map.as_deref(),
        (SPARK_CONFIG_MAP_VOLUME, SPARK_CONF_DIR, "SPARK_CONF_DIR"),
        FieldPath::new("spec").child("sparkConfigMap"),
    )
}

pub(super) fn add_config_maps(
    spec: &mut PodSpec,
    spark: usize,
    settings: &RoleSettings<'_>,
) -> Result<(), DecorationError> {
    for (index, config_map) in settings.pod.config_maps.iter().enumerate() {
        let volume_name = config_map_volume_name(&config_map.name);
        let path = settings.path.child("configMaps").index(index);
        mount_config_map(spec, spark, &config_map.name, &volume_name, &config_map.path, &path)?;
    }
    Ok(())
}

/// Mounts `spec.volumes` entries named by the role's `volumeMounts`. Local-dir volumes are Spark's (they
/// travel as spark.kubernetes.*.volumes confs). A mount of a volume that only the pod (its template)
/// defines is still mounted; Kubeflow drops it. A mount of a volume defined nowhere is left out, as in
/// Kubeflow; validation warns about it.
pub(super) fn add_volumes(
    spec: &mut PodSpec,
    spark: usize,
    settings: &RoleSettings<'_>,
) -> Result<(), DecorationError> {
    let app_volumes = &settings.app.spec.volumes;
    for (index, mount) in settings.pod.volume_mounts.iter().enumerate() {
        if mount.name.starts_with(SPARK_LOCAL_DIR_PREFIX) {
            continue;
        }
        let path = settings.path.child("volumeMounts").index(index);
        if let Some((volume_index, volume)) = app_volumes.iter().enumerate().find(|(_, v)| v.name == mount.name) {
            let volume_path = FieldPath::new("spec").child("volumes").index(volume_index);
            put_volume(spec, volume, &volume_path)?;
        } else if !spec.volumes.iter().flatten().any(|v| v.name == mount.name) {
            continue;
        }
        put_mount(&mut spec.containers[spark], mount, &path)?;
    }
    Ok(())
}

/// True when Prometheus monitoring is on and exposed for this role.
pub(super) fn prometheus_exposed(settings: &RoleSettings<'_>) -> bool {
    let Some(monitoring) = &settings.app.spec.monitoring else {
        return false;
    };
    monitoring.prometheus.is_some()
        && match settings.role {
            SparkRole::Driver => monitoring.expose_driver_metrics,
            SparkRole::Executor => monitoring.expose_executor_metrics,
        }
}

/// The exporter's port, and its ConfigMap when the operator creates one (unless both the metrics
/// properties and the exporter configuration are files in the image). Kubeflow skips the port too in
/// that case; it is added here whenever metrics are exposed, since the exporter listens on it anyway.
pub(super) fn add_prometheus(
    spec: &mut PodSpec,
    spark: usize,
    settings: &RoleSettings<'_>,
) -> Result<(), DecorationError> {
    if !prometheus_exposed(settings) {
        return Ok(());
    }
    let Some(monitoring) = &settings.app.spec.monitoring else {
        return Ok(());
    };
    let Some(prometheus) = &monitoring.prometheus else {
        return Ok(());
    };
    let path = FieldPath::new("spec").child("monitoring").child("prometheus");
    let in_image = monitoring.metrics_properties_file.is_some() && prometheus.config_file.is_some();
    if !in_image {
        let config_map = prometheus_config_map_name(settings.app.metadata.name.as_deref().unwrap_or_default());
        let volume_name = config_map_volume_name(&config_map);
        mount_config_map(spec, spark, &config_map, &volume_name, PROMETHEUS_CONF_DIR, &path)?;
    }
    let port = ContainerPort {
        name: Some(prometheus.port_name_or_default().to_owned()),
        container_port: prometheus.port_or_default(),
        protocol: Some("TCP".to_owned()),
        ..Default::default()
    };
    put_port(&mut spec.containers[spark], &port, &path.child("port"))
}

#[cfg(test)]
mod tests {
    use super::merge::Put;
    use super::*;

    #[test]
    fn plain_config_map_names_keep_kubeflows_volume_name() {
        assert_eq!(config_map_volume_name("app-conf"), "app-conf-vol");
    }

    #[test]
    fn invalid_volume_names_are_sanitized_and_hashed() {
        let dotted = config_map_volume_name("my.app.conf");
        assert!(dotted.starts_with("my-app-conf-"), "{dotted}");
        assert!(dotted.ends_with("-vol"));
        assert!(dns1123_subdomain(&dotted).is_ok() && !dotted.contains('.'));

        let long = "a".repeat(70);
        let other = format!("{}b", "a".repeat(69));
        let (a, b) = (config_map_volume_name(&long), config_map_volume_name(&other));
        assert!(a.len() <= MAX_LABEL_LENGTH && b.len() <= MAX_LABEL_LENGTH);
        assert_ne!(
            a, b,
            "names that share their first 50 characters still get distinct volumes"
        );
        // 60 characters plus "-vol" is too long for a volume name although the ConfigMap name is fine.
        assert!(config_map_volume_name(&"c".repeat(60)).len() <= MAX_LABEL_LENGTH);
        assert!(config_map_volume_name("...").starts_with("cm-"));
    }

    #[test]
    fn put_is_reported_as_unchanged_for_identical_items() {
        let mut spec = PodSpec::default();
        let volume = config_map_volume("v", "cm");
        put_volume(&mut spec, &volume, &FieldPath::new("x")).unwrap();
        put_volume(&mut spec, &volume, &FieldPath::new("x")).unwrap();
        assert_eq!(spec.volumes.as_ref().map(Vec::len), Some(1));
        let mut list = spec.volumes.unwrap_or_default();
        assert_eq!(merge::upsert(&mut list, &volume, |v| v.name == "v"), Put::Unchanged);
    }
}
