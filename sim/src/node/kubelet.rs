//! One node's kubelet: registers the node, renews its lease, serves its CRI socket, starts a
//! pod worker for each pod bound to it, and removes the containers and logs of deleted pods
//! after the container GC delay. A stopped kubelet (node failure) neither heartbeats nor sees
//! the API; its containers keep running and it catches up when it comes back.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, Weak};

use serde_json::Value;
use spark_operator_proto::cri::v1::runtime_service_server::RuntimeServiceServer;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::cri::CriService;
use super::events::Recorder;
use super::hub::{PodEvent, node_name};
use super::pod_worker::{Worker, WorkerCtx, WorkerMsg};
use super::runtime::Runtime;
use super::{NodeError, Shared, registration};
use crate::error_chain::ErrorChain;
use crate::meta;
use crate::store::ListOptions;

pub(crate) struct Kubelet {
    pub name: String,
    pub root: PathBuf,
    pub runtime: Arc<Runtime>,
    ctx: Arc<WorkerCtx>,
    workers: Mutex<HashMap<String, mpsc::UnboundedSender<WorkerMsg>>>,
    online: watch::Sender<bool>,
}

impl std::fmt::Debug for Kubelet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Kubelet")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// A deleted pod whose containers and logs go at `.0`.
type GcEntry = Reverse<(Instant, String, String, String, String)>;

impl Kubelet {
    /// Registers and starts the node's kubelet; returns its tasks.
    pub async fn start(
        shared: &Arc<Shared>,
        spec: &super::NodeSpec,
        index: u16,
    ) -> Result<(Arc<Kubelet>, Vec<JoinHandle<()>>), NodeError> {
        let root = super::logs::node_root(&shared.data_dir, &spec.name);
        // The directories of a real node, so default hostPaths find what they expect.
        for dir in ["var/log/pods", "var/lib/kubelet", "run/containerd"] {
            std::fs::create_dir_all(root.join(dir)).map_err(|source| NodeError::CreateDir {
                path: root.join(dir).display().to_string(),
                source,
            })?;
        }
        let addresses = &shared.network.addresses;
        let (Some(node_ip), Some(pod_cidr)) = (addresses.node_ip(index), addresses.node_pod_cidr(index)) else {
            return Err(NodeError::NoAddress {
                node: spec.name.clone(),
                index,
                range: format!("{} (nodes) and {} (pods)", addresses.node_range, addresses.pod_range),
            });
        };
        let runtime = Arc::new(Runtime::new(pod_cidr));
        registration::register(&shared.store, spec, &node_ip.to_string(), &runtime.pod_cidr())
            .await
            .map_err(|source| NodeError::Register {
                node: spec.name.clone(),
                source: Box::new(source),
            })?;
        let (online, online_rx) = watch::channel(true);
        let ctx = Arc::new(WorkerCtx {
            shared: Arc::downgrade(shared),
            store: shared.store.clone(),
            node: spec.name.clone(),
            node_root: root.clone(),
            data_dir: shared.data_dir.clone(),
            host_ip: node_ip.to_string(),
            runtime: runtime.clone(),
            recorder: Recorder::new(
                shared.store.clone(),
                "kubelet",
                Some(&spec.name),
                shared.config.normal_events,
            ),
            config: shared.config.kubelet.clone(),
            online: online_rx,
            config_changes: shared.hub.config_changes(),
        });
        let kubelet = Arc::new(Kubelet {
            name: spec.name.clone(),
            root: root.clone(),
            runtime: runtime.clone(),
            ctx,
            workers: Mutex::new(HashMap::new()),
            online,
        });
        let mut tasks = Vec::new();

        let socket = cri_socket_path(&root);
        let listener = spark_operator_proto::unix::bind_unix_listener(&socket).map_err(NodeError::Socket)?;
        let service = RuntimeServiceServer::new(CriService::new(runtime, spec.name.clone(), shared.stop.subscribe()));
        let mut stop = shared.stop.subscribe();
        tasks.push(tokio::spawn(async move {
            let shutdown = async move {
                let _ = stop.wait_for(|s| *s).await;
            };
            if let Err(e) = spark_operator_proto::unix::serve_runtime_service(service, listener, shutdown).await {
                tracing::warn!(error = %ErrorChain(&e), "CRI server ended");
            }
        }));

        tasks.push(
            super::kubelet_server::spawn(
                shared,
                &spec.name,
                node_ip,
                kubelet.online.subscribe(),
                shared.stop.subscribe(),
            )
            .await
            .map_err(|source| NodeError::KubeletServer {
                node: spec.name.clone(),
                source,
            })?,
        );

        let (tx, rx) = mpsc::unbounded_channel();
        shared.hub.add_kubelet(&spec.name, tx.clone());
        // Pods bound before this kubelet existed (a node added at runtime).
        let bound = shared.store.list(
            &crate::registry::Gvr::new("", "v1", "pods"),
            None,
            &ListOptions {
                field_selector: Some(format!("spec.nodeName={}", spec.name)),
                ..Default::default()
            },
        );
        if let Ok(list) = bound {
            for item in list["items"].as_array().into_iter().flatten() {
                if let Some(stored) =
                    shared
                        .store
                        .get_stored(&super::hub::pods_key(), meta::namespace(item), meta::name(item))
                {
                    let _ = tx.send(PodEvent::Upsert(stored));
                }
            }
        }
        tasks.push(tokio::spawn(kubelet.clone().run(rx, shared.stop.subscribe())));
        tasks.push(tokio::spawn(heartbeat(
            Arc::downgrade(&kubelet),
            shared.store.clone(),
            shared.config.kubelet.heartbeat_interval,
            shared.stop.subscribe(),
        )));
        Ok((kubelet, tasks))
    }

    pub fn is_online(&self) -> bool {
        *self.online.borrow()
    }

    pub fn set_online(&self, online: bool) {
        self.online.send_replace(online);
    }

    /// Hands a message to the worker of a pod; false when the kubelet runs no such pod.
    pub fn send(&self, uid: &str, msg: WorkerMsg) -> bool {
        self.workers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(uid)
            .is_some_and(|tx| tx.send(msg).is_ok())
    }

    async fn run(self: Arc<Self>, mut rx: mpsc::UnboundedReceiver<PodEvent>, mut stop: watch::Receiver<bool>) {
        let (done_tx, mut done_rx) = mpsc::unbounded_channel::<String>();
        let mut finished: HashSet<String> = HashSet::new();
        let mut gc_when_done: HashMap<String, (String, String)> = HashMap::new();
        let mut gc: BinaryHeap<GcEntry> = BinaryHeap::new();
        let mut online = self.online.subscribe();
        loop {
            if !*online.borrow_and_update() {
                // A stopped kubelet does nothing until it is started again.
                tokio::select! {
                    _ = online.changed() => continue,
                    _ = stop.changed() => return,
                }
            }
            let next_gc = gc.peek().map(|Reverse((t, ..))| *t);
            tokio::select! {
                ev = rx.recv() => {
                    let Some(ev) = ev else { return };
                    self.handle(ev, &done_tx, &mut finished, &mut gc_when_done, &mut gc);
                }
                Some(uid) = done_rx.recv() => {
                    self.workers.lock().unwrap_or_else(|e| e.into_inner()).remove(&uid);
                    finished.insert(uid.clone());
                    if let Some((ns, name)) = gc_when_done.remove(&uid) {
                        self.schedule_gc(&mut gc, uid, ns, name);
                    }
                }
                _ = sleep_until(next_gc) => {
                    let now = Instant::now();
                    while let Some(Reverse((t, uid, ns, name, _))) = gc.peek().cloned() {
                        if t > now {
                            break;
                        }
                        gc.pop();
                        self.runtime.remove_pod(&uid);
                        // What the pod view wrote for it (volumes, hosts files, tokens).
                        super::pod_view::remove(&self.root, &uid);
                        let dir = super::logs::pod_log_dir(&self.root, &ns, &name, &uid);
                        if let Err(e) = std::fs::remove_dir_all(&dir)
                            && e.kind() != std::io::ErrorKind::NotFound
                        {
                            tracing::warn!(dir = %dir.display(), error = %e, "removing a deleted pod's logs");
                        }
                    }
                }
                _ = online.changed() => {}
                _ = stop.changed() => return,
            }
        }
    }

    fn schedule_gc(&self, gc: &mut BinaryHeap<GcEntry>, uid: String, ns: String, name: String) {
        let at = Instant::now() + self.ctx.config.container_gc_delay;
        gc.push(Reverse((at, uid, ns, name, String::new())));
    }

    fn handle(
        &self,
        ev: PodEvent,
        done_tx: &mpsc::UnboundedSender<String>,
        finished: &mut HashSet<String>,
        gc_when_done: &mut HashMap<String, (String, String)>,
        gc: &mut BinaryHeap<GcEntry>,
    ) {
        let pod = ev.object().clone();
        let uid = meta::uid(&pod).to_string();
        let mut workers = self.workers.lock().unwrap_or_else(|e| e.into_inner());
        match ev {
            PodEvent::Deleted(_) => {
                let (ns, name) = (meta::namespace(&pod).to_string(), meta::name(&pod).to_string());
                finished.remove(&uid);
                match workers.get(&uid) {
                    Some(tx) if tx.send(WorkerMsg::Gone).is_ok() => {
                        gc_when_done.insert(uid, (ns, name));
                    }
                    _ => {
                        workers.remove(&uid);
                        drop(workers);
                        self.schedule_gc(gc, uid, ns, name);
                    }
                }
            }
            PodEvent::Upsert(_) => {
                if let Some(tx) = workers.get(&uid) {
                    if tx.send(WorkerMsg::Update(pod)).is_err() {
                        workers.remove(&uid);
                        finished.insert(uid);
                    }
                    return;
                }
                if finished.contains(&uid) {
                    // A pod this kubelet already finished that is now being deleted: the
                    // status manager removes it (grace 0) once its final status is written.
                    let terminal = matches!(
                        pod.pointer("/status/phase").and_then(Value::as_str),
                        Some("Succeeded" | "Failed")
                    );
                    if terminal && meta::is_deleting(&pod) && meta::finalizers(&pod).is_empty() {
                        let store = self.ctx.store.clone();
                        tokio::spawn(async move {
                            super::pod_status::finish_deletion(
                                &store,
                                meta::namespace(&pod),
                                meta::name(&pod),
                                meta::uid(&pod),
                            )
                            .await;
                        });
                    }
                    return;
                }
                if node_name(&pod) != self.name {
                    return;
                }
                if matches!(
                    pod.pointer("/status/phase").and_then(Value::as_str),
                    Some("Succeeded" | "Failed")
                ) {
                    finished.insert(uid);
                    return;
                }
                let (worker, tx) = Worker::new(self.ctx.clone(), pod);
                workers.insert(uid.clone(), tx);
                let done_tx = done_tx.clone();
                tokio::spawn(async move {
                    worker.run().await;
                    let _ = done_tx.send(uid);
                });
            }
        }
    }
}

/// Renews the node lease while the kubelet is up; posts Ready again when it comes back.
async fn heartbeat(
    kubelet: Weak<Kubelet>,
    store: crate::store::Store,
    every: std::time::Duration,
    mut stop: watch::Receiver<bool>,
) {
    let Some(k) = kubelet.upgrade() else { return };
    let mut online = k.online.subscribe();
    let name = k.name.clone();
    drop(k);
    let mut was_online = true;
    loop {
        let is_online = *online.borrow_and_update();
        if is_online {
            if !was_online && let Err(e) = registration::post_ready(&store, &name).await {
                tracing::warn!(node = %name, error = %e, "posting node status");
            }
            if let Err(e) = registration::renew_lease(&store, &name).await {
                tracing::debug!(node = %name, error = %e, "renewing the node lease");
            }
        }
        was_online = is_online;
        tokio::select! {
            _ = tokio::time::sleep(every), if is_online => {}
            _ = online.changed() => {}
            _ = stop.changed() => return,
        }
    }
}

/// `<node>/run/containerd/containerd.sock`, containerd's socket on a real node.
pub(crate) fn cri_socket_path(root: &std::path::Path) -> PathBuf {
    root.join("run/containerd/containerd.sock")
}

async fn sleep_until(t: Option<Instant>) {
    match t {
        Some(t) => tokio::time::sleep_until(t).await,
        None => std::future::pending::<()>().await,
    }
}
