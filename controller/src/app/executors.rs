//! Executor tracking, bounded whatever the churn.
//!
//! Executors come and go faster than an application is reconciled (dynamic allocation, Spark deleting
//! finished executor pods), so they are tracked from the pod watch's events, not from the pods that
//! happen to exist at reconcile time. Per application and submission the tracker keeps:
//! - counts by state, covering every executor ever seen, each counted once per state change;
//! - the executors still alive (needed to count their next change: bounded by the cluster's capacity);
//! - the ids of terminated executors as an interval set, so a finished pod seen again (a relist) is not
//!   counted twice; ids are dense (Spark numbers executors 1, 2, 3, ...), so this stays a few intervals;
//! - the last N failures and a bounded map of recent executors, evicting the oldest terminated first.
//!
//! No executor is skipped because of its id (Kubeflow ignores every executor above id 1000).
//!
//! After a restart the tracker is seeded from the status it wrote: the counts, the recent executors, and
//! the assumption that a terminated executor not in the recent map but with an id at or below the highest
//! id there was already counted (it was evicted from the map as the oldest terminated).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::ops::Bound;

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use spark_operator_api::state::ExecutorState;
use spark_operator_api::status::{ExecutorCounts, ExecutorRecord, SparkApplicationStatus, TerminationRecord};

use crate::app::observe::ExecutorPod;

/// A set of integers stored as disjoint, non-adjacent intervals.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct IdSet {
    /// start → end, inclusive.
    ranges: BTreeMap<i64, i64>,
}

impl IdSet {
    pub(crate) fn contains(&self, id: i64) -> bool {
        self.ranges.range(..=id).next_back().is_some_and(|(_, end)| *end >= id)
    }

    pub(crate) fn insert(&mut self, id: i64) {
        if self.contains(id) {
            return;
        }
        let mut start = id;
        let mut end = id;
        if let Some((&s, &e)) = self.ranges.range(..id).next_back()
            && e.checked_add(1) == Some(id)
        {
            start = s;
            self.ranges.remove(&s);
        }
        if let Some(next) = id.checked_add(1)
            && let Some(e) = self.ranges.remove(&next)
        {
            end = e;
        }
        self.ranges.insert(start, end);
    }

    /// Removes `id`, splitting its interval; false when it was not there.
    pub(crate) fn remove(&mut self, id: i64) -> bool {
        let Some((&start, &end)) = self.ranges.range(..=id).next_back() else {
            return false;
        };
        if end < id {
            return false;
        }
        self.ranges.remove(&start);
        if start < id {
            self.ranges.insert(start, id - 1);
        }
        if id < end {
            self.ranges.insert(id + 1, end);
        }
        true
    }

    #[cfg(test)]
    /// Number of intervals (the memory it takes).
    pub(crate) fn intervals(&self) -> usize {
        self.ranges.len()
    }

    /// The highest id in the set.
    pub(crate) fn max(&self) -> Option<i64> {
        self.ranges.last_key_value().map(|(_, end)| *end)
    }

    /// The ids of `lo..=hi` not in the set, as inclusive intervals.
    pub(crate) fn gaps(&self, lo: i64, hi: i64) -> Vec<(i64, i64)> {
        let mut gaps = Vec::new();
        if lo > hi {
            return gaps;
        }
        let mut next = lo;
        // The interval that may contain `lo`, then every one starting inside the range. The bound
        // after `lo` is exclusive: `lo + 1..=hi` is reversed when `lo == hi`, and `range` panics then.
        let first = self.ranges.range(..=lo).next_back();
        let rest = self.ranges.range((Bound::Excluded(lo), Bound::Included(hi)));
        for (&start, &end) in first.into_iter().chain(rest) {
            if end < next {
                continue;
            }
            if start > next {
                gaps.push((next, start - 1));
            }
            next = end.saturating_add(1);
            if next > hi {
                return gaps;
            }
        }
        if next <= hi {
            gaps.push((next, hi));
        }
        gaps
    }

    /// Inserts every id of `lo..=hi` (a gap found by [`IdSet::gaps`]).
    pub(crate) fn insert_range(&mut self, lo: i64, hi: i64) {
        let mut start = lo;
        let mut end = hi;
        let touching: Vec<(i64, i64)> = self
            .ranges
            .range(..=hi.saturating_add(1))
            .rev()
            .take_while(|(_, e)| **e >= lo.saturating_sub(1))
            .map(|(s, e)| (*s, *e))
            .collect();
        for (s, e) in touching {
            start = start.min(s);
            end = end.max(e);
            self.ranges.remove(&s);
        }
        self.ranges.insert(start, end);
    }
}

/// Limits of what the status lists.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Limits {
    pub max_tracked: usize,
    pub max_failures: usize,
}

/// The executors of one submission of one application.
#[derive(Clone, Debug, Default)]
pub(crate) struct Tracker {
    counts: ExecutorCounts,
    /// The submission tracked.
    pub submission_id: String,
    /// Alive executors by pod name: the state they are counted in, and their id.
    live: HashMap<String, (ExecutorState, Option<i64>)>,
    /// Ids of executors counted as terminated.
    done: IdSet,
    /// Terminated executors without an id label (not Spark's, but possible).
    done_names: HashSet<String>,
    /// Ids among `done` counted UNKNOWN (deleted before their exit was seen, or never seen at all): a node
    /// agent's report of how one ended corrects its count. Dense like `done`, so a few intervals.
    unknown: IdSet,
    /// Executors without an id counted UNKNOWN.
    unknown_names: HashSet<String>,
    /// Terminated executors with an id at or below this were counted before a restart.
    seeded_watermark: Option<i64>,
    /// Executors with a lower id are never counted as unseen (see `count_unseen`); `None`: from 1.
    unseen_floor: Option<i64>,
    /// status.recentExecutors, bounded.
    recent: BTreeMap<String, ExecutorRecord>,
    /// Eviction order of `recent`: terminated before alive, then lowest executor id (oldest) first, as
    /// `SparkApplicationStatus::record_executor` does, but O(log n) per change for 10^5+ executors.
    eviction: BTreeSet<(bool, i64, String)>,
    /// status.recentExecutorFailures, bounded.
    failures: SparkApplicationStatus,
    /// Bumped on every change, so a reconcile knows whether to write.
    pub generation: u64,
    /// When the leader last wrote this application's status (writes of executors only are paced).
    pub last_write: Option<std::time::Instant>,
    /// The uid of this submission's driver pod, once seen: executors count only when owned by it.
    pub driver_uid: Option<String>,
    /// Pending executors unschedulable for lack of room, by pod name: since when.
    capacity_waits: HashMap<String, Timestamp>,
}

impl Tracker {
    /// A tracker continuing what a status (of the same submission) recorded.
    pub(crate) fn seeded(status: &SparkApplicationStatus) -> Self {
        let mut tracker = Self {
            counts: status.executor_counts.clone().unwrap_or_default(),
            submission_id: status.submission_id.clone(),
            seeded_watermark: status.recent_executors.values().filter_map(|r| r.executor_id).max(),
            ..Self::default()
        };
        // Counted before the restart: everything up to the watermark; with counts but no recent
        // executor to date them, nothing can be said about gaps at all.
        tracker.unseen_floor = match tracker.seeded_watermark {
            Some(watermark) => Some(watermark.saturating_add(1)),
            None if tracker.counts.total() > 0 => Some(i64::MAX),
            None => None,
        };
        tracker.failures.recent_executor_failures = status.recent_executor_failures.clone();
        for (name, record) in &status.recent_executors {
            tracker.remember(name, record.clone(), usize::MAX);
            if record.state.is_terminal() {
                match record.executor_id {
                    Some(id) => tracker.done.insert(id),
                    None => {
                        tracker.done_names.insert(name.clone());
                    }
                }
                // Counted UNKNOWN before the restart: a node agent's late report may still correct it.
                if record.state == ExecutorState::Unknown {
                    tracker.mark_unknown(name, record.executor_id);
                }
            } else {
                tracker.live.insert(name.clone(), (record.state, record.executor_id));
            }
        }
        tracker
    }

    pub(crate) fn counts(&self) -> &ExecutorCounts {
        &self.counts
    }

    fn already_done(&self, name: &str, id: Option<i64>) -> bool {
        match id {
            Some(id) => self.done.contains(id),
            None => self.done_names.contains(name),
        }
    }

    /// An executor pod was added or changed.
    pub(crate) fn observe(&mut self, pod: &ExecutorPod, now: Timestamp, limits: Limits) {
        match pod.capacity_wait_since {
            Some(since) => self.capacity_waits.insert(pod.name.clone(), since),
            None => self.capacity_waits.remove(&pod.name),
        };
        self.record(pod, pod.state, pod.termination.clone(), now, limits);
    }

    /// Since when the longest-waiting executor has waited for room on some node, if any waits.
    pub(crate) fn oldest_capacity_wait(&self) -> Option<Timestamp> {
        self.capacity_waits.values().min().copied()
    }

    /// An executor pod was deleted; `last` is its last known state. One deleted before its container
    /// reported an exit is counted as Unknown: nobody saw how it ended.
    pub(crate) fn observe_deletion(&mut self, last: &ExecutorPod, now: Timestamp, limits: Limits) {
        self.capacity_waits.remove(&last.name);
        let state = if last.state.is_terminal() {
            last.state
        } else {
            ExecutorState::Unknown
        };
        let counted_before = self.already_done(&last.name, last.executor_id);
        let termination = last.termination.clone().or_else(|| {
            Some(TerminationRecord {
                pod_name: last.name.clone(),
                executor_id: last.executor_id,
                reason: Some("Deleted".into()),
                message: Some("the executor pod was deleted before it reported an exit".into()),
                node_name: last.node_name.clone(),
                ..TerminationRecord::default()
            })
        });
        self.record(last, state, termination, now, limits);
        if state == ExecutorState::Unknown {
            // Gone for good: it will not change again.
            self.live.remove(&last.name);
            self.mark_done(&last.name, last.executor_id);
            if !counted_before {
                self.mark_unknown(&last.name, last.executor_id);
            }
        }
    }

    fn mark_unknown(&mut self, name: &str, id: Option<i64>) {
        match id {
            Some(id) => self.unknown.insert(id),
            None => {
                self.unknown_names.insert(name.to_owned());
            }
        }
    }

    /// Whether the executor is counted UNKNOWN; forgets it if so (it is being corrected).
    fn take_unknown(&mut self, name: &str, id: Option<i64>) -> bool {
        match id {
            Some(id) => self.unknown.remove(id),
            None => self.unknown_names.remove(name),
        }
    }

    /// A node agent's report of how an executor's container ended (`status.uncountedExecutorTerminations`).
    /// An executor alive is counted in the reported state; one counted UNKNOWN is corrected to it; one
    /// never seen is counted; one counted COMPLETED or FAILED already is not counted again (a failure
    /// only gains the report's log tail). Folding the same report again changes nothing, so a status
    /// write that conflicts can fold it again on a fresh read. True when something changed.
    pub(crate) fn fold_report(&mut self, report: &TerminationRecord, now: Timestamp, limits: Limits) -> bool {
        let state = if report.succeeded() {
            ExecutorState::Completed
        } else {
            ExecutorState::Failed
        };
        let (name, id) = (report.pod_name.as_str(), report.executor_id);
        self.capacity_waits.remove(name);
        if self.already_done(name, id) {
            if self.take_unknown(name, id) {
                self.counts.transition(Some(ExecutorState::Unknown), state);
                self.live.remove(name);
                let pod = reported_pod(report, state, &self.submission_id);
                self.note(&pod, state, Some(report.clone()), now, limits);
                return true;
            }
            if state != ExecutorState::Failed || report.log_tail.is_none() {
                return false;
            }
            let Some(failure) = self
                .failures
                .recent_executor_failures
                .iter_mut()
                .rev()
                .find(|f| f.pod_name == name && f.log_tail.is_none())
            else {
                return false;
            };
            failure.log_tail.clone_from(&report.log_tail);
            if failure.container_id.is_none() {
                failure.container_id.clone_from(&report.container_id);
            }
            self.generation += 1;
            return true;
        }
        let pod = reported_pod(report, state, &self.submission_id);
        let generation = self.generation;
        self.record(&pod, state, pod.termination.clone(), now, limits);
        self.generation != generation
    }

    fn mark_done(&mut self, name: &str, id: Option<i64>) {
        match id {
            Some(id) => self.done.insert(id),
            None => {
                self.done_names.insert(name.to_owned());
            }
        }
    }

    fn record(
        &mut self,
        pod: &ExecutorPod,
        state: ExecutorState,
        termination: Option<TerminationRecord>,
        now: Timestamp,
        limits: Limits,
    ) {
        if self.already_done(&pod.name, pod.executor_id) {
            return;
        }
        let previous = self.live.get(&pod.name).map(|(state, _)| *state);
        if previous.is_none()
            && state.is_terminal()
            && pod
                .executor_id
                .zip(self.seeded_watermark)
                .is_some_and(|(id, watermark)| id <= watermark)
        {
            // Evicted from the map before a restart, so counted already.
            self.mark_done(&pod.name, pod.executor_id);
            return;
        }
        if previous == Some(state) {
            return;
        }
        self.counts.transition(previous, state);
        if state.is_terminal() {
            self.live.remove(&pod.name);
            self.mark_done(&pod.name, pod.executor_id);
        } else {
            self.live.insert(pod.name.clone(), (state, pod.executor_id));
        }
        self.note(pod, state, termination, now, limits);
    }

    /// Lists an executor's new state: its failure (with the log tail a node agent reported, if any) and
    /// its place in the recent executors.
    fn note(
        &mut self,
        pod: &ExecutorPod,
        state: ExecutorState,
        termination: Option<TerminationRecord>,
        now: Timestamp,
        limits: Limits,
    ) {
        if state == ExecutorState::Failed
            && let Some(mut failure) = termination
        {
            failure.executor_id = pod.executor_id;
            self.failures.push_executor_failure(failure, limits.max_failures);
        }
        let record = ExecutorRecord {
            executor_id: pod.executor_id,
            state,
            node_name: pod.node_name.clone(),
            last_transition_time: Some(Time(Timestamp::from_second(now.as_second()).unwrap_or(now))),
        };
        self.remember(&pod.name, record, limits.max_tracked.max(1));
        self.generation += 1;
    }

    fn eviction_key(name: &str, record: &ExecutorRecord) -> (bool, i64, String) {
        (
            !record.state.is_terminal(),
            record.executor_id.unwrap_or(i64::MAX),
            name.to_owned(),
        )
    }

    /// Puts an executor in the recent map, evicting the oldest terminated ones beyond `max`.
    fn remember(&mut self, name: &str, record: ExecutorRecord, max: usize) {
        if let Some(previous) = self.recent.get(name) {
            self.eviction.remove(&Self::eviction_key(name, previous));
        }
        self.eviction.insert(Self::eviction_key(name, &record));
        self.recent.insert(name.to_owned(), record);
        while self.recent.len() > max {
            let Some((_, _, victim)) = self.eviction.pop_first() else {
                break;
            };
            self.recent.remove(&victim);
        }
    }

    /// After a relist: executors believed alive whose pods no longer exist were deleted unseen.
    pub(crate) fn sweep(&mut self, exists: impl Fn(&str) -> bool, now: Timestamp, limits: Limits) {
        let gone: Vec<ExecutorPod> = self
            .live
            .iter()
            .filter(|(name, _)| !exists(name))
            .map(|(name, (state, id))| ExecutorPod {
                name: name.clone(),
                executor_id: *id,
                submission_id: Some(self.submission_id.clone()),
                state: *state,
                node_name: None,
                termination: None,
                capacity_wait_since: None,
            })
            .collect();
        for pod in gone {
            self.observe_deletion(&pod, now, limits);
        }
        self.count_unseen();
    }

    /// Executors created and deleted while the watch was away (a 410 and a relist under heavy churn)
    /// were never seen, but Spark numbers executors 1, 2, 3, ...: every id below the highest one seen
    /// that is neither counted as terminated nor alive belonged to such an executor. Each is counted
    /// once, as UNKNOWN (nobody saw how it ended), so the total stays true. Ids at or below a restart's
    /// watermark were counted before the restart. (An id Spark drew for a pod it then failed to create
    /// is counted too: rare, and the lesser error than executors missing from the counts.)
    fn count_unseen(&mut self) {
        let live_ids: BTreeSet<i64> = self.live.values().filter_map(|(_, id)| *id).collect();
        let Some(highest) = self.done.max().into_iter().chain(live_ids.iter().copied()).max() else {
            return;
        };
        let from = self.unseen_floor.unwrap_or(1);
        if from > highest {
            return;
        }
        let mut unseen = 0;
        for (lo, hi) in self.done.gaps(from, highest) {
            // Split the gap around the executors that are alive.
            let mut next = lo;
            for &id in live_ids.range(lo..=hi) {
                if id > next {
                    self.done.insert_range(next, id - 1);
                    self.unknown.insert_range(next, id - 1);
                    unseen += id - next;
                }
                next = id.saturating_add(1);
            }
            if next <= hi {
                self.done.insert_range(next, hi);
                self.unknown.insert_range(next, hi);
                unseen += hi - next + 1;
            }
        }
        if unseen > 0 {
            tracing::warn!(
                submission = %self.submission_id,
                unseen,
                "executors came and went while the pod watch was relisting; counted as UNKNOWN"
            );
            self.counts.unknown = self.counts.unknown.saturating_add(unseen);
            self.generation += 1;
        }
    }

    /// Copies the tracked executor fields into a status (executorState mirrors recentExecutors).
    pub(crate) fn render(&self, status: &mut SparkApplicationStatus) {
        status.executor_counts = Some(self.counts.clone());
        status.recent_executors = self.recent.clone();
        status.executor_state = self.recent.iter().map(|(name, r)| (name.clone(), r.state)).collect();
        status.recent_executor_failures = self.failures.recent_executor_failures.clone();
    }

    #[cfg(test)]
    /// Memory held, roughly: entries of each collection.
    pub(crate) fn footprint(&self) -> usize {
        self.live.len()
            + self.done.intervals()
            + self.done_names.len()
            + self.unknown.intervals()
            + self.unknown_names.len()
            + self.recent.len()
            + self.capacity_waits.len()
    }
}

/// The executor a node agent's report is of, as the pod watch would have described it.
fn reported_pod(report: &TerminationRecord, state: ExecutorState, submission_id: &str) -> ExecutorPod {
    ExecutorPod {
        name: report.pod_name.clone(),
        executor_id: report.executor_id,
        submission_id: Some(submission_id.to_owned()),
        state,
        node_name: report.node_name.clone(),
        termination: Some(report.clone()),
        capacity_wait_since: None,
    }
}

/// The trackers of every application, one per application: its current submission's.
#[derive(Debug, Default)]
pub(crate) struct Executors {
    trackers: HashMap<(String, String), Tracker>,
}

impl Executors {
    /// The tracker for an executor of `submission_id`. A tracker of another submission is replaced
    /// when the application's status (`status()`, the cached one) says the submission is current;
    /// otherwise the executor belongs to an old run and is ignored (None).
    pub(crate) fn tracker_for(
        &mut self,
        namespace: &str,
        app: &str,
        submission_id: &str,
        status: impl FnOnce() -> Option<SparkApplicationStatus>,
    ) -> Option<&mut Tracker> {
        let key = (namespace.to_owned(), app.to_owned());
        let current = self
            .trackers
            .get(&key)
            .is_some_and(|t| t.submission_id == submission_id);
        if !current {
            let status = status().filter(|s| s.submission_id == submission_id)?;
            self.trackers.insert(key.clone(), Tracker::seeded(&status));
        }
        self.trackers.get_mut(&key)
    }

    /// The tracker of an application's submission, if it has seen executors.
    pub(crate) fn get(&self, namespace: &str, app: &str, submission_id: &str) -> Option<&Tracker> {
        self.trackers
            .get(&(namespace.to_owned(), app.to_owned()))
            .filter(|t| t.submission_id == submission_id)
    }

    /// The tracker of `submission_id`, to change it.
    pub(crate) fn get_mut(&mut self, namespace: &str, app: &str, submission_id: &str) -> Option<&mut Tracker> {
        self.trackers
            .get_mut(&(namespace.to_owned(), app.to_owned()))
            .filter(|t| t.submission_id == submission_id)
    }

    /// Forgets an application (deleted).
    pub(crate) fn remove(&mut self, namespace: &str, app: &str) {
        self.trackers.remove(&(namespace.to_owned(), app.to_owned()));
    }

    /// Every tracker, with its application's namespace.
    pub(crate) fn iter_mut(&mut self) -> impl Iterator<Item = (&str, &mut Tracker)> {
        self.trackers.iter_mut().map(|((ns, _), t)| (ns.as_str(), t))
    }

    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.trackers.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: Limits = Limits {
        max_tracked: 100,
        max_failures: 10,
    };

    fn exec(id: i64, state: ExecutorState) -> ExecutorPod {
        ExecutorPod {
            name: format!("app-exec-{id}"),
            executor_id: Some(id),
            submission_id: Some("s".into()),
            state,
            node_name: Some("node-1".into()),
            capacity_wait_since: None,
            termination: (state == ExecutorState::Failed).then(|| TerminationRecord {
                pod_name: format!("app-exec-{id}"),
                exit_code: Some(137),
                reason: Some("OOMKilled".into()),
                ..TerminationRecord::default()
            }),
        }
    }

    fn now() -> Timestamp {
        Timestamp::from_second(1_700_000_000).unwrap()
    }

    #[test]
    fn id_set_merges_neighbours() {
        let mut set = IdSet::default();
        for id in [1, 3, 2, 10, 5, 4] {
            set.insert(id);
        }
        assert_eq!(set.intervals(), 2);
        assert!(set.contains(1) && set.contains(5) && set.contains(10));
        assert!(!set.contains(6) && !set.contains(0) && !set.contains(11));
        set.insert(i64::MAX);
        assert!(set.contains(i64::MAX));
    }

    #[test]
    fn every_executor_is_counted_once_per_state_whatever_its_id() {
        let mut t = Tracker::default();
        for id in 1..=2000 {
            t.observe(&exec(id, ExecutorState::Pending), now(), LIMITS);
            t.observe(&exec(id, ExecutorState::Running), now(), LIMITS);
            t.observe(&exec(id, ExecutorState::Running), now(), LIMITS);
            let end = if id % 10 == 0 {
                ExecutorState::Failed
            } else {
                ExecutorState::Completed
            };
            t.observe(&exec(id, end), now(), LIMITS);
            // A relist shows the finished pod again; it must not be counted twice.
            t.observe(&exec(id, end), now(), LIMITS);
            t.observe_deletion(&exec(id, end), now(), LIMITS);
        }
        assert_eq!(t.counts().completed, 1800);
        assert_eq!(t.counts().failed, 200);
        assert_eq!(t.counts().running + t.counts().pending + t.counts().unknown, 0);
        let mut status = SparkApplicationStatus::default();
        t.render(&mut status);
        assert_eq!(status.recent_executors.len(), 100);
        assert!(
            status.recent_executors.contains_key("app-exec-2000"),
            "executors past id 1000 are tracked"
        );
        assert_eq!(status.recent_executor_failures.len(), 10);
        assert_eq!(status.recent_executor_failures.last().unwrap().executor_id, Some(2000));
        assert!(t.footprint() < 110, "memory stays bounded: {}", t.footprint());
    }

    #[test]
    fn running_executors_outlive_terminated_ones_in_the_map() {
        let mut t = Tracker::default();
        let limits = Limits {
            max_tracked: 3,
            max_failures: 10,
        };
        t.observe(&exec(1, ExecutorState::Running), now(), limits);
        for id in 2..=10 {
            t.observe(&exec(id, ExecutorState::Completed), now(), limits);
        }
        let mut status = SparkApplicationStatus::default();
        t.render(&mut status);
        let kept: Vec<_> = status.recent_executors.keys().cloned().collect();
        assert_eq!(kept, ["app-exec-1", "app-exec-10", "app-exec-9"]);
        assert_eq!(t.counts().running, 1);
        assert_eq!(t.counts().completed, 9);
    }

    #[test]
    fn a_pod_deleted_before_it_exits_is_unknown() {
        let mut t = Tracker::default();
        t.observe(&exec(1, ExecutorState::Running), now(), LIMITS);
        t.observe_deletion(&exec(1, ExecutorState::Running), now(), LIMITS);
        assert_eq!(t.counts().unknown, 1);
        assert_eq!(t.counts().running, 0);
        // A late event about it changes nothing.
        t.observe(&exec(1, ExecutorState::Completed), now(), LIMITS);
        assert_eq!(t.counts().completed, 0);
    }

    #[test]
    fn executors_deleted_during_a_watch_gap_are_swept_as_unknown() {
        let mut t = Tracker::default();
        for id in 1..=3 {
            t.observe(&exec(id, ExecutorState::Running), now(), LIMITS);
        }
        // After the relist only executor 2 still exists.
        t.sweep(|name| name == "app-exec-2", now(), LIMITS);
        assert_eq!(t.counts().running, 1);
        assert_eq!(t.counts().unknown, 2);
        t.sweep(|name| name == "app-exec-2", now(), LIMITS);
        assert_eq!(t.counts().unknown, 2, "swept once");
    }

    fn reported(id: i64, exit_code: i32, tail: Option<&str>) -> TerminationRecord {
        TerminationRecord {
            pod_name: format!("app-exec-{id}"),
            executor_id: Some(id),
            exit_code: Some(exit_code),
            reason: Some(if exit_code == 0 { "Completed" } else { "Error" }.into()),
            observed_by: Some(spark_operator_api::state::TerminationObserver::Agent),
            log_tail: tail.map(str::to_owned),
            container_id: Some(format!("c-{id}")),
            ..TerminationRecord::default()
        }
    }

    fn counts(t: &Tracker) -> (i64, i64, i64, i64, i64) {
        let c = t.counts();
        (c.pending, c.running, c.completed, c.failed, c.unknown)
    }

    #[test]
    fn id_set_removes_by_splitting() {
        let mut set = IdSet::default();
        set.insert_range(1, 10);
        assert!(set.remove(5));
        assert!(!set.remove(5), "gone already");
        assert!(!set.remove(11));
        assert_eq!(set.gaps(1, 10), [(5, 5)]);
        assert!(set.remove(1) && set.remove(10));
        assert_eq!(set.gaps(1, 10), [(1, 1), (5, 5), (10, 10)]);
        assert_eq!(set.intervals(), 2);
    }

    #[test]
    fn a_report_corrects_an_executor_counted_unknown_once() {
        let mut t = Tracker::default();
        t.observe(&exec(1, ExecutorState::Running), now(), LIMITS);
        // Deleted before its exit was seen: UNKNOWN.
        t.observe_deletion(&exec(1, ExecutorState::Running), now(), LIMITS);
        assert_eq!(counts(&t), (0, 0, 0, 0, 1));
        // The agent saw it fail.
        let report = reported(1, 137, Some("java.lang.OutOfMemoryError"));
        assert!(t.fold_report(&report, now(), LIMITS));
        assert_eq!(counts(&t), (0, 0, 0, 1, 0));
        let mut status = SparkApplicationStatus::default();
        t.render(&mut status);
        let failure = status.recent_executor_failures.last().unwrap();
        assert_eq!(failure.exit_code, Some(137));
        assert_eq!(failure.log_tail.as_deref(), Some("java.lang.OutOfMemoryError"));
        assert_eq!(status.recent_executors["app-exec-1"].state, ExecutorState::Failed);
        // Folded again (a status write that conflicted, re-read): nothing moves. Without the UNKNOWN ids
        // forgotten on correction this would count it FAILED twice and UNKNOWN at -1 (saturating at 0).
        let generation = t.generation;
        assert!(!t.fold_report(&report, now(), LIMITS));
        assert_eq!(counts(&t), (0, 0, 0, 1, 0));
        assert_eq!(t.generation, generation);
        t.render(&mut status);
        assert_eq!(status.recent_executor_failures.len(), 1);
        // A late pod event changes nothing either.
        t.observe(&exec(1, ExecutorState::Failed), now(), LIMITS);
        t.observe_deletion(&exec(1, ExecutorState::Failed), now(), LIMITS);
        assert_eq!(counts(&t), (0, 0, 0, 1, 0));
    }

    #[test]
    fn a_restarted_controller_still_corrects_an_executor_counted_unknown_before() {
        let mut before = Tracker::default();
        before.observe(&exec(1, ExecutorState::Running), now(), LIMITS);
        before.observe_deletion(&exec(1, ExecutorState::Running), now(), LIMITS);
        let mut status = SparkApplicationStatus::default();
        before.render(&mut status);
        // The leader restarts from its status; the agent's report arrives after.
        let mut after = Tracker::seeded(&status);
        assert_eq!(counts(&after), (0, 0, 0, 0, 1));
        assert!(after.fold_report(&reported(1, 0, None), now(), LIMITS));
        assert_eq!(
            counts(&after),
            (0, 0, 1, 0, 0),
            "without the seeded UNKNOWN it stays UNKNOWN"
        );
        assert!(!after.fold_report(&reported(1, 0, None), now(), LIMITS));
    }

    #[test]
    fn a_report_corrects_an_executor_never_seen_during_a_relist() {
        let mut t = Tracker::default();
        for id in [1, 3] {
            t.observe(&exec(id, ExecutorState::Completed), now(), LIMITS);
        }
        t.sweep(|_| false, now(), LIMITS);
        assert_eq!(counts(&t), (0, 0, 2, 0, 1), "executor 2 came and went unseen");
        assert!(t.fold_report(&reported(2, 0, None), now(), LIMITS));
        assert_eq!(counts(&t), (0, 0, 3, 0, 0));
        assert!(!t.fold_report(&reported(2, 0, None), now(), LIMITS));
        t.sweep(|_| false, now(), LIMITS);
        assert_eq!(counts(&t), (0, 0, 3, 0, 0), "not swept as unseen again");
    }

    #[test]
    fn a_report_counts_alive_and_unseen_executors_once() {
        let mut t = Tracker::default();
        t.observe(&exec(1, ExecutorState::Running), now(), LIMITS);
        assert!(t.fold_report(&reported(1, 0, None), now(), LIMITS));
        assert_eq!(counts(&t), (0, 0, 1, 0, 0), "alive → its reported state");
        // Reported before the pod watch ever saw it: counted; its pod's events later are not.
        assert!(t.fold_report(&reported(2, 1, Some("tail")), now(), LIMITS));
        assert_eq!(counts(&t), (0, 0, 1, 1, 0));
        for state in [ExecutorState::Pending, ExecutorState::Running, ExecutorState::Failed] {
            t.observe(&exec(2, state), now(), LIMITS);
            t.observe(&exec(1, state), now(), LIMITS);
        }
        t.observe_deletion(&exec(2, ExecutorState::Running), now(), LIMITS);
        assert_eq!(counts(&t), (0, 0, 1, 1, 0));
        for report in [reported(1, 0, None), reported(2, 1, Some("tail"))] {
            assert!(!t.fold_report(&report, now(), LIMITS), "idempotent");
        }
        assert_eq!(counts(&t), (0, 0, 1, 1, 0));
    }

    #[test]
    fn a_report_of_an_executor_counted_already_only_adds_its_log_tail() {
        let mut t = Tracker::default();
        t.observe(&exec(1, ExecutorState::Failed), now(), LIMITS);
        t.observe(&exec(2, ExecutorState::Completed), now(), LIMITS);
        assert!(!t.fold_report(&reported(2, 0, Some("done")), now(), LIMITS));
        assert!(!t.fold_report(&reported(1, 137, None), now(), LIMITS), "nothing to add");
        assert!(t.fold_report(&reported(1, 137, Some("OOM")), now(), LIMITS));
        assert!(!t.fold_report(&reported(1, 137, Some("OOM")), now(), LIMITS));
        assert_eq!(counts(&t), (0, 0, 1, 1, 0));
        let mut status = SparkApplicationStatus::default();
        t.render(&mut status);
        assert_eq!(status.recent_executor_failures.len(), 1);
        let failure = &status.recent_executor_failures[0];
        assert_eq!(failure.exit_code, Some(137), "as the pod watch counted it");
        assert_eq!(failure.log_tail.as_deref(), Some("OOM"));
        assert_eq!(failure.container_id.as_deref(), Some("c-1"));
    }

    #[test]
    fn id_set_gaps_and_ranges() {
        let mut set = IdSet::default();
        for id in [2, 3, 7, 10] {
            set.insert(id);
        }
        assert_eq!(set.gaps(1, 10), [(1, 1), (4, 6), (8, 9)]);
        assert_eq!(set.gaps(3, 8), [(4, 6), (8, 8)]);
        assert_eq!(set.gaps(11, 12), [(11, 12)]);
        assert!(set.gaps(2, 3).is_empty());
        // One id: the range after `lo` is empty, not reversed.
        assert_eq!(set.gaps(5, 5), [(5, 5)]);
        assert!(set.gaps(7, 7).is_empty());
        assert!(set.gaps(9, 8).is_empty());
        set.insert_range(4, 6);
        assert_eq!(set.gaps(1, 10), [(1, 1), (8, 9)]);
        set.insert_range(8, 9);
        set.insert_range(1, 1);
        assert_eq!(set.intervals(), 1, "{set:?}");
        assert_eq!(set.max(), Some(10));
    }

    #[test]
    fn executors_never_seen_during_a_relist_are_counted_unknown_by_their_ids() {
        let mut t = Tracker::default();
        for id in [1, 2] {
            t.observe(&exec(id, ExecutorState::Running), now(), LIMITS);
            t.observe(&exec(id, ExecutorState::Completed), now(), LIMITS);
        }
        // The watch was away while executors 3..=6 came and went; 7 and 9 run, 8 finished.
        t.observe(&exec(7, ExecutorState::Running), now(), LIMITS);
        t.observe(&exec(8, ExecutorState::Completed), now(), LIMITS);
        t.observe(&exec(9, ExecutorState::Running), now(), LIMITS);
        let exists = |name: &str| name == "app-exec-7" || name == "app-exec-9";
        t.sweep(exists, now(), LIMITS);
        let c = t.counts().clone();
        assert_eq!((c.completed, c.running, c.unknown), (3, 2, 4), "{c:?}");
        assert_eq!(c.total(), 9, "every id up to the highest is counted once");
        // Swept again: nothing new. The live executors still count their end.
        t.sweep(exists, now(), LIMITS);
        t.observe(&exec(7, ExecutorState::Completed), now(), LIMITS);
        let c = t.counts().clone();
        assert_eq!((c.completed, c.running, c.unknown, c.total()), (4, 1, 4, 9), "{c:?}");
    }

    #[test]
    fn a_restart_never_counts_what_the_status_already_counted_as_unseen() {
        let mut status = SparkApplicationStatus {
            submission_id: "s".into(),
            executor_counts: Some(ExecutorCounts {
                completed: 50,
                ..ExecutorCounts::default()
            }),
            ..SparkApplicationStatus::default()
        };
        // No recent executor to date the counts: no gap can be judged.
        let mut t = Tracker::seeded(&status);
        t.observe(&exec(60, ExecutorState::Running), now(), LIMITS);
        t.sweep(|_| true, now(), LIMITS);
        assert_eq!((t.counts().completed, t.counts().unknown), (50, 0));
        // With executor 50 in the recent map, only ids above it can be unseen.
        status.recent_executors.insert(
            "app-exec-50".into(),
            ExecutorRecord {
                executor_id: Some(50),
                state: ExecutorState::Completed,
                node_name: None,
                last_transition_time: None,
            },
        );
        let mut t = Tracker::seeded(&status);
        t.observe(&exec(60, ExecutorState::Running), now(), LIMITS);
        t.sweep(|_| true, now(), LIMITS);
        assert_eq!(
            (t.counts().completed, t.counts().unknown),
            (50, 9),
            "51..=59 came and went unseen"
        );
    }

    #[test]
    fn a_relist_with_one_executor_above_the_floor_counts_nothing_unseen() {
        // The lowest id that can be unseen is also the highest seen: a gap of one id, alive.
        let mut t = Tracker::default();
        t.observe(&exec(1, ExecutorState::Running), now(), LIMITS);
        t.sweep(|_| true, now(), LIMITS);
        assert_eq!((t.counts().running, t.counts().unknown), (1, 0));
        let status = SparkApplicationStatus {
            submission_id: "s".into(),
            executor_counts: Some(ExecutorCounts {
                completed: 50,
                ..ExecutorCounts::default()
            }),
            recent_executors: [(
                "app-exec-50".to_string(),
                ExecutorRecord {
                    executor_id: Some(50),
                    state: ExecutorState::Completed,
                    node_name: None,
                    last_transition_time: None,
                },
            )]
            .into(),
            ..SparkApplicationStatus::default()
        };
        let mut t = Tracker::seeded(&status);
        t.observe(&exec(51, ExecutorState::Completed), now(), LIMITS);
        t.sweep(|_| true, now(), LIMITS);
        assert_eq!((t.counts().completed, t.counts().unknown), (51, 0));
    }

    #[test]
    fn a_restarted_controller_continues_the_counts() {
        let mut before = Tracker::default();
        let limits = Limits {
            max_tracked: 5,
            max_failures: 10,
        };
        for id in 1..=20 {
            before.observe(&exec(id, ExecutorState::Completed), now(), limits);
        }
        before.observe(&exec(21, ExecutorState::Running), now(), limits);
        let mut status = SparkApplicationStatus {
            submission_id: "s".into(),
            ..Default::default()
        };
        before.render(&mut status);

        let mut executors = Executors::default();
        assert!(
            executors
                .tracker_for("ns", "app", "old", || Some(status.clone()))
                .is_none(),
            "an old run's"
        );
        let after = executors
            .tracker_for("ns", "app", "s", || Some(status.clone()))
            .unwrap();
        // The relist shows every pod that still exists: old finished ones, and the running one.
        for id in 1..=20 {
            after.observe(&exec(id, ExecutorState::Completed), now(), limits);
        }
        after.observe(&exec(21, ExecutorState::Running), now(), limits);
        after.observe(&exec(21, ExecutorState::Completed), now(), limits);
        after.observe(&exec(22, ExecutorState::Pending), now(), limits);
        assert_eq!(after.counts().completed, 21);
        assert_eq!(after.counts().running, 0);
        assert_eq!(after.counts().pending, 1);
        assert!(executors.get("ns", "app", "s").is_some());
        executors.remove("ns", "app");
        assert!(executors.is_empty());
    }

    #[test]
    fn the_oldest_capacity_wait_follows_pending_executors() {
        let mut t = Tracker::default();
        let waiting = |id: i64, since: i64| ExecutorPod {
            capacity_wait_since: Some(Timestamp::from_second(since).unwrap()),
            ..exec(id, ExecutorState::Pending)
        };
        t.observe(&waiting(1, 50), now(), LIMITS);
        t.observe(&waiting(2, 20), now(), LIMITS);
        assert_eq!(t.oldest_capacity_wait(), Some(Timestamp::from_second(20).unwrap()));
        // Placed: it no longer waits; the other one does.
        t.observe(&exec(2, ExecutorState::Running), now(), LIMITS);
        assert_eq!(t.oldest_capacity_wait(), Some(Timestamp::from_second(50).unwrap()));
        t.observe_deletion(&exec(1, ExecutorState::Pending), now(), LIMITS);
        assert_eq!(t.oldest_capacity_wait(), None);
    }
}
