//! What the log store counts.

use spark_operator_runtime::metrics::{Counter, Gauge, Render, write_counter, write_gauge, write_labelled_counters};

#[derive(Debug, Default)]
pub struct LogMetrics {
    /// Bytes of every copy in the store.
    pub bytes: Gauge,
    /// Containers being copied now.
    pub followed: Gauge,
    pub evicted_for_size: Counter,
    pub evicted_for_age: Counter,
    /// Finished containers dropped because their application was over its bound.
    pub dropped_containers: Counter,
    /// Containers whose copying stopped at a bound.
    pub truncated: Counter,
    /// Copies resumed after an agent restart with lines possibly missing.
    pub gaps: Counter,
}

impl LogMetrics {
    pub(crate) fn evicted(&self, reason: &str) {
        match reason {
            "age" => self.evicted_for_age.inc(),
            _ => self.evicted_for_size.inc(),
        }
    }
}

impl Render for LogMetrics {
    fn render(&self, out: &mut String) {
        write_gauge(
            out,
            "spark_operator_agent_log_store_bytes",
            "Bytes of Spark container logs held in the agent's store",
            self.bytes.get(),
        );
        write_gauge(
            out,
            "spark_operator_agent_log_store_followed_containers",
            "Spark containers whose logs are being copied",
            self.followed.get(),
        );
        write_labelled_counters(
            out,
            "spark_operator_agent_log_store_evictions",
            "Finished applications whose logs were removed from the store, by bound",
            "reason",
            &[
                ("size", self.evicted_for_size.get()),
                ("age", self.evicted_for_age.get()),
            ],
        );
        write_counter(
            out,
            "spark_operator_agent_log_store_dropped_containers",
            "Finished containers' logs removed because their application exceeded --log-store-max-app-bytes",
            self.dropped_containers.get(),
        );
        write_counter(
            out,
            "spark_operator_agent_log_store_truncated_containers",
            "Containers whose log copy stopped at a bound with nothing finished left to evict",
            self.truncated.get(),
        );
        write_counter(
            out,
            "spark_operator_agent_log_store_gaps",
            "Copies resumed after an agent restart whose source file had been rotated away (lines may be missing)",
            self.gaps.get(),
        );
    }
}
