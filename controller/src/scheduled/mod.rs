//! ScheduledSparkApplications: [`cron`] reads their schedules as Kubeflow does (robfig/cron's standard
//! parser). The controller that starts their runs is not written yet (issue 15).

pub mod cron;
