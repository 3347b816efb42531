//! Standard conditions on the SparkApplication status (`kubectl wait --for=condition=Complete`).

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

pub(crate) use spark_operator_api::status::condition_types::{COMPLETE, FAILED, RUNNING, SUBMITTED};

/// Reason of the Submitted condition while a submission is claimed but its driver pod not yet confirmed:
/// the marker that makes a restarted controller finish that same submission instead of starting another.
pub(crate) const REASON_SUBMITTING: &str = "Submitting";

/// Sets a condition; `lastTransitionTime` moves only when the status (True/False) changes.
pub(crate) fn set(
    conditions: &mut Vec<Condition>,
    type_: &str,
    status: bool,
    reason: &str,
    message: impl Into<String>,
    now: Timestamp,
    generation: Option<i64>,
) {
    let status = if status { "True" } else { "False" };
    let message = message.into();
    // Stored with second precision: keeping that here makes "did the status change" exact.
    let now = Timestamp::from_second(now.as_second()).unwrap_or(now);
    if let Some(existing) = conditions.iter_mut().find(|c| c.type_ == type_) {
        if existing.status != status {
            existing.last_transition_time = Time(now);
        }
        existing.status = status.to_owned();
        existing.reason = reason.to_owned();
        existing.message = message;
        existing.observed_generation = generation;
        return;
    }
    conditions.push(Condition {
        type_: type_.to_owned(),
        status: status.to_owned(),
        reason: reason.to_owned(),
        message,
        last_transition_time: Time(now),
        observed_generation: generation,
    });
}

/// Removes a condition.
pub(crate) fn remove(conditions: &mut Vec<Condition>, type_: &str) {
    conditions.retain(|c| c.type_ != type_);
}

/// The condition of a type.
pub(crate) fn get<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transition_time_moves_only_when_the_status_flips() {
        let t0 = Timestamp::from_second(100).unwrap();
        let t1 = Timestamp::from_second(200).unwrap();
        let mut conditions = Vec::new();
        set(&mut conditions, RUNNING, true, "DriverRunning", "", t0, Some(1));
        set(&mut conditions, RUNNING, true, "DriverRunning", "still", t1, Some(1));
        assert_eq!(conditions.len(), 1);
        assert_eq!(conditions[0].last_transition_time.0, t0);
        assert_eq!(conditions[0].message, "still");
        set(&mut conditions, RUNNING, false, "Succeeding", "", t1, Some(2));
        assert_eq!(conditions[0].last_transition_time.0, t1);
        assert_eq!(conditions[0].observed_generation, Some(2));
        remove(&mut conditions, RUNNING);
        assert!(get(&conditions, RUNNING).is_none());
    }
}
