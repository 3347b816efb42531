//! End to end over a real unix socket: an in-test CRI runtime served with the crate's helpers,
//! called with the generated client the node agent will use.

use std::collections::HashMap;

use futures::StreamExt;
use spark_operator_proto::cri::v1::runtime_service_client::RuntimeServiceClient;
use spark_operator_proto::cri::v1::runtime_service_server::{RuntimeService, RuntimeServiceServer};
use spark_operator_proto::cri::v1::{
    Container, ContainerEventResponse, ContainerEventType, ContainerFilter, ContainerMetadata, ContainerState,
    ContainerStatus, ContainerStatusRequest, ContainerStatusResponse, GetEventsRequest, ListContainersRequest,
    ListContainersResponse, ListPodSandboxRequest, ListPodSandboxResponse, PodSandbox, PodSandboxMetadata,
    PodSandboxState, PodSandboxStatus, PodSandboxStatusRequest, PodSandboxStatusResponse, RuntimeCondition,
    RuntimeStatus, StatusRequest, StatusResponse, VersionRequest, VersionResponse,
};
use spark_operator_proto::unix::{UnixSocketError, bind_unix_listener, connect_runtime_service, serve_runtime_service};
use tokio::sync::{broadcast, oneshot};
use tokio::task::JoinHandle;
use tokio_stream::wrappers::BroadcastStream;
use tonic::{Request, Response, Status};

const SPARK_ROLE: &str = "spark-role";

/// A runtime with a fixed set of containers; events are pushed by the test through `events`.
struct FakeRuntime {
    containers: Vec<ContainerStatus>,
    sandbox: PodSandboxStatus,
    events: broadcast::Sender<ContainerEventResponse>,
}

fn labels(pairs: &[(&str, &str)]) -> HashMap<String, String> {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

fn matches_selector(labels: &HashMap<String, String>, selector: &HashMap<String, String>) -> bool {
    selector.iter().all(|(k, v)| labels.get(k) == Some(v))
}

fn container_status(id: &str, name: &str, state: ContainerState, exit_code: i32, role: &str) -> ContainerStatus {
    ContainerStatus {
        id: id.to_string(),
        metadata: Some(ContainerMetadata {
            name: name.to_string(),
            attempt: 0,
        }),
        state: state as i32,
        created_at: 1_700_000_000_000_000_000,
        started_at: 1_700_000_001_000_000_000,
        finished_at: if state == ContainerState::ContainerExited {
            1_700_000_060_000_000_000
        } else {
            0
        },
        exit_code,
        reason: if state == ContainerState::ContainerExited {
            "Error".to_string()
        } else {
            String::new()
        },
        message: String::new(),
        labels: labels(&[
            (SPARK_ROLE, role),
            ("io.kubernetes.pod.namespace", "default"),
            ("io.kubernetes.container.name", name),
        ]),
        annotations: labels(&[("io.kubernetes.container.restartCount", "0")]),
        log_path: format!("/var/log/pods/default_pi_uid/{name}/0.log"),
        ..Default::default()
    }
}

impl FakeRuntime {
    fn new() -> (Self, broadcast::Sender<ContainerEventResponse>) {
        let (events, _) = broadcast::channel(16);
        let runtime = FakeRuntime {
            containers: vec![
                container_status(
                    "c-driver",
                    "spark-kubernetes-driver",
                    ContainerState::ContainerRunning,
                    0,
                    "driver",
                ),
                container_status(
                    "c-exec-1",
                    "spark-kubernetes-executor",
                    ContainerState::ContainerExited,
                    137,
                    "executor",
                ),
                container_status(
                    "c-sidecar",
                    "istio-proxy",
                    ContainerState::ContainerRunning,
                    0,
                    "sidecar",
                ),
            ],
            sandbox: PodSandboxStatus {
                id: "sb-1".to_string(),
                metadata: Some(PodSandboxMetadata {
                    name: "pi-driver".to_string(),
                    uid: "uid-1".to_string(),
                    namespace: "default".to_string(),
                    attempt: 0,
                }),
                state: PodSandboxState::SandboxReady as i32,
                created_at: 1_700_000_000_000_000_000,
                labels: labels(&[(SPARK_ROLE, "driver")]),
                ..Default::default()
            },
            events: events.clone(),
        };
        (runtime, events)
    }
}

#[tonic::async_trait]
impl RuntimeService for FakeRuntime {
    async fn version(&self, request: Request<VersionRequest>) -> Result<Response<VersionResponse>, Status> {
        Ok(Response::new(VersionResponse {
            // Echo the requested API version, so the test sees the request arrived intact.
            version: request.into_inner().version,
            runtime_name: "fake-runtime".to_string(),
            runtime_version: "1.2.3".to_string(),
            runtime_api_version: "v1".to_string(),
        }))
    }

    async fn pod_sandbox_status(
        &self,
        request: Request<PodSandboxStatusRequest>,
    ) -> Result<Response<PodSandboxStatusResponse>, Status> {
        let id = request.into_inner().pod_sandbox_id;
        if id != self.sandbox.id {
            return Err(Status::not_found(format!("pod sandbox {id} not found")));
        }
        Ok(Response::new(PodSandboxStatusResponse {
            status: Some(self.sandbox.clone()),
            ..Default::default()
        }))
    }

    async fn list_pod_sandbox(
        &self,
        _request: Request<ListPodSandboxRequest>,
    ) -> Result<Response<ListPodSandboxResponse>, Status> {
        Ok(Response::new(ListPodSandboxResponse {
            items: vec![PodSandbox {
                id: self.sandbox.id.clone(),
                metadata: self.sandbox.metadata.clone(),
                state: self.sandbox.state,
                created_at: self.sandbox.created_at,
                labels: self.sandbox.labels.clone(),
                ..Default::default()
            }],
        }))
    }

    async fn list_containers(
        &self,
        request: Request<ListContainersRequest>,
    ) -> Result<Response<ListContainersResponse>, Status> {
        let filter = request.into_inner().filter.unwrap_or_default();
        let containers = self
            .containers
            .iter()
            .filter(|c| matches_selector(&c.labels, &filter.label_selector))
            .map(|c| Container {
                id: c.id.clone(),
                pod_sandbox_id: self.sandbox.id.clone(),
                metadata: c.metadata.clone(),
                state: c.state,
                created_at: c.created_at,
                labels: c.labels.clone(),
                annotations: c.annotations.clone(),
                ..Default::default()
            })
            .collect();
        Ok(Response::new(ListContainersResponse { containers }))
    }

    async fn container_status(
        &self,
        request: Request<ContainerStatusRequest>,
    ) -> Result<Response<ContainerStatusResponse>, Status> {
        let id = request.into_inner().container_id;
        let status = self
            .containers
            .iter()
            .find(|c| c.id == id)
            .cloned()
            .ok_or_else(|| Status::not_found(format!("container {id} not found")))?;
        Ok(Response::new(ContainerStatusResponse {
            status: Some(status),
            info: HashMap::new(),
        }))
    }

    async fn status(&self, _request: Request<StatusRequest>) -> Result<Response<StatusResponse>, Status> {
        Ok(Response::new(StatusResponse {
            status: Some(RuntimeStatus {
                conditions: vec![RuntimeCondition {
                    r#type: "RuntimeReady".to_string(),
                    status: true,
                    ..Default::default()
                }],
            }),
            ..Default::default()
        }))
    }

    type GetContainerEventsStream = futures::stream::BoxStream<'static, Result<ContainerEventResponse, Status>>;

    async fn get_container_events(
        &self,
        _request: Request<GetEventsRequest>,
    ) -> Result<Response<Self::GetContainerEventsStream>, Status> {
        // Subscribed before the response is returned, so no event sent after the call
        // completes can be missed.
        let stream = BroadcastStream::new(self.events.subscribe())
            .map(|event| event.map_err(|lagged| Status::data_loss(format!("event stream lagged: {lagged}"))));
        Ok(Response::new(stream.boxed()))
    }
}

struct Served {
    _dir: tempfile::TempDir,
    socket: std::path::PathBuf,
    events: broadcast::Sender<ContainerEventResponse>,
    shutdown: oneshot::Sender<()>,
    server: JoinHandle<Result<(), UnixSocketError>>,
}

// Test helpers: clippy's allow-unwrap-in-tests covers only #[test] functions; a panic here is a failed test.
#[allow(clippy::unwrap_used)]
fn serve_fake() -> Served {
    let dir = tempfile::tempdir().unwrap();
    // A nested path: the helper must create the directory, as a runtime does under /run.
    let socket = dir.path().join("run/containerd/containerd.sock");
    let (runtime, events) = FakeRuntime::new();
    let listener = bind_unix_listener(&socket).unwrap();
    let (shutdown, shutdown_rx) = oneshot::channel::<()>();
    let server = tokio::spawn(serve_runtime_service(
        RuntimeServiceServer::new(runtime),
        listener,
        async move {
            let _ = shutdown_rx.await;
        },
    ));
    Served {
        _dir: dir,
        socket,
        events,
        shutdown,
        server,
    }
}

// Test helpers: clippy's allow-unwrap-in-tests covers only #[test] functions; a panic here is a failed test.
#[allow(clippy::unwrap_used)]
async fn stop(served: Served) {
    served.shutdown.send(()).unwrap();
    served.server.await.unwrap().unwrap();
}

fn event(container: ContainerStatus, kind: ContainerEventType, at: i64) -> ContainerEventResponse {
    ContainerEventResponse {
        container_id: container.id.clone(),
        container_event_type: kind as i32,
        created_at: at,
        pod_sandbox_status: None,
        containers_statuses: vec![container],
    }
}

#[tokio::test]
async fn client_calls_unary_rpcs_over_unix_socket() {
    let served = serve_fake();
    let mut client = connect_runtime_service(&served.socket).await.unwrap();

    let version = client
        .version(VersionRequest {
            version: "v1".to_string(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(version.version, "v1");
    assert_eq!(version.runtime_name, "fake-runtime");
    assert_eq!(version.runtime_version, "1.2.3");
    assert_eq!(version.runtime_api_version, "v1");

    // Only Spark executors: the driver and the sidecar must be filtered out by the label.
    let listed = client
        .list_containers(ListContainersRequest {
            filter: Some(ContainerFilter {
                label_selector: labels(&[(SPARK_ROLE, "executor")]),
                ..Default::default()
            }),
        })
        .await
        .unwrap()
        .into_inner();
    let ids: Vec<&str> = listed.containers.iter().map(|c| c.id.as_str()).collect();
    assert_eq!(ids, ["c-exec-1"]);
    assert_eq!(listed.containers[0].pod_sandbox_id, "sb-1");
    assert_eq!(listed.containers[0].state(), ContainerState::ContainerExited);

    let all = client
        .list_containers(ListContainersRequest { filter: None })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(all.containers.len(), 3);

    let status = client
        .container_status(ContainerStatusRequest {
            container_id: "c-exec-1".to_string(),
            verbose: false,
        })
        .await
        .unwrap()
        .into_inner()
        .status
        .unwrap();
    assert_eq!(status.id, "c-exec-1");
    assert_eq!(status.state(), ContainerState::ContainerExited);
    assert_eq!(status.exit_code, 137);
    assert_eq!(status.reason, "Error");
    assert_eq!(status.finished_at, 1_700_000_060_000_000_000);
    assert_eq!(
        status.log_path,
        "/var/log/pods/default_pi_uid/spark-kubernetes-executor/0.log"
    );
    assert_eq!(status.labels.get(SPARK_ROLE).map(String::as_str), Some("executor"));
    assert_eq!(status.metadata.unwrap().name, "spark-kubernetes-executor");

    let missing = client
        .container_status(ContainerStatusRequest {
            container_id: "nope".to_string(),
            verbose: false,
        })
        .await
        .unwrap_err();
    assert_eq!(missing.code(), tonic::Code::NotFound);
    assert!(missing.message().contains("nope"), "{missing:?}");

    let sandbox = client
        .pod_sandbox_status(PodSandboxStatusRequest {
            pod_sandbox_id: "sb-1".to_string(),
            verbose: false,
        })
        .await
        .unwrap()
        .into_inner()
        .status
        .unwrap();
    assert_eq!(sandbox.metadata.as_ref().unwrap().name, "pi-driver");
    assert_eq!(sandbox.state(), PodSandboxState::SandboxReady);

    let sandboxes = client
        .list_pod_sandbox(ListPodSandboxRequest { filter: None })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(sandboxes.items.len(), 1);

    let runtime = client
        .status(StatusRequest { verbose: false })
        .await
        .unwrap()
        .into_inner();
    let conditions = runtime.status.unwrap().conditions;
    assert_eq!(conditions[0].r#type, "RuntimeReady");
    assert!(conditions[0].status);

    drop(client);
    stop(served).await;
}

#[tokio::test]
async fn container_events_stream_in_order() {
    let served = serve_fake();
    let mut client = connect_runtime_service(&served.socket).await.unwrap();
    let mut stream = client
        .get_container_events(GetEventsRequest {})
        .await
        .unwrap()
        .into_inner();

    let created = container_status(
        "c-exec-2",
        "spark-kubernetes-executor",
        ContainerState::ContainerCreated,
        0,
        "executor",
    );
    let running = container_status(
        "c-exec-2",
        "spark-kubernetes-executor",
        ContainerState::ContainerRunning,
        0,
        "executor",
    );
    let exited = container_status(
        "c-exec-2",
        "spark-kubernetes-executor",
        ContainerState::ContainerExited,
        143,
        "executor",
    );
    let sent = [
        event(created, ContainerEventType::ContainerCreatedEvent, 10),
        event(running, ContainerEventType::ContainerStartedEvent, 20),
        event(exited, ContainerEventType::ContainerStoppedEvent, 30),
    ];
    for e in &sent {
        served.events.send(e.clone()).unwrap();
    }

    let mut received = Vec::new();
    for _ in 0..sent.len() {
        received.push(stream.message().await.unwrap().unwrap());
    }
    assert_eq!(received, sent);

    let kinds: Vec<ContainerEventType> = received.iter().map(|e| e.container_event_type()).collect();
    assert_eq!(
        kinds,
        [
            ContainerEventType::ContainerCreatedEvent,
            ContainerEventType::ContainerStartedEvent,
            ContainerEventType::ContainerStoppedEvent,
        ]
    );
    let stopped = &received[2].containers_statuses[0];
    assert_eq!(stopped.state(), ContainerState::ContainerExited);
    assert_eq!(stopped.exit_code, 143);
    assert_eq!(stopped.reason, "Error");

    drop(stream);
    drop(client);
    stop(served).await;
}

/// The server must route the upstream method paths, which is what containerd's clients send.
#[tokio::test]
async fn server_answers_upstream_method_path() {
    let served = serve_fake();
    let channel = spark_operator_proto::unix::connect_unix(&served.socket).await.unwrap();
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready().await.unwrap();
    let path = tonic::codegen::http::uri::PathAndQuery::from_static("/runtime.v1.RuntimeService/Version");
    let response: Response<VersionResponse> = grpc
        .unary(
            Request::new(VersionRequest {
                version: "0.1.0".to_string(),
            }),
            path,
            tonic_prost::ProstCodec::default(),
        )
        .await
        .unwrap();
    assert_eq!(response.into_inner().runtime_name, "fake-runtime");
    assert_eq!(
        <RuntimeServiceServer<FakeRuntime> as tonic::server::NamedService>::NAME,
        "runtime.v1.RuntimeService"
    );
    drop(grpc);
    stop(served).await;
}

#[tokio::test]
async fn stale_socket_is_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("cri.sock");
    // A socket file nobody listens on, as left behind by a crashed runtime.
    drop(std::os::unix::net::UnixListener::bind(&socket).unwrap());
    assert!(socket.exists());

    let listener = bind_unix_listener(&socket).unwrap();
    let (runtime, _events) = FakeRuntime::new();
    let (shutdown, shutdown_rx) = oneshot::channel::<()>();
    let server = tokio::spawn(serve_runtime_service(
        RuntimeServiceServer::new(runtime),
        listener,
        async move {
            let _ = shutdown_rx.await;
        },
    ));
    let mut client: RuntimeServiceClient<_> = connect_runtime_service(&socket).await.unwrap();
    let version = client.version(VersionRequest::default()).await.unwrap().into_inner();
    assert_eq!(version.runtime_name, "fake-runtime");
    drop(client);
    shutdown.send(()).unwrap();
    server.await.unwrap().unwrap();
}

#[tokio::test]
async fn live_socket_is_not_stolen() {
    let served = serve_fake();
    let err = bind_unix_listener(&served.socket).unwrap_err();
    assert!(
        matches!(&err, UnixSocketError::InUse { path } if *path == served.socket),
        "{err:?}"
    );
    assert!(err.to_string().contains(&served.socket.display().to_string()), "{err}");
    // The running server still answers.
    let mut client = connect_runtime_service(&served.socket).await.unwrap();
    client.version(VersionRequest::default()).await.unwrap();
    drop(client);
    stop(served).await;
}

#[tokio::test]
async fn regular_file_is_not_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("not-a-socket");
    std::fs::write(&path, b"keep me").unwrap();
    let err = bind_unix_listener(&path).unwrap_err();
    assert!(
        matches!(&err, UnixSocketError::NotASocket { path: p } if *p == path),
        "{err:?}"
    );
    assert!(err.to_string().contains(&path.display().to_string()), "{err}");
    assert_eq!(std::fs::read(&path).unwrap(), b"keep me");
}

#[tokio::test]
async fn connecting_to_missing_socket_names_the_path() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("absent.sock");
    let err = connect_runtime_service(&path).await.unwrap_err();
    assert!(
        matches!(&err, UnixSocketError::Connect { path: p, .. } if *p == path),
        "{err:?}"
    );
    let message = with_causes(&err);
    assert!(message.contains(&path.display().to_string()), "{message}");
    // The io cause must reach the rendered error, not just tonic's bare "transport error".
    assert!(message.contains("No such file or directory"), "{message}");
}

/// The error and its source chain, as a log line or anyhow shows it: the message itself leaves the
/// cause to the chain.
fn with_causes(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut next = error.source();
    while let Some(cause) = next {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        next = cause.source();
    }
    text
}
