//! `kube-sim serve`: runs the simulated API server until SIGINT/SIGTERM.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use kube_sim::{Sim, SimConfig};

#[derive(Parser)]
#[command(
    name = "kube-sim",
    about = "A simulated Kubernetes API server for tests and local development"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the API on 127.0.0.1 and write a kubeconfig once ready.
    Serve {
        /// Directory for the sim's files (CA certificate, ...).
        #[arg(long, env = "KUBE_SIM_DATA_DIR")]
        data_dir: PathBuf,
        /// Where to write the kubeconfig (default: <data-dir>/kubeconfig).
        #[arg(long, env = "KUBE_SIM_KUBECONFIG")]
        kubeconfig: Option<PathBuf>,
        /// Port on 127.0.0.1 (0 = a free one).
        #[arg(long, env = "KUBE_SIM_PORT", default_value_t = 0)]
        port: u16,
        /// Seconds between watch bookmarks.
        #[arg(long, env = "KUBE_SIM_BOOKMARK_INTERVAL_SECONDS", default_value_t = 60)]
        bookmark_interval_seconds: u64,
        /// Number of nodes (sim-node-1 .. sim-node-N), each with a kubelet and a CRI socket.
        #[arg(long, env = "KUBE_SIM_NODES", default_value_t = 1)]
        nodes: usize,
        /// Terminated-pod GC: instant, off, or a delay such as 30s.
        #[arg(long, env = "KUBE_SIM_POD_GC", default_value = "off")]
        pod_gc: kube_sim::node::PodGc,
        /// IMAGE=PATH: pods with this image run PATH as a real process (repeatable; the env
        /// variable takes a comma-separated list).
        #[arg(long = "local-image", env = "KUBE_SIM_LOCAL_IMAGE", value_delimiter = ',')]
        local_image: Vec<kube_sim::node::LocalImage>,
        /// Service cluster IPs (kube-apiserver's flag), inside 127.0.0.0/8; default 127.B.0.0/18
        /// of a free block 127.B.0.0/16.
        #[arg(long, env = "KUBE_SIM_SERVICE_CLUSTER_IP_RANGE")]
        service_cluster_ip_range: Option<kube_sim::network::Ipv4Cidr>,
        /// Pod addresses (kube-controller-manager's flag; a /24 per node); default 127.B.128.0/17.
        #[arg(long, env = "KUBE_SIM_CLUSTER_CIDR")]
        cluster_cidr: Option<kube_sim::network::Ipv4Cidr>,
        /// Node InternalIPs; default 127.B.64.0/18.
        #[arg(long, env = "KUBE_SIM_NODE_IP_RANGE")]
        node_ip_range: Option<kube_sim::network::Ipv4Cidr>,
        /// How requests are authorized: RBAC (with the bootstrap policy) or AlwaysAllow.
        #[arg(long, env = "KUBE_SIM_AUTHORIZATION_MODE", default_value = "RBAC")]
        authorization_mode: kube_sim::auth::AuthorizationMode,
        /// The Volcano stand-in for pods with `schedulerName: volcano`: off (they stay Pending), gang
        /// (Volcano's gang admission; Volcano's PodGroup CRD is installed) or no-gang (each pod placed on
        /// its own).
        #[arg(long, env = "KUBE_SIM_VOLCANO", default_value = "off")]
        volcano: kube_sim::node::Volcano,
    },
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_env("KUBE_SIM_LOG").unwrap_or_else(|_| "info".into()))
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    match cli.command {
        Command::Serve {
            data_dir,
            kubeconfig,
            port,
            bookmark_interval_seconds,
            nodes,
            pod_gc,
            local_image,
            service_cluster_ip_range,
            cluster_cidr,
            node_ip_range,
            authorization_mode,
            volcano,
        } => {
            let mut config = SimConfig::new(data_dir);
            config.kubeconfig_path = kubeconfig;
            config.authorization = authorization_mode;
            config.port = port;
            config.bookmark_interval = Duration::from_secs(bookmark_interval_seconds.max(1));
            config.nodes = kube_sim::node::NodesConfig::with_nodes(nodes);
            config.nodes.pod_gc = pod_gc;
            config.nodes.kubelet.local_images = local_image;
            config.nodes.volcano = volcano;
            config.network.service_cluster_ip_range = service_cluster_ip_range;
            config.network.cluster_cidr = cluster_cidr;
            config.network.node_ip_range = node_ip_range;
            // Pods mount kube-root-ca.crt through their API-access volume; with nodes running
            // pods it must exist, as in a real cluster.
            config.root_ca_configmap |= nodes > 0;
            // Signals are caught from the start: a SIGTERM while the sim is still starting stops
            // it too (exit 0), and a second one during shutdown ends the process at once.
            let mut signals = Signals::install()?;
            let sim = tokio::select! {
                sim = Sim::start(config) => sim.context("starting kube-sim")?,
                r = signals.next() => return r,
            };
            if volcano != kube_sim::node::Volcano::Off {
                install_volcano_crd(&sim).await?;
            }
            println!(
                "kube-sim serving at {} (kubeconfig: {})",
                sim.url(),
                sim.kubeconfig_path().display()
            );
            let net = sim.network().addresses();
            println!(
                "network: services {}, nodes {}, pods {}, DNS {} ({})",
                net.service_range,
                net.node_range,
                net.pod_range,
                net.dns_addr(),
                net.cluster_domain
            );
            signals.next().await?;
            tokio::select! {
                () = sim.shutdown() => {}
                r = signals.next() => r?,
            }
            Ok(())
        }
    }
}

/// Volcano's PodGroup CRD, as Volcano's installation brings it.
async fn install_volcano_crd(sim: &Sim) -> anyhow::Result<()> {
    let crd = kube_sim::node::volcano::podgroup_crd()?;
    let gvr = kube_sim::registry::Gvr::new("apiextensions.k8s.io", "v1", "customresourcedefinitions");
    sim.store()
        .create(&gvr, "", crd, &kube_sim::store::WriteOptions::default())
        .await
        .context("installing Volcano's PodGroup CRD")?;
    Ok(())
}

/// SIGINT and SIGTERM.
struct Signals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
}

impl Signals {
    fn install() -> anyhow::Result<Self> {
        use tokio::signal::unix::{SignalKind, signal};
        Ok(Self {
            term: signal(SignalKind::terminate()).context("installing the SIGTERM handler")?,
            int: signal(SignalKind::interrupt()).context("installing the SIGINT handler")?,
        })
    }

    /// The next SIGINT or SIGTERM.
    async fn next(&mut self) -> anyhow::Result<()> {
        tokio::select! {
            _ = self.term.recv() => {}
            _ = self.int.recv() => {}
        }
        Ok(())
    }
}
