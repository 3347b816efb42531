//! The operator's controllers. They run inside a [`spark_operator_runtime::Runtime`], reconcile only while
//! their replica leads, and write through the runtime's fenced client.
//!
//! - [`app`]: the SparkApplication controller (run, reconcile, state machine, status, executors, driver
//!   finalizer, submission I/O, events).
//! - [`submission`]: pure builders of what spark-submit would create, checked against Spark's own output (the
//!   oracle test); `app::submit` creates exactly what they build.
//! - [`pod`]: the slim, lenient pod type the caches hold ([`pod::SparkPod`]).
//! - [`config`]: the controller's flags; [`metrics`]: its metric set, with Kubeflow's names.
//! - [`reports`]: the receiver of the node agents' termination reports (gRPC over TLS), served by every
//!   replica, leader or not: [`reports::serve`] with [`reports::ReceiverArgs`].

// What other crates use is `pub`; everything else is `pub(crate)` or narrower, and kept so.
#![deny(unreachable_pub)]

pub mod app;
pub(crate) mod batch;
pub mod config;
pub(crate) mod metrics;
pub mod pod;
pub mod reports;
pub(crate) mod run;
pub(crate) mod scheduled;
pub mod scope;
pub(crate) mod status;
pub mod submission;
pub mod uninstall;

pub use config::ControllerArgs;
pub use reports::ReceiverArgs;
pub use run::{Error, run};
