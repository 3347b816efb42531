//! `spark-operator dev`: a whole local cluster with the operator in it, in one process. It starts the
//! simulated cluster (`spark_operator_dev`, the same setup the end-to-end tests use), runs the operator's
//! components against it as `spark-operator operator` composes them, writes a kubeconfig and prints what
//! to try. Only built with the `dev` feature (default; off in the container image).
//!
//! The controller, webhook and report receiver run as the chart's operator ServiceAccount and the node
//! agents as its agent ServiceAccount, each bound by the chart's RBAC only (`spark_operator_dev::identity`),
//! as on a real cluster: what the chart does not grant fails here too. What Helm does as the installer (the
//! CRDs, the job namespaces, the webhook configurations, the RBAC itself) is done as the administrator, whose
//! kubeconfig is the one printed for the user.

use std::io::Write;
use std::path::PathBuf;

use anyhow::Context as _;
use clap::Parser;
use k8s_openapi::api::admissionregistration::v1::{MutatingWebhookConfiguration, ValidatingWebhookConfiguration};
use kube::api::{Api, Patch, PatchParams};
use kube_sim::node::real_spark::{self, SparkDistribution, SparkHome};
use kube_sim::node::{LocalImage, PodGc, Volcano};
use spark_operator_agent::AgentArgs;
use spark_operator_api::permissions::ResourceName;
use spark_operator_controller::{ControllerArgs, ReceiverArgs};
use spark_operator_dev::agents::{
    AGENT_NAMESPACE, AGENT_SERVICE_ACCOUNT, AgentSetup, OPERATOR_NAMESPACE, prepare_agent,
};
use spark_operator_dev::identity::{self, OPERATOR_SERVICE_ACCOUNT, Release};
use spark_operator_dev::{Cluster, ClusterOptions};
use spark_operator_runtime::args::{Listen, parse_listen};
use spark_operator_runtime::error_chain::ErrorChain;
use spark_operator_runtime::{Runtime, RuntimeSettings, logging, shutdown::Shutdown, tokio_runtime};
use spark_operator_webhook::WebhookArgs;
use spark_operator_webhook::configuration::{
    self, ConfigurationInput, Endpoint, MUTATING_NAME, Scope, VALIDATING_NAME,
};
use std::net::{IpAddr, SocketAddr};

use super::operator::{Components, serve};

#[derive(Debug, clap::Args)]
pub struct DevArgs {
    /// Where the cluster keeps its files (certificates, node directories, pod logs).
    #[arg(long, default_value = "/tmp/spark-operator-dev")]
    pub data_dir: PathBuf,

    /// Where to write the kubeconfig; default: <data-dir>/kubeconfig.
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,

    /// API server port on 127.0.0.1; 0 picks a free one.
    #[arg(long, default_value_t = 0)]
    pub port: u16,

    /// Number of nodes.
    #[arg(long, default_value_t = 3)]
    pub nodes: usize,

    /// Terminated-pod GC: off, instant, or a delay such as 30s.
    #[arg(long, default_value = "off")]
    pub pod_gc: PodGc,

    /// IMAGE=PATH: pods with this image run PATH as a real process in the cluster (repeatable; the
    /// environment variable takes a comma-separated list).
    #[arg(long = "local-image", value_delimiter = ',')]
    pub local_image: Vec<LocalImage>,

    /// How the cluster authorizes requests: RBAC (with Kubernetes' bootstrap roles, as a real cluster)
    /// or AlwaysAllow.
    #[arg(long, default_value = "RBAC")]
    pub authorization_mode: kube_sim::auth::AuthorizationMode,

    /// The cluster's Volcano, for `batchScheduler: volcano`: gang (Volcano's gang admission of PodGroups,
    /// with its PodGroup CRD installed), no-gang (each pod placed on its own, ignoring its PodGroup) or off
    /// (no Volcano: its pods stay Pending).
    #[arg(long, default_value = "gang")]
    pub volcano: Volcano,

    /// Run Spark's own driver and executors: the `apache/spark` and `spark` images of each Spark version
    /// line in --spark-home are built from its distribution (needs root for process pods, and a JDK 17).
    #[arg(long)]
    pub real_spark: bool,

    /// LINE=DIR with --real-spark: the Spark distribution (an unpacked pyspark source package's `deps`
    /// directory) behind every image tag of a version line, e.g. 4=DIR backs apache/spark:4.0.4 and
    /// spark:4.1.0-python3 (repeatable; the environment variable takes a comma-separated list). Default:
    /// the releases sim/images/real-spark/get-spark.sh caches, 4.3.0 for 4 and 3.5.3 for 3.5, those present.
    #[arg(long = "spark-home", value_delimiter = ',', requires = "real_spark")]
    pub spark_home: Vec<SparkHome>,

    /// Kinds of owner the webhook may read in the job namespaces, as `resource.group` (`configmaps`,
    /// `workflows.argoproj.io`), as the chart's `webhook.ownerResources` grants them; an owner of another kind
    /// is admitted with a warning (comma-separated).
    #[arg(long, value_delimiter = ',')]
    pub owner_resources: Vec<String>,

    /// Address of /metrics, /healthz and /readyz of every component dev runs; `off` to serve nothing.
    #[arg(long, default_value = "127.0.0.1:8080", value_parser = parse_listen)]
    pub metrics_address: Listen,
}

/// The controller's flags for the dev cluster: its defaults, drivers pointed at the simulated API server,
/// watching the job namespaces (its RBAC is there only, as the chart's with `spark.jobNamespaces`).
fn controller_args(master: &str, volcano: Volcano, namespaces: &[String]) -> anyhow::Result<ControllerArgs> {
    #[derive(Parser)]
    struct Wrapper {
        #[command(flatten)]
        args: ControllerArgs,
    }
    // With the sim's Volcano, applications naming it run through the integration, as on a cluster
    // where the chart enables batch scheduling (controller.batchScheduler.enable).
    let batch = if volcano == Volcano::Off {
        "--enable-batch-scheduler=false"
    } else {
        "--enable-batch-scheduler=true"
    };
    let argv = [
        "controller".to_owned(),
        format!("--spark-master-url={master}"),
        batch.to_owned(),
        format!("--namespaces={}", namespaces.join(",")),
    ];
    Ok(Wrapper::try_parse_from(argv).context("the controller's settings")?.args)
}

/// A free loopback port (bound and released: the webhook configurations need it before the server runs).
fn free_port() -> std::io::Result<u16> {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
}

/// The report receiver's flags for the dev cluster: its defaults, on `127.0.0.1:<port>`.
fn receiver_args(port: u16) -> anyhow::Result<ReceiverArgs> {
    #[derive(Parser)]
    struct Wrapper {
        #[command(flatten)]
        args: ReceiverArgs,
    }
    let argv = ["operator".to_owned(), format!("--reports-address=127.0.0.1:{port}")];
    Ok(Wrapper::try_parse_from(argv)
        .context("the report receiver's settings")?
        .args)
}

/// Runs `spark-operator agent` for every node, as the chart's DaemonSet does, until `shutdown`.
async fn run_agents(
    config: kube::Config,
    client: kube::Client,
    nodes: Vec<kube_sim::node::NodeHandle>,
    dir: PathBuf,
    report_address: String,
    ca_config_map: String,
    shutdown: Shutdown,
) {
    #[derive(Parser)]
    struct Wrapper {
        #[command(flatten)]
        args: AgentArgs,
    }
    let mut running = tokio::task::JoinSet::new();
    for node in nodes {
        let setup = AgentSetup {
            node: &node,
            dir: &dir.join(node.name()),
            report_address: &report_address,
            ca_config_map: (AGENT_NAMESPACE, &ca_config_map),
        };
        let flags = match prepare_agent(&client, setup).await {
            Ok(flags) => flags,
            Err(error) => {
                tracing::error!(node = node.name(), error = %ErrorChain(&error), "cannot start the node's agent");
                continue;
            }
        };
        let args = match Wrapper::try_parse_from(std::iter::once("agent".to_owned()).chain(flags)) {
            Ok(wrapper) => wrapper.args,
            Err(error) => {
                tracing::error!(node = node.name(), %error, "the agent's flags");
                continue;
            }
        };
        let settings = RuntimeSettings {
            identity: format!("spark-operator-agent-{}", node.name()),
            election: None,
            metrics: Listen::Off,
        };
        let (config, shutdown) = (config.clone(), shutdown.clone());
        running.spawn(async move {
            let runtime = match Runtime::start(config, settings, shutdown).await {
                Ok(runtime) => runtime,
                Err(error) => return tracing::error!(error = %ErrorChain(&error), "an agent's runtime"),
            };
            if let Err(error) = spark_operator_agent::run(args, &runtime).await {
                tracing::error!(error = %ErrorChain(&error), "an agent stopped");
            }
            runtime.stop().await;
        });
    }
    while running.join_next().await.is_some() {}
}

/// Registers the webhook configurations, as the chart does in a cluster.
async fn register_webhook(client: &kube::Client, port: u16) -> anyhow::Result<()> {
    let input = ConfigurationInput {
        endpoint: Endpoint::Url(format!("https://127.0.0.1:{port}")),
        failure_policy: "Fail".into(),
        timeout_seconds: 10,
        scope: Scope::All,
        ca_bundle: Vec::new(),
    };
    let apply = PatchParams::apply("spark-operator-dev").force();
    let mutating: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    mutating
        .patch(MUTATING_NAME, &apply, &Patch::Apply(configuration::mutating(&input)))
        .await
        .context("registering the mutating webhook")?;
    let validating: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    validating
        .patch(
            VALIDATING_NAME,
            &apply,
            &Patch::Apply(configuration::validating(&input)),
        )
        .await
        .context("registering the validating webhook")?;
    Ok(())
}

/// The Spark images `--real-spark` builds (next to each distribution), as local images, with a line per
/// version line saying which release backs it.
fn real_spark_images(args: &DevArgs) -> anyhow::Result<(Vec<LocalImage>, String)> {
    kube_sim::node::sandbox::supported().map_err(|reason| {
        anyhow::anyhow!("--real-spark runs Spark as process pods, which cannot run here: {reason}")
    })?;
    let homes = if args.spark_home.is_empty() {
        let cached: Vec<SparkHome> = real_spark::cached_homes()
            .into_iter()
            .filter(|h| h.dir.join("bin/spark-submit").is_file())
            .collect();
        anyhow::ensure!(
            !cached.is_empty(),
            "--real-spark needs a Spark distribution: run sim/images/real-spark/get-spark.sh 4.3.0 (or 3.5.3), \
             or name one with --spark-home 4=DIR"
        );
        cached
    } else {
        args.spark_home.clone()
    };
    let mut images = Vec::new();
    let mut said = String::new();
    for home in homes {
        let dist = SparkDistribution::open(&home.dir).with_context(|| format!("--spark-home {}", home.line))?;
        // Next to the distribution: hard links into it, where a data dir on another filesystem would
        // get a copy of it.
        let dir = real_spark::image_dir(&dist);
        real_spark::build_image(&dist, &dir).with_context(|| format!("building the Spark {} image", dist.version))?;
        said.push_str(&format!(
            "  apache/spark:{line}.* and spark:{line}.* run Spark {version} ({home})\n",
            line = home.line,
            version = dist.version,
            home = dist.home.display(),
        ));
        images.extend(real_spark::local_images(&home.line, &dir));
    }
    Ok((images, said))
}

/// Runs the dev cluster until Ctrl-C or SIGTERM.
pub async fn dev(args: DevArgs, out: &mut impl Write) -> anyhow::Result<()> {
    let mut local_images = args.local_image.clone();
    let mut real_spark = String::new();
    if args.real_spark {
        let (images, said) = real_spark_images(&args)?;
        // Images named with --local-image come first: an exact tag there beats the lines' patterns anyway.
        local_images.extend(images);
        real_spark = format!("\nReal Spark, as process pods:\n{said}");
    }
    let options = ClusterOptions {
        nodes: args.nodes,
        pod_gc: args.pod_gc,
        port: args.port,
        kubeconfig: args.kubeconfig.clone(),
        local_images,
        authorization: args.authorization_mode,
        volcano: args.volcano,
        ..ClusterOptions::default()
    };
    let cluster = Cluster::start(&args.data_dir, &options).await?;
    let kubeconfig = cluster.sim.kubeconfig_path().display().to_string();
    let controller = controller_args(&cluster.spark_master_url(), args.volcano, &options.job_namespaces)?;

    // The operator's and the agents' ServiceAccounts with the chart's RBAC for this configuration, and a
    // kubeconfig of each (a token of its ServiceAccount), installed as Helm would install the chart.
    let release = Release {
        batch_scheduler: controller.enable_batch_scheduler,
        driver_pdb: controller.enable_driver_pdb,
        owner_resources: args.owner_resources.clone(),
        ..Release::new(options.job_namespaces.clone())
    };
    identity::install(&cluster.client, &release)
        .await
        .context("installing the chart's ServiceAccounts and RBAC")?;
    let identities = args.data_dir.join("identities");
    let admin = cluster.sim.kubeconfig_path();
    let operator_kubeconfig = identity::write_service_account_kubeconfig(
        &cluster.client,
        admin,
        &identities,
        &release.namespace,
        OPERATOR_SERVICE_ACCOUNT,
    )
    .await
    .context("the operator's kubeconfig")?;
    let agent_kubeconfig = identity::write_service_account_kubeconfig(
        &cluster.client,
        admin,
        &identities,
        &release.agent_namespace,
        AGENT_SERVICE_ACCOUNT,
    )
    .await
    .context("the agents' kubeconfig")?;
    let examples = std::env::current_dir()
        .map(|d| d.join("examples/spark-pi.yaml"))
        .ok()
        .filter(|p| p.exists())
        .map_or_else(|| "examples/spark-pi.yaml".to_owned(), |p| p.display().to_string());

    // One replica, no election: it always leads.
    let settings = RuntimeSettings {
        identity: "spark-operator-dev".to_owned(),
        election: None,
        metrics: args.metrics_address,
    };
    let config = spark_operator_runtime::client::config_from(Some(&operator_kubeconfig)).await?;
    let runtime = Runtime::start(config, settings, Shutdown::on_signals()).await?;
    let agent_config = spark_operator_runtime::client::config_from(Some(&agent_kubeconfig)).await?;
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
         \x20 kubectl config use-context kube-sim-token   # spark-operator logs needs a user with a token\n\
         \x20 spark-operator logs spark-pi                # kept by the node agents, after the pods are gone\n\
         {metrics}\
         \n\
         The operator runs as the chart's ServiceAccount {operator_namespace}/{OPERATOR_SERVICE_ACCOUNT}, bound by the chart's RBAC\n\
         only (its kubeconfig: {operator_kubeconfig}).\n\
         {real_spark}\
         \n\
         Ctrl-C stops everything.",
        nodes = args.nodes,
        url = cluster.sim.url(),
        operator_namespace = release.namespace,
        operator_kubeconfig = operator_kubeconfig.display(),
        metrics = match runtime.metrics_address() {
            Some(address) => format!("  curl -s http://{address}/metrics | grep ^spark_\n"),
            None => String::new(),
        },
    )
    .context("writing to standard output")?;
    out.flush().ok();

    // The webhook on a loopback port the API server calls over HTTPS, registered fail-closed: a Spark pod
    // gets all of its application's settings or is not created. Its certificate is for 127.0.0.1; it
    // fills the configurations' caBundle itself.
    let webhook_port = free_port().context("a port for the webhook")?;
    let mut webhook = WebhookArgs::listening_on(SocketAddr::from(([127, 0, 0, 1], webhook_port)));
    webhook.webhook_ip_addresses = vec![IpAddr::from([127, 0, 0, 1])];
    webhook.webhook_namespace = OPERATOR_NAMESPACE.to_owned();
    webhook.webhook_ca_config_map_namespace = Some(AGENT_NAMESPACE.to_owned());
    // The chart's names (its RBAC grants these objects by name), as its Deployment passes them.
    webhook.webhook_ca_secret = identity::resolve(ResourceName::CaSecret);
    webhook.webhook_ca_config_map = identity::resolve(ResourceName::CaConfigMap);
    webhook.webhook_mutating_configuration = identity::resolve(ResourceName::MutatingWebhookConfiguration);
    webhook.webhook_validating_configuration = identity::resolve(ResourceName::ValidatingWebhookConfiguration);
    // It caches the applications of the controller's namespaces, where it may read them.
    webhook.namespaces = options.job_namespaces.clone();
    register_webhook(&cluster.client, webhook_port).await?;
    // The agents' report receiver, on a loopback port, with the webhook's certificate (valid for
    // 127.0.0.1) from the CA the agents find in the `spark-operator-ca` ConfigMap.
    let reports_port = free_port().context("a port for the report receiver")?;
    let reports = receiver_args(reports_port)?;
    let ca_config_map = webhook.webhook_ca_config_map.clone();
    let mut receiver = reports;
    receiver.status_byte_budget = controller.status_byte_budget;
    let components = Components {
        controller: Some(controller),
        webhook: Some(webhook),
        reports: Some(receiver),
    };
    // One agent per node, started once the operator published its CA; each its own runtime, as its own
    // process would be, stopping with the operator.
    let agents = tokio::spawn(run_agents(
        agent_config,
        cluster.client.clone(),
        cluster.sim.nodes().nodes(),
        args.data_dir.join("agents"),
        format!("https://127.0.0.1:{reports_port}"),
        ca_config_map,
        runtime.shutdown().clone(),
    ));
    let result = serve(components, runtime).await;
    agents.abort();
    cluster.sim.shutdown().await;
    result.context("the operator stopped")?;
    Ok(())
}

pub fn run(args: DevArgs, out: &mut impl Write) -> anyhow::Result<()> {
    logging::init();
    tokio_runtime()?.block_on(dev(args, out))
}
