//! The second backend of the end-to-end harness: the real control plane (`tests/real-k8s/`), with the
//! operator run as processes of the production binary, bound by the chart's RBAC only, and a kubelet
//! stand-in for nodes (until kube-sim's nodes can join a real API server).
//!
//! Without the built binaries (or root, which `up.sh` needs) a test skips with one line naming
//! `tests/real-k8s/build.sh`; under `CI=true` it fails instead.

pub mod control_plane;
pub mod kubelet;
pub mod operator;

pub use control_plane::ControlPlane;
