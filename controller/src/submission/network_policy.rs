//! The NetworkPolicy Spark 4 creates (`NetworkPolicyFeatureStep`): executors accept connections only from
//! pods of their own application.
//!
//! Built when spark-submit would build it ([`super::NetworkPolicyMode::AsSpark`], the default: Spark >=
//! 4.0 unless the application excludes the step), so that native submission is no less isolated than
//! spark-submit; an operator-wide option turns it off where policies are managed elsewhere. One
//! addition: ports the application exposes on executors (the Prometheus exporter, `executor.ports`)
//! are open to every source, since under Spark's policy Prometheus could not scrape what the
//! application asks it to.

use std::collections::BTreeMap;

use k8s_openapi::api::networking::v1::{
    NetworkPolicy, NetworkPolicyIngressRule, NetworkPolicyPeer, NetworkPolicyPort, NetworkPolicySpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use spark_operator_api::labels::{LABEL_SPARK_APP_SELECTOR, LABEL_SPARK_ROLE};

use super::driver_conf::DriverConf;

pub fn build(conf: &DriverConf<'_>) -> Option<NetworkPolicy> {
    if !conf.network_policy {
        return None;
    }
    let app_id = &conf.input.ids.app_id;
    let app = BTreeMap::from([(LABEL_SPARK_APP_SELECTOR.to_owned(), app_id.clone())]);
    let mut executors = app.clone();
    executors.insert(LABEL_SPARK_ROLE.to_owned(), "executor".to_owned());
    let mut ingress = vec![NetworkPolicyIngressRule {
        from: Some(vec![NetworkPolicyPeer {
            pod_selector: Some(LabelSelector {
                match_labels: Some(app.clone()),
                ..Default::default()
            }),
            ..Default::default()
        }]),
        ..Default::default()
    }];
    let exposed = exposed_executor_ports(conf);
    if !exposed.is_empty() {
        ingress.push(NetworkPolicyIngressRule {
            ports: Some(exposed),
            ..Default::default()
        });
    }
    Some(NetworkPolicy {
        metadata: ObjectMeta {
            name: Some(conf.network_policy_name()),
            namespace: Some(conf.namespace.clone()),
            labels: Some(app),
            ..Default::default()
        },
        spec: Some(NetworkPolicySpec {
            pod_selector: Some(LabelSelector {
                match_labels: Some(executors),
                ..Default::default()
            }),
            ingress: Some(ingress),
            ..Default::default()
        }),
    })
}

fn exposed_executor_ports(conf: &DriverConf<'_>) -> Vec<NetworkPolicyPort> {
    let spec = &conf.app.spec;
    let port = |number: i32, protocol: &str| NetworkPolicyPort {
        port: Some(IntOrString::Int(number)),
        protocol: Some(if protocol.is_empty() { "TCP" } else { protocol }.to_owned()),
        ..Default::default()
    };
    let mut ports: Vec<NetworkPolicyPort> = spec
        .executor
        .ports
        .iter()
        .map(|p| port(p.container_port, &p.protocol))
        .collect();
    if let Some(monitoring) = spec.monitoring.as_ref().filter(|m| m.expose_executor_metrics)
        && let Some(prometheus) = &monitoring.prometheus
    {
        ports.push(port(prometheus.port_or_default(), "TCP"));
    }
    ports
}
