//! `spark-operator cleanup`: the chart's pre-delete hook. The steps, their order and why are in
//! `spark_operator_controller::uninstall`; this module is the command line around them.

use std::io::Write;
use std::path::PathBuf;

use spark_operator_controller::uninstall::{self, ObjectName, Plan, parse_object_name};
use spark_operator_runtime::{client, logging, tokio_runtime};

#[derive(Debug, clap::Args)]
pub struct CleanupArgs {
    /// Namespaces whose driver pods get their finalizer released, comma-separated; empty: all namespaces.
    #[arg(long, value_delimiter = ',')]
    pub namespaces: Vec<String>,

    /// kubeconfig to use; default: KUBECONFIG, ~/.kube/config or the in-cluster service account.
    #[arg(long, env = "KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,

    /// Step 1: the MutatingWebhookConfiguration to delete (a missing one is fine).
    #[arg(long, value_name = "NAME")]
    pub mutating_webhook_configuration: Option<String>,

    /// Step 1: the ValidatingWebhookConfiguration to delete (a missing one is fine).
    #[arg(long, value_name = "NAME")]
    pub validating_webhook_configuration: Option<String>,

    /// Step 2: the operator's Deployment, scaled to zero; the cleanup waits until its pods are gone.
    #[arg(long, value_name = "NAMESPACE/NAME", value_parser = parse_object_name)]
    pub operator_deployment: Option<ObjectName>,

    /// Step 2: how long to wait for the operator's pods to be gone, in seconds.
    #[arg(long, value_name = "SECONDS", default_value_t = 120, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub timeout: u64,

    /// Step 3: release the driver-protection finalizer of the operator's pods in --namespaces.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, value_name = "BOOL")]
    pub release_finalizers: bool,

    /// Step 4: the webhook's CA Secret to delete.
    #[arg(long, value_name = "NAMESPACE/NAME", value_parser = parse_object_name)]
    pub ca_secret: Option<ObjectName>,

    /// Step 4: a CA ConfigMap to delete; repeatable (or comma-separated).
    #[arg(long, value_name = "NAMESPACE/NAME", value_parser = parse_object_name, value_delimiter = ',')]
    pub ca_config_map: Vec<ObjectName>,

    /// Step 4: the leader-election Lease to delete.
    #[arg(long, value_name = "NAMESPACE/NAME", value_parser = parse_object_name)]
    pub leader_election_lease: Option<ObjectName>,
}

#[derive(Debug, thiserror::Error)]
pub enum CleanupError {
    #[error(transparent)]
    Client(#[from] spark_operator_runtime::client::Error),
    #[error(transparent)]
    Steps(#[from] uninstall::Error),
}

impl CleanupArgs {
    pub fn plan(&self) -> Plan {
        Plan {
            namespaces: self
                .namespaces
                .iter()
                .map(|n| n.trim().to_owned())
                .filter(|n| !n.is_empty())
                .collect(),
            mutating_webhook_configuration: self.mutating_webhook_configuration.clone(),
            validating_webhook_configuration: self.validating_webhook_configuration.clone(),
            operator_deployment: self.operator_deployment.clone(),
            timeout: self.timeout,
            release_finalizers: self.release_finalizers,
            ca_secret: self.ca_secret.clone(),
            ca_config_map: self.ca_config_map.clone(),
            leader_election_lease: self.leader_election_lease.clone(),
        }
    }
}

/// Runs the requested steps; says how many driver pods it released.
pub async fn cleanup(args: &CleanupArgs, out: &mut impl Write) -> Result<usize, CleanupError> {
    let config = client::config_from(args.kubeconfig.as_deref()).await?;
    let client = client::client(config)?;
    Ok(uninstall::run(&client, &args.plan(), out).await?)
}

pub fn run(args: &CleanupArgs, out: &mut impl Write) -> anyhow::Result<()> {
    logging::init();
    tokio_runtime()?.block_on(cleanup(args, out))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use crate::cli::{Cli, Command};

    #[test]
    fn the_steps_flags_parse_into_the_plan() {
        let cli = Cli::try_parse_from([
            "spark-operator",
            "cleanup",
            "--mutating-webhook-configuration=m",
            "--operator-deployment=ops/op",
            "--release-finalizers=false",
            "--ca-config-map=ops/ca",
            "--ca-config-map=agents/ca",
            "--leader-election-lease=ops/lock",
        ])
        .unwrap();
        let Command::Cleanup(args) = cli.command else {
            panic!("not cleanup")
        };
        let plan = args.plan();
        assert_eq!(plan.mutating_webhook_configuration.as_deref(), Some("m"));
        assert_eq!(
            plan.operator_deployment.map(|d| d.to_string()).as_deref(),
            Some("ops/op")
        );
        assert!(!plan.release_finalizers);
        assert_eq!(plan.ca_config_map.len(), 2);
        assert_eq!(plan.timeout, 120);
        assert!(Cli::try_parse_from(["spark-operator", "cleanup", "--ca-secret=nonamespace"]).is_err());
    }
}
