//! The headless driver Service (`DriverServiceFeatureStep`): how executors reach the driver.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use spark_operator_api::labels::LABEL_SPARK_APP_SELECTOR;

use super::driver_conf::DriverConf;

pub fn build(conf: &DriverConf<'_>) -> Service {
    let mut labels = BTreeMap::from([(LABEL_SPARK_APP_SELECTOR.to_owned(), conf.input.ids.app_id.clone())]);
    labels.extend(
        conf.with_prefix("spark.kubernetes.driver.service.label.")
            .map(|(k, v)| (k.to_owned(), v.to_owned())),
    );
    let annotations: BTreeMap<String, String> = conf
        .with_prefix("spark.kubernetes.driver.service.annotation.")
        .map(|(k, v)| (k.to_owned(), conf.substitute_ids(v)))
        .collect();
    let ports = conf
        .ports
        .named()
        .into_iter()
        .map(|(name, port, app_protocol)| ServicePort {
            name: Some(name.to_owned()),
            port,
            target_port: Some(IntOrString::Int(port)),
            app_protocol: app_protocol.map(str::to_owned),
            ..Default::default()
        })
        .collect();
    let features = conf.features;
    let (ip_families, ip_family_policy) = if features.service_ip_families {
        let families = conf.get("spark.kubernetes.driver.service.ipFamilies").unwrap_or("IPv4");
        let policy = conf
            .get("spark.kubernetes.driver.service.ipFamilyPolicy")
            .unwrap_or("SingleStack");
        (
            Some(families.split(',').map(|f| f.trim().to_owned()).collect()),
            Some(policy.to_owned()),
        )
    } else {
        (None, None)
    };
    let publish_not_ready = features.publish_not_ready_addresses.then(|| {
        conf.get("spark.kubernetes.driver.service.publishNotReadyAddresses")
            .is_some_and(|v| v.trim().eq_ignore_ascii_case("true"))
    });
    Service {
        metadata: ObjectMeta {
            name: Some(conf.service_name.clone()),
            namespace: Some(conf.namespace.clone()),
            labels: Some(labels),
            annotations: (!annotations.is_empty()).then_some(annotations),
            ..Default::default()
        },
        spec: Some(ServiceSpec {
            cluster_ip: Some("None".to_owned()),
            ip_families,
            ip_family_policy,
            selector: Some(conf.labels.clone()),
            ports: Some(ports),
            publish_not_ready_addresses: publish_not_ready,
            ..Default::default()
        }),
        ..Default::default()
    }
}
