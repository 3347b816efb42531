//! Watching the node's container runtime over CRI for Spark containers that start and end.
//!
//! - [`merge`]: what is known of each container, merged by state rank and finish time (pure).
//! - [`watch`]: the connection: subscribe to `GetContainerEvents` first, then relist; drain the event
//!   stream into the agent's own queue at once; relist periodically and on every reconnect; fall back to
//!   polling when the runtime sends no events; settle exits 137 without OOMKilled.

pub mod merge;
pub mod watch;

use std::path::PathBuf;

use spark_operator_proto::cri::v1::ContainerStatus;

use crate::identity::SparkContainer;
use crate::logs::LogSource;

pub use watch::{WatchConfig, watch};

/// A Spark container's end, settled: the runtime's last word on it.
#[derive(Clone, Debug, PartialEq)]
pub struct ContainerEnd {
    pub container: SparkContainer,
    /// Its status in state EXITED: exit code, reason, message, times, log path, annotations, mounts.
    pub status: ContainerStatus,
}

/// What the watcher tells the rest of the agent, in the order it learned it.
// A few per container lifetime: boxing would buy nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq)]
pub enum Observation {
    /// Once per container: it started (or was found running or exited).
    Started(LogSource),
    /// Once per container id while the process lives.
    Ended(ContainerEnd),
}

/// The log source of a container from one of its snapshots.
pub fn log_source(container: SparkContainer, status: &ContainerStatus) -> LogSource {
    LogSource {
        container,
        log_path: PathBuf::from(&status.log_path),
        started_at: status.started_at,
    }
}
