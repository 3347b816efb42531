//! `spark-operator cleanup`: releases the driver-protection finalizer of every pod the operator
//! launched, so an uninstalled operator strands no pod (usable as a Helm pre-delete hook).

use std::io::Write;
use std::path::PathBuf;

#[derive(Debug, clap::Args)]
pub struct CleanupArgs {
    /// Namespaces to clean, comma-separated; empty: all namespaces.
    #[arg(long, value_delimiter = ',', env = "SPARK_OPERATOR_CLEANUP_NAMESPACES")]
    pub namespaces: Vec<String>,

    /// kubeconfig to use; default: KUBECONFIG, ~/.kube/config or the in-cluster service account.
    #[arg(long, env = "KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
}

#[derive(Debug, thiserror::Error)]
pub enum CleanupError {
    #[error("could not read the kubeconfig {path}")]
    Kubeconfig {
        path: String,
        #[source]
        source: kube::config::KubeconfigError,
    },
    #[error("could not find the cluster (KUBECONFIG, ~/.kube/config or in-cluster)")]
    Infer(#[source] kube::config::InferConfigError),
    #[error("could not build the Kubernetes client")]
    Client(#[source] kube::Error),
    #[error(transparent)]
    Release(#[from] spark_operator_controller::driver_finalizer::Error),
    #[error("could not write to standard output")]
    Output(#[source] std::io::Error),
}

async fn client(args: &CleanupArgs) -> Result<kube::Client, CleanupError> {
    let config = match &args.kubeconfig {
        Some(path) => {
            let kubeconfig = kube::config::Kubeconfig::read_from(path).map_err(|source| CleanupError::Kubeconfig {
                path: path.display().to_string(),
                source,
            })?;
            kube::Config::from_custom_kubeconfig(kubeconfig, &kube::config::KubeConfigOptions::default())
                .await
                .map_err(|source| CleanupError::Kubeconfig {
                    path: path.display().to_string(),
                    source,
                })?
        }
        None => kube::Config::infer().await.map_err(CleanupError::Infer)?,
    };
    kube::Client::try_from(config).map_err(CleanupError::Client)
}

/// Releases every finalizer and says how many pods it released.
pub async fn cleanup(args: &CleanupArgs, out: &mut impl Write) -> Result<usize, CleanupError> {
    let client = client(args).await?;
    let namespaces: Vec<String> = args
        .namespaces
        .iter()
        .map(|n| n.trim().to_owned())
        .filter(|n| !n.is_empty())
        .collect();
    let released = spark_operator_controller::driver_finalizer::cleanup(&client, &namespaces).await?;
    writeln!(out, "released the driver-protection finalizer of {released} pod(s)").map_err(CleanupError::Output)?;
    Ok(released)
}

pub fn run(args: &CleanupArgs, out: &mut impl Write) -> anyhow::Result<()> {
    super::controller::init_tracing();
    super::controller::runtime()?.block_on(cleanup(args, out))?;
    Ok(())
}
