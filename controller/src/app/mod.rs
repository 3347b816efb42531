//! The SparkApplication controller: everything that reconciles one kind, apart from what the crate shares
//! (flags, metrics, the slim pod type, the pure submission builders).
//!
//! - [`run`]: the entry point, `run(args, runtime)`: one kube-runtime Controller per watched scope while this
//!   replica leads.
//! - [`reconciler`]: one reconcile (read → validate → decide → write status → act), the pod watch feeding it,
//!   orphan cleanup; errors with their category.
//! - [`state`]: the pure state machine (`decide`); [`status`]: the status byte budget and its conditional write;
//!   [`conditions`]: standard conditions from the state.
//! - [`observe`]: facts read from cached pods; [`executors`]: bounded executor tracking.
//! - [`submit`]: creating and adopting a submission's objects, exactly once; [`driver_finalizer`]: the
//!   driver-protection finalizer and `spark-operator cleanup`.
//! - [`context`]: what every reconcile shares; [`events`]: Kubernetes Events for transitions.

pub mod conditions;
pub mod context;
pub mod driver_finalizer;
pub mod events;
pub mod executors;
pub mod observe;
pub mod poison;
pub mod reconciler;
pub mod run;
pub mod state;
pub mod status;
pub mod submit;
