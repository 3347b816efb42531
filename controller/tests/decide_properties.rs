//! Property test: the state machine (`decide`) and the pod facts it reads (`observe::driver_pod`) never
//! panic, whatever the stored status says (any state string, attempts at i32 extremes, timestamps from
//! year 1 to 9999), whatever the restart policy and TTL hold (i64 extremes), whatever the driver pod
//! looks like and whatever the clock reads. Every decision also asks for a bounded requeue.
//!
//! Deterministic: a fixed ChaCha seed, a bounded case count, no persisted regressions.

// Test helpers may unwrap: a panic is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use jiff::Timestamp;
use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
use serde_json::{Value, json};
use spark_operator_api::SparkApplication;
use spark_operator_api::state::TerminationObserver;
use spark_operator_controller::app::observe;
use spark_operator_controller::app::state::{self, DriverObservation, Input, MAX_REQUEUE};
use spark_operator_controller::config::Timing;
use spark_operator_controller::pod::SparkPod;

const SEED: [u8; 32] = *b"spark-operator-decide-properties";

const STATES: &[&str] = &[
    "",
    "SUBMITTED",
    "RUNNING",
    "COMPLETED",
    "FAILED",
    "SUBMISSION_FAILED",
    "PENDING_RERUN",
    "INVALIDATING",
    "SUCCEEDING",
    "FAILING",
    "SUSPENDING",
    "SUSPENDED",
    "RESUMING",
    "UNKNOWN",
    "garbage",
];
const TIMES: &[&str] = &[
    "0001-01-01T00:00:00Z",
    "1970-01-01T00:00:00Z",
    "2026-11-25T00:00:00Z",
    "9999-12-30T00:00:00Z",
];
const REASONS: &[&str] = &[
    "Completed",
    "Error",
    "OOMKilled",
    "ImagePullBackOff",
    "ErrImagePull",
    "CreateContainerConfigError",
    "ContainerCreating",
    "Unschedulable",
];

fn int() -> impl Strategy<Value = i64> {
    prop_oneof![
        Just(i64::MAX),
        Just(i64::MIN),
        Just(0),
        Just(-1),
        Just(1),
        Just(i64::from(i32::MAX)),
        any::<i64>()
    ]
}

fn int32() -> impl Strategy<Value = i64> {
    prop_oneof![
        Just(i64::from(i32::MAX)),
        Just(i64::from(i32::MIN)),
        Just(0),
        Just(1),
        (0i64..5)
    ]
}

fn time() -> impl Strategy<Value = &'static str> {
    prop::sample::select(TIMES)
}

/// An application with a stored status of any shape the schema allows.
fn app() -> impl Strategy<Value = Value> {
    (
        (prop::sample::select(STATES), int32(), int32(), time(), time(), time()),
        (
            prop::sample::select(&["Never", "Always", "OnFailure", "x"][..]),
            int32(),
            int32(),
            int(),
            int(),
            prop::option::of(int()),
            any::<bool>(),
        ),
    )
        .prop_map(
            |((state, submissions, executions, submitted, terminated, last_attempt), restart)| {
                let (policy, on_failure, on_submission, failure_interval, submission_interval, ttl, suspend) = restart;
                json!({
                    "apiVersion": "sparkoperator.k8s.io/v1beta2",
                    "kind": "SparkApplication",
                    "metadata": {"name": "pi", "namespace": "jobs", "uid": "u-1", "generation": 3,
                                 "creationTimestamp": submitted,
                                 "annotations": {"sparkoperator.k8s.io/spec-hash": "h"}},
                    "spec": {
                        "type": "Scala", "sparkVersion": "4.0.4", "image": "spark:4.0.4",
                        "mainApplicationFile": "local:///x.jar", "suspend": suspend,
                        "timeToLiveSeconds": ttl,
                        "restartPolicy": {"type": policy, "onFailureRetries": on_failure,
                            "onSubmissionFailureRetries": on_submission,
                            "onFailureRetryInterval": failure_interval,
                            "onSubmissionFailureRetryInterval": submission_interval},
                        "driver": {"cores": 1, "memory": "512m"},
                        "executor": {"instances": 1, "cores": 1, "memory": "512m"}
                    },
                    "status": {
                        "submissionID": "s-1",
                        "applicationState": {"state": state, "errorMessage": ""},
                        "submissionAttempts": submissions, "executionAttempts": executions,
                        "lastSubmissionAttemptTime": last_attempt,
                        "terminationTime": terminated,
                        "driverInfo": {"podName": "pi-driver"}
                    }
                })
            },
        )
}

/// A driver pod of any phase, reason, exit code and age, or none.
fn driver() -> impl Strategy<Value = Option<Value>> {
    prop::option::of(
        (
            prop::sample::select(&["Pending", "Running", "Succeeded", "Failed", "Unknown", "x"][..]),
            prop::sample::select(REASONS),
            prop_oneof![Just(i64::from(i32::MIN)), Just(0), Just(1), Just(137), Just(i64::from(i32::MAX))],
            time(),
            time(),
            prop::option::of(time()),
            prop::sample::select(&["s-1", "s-2"][..]),
            any::<bool>(),
        )
            .prop_map(|(phase, reason, exit, created, finished, deleted, submission, terminated)| {
                let state = if terminated {
                    json!({"terminated": {"exitCode": exit, "reason": reason, "finishedAt": finished}})
                } else {
                    json!({"waiting": {"reason": reason}})
                };
                let mut pod = json!({
                    "metadata": {"name": "pi-driver", "namespace": "jobs", "uid": "d-1",
                        "creationTimestamp": created,
                        "finalizers": ["sparkoperator.k8s.io/driver-protection"],
                        "labels": {"spark-role": "driver", "sparkoperator.k8s.io/app-name": "pi",
                                   "sparkoperator.k8s.io/submission-id": submission,
                                   "sparkoperator.k8s.io/launched-by-spark-operator": "true"}},
                    "spec": {"containers": [{"name": "spark-kubernetes-driver"}]},
                    "status": {"phase": phase, "containerStatuses": [{"name": "spark-kubernetes-driver", "state": state}],
                               "conditions": [{"type": "PodScheduled", "status": "False", "reason": reason}]}
                });
                if let Some(deleted) = deleted {
                    pod["metadata"]["deletionTimestamp"] = json!(deleted);
                    pod["metadata"]["deletionGracePeriodSeconds"] = json!(30);
                }
                pod
            }),
    )
}

#[test]
fn decide_never_panics_and_always_asks_for_a_bounded_requeue() {
    let config = Config {
        cases: 3000,
        failure_persistence: None,
        rng_algorithm: RngAlgorithm::ChaCha,
        ..Config::default()
    };
    let mut runner = TestRunner::new_with_rng(config, TestRng::from_seed(RngAlgorithm::ChaCha, &SEED));
    let strategy = (
        app(),
        driver(),
        time(),
        prop::sample::select(&[None, Some("h"), Some("other")][..]),
    );
    let decided = std::cell::Cell::new(0u32);
    runner
        .run(&strategy, |(app, driver, now, recorded)| {
            let Ok(app) = serde_json::from_value::<SparkApplication>(app) else {
                return Ok(());
            };
            let observation = match driver {
                Some(pod) => {
                    let pod: SparkPod = serde_json::from_value(pod).unwrap();
                    DriverObservation::Present(Box::new(observe::driver_pod(&pod, TerminationObserver::PodWatch)))
                }
                None => DriverObservation::Missing,
            };
            let hash = state::spec_hash(&app);
            let timing = Timing::default();
            let input = Input {
                app: &app,
                driver: &observation,
                now: now.parse::<Timestamp>().unwrap(),
                timing: &timing,
                new_submission_id: "s-new",
                recorded_spec_hash: recorded,
                spec_hash: if recorded == Some("h") { "h" } else { &hash },
                spec_errors: &[],
                executors_waiting_since: None,
            };
            let decision = state::decide(&input);
            if let Some(requeue) = decision.requeue {
                prop_assert!(requeue <= MAX_REQUEUE, "requeue {requeue:?}");
            }
            decided.set(decided.get() + 1);
            Ok(())
        })
        .unwrap();
    assert!(decided.get() > 2000, "only {} cases reached decide", decided.get());
}
