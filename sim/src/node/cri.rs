//! Each node's CRI `runtime.v1.RuntimeService` over its [`Runtime`], served on
//! `<node>/run/containerd/containerd.sock`: what a node agent (or `crictl`) sees on a containerd node,
//! including the faults a test scripted (`cri_faults.rs`): calls fail while the runtime restarts,
//! event streams end with it, and a runtime without pod events closes them at once.

use std::sync::Arc;

use futures::StreamExt as _;
use futures::future::BoxFuture;
use spark_operator_proto::cri::v1 as cri;
use spark_operator_proto::cri::v1::runtime_service_server::RuntimeService;
use spark_operator_proto::tonic::{self, Request, Response, Status};
use tokio_stream::wrappers::BroadcastStream;
use tokio_stream::wrappers::errors::BroadcastStreamRecvError;

use super::runtime::{Runtime, RuntimeError};

/// The gRPC face of one node's runtime.
#[derive(Debug, Clone)]
pub struct CriService {
    runtime: Arc<Runtime>,
    node: String,
    /// Ends open event streams when the node shuts down, as a stopping containerd does.
    stop: tokio::sync::watch::Receiver<bool>,
}

impl CriService {
    pub fn new(runtime: Arc<Runtime>, node: impl Into<String>, stop: tokio::sync::watch::Receiver<bool>) -> Self {
        Self {
            runtime,
            node: node.into(),
            stop,
        }
    }
}

fn not_found(e: RuntimeError) -> Status {
    Status::not_found(e.to_string())
}

/// What containerd's event server answers when its event queue closes under a subscriber.
const SUBSCRIPTION_CLOSED: &str = "container events subscription closed by server";

impl CriService {
    /// Fails the call while the runtime is down (restarting), as a client of a socket nobody
    /// serves sees it.
    fn up(&self) -> Result<(), Status> {
        if self.runtime.is_down() {
            return Err(Status::unavailable(format!(
                "connection refused: the container runtime of node {} is restarting",
                self.node
            )));
        }
        Ok(())
    }
}

#[tonic::async_trait]
impl RuntimeService for CriService {
    async fn version(&self, _request: Request<cri::VersionRequest>) -> Result<Response<cri::VersionResponse>, Status> {
        self.up()?;
        Ok(Response::new(self.runtime.version()))
    }

    async fn pod_sandbox_status(
        &self,
        request: Request<cri::PodSandboxStatusRequest>,
    ) -> Result<Response<cri::PodSandboxStatusResponse>, Status> {
        self.up()?;
        let (status, containers) = self
            .runtime
            .sandbox_status(&request.get_ref().pod_sandbox_id)
            .map_err(not_found)?;
        Ok(Response::new(cri::PodSandboxStatusResponse {
            status: Some(status),
            info: Default::default(),
            containers_statuses: containers,
            timestamp: i64::try_from(jiff::Timestamp::now().as_nanosecond()).unwrap_or(i64::MAX),
        }))
    }

    async fn list_pod_sandbox(
        &self,
        request: Request<cri::ListPodSandboxRequest>,
    ) -> Result<Response<cri::ListPodSandboxResponse>, Status> {
        self.up()?;
        Ok(Response::new(cri::ListPodSandboxResponse {
            items: self.runtime.list_sandboxes(request.get_ref().filter.as_ref()),
        }))
    }

    async fn list_containers(
        &self,
        request: Request<cri::ListContainersRequest>,
    ) -> Result<Response<cri::ListContainersResponse>, Status> {
        self.up()?;
        Ok(Response::new(cri::ListContainersResponse {
            containers: self.runtime.list_containers(request.get_ref().filter.as_ref()),
        }))
    }

    async fn container_status(
        &self,
        request: Request<cri::ContainerStatusRequest>,
    ) -> Result<Response<cri::ContainerStatusResponse>, Status> {
        self.up()?;
        let status = self
            .runtime
            .container_status(&request.get_ref().container_id)
            .map_err(not_found)?;
        Ok(Response::new(cri::ContainerStatusResponse {
            status: Some(status),
            info: Default::default(),
        }))
    }

    async fn status(&self, _request: Request<cri::StatusRequest>) -> Result<Response<cri::StatusResponse>, Status> {
        self.up()?;
        let ready = |t: &str| cri::RuntimeCondition {
            r#type: t.into(),
            status: true,
            reason: String::new(),
            message: String::new(),
        };
        Ok(Response::new(cri::StatusResponse {
            status: Some(cri::RuntimeStatus {
                conditions: vec![ready("RuntimeReady"), ready("NetworkReady")],
            }),
            info: Default::default(),
            runtime_handlers: vec![cri::RuntimeHandler {
                name: String::new(),
                features: Some(Default::default()),
            }],
            features: Some(Default::default()),
        }))
    }

    type GetContainerEventsStream = futures::stream::BoxStream<'static, Result<cri::ContainerEventResponse, Status>>;

    async fn get_container_events(
        &self,
        _request: Request<cri::GetEventsRequest>,
    ) -> Result<Response<Self::GetContainerEventsStream>, Status> {
        // Seen before the check, so a restart right after it still ends this stream.
        let mut restarts = self.runtime.restarts();
        self.up()?;
        if !self.runtime.pod_events_enabled() {
            // CRI-O with `enable_pod_events = false` returns nil at once: a clean, empty stream.
            return Ok(Response::new(futures::stream::empty().boxed()));
        }
        let mut stop = self.stop.clone();
        // Some(status) ends the stream with that error, None ends it cleanly (the node stops).
        let end: BoxFuture<'static, Option<Status>> = Box::pin(async move {
            tokio::select! {
                _ = stop.wait_for(|s| *s) => None,
                changed = restarts.changed() => match changed {
                    Ok(()) => Some(Status::unavailable(SUBSCRIPTION_CLOSED)),
                    Err(_) => None,
                },
            }
        });
        let events = BroadcastStream::new(self.runtime.subscribe());
        let node = self.node.clone();
        let stream = futures::stream::unfold(Some((events, end)), move |open| {
            let node = node.clone();
            async move {
                let (mut events, mut end) = open?;
                loop {
                    tokio::select! {
                        // The end first: a restarted runtime has lost what it had not sent yet.
                        biased;
                        status = &mut end => return status.map(|s| (Err(s), None)),
                        item = events.next() => match item {
                            Some(Ok(event)) => return Some((Ok(event), Some((events, end)))),
                            // containerd drops events for a client whose queue is full; say so in our log.
                            Some(Err(BroadcastStreamRecvError::Lagged(n))) => {
                                tracing::warn!(%node, missed = n, "a GetContainerEvents client fell behind; events were dropped");
                            }
                            None => return None,
                        },
                    }
                }
            }
        });
        Ok(Response::new(stream.boxed()))
    }
}
