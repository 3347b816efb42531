//! The driver's volumes that Spark builds from its configuration: `spark.kubernetes.driver.volumes.*`
//! (`MountVolumesFeatureStep`), `spark.kubernetes.driver.secrets.*` (`MountSecretsFeatureStep`) and
//! `spark.kubernetes.driver.secretKeyRef.*` (`EnvSecretsFeatureStep`). Spark iterates hash maps here;
//! the order is by name instead, which Kubernetes does not care about.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    EmptyDirVolumeSource, EnvVar, EnvVarSource, HostPathVolumeSource, NFSVolumeSource,
    PersistentVolumeClaimVolumeSource, SecretKeySelector, SecretVolumeSource, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::driver_conf::{DriverConf, DriverConfError};

const VOLUMES_PREFIX: &str = "spark.kubernetes.driver.volumes.";
const SECRETS_PREFIX: &str = "spark.kubernetes.driver.secrets.";
const SECRET_KEY_REF_PREFIX: &str = "spark.kubernetes.driver.secretKeyRef.";

/// A volume and where the Spark container mounts it.
pub(super) struct Mounted {
    pub volume: Volume,
    pub mount: VolumeMount,
}

fn invalid(key: String, value: &str, problem: &'static str) -> DriverConfError {
    DriverConfError::InvalidConf {
        key,
        value: value.to_owned(),
        problem,
    }
}

/// Volumes of `spark.kubernetes.driver.volumes.<type>.<name>.{mount,options}.*`.
pub(super) fn conf_volumes(conf: &DriverConf<'_>) -> Result<Vec<Mounted>, DriverConfError> {
    // (name, type) -> the volume's own keys (mount.path, options.claimName, ...).
    let mut volumes: BTreeMap<(String, String), BTreeMap<String, String>> = BTreeMap::new();
    for (rest, value) in conf.with_prefix(VOLUMES_PREFIX) {
        let mut parts = rest.splitn(3, '.');
        match (parts.next(), parts.next(), parts.next()) {
            (Some(kind), Some(name), Some(key)) => {
                volumes
                    .entry((name.to_owned(), kind.to_owned()))
                    .or_default()
                    .insert(key.to_owned(), value.to_owned());
            }
            _ => {
                return Err(invalid(
                    format!("{VOLUMES_PREFIX}{rest}"),
                    value,
                    "is not a volume setting",
                ));
            }
        }
    }
    volumes
        .into_iter()
        .map(|((name, kind), keys)| conf_volume(&name, &kind, &keys, conf.features.volume_sub_path_expr))
        .collect()
}

/// One volume; `sub_path_expr` says whether this Spark reads `mount.subPathExpr` and `options.type`
/// (before 4.0 it ignores both, and writes no `subPathExpr` and an empty hostPath type).
fn conf_volume(
    name: &str,
    kind: &str,
    keys: &BTreeMap<String, String>,
    sub_path_expr: bool,
) -> Result<Mounted, DriverConfError> {
    let key = |k: &str| format!("{VOLUMES_PREFIX}{kind}.{name}.{k}");
    let required = |k: &str| {
        keys.get(k)
            .filter(|v| !v.is_empty())
            .cloned()
            .ok_or_else(|| DriverConfError::UnsupportedConf {
                key: key(k),
                problem: "is required for this volume",
            })
    };
    let optional = |k: &str| keys.get(k).cloned();
    let since_4_0 = |k: &str| optional(k).filter(|_| sub_path_expr);
    let read_only = match keys.get("mount.readOnly").map(|v| v.trim().to_ascii_lowercase()) {
        None => false,
        Some(v) if v == "true" => true,
        Some(v) if v == "false" => false,
        Some(v) => return Err(invalid(key("mount.readOnly"), &v, "is not true or false")),
    };
    let (sub_path, expr) = (optional("mount.subPath"), since_4_0("mount.subPathExpr"));
    if sub_path.as_deref().is_some_and(|s| !s.is_empty()) && expr.as_deref().is_some_and(|s| !s.is_empty()) {
        return Err(DriverConfError::UnsupportedConf {
            key: key("mount.subPathExpr"),
            problem: "cannot be combined with mount.subPath",
        });
    }
    let mount = VolumeMount {
        name: name.to_owned(),
        mount_path: required("mount.path")?,
        read_only: Some(read_only),
        sub_path: Some(sub_path.unwrap_or_default()),
        sub_path_expr: sub_path_expr.then(|| expr.unwrap_or_default()),
        ..Default::default()
    };
    let mut volume = Volume {
        name: name.to_owned(),
        ..Default::default()
    };
    match kind {
        "hostPath" => {
            volume.host_path = Some(HostPathVolumeSource {
                path: required("options.path")?,
                type_: Some(since_4_0("options.type").unwrap_or_default()),
            });
        }
        "persistentVolumeClaim" => {
            let claim_name = required("options.claimName")?;
            if claim_name.contains("OnDemand") {
                return Err(DriverConfError::UnsupportedConf {
                    key: key("options.claimName"),
                    problem: "OnDemand claims are created by spark-submit for the driver, which native submission does not do: name an existing claim (executors may still use OnDemand)",
                });
            }
            volume.persistent_volume_claim = Some(PersistentVolumeClaimVolumeSource {
                claim_name,
                read_only: Some(read_only),
            });
        }
        "emptyDir" => {
            volume.empty_dir = Some(EmptyDirVolumeSource {
                medium: Some(optional("options.medium").unwrap_or_default()),
                size_limit: optional("options.sizeLimit").map(Quantity),
            });
        }
        "nfs" => {
            volume.nfs = Some(NFSVolumeSource {
                path: required("options.path")?,
                server: required("options.server")?,
                read_only: None,
            });
        }
        _ => {
            return Err(DriverConfError::UnsupportedConf {
                key: format!("{VOLUMES_PREFIX}{kind}"),
                problem: "is not a volume type Spark mounts: use hostPath, persistentVolumeClaim, emptyDir or nfs",
            });
        }
    }
    Ok(Mounted { volume, mount })
}

/// Secrets mounted as `<secret>-volume` at the configured path.
pub(super) fn secret_volumes(conf: &DriverConf<'_>) -> Vec<Mounted> {
    conf.with_prefix(SECRETS_PREFIX)
        .map(|(secret, path)| {
            let name = format!("{secret}-volume");
            Mounted {
                volume: Volume {
                    name: name.clone(),
                    secret: Some(SecretVolumeSource {
                        secret_name: Some(secret.to_owned()),
                        ..Default::default()
                    }),
                    ..Default::default()
                },
                mount: VolumeMount {
                    name,
                    mount_path: path.to_owned(),
                    ..Default::default()
                },
            }
        })
        .collect()
}

/// Env vars read from secrets: `spark.kubernetes.driver.secretKeyRef.<ENV>=<secret>:<key>`.
pub(super) fn secret_env(conf: &DriverConf<'_>) -> Result<Vec<EnvVar>, DriverConfError> {
    conf.with_prefix(SECRET_KEY_REF_PREFIX)
        .map(|(env, reference)| {
            let (secret, key) = reference.split_once(':').ok_or_else(|| {
                invalid(
                    format!("{SECRET_KEY_REF_PREFIX}{env}"),
                    reference,
                    "is not <secret name>:<key>",
                )
            })?;
            Ok(EnvVar {
                name: env.to_owned(),
                value_from: Some(EnvVarSource {
                    secret_key_ref: Some(SecretKeySelector {
                        key: key.to_owned(),
                        name: secret.to_owned(),
                        optional: None,
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            })
        })
        .collect()
}
