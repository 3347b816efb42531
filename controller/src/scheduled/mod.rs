//! ScheduledSparkApplications: [`cron`] reads their schedules as Kubeflow does (robfig/cron's standard
//! parser); [`decide`] is what one reconcile does (which run to start, skip, replace or prune, and the
//! status). The controller that reads, acts and writes for them is not wired yet (issue 15).

pub mod cron;
pub mod decide;
