//! What the agent knows of each Spark container, merged from every snapshot of it (events, relists,
//! re-reads) by state rank (CREATED < RUNNING < EXITED) and `finished_at`, never by arrival order:
//! containerd can send STOPPED before STARTED, and a STARTED event can carry an EXITED snapshot. Pure: the
//! watcher feeds snapshots in and carries out the actions that come back.

use std::collections::{HashMap, HashSet};

use spark_operator_proto::cri::v1::{ContainerState, ContainerStatus};

use super::ContainerEnd;
use crate::identity::SparkContainer;

/// containerd's reason for a container the OOM killer ended.
pub const OOM_KILLED: &str = "OOMKilled";
/// SIGKILL's exit code: the OOM killer's, but also a kill after the grace period.
pub const SIGKILL_EXIT: i32 = 137;

/// Where a snapshot came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    Event,
    Relist,
    /// The re-read after the OOM settle delay.
    Settle,
}

/// What the watcher must do after a snapshot.
#[derive(Clone, Debug, PartialEq)]
pub enum Action {
    /// The container runs (or ran): its log is to be copied from the start.
    Start(SparkContainer, ContainerStatus),
    /// An exit 137 without OOMKilled: read the status again after the settle delay, then call
    /// [`Tracker::settled`].
    Settle(String),
    /// The container's end, final: report it. `found_by` is where its exit was first seen (a relist:
    /// no event reported it).
    End(ContainerEnd, Origin),
}

#[derive(Debug)]
struct Known {
    container: SparkContainer,
    status: ContainerStatus,
    started: bool,
    settling: bool,
    /// Where the exit was first seen.
    exit_seen_by: Option<Origin>,
}

/// The containers seen, and the ends already reported.
#[derive(Debug, Default)]
pub struct Tracker {
    known: HashMap<String, Known>,
    /// Container ids whose end was reported, with how many relists in a row did not list them.
    ended: HashMap<String, u8>,
}

/// The rank of a snapshot: state first, then the finish time. UNKNOWN says nothing new.
fn rank(status: &ContainerStatus) -> (u8, i64) {
    let state = match status.state() {
        ContainerState::ContainerCreated | ContainerState::ContainerUnknown => 0,
        ContainerState::ContainerRunning => 1,
        ContainerState::ContainerExited => 2,
    };
    (state, status.finished_at)
}

fn is_exited(status: &ContainerStatus) -> bool {
    status.state() == ContainerState::ContainerExited
}

/// Whether `new` replaces `old`. At equal rank the later snapshot wins (a re-read may carry a reason set
/// late), except that an OOMKilled reason is never replaced by another reason for the same exit.
fn supersedes(new: &ContainerStatus, old: &ContainerStatus) -> bool {
    match rank(new).cmp(&rank(old)) {
        std::cmp::Ordering::Greater => true,
        std::cmp::Ordering::Less => false,
        std::cmp::Ordering::Equal => !(old.reason == OOM_KILLED && new.reason != OOM_KILLED),
    }
}

/// An exit that may still turn out to be an OOM kill: containerd records OOMKilled after the exit,
/// without an event.
fn needs_settling(status: &ContainerStatus) -> bool {
    status.exit_code == SIGKILL_EXIT && status.reason != OOM_KILLED
}

/// How many relists in a row must miss an ended container before it is forgotten: a late or duplicated
/// event for it still finds it in between.
const FORGET_AFTER_RELISTS: u8 = 2;

impl Tracker {
    /// A tracker that already reported these containers' ends (a previous run of the agent did).
    pub fn remembering(container_ids: impl IntoIterator<Item = String>) -> Self {
        Self {
            known: HashMap::new(),
            ended: container_ids.into_iter().map(|id| (id, 0)).collect(),
        }
    }

    /// Merges one snapshot of a Spark container.
    pub fn observe(&mut self, container: SparkContainer, status: ContainerStatus, origin: Origin) -> Vec<Action> {
        let id = container.container_id.clone();
        if let Some(missed) = self.ended.get_mut(&id) {
            *missed = 0;
            return Vec::new();
        }
        let known = self.known.entry(id.clone()).or_insert_with(|| Known {
            container,
            status: ContainerStatus::default(),
            started: false,
            settling: false,
            exit_seen_by: None,
        });
        if !supersedes(&status, &known.status) {
            return Vec::new();
        }
        known.status = status;
        let mut actions = Vec::new();
        if !known.started && rank(&known.status).0 >= 1 {
            known.started = true;
            actions.push(Action::Start(known.container.clone(), known.status.clone()));
        }
        if !is_exited(&known.status) {
            return actions;
        }
        known.exit_seen_by.get_or_insert(origin);
        if known.settling {
            // The reason arrived before the re-read: nothing left to wait for.
            if known.status.reason == OOM_KILLED {
                actions.extend(self.finish(&id));
            }
        } else if needs_settling(&known.status) {
            known.settling = true;
            actions.push(Action::Settle(id));
        } else {
            actions.extend(self.finish(&id));
        }
        actions
    }

    /// The settle delay of a container passed; `reread` is its status read again (None when the runtime
    /// no longer has it). Its end is final now.
    pub fn settled(&mut self, container_id: &str, reread: Option<ContainerStatus>) -> Vec<Action> {
        let Some(known) = self.known.get_mut(container_id) else {
            return Vec::new();
        };
        if !known.settling {
            return Vec::new();
        }
        if let Some(status) = reread
            && status.id == container_id
            && supersedes(&status, &known.status)
        {
            known.status = status;
        }
        self.finish(container_id).into_iter().collect()
    }

    fn finish(&mut self, id: &str) -> Option<Action> {
        let known = self.known.remove(id)?;
        self.ended.insert(id.to_owned(), 0);
        Some(Action::End(
            ContainerEnd {
                container: known.container,
                status: known.status,
            },
            known.exit_seen_by.unwrap_or(Origin::Event),
        ))
    }

    /// Whether this container's end was reported already.
    pub fn is_ended(&self, container_id: &str) -> bool {
        self.ended.contains_key(container_id)
    }

    /// The state this container is known in, if it is tracked and not ended.
    pub fn known_state(&self, container_id: &str) -> Option<ContainerState> {
        self.known.get(container_id).map(|k| k.status.state())
    }

    /// After a relist that listed `listed`: containers the runtime no longer has are forgotten. A
    /// tracked container that vanished without an exit being seen is returned (its end is lost to the
    /// agent; the operator's pod watch covers it). Ended ones are kept until [`FORGET_AFTER_RELISTS`]
    /// relists in a row missed them.
    pub fn relisted(&mut self, listed: &HashSet<String>) -> Vec<SparkContainer> {
        self.ended.retain(|id, missed| {
            if listed.contains(id) {
                *missed = 0;
                true
            } else {
                *missed += 1;
                *missed < FORGET_AFTER_RELISTS
            }
        });
        let vanished: Vec<String> = self
            .known
            .iter()
            .filter(|(id, known)| !listed.contains(*id) && !known.settling && !is_exited(&known.status))
            .map(|(id, _)| id.clone())
            .collect();
        vanished
            .into_iter()
            .filter_map(|id| self.known.remove(&id))
            .map(|k| k.container)
            .collect()
    }

    /// How many containers are tracked (live or settling) and remembered as ended.
    pub fn sizes(&self) -> (usize, usize) {
        (self.known.len(), self.ended.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use spark_operator_api::labels::SparkRole;
    use spark_operator_proto::cri::v1::ContainerMetadata;

    fn container(id: &str) -> SparkContainer {
        SparkContainer {
            namespace: "jobs".into(),
            app_name: "pi".into(),
            submission_id: "s1".into(),
            spark_app_id: None,
            pod_name: "pi-exec-1".into(),
            pod_uid: "u1".into(),
            role: SparkRole::Executor,
            executor_id: Some(1),
            container_name: "spark-kubernetes-executor".into(),
            container_id: id.into(),
            attempt: 0,
        }
    }

    fn status(id: &str, state: ContainerState, exit_code: i32, reason: &str, finished_at: i64) -> ContainerStatus {
        ContainerStatus {
            id: id.into(),
            metadata: Some(ContainerMetadata {
                name: "spark-kubernetes-executor".into(),
                attempt: 0,
            }),
            state: state as i32,
            started_at: 10,
            finished_at,
            exit_code,
            reason: reason.into(),
            log_path: "/var/log/pods/x/0.log".into(),
            ..Default::default()
        }
    }

    fn kinds(actions: &[Action]) -> Vec<String> {
        actions
            .iter()
            .map(|a| match a {
                Action::Start(..) => "start".to_owned(),
                Action::Settle(id) => format!("settle {id}"),
                Action::End(end, origin) => format!(
                    "end {} {} {} {origin:?}",
                    end.container.container_id, end.status.exit_code, end.status.reason
                ),
            })
            .collect()
    }

    #[test]
    fn stopped_before_started_ends_once_and_the_late_started_changes_nothing() {
        let mut tracker = Tracker::default();
        let exited = status("c1", ContainerState::ContainerExited, 1, "Error", 50);
        let running = status("c1", ContainerState::ContainerRunning, 0, "", 0);
        assert_eq!(
            kinds(&tracker.observe(container("c1"), exited.clone(), Origin::Event)),
            ["start", "end c1 1 Error Event"]
        );
        assert!(tracker.observe(container("c1"), running, Origin::Event).is_empty());
        assert!(
            tracker.observe(container("c1"), exited, Origin::Relist).is_empty(),
            "duplicate"
        );
        assert!(tracker.is_ended("c1"));
    }

    #[test]
    fn an_older_snapshot_never_replaces_a_newer_one() {
        let mut tracker = Tracker::default();
        let running = status("c1", ContainerState::ContainerRunning, 0, "", 0);
        let created = status("c1", ContainerState::ContainerCreated, 0, "", 0);
        assert_eq!(
            kinds(&tracker.observe(container("c1"), running.clone(), Origin::Event)),
            ["start"]
        );
        assert!(tracker.observe(container("c1"), created, Origin::Event).is_empty());
        assert!(
            tracker.observe(container("c1"), running, Origin::Event).is_empty(),
            "started once"
        );
        assert_eq!(tracker.known_state("c1"), Some(ContainerState::ContainerRunning));
        // The exit found by a relist is a repair: no event told of it.
        let exited = status("c1", ContainerState::ContainerExited, 0, "Completed", 70);
        assert_eq!(
            kinds(&tracker.observe(container("c1"), exited, Origin::Relist)),
            ["end c1 0 Completed Relist"]
        );
    }

    #[test]
    fn exit_137_without_oomkilled_waits_for_the_reread() {
        let mut tracker = Tracker::default();
        let killed = status("c1", ContainerState::ContainerExited, 137, "Error", 50);
        assert_eq!(
            kinds(&tracker.observe(container("c1"), killed.clone(), Origin::Event)),
            ["start", "settle c1"]
        );
        // A duplicate while settling does not end it either.
        assert!(tracker.observe(container("c1"), killed, Origin::Event).is_empty());
        let oom = status("c1", ContainerState::ContainerExited, 137, OOM_KILLED, 50);
        assert_eq!(
            kinds(&tracker.settled("c1", Some(oom.clone()))),
            ["end c1 137 OOMKilled Event"]
        );
        assert!(tracker.settled("c1", Some(oom)).is_empty(), "once");

        // A 137 that stays Error (killed after its grace period) ends as Error after the re-read.
        let killed = status("c2", ContainerState::ContainerExited, 137, "Error", 60);
        tracker.observe(container("c2"), killed, Origin::Event);
        assert_eq!(kinds(&tracker.settled("c2", None)), ["end c2 137 Error Event"]);
    }

    #[test]
    fn an_oomkilled_snapshot_while_settling_ends_it_at_once_and_is_never_downgraded() {
        let mut tracker = Tracker::default();
        tracker.observe(
            container("c1"),
            status("c1", ContainerState::ContainerExited, 137, "Error", 50),
            Origin::Event,
        );
        assert_eq!(
            kinds(&tracker.observe(
                container("c1"),
                status("c1", ContainerState::ContainerExited, 137, OOM_KILLED, 50),
                Origin::Event
            )),
            ["end c1 137 OOMKilled Event"]
        );
        assert!(tracker.settled("c1", None).is_empty());
        let oom = status("c9", ContainerState::ContainerExited, 137, OOM_KILLED, 50);
        let error = status("c9", ContainerState::ContainerExited, 137, "Error", 50);
        assert!(!supersedes(&error, &oom));
        assert!(supersedes(&oom, &error));
    }

    #[test]
    fn ends_reported_by_a_previous_run_are_not_reported_again() {
        let mut tracker = Tracker::remembering(["c1".to_owned()]);
        let exited = status("c1", ContainerState::ContainerExited, 0, "Completed", 50);
        assert!(tracker.observe(container("c1"), exited, Origin::Relist).is_empty());
        let other = status("c2", ContainerState::ContainerExited, 0, "Completed", 50);
        assert_eq!(
            kinds(&tracker.observe(container("c2"), other, Origin::Relist)),
            ["start", "end c2 0 Completed Relist"]
        );
    }

    #[test]
    fn relists_forget_ended_containers_only_after_missing_them_twice() {
        let mut tracker = Tracker::default();
        let exited = status("c1", ContainerState::ContainerExited, 0, "Completed", 50);
        tracker.observe(container("c1"), exited.clone(), Origin::Event);
        tracker.observe(
            container("c2"),
            status("c2", ContainerState::ContainerRunning, 0, "", 0),
            Origin::Event,
        );
        let none = HashSet::new();
        // c2 vanished while running: returned as lost.
        let lost = tracker.relisted(&none);
        assert_eq!(lost.iter().map(|c| c.container_id.as_str()).collect::<Vec<_>>(), ["c2"]);
        assert!(tracker.is_ended("c1"));
        assert!(
            tracker
                .observe(container("c1"), exited.clone(), Origin::Event)
                .is_empty()
        );
        // The duplicate reset the count: two more relists without it are needed.
        tracker.relisted(&none);
        assert!(tracker.is_ended("c1"));
        tracker.relisted(&none);
        assert!(!tracker.is_ended("c1"));
        assert_eq!(tracker.sizes(), (0, 0));
    }
}
