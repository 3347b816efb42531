//! A CRI client (tonic, over the node's unix socket, as a node agent connects to containerd)
//! sees the start and stop of every container, with the exit codes and reasons the pods'
//! scripts call for, and the labels containerd sets.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::collections::HashMap;
use std::time::Duration;

use kube_sim::node::NodesConfig;
use kube_sim::registry::Gvr;
use kube_sim::store::{Store, WriteOptions};
use kube_sim::{Sim, SimConfig};
use serde_json::{Value, json};
use spark_operator_proto::cri::v1 as cri;
use spark_operator_proto::unix::connect_runtime_service;

async fn start() -> (Sim, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = SimConfig::new(dir.path().join("data"));
    config.root_ca_configmap = true;
    config.nodes = NodesConfig::with_nodes(1);
    config.nodes.kubelet.crash_loop_backoff = Duration::from_millis(50);
    let sim = Sim::start(config).await.expect("sim starts");
    (sim, dir)
}

fn pod(name: &str, annotations: Value, extra_spec: Value) -> Value {
    let mut spec = json!({ "restartPolicy": "Never", "containers": [{ "name": "main", "image": "busybox:1.36" }] });
    if let (Value::Object(s), Value::Object(e)) = (&mut spec, extra_spec) {
        s.extend(e);
    }
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": { "name": name, "labels": { "app": name, "tier": "batch" }, "annotations": annotations },
        "spec": spec
    })
}

async fn create(store: &Store, p: Value) {
    store
        .create(&Gvr::new("", "v1", "pods"), "default", p, &WriteOptions::default())
        .await
        .expect("create pod");
}

/// The pod once it reached `phase` (polled every 20 ms, at most 20 s).
async fn settled(store: &Store, name: &str, phase: &str) -> Value {
    for _ in 0..1000 {
        if let Ok(p) = store.get(&Gvr::new("", "v1", "pods"), "default", name)
            && p["status"]["phase"] == phase
        {
            return p;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("timed out waiting for pod {name} to be {phase}");
}

/// One container run as the event stream showed it.
#[derive(Debug, Default, Clone)]
struct Run {
    pod: String,
    container: String,
    attempt: u32,
    started: bool,
    stopped: Option<(i32, String)>,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_for_every_container_with_scripted_exits() {
    let (sim, _dir) = start().await;
    let store = sim.store().clone();
    let node = sim.nodes().node("sim-node-1").expect("node");
    let mut client = connect_runtime_service(node.cri_socket())
        .await
        .expect("connect to the node's CRI socket");
    let version = client
        .version(cri::VersionRequest { version: "v1".into() })
        .await
        .expect("Version")
        .into_inner();
    assert_eq!(
        (version.runtime_name.as_str(), version.runtime_api_version.as_str()),
        ("containerd", "v1")
    );
    let mut events = client
        .get_container_events(cri::GetEventsRequest {})
        .await
        .expect("GetContainerEvents")
        .into_inner();

    let s = |pairs: &[(&str, &str)]| {
        Value::Object(
            pairs
                .iter()
                .map(|(k, v)| (format!("sim.spark-operator.dev/{k}"), json!(v)))
                .collect(),
        )
    };
    create(
        &store,
        pod("completes", s(&[("run-time", "100ms"), ("log", "hello")]), json!({})),
    )
    .await;
    create(
        &store,
        pod("errors", s(&[("run-time", "50ms"), ("exit-code", "3")]), json!({})),
    )
    .await;
    create(
        &store,
        pod("oom", s(&[("run-time", "50ms"), ("oom-kill", "true")]), json!({})),
    )
    .await;
    create(
        &store,
        pod("runs", s(&[]), json!({ "terminationGracePeriodSeconds": 5 })),
    )
    .await;
    // OnFailure with a first run that fails: restarted once, then completes.
    create(
        &store,
        pod(
            "flaky",
            s(&[("run-time", "50ms"), ("exit-code", "1,0")]),
            json!({ "restartPolicy": "OnFailure" }),
        ),
    )
    .await;
    create(
        &store,
        pod(
            "with-init",
            s(&[("run-time", "50ms"), ("main.exit-code", "2")]),
            json!({ "initContainers": [{ "name": "setup", "image": "busybox:1.36" }] }),
        ),
    )
    .await;

    let expected: HashMap<(&str, &str, u32), (i32, &str)> = HashMap::from([
        (("completes", "main", 0), (0, "Completed")),
        (("errors", "main", 0), (3, "Error")),
        (("oom", "main", 0), (137, "OOMKilled")),
        (("runs", "main", 0), (143, "Error")),
        (("flaky", "main", 0), (1, "Error")),
        (("flaky", "main", 1), (0, "Completed")),
        (("with-init", "setup", 0), (0, "Completed")),
        (("with-init", "main", 0), (2, "Error")),
    ]);
    let mut runs: HashMap<String, Run> = HashMap::new();
    let mut sandboxes: HashMap<String, Value> = HashMap::new();
    let mut deleted_runs = false;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let done = expected.keys().all(|(p, c, a)| {
            runs.values()
                .any(|r| r.pod == *p && r.container == *c && r.attempt == *a && r.started && r.stopped.is_some())
        });
        if done {
            break;
        }
        // "runs" only stops when its pod is deleted: SIGTERM, exit 143.
        let runs_started = runs.values().any(|r| r.pod == "runs" && r.started);
        if runs_started && !deleted_runs {
            store
                .delete(&Gvr::new("", "v1", "pods"), "default", "runs", &Default::default())
                .await
                .expect("delete");
            deleted_runs = true;
        }
        let ev = tokio::time::timeout_at(deadline, events.message())
            .await
            .unwrap_or_else(|_| panic!("timed out; runs so far: {runs:#?}"))
            .expect("event stream")
            .expect("stream open");
        let sandbox = ev.pod_sandbox_status.clone().expect("events carry the sandbox status");
        if ev.container_id == sandbox.id {
            // The sandbox's own events (containerd sends them for the pod sandbox too).
            sandboxes.insert(sandbox.id.clone(), json!(sandbox.labels));
            continue;
        }
        let status = ev.containers_statuses.iter().find(|c| c.id == ev.container_id);
        let Some(status) = status else { continue };
        let labels = &status.labels;
        let pod_name = labels.get("io.kubernetes.pod.name").cloned().unwrap_or_default();
        assert_eq!(
            labels.get("io.kubernetes.pod.namespace").map(String::as_str),
            Some("default")
        );
        assert!(labels.get("io.kubernetes.pod.uid").is_some_and(|u| !u.is_empty()));
        assert_eq!(
            sandbox.labels.get("app"),
            Some(&pod_name),
            "the sandbox carries the pod's labels"
        );
        assert_eq!(
            sandbox.metadata.as_ref().map(|m| m.name.as_str()),
            Some(pod_name.as_str())
        );
        let run = runs.entry(ev.container_id.clone()).or_insert_with(|| Run {
            pod: pod_name.clone(),
            container: labels.get("io.kubernetes.container.name").cloned().unwrap_or_default(),
            attempt: status.metadata.as_ref().map(|m| m.attempt).unwrap_or(0),
            ..Run::default()
        });
        match cri::ContainerEventType::try_from(ev.container_event_type) {
            Ok(cri::ContainerEventType::ContainerStartedEvent) => run.started = true,
            Ok(cri::ContainerEventType::ContainerStoppedEvent) => {
                assert_eq!(status.state, cri::ContainerState::ContainerExited as i32);
                assert!(status.finished_at >= status.started_at && status.started_at > 0);
                run.stopped = Some((status.exit_code, status.reason.clone()));
            }
            _ => {}
        }
    }
    for ((p, c, a), (code, reason)) in &expected {
        let run = runs
            .values()
            .find(|r| r.pod == *p && r.container == *c && r.attempt == *a)
            .expect("run seen");
        assert_eq!(
            run.stopped.as_ref().map(|(e, r)| (*e, r.as_str())),
            Some((*code, *reason)),
            "{p}/{c} attempt {a}"
        );
    }
    assert!(!sandboxes.is_empty(), "sandbox events were sent");

    // The same, read back: ListContainers, ContainerStatus, ListPodSandbox with a label filter.
    let listed = client
        .list_containers(cri::ListContainersRequest { filter: None })
        .await
        .expect("list")
        .into_inner()
        .containers;
    let oom = listed
        .iter()
        .find(|c| c.labels.get("io.kubernetes.pod.name").map(String::as_str) == Some("oom"))
        .expect("oom container listed");
    let status = client
        .container_status(cri::ContainerStatusRequest {
            container_id: oom.id.clone(),
            verbose: false,
        })
        .await
        .expect("ContainerStatus")
        .into_inner()
        .status
        .expect("status");
    assert_eq!((status.exit_code, status.reason.as_str()), (137, "OOMKilled"));
    assert!(status.log_path.ends_with("/main/0.log"), "{}", status.log_path);
    let filter = cri::PodSandboxFilter {
        label_selector: HashMap::from([("app".into(), "errors".into())]),
        ..Default::default()
    };
    let sandboxes = client
        .list_pod_sandbox(cri::ListPodSandboxRequest { filter: Some(filter) })
        .await
        .expect("list")
        .into_inner()
        .items;
    assert_eq!(sandboxes.len(), 1);
    assert_eq!(
        sandboxes[0].state,
        cri::PodSandboxState::SandboxNotready as i32,
        "a finished pod's sandbox is stopped"
    );
    let unknown = client
        .container_status(cri::ContainerStatusRequest {
            container_id: "nope".into(),
            verbose: false,
        })
        .await;
    assert_eq!(
        unknown.expect_err("unknown id").code(),
        spark_operator_proto::tonic::Code::NotFound
    );

    // And the API agrees with the runtime (the kubelet writes status after the runtime event).
    let api = settled(&store, "flaky", "Succeeded").await;
    assert_eq!(api["status"]["containerStatuses"][0]["restartCount"], 1);
    assert_eq!(
        api["status"]["containerStatuses"][0]["lastState"]["terminated"]["exitCode"],
        1
    );
    let init = settled(&store, "with-init", "Failed").await;

    assert_eq!(
        init["status"]["initContainerStatuses"][0]["state"]["terminated"]["reason"],
        "Completed"
    );
    sim.shutdown().await;
}
