//! A submission is claimed in status before anything is created, then finished, never replaced: API
//! failures in the middle of it end with exactly one driver pod, adopted where it already existed.

use std::time::Duration;

use kube_sim::faults::{FaultAction, FaultRule};
use spark_operator_api::ApplicationStateType as S;
use spark_operator_e2e::{Cluster, ClusterOptions, app_yaml, state};

const LIMIT: Duration = Duration::from_secs(90);

fn fail(verb: &str, resource: &str, times: usize) -> FaultRule {
    FaultRule {
        verb: Some(verb.into()),
        resource: Some(resource.into()),
        user_agent: None,
        action: FaultAction::Fail {
            code: 500,
            reason: "InternalError".into(),
            message: "injected".into(),
        },
        times: Some(times),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_driver_creations_resume_the_same_submission() {
    let cluster = Cluster::start(ClusterOptions::default()).await;
    cluster.sim.faults().add(fail("create", "pods", 2));
    let _controller = cluster.controller(cluster.args(&[]));
    cluster.create_app(&app_yaml("flaky-pod", "200ms", 0, 1, "")).await;
    let app = cluster
        .wait_app("default", "flaky-pod", LIMIT, |a| state(a).is_terminal())
        .await;
    let status = app.status.unwrap_or_default();
    assert_eq!(app_state(&status), S::Completed, "{status:#?}");
    assert_eq!(
        status.submission_attempts, 1,
        "the claimed submission was resumed, not replaced"
    );
    assert_eq!(status.execution_attempts, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_driver_created_before_a_failure_is_adopted() {
    let cluster = Cluster::start(ClusterOptions::default()).await;
    // The driver pod is created, then its ConfigMaps fail: the next reconcile finds the pod.
    cluster.sim.faults().add(fail("create", "configmaps", 2));
    let _controller = cluster.controller(cluster.args(&[]));
    cluster.create_app(&app_yaml("flaky-cm", "200ms", 0, 1, "")).await;
    let app = cluster
        .wait_app("default", "flaky-cm", LIMIT, |a| state(a).is_terminal())
        .await;
    let status = app.status.unwrap_or_default();
    assert_eq!(app_state(&status), S::Completed, "{status:#?}");
    assert_eq!(status.submission_attempts, 1);
    assert_eq!(status.execution_attempts, 1);
    let submitted = status
        .conditions
        .iter()
        .find(|c| c.type_ == "Submitted")
        .map(|c| c.message.clone())
        .unwrap_or_default();
    assert!(submitted.contains("adopted"), "{submitted}");
}

fn app_state(status: &spark_operator_api::status::SparkApplicationStatus) -> S {
    status.application_state.state
}
