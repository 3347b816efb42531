//! Writing an application's status from the reconciler: the executors rendered in, the node agents'
//! reports folded into the counts, the byte budget fitted, the write paced while only executors change;
//! then the transitions' Events and Kubeflow's metrics.

use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use kube::api::Api;
use spark_operator_api::SparkApplication;
use spark_operator_api::state::ApplicationStateType as S;
use spark_operator_api::status::SparkApplicationStatus;

use crate::app::context::Ctx;
use crate::app::error::Error;
use crate::app::executors::Executors;
use crate::status::events::{Notice, Transition};
use crate::status::write as status;

/// How often a running application's status is written when only its executors changed (their counts
/// and records, the node agents' reports folded into them).
const EXECUTOR_WRITE_INTERVAL: Duration = Duration::from_millis(500);
/// Reported executor ends waiting that are folded and written at once, whenever the last write was.
const FOLD_AT_ONCE: usize = 64;

/// How long a status write waits, if at all. While an application runs, a write that changes only its
/// executors goes out at most every [`EXECUTOR_WRITE_INTERVAL`] after this leader's last write: at
/// dynamic-allocation churn every executor's start and end would otherwise be a write, and those writes
/// would conflict with the receivers' conditional writes of the agents' reports (each conflict is a read
/// and a write again on both sides). The executors are in the tracker meanwhile (the truth; the status
/// is its view); a state change, a terminal state or a long list of reports waiting goes out at once.
fn executor_write_wait(
    stored: Option<&SparkApplicationStatus>,
    wanted: &SparkApplicationStatus,
    since_last_write: Option<Duration>,
) -> Option<Duration> {
    let (stored, since) = (stored?, since_last_write?);
    if since >= EXECUTOR_WRITE_INTERVAL
        || wanted.application_state.state.is_terminal()
        || stored.uncounted_executor_terminations.len() >= FOLD_AT_ONCE
    {
        return None;
    }
    let mut without_executors = wanted.clone();
    without_executors.executor_counts.clone_from(&stored.executor_counts);
    without_executors.executor_state.clone_from(&stored.executor_state);
    without_executors.recent_executors.clone_from(&stored.recent_executors);
    without_executors
        .recent_executor_failures
        .clone_from(&stored.recent_executor_failures);
    without_executors
        .uncounted_executor_terminations
        .clone_from(&stored.uncounted_executor_terminations);
    status::unchanged(Some(stored), &without_executors).then(|| EXECUTOR_WRITE_INTERVAL - since)
}

/// Renders the executors into `wanted`, fits the byte budget, and writes if anything changed (unless the
/// write waits: [`executor_write_wait`]); then publishes the transitions' events and metrics. Returns the
/// application as stored, and when a write that waits is due.
pub(crate) async fn write_status(
    ctx: &Ctx,
    api: &Api<SparkApplication>,
    app: &Arc<SparkApplication>,
    mut wanted: SparkApplicationStatus,
    transitions: &[Transition],
    notices: &[Notice],
) -> Result<(Arc<SparkApplication>, Option<Duration>), Error> {
    let namespace = app.metadata.namespace.as_deref().unwrap_or_default();
    let name = app.metadata.name.clone().unwrap_or_default();
    let mut since_last_write = None;
    if let Ok(mut executors) = ctx.executors.lock() {
        fold_reports(ctx, &mut executors, app, &mut wanted);
        if let Some(tracker) = executors.get(namespace, &name, &wanted.submission_id) {
            tracker.render(&mut wanted);
            since_last_write = tracker.last_write.map(|t| t.elapsed());
        }
    }
    // Room is left for the node agents' reports, which any replica adds between two of these writes.
    let fit = status::fit_to_budget(
        &mut wanted,
        status::budget_for_controller(ctx.settings.status_byte_budget),
    );
    if fit.dropped_executors + fit.dropped_failures > 0 || fit.truncated_text {
        ctx.metrics.status_budget_shrinks.inc();
    }
    let stored = app.status.as_ref();
    if status::unchanged(stored, &wanted) {
        return Ok((app.clone(), None));
    }
    if let Some(wait) = executor_write_wait(stored, &wanted, since_last_write) {
        return Ok((app.clone(), Some(wait)));
    }
    let rv = app.metadata.resource_version.clone().unwrap_or_default();
    let written = match status::write(api, &name, stored, &wanted, &rv).await {
        Ok(written) => written,
        Err(error) => {
            if !matches!(error, status::Error::Conflict { .. }) {
                ctx.metrics.status_write_errors.inc();
            }
            return Err(error.into());
        }
    };
    if let Ok(mut executors) = ctx.executors.lock()
        && let Some(tracker) = executors.get_mut(namespace, &name, &wanted.submission_id)
    {
        tracker.last_write = Some(std::time::Instant::now());
    }
    ctx.metrics.status_writes.inc();
    ctx.metrics.status_bytes.observe(fit.bytes as f64);
    record_metrics(ctx, app, stored, &wanted);
    for transition in transitions {
        tracing::info!(
            app = name,
            namespace,
            from = %transition.from,
            to = %transition.to,
            reason = transition.reason,
            message = transition.message,
            "state transition"
        );
        ctx.events.transition(&written, transition).await;
    }
    for notice in notices {
        tracing::info!(
            app = name,
            namespace,
            reason = notice.reason,
            message = notice.message,
            "condition changed"
        );
        ctx.events.notice(&written, notice).await;
    }
    Ok((Arc::new(written), None))
}

/// Moves the executor terminations node agents reported (`status.uncountedExecutorTerminations`, as
/// read) into the tracker of the current submission, and clears them from `wanted`: the counts and the
/// cleared list go out in the same conditional write. If that write conflicts or waits
/// ([`executor_write_wait`]), the next attempt reads the list again and folds it again, which changes
/// nothing twice (`Tracker::fold_report`).
fn fold_reports(ctx: &Ctx, executors: &mut Executors, app: &SparkApplication, wanted: &mut SparkApplicationStatus) {
    let Some(stored) = app.status.as_ref() else {
        return;
    };
    // Another submission was claimed in this decision: the old run's reports went with it.
    if stored.uncounted_executor_terminations.is_empty() || stored.submission_id != wanted.submission_id {
        return;
    }
    let namespace = app.metadata.namespace.as_deref().unwrap_or_default();
    let name = app.metadata.name.as_deref().unwrap_or_default();
    let Some(tracker) = executors.tracker_for(namespace, name, &stored.submission_id, || Some(stored.clone())) else {
        return;
    };
    let before = tracker.counts().clone();
    let now = Timestamp::now();
    let folded = stored
        .uncounted_executor_terminations
        .iter()
        .filter(|report| tracker.fold_report(report, now, ctx.settings.limits))
        .count();
    let after = tracker.counts();
    let m = &ctx.metrics;
    m.executor_success_count
        .add(u64::try_from(after.completed.saturating_sub(before.completed)).unwrap_or(0));
    m.executor_failure_count
        .add(u64::try_from(after.failed.saturating_sub(before.failed)).unwrap_or(0));
    if folded > 0 {
        tracing::debug!(
            app = name,
            namespace,
            reported = stored.uncounted_executor_terminations.len(),
            folded,
            "counted the executor terminations node agents reported"
        );
    }
    wanted.uncounted_executor_terminations.clear();
}

/// Kubeflow's application metrics, plus how long a driver's exit took to reach the status.
fn record_metrics(
    ctx: &Ctx,
    app: &SparkApplication,
    before: Option<&SparkApplicationStatus>,
    after: &SparkApplicationStatus,
) {
    let m = &ctx.metrics;
    let from = before.map(|s| s.application_state.state).unwrap_or_default();
    let to = after.application_state.state;
    let since_creation = || {
        app.metadata
            .creation_timestamp
            .as_ref()
            .map(|t| Timestamp::now().duration_since(t.0).as_secs_f64().max(0.0))
    };
    if before.is_none_or(|s| s.submission_id.is_empty()) && !after.submission_id.is_empty() {
        m.app_count.inc();
    }
    if from != to {
        match to {
            S::Submitted => {
                m.submit_count.inc();
                if after.submission_attempts == 1
                    && let Some(latency) = since_creation()
                {
                    m.submit_latency.observe(latency);
                }
            }
            S::SubmissionFailed => m.failed_submission_count.inc(),
            S::Running => {
                if after.execution_attempts == 1
                    && let Some(latency) = since_creation()
                {
                    m.start_latency.observe(latency);
                }
            }
            S::Completed | S::Failed => {
                let execution = after
                    .termination_time
                    .as_ref()
                    .zip(after.last_submission_attempt_time.as_ref())
                    .map(|(end, start)| end.0.duration_since(start.0).as_secs_f64().max(0.0));
                let (count, histogram) = if to == S::Completed {
                    (&m.success_count, &m.success_execution_time)
                } else {
                    (&m.failure_count, &m.failure_execution_time)
                };
                count.inc();
                if let Some(seconds) = execution {
                    histogram.observe(seconds);
                }
            }
            _ => {}
        }
    }
    if before.is_none_or(|s| s.driver_termination.is_none())
        && let Some(record) = &after.driver_termination
        && let Ok(mut seen) = ctx.driver_exits.lock()
        && let Some(at) = seen.remove(&format!(
            "{}/{}",
            app.metadata.namespace.as_deref().unwrap_or_default(),
            record.pod_name
        ))
    {
        m.termination_to_status.observe(at.elapsed().as_secs_f64());
    }
}

#[cfg(test)]
mod tests {
    use spark_operator_api::status::{ExecutorCounts, TerminationRecord};

    use super::*;

    fn running() -> SparkApplicationStatus {
        let mut status = SparkApplicationStatus::default();
        status.application_state.state = S::Running;
        status.submission_id = "s1".into();
        status
    }

    fn with_executors(mut status: SparkApplicationStatus, running: i64) -> SparkApplicationStatus {
        status.executor_counts = Some(ExecutorCounts {
            running,
            ..ExecutorCounts::default()
        });
        status
    }

    const JUST_NOW: Option<Duration> = Some(Duration::from_millis(100));

    #[test]
    fn a_write_of_only_executors_waits_for_the_interval_after_the_last_write() {
        let stored = with_executors(running(), 1);
        let wanted = with_executors(running(), 2);
        assert_eq!(
            executor_write_wait(Some(&stored), &wanted, JUST_NOW),
            Some(EXECUTOR_WRITE_INTERVAL - Duration::from_millis(100))
        );
        // The reports folded (the list cleared) are executors' too.
        let mut reported = stored.clone();
        reported
            .uncounted_executor_terminations
            .push(TerminationRecord::default());
        assert!(executor_write_wait(Some(&reported), &wanted, JUST_NOW).is_some());
        // Once the interval has passed, or before this leader wrote at all: at once.
        assert_eq!(
            executor_write_wait(Some(&stored), &wanted, Some(EXECUTOR_WRITE_INTERVAL)),
            None
        );
        assert_eq!(executor_write_wait(Some(&stored), &wanted, None), None);
    }

    #[test]
    fn anything_but_executors_is_written_at_once() {
        let stored = with_executors(running(), 1);
        let mut transition = with_executors(running(), 2);
        transition.application_state.state = S::Succeeding;
        assert_eq!(executor_write_wait(Some(&stored), &transition, JUST_NOW), None);
        let mut other = with_executors(running(), 2);
        other.driver_info.pod_name = "driver".into();
        assert_eq!(executor_write_wait(Some(&stored), &other, JUST_NOW), None);
        let mut terminal = with_executors(running(), 2);
        terminal.application_state.state = S::Completed;
        let mut was_terminal = stored.clone();
        was_terminal.application_state.state = S::Completed;
        assert_eq!(executor_write_wait(Some(&was_terminal), &terminal, JUST_NOW), None);
        assert_eq!(executor_write_wait(None, &terminal, JUST_NOW), None);
    }

    #[test]
    fn a_long_list_of_reports_waiting_is_folded_at_once() {
        let mut stored = with_executors(running(), 1);
        stored.uncounted_executor_terminations = vec![TerminationRecord::default(); FOLD_AT_ONCE];
        let wanted = with_executors(running(), 2);
        assert_eq!(executor_write_wait(Some(&stored), &wanted, JUST_NOW), None);
    }
}
