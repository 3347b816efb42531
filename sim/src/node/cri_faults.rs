//! Scripted misbehaviour of one node's container runtime, as CRI clients (a node agent, `crictl`)
//! see it and as containerd and CRI-O really misbehave: dropped container events, STOPPED before
//! STARTED, an OOM kill whose reason arrives late, a runtime restart, and a runtime that sends no
//! events at all. The kubelet drives the runtime in-process and is not affected by any of them.
//!
//! Tests reach it through [`super::NodeHandle::cri_faults`].

use std::sync::Arc;
use std::time::Duration;

use spark_operator_proto::cri::v1 as cri;
use tokio::time::Instant;

use super::runtime::Runtime;

/// How often a fault applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Budget {
    Times(usize),
    UntilCleared,
}

impl Budget {
    fn new(times: Option<usize>) -> Self {
        times.map_or(Budget::UntilCleared, Budget::Times)
    }

    /// Uses one application; false when none is left.
    fn take(&mut self) -> bool {
        match self {
            Budget::Times(0) => false,
            Budget::Times(n) => {
                *n -= 1;
                true
            }
            Budget::UntilCleared => true,
        }
    }

    fn used_up(self) -> bool {
        self == Budget::Times(0)
    }
}

/// Container events to drop: of one kind (None: any kind).
#[derive(Debug, Clone)]
struct DropRule {
    kind: Option<i32>,
    budget: Budget,
}

/// The faults in force on one runtime; kept under the runtime's lock so that every decision is
/// made in the order the runtime generates events.
#[derive(Debug)]
pub(crate) struct FaultState {
    drops: Vec<DropRule>,
    dropped: u64,
    hold_started: Option<Budget>,
    /// Containers whose STARTED event waits for their STOPPED, in the order they started.
    held: Vec<String>,
    oom_reason_delay: Duration,
    pod_events: bool,
    down_until: Option<Instant>,
}

impl Default for FaultState {
    fn default() -> Self {
        Self {
            drops: Vec::new(),
            dropped: 0,
            hold_started: None,
            held: Vec::new(),
            oom_reason_delay: Duration::ZERO,
            pod_events: true,
            down_until: None,
        }
    }
}

impl FaultState {
    pub(crate) fn is_down(&self) -> bool {
        self.down_until.is_some_and(|until| Instant::now() < until)
    }

    pub(crate) fn pod_events(&self) -> bool {
        self.pod_events
    }

    /// When an OOM-killed container's reason becomes `OOMKilled`; None: at once.
    pub(crate) fn oom_reason_at(&self) -> Option<Instant> {
        (!self.oom_reason_delay.is_zero()).then(|| Instant::now() + self.oom_reason_delay)
    }

    /// Whether this container's STARTED event is to be held until its STOPPED.
    pub(crate) fn hold_started(&mut self, container_id: &str) -> bool {
        let Some(budget) = self.hold_started.as_mut() else {
            return false;
        };
        let hold = budget.take();
        if budget.used_up() {
            self.hold_started = None;
        }
        if hold {
            self.held.push(container_id.to_string());
        }
        hold
    }

    /// Releases the held STARTED event of this container, if there is one.
    pub(crate) fn release_started(&mut self, container_id: &str) -> bool {
        let before = self.held.len();
        self.held.retain(|id| id != container_id);
        self.held.len() != before
    }

    /// Whether a container event of this kind is dropped (and counts it).
    pub(crate) fn drop_event(&mut self, kind: cri::ContainerEventType) -> bool {
        let kind = kind as i32;
        let dropped = self
            .drops
            .iter_mut()
            .filter(|r| r.kind.is_none_or(|k| k == kind))
            .any(|r| r.budget.take());
        self.drops.retain(|r| !r.budget.used_up());
        if dropped {
            self.dropped += 1;
        }
        dropped
    }

    /// The runtime goes down: what it held in memory is lost.
    pub(crate) fn go_down(&mut self, downtime: Duration) {
        self.down_until = Some(Instant::now() + downtime);
        self.held.clear();
    }

    /// Ends every fault; returns the containers whose held STARTED events are now due.
    pub(crate) fn clear(&mut self) -> Vec<String> {
        let held = std::mem::take(&mut self.held);
        *self = FaultState {
            dropped: self.dropped,
            ..FaultState::default()
        };
        held
    }
}

/// Scripted CRI misbehaviour of one node, e.g.
/// `sim.nodes().node("sim-node-1").unwrap().cri_faults().restart_runtime(Duration::from_secs(2))`.
/// Every fault lasts until [`CriFaults::clear`] (or its own budget runs out) and changes only what
/// clients of the node's CRI socket see.
#[derive(Debug, Clone)]
pub struct CriFaults {
    runtime: Arc<Runtime>,
}

impl CriFaults {
    pub(crate) fn new(runtime: Arc<Runtime>) -> Self {
        Self { runtime }
    }

    /// Drops the next `n` container events of any kind, as containerd and CRI-O drop events when
    /// a subscriber's queue is full. Sandbox events (`container_id` = the sandbox's id) are
    /// neither dropped nor counted, so a test can tell which container events go.
    pub fn drop_next_events(&self, n: usize) {
        self.add_drop(None, Some(n));
    }

    /// Drops container events of `kind`: the next `times` of them, or every one until cleared
    /// (`None`). Sandbox events are not affected.
    pub fn drop_events_of_type(&self, kind: cri::ContainerEventType, times: Option<usize>) {
        self.add_drop(Some(kind as i32), times);
    }

    fn add_drop(&self, kind: Option<i32>, times: Option<usize>) {
        self.runtime.with_faults(|f| {
            f.drops.push(DropRule {
                kind,
                budget: Budget::new(times),
            })
        });
    }

    /// Stops dropping events (other faults stay).
    pub fn stop_dropping_events(&self) {
        self.runtime.with_faults(|f| f.drops.clear());
    }

    /// How many container events were dropped so far (containerd's `container_events_dropped`).
    pub fn dropped_events(&self) -> u64 {
        self.runtime.with_faults(|f| f.dropped)
    }

    /// The next `times` containers that start (every one until cleared: `None`) have their
    /// STARTED event held back until they stop: STOPPED is delivered first, then STARTED, whose
    /// snapshot shows the container EXITED. containerd starts a container's exit monitor before
    /// it sends STARTED, so a container that dies at once can do this. A held STARTED is lost if
    /// the runtime restarts, and sent when the fault is cleared or the container is removed.
    pub fn hold_started_until_stopped(&self, times: Option<usize>) {
        let budget = Budget::new(times);
        self.runtime
            .with_faults(|f| f.hold_started = (!budget.used_up()).then_some(budget));
    }

    /// Containers killed by the OOM killer from now on first show reason `Error` (exit code 137) in
    /// their STOPPED event, ContainerStatus and the sandbox's statuses, and `OOMKilled` only `delay`
    /// later, with no event: containerd handles the TaskOOM event apart from the exit.
    /// `Duration::ZERO` turns it off. Scripts OOM-kill a container with the pod annotation
    /// `sim.spark-operator.dev/oom-kill: "true"`.
    pub fn delay_oom_reason(&self, delay: Duration) {
        self.runtime.with_faults(|f| f.oom_reason_delay = delay);
    }

    /// The runtime restarts: every open GetContainerEvents stream ends now with `Unavailable`
    /// ("container events subscription closed by server"), every CRI call fails with
    /// `Unavailable` for `downtime`, and events of what changes meanwhile are never sent (events
    /// not yet delivered are lost with the runtime's memory). Afterwards ListContainers and
    /// ContainerStatus show the true state, as containerd rebuilds it from the task state.
    pub fn restart_runtime(&self, downtime: Duration) {
        self.runtime.restart(downtime);
    }

    /// Ends a downtime begun by [`CriFaults::restart_runtime`] now.
    pub fn end_downtime(&self) {
        self.runtime.with_faults(|f| f.down_until = None);
    }

    /// Whether the runtime is down (restarting).
    pub fn is_down(&self) -> bool {
        self.runtime.with_faults(|f| f.is_down())
    }

    /// CRI-O's `enable_pod_events`: when false (CRI-O's default), GetContainerEvents calls from
    /// now on return at once with an empty stream that closes successfully. Open streams stay.
    pub fn set_pod_events(&self, enabled: bool) {
        self.runtime.with_faults(|f| f.pod_events = enabled);
    }

    /// Ends every fault: drops stop, held STARTED events are sent now, OOM reasons are no longer
    /// delayed (a pending one keeps its time), the runtime is up, events are enabled. The count of
    /// dropped events stays.
    pub fn clear(&self) {
        self.runtime.clear_faults();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cri::ContainerEventType as T;

    #[test]
    fn drop_rules_match_kinds_and_run_out() {
        let mut f = FaultState {
            drops: vec![DropRule {
                kind: Some(T::ContainerStoppedEvent as i32),
                budget: Budget::new(Some(1)),
            }],
            ..FaultState::default()
        };
        assert!(!f.drop_event(T::ContainerStartedEvent), "another kind");
        assert!(f.drop_event(T::ContainerStoppedEvent));
        assert!(!f.drop_event(T::ContainerStoppedEvent), "used up");
        f.drops.push(DropRule {
            kind: None,
            budget: Budget::new(None),
        });
        assert!(f.drop_event(T::ContainerCreatedEvent) && f.drop_event(T::ContainerDeletedEvent));
        assert_eq!(f.dropped, 3);
        assert!(f.clear().is_empty());
        assert!(!f.drop_event(T::ContainerCreatedEvent), "cleared");
        assert_eq!(f.dropped, 3, "the count stays");
    }

    #[test]
    fn held_starts_are_released_once_and_lost_on_restart() {
        let mut f = FaultState {
            hold_started: Some(Budget::new(Some(2))),
            ..FaultState::default()
        };
        assert!(f.hold_started("a") && f.hold_started("b"));
        assert!(!f.hold_started("c"), "the budget was two containers");
        assert!(f.release_started("a"));
        assert!(!f.release_started("a"), "released once");
        assert!(!f.release_started("c"), "never held");
        f.go_down(Duration::from_secs(60));
        assert!(f.is_down());
        assert!(!f.release_started("b"), "lost with the runtime's memory");
        f.hold_started = Some(Budget::new(None));
        assert!(f.hold_started("d"));
        assert_eq!(f.clear(), vec!["d".to_string()]);
        assert!(!f.is_down());
    }
}
