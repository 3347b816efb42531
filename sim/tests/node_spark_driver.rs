//! The fake Spark driver: a driver pod made by hand with its `spark.properties` ConfigMap runs
//! to Succeeded after creating and deleting its executors as Spark does; `kubectl logs` shows
//! its log, which is on the node's disk in the CRI format. Plus the failure modes: a missing
//! ConfigMap (ContainerCreating, as the kubelet does) and an OOM-killed executor.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::path::PathBuf;
use std::sync::Arc;

use kube_sim::store::{ChangeKind, Store, WriteOptions};
use serde_json::{Value, json};

mod fake_driver;
use fake_driver::*;

/// Collects every executor pod change from the store's feed, in order.
fn follow_executors(store: &Store) -> Arc<std::sync::Mutex<Vec<(ChangeKind, Value)>>> {
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let (rv, _) = store.snapshot();
    let mut feed = store.changes(rv);
    let out = seen.clone();
    tokio::spawn(async move {
        while let Ok(change) = feed.next().await {
            let obj = &change.object;
            if change.resource.resource == "pods"
                && obj.pointer("/metadata/labels/spark-role") == Some(&json!("executor"))
            {
                out.lock().unwrap().push((change.kind, Value::clone(obj)));
            }
        }
    });
    seen
}

fn pod(store: &Store, name: &str) -> Option<Value> {
    store.get(&gvr("pods"), "default", name).ok()
}

fn kubectl() -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|d| d.join("kubectl"))
        .find(|p| p.is_file())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn driver_runs_its_executors_and_succeeds() {
    let (sim, dir) = start().await;
    let store = sim.store().clone();
    create_service_account(&store).await;
    create_config_map(&store, spark_properties(&[])).await;
    let executors = follow_executors(&store);
    let annotations = json!({ "sim.spark-operator.dev/run-time": "300ms" });
    store
        .create(
            &gvr("pods"),
            "default",
            driver_pod(annotations),
            &WriteOptions::default(),
        )
        .await
        .expect("driver pod");

    let driver = until("the driver to succeed", || {
        pod(&store, "spark-pi-driver").filter(|p| p["status"]["phase"] == "Succeeded")
    })
    .await;
    let term = &driver["status"]["containerStatuses"][0]["state"]["terminated"];
    assert_eq!(
        (term["exitCode"].as_i64(), term["reason"].as_str()),
        (Some(0), Some("Completed")),
        "{driver}"
    );

    // Exactly two executors, named and labelled as Spark names and labels them.
    let created: Vec<Value> = until("both executors deleted", || {
        let seen = executors.lock().unwrap();
        let added: Vec<Value> = seen
            .iter()
            .filter(|(k, _)| *k == ChangeKind::Added)
            .map(|(_, p)| p.clone())
            .collect();
        let deleted = seen.iter().filter(|(k, _)| *k == ChangeKind::Deleted).count();
        (added.len() == 2 && deleted == 2).then_some(added)
    })
    .await;
    let mut ids = Vec::new();
    for e in &created {
        let name = e["metadata"]["name"].as_str().expect("name");
        let labels = &e["metadata"]["labels"];
        let id = labels["spark-exec-id"].as_str().expect("spark-exec-id");
        assert!(
            name.starts_with("spark-pi-") && name.ends_with(&format!("-exec-{id}")),
            "{name}"
        );
        assert_eq!(labels["spark-role"], "executor");
        assert_eq!(labels["spark-app-selector"], "spark-962b896e900743c5be4c7ba477842b6c");
        assert_eq!(labels["spark-app-name"], "spark-pi");
        assert_eq!(labels["sparkoperator.k8s.io/app-name"], "spark-pi");
        assert_eq!(labels["sparkoperator.k8s.io/launched-by-spark-operator"], "true");
        assert_eq!(e["metadata"]["annotations"]["team"], format!("data-{id}"));
        let owner = &e["metadata"]["ownerReferences"][0];
        assert_eq!(
            (
                owner["kind"].as_str(),
                owner["name"].as_str(),
                owner["controller"].as_bool()
            ),
            (Some("Pod"), Some("spark-pi-driver"), Some(true))
        );
        assert_eq!(owner["uid"], driver["metadata"]["uid"]);
        let env = e["spec"]["containers"][0]["env"].as_array().expect("env");
        assert!(
            env.iter().any(|v| v["name"] == "SPARK_EXECUTOR_ID" && v["value"] == id),
            "{env:?}"
        );
        assert_eq!(e["spec"]["serviceAccountName"], "spark");
        ids.push(id.to_string());
    }
    ids.sort();
    assert_eq!(ids, ["1", "2"]);
    // They ran, and were shut down by their driver.
    let seen = executors.lock().unwrap().clone();
    assert!(
        seen.iter().any(|(_, p)| p["status"]["phase"] == "Running"),
        "executors never ran"
    );
    for (kind, p) in seen.iter().filter(|(k, _)| *k == ChangeKind::Deleted) {
        let t = &p["status"]["containerStatuses"][0]["state"]["terminated"];
        assert_eq!(t["exitCode"], 0, "{kind:?} {p}");
    }
    assert!(
        store
            .list(
                &gvr("configmaps"),
                Some("default"),
                &kube_sim::store::ListOptions {
                    label_selector: Some("spark-role=executor".into()),
                    ..Default::default()
                }
            )
            .expect("list")["items"]
            .as_array()
            .is_some_and(|i| i.is_empty()),
        "the executor ConfigMap is deleted with the executors"
    );

    // The log file on the node, in the CRI format.
    let node = sim
        .nodes()
        .node(driver["spec"]["nodeName"].as_str().expect("node"))
        .expect("node handle");
    let uid = driver["metadata"]["uid"].as_str().expect("uid");
    let path = node
        .log_dir()
        .join(format!("default_spark-pi-driver_{uid}/spark-kubernetes-driver/0.log"));
    let content = std::fs::read_to_string(&path).expect("driver log file");
    assert!(content.lines().count() >= 4, "{content}");
    for line in content.lines() {
        let parts: Vec<&str> = line.splitn(4, ' ').collect();
        assert_eq!(parts.len(), 4, "{line}");
        assert!(parts[0].parse::<jiff::Timestamp>().is_ok(), "timestamp of {line}");
        assert!(matches!(parts[1], "stdout" | "stderr"), "{line}");
        assert!(matches!(parts[2], "F" | "P"), "{line}");
    }
    assert!(
        content.contains(" stdout F INFO SparkContext: Successfully stopped SparkContext"),
        "{content}"
    );

    // kubectl logs reads it through the API server.
    match kubectl() {
        None => println!("SKIPPED kubectl logs: kubectl is not on PATH"),
        Some(bin) => {
            let out = tokio::process::Command::new(bin)
                .arg("--kubeconfig")
                .arg(sim.kubeconfig_path())
                .args(["logs", "spark-pi-driver", "--tail", "2"])
                .env("HOME", dir.path())
                .output()
                .await
                .expect("kubectl runs");
            let stdout = String::from_utf8_lossy(&out.stdout);
            assert!(
                out.status.success(),
                "kubectl logs failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            assert_eq!(stdout.lines().count(), 2, "{stdout}");
            assert!(
                stdout.contains("INFO SparkContext: Successfully stopped SparkContext"),
                "{stdout}"
            );
            assert!(
                !stdout.contains(" stdout F "),
                "kubectl logs shows the text, not the CRI framing: {stdout}"
            );
        }
    }
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_config_map_keeps_the_driver_creating_then_it_runs() {
    let (sim, _dir) = start().await;
    let store = sim.store().clone();
    create_service_account(&store).await;
    let annotations = json!({ "sim.spark-operator.dev/run-time": "100ms" });
    store
        .create(
            &gvr("pods"),
            "default",
            driver_pod(annotations),
            &WriteOptions::default(),
        )
        .await
        .expect("driver pod");
    let waiting = until("a FailedMount event", || {
        let events = store.list(&gvr("events"), Some("default"), &Default::default()).ok()?;
        events["items"]
            .as_array()?
            .iter()
            .find(|e| e["reason"] == "FailedMount")
            .cloned()
    })
    .await;
    assert_eq!(
        waiting["message"],
        "MountVolume.SetUp failed for volume \"spark-conf-volume-driver\" : configmap \"spark-drv-74ac75a201384224-conf-map\" not found"
    );
    // The event and the status are separate writes: wait for the status too.
    let p = until("the driver's ContainerCreating status", || {
        pod(&store, "spark-pi-driver")
            .filter(|p| p["status"]["containerStatuses"][0]["state"]["waiting"]["reason"] == "ContainerCreating")
    })
    .await;
    assert_eq!(p["status"]["phase"], "Pending");
    assert!(p["status"]["podIP"].is_null(), "no sandbox without its volumes: {p}");
    // The kubelet retries the mount: once the ConfigMap exists the driver runs.
    create_config_map(&store, spark_properties(&[])).await;
    until("the driver to succeed", || {
        pod(&store, "spark-pi-driver").filter(|p| p["status"]["phase"] == "Succeeded")
    })
    .await;
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oom_killed_executor_is_replaced() {
    let (sim, _dir) = start().await;
    let store = sim.store().clone();
    create_service_account(&store).await;
    // Only executor 1 is OOM-killed, through Spark's own executor annotation conf.
    let props = spark_properties(&[(
        "spark.kubernetes.executor.annotation.sim.spark-operator.dev/exec-1.oom-kill",
        "true",
    )]);
    create_config_map(&store, props).await;
    let executors = follow_executors(&store);
    let annotations = json!({ "sim.spark-operator.dev/run-time": "300ms" });
    store
        .create(
            &gvr("pods"),
            "default",
            driver_pod(annotations),
            &WriteOptions::default(),
        )
        .await
        .expect("driver pod");
    until("the driver to succeed", || {
        pod(&store, "spark-pi-driver").filter(|p| p["status"]["phase"] == "Succeeded")
    })
    .await;
    let seen = executors.lock().unwrap().clone();
    let oom = seen
        .iter()
        .find(|(_, p)| p["status"]["containerStatuses"][0]["state"]["terminated"]["reason"] == "OOMKilled")
        .map(|(_, p)| p.clone())
        .expect("an OOMKilled executor");
    assert_eq!(oom["metadata"]["labels"]["spark-exec-id"], "1");
    assert_eq!(oom["status"]["phase"], "Failed");
    assert_eq!(
        oom["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"],
        137
    );
    let mut ids: Vec<String> = seen
        .iter()
        .filter(|(k, _)| *k == ChangeKind::Added)
        .map(|(_, p)| {
            p["metadata"]["labels"]["spark-exec-id"]
                .as_str()
                .unwrap_or("")
                .to_string()
        })
        .collect();
    ids.sort();
    assert_eq!(ids, ["1", "2", "3"], "executor 1 is replaced by executor 3");
    sim.shutdown().await;
}

/// The driver pod with the executor pod template mounted as Spark mounts it
/// (`PodTemplateConfigMapStep`).
fn driver_pod_with_template() -> Value {
    let mut pod = driver_pod(json!({ "sim.spark-operator.dev/run-time": "100ms" }));
    pod["spec"]["containers"][0]["volumeMounts"]
        .as_array_mut()
        .unwrap()
        .push(json!({ "name": "pod-template-volume", "mountPath": "/opt/spark/pod-template" }));
    pod["spec"]["volumes"].as_array_mut().unwrap().push(json!({
        "name": "pod-template-volume",
        "configMap": { "name": "spark-pi-driver-podspec-conf-map",
                       "items": [{ "key": "podspec-configmap-key", "path": "pod-spec-template.yml" }] }
    }));
    pod
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn executors_are_built_from_the_mounted_pod_template() {
    let (sim, _dir) = start().await;
    let store = sim.store().clone();
    create_service_account(&store).await;
    create_config_map(
        &store,
        spark_properties(&[
            (
                "spark.kubernetes.executor.podTemplateFile",
                "/opt/spark/pod-template/pod-spec-template.yml",
            ),
            (
                "spark.kubernetes.executor.podTemplateContainerName",
                "spark-kubernetes-executor",
            ),
            ("spark.executor.instances", "1"),
        ]),
    )
    .await;
    let template = "apiVersion: v1\nkind: Pod\nspec:\n  nodeSelector: {kubernetes.io/os: linux}\n  tolerations:\n  - {key: dedicated, operator: Equal, value: spark, effect: NoSchedule}\n  volumes:\n  - {name: data, emptyDir: {}}\n  containers:\n  - name: spark-kubernetes-executor\n    env:\n    - {name: FROM_TEMPLATE, value: '1'}\n    volumeMounts:\n    - {name: data, mountPath: /data}\n    resources:\n      limits: {memory: 2Gi}\n";
    let cm = json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": { "name": "spark-pi-driver-podspec-conf-map" },
        "data": { "podspec-configmap-key": template }
    });
    store
        .create(&gvr("configmaps"), "default", cm, &WriteOptions::default())
        .await
        .expect("template configmap");
    let executors = follow_executors(&store);
    store
        .create(
            &gvr("pods"),
            "default",
            driver_pod_with_template(),
            &WriteOptions::default(),
        )
        .await
        .expect("driver pod");
    let created = until("an executor pod", || {
        executors
            .lock()
            .unwrap()
            .iter()
            .find(|(kind, _)| *kind == ChangeKind::Added)
            .map(|(_, p)| p.clone())
    })
    .await;
    let spec = &created["spec"];
    assert_eq!(spec["nodeSelector"]["kubernetes.io/os"], "linux");
    assert_eq!(spec["tolerations"][0]["key"], "dedicated");
    assert!(spec["volumes"].as_array().unwrap().iter().any(|v| v["name"] == "data"));
    let spark = &spec["containers"][0];
    assert!(
        spark["env"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["name"] == "FROM_TEMPLATE")
    );
    assert!(
        spark["volumeMounts"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["mountPath"] == "/data")
    );
    // Spark's memory limit (512m + 384m overhead), not the template's.
    assert_eq!(spark["resources"]["limits"]["memory"], "896Mi");
    // It schedules and runs: the template's selector matches the sim's nodes.
    until("the driver to succeed", || {
        pod(&store, "spark-pi-driver").filter(|p| p["status"]["phase"] == "Succeeded")
    })
    .await;
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreadable_pod_template_fails_the_driver_as_spark() {
    let (sim, _dir) = start().await;
    let store = sim.store().clone();
    create_service_account(&store).await;
    create_config_map(
        &store,
        spark_properties(&[(
            "spark.kubernetes.executor.podTemplateFile",
            "/opt/spark/pod-template/pod-spec-template.yml",
        )]),
    )
    .await;
    let cm = json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": { "name": "spark-pi-driver-podspec-conf-map" },
        // Mounted (the kubelet refuses a missing key), but not a pod: fabric8 cannot load it.
        "data": { "podspec-configmap-key": "- not\n- a pod\n" }
    });
    store
        .create(&gvr("configmaps"), "default", cm, &WriteOptions::default())
        .await
        .expect("template configmap");
    store
        .create(
            &gvr("pods"),
            "default",
            driver_pod_with_template(),
            &WriteOptions::default(),
        )
        .await
        .expect("driver pod");
    let failed = until("the driver to fail", || {
        pod(&store, "spark-pi-driver").filter(|p| p["status"]["phase"] == "Failed")
    })
    .await;
    assert_eq!(
        failed["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"],
        1
    );
    sim.shutdown().await;
}
