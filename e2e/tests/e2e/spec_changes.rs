//! What users do to a running application: suspend it, resume it, change its spec, give it a TTL.
//! Suspending stops the driver without counting a failure (its exit 143 is ours); resuming submits
//! again; a spec change reruns it with the new spec; TTL deletes it once it has ended.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams};
use spark_operator_api::ApplicationStateType as S;
use spark_operator_api::SparkApplication;
use spark_operator_e2e::{Cluster, ClusterOptions, Poll, app_yaml, poll, state};

const LIMIT: Duration = Duration::from_secs(60);

fn submission(app: &SparkApplication) -> String {
    app.status.as_ref().map(|s| s.submission_id.clone()).unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn suspend_resume_spec_change_and_ttl() {
    let cluster = Cluster::start(ClusterOptions::default()).await;
    let _controller = cluster.controller(cluster.args(&[]));
    let apps = cluster.apps("default");
    let pods: Api<Pod> = Api::namespaced(cluster.client.clone(), "default");
    let merge = |patch: serde_json::Value| {
        let apps = apps.clone();
        async move {
            apps.patch("long", &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .expect("patched")
        }
    };
    cluster.create_app(&app_yaml("long", "60s", 0, 1, "")).await;
    let running = cluster
        .wait_app("default", "long", LIMIT, |a| state(a) == S::Running)
        .await;
    let first = submission(&running);

    // Suspend: the driver goes, and its SIGTERM exit is not a failure.
    merge(serde_json::json!({"spec": {"suspend": true}})).await;
    let suspended = cluster
        .wait_app("default", "long", LIMIT, |a| state(a) == S::Suspended)
        .await;
    let status = suspended.status.clone().unwrap_or_default();
    assert_eq!(status.execution_attempts, 1, "{status:#?}");
    assert!(status.application_state.error_message.is_empty(), "{status:#?}");
    let gone = poll(Duration::from_secs(20), || async {
        match pods.get_opt("long-driver").await {
            Ok(None) => Poll::Done(()),
            other => Poll::Pending(other.ok().flatten().and_then(|p| p.status).and_then(|s| s.phase)),
        }
    })
    .await;
    assert!(gone.is_ok(), "the suspended driver pod is still there: {gone:?}");

    // Resume: a new submission of the same spec.
    merge(serde_json::json!({"spec": {"suspend": false}})).await;
    let resumed = cluster
        .wait_app("default", "long", LIMIT, |a| {
            state(a) == S::Running && submission(a) != first
        })
        .await;
    let second = submission(&resumed);

    // A spec change reruns the application with the new spec: this run ends in half a second.
    merge(serde_json::json!({"spec": {"driver": {"annotations": {"sim.spark-operator.dev/run-time": "500ms"}}}})).await;
    let rerun = cluster
        .wait_app("default", "long", LIMIT, |a| state(a).is_terminal())
        .await;
    assert_eq!(state(&rerun), S::Completed, "{:#?}", rerun.status);
    assert_ne!(submission(&rerun), second, "the changed spec was submitted anew");
    let status = rerun.status.clone().unwrap_or_default();
    assert_eq!(
        status.driver_termination.as_ref().and_then(|d| d.exit_code),
        Some(0),
        "{status:#?}"
    );

    // A TTL given after the end deletes the application (not a rerun: TTL is not part of the run).
    merge(serde_json::json!({"spec": {"timeToLiveSeconds": 1}})).await;
    let deleted = poll(Duration::from_secs(30), || async {
        match apps.get_opt("long").await {
            Ok(None) => Poll::Done(()),
            other => Poll::Pending(other.ok().flatten().map(|a| state(&a))),
        }
    })
    .await;
    assert!(deleted.is_ok(), "the application outlived its TTL: {deleted:?}");
}
