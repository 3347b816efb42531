//! Shared by the chart's tests (`tests/helm_install.rs`, `tests/chart_least_privilege.rs`): the release's names,
//! the skip rules (no Helm SDK, no production binary, no process pods: skip, but fail under `CI=true`), Helm
//! through `tests/helm/helm.py`, the 3-node cluster the chart is installed in, spark-pi, and a `spark-operator
//! logs` user. A panic here is a failed test.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{Api, ListParams, PostParams};
use kube_sim::node::{LocalImage, PodGc};
use serde_json::{Value, json};
use spark_operator_api::SparkApplication;
use spark_operator_dev::{Cluster, ClusterOptions};

use spark_operator_test_support::kube_access::log_reader_kubeconfig;

pub const RELEASE: &str = "spark-operator";
pub const NAMESPACE: &str = "spark-operator";
pub const AGENTS: &str = "spark-operator-agent";
pub const JOBS: &str = "default";
/// The chart's default image (`image.repository`, any tag).
pub const IMAGE: &str = "spark-operator/spark-operator";
/// Kubeflow's image, which a Kubeflow values file names: the same binary stands for it here.
pub const KUBEFLOW_IMAGE: &str = "ghcr.io/kubeflow/spark-operator/controller";
pub const LIMIT: Duration = Duration::from_secs(180);

/// This test belongs to the root package: its manifest directory is the repository's.
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Skips the test with `reason`, or fails it under `CI=true`.
pub fn skip(reason: &str) {
    assert!(std::env::var("CI").as_deref() != Ok("true"), "CI=true and {reason}");
    println!("SKIPPED: {reason}");
}

/// The production binary the image stands for.
pub fn production_binary() -> Option<PathBuf> {
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

pub fn helm_python() -> Option<PathBuf> {
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
pub async fn helm(python: &Path, home: &Path, kubeconfig: &Path, args: &[&str]) -> Result<Value, Value> {
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
pub async fn eventually<T, F, Fut>(what: &str, limit: Duration, mut check: F) -> T
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

/// Everything the chart's tests need, or why not (skipped; a failure under `CI=true`): the Helm SDK's
/// python and the production binary.
pub fn prerequisites() -> Option<(PathBuf, PathBuf)> {
    let python = helm_python()?;
    let binary = production_binary()?;
    if let Err(reason) = kube_sim::node::sandbox::supported() {
        skip(&format!("process pods are not supported here: {reason}"));
        return None;
    }
    Some((python, binary))
}

/// A 3-node cluster whose image `IMAGE` (and Kubeflow's) is `binary`, with the release's namespace
/// (`restricted`, as the chart's README says; the agents' namespace is made by the chart).
pub async fn start_cluster(dir: &Path, binary: &Path) -> Cluster {
    let cluster = Cluster::start(
        &dir.join("sim"),
        &ClusterOptions {
            nodes: 3,
            pod_gc: PodGc::Instant,
            local_images: vec![LocalImage::new(IMAGE, binary), LocalImage::new(KUBEFLOW_IMAGE, binary)],
            // The chart makes the job namespace's Spark ServiceAccount and RBAC.
            job_namespaces: Vec::new(),
            ..ClusterOptions::default()
        },
    )
    .await
    .unwrap();
    // The API server's audit log is what the tests read refusals from: off until enabled.
    cluster.sim.audit().enable();
    let namespaces: Api<Namespace> = Api::all(cluster.client.clone());
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
    cluster
}

/// Every request the chart's workloads made that RBAC refused (their ServiceAccounts are the release's
/// and the agents' namespaces'): the operator must never need a permission the chart does not grant.
pub fn refused(cluster: &Cluster) -> Vec<String> {
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

/// Pods of a namespace with their phase and each container's state, for failure messages.
pub async fn pods_report(client: &kube::Client, namespace: &str) -> String {
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

/// spark-pi as in `examples/spark-pi.yaml`, named `name`, its driver running `run_time`.
pub fn spark_pi(name: &str, run_time: &str) -> Value {
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

pub async fn submit(client: &kube::Client, app: Value) {
    let apps: Api<SparkApplication> = Api::namespaced(client.clone(), JOBS);
    apps.create(&PostParams::default(), &serde_json::from_value(app).unwrap())
        .await
        .unwrap();
}

pub async fn completed(cluster: &Cluster, name: &str) -> SparkApplication {
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

/// A kubeconfig whose user may `get pods/log` and read applications in the job namespace, and list and
/// proxy to the agents' pods.
pub async fn reader_kubeconfig(cluster: &Cluster, dir: &Path) -> PathBuf {
    log_reader_kubeconfig(&cluster.sim, &cluster.client, dir, AGENTS, JOBS).await
}
