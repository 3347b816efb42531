//! The operator's controllers. They run inside a [`spark_operator_runtime::Runtime`], reconcile only while
//! their replica leads, and write through the runtime's fenced client. Layered, top to bottom (no file
//! imports one above it; `tests/module_graph.rs` keeps it so):
//!
//! - [`run`] (`run.rs`): the lease loop; while leading, every watched scope's controllers.
//! - The components: [`app`], the SparkApplication controller (watch, reconcile, state machine, executors,
//!   submission I/O, driver finalizer); `scheduled`, the ScheduledSparkApplication controller; [`reports`],
//!   the receiver of the node agents' termination reports (gRPC over TLS), served by every replica, leader
//!   or not: [`reports::serve`] with [`reports::ReceiverArgs`].
//! - What they share: `status`, the status write and its byte budget, conditions, Events and text cuts;
//!   [`scope`], which namespaces are reconciled; [`config`], the flags; `metrics`, the metric set with
//!   Kubeflow's names; `batch`, the batch schedulers; [`pod`], the slim, lenient pod type the caches hold;
//!   [`submission`], pure builders of what spark-submit would create, checked against Spark's own output
//!   (the oracle test), which `app::submit` creates exactly; [`uninstall`], `spark-operator cleanup`'s steps.

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
