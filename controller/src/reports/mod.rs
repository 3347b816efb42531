//! The receiver of the node agents' termination reports (`sparkoperator.agent.v1.TerminationReports`,
//! see `docs/agent.md`): every replica serves it, leader or not, and records each report in its
//! application's status before it answers OK, so a report is never acknowledged and then lost.
//!
//! - [`auth`]: the agent's ServiceAccount token, checked with a TokenReview (audience-bound) and
//!   cached briefly; only the configured ServiceAccounts are accepted.
//! - [`apply`]: pure: what one report does to a status (recorded, already there, never recordable, or no
//!   room now).
//! - [`group_commit`]: reports of one application waiting for one status write together, each answered
//!   when the write that took it ends.
//! - [`last_written`]: the applications as this replica's last writes returned them, so the next write
//!   of one starts without a read.
//! - [`server`]: the gRPC service over TLS: validate, read the application (or start from its last
//!   written copy), apply, write the status conditionally, then answer.
//!
//! The leader then moves executor reports (`status.uncountedExecutorTerminations`) into its executor
//! counts (`app::executors`), and the state machine finishes a run from a driver report even while the
//! driver pod shows nothing (`app::state`).

pub(crate) mod apply;
pub(crate) mod auth;
pub(crate) mod group_commit;
pub(crate) mod last_written;
pub(crate) mod server;

use spark_operator_runtime::args::{Listen, parse_listen};

pub use server::{Error, Serving, serve, start};

/// Where the receiver listens by default. Not the webhook's 9443: both run in `spark-operator operator`.
pub(crate) const DEFAULT_ADDRESS: &str = "0.0.0.0:9444";

/// The receiver's flags. Every flag is also an environment variable of the subcommand that composes it
/// (`SPARK_OPERATOR_<SUBCOMMAND>_<FLAG>`, derived in the binary's `cli.rs`).
#[derive(Clone, Debug, clap::Args)]
pub struct ReceiverArgs {
    /// Address the receiver of the node agents' termination reports (gRPC over TLS) listens on; `off` to
    /// receive none (terminations are then seen by the pod watch and the driver finalizer only).
    #[arg(long, default_value = DEFAULT_ADDRESS, value_parser = parse_listen)]
    pub reports_address: Listen,

    /// ServiceAccount of the node agents, as NAMESPACE:NAME; repeat the flag (or separate with commas)
    /// for several. Only these may send reports.
    #[arg(
        long = "agent-service-account",
        default_value = "spark-operator-agent:spark-operator-agent",
        value_delimiter = ',',
        value_parser = parse_service_account
    )]
    pub agent_service_accounts: Vec<ServiceAccount>,

    /// Audience the agents' tokens must be issued for (their projected token's `audience`), so a token
    /// meant for the API server or another service is not accepted here.
    #[arg(long, default_value = "spark-operator")]
    pub agent_token_audience: String,

    /// Name of the Service in front of the receiver, in the operator's namespace: the serving certificate
    /// (shared with the webhook, from the same CA) is also for `<service>.<namespace>.svc`.
    #[arg(long, default_value = "spark-operator-reports")]
    pub reports_service_name: String,

    /// Hard limit on one application's status, in bytes: a report that would push the status beyond it
    /// is answered RETRY. Set by the process that composes the receiver, from the controller's
    /// `--status-byte-budget`; not a flag of its own.
    #[arg(skip = 256usize * 1024)]
    pub status_byte_budget: usize,
}

/// A ServiceAccount, `NAMESPACE:NAME`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ServiceAccount {
    pub namespace: String,
    pub name: String,
}

impl ServiceAccount {
    /// The user name a TokenReview gives its tokens: `system:serviceaccount:NAMESPACE:NAME`.
    pub(crate) fn username(&self) -> String {
        format!("system:serviceaccount:{}:{}", self.namespace, self.name)
    }
}

impl std::fmt::Display for ServiceAccount {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.namespace, self.name)
    }
}

/// Parses `NAMESPACE:NAME`.
pub fn parse_service_account(value: &str) -> Result<ServiceAccount, String> {
    let value = value.trim();
    match value.split_once(':') {
        Some((namespace, name))
            if !namespace.is_empty() && !name.is_empty() && !name.contains(':') && !namespace.contains('/') =>
        {
            Ok(ServiceAccount {
                namespace: namespace.to_owned(),
                name: name.to_owned(),
            })
        }
        _ => Err(format!(
            "{value:?} is not a ServiceAccount as NAMESPACE:NAME (e.g. spark-operator-agent:spark-operator-agent)"
        )),
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: ReceiverArgs,
    }

    fn parse(args: &[&str]) -> Result<ReceiverArgs, clap::Error> {
        let mut argv = vec!["receiver"];
        argv.extend_from_slice(args);
        Cli::try_parse_from(argv).map(|c| c.args)
    }

    #[test]
    fn defaults_receive_from_the_charts_agent() {
        let args = parse(&[]).unwrap();
        assert_eq!(args.reports_address, Listen::On("0.0.0.0:9444".parse().unwrap()));
        assert_eq!(
            args.agent_service_accounts
                .iter()
                .map(ServiceAccount::username)
                .collect::<Vec<_>>(),
            ["system:serviceaccount:spark-operator-agent:spark-operator-agent"]
        );
        assert_eq!(args.agent_token_audience, "spark-operator");
        assert_eq!(args.status_byte_budget, 256 * 1024);
    }

    #[test]
    fn service_accounts_repeat_and_bad_ones_are_explained() {
        let args = parse(&[
            "--agent-service-account=a:agent",
            "--agent-service-account",
            "b:agent,c:other",
            "--reports-address=off",
        ])
        .unwrap();
        let names: Vec<String> = args.agent_service_accounts.iter().map(ToString::to_string).collect();
        assert_eq!(names, ["a:agent", "b:agent", "c:other"]);
        assert_eq!(args.reports_address, Listen::Off);
        for bad in ["agent", ":agent", "ns:", "ns:a:b"] {
            let err = parse(&["--agent-service-account", bad]).unwrap_err().to_string();
            assert!(err.contains("NAMESPACE:NAME"), "{bad}: {err}");
        }
    }
}
