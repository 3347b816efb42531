//! Spark's own `spark-submit` (fabric8 client) submits SparkPi in cluster mode against the sim.
//!
//! Opt-in: it needs a Spark distribution (a 450 MB download) and Java 17. It runs only when
//! `SPARK_HOME` points at a Spark install with `bin/spark-submit`:
//!
//! ```text
//! SPARK_HOME=$(../shared/tools/spark-submit-oracle/get-spark.sh) cargo test -p kube-sim --test spark_submit
//! ```
//!
//! Without `SPARK_HOME` the test prints why it did not run (to stderr, uncaptured) and passes.
#![allow(clippy::expect_used)]

use std::io::Write as _;
use std::path::PathBuf;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod, Service, ServiceAccount};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, ListParams, PostParams};
use kube_sim::{Sim, SimConfig};
use serde_json::json;

const NAMESPACE: &str = "spark-jobs";
const SUBMIT_TIMEOUT: Duration = Duration::from_secs(300);

/// What a typical operator passes (the oracle's `BASE_CONFS`), in our namespace. No CA file and no
/// token: fabric8 takes the CA and the client certificate from the sim's own kubeconfig.
fn confs() -> Vec<(String, String)> {
    [
        ("spark.kubernetes.submission.waitAppCompletion", "false"),
        ("spark.kubernetes.namespace", NAMESPACE),
        ("spark.kubernetes.container.image", "spark:4.0.0"),
        ("spark.kubernetes.driver.pod.name", "spark-pi-driver"),
        ("spark.app.name", "spark-pi"),
        ("spark.kubernetes.authenticate.driver.serviceAccountName", "spark"),
        ("spark.driver.cores", "1"),
        ("spark.driver.memory", "512m"),
        ("spark.executor.cores", "1"),
        ("spark.executor.memory", "512m"),
        ("spark.executor.instances", "2"),
        (
            "spark.kubernetes.driver.label.sparkoperator.k8s.io/app-name",
            "spark-pi",
        ),
        (
            "spark.kubernetes.driver.label.sparkoperator.k8s.io/launched-by-spark-operator",
            "true",
        ),
        ("spark.kubernetes.submission.connectionTimeout", "10000"),
        ("spark.kubernetes.submission.requestTimeout", "10000"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

fn owned_by_driver(refs: Option<&Vec<OwnerReference>>, driver_uid: &str) -> bool {
    refs.is_some_and(|refs| {
        refs.iter().any(|r| {
            r.api_version == "v1"
                && r.kind == "Pod"
                && r.name == "spark-pi-driver"
                && r.uid == driver_uid
                && r.controller == Some(true)
        })
    })
}

#[tokio::test]
async fn spark_submit_creates_driver_pod_service_and_configmap() {
    let Some(spark_home) = std::env::var_os("SPARK_HOME").map(PathBuf::from) else {
        // Straight to stderr: the test harness captures `eprintln!` of passing tests.
        let _ = writeln!(
            std::io::stderr(),
            "SKIPPED spark_submit: SPARK_HOME is not set. This opt-in test needs a Spark distribution and Java 17; run it with \
             SPARK_HOME=$(../shared/tools/spark-submit-oracle/get-spark.sh) cargo test -p kube-sim --test spark_submit"
        );
        return;
    };
    let submit = spark_home.join("bin").join("spark-submit");
    assert!(
        submit.is_file(),
        "SPARK_HOME={} has no bin/spark-submit",
        spark_home.display()
    );

    let dir = tempfile::tempdir().expect("tempdir");
    let sim = Sim::start(SimConfig::new(dir.path().join("data")))
        .await
        .expect("sim starts");
    sim.audit().enable();
    let client = sim.client().await.expect("client");
    let ns: Namespace = serde_json::from_value(json!({ "metadata": { "name": NAMESPACE } })).expect("namespace");
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .expect("namespace");
    // The driver runs as "spark": without it ServiceAccount admission refuses the pod.
    let sa: ServiceAccount = serde_json::from_value(json!({ "metadata": { "name": "spark" } })).expect("sa");
    Api::<ServiceAccount>::namespaced(client.clone(), NAMESPACE)
        .create(&PostParams::default(), &sa)
        .await
        .expect("service account");

    let mut cmd = tokio::process::Command::new(&submit);
    cmd.arg("--master")
        .arg(format!("k8s://{}", sim.url()))
        .arg("--deploy-mode")
        .arg("cluster");
    for (k, v) in confs() {
        cmd.arg("--conf").arg(format!("{k}={v}"));
    }
    cmd.args([
        "--class",
        "org.apache.spark.examples.SparkPi",
        "local:///opt/spark/examples/jars/spark-examples.jar",
        "1000",
    ]);
    // The sim's own kubeconfig, unchanged: its client certificate and SEC1 EC key are what fabric8
    // authenticates with, as against a kubeadm cluster with ECDSA keys.
    cmd.env("SPARK_HOME", &spark_home)
        .env("KUBECONFIG", sim.kubeconfig_path())
        .kill_on_drop(true);
    let output = match tokio::time::timeout(SUBMIT_TIMEOUT, cmd.output()).await {
        Ok(result) => result.expect("spark-submit runs (is Java 17 installed?)"),
        Err(_) => panic!("spark-submit did not finish within {SUBMIT_TIMEOUT:?}"),
    };
    let log = format!(
        "{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        output.status.success(),
        "spark-submit failed ({}):\n{log}",
        output.status
    );

    // fabric8 authenticated with the kubeconfig's client certificate (no token was given).
    let creator = sim
        .audit()
        .events()
        .into_iter()
        .find(|e| e.verb == "create" && e.resource == "pods" && e.namespace.as_deref() == Some(NAMESPACE))
        .map(|e| e.username);
    assert_eq!(creator.as_deref(), Some(kube_sim::tls::ADMIN_USER), "{log}");

    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    let driver = pods.get("spark-pi-driver").await.expect("the driver pod exists");
    let driver_uid = driver.metadata.uid.clone().expect("uid");
    let labels = driver.metadata.labels.clone().unwrap_or_default();
    assert_eq!(labels.get("spark-role").map(String::as_str), Some("driver"));
    assert_eq!(
        driver.spec.as_ref().and_then(|s| s.service_account_name.as_deref()),
        Some("spark")
    );

    let services: Api<Service> = Api::namespaced(client.clone(), NAMESPACE);
    let svcs = services.list(&ListParams::default()).await.expect("services").items;
    let svc = svcs
        .iter()
        .find(|s| s.metadata.name.as_deref().is_some_and(|n| n.ends_with("-driver-svc")))
        .unwrap_or_else(|| {
            panic!(
                "no driver Service among {:?}\n{log}",
                svcs.iter().map(|s| &s.metadata.name).collect::<Vec<_>>()
            )
        });
    assert!(
        owned_by_driver(svc.metadata.owner_references.as_ref(), &driver_uid),
        "Service owner: {:?}",
        svc.metadata.owner_references
    );
    assert_eq!(
        svc.spec.as_ref().and_then(|s| s.cluster_ip.as_deref()),
        Some("None"),
        "a headless Service"
    );
    assert!(
        svc.metadata.managed_fields.as_ref().is_some_and(|m| m
            .iter()
            .any(|f| f.manager.as_deref() == Some("fabric8") && f.operation.as_deref() == Some("Apply"))),
        "server-side applied by fabric8"
    );

    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), NAMESPACE);
    let cms = configmaps.list(&ListParams::default()).await.expect("configmaps").items;
    let conf = cms
        .iter()
        .find(|c| {
            c.metadata
                .name
                .as_deref()
                .is_some_and(|n| n.starts_with("spark-drv-") && n.ends_with("-conf-map"))
        })
        .unwrap_or_else(|| {
            panic!(
                "no driver ConfigMap among {:?}\n{log}",
                cms.iter().map(|c| &c.metadata.name).collect::<Vec<_>>()
            )
        });
    assert!(
        owned_by_driver(conf.metadata.owner_references.as_ref(), &driver_uid),
        "ConfigMap owner: {:?}",
        conf.metadata.owner_references
    );
    let props = conf
        .data
        .as_ref()
        .and_then(|d| d.get("spark.properties"))
        .expect("spark.properties");
    assert!(props.contains("spark.app.name=spark-pi"), "{props}");

    let policies: Api<NetworkPolicy> = Api::namespaced(client.clone(), NAMESPACE);
    let netpols = policies
        .list(&ListParams::default())
        .await
        .expect("network policies")
        .items;
    assert!(
        netpols
            .iter()
            .any(|p| owned_by_driver(p.metadata.owner_references.as_ref(), &driver_uid)),
        "Spark 4 also applies a NetworkPolicy owned by the driver"
    );

    // The garbage collector keeps what the driver owns while the driver exists, and removes it
    // with the driver, as on a real cluster.
    pods.delete("spark-pi-driver", &Default::default())
        .await
        .expect("delete the driver");
    let name = svc.metadata.name.clone().expect("name");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while services.get_opt(&name).await.expect("get").is_some() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the driver Service outlived its driver"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
