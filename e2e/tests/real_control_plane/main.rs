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
use serde_json::json;
use spark_operator_e2e::real::ControlPlane;
use spark_operator_e2e::real::operator::Install;

mod admission;
mod ca_bundle;
mod failover;
mod kubelet;
mod lifecycle;
mod owners;
mod scheduled;
mod support;
mod up_script;

use support::Tier;

/// One scenario: a name (what `-- NAME` filters on) and its body.
type Body = fn(&'static Tier) -> Pin<Box<dyn Future<Output = ()> + Send>>;

const SCENARIOS: &[(&str, Body)] = &[
    ("up_script_signals_leave_nothing", |tier| {
        Box::pin(up_script::signals_leave_nothing(tier))
    }),
    ("kubelet_runs_pods_and_drivers_make_executors", |tier| {
        Box::pin(kubelet::runs_pods_and_drivers_make_executors(tier.control_plane))
    }),
    ("admission_examples_mistakes_and_warnings", |tier| {
        Box::pin(admission::examples_mistakes_and_warnings(tier))
    }),
    ("owners_of_any_kind", |tier| Box::pin(owners::owners_of_any_kind(tier))),
    ("finalizers_rules_let_dependents_block_deletion", |tier| {
        Box::pin(owners::finalizers_rules_let_dependents_block_deletion(tier))
    }),
    ("lifecycle_submission_retries_and_gc", |tier| {
        Box::pin(lifecycle::submission_lifecycle_retries_and_gc(tier))
    }),
    ("scheduled_every_few_seconds_runs", |tier| {
        Box::pin(scheduled::every_few_seconds_runs(tier))
    }),
    ("failover_the_standby_finishes_the_work", |tier| {
        Box::pin(failover::the_standby_finishes_the_work(tier))
    }),
    ("ca_bundle_filled_on_the_configurations_event", |tier| {
        Box::pin(ca_bundle::filled_on_the_configurations_event(tier))
    }),
];

/// The job namespaces of the tier's chart installation (the webhook's namespaceSelector lists them).
const JOB_NAMESPACES: &[&str] = &[
    admission::NAMESPACE,
    owners::NAMESPACE,
    lifecycle::NAMESPACE,
    scheduled::NAMESPACE,
    failover::NAMESPACE,
];

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
    let install = runtime.block_on(Install::new(
        control_plane,
        JOB_NAMESPACES,
        json!({ "webhook": { "ownerResources": [owners::LISTED_OWNER_RESOURCE] } }),
    ));
    let Some(install) = install else {
        return;
    };
    let tier: &'static Tier = Box::leak(Box::new(Tier { control_plane, install }));
    let mut failed = Vec::new();
    println!(
        "\nrunning {} scenarios on the real control plane ({})",
        chosen.len(),
        control_plane.data_dir().display()
    );
    for (name, body) in &chosen {
        let outcome = runtime.block_on(std::panic::AssertUnwindSafe(body(tier)).catch_unwind());
        match outcome {
            Ok(()) => println!("test {name} ... ok"),
            Err(_) => {
                println!("test {name} ... FAILED");
                failed.push(*name);
            }
        }
    }
    // The whole tier ran: not one request of the operator's ServiceAccount may have been refused.
    if filters.is_empty() {
        let name = "no_request_of_the_operator_refused";
        match refused_requests(control_plane, &tier.install.username()) {
            Ok(count) => println!("test {name} ... ok (403s of {}: {count})", tier.install.username()),
            Err(refusals) => {
                println!("test {name} ... FAILED\n{}", refusals.join("\n"));
                failed.push(name);
            }
        }
    }
    let total = chosen.len() + usize::from(filters.is_empty());
    println!(
        "\ntest result: {}. {} passed; {} failed",
        if failed.is_empty() { "ok" } else { "FAILED" },
        total - failed.len(),
        failed.len()
    );
    if !failed.is_empty() {
        println!("failed: {}", failed.join(", "));
        std::process::exit(101);
    }
}

/// The requests of `username` that kube-apiserver answered 403, from its audit log: Ok(0), or each one.
fn refused_requests(control_plane: &ControlPlane, username: &str) -> Result<usize, Vec<String>> {
    let log = std::fs::read_to_string(control_plane.audit_log()).expect("the audit log");
    let mut requests = 0;
    let refused: Vec<String> = log
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|event| event["user"]["username"] == username)
        .inspect(|_| requests += 1)
        .filter(|event| event["responseStatus"]["code"] == 403)
        .map(|event| format!("  403: {} {}", event["verb"], event["requestURI"]))
        .collect();
    assert!(
        requests > 0,
        "the audit log has no request of {username}: is it the operator's user?"
    );
    if refused.is_empty() { Ok(0) } else { Err(refused) }
}
