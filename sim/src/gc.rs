//! The garbage collector for `metadata.ownerReferences`, with the rules of Kubernetes'
//! `pkg/controller/garbagecollector`:
//!
//! - **Background** (the default): once every owner of an object is absent, the object is deleted.
//!   An owner is absent when no object of its kind with its name *and uid* exists. A namespaced
//!   owner is looked up **only in the dependent's own namespace** (owner references carry no
//!   namespace), so a reference to an object in another namespace is absent and the dependent is
//!   deleted; a Warning Event `OwnerRefInvalidNamespace` is recorded when the referenced uid is
//!   seen in another namespace, as the real graph builder does.
//! - A **cluster-scoped dependent with a namespaced owner kind** is never collected (the real GC
//!   gives up on it: "cluster-scoped objects cannot refer to namespaced owners").
//! - An owner kind that cannot be resolved (a CRD not installed, a version not served) leaves the
//!   dependent alone; it is looked at again whenever a CRD changes (the real GC retries forever).
//! - A dependent with a live owner among dangling ones loses the dangling references instead.
//! - **Foreground**: an owner deleted with `propagationPolicy=Foreground` carries the
//!   `foregroundDeletion` finalizer; its dependents are deleted, and the finalizer is removed once
//!   no dependent with `blockOwnerDeletion: true` is left.
//! - **Orphan**: an owner deleted with `propagationPolicy=Orphan` carries the `orphan` finalizer;
//!   the reference to it is removed from every dependent, then the finalizer.
//!
//! It follows [`Store::changes`] (no polling); failed writes are retried with a backoff, as the
//! real collector's rate-limited work queue does. Events (core and `events.k8s.io`) are ignored,
//! as in Kubernetes.

mod actions;
mod graph;

use std::collections::{HashMap, HashSet, VecDeque};
use std::time::Duration;

use tokio::sync::mpsc;

use crate::error_chain::ErrorChain;
use crate::registry::{Registry, ResourceKey};
use crate::status::ApiError;
use crate::store::{Change, ChangeKind, Store};
use graph::{Graph, ObjId, OwnerRef};

/// A task of the sim's in-process control plane; it stops when this handle is dropped.
#[derive(Debug)]
pub struct BackgroundTask {
    name: &'static str,
    handle: tokio::task::AbortHandle,
}

impl BackgroundTask {
    pub fn spawn<F>(name: &'static str, fut: F) -> Self
    where
        F: std::future::Future<Output = ()> + Send + 'static,
    {
        Self {
            name,
            handle: tokio::spawn(fut).abort_handle(),
        }
    }

    /// What the task does (`garbage-collector`, `namespace-controller`, ...).
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// False once the task ended (it only ends when aborted or when the store is gone).
    pub fn is_running(&self) -> bool {
        !self.handle.is_finished()
    }
}

impl Drop for BackgroundTask {
    fn drop(&mut self) {
        self.handle.abort();
    }
}

/// Starts the garbage collector on `store` (needs a tokio runtime). It covers every object
/// already in the store and every later change; drop the handle to stop it.
pub fn spawn(store: &Store) -> BackgroundTask {
    let mut gc = Collector::new(store.clone());
    let rv = gc.resync();
    BackgroundTask::spawn("garbage-collector", async move { gc.run(rv).await })
}

/// Why one step of the collector failed (it is retried).
#[derive(Debug, thiserror::Error)]
pub(crate) enum GcError {
    #[error("deleting {what}")]
    Delete { what: String, source: ApiError },
    #[error("removing owner references from {what}")]
    RemoveOwnerRefs { what: String, source: ApiError },
    #[error("unblocking the owner references of {what}")]
    Unblock { what: String, source: ApiError },
    #[error("removing the {finalizer} finalizer from {what}")]
    RemoveFinalizer {
        what: String,
        finalizer: &'static str,
        source: ApiError,
    },
}

/// One unit of work, as the real collector's `attemptToDelete` and `attemptToOrphan` queues.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Work {
    /// Decide whether the object must go (or, for an owner deleting in the foreground, whether
    /// it may go now).
    Attempt(ObjId),
    /// Remove the references to this owner from its dependents, then its `orphan` finalizer.
    Orphan(ObjId),
}

const FIRST_RETRY: Duration = Duration::from_millis(20);
const MAX_RETRY: Duration = Duration::from_secs(30);

pub(crate) struct Collector {
    store: Store,
    registry: Registry,
    graph: Graph,
    queue: VecDeque<Work>,
    queued: HashSet<Work>,
    retry_tx: mpsc::UnboundedSender<Work>,
    retry_rx: mpsc::UnboundedReceiver<Work>,
    backoff: HashMap<Work, Duration>,
    /// Dependents with an owner kind the registry does not serve; looked at again on CRD changes.
    unresolved: HashSet<ObjId>,
    /// (dependent uid, owner uid) pairs already reported as `OwnerRefInvalidNamespace`.
    reported: HashSet<(String, String)>,
}

impl Collector {
    fn new(store: Store) -> Self {
        let (retry_tx, retry_rx) = mpsc::unbounded_channel();
        Self {
            registry: store.registry(),
            store,
            graph: Graph::default(),
            queue: VecDeque::new(),
            queued: HashSet::new(),
            retry_tx,
            retry_rx,
            backoff: HashMap::new(),
            unresolved: HashSet::new(),
            reported: HashSet::new(),
        }
    }

    /// Rebuilds the graph from a snapshot and queues everything that may need work; returns the
    /// resourceVersion to follow changes from.
    fn resync(&mut self) -> u64 {
        let (rv, objects) = self.store.snapshot();
        self.registry = self.store.registry();
        self.graph.clear();
        for (key, obj) in &objects {
            if ignored(key) {
                continue;
            }
            let id = ObjId::of(key, obj);
            let owners = OwnerRef::all_of(obj);
            self.graph.insert(&id, &owners);
            if !owners.is_empty() {
                self.enqueue(Work::Attempt(id.clone()));
            }
            if crate::meta::is_deleting(obj) {
                let finalizers = crate::meta::finalizers(obj);
                if finalizers.iter().any(|f| f == actions::ORPHAN) {
                    self.enqueue(Work::Orphan(id.clone()));
                }
                if finalizers.iter().any(|f| f == actions::FOREGROUND) {
                    self.enqueue(Work::Attempt(id));
                }
            }
        }
        rv
    }

    async fn run(&mut self, from_rv: u64) {
        let mut feed = self.store.changes(from_rv);
        loop {
            // Changes first, so decisions are made on a current graph.
            tokio::select! {
                biased;
                change = feed.next() => match change {
                    Ok(change) => self.observe(&change),
                    Err(ApiError::Expired(_)) => {
                        tracing::info!("garbage collector fell behind the change history; rebuilding its graph");
                        let rv = self.resync();
                        feed = self.store.changes(rv);
                    }
                    Err(e) => {
                        tracing::info!(error = %e, "garbage collector stops: the change feed ended");
                        return;
                    }
                },
                Some(work) = self.retry_rx.recv() => self.enqueue(work),
                _ = std::future::ready(()), if !self.queue.is_empty() => {
                    if let Some(work) = self.queue.pop_front() {
                        self.queued.remove(&work);
                        self.process(work).await;
                    }
                }
            }
        }
    }

    fn enqueue(&mut self, work: Work) {
        if self.queued.insert(work.clone()) {
            self.queue.push_back(work);
        }
    }

    async fn process(&mut self, work: Work) {
        let result = match &work {
            Work::Attempt(id) => self.attempt(id).await,
            Work::Orphan(id) => self.orphan(id).await,
        };
        match result {
            Ok(()) => {
                self.backoff.remove(&work);
            }
            Err(e) => {
                let delay = self
                    .backoff
                    .get(&work)
                    .map(|d| (*d * 2).min(MAX_RETRY))
                    .unwrap_or(FIRST_RETRY);
                self.backoff.insert(work.clone(), delay);
                tracing::warn!(error = %ErrorChain(&e), retry_in = ?delay, "garbage collection step failed");
                let tx = self.retry_tx.clone();
                tokio::spawn(async move {
                    tokio::time::sleep(delay).await;
                    let _ = tx.send(work);
                });
            }
        }
    }

    /// Updates the graph with one committed change and queues the work it calls for, as the
    /// real graph builder's `processGraphChanges` does.
    fn observe(&mut self, change: &Change) {
        if is_crd(&change.resource) {
            // A kind may have become resolvable (or gone): refresh and look again.
            self.registry = self.store.registry();
            for id in std::mem::take(&mut self.unresolved) {
                self.enqueue(Work::Attempt(id));
            }
        }
        if ignored(&change.resource) {
            return;
        }
        let obj = &change.object;
        let id = ObjId::of(&change.resource, obj);
        let owners = OwnerRef::all_of(obj);
        let old_owners = change.previous.as_deref().map(OwnerRef::all_of).unwrap_or_default();
        match change.kind {
            ChangeKind::Added | ChangeKind::Modified => {
                let (added, removed, changed) = graph::diff(&old_owners, &owners);
                self.graph.unlink(&id, &removed);
                self.graph.insert(&id, &owners);
                // An owner waiting in the foreground may no longer be blocked.
                let unblocked = removed
                    .iter()
                    .filter(|r| r.block_owner_deletion)
                    .map(|r| r.uid.clone())
                    .chain(
                        changed
                            .iter()
                            .filter(|(o, n)| o.block_owner_deletion && !n.block_owner_deletion)
                            .map(|(_, n)| n.uid.clone()),
                    );
                let unblocked: Vec<String> = unblocked.collect();
                for uid in unblocked {
                    if let Some(owner) = self.graph.object(&uid).cloned() {
                        self.enqueue(Work::Attempt(owner));
                    }
                }
                // New owner references are verified at once (the real GC's "virtual" owner nodes).
                if !added.is_empty() {
                    self.enqueue(Work::Attempt(id.clone()));
                }
                let before = change.previous.as_deref();
                if starts_deleting_with(before, obj, actions::ORPHAN) {
                    self.enqueue(Work::Orphan(id.clone()));
                }
                if starts_deleting_with(before, obj, actions::FOREGROUND) {
                    for dep in self.graph.dependents_of(&id.uid) {
                        self.enqueue(Work::Attempt(dep));
                    }
                    self.enqueue(Work::Attempt(id));
                }
            }
            ChangeKind::Deleted => {
                self.graph.remove(&id, &owners);
                self.unresolved.remove(&id);
                for dep in self.graph.dependents_of(&id.uid) {
                    self.enqueue(Work::Attempt(dep));
                }
                // Owners deleting in the foreground wait for their blocking dependents.
                for r in owners.iter().filter(|r| r.block_owner_deletion) {
                    if let Some(owner) = self.graph.object(&r.uid).cloned() {
                        self.enqueue(Work::Attempt(owner));
                    }
                }
            }
        }
    }
}

/// Whether `obj` just entered deletion holding `finalizer` (it did not before).
fn starts_deleting_with(before: Option<&serde_json::Value>, obj: &serde_json::Value, finalizer: &str) -> bool {
    let has = |o: &serde_json::Value| {
        crate::meta::is_deleting(o) && crate::meta::finalizers(o).iter().any(|f| f == finalizer)
    };
    has(obj) && !before.is_some_and(has)
}

/// Resources the real collector does not follow.
fn ignored(key: &ResourceKey) -> bool {
    key.resource == "events" && (key.group.is_empty() || key.group == "events.k8s.io")
}

fn is_crd(key: &ResourceKey) -> bool {
    key.group == "apiextensions.k8s.io" && key.resource == "customresourcedefinitions"
}
