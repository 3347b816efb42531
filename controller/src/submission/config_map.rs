//! The driver's `spark.properties` ConfigMap, and the executor pod-template ConfigMap.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ConfigMap, Container, Pod, PodSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use spark_operator_api::decoration::decorate_pod;
use spark_operator_api::labels::{EXECUTOR_CONTAINER_NAME, SparkRole};

use super::SubmissionError;
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

/// The executor pod template the driver reads (`PodTemplateConfigMapStep`): `spec.executor.template`, or
/// a pod with only Spark's executor container, with the application's executor settings applied by the
/// same decoration the webhook applies. Spark builds every executor from it and keeps what it does not
/// set itself (`docs/executor-template.md`), so executors carry their settings even when the webhook is
/// off or fails open. Unlike Kubeflow, no ownerReference to the SparkApplication is added to it:
/// executors are owned by the driver pod alone, so they go with it (Kubeflow #2961).
pub fn executor_pod_template(conf: &DriverConf<'_>) -> Result<Option<ConfigMap>, SubmissionError> {
    let Some(name) = conf.executor_template_config_map_name() else {
        return Ok(None);
    };
    let template = match conf.app.spec.executor.pod.template.clone() {
        Some(template) => Pod {
            metadata: template.metadata.unwrap_or_default(),
            spec: template.spec,
            status: None,
        },
        None => Pod {
            spec: Some(PodSpec {
                containers: vec![Container {
                    name: EXECUTOR_CONTAINER_NAME.to_owned(),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            ..Default::default()
        },
    };
    let decorated =
        decorate_pod(&template, conf.app, SparkRole::Executor).map_err(SubmissionError::ExecutorDecoration)?;
    let mut manifest =
        serde_json::to_value(&decorated).map_err(|e| SubmissionError::ExecutorTemplate(e.to_string()))?;
    // A pod's metadata is never absent in k8s-openapi; an empty one is left out, as the spec wrote it.
    if let Some(fields) = manifest.as_object_mut()
        && fields
            .get("metadata")
            .is_some_and(|m| m.as_object().is_some_and(|m| m.is_empty()))
    {
        fields.remove("metadata");
    }
    let yaml = serde_yaml::to_string(&manifest).map_err(|e| SubmissionError::ExecutorTemplate(e.to_string()))?;
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

#[cfg(test)]
#[path = "executor_template_tests.rs"]
mod tests;
