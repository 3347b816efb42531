//! Writing the status: through the status subresource, as a conditional merge patch of exactly what
//! changed (so entries dropped from bounded maps really go), within a hard byte budget enforced before
//! every write.
//!
//! The budget shrinks, in this order: log tails and long messages of executor failures, the recent
//! executors (oldest terminated first, then oldest alive), the executor failures (oldest first), and
//! last the long free-text fields. Counts, state, ids and conditions are never dropped, so the status
//! stays true and always fits: it is what makes every write succeed whatever the churn. Nor are the
//! executor terminations node agents reported and the controller has not counted yet
//! (`uncountedExecutorTerminations`): they are what the counts are still missing.

use kube::api::{Api, Patch, PatchParams};
use serde_json::json;
use spark_operator_api::SparkApplication;
use spark_operator_api::status::SparkApplicationStatus;

use crate::status::text::truncate_utf8;

/// Field manager of the controller's writes.
pub(crate) const FIELD_MANAGER: &str = "spark-operator";

/// Longest free-text field kept once the budget is tight.
const TIGHT_TEXT_BYTES: usize = 1024;
/// Longest executor failure message kept once the budget is tight.
const TIGHT_FAILURE_BYTES: usize = 256;

/// The part of the byte budget the controller fits its own writes into: an eighth stays free for the
/// executor terminations node agents report between two of its writes (the receiver refuses a report
/// that would exceed the whole budget, and the controller folds and clears them at its next write).
/// Without it a status kept at its budget by executor churn would refuse every report.
pub(crate) fn budget_for_controller(budget: usize) -> usize {
    budget - budget / 8
}

/// What fitting a status into its budget did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Fit {
    pub bytes: usize,
    pub dropped_executors: usize,
    pub dropped_failures: usize,
    pub truncated_text: bool,
}

/// The status's size as written (JSON).
pub(crate) fn size(status: &SparkApplicationStatus) -> usize {
    let mut counted = ByteCount(0);
    serde_json::to_writer(&mut counted, status).map_or(usize::MAX, |()| counted.0)
}

/// Counts the bytes written to it, keeping none.
struct ByteCount(usize);

impl std::io::Write for ByteCount {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0 += bytes.len();
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Compares what is written to it with `expected`, failing at the first byte that differs.
struct SameAs<'a> {
    expected: &'a [u8],
    at: usize,
}

impl std::io::Write for SameAs<'_> {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        let end = self.at + bytes.len();
        if self.expected.get(self.at..end) != Some(bytes) {
            return Err(std::io::Error::other("differs"));
        }
        self.at = end;
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Shrinks `status` until it serializes to at most `budget` bytes (see the module docs for the order).
pub(crate) fn fit_to_budget(status: &mut SparkApplicationStatus, budget: usize) -> Fit {
    let mut fit = Fit {
        bytes: size(status),
        ..Fit::default()
    };
    if fit.bytes <= budget {
        return fit;
    }
    for failure in &mut status.recent_executor_failures {
        failure.log_tail = None;
        if let Some(message) = failure.message.as_mut()
            && message.len() > TIGHT_FAILURE_BYTES
        {
            *message = truncate_utf8(message, TIGHT_FAILURE_BYTES);
            fit.truncated_text = true;
        }
    }
    fit.bytes = size(status);

    // Recent executors: drop by estimated size in one pass, then check; repeat if estimates were short.
    while fit.bytes > budget && !status.recent_executors.is_empty() {
        let mut order: Vec<(bool, i64, String, usize)> = status
            .recent_executors
            .iter()
            .map(|(name, record)| {
                let entry = serde_json::to_vec(record).map_or(0, |v| v.len());
                // key twice (recentExecutors and executorState), quotes, colons, commas, the state.
                let bytes = entry + 2 * name.len() + 32;
                (
                    !record.state.is_terminal(),
                    record.executor_id.unwrap_or(i64::MAX),
                    name.clone(),
                    bytes,
                )
            })
            .collect();
        order.sort();
        let mut excess = fit.bytes - budget;
        for (_, _, name, bytes) in order {
            status.recent_executors.remove(&name);
            status.executor_state.remove(&name);
            fit.dropped_executors += 1;
            if bytes >= excess {
                break;
            }
            excess -= bytes;
        }
        fit.bytes = size(status);
    }
    // executorState lists the same pods as recentExecutors; entries without a record go too.
    if fit.bytes > budget {
        let before = status.executor_state.len();
        status
            .executor_state
            .retain(|name, _| status.recent_executors.contains_key(name));
        fit.dropped_executors += before - status.executor_state.len();
        fit.bytes = size(status);
    }
    while fit.bytes > budget && !status.recent_executor_failures.is_empty() {
        status.recent_executor_failures.remove(0);
        fit.dropped_failures += 1;
        fit.bytes = size(status);
    }
    if fit.bytes > budget {
        truncate_text(status);
        fit.truncated_text = true;
        fit.bytes = size(status);
    }
    fit
}

fn truncate_text(status: &mut SparkApplicationStatus) {
    let cut = |text: &mut String| {
        if text.len() > TIGHT_TEXT_BYTES {
            *text = truncate_utf8(text, TIGHT_TEXT_BYTES);
        }
    };
    cut(&mut status.application_state.error_message);
    if let Some(t) = status.driver_termination.as_mut() {
        if let Some(tail) = t.log_tail.as_mut() {
            cut(tail);
        }
        if let Some(message) = t.message.as_mut() {
            cut(message);
        }
    }
    for condition in &mut status.conditions {
        cut(&mut condition.message);
    }
}

/// Why a status write failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Error {
    #[error("the application {name} changed since it was read (conflict)")]
    Conflict { name: String },
    #[error("writing the status of {name}")]
    Write {
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("serializing the status of {name}")]
    Serialize {
        name: String,
        #[source]
        source: serde_json::Error,
    },
}

/// True when the stored status already says this (compared as written, with timestamps in seconds).
pub(crate) fn unchanged(stored: Option<&SparkApplicationStatus>, wanted: &SparkApplicationStatus) -> bool {
    match stored {
        // Every timestamp the controller writes has second precision, so equal values are equal JSON.
        Some(stored) if stored == wanted => true,
        // Serialized, not converted to `Value`s: a status is large and one is written on most
        // reconciles. Its JSON is canonical (fields in declaration order, maps sorted, no floats), so
        // equal bytes are equal JSON.
        stored => {
            let default = SparkApplicationStatus::default();
            let Ok(expected) = serde_json::to_vec(stored.unwrap_or(&default)) else {
                return false;
            };
            let mut same = SameAs {
                expected: &expected,
                at: 0,
            };
            serde_json::to_writer(&mut same, wanted).is_ok() && same.at == expected.len()
        }
    }
}

/// The smallest JSON merge patch turning `old` (`None`: JSON `null`) into `new`: changed keys, `null` for
/// removed ones, so entries dropped from bounded maps really go. `None` when nothing changed.
///
/// Both are serialized to text and compared as text, descending only into objects whose text differs
/// and parsing only what changed: a status at its byte budget is mostly unchanged between two writes,
/// and turning both whole into `Value` trees was a large share of the controller's CPU under churn.
/// Our types serialize canonically (fields in declaration order, maps sorted, no floats), so equal text
/// is equal JSON.
pub(crate) fn merge_diff<T: serde::Serialize>(
    old: Option<&T>,
    new: &T,
) -> Result<Option<serde_json::Value>, serde_json::Error> {
    let old = match old {
        Some(old) => serde_json::to_string(old)?,
        None => "null".to_owned(),
    };
    text_merge_diff(&old, &serde_json::to_string(new)?)
}

/// [`merge_diff`] of two JSON texts.
fn text_merge_diff(old: &str, new: &str) -> Result<Option<serde_json::Value>, serde_json::Error> {
    use serde_json::value::RawValue;
    type Members<'a> = std::collections::BTreeMap<String, &'a RawValue>;
    if old == new {
        return Ok(None);
    }
    if !(old.starts_with('{') && new.starts_with('{')) {
        return serde_json::from_str(new).map(Some);
    }
    let (old, new): (Members<'_>, Members<'_>) = (serde_json::from_str(old)?, serde_json::from_str(new)?);
    let mut patch = serde_json::Map::new();
    for (key, value) in &new {
        let change = match old.get(key) {
            Some(previous) => text_merge_diff(previous.get(), value.get())?,
            None => Some(serde_json::from_str(value.get())?),
        };
        if let Some(change) = change {
            patch.insert(key.clone(), change);
        }
    }
    for key in old.keys().filter(|k| !new.contains_key(*k)) {
        patch.insert(key.clone(), serde_json::Value::Null);
    }
    Ok((!patch.is_empty()).then_some(serde_json::Value::Object(patch)))
}

/// Writes the status as a merge patch of the changes from `stored`, only if the application is still
/// at `resource_version` (the version `stored` was read at): a 409 becomes [`Error::Conflict`]. Being
/// conditional, the diff is exact, and a decision made on a stale cache never overwrites newer status.
pub(crate) async fn write(
    api: &Api<SparkApplication>,
    name: &str,
    stored: Option<&SparkApplicationStatus>,
    status: &SparkApplicationStatus,
    resource_version: &str,
) -> Result<SparkApplication, Error> {
    let changes = merge_diff(stored, status)
        .map_err(|source| Error::Serialize {
            name: name.to_owned(),
            source,
        })?
        .unwrap_or_else(|| json!({}));
    let patch = json!({"metadata": {"resourceVersion": resource_version}, "status": changes});
    api.patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(|source| match source {
            kube::Error::Api(ref status) if status.code == 409 => Error::Conflict { name: name.to_owned() },
            source => Error::Write {
                name: name.to_owned(),
                source,
            },
        })
}

#[cfg(test)]
mod tests {
    use jiff::Timestamp;
    use spark_operator_api::state::ExecutorState;
    use spark_operator_api::status::TerminationRecord;

    use super::*;
    use crate::app::executors::{Limits, Tracker};
    use crate::app::observe::ExecutorPod;

    fn churn(executors: i64, limits: Limits) -> SparkApplicationStatus {
        let now = Timestamp::from_second(1_700_000_000).unwrap();
        let mut tracker = Tracker::default();
        for id in 1..=executors {
            let mut pod = ExecutorPod {
                name: format!("a-very-long-application-name-for-the-budget-0123456789-exec-{id}"),
                executor_id: Some(id),
                submission_id: None,
                state: ExecutorState::Running,
                node_name: Some(format!("node-{}", id % 50)),
                termination: None,
                capacity_wait_since: None,
            };
            tracker.observe(&pod, now, limits);
            if id % 3 == 0 {
                pod.state = ExecutorState::Failed;
                pod.termination = Some(TerminationRecord {
                    pod_name: pod.name.clone(),
                    exit_code: Some(137),
                    reason: Some("OOMKilled".into()),
                    message: Some("x".repeat(4000)),
                    log_tail: Some("y".repeat(4000)),
                    ..TerminationRecord::default()
                });
            } else {
                pod.state = ExecutorState::Completed;
            }
            tracker.observe(&pod, now, limits);
        }
        let mut status = SparkApplicationStatus::default();
        tracker.render(&mut status);
        status
    }

    #[test]
    fn a_status_is_unchanged_when_it_would_be_written_as_stored() {
        let stored = churn(
            300,
            Limits {
                max_tracked: 100,
                max_failures: 20,
            },
        );
        assert!(unchanged(Some(&stored), &stored.clone()));
        // Sub-second precision the API never stores: different values, the same JSON.
        let mut sub_second = stored.clone();
        let second = Timestamp::from_second(1_700_000_000).unwrap();
        let mut at_second = stored.clone();
        at_second.termination_time = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(second));
        sub_second.termination_time = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            second + jiff::SignedDuration::from_millis(300),
        ));
        assert_ne!(at_second, sub_second);
        assert!(unchanged(Some(&at_second), &sub_second));
        // A difference anywhere, including the last byte, is a change.
        let mut one_more = stored.clone();
        one_more.execution_attempts += 1;
        assert!(!unchanged(Some(&stored), &one_more));
        let mut longer = stored.clone();
        longer
            .uncounted_executor_terminations
            .push(TerminationRecord::default());
        assert!(!unchanged(Some(&stored), &longer));
        assert!(!unchanged(Some(&longer), &stored));
        // Nothing stored is the empty status.
        assert!(unchanged(None, &SparkApplicationStatus::default()));
        assert!(!unchanged(None, &stored));
    }

    #[test]
    fn a_hundred_thousand_executors_fit_the_budget_with_exact_counts() {
        // Generous limits, so the budget is what bounds the lists.
        let limits = Limits {
            max_tracked: 5_000,
            max_failures: 500,
        };
        let mut status = churn(100_000, limits);
        let budget = 256 * 1024;
        assert!(
            size(&status) > budget,
            "the test must start over budget: {}",
            size(&status)
        );
        let fit = fit_to_budget(&mut status, budget);
        assert!(fit.bytes <= budget, "{fit:?}");
        assert_eq!(fit.bytes, size(&status));
        assert!(fit.dropped_executors > 0);
        let counts = status.executor_counts.as_ref().unwrap();
        assert_eq!(counts.failed, 33_333);
        assert_eq!(counts.completed, 66_667);
        assert_eq!(counts.total(), 100_000);
        assert!(
            !status.recent_executors.is_empty(),
            "recent executors are shrunk, not emptied"
        );
        assert_eq!(status.executor_state.len(), status.recent_executors.len());
        // The newest executors are the ones kept.
        assert!(status.recent_executors.values().any(|r| r.executor_id == Some(100_000)));
    }

    #[test]
    fn small_budgets_keep_counts_and_state() {
        let mut status = churn(
            1000,
            Limits {
                max_tracked: 1000,
                max_failures: 100,
            },
        );
        status.application_state.error_message = "e".repeat(100_000);
        let fit = fit_to_budget(&mut status, 16 * 1024);
        assert!(fit.bytes <= 16 * 1024, "{fit:?}");
        assert!(fit.truncated_text);
        assert_eq!(status.executor_counts.as_ref().unwrap().total(), 1000);
        assert!(status.application_state.error_message.len() <= TIGHT_TEXT_BYTES);
    }

    #[test]
    fn merge_diffs_remove_dropped_entries_and_skip_unchanged_ones() {
        let old = json!({"a": 1, "m": {"x": 1, "y": 2}, "l": [1, 2], "same": {"k": "v"}});
        let new = json!({"a": 2, "m": {"y": 2, "z": 3}, "l": [1], "same": {"k": "v"}});
        let patch = merge_diff(Some(&old), &new).unwrap().unwrap();
        assert_eq!(patch, json!({"a": 2, "m": {"x": null, "z": 3}, "l": [1]}));
        let mut applied = old.clone();
        json_merge(&mut applied, &patch);
        assert_eq!(applied, new);
        assert_eq!(merge_diff(Some(&new), &new).unwrap(), None);
        // Nothing before: the whole object; a scalar replaced by an object and back: the new value.
        assert_eq!(merge_diff(None, &new).unwrap(), Some(new.clone()));
        assert_eq!(
            merge_diff(Some(&json!({"a": 1})), &json!({"a": {"b": 1}})).unwrap(),
            Some(json!({"a": {"b": 1}}))
        );
        assert_eq!(
            merge_diff(Some(&json!({"a": {"b": 1}})), &json!({"a": 1})).unwrap(),
            Some(json!({"a": 1}))
        );
    }

    #[test]
    fn a_merge_diff_of_two_statuses_turns_one_into_the_other_naming_only_what_changed() {
        let limits = Limits {
            max_tracked: 100,
            max_failures: 20,
        };
        // 20 more executors: the newest 20 come into the tracked lists, the oldest 20 leave them.
        let old = churn(300, limits);
        let mut new = churn(320, limits);
        new.uncounted_executor_terminations.push(TerminationRecord {
            pod_name: "exec-321".into(),
            container_id: Some("c-321".into()),
            ..TerminationRecord::default()
        });
        let patch = merge_diff(Some(&old), &new).unwrap().unwrap();
        let mut applied = serde_json::to_value(&old).unwrap();
        json_merge(&mut applied, &patch);
        assert_eq!(applied, serde_json::to_value(&new).unwrap());
        // The tracked executors both kept: not in the patch; those gone: null; the new ones: whole.
        let recent = patch["recentExecutors"].as_object().unwrap();
        assert_eq!(recent.len(), 40, "{recent:?}");
        assert_eq!(recent.values().filter(|v| v.is_null()).count(), 20);
        assert!(patch.get("applicationState").is_none(), "{patch}");
        assert_eq!(merge_diff(Some(&new), &new.clone()).unwrap(), None);
        // Nothing stored: the whole status.
        assert_eq!(
            merge_diff(None, &new).unwrap(),
            Some(serde_json::to_value(&new).unwrap())
        );
    }

    /// RFC 7386, to check the diff against.
    fn json_merge(target: &mut serde_json::Value, patch: &serde_json::Value) {
        if let serde_json::Value::Object(p) = patch {
            if !target.is_object() {
                *target = json!({});
            }
            let t = target.as_object_mut().unwrap();
            for (k, v) in p {
                if v.is_null() {
                    t.remove(k);
                } else {
                    json_merge(t.entry(k.clone()).or_insert(serde_json::Value::Null), v);
                }
            }
        } else {
            *target = patch.clone();
        }
    }

    #[test]
    fn reported_terminations_are_never_dropped_to_fit() {
        let mut status = churn(
            1000,
            Limits {
                max_tracked: 1000,
                max_failures: 100,
            },
        );
        status.uncounted_executor_terminations = (1..=20)
            .map(|id| TerminationRecord {
                pod_name: format!("exec-{id}"),
                executor_id: Some(id),
                exit_code: Some(1),
                message: Some("m".repeat(2000)),
                log_tail: Some("t".repeat(200)),
                container_id: Some(format!("c-{id}")),
                ..TerminationRecord::default()
            })
            .collect();
        let reported = status.uncounted_executor_terminations.clone();
        let fit = fit_to_budget(&mut status, budget_for_controller(64 * 1024));
        assert!(fit.dropped_executors > 0, "{fit:?}");
        assert_eq!(status.uncounted_executor_terminations, reported);
        assert!(budget_for_controller(64 * 1024) < 64 * 1024);
    }

    #[test]
    fn a_status_within_budget_is_untouched() {
        let mut status = churn(
            10,
            Limits {
                max_tracked: 100,
                max_failures: 10,
            },
        );
        let before = status.clone();
        let fit = fit_to_budget(&mut status, 256 * 1024);
        assert_eq!(status, before);
        assert_eq!(fit.dropped_executors, 0);
    }
}
