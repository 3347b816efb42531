//! The admission webhook, a component of the `operator` process that serves on every replica, leader or
//! not. Today it is a skeleton: it validates SparkApplications and ScheduledSparkApplications with the
//! checks `spark-operator validate` runs (every error with its field path, in one denial), over plain
//! HTTP. TLS with shared certificates, pod mutation and the ownership checks are issue 10's.
//!
//! - [`review`]: AdmissionReview in, AdmissionReview out (pure).
//! - [`server`]: the HTTP server and its readiness.

pub mod certs;
pub mod review;
pub mod server;

pub use server::{Error, WebhookArgs, run};
