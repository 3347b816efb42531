//! Running the controllers inside a [`Runtime`]: while this replica leads, one SparkApplication and one
//! ScheduledSparkApplication controller per watched scope (all namespaces; one per listed namespace; or all namespaces filtered by a namespace label
//! selector).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Namespace;

use crate::pod::SparkPod;
use kube::api::Api;
use kube::runtime::{WatchStreamExt, reflector, watcher};
use spark_operator_runtime::Runtime;
use tokio::sync::watch;

use crate::app::context::Quarantine;
use crate::app::context::{Ctx, Settings};
use crate::app::executors::Executors;
use crate::app::watch::{WatchSettings, run_controller};
use crate::config::ControllerArgs;
use crate::metrics::Metrics;
use crate::scope::{NamespaceFilter, NamespaceScope};
use crate::status::events::Events;
use spark_operator_api::watched::WatchedApp;
use spark_operator_runtime::readiness::Readiness;

/// Why the controller stopped.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("building the controller's fenced client")]
    Client(#[source] spark_operator_runtime::client::Error),
}

/// How long a shutdown waits for the reconciles in flight: well within Kubernetes' default
/// `terminationGracePeriodSeconds` (30), so the lease is released before the kubelet kills the process.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// Reconciles SparkApplications until the runtime shuts down: while this replica leads, and only then.
///
/// Every write goes through a fenced client ([`spark_operator_runtime::fence`]), so a leader that lost
/// its lease without noticing cannot write once a standby may lead. When leadership is lost the
/// controllers are dropped at once (like a crash, which submission is built to survive: see
/// `submit.rs`), and the replica waits to lead again; it never has to restart to rejoin.
pub async fn run(args: ControllerArgs, runtime: &Runtime) -> Result<(), Error> {
    let client = runtime.fenced_client().map_err(Error::Client)?;
    let spark_master_url = args
        .spark_master_url
        .clone()
        .unwrap_or_else(|| format!("k8s://{}", runtime.cluster_url()));
    let settings = Arc::new(Settings::from_args(&args, spark_master_url));
    let metrics = Arc::new(Metrics::default());
    runtime.metrics().register(metrics.clone());
    let identity = runtime.identity().to_owned();
    tracing::info!(
        identity,
        scope = ?args.namespace_scope(),
        finalizer = settings.submission.driver_finalizer,
        budget = settings.status_byte_budget,
        "spark-operator controller starting"
    );
    let shutdown = runtime.shutdown().clone();
    let mut leadership = runtime.leadership();
    loop {
        tokio::select! {
            _ = leadership.leading() => {}
            _ = shutdown.fired() => return Ok(()),
        }
        tracing::info!(identity, "reconciling");
        // The running gauges come from this term's caches only.
        metrics.clear_live_sources();
        let (stop, stopped) = watch::channel(false);
        let readiness = runtime.readiness();
        let controllers = reconcile_all(
            client.clone(),
            &args,
            &identity,
            settings.clone(),
            metrics.clone(),
            readiness,
            stopped,
        );
        let mut controllers = std::pin::pin!(controllers);
        tokio::select! {
            _ = &mut controllers => return Ok(()),
            _ = leadership.lost() => {
                tracing::warn!(identity, "not leading any more: reconciling stops, writes are fenced");
                // A standby serves without watching; its readiness does not depend on the watches.
                readiness.remove_prefixed(WATCH_CHECK);
            }
            _ = shutdown.fired() => {
                // Finish the reconciles in flight while still leading; the runtime releases the lease
                // afterwards. Bounded: a kube-runtime Controller whose first list never succeeded (its
                // RBAC rule missing, say) waits for its cache before it looks at the shutdown, and would
                // hold the process until the kubelet's SIGKILL, the lease unreleased. Dropping it is the
                // same as losing the lease, which submission is built to survive.
                let _ = stop.send(true);
                if tokio::time::timeout(SHUTDOWN_GRACE, controllers).await.is_err() {
                    tracing::warn!(
                        identity,
                        grace = ?SHUTDOWN_GRACE,
                        "the controllers did not stop within the grace period (a watch that never listed?); dropped"
                    );
                }
                return Ok(());
            }
        }
    }
}

/// Prefix of the readiness checks of the watches (one per scope), dropped when a term ends.
const WATCH_CHECK: &str = "watch ";

/// Every Controller of the scope, until `stopped` flips.
async fn reconcile_all(
    client: kube::Client,
    args: &ControllerArgs,
    identity: &str,
    settings: Arc<Settings>,
    metrics: Arc<Metrics>,
    readiness: &Readiness,
    stopped: watch::Receiver<bool>,
) {
    let base = Ctx {
        client: client.clone(),
        settings,
        events: Events::new(client.clone(), &args.event_reporter, identity),
        metrics,
        executors: Arc::new(Mutex::new(Executors::default())),
        pods: reflector::store::<SparkPod>().0,
        namespaces: NamespaceFilter::Watched,
        driver_exits: Arc::new(Mutex::new(HashMap::new())),
        quarantine: Arc::new(Mutex::new(Quarantine::default())),
    };
    let stop = move || {
        let mut stopped = stopped.clone();
        async move {
            let _ = stopped.wait_for(|s| *s).await;
        }
    };
    let scheduled = |namespaces: NamespaceFilter| {
        Arc::new(crate::scheduled::run::Ctx {
            namespaces,
            ..crate::scheduled::run::Ctx::new(
                client.clone(),
                &args.event_reporter,
                identity,
                args.scheduled_spark_application_timestamp_precision,
                base.metrics.clone(),
            )
        })
    };
    let concurrency = args.concurrency;
    let watch = |scope: &str| WatchSettings {
        concurrency,
        health: readiness.register(&format!("{WATCH_CHECK}{scope}")),
    };
    match args.namespace_scope() {
        NamespaceScope::All => {
            let schedules = crate::scheduled::run::run(
                Api::all(client.clone()),
                Api::all(client.clone()),
                scheduled(NamespaceFilter::Watched),
                stop(),
            );
            let apps = run_controller(
                Api::all(client.clone()),
                Api::all(client),
                base,
                watch("all namespaces"),
                stop(),
            );
            tokio::join!(apps, schedules);
        }
        NamespaceScope::List(namespaces) => {
            let controllers = namespaces.iter().map(|ns| {
                let apps: Api<WatchedApp> = Api::namespaced(client.clone(), ns);
                let pods: Api<SparkPod> = Api::namespaced(client.clone(), ns);
                // Each namespace has its own pod cache, so it needs its own executor trackers: a
                // relist sweeps its trackers against its cache, and would take another namespace's
                // live executors for deleted ones.
                let ctx = Ctx {
                    executors: Arc::new(Mutex::new(Executors::default())),
                    ..base.clone()
                };
                run_controller(apps, pods, ctx, watch(&format!("namespace {ns}")), stop())
            });
            let schedules = namespaces.iter().map(|ns| {
                crate::scheduled::run::run(
                    Api::namespaced(client.clone(), ns),
                    Api::namespaced(client.clone(), ns),
                    scheduled(NamespaceFilter::Watched),
                    stop(),
                )
            });
            tokio::join!(
                futures::future::join_all(controllers),
                futures::future::join_all(schedules)
            );
        }
        NamespaceScope::Selector(selector) => {
            let (store, writer) = reflector::store::<Namespace>();
            let namespaces = reflector(
                writer,
                watcher(Api::all(client.clone()), watcher::Config::default().labels(&selector)),
            )
            .default_backoff()
            .for_each(|_| async {});
            let schedules = crate::scheduled::run::run(
                Api::all(client.clone()),
                Api::all(client.clone()),
                scheduled(NamespaceFilter::Selected(store.clone())),
                stop(),
            );
            let ctx = Ctx {
                namespaces: NamespaceFilter::Selected(store),
                ..base
            };
            let controller = run_controller(
                Api::all(client.clone()),
                Api::all(client),
                ctx,
                watch(&format!("namespaces {selector}")),
                stop(),
            );
            tokio::select! {
                _ = async { tokio::join!(controller, schedules) } => {}
                _ = namespaces => {}
            }
        }
    }
}
