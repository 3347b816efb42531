//! The driver's `spark.properties` ConfigMap, and the executor pod-template ConfigMap.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::{Map, Value};

use super::driver_conf::DriverConf;
use super::driver_pod::{POD_TEMPLATE_KEY, SPARK_PROPERTIES};
use super::properties;

/// `spark.properties` for the driver (`Client` / `KubernetesClientUtils`): immutable, and since Spark 3.1
/// with the namespace as a second key, as Spark writes it.
pub fn spark_properties(conf: &DriverConf<'_>) -> ConfigMap {
    let text = properties::render(
        &properties::header_comment(&conf.config_map_name),
        conf.input.submit_time,
        &conf.properties,
    );
    let mut data = BTreeMap::from([(SPARK_PROPERTIES.to_owned(), text)]);
    if conf.features.per_role_conf_volume {
        data.insert("spark.kubernetes.namespace".to_owned(), conf.namespace.clone());
    }
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(conf.config_map_name.clone()),
            namespace: Some(conf.namespace.clone()),
            ..Default::default()
        },
        data: Some(data),
        immutable: conf.features.per_role_conf_volume.then_some(true),
        ..Default::default()
    }
}

/// The executor pod template the driver reads (`PodTemplateConfigMapStep`), when the spec has one: the
/// template as a Pod manifest in YAML. Unlike Kubeflow, no ownerReference to the SparkApplication is
/// added to it: executors are owned by the driver pod alone, so they go with it (Kubeflow #2961).
pub fn executor_pod_template(conf: &DriverConf<'_>) -> Result<Option<ConfigMap>, String> {
    let (Some(template), Some(name)) = (
        conf.app.spec.executor.pod.template.as_ref(),
        conf.executor_template_config_map_name(),
    ) else {
        return Ok(None);
    };
    let mut manifest = Map::new();
    manifest.insert("apiVersion".to_owned(), Value::from("v1"));
    manifest.insert("kind".to_owned(), Value::from("Pod"));
    if let Value::Object(fields) = serde_json::to_value(template).map_err(|e| e.to_string())? {
        manifest.extend(fields);
    }
    let yaml = serde_yaml::to_string(&Value::Object(manifest)).map_err(|e| e.to_string())?;
    Ok(Some(ConfigMap {
        metadata: ObjectMeta {
            name: Some(name),
            namespace: Some(conf.namespace.clone()),
            ..Default::default()
        },
        data: Some(BTreeMap::from([(POD_TEMPLATE_KEY.to_owned(), yaml)])),
        immutable: Some(true),
        ..Default::default()
    }))
}
