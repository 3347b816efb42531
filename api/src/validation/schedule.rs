//! Checks of the ScheduledSparkApplication-specific fields.

use crate::field::{FieldPath, ValidationReport};
use crate::scheduled::ScheduledSparkApplicationSpec;

/// `-<timestamp>` at nanosecond precision, appended to the name of each run.
pub(super) const RUN_NAME_SUFFIX_LENGTH: usize = 20;

/// Checks a cron schedule the way robfig/cron's standard parser reads it (the controller's own parser,
/// [`crate::cron`]): five fields, a descriptor such as `@daily`, or `@every <duration>`, optionally after
/// `CRON_TZ=<zone>` or `TZ=<zone>`. Returns what is wrong.
pub fn check_schedule(schedule: &str) -> Result<(), String> {
    if schedule.trim().is_empty() {
        return Err("is required: a cron schedule such as \"0 3 * * *\" or \"@every 3m\"".to_owned());
    }
    let utc = jiff::tz::TimeZone::UTC;
    crate::cron::parse(schedule, &utc, &utc)
        .map(|_| ())
        .map_err(|error| match error {
            crate::cron::ScheduleError::Invalid { schedule, problem } if problem.contains("duration") => {
                format!("{schedule:?}: {problem}: use a duration such as @every 90s or @every 1h30m")
            }
            other => other.to_string(),
        })
}

pub(super) fn check_scheduled_spec(
    spec: &ScheduledSparkApplicationSpec,
    path: &FieldPath,
    report: &mut ValidationReport,
) {
    if let Err(problem) = check_schedule(&spec.schedule) {
        report.error(path.child("schedule"), problem);
    }
    if let Err(problem) = crate::cron::zone(spec.time_zone.as_deref(), &jiff::tz::TimeZone::UTC) {
        report.error(path.child("timeZone"), problem.to_string());
    }
    for (field, value) in [
        ("successfulRunHistoryLimit", spec.successful_run_history_limit),
        ("failedRunHistoryLimit", spec.failed_run_history_limit),
    ] {
        if let Some(value) = value
            && value < 0
        {
            report.error(path.child(field), format!("must not be negative, got {value}"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::check_schedule;

    #[test]
    fn schedules_robfig_accepts_pass() {
        for good in [
            "@every 3m",
            "@every 1h30m",
            "@every 1.5s",
            "0 3 * * *",
            "*/5 * * * MON-FRI",
            "CRON_TZ=Europe/Paris 0 3 * * *",
            "@daily",
            "0 0 1 JAN ?",
        ] {
            assert!(check_schedule(good).is_ok(), "{good}: {:?}", check_schedule(good));
        }
    }

    #[test]
    fn bad_schedules_say_what_to_write() {
        for bad in [
            "",
            "@every",
            "@every 3",
            "@every m",
            "@sometimes",
            "0 3 * *",
            "0 3 * * * *",
            "0 3 * * $",
        ] {
            let problem = check_schedule(bad).unwrap_err();
            assert!(!problem.is_empty(), "{bad}");
        }
        assert!(check_schedule("0 3 * *").unwrap_err().contains("4 fields"));
        // Ranges are checked as the controller reads them, at `kubectl apply`.
        assert!(check_schedule("61 * * * *").unwrap_err().contains("above maximum (59)"));
        assert!(
            check_schedule("CRON_TZ=Mars/Olympus 0 * * * *")
                .unwrap_err()
                .contains("unknown time zone")
        );
    }
}
