//! The `<app>-prom-conf` ConfigMap that Prometheus monitoring mounts at `/etc/metrics/conf` on the
//! driver and executors (the mount itself is decoration's, see
//! `spark_operator_api::decoration`): Spark's `metrics.properties` and the JMX exporter's
//! `prometheus.yaml`, each unless the spec names a file in the image instead.
//!
//! Without it the pods would wait in ContainerCreating forever. It belongs to the application, not to
//! a submission: one name per application, kept up to date at every submission and owned by the
//! SparkApplication so it goes with it (as Kubeflow's).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use spark_operator_api::SparkApplication;
use spark_operator_api::labels::LABEL_APP_NAME;
use spark_operator_api::naming::prometheus_config_map_name;

use super::application_owner;

/// Key of Spark's metrics configuration in the ConfigMap.
pub const METRICS_PROPERTIES_KEY: &str = "metrics.properties";
/// Key of the JMX exporter's configuration in the ConfigMap.
pub const PROMETHEUS_CONFIG_KEY: &str = "prometheus.yaml";

/// Spark's metrics go to JMX, where the exporter agent reads them; the JVM source on both roles.
pub const DEFAULT_METRICS_PROPERTIES: &str = "\
*.sink.jmx.class=org.apache.spark.metrics.sink.JmxSink
driver.source.jvm.class=org.apache.spark.metrics.source.JvmSource
executor.source.jvm.class=org.apache.spark.metrics.source.JvmSource
";

/// JMX exporter rules giving the metric names Kubeflow's default configuration gives
/// (`spark_driver_*`, `spark_executor_*`, `spark_streaming_driver_*`,
/// `spark_structured_streaming_driver_*`, with `app_namespace`, `app_id` and `executor_id` labels),
/// so existing dashboards keep working. Spark's JMX names are
/// `metrics:name=<spark.metrics.namespace = ns.app>.<driver|executor id>.<source>.<metric>`; the
/// namespace is `<ns>.<app>`, hence the first two groups.
pub const DEFAULT_PROMETHEUS_CONFIG: &str = r#"lowercaseOutputName: true
attrNameSnakeCase: true
rules:
  # Driver gauges of the block manager, the DAG scheduler and the JVM.
  - pattern: metrics<name=(\S+)\.(\S+)\.driver\.(BlockManager|DAGScheduler|jvm)\.(\S+)><>Value
    name: spark_driver_$3_$4
    type: GAUGE
    labels: {app_namespace: "$1", app_id: "$2"}
  # DStream streaming, then structured streaming (per query).
  - pattern: metrics<name=(\S+)\.(\S+)\.driver\.(\S+)\.StreamingMetrics\.streaming\.(\S+)><>Value
    name: spark_streaming_driver_$4
    type: GAUGE
    labels: {app_namespace: "$1", app_id: "$2"}
  - pattern: metrics<name=(\S+)\.(\S+)\.driver\.spark\.streaming\.(\S+)\.(\S+)><>Value
    name: spark_structured_streaming_driver_$4
    type: GAUGE
    labels: {app_namespace: "$1", app_id: "$2", query_name: "$3"}
  # The executor source, seen from each executor.
  - pattern: metrics<name=(\S+)\.(\S+)\.(\S+)\.executor\.(\S+)><>Value
    name: spark_executor_$4
    type: GAUGE
    labels: {app_namespace: "$1", app_id: "$2", executor_id: "$3"}
  # Driver counters and the listener bus's gauges.
  - pattern: metrics<name=(\S+)\.(\S+)\.driver\.(DAGScheduler|HiveExternalCatalog|CodeGenerator|LiveListenerBus)\.(.*)><>Count
    name: spark_driver_$3_$4_count
    type: COUNTER
    labels: {app_namespace: "$1", app_id: "$2"}
  - pattern: metrics<name=(\S+)\.(\S+)\.driver\.LiveListenerBus\.(.*)><>Value
    name: spark_driver_LiveListenerBus_$3
    type: GAUGE
    labels: {app_namespace: "$1", app_id: "$2"}
  # Executor counters, then the JVM and shuffle-transfer gauges and counters of numbered executors.
  - pattern: metrics<name=(\S+)\.(\S+)\.(.*)\.executor\.(.*)><>Count
    name: spark_executor_$4_count
    type: COUNTER
    labels: {app_namespace: "$1", app_id: "$2", executor_id: "$3"}
  - pattern: metrics<name=(\S+)\.(\S+)\.([0-9]+)\.(jvm|NettyBlockTransfer)\.(.*)><>Value
    name: spark_executor_$4_$5
    type: GAUGE
    labels: {app_namespace: "$1", app_id: "$2", executor_id: "$3"}
  - pattern: metrics<name=(\S+)\.(\S+)\.([0-9]+)\.(HiveExternalCatalog|CodeGenerator)\.(.*)><>Count
    name: spark_executor_$4_$5_count
    type: COUNTER
    labels: {app_namespace: "$1", app_id: "$2", executor_id: "$3"}
"#;

/// The ConfigMap, when the application has Prometheus monitoring and not both files in its image.
pub fn config_map(app: &SparkApplication) -> Option<ConfigMap> {
    let monitoring = app.spec.monitoring.as_ref()?;
    let prometheus = monitoring.prometheus.as_ref()?;
    let mut data = BTreeMap::new();
    if monitoring.metrics_properties_file.is_none() {
        let properties = monitoring
            .metrics_properties
            .as_deref()
            .unwrap_or(DEFAULT_METRICS_PROPERTIES);
        data.insert(METRICS_PROPERTIES_KEY.to_owned(), properties.to_owned());
    }
    if prometheus.config_file.is_none() {
        let config = prometheus.configuration.as_deref().unwrap_or(DEFAULT_PROMETHEUS_CONFIG);
        data.insert(PROMETHEUS_CONFIG_KEY.to_owned(), config.to_owned());
    }
    if data.is_empty() {
        return None;
    }
    let name = app.metadata.name.clone().unwrap_or_default();
    Some(ConfigMap {
        metadata: ObjectMeta {
            name: Some(prometheus_config_map_name(&name)),
            namespace: app.metadata.namespace.clone(),
            labels: Some(BTreeMap::from([(LABEL_APP_NAME.to_owned(), name)])),
            owner_references: application_owner(app).map(|o| vec![o]),
            ..Default::default()
        },
        data: Some(data),
        ..Default::default()
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn app(monitoring: serde_json::Value) -> SparkApplication {
        serde_json::from_value(json!({
            "apiVersion": "sparkoperator.k8s.io/v1beta2", "kind": "SparkApplication",
            "metadata": {"name": "pi", "namespace": "ns", "uid": "u-1"},
            "spec": {"type": "Scala", "sparkVersion": "4.0.4", "driver": {}, "executor": {},
                     "monitoring": monitoring}
        }))
        .unwrap()
    }

    #[test]
    fn defaults_fill_both_files_and_the_application_owns_them() {
        let cm = config_map(&app(json!({
            "exposeDriverMetrics": true, "exposeExecutorMetrics": true,
            "prometheus": {"jmxExporterJar": "/prometheus/jmx.jar", "port": 8090}
        })))
        .unwrap();
        assert_eq!(cm.metadata.name.as_deref(), Some("pi-prom-conf"));
        assert_eq!(cm.metadata.namespace.as_deref(), Some("ns"));
        let owner = &cm.metadata.owner_references.unwrap()[0];
        assert_eq!((owner.kind.as_str(), owner.uid.as_str()), ("SparkApplication", "u-1"));
        let data = cm.data.unwrap();
        assert_eq!(data[METRICS_PROPERTIES_KEY], DEFAULT_METRICS_PROPERTIES);
        assert_eq!(data[PROMETHEUS_CONFIG_KEY], DEFAULT_PROMETHEUS_CONFIG);
    }

    #[test]
    fn the_exporter_rules_are_valid_yaml_with_a_name_and_type_per_rule() {
        let config: serde_json::Value = serde_yaml::from_str(DEFAULT_PROMETHEUS_CONFIG).unwrap();
        let rules = config["rules"].as_array().unwrap();
        let names: Vec<&str> = rules.iter().filter_map(|r| r["name"].as_str()).collect();
        for family in [
            "spark_driver_",
            "spark_streaming_driver_",
            "spark_structured_streaming_driver_",
            "spark_executor_",
        ] {
            assert!(
                names.iter().any(|n| n.starts_with(family)),
                "no {family} rule in {names:?}"
            );
        }
        for rule in rules {
            for key in ["pattern", "name", "type", "labels"] {
                assert!(rule.get(key).is_some(), "{key} missing from {rule}");
            }
        }
    }

    #[test]
    fn the_spec_content_wins_and_files_in_the_image_are_left_out() {
        let cm = config_map(&app(json!({
            "exposeDriverMetrics": true, "exposeExecutorMetrics": false,
            "metricsProperties": "*.sink.jmx.class=x\n",
            "prometheus": {"jmxExporterJar": "/j.jar", "configFile": "/etc/in-image.yaml"}
        })))
        .unwrap();
        let data = cm.data.unwrap();
        assert_eq!(data[METRICS_PROPERTIES_KEY], "*.sink.jmx.class=x\n");
        assert!(!data.contains_key(PROMETHEUS_CONFIG_KEY));
        // Both in the image: nothing to mount, no ConfigMap.
        assert!(
            config_map(&app(json!({
                "exposeDriverMetrics": true, "exposeExecutorMetrics": true,
                "metricsPropertiesFile": "/etc/m.properties",
                "prometheus": {"jmxExporterJar": "/j.jar", "configFile": "/etc/p.yaml"}
            })))
            .is_none()
        );
        // No Prometheus: no ConfigMap.
        assert!(
            config_map(&app(
                json!({"exposeDriverMetrics": false, "exposeExecutorMetrics": false})
            ))
            .is_none()
        );
    }
}
