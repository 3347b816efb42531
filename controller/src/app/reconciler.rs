//! One reconcile of a SparkApplication: read (the cached application and driver pod, confirmed by a GET when it matters) →
//! validate (pure) → decide ([`crate::app::state`], pure) → write the status (conditional, within the byte
//! budget) → act (submit, delete) → release the driver finalizer once the status holds the driver's end.
//!
//! The watches that trigger it are [`crate::app::watch`]'s; executors are tracked from the pod watch's
//! events as they stream by ([`crate::app::pod_events`]), so none is missed between two reconciles; the
//! status write copies the tracker into the status ([`crate::app::write`]).

use std::sync::Arc;
use std::time::{Duration, Instant};

use jiff::Timestamp;
use kube::Resource as _;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::runtime::controller::Action;
use serde_json::json;
use spark_operator_api::SparkApplication;
use spark_operator_api::state::{ApplicationStateType as S, TerminationObserver};
use spark_operator_api::status::SparkApplicationStatus;
use spark_operator_api::validation::{ValidationContext, validate_spark_application};
use spark_operator_api::watched::WatchedApp;
use spark_operator_runtime::error_chain::ErrorChain;

use crate::app::context::{Ctx, listed};
use crate::app::driver_finalizer;
use crate::app::error::Error;
use crate::app::observe;
use crate::app::poison;
use crate::app::state::{self, Action as Do, Decision, DriverObservation};
use crate::app::submit::{self, Submitted};
use crate::app::write::write_status;
use crate::pod::SparkPod;
use crate::status::write as status;
use crate::submission::driver_pdb;

/// Annotation on the SparkApplication: hash of the spec of its last submission (see `state::spec_hash`).
pub(crate) const ANNOTATION_SPEC_HASH: &str = "sparkoperator.k8s.io/spec-hash";

/// How long a reconcile waits for the pod watch's first list before trying again later.
const POD_WATCH_READY: Duration = Duration::from_secs(10);

/// A reconcile. An application the controller cannot read is marked and left alone until it changes; a
/// readable one is reconciled with any panic contained to it ([`contained`]).
pub(crate) async fn reconcile(watched: Arc<WatchedApp>, ctx: Arc<Ctx>) -> Result<Action, Error> {
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
pub(crate) fn error_policy(app: Arc<WatchedApp>, error: &Error, ctx: Arc<Ctx>) -> Action {
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
