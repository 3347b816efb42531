//! Cron schedules as Kubeflow reads them (robfig/cron v3's `ParseStandard`, with `CRON_TZ=<zone>` put in
//! front): five fields (minute hour day-of-month month day-of-week), the descriptors `@yearly`
//! `@annually` `@monthly` `@weekly` `@daily` `@midnight` `@hourly`, and `@every <Go duration>`. Pure: the
//! next run after an instant, in the schedule's zone. Validation (`kubectl apply`, `validate -f`) and the
//! controller read schedules with this one parser. The operator's own zone (`Local`) is passed in: reading it
//! is I/O, which this crate does not do.
//!
//! Day of month and day of week combine as in cron (and robfig): when either is `*` (or `?`) both must
//! match, otherwise either may. Around DST we do as robfig (so as Kubeflow and Kubernetes' CronJobs): a
//! wall-clock time that does not exist (spring forward) is skipped that day, and one that happens twice
//! (fall back) runs at both.

use std::time::Duration;

use jiff::civil::{Date, DateTime, Time};
use jiff::tz::{AmbiguousOffset, Disambiguation, TimeZone};
use jiff::{Timestamp, ToSpan};

/// Why a schedule cannot be read; the message names what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScheduleError {
    #[error("unknown time zone {zone:?}: use an IANA name such as \"Europe/Paris\", or \"UTC\"")]
    UnknownZone { zone: String },
    #[error("{schedule:?}: {problem}")]
    Invalid { schedule: String, problem: String },
}

/// A parsed schedule.
#[derive(Debug, Clone)]
pub enum Schedule {
    Cron(CronSchedule),
    /// `@every`: a fixed delay after each run (robfig's ConstantDelaySchedule: whole seconds, at least one).
    Every(Duration),
}

/// The five fields as bit sets, and the zone they are read in.
#[derive(Debug, Clone)]
pub struct CronSchedule {
    minutes: u64,
    hours: u64,
    days: u64,
    months: u64,
    weekdays: u64,
    /// Whether day-of-month / day-of-week was `*` or `?` (then both must match, as in robfig).
    days_star: bool,
    weekdays_star: bool,
    zone: TimeZone,
}

/// How a `spec.timeZone` is read: absent or empty is UTC; `Local` is `local`, the operator process's own
/// zone (Go's `time.Local`: `TZ`, else `/etc/localtime`; UTC in the chart's image); anything else an IANA
/// name, from the zone database built into the binary.
pub fn zone(name: Option<&str>, local: &TimeZone) -> Result<TimeZone, ScheduleError> {
    match name.map(str::trim).filter(|n| !n.is_empty()) {
        None | Some("UTC") => Ok(TimeZone::UTC),
        Some("Local") => Ok(local.clone()),
        Some(name) => TimeZone::get(name).map_err(|_| ScheduleError::UnknownZone { zone: name.to_owned() }),
    }
}

struct Bounds {
    min: u32,
    max: u32,
    names: &'static [&'static str],
}

const MINUTES: Bounds = Bounds {
    min: 0,
    max: 59,
    names: &[],
};
const HOURS: Bounds = Bounds {
    min: 0,
    max: 23,
    names: &[],
};
const DAYS: Bounds = Bounds {
    min: 1,
    max: 31,
    names: &[],
};
const MONTHS: Bounds = Bounds {
    min: 1,
    max: 12,
    names: &[
        "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
    ],
};
const WEEKDAYS: Bounds = Bounds {
    min: 0,
    max: 6,
    names: &["sun", "mon", "tue", "wed", "thu", "fri", "sat"],
};

/// Parses `schedule` in `default_zone` (a `CRON_TZ=` or `TZ=` prefix in the schedule wins, as in robfig;
/// `local` is what `Local` names there).
pub fn parse(schedule: &str, default_zone: &TimeZone, local: &TimeZone) -> Result<Schedule, ScheduleError> {
    let invalid = |problem: String| ScheduleError::Invalid {
        schedule: schedule.to_owned(),
        problem,
    };
    let mut body = schedule.trim();
    let mut zone = default_zone.clone();
    if let Some((prefix, rest)) = body.split_once(char::is_whitespace)
        && let Some(name) = prefix.strip_prefix("CRON_TZ=").or_else(|| prefix.strip_prefix("TZ="))
    {
        zone = self::zone(Some(name), local)?;
        body = rest.trim();
    }
    if body.is_empty() {
        return Err(invalid("empty spec string".to_owned()));
    }
    if let Some(duration) = body.strip_prefix("@every") {
        let delay = go_duration(duration.trim()).map_err(|p| invalid(format!("failed to parse duration: {p}")))?;
        // Sub-second parts are dropped and the delay is at least a second, as robfig's `Every`.
        return Ok(Schedule::Every(Duration::from_secs(delay.as_secs().max(1))));
    }
    let fields = match body {
        "@yearly" | "@annually" => "0 0 1 1 *",
        "@monthly" => "0 0 1 * *",
        "@weekly" => "0 0 * * 0",
        "@daily" | "@midnight" => "0 0 * * *",
        "@hourly" => "0 * * * *",
        other if other.starts_with('@') => return Err(invalid(format!("unrecognized descriptor: {other}"))),
        other => other,
    };
    let fields: Vec<&str> = fields.split_whitespace().collect();
    let [minute, hour, day, month, weekday] = fields[..] else {
        return Err(invalid(format!(
            "has {} fields: use the five fields minute hour day-of-month month day-of-week, e.g. \"0 3 * * *\"",
            fields.len()
        )));
    };
    let (minutes, _) = field(minute, &MINUTES).map_err(invalid)?;
    let (hours, _) = field(hour, &HOURS).map_err(invalid)?;
    let (days, days_star) = field(day, &DAYS).map_err(invalid)?;
    let (months, _) = field(month, &MONTHS).map_err(invalid)?;
    let (weekdays, weekdays_star) = field(weekday, &WEEKDAYS).map_err(invalid)?;
    Ok(Schedule::Cron(CronSchedule {
        minutes,
        hours,
        days,
        months,
        weekdays,
        days_star,
        weekdays_star,
        zone,
    }))
}

/// One field: comma-separated ranges. Returns the bit set and whether it was a plain `*`/`?`.
fn field(expr: &str, bounds: &Bounds) -> Result<(u64, bool), String> {
    let mut bits = 0u64;
    let mut star = false;
    for part in expr.split(',') {
        let (part_bits, part_star) = range(part, bounds)?;
        bits |= part_bits;
        star |= part_star;
    }
    Ok((bits, star))
}

/// `*`, `?`, `N`, `N-M`, each optionally `/STEP` (`N/STEP` means `N-max/STEP`), as robfig's `getRange`.
fn range(expr: &str, bounds: &Bounds) -> Result<(u64, bool), String> {
    let mut slash = expr.split('/');
    let range = slash.next().unwrap_or_default();
    let step = slash.next();
    if slash.next().is_some() {
        return Err(format!("too many slashes: {expr}"));
    }
    let mut hyphen = range.split('-');
    let low = hyphen.next().unwrap_or_default();
    let high = hyphen.next();
    if hyphen.next().is_some() {
        return Err(format!("too many hyphens: {expr}"));
    }
    let (start, mut end, mut star) = if low == "*" || low == "?" {
        (bounds.min, bounds.max, true)
    } else {
        let start = value(low, bounds)?;
        let end = match high {
            Some(high) => value(high, bounds)?,
            None => start,
        };
        (start, end, false)
    };
    if star && high.is_some() {
        return Err(format!("too many hyphens: {expr}"));
    }
    let step = match step {
        None => 1,
        Some(step) => {
            let step: u32 = step
                .parse()
                .map_err(|_| format!("failed to parse int from {step}: not a number"))?;
            if step == 0 {
                return Err(format!("step of range should be a positive number: {expr}"));
            }
            if high.is_none() && !star {
                end = bounds.max;
            }
            if step > 1 {
                star = false;
            }
            step
        }
    };
    if start < bounds.min {
        return Err(format!(
            "beginning of range ({start}) below minimum ({}): {expr}",
            bounds.min
        ));
    }
    if end > bounds.max {
        return Err(format!("end of range ({end}) above maximum ({}): {expr}", bounds.max));
    }
    if start > end {
        return Err(format!(
            "beginning of range ({start}) beyond end of range ({end}): {expr}"
        ));
    }
    let bits = (start..=end).step_by(step as usize).fold(0u64, |bits, v| bits | 1 << v);
    Ok((bits, star))
}

fn value(text: &str, bounds: &Bounds) -> Result<u32, String> {
    if let Some(i) = bounds.names.iter().position(|n| n.eq_ignore_ascii_case(text)) {
        return Ok(bounds.min + u32::try_from(i).unwrap_or(0));
    }
    text.parse()
        .map_err(|_| format!("failed to parse int from {text}: not a number"))
}

/// A Go duration (`90s`, `1h30m`, `1.5h`, `500ms`).
fn go_duration(text: &str) -> Result<Duration, String> {
    if text.is_empty() {
        return Err("invalid duration \"\"".to_owned());
    }
    let mut rest = text;
    let mut total = 0f64;
    while !rest.is_empty() {
        let number_end = rest
            .find(|c: char| !c.is_ascii_digit() && c != '.')
            .unwrap_or(rest.len());
        let number: f64 = rest[..number_end]
            .parse()
            .map_err(|_| format!("invalid duration {text:?}"))?;
        rest = &rest[number_end..];
        let unit_end = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let seconds = match &rest[..unit_end] {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            "" => return Err(format!("missing unit in duration {text:?}")),
            unit => return Err(format!("unknown unit {unit:?} in duration {text:?}")),
        };
        total += number * seconds;
        rest = &rest[unit_end..];
    }
    if !total.is_finite() || total > 1e12 {
        return Err(format!("invalid duration {text:?}"));
    }
    Ok(Duration::from_secs_f64(total))
}

impl Schedule {
    /// The first run strictly after `after`; None when there is none within five years (robfig's limit),
    /// e.g. `0 0 30 2 *`.
    pub fn next(&self, after: Timestamp) -> Option<Timestamp> {
        match self {
            Self::Every(delay) => {
                let whole = Timestamp::from_second(after.as_second()).ok()?;
                whole.checked_add(jiff::SignedDuration::try_from(*delay).ok()?).ok()
            }
            Self::Cron(cron) => cron.next(after),
        }
    }
}

impl CronSchedule {
    fn next(&self, after: Timestamp) -> Option<Timestamp> {
        let local = after.to_zoned(self.zone.clone()).datetime();
        let start_day = local.date();
        let last_day = start_day.checked_add(5.years()).ok()?;
        let mut day = start_day;
        while day <= last_day {
            if self.day_matches(day) {
                for hour in (0..24).filter(|h| self.hours & (1 << h) != 0) {
                    for minute in (0..60).filter(|m| self.minutes & (1 << m) != 0) {
                        let Ok(time) = Time::new(hour, minute, 0, 0) else {
                            continue;
                        };
                        let civil = DateTime::from_parts(day, time);
                        // Skip wall-clock times before the start minute without converting them.
                        if civil < local.with().second(0).subsec_nanosecond(0).build().ok()? {
                            continue;
                        }
                        if let Some(at) = self.first_instant_after(civil, after) {
                            return Some(at);
                        }
                    }
                }
            }
            day = day.tomorrow().ok()?;
        }
        None
    }

    /// The earliest instant strictly after `after` at which the wall clock reads `civil`: two in a DST
    /// fold, none in a gap.
    fn first_instant_after(&self, civil: DateTime, after: Timestamp) -> Option<Timestamp> {
        let ambiguous = self.zone.to_ambiguous_zoned(civil);
        let choices: &[Disambiguation] = match ambiguous.offset() {
            AmbiguousOffset::Gap { .. } => &[],
            AmbiguousOffset::Fold { .. } => &[Disambiguation::Earlier, Disambiguation::Later],
            AmbiguousOffset::Unambiguous { .. } => &[Disambiguation::Compatible],
        };
        choices
            .iter()
            .filter_map(|d| ambiguous.clone().disambiguate(*d).ok())
            .map(|z| z.timestamp())
            .filter(|t| *t > after)
            .min()
    }

    fn day_matches(&self, day: Date) -> bool {
        let month = u32::try_from(day.month()).unwrap_or(0);
        if self.months & (1 << month) == 0 {
            return false;
        }
        let dom = self.days & (1 << u32::try_from(day.day()).unwrap_or(0)) != 0;
        let dow = self.weekdays & (1 << day.weekday().to_sunday_zero_offset()) != 0;
        if self.days_star || self.weekdays_star {
            dom && dow
        } else {
            dom || dow
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> Timestamp {
        text.parse().unwrap()
    }

    fn next(schedule: &str, zone: &str, after: &str) -> String {
        let zone = self::zone(Some(zone), &TimeZone::UTC).unwrap();
        parse(schedule, &zone, &TimeZone::UTC)
            .unwrap()
            .next(at(after))
            .unwrap()
            .to_string()
    }

    #[test]
    fn five_fields_descriptors_and_every() {
        assert_eq!(
            next("*/5 * * * *", "UTC", "2026-11-26T10:02:30Z"),
            "2026-11-26T10:05:00Z"
        );
        assert_eq!(
            next("*/5 * * * *", "UTC", "2026-11-26T10:05:00Z"),
            "2026-11-26T10:10:00Z"
        );
        assert_eq!(next("0 3 * * *", "UTC", "2026-11-26T10:00:00Z"), "2026-11-27T03:00:00Z");
        assert_eq!(
            next("30 2 1 JAN,jul *", "UTC", "2026-11-26T10:00:00Z"),
            "2027-01-01T02:30:00Z"
        );
        assert_eq!(next("@hourly", "UTC", "2026-11-26T10:00:00.5Z"), "2026-11-26T11:00:00Z");
        assert_eq!(next("@weekly", "UTC", "2026-11-26T10:00:00Z"), "2026-11-29T00:00:00Z");
        assert_eq!(next("@yearly", "UTC", "2026-11-26T10:00:00Z"), "2027-01-01T00:00:00Z");
        // @every: from the last run, sub-seconds dropped (robfig's ConstantDelaySchedule).
        assert_eq!(
            next("@every 3m", "UTC", "2026-11-26T10:00:00.7Z"),
            "2026-11-26T10:03:00Z"
        );
        assert_eq!(
            next("@every 1h30m", "UTC", "2026-11-26T10:00:00Z"),
            "2026-11-26T11:30:00Z"
        );
        assert_eq!(
            next("@every 200ms", "UTC", "2026-11-26T10:00:00Z"),
            "2026-11-26T10:00:01Z"
        );
        // N/step is N-max/step.
        assert_eq!(
            next("50/20 * * * *", "UTC", "2026-11-26T10:51:00Z"),
            "2026-11-26T11:50:00Z"
        );
    }

    #[test]
    fn day_of_month_and_week_combine_as_in_cron() {
        // Both restricted: either matches (the 1st, or a Monday: 2026-11-30 is a Monday).
        assert_eq!(
            next("0 0 1 * MON", "UTC", "2026-11-26T10:00:00Z"),
            "2026-11-30T00:00:00Z"
        );
        // Day of month `*`: both must match, so only Mondays.
        assert_eq!(next("0 0 * * 1", "UTC", "2026-11-26T10:00:00Z"), "2026-11-30T00:00:00Z");
        // The 13th or a Friday: the next Friday comes first.
        assert_eq!(
            next("0 0 13 * 5", "UTC", "2026-11-26T10:00:00Z"),
            "2026-11-27T00:00:00Z"
        );
        // `*/2` is no longer a star: either the day of month (odd days) or Monday.
        assert_eq!(
            next("0 0 */2 * 1", "UTC", "2026-11-28T10:00:00Z"),
            "2026-11-29T00:00:00Z"
        );
        // February 30 never comes: no next run within five years.
        let zone = zone(Some("UTC"), &TimeZone::UTC).unwrap();
        assert_eq!(
            parse("0 0 30 2 *", &zone, &zone)
                .unwrap()
                .next(at("2026-01-01T00:00:00Z")),
            None
        );
    }

    #[test]
    fn zones_and_daylight_saving() {
        assert_eq!(
            next("0 3 * * *", "Europe/Paris", "2026-11-26T10:00:00Z"),
            "2026-11-27T02:00:00Z"
        );
        // The prefix in the schedule wins over spec.timeZone, as in Kubeflow.
        assert_eq!(
            next(
                "CRON_TZ=America/New_York 0 3 * * *",
                "Europe/Paris",
                "2026-11-26T10:00:00Z"
            ),
            "2026-11-27T08:00:00Z"
        );
        // Spring forward (Paris, 2026-03-29 02:00 → 03:00): 02:30 does not exist that day; skipped.
        assert_eq!(
            next("30 2 * * *", "Europe/Paris", "2026-03-28T12:00:00Z"),
            "2026-03-30T00:30:00Z"
        );
        // Fall back (2026-10-25 03:00 → 02:00): 02:30 happens twice, and runs twice.
        let first = next("30 2 * * *", "Europe/Paris", "2026-10-24T12:00:00Z");
        assert_eq!(first, "2026-10-25T00:30:00Z");
        assert_eq!(next("30 2 * * *", "Europe/Paris", &first), "2026-10-25T01:30:00Z");
    }

    #[test]
    fn mistakes_are_named() {
        let utc = TimeZone::UTC;
        for (schedule, words) in [
            ("* * * *", "has 4 fields"),
            ("60 * * * *", "end of range (60) above maximum (59)"),
            ("0 0 0 * *", "beginning of range (0) below minimum (1)"),
            ("5-1 * * * *", "beginning of range (5) beyond end of range (1)"),
            ("*/0 * * * *", "step of range should be a positive number"),
            ("1/2/3 * * * *", "too many slashes"),
            ("x * * * *", "failed to parse int from x"),
            ("@sometimes", "unrecognized descriptor: @sometimes"),
            ("@every 3", "missing unit"),
            ("", "empty spec string"),
        ] {
            let error = parse(schedule, &utc, &utc).unwrap_err().to_string();
            assert!(error.contains(words), "{schedule:?}: {error}");
        }
        assert_eq!(
            zone(Some("Mars/Olympus"), &utc).unwrap_err().to_string(),
            "unknown time zone \"Mars/Olympus\": use an IANA name such as \"Europe/Paris\", or \"UTC\""
        );
        assert!(parse("CRON_TZ=Nowhere 0 * * * *", &utc, &utc).is_err());
        // `Local` is whatever the caller says the process's zone is.
        let paris = zone(Some("Europe/Paris"), &utc).unwrap();
        assert_eq!(zone(Some("Local"), &paris).unwrap(), paris);
    }
}
