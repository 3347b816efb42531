//! Spark logs kept on the node: every Spark container's CRI log copied from its start into the agent's own
//! store (following kubelet's rotation, draining deleted files), bounded, and served over HTTPS to
//! `spark-operator logs` through the API server's `pods/proxy`, to callers Kubernetes RBAC lets read
//! `pods/log` in the application's namespace.
//!
//! - [`follow`]: one CRI log path followed across rotations and deletion.
//! - [`layout`]: the store's directory layout and per-container metadata.
//! - [`store`]: [`LogStore`]: the followers, the index and the bounds.
//! - [`index`]: what the server answers about an application.
//! - [`read`]: a copy rendered as `kubectl logs` prints it.
//! - [`access`]: who may read (TokenReview, then SubjectAccessReview).
//! - [`server`]: the HTTPS server.
//! - [`client`]: what `spark-operator logs` uses to ask the agents.

pub mod access;
pub mod client;
pub mod follow;
pub mod index;
pub mod layout;
pub mod metrics;
pub mod read;
pub mod server;
pub mod store;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use crate::identity::SparkContainer;
pub use server::{Served, serve};
pub use store::LogStore;

/// The default port of the log server.
pub const DEFAULT_PORT: u16 = 9444;

/// The log store's flags.
#[derive(Clone, Debug, clap::Args)]
pub struct LogArgs {
    /// Directory of the agent's copies of Spark container logs (a hostPath, so they outlive the agent's
    /// pod): `<dir>/<namespace>/<app>/<submission-id>/<pod>/<container>/<attempt>.log`.
    #[arg(long, default_value = "/var/lib/spark-operator-agent/logs")]
    pub log_store_dir: PathBuf,

    /// Bytes the store may hold in total (`10Gi`, `500Mi`, `0` for no bound). Over it, the finished
    /// application with the oldest last finish is removed first; a running application never is: with only
    /// running ones left, the growing container's copy stops with a line saying so.
    #[arg(long, default_value = "10Gi", value_parser = parse_bytes)]
    pub log_store_max_bytes: u64,

    /// Bytes one application may hold (`0` for no bound). Over it, that application's finished containers
    /// are removed, oldest finish first; with only running containers left, the growing container's copy
    /// stops with a line saying so.
    #[arg(long, default_value = "2Gi", value_parser = parse_bytes)]
    pub log_store_max_app_bytes: u64,

    /// How long a finished application's logs are kept after its last container finished (`7d`, `12h`,
    /// `0` to keep them until the size bounds remove them).
    #[arg(long, default_value = "7d", value_parser = parse_duration)]
    pub log_store_max_age: Duration,

    /// How often a followed log file is checked for new lines and rotation (`250ms`, `1s`).
    #[arg(long, default_value = "250ms", value_parser = parse_duration)]
    pub log_poll_interval: Duration,

    /// Address of the HTTPS log server that `spark-operator logs` reads through the API server's
    /// `pods/proxy`.
    #[arg(long, default_value = "0.0.0.0:9444")]
    pub log_address: SocketAddr,
}

impl Default for LogArgs {
    fn default() -> Self {
        Self {
            log_store_dir: PathBuf::from("/var/lib/spark-operator-agent/logs"),
            log_store_max_bytes: 10 << 30,
            log_store_max_app_bytes: 2 << 30,
            log_store_max_age: Duration::from_secs(7 * 24 * 3600),
            log_poll_interval: Duration::from_millis(250),
            log_address: SocketAddr::from(([0, 0, 0, 0], DEFAULT_PORT)),
        }
    }
}

/// A container whose log is to be copied: who it is and where the runtime writes its log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogSource {
    pub container: SparkContainer,
    /// CRI `log_path`: kubelet's `/var/log/pods/<ns>_<pod>_<uid>/<container>/<restart>.log`.
    pub log_path: PathBuf,
    /// Nanoseconds since the epoch; 0 when unknown.
    pub started_at: i64,
}

/// Why the log store or its server could not start.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("could not create the log store directory {path}")]
    CreateStore {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("could not make the log server's self-signed certificate")]
    Certificate(#[source] rcgen::Error),
    #[error("could not configure TLS for the log server")]
    Tls(#[source] rustls::Error),
    /// "listening on {address} for Spark logs".
    #[error(transparent)]
    Bind(spark_operator_runtime::server::Error),
}

/// Parses a byte size: a number with an optional binary (`Ki`, `Mi`, `Gi`, `Ti`) or decimal (`k`, `M`,
/// `G`, `T`) suffix, as Kubernetes quantities.
pub fn parse_bytes(value: &str) -> Result<u64, String> {
    let value = value.trim();
    let digits = value.find(|c: char| !c.is_ascii_digit()).unwrap_or(value.len());
    let (number, suffix) = value.split_at(digits);
    let unit: u64 = match suffix {
        "" => 1,
        "k" | "K" => 1_000,
        "M" => 1_000_000,
        "G" => 1_000_000_000,
        "T" => 1_000_000_000_000,
        "Ki" => 1 << 10,
        "Mi" => 1 << 20,
        "Gi" => 1 << 30,
        "Ti" => 1 << 40,
        _ => return Err(format!("{value:?} is not a size like 500Mi, 10Gi or 1000000")),
    };
    number
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(unit))
        .ok_or_else(|| format!("{value:?} is not a size like 500Mi, 10Gi or 1000000"))
}

/// Parses a duration: a number with `ms`, `s`, `m`, `h` or `d` (`0` alone is zero).
pub fn parse_duration(value: &str) -> Result<Duration, String> {
    let value = value.trim();
    let bad = || format!("{value:?} is not a duration like 250ms, 30s, 12h or 7d");
    if value == "0" {
        return Ok(Duration::ZERO);
    }
    let digits = value.find(|c: char| !c.is_ascii_digit()).unwrap_or(value.len());
    let (number, suffix) = value.split_at(digits);
    let n: u64 = number.parse().map_err(|_| bad())?;
    let millis: u64 = match suffix {
        "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => return Err(bad()),
    };
    n.checked_mul(millis).map(Duration::from_millis).ok_or_else(bad)
}

#[cfg(test)]
mod tests;
