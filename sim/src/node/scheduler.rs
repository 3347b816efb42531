//! The default scheduler: binds pending pods (`schedulerName: default-scheduler`) to a node
//! that passes the filters, preferring the least allocated one, and marks a pod it cannot place
//! `PodScheduled=False, reason Unschedulable` with the real message. Unschedulable pods are
//! retried when the cluster changes (a node appears or changes, a pod goes away), as the
//! scheduler's queue moves them back on such events.
//!
//! The same task runs the Volcano stand-in for pods with `schedulerName: volcano` (see
//! `NodesConfig::volcano`): with gang admission (`scheduler/gang.rs`), or placing each pod on its
//! own as the default scheduler does. Both share one view of what is bound where, as two
//! schedulers share the nodes of a real cluster.

mod gang;

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::Arc;

use serde_json::{Value, json};
use tokio::sync::{mpsc, watch};

use super::config::Volcano;
use super::events::Recorder;
use super::hub::{PodEvent, SchedEvent, node_name, pods_key};
use super::placement::{self, Misfit, Resources};
use crate::meta;
use crate::status::ApiError;
use crate::store::{Store, WriteOptions};

struct NodeInfo {
    obj: Arc<Value>,
    allocatable: Resources,
}

struct Scheduler {
    store: Store,
    recorder: Recorder,
    nodes: BTreeMap<String, NodeInfo>,
    /// What bound pods use per node: (requests, requests with scoring defaults).
    used: HashMap<String, (Resources, Resources)>,
    /// Bound, not finished pods: uid → (node, requests, scoring requests).
    placed: HashMap<String, (String, Resources, Resources)>,
    pending: VecDeque<(String, String, String)>,
    queued: HashSet<String>,
    /// uid → (namespace, name, last message written).
    unschedulable: HashMap<String, (String, String, String)>,
    retry: bool,
    rotation: usize,
    volcano: Volcano,
    /// Events of the Volcano stand-in (component `volcano`, as Volcano's scheduler records them).
    volcano_recorder: Recorder,
    /// The gang admission state, when `volcano` is `Gang`.
    gang: Option<gang::Gang>,
}

fn scheduler_name(pod: &Value) -> &str {
    pod.pointer("/spec/schedulerName")
        .and_then(Value::as_str)
        .unwrap_or("default-scheduler")
}

fn terminal(pod: &Value) -> bool {
    matches!(
        pod.pointer("/status/phase").and_then(Value::as_str),
        Some("Succeeded" | "Failed")
    )
}

/// Writes `PodScheduled=False` with `reason` and `message`, as a scheduler marks a pod it cannot place
/// yet; false (logged) when the write failed.
async fn set_not_scheduled(store: &Store, pod: &Value, reason: &str, message: &str, manager: &str) -> bool {
    let cond = json!({
        "type": "PodScheduled",
        "status": "False",
        "lastProbeTime": null,
        "lastTransitionTime": meta::now_rfc3339(),
        "reason": reason,
        "message": message,
    });
    let (ns, name, uid) = (meta::namespace(pod), meta::name(pod), meta::uid(pod));
    match super::pod_status::set_condition(store, ns, name, uid, cond, manager).await {
        Ok(_) => true,
        Err(e) => {
            tracing::warn!(pod = %format!("{ns}/{name}"), error = %e, "marking a pod unschedulable");
            false
        }
    }
}

/// Runs the scheduler until the cluster stops.
pub(crate) async fn run(
    store: Store,
    recorder: Recorder,
    volcano: Volcano,
    volcano_recorder: Recorder,
    mut rx: mpsc::UnboundedReceiver<SchedEvent>,
    mut stop: watch::Receiver<bool>,
) {
    let mut s = Scheduler {
        store,
        recorder,
        nodes: BTreeMap::new(),
        used: HashMap::new(),
        placed: HashMap::new(),
        pending: VecDeque::new(),
        queued: HashSet::new(),
        unschedulable: HashMap::new(),
        retry: false,
        rotation: 0,
        volcano,
        volcano_recorder,
        gang: (volcano == Volcano::Gang).then(gang::Gang::default),
    };
    loop {
        let ev = tokio::select! {
            ev = rx.recv() => ev,
            _ = stop.changed() => return,
        };
        let Some(ev) = ev else { return };
        s.handle(ev);
        while let Ok(ev) = rx.try_recv() {
            s.handle(ev);
        }
        if std::mem::take(&mut s.retry) {
            let waiting: Vec<(String, (String, String, String))> =
                s.unschedulable.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
            for (uid, (ns, name, _)) in waiting {
                if s.queued.insert(uid.clone()) {
                    s.pending.push_back((ns, name, uid));
                }
            }
        }
        while let Some((ns, name, uid)) = s.pending.pop_front() {
            s.queued.remove(&uid);
            s.schedule_one(&ns, &name, &uid).await;
            // Keep the accounting current while working through a long queue.
            while let Ok(ev) = rx.try_recv() {
                s.handle(ev);
            }
        }
        if s.gang.as_ref().is_some_and(|g| g.dirty) {
            gang::session(&mut s).await;
        }
    }
}

impl Scheduler {
    fn handle(&mut self, ev: SchedEvent) {
        if let Some(g) = self.gang.as_mut() {
            g.observe(&ev);
        }
        match ev {
            SchedEvent::PodGroup(_) => {}
            SchedEvent::NodeUpsert(obj) => {
                let name = meta::name(&obj).to_string();
                let changed = self.nodes.get(&name).is_none_or(|n| {
                    n.obj.get("spec") != obj.get("spec")
                        || n.obj.pointer("/metadata/labels") != obj.pointer("/metadata/labels")
                        || n.obj.pointer("/status/allocatable") != obj.pointer("/status/allocatable")
                });
                let allocatable = Resources::from_allocatable(&obj);
                self.nodes.insert(name, NodeInfo { obj, allocatable });
                self.retry |= changed;
            }
            SchedEvent::NodeDeleted(name) => {
                self.nodes.remove(&name);
                self.retry = true;
            }
            SchedEvent::Pod(PodEvent::Deleted(pod)) => {
                let uid = meta::uid(&pod).to_string();
                self.unplace(&uid);
                self.unschedulable.remove(&uid);
                self.queued.remove(&uid);
            }
            SchedEvent::Pod(PodEvent::Upsert(pod)) => {
                let uid = meta::uid(&pod).to_string();
                let node = node_name(&pod);
                if !node.is_empty() {
                    self.unschedulable.remove(&uid);
                    if terminal(&pod) {
                        self.unplace(&uid);
                    } else if !self.placed.contains_key(&uid) {
                        self.place(&uid, node, &pod);
                    }
                    return;
                }
                let ours = match scheduler_name(&pod) {
                    "default-scheduler" => true,
                    // Without gang admission the stand-in places each pod on its own.
                    "volcano" => self.volcano == Volcano::NoGang,
                    _ => false,
                };
                let gated = pod
                    .pointer("/spec/schedulingGates")
                    .and_then(Value::as_array)
                    .is_some_and(|g| !g.is_empty());
                if !ours || gated || meta::is_deleting(&pod) || terminal(&pod) {
                    self.unschedulable.remove(&uid);
                    return;
                }
                if self.queued.insert(uid.clone()) {
                    self.pending
                        .push_back((meta::namespace(&pod).to_string(), meta::name(&pod).to_string(), uid));
                }
            }
        }
    }

    fn place(&mut self, uid: &str, node: &str, pod: &Value) {
        let req = placement::pod_requests(pod, false);
        let nonzero = placement::pod_requests(pod, true);
        let used = self.used.entry(node.to_string()).or_default();
        used.0.add(&req);
        used.1.add(&nonzero);
        self.placed.insert(uid.to_string(), (node.to_string(), req, nonzero));
        if let Some(g) = self.gang.as_mut() {
            g.dirty = true;
        }
    }

    /// Takes back a tentative placement (a gang that did not come together) without treating
    /// it as freed capacity.
    fn unplace_quiet(&mut self, uid: &str) {
        let retry = self.retry;
        self.unplace(uid);
        self.retry = retry;
    }

    fn unplace(&mut self, uid: &str) {
        if let Some((node, req, nonzero)) = self.placed.remove(uid) {
            if let Some(used) = self.used.get_mut(&node) {
                used.0.sub(&req);
                used.1.sub(&nonzero);
            }
            self.retry = true;
            if let Some(g) = self.gang.as_mut() {
                g.dirty = true;
            }
        }
    }

    /// The least allocated node that passes the filters (equal scores rotate, so identical
    /// nodes share the load as the real scheduler's random tie-break does), or why none does.
    fn choose_node(&mut self, pod: &Value, req: &Resources, nonzero: &Resources) -> Result<String, Vec<Misfit>> {
        let mut fits: Vec<(String, f64)> = Vec::new();
        let mut misfits: Vec<Misfit> = Vec::new();
        for (node_name, info) in &self.nodes {
            let (used, used_nz) = self.used.get(node_name).cloned().unwrap_or_default();
            let mut free = info.allocatable.clone();
            free.sub(&used);
            match placement::filter(pod, &info.obj, req, &free) {
                Some(m) => misfits.push(m),
                None => {
                    // LeastAllocated: the share of cpu and memory left after placing the pod.
                    let share = |total: i128, used: i128| {
                        if total <= 0 {
                            0.0
                        } else {
                            (total - used) as f64 / total as f64
                        }
                    };
                    let score = share(info.allocatable.cpu, used_nz.cpu + nonzero.cpu)
                        + share(info.allocatable.memory, used_nz.memory + nonzero.memory);
                    fits.push((node_name.clone(), score));
                }
            }
        }
        if fits.is_empty() {
            return Err(misfits);
        }
        let best = fits.iter().map(|f| f.1).fold(f64::MIN, f64::max);
        let ties: Vec<&String> = fits
            .iter()
            .filter(|f| (f.1 - best).abs() < 1e-9)
            .map(|f| &f.0)
            .collect();
        let node = ties[self.rotation % ties.len()].clone();
        self.rotation = self.rotation.wrapping_add(1);
        Ok(node)
    }

    async fn schedule_one(&mut self, ns: &str, name: &str, uid: &str) {
        let Some(pod) = self.store.get_stored(&pods_key(), ns, name) else {
            return;
        };
        if meta::uid(&pod) != uid || !node_name(&pod).is_empty() || meta::is_deleting(&pod) || terminal(&pod) {
            return;
        }
        let req = placement::pod_requests(&pod, false);
        let nonzero = placement::pod_requests(&pod, true);
        let node = match self.choose_node(&pod, &req, &nonzero) {
            Ok(node) => node,
            Err(misfits) => {
                let message = if self.nodes.is_empty() {
                    "no nodes available to schedule pods".to_string()
                } else {
                    placement::fit_error(self.nodes.len(), &misfits)
                };
                self.mark_unschedulable(&pod, message).await;
                return;
            }
        };
        self.unschedulable.remove(uid);
        self.place(uid, &node, &pod);
        let opts = WriteOptions {
            field_manager: Some("kube-scheduler".into()),
            ..Default::default()
        };
        match self.store.bind_pod(ns, name, &node, &opts).await {
            Ok(_) => {
                let msg = format!("Successfully assigned {ns}/{name} to {node}");
                self.recorder_for(&pod)
                    .record(&pod, "Pod", None, "Normal", "Scheduled", &msg)
                    .await;
            }
            Err(e) => {
                // Someone else bound or deleted it; the pod's next event puts the accounting right.
                self.unplace(uid);
                self.retry = false;
                if !matches!(e, ApiError::NotFound(_) | ApiError::Conflict { .. }) {
                    tracing::warn!(pod = %format!("{ns}/{name}"), %node, error = %e, "binding a pod");
                }
            }
        }
    }

    async fn mark_unschedulable(&mut self, pod: &Value, message: String) {
        let (ns, name, uid) = (
            meta::namespace(pod).to_string(),
            meta::name(pod).to_string(),
            meta::uid(pod).to_string(),
        );
        let unchanged = self.unschedulable.get(&uid).is_some_and(|(_, _, m)| *m == message);
        self.unschedulable
            .insert(uid.clone(), (ns.clone(), name.clone(), message.clone()));
        if unchanged {
            return;
        }
        set_not_scheduled(&self.store, pod, "Unschedulable", &message, "kube-scheduler").await;
        self.recorder_for(pod)
            .record(pod, "Pod", None, "Warning", "FailedScheduling", &message)
            .await;
    }

    fn recorder_for(&self, pod: &Value) -> &Recorder {
        if scheduler_name(pod) == "volcano" {
            &self.volcano_recorder
        } else {
            &self.recorder
        }
    }
}
