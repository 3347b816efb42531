//! What a ScheduledSparkApplication's reconcile does, decided from what was read (the spec, the stored
//! status, its runs and the clock): pure, so every rule of scheduling is tested without a cluster.
//!
//! As Kubeflow's controller, with these differences, each for a reason:
//! - A run is named after the tick it is for (`<name>-<tick>`), not the moment it was created, so a
//!   reconcile repeated after a failed status write finds the run it already created instead of starting
//!   a second one.
//! - After downtime, the missed ticks make one run, not one per tick (`nextRun` moves past `now`).
//! - Suspended, no `nextRun` is shown (none will happen); resumed, the next tick counts from then, so a
//!   long suspension does not start a run at once.
//! - A schedule or zone that cannot be read is `FailedValidation` with the reason, and becomes `Scheduled`
//!   again once the spec is fixed (Kubeflow stays failed).

use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use spark_operator_api::scheduled::{
    ConcurrencyPolicy, ScheduleState, ScheduledSparkApplicationSpec, ScheduledSparkApplicationStatus,
};

use super::cron;

/// Where a run stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RunState {
    Active,
    Completed,
    Failed,
}

/// One SparkApplication the schedule created (labelled with its name, owned by it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Run {
    pub name: String,
    pub created: Timestamp,
    pub state: RunState,
}

/// The timestamp in a run's name (Kubeflow's `--scheduled-spark-application-timestamp-precision`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Precision {
    #[default]
    Nanos,
    Micros,
    Millis,
    Seconds,
    Minutes,
}

impl Precision {
    fn of(self, at: Timestamp) -> i128 {
        let nanos = at.as_nanosecond();
        match self {
            Self::Nanos => nanos,
            Self::Micros => nanos / 1_000,
            Self::Millis => nanos / 1_000_000,
            Self::Seconds => nanos / 1_000_000_000,
            Self::Minutes => nanos / 60_000_000_000,
        }
    }
}

/// What the reconcile read.
pub(crate) struct Observed<'a> {
    pub name: &'a str,
    pub spec: &'a ScheduledSparkApplicationSpec,
    pub status: &'a ScheduledSparkApplicationStatus,
    pub runs: &'a [Run],
    pub now: Timestamp,
    pub precision: Precision,
}

/// Something worth an Event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Happened {
    /// The schedule or zone cannot be read (the reason).
    FailedValidation(String),
    /// Valid again, or for the first time.
    Scheduled,
    RunStarted(String),
    /// A tick passed without a run (Forbid, the previous run still active).
    RunSkipped {
        active: String,
    },
    /// The previous run was deleted to start the new one (Replace).
    RunReplaced {
        replaced: String,
    },
    /// Finished runs beyond the history limits were deleted.
    RunsPruned(Vec<String>),
}

/// What to do, in order: delete, create, write the status, come back after `requeue`.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Decision {
    pub status: ScheduledSparkApplicationStatus,
    /// Runs to delete (replaced or beyond the history limits).
    pub delete: Vec<String>,
    /// The run to create, if a tick is due and its run does not exist yet.
    pub create: Option<String>,
    pub requeue: Option<Duration>,
    pub happened: Vec<Happened>,
}

/// The decision for one reconcile.
pub(crate) fn decide(observed: &Observed<'_>) -> Decision {
    let Observed {
        name,
        spec,
        status: stored,
        runs,
        now,
        precision,
    } = *observed;
    let mut status = stored.clone();
    let mut decision = Decision {
        status: ScheduledSparkApplicationStatus::default(),
        delete: Vec::new(),
        create: None,
        requeue: None,
        happened: Vec::new(),
    };

    let local = jiff::tz::TimeZone::system();
    let schedule =
        cron::zone(spec.time_zone.as_deref(), &local).and_then(|zone| cron::parse(&spec.schedule, &zone, &local));
    let schedule = match schedule {
        Ok(schedule) => schedule,
        Err(error) => {
            let reason = error.to_string();
            if stored.schedule_state != ScheduleState::FailedValidation || stored.reason != reason {
                decision.happened.push(Happened::FailedValidation(reason.clone()));
            }
            status.schedule_state = ScheduleState::FailedValidation;
            status.reason = reason;
            status.next_run = None;
            decision.status = status;
            return decision;
        }
    };
    if stored.schedule_state != ScheduleState::Scheduled {
        decision.happened.push(Happened::Scheduled);
        status.schedule_state = ScheduleState::Scheduled;
        status.reason.clear();
        status.next_run = None;
    }

    let mut runs: Vec<&Run> = runs.iter().collect();
    // Newest first, as Kubeflow sorts them.
    runs.sort_by(|a, b| b.created.cmp(&a.created).then_with(|| b.name.cmp(&a.name)));

    if spec.suspend == Some(true) {
        status.next_run = None;
    } else {
        let due = status.next_run.as_ref().map(|t| t.0);
        match due {
            None => status.next_run = schedule.next(now).map(Time),
            Some(due) if due > now => {}
            Some(due) => {
                let run_name = format!("{name}-{}", precision.of(due));
                let exists = runs.iter().any(|r| r.name == run_name);
                let active: Vec<&&Run> = runs
                    .iter()
                    .filter(|r| r.state == RunState::Active && r.name != run_name)
                    .collect();
                let start = match spec.concurrency_policy_or_default() {
                    ConcurrencyPolicy::Allow => true,
                    ConcurrencyPolicy::Forbid => match active.first() {
                        Some(run) if !exists => {
                            decision.happened.push(Happened::RunSkipped {
                                active: run.name.clone(),
                            });
                            false
                        }
                        _ => true,
                    },
                    ConcurrencyPolicy::Replace => {
                        if !exists {
                            for run in &active {
                                decision.delete.push(run.name.clone());
                                decision.happened.push(Happened::RunReplaced {
                                    replaced: run.name.clone(),
                                });
                            }
                        }
                        true
                    }
                };
                if start {
                    if !exists {
                        decision.create = Some(run_name.clone());
                        decision.happened.push(Happened::RunStarted(run_name.clone()));
                    }
                    status.last_run = Some(Time(now));
                    status.last_run_name = run_name;
                }
                status.next_run = schedule.next(now).map(Time);
            }
        }
    }

    // History: the newest finished runs within each limit stay; the others go.
    let mut pruned = Vec::new();
    for (state, limit, names) in [
        (
            RunState::Completed,
            spec.successful_run_history_limit_or_default(),
            &mut status.past_successful_run_names,
        ),
        (
            RunState::Failed,
            spec.failed_run_history_limit_or_default(),
            &mut status.past_failed_run_names,
        ),
    ] {
        let finished: Vec<&&Run> = runs
            .iter()
            .filter(|r| r.state == state && !decision.delete.contains(&r.name))
            .collect();
        let keep = usize::try_from(limit.max(0)).unwrap_or(0);
        *names = finished.iter().take(keep).map(|r| r.name.clone()).collect();
        pruned.extend(finished.iter().skip(keep).map(|r| r.name.clone()));
    }
    if !pruned.is_empty() {
        decision.delete.extend(pruned.iter().cloned());
        decision.happened.push(Happened::RunsPruned(pruned));
    }

    decision.requeue = status
        .next_run
        .as_ref()
        .map(|next| Duration::try_from(next.0.duration_since(now)).unwrap_or(Duration::ZERO));
    decision.status = status;
    decision
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> Timestamp {
        text.parse().unwrap()
    }

    fn spec(schedule: &str) -> ScheduledSparkApplicationSpec {
        serde_json::from_value(serde_json::json!({
            "schedule": schedule,
            "template": { "type": "Scala", "mode": "cluster", "sparkVersion": "4.0.0", "driver": {}, "executor": {} },
        }))
        .unwrap()
    }

    fn run(name: &str, created: &str, state: RunState) -> Run {
        Run {
            name: name.into(),
            created: at(created),
            state,
        }
    }

    fn decide_at(
        spec: &ScheduledSparkApplicationSpec,
        status: &ScheduledSparkApplicationStatus,
        runs: &[Run],
        now: &str,
    ) -> Decision {
        decide(&Observed {
            name: "pi",
            spec,
            status,
            runs,
            now: at(now),
            precision: Precision::Seconds,
        })
    }

    /// The status after a first reconcile at `now`: scheduled, its next run set.
    fn scheduled(spec: &ScheduledSparkApplicationSpec, now: &str) -> ScheduledSparkApplicationStatus {
        decide_at(spec, &ScheduledSparkApplicationStatus::default(), &[], now).status
    }

    #[test]
    fn a_new_schedule_waits_for_its_first_tick_then_runs_once_per_tick() {
        let spec = spec("*/5 * * * *");
        let first = decide_at(
            &spec,
            &ScheduledSparkApplicationStatus::default(),
            &[],
            "2026-11-26T10:02:00Z",
        );
        assert_eq!(first.status.schedule_state, ScheduleState::Scheduled);
        assert_eq!(first.status.next_run, Some(Time(at("2026-11-26T10:05:00Z"))));
        assert_eq!(first.create, None);
        assert_eq!(first.requeue, Some(Duration::from_secs(180)));
        assert_eq!(first.happened, [Happened::Scheduled]);

        // Early: nothing yet, come back at the tick.
        let early = decide_at(&spec, &first.status, &[], "2026-11-26T10:04:00Z");
        assert_eq!(
            (early.create.as_deref(), early.requeue),
            (None, Some(Duration::from_secs(60)))
        );

        // Due: the run named after its tick; the next tick five minutes on.
        let due = decide_at(&spec, &first.status, &[], "2026-11-26T10:05:01Z");
        let tick = at("2026-11-26T10:05:00Z").as_second();
        assert_eq!(due.create, Some(format!("pi-{tick}")));
        assert_eq!(due.status.last_run_name, format!("pi-{tick}"));
        assert_eq!(due.status.last_run, Some(Time(at("2026-11-26T10:05:01Z"))));
        assert_eq!(due.status.next_run, Some(Time(at("2026-11-26T10:10:00Z"))));
        assert_eq!(due.requeue, Some(Duration::from_secs(299)));
    }

    #[test]
    fn a_reconcile_repeated_after_a_lost_status_write_creates_nothing_twice() {
        let spec = spec("*/5 * * * *");
        let status = scheduled(&spec, "2026-11-26T10:02:00Z");
        let tick = at("2026-11-26T10:05:00Z").as_second();
        // The run exists (created by the attempt whose status write failed): not created again.
        let runs = [run(&format!("pi-{tick}"), "2026-11-26T10:05:01Z", RunState::Active)];
        let again = decide_at(&spec, &status, &runs, "2026-11-26T10:05:03Z");
        assert_eq!(again.create, None);
        assert_eq!(again.status.last_run_name, format!("pi-{tick}"));
        assert_eq!(again.status.next_run, Some(Time(at("2026-11-26T10:10:00Z"))));
        // Forbid does not count the tick's own run as a previous one.
        let mut forbid = spec.clone();
        forbid.concurrency_policy = Some(ConcurrencyPolicy::Forbid);
        let again = decide_at(&forbid, &status, &runs, "2026-11-26T10:05:03Z");
        assert!(again.happened.is_empty(), "{:?}", again.happened);
    }

    #[test]
    fn missed_ticks_make_one_run() {
        let spec = spec("* * * * *");
        let status = scheduled(&spec, "2026-11-26T10:00:30Z");
        // An hour of downtime: sixty ticks missed, one run, the next tick after now.
        let late = decide_at(&spec, &status, &[], "2026-11-26T11:00:30Z");
        assert!(late.create.is_some());
        assert_eq!(late.status.next_run, Some(Time(at("2026-11-26T11:01:00Z"))));
    }

    #[test]
    fn forbid_skips_while_a_run_is_active_and_replace_replaces_it() {
        let mut spec = spec("*/5 * * * *");
        let status = scheduled(&spec, "2026-11-26T10:02:00Z");
        let runs = [run("pi-1", "2026-11-26T10:00:00Z", RunState::Active)];

        spec.concurrency_policy = Some(ConcurrencyPolicy::Forbid);
        let forbid = decide_at(&spec, &status, &runs, "2026-11-26T10:05:00Z");
        assert_eq!(forbid.create, None);
        assert_eq!(forbid.happened, [Happened::RunSkipped { active: "pi-1".into() }]);
        assert_eq!(forbid.status.next_run, Some(Time(at("2026-11-26T10:10:00Z"))));
        // Once it finished, the next tick runs.
        let done = [run("pi-1", "2026-11-26T10:00:00Z", RunState::Completed)];
        assert!(
            decide_at(&spec, &status, &done, "2026-11-26T10:05:00Z")
                .create
                .is_some()
        );

        spec.concurrency_policy = Some(ConcurrencyPolicy::Replace);
        let replace = decide_at(&spec, &status, &runs, "2026-11-26T10:05:00Z");
        assert_eq!(replace.delete, ["pi-1"]);
        assert!(replace.create.is_some());
        assert!(replace.happened.contains(&Happened::RunReplaced {
            replaced: "pi-1".into()
        }));

        spec.concurrency_policy = Some(ConcurrencyPolicy::Allow);
        let allow = decide_at(&spec, &status, &runs, "2026-11-26T10:05:00Z");
        assert!(allow.delete.is_empty() && allow.create.is_some());
    }

    #[test]
    fn history_limits_keep_the_newest_finished_runs() {
        let mut spec = spec("0 * * * *");
        spec.successful_run_history_limit = Some(2);
        let status = scheduled(&spec, "2026-11-26T10:02:00Z");
        let runs = [
            run("pi-1", "2026-11-26T07:00:00Z", RunState::Completed),
            run("pi-2", "2026-11-26T08:00:00Z", RunState::Completed),
            run("pi-3", "2026-11-26T09:00:00Z", RunState::Completed),
            run("pi-f1", "2026-11-26T07:30:00Z", RunState::Failed),
            run("pi-f2", "2026-11-26T08:30:00Z", RunState::Failed),
            run("pi-4", "2026-11-26T10:00:00Z", RunState::Active),
        ];
        let d = decide_at(&spec, &status, &runs, "2026-11-26T10:03:00Z");
        assert_eq!(d.status.past_successful_run_names, ["pi-3", "pi-2"]);
        assert_eq!(d.status.past_failed_run_names, ["pi-f2"]);
        assert_eq!(d.delete, ["pi-1", "pi-f1"]);
        assert_eq!(d.happened, [Happened::RunsPruned(vec!["pi-1".into(), "pi-f1".into()])]);
    }

    #[test]
    fn suspend_stops_runs_and_resuming_counts_from_then() {
        let mut spec = spec("*/5 * * * *");
        let status = scheduled(&spec, "2026-11-26T10:02:00Z");
        spec.suspend = Some(true);
        let suspended = decide_at(&spec, &status, &[], "2026-11-26T10:30:00Z");
        assert_eq!((suspended.create.as_deref(), suspended.requeue), (None, None));
        assert_eq!(suspended.status.next_run, None);
        spec.suspend = Some(false);
        let resumed = decide_at(&spec, &suspended.status, &[], "2026-11-26T11:01:00Z");
        assert_eq!(resumed.create, None, "no run at once for the ticks of the suspension");
        assert_eq!(resumed.status.next_run, Some(Time(at("2026-11-26T11:05:00Z"))));
    }

    #[test]
    fn an_unreadable_schedule_or_zone_fails_validation_until_fixed() {
        let mut spec = spec("61 * * * *");
        let failed = decide_at(
            &spec,
            &ScheduledSparkApplicationStatus::default(),
            &[],
            "2026-11-26T10:00:00Z",
        );
        assert_eq!(failed.status.schedule_state, ScheduleState::FailedValidation);
        assert!(
            failed.status.reason.contains("above maximum (59)"),
            "{}",
            failed.status.reason
        );
        assert_eq!((failed.create.as_deref(), failed.requeue), (None, None));
        assert!(matches!(failed.happened[..], [Happened::FailedValidation(_)]));
        // The same again: no new Event.
        assert!(
            decide_at(&spec, &failed.status, &[], "2026-11-26T10:01:00Z")
                .happened
                .is_empty()
        );

        spec.schedule = "0 * * * *".into();
        spec.time_zone = Some("Moon/Tranquility".into());
        let zone = decide_at(&spec, &failed.status, &[], "2026-11-26T10:01:00Z");
        assert!(
            zone.status.reason.contains("unknown time zone"),
            "{}",
            zone.status.reason
        );

        spec.time_zone = Some("Europe/Paris".into());
        let fixed = decide_at(&spec, &zone.status, &[], "2026-11-26T10:01:00Z");
        assert_eq!(fixed.status.schedule_state, ScheduleState::Scheduled);
        assert_eq!(fixed.status.reason, "");
        assert_eq!(fixed.status.next_run, Some(Time(at("2026-11-26T11:00:00Z"))));
    }
}
