//! The SparkApplication controller: everything that reconciles one kind, apart from what the crate shares
//! (flags, metrics, the slim pod type, the pure submission builders).
//!
//! - `watch`: one scope's kube-runtime Controller (the application and pod watches, their health, the
//!   release of a deleted application's drivers); started per scope by [`crate::run`].
//! - `reconciler`: one reconcile (read → validate → decide → write status → act); `error`: why one
//!   fails, and its category; `write`: the status write with executors and reports folded in.
//! - `pod_events`: the pod watch's events into the executor trackers.
//! - `poison`: one bad application never stops the others (unreadable, or a reconcile that panics).
//! - [`state`]: the pure state machine (`decide`).
//! - [`observe`]: facts read from cached pods; `executors`: bounded executor tracking.
//! - [`submit`]: creating and adopting a submission's objects, exactly once; [`driver_finalizer`]: the
//!   driver-protection finalizer and `spark-operator cleanup`.
//! - `context`: what every reconcile shares.
//!
//! The status write, conditions and Events are the crate's `crate::status` layer, below this one.

pub(crate) mod context;
pub mod driver_finalizer;
pub(crate) mod error;
pub(crate) mod executors;
pub mod observe;
pub(crate) mod pod_events;
pub(crate) mod poison;
pub(crate) mod reconciler;
pub mod state;
pub mod submit;
pub(crate) mod watch;
pub(crate) mod write;
