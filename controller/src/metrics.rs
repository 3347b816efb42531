//! Prometheus metrics, with Kubeflow's names where the concept is the same, so its dashboards keep
//! working: `spark_application_count`, `..._submit_count`, `..._failed_submission_count`,
//! `..._running_count`, `..._success_count`, `..._failure_count`, execution times, submit and start
//! latencies (histograms: their `_sum` and `_count` answer the queries written for Kubeflow's summaries).
//! Ours: termination → status latency, status bytes, reconcile durations, status writes, leadership; the
//! report receiver's own set ([`ReportMetrics`]): reports by verdict and container exit → status write.
//!
//! The exposition (text format 0.0.4) is written here rather than with a client library because
//! Kubeflow's counters have no `_total` suffix, which the OpenMetrics libraries add.

use std::sync::{Mutex, PoisonError};

pub(crate) use spark_operator_runtime::metrics::{Counter, Histogram};
use spark_operator_runtime::metrics::{
    LATENCY_SECONDS as LATENCY, Render, write_counter, write_gauge, write_histogram, write_labelled_counters,
};

/// What kind of failure a reconcile error is: the label of `spark_operator_reconcile_errors`, so an
/// operator can tell "the API server refuses us" from "we are not the leader" from "someone else
/// changed the application" at a glance (Stackable's `ReconcilerError::category` is the model).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ErrorCategory {
    /// The application changed under the reconcile (retried at once).
    Conflict,
    /// A write was not sent: this replica does not hold the lease.
    Fenced,
    /// The API server refused a request or could not be reached.
    Api,
    /// Something could not be serialized.
    Serialization,
}

impl ErrorCategory {
    pub(crate) const ALL: [ErrorCategory; 4] = [Self::Conflict, Self::Fenced, Self::Api, Self::Serialization];

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Conflict => "conflict",
            Self::Fenced => "fenced",
            Self::Api => "api",
            Self::Serialization => "serialization",
        }
    }
}

/// Execution time buckets in seconds, from 1 s to 1 day.
const EXECUTION: &[f64] = &[
    1.0, 5.0, 15.0, 30.0, 60.0, 300.0, 900.0, 1800.0, 3600.0, 7200.0, 21600.0, 86400.0,
];
/// Status size buckets in bytes.
const BYTES: &[f64] = &[
    1024.0, 4096.0, 16384.0, 65536.0, 131072.0, 262144.0, 524288.0, 1048576.0, 1572864.0,
];

/// Every metric of the controller.
pub(crate) struct Metrics {
    pub app_count: Counter,
    pub submit_count: Counter,
    pub failed_submission_count: Counter,
    pub success_count: Counter,
    pub failure_count: Counter,
    pub success_execution_time: Histogram,
    pub failure_execution_time: Histogram,
    pub submit_latency: Histogram,
    pub start_latency: Histogram,
    pub executor_success_count: Counter,
    pub executor_failure_count: Counter,
    pub termination_to_status: Histogram,
    pub status_bytes: Histogram,
    pub status_writes: Counter,
    pub status_write_conflicts: Counter,
    pub status_write_errors: Counter,
    pub status_budget_shrinks: Counter,
    pub reconcile_duration: Histogram,
    /// Reconciles that panicked (contained to their application).
    pub reconcile_panics: Counter,
    /// Applications marked unreadable (once per generation).
    pub unreadable_applications: Counter,
    /// Pods with the operator's labels that are not what they claim (not owned by their submission's
    /// driver, an executor id out of range): ignored.
    pub untrusted_pods: Counter,
    /// ScheduledSparkApplication runs started by a tick.
    pub scheduled_runs_started: Counter,
    /// Ticks that started nothing (concurrencyPolicy Forbid, a run still active).
    pub scheduled_runs_skipped: Counter,
    /// Unfinished runs deleted for a new one (concurrencyPolicy Replace).
    pub scheduled_runs_replaced: Counter,
    /// Finished runs deleted beyond the history limits.
    pub scheduled_runs_pruned: Counter,
    /// Schedules found invalid (an unreadable schedule, zone or object).
    pub scheduled_failed_validations: Counter,
    /// Failed reconciles by [`ErrorCategory`], in its order.
    reconcile_errors: [Counter; ErrorCategory::ALL.len()],
    /// Where the running counts come from at each scrape (see [`Live`]).
    live: Mutex<Vec<LiveSource>>,
}

/// What is running right now.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Live {
    /// Applications in RUNNING.
    pub apps_running: i64,
    /// Executors running, as the applications' statuses count them.
    pub executors_running: i64,
}

/// Counts what is running from a controller's cache. Counted at scrape time rather than kept up to date
/// by transitions, so a restarted controller or a new leader reports the truth about applications
/// that were already running when it started.
pub(crate) type LiveSource = Box<dyn Fn() -> Live + Send + Sync>;

impl Default for Metrics {
    fn default() -> Self {
        Self {
            app_count: Counter::default(),
            submit_count: Counter::default(),
            failed_submission_count: Counter::default(),
            success_count: Counter::default(),
            failure_count: Counter::default(),
            success_execution_time: Histogram::new(EXECUTION),
            failure_execution_time: Histogram::new(EXECUTION),
            submit_latency: Histogram::new(LATENCY),
            start_latency: Histogram::new(LATENCY),
            executor_success_count: Counter::default(),
            executor_failure_count: Counter::default(),
            termination_to_status: Histogram::new(LATENCY),
            status_bytes: Histogram::new(BYTES),
            status_writes: Counter::default(),
            status_write_conflicts: Counter::default(),
            status_write_errors: Counter::default(),
            status_budget_shrinks: Counter::default(),
            reconcile_duration: Histogram::new(LATENCY),
            reconcile_panics: Counter::default(),
            unreadable_applications: Counter::default(),
            untrusted_pods: Counter::default(),
            scheduled_runs_started: Counter::default(),
            scheduled_runs_skipped: Counter::default(),
            scheduled_runs_replaced: Counter::default(),
            scheduled_runs_pruned: Counter::default(),
            scheduled_failed_validations: Counter::default(),
            reconcile_errors: Default::default(),
            live: Mutex::new(Vec::new()),
        }
    }
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics")
            .field("live", &self.live())
            .finish_non_exhaustive()
    }
}

impl Metrics {
    /// Adds a source of running counts (one per controller cache).
    pub(crate) fn add_live_source(&self, source: LiveSource) {
        self.live.lock().unwrap_or_else(PoisonError::into_inner).push(source);
    }

    /// Forgets the sources (the caches of a leadership term that ended).
    pub(crate) fn clear_live_sources(&self) {
        self.live.lock().unwrap_or_else(PoisonError::into_inner).clear();
    }

    /// Counts a failed reconcile.
    pub(crate) fn reconcile_error(&self, category: ErrorCategory) {
        if let Some(counter) = ErrorCategory::ALL
            .iter()
            .position(|c| *c == category)
            .and_then(|i| self.reconcile_errors.get(i))
        {
            counter.inc();
        }
    }

    /// What runs now, summed over the sources.
    pub(crate) fn live(&self) -> Live {
        let sources = self.live.lock().unwrap_or_else(PoisonError::into_inner);
        sources
            .iter()
            .map(|source| source())
            .fold(Live::default(), |sum, l| Live {
                apps_running: sum.apps_running + l.apps_running,
                executors_running: sum.executors_running + l.executors_running,
            })
    }

    #[cfg(test)]
    /// The Prometheus text exposition of these metrics alone.
    pub(crate) fn render_text(&self) -> String {
        let mut out = String::with_capacity(8192);
        self.render(&mut out);
        out
    }
}

impl Render for Metrics {
    fn render(&self, out: &mut String) {
        let counters: [(&str, &str, &Counter); 14] = [
            (
                "spark_operator_reconcile_panics",
                "Reconciles that panicked, contained to their application (a bug: see the log)",
                &self.reconcile_panics,
            ),
            (
                "spark_operator_unreadable_applications",
                "Applications marked Invalid because the controller cannot decode them",
                &self.unreadable_applications,
            ),
            (
                "spark_operator_untrusted_pods",
                "Pods with the operator's labels ignored because they are not what they claim",
                &self.untrusted_pods,
            ),
            ("spark_application_count", "Applications seen new", &self.app_count),
            (
                "spark_application_submit_count",
                "Driver pods created",
                &self.submit_count,
            ),
            (
                "spark_application_failed_submission_count",
                "Submissions that failed",
                &self.failed_submission_count,
            ),
            (
                "spark_application_success_count",
                "Applications completed",
                &self.success_count,
            ),
            (
                "spark_application_failure_count",
                "Applications failed",
                &self.failure_count,
            ),
            (
                "spark_executor_success_count",
                "Executors completed",
                &self.executor_success_count,
            ),
            (
                "spark_executor_failure_count",
                "Executors failed",
                &self.executor_failure_count,
            ),
            (
                "spark_operator_status_writes",
                "Status writes that succeeded",
                &self.status_writes,
            ),
            (
                "spark_operator_status_write_conflicts",
                "Status writes refused because the application changed (retried)",
                &self.status_write_conflicts,
            ),
            (
                "spark_operator_status_write_errors",
                "Status writes that failed",
                &self.status_write_errors,
            ),
            (
                "spark_operator_status_budget_shrinks",
                "Status writes whose executor lists were shrunk to fit the byte budget",
                &self.status_budget_shrinks,
            ),
        ];
        for (name, help, counter) in counters {
            write_counter(out, name, help, counter.get());
        }
        let errors: Vec<(&str, u64)> = ErrorCategory::ALL
            .iter()
            .zip(&self.reconcile_errors)
            .map(|(category, counter)| (category.as_str(), counter.get()))
            .collect();
        write_labelled_counters(
            out,
            "spark_operator_scheduled_runs",
            "ScheduledSparkApplication ticks by outcome: runs started, skipped (Forbid), replaced (Replace), pruned (history limits)",
            "outcome",
            &[
                ("started", self.scheduled_runs_started.get()),
                ("skipped", self.scheduled_runs_skipped.get()),
                ("replaced", self.scheduled_runs_replaced.get()),
                ("pruned", self.scheduled_runs_pruned.get()),
            ],
        );
        write_counter(
            out,
            "spark_operator_scheduled_failed_validations",
            "ScheduledSparkApplications found invalid (schedule, time zone, or an object the controller cannot read)",
            self.scheduled_failed_validations.get(),
        );
        write_labelled_counters(
            out,
            "spark_operator_reconcile_errors",
            "Reconciles that failed (retried), by category",
            "category",
            &errors,
        );
        let live = self.live();
        let gauges: [(&str, &str, i64); 2] = [
            (
                "spark_application_running_count",
                "Applications running",
                live.apps_running,
            ),
            (
                "spark_executor_running_count",
                "Executors running",
                live.executors_running,
            ),
        ];
        for (name, help, value) in gauges {
            write_gauge(out, name, help, value);
        }
        let histograms: [(&str, &str, &Histogram); 9] = [
            (
                "spark_application_success_execution_time_seconds",
                "Termination minus last submission, completed applications",
                &self.success_execution_time,
            ),
            (
                "spark_application_failure_execution_time_seconds",
                "Termination minus last submission, failed applications",
                &self.failure_execution_time,
            ),
            (
                "spark_application_submit_latency_seconds",
                "Creation to driver pod created, first attempt",
                &self.submit_latency,
            ),
            (
                "spark_application_start_latency_seconds",
                "Creation to driver running, first execution",
                &self.start_latency,
            ),
            // Kubeflow also exports its latencies as histograms under these names; dashboards built
            // on them keep working.
            (
                "spark_application_submit_latency_seconds_histogram",
                "Creation to driver pod created, first attempt (Kubeflow's histogram name)",
                &self.submit_latency,
            ),
            (
                "spark_application_start_latency_seconds_histogram",
                "Creation to driver running, first execution (Kubeflow's histogram name)",
                &self.start_latency,
            ),
            // The agent's path has `spark_operator_termination_to_status_seconds` (see ReportMetrics): one
            // family is rendered by one metric set, and this one is timed from another start.
            (
                "spark_operator_pod_watch_termination_to_status_seconds",
                "The pod watch's first sight of a driver's exit to its termination persisted in status",
                &self.termination_to_status,
            ),
            (
                "spark_operator_status_bytes",
                "Size of each status written",
                &self.status_bytes,
            ),
            (
                "spark_operator_reconcile_duration_seconds",
                "Duration of one reconcile",
                &self.reconcile_duration,
            ),
        ];
        for (name, help, histogram) in histograms {
            write_histogram(out, name, help, histogram);
        }
    }
}

/// The verdicts of the report receiver, in the order of [`ReportMetrics::verdicts`].
pub(crate) const REPORT_VERDICTS: [&str; 3] = ["ok", "retry", "discard"];

/// The report receiver's metrics (`controller/src/reports`): registered by the receiver, which runs on
/// every replica, not only on the leader.
#[derive(Debug)]
pub(crate) struct ReportMetrics {
    /// Reports answered, by verdict (see [`REPORT_VERDICTS`]).
    verdicts: [Counter; REPORT_VERDICTS.len()],
    /// Streams refused because the agent's token was missing, invalid or of another ServiceAccount.
    pub refused_streams: Counter,
    /// Status writes refused because the application changed since it was read (re-read and retried).
    pub conflicts: Counter,
    /// A container's exit (`finishedAt` as the node's runtime reported it) to the status write that
    /// recorded it.
    pub termination_to_status: Histogram,
}

impl Default for ReportMetrics {
    fn default() -> Self {
        Self {
            verdicts: Default::default(),
            refused_streams: Counter::default(),
            conflicts: Counter::default(),
            termination_to_status: Histogram::new(LATENCY),
        }
    }
}

impl ReportMetrics {
    /// Counts one answered report; `verdict` is one of [`REPORT_VERDICTS`].
    pub(crate) fn verdict(&self, verdict: &str) {
        if let Some(counter) = REPORT_VERDICTS
            .iter()
            .position(|v| *v == verdict)
            .and_then(|i| self.verdicts.get(i))
        {
            counter.inc();
        }
    }
}

impl Render for ReportMetrics {
    fn render(&self, out: &mut String) {
        let verdicts: Vec<(&str, u64)> = REPORT_VERDICTS
            .iter()
            .zip(&self.verdicts)
            .map(|(verdict, counter)| (*verdict, counter.get()))
            .collect();
        write_labelled_counters(
            out,
            "spark_operator_reports",
            "Termination reports of the node agents answered, by verdict",
            "verdict",
            &verdicts,
        );
        write_counter(
            out,
            "spark_operator_report_streams_refused",
            "Report streams refused: the agent's token was missing, invalid or of another ServiceAccount",
            self.refused_streams.get(),
        );
        write_counter(
            out,
            "spark_operator_report_write_conflicts",
            "Report status writes refused because the application changed (re-read and retried)",
            self.conflicts.get(),
        );
        write_histogram(
            out,
            "spark_operator_termination_to_status_seconds",
            "Container exit, as the node's runtime reported it, to the status write that recorded it",
            &self.termination_to_status,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn report_metrics_render_verdicts_and_the_latency() {
        let metrics = ReportMetrics::default();
        metrics.verdict("ok");
        metrics.verdict("ok");
        metrics.verdict("discard");
        metrics.verdict("nonsense");
        metrics.termination_to_status.observe(0.2);
        let text = {
            let mut out = String::new();
            metrics.render(&mut out);
            out
        };
        assert!(text.contains("spark_operator_reports{verdict=\"ok\"} 2\n"), "{text}");
        assert!(text.contains("spark_operator_reports{verdict=\"retry\"} 0\n"), "{text}");
        assert!(
            text.contains("spark_operator_reports{verdict=\"discard\"} 1\n"),
            "{text}"
        );
        assert!(
            text.contains("spark_operator_termination_to_status_seconds_count 1\n"),
            "{text}"
        );
        // The controller's set must not render the same family: two TYPE lines break the exposition.
        let controller = Metrics::default().render_text();
        assert!(!controller.contains("# TYPE spark_operator_termination_to_status_seconds "));
    }

    #[test]
    fn kubeflow_names_render_without_suffixes() {
        let metrics = Metrics::default();
        metrics.app_count.inc();
        metrics.submit_count.inc();
        metrics.add_live_source(Box::new(|| Live {
            apps_running: 1,
            executors_running: 3,
        }));
        metrics.add_live_source(Box::new(|| Live {
            apps_running: 0,
            executors_running: 2,
        }));
        metrics.submit_latency.observe(0.003);
        metrics.submit_latency.observe(20.0);
        metrics.reconcile_error(ErrorCategory::Api);
        let text = metrics.render_text();
        assert!(text.contains("# TYPE spark_application_count counter\nspark_application_count 1\n"));
        assert!(text.contains("spark_application_submit_count 1\n"));
        assert!(text.contains("spark_application_running_count 1\n"));
        assert!(text.contains("spark_executor_running_count 5\n"));
        assert!(text.contains("spark_application_submit_latency_seconds_bucket{le=\"0.0025\"} 0\n"));
        assert!(text.contains("spark_application_submit_latency_seconds_bucket{le=\"0.005\"} 1\n"));
        assert!(text.contains("spark_application_submit_latency_seconds_bucket{le=\"+Inf\"} 2\n"));
        assert!(text.contains("spark_application_submit_latency_seconds_count 2\n"));
        assert!(text.contains("spark_application_submit_latency_seconds_histogram_count 2\n"));
        assert!(
            text.contains("spark_operator_reconcile_errors{category=\"api\"} 1\n"),
            "{text}"
        );
        assert!(
            text.contains("spark_operator_reconcile_errors{category=\"conflict\"} 0\n"),
            "{text}"
        );
        assert!(!text.contains("_total"));
    }
}
