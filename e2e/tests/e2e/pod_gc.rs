//! Terminated pods deleted the instant they finish (`--pod-gc instant`): with the driver-protection
//! finalizer every application ends right; without it, some are wrongly failed ("driver pod not
//! found"), Kubeflow's fault, which proves the test can fail.

use std::time::Duration;

use kube_sim::node::PodGc;
use spark_operator_api::ApplicationStateType as S;
use spark_operator_e2e::{Cluster, ClusterOptions, Poll, app_yaml, poll, state};

const APPS: usize = 200;

/// Runs `APPS` short applications under instant pod GC; returns the ones that did not complete.
async fn burst(finalizer: bool) -> Vec<(String, S, String)> {
    let cluster = Cluster::start(ClusterOptions {
        pod_gc: PodGc::Instant,
        normal_events: false,
        ..ClusterOptions::big()
    })
    .await;
    let _controller = cluster.controller(cluster.args(&[&format!("--driver-finalizer={finalizer}")]));
    for i in 0..APPS {
        cluster
            .create_app(&app_yaml(&format!("gc-{i}"), "100ms", 0, 1, ""))
            .await;
    }
    let apps = poll(Duration::from_secs(240), || async {
        let apps = cluster.all_apps("default").await;
        let done = apps.values().filter(|a| state(a).is_terminal()).count();
        if done == APPS {
            Poll::Done(apps)
        } else {
            Poll::Pending(done)
        }
    })
    .await
    .unwrap_or_else(|done| panic!("only {done} of {APPS} applications ended"));
    apps.into_iter()
        .filter(|(_, a)| state(a) != S::Completed)
        .map(|(name, a)| {
            let app_state = state(&a);
            let message = a.status.map(|s| s.application_state.error_message).unwrap_or_default();
            (name, app_state, message)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_finalizer_every_application_completes_under_instant_pod_gc() {
    let wrong = burst(true).await;
    assert!(
        wrong.is_empty(),
        "{} of {APPS} in a wrong state: {:?}",
        wrong.len(),
        &wrong[..wrong.len().min(5)]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_finalizer_instant_pod_gc_loses_terminations() {
    let wrong = burst(false).await;
    eprintln!(
        "without the finalizer: {} of {APPS} applications in a wrong state",
        wrong.len()
    );
    assert!(!wrong.is_empty(), "the unprotected run should lose some terminations");
    assert!(
        wrong.iter().any(|(_, _, message)| message.contains("not found")),
        "{:?}",
        &wrong[..wrong.len().min(5)]
    );
}
