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
//! Runs chain within one decision where nothing has to be waited for (RUNNING → SUCCEEDING → COMPLETED is
//! one status write with two events), which keeps writes per application low.

use std::time::Duration;

use jiff::{SignedDuration, Timestamp};

/// The longest requeue a decision asks for.
pub const MAX_REQUEUE: Duration = Duration::from_secs(24 * 3600);
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use spark_operator_api::application::{RestartPolicyType, SparkApplication};
use spark_operator_api::defaults::{
    DEFAULT_ON_FAILURE_RETRIES, DEFAULT_ON_SUBMISSION_FAILURE_RETRIES, DEFAULT_RETRY_INTERVAL_SECONDS,
};
use spark_operator_api::state::{ApplicationStateType as S, DriverState};
use spark_operator_api::status::{DriverInfo, SparkApplicationStatus, TerminationRecord};

use crate::app::conditions;
use crate::app::observe::DriverPod;
use spark_operator_api::status::condition_types::{DRIVER_SCHEDULED, EXECUTORS_STARVED};

/// Time limits of the state machine.
#[derive(Clone, Debug, PartialEq)]
pub struct Timing {
    /// How long a driver may stay stuck (image pull, unschedulable, config error); None: forever.
    pub driver_start_timeout: Option<Duration>,
    /// How long after a submission a missing driver pod is put down to a lagging cache.
    pub driver_pod_creation_grace: Duration,
    /// TTL of terminated applications without `spec.timeToLiveSeconds`; None: kept forever.
    pub default_ttl: Option<Duration>,
    /// How long past its deletion deadline a deleted driver pod may go without reporting an exit before
    /// it is recorded as deleted without one (its node is gone).
    pub deletion_slack: Duration,
    /// How long a driver may wait for capacity before the attempt fails; None: as long as it takes.
    pub capacity_timeout: Option<Duration>,
    /// How long executors of a running driver may wait for capacity before `ExecutorsStarved`; None: never.
    pub executor_starvation_threshold: Option<Duration>,
}

impl Default for Timing {
    fn default() -> Self {
        Self {
            driver_start_timeout: Some(Duration::from_secs(300)),
            driver_pod_creation_grace: Duration::from_secs(10),
            default_ttl: None,
            deletion_slack: Duration::from_secs(30),
            capacity_timeout: None,
            executor_starvation_threshold: Some(Duration::from_secs(600)),
        }
    }
}

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

/// A state transition, which becomes an Event and a log line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Transition {
    pub from: S,
    pub to: S,
    pub reason: &'static str,
    pub message: String,
    pub warning: bool,
}

/// Something worth an Event that is not a state transition: a condition that changed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Notice {
    pub reason: &'static str,
    pub message: String,
    pub warning: bool,
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
    pub const SUBMITTED: &str = "SparkApplicationSubmitted";
    pub const SUBMISSION_FAILED: &str = "SparkApplicationSubmissionFailed";
    pub const RUNNING: &str = "SparkDriverRunning";
    pub const PENDING: &str = "SparkDriverPending";
    pub const DRIVER_UNKNOWN: &str = "SparkDriverUnknown";
    pub const DRIVER_COMPLETED: &str = "SparkDriverCompleted";
    pub const DRIVER_FAILED: &str = "SparkDriverFailed";
    pub const DRIVER_NOT_FOUND: &str = "SparkDriverNotFound";
    pub const DRIVER_START_TIMEOUT: &str = "SparkDriverStartTimeout";
    pub const COMPLETED: &str = "SparkApplicationCompleted";
    pub const FAILED: &str = "SparkApplicationFailed";
    pub const PENDING_RERUN: &str = "SparkApplicationPendingRerun";
    pub const INVALIDATING: &str = "SparkApplicationSpecUpdated";
    pub const SUSPENDING: &str = "SparkApplicationSuspending";
    pub const SUSPENDED: &str = "SparkApplicationSuspended";
    pub const RESUMING: &str = "SparkApplicationResuming";
    pub const INVALID: &str = "SparkApplicationInvalid";
    /// The driver waits for room on a node (condition DriverScheduled=False).
    pub const WAITING_FOR_CAPACITY: &str = "WaitingForCapacity";
    /// The driver was placed on a node after waiting (condition DriverScheduled=True).
    pub const DRIVER_SCHEDULED: &str = "DriverScheduled";
    /// A driver no node can take (condition DriverScheduled=False).
    pub const UNSCHEDULABLE: &str = "Unschedulable";
    /// Executors of a running driver waited for room past the threshold (condition ExecutorsStarved=True).
    pub const EXECUTORS_STARVED: &str = "ExecutorsStarved";
    /// Executors stopped waiting for room (condition ExecutorsStarved=False).
    pub const EXECUTORS_FED: &str = "ExecutorsScheduled";
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
pub fn driver_pod_name(app: &SparkApplication) -> String {
    spark_operator_api::naming::driver_pod_name(
        app.metadata.name.as_deref().unwrap_or_default(),
        app.spec.driver.pod_name.as_deref(),
        &app.spec.spark_conf,
    )
}

/// The submission claimed but not yet confirmed, if any.
pub fn submission_in_flight(status: &SparkApplicationStatus) -> Option<&str> {
    let claimed = conditions::get(&status.conditions, conditions::SUBMITTED)
        .is_some_and(|c| c.status == "False" && c.reason == conditions::REASON_SUBMITTING);
    (claimed && !status.submission_id.is_empty()).then_some(status.submission_id.as_str())
}

/// Timestamps are stored with second precision; keeping them so makes "did the status change" exact.
fn seconds(t: Timestamp) -> Time {
    Time(Timestamp::from_second(t.as_second()).unwrap_or(t))
}

/// The restart policy with the webhook's defaults filled in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Retry {
    policy: RestartPolicyType,
    on_failure: Option<i32>,
    on_submission_failure: Option<i32>,
    failure_interval: i64,
    submission_interval: i64,
}

impl Retry {
    fn of(app: &SparkApplication) -> Self {
        let p = &app.spec.restart_policy;
        let policy = p.policy_type();
        let default_count = |count: Option<i32>, default: i32| match policy {
            RestartPolicyType::OnFailure => Some(count.unwrap_or(default)),
            _ => count,
        };
        Self {
            policy,
            on_failure: default_count(p.on_failure_retries, DEFAULT_ON_FAILURE_RETRIES),
            on_submission_failure: default_count(
                p.on_submission_failure_retries,
                DEFAULT_ON_SUBMISSION_FAILURE_RETRIES,
            ),
            failure_interval: p
                .on_failure_retry_interval
                .unwrap_or(DEFAULT_RETRY_INTERVAL_SECONDS)
                .max(1),
            submission_interval: p
                .on_submission_failure_retry_interval
                .unwrap_or(DEFAULT_RETRY_INTERVAL_SECONDS)
                .max(1),
        }
    }

    /// Kubeflow's ShouldRetry: attempts so far ≤ allowed retries (None: unbounded).
    fn allows(self, attempts: i32, limit: Option<i32>) -> bool {
        match self.policy {
            RestartPolicyType::Never => false,
            RestartPolicyType::OnFailure | RestartPolicyType::Always => limit.is_none_or(|l| attempts <= l),
        }
    }
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
pub enum SubmitOutcome {
    /// The driver pod was created.
    Created,
    /// A driver pod of this very submission already existed (a restart or leader change).
    Adopted,
    /// The submission cannot succeed as is: a pod of that name belongs to something else, the API
    /// refused the objects, the builders refused the spec.
    Failed { message: String },
}

/// The status after the submission's objects were created, or not.
pub fn after_submit(
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

/// SUBMITTED, RUNNING, UNKNOWN: follow the driver pod of the current submission.
fn follow_driver(input: &Input<'_>, d: &mut Decision) {
    let current = d.status.submission_id.clone();
    let pod = match input.driver {
        DriverObservation::Present(pod) if pod.submission_id.as_deref() == Some(current.as_str()) => pod,
        _ => return driver_missing(input, d),
    };
    if !pod.spark_app_id.as_deref().unwrap_or_default().is_empty() {
        d.status.spark_application_id = pod.spark_app_id.clone().unwrap_or_default();
    }
    if let Some(termination) = &pod.termination {
        return finish_run(input, d, termination.clone());
    }
    // A node agent saw the driver end while its pod shows nothing yet (or never will: a kubelet that
    // stopped syncing it, a deletion in progress): the recorded end decides.
    if let Some(record) = d.status.driver_termination.clone() {
        return finish_run(input, d, record);
    }
    if let Some(deletion) = pod.deletion {
        // Deleted while running: its exit comes as the kubelet stops it. A pod whose node is gone never
        // reports one; after the deadline it is recorded as deleted without an exit code.
        let give_up = later(
            deletion.deadline,
            SignedDuration::try_from(input.timing.deletion_slack).unwrap_or_default(),
        );
        if input.now >= give_up {
            let record = TerminationRecord {
                pod_name: pod.name.clone(),
                reason: Some("DriverPodDeleted".into()),
                message: Some("the driver pod was deleted and never reported an exit".into()),
                finished_at: Some(seconds(input.now)),
                observed_by: Some(spark_operator_api::state::TerminationObserver::Finalizer),
                ..TerminationRecord::default()
            };
            return finish_run(input, d, record);
        }
        d.requeue_in(give_up.duration_since(input.now));
    }
    note_scheduling(input, d, pod);
    if let Some(record) = start_timed_out(input, d, pod) {
        // The stuck pod would hold its quota forever; its failure is recorded, so it can go.
        d.act(Action::DeleteDriver {
            pod_name: pod.name.clone(),
        });
        return finish_run(input, d, record);
    }
    let (to, reason, warning) = match pod.state {
        DriverState::Pending => (S::Submitted, reasons::PENDING, false),
        DriverState::Running => (S::Running, reasons::RUNNING, false),
        // Terminal phase without a container exit (e.g. evicted before the container started).
        DriverState::Completed | DriverState::Failed => {
            let record = TerminationRecord {
                pod_name: pod.name.clone(),
                reason: Some(
                    if pod.state == DriverState::Completed {
                        "Completed"
                    } else {
                        "PodFailed"
                    }
                    .into(),
                ),
                finished_at: Some(seconds(input.now)),
                observed_by: Some(spark_operator_api::state::TerminationObserver::PodWatch),
                ..TerminationRecord::default()
            };
            return finish_run(input, d, record);
        }
        DriverState::Unknown => (S::Unknown, reasons::DRIVER_UNKNOWN, true),
    };
    if to == S::Running {
        executors_starved(input, d);
        conditions::set(
            &mut d.status.conditions,
            conditions::RUNNING,
            true,
            "DriverRunning",
            format!("driver pod {} is running", pod.name),
            input.now,
            input.app.metadata.generation,
        );
    }
    if d.status.application_state.state != to {
        d.go(to, reason, format!("driver pod {} is {}", pod.name, pod.state), warning);
    }
}

/// What the scheduler says of the driver, as `DriverScheduled`: False while it waits for room
/// (`WaitingForCapacity`) or no node can take it (`Unschedulable`), True once it is placed after either. A
/// pod no scheduler has looked at yet says nothing: that is every pod's first moment.
fn note_scheduling(input: &Input<'_>, d: &mut Decision, pod: &DriverPod) {
    match pod.start_problem.as_ref() {
        Some(problem) if problem.waiting_for_capacity => d.flag(
            input,
            DRIVER_SCHEDULED,
            false,
            reasons::WAITING_FOR_CAPACITY,
            format!("driver pod {} waits for room on a node: {}", pod.name, problem.message),
            false,
        ),
        Some(problem) if problem.reason == crate::app::observe::UNSCHEDULABLE => d.flag(
            input,
            DRIVER_SCHEDULED,
            false,
            reasons::UNSCHEDULABLE,
            format!("driver pod {}: {}", pod.name, problem.message),
            true,
        ),
        _ if pod.placed
            && conditions::get(&d.status.conditions, DRIVER_SCHEDULED).is_some_and(|c| c.status != "True") =>
        {
            d.flag(
                input,
                DRIVER_SCHEDULED,
                true,
                reasons::DRIVER_SCHEDULED,
                format!("driver pod {} was placed on a node", pod.name),
                false,
            )
        }
        _ => {}
    }
}

/// The termination to record for a driver that has not started in time: one waiting for room after the
/// (optional) capacity timeout, any other stuck one after the start timeout; requeued for the deadline
/// until then.
fn start_timed_out(input: &Input<'_>, d: &mut Decision, pod: &DriverPod) -> Option<TerminationRecord> {
    let problem = pod.start_problem.as_ref()?;
    let (timeout, why) = if problem.waiting_for_capacity {
        let timeout = input.timing.capacity_timeout?;
        let why = format!(
            "the driver waited for capacity longer than {}s: {}",
            timeout.as_secs(),
            problem.message
        );
        (timeout, why)
    } else {
        let timeout = input.timing.driver_start_timeout?;
        let why = format!(
            "the driver did not start within {}s: {}: {}",
            timeout.as_secs(),
            problem.reason,
            problem.message
        );
        (timeout, why)
    };
    let since = pod
        .created_at
        .or_else(|| d.status.last_submission_attempt_time.as_ref().map(|t| t.0))
        .unwrap_or(input.now);
    if !d.reached(input.now, since, timeout) {
        return None;
    }
    Some(TerminationRecord {
        pod_name: pod.name.clone(),
        reason: Some(problem.reason.clone()),
        message: Some(why),
        finished_at: Some(seconds(input.now)),
        observed_by: Some(spark_operator_api::state::TerminationObserver::PodWatch),
        ..TerminationRecord::default()
    })
}

/// A running driver: `ExecutorsStarved` while some executor has waited for room past the threshold.
fn executors_starved(input: &Input<'_>, d: &mut Decision) {
    let Some(threshold) = input.timing.executor_starvation_threshold else {
        return;
    };
    if let Some(since) = input.executors_waiting_since
        && d.reached(input.now, since, threshold)
    {
        let waited = input.now.duration_since(since).as_secs();
        d.flag(
            input,
            EXECUTORS_STARVED,
            true,
            reasons::EXECUTORS_STARVED,
            format!(
                "executors have waited {waited}s for room on a node while the driver holds its own; when \
                 many applications start at once their drivers can take all the room their executors need. \
                 Gang scheduling (spec.batchScheduler: volcano or yunikorn) starts an application only when \
                 its driver and executors fit together"
            ),
            true,
        );
    } else if conditions::get(&d.status.conditions, EXECUTORS_STARVED).is_some_and(|c| c.status == "True") {
        d.flag(
            input,
            EXECUTORS_STARVED,
            false,
            reasons::EXECUTORS_FED,
            "no executor waits for room past the threshold".to_owned(),
            false,
        );
    }
}

/// No driver pod of the current submission: known termination, cache lag, or lost.
fn driver_missing(input: &Input<'_>, d: &mut Decision) {
    if let Some(record) = d.status.driver_termination.clone() {
        return finish_run(input, d, record);
    }
    if d.status.application_state.state == S::Submitted {
        let since = d
            .status
            .last_submission_attempt_time
            .as_ref()
            .map_or(input.now, |t| t.0);
        let grace_end = later(
            since,
            SignedDuration::try_from(input.timing.driver_pod_creation_grace).unwrap_or_default(),
        );
        if input.now < grace_end {
            d.requeue_in(grace_end.duration_since(input.now));
            return;
        }
    }
    let pod = d.status.driver_info.pod_name.clone();
    let message = format!("driver pod {pod} not found, and no termination of it was recorded");
    d.status.application_state.error_message = message.clone();
    d.status.termination_time = Some(seconds(input.now));
    d.go(S::Failing, reasons::DRIVER_NOT_FOUND, message, true);
    failing(input, d);
}

/// The driver of the current run terminated: record how (first observer wins), then move on.
fn finish_run(input: &Input<'_>, d: &mut Decision, record: TerminationRecord) {
    let record = d.status.driver_termination.get_or_insert(record).clone();
    conditions::set(
        &mut d.status.conditions,
        conditions::RUNNING,
        false,
        "DriverTerminated",
        format!("driver pod {} terminated", record.pod_name),
        input.now,
        input.app.metadata.generation,
    );
    if conditions::get(&d.status.conditions, EXECUTORS_STARVED).is_some_and(|c| c.status == "True") {
        // Starvation ends with the run; a finished application must not claim its executors still wait.
        conditions::set(
            &mut d.status.conditions,
            EXECUTORS_STARVED,
            false,
            "DriverTerminated",
            "the run ended",
            input.now,
            input.app.metadata.generation,
        );
    }
    d.status.termination_time = Some(record.finished_at.clone().unwrap_or_else(|| seconds(input.now)));
    if record.succeeded() {
        d.status.application_state.error_message.clear();
        d.go(
            S::Succeeding,
            reasons::DRIVER_COMPLETED,
            "the driver exited with code 0",
            false,
        );
        succeeding(input, d);
    } else {
        let message = describe_failure(&record);
        d.status.application_state.error_message = message.clone();
        let reason = if record.exit_code.is_none()
            && record.reason.as_deref().is_some_and(|r| {
                crate::app::observe::STUCK_WAITING_REASONS.contains(&r)
                    || r == crate::app::observe::UNSCHEDULABLE
                    || r == crate::app::observe::NOT_SCHEDULED
            }) {
            reasons::DRIVER_START_TIMEOUT
        } else {
            reasons::DRIVER_FAILED
        };
        d.go(S::Failing, reason, message, true);
        failing(input, d);
    }
}

fn describe_failure(record: &TerminationRecord) -> String {
    let mut text = match record.exit_code {
        Some(code) => format!("driver container exited with code {code}"),
        None => "driver failed without an exit code".to_owned(),
    };
    if let Some(reason) = &record.reason {
        text.push_str(&format!(" ({reason})"));
    }
    if let Some(message) = record.message.as_deref().filter(|m| !m.is_empty()) {
        text.push_str(": ");
        text.push_str(message);
    }
    text
}

fn succeeding(input: &Input<'_>, d: &mut Decision) {
    let retry = Retry::of(input.app);
    // Always reruns after success unconditionally, as in Kubeflow; retry counts bound failures only.
    if retry.policy == RestartPolicyType::Always {
        pending_rerun(input, d, "restartPolicy Always: rerunning after success");
        return;
    }
    set_terminal_condition(d, input, true, "Completed", "the application completed");
    d.go(S::Completed, reasons::COMPLETED, "the application completed", false);
    terminal(input, d);
}

fn failing(input: &Input<'_>, d: &mut Decision) {
    let retry = Retry::of(input.app);
    let attempts = d.status.execution_attempts;
    if !retry.allows(attempts, retry.on_failure) {
        let message = match retry.policy {
            RestartPolicyType::Never => d.status.application_state.error_message.clone(),
            _ => format!(
                "{} (after {attempts} attempts)",
                d.status.application_state.error_message
            ),
        };
        set_terminal_condition(d, input, false, "Failed", &message);
        d.go(S::Failed, reasons::FAILED, message, true);
        terminal(input, d);
        return;
    }
    let ended = d.status.termination_time.as_ref().map_or(input.now, |t| t.0);
    let due = later(ended, backoff(retry.failure_interval, attempts));
    if input.now < due {
        d.requeue_in(due.duration_since(input.now));
        return;
    }
    pending_rerun(input, d, format!("rerunning after attempt {attempts} failed"));
}

fn submission_failed(input: &Input<'_>, d: &mut Decision) {
    if submission_in_flight(&d.status).is_some() {
        return resubmit(input, d);
    }
    let retry = Retry::of(input.app);
    let attempts = d.status.submission_attempts;
    if !retry.allows(attempts, retry.on_submission_failure) {
        let message = format!(
            "submission failed after {attempts} attempts: {}",
            d.status.application_state.error_message
        );
        d.status.termination_time = Some(seconds(input.now));
        set_terminal_condition(d, input, false, "SubmissionFailed", &message);
        d.go(S::Failed, reasons::FAILED, message, true);
        terminal(input, d);
        return;
    }
    let last = d
        .status
        .last_submission_attempt_time
        .as_ref()
        .map_or(input.now, |t| t.0);
    let due = later(last, backoff(retry.submission_interval, attempts));
    if input.now < due {
        d.requeue_in(due.duration_since(input.now));
        return;
    }
    resubmit(input, d);
}

/// `at + by`, or the last representable instant: values from specs and pods (a TTL of 2^62 seconds, a
/// creation time in year 9999) must never make time arithmetic panic.
fn later(at: Timestamp, by: SignedDuration) -> Timestamp {
    at.saturating_add(by).unwrap_or(Timestamp::MAX)
}

/// A linear retry delay, `interval × attempts` seconds, saturating.
fn backoff(interval: i64, attempts: i32) -> SignedDuration {
    SignedDuration::from_secs(interval.max(0).saturating_mul(i64::from(attempts.max(1))))
}

/// PENDING_RERUN: waits until the previous driver pod is gone, emitting events as it goes.
fn pending_rerun(input: &Input<'_>, d: &mut Decision, message: impl Into<String>) {
    d.go(S::PendingRerun, reasons::PENDING_RERUN, message, false);
    resubmit(input, d);
}

/// PENDING_RERUN, RESUMING, a retried SUBMISSION_FAILED: submit once the old driver pod is gone.
fn resubmit(input: &Input<'_>, d: &mut Decision) {
    if let Some(id) = submission_in_flight(&d.status) {
        d.act(Action::Submit {
            submission_id: id.to_owned(),
        });
        return;
    }
    if let DriverObservation::Present(pod) = input.driver {
        if pod.deletion.is_none() {
            d.act(Action::DeleteDriver {
                pod_name: pod.name.clone(),
            });
        }
        // The pod's deletion event triggers the next reconcile; the requeue is a safety net.
        d.requeue_in(SignedDuration::from_secs(5));
        return;
    }
    claim_submission(input, d);
}

/// INVALIDATING: the spec changed; stop the old run, reset the counters, rerun.
fn invalidating(input: &Input<'_>, d: &mut Decision) {
    if stop_driver(input, d) {
        return;
    }
    let status = &mut d.status;
    status.execution_attempts = 0;
    status.submission_attempts = 0;
    status.last_submission_attempt_time = None;
    status.termination_time = None;
    status.application_state.error_message.clear();
    pending_rerun(input, d, "the previous run is stopped: submitting the new spec");
}

/// SUSPENDING: stop the driver, then SUSPENDED.
fn suspending(input: &Input<'_>, d: &mut Decision) {
    if stop_driver(input, d) {
        return;
    }
    let status = &mut d.status;
    status.spark_application_id.clear();
    status.application_state.error_message.clear();
    status.driver_info = DriverInfo::default();
    conditions::remove(&mut status.conditions, conditions::RUNNING);
    d.go(S::Suspended, reasons::SUSPENDED, "the driver is stopped", true);
}

/// Deletes the driver pod if there is one; true while it is still there. Its exit (143 from our
/// SIGTERM) is not looked at.
fn stop_driver(input: &Input<'_>, d: &mut Decision) -> bool {
    let DriverObservation::Present(pod) = input.driver else {
        return false;
    };
    if pod.deletion.is_none() {
        d.act(Action::DeleteDriver {
            pod_name: pod.name.clone(),
        });
    }
    d.requeue_in(SignedDuration::from_secs(5));
    true
}

/// COMPLETED, FAILED: wait for the TTL.
fn terminal(input: &Input<'_>, d: &mut Decision) {
    let ttl = input
        .app
        .spec
        .time_to_live_seconds
        .map(|s| SignedDuration::from_secs(s.max(0)))
        .or_else(|| input.timing.default_ttl.and_then(|t| SignedDuration::try_from(t).ok()));
    let (Some(ttl), Some(ended)) = (ttl, d.status.termination_time.as_ref()) else {
        return;
    };
    let expiry = later(ended.0, ttl);
    if input.now >= expiry {
        d.act(Action::DeleteApplication);
    } else {
        d.requeue_in(expiry.duration_since(input.now));
    }
}

fn set_terminal_condition(d: &mut Decision, input: &Input<'_>, success: bool, reason: &str, message: &str) {
    let generation = input.app.metadata.generation;
    let (yes, no) = if success {
        (conditions::COMPLETE, conditions::FAILED)
    } else {
        (conditions::FAILED, conditions::COMPLETE)
    };
    conditions::set(
        &mut d.status.conditions,
        yes,
        true,
        reason,
        message,
        input.now,
        generation,
    );
    conditions::remove(&mut d.status.conditions, no);
    conditions::remove(&mut d.status.conditions, conditions::RUNNING);
}

#[cfg(test)]
#[path = "state_tests.rs"]
mod tests;
