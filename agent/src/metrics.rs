//! What the agent counts, rendered into the process's `/metrics` (names `spark_operator_agent_*`). One
//! value shared by the CRI watcher, the spool and the delivery stream; each updates its own part.

use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use spark_operator_runtime::metrics::{Counter, Gauge, Render, write_counter, write_gauge, write_labelled_counters};

/// Every metric of the agent.
#[derive(Debug, Default)]
pub struct AgentMetrics {
    // CRI.
    pub cri_events: Counter,
    /// Events drained from the runtime's stream and not yet merged.
    pub cri_event_queue: Gauge,
    pub cri_relists: Counter,
    pub cri_repairs: Counter,
    pub cri_polling: Gauge,
    pub cri_connected: Gauge,
    pub cri_reconnects: Counter,
    pub cri_oom_settles: Counter,
    pub containers_started: Counter,
    pub containers_ended: Counter,
    pub reports_failed: Counter,
    // Spool.
    pub spool_records: Gauge,
    pub spool_bytes: Gauge,
    /// Unix seconds of the oldest unacknowledged record's capture; 0 when the spool is empty.
    pub spool_oldest_captured: AtomicI64,
    pub spool_corrupt_records: Counter,
    pub spool_dropped_records: Counter,
    // Delivery.
    pub stream_connected: Gauge,
    pub reports_sent: Counter,
    pub acks_ok: Counter,
    pub acks_retry: Counter,
    pub acks_discard: Counter,
}

fn unix_seconds(time: SystemTime) -> i64 {
    time.duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

impl AgentMetrics {
    /// Sets when the oldest unacknowledged record was captured (None: the spool is empty).
    pub fn set_spool_oldest(&self, captured: Option<SystemTime>) {
        self.spool_oldest_captured
            .store(captured.map(unix_seconds).unwrap_or(0), Ordering::Relaxed);
    }

    /// Seconds since the oldest unacknowledged record was captured; 0 when the spool is empty.
    pub fn spool_oldest_age_seconds(&self, now: SystemTime) -> i64 {
        match self.spool_oldest_captured.load(Ordering::Relaxed) {
            0 => 0,
            captured => (unix_seconds(now) - captured).max(0),
        }
    }
}

impl Render for AgentMetrics {
    fn render(&self, out: &mut String) {
        write_counter(
            out,
            "spark_operator_agent_cri_events",
            "Container events read from the runtime's GetContainerEvents stream",
            self.cri_events.get(),
        );
        write_gauge(
            out,
            "spark_operator_agent_cri_event_queue",
            "Container events read from the runtime and not yet merged (the agent drains the stream at once)",
            self.cri_event_queue.get(),
        );
        write_counter(
            out,
            "spark_operator_agent_cri_relists",
            "Full relists of the runtime's containers (on connect, periodically, and every poll in polling mode)",
            self.cri_relists.get(),
        );
        write_counter(
            out,
            "spark_operator_agent_cri_repairs",
            "Spark container ends found by a relist that no event had reported",
            self.cri_repairs.get(),
        );
        write_gauge(
            out,
            "spark_operator_agent_cri_polling",
            "1 while the runtime sends no container events (CRI-O without enable_pod_events) and the agent polls",
            self.cri_polling.get(),
        );
        write_gauge(
            out,
            "spark_operator_agent_cri_connected",
            "1 while the runtime's CRI socket answers",
            self.cri_connected.get(),
        );
        write_counter(
            out,
            "spark_operator_agent_cri_reconnects",
            "Connections to the runtime lost (runtime restarts, stream errors)",
            self.cri_reconnects.get(),
        );
        write_counter(
            out,
            "spark_operator_agent_cri_oom_settles",
            "Exits with code 137 without OOMKilled read again after the settle delay",
            self.cri_oom_settles.get(),
        );
        write_counter(
            out,
            "spark_operator_agent_containers_started",
            "Spark containers seen starting (or found running)",
            self.containers_started.get(),
        );
        write_counter(
            out,
            "spark_operator_agent_containers_ended",
            "Spark container ends captured in the spool",
            self.containers_ended.get(),
        );
        write_counter(
            out,
            "spark_operator_agent_reports_failed",
            "Spark container ends that could not be written to the spool",
            self.reports_failed.get(),
        );
        write_gauge(
            out,
            "spark_operator_agent_spool_records",
            "Reports in the spool not yet acknowledged",
            self.spool_records.get(),
        );
        write_gauge(
            out,
            "spark_operator_agent_spool_bytes",
            "Bytes of the spool's segment files on disk",
            self.spool_bytes.get(),
        );
        write_gauge(
            out,
            "spark_operator_agent_spool_oldest_age_seconds",
            "Age of the oldest unacknowledged report in the spool (0 when empty)",
            self.spool_oldest_age_seconds(SystemTime::now()),
        );
        write_counter(
            out,
            "spark_operator_agent_spool_corrupt_records",
            "Spool records skipped on start because they were truncated or failed their checksum",
            self.spool_corrupt_records.get(),
        );
        write_counter(
            out,
            "spark_operator_agent_spool_dropped_records",
            "Unacknowledged reports dropped because the spool was over its byte or age bound",
            self.spool_dropped_records.get(),
        );
        write_gauge(
            out,
            "spark_operator_agent_report_stream_connected",
            "1 while the report stream to the operator is open",
            self.stream_connected.get(),
        );
        write_counter(
            out,
            "spark_operator_agent_reports_sent",
            "Reports sent to the operator (resends included)",
            self.reports_sent.get(),
        );
        write_labelled_counters(
            out,
            "spark_operator_agent_report_acks",
            "Acknowledgements received from the operator, by verdict",
            "verdict",
            &[
                ("ok", self.acks_ok.get()),
                ("retry", self.acks_retry.get()),
                ("discard", self.acks_discard.get()),
            ],
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn renders_agent_names_and_the_spool_age() {
        let metrics = AgentMetrics::default();
        metrics.acks_discard.inc();
        let now = SystemTime::now();
        metrics.set_spool_oldest(Some(now - Duration::from_secs(90)));
        assert!((90..=91).contains(&metrics.spool_oldest_age_seconds(now + Duration::from_millis(1))));
        let mut out = String::new();
        metrics.render(&mut out);
        assert!(
            out.contains("spark_operator_agent_report_acks{verdict=\"discard\"} 1\n"),
            "{out}"
        );
        assert!(out.contains("spark_operator_agent_spool_oldest_age_seconds "), "{out}");
        metrics.set_spool_oldest(None);
        assert_eq!(metrics.spool_oldest_age_seconds(now), 0);
    }
}
