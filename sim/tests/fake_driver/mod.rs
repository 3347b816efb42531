//! What the fake-driver tests share: a two-node simulated cluster, and a hand-made driver pod with its
//! `spark.properties` ConfigMap and ServiceAccount, as the operator would create them.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::time::Duration;

use kube_sim::node::NodesConfig;
use kube_sim::registry::Gvr;
use kube_sim::store::{Store, WriteOptions};
use kube_sim::{Sim, SimConfig};
use serde_json::{Value, json};

pub fn gvr(resource: &str) -> Gvr {
    Gvr::new("", "v1", resource)
}

pub async fn start() -> (Sim, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = SimConfig::new(dir.path().join("data"));
    config.root_ca_configmap = true;
    config.nodes = NodesConfig::with_nodes(2);
    let sim = Sim::start(config).await.expect("sim starts");
    (sim, dir)
}

pub async fn until<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    for _ in 0..1000 {
        if let Some(v) = f() {
            return v;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("timed out waiting for {what}");
}

/// What spark-submit (or the operator) writes into the driver's ConfigMap.
pub fn spark_properties(extra: &[(&str, &str)]) -> String {
    let mut props: BTreeMap<&str, &str> = BTreeMap::from([
        ("spark.app.name", "spark-pi"),
        ("spark.app.id", "spark-962b896e900743c5be4c7ba477842b6c"),
        ("spark.master", "k8s\\://https\\://10.96.0.1\\:443"),
        ("spark.submit.deployMode", "cluster"),
        ("spark.kubernetes.namespace", "default"),
        ("spark.kubernetes.driver.pod.name", "spark-pi-driver"),
        ("spark.kubernetes.container.image", "spark\\:4.0.0"),
        ("spark.kubernetes.authenticate.driver.serviceAccountName", "spark"),
        ("spark.executor.instances", "2"),
        ("spark.executor.memory", "512m"),
        ("spark.driver.host", "spark-pi-9b5e8aa20138403b-driver-svc.default.svc"),
        ("spark.driver.port", "7078"),
        (
            "spark.kubernetes.executor.label.sparkoperator.k8s.io/app-name",
            "spark-pi",
        ),
        (
            "spark.kubernetes.executor.label.sparkoperator.k8s.io/launched-by-spark-operator",
            "true",
        ),
        ("spark.kubernetes.executor.annotation.team", "data-{{EXECUTOR_ID}}"),
    ]);
    props.extend(extra.iter().copied());
    let mut text = String::from("#Java properties built from Kubernetes config map with name: spark-drv-conf-map\n");
    for (k, v) in props {
        text.push_str(&format!("{k}={v}\n"));
    }
    text
}

pub async fn create_config_map(store: &Store, properties: String) {
    let cm = json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": { "name": "spark-drv-74ac75a201384224-conf-map" },
        "data": { "spark.properties": properties }
    });
    store
        .create(&gvr("configmaps"), "default", cm, &WriteOptions::default())
        .await
        .expect("configmap");
}

/// The driver pod as spark-submit creates it (trimmed to what matters here).
pub fn driver_pod(annotations: Value) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": "spark-pi-driver",
            "labels": {
                "spark-app-name": "spark-pi", "spark-version": "4.3.0", "spark-role": "driver",
                "spark-app-selector": "spark-962b896e900743c5be4c7ba477842b6c",
                "sparkoperator.k8s.io/app-name": "spark-pi"
            },
            "annotations": annotations
        },
        "spec": {
            "restartPolicy": "Never",
            "serviceAccountName": "spark",
            "containers": [{
                "name": "spark-kubernetes-driver",
                "image": "spark:4.0.0",
                "args": ["driver", "--properties-file", "/opt/spark/conf/spark.properties",
                         "--class", "org.apache.spark.examples.SparkPi", "local:///opt/spark/examples/jars/spark-examples.jar", "1000"],
                "env": [{ "name": "SPARK_USER", "value": "root" }, { "name": "SPARK_CONF_DIR", "value": "/opt/spark/conf" }],
                "resources": { "requests": { "cpu": "1", "memory": "896Mi" }, "limits": { "memory": "896Mi" } },
                "volumeMounts": [
                    { "name": "spark-local-dir-1", "mountPath": "/var/data/spark-ac6b7d30" },
                    { "name": "spark-conf-volume-driver", "mountPath": "/opt/spark/conf" }
                ]
            }],
            "volumes": [
                { "name": "spark-local-dir-1", "emptyDir": {} },
                { "name": "spark-conf-volume-driver", "configMap": {
                    "name": "spark-drv-74ac75a201384224-conf-map",
                    "items": [{ "key": "spark.properties", "path": "spark.properties", "mode": 420 }] } }
            ]
        }
    })
}

/// The driver's ServiceAccount `spark` with the Role the Kubeflow chart gives Spark jobs (a real
/// cluster's RBAC refuses the driver's requests without it).
pub async fn create_service_account(store: &Store) {
    kube_sim::auth::spark::create_spark_job_rbac(store, "default", "spark")
        .await
        .expect("service account and its role");
}

/// Only the ServiceAccount, without any Role: the driver's requests are refused.
pub async fn create_service_account_without_role(store: &Store) {
    let sa = json!({ "apiVersion": "v1", "kind": "ServiceAccount", "metadata": { "name": "spark" } });
    store
        .create(&gvr("serviceaccounts"), "default", sa, &WriteOptions::default())
        .await
        .expect("service account");
}
