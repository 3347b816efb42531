//! Names of every object derived from a SparkApplication, computed exactly as Spark's spark-submit and
//! Kubeflow's operator compute them, including how they stay within Kubernetes' 63-character limits.
//!
//! Random parts (Spark's unique ids) are inputs, so these functions are pure and testable; the caller
//! makes them with [`spark_unique_id`] from random bytes and the clock.

use std::collections::BTreeMap;

/// Longest DNS-1123 / DNS-1035 label (Service names, label values).
pub const MAX_LABEL_LENGTH: usize = 63;
/// Longest DNS-1123 subdomain (pod and ConfigMap names).
pub const MAX_SUBDOMAIN_LENGTH: usize = 253;

/// The `spark.kubernetes.driver.pod.name` key, which also names the driver pod.
pub const SPARK_DRIVER_POD_NAME_KEY: &str = "spark.kubernetes.driver.pod.name";

/// Spark's unique id (`KubernetesUtils.uniqueID`): 3 random bytes in hex, then the low 40 bits of the
/// time in milliseconds in hex without padding.
pub fn spark_unique_id(random: [u8; 3], unix_millis: u64) -> String {
    format!(
        "{:02x}{:02x}{:02x}{:x}",
        random[0],
        random[1],
        random[2],
        unix_millis & 0xFF_FFFF_FFFF
    )
}

/// Spark's resource name prefix (`KubernetesConf.getResourceNamePrefix`): `<app name>-<unique id>`,
/// lower-cased, anything but `[a-z0-9-]` replaced by `-`, runs of `-` collapsed, a leading `-` dropped
/// and a leading digit replaced by `x`. The operator passes the SparkApplication's name as Spark's app name.
pub fn resource_name_prefix(app_name: &str, unique_id: &str) -> String {
    let raw = format!("{app_name}-{unique_id}");
    let mut prefix = collapse_dashes(&sanitize(raw.trim()));
    if prefix.starts_with('-') {
        prefix.remove(0);
    }
    if prefix.starts_with(|c: char| c.is_ascii_digit()) {
        prefix.replace_range(..1, "x");
    }
    prefix
}

/// Spark's `spark-app-name` label value (`KubernetesConf.getAppNameLabel`): sanitised like the prefix,
/// cut to 63 characters, with `-` trimmed from both ends.
pub fn spark_app_name_label(app_name: &str) -> String {
    let label = collapse_dashes(&sanitize(app_name.trim()));
    let cut: String = label.chars().take(MAX_LABEL_LENGTH).collect();
    cut.trim_matches('-').to_owned()
}

fn sanitize(name: &str) -> String {
    name.to_lowercase()
        .chars()
        .map(|c| {
            if c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' {
                c
            } else {
                '-'
            }
        })
        .collect()
}

fn collapse_dashes(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for c in name.chars() {
        if !(c == '-' && out.ends_with('-')) {
            out.push(c);
        }
    }
    out
}

/// The driver pod's name, in Kubeflow's order: `spec.driver.podName`, else the
/// `spark.kubernetes.driver.pod.name` sparkConf entry, else `<app>-driver`. An app name is at most 63
/// characters, so the default always fits a pod name (253).
pub fn driver_pod_name(app_name: &str, pod_name: Option<&str>, spark_conf: &BTreeMap<String, String>) -> String {
    pod_name
        .filter(|name| !name.is_empty())
        .or_else(|| {
            spark_conf
                .get(SPARK_DRIVER_POD_NAME_KEY)
                .map(String::as_str)
                .filter(|name| !name.is_empty())
        })
        .map_or_else(|| format!("{app_name}-driver"), str::to_owned)
}

/// The headless driver Service (`DriverServiceFeatureStep`): `<prefix>-driver-svc` when that fits in 63
/// characters, otherwise `spark-<fallback unique id>-driver-svc`.
pub fn driver_service_name(resource_name_prefix: &str, fallback_unique_id: &str) -> String {
    let preferred = format!("{resource_name_prefix}-driver-svc");
    if preferred.len() <= MAX_LABEL_LENGTH {
        preferred
    } else {
        format!("spark-{fallback_unique_id}-driver-svc")
    }
}

/// Spark's ConfigMap naming (`KubernetesClientUtils.configMapName`): the prefix cut so that
/// `<prefix>-conf-map` fits in a DNS subdomain.
fn config_map_name(prefix: &str) -> String {
    const SUFFIX: &str = "-conf-map";
    let cut: String = prefix.chars().take(MAX_SUBDOMAIN_LENGTH - SUFFIX.len()).collect();
    format!("{cut}{SUFFIX}")
}

/// The driver's `spark.properties` ConfigMap: `spark-drv-<unique id>-conf-map`.
pub fn driver_config_map_name(unique_id: &str) -> String {
    config_map_name(&format!("spark-drv-{unique_id}"))
}

/// The executors' `spark.properties` ConfigMap, made by the driver: `spark-exec-<unique id>-conf-map`.
pub fn executor_config_map_name(unique_id: &str) -> String {
    config_map_name(&format!("spark-exec-{unique_id}"))
}

/// The ConfigMap carrying the executor pod template (`PodTemplateConfigMapStep`):
/// `<prefix>-driver-podspec-conf-map`.
pub fn pod_template_config_map_name(resource_name_prefix: &str) -> String {
    format!("{resource_name_prefix}-driver-podspec-conf-map")
}

/// The NetworkPolicy Spark 4 creates for the driver: `<prefix>-policy`.
pub fn network_policy_name(resource_name_prefix: &str) -> String {
    format!("{resource_name_prefix}-policy")
}

/// An executor pod, named by the driver: `<prefix>-exec-<id>`.
pub fn executor_pod_name(resource_name_prefix: &str, executor_id: u64) -> String {
    format!("{resource_name_prefix}-exec-{executor_id}")
}

/// Kubeflow's `generateName`: `<name>-<suffix>` when it fits in 63 characters, otherwise the name cut
/// short, the first 8 hex digits of the MD5 of the full preferred name, and the suffix.
fn kubeflow_bounded_name(name: &str, suffix: &str) -> String {
    let preferred = format!("{name}-{suffix}");
    if preferred.len() <= MAX_LABEL_LENGTH {
        return preferred;
    }
    let keep = MAX_LABEL_LENGTH.saturating_sub(suffix.len() + 10);
    let cut: String = name.chars().take(keep).collect();
    let hash = format!("{:x}", md5::compute(preferred.as_bytes()));
    format!("{cut}-{}-{suffix}", &hash[..8])
}

/// The Spark UI Service: `<app>-ui-svc`, hashed down to 63 characters as Kubeflow does.
pub fn ui_service_name(app_name: &str) -> String {
    kubeflow_bounded_name(app_name, "ui-svc")
}

/// The Spark UI Ingress: `<app>-ui-ingress`, hashed down to 63 characters as Kubeflow does.
pub fn ui_ingress_name(app_name: &str) -> String {
    kubeflow_bounded_name(app_name, "ui-ingress")
}

/// The Service and Ingress of one `driverIngressOptions` entry: `<app>-driver-<port>`. Kubeflow does not
/// bound this one and produces invalid names for long app names; we hash it down like the UI Service.
pub fn driver_ingress_name(app_name: &str, port: i32) -> String {
    kubeflow_bounded_name(app_name, &format!("driver-{port}"))
}

/// The ConfigMap holding the Prometheus exporter configuration: `<app>-prom-conf`.
pub fn prometheus_config_map_name(app_name: &str) -> String {
    format!("{app_name}-prom-conf")
}

/// A run of a ScheduledSparkApplication: `<name>-<timestamp>`, the timestamp at the controller's precision.
pub fn scheduled_run_name(scheduled_name: &str, timestamp: i64) -> String {
    format!("{scheduled_name}-{timestamp}")
}

#[cfg(test)]
mod tests {
    use super::*;

    // The captures in controller/tests/oracle/captured/ (Spark 4.3, from shared/). The random parts are
    // read back from the captured names and fed in; everything else must come out identical.
    const LONG_APP_NAME: &str = "My Spark.Pi_App 2026 with a very long name exceeding sixty-three characters";

    #[test]
    fn unique_id_is_random_hex_then_time_hex() {
        assert_eq!(spark_unique_id([0x1e, 0x26, 0x42], 0xa2_0138_0c97), "1e2642a201380c97");
        // The time keeps its 40 low bits and is not zero-padded, exactly as Java's toHexString.
        assert_eq!(spark_unique_id([0, 0, 1], 0xff_0000_0000_0abc), "000001abc");
    }

    #[test]
    fn long_name_capture_matches() {
        let prefix = resource_name_prefix(LONG_APP_NAME, "1e2642a201380c97");
        assert_eq!(
            prefix,
            "my-spark-pi-app-2026-with-a-very-long-name-exceeding-sixty-three-characters-1e2642a201380c97"
        );
        assert_eq!(
            format!("{prefix}-driver"),
            "my-spark-pi-app-2026-with-a-very-long-name-exceeding-sixty-three-characters-1e2642a201380c97-driver"
        );
        // The prefix is too long for a Service, so Spark falls back to a fresh unique id.
        assert_eq!(
            driver_service_name(&prefix, "330c9fa201380e20"),
            "spark-330c9fa201380e20-driver-svc"
        );
        assert_eq!(
            driver_config_map_name("47e292a201380e92"),
            "spark-drv-47e292a201380e92-conf-map"
        );
        assert_eq!(
            spark_app_name_label(LONG_APP_NAME),
            "my-spark-pi-app-2026-with-a-very-long-name-exceeding-sixty-thre"
        );
    }

    #[test]
    fn short_name_captures_match() {
        let prefix = resource_name_prefix("spark-pi", "9b5e8aa20138403b");
        assert_eq!(
            driver_service_name(&prefix, "unused"),
            "spark-pi-9b5e8aa20138403b-driver-svc"
        );
        assert_eq!(
            driver_config_map_name("74ac75a201384224"),
            "spark-drv-74ac75a201384224-conf-map"
        );
        assert_eq!(spark_app_name_label("spark-pi"), "spark-pi");
        let templates = resource_name_prefix("spark-pi", "9d3172a201382aa0");
        assert_eq!(
            pod_template_config_map_name(&templates),
            "spark-pi-9d3172a201382aa0-driver-podspec-conf-map"
        );
        assert_eq!(network_policy_name(&templates), "spark-pi-9d3172a201382aa0-policy");
        assert_eq!(executor_pod_name(&templates, 3), "spark-pi-9d3172a201382aa0-exec-3");
    }

    #[test]
    fn prefix_sanitising_follows_spark() {
        assert_eq!(resource_name_prefix("--Weird__Name!!", "abc"), "weird-name-abc");
        assert_eq!(resource_name_prefix("7up", "abc"), "xup-abc");
        assert_eq!(spark_app_name_label("-a-"), "a");
    }

    #[test]
    fn service_name_fallback_happens_exactly_past_63_characters() {
        let fits = "a".repeat(63 - "-driver-svc".len());
        assert_eq!(driver_service_name(&fits, "id").len(), 63);
        let too_long = format!("{fits}b");
        assert_eq!(driver_service_name(&too_long, "id"), "spark-id-driver-svc");
    }

    #[test]
    fn config_map_names_are_cut_to_a_dns_subdomain() {
        let long = "x".repeat(300);
        let name = driver_config_map_name(&long);
        assert_eq!(name.len(), MAX_SUBDOMAIN_LENGTH);
        assert!(name.ends_with("-conf-map"));
        assert_eq!(executor_config_map_name("abc"), "spark-exec-abc-conf-map");
    }

    #[test]
    fn driver_pod_name_prefers_spec_then_spark_conf_then_default() {
        let mut conf = BTreeMap::new();
        assert_eq!(driver_pod_name("spark-pi", None, &conf), "spark-pi-driver");
        conf.insert(SPARK_DRIVER_POD_NAME_KEY.to_owned(), "from-conf".to_owned());
        assert_eq!(driver_pod_name("spark-pi", None, &conf), "from-conf");
        assert_eq!(driver_pod_name("spark-pi", Some("from-spec"), &conf), "from-spec");
        assert_eq!(
            driver_pod_name("spark-pi", Some(""), &BTreeMap::new()),
            "spark-pi-driver"
        );
    }

    #[test]
    fn ui_names_are_kubeflows_and_bounded() {
        assert_eq!(ui_service_name("spark-pi"), "spark-pi-ui-svc");
        assert_eq!(ui_ingress_name("spark-pi"), "spark-pi-ui-ingress");
        assert_eq!(driver_ingress_name("spark-pi", 4041), "spark-pi-driver-4041");
        assert_eq!(prometheus_config_map_name("spark-pi"), "spark-pi-prom-conf");
        // Expected values computed independently (Python's hashlib) with Kubeflow's generateName rule.
        let long = "spark-pi-with-a-rather-long-application-name-for-the-ui-service";
        assert_eq!(
            ui_service_name(long),
            "spark-pi-with-a-rather-long-application-name-fo-93766a98-ui-svc"
        );
        let name = ui_service_name(&"a".repeat(63));
        assert_eq!(name, format!("{}-90444f35-ui-svc", "a".repeat(47)));
        assert_eq!(name.len(), 63);
        assert!(driver_ingress_name(long, 65535).len() <= 63);
        assert_eq!(scheduled_run_name("nightly", 1_700_000_000), "nightly-1700000000");
    }
}
