//! Running the controller: client, endpoints, leader election, then one Controller per watched scope
//! (all namespaces; one per listed namespace; or all namespaces filtered by a namespace label selector).

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Namespace;

use crate::pod::SparkPod as Pod;
use kube::api::Api;
use kube::runtime::{WatchStreamExt, reflector, watcher};
use spark_operator_api::SparkApplication;
use tokio::sync::watch;

use crate::config::{ControllerArgs, Listen, NamespaceScope};
use crate::context::{Ctx, NamespaceFilter, Settings};
use crate::events::Events;
use crate::executors::Executors;
use crate::leader::{self, LeaderElector};
use crate::metrics::Metrics;
use crate::reconciler::run_controller;
use crate::server::{self, Readiness};

/// Why the controller stopped.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("reading the kubeconfig {path}: {source}")]
    Kubeconfig {
        path: String,
        #[source]
        source: kube::config::KubeconfigError,
    },
    #[error("finding the cluster to talk to (KUBECONFIG, ~/.kube/config or in-cluster): {0}")]
    Infer(#[source] kube::config::InferConfigError),
    #[error("building the Kubernetes client: {0}")]
    Client(#[source] kube::Error),
    #[error(transparent)]
    Server(#[from] server::Error),
    #[error(transparent)]
    Leadership(#[from] leader::Error),
}

/// Runs `spark-operator controller` until SIGTERM or Ctrl-C (or until leadership is lost: an error, so
/// the process restarts and rejoins as a standby).
pub async fn run(args: ControllerArgs) -> Result<(), Error> {
    let config = match &args.kubeconfig {
        Some(path) => {
            let kubeconfig = kube::config::Kubeconfig::read_from(path).map_err(|source| Error::Kubeconfig {
                path: path.display().to_string(),
                source,
            })?;
            kube::Config::from_custom_kubeconfig(kubeconfig, &kube::config::KubeConfigOptions::default())
                .await
                .map_err(|source| Error::Kubeconfig {
                    path: path.display().to_string(),
                    source,
                })?
        }
        None => kube::Config::infer().await.map_err(Error::Infer)?,
    };
    let master = args
        .spark_master_url
        .clone()
        .unwrap_or_else(|| format!("k8s://{}", config.cluster_url.to_string().trim_end_matches('/')));
    let client = kube::Client::try_from(config).map_err(Error::Client)?;
    run_with_client(client, args, master, shutdown_signal()).await
}

/// Resolves on SIGTERM or Ctrl-C.
pub async fn shutdown_signal() {
    #[cfg(unix)]
    {
        let terminate = async {
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(mut signal) => {
                    signal.recv().await;
                }
                Err(_) => std::future::pending::<()>().await,
            }
        };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = terminate => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// Runs the controller with a given client until `shutdown` resolves. `spark_master_url` is the
/// `spark.master` drivers get (`k8s://<API server>`).
pub async fn run_with_client(
    client: kube::Client,
    args: ControllerArgs,
    spark_master_url: String,
    shutdown: impl Future<Output = ()>,
) -> Result<(), Error> {
    let metrics = Arc::new(Metrics::default());
    let ready = Arc::new(Readiness::default());
    let _endpoints = match args.metrics_address {
        Listen::On(address) => {
            let (bound, task) = server::serve(address, metrics.clone(), ready.clone()).await?;
            tracing::info!(%bound, "serving /metrics, /healthz and /readyz");
            Some(AbortOnDrop(task))
        }
        Listen::Off => None,
    };
    let identity = args.identity();
    let settings = Arc::new(Settings::from_args(&args, spark_master_url));
    tracing::info!(
        identity,
        scope = ?args.namespace_scope(),
        finalizer = settings.driver_finalizer,
        budget = settings.status_byte_budget,
        "spark-operator controller starting"
    );
    let (stop, stopped) = watch::channel(false);
    let controllers = reconcile_all(client.clone(), &args, &identity, settings, metrics.clone(), stopped);
    let mut shutdown = std::pin::pin!(shutdown);
    // Ready once the API server answers. A standby is ready too: it serves its endpoints, and a
    // rollout must not wait for a leadership it will only get when the leader goes.
    let _readiness = AbortOnDrop(tokio::spawn({
        let client = client.clone();
        let ready = ready.clone();
        async move {
            loop {
                match client.apiserver_version().await {
                    Ok(_) => break ready.set(true),
                    Err(error) => tracing::warn!(%error, "the API server does not answer yet; not ready"),
                }
                tokio::time::sleep(std::time::Duration::from_secs(1)).await;
            }
        }
    }));

    if !args.leader_election {
        metrics.leader.set(1);
        let mut controllers = std::pin::pin!(controllers);
        tokio::select! {
            _ = &mut controllers => return Ok(()),
            _ = &mut shutdown => {}
        }
        let _ = stop.send(true);
        controllers.await;
        return Ok(());
    }

    let elector = LeaderElector::new(
        client,
        &args.leader_election_namespace,
        &args.leader_election_lease_name,
        &identity,
        std::time::Duration::from_secs(args.leader_election_lease_duration.max(1)),
        std::time::Duration::from_secs(args.leader_election_retry_period.max(1)),
    );
    tokio::select! {
        _ = elector.acquire() => {}
        _ = &mut shutdown => return Ok(()),
    }
    metrics.leader.set(1);
    let mut controllers = std::pin::pin!(controllers);
    enum End {
        Finished,
        Lost(leader::Error),
        Shutdown,
    }
    let end = tokio::select! {
        _ = &mut controllers => End::Finished,
        lost = elector.hold() => End::Lost(lost),
        _ = &mut shutdown => End::Shutdown,
    };
    metrics.leader.set(0);
    let _ = stop.send(true);
    match end {
        End::Finished => Ok(()),
        End::Lost(lost) => Err(lost.into()),
        End::Shutdown => {
            controllers.await;
            elector.release().await;
            Ok(())
        }
    }
}

/// Aborts a task when dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Every Controller of the scope, until `stopped` flips.
async fn reconcile_all(
    client: kube::Client,
    args: &ControllerArgs,
    identity: &str,
    settings: Arc<Settings>,
    metrics: Arc<Metrics>,
    stopped: watch::Receiver<bool>,
) {
    let base = Ctx {
        client: client.clone(),
        settings,
        events: Events::new(client.clone(), &args.event_reporter, identity),
        metrics,
        executors: Arc::new(Mutex::new(Executors::default())),
        pods: reflector::store::<Pod>().0,
        namespaces: NamespaceFilter::Watched,
        driver_exits: Arc::new(Mutex::new(HashMap::new())),
    };
    let stop = move || {
        let mut stopped = stopped.clone();
        async move {
            let _ = stopped.wait_for(|s| *s).await;
        }
    };
    let concurrency = args.concurrency;
    match args.namespace_scope() {
        NamespaceScope::All => {
            run_controller(Api::all(client.clone()), Api::all(client), base, concurrency, stop()).await;
        }
        NamespaceScope::List(namespaces) => {
            let controllers = namespaces.iter().map(|ns| {
                let apps: Api<SparkApplication> = Api::namespaced(client.clone(), ns);
                let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
                // Each namespace has its own pod cache, so it needs its own executor trackers: a
                // relist sweeps its trackers against its cache, and would take another namespace's
                // live executors for deleted ones.
                let ctx = Ctx {
                    executors: Arc::new(Mutex::new(Executors::default())),
                    ..base.clone()
                };
                run_controller(apps, pods, ctx, concurrency, stop())
            });
            futures::future::join_all(controllers).await;
        }
        NamespaceScope::Selector(selector) => {
            let (store, writer) = reflector::store::<Namespace>();
            let namespaces = reflector(
                writer,
                watcher(Api::all(client.clone()), watcher::Config::default().labels(&selector)),
            )
            .default_backoff()
            .for_each(|_| async {});
            let ctx = Ctx {
                namespaces: NamespaceFilter::Selected(store),
                ..base
            };
            let controller = run_controller(Api::all(client.clone()), Api::all(client), ctx, concurrency, stop());
            tokio::select! {
                _ = controller => {}
                _ = namespaces => {}
            }
        }
    }
}
