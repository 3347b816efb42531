//! Spark logs kept on the node. PLACEHOLDER: the interface the rest of the agent calls; the store, its
//! bounds and the HTTPS server that `spark-operator logs` reads through are being written.

use crate::identity::SparkContainer;
use std::path::PathBuf;

/// The log store's flags.
#[derive(Clone, Debug, Default, clap::Args)]
pub struct LogArgs {}

/// A container whose log is to be copied: who it is and where the runtime writes its log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogSource {
    pub container: SparkContainer,
    /// CRI `log_path`: kubelet's `/var/log/pods/<ns>_<pod>_<uid>/<container>/<restart>.log`.
    pub log_path: PathBuf,
    /// Nanoseconds since the epoch; 0 when unknown.
    pub started_at: i64,
}

/// The log store.
#[derive(Clone, Debug, Default)]
pub struct LogStore {}

impl LogStore {
    /// A Spark container started (or was found running): copy its log from the beginning.
    pub fn container_started(&self, _source: LogSource) {}

    /// A container exited: drain its log to the end, then close it.
    pub fn container_exited(&self, _container_id: &str, _finished_at: i64) {}
}
