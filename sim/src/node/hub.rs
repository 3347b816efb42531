//! One follower of the store's change feed for everything in `node/`: it routes each pod change
//! to the scheduler, the kubelet of the pod's node, the Spark driver that owns an executor and
//! the pod GC, so no component polls or scans per pod. If the feed falls behind the store's
//! retained history it relists, as an informer does, and reports what changed meanwhile.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};

use serde_json::Value;
use tokio::sync::{mpsc, watch};

use crate::meta;
use crate::registry::ResourceKey;
use crate::status::ApiError;
use crate::store::{ChangeKind, Store};

/// A pod as the store has it now (or had it last, when deleted).
#[derive(Debug, Clone)]
pub(crate) enum PodEvent {
    Upsert(Arc<Value>),
    Deleted(Arc<Value>),
}

impl PodEvent {
    pub fn object(&self) -> &Arc<Value> {
        match self {
            PodEvent::Upsert(o) | PodEvent::Deleted(o) => o,
        }
    }
}

/// What the scheduler follows.
#[derive(Debug, Clone)]
pub(crate) enum SchedEvent {
    Pod(PodEvent),
    NodeUpsert(Arc<Value>),
    NodeDeleted(String),
    /// A Volcano PodGroup (`scheduling.volcano.sh`), for the Volcano stand-in.
    PodGroup(PodEvent),
}

pub(crate) fn podgroups_key() -> ResourceKey {
    key("scheduling.volcano.sh", "podgroups")
}

pub(crate) fn pods_key() -> ResourceKey {
    ResourceKey {
        group: String::new(),
        resource: "pods".into(),
    }
}

fn key(group: &str, resource: &str) -> ResourceKey {
    ResourceKey {
        group: group.into(),
        resource: resource.into(),
    }
}

pub(crate) fn node_name(pod: &Value) -> &str {
    pod.pointer("/spec/nodeName").and_then(Value::as_str).unwrap_or("")
}

pub(crate) fn label<'a>(obj: &'a Value, name: &str) -> Option<&'a str> {
    obj.get("metadata")
        .and_then(|m| m.get("labels"))
        .and_then(|l| l.get(name))
        .and_then(Value::as_str)
}

/// Subscribers by what they want.
pub(crate) struct Hub {
    scheduler: mpsc::UnboundedSender<SchedEvent>,
    kubelets: RwLock<HashMap<String, mpsc::UnboundedSender<PodEvent>>>,
    /// Spark drivers by application id (`spark-app-selector`), for their executor pods.
    drivers: Mutex<HashMap<String, mpsc::UnboundedSender<PodEvent>>>,
    pod_gc: Option<mpsc::UnboundedSender<PodEvent>>,
    /// Bumped on every ConfigMap or Secret change, for pods waiting for one.
    config_changes: watch::Sender<u64>,
}

impl Hub {
    pub fn new(scheduler: mpsc::UnboundedSender<SchedEvent>, pod_gc: Option<mpsc::UnboundedSender<PodEvent>>) -> Self {
        let (config_changes, _) = watch::channel(0);
        Self {
            scheduler,
            kubelets: RwLock::new(HashMap::new()),
            drivers: Mutex::new(HashMap::new()),
            pod_gc,
            config_changes,
        }
    }

    pub fn add_kubelet(&self, node: &str, tx: mpsc::UnboundedSender<PodEvent>) {
        self.kubelets
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(node.to_string(), tx);
    }

    pub fn add_driver(&self, app_id: &str, tx: mpsc::UnboundedSender<PodEvent>) {
        self.drivers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(app_id.to_string(), tx);
    }

    pub fn remove_driver(&self, app_id: &str) {
        self.drivers.lock().unwrap_or_else(|e| e.into_inner()).remove(app_id);
    }

    pub fn config_changes(&self) -> watch::Receiver<u64> {
        self.config_changes.subscribe()
    }

    fn route_pod(&self, ev: PodEvent) {
        let obj = ev.object().clone();
        let node = node_name(&obj);
        if !node.is_empty()
            && let Some(tx) = self.kubelets.read().unwrap_or_else(|e| e.into_inner()).get(node)
        {
            let _ = tx.send(ev.clone());
        }
        if label(&obj, "spark-role") == Some("executor")
            && let Some(app) = label(&obj, "spark-app-selector")
            && let Some(tx) = self.drivers.lock().unwrap_or_else(|e| e.into_inner()).get(app)
        {
            let _ = tx.send(ev.clone());
        }
        if let Some(gc) = &self.pod_gc {
            let terminal = matches!(
                obj.pointer("/status/phase").and_then(Value::as_str),
                Some("Succeeded" | "Failed")
            );
            if terminal || matches!(ev, PodEvent::Deleted(_)) {
                let _ = gc.send(ev.clone());
            }
        }
        let _ = self.scheduler.send(SchedEvent::Pod(ev));
    }

    /// Follows the store until it shuts down (or `stop` fires).
    pub async fn run(self: Arc<Self>, store: Store, mut stop: watch::Receiver<bool>) {
        let pods = pods_key();
        let nodes = key("", "nodes");
        let configmaps = key("", "configmaps");
        let secrets = key("", "secrets");
        let podgroups = podgroups_key();
        let mut known_groups: HashMap<(String, String), Arc<Value>> = HashMap::new();
        let mut known_pods: HashMap<(String, String), Arc<Value>> = HashMap::new();
        let mut known_nodes: HashMap<String, Arc<Value>> = HashMap::new();
        loop {
            // (Re)list: everything current is an upsert, everything known and gone a deletion.
            let (rv, objects) = store.snapshot();
            let mut now_pods = HashMap::new();
            let mut now_nodes = HashMap::new();
            let mut now_groups = HashMap::new();
            for (k, obj) in objects {
                if k == pods {
                    now_pods.insert((meta::namespace(&obj).to_string(), meta::name(&obj).to_string()), obj);
                } else if k == podgroups {
                    now_groups.insert((meta::namespace(&obj).to_string(), meta::name(&obj).to_string()), obj);
                } else if k == nodes {
                    now_nodes.insert(meta::name(&obj).to_string(), obj);
                }
            }
            for (name, obj) in &known_nodes {
                if !now_nodes.contains_key(name) {
                    let _ = self
                        .scheduler
                        .send(SchedEvent::NodeDeleted(meta::name(obj).to_string()));
                }
            }
            for obj in now_nodes.values() {
                let _ = self.scheduler.send(SchedEvent::NodeUpsert(obj.clone()));
            }
            for (k, obj) in &known_groups {
                if !now_groups.contains_key(k) {
                    let _ = self
                        .scheduler
                        .send(SchedEvent::PodGroup(PodEvent::Deleted(obj.clone())));
                }
            }
            for obj in now_groups.values() {
                let _ = self.scheduler.send(SchedEvent::PodGroup(PodEvent::Upsert(obj.clone())));
            }
            known_groups = now_groups;
            for (k, obj) in &known_pods {
                if !now_pods.contains_key(k) {
                    self.route_pod(PodEvent::Deleted(obj.clone()));
                }
            }
            for obj in now_pods.values() {
                self.route_pod(PodEvent::Upsert(obj.clone()));
            }
            known_pods = now_pods;
            known_nodes = now_nodes;
            self.config_changes.send_modify(|g| *g += 1);

            let mut feed = store.changes(rv);
            loop {
                let change = tokio::select! {
                    c = feed.next() => c,
                    _ = stop.changed() => return,
                };
                let change = match change {
                    Ok(c) => c,
                    Err(ApiError::Expired(msg)) => {
                        tracing::warn!(%msg, "node controllers fell behind the store's history; relisting");
                        break;
                    }
                    Err(e) => {
                        tracing::debug!(error = %e, "the store's change feed ended");
                        return;
                    }
                };
                if change.resource == pods {
                    let k = (
                        meta::namespace(&change.object).to_string(),
                        meta::name(&change.object).to_string(),
                    );
                    match change.kind {
                        ChangeKind::Deleted => {
                            known_pods.remove(&k);
                            self.route_pod(PodEvent::Deleted(change.object.clone()));
                        }
                        _ => {
                            known_pods.insert(k, change.object.clone());
                            self.route_pod(PodEvent::Upsert(change.object.clone()));
                        }
                    }
                } else if change.resource == nodes {
                    let name = meta::name(&change.object).to_string();
                    match change.kind {
                        ChangeKind::Deleted => {
                            known_nodes.remove(&name);
                            let _ = self.scheduler.send(SchedEvent::NodeDeleted(name));
                        }
                        _ => {
                            known_nodes.insert(name, change.object.clone());
                            let _ = self.scheduler.send(SchedEvent::NodeUpsert(change.object.clone()));
                        }
                    }
                } else if change.resource == podgroups {
                    let k = (
                        meta::namespace(&change.object).to_string(),
                        meta::name(&change.object).to_string(),
                    );
                    let ev = match change.kind {
                        ChangeKind::Deleted => {
                            known_groups.remove(&k);
                            PodEvent::Deleted(change.object.clone())
                        }
                        _ => {
                            known_groups.insert(k, change.object.clone());
                            PodEvent::Upsert(change.object.clone())
                        }
                    };
                    let _ = self.scheduler.send(SchedEvent::PodGroup(ev));
                } else if change.resource == configmaps || change.resource == secrets {
                    self.config_changes.send_modify(|g| *g += 1);
                }
            }
        }
    }
}
