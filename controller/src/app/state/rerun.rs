//! After a run: succeeding, failing and retrying (Kubeflow's linear retries), reruns, invalidation,
//! suspension, and the terminal states waiting for their TTL.

use super::*;

/// The restart policy with the webhook's defaults filled in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Retry {
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

pub(super) fn succeeding(input: &Input<'_>, d: &mut Decision) {
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

pub(super) fn failing(input: &Input<'_>, d: &mut Decision) {
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

pub(super) fn submission_failed(input: &Input<'_>, d: &mut Decision) {
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
pub(super) fn later(at: Timestamp, by: SignedDuration) -> Timestamp {
    at.saturating_add(by).unwrap_or(Timestamp::MAX)
}

/// A linear retry delay, `interval × attempts` seconds, saturating.
pub(super) fn backoff(interval: i64, attempts: i32) -> SignedDuration {
    SignedDuration::from_secs(interval.max(0).saturating_mul(i64::from(attempts.max(1))))
}

/// PENDING_RERUN: waits until the previous driver pod is gone, emitting events as it goes.
pub(super) fn pending_rerun(input: &Input<'_>, d: &mut Decision, message: impl Into<String>) {
    d.go(S::PendingRerun, reasons::PENDING_RERUN, message, false);
    resubmit(input, d);
}

/// PENDING_RERUN, RESUMING, a retried SUBMISSION_FAILED: submit once the old driver pod is gone.
pub(super) fn resubmit(input: &Input<'_>, d: &mut Decision) {
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
pub(super) fn invalidating(input: &Input<'_>, d: &mut Decision) {
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
pub(super) fn suspending(input: &Input<'_>, d: &mut Decision) {
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
pub(super) fn stop_driver(input: &Input<'_>, d: &mut Decision) -> bool {
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
pub(super) fn terminal(input: &Input<'_>, d: &mut Decision) {
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

pub(super) fn set_terminal_condition(d: &mut Decision, input: &Input<'_>, success: bool, reason: &str, message: &str) {
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
