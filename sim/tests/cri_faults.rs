//! Scripted CRI misbehaviour (`NodeHandle::cri_faults`): a CRI client sees dropped events,
//! STOPPED before STARTED, a late OOMKilled reason, a runtime restart and a runtime without
//! events, each as containerd or CRI-O shows it; the same setup without the fault does not, and
//! the kubelet (the pods in the API) is never affected.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::time::Duration;

use kube_sim::node::{CriFaults, NodesConfig};
use kube_sim::registry::Gvr;
use kube_sim::store::{Store, WriteOptions};
use kube_sim::{Sim, SimConfig};
use serde_json::{Value, json};
use spark_operator_proto::cri::v1 as cri;
use spark_operator_proto::cri::v1::runtime_service_client::RuntimeServiceClient;
use spark_operator_proto::tonic::{Code, Streaming, transport::Channel};
use spark_operator_proto::unix::connect_runtime_service;

use cri::ContainerEventType as T;

type Client = RuntimeServiceClient<Channel>;

struct Node {
    sim: Sim,
    _dir: tempfile::TempDir,
    client: Client,
    faults: CriFaults,
}

async fn start() -> Node {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = SimConfig::new(dir.path().join("data"));
    config.root_ca_configmap = true;
    config.nodes = NodesConfig::with_nodes(1);
    let sim = Sim::start(config).await.expect("sim starts");
    let node = sim.nodes().node("sim-node-1").expect("node");
    let client = connect_runtime_service(node.cri_socket())
        .await
        .expect("connect to the node's CRI socket");
    Node {
        faults: node.cri_faults(),
        sim,
        _dir: dir,
        client,
    }
}

fn store(n: &Node) -> &Store {
    n.sim.store()
}

/// A one-container pod (restartPolicy Never) with these script keys.
async fn create(store: &Store, name: &str, script: &[(&str, &str)]) {
    let annotations: serde_json::Map<String, Value> = script
        .iter()
        .map(|(k, v)| (format!("sim.spark-operator.dev/{k}"), json!(v)))
        .collect();
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": { "name": name, "annotations": annotations },
        "spec": { "restartPolicy": "Never", "containers": [{ "name": "main", "image": "busybox:1.36" }] }
    });
    store
        .create(&Gvr::new("", "v1", "pods"), "default", pod, &WriteOptions::default())
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

async fn events(client: &mut Client) -> Streaming<cri::ContainerEventResponse> {
    client
        .get_container_events(cri::GetEventsRequest {})
        .await
        .expect("GetContainerEvents")
        .into_inner()
}

/// One container event as a test compares it: pod, kind, and the container's own snapshot
/// (state, exit code, reason) when the event carries it.
#[derive(Debug, Clone, PartialEq)]
struct Seen {
    pod: String,
    container_id: String,
    kind: T,
    snapshot: Option<(cri::ContainerState, i32, String)>,
}

fn seen(ev: &cri::ContainerEventResponse) -> Option<Seen> {
    let sandbox = ev.pod_sandbox_status.as_ref()?;
    if sandbox.id == ev.container_id {
        return None; // the sandbox's own event
    }
    let snapshot = ev
        .containers_statuses
        .iter()
        .find(|c| c.id == ev.container_id)
        .map(|c| {
            (
                cri::ContainerState::try_from(c.state).unwrap_or(cri::ContainerState::ContainerUnknown),
                c.exit_code,
                c.reason.clone(),
            )
        });
    Some(Seen {
        pod: sandbox.metadata.as_ref().map(|m| m.name.clone()).unwrap_or_default(),
        container_id: ev.container_id.clone(),
        kind: T::try_from(ev.container_event_type).unwrap_or(T::ContainerCreatedEvent),
        snapshot,
    })
}

/// Container events read until (and with) the first one that `last` matches; fails after 20 s.
async fn until(stream: &mut Streaming<cri::ContainerEventResponse>, last: impl Fn(&Seen) -> bool) -> Vec<Seen> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let mut out = Vec::new();
    loop {
        let ev = tokio::time::timeout_at(deadline, stream.message())
            .await
            .unwrap_or_else(|_| panic!("timed out; events so far: {out:#?}"))
            .expect("event stream")
            .expect("stream open");
        if let Some(s) = seen(&ev) {
            let done = last(&s);
            out.push(s);
            if done {
                return out;
            }
        }
    }
}

fn stopped_of(pod: &'static str) -> impl Fn(&Seen) -> bool {
    move |s| s.pod == pod && s.kind == T::ContainerStoppedEvent
}

fn kinds_of(seen: &[Seen], pod: &str) -> Vec<T> {
    seen.iter().filter(|s| s.pod == pod).map(|s| s.kind).collect()
}

async fn list(client: &mut Client) -> Vec<cri::Container> {
    client
        .list_containers(cri::ListContainersRequest { filter: None })
        .await
        .expect("ListContainers")
        .into_inner()
        .containers
}

async fn container_of(client: &mut Client, pod: &str) -> cri::ContainerStatus {
    let c = list(client)
        .await
        .into_iter()
        .find(|c| c.labels.get("io.kubernetes.pod.name").map(String::as_str) == Some(pod))
        .unwrap_or_else(|| panic!("no container of pod {pod}"));
    client
        .container_status(cri::ContainerStatusRequest {
            container_id: c.id,
            verbose: false,
        })
        .await
        .expect("ContainerStatus")
        .into_inner()
        .status
        .expect("status")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_events_never_arrive_and_the_state_still_tells() {
    let mut n = start().await;
    let mut stream = events(&mut n.client).await;

    // Every STOPPED is dropped: the pod ends (the kubelet is not affected), its STOPPED never comes.
    n.faults.drop_events_of_type(T::ContainerStoppedEvent, None);
    create(store(&n), "dropped", &[("run-time", "50ms"), ("exit-code", "3")]).await;
    settled(store(&n), "dropped", "Failed").await;
    // The next N container events, whatever their kind: the CREATED and STARTED of the next pod.
    n.faults.stop_dropping_events();
    n.faults.drop_next_events(2);
    create(store(&n), "next-two", &[("run-time", "50ms")]).await;
    let seen = until(&mut stream, stopped_of("next-two")).await;
    // Without the fault: every event of a pod arrives (the events of the pod after it, on the same stream).
    create(store(&n), "control", &[("run-time", "50ms"), ("exit-code", "3")]).await;
    let control = until(&mut stream, stopped_of("control")).await;

    assert_eq!(
        kinds_of(&seen, "dropped"),
        [T::ContainerCreatedEvent, T::ContainerStartedEvent]
    );
    assert_eq!(kinds_of(&seen, "next-two"), [T::ContainerStoppedEvent]);
    assert_eq!(
        kinds_of(&control, "control"),
        [
            T::ContainerCreatedEvent,
            T::ContainerStartedEvent,
            T::ContainerStoppedEvent
        ]
    );
    assert_eq!(n.faults.dropped_events(), 3);
    // A relist recovers the exit the events lost.
    let status = container_of(&mut n.client, "dropped").await;
    assert_eq!(
        (status.state, status.exit_code, status.reason.as_str()),
        (cri::ContainerState::ContainerExited as i32, 3, "Error")
    );
    n.sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_started_event_can_come_after_the_stopped_one_with_an_exited_snapshot() {
    let mut n = start().await;
    let mut stream = events(&mut n.client).await;
    n.faults.hold_started_until_stopped(Some(1));
    create(store(&n), "reordered", &[("run-time", "50ms"), ("exit-code", "2")]).await;
    let mut seen = until(&mut stream, |s| {
        s.pod == "reordered" && s.kind == T::ContainerStartedEvent
    })
    .await;
    // The budget was one container: the next one is in order again.
    create(store(&n), "in-order", &[("run-time", "50ms"), ("exit-code", "2")]).await;
    seen.extend(until(&mut stream, stopped_of("in-order")).await);

    let exited = Some((cri::ContainerState::ContainerExited, 2, "Error".to_string()));
    let reordered: Vec<_> = seen.iter().filter(|s| s.pod == "reordered").collect();
    assert_eq!(
        reordered.iter().map(|s| s.kind).collect::<Vec<_>>(),
        [
            T::ContainerCreatedEvent,
            T::ContainerStoppedEvent,
            T::ContainerStartedEvent
        ]
    );
    assert_eq!(reordered[1].snapshot, exited);
    assert_eq!(
        reordered[2].snapshot, exited,
        "the late STARTED carries the EXITED snapshot"
    );
    let in_order: Vec<_> = seen.iter().filter(|s| s.pod == "in-order").collect();
    assert_eq!(
        in_order.iter().map(|s| s.kind).collect::<Vec<_>>(),
        [
            T::ContainerCreatedEvent,
            T::ContainerStartedEvent,
            T::ContainerStoppedEvent
        ]
    );
    assert_eq!(
        in_order[1].snapshot.as_ref().map(|s| s.0),
        Some(cri::ContainerState::ContainerRunning)
    );
    assert_eq!(in_order[2].snapshot, exited);

    // Until cleared: a container that keeps running has its STARTED sent when the fault is cleared.
    n.faults.hold_started_until_stopped(None);
    create(store(&n), "held", &[]).await;
    settled(store(&n), "held", "Running").await;
    n.faults.clear();
    let held = until(&mut stream, |s| s.pod == "held" && s.kind == T::ContainerStartedEvent).await;
    assert_eq!(
        kinds_of(&held, "held"),
        [T::ContainerCreatedEvent, T::ContainerStartedEvent]
    );
    n.sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oom_kill_first_shows_error_then_oomkilled_without_an_event() {
    let mut n = start().await;
    let mut stream = events(&mut n.client).await;
    let oom = [("run-time", "50ms"), ("oom-kill", "true")];

    // A reason that stays late for the whole test: the STOPPED event and ContainerStatus say Error.
    n.faults.delay_oom_reason(Duration::from_secs(3600));
    create(store(&n), "late", &oom).await;
    let seen = until(&mut stream, stopped_of("late")).await;
    let stopped = seen.last().expect("STOPPED");
    assert_eq!(
        stopped.snapshot,
        Some((cri::ContainerState::ContainerExited, 137, "Error".to_string()))
    );
    let status = container_of(&mut n.client, "late").await;
    assert_eq!((status.exit_code, status.reason.as_str()), (137, "Error"));
    let sandbox_id = list(&mut n.client)
        .await
        .into_iter()
        .find(|c| c.id == status.id)
        .expect("listed")
        .pod_sandbox_id;
    let sandbox = n
        .client
        .pod_sandbox_status(cri::PodSandboxStatusRequest {
            pod_sandbox_id: sandbox_id,
            verbose: false,
        })
        .await
        .expect("PodSandboxStatus")
        .into_inner();
    assert_eq!(sandbox.containers_statuses[0].reason, "Error");
    // The kubelet knows better: the pod says OOMKilled at once.
    let pod = settled(store(&n), "late", "Failed").await;
    assert_eq!(
        pod["status"]["containerStatuses"][0]["state"]["terminated"]["reason"],
        "OOMKilled"
    );

    // A short delay: the reason turns OOMKilled later, and no event says so.
    n.faults.delay_oom_reason(Duration::from_millis(300));
    create(store(&n), "settles", &oom).await;
    let seen = until(&mut stream, stopped_of("settles")).await;
    let settles_id = seen.last().expect("STOPPED").container_id.clone();
    let mut reason = String::new();
    for _ in 0..1000 {
        reason = container_of(&mut n.client, "settles").await.reason;
        if reason == "OOMKilled" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(reason, "OOMKilled");

    // Without the fault: OOMKilled in the STOPPED event itself. A reason already pending keeps its time.
    n.faults.clear();
    create(store(&n), "at-once", &oom).await;
    let after = until(&mut stream, stopped_of("at-once")).await;
    assert_eq!(
        after.last().expect("STOPPED").snapshot,
        Some((cri::ContainerState::ContainerExited, 137, "OOMKilled".to_string()))
    );
    assert!(
        after.iter().all(|s| s.container_id != settles_id),
        "no event for the late reason: {after:#?}"
    );
    assert_eq!(container_of(&mut n.client, "late").await.reason, "Error");
    n.sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runtime_restart_ends_streams_fails_calls_and_loses_the_events_meanwhile() {
    let mut n = start().await;
    let mut stream = events(&mut n.client).await;
    create(store(&n), "killed-while-down", &[]).await;
    until(&mut stream, |s| {
        s.pod == "killed-while-down" && s.kind == T::ContainerStartedEvent
    })
    .await;

    n.faults.restart_runtime(Duration::from_secs(3600));
    assert!(n.faults.is_down());
    // Events sent before the restart may still be on their way; then the stream ends with an error.
    let end = loop {
        match tokio::time::timeout(Duration::from_secs(20), stream.message())
            .await
            .expect("the stream ends")
        {
            Ok(Some(_)) => continue,
            Ok(None) => panic!("the stream ended without an error"),
            Err(status) => break status,
        }
    };
    assert_eq!(
        (end.code(), end.message()),
        (Code::Unavailable, "container events subscription closed by server")
    );
    let refused = n
        .client
        .list_containers(cri::ListContainersRequest { filter: None })
        .await
        .expect_err("ListContainers while down");
    assert_eq!(refused.code(), Code::Unavailable);
    let refused = n
        .client
        .get_container_events(cri::GetEventsRequest {})
        .await
        .expect_err("GetContainerEvents while down");
    assert_eq!(refused.code(), Code::Unavailable);

    // Meanwhile the kubelet goes on: one container is killed (its pod deleted), another runs and ends.
    store(&n)
        .delete(
            &Gvr::new("", "v1", "pods"),
            "default",
            "killed-while-down",
            &Default::default(),
        )
        .await
        .expect("delete");
    create(store(&n), "ran-while-down", &[("run-time", "50ms"), ("exit-code", "4")]).await;
    settled(store(&n), "ran-while-down", "Failed").await;
    // The kubelet removes the pod object once its container has stopped.
    let mut gone = false;
    for _ in 0..1000 {
        gone = store(&n)
            .get(&Gvr::new("", "v1", "pods"), "default", "killed-while-down")
            .is_err();
        if gone {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(gone, "the deleted pod's container stopped");

    n.faults.end_downtime();
    assert!(!n.faults.is_down());
    // The true state, rebuilt without events.
    let killed = container_of(&mut n.client, "killed-while-down").await;
    assert_eq!(
        (killed.state, killed.exit_code),
        (cri::ContainerState::ContainerExited as i32, 143)
    );
    let ran = container_of(&mut n.client, "ran-while-down").await;
    assert_eq!(
        (ran.state, ran.exit_code, ran.reason.as_str()),
        (cri::ContainerState::ContainerExited as i32, 4, "Error")
    );
    // A new subscriber gets what happens from now on, and nothing of the downtime.
    let mut stream = events(&mut n.client).await;
    create(store(&n), "after", &[("run-time", "50ms")]).await;
    let seen = until(&mut stream, stopped_of("after")).await;
    assert_eq!(
        kinds_of(&seen, "after"),
        [
            T::ContainerCreatedEvent,
            T::ContainerStartedEvent,
            T::ContainerStoppedEvent
        ]
    );
    assert!(
        seen.iter().all(|s| s.pod == "after"),
        "no event of the downtime: {seen:#?}"
    );
    n.sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_pod_events_the_stream_closes_at_once_and_cleanly() {
    let mut n = start().await;
    let mut open_before = events(&mut n.client).await;
    n.faults.set_pod_events(false);
    let mut stream = events(&mut n.client).await;
    let first = tokio::time::timeout(Duration::from_secs(20), stream.message())
        .await
        .expect("the stream ends at once");
    assert!(matches!(first, Ok(None)), "a clean end with no event: {first:?}");

    // A stream opened before stays; and with events enabled again, a new one delivers them.
    n.faults.set_pod_events(true);
    let mut stream = events(&mut n.client).await;
    create(store(&n), "p", &[("run-time", "50ms")]).await;
    let seen = until(&mut stream, stopped_of("p")).await;
    assert_eq!(
        kinds_of(&seen, "p"),
        [
            T::ContainerCreatedEvent,
            T::ContainerStartedEvent,
            T::ContainerStoppedEvent
        ]
    );
    let before = until(&mut open_before, stopped_of("p")).await;
    assert_eq!(kinds_of(&before, "p").len(), 3);
    n.sim.shutdown().await;
}
