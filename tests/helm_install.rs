//! The chart (`charts/spark-operator`) installed by real Helm (`helm-python-sdk`, Helm v4's Go SDK) into a
//! 3-node simulated cluster with RBAC and Pod Security enforced, running the production binary
//! (`--no-default-features`, no simulator in it) as the chart's image: every pod of the Deployment and of
//! the DaemonSet, and the uninstall hook's Job, is that binary as a real process.
//!
//! One test, in phases, because each phase needs the previous one's state: install (the Deployment 2/2
//! ready, the DaemonSet 3/3); spark-pi to COMPLETED under instant pod GC with the operator's pod watch
//! blinded to terminations (the sim's fault), so the driver's end can only come from the agent; its log
//! through `spark-operator logs` after the pods are gone; `helm upgrade` with changed values while
//! applications run, none losing its end; `helm uninstall`: the hook leaves no webhook configuration, no
//! finalizer, no certificate Secret, and pods can still be created in the job namespace.
//!
//! Needs the Helm venv (`tests/helm/setup.sh`), root for process pods, and the production binary
//! (`SPARK_OPERATOR_IMAGE_BINARY`, default `target/production/debug/spark-operator`, which `.ci/run`
//! builds). Each missing piece makes the test say why it skips, except under `CI=true`, where it fails.

// Test code: a panic is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;
use support::chart::*;

use std::collections::BTreeMap;

use k8s_openapi::api::admissionregistration::v1::{MutatingWebhookConfiguration, ValidatingWebhookConfiguration};
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;
use spark_operator_dev::Cluster;

async fn deployment_ready(cluster: &Cluster, name: &str, replicas: i32, generation_after: i64) -> Deployment {
    let client = &cluster.client;
    let api: Api<Deployment> = Api::namespaced(client.clone(), NAMESPACE);
    eventually(&format!("Deployment {name} {replicas}/{replicas}"), LIMIT, || async {
        let d = api.get(name).await.map_err(|e| e.to_string())?;
        let status = d.status.clone().unwrap_or_default();
        let fresh = status.observed_generation.unwrap_or(0) >= d.metadata.generation.unwrap_or(0)
            && d.metadata.generation.unwrap_or(0) > generation_after;
        let done = status.ready_replicas == Some(replicas)
            && status.updated_replicas == Some(replicas)
            && status.replicas == Some(replicas);
        if fresh && done {
            Ok(d)
        } else {
            Err(format!(
                "{status:?}\nrefused: {:#?}\n{}",
                refused(cluster),
                pods_report(client, NAMESPACE).await
            ))
        }
    })
    .await
}

async fn daemonset_ready(cluster: &Cluster, name: &str, nodes: i32, generation_after: i64) -> DaemonSet {
    let client = &cluster.client;
    let api: Api<DaemonSet> = Api::namespaced(client.clone(), AGENTS);
    eventually(&format!("DaemonSet {name} {nodes}/{nodes}"), LIMIT, || async {
        let d = api.get(name).await.map_err(|e| e.to_string())?;
        let status = d.status.clone().unwrap_or_default();
        let fresh = status.observed_generation.unwrap_or(0) >= d.metadata.generation.unwrap_or(0)
            && d.metadata.generation.unwrap_or(0) > generation_after;
        let done = status.number_ready == nodes && status.updated_number_scheduled == Some(nodes);
        if fresh && done {
            Ok(d)
        } else {
            Err(format!(
                "{status:?}\nrefused: {:#?}\n{}",
                refused(cluster),
                pods_report(client, AGENTS).await
            ))
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_chart_installs_runs_spark_pi_upgrades_and_uninstalls_cleanly() {
    let Some((python, binary)) = prerequisites() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("helm");
    let cluster = start_cluster(dir.path(), &binary).await;
    let admin = cluster.client.clone();
    let kubeconfig = cluster.sim.kubeconfig_path().to_owned();
    // Terminations hidden from every request of the operator (its User-Agent), as in the agent's tests:
    // the driver's end reaches the status through the agent or not at all.
    cluster.sim.faults().hide_terminations("spark-operator/");

    // Install.
    let chart = repo_root().join("charts/spark-operator");
    let chart = chart.to_str().unwrap();
    let installed = helm(
        &python,
        &home,
        &kubeconfig,
        &["install", chart, RELEASE, "--timeout", "300"],
    )
    .await;
    installed.unwrap_or_else(|e| panic!("helm install: {e}"));
    let deployment = deployment_ready(&cluster, "spark-operator-controller", 2, 0).await;
    let daemonset = daemonset_ready(&cluster, "spark-operator-agent", 3, 0).await;

    // spark-pi through the installed operator.
    submit(&admin, spark_pi("spark-pi", "3s")).await;
    let app = completed(&cluster, "spark-pi").await;
    let status = app.status.clone().unwrap();
    let driver = status
        .driver_termination
        .clone()
        .unwrap_or_else(|| panic!("no driver termination in {status:?}"));
    assert_eq!(driver.exit_code, Some(0), "{driver:?}");
    assert!(
        driver.container_id.as_deref().is_some_and(|id| !id.is_empty()),
        "the agent's report names the container: {driver:?}"
    );
    assert!(
        driver.log_tail.as_deref().is_some_and(|t| !t.is_empty()),
        "the agent's report carries the log tail: {driver:?}"
    );
    assert!(
        format!("{:?}", driver.observed_by).contains("Agent"),
        "with the pod watch blind, only the agent saw the end: {driver:?}"
    );
    let counts = status.executor_counts.clone().unwrap_or_default();
    assert_eq!(counts.completed + counts.failed + counts.unknown, 1, "{status:?}");
    // Its executor went through the webhook, which mutated it (the operator pods' own count).
    let mutated = operator_metric_sum(&admin, "spark_operator_webhook_admissions{kind=\"Pod\"").await;
    assert!(
        mutated >= 2.0,
        "the driver and executor pods admitted by the webhook: {mutated}"
    );
    let pods_gone: Api<Pod> = Api::namespaced(admin.clone(), JOBS);
    assert!(
        pods_gone.list(&ListParams::default()).await.unwrap().items.is_empty(),
        "instant pod GC removed spark-pi's pods"
    );

    assert_eq!(
        refused(&cluster),
        Vec::<String>::new(),
        "the chart grants all the operator and agents need"
    );

    // `spark-operator logs spark-pi` with a user allowed pods/log in the job namespace and to reach the agents.
    let reader = reader_kubeconfig(&cluster, dir.path()).await;
    let out = tokio::process::Command::new(&binary)
        .args(["logs", "spark-pi", "-n", JOBS, "--kubeconfig", reader.to_str().unwrap()])
        .output()
        .await
        .unwrap();
    let printed = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "spark-operator logs: {}\n{printed}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        printed.contains("INFO SparkContext: Submitted application"),
        "the driver's whole log: {printed}"
    );

    // Upgrade with changed values while applications run: the pods roll, no end is lost.
    for i in 0..4 {
        submit(&admin, spark_pi(&format!("during-upgrade-{i}"), "6s")).await;
    }
    let values = json!({ "controller": { "workers": 16 }, "agent": { "spoolMaxAge": "3d" } }).to_string();
    helm(
        &python,
        &home,
        &kubeconfig,
        &["upgrade", chart, RELEASE, "--set-json", &values, "--timeout", "300"],
    )
    .await
    .unwrap_or_else(|e| panic!("helm upgrade: {e}"));
    let generation = deployment.metadata.generation.unwrap_or(0);
    deployment_ready(&cluster, "spark-operator-controller", 2, generation).await;
    daemonset_ready(
        &cluster,
        "spark-operator-agent",
        3,
        daemonset.metadata.generation.unwrap_or(0),
    )
    .await;
    let mut ends = BTreeMap::new();
    for i in 0..4 {
        let name = format!("during-upgrade-{i}");
        let app = completed(&cluster, &name).await;
        let termination = app.status.and_then(|s| s.driver_termination);
        ends.insert(name, termination.and_then(|t| t.exit_code));
    }
    assert!(
        ends.values().all(|code| *code == Some(0)),
        "every driver's end recorded: {ends:?}"
    );

    assert_eq!(
        refused(&cluster),
        Vec::<String>::new(),
        "the chart grants all the operator and agents need"
    );

    // Uninstall: the hook runs; nothing of the operator's is left behind.
    helm(&python, &home, &kubeconfig, &["uninstall", RELEASE, "--timeout", "300"])
        .await
        .unwrap_or_else(|e| panic!("helm uninstall: {e}"));
    let mutating: Api<MutatingWebhookConfiguration> = Api::all(admin.clone());
    let validating: Api<ValidatingWebhookConfiguration> = Api::all(admin.clone());
    assert!(mutating.list(&ListParams::default()).await.unwrap().items.is_empty());
    assert!(validating.list(&ListParams::default()).await.unwrap().items.is_empty());
    let secrets: Api<Secret> = Api::namespaced(admin.clone(), NAMESPACE);
    let left: Vec<String> = secrets
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|s| s.metadata.name)
        .collect();
    assert!(
        !left.iter().any(|n| n.contains("webhook-ca")),
        "the certificate Secret is gone: {left:?}"
    );
    let pods: Api<Pod> = Api::all(admin.clone());
    let finalized: Vec<String> = pods
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|p| p.metadata.finalizers.as_ref().is_some_and(|f| !f.is_empty()))
        .filter_map(|p| p.metadata.name)
        .collect();
    assert!(finalized.is_empty(), "no finalizer left: {finalized:?}");
    // Pods can still be created in the job namespace (no webhook without a backend in the way).
    let jobs: Api<Pod> = Api::namespaced(admin.clone(), JOBS);
    jobs.create(
        &PostParams::default(),
        &serde_json::from_value(json!({
            "metadata": { "name": "after-uninstall", "labels": { "spark-role": "driver" } },
            "spec": { "containers": [{ "name": "c", "image": "busybox" }] },
        }))
        .unwrap(),
    )
    .await
    .unwrap_or_else(|e| panic!("a pod after uninstall: {e}"));

    // The same uninstall without the hook (`cleanup.enable: false`) leaves the operator's run-time objects
    // behind: what the checks above would have caught.
    let values = json!({ "cleanup": { "enable": false } }).to_string();
    helm(
        &python,
        &home,
        &kubeconfig,
        &["install", chart, RELEASE, "--set-json", &values, "--timeout", "300"],
    )
    .await
    .unwrap_or_else(|e| panic!("helm install without the hook: {e}"));
    deployment_ready(&cluster, "spark-operator-controller", 2, 0).await;
    eventually("the CA Secret made again", LIMIT, || async {
        secrets
            .get("spark-operator-webhook-ca")
            .await
            .map_err(|e| e.to_string())
    })
    .await;
    helm(&python, &home, &kubeconfig, &["uninstall", RELEASE, "--timeout", "300"])
        .await
        .unwrap_or_else(|e| panic!("helm uninstall without the hook: {e}"));
    assert!(
        secrets.get("spark-operator-webhook-ca").await.is_ok(),
        "without the hook the certificate Secret stays"
    );
}

/// The sum over the operator's pods of every series starting with `prefix`, read from their /metrics
/// through the API server's `pods/proxy` (as Prometheus' Kubernetes discovery reaches them).
async fn operator_metric_sum(client: &kube::Client, prefix: &str) -> f64 {
    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    let list = pods
        .list(&ListParams::default().labels("app.kubernetes.io/component=operator"))
        .await
        .unwrap();
    let mut sum = 0.0;
    for pod in list.items {
        let name = pod.metadata.name.unwrap_or_default();
        let request = http::Request::get(format!("/api/v1/namespaces/{NAMESPACE}/pods/{name}:8080/proxy/metrics"))
            .body(Vec::new())
            .unwrap();
        let text = client.request_text(request).await.unwrap_or_default();
        sum += text
            .lines()
            .filter(|l| l.starts_with(prefix))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>();
    }
    sum
}
