//! Test support that the tests of more than one crate use (the root package's, the agent's and the end-to-end
//! tests): a dev-dependency, so each test depends on it as on any crate instead of including a file of another
//! crate by path.
//!
//! Test code only: a panic here is a failed test, so it may `unwrap` and `expect`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

pub mod kube_access;
