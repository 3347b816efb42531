//! End-to-end tests on the simulated cluster: one binary, one module per concern.
#![allow(clippy::expect_used, clippy::unwrap_used)]

mod agents;
mod churn;
mod cleanup;
mod endpoints;
mod exactly_once;
mod ha;
mod lifecycle;
mod namespaces;
mod pod_gc;
mod poison;
mod spec_changes;
mod template;
mod webhook;
