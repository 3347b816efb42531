//! The command line: one subcommand per concern. To add one, add a variant here with its `Args` struct
//! from `commands/<name>.rs`, and a match arm in `main.rs`. Every flag also reads an environment variable
//! (`SPARK_OPERATOR_<SUBCOMMAND>_<FLAG>`), which is how the Helm chart configures it.

use clap::{Parser, Subcommand};

use crate::commands::cleanup::CleanupArgs;
use crate::commands::controller::ControllerArgs;
use crate::commands::crd::CrdArgs;
use crate::commands::dev::DevArgs;
use crate::commands::validate::ValidateArgs;

/// Kubernetes operator for Apache Spark, compatible with Kubeflow's sparkoperator.k8s.io/v1beta2 API.
#[derive(Debug, Parser)]
#[command(name = "spark-operator", version, propagate_version = true)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Print the SparkApplication and ScheduledSparkApplication CRDs as YAML.
    Crd(CrdArgs),
    /// Check SparkApplication and ScheduledSparkApplication manifests offline, as CI pipelines need:
    /// every error with its field path, unknown fields as warnings; exits 1 on any error.
    Validate(ValidateArgs),
    /// Reconcile SparkApplications: submit drivers natively, follow them, retry, record their ends.
    Controller(Box<ControllerArgs>),
    /// Release the driver-protection finalizer of every pod the operator launched (before uninstalling;
    /// usable as a Helm pre-delete hook).
    Cleanup(CleanupArgs),
    /// Run a simulated cluster (3 nodes) with the operator in it, for trying things locally with
    /// kubectl: prints the kubeconfig and the commands to try.
    Dev(DevArgs),
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    #[test]
    fn the_command_line_is_well_formed() {
        Cli::command().debug_assert();
    }

    #[test]
    fn every_flag_can_come_from_the_environment() {
        let command = Cli::command();
        for subcommand in command.get_subcommands() {
            for arg in subcommand.get_arguments() {
                let builtin = matches!(arg.get_id().as_str(), "help" | "version");
                assert!(
                    builtin || arg.get_env().is_some(),
                    "{} --{} has no environment variable",
                    subcommand.get_name(),
                    arg.get_id()
                );
            }
        }
    }

    #[test]
    fn validate_takes_several_files_after_one_flag() {
        let cli =
            Cli::try_parse_from(["spark-operator", "validate", "-f", "a.yaml", "b.json", "-f", "c.yaml"]).unwrap();
        let Command::Validate(args) = cli.command else {
            panic!("not validate")
        };
        assert_eq!(args.files.len(), 3);
        assert!(
            Cli::try_parse_from(["spark-operator", "validate"]).is_err(),
            "at least one file is required"
        );
    }
}
