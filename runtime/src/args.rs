//! The flags every long-running subcommand shares: where the cluster is, where the endpoints listen,
//! and how the replicas elect their leader. The binary gives each flag an environment variable
//! (`SPARK_OPERATOR_<SUBCOMMAND>_<FLAG>`), which is how the Helm chart sets them.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use crate::lease::ElectionSettings;
use crate::runtime::RuntimeSettings;

/// Where to listen, or not at all.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Listen {
    Off,
    On(SocketAddr),
}

/// Parses `off` (or empty, or `0`) or an address like `0.0.0.0:8080`.
pub fn parse_listen(value: &str) -> Result<Listen, String> {
    match value.trim() {
        "" | "0" | "off" => Ok(Listen::Off),
        other => other
            .parse()
            .map(Listen::On)
            .map_err(|e| format!("{other:?} is not an address like 0.0.0.0:8080 (or `off`): {e}")),
    }
}

#[derive(Clone, Debug, clap::Args)]
pub struct RuntimeArgs {
    /// kubeconfig to use; default: KUBECONFIG, ~/.kube/config or the in-cluster service account.
    #[arg(long, env = "KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,

    /// Address of /metrics, /healthz and /readyz (for every component of the process); `off` to serve
    /// nothing.
    #[arg(
        long,
        alias = "metrics-bind-address",
        default_value = "0.0.0.0:8080",
        value_parser = parse_listen
    )]
    pub metrics_address: Listen,

    /// Elect a leader through a Lease; only the leader reconciles (every replica serves).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub leader_election: bool,

    /// Name of the leader election Lease.
    #[arg(
        long,
        alias = "leader-election-lock-name",
        default_value = "spark-operator-controller-lock"
    )]
    pub leader_election_lease_name: String,

    /// Namespace of the leader election Lease (the chart sets the release namespace).
    #[arg(long, alias = "leader-election-lock-namespace", default_value = "default")]
    pub leader_election_namespace: String,

    /// Seconds a Lease stays valid without renewal: a standby takes over within this.
    #[arg(long, default_value_t = 15, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub leader_election_lease_duration: u64,

    /// Seconds between renewals (and acquisition attempts of a standby).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub leader_election_retry_period: u64,

    /// This replica's identity in the Lease and in its requests' User-Agent; default: the host name and
    /// a random suffix.
    #[arg(long)]
    pub identity: Option<String>,
}

impl RuntimeArgs {
    /// This replica's name: the flag, else the host name and a random suffix.
    pub fn identity(&self) -> String {
        self.identity.clone().unwrap_or_else(|| {
            let host = std::env::var("HOSTNAME")
                .ok()
                .filter(|h| !h.is_empty())
                .unwrap_or_else(|| "spark-operator".to_owned());
            format!("{host}-{}", &uuid::Uuid::new_v4().simple().to_string()[..8])
        })
    }

    pub fn settings(&self) -> RuntimeSettings {
        let identity = self.identity();
        RuntimeSettings {
            election: self.leader_election.then(|| ElectionSettings {
                namespace: self.leader_election_namespace.clone(),
                lease_name: self.leader_election_lease_name.clone(),
                identity: identity.clone(),
                duration: Duration::from_secs(self.leader_election_lease_duration),
                retry: Duration::from_secs(self.leader_election_retry_period),
            }),
            identity,
            metrics: self.metrics_address,
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: RuntimeArgs,
    }

    fn parse(args: &[&str]) -> Result<RuntimeArgs, clap::Error> {
        let mut argv = vec!["runtime"];
        argv.extend_from_slice(args);
        Cli::try_parse_from(argv).map(|c| c.args)
    }

    #[test]
    fn defaults_elect_and_serve() {
        let args = parse(&[]).unwrap();
        assert!(args.leader_election);
        assert_eq!(args.metrics_address, Listen::On("0.0.0.0:8080".parse().unwrap()));
        let settings = parse(&["--identity=a", "--leader-election-lock-name=lock"])
            .unwrap()
            .settings();
        let election = settings.election.unwrap();
        assert_eq!(
            (election.identity.as_str(), election.lease_name.as_str()),
            ("a", "lock")
        );
        assert_eq!(election.duration, Duration::from_secs(15));
    }

    #[test]
    fn bad_values_are_explained() {
        let err = parse(&["--metrics-address=nonsense"]).unwrap_err().to_string();
        assert!(err.contains("0.0.0.0:8080"), "{err}");
        assert!(parse(&["--leader-election-lease-duration=0"]).is_err());
        assert_eq!(parse(&["--metrics-address=off"]).unwrap().metrics_address, Listen::Off);
        assert!(
            parse(&["--leader-election=false"])
                .unwrap()
                .settings()
                .election
                .is_none()
        );
    }
}
