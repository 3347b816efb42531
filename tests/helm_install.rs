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

#[path = "support/kube_access.rs"]
#[allow(dead_code)]
mod kube_access;
use kube_access::{account, create, kubeconfig_with_token};

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use k8s_openapi::api::admissionregistration::v1::{MutatingWebhookConfiguration, ValidatingWebhookConfiguration};
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::core::v1::{Namespace, Pod, Secret};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::{Api, ListParams, PostParams};
use kube_sim::node::{LocalImage, PodGc};
use serde_json::{Value, json};
use spark_operator_api::SparkApplication;
use spark_operator_dev::{Cluster, ClusterOptions};

const RELEASE: &str = "spark-operator";
const NAMESPACE: &str = "spark-operator";
const AGENTS: &str = "spark-operator-agent";
const JOBS: &str = "default";
/// The chart's default image (`image.repository`, any tag).
const IMAGE: &str = "spark-operator/spark-operator";
/// Kubeflow's image, which a Kubeflow values file names: the same binary stands for it here.
const KUBEFLOW_IMAGE: &str = "ghcr.io/kubeflow/spark-operator/controller";
const LIMIT: Duration = Duration::from_secs(180);

/// This test belongs to the root package: its manifest directory is the repository's.
fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Skips the test with `reason`, or fails it under `CI=true`.
fn skip(reason: &str) {
    assert!(std::env::var("CI").as_deref() != Ok("true"), "CI=true and {reason}");
    println!("SKIPPED: {reason}");
}

/// The production binary the image stands for.
fn production_binary() -> Option<PathBuf> {
    let path = std::env::var_os("SPARK_OPERATOR_IMAGE_BINARY")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("target/production/debug/spark-operator"));
    if path.is_file() {
        return Some(path);
    }
    skip(&format!(
        "no production binary at {} (cargo build --no-default-features -p spark-operator --target-dir target/production)",
        path.display()
    ));
    None
}

fn helm_python() -> Option<PathBuf> {
    let venv = std::env::var_os("HELM_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("target/helm-venv"));
    let python = venv.join("bin/python");
    let importable = std::process::Command::new(&python)
        .args(["-c", "import helm_python"])
        .output()
        .is_ok_and(|o| o.status.success());
    if importable {
        return Some(python);
    }
    skip(&format!(
        "no Helm SDK: {} cannot import helm_python (run tests/helm/setup.sh)",
        python.display()
    ));
    None
}

/// `tests/helm/helm.py ACTION ... --kubeconfig K -n spark-operator`: Helm's result, or its error document.
async fn helm(python: &Path, home: &Path, kubeconfig: &Path, args: &[&str]) -> Result<Value, Value> {
    let out = tokio::process::Command::new(python)
        .arg(repo_root().join("tests/helm/helm.py"))
        .args(args)
        .args(["--kubeconfig", kubeconfig.to_str().unwrap(), "-n", NAMESPACE])
        .env("HELM_CACHE_HOME", home.join("cache"))
        .env("HELM_CONFIG_HOME", home.join("config"))
        .env("HELM_DATA_HOME", home.join("data"))
        .env_remove("KUBECONFIG")
        .kill_on_drop(true)
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let doc: Value = serde_json::from_str(&stdout).unwrap_or_else(|e| {
        panic!(
            "helm.py {args:?}: not JSON ({e})\nstdout: {stdout}\nstderr: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    match out.status.code() {
        Some(0) => Ok(doc),
        _ => Err(doc),
    }
}

/// Polls `check` until it gives a value; on timeout, panics with `what` and the last `state` seen.
async fn eventually<T, F, Fut>(what: &str, limit: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, String>>,
{
    let start = Instant::now();
    let mut last = String::new();
    while start.elapsed() < limit {
        match check().await {
            Ok(value) => return value,
            Err(state) => last = state,
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    panic!("timed out after {limit:?} waiting for {what}; last: {last}");
}

/// Pods of a namespace with their phase and each container's state, for failure messages.
async fn pods_report(client: &kube::Client, namespace: &str) -> String {
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let Ok(list) = pods.list(&ListParams::default()).await else {
        return String::new();
    };
    let list = list
        .items
        .iter()
        .map(|p| {
            let status = p.status.clone().unwrap_or_default();
            let containers: Vec<String> = status
                .container_statuses
                .unwrap_or_default()
                .iter()
                .map(|c| format!("{} ready={} {:?}", c.name, c.ready, c.state))
                .collect();
            (
                p.metadata.name.clone().unwrap_or_default(),
                format!("{} {:?}", status.phase.unwrap_or_default(), containers),
            )
        })
        .collect::<Vec<_>>();
    let mut report = String::new();
    for (name, state) in list {
        let logs = pods
            .logs(
                &name,
                &kube::api::LogParams {
                    tail_lines: Some(15),
                    ..Default::default()
                },
            )
            .await
            .unwrap_or_default();
        report.push_str(&format!("{name}: {state}\n{logs}\n"));
    }
    report
}

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

/// Every request the chart's workloads made that RBAC refused (their ServiceAccounts are the release's
/// and the agents' namespaces'): the operator must never need a permission the chart does not grant.
fn refused(cluster: &Cluster) -> Vec<String> {
    let accounts = [
        format!("system:serviceaccount:{NAMESPACE}:"),
        format!("system:serviceaccount:{AGENTS}:"),
    ];
    cluster
        .sim
        .audit()
        .events()
        .into_iter()
        .filter(|e| e.code == 403 && accounts.iter().any(|a| e.username.starts_with(a.as_str())))
        .map(|e| {
            format!(
                "{} {} {}{} {}/{}",
                e.username,
                e.verb,
                if e.group.is_empty() {
                    String::new()
                } else {
                    format!("{}/", e.group)
                },
                e.resource,
                e.namespace.unwrap_or_default(),
                e.name.unwrap_or_default()
            )
        })
        .collect()
}

/// spark-pi as in `examples/spark-pi.yaml`, named `name`, its driver running `run_time`.
fn spark_pi(name: &str, run_time: &str) -> Value {
    json!({
        "apiVersion": "sparkoperator.k8s.io/v1beta2",
        "kind": "SparkApplication",
        "metadata": { "name": name, "namespace": JOBS },
        "spec": {
            "type": "Scala", "mode": "cluster", "image": "spark:4.0.0", "sparkVersion": "4.0.0",
            "mainClass": "org.apache.spark.examples.SparkPi",
            "mainApplicationFile": "local:///opt/spark/examples/jars/spark-examples.jar",
            "arguments": ["1000"],
            "driver": {
                "cores": 1, "memory": "512m", "serviceAccount": "spark-operator-spark",
                "annotations": { "sim.spark-operator.dev/run-time": run_time, "sim.spark-operator.dev/exit-code": "0" },
                "labels": { "team": "pi" },
            },
            "executor": {
                "instances": 1, "cores": 1, "memory": "512m",
                "labels": { "team": "pi-executors" },
            },
        },
    })
}

async fn submit(client: &kube::Client, app: Value) {
    let apps: Api<SparkApplication> = Api::namespaced(client.clone(), JOBS);
    apps.create(&PostParams::default(), &serde_json::from_value(app).unwrap())
        .await
        .unwrap();
}

async fn completed(cluster: &Cluster, name: &str) -> SparkApplication {
    let apps: Api<SparkApplication> = Api::namespaced(cluster.client.clone(), JOBS);
    eventually(&format!("{name} COMPLETED"), LIMIT, || async {
        let app = apps.get(name).await.map_err(|e| e.to_string())?;
        let state = app
            .status
            .as_ref()
            .map(|s| s.application_state.state.to_string())
            .unwrap_or_default();
        if state == "COMPLETED" {
            Ok(app)
        } else {
            Err(format!(
                "state {state:?}: {:?}\nrefused: {:#?}\n{}",
                app.status,
                refused(cluster),
                pods_report(&cluster.client, NAMESPACE).await
            ))
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_chart_installs_runs_spark_pi_upgrades_and_uninstalls_cleanly() {
    let Some(python) = helm_python() else { return };
    let Some(binary) = production_binary() else { return };
    if let Err(reason) = kube_sim::node::sandbox::supported() {
        return skip(&format!("process pods are not supported here: {reason}"));
    }
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("helm");
    let cluster = Cluster::start(
        &dir.path().join("sim"),
        &ClusterOptions {
            nodes: 3,
            pod_gc: PodGc::Instant,
            local_images: vec![
                LocalImage::new(IMAGE, &binary),
                LocalImage::new(KUBEFLOW_IMAGE, &binary),
            ],
            // The chart makes the job namespace's Spark ServiceAccount and RBAC.
            job_namespaces: Vec::new(),
            ..ClusterOptions::default()
        },
    )
    .await
    .unwrap();
    let admin = cluster.client.clone();
    let kubeconfig = cluster.sim.kubeconfig_path().to_owned();
    // The operator's namespace `restricted`, as the chart's README says; the agents' namespace is made by
    // the chart (`privileged`: their hostPaths).
    let namespaces: Api<Namespace> = Api::all(admin.clone());
    namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": { "name": NAMESPACE, "labels": { "pod-security.kubernetes.io/enforce": "restricted" } },
            }))
            .unwrap(),
        )
        .await
        .unwrap();
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

/// A kubeconfig whose user may `get pods/log` and read applications in the job namespace, and list and
/// proxy to the agents' pods.
async fn reader_kubeconfig(cluster: &Cluster, dir: &Path) -> PathBuf {
    let admin = cluster.client.clone();
    create::<Role>(
        &admin,
        AGENTS,
        json!({
            "metadata": { "name": "agent-proxy" },
            "rules": [
                { "apiGroups": [""], "resources": ["pods"], "verbs": ["list"] },
                { "apiGroups": [""], "resources": ["pods/proxy"], "verbs": ["get"] },
            ],
        }),
    )
    .await;
    create::<Role>(
        &admin,
        JOBS,
        json!({
            "metadata": { "name": "log-reader" },
            "rules": [
                { "apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"] },
                { "apiGroups": ["sparkoperator.k8s.io"], "resources": ["sparkapplications"], "verbs": ["get"] },
            ],
        }),
    )
    .await;
    let token = account(&admin, JOBS, "reader").await;
    for (ns, role) in [(AGENTS, "agent-proxy"), (JOBS, "log-reader")] {
        create::<RoleBinding>(
            &admin,
            ns,
            json!({
                "metadata": { "name": role },
                "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role },
                "subjects": [{ "kind": "ServiceAccount", "name": "reader", "namespace": JOBS }],
            }),
        )
        .await;
    }
    kubeconfig_with_token(&cluster.sim, dir, "reader", &token, JOBS)
}
