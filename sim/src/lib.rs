//! `kube-sim`: a simulated Kubernetes API server that real clients (kubectl, kube-rs, fabric8,
//! Helm) accept unchanged. See `README.md` for what works.
//!
//! - [`Sim`] runs the server in-process (HTTPS on 127.0.0.1, a kubeconfig, a `kube::Client`).
//! - [`store::Store`] is the object store with the apiserver's semantics, usable directly by
//!   in-process controllers; [`admission_seam`] is where admission plugs into its write path and
//!   [`store::Store::changes`] is the feed the garbage collector follows.

pub mod admission;
pub mod admission_seam;
pub mod apply;
pub mod audit;
pub mod auth;
pub mod controllers;
pub mod convert;
pub mod decode;
pub mod defaults;
pub mod discovery;
pub mod error_chain;
pub mod faults;
pub mod gc;
pub mod kubeconfig;
pub mod list_types;
pub mod managed_fields;
pub mod meta;
pub mod network;
pub mod node;
pub mod openapi;
mod openapi_builtin;
pub mod patch;
pub mod protobuf;
pub mod quantity;
pub mod registry;
pub mod schema;
pub mod selectors;
mod server;
pub mod service_account_tokens;
mod sim;
pub mod status;
pub mod store;
pub mod table;
pub mod tls;
pub mod validation;
pub mod watch;

pub use server::ServeError;
pub use sim::{Sim, SimConfig, SimError};
