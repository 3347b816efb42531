//! The CRI watcher against a fake runtime that behaves as the simulated node does not (yet): a runtime
//! that sends no events (CRI-O's default), an OOMKilled reason set after the exit (containerd), and a
//! runtime restart during which a container exits without any event.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic in a test is a failed assertion

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt as _;
use spark_operator_agent::cri::{ContainerEnd, Observation, WatchConfig, watch};
use spark_operator_agent::identity::{KUBE_CONTAINER_NAME, KUBE_POD_NAME, KUBE_POD_NAMESPACE, KUBE_POD_UID};
use spark_operator_agent::metrics::AgentMetrics;
use spark_operator_agent::reported::{Reported, SharedReported};
use spark_operator_api::labels::{LABEL_APP_NAME, LABEL_SPARK_EXEC_ID, LABEL_SPARK_ROLE, LABEL_SUBMISSION_ID};
use spark_operator_proto::cri::v1 as cri;
use spark_operator_proto::cri::v1::runtime_service_server::{RuntimeService, RuntimeServiceServer};
use spark_operator_proto::tonic::{self, Request, Response, Status};
use spark_operator_proto::unix::{bind_unix_listener, serve_runtime_service};
use spark_operator_runtime::readiness::Readiness;
use spark_operator_runtime::shutdown::{Shutdown, Trigger};
use tokio::sync::{broadcast, mpsc};
use tokio_stream::wrappers::BroadcastStream;

const SANDBOX: &str = "sandbox-1";

async fn within<T>(what: &str, fut: impl Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(30), fut)
        .await
        .unwrap_or_else(|_| panic!("timed out waiting for {what}"))
}

async fn until(what: &str, mut check: impl FnMut() -> bool) {
    within(what, async {
        while !check() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
}

#[derive(Default)]
struct RuntimeState {
    containers: HashMap<String, cri::ContainerStatus>,
    /// Containers whose reason turns OOMKilled after their first status read (containerd's late OOM).
    late_oom: HashSet<String>,
    reads: HashMap<String, usize>,
}

/// A runtime's state, shared by every incarnation of its server (a restart keeps the containers).
#[derive(Clone, Default)]
struct Node(Arc<Mutex<RuntimeState>>);

impl Node {
    fn set(&self, status: cri::ContainerStatus) {
        self.0.lock().unwrap().containers.insert(status.id.clone(), status);
    }
}

#[derive(Clone)]
struct FakeRuntime {
    node: Node,
    /// None: GetContainerEvents ends at once, as CRI-O's does without enable_pod_events.
    events: Option<broadcast::Sender<cri::ContainerEventResponse>>,
    stop: Shutdown,
}

fn sandbox() -> cri::PodSandboxStatus {
    let labels = [
        (KUBE_POD_NAME, "pi-exec-1"),
        (KUBE_POD_NAMESPACE, "jobs"),
        (KUBE_POD_UID, "uid-1"),
        (LABEL_SPARK_ROLE, "executor"),
        (LABEL_APP_NAME, "pi"),
        (LABEL_SUBMISSION_ID, "s1"),
        (LABEL_SPARK_EXEC_ID, "1"),
    ];
    cri::PodSandboxStatus {
        id: SANDBOX.into(),
        labels: labels.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect(),
        ..Default::default()
    }
}

fn container(id: &str, state: cri::ContainerState, exit_code: i32, reason: &str) -> cri::ContainerStatus {
    let exited = state == cri::ContainerState::ContainerExited;
    cri::ContainerStatus {
        id: id.into(),
        metadata: Some(cri::ContainerMetadata {
            name: "spark-kubernetes-executor".into(),
            attempt: 0,
        }),
        state: state as i32,
        started_at: 1_000,
        finished_at: if exited { 2_000 } else { 0 },
        exit_code,
        reason: reason.into(),
        labels: [(KUBE_CONTAINER_NAME.to_owned(), "spark-kubernetes-executor".to_owned())].into(),
        log_path: "/nonexistent/0.log".into(),
        ..Default::default()
    }
}

#[tonic::async_trait]
impl RuntimeService for FakeRuntime {
    async fn version(&self, _: Request<cri::VersionRequest>) -> Result<Response<cri::VersionResponse>, Status> {
        Ok(Response::new(cri::VersionResponse::default()))
    }

    async fn pod_sandbox_status(
        &self,
        _: Request<cri::PodSandboxStatusRequest>,
    ) -> Result<Response<cri::PodSandboxStatusResponse>, Status> {
        Ok(Response::new(cri::PodSandboxStatusResponse {
            status: Some(sandbox()),
            ..Default::default()
        }))
    }

    async fn list_pod_sandbox(
        &self,
        _: Request<cri::ListPodSandboxRequest>,
    ) -> Result<Response<cri::ListPodSandboxResponse>, Status> {
        Ok(Response::new(cri::ListPodSandboxResponse::default()))
    }

    async fn list_containers(
        &self,
        _: Request<cri::ListContainersRequest>,
    ) -> Result<Response<cri::ListContainersResponse>, Status> {
        let state = self.node.0.lock().unwrap();
        let containers = state
            .containers
            .values()
            .map(|s| cri::Container {
                id: s.id.clone(),
                pod_sandbox_id: SANDBOX.into(),
                metadata: s.metadata.clone(),
                state: s.state,
                labels: s.labels.clone(),
                ..Default::default()
            })
            .collect();
        Ok(Response::new(cri::ListContainersResponse { containers }))
    }

    async fn container_status(
        &self,
        request: Request<cri::ContainerStatusRequest>,
    ) -> Result<Response<cri::ContainerStatusResponse>, Status> {
        let id = request.into_inner().container_id;
        let mut state = self.node.0.lock().unwrap();
        let reads = *state.reads.entry(id.clone()).and_modify(|n| *n += 1).or_insert(1);
        let late_oom = state.late_oom.contains(&id);
        let mut status = state
            .containers
            .get(&id)
            .cloned()
            .ok_or_else(|| Status::not_found(id.clone()))?;
        if late_oom && reads > 1 {
            status.reason = "OOMKilled".into();
        }
        Ok(Response::new(cri::ContainerStatusResponse {
            status: Some(status),
            ..Default::default()
        }))
    }

    async fn status(&self, _: Request<cri::StatusRequest>) -> Result<Response<cri::StatusResponse>, Status> {
        Ok(Response::new(cri::StatusResponse::default()))
    }

    type GetContainerEventsStream = futures::stream::BoxStream<'static, Result<cri::ContainerEventResponse, Status>>;

    async fn get_container_events(
        &self,
        _: Request<cri::GetEventsRequest>,
    ) -> Result<Response<Self::GetContainerEventsStream>, Status> {
        let Some(events) = &self.events else {
            return Ok(Response::new(futures::stream::empty().boxed()));
        };
        let stop = self.stop.clone();
        let stream = BroadcastStream::new(events.subscribe())
            .filter_map(|e| async move { e.ok().map(Ok) })
            .take_until(async move { stop.fired().await });
        Ok(Response::new(stream.boxed()))
    }
}

/// Serves the fake runtime on `socket` until the returned trigger fires.
fn serve(
    node: &Node,
    socket: &Path,
    events: Option<broadcast::Sender<cri::ContainerEventResponse>>,
) -> (Trigger, tokio::task::JoinHandle<()>) {
    let (trigger, stop) = Shutdown::new();
    let service = FakeRuntime {
        node: node.clone(),
        events,
        stop: stop.clone(),
    };
    let listener = bind_unix_listener(socket).unwrap();
    let task = tokio::spawn(async move {
        serve_runtime_service(RuntimeServiceServer::new(service), listener, async move {
            stop.fired().await;
        })
        .await
        .unwrap();
    });
    (trigger, task)
}

struct Agent {
    metrics: Arc<AgentMetrics>,
    readiness: Readiness,
    stop: Trigger,
    task: tokio::task::JoinHandle<()>,
    observations: mpsc::UnboundedReceiver<Observation>,
}

fn start_agent(
    socket: PathBuf,
    poll_period: Duration,
    oom_settle_delay: Duration,
    reported: Option<SharedReported>,
) -> Agent {
    let metrics = Arc::new(AgentMetrics::default());
    let readiness = Readiness::default();
    let ready = readiness.register("cri");
    let (stop, shutdown) = Shutdown::new();
    let (tx, observations) = mpsc::unbounded_channel();
    let task = tokio::spawn(watch(
        WatchConfig {
            socket,
            relist_period: Duration::from_secs(3600),
            poll_period,
            oom_settle_delay,
            // A scripted runtime: no files behind its paths.
            host_root: PathBuf::from("/"),
        },
        metrics.clone(),
        Some(ready),
        reported,
        tx,
        shutdown,
    ));
    Agent {
        metrics,
        readiness,
        stop,
        task,
        observations,
    }
}

async fn next_end(observations: &mut mpsc::UnboundedReceiver<Observation>) -> ContainerEnd {
    within("a container end", async {
        loop {
            match observations.recv().await {
                Some(Observation::Ended(end)) => return end,
                Some(Observation::Started(_)) => {}
                None => panic!("the watcher stopped"),
            }
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_events_the_agent_polls_and_settles_a_late_oom() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("crio.sock");
    let node = Node::default();
    // Exited with 137 before the agent came; its reason becomes OOMKilled only after the first read.
    node.set(container("c1", cri::ContainerState::ContainerExited, 137, "Error"));
    node.0.lock().unwrap().late_oom.insert("c1".into());
    let (stop_runtime, runtime) = serve(&node, &socket, None);

    // A long poll period: the end must come from the settle re-read, not from another poll.
    let reported = SharedReported::new(Reported::open(dir.path()).unwrap());
    let mut agent = start_agent(
        socket,
        Duration::from_secs(3600),
        Duration::from_millis(100),
        Some(reported.clone()),
    );
    let end = next_end(&mut agent.observations).await;
    assert_eq!(end.container.container_id, "c1");
    assert_eq!((end.status.exit_code, end.status.reason.as_str()), (137, "OOMKilled"));
    assert_eq!(end.container.executor_id, Some(1));
    // The settled end and the switch to polling are two branches of one select: either may come first.
    until("no events: polling, and the metric says so", || {
        agent.metrics.cri_polling.get() == 1
    })
    .await;
    assert_eq!(agent.metrics.cri_oom_settles.get(), 1);
    assert_eq!(agent.metrics.cri_repairs.get(), 1, "found by a relist, not an event");
    assert_eq!(
        node.0.lock().unwrap().reads["c1"],
        2,
        "read once, then again after the settle delay"
    );

    // As the capture does once the report is spooled.
    reported.insert("c1".to_owned()).await.unwrap();

    // A new agent process: c1, still listed by the runtime, is not reported again; polling finds a new
    // container's end.
    agent.stop.fire();
    within("the watcher to stop", agent.task).await.unwrap();
    let reported = SharedReported::new(Reported::open(dir.path()).unwrap());
    let mut agent = start_agent(
        dir.path().join("crio.sock"),
        Duration::from_millis(50),
        Duration::from_millis(50),
        Some(reported),
    );
    node.set(container("c2", cri::ContainerState::ContainerRunning, 0, ""));
    until("c2 to be seen running", || agent.metrics.containers_started.get() >= 1).await;
    node.set(container("c2", cri::ContainerState::ContainerExited, 0, "Completed"));
    let end = next_end(&mut agent.observations).await;
    assert_eq!((end.container.container_id.as_str(), end.status.exit_code), ("c2", 0));
    assert_eq!(
        agent.metrics.containers_started.get(),
        1,
        "c1 is not even started again"
    );
    agent.stop.fire();
    within("the watcher to stop", agent.task).await.unwrap();
    stop_runtime.fire();
    within("the runtime to stop", runtime).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exit_during_a_runtime_restart_is_found_by_the_relist_after_reconnecting() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("containerd.sock");
    let node = Node::default();
    let (events, _) = broadcast::channel(64);
    let running = container("c1", cri::ContainerState::ContainerRunning, 0, "");
    node.set(running.clone());
    let (stop_runtime, runtime) = serve(&node, &socket, Some(events.clone()));

    let mut agent = start_agent(
        socket.clone(),
        Duration::from_secs(3600),
        Duration::from_millis(50),
        None,
    );
    until("the agent to be ready", || agent.readiness.is_ready()).await;
    until("c1 to be seen running", || agent.metrics.containers_started.get() == 1).await;
    // An event, so the stream is known to carry events (not CRI-O's empty one).
    let _ = events.send(cri::ContainerEventResponse {
        container_id: "c1".into(),
        container_event_type: cri::ContainerEventType::ContainerStartedEvent as i32,
        pod_sandbox_status: Some(sandbox()),
        containers_statuses: vec![running],
        ..Default::default()
    });
    until("the event to be consumed", || agent.metrics.cri_events.get() == 1).await;

    // The runtime goes away; the container exits meanwhile, and no event will ever say so.
    stop_runtime.fire();
    within("the runtime to stop", runtime).await.unwrap();
    until("the agent to notice", || !agent.readiness.is_ready()).await;
    assert_eq!(agent.metrics.cri_connected.get(), 0);
    node.set(container("c1", cri::ContainerState::ContainerExited, 3, "Error"));
    let (stop_runtime, runtime) = serve(&node, &socket, Some(events.clone()));

    let end = next_end(&mut agent.observations).await;
    assert_eq!((end.status.exit_code, end.status.reason.as_str()), (3, "Error"));
    assert_eq!(agent.metrics.cri_repairs.get(), 1);
    assert!(agent.metrics.cri_reconnects.get() >= 1);
    assert_eq!(agent.metrics.cri_polling.get(), 0);
    until("the agent to be ready again", || agent.readiness.is_ready()).await;

    // A duplicate STOPPED event after the repair reports nothing twice.
    let _ = events.send(cri::ContainerEventResponse {
        container_id: "c1".into(),
        container_event_type: cri::ContainerEventType::ContainerStoppedEvent as i32,
        pod_sandbox_status: Some(sandbox()),
        containers_statuses: vec![container("c1", cri::ContainerState::ContainerExited, 3, "Error")],
        ..Default::default()
    });
    until("the duplicate to be consumed", || agent.metrics.cri_events.get() == 2).await;
    agent.stop.fire();
    within("the watcher to stop", agent.task).await.unwrap();
    let mut rest = Vec::new();
    while let Ok(observation) = agent.observations.try_recv() {
        rest.push(observation);
    }
    assert!(
        !rest.iter().any(|o| matches!(o, Observation::Ended(_))),
        "reported twice: {rest:?}"
    );
    stop_runtime.fire();
    within("the runtime to stop", runtime).await.unwrap();
}
