//! The gRPC contracts of the Spark operator, generated at build time from the `.proto` files
//! in this crate (compiled with protox: no system `protoc` needed).
//!
//! - [`cri::v1`]: the read-only subset of the Kubernetes CRI `runtime.v1.RuntimeService`
//!   that the node agent uses to watch containers, and that the simulated cluster serves
//!   from each node. Wire-compatible with containerd and CRI-O.
//! - [`agent::v1`]: the node agent's termination reports to the operator (`TerminationReports`):
//!   at-least-once delivery, acknowledged only after the status write.
//! - [`unix`]: serving and connecting gRPC over unix sockets, the way CRI is exposed.
//!
//! `tonic` and `prost` are re-exported so dependents use exactly the versions the generated
//! code was built against.

pub use prost;
pub use tonic;

pub mod unix;

/// Kubernetes Container Runtime Interface.
pub mod cri {
    /// CRI v1 (`runtime.v1` package): messages, [`v1::runtime_service_client`] and
    /// [`v1::runtime_service_server`].
    ///
    /// Source: `proto/cri/runtime_v1.proto`, a subset of upstream `k8s.io/cri-api`
    /// `pkg/apis/runtime/v1/api.proto` with identical names and field numbers.
    // Generated code: its style and docs are upstream's, not ours to lint.
    #[allow(clippy::all, clippy::pedantic, clippy::nursery, missing_docs, rustdoc::all)]
    pub mod v1 {
        tonic::include_proto!("runtime.v1");
    }
}

/// The node agent's contract with the operator.
pub mod agent {
    /// `sparkoperator.agent.v1`: [`v1::TerminationReport`], the `TerminationReports` stream and its
    /// acks. Source: `proto/agent/reports.proto`.
    #[allow(clippy::all, clippy::pedantic, clippy::nursery, missing_docs, rustdoc::all)]
    pub mod v1 {
        tonic::include_proto!("sparkoperator.agent.v1");
    }
}
