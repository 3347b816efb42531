//! `spark-operator cleanup`: releases the driver-protection finalizer of every pod the operator
//! launched, so an uninstalled operator strands no pod (usable as a Helm pre-delete hook).

use std::io::Write;
use std::path::PathBuf;

use spark_operator_runtime::{client, logging, tokio_runtime};

#[derive(Debug, clap::Args)]
pub struct CleanupArgs {
    /// Namespaces to clean, comma-separated; empty: all namespaces.
    #[arg(long, value_delimiter = ',')]
    pub namespaces: Vec<String>,

    /// kubeconfig to use; default: KUBECONFIG, ~/.kube/config or the in-cluster service account.
    #[arg(long, env = "KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
}

#[derive(Debug, thiserror::Error)]
pub enum CleanupError {
    #[error(transparent)]
    Client(#[from] spark_operator_runtime::client::Error),
    #[error(transparent)]
    Release(#[from] spark_operator_controller::app::driver_finalizer::Error),
    #[error("could not write to standard output")]
    Output(#[source] std::io::Error),
}

async fn client(args: &CleanupArgs) -> Result<kube::Client, CleanupError> {
    let config = client::config_from(args.kubeconfig.as_deref()).await?;
    Ok(client::client(config)?)
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
    let released = spark_operator_controller::app::driver_finalizer::cleanup(&client, &namespaces).await?;
    writeln!(out, "released the driver-protection finalizer of {released} pod(s)").map_err(CleanupError::Output)?;
    Ok(released)
}

pub fn run(args: &CleanupArgs, out: &mut impl Write) -> anyhow::Result<()> {
    logging::init();
    tokio_runtime()?.block_on(cleanup(args, out))?;
    Ok(())
}
