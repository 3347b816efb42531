//! The ScheduledSparkApplication controller: read (the schedule, its runs from the API), decide
//! ([`super::decide`]), act (delete, create), write the status, publish Events; requeued for the next
//! tick. Runs beside the SparkApplication controller while the replica leads, with the same fenced client.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use jiff::Timestamp;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};
use serde_json::json;
use spark_operator_api::labels::LABEL_SCHEDULED_APP_NAME;
use spark_operator_api::scheduled::ScheduledSparkApplication;
use spark_operator_api::watched::{Unreadable, Watched, WatchedSchedule};
use spark_operator_api::{ApplicationStateType, SparkApplication};
use spark_operator_runtime::error_chain::{ErrorChain, kube_error};

use super::decide::{Decision, Happened, Observed, Precision, Run, RunState, decide};
use crate::metrics::Metrics;
use crate::scope::NamespaceFilter;
use crate::status::events::Events;

/// A reconcile that failed; retried after [`RETRY`].
#[derive(Debug, thiserror::Error)]
pub(crate) enum Error {
    #[error("listing the runs of {name}: {reason}")]
    ListRuns { name: String, reason: String },
    #[error("deleting the run {run} of {name}: {reason}")]
    DeleteRun { name: String, run: String, reason: String },
    #[error("creating the run {run} of {name}: {reason}")]
    CreateRun { name: String, run: String, reason: String },
    #[error("writing the status of {name}: {reason}")]
    WriteStatus { name: String, reason: String },
}

const RETRY: Duration = Duration::from_secs(5);

/// What every reconcile shares.
pub(crate) struct Ctx {
    pub client: kube::Client,
    pub events: Events,
    pub precision: Precision,
    pub namespaces: NamespaceFilter,
    pub metrics: Arc<Metrics>,
}

impl Ctx {
    pub(crate) fn new(
        client: kube::Client,
        reporter: &str,
        identity: &str,
        precision: Precision,
        metrics: Arc<Metrics>,
    ) -> Self {
        Self {
            events: Events::new(client.clone(), reporter, identity),
            client,
            precision,
            namespaces: NamespaceFilter::Watched,
            metrics,
        }
    }
}

/// Reconciles the ScheduledSparkApplications `schedules` lists (and re-reconciles one when a run of it
/// changes) until `stop`. Watched leniently: one schedule that does not decode is marked, never stalls
/// the watch of the others.
pub(crate) async fn run(
    schedules: Api<WatchedSchedule>,
    runs: Api<SparkApplication>,
    ctx: Arc<Ctx>,
    stop: impl Future<Output = ()> + Send + Sync + 'static,
) {
    let runs_config = watcher::Config::default().labels(LABEL_SCHEDULED_APP_NAME);
    Controller::new(schedules, watcher::Config::default())
        .watches(runs, runs_config, |run: SparkApplication| {
            let namespace = run.namespace()?;
            let parent = run.labels().get(LABEL_SCHEDULED_APP_NAME)?.clone();
            Some(ObjectRef::new(&parent).within(&namespace))
        })
        .graceful_shutdown_on(stop)
        .run(reconcile, error_policy, ctx)
        .for_each(|_| async {})
        .await;
}

fn error_policy(schedule: Arc<WatchedSchedule>, error: &Error, _: Arc<Ctx>) -> Action {
    tracing::warn!(
        schedule = schedule.name_any(),
        namespace = schedule.namespace().unwrap_or_default(),
        error = %ErrorChain(error),
        "scheduled application reconcile failed"
    );
    Action::requeue(RETRY)
}

async fn reconcile(watched: Arc<WatchedSchedule>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    match watched.as_ref() {
        Watched::Readable(schedule) => reconcile_readable(schedule, &ctx).await,
        Watched::Unreadable(unreadable) => {
            if ctx
                .namespaces
                .allows(unreadable.metadata.namespace.as_deref().unwrap_or_default())
            {
                mark_unreadable(&ctx, unreadable, &watched.object_ref(&())).await?;
            }
            Ok(Action::await_change())
        }
    }
}

/// A schedule the controller cannot decode: `FailedValidation` with the field that failed, and an Event.
/// Nothing runs until it is fixed (a watch event brings it back).
async fn mark_unreadable(
    ctx: &Ctx,
    unreadable: &Unreadable,
    reference: &k8s_openapi::api::core::v1::ObjectReference,
) -> Result<(), Error> {
    let namespace = unreadable.metadata.namespace.clone().unwrap_or_default();
    let name = unreadable.metadata.name.clone().unwrap_or_default();
    let reason = format!("the ScheduledSparkApplication cannot be read: {}", unreadable.reason);
    tracing::warn!(
        schedule = name,
        namespace,
        reason = unreadable.reason,
        "unreadable scheduled application"
    );
    let api: Api<WatchedSchedule> = Api::namespaced(ctx.client.clone(), &namespace);
    let patch = json!({"status": {"scheduleState": "FailedValidation", "reason": reason}});
    api.patch_status(&name, &PatchParams::default(), &Patch::Merge(patch))
        .await
        .map_err(|e| Error::WriteStatus {
            name: format!("{namespace}/{name}"),
            reason: kube_error(&e),
        })?;
    ctx.metrics.scheduled_failed_validations.inc();
    ctx.events
        .publish(reference, true, "ScheduleFailedValidation", &reason, "Schedule")
        .await;
    Ok(())
}

async fn reconcile_readable(schedule: &ScheduledSparkApplication, ctx: &Ctx) -> Result<Action, Error> {
    let namespace = schedule.namespace().unwrap_or_default();
    let name = schedule.name_any();
    if !ctx.namespaces.allows(&namespace) || schedule.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let runs = list_runs(&ctx.client, schedule).await?;
    let stored = schedule.status.clone().unwrap_or_default();
    let decision = decide(&Observed {
        name: &name,
        spec: &schedule.spec,
        status: &stored,
        runs: &runs,
        now: Timestamp::now(),
        precision: ctx.precision,
    });
    act(ctx, schedule, &decision).await?;
    write_status(&ctx.client, schedule, &decision).await?;
    for happened in &decision.happened {
        count(&ctx.metrics, happened);
        publish(ctx, schedule, happened).await;
    }
    Ok(decision.requeue.map_or_else(Action::await_change, Action::requeue))
}

/// The SparkApplications this schedule created: labelled with its name and owned by its uid (a same-named
/// schedule deleted and made again does not inherit the old one's runs).
async fn list_runs(client: &kube::Client, schedule: &ScheduledSparkApplication) -> Result<Vec<Run>, Error> {
    let namespace = schedule.namespace().unwrap_or_default();
    let name = schedule.name_any();
    let uid = schedule.uid().unwrap_or_default();
    // Read leniently: a run whose spec no longer decodes still counts, by its metadata and state.
    let resource = ApiResource::from_gvk(&GroupVersionKind::gvk(
        "sparkoperator.k8s.io",
        "v1beta2",
        "SparkApplication",
    ));
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &namespace, &resource);
    let selector = format!("{LABEL_SCHEDULED_APP_NAME}={name}");
    let list = api
        .list(&ListParams::default().labels(&selector))
        .await
        .map_err(|e| Error::ListRuns {
            name: format!("{namespace}/{name}"),
            reason: kube_error(&e),
        })?;
    Ok(list
        .items
        .into_iter()
        .filter(|run| run.owner_references().iter().any(|o| o.uid == uid))
        .map(|run| {
            let state = ApplicationStateType::parse(
                run.data["status"]["applicationState"]["state"]
                    .as_str()
                    .unwrap_or_default(),
            );
            Run {
                name: run.name_any(),
                created: run
                    .metadata
                    .creation_timestamp
                    .as_ref()
                    .map_or(Timestamp::UNIX_EPOCH, |t| t.0),
                state: match state {
                    ApplicationStateType::Completed => RunState::Completed,
                    ApplicationStateType::Failed => RunState::Failed,
                    _ => RunState::Active,
                },
            }
        })
        .collect())
}

/// Deletes, then creates, what the decision says.
async fn act(ctx: &Ctx, schedule: &ScheduledSparkApplication, decision: &Decision) -> Result<(), Error> {
    let namespace = schedule.namespace().unwrap_or_default();
    let name = schedule.name_any();
    let apps: Api<SparkApplication> = Api::namespaced(ctx.client.clone(), &namespace);
    for run in &decision.delete {
        match apps.delete(run, &DeleteParams::background()).await {
            Ok(_) => tracing::info!(schedule = name, namespace, run, "deleted a run"),
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(e) => {
                return Err(Error::DeleteRun {
                    name: format!("{namespace}/{name}"),
                    run: run.clone(),
                    reason: kube_error(&e),
                });
            }
        }
    }
    if let Some(run) = &decision.create {
        let app = run_application(schedule, run);
        match apps.create(&PostParams::default(), &app).await {
            Ok(_) => tracing::info!(schedule = name, namespace, run, "started a run"),
            // Created by an earlier attempt whose status write did not land.
            Err(kube::Error::Api(status)) if status.code == 409 => {}
            Err(e) => {
                return Err(Error::CreateRun {
                    name: format!("{namespace}/{name}"),
                    run: run.clone(),
                    reason: kube_error(&e),
                });
            }
        }
    }
    Ok(())
}

/// A run as Kubeflow makes it: the template's spec, the schedule's labels and its name as a label, owned
/// (not controlled) by the schedule so deleting the schedule deletes its runs.
pub(crate) fn run_application(schedule: &ScheduledSparkApplication, run: &str) -> SparkApplication {
    let mut app = SparkApplication::new(run, schedule.spec.template.clone());
    app.metadata.namespace = schedule.namespace();
    let mut labels = schedule.labels().clone();
    labels.insert(LABEL_SCHEDULED_APP_NAME.to_owned(), schedule.name_any());
    app.metadata.labels = Some(labels);
    let mut owner = schedule.controller_owner_ref(&()).unwrap_or_default();
    owner.controller = None;
    owner.block_owner_deletion = Some(true);
    app.metadata.owner_references = Some(vec![owner]);
    app
}

async fn write_status(
    client: &kube::Client,
    schedule: &ScheduledSparkApplication,
    decision: &Decision,
) -> Result<(), Error> {
    let namespace = schedule.namespace().unwrap_or_default();
    let name = schedule.name_any();
    let old = schedule.status.clone().unwrap_or_default();
    let diff = crate::status::write::merge_diff(Some(&old), &decision.status).map_err(|e| Error::WriteStatus {
        name: format!("{namespace}/{name}"),
        reason: format!("serializing the status: {e}"),
    })?;
    let Some(diff) = diff else {
        return Ok(());
    };
    let api: Api<ScheduledSparkApplication> = Api::namespaced(client.clone(), &namespace);
    api.patch_status(&name, &PatchParams::default(), &Patch::Merge(json!({ "status": diff })))
        .await
        .map(|_| ())
        .map_err(|e| Error::WriteStatus {
            name: format!("{namespace}/{name}"),
            reason: kube_error(&e),
        })
}

fn count(metrics: &Metrics, happened: &Happened) {
    match happened {
        Happened::FailedValidation(_) => metrics.scheduled_failed_validations.inc(),
        Happened::Scheduled => {}
        Happened::RunStarted(_) => metrics.scheduled_runs_started.inc(),
        Happened::RunSkipped { .. } => metrics.scheduled_runs_skipped.inc(),
        Happened::RunReplaced { .. } => metrics.scheduled_runs_replaced.inc(),
        Happened::RunsPruned(runs) => metrics.scheduled_runs_pruned.add(runs.len() as u64),
    }
}

async fn publish(ctx: &Ctx, schedule: &ScheduledSparkApplication, happened: &Happened) {
    let (warning, reason, note) = match happened {
        Happened::FailedValidation(reason) => (true, "ScheduleFailedValidation", reason.clone()),
        Happened::Scheduled => (
            false,
            "Scheduled",
            format!("schedule {:?} accepted", schedule.spec.schedule),
        ),
        Happened::RunStarted(run) => (false, "RunStarted", format!("started the run {run}")),
        Happened::RunSkipped { active } => (
            false,
            "RunSkipped",
            format!("concurrencyPolicy Forbid: the run {active} is still active"),
        ),
        Happened::RunReplaced { replaced } => (
            false,
            "RunReplaced",
            format!("concurrencyPolicy Replace: deleted the unfinished run {replaced}"),
        ),
        Happened::RunsPruned(runs) => (
            false,
            "RunsPruned",
            format!("deleted runs beyond the history limits: {}", runs.join(", ")),
        ),
    };
    ctx.events
        .publish(&schedule.object_ref(&()), warning, reason, &note, "Schedule")
        .await;
}
