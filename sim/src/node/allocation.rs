//! How the fake Spark driver paces executor creation, as Spark 4.3's `ExecutorPodsAllocator`
//! does: one allocation round per `spark.kubernetes.allocation.batch.delay` (1s), each creating at
//! most `spark.kubernetes.allocation.batch.size` (20 in Spark 4.3; 10 in 4.0/4.1, 5 before) pods
//! and no more than `spark.kubernetes.allocation.maxPendingPods` (Int.MaxValue) not yet running.
//! (Spark also waits for the previous round's pods to appear in its pod snapshot; here a created
//! pod is in the store at once, so that wait is always over by the next round.) A driver asking
//! for 100,000 executors therefore grows its pods at 20 a second instead of creating them all at
//! once.
//!
//! The rounds are counted per application ([`AllocationStats`], through
//! [`crate::node::NodeCluster::executor_allocation`]) so tests can check the pacing by what was
//! created rather than by timing.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::Duration;

use super::script::parse_duration;
use super::spark_conf::SparkConf;

/// How many recent rounds [`AllocationStats::recent`] keeps.
const RECENT_ROUNDS: usize = 64;

/// The allocator's settings from the Spark conf.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct AllocationConf {
    pub batch_size: usize,
    pub batch_delay: Duration,
    pub max_pending: usize,
}

impl AllocationConf {
    /// Reads the three settings with Spark's defaults and checks; `Err` carries Spark's message.
    pub fn from_conf(conf: &SparkConf) -> Result<Self, String> {
        let batch_size = conf.int_or("spark.kubernetes.allocation.batch.size", 20)?;
        if batch_size <= 0 || batch_size > i64::from(i32::MAX) {
            return Err("Allocation batch size should be a positive integer".into());
        }
        let max_pending = conf.int_or("spark.kubernetes.allocation.maxPendingPods", i64::from(i32::MAX))?;
        if max_pending <= 0 || max_pending > i64::from(i32::MAX) {
            return Err("Maximum number of pending pods should be a positive integer".into());
        }
        let delay = conf.get_or("spark.kubernetes.allocation.batch.delay", "1s");
        // A Spark time conf in milliseconds: a bare number is milliseconds.
        let batch_delay = if delay.bytes().all(|b| b.is_ascii_digit()) {
            delay.parse::<u64>().ok().map(Duration::from_millis)
        } else {
            parse_duration(delay)
        }
        .ok_or_else(|| format!("spark.kubernetes.allocation.batch.delay should be a time, got: {delay}"))?;
        if batch_delay <= Duration::from_millis(100) {
            return Err("Allocation batch delay must be greater than 0.1s.".into());
        }
        Ok(Self {
            batch_size: usize::try_from(batch_size).unwrap_or(usize::MAX),
            batch_delay,
            max_pending: usize::try_from(max_pending).unwrap_or(usize::MAX),
        })
    }

    /// How many pods one round creates: what is missing, at most a batch, and no more than the
    /// pending slots left.
    pub fn round_size(&self, target: usize, known: usize, not_running: usize) -> usize {
        target
            .saturating_sub(known)
            .min(self.batch_size)
            .min(self.max_pending.saturating_sub(not_running))
    }
}

/// What one application's allocator has done.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AllocationStats {
    /// Allocation rounds run (including those that created nothing).
    pub rounds: u64,
    /// Executor pods requested in all rounds.
    pub created: u64,
    /// The most pods one round created.
    pub largest_round: usize,
    /// Pods created per round, for the last 64 rounds, oldest first.
    pub recent: VecDeque<usize>,
}

/// The stats of running drivers, by application id.
#[derive(Debug, Default)]
pub(crate) struct AllocationLog(Mutex<HashMap<String, AllocationStats>>);

impl AllocationLog {
    pub fn record(&self, app_id: &str, created: usize) {
        let mut map = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let stats = map.entry(app_id.to_string()).or_default();
        stats.rounds += 1;
        stats.created += created as u64;
        stats.largest_round = stats.largest_round.max(created);
        if stats.recent.len() == RECENT_ROUNDS {
            stats.recent.pop_front();
        }
        stats.recent.push_back(created);
    }

    pub fn get(&self, app_id: &str) -> Option<AllocationStats> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).get(app_id).cloned()
    }

    /// Forgets a finished driver (the log stays as small as the number of running drivers).
    pub fn remove(&self, app_id: &str) {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).remove(app_id);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::node::spark_conf::parse_properties;

    fn conf(text: &str) -> Result<AllocationConf, String> {
        AllocationConf::from_conf(&SparkConf(parse_properties(text)))
    }

    #[test]
    fn spark_4_3_defaults_and_checks() {
        assert_eq!(
            conf("").unwrap(),
            AllocationConf {
                batch_size: 20,
                batch_delay: Duration::from_secs(1),
                max_pending: i32::MAX as usize
            }
        );
        let c =
            conf("spark.kubernetes.allocation.batch.size=5\nspark.kubernetes.allocation.batch.delay=250\n").unwrap();
        assert_eq!((c.batch_size, c.batch_delay), (5, Duration::from_millis(250)));
        assert_eq!(
            conf("spark.kubernetes.allocation.batch.delay=100ms\n").unwrap_err(),
            "Allocation batch delay must be greater than 0.1s."
        );
        assert!(conf("spark.kubernetes.allocation.batch.size=0\n").is_err());
        assert!(conf("spark.kubernetes.allocation.maxPendingPods=-1\n").is_err());
    }

    #[test]
    fn a_round_is_bounded_by_what_is_missing_the_batch_and_the_pending_slots() {
        let c = AllocationConf {
            batch_size: 20,
            batch_delay: Duration::from_secs(1),
            max_pending: 30,
        };
        assert_eq!(c.round_size(100_000, 0, 0), 20);
        assert_eq!(c.round_size(100_000, 20, 20), 10);
        assert_eq!(c.round_size(100_000, 30, 30), 0);
        assert_eq!(c.round_size(25, 20, 0), 5);
        assert_eq!(c.round_size(10, 20, 0), 0);
    }

    #[test]
    fn the_log_keeps_counts_and_a_bounded_history() {
        let log = AllocationLog::default();
        for i in 0..100 {
            log.record("app", i % 3);
        }
        let s = log.get("app").unwrap();
        assert_eq!((s.rounds, s.created, s.largest_round, s.recent.len()), (100, 99, 2, 64));
        log.remove("app");
        assert!(log.get("app").is_none());
    }
}
