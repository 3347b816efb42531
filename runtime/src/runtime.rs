//! The value components receive: the clients, leadership, readiness, the metric registry and shutdown.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use crate::args::Listen;
use crate::lease::{self, ElectionSettings, LeadershipWatch};
use crate::metrics::{Registry, Render, write_gauge};
use crate::readiness::Readiness;
use crate::shutdown::{Shutdown, Trigger};
use crate::task::AbortOnDrop;
use crate::{client, endpoints};

/// Why the runtime could not start.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Client(#[from] client::Error),
    #[error(transparent)]
    Endpoints(#[from] endpoints::Error),
}

/// What the runtime is made of, resolved from [`crate::RuntimeArgs`] (or set by tests and `dev`).
#[derive(Clone, Debug)]
pub struct RuntimeSettings {
    pub identity: String,
    /// None: this replica always leads.
    pub election: Option<ElectionSettings>,
    pub metrics: Listen,
}

/// The process's shared parts. Components borrow it; the binary owns it.
pub struct Runtime {
    config: kube::Config,
    client: kube::Client,
    identity: String,
    leadership: LeadershipWatch,
    readiness: Readiness,
    metrics: Registry,
    shutdown: Shutdown,
    metrics_address: Option<SocketAddr>,
    elector: Option<(Trigger, tokio::task::JoinHandle<()>)>,
    _tasks: Vec<AbortOnDrop>,
}

/// The runtime's own metric: whether this replica leads.
struct RuntimeMetrics {
    leadership: LeadershipWatch,
}

impl Render for RuntimeMetrics {
    fn render(&self, out: &mut String) {
        write_gauge(
            out,
            "spark_operator_leader",
            "1 when this replica holds the leader lease (and reconciles)",
            i64::from(self.leadership.is_leading()),
        );
    }
}

impl Runtime {
    /// Builds the clients, serves the endpoints and starts the election. `config` is the cluster's client
    /// configuration (see [`crate::client::config_from`]).
    pub async fn start(config: kube::Config, settings: RuntimeSettings, shutdown: Shutdown) -> Result<Self, Error> {
        let config = client::identify(config, &settings.identity);
        let client = client::client(config.clone())?;
        let readiness = Readiness::default();
        let metrics = Registry::default();
        let mut tasks = Vec::new();

        let (leadership, elector) = match settings.election {
            Some(election) => {
                // Its own trigger: the Lease is released only once the components stopped writing.
                let (trigger, stop) = Shutdown::new();
                let (leadership, task) = lease::elect(client.clone(), election, stop);
                (leadership, Some((trigger, task)))
            }
            None => (LeadershipWatch::always(), None),
        };
        metrics.register(Arc::new(RuntimeMetrics {
            leadership: leadership.clone(),
        }));

        let metrics_address = match settings.metrics {
            Listen::On(address) => {
                let (bound, server) = endpoints::serve(address, metrics.clone(), readiness.clone()).await?;
                tracing::info!(%bound, "serving /metrics, /healthz and /readyz");
                tasks.push(server);
                Some(bound)
            }
            Listen::Off => None,
        };

        // Ready once the API server answers; standbys too (they serve, and a rollout must not wait for a
        // leadership they will only get when the leader goes).
        let apiserver = readiness.register("apiserver");
        tasks.push(AbortOnDrop(tokio::spawn({
            let client = client.clone();
            async move {
                loop {
                    match client.apiserver_version().await {
                        Ok(_) => break apiserver.set(true),
                        Err(error) => tracing::warn!(error = %crate::error_chain::kube_error(&error), "the API server does not answer yet; not ready"),
                    }
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            }
        })));

        Ok(Self {
            config,
            client,
            identity: settings.identity,
            leadership,
            readiness,
            metrics,
            shutdown,
            metrics_address,
            elector,
            _tasks: tasks,
        })
    }

    /// A client for serving and reading: never fenced.
    pub fn client(&self) -> kube::Client {
        self.client.clone()
    }

    /// A client whose writes leave the process only while this replica leads.
    pub fn fenced_client(&self) -> Result<kube::Client, client::Error> {
        client::fenced(self.config.clone(), self.leadership.clone())
    }

    /// The cluster's URL as the clients see it.
    pub fn cluster_url(&self) -> String {
        self.config.cluster_url.to_string().trim_end_matches('/').to_owned()
    }

    pub fn leadership(&self) -> LeadershipWatch {
        self.leadership.clone()
    }

    pub fn is_leading(&self) -> bool {
        self.leadership.is_leading()
    }

    pub fn identity(&self) -> &str {
        &self.identity
    }

    pub fn readiness(&self) -> &Readiness {
        &self.readiness
    }

    pub fn metrics(&self) -> &Registry {
        &self.metrics
    }

    pub fn shutdown(&self) -> &Shutdown {
        &self.shutdown
    }

    /// Where `/metrics` is served, if anywhere.
    pub fn metrics_address(&self) -> Option<SocketAddr> {
        self.metrics_address
    }

    /// Ends the election (releasing the Lease if held, so a standby takes over at once) and every
    /// background task. Call it once the components have stopped writing.
    pub async fn stop(self) {
        if let Some((trigger, task)) = self.elector {
            trigger.fire();
            let _ = task.await;
        }
    }
}
