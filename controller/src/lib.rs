//! The SparkApplication controller.

pub mod conditions;
pub mod config;
pub mod context;
pub mod driver_finalizer;
pub mod error_chain;
pub mod events;
pub mod executors;
pub mod leader;
pub mod metrics;
pub mod observe;
pub mod pod;
pub mod reconciler;
mod run;
pub mod server;
pub mod state;
pub mod status;
pub mod submission;
pub mod submit;

pub use config::ControllerArgs;
pub use run::{Error, run, run_with_client, shutdown_signal};
