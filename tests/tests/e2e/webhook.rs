//! The admission webhook on the simulated cluster, which calls it over HTTPS with the caBundle the
//! webhook keeps, as kube-apiserver does:
//!
//! - spec mistakes and foreign owners are refused at create, with every error and its path (through
//!   kubectl too), a same-namespace owner is admitted, and Kubeflow's examples are admitted;
//! - a rich application's executors get every setting from the webhook alone (template path off);
//! - **deleted applications**, trials where the application is deleted while its driver creates
//!   executors, three ways: webhook on with the template off (every executor fully configured or
//!   refused), template only (only the documented gaps), and webhook registered but down with
//!   `failurePolicy: Ignore` and the template off (half-configured pods appear: the test can fail).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use serde::Deserialize as _;
use serde_json::Value;
use spark_operator_api::SparkApplication;
use spark_operator_e2e::{Cluster, ClusterOptions, Poll, app_yaml, free_port, poll};

const LIMIT: Duration = Duration::from_secs(120);

async fn create_err(cluster: &Cluster, yaml: &str) -> Option<String> {
    let app: SparkApplication = serde_yaml::from_str(yaml).expect("a manifest");
    match cluster.apps("default").create(&PostParams::default(), &app).await {
        Ok(_) => None,
        Err(kube::Error::Api(status)) => Some(status.message),
        Err(other) => Some(other.to_string()),
    }
}

const FIVE_MISTAKES: &str = r#"apiVersion: sparkoperator.k8s.io/v1beta2
kind: SparkApplication
metadata:
  name: five-mistakes
  namespace: default
spec:
  type: Scala
  mode: cluster
  image: docker.io/apache/spark:4.0.4
  mainClass: org.apache.spark.examples.SparkPi
  mainApplicationFile: local:///opt/spark/examples/jars/spark-examples.jar
  sparkVersion: 4.0.4
  sparkConf:
    spark.master: "local[*]"
  nodeSelector:
    disktype: ssd
  dynamicAllocation:
    enabled: true
    minExecutors: 5
    maxExecutors: 2
  driver:
    cores: 1
    memory: 512 megabytes
    nodeSelector:
      zone: a
  executor:
    instances: 1
    cores: 1
    memory: lots
"#;
const FIVE_PATHS: [&str; 5] = [
    "spec.sparkConf[spark.master]",
    "spec.nodeSelector",
    "spec.dynamicAllocation",
    "spec.driver.memory",
    "spec.executor.memory",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mistakes_and_foreign_owners_are_refused_at_create_and_kubeflow_examples_admitted() {
    let cluster = Cluster::start(ClusterOptions { nodes: 0, ..ClusterOptions::default() }).await;
    let _webhook = cluster.webhook().await;

    let message = create_err(&cluster, FIVE_MISTAKES).await.expect("five mistakes are refused");
    for path in FIVE_PATHS {
        assert!(message.contains(path), "{path} in: {message}");
    }
    // kubectl shows the same, as users see it at `kubectl apply`.
    if let Ok(output) = std::process::Command::new("kubectl")
        .args(["--kubeconfig", &cluster.sim.kubeconfig_path().display().to_string(), "apply", "-f", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut child| {
            use std::io::Write as _;
            if let Some(stdin) = child.stdin.as_mut() {
                stdin.write_all(FIVE_MISTAKES.as_bytes())?;
            }
            child.wait_with_output()
        })
    {
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "kubectl apply succeeded: {stderr}");
        for path in FIVE_PATHS {
            assert!(stderr.contains(path), "{path} in kubectl's output: {stderr}");
        }
    } else {
        eprintln!("kubectl is not on PATH: the kubectl half of this check is skipped");
    }

    // An owner in another namespace: Kubernetes would garbage-collect the application at once.
    let owned = |name: &str, owner: &str, uid: &str| {
        app_yaml(name, "1s", 0, 1, "").replace(
            "  namespace: default\n",
            &format!(
                "  namespace: default\n  ownerReferences:\n  - {{apiVersion: v1, kind: ConfigMap, name: {owner}, uid: {uid}}}\n"
            ),
        )
    };
    let config_maps: Api<ConfigMap> = Api::namespaced(cluster.client.clone(), "default");
    let local: ConfigMap = serde_json::from_value(serde_json::json!({"metadata": {"name": "local-owner"}})).unwrap();
    let local = config_maps.create(&PostParams::default(), &local).await.unwrap();
    let elsewhere: ConfigMap = serde_json::from_value(serde_json::json!({"metadata": {"name": "remote-owner"}})).unwrap();
    let remote = Api::<ConfigMap>::namespaced(cluster.client.clone(), "kube-system")
        .create(&PostParams::default(), &elsewhere)
        .await
        .unwrap();
    let refused = create_err(&cluster, &owned("foreign", "remote-owner", remote.metadata.uid.as_deref().unwrap()))
        .await
        .expect("a foreign owner is refused");
    assert!(refused.contains("metadata.ownerReferences[0]") && refused.contains("garbage-collects"), "{refused}");
    let missing = create_err(&cluster, &owned("orphan", "nobody", "0000")).await.expect("a missing owner is refused");
    assert!(missing.contains("is not in namespace"), "{missing}");
    assert_eq!(create_err(&cluster, &owned("local", "local-owner", local.metadata.uid.as_deref().unwrap())).await, None);

    // Every Kubeflow example is admitted.
    let examples = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/fixtures/kubeflow-examples");
    let mut admitted = 0;
    for entry in std::fs::read_dir(&examples).expect("the shared Kubeflow examples") {
        let path = entry.unwrap().path();
        let text = std::fs::read_to_string(&path)
            .unwrap()
            .replace("{IMAGE_REGISTRY}", "registry.example.com")
            .replace("{IMAGE_REPOSITORY}", "spark")
            .replace("{IMAGE_TAG}", "4.0.4");
        // Each example in a namespace of its own: several share names.
        let namespace = format!("ex-{}", path.file_stem().unwrap().to_string_lossy());
        let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(cluster.client.clone());
        let ns = serde_json::from_value(serde_json::json!({"metadata": {"name": namespace}})).unwrap();
        namespaces.create(&PostParams::default(), &ns).await.unwrap();
        for document in serde_yaml::Deserializer::from_str(&text) {
            let mut object = Value::deserialize(document).unwrap();
            object["metadata"]["namespace"] = Value::from(namespace.clone());
            let kind = object["kind"].as_str().unwrap_or_default().to_owned();
            let api_version = object["apiVersion"].as_str().unwrap_or_default().to_owned();
            if !api_version.starts_with("sparkoperator.k8s.io/") {
                // What the example needs beside it (a ConfigMap, a Secret), of whatever kind it is.
                let (group, version) = api_version.split_once('/').unwrap_or(("", &api_version));
                let gvk = kube::core::GroupVersionKind::gvk(group, version, &kind);
                let (resource, _) = kube::discovery::pinned_kind(&cluster.client, &gvk).await.unwrap();
                let api: Api<kube::api::DynamicObject> =
                    Api::namespaced_with(cluster.client.clone(), &namespace, &resource);
                let object: kube::api::DynamicObject = serde_json::from_value(object).unwrap();
                api.create(&PostParams::default(), &object).await.unwrap();
                continue;
            }
            let resource = kube::api::ApiResource {
                group: "sparkoperator.k8s.io".into(),
                version: "v1beta2".into(),
                api_version: "sparkoperator.k8s.io/v1beta2".into(),
                plural: format!("{}s", kind.to_lowercase()),
                kind,
            };
            let api: Api<kube::api::DynamicObject> = Api::namespaced_with(cluster.client.clone(), &namespace, &resource);
            let object: kube::api::DynamicObject = serde_json::from_value(object).unwrap();
            api.create(&PostParams::default(), &object)
                .await
                .unwrap_or_else(|e| panic!("{} is refused: {e}", path.display()));
            admitted += 1;
        }
    }
    assert_eq!(admitted, 10);
}
