//! The `sparkoperator.k8s.io/v1beta2` API of the Spark operator: pure types and functions, no I/O.
//!
//! - [`application`], [`pod_spec`], [`status`], [`scheduled`]: the custom resources, field for field as
//!   Kubeflow's so existing manifests apply unchanged, plus our optional status additions.
//! - [`state`]: application, driver and executor states and their predicates.
//! - [`labels`]: label, annotation and finalizer names shared with Kubeflow and Spark.
//! - [`naming`]: names of every derived object, as Spark and Kubeflow make them.
//! - [`defaults`]: the defaults the webhook applies; [`decoration`]: the one pure, idempotent `(pod, app) → pod`
//!   the controller (drivers) and the webhook (executors) both apply.
//! - [`batch_scheduler`]: which batch scheduler an application names, and the marks its pods carry.
//! - [`cron`]: schedules as Kubeflow reads them (robfig/cron), for validation and the controller alike.
//! - [`validation`]: every problem of an object, with field paths ([`field`]: the paths, errors and warnings;
//!   the Kubernetes name rules live in one place, `validation::names`); [`ownership`] for the check that needs
//!   API lookups; [`manifest`] for raw manifests (structure, unknown fields, decoding, validation).
//! - [`quantity`], [`spark_version`]: Spark memory strings, Kubernetes quantities, Spark versions.
//! - [`crd`]: the CustomResourceDefinitions; [`bounds`]: the bounds of user-set values they share with
//!   validation.
//! - [`permissions`]: every RBAC permission the processes need, with why; the chart and the tests read it.
//! - [`watched`]: a SparkApplication as a watch delivers it, decoded or unreadable (one bad object never
//!   fails a list).

pub mod application;
pub mod batch_scheduler;
pub mod bounds;
pub mod crd;
pub mod cron;
pub mod decoration;
pub mod defaults;
mod embedded;
pub mod field;
pub mod labels;
pub mod manifest;
pub mod naming;
pub mod ownership;
pub mod permissions;
pub mod pod_spec;
pub mod quantity;
pub mod scheduled;
pub mod spark_version;
pub mod state;
pub mod status;
mod structural;
pub mod validation;
pub mod watched;

pub use application::{SparkApplication, SparkApplicationSpec};
pub use field::{FieldError, FieldPath, ValidationReport};
pub use scheduled::{ScheduledSparkApplication, ScheduledSparkApplicationSpec};
pub use state::{ApplicationStateType, DriverState, ExecutorState};
pub use status::SparkApplicationStatus;
