//! ScheduledSparkApplications: [`cron`] reads their schedules as Kubeflow does (robfig/cron's standard
//! parser); [`decide`] is what one reconcile does (which run to start, skip, replace or prune, and the
//! status); [`run`] is the controller that reads, acts and writes for them while the replica leads.

/// The schedules' parser lives in the api crate, where validation uses it too.
pub(crate) use spark_operator_api::cron;
pub(crate) mod decide;
pub(crate) mod run;
