//! One scope's kube-runtime Controller: the lenient SparkApplication watch, the label-selected pod watch
//! mapped back to applications by the `app-name` label (executors are owned by the driver pod, not by the
//! application), `/readyz` while both can list, and the release of a deleted application's drivers.

use std::sync::{Arc, Mutex, PoisonError};

use futures::{Stream, StreamExt, TryStreamExt};
use kube::Resource as _;
use kube::api::Api;
use kube::runtime::controller::{Config as ControllerConfig, Controller, Error as ControllerError};
use kube::runtime::reflector::{self, ObjectRef};
use kube::runtime::{WatchStreamExt, watcher};
use spark_operator_api::labels::{LABEL_LAUNCHED_BY_SPARK_OPERATOR, LABEL_VALUE_TRUE, SparkRole};
use spark_operator_api::state::{ApplicationStateType as S, TerminationObserver};
use spark_operator_api::watched::WatchedApp;
use spark_operator_runtime::error_chain::ErrorChain;
use spark_operator_runtime::readiness::Check;

use crate::app::context::{Ctx, listed};
use crate::app::driver_finalizer;
use crate::app::observe::{self, DriverPod};
use crate::app::pod_events::PodObserver;
use crate::app::reconciler::{error_policy, reconcile};
use crate::metrics::Live;
use crate::pod::SparkPod;

/// How one scope's Controller runs.
pub(crate) struct WatchSettings {
    /// Applications reconciled at the same time.
    pub concurrency: u16,
    /// Set while the scope's watches can list.
    pub health: Check,
}

/// The label selector of the operator's pods.
pub(crate) fn pod_selector() -> String {
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
pub(crate) async fn run_controller(
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
        // Looser than `SparkPod::is_driver_of` on purpose: any reference to the live application keeps
        // the driver protected; a finalizer is released only when no live application can need it.
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
