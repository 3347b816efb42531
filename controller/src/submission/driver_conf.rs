//! What spark-submit resolves before it builds anything (Spark's `KubernetesDriverConf` and the driver
//! feature steps' system properties): object names, the driver's labels and ports, which Spark-version
//! behaviours apply, and the final `spark.properties`.

use std::collections::BTreeMap;

use spark_operator_api::labels::{
    LABEL_SPARK_APP_NAME, LABEL_SPARK_APP_SELECTOR, LABEL_SPARK_ROLE, LABEL_SPARK_VERSION, SPARK_RESERVED_DRIVER_LABELS,
};
use spark_operator_api::naming::{
    SPARK_DRIVER_POD_NAME_KEY, driver_config_map_name, driver_service_name, network_policy_name,
    pod_template_config_map_name, resource_name_prefix, spark_app_name_label,
};
use spark_operator_api::spark_version::SparkVersion;
use spark_operator_api::{SparkApplication, SparkApplicationSpec};

use super::spark_conf::{MainResource, ResourceKind, SubmitConf};
use super::{NetworkPolicyMode, SubmissionInput};

/// Spark's name for the feature step that makes the NetworkPolicy.
pub const NETWORK_POLICY_STEP: &str = "org.apache.spark.deploy.k8s.features.NetworkPolicyFeatureStep";

/// Why the resolved configuration is not one Spark would accept.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DriverConfError {
    #[error("spec.sparkVersion: {0:?} is not a Spark version: use major.minor[.patch], e.g. 4.0.1")]
    SparkVersion(String),
    #[error(
        "spec.image: no image for the driver: set spec.image or spec.driver.image (or spark.kubernetes.container.image)"
    )]
    MissingImage,
    #[error("spec.sparkConf[{key}]: {value:?} {problem}")]
    InvalidConf {
        key: String,
        value: String,
        problem: &'static str,
    },
    #[error("spec.sparkConf[{key}]: {problem}")]
    UnsupportedConf { key: String, problem: &'static str },
    #[error("spec.driver.labels[{key}]: the label is Spark's own and Spark refuses to submit with it: remove it")]
    ReservedLabel { key: String },
}

/// The Spark-version-dependent parts of what spark-submit builds. Versions marked "conf" are the
/// `version()` of the configuration behind the behaviour in Spark 4.3's own metadata; those marked
/// with a JIRA are that change's first release (the 3.5.3 captures confirm the 3.x ones); the others
/// are the major version where the captures and the design notes place them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SparkFeatures {
    /// 3.1: the driver's conf volume is `spark-conf-volume-driver` (before: `spark-conf-volume`), its
    /// ConfigMap `spark-drv-<id>-conf-map` (before: `<prefix>-driver-conf-map`), immutable and carrying
    /// the namespace as a data key.
    pub per_role_conf_volume: bool,
    /// 3.4 (conf): the Service states `ipFamilies` and `ipFamilyPolicy`.
    pub service_ip_families: bool,
    /// 3.3 (SPARK-37339): the `spark-version` label on the driver (and the Service's selector), a
    /// label no user may set.
    pub version_label: bool,
    /// 4.0: the Spark Connect port (15002) on the driver pod and Service.
    pub connect_port: bool,
    /// 4.0: the executors' NetworkPolicy.
    pub network_policy: bool,
    /// 4.0 (SPARK-49731): volume `mount.subPathExpr` and hostPath `options.type` are read (before, a
    /// mount has no `subPathExpr` and a hostPath's type is always empty).
    pub volume_sub_path_expr: bool,
    /// 4.3 (conf): `allowPrivilegeEscalation: false` on the Spark container.
    pub no_privilege_escalation: bool,
    /// 4.3 (conf): the Service states `publishNotReadyAddresses`.
    pub publish_not_ready_addresses: bool,
}

impl SparkFeatures {
    pub fn of(version: SparkVersion) -> Self {
        let at_least = |major, minor| version >= SparkVersion { major, minor, patch: 0 };
        Self {
            per_role_conf_volume: at_least(3, 1),
            service_ip_families: at_least(3, 4),
            version_label: at_least(3, 3),
            connect_port: at_least(4, 0),
            network_policy: at_least(4, 0),
            volume_sub_path_expr: at_least(4, 0),
            no_privilege_escalation: at_least(4, 3),
            publish_not_ready_addresses: at_least(4, 3),
        }
    }
}

/// The driver's ports (`driver-rpc-port`, `blockmanager`, `spark-ui`, `spark-connect`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DriverPorts {
    pub driver: i32,
    pub block_manager: i32,
    pub ui: i32,
    pub connect: Option<i32>,
}

impl DriverPorts {
    /// Name, port and Service app protocol of each port, in Spark's order.
    pub fn named(&self) -> Vec<(&'static str, i32, Option<&'static str>)> {
        let mut ports = vec![
            ("driver-rpc-port", self.driver, None),
            ("blockmanager", self.block_manager, None),
            ("spark-ui", self.ui, None),
        ];
        if let Some(connect) = self.connect {
            ports.push(("spark-connect", connect, Some("grpc")));
        }
        ports
    }
}

/// A submission resolved the way spark-submit resolves it; the object builders read only this.
#[derive(Clone, Debug)]
pub struct DriverConf<'a> {
    pub app: &'a SparkApplication,
    pub input: &'a SubmissionInput<'a>,
    pub version: SparkVersion,
    pub features: SparkFeatures,
    pub namespace: String,
    /// The configuration given to spark-submit (before the driver's additions).
    pub conf: BTreeMap<String, String>,
    pub main: MainResource,
    pub resource_prefix: String,
    pub driver_pod_name: String,
    pub service_name: String,
    pub config_map_name: String,
    pub conf_volume_name: &'static str,
    /// Labels of the driver pod; also the Service's selector.
    pub labels: BTreeMap<String, String>,
    pub ports: DriverPorts,
    pub image: String,
    /// The NetworkPolicy is built.
    pub network_policy: bool,
    /// Everything the driver reads from `spark.properties`.
    pub properties: BTreeMap<String, String>,
}

impl<'a> DriverConf<'a> {
    pub fn resolve(input: &'a SubmissionInput<'a>, submit: SubmitConf) -> Result<Self, DriverConfError> {
        let app = input.app;
        let spec = &app.spec;
        let version = SparkVersion::parse(&spec.spark_version)
            .ok_or_else(|| DriverConfError::SparkVersion(spec.spark_version.clone()))?;
        let features = SparkFeatures::of(version);
        let SubmitConf { conf, main } = submit;
        let get = |key: &str| conf.get(key).map(String::as_str).filter(|v| !v.is_empty());
        for key in ["spark.driver.host", "spark.driver.bindAddress"] {
            if get(key).is_some() {
                return Err(DriverConfError::UnsupportedConf {
                    key: key.to_owned(),
                    problem: "is set by Spark to the driver Service's address: remove it",
                });
            }
        }
        // Spark copies these from the submitting machine into a Secret for the driver; there is no
        // such machine here. (The `submission.*` ones configure spark-submit's own client: unused.)
        for file in [
            "caCertFile",
            "clientKeyFile",
            "clientCertFile",
            "oauthTokenFile",
            "oauthToken",
        ] {
            let key = format!("spark.kubernetes.authenticate.driver.{file}");
            if get(&key).is_some() {
                return Err(DriverConfError::UnsupportedConf {
                    key,
                    problem: "is read from the submitting machine, which native submission does not have: use the driver's service account, or spark.kubernetes.authenticate.driver.mounted.* with a mounted secret",
                });
            }
        }
        let namespace = get("spark.kubernetes.namespace").unwrap_or("default").to_owned();
        let app_name = get("spark.app.name").unwrap_or_default().to_owned();
        let ids = input.ids;
        let resource_prefix = resource_name_prefix(&app_name, &ids.prefix_id);
        let driver_pod_name = get(SPARK_DRIVER_POD_NAME_KEY)
            .map(str::to_owned)
            .unwrap_or_else(|| format!("{resource_prefix}-driver"));
        let service_name = driver_service_name(&resource_prefix, &ids.service_id);
        let (config_map_name, conf_volume_name) = if features.per_role_conf_volume {
            (driver_config_map_name(&ids.config_map_id), "spark-conf-volume-driver")
        } else {
            (format!("{resource_prefix}-driver-conf-map"), "spark-conf-volume")
        };
        let image = get("spark.kubernetes.driver.container.image")
            .or_else(|| get("spark.kubernetes.container.image"))
            .ok_or(DriverConfError::MissingImage)?
            .to_owned();
        let int = |key: &str, default: i32| -> Result<i32, DriverConfError> {
            get(key).map_or(Ok(default), |value| {
                value.trim().parse().map_err(|_| DriverConfError::InvalidConf {
                    key: key.to_owned(),
                    value: value.to_owned(),
                    problem: "is not a whole number",
                })
            })
        };
        let ports = DriverPorts {
            driver: int("spark.driver.port", 7078)?,
            block_manager: int("spark.driver.blockManager.port", int("spark.blockManager.port", 7079)?)?,
            ui: int("spark.ui.port", 4040)?,
            connect: if features.connect_port {
                Some(int("spark.connect.grpc.binding.port", 15002)?)
            } else {
                None
            },
        };
        let labels = driver_labels(&conf, &input.ids.app_id, &app_name, spec, features)?;
        let excluded = get("spark.kubernetes.driver.pod.excludedFeatureSteps")
            .is_some_and(|steps| steps.split(',').any(|s| s.trim() == NETWORK_POLICY_STEP));
        let network_policy =
            features.network_policy && input.options.network_policy == NetworkPolicyMode::AsSpark && !excluded;

        let mut properties = conf.clone();
        let system = [
            (SPARK_DRIVER_POD_NAME_KEY, driver_pod_name.clone()),
            ("spark.app.id", ids.app_id.clone()),
            ("spark.kubernetes.submitInDriver", "true".to_owned()),
            (
                "spark.kubernetes.memoryOverheadFactor",
                java_double(default_overhead_factor(&conf, main.kind)?),
            ),
            ("spark.driver.host", format!("{service_name}.{namespace}.svc")),
            ("spark.driver.port", ports.driver.to_string()),
            ("spark.driver.blockManager.port", ports.block_manager.to_string()),
            ("spark.kubernetes.resource.type", main.kind.as_str().to_owned()),
        ];
        for (key, value) in system {
            properties.insert(key.to_owned(), value);
        }
        Ok(Self {
            app,
            input,
            version,
            features,
            namespace,
            conf,
            main,
            resource_prefix,
            driver_pod_name,
            service_name,
            config_map_name,
            conf_volume_name,
            labels,
            ports,
            image,
            network_policy,
            properties,
        })
    }

    /// A configuration value, empty ones counting as unset.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.conf.get(key).map(String::as_str).filter(|v| !v.is_empty())
    }

    /// The entries under `prefix`, with the prefix cut off.
    pub fn with_prefix<'s>(&'s self, prefix: &'s str) -> impl Iterator<Item = (&'s str, &'s str)> + 's {
        self.conf
            .range(prefix.to_owned()..)
            .take_while(move |(key, _)| key.starts_with(prefix))
            .map(move |(key, value)| (&key[prefix.len()..], value.as_str()))
    }

    /// `{{APP_ID}}` and `{{EXECUTOR_ID}}` in label and annotation values (`Utils.substituteAppNExecIds`).
    pub fn substitute_ids(&self, value: &str) -> String {
        substitute_ids(value, &self.input.ids.app_id)
    }

    /// The executor pod-template ConfigMap's name, when the submission writes one
    /// ([`super::writes_executor_template`]).
    pub fn executor_template_config_map_name(&self) -> Option<String> {
        super::writes_executor_template(self.input).then(|| pod_template_config_map_name(&self.resource_prefix))
    }

    pub fn network_policy_name(&self) -> String {
        network_policy_name(&self.resource_prefix)
    }
}

fn substitute_ids(value: &str, app_id: &str) -> String {
    value.replace("{{APP_ID}}", app_id).replace("{{EXECUTOR_ID}}", "")
}

/// `KubernetesDriverConf.labels`: the custom driver labels, then Spark's own.
fn driver_labels(
    conf: &BTreeMap<String, String>,
    app_id: &str,
    app_name: &str,
    spec: &SparkApplicationSpec,
    features: SparkFeatures,
) -> Result<BTreeMap<String, String>, DriverConfError> {
    const PREFIX: &str = "spark.kubernetes.driver.label.";
    let mut labels = BTreeMap::new();
    for (key, value) in conf
        .range(PREFIX.to_owned()..)
        .take_while(|(k, _)| k.starts_with(PREFIX))
    {
        let key = &key[PREFIX.len()..];
        if SPARK_RESERVED_DRIVER_LABELS.contains(&key) || (features.version_label && key == LABEL_SPARK_VERSION) {
            return Err(DriverConfError::ReservedLabel { key: key.to_owned() });
        }
        labels.insert(key.to_owned(), substitute_ids(value, app_id));
    }
    if features.version_label {
        labels.insert(LABEL_SPARK_VERSION.to_owned(), spec.spark_version.clone());
    }
    labels.insert(LABEL_SPARK_APP_SELECTOR.to_owned(), app_id.to_owned());
    labels.insert(LABEL_SPARK_APP_NAME.to_owned(), spark_app_name_label(app_name));
    labels.insert(LABEL_SPARK_ROLE.to_owned(), "driver".to_owned());
    Ok(labels)
}

/// The overhead factor Spark propagates to executors: `spark.kubernetes.memoryOverheadFactor`, 0.1 by
/// default for JVM applications and 0.4 for Python and R.
pub fn default_overhead_factor(conf: &BTreeMap<String, String>, kind: ResourceKind) -> Result<f64, DriverConfError> {
    const KEY: &str = "spark.kubernetes.memoryOverheadFactor";
    match conf.get(KEY).filter(|v| !v.is_empty()) {
        Some(value) => parse_factor(KEY, value),
        None if kind == ResourceKind::Java => Ok(0.1),
        None => Ok(0.4),
    }
}

pub fn parse_factor(key: &str, value: &str) -> Result<f64, DriverConfError> {
    value
        .trim()
        .parse::<f64>()
        .ok()
        .filter(|f| f.is_finite() && *f > 0.0)
        .ok_or_else(|| DriverConfError::InvalidConf {
            key: key.to_owned(),
            value: value.to_owned(),
            problem: "is not a positive number",
        })
}

/// Java's `Double.toString` for the values a factor takes: `0.1`, `1.0`, `1.0E-4`.
pub fn java_double(value: f64) -> String {
    let magnitude = value.abs();
    if magnitude != 0.0 && !(1e-3..1e7).contains(&magnitude) {
        let formatted = format!("{value:E}");
        return match formatted.split_once('E') {
            Some((mantissa, exponent)) if !mantissa.contains('.') => format!("{mantissa}.0E{exponent}"),
            _ => formatted,
        };
    }
    if value.fract() == 0.0 {
        format!("{value:.1}")
    } else {
        format!("{value}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_print_as_java_prints_them() {
        assert_eq!(java_double(0.1), "0.1");
        assert_eq!(java_double(0.4), "0.4");
        assert_eq!(java_double(1.0), "1.0");
        assert_eq!(java_double(0.25), "0.25");
        assert_eq!(java_double(0.0001), "1.0E-4");
        assert_eq!(java_double(1.5e7), "1.5E7");
    }

    #[test]
    fn features_follow_the_version() {
        let v = |s| SparkFeatures::of(SparkVersion::parse(s).unwrap());
        let old = v("3.0.1");
        assert!(!old.per_role_conf_volume && !old.version_label && !old.network_policy);
        assert!(!v("3.2.4").version_label && v("3.3.0").version_label);
        let five = v("3.5.3");
        assert!(five.per_role_conf_volume && five.service_ip_families && !five.connect_port);
        assert!(five.version_label && !five.volume_sub_path_expr && !five.network_policy);
        assert!(v("4.0.0").volume_sub_path_expr);
        let four = v("4.0.0");
        assert!(four.network_policy && four.connect_port && !four.no_privilege_escalation);
        assert!(v("4.3.0").no_privilege_escalation && v("4.3.0").publish_not_ready_addresses);
    }

    #[test]
    fn ids_are_substituted_in_values() {
        assert_eq!(
            substitute_ids("app {{APP_ID}} exec {{EXECUTOR_ID}}", "spark-1"),
            "app spark-1 exec "
        );
    }

    #[test]
    fn overhead_factor_defaults_by_kind() {
        let empty = BTreeMap::new();
        assert_eq!(default_overhead_factor(&empty, ResourceKind::Java), Ok(0.1));
        assert_eq!(default_overhead_factor(&empty, ResourceKind::Python), Ok(0.4));
        let set = BTreeMap::from([("spark.kubernetes.memoryOverheadFactor".to_owned(), "0.2".to_owned())]);
        assert_eq!(default_overhead_factor(&set, ResourceKind::R), Ok(0.2));
        let bad = BTreeMap::from([("spark.kubernetes.memoryOverheadFactor".to_owned(), "x".to_owned())]);
        assert!(default_overhead_factor(&bad, ResourceKind::Java).is_err());
    }
}
