//! End-to-end tests on the simulated cluster: one binary, one module per concern.
#![allow(clippy::expect_used, clippy::unwrap_used)]

mod agents;
mod burst;
mod churn;
mod cleanup;
mod endpoints;
mod exactly_once;
mod ha;
mod kubeflow_examples;
mod lifecycle;
mod namespaces;
mod permissions;
mod pod_gc;
mod poison;
mod scheduled;
mod spec_changes;
mod template;
mod web_ui;
mod webhook;
