//! SUBMITTED, RUNNING, UNKNOWN: following the driver pod of the current run, from its scheduling to its end
//! (start timeouts, waiting for capacity, starved executors, a driver gone missing, the end recorded).

use super::*;

/// SUBMITTED, RUNNING, UNKNOWN: follow the driver pod of the current submission.
pub(super) fn follow_driver(input: &Input<'_>, d: &mut Decision) {
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
pub(super) fn note_scheduling(input: &Input<'_>, d: &mut Decision, pod: &DriverPod) {
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
pub(super) fn start_timed_out(input: &Input<'_>, d: &mut Decision, pod: &DriverPod) -> Option<TerminationRecord> {
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
pub(super) fn executors_starved(input: &Input<'_>, d: &mut Decision) {
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
pub(super) fn driver_missing(input: &Input<'_>, d: &mut Decision) {
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
pub(super) fn finish_run(input: &Input<'_>, d: &mut Decision, record: TerminationRecord) {
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

pub(super) fn describe_failure(record: &TerminationRecord) -> String {
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
