//! kube-controller-manager's workload controllers, in-process: each follows
//! [`Store::changes`](crate::store::Store::changes) through one work queue ([`queue`]) and writes
//! through the store as `kube-controller-manager`.
//!
//! - [`deployment`]: Deployment → ReplicaSets (rolling updates, Recreate, revisions, status);
//! - [`replicaset`]: ReplicaSet → pods;
//! - [`daemonset`]: DaemonSet → one pod per eligible node;
//! - [`job`]: Job → pods until completions or failure; [`ttl_after_finished`] deletes finished
//!   Jobs after their TTL;
//! - [`endpointslice`]: EndpointSlices for Services with a selector.
//!
//! [`pods`] holds what they share about pods.

mod daemonset;
mod deployment;
mod endpointslice;
mod job;
mod pods;
mod queue;
mod replicaset;
mod ttl_after_finished;

use crate::gc::BackgroundTask;
use crate::store::Store;

/// Starts every workload controller on `store` (needs a tokio runtime); they stop when the
/// handles are dropped.
pub fn spawn(store: &Store) -> Vec<BackgroundTask> {
    vec![
        BackgroundTask::spawn(
            "deployment-controller",
            queue::run(store.clone(), deployment::Deployments),
        ),
        BackgroundTask::spawn(
            "replicaset-controller",
            queue::run(store.clone(), replicaset::ReplicaSets),
        ),
        BackgroundTask::spawn(
            "daemonset-controller",
            queue::run(store.clone(), daemonset::DaemonSets::default()),
        ),
        BackgroundTask::spawn("job-controller", queue::run(store.clone(), job::Jobs)),
        BackgroundTask::spawn(
            "ttl-after-finished-controller",
            queue::run(store.clone(), ttl_after_finished::TtlAfterFinished),
        ),
        BackgroundTask::spawn(
            "endpointslice-controller",
            queue::run(store.clone(), endpointslice::EndpointSlices::default()),
        ),
    ]
}
