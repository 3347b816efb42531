//! The node agents' path in the end-to-end harness: the operator with its report receiver (and the
//! controller) as one component, and one `spark-operator agent` per simulated node, each on its own thread
//! and runtime as its own process would be, reading its node's CRI socket and `var/log/pods`, spooling to
//! a directory that outlives it (so a killed agent restarts from its spool), and reaching the receiver over
//! TLS with a ServiceAccount token, as in a cluster.

use std::path::PathBuf;

use clap::Parser;
use spark_operator_agent::AgentArgs;
use spark_operator_controller::ReceiverArgs;
use spark_operator_dev::agents::{
    AGENT_NAMESPACE, AGENT_SERVICE_ACCOUNT, AgentSetup, OPERATOR_NAMESPACE, create_agent_identity, prepare_agent,
};
use spark_operator_runtime::RuntimeArgs;
use spark_operator_webhook::certs::{CaConfigMap, CertConfig, CertManager, Managed, Subject, resolver};

use crate::{Cluster, Controller, ControllerFlags, free_port};

const CA_CONFIG_MAP: &str = "spark-operator-ca";

/// The controller with the report receiver, as `spark-operator operator` composes them (without the
/// webhook): the receiver's certificate comes from a CA in the operator's namespace, published in the
/// `spark-operator-ca` ConfigMap for the agents.
pub struct Operator {
    pub reports_port: u16,
    inner: Controller,
}

impl Operator {
    /// Stops it at once, as `kill -9` would.
    pub fn kill(self) {
        self.inner.kill();
    }
}

/// One node's agent.
pub struct Agent {
    pub node: String,
    /// Where its `/metrics` is served.
    pub metrics_port: u16,
    inner: Controller,
}

impl Agent {
    /// Stops it at once, as `kill -9` would: its spool stays on disk.
    pub fn kill(self) {
        self.inner.kill();
    }

    /// Its `/metrics` text.
    pub async fn metrics(&self) -> String {
        crate::http_get(self.metrics_port, "/metrics")
            .await
            .map(|(_, body)| body)
            .unwrap_or_default()
    }

    /// One series of its metrics (`name` or `name{label="value"}`); 0 when absent.
    pub async fn metric(&self, series: &str) -> f64 {
        crate::metric(&self.metrics().await, series).unwrap_or(0.0)
    }
}

/// The flags of an in-process agent, as `spark-operator agent` takes them.
#[derive(Clone, Debug, Parser)]
#[command(args_override_self = true)]
struct AgentFlags {
    #[command(flatten)]
    runtime: RuntimeArgs,
    #[command(flatten)]
    agent: AgentArgs,
}

#[derive(Clone, Debug, Parser)]
struct ReceiverFlags {
    #[command(flatten)]
    reports: ReceiverArgs,
}

impl Cluster {
    fn agents_dir(&self) -> PathBuf {
        self._dir.path().join("agents")
    }

    /// Starts the controller (with `flags`) and the report receiver in one component. The controller's
    /// `--identity` names it in the User-Agent of both, so a sim fault can single them out.
    pub async fn operator(&self, flags: ControllerFlags) -> Operator {
        create_agent_identity(&self.client)
            .await
            .expect("the operator's namespace and the agents' ServiceAccount");
        let reports_port = free_port();
        let receiver = ReceiverFlags::try_parse_from([
            "operator".to_owned(),
            format!("--reports-address=127.0.0.1:{reports_port}"),
            format!("--agent-service-account={AGENT_NAMESPACE}:{AGENT_SERVICE_ACCOUNT}"),
        ])
        .expect("valid receiver flags")
        .reports;
        let settings = flags.runtime.settings();
        let inner = self.component(crate::CONTROLLER_THREAD, settings, move |operator| {
            Box::pin(async move {
                let mut managed = Managed::new(
                    OPERATOR_NAMESPACE,
                    Subject {
                        dns_names: Vec::new(),
                        ip_addresses: vec![std::net::IpAddr::from([127, 0, 0, 1])],
                    },
                );
                managed.ca_config_map = Some(CaConfigMap {
                    namespace: AGENT_NAMESPACE.into(),
                    name: CA_CONFIG_MAP.into(),
                });
                let certificates =
                    CertManager::start_in(CertConfig::Managed(managed), &operator).expect("the certificates start");
                let tls = resolver::server_config(certificates.resolver(), vec![b"h2".to_vec()])
                    .expect("a TLS configuration");
                let mut receiver = receiver;
                receiver.status_byte_budget = flags.controller.status_byte_budget;
                let controller = spark_operator_controller::run(flags.controller, &operator);
                let reports = spark_operator_controller::reports::serve(
                    receiver,
                    tokio_rustls::TlsAcceptor::from(tls),
                    &operator,
                );
                let (controller, reports) = tokio::join!(controller, reports);
                if let Err(error) = controller {
                    eprintln!("controller stopped: {error}");
                }
                if let Err(error) = reports {
                    eprintln!("report receiver stopped: {error}");
                }
                drop(certificates);
            })
        });
        Operator { reports_port, inner }
    }

    /// Starts the agent of `node` (a name from `sim.nodes()`), reporting to `operator`'s receiver. Its
    /// spool and log store are kept per node, so an agent started again on the same node resumes them.
    pub async fn agent(&self, node: &str, operator: &Operator, extra: &[&str]) -> Agent {
        let dir = self.agents_dir().join(node);
        let handle = self.sim.nodes().node(node).expect("a node of the sim");
        let report_address = format!("https://127.0.0.1:{}", operator.reports_port);
        let flags = prepare_agent(
            &self.client,
            AgentSetup {
                node: &handle,
                dir: &dir,
                report_address: &report_address,
                ca_config_map: (AGENT_NAMESPACE, CA_CONFIG_MAP),
            },
        )
        .await
        .expect("the agent's token, CA bundle and pod");
        let metrics_port = free_port();
        let mut argv = vec![
            "agent".to_owned(),
            format!("--metrics-address=127.0.0.1:{metrics_port}"),
            format!("--identity=agent-{node}"),
        ];
        argv.extend(flags);
        argv.extend(extra.iter().map(|a| (*a).to_owned()));
        let flags = AgentFlags::try_parse_from(argv).expect("valid agent flags");
        let mut settings = flags.runtime.settings();
        settings.election = None;
        let inner = self.component(crate::AGENT_THREAD, settings, move |runtime| {
            Box::pin(async move {
                if let Err(error) = spark_operator_agent::run(flags.agent, &runtime).await {
                    eprintln!("agent stopped: {error}");
                }
            })
        });
        Agent {
            node: node.to_owned(),
            metrics_port,
            inner,
        }
    }

    /// One agent on every node of the sim.
    pub async fn agents(&self, operator: &Operator) -> Vec<Agent> {
        let mut agents = Vec::new();
        for node in self.sim.nodes().node_names() {
            agents.push(self.agent(&node, operator, &[]).await);
        }
        agents
    }
}
