//! The reconciler: kube-runtime `Controller`s on SparkApplications, triggered also by one label-selected
//! pod watch (`launched-by-spark-operator=true`) mapped back to the application by the `app-name` label,
//! because executors are owned by the driver pod, not by the application.
//!
//! One reconcile: read (the cached application and driver pod, confirmed by a GET when it matters) →
//! validate (pure) → decide ([`crate::app::state`], pure) → write the status (conditional, within the byte
//! budget) → act (submit, delete) → release the driver finalizer once the status holds the driver's end.
//!
//! Executors are tracked from the pod watch's events as they stream by ([`PodObserver`]), so none is
//! missed between two reconciles; the reconcile copies the tracker into the status.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::pod::SparkPod;
use futures::{Stream, StreamExt, TryStreamExt};
use jiff::Timestamp;
use kube::Resource as _;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::runtime::controller::{Action, Config as ControllerConfig, Controller, Error as ControllerError};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::json;
use spark_operator_api::SparkApplication;
use spark_operator_api::labels::{LABEL_LAUNCHED_BY_SPARK_OPERATOR, LABEL_VALUE_TRUE, SparkRole};
use spark_operator_api::state::{ApplicationStateType as S, TerminationObserver};
use spark_operator_api::status::SparkApplicationStatus;
use spark_operator_api::validation::{ValidationContext, validate_spark_application};

use crate::app::context::Ctx;
use crate::app::driver_finalizer;
use crate::app::observe::{self, DriverPod};
use crate::app::poison;
use crate::app::state::{self, Action as Do, Decision, DriverObservation, Notice, Transition};
use crate::app::status;
use crate::app::submit::{self, Submitted};
use crate::metrics::Live;
use crate::submission::driver_pdb;
use spark_operator_api::watched::WatchedApp;
use spark_operator_runtime::error_chain::ErrorChain;
use spark_operator_runtime::readiness::Check;

/// How one scope's Controller runs.
pub struct WatchSettings {
    /// Applications reconciled at the same time.
    pub concurrency: u16,
    /// Set while the scope's watches can list.
    pub health: Check,
}

/// Annotation on the SparkApplication: hash of the spec of its last submission (see `state::spec_hash`).
pub const ANNOTATION_SPEC_HASH: &str = "sparkoperator.k8s.io/spec-hash";

/// Why a reconcile failed (it is retried).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Status(#[from] status::Error),
    #[error(transparent)]
    Submit(#[from] submit::Error),
    #[error(transparent)]
    Finalizer(#[from] driver_finalizer::Error),
    #[error("reading the driver pod {namespace}/{name}")]
    ReadDriver {
        namespace: String,
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("re-reading the application {namespace}/{name}")]
    ReadApplication {
        namespace: String,
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("recording the spec hash on {namespace}/{name}")]
    RecordSpecHash {
        namespace: String,
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("deleting {what} {namespace}/{name}")]
    Delete {
        what: &'static str,
        namespace: String,
        name: String,
        #[source]
        source: kube::Error,
    },
}

/// What kind of failure a reconcile error is: the label of `spark_operator_reconcile_errors`, so an
/// operator can tell "the API server refuses us" from "we are not the leader" from "someone else
/// changed the application" at a glance (Stackable's `ReconcilerError::category` is the model).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorCategory {
    /// The application changed under the reconcile (retried at once).
    Conflict,
    /// A write was not sent: this replica does not hold the lease.
    Fenced,
    /// The API server refused a request or could not be reached.
    Api,
    /// Something could not be serialized.
    Serialization,
}

impl ErrorCategory {
    pub const ALL: [ErrorCategory; 4] = [Self::Conflict, Self::Fenced, Self::Api, Self::Serialization];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Conflict => "conflict",
            Self::Fenced => "fenced",
            Self::Api => "api",
            Self::Serialization => "serialization",
        }
    }
}

/// Whether an error was caused by the fence (anywhere in its source chain).
fn fenced(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut next = Some(error);
    while let Some(error) = next {
        if error.is::<spark_operator_runtime::fence::NotLeader>() {
            return true;
        }
        next = error.source();
    }
    false
}

impl Error {
    pub fn category(&self) -> ErrorCategory {
        match self {
            Error::Status(status::Error::Conflict { .. }) => ErrorCategory::Conflict,
            Error::Status(status::Error::Serialize { .. }) => ErrorCategory::Serialization,
            other if fenced(other) => ErrorCategory::Fenced,
            _ => ErrorCategory::Api,
        }
    }
}

/// How long a reconcile waits for the pod watch's first list before trying again later.
const POD_WATCH_READY: Duration = Duration::from_secs(10);

/// Whether a cache has had its first list, waiting up to `limit` (forever without one). Polled, not
/// awaited once: the store's readiness wakes only its last waiter (the controller's runner), so
/// another waiter could wait for a wake-up that never comes.
async fn listed<K>(store: &Store<K>, limit: Option<Duration>) -> bool
where
    K: kube::Resource + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    let deadline = limit.map(|limit| Instant::now() + limit);
    while tokio::time::timeout(Duration::from_millis(50), store.wait_until_ready())
        .await
        .is_err()
    {
        if deadline.is_some_and(|deadline| Instant::now() >= deadline) {
            return false;
        }
    }
    true
}

/// A reconcile. An application the controller cannot read is marked and left alone until it changes; a
/// readable one is reconciled with any panic contained to it ([`contained`]).
pub async fn reconcile(watched: Arc<WatchedApp>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    match watched.as_ref() {
        WatchedApp::Unreadable(unreadable) => {
            poison::mark_unreadable(unreadable, &watched.object_ref(&()), &ctx).await;
            Ok(Action::await_change())
        }
        WatchedApp::Readable(app) => {
            poison::contained(app.clone(), ctx.clone(), reconcile_readable(app.clone(), ctx)).await
        }
    }
}

/// A reconcile of a readable application: retried at once, on fresh data, when it changed under it.
async fn reconcile_readable(app: Arc<SparkApplication>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    #[cfg(feature = "test-hooks")]
    poison::injected_panic(&app);
    let started = Instant::now();
    let namespace = app.metadata.namespace.clone().unwrap_or_default();
    let name = app.metadata.name.clone().unwrap_or_default();
    if !ctx.namespaces.allows(&namespace) {
        // Looked at again later: the namespace may gain the selected labels.
        return Ok(Action::requeue(ctx.settings.resync));
    }
    // Nothing is decided before the pod watch has listed: a driver submitted earlier could create and
    // delete executors the watch never sees. (Ready at once after startup.)
    if !listed(&ctx.pods, Some(POD_WATCH_READY)).await {
        tracing::warn!(
            app = name,
            namespace,
            "the pod watch has not listed yet; reconciling later"
        );
        return Ok(Action::requeue(Duration::from_secs(1)));
    }
    let api: Api<SparkApplication> = Api::namespaced(ctx.client.clone(), &namespace);
    let mut app = app;
    let mut result = Ok(Action::requeue(Duration::from_secs(1)));
    for _ in 0..4 {
        result = reconcile_once(&app, &api, &ctx).await;
        let Err(Error::Status(status::Error::Conflict { .. })) = &result else {
            break;
        };
        ctx.metrics.status_write_conflicts.inc();
        match api.get_opt(&name).await {
            Ok(Some(fresh)) => app = Arc::new(fresh),
            Ok(None) => return Ok(Action::await_change()),
            Err(source) => {
                result = Err(Error::ReadApplication {
                    namespace: namespace.clone(),
                    name: name.clone(),
                    source,
                });
                break;
            }
        }
    }
    ctx.metrics.reconcile_duration.observe(started.elapsed().as_secs_f64());
    result
}

/// Failed reconciles are retried soon: a conflict at once, anything else after a few seconds.
pub fn error_policy(app: Arc<WatchedApp>, error: &Error, ctx: Arc<Ctx>) -> Action {
    let category = error.category();
    ctx.metrics.reconcile_error(category);
    tracing::warn!(
        app = app.meta().name.as_deref().unwrap_or_default(),
        category = category.as_str(),
        error = %ErrorChain(error),
        "reconcile failed"
    );
    match error {
        Error::Status(status::Error::Conflict { .. }) => Action::requeue(Duration::from_millis(100)),
        _ => Action::requeue(Duration::from_secs(5)),
    }
}

/// The driver pod, as facts and as the object (to release its finalizer).
struct Driver {
    observation: DriverObservation,
    pod: Option<Arc<SparkPod>>,
}

/// States in which the presence of the current driver pod changes the decision, so a cache miss is
/// confirmed with a GET.
fn must_confirm(status: &SparkApplicationStatus) -> bool {
    let state = status.application_state.state;
    state.expects_driver()
        || matches!(
            state,
            S::PendingRerun | S::Resuming | S::Invalidating | S::Suspending | S::SubmissionFailed
        )
}

async fn observe_driver(ctx: &Ctx, app: &SparkApplication, namespace: &str) -> Result<Driver, Error> {
    let name = state::driver_pod_name(app);
    let status = app.status.clone().unwrap_or_default();
    let mut pod = ctx.cached_pod(namespace, &name);
    let current = pod
        .as_ref()
        .is_some_and(|p| observe::submission_id(p) == Some(status.submission_id.as_str()));
    // Waiting for a driver to go (rerun, suspend, invalidate) reads it live: the cache may lag, and
    // progress must not depend on one more pod event arriving.
    let waiting_for_removal = matches!(
        status.application_state.state,
        S::PendingRerun | S::Resuming | S::Invalidating | S::Suspending
    );
    if (!current || waiting_for_removal) && must_confirm(&status) {
        let api: Api<SparkPod> = Api::namespaced(ctx.client.clone(), namespace);
        pod = api
            .get_opt(&name)
            .await
            .map_err(|source| Error::ReadDriver {
                namespace: namespace.to_owned(),
                name: name.clone(),
                source,
            })?
            .map(Arc::new);
    }
    let observation = match &pod {
        Some(p) => DriverObservation::Present(Box::new(observe::driver_pod(p, TerminationObserver::PodWatch))),
        None => DriverObservation::Missing,
    };
    Ok(Driver { observation, pod })
}

/// Validation errors worth failing a new submission for, one line each: the spec's, and a batch scheduler
/// this operator would never run the pods with.
fn spec_errors(app: &SparkApplication, batch: &crate::batch::BatchSettings) -> Vec<String> {
    let state = app.state();
    let submitting = matches!(
        state,
        S::New | S::PendingRerun | S::Resuming | S::SubmissionFailed | S::Invalidating | S::Suspended
    );
    if !submitting {
        return Vec::new();
    }
    let mut defaulted = app.clone();
    spark_operator_api::defaults::apply_defaults(&mut defaulted.spec);
    let mut errors: Vec<String> = validate_spark_application(&defaulted, &ValidationContext::default())
        .errors
        .iter()
        .map(|e| e.to_string())
        .collect();
    if let Err(error) = batch.check(app) {
        errors.push(error.to_string());
    }
    errors
}

async fn reconcile_once(app: &Arc<SparkApplication>, api: &Api<SparkApplication>, ctx: &Ctx) -> Result<Action, Error> {
    let namespace = app.metadata.namespace.clone().unwrap_or_default();
    let name = app.metadata.name.clone().unwrap_or_default();
    let driver = observe_driver(ctx, app, &namespace).await?;
    let errors = spec_errors(app, &ctx.settings.batch);
    let hash = state::spec_hash(app);
    let recorded = app
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ANNOTATION_SPEC_HASH))
        .cloned();
    let new_id = uuid::Uuid::new_v4().to_string();
    let now = Timestamp::now();
    let executors_waiting_since = match (ctx.executors.lock(), app.status.as_ref()) {
        (Ok(executors), Some(status)) => executors
            .get(&namespace, &name, &status.submission_id)
            .and_then(|t| t.oldest_capacity_wait()),
        _ => None,
    };
    let decision = state::decide(&state::Input {
        app,
        driver: &driver.observation,
        now,
        timing: &ctx.settings.timing,
        new_submission_id: &new_id,
        recorded_spec_hash: recorded.as_deref(),
        spec_hash: &hash,
        spec_errors: &errors,
        executors_waiting_since,
    });
    let Decision {
        status: wanted,
        actions,
        requeue,
        transitions,
        notices,
        ..
    } = decision;

    let mut current: Arc<SparkApplication> = app.clone();
    if actions.contains(&Do::RecordSpecHash) {
        current = Arc::new(record_spec_hash(api, &current, &hash).await?);
    }
    let (written, write_in) = write_status(ctx, api, &current, wanted, &transitions, &notices).await?;
    current = written;

    let mut requeue = match (requeue, write_in) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    for action in &actions {
        match action {
            Do::RecordSpecHash => {}
            Do::Submit { submission_id } => {
                // The tracker exists before the driver (hence any executor) does: executor events can
                // reach the pod watch before the application cache holds this submission's status,
                // and would otherwise be dropped.
                if let Ok(mut executors) = ctx.executors.lock() {
                    let _ = executors.tracker_for(&namespace, &name, submission_id, || current.status.clone());
                }
                let submit_time = current
                    .status
                    .as_ref()
                    .and_then(|s| s.last_submission_attempt_time.as_ref())
                    .map_or(now, |t| t.0);
                match submit::submit(&ctx.client, &ctx.settings, &current, submission_id, submit_time).await? {
                    Submitted::Done(outcome, web_ui) => {
                        let stored = current.status.clone().unwrap_or_default();
                        let mut after = state::after_submit(&current, &stored, &outcome, Timestamp::now());
                        if !matches!(outcome, state::SubmitOutcome::Failed { .. }) {
                            web_ui.record(&mut after.status.driver_info);
                        }
                        current = write_status(ctx, api, &current, after.status, &after.transitions, &after.notices)
                            .await?
                            .0;
                    }
                    Submitted::WaitForOldDriver { pod } => {
                        tracing::info!(app = name, pod, "waiting for the previous run's driver pod to go");
                        requeue = Some(requeue.map_or(Duration::from_secs(2), |r| r.min(Duration::from_secs(2))));
                    }
                }
            }
            Do::DeleteDriver { pod_name } => {
                // Kubeflow's deleteSparkResources: the PodDisruptionBudget first, so an eviction in
                // flight is not held up by it while the driver goes.
                if ctx.settings.submission.driver_pdb {
                    submit::delete_driver_pdb(&ctx.client, &namespace, &driver_pdb::name(&current)).await?;
                }
                if let Some(pod) = &driver.pod {
                    driver_finalizer::release(&ctx.client, pod).await?;
                }
                let uid = driver.pod.as_ref().and_then(|p| p.metadata.uid.clone());
                delete_driver(ctx, &namespace, pod_name, uid).await?;
            }
            Do::CleanUpEnded => {
                if let Some((resource, group)) = ctx
                    .settings
                    .batch
                    .check(&current)
                    .ok()
                    .flatten()
                    .and_then(|scheduler| crate::submission::pod_group::identity(&name, &scheduler))
                {
                    // Only a scheduler the operator runs with made a PodGroup (and has the RBAC to delete it).
                    // Not retried: the ownerReference removes the PodGroup with the application anyway.
                    match submit::delete_pod_group(&ctx.client, &namespace, &resource, &group).await {
                        Ok(()) => tracing::info!(
                            app = name,
                            namespace,
                            group,
                            "deleted the PodGroup of the ended application"
                        ),
                        Err(error) => {
                            tracing::warn!(app = name, namespace, error = %ErrorChain(&error), "could not delete the PodGroup")
                        }
                    }
                }
            }
            Do::DeleteApplication => {
                tracing::info!(app = name, "time to live expired: deleting the application");
                match api.delete(&name, &DeleteParams::background()).await {
                    Ok(_) => {}
                    Err(kube::Error::Api(s)) if s.code == 404 => {}
                    Err(source) => {
                        return Err(Error::Delete {
                            what: "SparkApplication",
                            namespace,
                            name,
                            source,
                        });
                    }
                }
                return Ok(Action::await_change());
            }
        }
    }

    if let Some(pdb) = driver_pdb::to_delete_at_end(&current, ctx.settings.submission.driver_pdb) {
        submit::delete_driver_pdb(&ctx.client, &namespace, &pdb).await?;
    }
    release_if_recorded(ctx, &driver, &current).await?;
    let terminal = current.state().is_terminal();
    Ok(match requeue {
        Some(after) => Action::requeue(after),
        None if terminal => Action::await_change(),
        None => Action::requeue(ctx.settings.resync),
    })
}

/// Releases the driver's finalizer once the persisted status no longer needs the pod.
async fn release_if_recorded(ctx: &Ctx, driver: &Driver, app: &SparkApplication) -> Result<(), Error> {
    let (DriverObservation::Present(facts), Some(pod)) = (&driver.observation, &driver.pod) else {
        return Ok(());
    };
    if facts.has_finalizer && facts.ours && !driver_finalizer::keep(facts, Some(app)) {
        driver_finalizer::release(&ctx.client, pod).await?;
    }
    Ok(())
}

/// Deletes the driver pod that was observed (`uid`), never a newer pod of the same name: a decision made on
/// a cache that had not yet seen the next submission's driver must not delete that driver.
async fn delete_driver(ctx: &Ctx, namespace: &str, name: &str, uid: Option<String>) -> Result<(), Error> {
    let api: Api<SparkPod> = Api::namespaced(ctx.client.clone(), namespace);
    let params = DeleteParams {
        preconditions: uid.map(|uid| kube::api::Preconditions {
            uid: Some(uid),
            resource_version: None,
        }),
        ..DeleteParams::background()
    };
    match api.delete(name, &params).await {
        Ok(_) => Ok(()),
        // Gone already, or another pod of that name now (the precondition failed): nothing to delete.
        Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => Ok(()),
        Err(source) => Err(Error::Delete {
            what: "driver pod",
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            source,
        }),
    }
}

/// Records the spec hash, conditional on the application being unchanged since read.
async fn record_spec_hash(
    api: &Api<SparkApplication>,
    app: &SparkApplication,
    hash: &str,
) -> Result<SparkApplication, Error> {
    let name = app.metadata.name.clone().unwrap_or_default();
    let patch = json!({"metadata": {
        "resourceVersion": app.metadata.resource_version,
        "annotations": {ANNOTATION_SPEC_HASH: hash},
    }});
    api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(|source| match source {
            kube::Error::Api(ref s) if s.code == 409 => Error::Status(status::Error::Conflict { name: name.clone() }),
            source => Error::RecordSpecHash {
                namespace: app.metadata.namespace.clone().unwrap_or_default(),
                name: name.clone(),
                source,
            },
        })
}

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
async fn write_status(
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
fn fold_reports(
    ctx: &Ctx,
    executors: &mut crate::app::executors::Executors,
    app: &SparkApplication,
    wanted: &mut SparkApplicationStatus,
) {
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

/// Follows the pod watch's events: executor transitions into the trackers, driver exits' arrival
/// times (for the termination → status metric), and, after a relist, executors deleted unseen.
#[derive(Clone)]
pub struct PodObserver {
    pub ctx: Arc<Ctx>,
    pub apps: Store<WatchedApp>,
    /// Executor events of a relist whose driver was not known yet: judged once the relist is complete
    /// (a list comes in no particular order).
    pub deferred: Arc<Mutex<Vec<Arc<SparkPod>>>>,
}

/// Spark numbers executors with positive 32-bit integers.
const MAX_EXECUTOR_ID: i64 = i32::MAX as i64;

impl PodObserver {
    pub fn observe(&self, event: &watcher::Event<SparkPod>) {
        tracing::trace!(?event, "pod event");
        match event {
            watcher::Event::Apply(pod) => self.pod(pod, false, false),
            watcher::Event::InitApply(pod) => self.pod(pod, false, true),
            watcher::Event::Delete(pod) => self.pod(pod, true, false),
            watcher::Event::InitDone => {
                let deferred = std::mem::take(&mut *self.deferred.lock().unwrap_or_else(PoisonError::into_inner));
                for pod in deferred {
                    self.pod(&pod, false, false);
                }
                self.sweep()
            }
            watcher::Event::Init => {}
        }
    }

    fn pod(&self, pod: &SparkPod, deleted: bool, relisting: bool) {
        let namespace = pod.metadata.namespace.as_deref().unwrap_or_default();
        match observe::spark_role(pod) {
            Some(SparkRole::Driver) => {
                self.driver(pod, namespace);
                let name = pod.metadata.name.as_deref().unwrap_or_default();
                let exited = observe::driver_pod(pod, TerminationObserver::PodWatch)
                    .termination
                    .is_some();
                if !deleted
                    && exited
                    && let Ok(mut seen) = self.ctx.driver_exits.lock()
                {
                    if seen.len() > 100_000 {
                        seen.clear();
                    }
                    seen.entry(format!("{namespace}/{name}")).or_insert_with(Instant::now);
                }
            }
            Some(SparkRole::Executor) => self.executor(pod, namespace, deleted, relisting),
            _ => {}
        }
    }

    /// The application's uid, from the cache.
    fn app_uid(&self, namespace: &str, app: &str) -> Option<String> {
        self.apps
            .get(&ObjectRef::new(app).within(namespace))
            .and_then(|a| a.meta().uid.clone())
    }

    /// A driver pod is trusted when its application controls it: then executors owned by it count.
    fn trusted_driver(&self, pod: &SparkPod, namespace: &str) -> Option<(String, String, String)> {
        let app = observe::app_name(pod)?;
        let submission = observe::submission_id(pod)?;
        let app_uid = self.app_uid(namespace, app)?;
        let owned = pod
            .metadata
            .owner_references
            .iter()
            .flatten()
            .any(|o| o.uid == app_uid && o.controller == Some(true));
        let uid = pod.metadata.uid.clone()?;
        owned.then(|| (app.to_owned(), submission.to_owned(), uid))
    }

    fn driver(&self, pod: &SparkPod, namespace: &str) {
        let Some((app, submission, uid)) = self.trusted_driver(pod, namespace) else {
            return;
        };
        let Ok(mut executors) = self.ctx.executors.lock() else {
            return;
        };
        let status = || self.status(namespace, &app);
        if let Some(tracker) = executors.tracker_for(namespace, &app, &submission, status) {
            tracker.driver_uid = Some(uid);
        }
    }

    fn status(&self, namespace: &str, app: &str) -> Option<SparkApplicationStatus> {
        self.apps
            .get(&ObjectRef::new(app).within(namespace))
            .and_then(|a| a.readable()?.status.clone())
    }

    /// Whether an executor pod is what it claims: an id Spark could have given, and owned by its
    /// submission's driver pod (known from the driver's events, or from the cache).
    fn trusted_executor(&self, pod: &SparkPod, namespace: &str, driver_uid: Option<&str>) -> Option<bool> {
        let id_ok = observe::executor_pod(pod)
            .and_then(|facts| facts.executor_id)
            .is_some_and(|id| (1..=MAX_EXECUTOR_ID).contains(&id));
        if !id_ok {
            return Some(false);
        }
        let owners: Vec<_> = pod.metadata.owner_references.iter().flatten().collect();
        if let Some(driver_uid) = driver_uid {
            return Some(owners.iter().any(|o| o.uid == driver_uid));
        }
        // Driver not seen yet: the cache decides, when it has the owner.
        let submission = observe::submission_id(pod);
        for owner in owners.iter().filter(|o| o.kind == "Pod") {
            let Some(driver) = self.ctx.cached_pod(namespace, &owner.name) else {
                continue;
            };
            let trusted = self.trusted_driver(&driver, namespace);
            if let Some((_, driver_submission, uid)) = trusted
                && uid == owner.uid
                && Some(driver_submission.as_str()) == submission
            {
                return Some(true);
            }
        }
        // Unknown for now (None) or never (false).
        None
    }

    fn executor(&self, pod: &SparkPod, namespace: &str, deleted: bool, relisting: bool) {
        let (Some(facts), Some(app)) = (observe::executor_pod(pod), observe::app_name(pod)) else {
            return;
        };
        let Some(submission) = facts.submission_id.clone() else {
            return;
        };
        let Ok(mut executors) = self.ctx.executors.lock() else {
            return;
        };
        let status = || self.status(namespace, app);
        let Some(tracker) = executors.tracker_for(namespace, app, &submission, status) else {
            return;
        };
        match self.trusted_executor(pod, namespace, tracker.driver_uid.as_deref()) {
            Some(true) => {}
            None if relisting => {
                self.deferred
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push(Arc::new(pod.clone()));
                return;
            }
            _ => {
                self.ctx.metrics.untrusted_pods.inc();
                tracing::debug!(
                    namespace,
                    pod = pod.metadata.name.as_deref().unwrap_or_default(),
                    "ignoring an executor pod not owned by its submission's driver"
                );
                return;
            }
        }
        if tracker.driver_uid.is_none() {
            tracker.driver_uid = pod
                .metadata
                .owner_references
                .iter()
                .flatten()
                .find(|o| o.kind == "Pod")
                .map(|o| o.uid.clone());
        }
        let before = tracker.counts().clone();
        let now = Timestamp::now();
        if deleted {
            tracker.observe_deletion(&facts, now, self.ctx.settings.limits);
        } else {
            tracker.observe(&facts, now, self.ctx.settings.limits);
        }
        let after = tracker.counts();
        let m = &self.ctx.metrics;
        m.executor_success_count
            .add(u64::try_from(after.completed.saturating_sub(before.completed)).unwrap_or(0));
        m.executor_failure_count
            .add(u64::try_from(after.failed.saturating_sub(before.failed)).unwrap_or(0));
    }

    fn sweep(&self) {
        let Ok(mut executors) = self.ctx.executors.lock() else {
            return;
        };
        let now = Timestamp::now();
        for (namespace, tracker) in executors.iter_mut() {
            let exists = |name: &str| self.ctx.cached_pod(namespace, name).is_some();
            tracker.sweep(exists, now, self.ctx.settings.limits);
        }
    }
}

/// The label selector of the operator's pods.
pub fn pod_selector() -> String {
    format!("{LABEL_LAUNCHED_BY_SPARK_OPERATOR}={LABEL_VALUE_TRUE}")
}

/// The application a pod belongs to.
fn app_of(pod: SparkPod) -> Option<ObjectRef<WatchedApp>> {
    let namespace = pod.metadata.namespace.as_deref()?;
    observe::app_name(&pod).map(|app| ObjectRef::new(app).within(namespace))
}

/// Whether each of a scope's two watches has listed, and whether its last list failed: `/readyz` says
/// not ready while either cannot list (a 403 after an RBAC change, an API server that refuses).
#[derive(Clone)]
struct WatchHealth {
    check: Check,
    listed: Arc<Mutex<[bool; 2]>>,
}

impl WatchHealth {
    fn new(check: Check) -> Self {
        check.set(false);
        Self {
            check,
            listed: Arc::new(Mutex::new([false; 2])),
        }
    }

    fn observe<K>(&self, watch: usize, event: &Result<watcher::Event<K>, watcher::Error>) {
        let mut listed = self.listed.lock().unwrap_or_else(PoisonError::into_inner);
        // Only listing decides: a watch that breaks resumes on its own, and a cache that cannot list
        // (a refused list, an API server that answers with errors) is what makes this replica blind.
        match event {
            Ok(watcher::Event::InitDone) => listed[watch] = true,
            Err(watcher::Error::InitialListFailed(_)) => listed[watch] = false,
            _ => return,
        }
        self.check.set(listed.iter().all(|l| *l));
    }
}

/// Runs one Controller over `apps` and `pods` (all namespaces, or one) until `shutdown` resolves.
/// `health` is set while both watches can list.
pub async fn run_controller(
    apps: Api<WatchedApp>,
    pods: Api<SparkPod>,
    ctx: Ctx,
    settings: WatchSettings,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let (pod_store, pod_writer) = reflector::store();
    let ctx = Arc::new(Ctx { pods: pod_store, ..ctx });
    let health = WatchHealth::new(settings.health);
    let (app_store, app_writer) = reflector::store::<WatchedApp>();
    let app_events = reflector::reflector(app_writer, watcher(apps, watcher::Config::default()))
        .default_backoff()
        .inspect({
            let health = health.clone();
            move |event| health.observe(0, event)
        })
        .applied_objects();
    let controller = Controller::for_stream(app_events, app_store.clone())
        .with_config(ControllerConfig::default().concurrency(settings.concurrency));
    ctx.metrics.add_live_source(Box::new({
        let apps = app_store.clone();
        move || {
            let apps = apps.state();
            let readable = || apps.iter().filter_map(|a| a.readable());
            Live {
                apps_running: readable().filter(|a| a.state() == S::Running).count() as i64,
                executors_running: readable()
                    .filter_map(|a| a.status.as_ref()?.executor_counts.as_ref())
                    .map(|c| c.running)
                    .sum(),
            }
        }
    }));
    let observer = PodObserver {
        ctx: ctx.clone(),
        apps: app_store.clone(),
        deferred: Arc::new(Mutex::new(Vec::new())),
    };
    let pod_events = reflector::reflector(
        pod_writer,
        watcher(pods, watcher::Config::default().labels(&pod_selector())),
    )
    .default_backoff()
    .inspect(move |event| health.observe(1, event))
    .inspect_ok(move |event| observer.observe(event));
    // Executor trackers seed from the applications' status: follow pods once applications are cached.
    let ready = app_store.clone();
    let gated: std::pin::Pin<Box<dyn Stream<Item = _> + Send>> = Box::pin(
        futures::stream::once(async move {
            listed(&ready, None).await;
            pod_events
        })
        .flatten(),
    );
    let orphans = ctx.clone();
    controller
        .watches_stream(gated.touched_objects(), app_of)
        .graceful_shutdown_on(shutdown)
        .run(reconcile, error_policy, ctx)
        .for_each(move |result| {
            let ctx = orphans.clone();
            async move {
                match result {
                    Ok(_) => {}
                    Err(ControllerError::ObjectNotFound(object)) => {
                        let namespace = object.namespace.clone().unwrap_or_default();
                        release_orphans(&ctx, &namespace, &object.name).await;
                    }
                    Err(error) => tracing::debug!(error = %ErrorChain(&error), "controller"),
                }
            }
        })
        .await;
}

/// The application is gone: forget its executors and release its driver pods' finalizers (after a
/// GET confirms it, so a cache lag never releases a protected driver).
async fn release_orphans(ctx: &Ctx, namespace: &str, app: &str) {
    // Read leniently: an application that is there but unreadable still owns its drivers.
    let api: Api<WatchedApp> = Api::namespaced(ctx.client.clone(), namespace);
    let live = match api.get_opt(app).await {
        Ok(live) => live,
        Err(error) => {
            tracing::warn!(namespace, app, error = %ErrorChain(&error), "could not check whether the application is gone");
            return;
        }
    };
    if live.is_none()
        && let Ok(mut executors) = ctx.executors.lock()
    {
        executors.remove(namespace, app);
    }
    let drivers: Vec<Arc<SparkPod>> = ctx
        .pods
        .state()
        .into_iter()
        .filter(|p| {
            p.metadata.namespace.as_deref() == Some(namespace)
                && observe::app_name(p) == Some(app)
                && observe::spark_role(p) == Some(SparkRole::Driver)
        })
        .collect();
    for pod in drivers {
        let facts: DriverPod = observe::driver_pod(&pod, TerminationObserver::Finalizer);
        let owned_by_live = live.as_ref().is_some_and(|a| {
            pod.metadata
                .owner_references
                .iter()
                .flatten()
                .any(|o| Some(&o.uid) == a.meta().uid.as_ref())
        });
        if facts.has_finalizer
            && !owned_by_live
            && let Err(error) = driver_finalizer::release(&ctx.client, &pod).await
        {
            tracing::warn!(error = %ErrorChain(&error), "could not release an orphaned driver pod");
        }
    }
}

#[cfg(test)]
mod tests {
    use spark_operator_api::state::ApplicationStateType as S;
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
