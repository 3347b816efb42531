//! The node agent (`spark-operator agent`, one per node as a DaemonSet): it sees every Spark container
//! end first, on the node's container runtime, records the end durably, reports it to the operator, and
//! keeps the Spark containers' logs on the node after the pods are gone.
//!
//! - [`config`]: the agent's flags.
//! - [`cri`]: watching the runtime over CRI: events, relists, merge by container id, OOM settling, the
//!   polling fallback.
//! - [`report`]: a Spark container's end as a `TerminationReport` (pure, plus the file reads it needs).
//! - [`spool`]: reports on disk until acknowledged: checksummed, sequenced records, fsynced before a report
//!   counts as captured, bounded by bytes and age.
//! - [`delivery`]: the gRPC stream to the operator's report receiver (TLS, ServiceAccount token).
//! - [`logs`]: Spark logs copied from `/var/log/pods` into the agent's own store, bounded, and served.
//! - [`metrics`]: what the agent counts.

pub mod cri_log;
pub mod identity;
pub mod logs;
