//! The agent's flags (each also an environment variable, `SPARK_OPERATOR_AGENT_<FLAG>`, which the binary
//! derives).

use std::path::PathBuf;
use std::time::Duration;

use http::Uri;

use crate::spool::SpoolLimits;

/// The flags of `spark-operator agent`.
#[derive(Clone, Debug, clap::Args)]
pub struct AgentArgs {
    /// The node this agent runs on (the chart sets it from the downward API, `spec.nodeName`); written
    /// into every report.
    #[arg(long)]
    pub node_name: String,

    /// The container runtime's CRI socket (CRI-O: /var/run/crio/crio.sock; k3s:
    /// /run/k3s/containerd/containerd.sock).
    #[arg(long, default_value = "/run/containerd/containerd.sock")]
    pub cri_socket: PathBuf,

    /// Where the node's `/` is in this process's view. The runtime reports the node's own paths (log files
    /// under /var/log/pods, termination-log files): the chart mounts them at the same paths, so `/`; an
    /// agent outside the node's filesystem (a node mounted at /host, or the simulated cluster's nodes)
    /// names the node's root.
    #[arg(long, default_value = "/")]
    pub host_root: PathBuf,

    /// Where reports wait until the operator acknowledges them (a hostPath, so they survive the agent's
    /// restarts and upgrades).
    #[arg(long, default_value = "/var/lib/spark-operator-agent/spool")]
    pub spool_dir: PathBuf,

    /// The spool's size bound (bytes; suffixes Ki, Mi, Gi); over it the oldest reports are dropped.
    #[arg(long, default_value = "256Mi", value_parser = parse_spool_max_bytes)]
    pub spool_max_bytes: u64,

    /// The spool's age bound (`90s`, `30m`, `12h`, `7d`); older reports are dropped.
    #[arg(long, default_value = "7d", value_parser = parse_duration)]
    pub spool_max_age: Duration,

    /// The operator's report receiver, an https URL such as
    /// https://spark-operator-reports.spark-operator.svc:9443.
    #[arg(long, value_parser = parse_report_address)]
    pub report_address: Uri,

    /// PEM file of the CA certificate(s) the receiver's certificate must chain to (the operator's CA
    /// bundle ConfigMap); read again on every reconnect, so a rotated CA is picked up.
    #[arg(long, default_value = "/etc/spark-operator/ca/ca.crt")]
    pub ca_bundle: PathBuf,

    /// The projected ServiceAccount token (audience `spark-operator`) sent as `authorization: Bearer`;
    /// read again on every connect, since kubelet rotates it.
    #[arg(long, default_value = "/var/run/secrets/spark-operator/token")]
    pub token_file: PathBuf,

    /// How often the runtime's containers are listed again, to find ends no event reported.
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    pub relist_period: Duration,

    /// How long an exit 137 without reason OOMKilled waits before it is read again and reported
    /// (containerd records OOMKilled after the exit, without an event).
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    pub oom_settle_delay: Duration,

    /// The most log lines a report carries.
    #[arg(long, default_value_t = 100)]
    pub log_tail_lines: usize,

    /// The most log bytes a report carries.
    #[arg(long, default_value = "4096", value_parser = parse_log_tail_bytes)]
    pub log_tail_bytes: u64,

    #[command(flatten)]
    pub logs: crate::logs::LogArgs,
}

impl AgentArgs {
    pub fn spool_limits(&self) -> SpoolLimits {
        SpoolLimits::new(self.spool_max_bytes, self.spool_max_age)
    }
}

/// `4096`, `64Ki`, `256Mi`, `1Gi`.
pub fn parse_bytes(value: &str) -> Result<u64, String> {
    let value = value.trim();
    let (number, unit) = value
        .find(|c: char| !c.is_ascii_digit())
        .map_or((value, ""), |at| value.split_at(at));
    let multiplier: u64 = match unit {
        "" => 1,
        "Ki" => 1 << 10,
        "Mi" => 1 << 20,
        "Gi" => 1 << 30,
        other => {
            return Err(format!(
                "unknown unit {other:?} in {value:?}: use a byte count with Ki, Mi or Gi"
            ));
        }
    };
    number
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(multiplier))
        .filter(|n| *n > 0)
        .ok_or_else(|| format!("{value:?} is not a positive size like 4096, 64Ki or 256Mi"))
}

/// The spool's bound: at least 1 MiB, so that it holds many reports (each up to a few KiB plus its tail).
pub fn parse_spool_max_bytes(value: &str) -> Result<u64, String> {
    let bytes = parse_bytes(value)?;
    if bytes < 1 << 20 {
        return Err(format!("{value:?} is too small for a spool: use at least 1Mi"));
    }
    Ok(bytes)
}

/// A report's log tail: at most 1 MiB (a report is one gRPC message; the status keeps far less).
pub fn parse_log_tail_bytes(value: &str) -> Result<u64, String> {
    let bytes = parse_bytes(value)?;
    if bytes > 1 << 20 {
        return Err(format!("{value:?} is too large for a log tail: use at most 1Mi"));
    }
    Ok(bytes)
}

/// `500ms`, `2s`, `5m`, `12h`, `7d`.
pub fn parse_duration(value: &str) -> Result<Duration, String> {
    let value = value.trim();
    let at = value
        .find(|c: char| !c.is_ascii_digit())
        .ok_or_else(|| format!("{value:?} has no unit: write e.g. 500ms, 2s, 5m, 12h or 7d"))?;
    let (number, unit) = value.split_at(at);
    let n: u64 = number
        .parse()
        .map_err(|_| format!("{value:?} is not a duration like 500ms, 2s, 5m, 12h or 7d"))?;
    let duration = match unit {
        "ms" => Duration::from_millis(n),
        "s" => Duration::from_secs(n),
        "m" => Duration::from_secs(n.saturating_mul(60)),
        "h" => Duration::from_secs(n.saturating_mul(3600)),
        "d" => Duration::from_secs(n.saturating_mul(86_400)),
        other => return Err(format!("unknown unit {other:?} in {value:?}: use ms, s, m, h or d")),
    };
    Ok(duration)
}

/// An https URL with a host: the receiver's certificate is checked against that host name.
pub fn parse_report_address(value: &str) -> Result<Uri, String> {
    let uri: Uri = value.trim().parse().map_err(|e| {
        format!("{value:?} is not a URL like https://spark-operator-reports.spark-operator.svc:9443: {e}")
    })?;
    if uri.scheme_str() != Some("https") {
        return Err(format!(
            "{value:?} must be an https URL: reports and the ServiceAccount token only travel over TLS"
        ));
    }
    if uri.host().is_none_or(str::is_empty) {
        return Err(format!("{value:?} has no host"));
    }
    Ok(uri)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: AgentArgs,
    }

    #[test]
    fn defaults_and_units() {
        let cli = Cli::try_parse_from([
            "agent",
            "--node-name=n1",
            "--report-address=https://spark-operator-reports.spark-operator.svc:9443",
        ])
        .unwrap();
        let args = cli.args;
        assert_eq!(args.spool_max_bytes, 256 * 1024 * 1024);
        assert_eq!(args.spool_max_age, Duration::from_secs(7 * 86_400));
        assert_eq!(args.relist_period, Duration::from_secs(60));
        assert_eq!(args.oom_settle_delay, Duration::from_secs(2));
        assert_eq!((args.log_tail_lines, args.log_tail_bytes), (100, 4096));
        assert_eq!(args.cri_socket, PathBuf::from("/run/containerd/containerd.sock"));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_bytes("64Ki"), Ok(65_536));
        assert!(parse_bytes("0").is_err());
        assert!(parse_bytes("1Ti").unwrap_err().contains("Ki, Mi or Gi"));
        assert!(parse_duration("60").unwrap_err().contains("no unit"));
        assert!(parse_spool_max_bytes("64Ki").unwrap_err().contains("at least 1Mi"));
        assert!(parse_log_tail_bytes("2Mi").unwrap_err().contains("at most 1Mi"));
        assert_eq!(parse_log_tail_bytes("16Ki"), Ok(16_384));
    }

    #[test]
    fn the_report_address_must_be_https_with_a_host() {
        assert!(parse_report_address("http://x:9443").unwrap_err().contains("https"));
        assert!(parse_report_address("not a url").is_err());
        assert!(
            Cli::try_parse_from(["agent", "--report-address=https://r:1"]).is_err(),
            "--node-name is required"
        );
    }
}
