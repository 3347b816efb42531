//! `spark-operator dev`: a whole local cluster with the operator in it, in one process. It starts the
//! simulated cluster (kube-sim: an API server, nodes with kubelets and a fake Spark driver), installs
//! the CRDs, runs the controller against it, writes a kubeconfig and prints what to try.

use std::io::Write;
use std::path::PathBuf;

use anyhow::Context as _;
use clap::Parser;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, Patch, PatchParams};
use kube_sim::node::{NodeSpec, NodesConfig, PodGc};
use kube_sim::{Sim, SimConfig};
use spark_operator_controller::ControllerArgs;

#[derive(Debug, clap::Args)]
pub struct DevArgs {
    /// Where the cluster keeps its files (certificates, node directories, pod logs).
    #[arg(long, default_value = "/tmp/spark-operator-dev", env = "SPARK_OPERATOR_DEV_DATA_DIR")]
    pub data_dir: PathBuf,

    /// Where to write the kubeconfig; default: <data-dir>/kubeconfig.
    #[arg(long, env = "SPARK_OPERATOR_DEV_KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,

    /// API server port on 127.0.0.1; 0 picks a free one.
    #[arg(long, default_value_t = 0, env = "SPARK_OPERATOR_DEV_PORT")]
    pub port: u16,

    /// Number of nodes.
    #[arg(long, default_value_t = 3, env = "SPARK_OPERATOR_DEV_NODES")]
    pub nodes: usize,

    /// Terminated-pod GC: off, instant, or a delay such as 30s.
    #[arg(long, default_value = "off", env = "SPARK_OPERATOR_DEV_POD_GC")]
    pub pod_gc: PodGc,

    /// Address of the controller's /metrics, /healthz and /readyz; `off` to serve nothing.
    #[arg(long, default_value = "127.0.0.1:8080", env = "SPARK_OPERATOR_DEV_METRICS_ADDRESS")]
    pub metrics_address: String,
}

/// The controller's flags for the dev cluster: one replica, no election.
fn controller_args(args: &DevArgs, master: &str) -> anyhow::Result<ControllerArgs> {
    #[derive(Parser)]
    struct Wrapper {
        #[command(flatten)]
        args: ControllerArgs,
    }
    let argv = [
        "controller".to_owned(),
        "--leader-election=false".to_owned(),
        format!("--metrics-address={}", args.metrics_address),
        format!("--spark-master-url={master}"),
    ];
    Ok(Wrapper::try_parse_from(argv).context("the controller's settings")?.args)
}

async fn install_crds(client: &kube::Client) -> anyhow::Result<()> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in spark_operator_api::crd::all_crds() {
        let name = crd.metadata.name.clone().unwrap_or_default();
        crds.patch(
            &name,
            &PatchParams::apply("spark-operator").force(),
            &Patch::Apply(&crd),
        )
        .await
        .with_context(|| format!("installing the CRD {name}"))?;
    }
    Ok(())
}

/// Runs the dev cluster until Ctrl-C or SIGTERM.
pub async fn dev(args: DevArgs, out: &mut impl Write) -> anyhow::Result<()> {
    let mut config = SimConfig::new(&args.data_dir);
    config.kubeconfig_path = args.kubeconfig.clone();
    config.port = args.port;
    config.nodes = NodesConfig {
        nodes: (1..=args.nodes).map(NodeSpec::numbered).collect(),
        pod_gc: args.pod_gc,
        ..NodesConfig::default()
    };
    // Pods mount kube-root-ca.crt through their API-access volume, as in a real cluster.
    config.root_ca_configmap = args.nodes > 0;
    let sim = Sim::start(config).await.context("starting the simulated cluster")?;
    let client = sim.client().await.context("connecting to the simulated cluster")?;
    install_crds(&client).await?;
    let kubeconfig = sim.kubeconfig_path().display().to_string();
    let examples = std::env::current_dir()
        .map(|d| d.join("examples/spark-pi.yaml"))
        .ok()
        .filter(|p| p.exists())
        .map_or_else(|| "examples/spark-pi.yaml".to_owned(), |p| p.display().to_string());
    writeln!(
        out,
        "A simulated cluster with {nodes} nodes and the Spark operator is running at {url}.\n\
         \n\
         Try:\n\
         \x20 export KUBECONFIG={kubeconfig}\n\
         \x20 kubectl get nodes\n\
         \x20 kubectl apply -f {examples}\n\
         \x20 kubectl get sparkapp -w\n\
         \x20 kubectl describe sparkapp spark-pi\n\
         \x20 kubectl get pods\n\
         \x20 kubectl logs spark-pi-driver\n\
         {metrics}\
         \n\
         Ctrl-C stops everything.",
        nodes = args.nodes,
        url = sim.url(),
        metrics = match args.metrics_address.as_str() {
            "off" | "" | "0" => String::new(),
            address => format!("  curl -s http://{address}/metrics | grep ^spark_\n"),
        },
    )
    .context("writing to standard output")?;
    out.flush().ok();

    let controller_args = controller_args(&args, &format!("k8s://{}", sim.url()))?;
    let result = spark_operator_controller::run_with_client(
        client,
        controller_args,
        format!("k8s://{}", sim.url()),
        spark_operator_controller::shutdown_signal(),
    )
    .await;
    sim.shutdown().await;
    result.context("the controller stopped")?;
    Ok(())
}

pub fn run(args: DevArgs, out: &mut impl Write) -> anyhow::Result<()> {
    super::controller::init_tracing();
    super::controller::runtime()?.block_on(dev(args, out))
}
