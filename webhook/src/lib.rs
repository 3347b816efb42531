//! The admission webhook, a component of the `operator` process that serves on every replica, leader or
//! not.
//!
//! - [`review`]: AdmissionReview in, answer out (pure).
//! - [`validate`]: SparkApplications and ScheduledSparkApplications checked as `spark-operator validate`
//!   checks them, plus the ownerReference check ([`owners`] makes its lookups).
//! - [`mutate`]: Spark pods decorated with all of their application's settings, or refused (pure);
//!   [`apps`] finds the application (cache, then a live read).
//! - [`configuration`]: the webhook configurations the installer registers; [`certs`]: one CA for all
//!   replicas in a Secret, a serving certificate per replica, the configurations' `caBundle`.
//! - [`server`]: the server, its metrics, Events and readiness.

pub mod apps;
pub mod certs;
pub mod configuration;
pub mod mutate;
pub mod owners;
pub mod review;
pub mod server;
pub mod validate;

pub use server::{Error, WebhookArgs, run, serve};
