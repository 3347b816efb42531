//! The log store and its server on the simulated cluster: a scripted Spark driver on a node writes lines,
//! kubelet rotates its log (a small `container_log_max_size`), the pod is deleted and the container GC
//! removes kubelet's files; the store still has the whole log. The server, bound on the pod IP of a pod
//! standing for the agent, is read through the API server's `pods/proxy` with the caller's own token: a
//! ServiceAccount allowed `get pods/log` in the application's namespace reads the whole log (also while it
//! is being written, following it), one without is refused, a request without a token is unauthorized.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic in a test is a failed assertion

use spark_operator_test_support::kube_access::*;

use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::rbac::v1::{ClusterRoleBinding, Role, RoleBinding};
use kube::api::{Api, DeleteParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube_sim::node::NodesConfig;
use kube_sim::{Sim, SimConfig};
use serde_json::{Value, json};
use spark_operator_agent::identity::SparkContainer;
use spark_operator_agent::logs::client::{self, Agents, Selection};
use spark_operator_agent::logs::{self, LogArgs, LogSource, LogStore, read};
use spark_operator_api::labels::SparkRole;
use spark_operator_runtime::shutdown::Shutdown;

const JOBS: &str = "spark-jobs";
const OPERATOR: &str = "spark-operator";
const AGENT_SELECTOR: &str = "app.kubernetes.io/name=spark-operator,app.kubernetes.io/component=agent";

async fn client_of(kubeconfig: &Path) -> (kube::Config, kube::Client) {
    let config = Kubeconfig::read_from(kubeconfig).unwrap();
    let config = kube::Config::from_custom_kubeconfig(config, &KubeConfigOptions::default())
        .await
        .unwrap();
    (config.clone(), kube::Client::try_from(config).unwrap())
}

fn spark_labels(role: &str) -> Value {
    json!({
        "spark-role": role,
        "sparkoperator.k8s.io/app-name": "pi",
        "sparkoperator.k8s.io/submission-id": "s1",
        "spark-app-selector": "spark-pi-1",
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_whole_log_outlives_its_pod_and_is_served_only_to_those_who_may_read_pod_logs() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = SimConfig::new(dir.path().join("sim"));
    config.root_ca_configmap = true;
    config.nodes = NodesConfig::with_nodes(1);
    config.nodes.kubelet.container_gc_delay = Duration::from_secs(1);
    config.nodes.kubelet.container_log_max_size = 2048;
    let sim = Sim::start(config).await.unwrap();
    let admin = sim.client().await.unwrap();
    let node = sim.nodes().nodes().into_iter().next().unwrap();
    namespace(&admin, JOBS).await;
    namespace(&admin, OPERATOR).await;

    // The agent: its ServiceAccount may review tokens and access (system:auth-delegator), nothing else.
    let agent_token = account(&admin, OPERATOR, "agent").await;
    create_cluster_wide::<ClusterRoleBinding>(&admin, json!({
        "metadata": { "name": "agent-auth-delegator" },
        "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "system:auth-delegator" },
        "subjects": [{ "kind": "ServiceAccount", "name": "agent", "namespace": OPERATOR }],
    }))
    .await;
    let (_, agent_client) = client_of(&kubeconfig_with_token(
        &sim,
        dir.path(),
        "agent",
        &agent_token,
        OPERATOR,
    ))
    .await;
    // Its pod (a scripted stand-in): the server binds that pod's IP, as the DaemonSet's container would.
    create::<Pod>(
        &admin,
        OPERATOR,
        json!({
            "metadata": { "name": "agent-x1", "labels": {
                "app.kubernetes.io/name": "spark-operator", "app.kubernetes.io/component": "agent" },
                "annotations": { "sim.spark-operator.dev/run-time": "forever" } },
            "spec": { "nodeName": node.name(), "containers": [{ "name": "agent", "image": "spark-operator" }] },
        }),
    )
    .await;
    let agent_pod = running_pod(&admin, OPERATOR, "agent-x1").await;
    let pod_ip: IpAddr = agent_pod.status.unwrap().pod_ip.unwrap().parse().unwrap();

    // Callers: both may find the agents and use their proxy; only the reader may read pod logs in JOBS.
    create::<Role>(
        &admin,
        OPERATOR,
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
            "rules": [{ "apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"] }],
        }),
    )
    .await;
    let reader_token = account(&admin, JOBS, "reader").await;
    let outsider_token = account(&admin, JOBS, "outsider").await;
    for (ns, role, subjects) in [
        (
            OPERATOR,
            "agent-proxy",
            json!([
                { "kind": "ServiceAccount", "name": "reader", "namespace": JOBS },
                { "kind": "ServiceAccount", "name": "outsider", "namespace": JOBS },
            ]),
        ),
        (
            JOBS,
            "log-reader",
            json!([{ "kind": "ServiceAccount", "name": "reader", "namespace": JOBS }]),
        ),
    ] {
        create::<RoleBinding>(
            &admin,
            ns,
            json!({
                "metadata": { "name": role },
                "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role },
                "subjects": subjects,
            }),
        )
        .await;
    }

    // The store and its server.
    let store_dir = dir.path().join("store");
    let args = LogArgs {
        log_store_dir: store_dir.clone(),
        log_poll_interval: Duration::from_millis(20),
        ..LogArgs::default()
    };
    let store = LogStore::open(&args, node.name()).unwrap();
    let served = logs::serve(
        store.clone(),
        SocketAddr::new(pod_ip, 0),
        agent_client,
        node.name(),
        Shutdown::never(),
    )
    .await
    .unwrap();
    let agents = Agents {
        namespace: OPERATOR.into(),
        selector: AGENT_SELECTOR.into(),
        port: served.address.port(),
    };

    // The driver: 60 lines at start (over 2 KiB: rotated at once), 40 more when it exits after 4 s.
    let exit_lines: Vec<String> = (1..=40).map(|i| format!("exit line {i}")).collect();
    create::<Pod>(
        &admin,
        JOBS,
        json!({
            "metadata": { "name": "pi-driver", "labels": spark_labels("driver"), "annotations": {
                "sim.spark-operator.dev/program": "script",
                "sim.spark-operator.dev/log-lines": "60",
                "sim.spark-operator.dev/run-time": "4s",
                "sim.spark-operator.dev/exit-log": exit_lines.join("\n"),
            } },
            "spec": { "nodeName": node.name(), "restartPolicy": "Never",
                "containers": [{ "name": "spark-kubernetes-driver", "image": "spark" }] },
        }),
    )
    .await;
    let driver = running_pod(&admin, JOBS, "pi-driver").await;
    let uid = driver.metadata.uid.clone().unwrap();
    let status = driver.status.unwrap();
    let container_id = status.container_statuses.unwrap()[0]
        .container_id
        .clone()
        .unwrap()
        .trim_start_matches("containerd://")
        .to_owned();
    let log_path = node
        .log_dir()
        .join(format!("{JOBS}_pi-driver_{uid}"))
        .join("spark-kubernetes-driver")
        .join("0.log");
    let container = SparkContainer {
        namespace: JOBS.into(),
        app_name: "pi".into(),
        submission_id: "s1".into(),
        spark_app_id: Some("spark-pi-1".into()),
        pod_name: "pi-driver".into(),
        pod_uid: uid.clone(),
        role: SparkRole::Driver,
        executor_id: None,
        container_name: "spark-kubernetes-driver".into(),
        container_id: container_id.clone(),
        attempt: 0,
    };
    store.container_started(LogSource {
        container,
        log_path: log_path.clone(),
        started_at: 0,
    });
    let expected: String = (1..=60)
        .map(|i| format!("log line {i}\n"))
        .chain(exit_lines.iter().map(|l| format!("{l}\n")))
        .collect();

    // The reader: its token comes out of its kubeconfig's tokenFile, through kube's auth layer.
    let (reader_config, reader) =
        client_of(&kubeconfig_with_token(&sim, dir.path(), "reader", &reader_token, JOBS)).await;
    let token = client::bearer_token(&reader_config).await.unwrap();
    assert_eq!(token, reader_token);
    let pods = client::agent_pods(&reader, &agents).await.unwrap();
    assert_eq!(pods.iter().map(|p| p.name.as_str()).collect::<Vec<_>>(), ["agent-x1"]);

    // Following the driver's log while it runs: the stream ends once its copy is finished.
    let follow = {
        let (reader, agents, pod, token, id) = (
            reader.clone(),
            agents.clone(),
            pods[0].clone(),
            token.clone(),
            container_id.clone(),
        );
        tokio::spawn(async move {
            let mut seen = Vec::new();
            client::stream_log(&reader, &agents, &pod, &token, JOBS, "pi", &id, true, &mut |bytes| {
                seen.extend_from_slice(bytes);
                Ok(())
            })
            .await
            .unwrap();
            String::from_utf8(seen).unwrap()
        })
    };

    // The driver exits: the agent hears it (here: the test, from the pod's status) and drains the copy.
    let pods_api: Api<Pod> = Api::namespaced(admin.clone(), JOBS);
    let finished_at = wait_for("the driver to exit", || {
        let pods_api = pods_api.clone();
        async move {
            let pod = pods_api.get("pi-driver").await.ok()?;
            let state = pod.status?.container_statuses?.first()?.state.clone()?;
            state
                .terminated
                .map(|t| t.finished_at.map_or(0, |at| at.0.as_nanosecond() as i64))
        }
    })
    .await;
    let rotated = logs::follow::rotated_siblings(&log_path);
    assert!(
        rotated.len() >= 2,
        "kubelet rotated the log at least twice: {rotated:?}"
    );
    store.container_exited(&container_id, finished_at);
    let followed = tokio::time::timeout(Duration::from_secs(60), follow)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(followed, expected, "the followed log is the whole log, once");

    // The pod goes, and the container GC removes kubelet's files: the store keeps the whole log.
    pods_api.delete("pi-driver", &DeleteParams::default()).await.unwrap();
    let pod_logs = log_path.parent().unwrap().parent().unwrap().to_path_buf();
    wait_for("kubelet's files to be removed", || {
        let gone = !pod_logs.exists();
        async move { gone.then_some(()) }
    })
    .await;
    let copy = store_dir
        .join(JOBS)
        .join("pi/s1/pi-driver/spark-kubernetes-driver/0.log");
    assert_eq!(
        String::from_utf8(read::render_all(&copy, false).unwrap()).unwrap(),
        expected
    );

    // Read through the API server's proxy: the index, then the log, as `spark-operator logs` does.
    let asked = client::indexes(&reader, &agents, &pods, &token, JOBS, "pi")
        .await
        .unwrap();
    assert!(asked.unreachable.is_empty(), "{:?}", asked.unreachable);
    let held = asked.held;
    assert_eq!(held.len(), 1);
    let index = &held[0].1;
    assert_eq!(index.node, node.name());
    assert_eq!(index.executions[0].submission_id, "s1");
    let entry = &index.executions[0].containers[0];
    assert_eq!(
        (entry.role.as_str(), entry.running, entry.finished_at),
        ("driver", false, Some(finished_at))
    );
    let chosen = client::choose(
        &held,
        &Selection {
            current_submission: Some("s1".into()),
            ..Selection::default()
        },
    )
    .unwrap();
    let mut text = Vec::new();
    client::stream_log(
        &reader,
        &agents,
        &held[chosen.agent].0,
        &token,
        JOBS,
        "pi",
        &chosen.container.id,
        false,
        &mut |bytes| {
            text.extend_from_slice(bytes);
            Ok(())
        },
    )
    .await
    .unwrap();
    assert_eq!(String::from_utf8(text).unwrap(), expected);

    // Someone who may not read pod logs in the namespace is refused by the agent, by name.
    let (_, outsider) = client_of(&kubeconfig_with_token(
        &sim,
        dir.path(),
        "outsider",
        &outsider_token,
        JOBS,
    ))
    .await;
    let refused = client::indexes(&outsider, &agents, &pods, &outsider_token, JOBS, "pi")
        .await
        .unwrap_err();
    match &refused {
        client::Error::Refused { code, message, .. } => {
            assert_eq!(*code, 403, "{message}");
            assert!(
                message.contains(&format!(
                    "User \"system:serviceaccount:{JOBS}:outsider\" cannot get resource \"pods/log\""
                )),
                "{message}"
            );
        }
        other => panic!("expected a refusal, got {other}"),
    }
    // A request through the proxy without the token header: 401, saying what to send.
    let bare = http::Request::get(client::proxy_path(
        &agents,
        "agent-x1",
        &logs::index::index_path(JOBS, "pi"),
    ))
    .body(kube::client::Body::empty())
    .unwrap();
    let response = reader.send(bare).await.unwrap();
    assert_eq!(response.status().as_u16(), 401);
    let body = response.into_body().collect_bytes().await.unwrap();
    assert!(
        String::from_utf8_lossy(&body).contains("X-Spark-Operator-Token")
            || String::from_utf8_lossy(&body).contains("x-spark-operator-token")
    );

    // The kubeconfig's administrator authenticates with a client certificate: no token to pass on.
    let admin_config = kube::Config::from_custom_kubeconfig(
        Kubeconfig::read_from(sim.kubeconfig_path()).unwrap(),
        &KubeConfigOptions::default(),
    )
    .await
    .unwrap();
    let no_token = client::bearer_token(&admin_config).await.unwrap_err();
    assert!(no_token.to_string().contains("client certificate"), "{no_token}");

    store.close();
    drop(served);
    sim.shutdown().await;
}
