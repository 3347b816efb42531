//! The SparkApplication state machine as pure functions: `(application, observed driver, now, timing)
//! -> Decision { status, actions, requeue, transitions }`. Nothing here does I/O; the reconciler
//! ([`crate::app::reconciler`]) executes the actions and writes the status.
//!
//! States and transitions are Kubeflow's (`kubeflow-study.md` §2.2), with its known faults fixed:
//! - A driver whose pod is gone is not failed when its termination is known (`status.driverTermination`,
//!   recorded by the pod watch, the driver-protection finalizer path or the node agent); nor is one whose
//!   pod still shows nothing while a node agent recorded its end.
//! - A driver stuck in ImagePullBackOff, ErrImagePull, CreateContainerConfigError, InvalidImageName or
//!   Unschedulable beyond `driver_start_timeout` fails the attempt with that reason, then retries per policy.
//! - Waiting for capacity is not failing: a driver unschedulable only for lack of room on nodes that would
//!   otherwise take it gets `DriverScheduled=False, WaitingForCapacity` and waits (up to the separate,
//!   optional `capacity_timeout`). A running driver whose executors have waited for room longer than
//!   `executor_starvation_threshold` gets `ExecutorsStarved=True`.
//! - Our own SIGTERM (suspend, invalidate, rerun) is never read as a failure: those states ignore the
//!   driver's exit.
//! - Every transition yields an app-level event, SUCCEEDING→COMPLETED and FAILING→FAILED included.
//!
//! Exactly once: a submission is first *claimed* (a new `submissionID` and the Submitted condition with
//! reason `Submitting`, written with the resourceVersion read), then its objects are created. A claimed
//! submission is always finished, never replaced, so a restart or a new leader adopts the driver pod
//! instead of making a second one.
//!
//! Retries are linear, as in Kubeflow: the n-th rerun waits `n × onFailureRetryInterval`, counted from
//! when the failed run ended (Kubeflow counts from the last submission, so a long run reruns at once);
//! the n-th resubmission waits `n × onSubmissionFailureRetryInterval` from the last submission attempt.
//! Unset retry counts follow the webhook's defaults (OnFailure: 3, Always: unbounded).
//!
//! The states after a run are [`rerun`]'s, following the driver is [`running`]'s; this file holds the
//! decision's types and the dispatch.
//!
//! Runs chain within one decision where nothing has to be waited for (RUNNING → SUCCEEDING → COMPLETED is
//! one status write with two events), which keeps writes per application low.

use std::time::Duration;

use jiff::{SignedDuration, Timestamp};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use spark_operator_api::application::{RestartPolicyType, SparkApplication};
use spark_operator_api::defaults::{
    DEFAULT_ON_FAILURE_RETRIES, DEFAULT_ON_SUBMISSION_FAILURE_RETRIES, DEFAULT_RETRY_INTERVAL_SECONDS,
};
use spark_operator_api::state::{ApplicationStateType as S, DriverState};
use spark_operator_api::status::{DriverInfo, SparkApplicationStatus, TerminationRecord};

use crate::app::observe::DriverPod;
use crate::config::Timing;
use crate::status::conditions;
pub use crate::status::events::{Notice, Transition};
use spark_operator_api::status::condition_types::{DRIVER_SCHEDULED, EXECUTORS_STARVED};

mod rerun;
mod running;

use rerun::*;
use running::*;

/// The longest requeue a decision asks for.
pub const MAX_REQUEUE: Duration = Duration::from_secs(24 * 3600);

/// The driver pod as the reconciler found it (in the cache, confirmed by a read when missing).
#[derive(Clone, Debug, PartialEq)]
pub enum DriverObservation {
    Missing,
    Present(Box<DriverPod>),
}

/// Everything a decision depends on.
#[derive(Clone, Debug)]
pub struct Input<'a> {
    pub app: &'a SparkApplication,
    pub driver: &'a DriverObservation,
    pub now: Timestamp,
    pub timing: &'a Timing,
    /// A fresh id, used only if this decision starts a new submission.
    pub new_submission_id: &'a str,
    /// The spec hash recorded at the last submission (annotation), see [`spec_hash`].
    pub recorded_spec_hash: Option<&'a str>,
    /// The current spec's hash.
    pub spec_hash: &'a str,
    /// Validation errors of the spec, one line each; an invalid new application fails at once.
    pub spec_errors: &'a [String],
    /// Since when the longest-waiting executor of the current submission has waited for capacity.
    pub executors_waiting_since: Option<Timestamp>,
}

/// Something the reconciler must do, in this order, after writing the status.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Record the spec hash on the application (before the status write claiming a submission).
    RecordSpecHash,
    /// Create (or adopt) the driver's objects for this submission, then call [`after_submit`].
    Submit { submission_id: String },
    /// Delete the driver pod (its executors and objects follow through ownerReferences).
    DeleteDriver { pod_name: String },
    /// The TTL expired: delete the SparkApplication.
    DeleteApplication,
    /// The application just ended: delete what only its runs needed (the batch scheduler's PodGroup).
    CleanUpEnded,
}

/// What to do.
#[derive(Clone, Debug, PartialEq)]
pub struct Decision {
    /// The full status to write (written only when it differs from the stored one).
    pub status: SparkApplicationStatus,
    /// Write the status only if the application is unchanged since read (claiming a submission).
    pub conditional: bool,
    pub actions: Vec<Action>,
    pub requeue: Option<Duration>,
    pub transitions: Vec<Transition>,
    pub notices: Vec<Notice>,
}

impl Decision {
    fn new(status: SparkApplicationStatus) -> Self {
        Self {
            status,
            conditional: false,
            actions: Vec::new(),
            requeue: None,
            transitions: Vec::new(),
            notices: Vec::new(),
        }
    }

    /// Sets a condition; a change of its status or reason is also noticed (an Event).
    fn flag(
        &mut self,
        input: &Input<'_>,
        type_: &str,
        status: bool,
        reason: &'static str,
        message: String,
        warning: bool,
    ) {
        let wanted = if status { "True" } else { "False" };
        let changed =
            conditions::get(&self.status.conditions, type_).is_none_or(|c| c.status != wanted || c.reason != reason);
        if changed {
            self.notices.push(Notice {
                reason,
                message: message.clone(),
                warning,
            });
        }
        conditions::set(
            &mut self.status.conditions,
            type_,
            status,
            reason,
            message,
            input.now,
            input.app.metadata.generation,
        );
    }

    fn act(&mut self, action: Action) {
        if !self.actions.contains(&action) {
            self.actions.push(action);
        }
    }

    fn requeue_in(&mut self, wait: SignedDuration) {
        // Capped: a timer further out than that is never needed (the resync comes first), and a huge one
        // would overflow the scheduler's clock.
        let wait = Duration::try_from(wait)
            .unwrap_or(Duration::ZERO)
            .clamp(Duration::from_secs(1), MAX_REQUEUE);
        self.requeue = Some(self.requeue.map_or(wait, |r| r.min(wait)));
    }

    /// Whether `limit` has passed since `since`; if not, requeued for when it will.
    fn reached(&mut self, now: Timestamp, since: Timestamp, limit: Duration) -> bool {
        let deadline = later(since, SignedDuration::try_from(limit).unwrap_or_default());
        if now >= deadline {
            return true;
        }
        self.requeue_in(deadline.duration_since(now));
        false
    }

    /// Moves to `to`, recording the transition.
    fn go(&mut self, to: S, reason: &'static str, message: impl Into<String>, warning: bool) {
        let from = self.status.application_state.state;
        self.status.application_state.state = to;
        self.transitions.push(Transition {
            from,
            to,
            reason,
            message: message.into(),
            warning,
        });
    }
}

/// Event reasons, Kubeflow's names where it has one.
pub mod reasons {
    pub(crate) const SUBMITTED: &str = "SparkApplicationSubmitted";
    pub(crate) const SUBMISSION_FAILED: &str = "SparkApplicationSubmissionFailed";
    pub(crate) const RUNNING: &str = "SparkDriverRunning";
    pub(crate) const PENDING: &str = "SparkDriverPending";
    pub(crate) const DRIVER_UNKNOWN: &str = "SparkDriverUnknown";
    pub(crate) const DRIVER_COMPLETED: &str = "SparkDriverCompleted";
    pub(crate) const DRIVER_FAILED: &str = "SparkDriverFailed";
    pub(crate) const DRIVER_NOT_FOUND: &str = "SparkDriverNotFound";
    pub(crate) const DRIVER_START_TIMEOUT: &str = "SparkDriverStartTimeout";
    pub(crate) const COMPLETED: &str = "SparkApplicationCompleted";
    pub(crate) const FAILED: &str = "SparkApplicationFailed";
    pub(crate) const PENDING_RERUN: &str = "SparkApplicationPendingRerun";
    pub(crate) const INVALIDATING: &str = "SparkApplicationSpecUpdated";
    pub(crate) const SUSPENDING: &str = "SparkApplicationSuspending";
    pub(crate) const SUSPENDED: &str = "SparkApplicationSuspended";
    pub(crate) const RESUMING: &str = "SparkApplicationResuming";
    pub(crate) const INVALID: &str = "SparkApplicationInvalid";
    /// The driver waits for room on a node (condition DriverScheduled=False).
    pub(crate) const WAITING_FOR_CAPACITY: &str = "WaitingForCapacity";
    /// The driver was placed on a node after waiting (condition DriverScheduled=True).
    pub(crate) const DRIVER_SCHEDULED: &str = "DriverScheduled";
    /// A driver no node can take (condition DriverScheduled=False).
    pub(crate) const UNSCHEDULABLE: &str = "Unschedulable";
    /// Executors of a running driver waited for room past the threshold (condition ExecutorsStarved=True).
    pub(crate) const EXECUTORS_STARVED: &str = "ExecutorsStarved";
    /// Executors stopped waiting for room (condition ExecutorsStarved=False).
    pub(crate) const EXECUTORS_FED: &str = "ExecutorsScheduled";
}

/// Hash of the parts of the spec whose change reruns the application: everything but `suspend` and
/// `timeToLiveSeconds` (as Kubeflow's event filter).
pub fn spec_hash(app: &SparkApplication) -> String {
    let mut spec = app.spec.clone();
    spec.suspend = None;
    spec.time_to_live_seconds = None;
    let bytes = serde_json::to_vec(&spec).unwrap_or_default();
    format!("{:x}", md5::compute(bytes))
}

/// The driver pod's name for the application.
pub(crate) fn driver_pod_name(app: &SparkApplication) -> String {
    spark_operator_api::naming::driver_pod_name(
        app.metadata.name.as_deref().unwrap_or_default(),
        app.spec.driver.pod_name.as_deref(),
        &app.spec.spark_conf,
    )
}

/// The submission claimed but not yet confirmed, if any.
pub(crate) fn submission_in_flight(status: &SparkApplicationStatus) -> Option<&str> {
    let claimed = conditions::get(&status.conditions, conditions::SUBMITTED)
        .is_some_and(|c| c.status == "False" && c.reason == conditions::REASON_SUBMITTING);
    (claimed && !status.submission_id.is_empty()).then_some(status.submission_id.as_str())
}

/// Timestamps are stored with second precision; keeping them so makes "did the status change" exact.
fn seconds(t: Timestamp) -> Time {
    Time(Timestamp::from_second(t.as_second()).unwrap_or(t))
}

/// The state machine's decision for one reconcile.
pub fn decide(input: &Input<'_>) -> Decision {
    let mut d = decide_state(input);
    // The hash is recorded with every new submission (the spec it ran), and on applications that have
    // none yet (written by Kubeflow, or failed validation before any submission).
    let recorded = input.recorded_spec_hash;
    if input.app.metadata.deletion_timestamp.is_none()
        && recorded != Some(input.spec_hash)
        && (d.conditional || recorded.is_none())
    {
        d.actions.insert(0, Action::RecordSpecHash);
    }
    if d.transitions.iter().any(|t| t.to.is_terminal()) {
        d.act(Action::CleanUpEnded);
    }
    d
}

fn decide_state(input: &Input<'_>) -> Decision {
    let app = input.app;
    let mut d = Decision::new(app.status.clone().unwrap_or_default());
    let state = d.status.application_state.state;
    let generation = app.metadata.generation;
    if app.metadata.deletion_timestamp.is_some() {
        // Children go with the application through ownerReferences; pods release their finalizers.
        return d;
    }

    // A spec change reruns the application; a change of suspend or TTL alone only moves the generation.
    let in_flight = submission_in_flight(&d.status).is_some();
    let hash_changed = input.recorded_spec_hash.is_some_and(|h| h != input.spec_hash);
    let generation_moved = generation.is_some() && d.status.observed_generation != generation;
    let submitted = state != S::New || in_flight;
    if hash_changed && generation_moved && submitted && !matches!(state, S::Invalidating | S::Suspended) {
        d.status.observed_generation = generation;
        d.go(
            S::Invalidating,
            reasons::INVALIDATING,
            "the spec changed: rerunning",
            false,
        );
        invalidating(input, &mut d);
        return d;
    }
    d.status.observed_generation = generation;

    let suspend = app.spec.suspend == Some(true);
    if suspend && !state.is_terminal() && !state.is_suspended() {
        d.go(
            S::Suspending,
            reasons::SUSPENDING,
            "spec.suspend is true: stopping the driver",
            true,
        );
        suspending(input, &mut d);
        return d;
    }

    match state {
        S::New => new(input, &mut d),
        S::Submitted | S::Running | S::Unknown => follow_driver(input, &mut d),
        S::Succeeding => succeeding(input, &mut d),
        S::Failing => failing(input, &mut d),
        S::SubmissionFailed => submission_failed(input, &mut d),
        S::PendingRerun | S::Resuming => resubmit(input, &mut d),
        S::Invalidating => invalidating(input, &mut d),
        S::Suspending => suspending(input, &mut d),
        S::Suspended => {
            if !suspend {
                d.go(
                    S::Resuming,
                    reasons::RESUMING,
                    "spec.suspend is false: resubmitting",
                    true,
                );
                resubmit(input, &mut d);
            }
        }
        S::Completed | S::Failed => terminal(input, &mut d),
    }
    d
}

fn new(input: &Input<'_>, d: &mut Decision) {
    if let Some(id) = submission_in_flight(&d.status) {
        d.act(Action::Submit {
            submission_id: id.to_owned(),
        });
        return;
    }
    claim_submission(input, d);
}

/// Starts a new submission: a new id, the attempt counted, the previous run's details cleared. An
/// invalid spec fails instead: retrying cannot help, changing the spec reruns it.
fn claim_submission(input: &Input<'_>, d: &mut Decision) {
    if !input.spec_errors.is_empty() {
        let message = format!("invalid spec: {}", input.spec_errors.join("; "));
        d.status.application_state.error_message = message.clone();
        d.status.termination_time = Some(seconds(input.now));
        set_terminal_condition(d, input, false, reasons::INVALID, &message);
        d.go(S::Failed, reasons::INVALID, message, true);
        return;
    }
    let status = &mut d.status;
    status.submission_id = input.new_submission_id.to_owned();
    status.last_submission_attempt_time = Some(seconds(input.now));
    status.submission_attempts = status.submission_attempts.saturating_add(1);
    status.driver_info = DriverInfo {
        pod_name: driver_pod_name(input.app),
        ..DriverInfo::default()
    };
    status.spark_application_id.clear();
    status.termination_time = None;
    status.application_state.error_message.clear();
    status.driver_termination = None;
    // Reports of the previous run's executors: counted with it or not at all.
    status.uncounted_executor_terminations.clear();
    status.executor_counts = None;
    status.recent_executor_failures.clear();
    status.recent_executors.clear();
    status.executor_state.clear();
    for type_ in [conditions::RUNNING, conditions::COMPLETE, conditions::FAILED] {
        conditions::remove(&mut status.conditions, type_);
    }
    conditions::set(
        &mut status.conditions,
        conditions::SUBMITTED,
        false,
        conditions::REASON_SUBMITTING,
        format!("creating the driver pod for submission {}", input.new_submission_id),
        input.now,
        input.app.metadata.generation,
    );
    d.conditional = true;
    d.act(Action::Submit {
        submission_id: input.new_submission_id.to_owned(),
    });
}

/// How creating the driver's objects went.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum SubmitOutcome {
    /// The driver pod was created.
    Created,
    /// A driver pod of this very submission already existed (a restart or leader change).
    Adopted,
    /// The submission cannot succeed as is: a pod of that name belongs to something else, the API
    /// refused the objects, the builders refused the spec.
    Failed { message: String },
}

/// The status after the submission's objects were created, or not.
pub(crate) fn after_submit(
    app: &SparkApplication,
    status: &SparkApplicationStatus,
    outcome: &SubmitOutcome,
    now: Timestamp,
) -> Decision {
    let mut d = Decision::new(status.clone());
    let generation = app.metadata.generation;
    let pod = &d.status.driver_info.pod_name.clone();
    let id = d.status.submission_id.clone();
    match outcome {
        SubmitOutcome::Created | SubmitOutcome::Adopted => {
            let how = if *outcome == SubmitOutcome::Created {
                "created"
            } else {
                "adopted"
            };
            let message = format!("driver pod {pod} {how} for submission {id}");
            d.status.execution_attempts = d.status.execution_attempts.saturating_add(1);
            conditions::set(
                &mut d.status.conditions,
                conditions::SUBMITTED,
                true,
                "DriverPodCreated",
                message.clone(),
                now,
                generation,
            );
            d.go(S::Submitted, reasons::SUBMITTED, message, false);
        }
        SubmitOutcome::Failed { message } => {
            d.status.application_state.error_message = message.clone();
            conditions::set(
                &mut d.status.conditions,
                conditions::SUBMITTED,
                false,
                "SubmissionFailed",
                message.clone(),
                now,
                generation,
            );
            d.go(S::SubmissionFailed, reasons::SUBMISSION_FAILED, message.clone(), true);
        }
    }
    d
}

#[cfg(test)]
mod tests;
