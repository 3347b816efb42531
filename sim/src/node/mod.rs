//! Simulated nodes: what makes pods run in the sim.
//!
//! - Nodes register with capacity, labels and taints and keep their lease fresh
//!   (`registration.rs`); a node can be stopped and started again (`failures.rs`, with the node
//!   lifecycle controller that marks it NotReady and evicts its pods).
//! - The scheduler binds pods (`scheduler.rs`, filters in `placement.rs`); a Volcano stand-in
//!   admits PodGroups as gangs and binds their pods (`scheduler/gang.rs`, `volcano.rs`).
//! - Each node's kubelet (`kubelet.rs`) runs its pods through pod workers (`pod_worker.rs`,
//!   `containers.rs`, `pod_status.rs`) on a scripted container runtime (`runtime.rs`): what a
//!   container does comes from pod annotations and per-image defaults (`script.rs`,
//!   `process.rs`); Spark driver pods run a fake Spark driver (`spark_driver.rs`) that creates
//!   executors as Spark does (`spark_executor.rs`).
//! - Logs are CRI-format files under `<data-dir>/nodes/<node>/var/log/pods` (`logs.rs`), the
//!   runtime is served over CRI on `<data-dir>/nodes/<node>/run/containerd/containerd.sock` (`cri.rs`),
//!   with the misbehaviour a test scripts (`cri_faults.rs`).
//! - Pods whose image is a local image (`local_images.rs`) run a real process in its own mount,
//!   UTS and PID namespaces (`sandbox.rs`), with probes (`probes.rs`).
//! - Finished pods can be garbage-collected at once (`pod_gc.rs`).
//!
//! Everything follows one change feed of the store (`hub.rs`); nothing polls per pod.

mod allocation;
pub mod cgroups;
mod config;
mod containers;
pub mod cri;
mod cri_faults;
mod events;
mod expand;
mod failures;
mod hub;
mod kubelet;
mod kubelet_server;
pub mod local_images;
pub mod logs;
pub(crate) mod placement;
mod pod_gc;
mod pod_status;
mod pod_view;
mod pod_worker;
mod probes;
mod process;
pub mod quantity;
pub mod real_spark;
mod refs;
mod registration;
pub mod runtime;
pub mod sandbox;
mod scheduler;
pub mod script;
pub mod spark_conf;
mod spark_driver;
pub mod spark_executor;
mod spark_image;
mod spark_main;
pub mod volcano;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};

use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

pub use allocation::AllocationStats;
pub use config::{
    KubeletConfig, LifecycleConfig, NodeSpec, NodesConfig, PodGc, PodGcParseError, Taint, Volcano, VolcanoParseError,
};
pub use cri_faults::CriFaults;
pub use local_images::{LocalImage, LocalImageParseError};

use crate::status::ApiError;
use crate::store::Store;

/// Why a node could not be started or acted on.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    #[error("creating the node directory {path}")]
    CreateDir { path: String, source: std::io::Error },
    #[error("serving the node's CRI socket")]
    Socket(#[source] spark_operator_proto::unix::UnixSocketError),
    #[error("registering node {node}")]
    Register { node: String, source: Box<ApiError> },
    #[error("node {0:?} already exists in this sim")]
    DuplicateNode(String),
    #[error("there is no node {0:?} in this sim (nodes: {1})")]
    UnknownNode(String, String),
    #[error("pod {0} does not exist")]
    PodNotFound(String),
    #[error("pod {0} is not running on any node of this sim")]
    PodNotRunning(String),
    #[error("marking pod {pod} as evicted")]
    Evict { pod: String, source: Box<ApiError> },
    #[error("no address left for node {node}: node {index} does not fit in {range}")]
    NoAddress { node: String, index: u16, range: String },
    #[error("starting the kubelet server of node {node}")]
    KubeletServer {
        node: String,
        source: kubelet_server::KubeletServerError,
    },
}

/// What nodes need from the sim's network: their addresses and pod ranges, and the CA that
/// signs their kubelets' serving certificates.
#[derive(Debug, Clone)]
pub struct NodeNetwork {
    pub addresses: crate::network::Addresses,
    pub pki: crate::tls::Pki,
    /// [`crate::network::Network::stopped`]: the kubelet servers close with the network.
    pub stopped: watch::Receiver<bool>,
}

/// What every node component shares.
pub(crate) struct Shared {
    pub store: Store,
    pub data_dir: PathBuf,
    pub config: NodesConfig,
    pub network: NodeNetwork,
    pub hub: Arc<hub::Hub>,
    /// What each running Spark driver's executor allocator has done.
    pub allocations: allocation::AllocationLog,
    /// Mints the ServiceAccount tokens of projected volumes (the kubelet's TokenRequest).
    pub service_account_tokens: Arc<crate::service_account_tokens::TokenSigner>,
    kubelets: RwLock<BTreeMap<String, Arc<kubelet::Kubelet>>>,
    pub stop: watch::Sender<bool>,
    tasks: Mutex<Vec<JoinHandle<()>>>,
    next_index: Mutex<u16>,
}

impl Shared {
    fn kubelet(&self, node: &str) -> Option<Arc<kubelet::Kubelet>> {
        self.kubelets
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(node)
            .cloned()
    }

    /// Delivers the Spark driver's "shut down" to an executor pod's process; false when no
    /// kubelet runs that pod.
    pub fn signal_executor(&self, node: &str, uid: &str) -> bool {
        self.kubelet(node)
            .is_some_and(|k| k.send(uid, pod_worker::WorkerMsg::DriverShutdown))
    }
}

/// The nodes of a sim and the controllers that run pods on them.
#[derive(Clone)]
pub struct NodeCluster {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for NodeCluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeCluster")
            .field("nodes", &self.node_names())
            .finish_non_exhaustive()
    }
}

/// One node: where its files and CRI socket are, and its kubelet's switch.
#[derive(Clone)]
pub struct NodeHandle {
    name: String,
    root: PathBuf,
    kubelet: Arc<kubelet::Kubelet>,
}

impl std::fmt::Debug for NodeHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeHandle")
            .field("name", &self.name)
            .field("root", &self.root)
            .finish()
    }
}

impl NodeHandle {
    pub fn name(&self) -> &str {
        &self.name
    }

    /// `<data-dir>/nodes/<node>`: the node's "root filesystem".
    pub fn root_dir(&self) -> &Path {
        &self.root
    }

    /// The node's CRI `RuntimeService` socket, where containerd has it.
    pub fn cri_socket(&self) -> PathBuf {
        kubelet::cri_socket_path(&self.root)
    }

    /// Scripted misbehaviour of this node's container runtime, as CRI clients see it (dropped or
    /// reordered events, a late OOM reason, a runtime restart, no events); see [`CriFaults`].
    pub fn cri_faults(&self) -> CriFaults {
        CriFaults::new(self.kubelet.runtime.clone())
    }

    /// The node's `/var/log/pods`.
    pub fn log_dir(&self) -> PathBuf {
        self.root.join("var/log/pods")
    }

    /// Whether the kubelet is running (not stopped by `NodeCluster::stop_node`).
    pub fn is_running(&self) -> bool {
        self.kubelet.is_online()
    }
}

impl NodeCluster {
    /// Starts the controllers and registers `config.nodes`.
    pub async fn start(
        store: Store,
        data_dir: PathBuf,
        config: NodesConfig,
        service_account_tokens: Arc<crate::service_account_tokens::TokenSigner>,
        network: NodeNetwork,
    ) -> Result<NodeCluster, NodeError> {
        let (sched_tx, sched_rx) = mpsc::unbounded_channel();
        let (gc_tx, gc_rx) = mpsc::unbounded_channel();
        let gc_after = match config.pod_gc {
            PodGc::Off => None,
            PodGc::Instant => Some(std::time::Duration::ZERO),
            PodGc::After(d) => Some(d),
        };
        let hub = Arc::new(hub::Hub::new(sched_tx, gc_after.map(|_| gc_tx)));
        let (stop, _) = watch::channel(false);
        let shared = Arc::new(Shared {
            store: store.clone(),
            data_dir,
            config: config.clone(),
            network,
            hub: hub.clone(),
            allocations: allocation::AllocationLog::default(),
            service_account_tokens,
            kubelets: RwLock::new(BTreeMap::new()),
            stop,
            tasks: Mutex::new(Vec::new()),
            next_index: Mutex::new(1),
        });
        let cluster = NodeCluster { shared: shared.clone() };
        let recorder = events::Recorder::new(store.clone(), "default-scheduler", None, config.normal_events);
        let volcano_recorder = events::Recorder::new(store.clone(), "volcano", None, config.normal_events);
        let mut tasks = vec![tokio::spawn(scheduler::run(
            store.clone(),
            recorder,
            config.volcano,
            volcano_recorder,
            sched_rx,
            shared.stop.subscribe(),
        ))];
        if let Some(after) = gc_after {
            tasks.push(tokio::spawn(pod_gc::run(
                store.clone(),
                after,
                gc_rx,
                shared.stop.subscribe(),
            )));
        }
        tasks.push(tokio::spawn(failures::run(
            Arc::downgrade(&shared),
            shared.stop.subscribe(),
        )));
        shared.tasks.lock().unwrap_or_else(|e| e.into_inner()).extend(tasks);
        for spec in &config.nodes {
            cluster.add_node(spec.clone()).await?;
        }
        let feed = tokio::spawn(hub.run(store, shared.stop.subscribe()));
        shared.tasks.lock().unwrap_or_else(|e| e.into_inner()).push(feed);
        Ok(cluster)
    }

    /// Registers another node and starts its kubelet.
    pub async fn add_node(&self, spec: NodeSpec) -> Result<NodeHandle, NodeError> {
        if self.shared.kubelet(&spec.name).is_some() {
            return Err(NodeError::DuplicateNode(spec.name));
        }
        let index = {
            let mut next = self.shared.next_index.lock().unwrap_or_else(|e| e.into_inner());
            let i = *next;
            *next = next.wrapping_add(1);
            i
        };
        let (kubelet, tasks) = kubelet::Kubelet::start(&self.shared, &spec, index).await?;
        self.shared
            .tasks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend(tasks);
        self.shared
            .kubelets
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(spec.name.clone(), kubelet.clone());
        Ok(NodeHandle {
            name: spec.name,
            root: kubelet.root.clone(),
            kubelet,
        })
    }

    /// What the executor allocator of the running Spark driver with this application id
    /// (`spark-app-selector`) has done: rounds and pods per round.
    pub fn executor_allocation(&self, app_id: &str) -> Option<AllocationStats> {
        self.shared.allocations.get(app_id)
    }

    pub fn node_names(&self) -> Vec<String> {
        self.shared
            .kubelets
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .keys()
            .cloned()
            .collect()
    }

    pub fn node(&self, name: &str) -> Option<NodeHandle> {
        self.shared.kubelet(name).map(|k| NodeHandle {
            name: k.name.clone(),
            root: k.root.clone(),
            kubelet: k,
        })
    }

    pub fn nodes(&self) -> Vec<NodeHandle> {
        self.node_names().iter().filter_map(|n| self.node(n)).collect()
    }

    fn require(&self, name: &str) -> Result<NodeHandle, NodeError> {
        self.node(name)
            .ok_or_else(|| NodeError::UnknownNode(name.to_string(), self.node_names().join(", ")))
    }

    /// Stops a node's kubelet (a crashed kubelet or a network partition): no more heartbeats or
    /// status updates, and it does not see the API. Its containers keep running. The node
    /// lifecycle controller marks it NotReady after `lifecycle.grace_period`.
    pub fn stop_node(&self, name: &str) -> Result<(), NodeError> {
        self.require(name)?.kubelet.set_online(false);
        Ok(())
    }

    /// Starts a stopped kubelet again: it posts Ready, renews its lease and catches up.
    pub fn start_node(&self, name: &str) -> Result<(), NodeError> {
        self.require(name)?.kubelet.set_online(true);
        Ok(())
    }

    /// Node-pressure eviction by the pod's kubelet: its containers are stopped and the pod ends
    /// Failed with reason Evicted and `message` (the pod object stays).
    pub async fn evict_pod(&self, namespace: &str, name: &str, message: Option<&str>) -> Result<(), NodeError> {
        let full = format!("{namespace}/{name}");
        let pod = self
            .shared
            .store
            .get_stored(&hub::pods_key(), namespace, name)
            .ok_or_else(|| NodeError::PodNotFound(full.clone()))?;
        let node = hub::node_name(&pod).to_string();
        let kubelet = self
            .shared
            .kubelet(&node)
            .ok_or_else(|| NodeError::PodNotRunning(full.clone()))?;
        let message = message
            .unwrap_or("The node was low on resource: memory. Threshold quantity: 100Mi, available: 0Ki. ")
            .to_string();
        let uid = crate::meta::uid(&pod).to_string();
        let cond = pod_worker::Worker::eviction_condition(&message);
        pod_status::set_condition(&self.shared.store, namespace, name, &uid, cond, "kubelet")
            .await
            .map_err(|source| NodeError::Evict {
                pod: full.clone(),
                source: Box::new(source),
            })?;
        if !kubelet.send(&uid, pod_worker::WorkerMsg::Evict { message }) {
            return Err(NodeError::PodNotRunning(full));
        }
        Ok(())
    }

    /// Stops every node task and closes the CRI sockets.
    pub async fn shutdown(&self) {
        self.shared.stop.send_replace(true);
        let tasks: Vec<JoinHandle<()>> =
            std::mem::take(&mut *self.shared.tasks.lock().unwrap_or_else(|e| e.into_inner()));
        // One deadline for all of them: a slow task must not add its wait to every other's.
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(2);
        for t in tasks {
            let abort = t.abort_handle();
            if tokio::time::timeout_at(deadline, t).await.is_err() {
                abort.abort();
            }
        }
    }
}
