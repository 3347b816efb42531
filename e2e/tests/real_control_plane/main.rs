//! The conformance tier on the real control plane (`tests/real-k8s/`): `cargo test -p spark-operator-e2e
//! --test real_control_plane [-- NAME]`. One control plane for the binary; each scenario keeps to its own
//! namespaces. The scenarios run in order, then (when none was filtered out) the audit log is read: no
//! request of the operator's ServiceAccount may have been refused (403) in the whole tier.
//!
//! Without the built control plane (or root) the tier skips with one line naming
//! `tests/real-k8s/build.sh`; under `CI=true` it fails instead.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::future::Future;
use std::pin::Pin;

use futures::FutureExt;
use spark_operator_e2e::real::ControlPlane;

mod kubelet;

/// One scenario: a name (what `-- NAME` filters on) and its body.
type Body = fn(&'static ControlPlane) -> Pin<Box<dyn Future<Output = ()> + Send>>;

const SCENARIOS: &[(&str, Body)] = &[("kubelet_runs_pods_and_drivers_make_executors", |cp| {
    Box::pin(kubelet::runs_pods_and_drivers_make_executors(cp))
})];

fn main() {
    spark_operator_e2e::init_logging();
    let filters: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with('-')).collect();
    // `--list` (cargo's and IDEs' discovery): one line per scenario, as libtest prints them.
    if std::env::args().any(|a| a == "--list") {
        for (name, _) in SCENARIOS {
            println!("{name}: test");
        }
        return;
    }
    let chosen: Vec<&(&str, Body)> = SCENARIOS
        .iter()
        .filter(|(name, _)| filters.is_empty() || filters.iter().any(|f| name.contains(f.as_str())))
        .collect();
    let Some(control_plane) = ControlPlane::shared() else {
        return;
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    let mut failed = Vec::new();
    println!(
        "\nrunning {} scenarios on the real control plane ({})",
        chosen.len(),
        control_plane.data_dir().display()
    );
    for (name, body) in &chosen {
        let outcome = runtime.block_on(std::panic::AssertUnwindSafe(body(control_plane)).catch_unwind());
        match outcome {
            Ok(()) => println!("test {name} ... ok"),
            Err(_) => {
                println!("test {name} ... FAILED");
                failed.push(*name);
            }
        }
    }
    println!(
        "\ntest result: {}. {} passed; {} failed",
        if failed.is_empty() { "ok" } else { "FAILED" },
        chosen.len() - failed.len(),
        failed.len()
    );
    if !failed.is_empty() {
        println!("failed: {}", failed.join(", "));
        std::process::exit(101);
    }
}
