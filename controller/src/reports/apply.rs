//! What one termination report does to an application's status, as pure functions: [`validate`] turns
//! the wire message into a [`Report`] (or says which field is wrong), [`apply`] records it in a
//! `SparkApplicationStatus` and says how that went ([`Applied`]). The server ([`super::server`]) reads
//! the application, applies, and writes the status conditionally; the verdict sent to the agent follows
//! from [`Applied`].
//!
//! A report's identity is its container id: a replay (an agent restart, a lost ack, another replica)
//! finds its container id already recorded and changes nothing.

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use spark_operator_api::labels::{DRIVER_CONTAINER_NAME, EXECUTOR_CONTAINER_NAME};
use spark_operator_api::state::{ApplicationStateType as S, ExecutorState, TerminationObserver};
use spark_operator_api::status::{MAX_LOG_TAIL_BYTES, SparkApplicationStatus, TerminationRecord};
use spark_operator_api::validation::{dns1123_label_problem, dns1123_subdomain_problem};
use spark_operator_proto::agent::v1::{Role, TerminationReport};

use crate::pod::MAX_EXECUTOR_ID;
use crate::status::text::{tail_utf8, truncate_utf8};
use crate::status::write as status;

/// The executor container's name in pods made from Spark's older templates (as the webhook accepts it).
const LEGACY_EXECUTOR_CONTAINER_NAME: &str = "executor";
/// Longest container id accepted (CRI ids are 64 hex digits).
const MAX_CONTAINER_ID: usize = 256;
/// Longest submission id accepted (ours are UUIDs).
const MAX_SUBMISSION_ID: usize = 128;
/// Longest runtime reason kept (Completed, Error, OOMKilled, ...).
const MAX_REASON_BYTES: usize = 256;

/// Whose end a report is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Whose {
    Driver,
    Executor,
}

/// A report that passed validation: where it belongs, and the record it makes.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Report {
    pub namespace: String,
    pub app: String,
    pub submission_id: String,
    pub whose: Whose,
    pub container_id: String,
    /// The pod's uid as the agent read it (may be empty).
    pub pod_uid: String,
    /// When the container finished, as the runtime reported it (nanoseconds kept, for the latency metric).
    pub finished_at: Option<Timestamp>,
    /// The status record: observed by the agent, with the container id, the message and the log tail
    /// bounded.
    pub record: TerminationRecord,
}

/// What applying a report did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Applied {
    /// The status now records the report: write it, then answer OK.
    Changed,
    /// The status already recorded it (a replay): answer OK without a write. Says what recorded it.
    Duplicate(String),
    /// It can never be recorded: answer DISCARD with this reason.
    Discard(String),
    /// No room in the status now (its byte budget): answer RETRY with this reason, nothing written.
    Full(String),
}

/// Checks a report off the wire; the error names the field and what is wrong with it.
pub(crate) fn validate(report: Option<&TerminationReport>) -> Result<Report, String> {
    let report = report.ok_or("report is missing from the request")?;
    dns_label("namespace", &report.namespace)?;
    dns_subdomain("app_name", &report.app_name)?;
    dns_subdomain("pod_name", &report.pod_name)?;
    bounded("submission_id", &report.submission_id, MAX_SUBMISSION_ID)?;
    bounded("container_id", &report.container_id, MAX_CONTAINER_ID)?;
    let whose = match Role::try_from(report.role) {
        Ok(Role::Driver) => Whose::Driver,
        Ok(Role::Executor) => Whose::Executor,
        Ok(Role::Unspecified) => return Err("role is ROLE_UNSPECIFIED: must be ROLE_DRIVER or ROLE_EXECUTOR".into()),
        Err(_) => {
            return Err(format!(
                "role {} is unknown: must be ROLE_DRIVER (1) or ROLE_EXECUTOR (2)",
                report.role
            ));
        }
    };
    // A sidecar's end is not the application's: only Spark's own container counts (as the pod watch
    // reads it), whatever else runs in the pod.
    let spark_containers: &[&str] = match whose {
        Whose::Driver => &[DRIVER_CONTAINER_NAME],
        Whose::Executor => &[EXECUTOR_CONTAINER_NAME, LEGACY_EXECUTOR_CONTAINER_NAME],
    };
    if !spark_containers.contains(&report.container_name.as_str()) {
        return Err(format!(
            "container_name {:?} is not the Spark container of a{} pod ({}): other containers' ends are not reported",
            report.container_name,
            if whose == Whose::Driver {
                " driver"
            } else {
                "n executor"
            },
            spark_containers.join(" or ")
        ));
    }
    let executor_id = match whose {
        Whose::Executor => match report.executor_id {
            Some(id) if (1..=MAX_EXECUTOR_ID).contains(&id) => Some(id),
            Some(id) => {
                return Err(format!(
                    "executor_id {id} is not a Spark executor id (1 to {MAX_EXECUTOR_ID})"
                ));
            }
            None => return Err("executor_id is missing from an executor's report".into()),
        },
        Whose::Driver => None,
    };
    let finished_at = match report.finished_at {
        0 => None,
        nanos if nanos < 0 => return Err(format!("finished_at {nanos} is before the Unix epoch")),
        nanos => Some(
            Timestamp::from_nanosecond(i128::from(nanos))
                .map_err(|_| format!("finished_at {nanos} is not a time in nanoseconds since the Unix epoch"))?,
        ),
    };
    let text = |value: &str| (!value.is_empty()).then(|| value.to_owned());
    // The termination-log file says what the application wanted said; the runtime's message otherwise.
    let message = text(&report.termination_message)
        .or_else(|| text(&report.message))
        .map(|m| truncate_utf8(&m, MAX_LOG_TAIL_BYTES));
    let record = TerminationRecord {
        pod_name: report.pod_name.clone(),
        executor_id,
        exit_code: Some(report.exit_code),
        reason: text(&report.reason).map(|r| truncate_utf8(&r, MAX_REASON_BYTES)),
        message,
        // Second precision, as every timestamp the controller writes (see `status::unchanged`).
        finished_at: finished_at.map(|t| Time(Timestamp::from_second(t.as_second()).unwrap_or(t))),
        node_name: text(&report.node_name),
        observed_by: Some(TerminationObserver::Agent),
        log_tail: text(&report.log_tail).map(|t| tail_utf8(&t, MAX_LOG_TAIL_BYTES)),
        container_id: Some(report.container_id.clone()),
    };
    Ok(Report {
        namespace: report.namespace.clone(),
        app: report.app_name.clone(),
        submission_id: report.submission_id.clone(),
        whose,
        container_id: report.container_id.clone(),
        pod_uid: report.pod_uid.clone(),
        finished_at,
        record,
    })
}

fn bounded(field: &str, value: &str, max: usize) -> Result<(), String> {
    if value.is_empty() {
        return Err(format!("{field} is missing (empty)"));
    }
    if value.len() > max || value.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(format!(
            "{field} {:?} is not an id (at most {max} characters, no spaces)",
            truncate_utf8(value, 80)
        ));
    }
    Ok(())
}

/// A Kubernetes DNS-1123 label (a namespace): names go into API paths, so nothing else may pass.
fn dns_label(field: &str, value: &str) -> Result<(), String> {
    kubernetes_name(field, value, dns1123_label_problem(value).map(str::to_owned))
}

/// A Kubernetes DNS-1123 subdomain (an application or pod name).
fn dns_subdomain(field: &str, value: &str) -> Result<(), String> {
    kubernetes_name(field, value, dns1123_subdomain_problem(value))
}

/// The field's error for a name with `problem` (the API's name rules, `spark_operator_api::validation`),
/// the value cut short: a report's fields are whatever an agent sent.
fn kubernetes_name(field: &str, value: &str, problem: Option<String>) -> Result<(), String> {
    if value.is_empty() {
        return Err(format!("{field} is missing (empty)"));
    }
    match problem {
        None => Ok(()),
        Some(problem) => Err(format!("{field} {:?} {problem}", truncate_utf8(value, 80))),
    }
}

/// Records `report` in `status` (of the application the report names), within `budget` bytes. The status
/// is changed only when the result is [`Applied::Changed`].
pub(crate) fn apply(status: &mut SparkApplicationStatus, report: &Report, budget: usize) -> Applied {
    if status.submission_id != report.submission_id {
        return Applied::Discard(format!(
            "superseded: the report is of submission {}, the application's current submission is {}",
            report.submission_id,
            if status.submission_id.is_empty() {
                "none"
            } else {
                status.submission_id.as_str()
            }
        ));
    }
    match report.whose {
        Whose::Driver => apply_driver(status, report, budget),
        Whose::Executor => apply_executor(status, report, budget),
    }
}

fn apply_driver(status: &mut SparkApplicationStatus, report: &Report, budget: usize) -> Applied {
    let record = &report.record;
    // The operator stopped this driver itself (its SIGTERM, exit 143): that end is not the run's, and the
    // state machine never reads it (docs/controller.md, "Our own SIGTERM is not a failure").
    let state = status.application_state.state;
    if matches!(state, S::Suspending | S::Suspended | S::Invalidating) {
        return Applied::Discard(format!(
            "the application is {state}: the operator stopped this driver, its end is not the run's"
        ));
    }
    // The driver pod's name is fixed per submission: any other pod claiming to be its driver is not.
    let driver = status.driver_info.pod_name.as_str();
    if !driver.is_empty() && driver != record.pod_name {
        return Applied::Discard(format!(
            "pod {} is not the driver of the current submission ({driver})",
            record.pod_name
        ));
    }
    let wanted = match &status.driver_termination {
        None => record.clone(),
        Some(existing) if existing.pod_name != record.pod_name => {
            return Applied::Discard(format!(
                "the driver's end is already recorded, from pod {} (this report is of pod {})",
                existing.pod_name, record.pod_name
            ));
        }
        Some(existing) => match existing.container_id.as_deref() {
            Some(id) if id != report.container_id => {
                return Applied::Discard(format!(
                    "the driver's end is already recorded, from container {id} (this report is of container {})",
                    report.container_id
                ));
            }
            // Recorded first by the pod watch or the finalizer (no container id), or by this container:
            // add what that record lacks, keeping who saw it first and how it ended.
            _ => {
                let mut enriched = existing.clone();
                enriched.container_id.get_or_insert_with(|| report.container_id.clone());
                if enriched.log_tail.is_none() {
                    enriched.log_tail.clone_from(&record.log_tail);
                }
                if enriched == *existing {
                    return Applied::Duplicate(format!(
                        "the driver's end is already recorded (observed by {})",
                        existing.observed_by.unwrap_or_default()
                    ));
                }
                enriched
            }
        },
    };
    // Without room for the log tail, the end itself is still worth recording.
    let mut fallback = wanted.clone();
    fallback.log_tail = status.driver_termination.as_ref().and_then(|e| e.log_tail.clone());
    let before = status.driver_termination.clone();
    for candidate in [wanted, fallback] {
        if before.as_ref() == Some(&candidate) {
            return Applied::Duplicate("the driver's end is already recorded (its log tail has no room)".into());
        }
        status.driver_termination = Some(candidate);
        if status::size(status) <= budget {
            return Applied::Changed;
        }
    }
    status.driver_termination = before;
    full(status, budget)
}

fn apply_executor(status: &mut SparkApplicationStatus, report: &Report, budget: usize) -> Applied {
    let record = &report.record;
    let same_container = |r: &TerminationRecord| r.container_id.as_deref() == Some(report.container_id.as_str());
    if status.uncounted_executor_terminations.iter().any(same_container) {
        return Applied::Duplicate("already recorded, not yet counted by the controller".into());
    }
    if status.recent_executor_failures.iter().any(same_container) {
        return Applied::Duplicate("already counted as a recent executor failure".into());
    }
    match status.recent_executors.get(&record.pod_name).map(|r| r.state) {
        Some(ExecutorState::Completed) => {
            return Applied::Duplicate("the executor is already counted as COMPLETED".into());
        }
        Some(ExecutorState::Failed) => {
            // Counted already; worth recording only to bring its log tail to its recent failure.
            let tail_missing = status
                .recent_executor_failures
                .iter()
                .any(|f| f.pod_name == record.pod_name && f.log_tail.is_none());
            if record.log_tail.is_none() || !tail_missing {
                return Applied::Duplicate("the executor is already counted as FAILED".into());
            }
        }
        // UNKNOWN (its pod went before its exit was seen): the report corrects it.
        _ => {}
    }
    let mut without_tail = record.clone();
    without_tail.log_tail = None;
    // Once counted, only a failure keeps its log tail (`recentExecutorFailures`): a success's tail would
    // only weigh on every status write and watch event until the leader counts it.
    let candidates = if record.succeeded() {
        vec![without_tail]
    } else {
        vec![record.clone(), without_tail]
    };
    for candidate in candidates {
        status.uncounted_executor_terminations.push(candidate);
        if status::size(status) <= budget {
            return Applied::Changed;
        }
        status.uncounted_executor_terminations.pop();
    }
    full(status, budget)
}

fn full(status: &SparkApplicationStatus, budget: usize) -> Applied {
    Applied::Full(format!(
        "no room in the application's status ({} of {budget} bytes used); the controller makes room as it \
         counts the reports it holds",
        status::size(status)
    ))
}

#[cfg(test)]
mod tests {
    use spark_operator_api::status::{ExecutorRecord, TerminationRecord};

    use super::*;

    const BUDGET: usize = 256 * 1024;

    fn wire(role: Role) -> TerminationReport {
        let driver = role == Role::Driver;
        TerminationReport {
            namespace: "default".into(),
            app_name: "pi".into(),
            submission_id: "sub-1".into(),
            spark_app_id: "spark-1".into(),
            pod_name: if driver { "pi-driver" } else { "pi-exec-3" }.into(),
            pod_uid: "uid".into(),
            role: role as i32,
            executor_id: (!driver).then_some(3),
            container_name: if driver {
                DRIVER_CONTAINER_NAME
            } else {
                EXECUTOR_CONTAINER_NAME
            }
            .into(),
            container_id: if driver { "c-driver" } else { "c-exec-3" }.into(),
            attempt: 0,
            exit_code: 1,
            reason: "Error".into(),
            message: "runtime says".into(),
            termination_message: "the app says".into(),
            started_at: 1_700_000_000_000_000_000,
            finished_at: 1_700_000_100_500_000_000,
            node_name: "node-1".into(),
            log_tail: "line 1\nline 2\n".into(),
        }
    }

    fn report(role: Role) -> Report {
        validate(Some(&wire(role))).unwrap()
    }

    fn status() -> SparkApplicationStatus {
        SparkApplicationStatus {
            submission_id: "sub-1".into(),
            ..SparkApplicationStatus::default()
        }
    }

    #[test]
    fn a_driver_report_records_the_drivers_end() {
        let mut s = status();
        assert_eq!(apply(&mut s, &report(Role::Driver), BUDGET), Applied::Changed);
        let record = s.driver_termination.clone().unwrap();
        assert_eq!(record.observed_by, Some(TerminationObserver::Agent));
        assert_eq!(record.container_id.as_deref(), Some("c-driver"));
        assert_eq!(record.exit_code, Some(1));
        assert_eq!(record.reason.as_deref(), Some("Error"));
        assert_eq!(
            record.message.as_deref(),
            Some("the app says"),
            "the termination message first"
        );
        assert_eq!(record.node_name.as_deref(), Some("node-1"));
        assert_eq!(record.log_tail.as_deref(), Some("line 1\nline 2\n"));
        assert_eq!(record.finished_at.as_ref().unwrap().0.as_second(), 1_700_000_100);
        assert_eq!(
            record.finished_at.as_ref().unwrap().0.subsec_nanosecond(),
            0,
            "second precision"
        );

        // A replay changes nothing.
        let before = s.clone();
        assert!(matches!(
            apply(&mut s, &report(Role::Driver), BUDGET),
            Applied::Duplicate(_)
        ));
        assert_eq!(s, before);
    }

    #[test]
    fn only_the_current_submission_is_recorded() {
        let mut s = status();
        s.submission_id = "sub-2".into();
        let before = s.clone();
        for role in [Role::Driver, Role::Executor] {
            let Applied::Discard(reason) = apply(&mut s, &report(role), BUDGET) else {
                panic!("an old submission's report is discarded");
            };
            assert!(reason.contains("superseded") && reason.contains("sub-2"), "{reason}");
        }
        assert_eq!(s, before);
    }

    #[test]
    fn only_the_submissions_driver_pod_ends_the_run() {
        let mut s = status();
        s.driver_info.pod_name = "pi-driver".into();
        let mut impostor = report(Role::Driver);
        impostor.record.pod_name = "pi-driver-2".into();
        assert!(matches!(apply(&mut s, &impostor, BUDGET), Applied::Discard(r) if r.contains("not the driver")));
        assert_eq!(s.driver_termination, None);
        assert_eq!(apply(&mut s, &report(Role::Driver), BUDGET), Applied::Changed);
    }

    #[test]
    fn a_driver_the_operator_stopped_is_not_the_runs_end() {
        for state in [S::Suspending, S::Suspended, S::Invalidating] {
            let mut s = status();
            s.application_state.state = state;
            let Applied::Discard(reason) = apply(&mut s, &report(Role::Driver), BUDGET) else {
                panic!("{state}: discarded");
            };
            assert!(reason.contains(state.as_str()), "{reason}");
            assert_eq!(s.driver_termination, None);
            // Its executors' ends still count.
            assert_eq!(apply(&mut s, &report(Role::Executor), BUDGET), Applied::Changed);
        }
    }

    #[test]
    fn a_record_of_the_pod_watch_is_enriched_not_replaced() {
        let mut s = status();
        let pod_watch = TerminationRecord {
            pod_name: "pi-driver".into(),
            exit_code: Some(1),
            reason: Some("Error".into()),
            observed_by: Some(TerminationObserver::PodWatch),
            ..TerminationRecord::default()
        };
        s.driver_termination = Some(pod_watch.clone());
        assert_eq!(apply(&mut s, &report(Role::Driver), BUDGET), Applied::Changed);
        let record = s.driver_termination.clone().unwrap();
        assert_eq!(
            record.observed_by,
            Some(TerminationObserver::PodWatch),
            "who saw it first stays"
        );
        assert_eq!(record.message, None, "what it recorded stays");
        assert_eq!(record.container_id.as_deref(), Some("c-driver"));
        assert_eq!(record.log_tail.as_deref(), Some("line 1\nline 2\n"));
        assert!(matches!(
            apply(&mut s, &report(Role::Driver), BUDGET),
            Applied::Duplicate(_)
        ));

        // Another container's end is not this driver's.
        let mut other = report(Role::Driver);
        other.container_id = "c-other".into();
        other.record.container_id = Some("c-other".into());
        assert!(matches!(apply(&mut s, &other, BUDGET), Applied::Discard(r) if r.contains("c-driver")));
    }

    #[test]
    fn executor_reports_wait_uncounted_once_each() {
        let mut s = status();
        assert_eq!(apply(&mut s, &report(Role::Executor), BUDGET), Applied::Changed);
        assert_eq!(s.uncounted_executor_terminations.len(), 1);
        let entry = &s.uncounted_executor_terminations[0];
        assert_eq!(
            (entry.executor_id, entry.container_id.as_deref()),
            (Some(3), Some("c-exec-3"))
        );
        assert!(matches!(
            apply(&mut s, &report(Role::Executor), BUDGET),
            Applied::Duplicate(_)
        ));
        assert_eq!(s.uncounted_executor_terminations.len(), 1);
        assert_eq!(s.driver_termination, None);
    }

    #[test]
    fn only_a_failed_executor_keeps_its_log_tail_while_it_waits() {
        let mut s = status();
        assert_eq!(apply(&mut s, &report(Role::Executor), BUDGET), Applied::Changed);
        let mut succeeded = report(Role::Executor);
        succeeded.container_id = "c-exec-4".into();
        succeeded.record.container_id = Some("c-exec-4".into());
        succeeded.record.pod_name = "pi-exec-4".into();
        succeeded.record.exit_code = Some(0);
        assert_eq!(apply(&mut s, &succeeded, BUDGET), Applied::Changed);
        let tails: Vec<_> = s
            .uncounted_executor_terminations
            .iter()
            .map(|r| (r.exit_code, r.log_tail.as_deref()))
            .collect();
        assert_eq!(tails, [(Some(1), Some("line 1\nline 2\n")), (Some(0), None)]);
    }

    fn counted(state: ExecutorState) -> SparkApplicationStatus {
        let mut s = status();
        s.recent_executors.insert(
            "pi-exec-3".into(),
            ExecutorRecord {
                executor_id: Some(3),
                state,
                ..ExecutorRecord::default()
            },
        );
        s
    }

    #[test]
    fn executors_counted_already_are_not_recorded_again() {
        let mut s = counted(ExecutorState::Completed);
        assert!(matches!(
            apply(&mut s, &report(Role::Executor), BUDGET),
            Applied::Duplicate(_)
        ));

        // Counted FAILED by the pod watch, without a log tail: the report brings it.
        let mut s = counted(ExecutorState::Failed);
        s.recent_executor_failures.push(TerminationRecord {
            pod_name: "pi-exec-3".into(),
            executor_id: Some(3),
            exit_code: Some(1),
            ..TerminationRecord::default()
        });
        assert_eq!(apply(&mut s, &report(Role::Executor), BUDGET), Applied::Changed);
        // With the tail there already, nothing to add.
        s.uncounted_executor_terminations.clear();
        s.recent_executor_failures[0].log_tail = Some("tail".into());
        assert!(matches!(
            apply(&mut s, &report(Role::Executor), BUDGET),
            Applied::Duplicate(_)
        ));

        // Counted as a failure from this very container (a report folded before).
        let mut s = status();
        s.recent_executor_failures.push(report(Role::Executor).record);
        assert!(matches!(
            apply(&mut s, &report(Role::Executor), BUDGET),
            Applied::Duplicate(_)
        ));

        // Counted UNKNOWN (deleted before its exit was seen): the report corrects it.
        let mut s = counted(ExecutorState::Unknown);
        assert_eq!(apply(&mut s, &report(Role::Executor), BUDGET), Applied::Changed);
    }

    #[test]
    fn a_full_status_refuses_and_stays_as_it_was() {
        let mut s = status();
        s.application_state.error_message = "e".repeat(20_000);
        let budget = status::size(&s) + 100;
        let before = s.clone();
        let Applied::Full(reason) = apply(&mut s, &report(Role::Executor), budget) else {
            panic!("no room");
        };
        assert!(reason.contains("bytes"), "{reason}");
        assert_eq!(s, before);
        assert!(matches!(apply(&mut s, &report(Role::Driver), budget), Applied::Full(_)));
        assert_eq!(s, before);

        // Room for the record but not its log tail: the end is what matters.
        let mut big = report(Role::Executor);
        big.record.log_tail = Some("x".repeat(MAX_LOG_TAIL_BYTES));
        let budget = status::size(&s) + 600;
        assert_eq!(apply(&mut s, &big, budget), Applied::Changed);
        assert_eq!(s.uncounted_executor_terminations[0].log_tail, None);
        assert!(status::size(&s) <= budget);
    }

    #[test]
    fn text_is_bounded_and_a_tail_keeps_the_end() {
        let mut wire = wire(Role::Driver);
        wire.log_tail = format!("{}é{}", "a".repeat(10_000), "z".repeat(MAX_LOG_TAIL_BYTES - 1));
        wire.termination_message = String::new();
        wire.message = "m".repeat(10_000);
        let report = validate(Some(&wire)).unwrap();
        let tail = report.record.log_tail.unwrap();
        assert!(tail.len() <= MAX_LOG_TAIL_BYTES);
        assert!(tail.ends_with('z') && !tail.contains('a'), "the end is kept");
        assert_eq!(report.record.message.unwrap().len(), MAX_LOG_TAIL_BYTES);
        assert_eq!(tail_utf8("héllo", 4), "llo", "never splits a character");
    }

    #[test]
    fn malformed_reports_are_refused_naming_the_field() {
        type Break = fn(&mut TerminationReport);
        let cases: Vec<(&str, Break)> = vec![
            ("namespace", |r| r.namespace.clear()),
            ("namespace", |r| r.namespace = "../kube-system".into()),
            ("app_name", |r| r.app_name.clear()),
            ("pod_name", |r| r.pod_name = "Pi Driver".into()),
            ("submission_id", |r| r.submission_id.clear()),
            ("container_id", |r| r.container_id.clear()),
            ("role", |r| r.role = 0),
            ("role", |r| r.role = 7),
            ("container_name", |r| r.container_name = "istio-proxy".into()),
            ("executor_id", |r| r.executor_id = None),
            ("executor_id", |r| r.executor_id = Some(0)),
            ("finished_at", |r| r.finished_at = -1),
        ];
        for (field, break_it) in cases {
            let mut wire = wire(Role::Executor);
            break_it(&mut wire);
            let error = validate(Some(&wire)).unwrap_err();
            assert!(error.starts_with(field), "{field}: {error}");
        }
        assert!(validate(None).unwrap_err().contains("report is missing"));
        assert!(validate(Some(&wire(Role::Executor))).is_ok());
    }
}
