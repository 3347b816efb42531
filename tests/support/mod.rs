//! The root package's own test support, declared by each test that needs it as `mod support;` (Cargo's
//! convention for code shared by one package's integration tests: a directory that is not itself a test).
//! Support that other crates' tests need too is the `spark-operator-test-support` crate instead. Each test
//! uses part of it, so the rest is dead code in that test's binary.
#![allow(dead_code)]

pub mod chart;
pub mod cli;
