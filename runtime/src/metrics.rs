//! Metric primitives and the Prometheus text exposition (format 0.0.4). Written here rather than with a
//! client library because Kubeflow's counters have no `_total` suffix, which the OpenMetrics libraries
//! add, and its dashboards must keep working.
//!
//! Each component keeps its own metric set and implements [`Render`]; the endpoints server renders every
//! registered set, so one `/metrics` serves the whole process.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

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

#[derive(Clone, Debug, Default)]
struct HistogramData {
    buckets: Vec<u64>,
    sum: f64,
    count: u64,
}

/// Latency buckets in seconds, from 1 ms to 10 min.
pub const LATENCY_SECONDS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 600.0,
];

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
        // A poisoned lock only means another observer panicked mid-update; the counts stay usable.
        let mut data = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        data.sum += value;
        data.count += 1;
        for (bucket, bound) in data.buckets.iter_mut().zip(&self.bounds) {
            if value <= *bound {
                *bucket += 1;
            }
        }
    }

    pub fn count(&self) -> u64 {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner).count
    }

    fn snapshot(&self) -> HistogramData {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }
}

/// Writes one counter with its HELP and TYPE lines.
pub fn write_counter(out: &mut String, name: &str, help: &str, value: u64) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter\n{name} {value}");
}

/// Writes one counter family with one label (`label="value"` per sample).
pub fn write_labelled_counters(out: &mut String, name: &str, help: &str, label: &str, samples: &[(&str, u64)]) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter");
    for (value_of_label, value) in samples {
        let _ = writeln!(out, "{name}{{{label}=\"{value_of_label}\"}} {value}");
    }
}

/// Writes one gauge with its HELP and TYPE lines.
pub fn write_gauge(out: &mut String, name: &str, help: &str, value: i64) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {value}");
}

/// Writes one histogram: cumulative buckets, `+Inf`, `_sum` and `_count`.
pub fn write_histogram(out: &mut String, name: &str, help: &str, histogram: &Histogram) {
    let data = histogram.snapshot();
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
    for (bound, count) in histogram.bounds.iter().zip(&data.buckets) {
        let _ = writeln!(out, "{name}_bucket{{le=\"{bound}\"}} {count}");
    }
    let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {}", data.count);
    let _ = writeln!(out, "{name}_sum {}", data.sum);
    let _ = writeln!(out, "{name}_count {}", data.count);
}

/// A set of metrics that can write itself in the text exposition.
pub trait Render: Send + Sync {
    fn render(&self, out: &mut String);
}

/// Every metric set of the process; `/metrics` renders them in registration order.
#[derive(Clone, Default)]
pub struct Registry(Arc<Mutex<Vec<Arc<dyn Render>>>>);

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry").finish_non_exhaustive()
    }
}

impl Registry {
    pub fn register(&self, metrics: Arc<dyn Render>) {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).push(metrics);
    }

    pub fn render(&self) -> String {
        let sets = self.0.lock().unwrap_or_else(PoisonError::into_inner).clone();
        let mut out = String::with_capacity(8192);
        for set in sets {
            set.render(&mut out);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Two(Counter, Histogram);

    impl Render for Two {
        fn render(&self, out: &mut String) {
            write_counter(out, "a_count", "As", self.0.get());
            write_histogram(out, "b_seconds", "Bs", &self.1);
        }
    }

    #[test]
    fn renders_every_registered_set_without_suffixes() {
        let two = Arc::new(Two(Counter::default(), Histogram::new(&[0.005, 1.0])));
        two.0.inc();
        two.1.observe(0.003);
        two.1.observe(20.0);
        let registry = Registry::default();
        registry.register(two);
        let text = registry.render();
        assert!(text.contains("# TYPE a_count counter\na_count 1\n"), "{text}");
        assert!(text.contains("b_seconds_bucket{le=\"0.005\"} 1\n"), "{text}");
        assert!(text.contains("b_seconds_bucket{le=\"1\"} 1\n"), "{text}");
        assert!(text.contains("b_seconds_bucket{le=\"+Inf\"} 2\n"), "{text}");
        assert!(text.contains("b_seconds_count 2\n"), "{text}");
        assert!(!text.contains("_total"));
    }
}
