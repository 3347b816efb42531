//! The command line: one subcommand per concern. To add one, add a variant here with its `Args` struct
//! from `commands/<name>.rs`, and a match arm in `main.rs`.
//!
//! Every flag also reads an environment variable, `SPARK_OPERATOR_<SUBCOMMAND>_<FLAG>` (the Helm chart
//! configures the operator this way). The names are derived here, for every subcommand at once, rather
//! than written on each flag: flags shared by several subcommands (the runtime's, the controller's) get
//! each subcommand's name, and the convention cannot drift. `--kubeconfig` reads `KUBECONFIG`, as kubectl.

use clap::{Arg, CommandFactory, FromArgMatches, Parser, Subcommand};

use crate::commands::agent::AgentCommandArgs;
use crate::commands::cleanup::CleanupArgs;
use crate::commands::controller::ControllerCommandArgs;
use crate::commands::crd::CrdArgs;
#[cfg(feature = "dev")]
use crate::commands::dev::DevArgs;
use crate::commands::logs::LogsArgs;
use crate::commands::operator::OperatorArgs;
use crate::commands::permissions::PermissionsArgs;
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
    /// Reconcile SparkApplications (the controller alone): submit drivers natively, follow them, retry,
    /// record their ends.
    Controller(Box<ControllerCommandArgs>),
    /// The operator as the Helm chart's Deployment runs it: the controller (reconciling while this
    /// replica leads) and the admission webhook (serving on every replica) in one process.
    Operator(Box<OperatorArgs>),
    /// The node agent (the Helm chart's DaemonSet): reports every Spark container end on this node to the
    /// operator from the container runtime, durably, with its exit code, reason and log tail.
    Agent(Box<AgentCommandArgs>),
    /// Release the driver-protection finalizer of every pod the operator launched (before uninstalling;
    /// usable as a Helm pre-delete hook).
    Cleanup(CleanupArgs),
    /// Print a Spark driver's or executor's log as the node agents kept it, also after its pod is gone:
    /// the application's current execution (or `--attempt N`), the driver (or `--executor ID`). Exits 1
    /// when there is nothing to show.
    Logs(LogsArgs),
    /// Print every RBAC rule the operator, its agents, the cleanup hook and the Spark drivers need, with
    /// the operations that need it, as the Helm chart reads them (or as Markdown).
    Permissions(PermissionsArgs),
    /// Run a simulated cluster (3 nodes) with the operator in it, for trying things locally with
    /// kubectl: prints the kubeconfig and the commands to try.
    #[cfg(feature = "dev")]
    Dev(DevArgs),
}

/// The environment variable of a flag of a subcommand.
pub fn env_var(subcommand: &str, flag: &str) -> String {
    let upper = |s: &str| s.to_ascii_uppercase().replace('-', "_");
    format!("SPARK_OPERATOR_{}_{}", upper(subcommand), upper(flag))
}

fn with_env(subcommand: &str, arg: Arg) -> Arg {
    if arg.get_env().is_some() {
        return arg;
    }
    match arg.get_long() {
        Some(long) if long != "help" && long != "version" => {
            let name = env_var(subcommand, long);
            arg.env(name)
        }
        _ => arg,
    }
}

/// The command line with every flag's environment variable.
pub fn command() -> clap::Command {
    Cli::command().mut_subcommands(|subcommand| {
        let name = subcommand.get_name().to_owned();
        subcommand.mut_args(|arg| {
            // The agent shares the runtime's flags but elects nothing (one agent per node).
            let unused = name == "agent" && arg.get_long().is_some_and(|l| l.starts_with("leader-election"));
            let arg = with_env(&name, arg);
            if unused { arg.hide(true) } else { arg }
        })
    })
}

/// Parses the process's arguments and environment (exits with clap's message on a mistake).
pub fn parse() -> Cli {
    let matches = command().get_matches();
    Cli::from_arg_matches(&matches).unwrap_or_else(|error| error.exit())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_line_is_well_formed() {
        command().debug_assert();
    }

    #[test]
    fn every_flag_can_come_from_the_environment_by_one_convention() {
        let command = command();
        let mut checked = 0;
        for subcommand in command.get_subcommands() {
            for arg in subcommand.get_arguments() {
                // Positional arguments (`logs NAME`) are operands, not flags.
                if matches!(arg.get_id().as_str(), "help" | "version") || arg.is_positional() {
                    continue;
                }
                let env = arg.get_env().and_then(|e| e.to_str()).unwrap_or_default();
                let long = arg.get_long().unwrap_or_default();
                // `dev --kubeconfig` is where dev writes its kubeconfig, not one to read.
                let expected = if long == "kubeconfig" && subcommand.get_name() != "dev" {
                    "KUBECONFIG".to_owned()
                } else {
                    env_var(subcommand.get_name(), long)
                };
                assert_eq!(env, expected, "{} --{long}", subcommand.get_name());
                checked += 1;
            }
        }
        assert!(checked > 30, "only {checked} flags were checked");
    }

    #[test]
    fn the_operator_takes_the_union_of_its_components_flags_once() {
        let operator = command()
            .get_subcommands()
            .find(|s| s.get_name() == "operator")
            .cloned()
            .unwrap();
        let longs: Vec<&str> = operator.get_arguments().filter_map(Arg::get_long).collect();
        for flag in [
            "kubeconfig",
            "metrics-address",
            "leader-election",
            "namespaces",
            "webhook-address",
        ] {
            assert_eq!(longs.iter().filter(|l| **l == flag).count(), 1, "--{flag} in {longs:?}");
        }
        assert_eq!(
            operator
                .get_arguments()
                .find(|a| a.get_long() == Some("namespaces"))
                .and_then(|a| a.get_env())
                .and_then(|e| e.to_str()),
            Some("SPARK_OPERATOR_OPERATOR_NAMESPACES")
        );
    }

    #[test]
    fn the_agent_elects_nothing_and_reads_its_flags_from_the_environment() {
        let agent = command()
            .get_subcommands()
            .find(|s| s.get_name() == "agent")
            .cloned()
            .unwrap();
        let env_of = |long: &str| {
            agent
                .get_arguments()
                .find(|a| a.get_long() == Some(long))
                .and_then(|a| a.get_env())
                .and_then(|e| e.to_str())
                .map(str::to_owned)
        };
        assert_eq!(env_of("node-name").as_deref(), Some("SPARK_OPERATOR_AGENT_NODE_NAME"));
        assert_eq!(
            env_of("spool-max-bytes").as_deref(),
            Some("SPARK_OPERATOR_AGENT_SPOOL_MAX_BYTES")
        );
        let election: Vec<&Arg> = agent
            .get_arguments()
            .filter(|a| a.get_long().is_some_and(|l| l.starts_with("leader-election")))
            .collect();
        assert!(!election.is_empty() && election.iter().all(|a| a.is_hide_set()));
        let cli = Cli::try_parse_from([
            "spark-operator",
            "agent",
            "--node-name=n1",
            "--report-address=https://spark-operator-reports.spark-operator.svc:9443",
        ])
        .unwrap();
        let Command::Agent(args) = cli.command else {
            panic!("not agent")
        };
        assert_eq!(args.agent.node_name, "n1");
        assert!(
            Cli::try_parse_from(["spark-operator", "agent", "--node-name=n1"]).is_err(),
            "--report-address is required"
        );
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
