//! What every component of the operator shares, so that a process is composed of components rather than
//! owned by one of them (linkerd's policy controller is the model):
//!
//! - [`client`]: one Kubernetes client configuration from `--kubeconfig`, the environment or the pod's
//!   ServiceAccount, with this replica's identity in its User-Agent.
//! - [`logging`]: tracing to standard error, text or JSON; [`error_chain`]: an error shown with its causes.
//! - [`shutdown`]: SIGTERM and Ctrl-C as a value every component can wait on.
//! - [`metrics`]: counters, gauges, histograms and their text exposition; a registry of renderers.
//! - [`readiness`]: `/readyz` as the conjunction of what each serving component reports.
//! - [`server`]: the one way every server of the operator accepts and serves connections (TLS or not,
//!   HTTP/1 or HTTP/2), with its limits: connections, header and handshake timeouts, drain on shutdown.
//! - [`endpoints`]: the `/metrics`, `/healthz` and `/readyz` server, on [`server`].
//! - [`lease`]: the Lease elector, publishing [`lease::Leadership`] as a watched value.
//! - [`fence`]: a client layer that refuses writes unless the lease is held, so only the leader writes.
//! - [`args`] and [`Runtime`]: the flags every long-running subcommand shares, and the value built from
//!   them that components receive.
//!
//! Serving (admission, agent reports, metrics) runs on every replica; only what reconciles waits for
//! the lease and writes through a fenced client.

pub mod args;
pub mod client;
pub mod endpoints;
pub mod error_chain;
pub mod fence;
pub mod lease;
pub mod logging;
pub mod metrics;
pub mod readiness;
mod runtime;
pub mod server;
pub mod shutdown;
pub mod task;

pub use args::RuntimeArgs;
pub use runtime::{Error, Runtime, RuntimeSettings};

/// The tokio runtime of the long-running subcommands. Worker stacks are larger than tokio's 2 MiB:
/// kube's controller machinery nests deeply in debug builds.
pub fn tokio_runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_stack_size(8 * 1024 * 1024)
        .build()
}
