//! Every transition of the state machine, table-driven: (application, driver, time) → (state, actions).

use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde_json::json;
use spark_operator_api::SparkApplication;
use spark_operator_api::state::{ApplicationStateType as S, DriverState};
use spark_operator_api::status::TerminationRecord;

use super::*;
use crate::app::observe::{Deletion, DriverPod, StartProblem};

const T0: i64 = 1_700_000_000;
const SUB: &str = "sub-1";
const NEW_ID: &str = "sub-new";

fn at(offset: i64) -> Timestamp {
    Timestamp::from_second(T0 + offset).unwrap()
}

fn time(offset: i64) -> Time {
    Time(at(offset))
}

/// An application with a policy and a status (merged over a running-run status).
fn app(policy: serde_json::Value, status: serde_json::Value) -> SparkApplication {
    let mut base = json!({
        "applicationState": {"state": "RUNNING"},
        "submissionID": SUB,
        "driverInfo": {"podName": "pi-driver"},
        "executionAttempts": 1,
        "submissionAttempts": 1,
        "lastSubmissionAttemptTime": "2023-11-14T22:13:20Z",
        "observedGeneration": 1
    });
    json_patch_merge(&mut base, status);
    serde_json::from_value(json!({
        "apiVersion": "sparkoperator.k8s.io/v1beta2",
        "kind": "SparkApplication",
        "metadata": {"name": "pi", "namespace": "default", "generation": 1, "uid": "u1"},
        "spec": {
            "type": "Scala", "sparkVersion": "4.0.4", "mainApplicationFile": "local:///pi.jar",
            "driver": {}, "executor": {},
            "restartPolicy": policy
        },
        "status": base
    }))
    .unwrap()
}

fn json_patch_merge(base: &mut serde_json::Value, patch: serde_json::Value) {
    if let (Some(b), serde_json::Value::Object(p)) = (base.as_object_mut(), patch) {
        for (k, v) in p {
            if v.is_null() {
                b.remove(&k);
            } else {
                b.insert(k, v);
            }
        }
    }
}

fn never() -> serde_json::Value {
    json!({"type": "Never"})
}

fn on_failure(retries: i32) -> serde_json::Value {
    json!({"type": "OnFailure", "onFailureRetries": retries, "onFailureRetryInterval": 10,
           "onSubmissionFailureRetries": retries, "onSubmissionFailureRetryInterval": 10})
}

fn always() -> serde_json::Value {
    json!({"type": "Always", "onFailureRetryInterval": 10})
}

fn pod(state: DriverState) -> DriverPod {
    DriverPod {
        name: "pi-driver".into(),
        submission_id: Some(SUB.into()),
        app_name: Some("pi".into()),
        ours: true,
        state,
        created_at: Some(at(0)),
        has_finalizer: true,
        spark_app_id: Some("spark-abc".into()),
        placed: state != DriverState::Pending,
        ..DriverPod::default()
    }
}

fn exited(code: i32) -> DriverPod {
    let mut p = pod(if code == 0 {
        DriverState::Completed
    } else {
        DriverState::Failed
    });
    p.termination = Some(TerminationRecord {
        pod_name: "pi-driver".into(),
        exit_code: Some(code),
        reason: Some(if code == 0 { "Completed" } else { "Error" }.into()),
        finished_at: Some(time(100)),
        ..TerminationRecord::default()
    });
    p
}

fn stuck(reason: &str) -> DriverPod {
    let mut p = pod(DriverState::Pending);
    p.start_problem = Some(StartProblem {
        reason: reason.into(),
        message: "details".into(),
        waiting_for_capacity: false,
    });
    p
}

fn run(app: &SparkApplication, driver: DriverObservation, now: i64) -> Decision {
    let hash = spec_hash(app);
    run_recorded(app, driver, now, Some(&hash))
}

fn run_recorded(app: &SparkApplication, driver: DriverObservation, now: i64, recorded: Option<&str>) -> Decision {
    let hash = spec_hash(app);
    decide(&Input {
        app,
        driver: &driver,
        now: at(now),
        timing: &Timing::default(),
        new_submission_id: NEW_ID,
        recorded_spec_hash: recorded,
        spec_hash: &hash,
        spec_errors: &[],
        executors_waiting_since: None,
    })
}

fn present(p: DriverPod) -> DriverObservation {
    DriverObservation::Present(Box::new(p))
}

fn submit_new() -> Action {
    Action::Submit {
        submission_id: NEW_ID.into(),
    }
}

fn delete_driver() -> Action {
    Action::DeleteDriver {
        pod_name: "pi-driver".into(),
    }
}

struct Case {
    name: &'static str,
    app: SparkApplication,
    driver: DriverObservation,
    now: i64,
    state: S,
    actions: Vec<Action>,
    events: Vec<&'static str>,
}

fn check(cases: Vec<Case>) {
    for case in cases {
        let d = run(&case.app, case.driver, case.now);
        assert_eq!(d.status.application_state.state, case.state, "{}: state", case.name);
        assert_eq!(d.actions, case.actions, "{}: actions", case.name);
        let events: Vec<_> = d.transitions.iter().map(|t| t.reason).collect();
        assert_eq!(events, case.events, "{}: events", case.name);
    }
}

#[test]
fn submission_and_driver_progress() {
    use reasons as r;
    check(vec![
        Case {
            name: "new app claims a submission",
            app: app(
                never(),
                json!({"applicationState": {"state": ""}, "submissionID": null,
                "executionAttempts": null, "submissionAttempts": null}),
            ),
            driver: DriverObservation::Missing,
            now: 0,
            state: S::New,
            actions: vec![submit_new()],
            events: vec![],
        },
        Case {
            name: "pending driver stays submitted",
            app: app(never(), json!({"applicationState": {"state": "SUBMITTED"}})),
            driver: present(pod(DriverState::Pending)),
            now: 5,
            state: S::Submitted,
            actions: vec![],
            events: vec![],
        },
        Case {
            name: "running driver",
            app: app(never(), json!({"applicationState": {"state": "SUBMITTED"}})),
            driver: present(pod(DriverState::Running)),
            now: 5,
            state: S::Running,
            actions: vec![],
            events: vec![r::RUNNING],
        },
        Case {
            name: "driver exit 0 completes in one step, with both events",
            app: app(never(), json!({})),
            driver: present(exited(0)),
            now: 101,
            state: S::Completed,
            actions: vec![Action::CleanUpEnded],
            events: vec![r::DRIVER_COMPLETED, r::COMPLETED],
        },
        Case {
            name: "driver exit 1 with Never fails",
            app: app(never(), json!({})),
            driver: present(exited(1)),
            now: 101,
            state: S::Failed,
            actions: vec![Action::CleanUpEnded],
            events: vec![r::DRIVER_FAILED, r::FAILED],
        },
        Case {
            name: "unknown driver state",
            app: app(never(), json!({})),
            driver: present(pod(DriverState::Unknown)),
            now: 5,
            state: S::Unknown,
            actions: vec![],
            events: vec![r::DRIVER_UNKNOWN],
        },
        Case {
            name: "unknown app state re-derives from the driver",
            app: app(never(), json!({"applicationState": {"state": "WHATEVER"}})),
            driver: present(pod(DriverState::Running)),
            now: 5,
            state: S::Running,
            actions: vec![],
            events: vec![r::RUNNING],
        },
    ]);
}

#[test]
fn a_gone_driver_is_judged_by_its_recorded_termination() {
    use reasons as r;
    let recorded = |code: i32| {
        json!({"driverTermination": {"podName": "pi-driver", "exitCode": code, "finishedAt": "2023-11-14T22:15:00Z",
            "observedBy": "Finalizer"}})
    };
    check(vec![
        Case {
            name: "gone after exit 0, recorded: completed (Kubeflow: FAILED, driver pod not found)",
            app: app(on_failure(3), recorded(0)),
            driver: DriverObservation::Missing,
            now: 500,
            state: S::Completed,
            actions: vec![Action::CleanUpEnded],
            events: vec![r::DRIVER_COMPLETED, r::COMPLETED],
        },
        Case {
            name: "gone with nothing recorded: not found",
            app: app(never(), json!({})),
            driver: DriverObservation::Missing,
            now: 500,
            state: S::Failed,
            actions: vec![Action::CleanUpEnded],
            events: vec![r::DRIVER_NOT_FOUND, r::FAILED],
        },
        Case {
            name: "missing right after submission: cache lag, wait",
            app: app(never(), json!({"applicationState": {"state": "SUBMITTED"}})),
            driver: DriverObservation::Missing,
            now: 3,
            state: S::Submitted,
            actions: vec![],
            events: vec![],
        },
        Case {
            name: "a pod of another submission is not this run's driver",
            app: app(never(), json!({})),
            driver: present(DriverPod {
                submission_id: Some("old".into()),
                ..exited(0)
            }),
            now: 500,
            state: S::Failed,
            actions: vec![Action::CleanUpEnded],
            events: vec![r::DRIVER_NOT_FOUND, r::FAILED],
        },
    ]);
}

#[test]
fn an_agents_record_finishes_a_run_whose_driver_pod_shows_nothing() {
    use reasons as r;
    let reported = |code: i32| {
        json!({"driverTermination": {"podName": "pi-driver", "exitCode": code, "finishedAt": "2023-11-14T22:15:00Z",
            "observedBy": "Agent", "containerID": "c-1"}})
    };
    // Before the record counted here, only the pod decided: the first case (the same running pod, no
    // record) is what every one of the others would have stayed, RUNNING until the pod said more.
    check(vec![
        Case {
            name: "running pod, nothing recorded: running",
            app: app(never(), json!({})),
            driver: present(pod(DriverState::Running)),
            now: 500,
            state: S::Running,
            actions: vec![],
            events: vec![],
        },
        Case {
            name: "running pod, exit 0 reported: completed",
            app: app(never(), reported(0)),
            driver: present(pod(DriverState::Running)),
            now: 500,
            state: S::Completed,
            actions: vec![Action::CleanUpEnded],
            events: vec![r::DRIVER_COMPLETED, r::COMPLETED],
        },
        Case {
            name: "running pod, exit 1 reported, no retries: failed",
            app: app(never(), reported(1)),
            driver: present(pod(DriverState::Running)),
            now: 500,
            state: S::Failed,
            actions: vec![Action::CleanUpEnded],
            events: vec![r::DRIVER_FAILED, r::FAILED],
        },
        Case {
            name: "submitted, pod still pending, exit 1 reported, retries left: failing",
            app: app(on_failure(3), {
                let mut status = reported(1);
                status["applicationState"] = json!({"state": "SUBMITTED"});
                status
            }),
            driver: present(pod(DriverState::Pending)),
            now: 101,
            state: S::Failing,
            actions: vec![],
            events: vec![r::DRIVER_FAILED],
        },
        Case {
            name: "unknown pod (node lost), exit 0 reported: completed",
            app: app(never(), {
                let mut status = reported(0);
                status["applicationState"] = json!({"state": "UNKNOWN"});
                status
            }),
            driver: present(pod(DriverState::Unknown)),
            now: 500,
            state: S::Completed,
            actions: vec![Action::CleanUpEnded],
            events: vec![r::DRIVER_COMPLETED, r::COMPLETED],
        },
        Case {
            name: "deleted pod past its deadline, exit 0 reported: completed, not DriverPodDeleted",
            app: app(never(), reported(0)),
            driver: present(DriverPod {
                deletion: Some(Deletion { deadline: at(10) }),
                ..pod(DriverState::Running)
            }),
            now: 500,
            state: S::Completed,
            actions: vec![Action::CleanUpEnded],
            events: vec![r::DRIVER_COMPLETED, r::COMPLETED],
        },
    ]);
    // The agent's record is the one kept, with its container id.
    let d = run(&app(never(), reported(1)), present(pod(DriverState::Running)), 500);
    let record = d.status.driver_termination.unwrap();
    assert_eq!(record.container_id.as_deref(), Some("c-1"));
    assert_eq!(
        record.observed_by,
        Some(spark_operator_api::state::TerminationObserver::Agent)
    );
    assert_eq!(
        d.status.termination_time,
        Some(Time("2023-11-14T22:15:00Z".parse().unwrap()))
    );
}

#[test]
fn a_new_submission_forgets_the_previous_runs_reports() {
    let a = app(
        on_failure(3),
        json!({"applicationState": {"state": "PENDING_RERUN"}, "executionAttempts": 1,
               "driverTermination": {"podName": "pi-driver", "exitCode": 1},
               "uncountedExecutorTerminations": [{"podName": "pi-exec-1", "executorId": 1, "exitCode": 1,
                   "containerID": "c-exec-1"}]}),
    );
    assert_eq!(a.status.as_ref().unwrap().uncounted_executor_terminations.len(), 1);
    let d = run(&a, DriverObservation::Missing, 200);
    assert_eq!(d.status.submission_id, NEW_ID);
    assert!(d.status.uncounted_executor_terminations.is_empty());
    assert_eq!(d.status.driver_termination, None);
}

#[test]
fn the_first_recorded_termination_wins() {
    let a = app(
        never(),
        json!({"driverTermination": {"podName": "pi-driver", "exitCode": 0, "observedBy": "Agent"}}),
    );
    let d = run(&a, present(exited(0)), 200);
    let record = d.status.driver_termination.unwrap();
    assert_eq!(
        record.observed_by,
        Some(spark_operator_api::state::TerminationObserver::Agent)
    );
}

#[test]
fn stuck_drivers_fail_after_the_start_timeout() {
    use reasons as r;
    for reason in [
        "ImagePullBackOff",
        "ErrImagePull",
        "Unschedulable",
        "CreateContainerConfigError",
    ] {
        let a = app(never(), json!({"applicationState": {"state": "SUBMITTED"}}));
        let early = run(&a, present(stuck(reason)), 299);
        assert_eq!(early.status.application_state.state, S::Submitted, "{reason}");
        assert_eq!(
            early.requeue,
            Some(Duration::from_secs(1)),
            "{reason}: requeued at the deadline"
        );

        let late = run(&a, present(stuck(reason)), 300);
        assert_eq!(late.status.application_state.state, S::Failed, "{reason}");
        assert_eq!(
            late.actions,
            vec![delete_driver(), Action::CleanUpEnded],
            "{reason}: the stuck pod is deleted"
        );
        let record = late.status.driver_termination.unwrap();
        assert_eq!(record.reason.as_deref(), Some(reason));
        assert_eq!(record.exit_code, None);
        assert!(late.status.application_state.error_message.contains(reason));
        assert_eq!(late.transitions[0].reason, r::DRIVER_START_TIMEOUT);
    }
    // OnFailure: the attempt fails with that reason and is retried.
    let a = app(on_failure(3), json!({"applicationState": {"state": "SUBMITTED"}}));
    let d = run(&a, present(stuck("ImagePullBackOff")), 300);
    assert_eq!(d.status.application_state.state, S::Failing);
    assert_eq!(d.actions, vec![delete_driver()]);
}

#[test]
fn retries_are_linear_and_bounded() {
    use reasons as r;
    let failing = |attempts: i32| {
        json!({"applicationState": {"state": "FAILING", "errorMessage": "driver container exited with code 1"},
               "executionAttempts": attempts, "terminationTime": "2023-11-14T22:15:00Z",
               "driverTermination": {"podName": "pi-driver", "exitCode": 1}})
    };
    // terminationTime is T0 + 100.
    check(vec![
        Case {
            name: "first retry waits 1 × interval",
            app: app(on_failure(3), failing(1)),
            driver: present(exited(1)),
            now: 109,
            state: S::Failing,
            actions: vec![],
            events: vec![],
        },
        Case {
            name: "first retry due: the old driver is deleted",
            app: app(on_failure(3), failing(1)),
            driver: present(exited(1)),
            now: 110,
            state: S::PendingRerun,
            actions: vec![delete_driver()],
            events: vec![r::PENDING_RERUN],
        },
        Case {
            name: "third retry waits 3 × interval",
            app: app(on_failure(3), failing(3)),
            driver: present(exited(1)),
            now: 129,
            state: S::Failing,
            actions: vec![],
            events: vec![],
        },
        Case {
            name: "after retries + 1 attempts: failed",
            app: app(on_failure(3), failing(4)),
            driver: present(exited(1)),
            now: 1000,
            state: S::Failed,
            actions: vec![Action::CleanUpEnded],
            events: vec![r::FAILED],
        },
        Case {
            name: "Always retries failures without a limit",
            app: app(always(), failing(40)),
            driver: DriverObservation::Missing,
            now: 1000,
            state: S::PendingRerun,
            actions: vec![submit_new()],
            events: vec![r::PENDING_RERUN],
        },
        Case {
            name: "Always reruns after success",
            app: app(always(), json!({})),
            driver: present(exited(0)),
            now: 101,
            state: S::PendingRerun,
            actions: vec![delete_driver()],
            events: vec![r::DRIVER_COMPLETED, r::PENDING_RERUN],
        },
    ]);
    // Rerun claims a new submission once the old driver is gone; the attempt count carries on.
    let a = app(
        on_failure(3),
        json!({"applicationState": {"state": "PENDING_RERUN"}, "executionAttempts": 2}),
    );
    let d = run(&a, DriverObservation::Missing, 200);
    assert_eq!(d.actions, vec![submit_new()]);
    assert!(d.conditional, "claiming a submission is a conditional write");
    assert_eq!(d.status.submission_id, NEW_ID);
    assert_eq!(d.status.submission_attempts, 2);
    assert_eq!(d.status.execution_attempts, 2, "counted when the pod is created");
    assert_eq!(submission_in_flight(&d.status), Some(NEW_ID));
    let done = after_submit(&a, &d.status, &SubmitOutcome::Created, at(200));
    assert_eq!(done.status.application_state.state, S::Submitted);
    assert_eq!(done.status.execution_attempts, 3);
    assert_eq!(submission_in_flight(&done.status), None);
}

#[test]
fn submission_failures_retry_then_fail() {
    use reasons as r;
    let failed = |attempts: i32| {
        json!({"applicationState": {"state": "SUBMISSION_FAILED", "errorMessage": "forbidden"},
               "submissionAttempts": attempts, "executionAttempts": 0})
    };
    // lastSubmissionAttemptTime is T0.
    check(vec![
        Case {
            name: "not yet due",
            app: app(on_failure(2), failed(1)),
            driver: DriverObservation::Missing,
            now: 9,
            state: S::SubmissionFailed,
            actions: vec![],
            events: vec![],
        },
        Case {
            name: "due: resubmit",
            app: app(on_failure(2), failed(1)),
            driver: DriverObservation::Missing,
            now: 10,
            state: S::SubmissionFailed,
            actions: vec![submit_new()],
            events: vec![],
        },
        Case {
            name: "out of retries",
            app: app(on_failure(2), failed(3)),
            driver: DriverObservation::Missing,
            now: 100,
            state: S::Failed,
            actions: vec![Action::CleanUpEnded],
            events: vec![r::FAILED],
        },
        Case {
            name: "Never fails at once",
            app: app(never(), failed(1)),
            driver: DriverObservation::Missing,
            now: 100,
            state: S::Failed,
            actions: vec![Action::CleanUpEnded],
            events: vec![r::FAILED],
        },
    ]);
    let a = app(
        never(),
        json!({"applicationState": {"state": ""}, "submissionID": null}),
    );
    let d = run(&a, DriverObservation::Missing, 0);
    let failed = after_submit(
        &a,
        &d.status,
        &SubmitOutcome::Failed {
            message: "pod pi-driver exists".into(),
        },
        at(0),
    );
    assert_eq!(failed.status.application_state.state, S::SubmissionFailed);
    assert_eq!(failed.status.application_state.error_message, "pod pi-driver exists");
    assert_eq!(failed.transitions[0].reason, r::SUBMISSION_FAILED);
}

#[test]
fn a_claimed_submission_is_finished_not_replaced() {
    let a = app(
        never(),
        json!({"applicationState": {"state": ""}, "submissionID": null, "executionAttempts": null}),
    );
    let claimed = run(&a, DriverObservation::Missing, 0);
    let mut restarted = a.clone();
    restarted.status = Some(claimed.status.clone());
    // A restarted controller (or a new leader) reads the claim and resumes it with the same id.
    let d = run(&restarted, DriverObservation::Missing, 1);
    assert_eq!(
        d.actions,
        vec![Action::Submit {
            submission_id: NEW_ID.into()
        }]
    );
    assert!(!d.conditional);
    assert_eq!(d.status, claimed.status, "nothing new to write");
    let adopted = after_submit(&restarted, &d.status, &SubmitOutcome::Adopted, at(1));
    assert_eq!(adopted.status.execution_attempts, 1);
    assert!(adopted.transitions[0].message.contains("adopted"));
}

#[test]
fn suspend_and_resume() {
    use reasons as r;
    let suspended = |state: &str| {
        let mut a = app(never(), json!({"applicationState": {"state": state}}));
        a.spec.suspend = Some(true);
        a
    };
    check(vec![
        Case {
            name: "running app is suspended: driver deleted",
            app: suspended("RUNNING"),
            driver: present(pod(DriverState::Running)),
            now: 50,
            state: S::Suspending,
            actions: vec![delete_driver()],
            events: vec![r::SUSPENDING],
        },
        Case {
            name: "exit 143 from our SIGTERM is not a failure",
            app: suspended("SUSPENDING"),
            driver: present(DriverPod {
                deletion: Some(Deletion { deadline: at(80) }),
                ..exited(143)
            }),
            now: 60,
            state: S::Suspending,
            actions: vec![],
            events: vec![],
        },
        Case {
            name: "driver gone: suspended",
            app: suspended("SUSPENDING"),
            driver: DriverObservation::Missing,
            now: 70,
            state: S::Suspended,
            actions: vec![],
            events: vec![r::SUSPENDED],
        },
        Case {
            name: "terminal apps are not suspended",
            app: suspended("COMPLETED"),
            driver: DriverObservation::Missing,
            now: 70,
            state: S::Completed,
            actions: vec![],
            events: vec![],
        },
        Case {
            name: "resume",
            app: app(never(), json!({"applicationState": {"state": "SUSPENDED"}})),
            driver: DriverObservation::Missing,
            now: 90,
            state: S::Resuming,
            actions: vec![submit_new()],
            events: vec![r::RESUMING],
        },
    ]);
}

#[test]
fn a_spec_change_invalidates_and_reruns() {
    use reasons as r;
    let mut a = app(on_failure(3), json!({"executionAttempts": 2, "submissionAttempts": 2}));
    let old = spec_hash(&a);
    a.spec.arguments = vec!["1000".into()];
    a.metadata.generation = Some(2);
    let d = run_recorded(&a, present(pod(DriverState::Running)), 50, Some(&old));
    assert_eq!(d.status.application_state.state, S::Invalidating);
    assert_eq!(d.actions, vec![delete_driver()]);
    assert_eq!(d.status.observed_generation, Some(2));
    assert_eq!(d.transitions[0].reason, r::INVALIDATING);

    let mut invalidating = a.clone();
    invalidating.status = Some(d.status);
    let d = run_recorded(&invalidating, DriverObservation::Missing, 60, Some(&old));
    assert_eq!(d.status.application_state.state, S::PendingRerun);
    assert_eq!(
        d.actions,
        vec![Action::RecordSpecHash, submit_new()],
        "the new spec's hash is recorded"
    );
    assert_eq!(d.status.submission_attempts, 1, "counters reset, then this attempt");
    assert_eq!(d.status.execution_attempts, 0);

    // Only suspend or TTL changed: no rerun.
    let mut ttl = app(
        never(),
        json!({"applicationState": {"state": "COMPLETED"}, "terminationTime": "2023-11-14T22:15:00Z"}),
    );
    let hash = spec_hash(&ttl);
    ttl.spec.time_to_live_seconds = Some(3600);
    ttl.metadata.generation = Some(2);
    assert_eq!(spec_hash(&ttl), hash);
    let d = run(&ttl, DriverObservation::Missing, 200);
    assert_eq!(d.status.application_state.state, S::Completed);
    assert_eq!(d.status.observed_generation, Some(2));

    // Applications Kubeflow ran have no recorded hash: adopted as they are, the hash recorded.
    let d = run_recorded(&a, present(pod(DriverState::Running)), 50, None);
    assert_eq!(d.status.application_state.state, S::Running);
    assert_eq!(d.actions, vec![Action::RecordSpecHash]);
}

#[test]
fn ttl_deletes_terminated_applications() {
    let mut a = app(
        never(),
        json!({"applicationState": {"state": "COMPLETED"}, "terminationTime": "2023-11-14T22:15:00Z"}),
    );
    a.spec.time_to_live_seconds = Some(60);
    let d = run(&a, DriverObservation::Missing, 150);
    assert!(d.actions.is_empty());
    assert_eq!(d.requeue, Some(Duration::from_secs(10)));
    let d = run(&a, DriverObservation::Missing, 160);
    assert_eq!(d.actions, vec![Action::DeleteApplication]);
    // No TTL: kept.
    let b = app(
        never(),
        json!({"applicationState": {"state": "FAILED"}, "terminationTime": "2023-11-14T22:15:00Z"}),
    );
    assert!(run(&b, DriverObservation::Missing, 1_000_000).actions.is_empty());
}

#[test]
fn a_deleted_driver_that_never_exits_is_recorded_after_its_deadline() {
    let a = app(never(), json!({}));
    let deleting = DriverPod {
        deletion: Some(Deletion { deadline: at(100) }),
        ..pod(DriverState::Running)
    };
    let d = run(&a, present(deleting.clone()), 110);
    assert_eq!(
        d.status.application_state.state,
        S::Running,
        "waits for the kubelet's report"
    );
    assert_eq!(d.requeue, Some(Duration::from_secs(20)));
    let d = run(&a, present(deleting), 130);
    assert_eq!(d.status.application_state.state, S::Failed);
    let record = d.status.driver_termination.unwrap();
    assert_eq!(record.reason.as_deref(), Some("DriverPodDeleted"));
}

#[test]
fn invalid_specs_fail_with_the_field_errors() {
    let a = app(
        on_failure(3),
        json!({"applicationState": {"state": ""}, "submissionID": null}),
    );
    let hash = spec_hash(&a);
    let errors = vec!["spec.image: required: set spec.image".to_owned()];
    let d = decide(&Input {
        app: &a,
        driver: &DriverObservation::Missing,
        now: at(0),
        timing: &Timing::default(),
        new_submission_id: NEW_ID,
        recorded_spec_hash: None,
        spec_hash: &hash,
        spec_errors: &errors,
        executors_waiting_since: None,
    });
    assert_eq!(d.status.application_state.state, S::Failed);
    assert!(d.status.application_state.error_message.contains("spec.image"));
    assert_eq!(d.actions, vec![Action::RecordSpecHash, Action::CleanUpEnded]);
    assert_eq!(d.transitions[0].reason, reasons::INVALID);
}

#[test]
fn conditions_follow_the_run() {
    let a = app(never(), json!({}));
    let d = run(&a, present(exited(0)), 101);
    let complete = conditions::get(&d.status.conditions, conditions::COMPLETE).unwrap();
    assert_eq!(complete.status, "True");
    assert!(conditions::get(&d.status.conditions, conditions::RUNNING).is_none());
    let a = app(never(), json!({"applicationState": {"state": "SUBMITTED"}}));
    let d = run(&a, present(pod(DriverState::Running)), 5);
    assert_eq!(
        conditions::get(&d.status.conditions, conditions::RUNNING)
            .unwrap()
            .status,
        "True"
    );
    assert_eq!(d.status.spark_application_id, "spark-abc");
}

#[test]
fn deleted_applications_are_left_to_garbage_collection() {
    let mut a = app(never(), json!({}));
    a.metadata.deletion_timestamp = Some(time(10));
    let d = run(&a, present(pod(DriverState::Running)), 20);
    assert!(d.actions.is_empty() && d.transitions.is_empty());
}

fn waiting_for_room() -> DriverPod {
    let mut p = pod(DriverState::Pending);
    p.start_problem = Some(StartProblem {
        reason: "Unschedulable".into(),
        message: "0/3 nodes are available: 3 Insufficient cpu.".into(),
        waiting_for_capacity: true,
    });
    p
}

fn decide_with(
    app: &SparkApplication,
    driver: DriverObservation,
    now: i64,
    timing: &Timing,
    waiting: Option<i64>,
) -> Decision {
    let hash = spec_hash(app);
    decide(&Input {
        app,
        driver: &driver,
        now: at(now),
        timing,
        new_submission_id: NEW_ID,
        recorded_spec_hash: Some(&hash),
        spec_hash: &hash,
        spec_errors: &[],
        executors_waiting_since: waiting.map(at),
    })
}

#[test]
fn a_driver_waiting_for_capacity_waits_past_the_start_timeout() {
    let a = app(never(), json!({"applicationState": {"state": "SUBMITTED"}}));
    // Long past the 300 s start timeout that fails a driver no node could take.
    let d = run(&a, present(waiting_for_room()), 3600);
    assert_eq!(d.status.application_state.state, S::Submitted);
    assert!(d.actions.is_empty(), "nothing is deleted: {:?}", d.actions);
    let c = conditions::get(&d.status.conditions, "DriverScheduled").unwrap();
    assert_eq!((c.status.as_str(), c.reason.as_str()), ("False", "WaitingForCapacity"));
    assert!(c.message.contains("Insufficient cpu"), "{}", c.message);
    assert_eq!(d.notices.len(), 1, "the first wait is an Event");
    assert_eq!(d.notices[0].reason, reasons::WAITING_FOR_CAPACITY);

    // Still waiting: the same condition, no second Event.
    let mut again = a.clone();
    again.status = Some(d.status.clone());
    let d2 = run(&again, present(waiting_for_room()), 3700);
    assert!(d2.notices.is_empty());

    // Placed: DriverScheduled=True, noticed.
    let d3 = run(&again, present(pod(DriverState::Running)), 3800);
    let c = conditions::get(&d3.status.conditions, "DriverScheduled").unwrap();
    assert_eq!(
        (c.status.as_str(), c.reason.as_str()),
        ("True", reasons::DRIVER_SCHEDULED)
    );
    assert_eq!(d3.status.application_state.state, S::Running);
}

#[test]
fn the_same_wait_without_the_capacity_distinction_fails_at_the_start_timeout() {
    // The protection above is the capacity classification: a driver Unschedulable for a selector fails.
    let a = app(never(), json!({"applicationState": {"state": "SUBMITTED"}}));
    let mut no_node = waiting_for_room();
    if let Some(p) = no_node.start_problem.as_mut() {
        p.message = "0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector.".into();
        p.waiting_for_capacity = false;
    }
    let d = run(&a, present(no_node), 300);
    assert_eq!(d.status.application_state.state, S::Failed);
    assert_eq!(d.transitions[0].reason, reasons::DRIVER_START_TIMEOUT);
    let record = d.status.driver_termination.unwrap();
    assert_eq!(record.reason.as_deref(), Some("Unschedulable"));
    assert!(record.message.unwrap().contains("node affinity/selector"));
}

#[test]
fn the_optional_capacity_timeout_fails_a_driver_that_waited_too_long() {
    let a = app(never(), json!({"applicationState": {"state": "SUBMITTED"}}));
    let timing = Timing {
        capacity_timeout: Some(Duration::from_secs(1800)),
        ..Timing::default()
    };
    let early = decide_with(&a, present(waiting_for_room()), 1000, &timing, None);
    assert_eq!(early.status.application_state.state, S::Submitted);
    assert_eq!(early.requeue, Some(Duration::from_secs(800)));
    let late = decide_with(&a, present(waiting_for_room()), 1800, &timing, None);
    assert_eq!(late.status.application_state.state, S::Failed);
    assert_eq!(late.actions, vec![delete_driver(), Action::CleanUpEnded]);
    assert!(
        late.status
            .application_state
            .error_message
            .contains("waited for capacity longer than 1800s"),
        "{}",
        late.status.application_state.error_message
    );
}

#[test]
fn executors_starved_past_the_threshold_is_a_condition_that_clears() {
    let a = app(never(), json!({}));
    let timing = Timing::default();
    // Waiting since 100 s: the 600 s threshold is at 700.
    let before = decide_with(&a, present(pod(DriverState::Running)), 650, &timing, Some(100));
    assert!(conditions::get(&before.status.conditions, "ExecutorsStarved").is_none());
    assert_eq!(
        before.requeue,
        Some(Duration::from_secs(50)),
        "requeued at the threshold"
    );

    let after = decide_with(&a, present(pod(DriverState::Running)), 700, &timing, Some(100));
    let c = conditions::get(&after.status.conditions, "ExecutorsStarved").unwrap();
    assert_eq!(c.status, "True");
    assert!(
        c.message.contains("batchScheduler"),
        "points to gang scheduling: {}",
        c.message
    );
    assert_eq!(after.notices[0].reason, reasons::EXECUTORS_STARVED);
    assert!(after.notices[0].warning);

    let mut starved = a.clone();
    starved.status = Some(after.status.clone());
    let fed = decide_with(&starved, present(pod(DriverState::Running)), 800, &timing, None);
    let c = conditions::get(&fed.status.conditions, "ExecutorsStarved").unwrap();
    assert_eq!(
        (c.status.as_str(), c.reason.as_str()),
        ("False", reasons::EXECUTORS_FED)
    );

    // The run ending clears it as well.
    let ended = decide_with(&starved, present(exited(0)), 800, &timing, Some(100));
    let c = conditions::get(&ended.status.conditions, "ExecutorsStarved").unwrap();
    assert_eq!(c.status, "False");

    // Switched off: never.
    let off = Timing {
        executor_starvation_threshold: None,
        ..Timing::default()
    };
    let d = decide_with(&a, present(pod(DriverState::Running)), 10_000, &off, Some(100));
    assert!(conditions::get(&d.status.conditions, "ExecutorsStarved").is_none());
}

#[test]
fn a_driver_no_scheduler_looks_at_fails_at_the_start_timeout_without_an_early_alarm() {
    let a = app(never(), json!({"applicationState": {"state": "SUBMITTED"}}));
    let mut ignored = pod(DriverState::Pending);
    ignored.start_problem = Some(StartProblem {
        reason: crate::app::observe::NOT_SCHEDULED.into(),
        message: "no scheduler has placed the pod or said why not".into(),
        waiting_for_capacity: false,
    });
    // Every pod's first moment looks like this: no condition, no Event, no extra write.
    let early = run(&a, present(ignored.clone()), 5);
    assert!(conditions::get(&early.status.conditions, "DriverScheduled").is_none());
    assert!(early.notices.is_empty());
    let late = run(&a, present(ignored), 300);
    assert_eq!(late.status.application_state.state, S::Failed);
    assert_eq!(late.transitions[0].reason, reasons::DRIVER_START_TIMEOUT);
    assert!(
        late.status
            .application_state
            .error_message
            .contains("no scheduler has placed")
    );
}

#[test]
fn driver_scheduled_follows_placement_not_every_start_problem() {
    // A driver stuck pulling its image is on a node: no DriverScheduled=False, no Event.
    let a = app(never(), json!({"applicationState": {"state": "SUBMITTED"}}));
    let mut pulling = stuck("ImagePullBackOff");
    pulling.placed = true;
    let d = run(&a, present(pulling.clone()), 10);
    assert!(conditions::get(&d.status.conditions, "DriverScheduled").is_none());
    assert!(d.notices.is_empty());

    // After waiting for room: not placed yet (a gang waiting for its other members says nothing the
    // controller reads as a problem) keeps DriverScheduled=False; placed (even if then stuck) turns it True.
    let mut waited = a.clone();
    waited.status = Some(run(&a, present(waiting_for_room()), 10).status);
    let unplaced = run(&waited, present(pod(DriverState::Pending)), 20);
    let c = conditions::get(&unplaced.status.conditions, "DriverScheduled").unwrap();
    assert_eq!((c.status.as_str(), c.reason.as_str()), ("False", "WaitingForCapacity"));
    let placed = run(&waited, present(pulling), 20);
    let c = conditions::get(&placed.status.conditions, "DriverScheduled").unwrap();
    assert_eq!(
        (c.status.as_str(), c.reason.as_str()),
        ("True", reasons::DRIVER_SCHEDULED)
    );
}
