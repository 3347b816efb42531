//! Checks of the ScheduledSparkApplication-specific fields.

use crate::field::{FieldPath, ValidationReport};
use crate::scheduled::ScheduledSparkApplicationSpec;

/// `-<timestamp>` at nanosecond precision, appended to the name of each run.
pub(super) const RUN_NAME_SUFFIX_LENGTH: usize = 20;

const DESCRIPTORS: [&str; 8] = [
    "@yearly",
    "@annually",
    "@monthly",
    "@weekly",
    "@daily",
    "@midnight",
    "@hourly",
    "@reboot",
];

/// Checks a cron schedule the way robfig/cron's standard parser reads it: five fields, a descriptor such
/// as `@daily`, or `@every <duration>`, optionally after `CRON_TZ=<zone>` or `TZ=<zone>`. Returns what is
/// wrong.
pub fn check_schedule(schedule: &str) -> Result<(), String> {
    let trimmed = schedule.trim();
    let body = match trimmed.split_once(char::is_whitespace) {
        Some((zone, rest)) if zone.starts_with("CRON_TZ=") || zone.starts_with("TZ=") => rest.trim(),
        _ => trimmed,
    };
    if body.is_empty() {
        return Err("is required: a cron schedule such as \"0 3 * * *\" or \"@every 3m\"".to_owned());
    }
    if let Some(duration) = body.strip_prefix("@every") {
        return check_go_duration(duration.trim())
            .map_err(|problem| format!("{schedule:?}: {problem}: use a duration such as @every 90s or @every 1h30m"));
    }
    if body.starts_with('@') {
        if DESCRIPTORS.contains(&body) && body != "@reboot" {
            return Ok(());
        }
        return Err(format!(
            "{schedule:?} is not a schedule descriptor: use @yearly, @monthly, @weekly, @daily, @hourly or @every <duration>"
        ));
    }
    let fields: Vec<&str> = body.split_whitespace().collect();
    if fields.len() != 5 {
        return Err(format!(
            "{schedule:?} has {} fields: use the five fields minute hour day-of-month month day-of-week, e.g. \"0 3 * * *\"",
            fields.len()
        ));
    }
    for field in fields {
        if field.is_empty()
            || !field
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '*' | '?' | ',' | '-' | '/'))
        {
            return Err(format!(
                "{schedule:?}: the field {field:?} may contain only digits, names, '*', '?', ',', '-' and '/'"
            ));
        }
    }
    Ok(())
}

/// A Go duration: one or more `<number><unit>` with units ns, us, µs, ms, s, m, h.
fn check_go_duration(duration: &str) -> Result<(), &'static str> {
    if duration.is_empty() {
        return Err("the duration is missing");
    }
    let mut rest = duration;
    while !rest.is_empty() {
        let number_end = rest
            .find(|c: char| !c.is_ascii_digit() && c != '.')
            .unwrap_or(rest.len());
        if number_end == 0 {
            return Err("the duration must start with a number");
        }
        rest = &rest[number_end..];
        let unit_end = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        if !matches!(&rest[..unit_end], "ns" | "us" | "µs" | "ms" | "s" | "m" | "h") {
            return Err("each number needs a unit: ns, us, ms, s, m or h");
        }
        rest = &rest[unit_end..];
    }
    Ok(())
}

pub(super) fn check_scheduled_spec(
    spec: &ScheduledSparkApplicationSpec,
    path: &FieldPath,
    report: &mut ValidationReport,
) {
    if let Err(problem) = check_schedule(&spec.schedule) {
        report.error(path.child("schedule"), problem);
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
    }
}
