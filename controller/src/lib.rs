//! The SparkApplication controller. It runs inside a [`spark_operator_runtime::Runtime`], reconciles only
//! while its replica leads, and writes through the runtime's fenced client.
//!
//! - [`run`]: the controller's entry point (`run(args, runtime)`), one kube-runtime Controller per
//!   watched scope, restarted whenever this replica leads again.
//! - [`reconciler`]: one reconcile (read → validate → decide → write status → act), the pod watch, orphan
//!   cleanup; [`state`]: the pure state machine (`decide`); [`status`]: the status byte budget and write.
//! - [`submission`]: pure builders of what spark-submit would create (oracle-tested); [`submit`]: creating
//!   and adopting those objects, exactly once per submission.
//! - [`observe`] and [`pod`]: facts read from the slim cached pod ([`pod::SparkPod`]); [`executors`]: bounded
//!   executor tracking; [`driver_finalizer`]: the driver-protection finalizer; [`conditions`] and [`events`].
//! - [`config`] (flags) and [`context`] (what every reconcile shares); [`metrics`] (Kubeflow's names).

pub mod conditions;
pub mod config;
pub mod context;
pub mod driver_finalizer;
pub mod events;
pub mod executors;
pub mod metrics;
pub mod observe;
pub mod pod;
pub mod reconciler;
mod run;
pub mod state;
pub mod status;
pub mod submission;
pub mod submit;

pub use config::ControllerArgs;
pub use run::{Error, run};
