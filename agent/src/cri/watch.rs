//! The connection to the runtime's CRI socket, kept up for the life of the process.
//!
//! Per connection: subscribe to `GetContainerEvents` first (so nothing that happens during the relist is
//! missed), drain the stream into the agent's own queue from a dedicated task at once (containerd blocks
//! its event distribution on a slow subscriber), then relist (`ListContainers` + `ContainerStatus`, with
//! `PodSandboxStatus` for the sandbox labels that say whose container it is), and from then on merge
//! events, periodic relists and OOM re-reads through the [`Tracker`]. A stream that ends at once without
//! any event is CRI-O's default (`enable_pod_events=false`): then the agent polls, relisting every
//! `poll_period`. Any failure (the runtime restarting) ends the connection; the next one, after a backoff,
//! starts with a relist, which finds the exits that happened meanwhile.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use spark_operator_proto::cri::v1 as cri;
use spark_operator_proto::cri::v1::runtime_service_client::RuntimeServiceClient;
use spark_operator_proto::tonic::transport::Channel;
use spark_operator_proto::tonic::{Code, Status};
use spark_operator_proto::unix::{UnixSocketError, connect_runtime_service};
use spark_operator_runtime::error_chain::ErrorChain;
use spark_operator_runtime::readiness::Check;
use spark_operator_runtime::shutdown::Shutdown;
use spark_operator_runtime::task::AbortOnDrop;
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::merge::{Action, Origin, Tracker};
use super::{Observation, log_source};
use crate::identity::{CriLabels, spark_container};
use crate::metrics::AgentMetrics;
use crate::reported::SharedReported;

/// A failed CRI call; the connection is dropped and made again.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot connect to the container runtime")]
    Connect(#[source] UnixSocketError),
    #[error("cannot subscribe to the runtime's container events")]
    Subscribe(#[source] Status),
    #[error("the runtime's container event stream failed")]
    Stream(#[source] Status),
    #[error("the runtime's container event stream ended")]
    StreamEnded,
    #[error("cannot list the runtime's containers")]
    ListContainers(#[source] Status),
    #[error("cannot read the status of container {id}")]
    ContainerStatus {
        id: String,
        #[source]
        source: Status,
    },
    #[error("cannot read the status of pod sandbox {id}")]
    SandboxStatus {
        id: String,
        #[source]
        source: Status,
    },
}

/// How the watcher behaves.
#[derive(Clone, Debug)]
pub struct WatchConfig {
    pub socket: PathBuf,
    /// Relist this often while events flow.
    pub relist_period: Duration,
    /// Relist this often when the runtime sends no events.
    pub poll_period: Duration,
    /// Wait this long before reading an exit 137 without OOMKilled again.
    pub oom_settle_delay: Duration,
    /// Where the node's `/` is in this process's view: the runtime's paths (log files, mounts) are the
    /// node's, read under this.
    pub host_root: PathBuf,
}

impl WatchConfig {
    /// Polling every 5 s when there are no events: kubelet's generic PLEG relists every second, but a
    /// report a few seconds late costs nothing while a relist per second costs the runtime.
    pub const DEFAULT_POLL_PERIOD: Duration = Duration::from_secs(5);
}

/// A stream that ends sooner than this after subscribing, with no event, is a runtime that does not send
/// events (CRI-O returns at once).
const IMMEDIATE_END: Duration = Duration::from_secs(1);
const BACKOFF_START: Duration = Duration::from_millis(200);
const BACKOFF_MAX: Duration = Duration::from_secs(5);

/// What the draining task passes on.
enum Drained {
    Event(Box<cri::ContainerEventResponse>),
    Ended { events: u64, after: Duration },
    Failed(Status),
}

/// Watches the runtime until `shutdown` fires or `out` is closed, reconnecting whenever the connection
/// fails. `ready` is set while the socket answers. `reported`: the ends a previous run captured, not
/// reported again (pruned here to what the runtime still lists).
pub async fn watch(
    config: WatchConfig,
    metrics: Arc<AgentMetrics>,
    ready: Option<Check>,
    reported: Option<SharedReported>,
    out: mpsc::UnboundedSender<Observation>,
    shutdown: Shutdown,
) {
    let tracker = reported
        .as_ref()
        .map(|r| Tracker::remembering(r.snapshot()))
        .unwrap_or_default();
    let mut state = State {
        config,
        metrics,
        out,
        reported,
        tracker,
        not_spark: HashSet::new(),
        sandboxes: HashMap::new(),
        settles: BTreeSet::new(),
    };
    let mut backoff = BACKOFF_START;
    let mut failures = 0u32;
    loop {
        let connected = tokio::select! {
            connected = connect_runtime_service(&state.config.socket) => connected.map_err(Error::Connect),
            () = shutdown.fired() => return,
        };
        let result = match connected {
            Ok(client) => {
                state.metrics.cri_connected.set(1);
                if let Some(ready) = &ready {
                    ready.set(true);
                }
                if failures > 0 {
                    tracing::info!(socket = %state.config.socket.display(), "connected to the container runtime again");
                }
                failures = 0;
                backoff = BACKOFF_START;
                state.connection(client, &shutdown).await
            }
            Err(error) => Err(error),
        };
        state.metrics.cri_connected.set(0);
        state.metrics.cri_polling.set(0);
        // The queue went with the connection; the next one starts with a relist.
        state.metrics.cri_event_queue.set(0);
        if let Some(ready) = &ready {
            ready.set(false);
        }
        match result {
            Ok(Stop::Shutdown) => return,
            Ok(Stop::OutputClosed) => {
                tracing::debug!("nobody takes container observations any more; the CRI watcher stops");
                return;
            }
            Err(error) => {
                failures += 1;
                state.metrics.cri_reconnects.inc();
                tracing::warn!(
                    socket = %state.config.socket.display(),
                    error = %ErrorChain(&error),
                    attempt = failures,
                    retry_in = ?backoff,
                    "the container runtime is unavailable; reconnecting"
                );
            }
        }
        tokio::select! {
            () = tokio::time::sleep(backoff) => {}
            () = shutdown.fired() => return,
        }
        backoff = (backoff * 2).min(BACKOFF_MAX);
    }
}

enum Stop {
    Shutdown,
    OutputClosed,
}

struct State {
    config: WatchConfig,
    metrics: Arc<AgentMetrics>,
    out: mpsc::UnboundedSender<Observation>,
    reported: Option<SharedReported>,
    tracker: Tracker,
    /// Container ids known not to be Spark's.
    not_spark: HashSet<String>,
    /// Sandbox labels by sandbox id (from events and `PodSandboxStatus`).
    sandboxes: HashMap<String, HashMap<String, String>>,
    /// OOM re-reads due: (when, container id).
    settles: BTreeSet<(Instant, String)>,
}

type Client = RuntimeServiceClient<Channel>;

impl State {
    /// One connection: subscribe, relist, then events, relists and re-reads until something fails.
    async fn connection(&mut self, mut client: Client, shutdown: &Shutdown) -> Result<Stop, Error> {
        let (tx, mut events) = mpsc::unbounded_channel();
        let mut polling = false;
        let _drain = match client.get_container_events(cri::GetEventsRequest {}).await {
            Ok(response) => Some(AbortOnDrop(tokio::spawn(drain(
                response.into_inner(),
                tx,
                self.metrics.clone(),
            )))),
            Err(status) if status.code() == Code::Unimplemented => {
                self.start_polling("the runtime does not implement GetContainerEvents");
                polling = true;
                None
            }
            Err(status) => return Err(Error::Subscribe(status)),
        };
        if !self.relist(&mut client).await? {
            return Ok(Stop::OutputClosed);
        }
        let mut next_relist = Instant::now() + self.period(polling);
        let out = self.out.clone();
        loop {
            let next_settle = self.settles.first().map(|(at, _)| *at);
            tokio::select! {
                drained = events.recv(), if !polling => match drained {
                    Some(Drained::Event(event)) => {
                        self.metrics.cri_event_queue.add(-1);
                        self.metrics.cri_events.inc();
                        if self.event(*event) {
                            // A snapshot without its sandbox: a relist resolves whose it is.
                            next_relist = Instant::now();
                        }
                    }
                    Some(Drained::Ended { events: 0, after }) if after < IMMEDIATE_END => {
                        self.start_polling("the runtime's event stream ended at once without an event (CRI-O without enable_pod_events?)");
                        polling = true;
                        next_relist = Instant::now() + self.period(polling);
                    }
                    Some(Drained::Ended { .. }) | None => return Err(Error::StreamEnded),
                    Some(Drained::Failed(status)) => return Err(Error::Stream(status)),
                },
                () = tokio::time::sleep_until(next_relist) => {
                    if !self.relist(&mut client).await? {
                        return Ok(Stop::OutputClosed);
                    }
                    next_relist = Instant::now() + self.period(polling);
                }
                () = sleep_until_opt(next_settle) => {
                    self.settle_due(&mut client).await;
                }
                () = shutdown.fired() => return Ok(Stop::Shutdown),
                () = out.closed() => return Ok(Stop::OutputClosed),
            }
            if self.out.is_closed() {
                return Ok(Stop::OutputClosed);
            }
        }
    }

    fn period(&self, polling: bool) -> Duration {
        if polling {
            self.config.poll_period
        } else {
            self.config.relist_period
        }
    }

    fn start_polling(&self, why: &str) {
        self.metrics.cri_polling.set(1);
        tracing::warn!(
            socket = %self.config.socket.display(),
            poll_period = ?self.config.poll_period,
            why,
            "no container events from the runtime; polling it instead"
        );
    }

    /// Merges one event's snapshots. Returns true when the event came without its sandbox (a relist is
    /// due to resolve it).
    fn event(&mut self, event: cri::ContainerEventResponse) -> bool {
        let Some(sandbox) = event.pod_sandbox_status else {
            // A snapshot without its sandbox: a relist resolves whose it is. Not for a deleted container
            // (container GC removes sandboxes by the hundred): it is gone, and a relist cannot tell more.
            return event.container_event_type != cri::ContainerEventType::ContainerDeletedEvent as i32;
        };
        // Sandbox events (containerd sends them with the sandbox's id) say nothing about containers.
        if event.container_id == sandbox.id {
            if event.container_event_type == cri::ContainerEventType::ContainerDeletedEvent as i32 {
                self.sandboxes.remove(&sandbox.id);
            }
            return false;
        }
        self.sandboxes.insert(sandbox.id.clone(), sandbox.labels.clone());
        for status in event.containers_statuses {
            self.snapshot(&sandbox.labels, status, Origin::Event);
        }
        false
    }

    /// Merges one snapshot of a container of a sandbox with these labels.
    fn snapshot(&mut self, sandbox_labels: &HashMap<String, String>, status: cri::ContainerStatus, origin: Origin) {
        if self.tracker.is_ended(&status.id) || self.not_spark.contains(&status.id) {
            return;
        }
        let metadata = status.metadata.clone().unwrap_or_default();
        let Some(container) = spark_container(CriLabels {
            sandbox: sandbox_labels,
            container: &status.labels,
            container_id: &status.id,
            metadata_name: Some(metadata.name.as_str()),
            attempt: metadata.attempt,
        }) else {
            self.not_spark.insert(status.id.clone());
            return;
        };
        let status = on_host(&self.config.host_root, status);
        let actions = self.tracker.observe(container, status, origin);
        self.act(actions);
    }

    fn act(&mut self, actions: Vec<Action>) {
        for action in actions {
            match action {
                Action::Start(container, status) => {
                    self.metrics.containers_started.inc();
                    tracing::debug!(%container, container_id = %container.container_id, "Spark container started");
                    let _ = self.out.send(Observation::Started(log_source(container, &status)));
                }
                Action::Settle(id) => {
                    self.metrics.cri_oom_settles.inc();
                    tracing::debug!(container_id = %id, delay = ?self.config.oom_settle_delay, "exit 137 without OOMKilled; reading it again after the settle delay");
                    self.settles.insert((Instant::now() + self.config.oom_settle_delay, id));
                }
                Action::End(end, found_by) => {
                    if found_by == Origin::Relist {
                        self.metrics.cri_repairs.inc();
                    }
                    tracing::info!(
                        container = %end.container,
                        container_id = %end.container.container_id,
                        exit_code = end.status.exit_code,
                        reason = %end.status.reason,
                        found_by = ?found_by,
                        "Spark container ended"
                    );
                    let _ = self.out.send(Observation::Ended(end));
                }
            }
        }
    }

    /// Reads again the containers whose settle delay passed, and ends them.
    async fn settle_due(&mut self, client: &mut Client) {
        let now = Instant::now();
        while let Some((at, id)) = self.settles.first().cloned() {
            if at > now {
                break;
            }
            self.settles.pop_first();
            let reread = match client
                .container_status(cri::ContainerStatusRequest {
                    container_id: id.clone(),
                    verbose: false,
                })
                .await
            {
                Ok(response) => response.into_inner().status,
                Err(source) => {
                    // Gone or unreachable: the end stands as first seen.
                    let error = Error::ContainerStatus { id: id.clone(), source };
                    tracing::debug!(error = %ErrorChain(&error), "the settle re-read failed; reporting the exit as first seen");
                    None
                }
            };
            let actions = self.tracker.settled(&id, reread);
            self.act(actions);
        }
    }

    /// Lists every container and merges the status of each Spark container that may have changed.
    /// Returns false when nobody takes observations any more.
    async fn relist(&mut self, client: &mut Client) -> Result<bool, Error> {
        self.metrics.cri_relists.inc();
        let containers = client
            .list_containers(cri::ListContainersRequest { filter: None })
            .await
            .map_err(Error::ListContainers)?
            .into_inner()
            .containers;
        let listed: HashSet<String> = containers.iter().map(|c| c.id.clone()).collect();
        let sandboxes_in_use: HashSet<String> = containers.iter().map(|c| c.pod_sandbox_id.clone()).collect();
        for container in containers {
            if self.tracker.is_ended(&container.id) || self.not_spark.contains(&container.id) {
                continue;
            }
            // Nothing new since the last snapshot: skip the status call (except EXITED, whose finish
            // time and reason matter).
            let listed_state = container.state();
            if self.tracker.known_state(&container.id) == Some(listed_state)
                && listed_state != cri::ContainerState::ContainerExited
            {
                continue;
            }
            let Some(labels) = self.sandbox_labels(&container.pod_sandbox_id, client).await else {
                continue;
            };
            let status = match client
                .container_status(cri::ContainerStatusRequest {
                    container_id: container.id.clone(),
                    verbose: false,
                })
                .await
            {
                Ok(response) => response.into_inner().status,
                // Removed since the list: its DELETED event, or the next relist, says so.
                Err(status) if status.code() == Code::NotFound => None,
                Err(source) => {
                    return Err(Error::ContainerStatus {
                        id: container.id,
                        source,
                    });
                }
            };
            if let Some(status) = status {
                self.snapshot(&labels, status, Origin::Relist);
            }
        }
        for lost in self.tracker.relisted(&listed) {
            tracing::warn!(
                container = %lost,
                container_id = %lost.container_id,
                "a Spark container was removed from the runtime before its exit was seen; the operator's pod watch must record its end"
            );
        }
        if let Some(reported) = &self.reported
            && let Err(error) = reported.retain_listed(listed.clone()).await
        {
            tracing::warn!(error = %ErrorChain(&error), "cannot prune the index of reported containers");
        }
        self.not_spark.retain(|id| listed.contains(id));
        self.sandboxes.retain(|id, _| sandboxes_in_use.contains(id));
        let (live, ended) = self.tracker.sizes();
        tracing::debug!(
            containers = listed.len(),
            live,
            ended,
            "relisted the runtime's containers"
        );
        Ok(!self.out.is_closed())
    }

    /// A sandbox's labels, from the cache or `PodSandboxStatus`; None when the sandbox is gone or cannot
    /// be read now (the container is looked at again on the next relist).
    async fn sandbox_labels(&mut self, id: &str, client: &mut Client) -> Option<HashMap<String, String>> {
        if let Some(labels) = self.sandboxes.get(id) {
            return Some(labels.clone());
        }
        match client
            .pod_sandbox_status(cri::PodSandboxStatusRequest {
                pod_sandbox_id: id.to_owned(),
                verbose: false,
            })
            .await
        {
            Ok(response) => {
                let labels = response.into_inner().status.map(|s| s.labels).unwrap_or_default();
                self.sandboxes.insert(id.to_owned(), labels.clone());
                Some(labels)
            }
            Err(source) => {
                let error = Error::SandboxStatus {
                    id: id.to_owned(),
                    source,
                };
                tracing::debug!(error = %ErrorChain(&error), "skipping the containers of this sandbox until the next relist");
                None
            }
        }
    }
}

/// Reads the event stream into the agent's queue as fast as it comes: never leave the runtime waiting.
async fn drain(
    mut stream: spark_operator_proto::tonic::Streaming<cri::ContainerEventResponse>,
    tx: mpsc::UnboundedSender<Drained>,
    metrics: Arc<AgentMetrics>,
) {
    let opened = Instant::now();
    let mut events = 0u64;
    loop {
        let item = match stream.message().await {
            Ok(Some(event)) => {
                events += 1;
                metrics.cri_event_queue.add(1);
                Drained::Event(Box::new(event))
            }
            Ok(None) => Drained::Ended {
                events,
                after: opened.elapsed(),
            },
            Err(status) => Drained::Failed(status),
        };
        let last = !matches!(item, Drained::Event(_));
        if tx.send(item).is_err() || last {
            return;
        }
    }
}

/// `status` with the node's paths it holds (log file, mounts' host side) as this process sees them.
fn on_host(host_root: &Path, mut status: cri::ContainerStatus) -> cri::ContainerStatus {
    if host_root == Path::new("/") {
        return status;
    }
    let under = |path: &str| {
        if path.is_empty() {
            String::new()
        } else {
            host_root.join(path.trim_start_matches('/')).display().to_string()
        }
    };
    status.log_path = under(&status.log_path);
    for mount in &mut status.mounts {
        mount.host_path = under(&mount.host_path);
    }
    status
}

async fn sleep_until_opt(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
