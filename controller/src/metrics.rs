//! Prometheus metrics, with Kubeflow's names where the concept is the same, so its dashboards keep
//! working: `spark_application_count`, `..._submit_count`, `..._failed_submission_count`,
//! `..._running_count`, `..._success_count`, `..._failure_count`, execution times, submit and start
//! latencies (histograms: their `_sum` and `_count` answer the queries written for Kubeflow's summaries).
//! Ours: termination → status latency, status bytes, reconcile durations, status writes, leadership.
//!
//! The exposition (text format 0.0.4) is written here rather than with a client library because
//! Kubeflow's counters have no `_total` suffix, which the OpenMetrics libraries add.

use std::fmt::Write as _;
use std::sync::Mutex;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

/// A monotonically increasing count.
#[derive(Debug, Default)]
pub struct Counter(AtomicU64);

impl Counter {
    pub fn inc(&self) {
        self.add(1);
    }

    pub fn add(&self, n: u64) {
        self.0.fetch_add(n, Ordering::Relaxed);
    }

    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// A value that goes up and down.
#[derive(Debug, Default)]
pub struct Gauge(AtomicI64);

impl Gauge {
    pub fn add(&self, delta: i64) {
        self.0.fetch_add(delta, Ordering::Relaxed);
    }

    pub fn set(&self, value: i64) {
        self.0.store(value, Ordering::Relaxed);
    }

    pub fn get(&self) -> i64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// Observations in cumulative buckets.
#[derive(Debug)]
pub struct Histogram {
    bounds: Vec<f64>,
    inner: Mutex<HistogramData>,
}

#[derive(Debug, Default)]
struct HistogramData {
    buckets: Vec<u64>,
    sum: f64,
    count: u64,
}

impl Histogram {
    pub fn new(bounds: &[f64]) -> Self {
        Self {
            bounds: bounds.to_vec(),
            inner: Mutex::new(HistogramData {
                buckets: vec![0; bounds.len()],
                ..HistogramData::default()
            }),
        }
    }

    pub fn observe(&self, value: f64) {
        let Ok(mut data) = self.inner.lock() else { return };
        data.sum += value;
        data.count += 1;
        for (bucket, bound) in data.buckets.iter_mut().zip(&self.bounds) {
            if value <= *bound {
                *bucket += 1;
            }
        }
    }

    pub fn count(&self) -> u64 {
        self.inner.lock().map_or(0, |d| d.count)
    }
}

/// Latency buckets in seconds, from 1 ms to 10 min.
const LATENCY: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 600.0,
];
/// Execution time buckets in seconds, from 1 s to 1 day.
const EXECUTION: &[f64] = &[
    1.0, 5.0, 15.0, 30.0, 60.0, 300.0, 900.0, 1800.0, 3600.0, 7200.0, 21600.0, 86400.0,
];
/// Status size buckets in bytes.
const BYTES: &[f64] = &[
    1024.0, 4096.0, 16384.0, 65536.0, 131072.0, 262144.0, 524288.0, 1048576.0, 1572864.0,
];

/// Every metric of the controller.
pub struct Metrics {
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
    pub reconcile_errors: Counter,
    pub leader: Gauge,
    /// Where the running counts come from at each scrape (see [`Live`]).
    live: Mutex<Vec<LiveSource>>,
}

/// What is running right now.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Live {
    /// Applications in RUNNING.
    pub apps_running: i64,
    /// Executors running, as the applications' statuses count them.
    pub executors_running: i64,
}

/// Counts what is running from a controller's cache. Counted at scrape time rather than kept up to date
/// by transitions, so a restarted controller or a new leader reports the truth about applications
/// that were already running when it started.
pub type LiveSource = Box<dyn Fn() -> Live + Send + Sync>;

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
            reconcile_errors: Counter::default(),
            leader: Gauge::default(),
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
    pub fn add_live_source(&self, source: LiveSource) {
        if let Ok(mut live) = self.live.lock() {
            live.push(source);
        }
    }

    /// What runs now, summed over the sources.
    pub fn live(&self) -> Live {
        let Ok(sources) = self.live.lock() else {
            return Live::default();
        };
        sources
            .iter()
            .map(|source| source())
            .fold(Live::default(), |sum, l| Live {
                apps_running: sum.apps_running + l.apps_running,
                executors_running: sum.executors_running + l.executors_running,
            })
    }

    /// The Prometheus text exposition.
    pub fn render(&self) -> String {
        let mut out = String::with_capacity(8192);
        let counters: [(&str, &str, &Counter); 12] = [
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
            (
                "spark_operator_reconcile_errors",
                "Reconciles that failed (retried)",
                &self.reconcile_errors,
            ),
        ];
        for (name, help, counter) in counters {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} counter\n{name} {}",
                counter.get()
            );
        }
        let live = self.live();
        let gauges: [(&str, &str, i64); 3] = [
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
            (
                "spark_operator_leader",
                "1 when this replica is the leader",
                self.leader.get(),
            ),
        ];
        for (name, help, value) in gauges {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {value}");
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
            (
                "spark_operator_termination_to_status_seconds",
                "Driver container exit to its termination persisted in status",
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
            render_histogram(&mut out, name, help, histogram);
        }
        out
    }
}

fn render_histogram(out: &mut String, name: &str, help: &str, histogram: &Histogram) {
    let Ok(data) = histogram.inner.lock() else { return };
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
    for (bound, count) in histogram.bounds.iter().zip(&data.buckets) {
        let _ = writeln!(out, "{name}_bucket{{le=\"{bound}\"}} {count}");
    }
    let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {}", data.count);
    let _ = writeln!(out, "{name}_sum {}", data.sum);
    let _ = writeln!(out, "{name}_count {}", data.count);
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let text = metrics.render();
        assert!(text.contains("# TYPE spark_application_count counter\nspark_application_count 1\n"));
        assert!(text.contains("spark_application_submit_count 1\n"));
        assert!(text.contains("spark_application_running_count 1\n"));
        assert!(text.contains("spark_executor_running_count 5\n"));
        assert!(text.contains("spark_application_submit_latency_seconds_bucket{le=\"0.0025\"} 0\n"));
        assert!(text.contains("spark_application_submit_latency_seconds_bucket{le=\"0.005\"} 1\n"));
        assert!(text.contains("spark_application_submit_latency_seconds_bucket{le=\"+Inf\"} 2\n"));
        assert!(text.contains("spark_application_submit_latency_seconds_count 2\n"));
        assert!(text.contains("spark_application_submit_latency_seconds_histogram_count 2\n"));
        assert!(!text.contains("_total"));
    }
}
