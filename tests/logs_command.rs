//! `spark-operator logs`, the built binary, against the simulated cluster: an agent's log store and server
//! (in this process, bound on the pod IP of a pod standing for the agent) hold two executions of a
//! SparkApplication; the command, run with a kubeconfig whose user is a ServiceAccount token allowed
//! `pods/log`, prints the current execution's driver, `--attempt 1`'s, an executor's, and exits 1 saying
//! why when there is nothing to show or the kubeconfig has no token.

// Test code: a panic is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;
use spark_operator_test_support::kube_access::*;
use support::cli;

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::rbac::v1::{ClusterRoleBinding, Role, RoleBinding};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use serde_json::json;
use spark_operator_agent::identity::SparkContainer;
use spark_operator_agent::logs::{self, LogArgs, LogSource, LogStore};
use spark_operator_api::SparkApplication;
use spark_operator_api::labels::SparkRole;
use spark_operator_dev::{Cluster, ClusterOptions};
use spark_operator_runtime::shutdown::Shutdown;

const JOBS: &str = "spark-jobs";
/// The agents' namespace (`spark-operator logs --agent-namespace` by default).
const AGENTS: &str = "spark-operator-agent";

/// A scripted Spark pod of application `pi` writing `lines` lines, fed to the store.
async fn spark_pod(
    cluster: &Cluster,
    store: &LogStore,
    name: &str,
    submission: &str,
    executor: Option<i64>,
    lines: &[String],
) {
    let node = cluster.sim.nodes().nodes().into_iter().next().unwrap();
    let mut labels = json!({
        "spark-role": if executor.is_some() { "executor" } else { "driver" },
        "sparkoperator.k8s.io/app-name": "pi",
        "sparkoperator.k8s.io/submission-id": submission,
    });
    if let Some(id) = executor {
        labels["spark-exec-id"] = json!(id.to_string());
    }
    create::<Pod>(
        &cluster.client,
        JOBS,
        json!({
            "metadata": { "name": name, "labels": labels, "annotations": {
                "sim.spark-operator.dev/program": "script",
                "sim.spark-operator.dev/run-time": "forever",
                "sim.spark-operator.dev/log": lines.join("\n"),
            } },
            "spec": { "nodeName": node.name(), "containers": [{ "name": "spark", "image": "spark" }] },
        }),
    )
    .await;
    let pod = running_pod(&cluster.client, JOBS, name).await;
    let uid = pod.metadata.uid.clone().unwrap();
    let id = pod.status.unwrap().container_statuses.unwrap()[0]
        .container_id
        .clone()
        .unwrap()
        .trim_start_matches("containerd://")
        .to_owned();
    let log_path = node.log_dir().join(format!("{JOBS}_{name}_{uid}/spark/0.log"));
    store.container_started(LogSource {
        container: SparkContainer {
            namespace: JOBS.into(),
            app_name: "pi".into(),
            submission_id: submission.into(),
            spark_app_id: None,
            pod_name: name.into(),
            pod_uid: uid,
            role: if executor.is_some() {
                SparkRole::Executor
            } else {
                SparkRole::Driver
            },
            executor_id: executor,
            container_name: "spark".into(),
            container_id: id.clone(),
            attempt: 0,
        },
        log_path,
        started_at: 0,
    });
    // Finished now (its lines are all written): the copy completes. (A finish time long ago would let the
    // store's age bound remove the application.)
    store.container_exited(&id, jiff::Timestamp::now().as_nanosecond() as i64);
}

fn lines(prefix: &str, n: usize) -> Vec<String> {
    (1..=n).map(|i| format!("{prefix} {i}")).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spark_operator_logs_prints_what_the_agents_hold_to_those_who_may_read_it() {
    let dir = tempfile::tempdir().unwrap();
    let cluster = Cluster::start(
        &dir.path().join("sim"),
        &ClusterOptions {
            nodes: 1,
            job_namespaces: Vec::new(),
            ..ClusterOptions::default()
        },
    )
    .await
    .unwrap();
    let admin = cluster.client.clone();
    for ns in [JOBS, AGENTS] {
        namespace(&admin, ns).await;
    }
    let node = cluster.sim.nodes().nodes().into_iter().next().unwrap();

    // The agent: auth-delegator rights, its pod's IP for the server.
    let agent_token = account(&admin, AGENTS, "agent").await;
    create_cluster_wide::<ClusterRoleBinding>(&admin, json!({
        "metadata": { "name": "agent-auth-delegator" },
        "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "system:auth-delegator" },
        "subjects": [{ "kind": "ServiceAccount", "name": "agent", "namespace": AGENTS }],
    }))
    .await;
    let agent_kubeconfig = kubeconfig_with_token(&cluster.sim, dir.path(), "agent", &agent_token, AGENTS);
    let agent_client = kube::Client::try_from(
        kube::Config::from_custom_kubeconfig(
            Kubeconfig::read_from(&agent_kubeconfig).unwrap(),
            &KubeConfigOptions::default(),
        )
        .await
        .unwrap(),
    )
    .unwrap();
    create::<Pod>(
        &admin,
        AGENTS,
        json!({
            "metadata": { "name": "agent-x1", "labels": {
                "app.kubernetes.io/name": "spark-operator", "app.kubernetes.io/component": "agent" },
                "annotations": { "sim.spark-operator.dev/run-time": "forever" } },
            "spec": { "nodeName": node.name(), "containers": [{ "name": "agent", "image": "spark-operator" }] },
        }),
    )
    .await;
    let pod_ip: IpAddr = running_pod(&admin, AGENTS, "agent-x1")
        .await
        .status
        .unwrap()
        .pod_ip
        .unwrap()
        .parse()
        .unwrap();
    // Another agent pod, listed first, whose server does not answer (a node going down): the others still
    // count, and the log is read from the agent that holds it.
    create::<Pod>(
        &admin,
        AGENTS,
        json!({
            "metadata": { "name": "agent-a0", "labels": {
                "app.kubernetes.io/name": "spark-operator", "app.kubernetes.io/component": "agent" },
                "annotations": { "sim.spark-operator.dev/run-time": "forever" } },
            "spec": { "nodeName": node.name(), "containers": [{ "name": "agent", "image": "spark-operator" }] },
        }),
    )
    .await;
    running_pod(&admin, AGENTS, "agent-a0").await;
    let store = LogStore::open(
        &LogArgs {
            log_store_dir: dir.path().join("store"),
            log_poll_interval: Duration::from_millis(20),
            ..LogArgs::default()
        },
        node.name(),
    )
    .unwrap();
    let served = logs::serve(
        store.clone(),
        SocketAddr::new(pod_ip, 0),
        agent_client,
        node.name(),
        Shutdown::never(),
    )
    .await
    .unwrap();

    // The reader: finds and reaches the agents, reads pod logs in JOBS.
    let reader = log_reader_kubeconfig(&cluster.sim, &admin, dir.path(), AGENTS, JOBS).await;

    // The application, its first execution (s1) and its current one (s2, with executor 1).
    let app: SparkApplication = serde_json::from_value(json!({
        "apiVersion": "sparkoperator.k8s.io/v1beta2", "kind": "SparkApplication",
        "metadata": { "name": "pi", "namespace": JOBS },
        "spec": { "type": "Scala", "mode": "cluster", "sparkVersion": "4.0.0", "image": "spark",
            "mainClass": "org.apache.spark.examples.SparkPi",
            "mainApplicationFile": "local:///opt/spark/examples/jars/spark-examples.jar",
            "driver": {}, "executor": { "instances": 1 } },
    }))
    .unwrap();
    let apps: Api<SparkApplication> = Api::namespaced(admin.clone(), JOBS);
    apps.create(&PostParams::default(), &app).await.unwrap();
    apps.patch_status(
        "pi",
        &PatchParams::default(),
        &Patch::Merge(json!({ "status": { "submissionID": "s2" } })),
    )
    .await
    .unwrap();
    let first = lines("first driver line", 5);
    let current = lines("current driver line", 7);
    let executor = lines("executor line", 3);
    spark_pod(&cluster, &store, "pi-driver-1", "s1", None, &first).await;
    spark_pod(&cluster, &store, "pi-driver-2", "s2", None, &current).await;
    spark_pod(&cluster, &store, "pi-exec-1", "s2", Some(1), &executor).await;
    wait_for("the copies to finish", || {
        let done = store
            .index(JOBS, "pi")
            .is_some_and(|i| i.executions.iter().flat_map(|e| &e.containers).all(|c| !c.running));
        async move { done.then_some(()) }
    })
    .await;

    let base = |extra: &[&str]| -> Vec<String> {
        let mut args: Vec<String> = [
            "logs",
            "pi",
            "--kubeconfig",
            reader.to_str().unwrap(),
            "--agent-port",
            &served.address.port().to_string(),
        ]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
        args.extend(extra.iter().map(|s| (*s).to_owned()));
        args
    };
    let text = |lines: &[String]| lines.iter().map(|l| format!("{l}\n")).collect::<String>();

    // The current execution's driver, the namespace from the kubeconfig's context.
    let shown = cli::spark_operator(base(&[])).await;
    assert!(shown.status.success(), "{}", String::from_utf8_lossy(&shown.stderr));
    assert_eq!(String::from_utf8_lossy(&shown.stdout), text(&current));
    let warned = String::from_utf8_lossy(&shown.stderr);
    assert!(warned.contains("warning") && warned.contains("agent-a0"), "{warned}");
    // The first execution, and the current one's executor 1.
    let shown = cli::spark_operator(base(&["-n", JOBS, "--attempt", "1"])).await;
    assert_eq!(String::from_utf8_lossy(&shown.stdout), text(&first));
    let shown = cli::spark_operator(base(&["--executor", "1", "--follow"])).await;
    assert_eq!(String::from_utf8_lossy(&shown.stdout), text(&executor));

    // Nothing to show: exit 1, saying why.
    let missing = cli::spark_operator(base(&["--executor", "7"])).await;
    assert_eq!(missing.status.code(), Some(1));
    let why = String::from_utf8_lossy(&missing.stderr);
    assert!(
        why.contains("no log of executor 7") && why.contains("executors held: 1"),
        "{why}"
    );
    let mut args = base(&[]);
    args[1] = "nope".into();
    let missing = cli::spark_operator(args).await;
    assert_eq!(missing.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&missing.stderr).contains("SparkApplication spark-jobs/nope not found"),
        "{}",
        String::from_utf8_lossy(&missing.stderr)
    );
    let attempt = cli::spark_operator(base(&["--attempt", "3"])).await;
    assert_eq!(attempt.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&attempt.stderr).contains("there is no execution 3"));

    // The sim's administrator has only a client certificate: no token to prove who it is.
    let mut args = base(&["-n", JOBS]);
    args[3] = cluster.sim.kubeconfig_path().display().to_string();
    let refused = cli::spark_operator(args).await;
    assert_eq!(refused.status.code(), Some(1));
    let why = String::from_utf8_lossy(&refused.stderr);
    assert!(
        why.contains("no bearer token") && why.contains("client certificate"),
        "{why}"
    );

    store.close();
    drop(served);
    cluster.sim.shutdown().await;
}

/// The whole path: the operator and its agents (each fed by its node's CRI events, not by the test), a
/// driver and an executor whose pods are deleted the instant they finish, logs rotated by kubelet (at
/// 8 KiB), kubelet's files removed by container GC: the built binary prints both logs whole, to a user
/// with `pods/log`, and refuses one without. (The sim rotates on every write where kubelet checks every
/// 10 s, so a log written in one burst at start could lose its oldest rotated files before any agent
/// opens it; the size keeps them until the agent's copy has them.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_of_pods_deleted_at_once_are_whole_after_rotation_and_container_gc() {
    use kube_sim::node::PodGc;
    use spark_operator_e2e::ClusterOptions as Options;
    let dir = tempfile::tempdir().unwrap();
    let cluster = spark_operator_e2e::Cluster::start(Options {
        nodes: 2,
        pod_gc: PodGc::Instant,
        normal_events: false,
        container_gc_delay: Duration::from_secs(1),
        container_log_max_size: 8192,
        ..Options::big()
    })
    .await;
    let admin = cluster.client.clone();
    let operator = cluster.operator(cluster.args(&[])).await;
    let _agents = cluster.agents(&operator).await;

    // Who may read: pods/log in `default`; both may find and reach the agents.
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
        "default",
        json!({
            "metadata": { "name": "app-reader" },
            "rules": [{ "apiGroups": ["sparkoperator.k8s.io"], "resources": ["sparkapplications"], "verbs": ["get"] }],
        }),
    )
    .await;
    create::<Role>(
        &admin,
        "default",
        json!({
            "metadata": { "name": "log-reader" },
            "rules": [{ "apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"] }],
        }),
    )
    .await;
    let mut kubeconfigs = Vec::new();
    for (user, roles) in [
        (
            "reader",
            &[
                (AGENTS, "agent-proxy"),
                ("default", "app-reader"),
                ("default", "log-reader"),
            ][..],
        ),
        ("outsider", &[(AGENTS, "agent-proxy"), ("default", "app-reader")][..]),
    ] {
        let token = account(&admin, "default", user).await;
        for (ns, role) in roles {
            create::<RoleBinding>(
                &admin,
                ns,
                json!({
                    "metadata": { "name": format!("{user}-{role}") },
                    "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role },
                    "subjects": [{ "kind": "ServiceAccount", "name": user, "namespace": "default" }],
                }),
            )
            .await;
        }
        kubeconfigs.push(kubeconfig_with_token(&cluster.sim, dir.path(), user, &token, "default"));
    }

    // 300 driver lines and 200 executor lines (about 20 and 13 KiB): rotated files seen while they run.
    let rotated = tokio::spawn({
        let dirs: Vec<PathBuf> = cluster.sim.nodes().nodes().iter().map(|n| n.log_dir()).collect();
        async move {
            loop {
                let rotated = dirs
                    .iter()
                    .flat_map(|d| walk(d))
                    .filter(|p| p.to_string_lossy().contains("default_logs-"))
                    .filter(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("0.log.")))
                    .count();
                if rotated >= 2 {
                    return rotated;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    });
    let yaml = spark_operator_e2e::app_yaml("logs", "1s", 0, 1, "")
        .replacen(
            "      sim.spark-operator.dev/exit-code: \"0\"\n",
            "      sim.spark-operator.dev/exit-code: \"0\"\n      sim.spark-operator.dev/log-lines: \"300\"\n",
            1,
        )
        .replacen(
            "  executor:\n",
            "  executor:\n    annotations:\n      sim.spark-operator.dev/log-lines: \"200\"\n",
            1,
        );
    cluster.create_app(&yaml).await;
    cluster
        .wait_app("default", "logs", Duration::from_secs(120), |a| {
            a.status
                .as_ref()
                .is_some_and(|s| s.uncounted_executor_terminations.is_empty())
                && a.state() == spark_operator_api::ApplicationStateType::Completed
        })
        .await;
    let rotated = tokio::time::timeout(Duration::from_secs(1), rotated)
        .await
        .expect("kubelet rotated the driver's and the executor's logs")
        .unwrap();
    assert!(rotated >= 2);
    // The pods went at once; kubelet's own files go with its container GC.
    wait_for("kubelet's log files of the application to be removed", || {
        let dirs: Vec<PathBuf> = cluster.sim.nodes().nodes().iter().map(|n| n.log_dir()).collect();
        async move {
            let left = dirs
                .iter()
                .filter_map(|d| std::fs::read_dir(d).ok())
                .flatten()
                .flatten()
                .any(|e| e.file_name().to_string_lossy().starts_with("default_logs-"));
            (!left).then_some(())
        }
    })
    .await;

    let logs = |kubeconfig: &Path, extra: &[&str]| {
        let mut args: Vec<String> = ["logs", "logs", "--kubeconfig", kubeconfig.to_str().unwrap()]
            .iter()
            .map(|s| (*s).to_owned())
            .collect();
        args.extend(extra.iter().map(|s| (*s).to_owned()));
        cli::spark_operator(args)
    };
    let in_order = |text: &str, n: usize| {
        let generated: Vec<&str> = text.lines().filter(|l| l.starts_with("log line ")).collect();
        generated == lines("log line", n).iter().map(String::as_str).collect::<Vec<_>>()
    };
    let driver = logs(&kubeconfigs[0], &[]).await;
    let text = String::from_utf8_lossy(&driver.stdout);
    assert!(driver.status.success(), "{}", String::from_utf8_lossy(&driver.stderr));
    assert!(in_order(&text, 300), "the driver's 300 lines, in order, once: {text}");
    assert!(
        text.contains("Successfully stopped SparkContext"),
        "to its last line: {text}"
    );
    let executor = logs(&kubeconfigs[0], &["--executor", "1"]).await;
    let text = String::from_utf8_lossy(&executor.stdout);
    assert!(
        executor.status.success(),
        "{}",
        String::from_utf8_lossy(&executor.stderr)
    );
    assert!(in_order(&text, 200), "the executor's 200 lines, in order, once: {text}");

    let refused = logs(&kubeconfigs[1], &[]).await;
    assert!(!refused.status.success());
    assert!(refused.stdout.is_empty());
    let why = String::from_utf8_lossy(&refused.stderr);
    assert!(why.contains("pods/log") || why.contains("forbidden"), "{why}");
}

/// Every file under `dir`.
fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            files.extend(walk(&path));
        } else {
            files.push(path);
        }
    }
    files
}
