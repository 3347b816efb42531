//! Shared helpers for the sim's integration tests.
#![allow(dead_code)]

use std::time::Duration;

use kube_sim::{Sim, SimConfig};

/// A sim in a temporary directory; keep the TempDir alive as long as the sim.
pub async fn start_sim(tune: impl FnOnce(&mut SimConfig)) -> (Sim, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = SimConfig::new(dir.path().join("data"));
    tune(&mut config);
    let sim = Sim::start(config).await.expect("sim starts");
    (sim, dir)
}

/// Waits for a future but fails the test instead of hanging forever.
pub async fn within<T>(what: &str, fut: impl std::future::Future<Output = T>) -> T {
    match tokio::time::timeout(Duration::from_secs(20), fut).await {
        Ok(v) => v,
        Err(_) => panic!("timed out waiting for {what}"),
    }
}
