//! ScheduledSparkApplications through the controller: runs on the schedule's ticks (checked against the
//! ticks in the runs' names and the times the API server created them, not against the test's clock),
//! history kept within its limit, no runs while suspended, an unreadable schedule `FailedValidation`.

use std::time::Duration;

use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;
use spark_operator_api::SparkApplication;
use spark_operator_api::scheduled::{ScheduleState, ScheduledSparkApplication};
use spark_operator_e2e::{Cluster, ClusterOptions, Poll, poll, state};

const LIMIT: Duration = Duration::from_secs(90);

fn schedule(name: &str, schedule: &str, successful_limit: i32) -> ScheduledSparkApplication {
    serde_json::from_value(json!({
        "apiVersion": "sparkoperator.k8s.io/v1beta2",
        "kind": "ScheduledSparkApplication",
        "metadata": { "name": name, "namespace": "default", "labels": { "team": "pi" } },
        "spec": {
            "schedule": schedule,
            "concurrencyPolicy": "Allow",
            "successfulRunHistoryLimit": successful_limit,
            "template": {
                "type": "Scala", "mode": "cluster", "image": "docker.io/apache/spark:4.0.4",
                "mainClass": "org.apache.spark.examples.SparkPi",
                "mainApplicationFile": "local:///opt/spark/examples/jars/spark-examples.jar",
                "sparkVersion": "4.0.4",
                "driver": {
                    "cores": 1, "memory": "512m", "serviceAccount": "spark-operator-spark",
                    "annotations": { "sim.spark-operator.dev/run-time": "1s", "sim.spark-operator.dev/exit-code": "0" },
                },
                "executor": { "instances": 1, "cores": 1, "memory": "512m" },
            },
        },
    }))
    .expect("a ScheduledSparkApplication")
}

/// Waits until `check` gives a value; the limit only bounds how long a failure takes to show.
async fn until<T, Fut: std::future::Future<Output = Option<T>>>(what: &str, mut check: impl FnMut() -> Fut) -> T {
    poll(LIMIT, || {
        let next = check();
        async move { next.await.map_or(Poll::Pending(()), Poll::Done) }
    })
    .await
    .unwrap_or_else(|()| panic!("timed out waiting for {what}"))
}

/// The runs of `name` (by its label), with the tick in their name and when they were created.
async fn runs(apps: &Api<SparkApplication>, name: &str) -> Vec<(i128, jiff::Timestamp, SparkApplication)> {
    let list = apps
        .list(&ListParams::default().labels(&format!("sparkoperator.k8s.io/scheduled-app-name={name}")))
        .await
        .expect("runs listed");
    let mut runs: Vec<_> = list
        .items
        .into_iter()
        .map(|app| {
            let run_name = app.metadata.name.clone().unwrap_or_default();
            let tick: i128 = run_name
                .rsplit('-')
                .next()
                .and_then(|t| t.parse().ok())
                .unwrap_or_else(|| panic!("a tick in {run_name}"));
            let created = app.metadata.creation_timestamp.clone().expect("created").0;
            (tick, created, app)
        })
        .collect();
    runs.sort_by_key(|(tick, _, _)| *tick);
    runs
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schedule_runs_on_its_ticks_keeps_its_history_and_stops_when_suspended() {
    let cluster = Cluster::start(ClusterOptions::default()).await;
    let _controller = cluster.controller(cluster.args(&[]));
    let schedules: Api<ScheduledSparkApplication> = Api::namespaced(cluster.client.clone(), "default");
    let apps = cluster.apps("default");
    schedules
        .create(&PostParams::default(), &schedule("pi", "@every 3s", 2))
        .await
        .expect("created");

    // The first run, then enough more that the first finished one was pruned and two are kept.
    let first = until("a first run", || async {
        let s = schedules.get("pi").await.ok()?.status?;
        (!s.last_run_name.is_empty()).then_some(s.last_run_name)
    })
    .await;
    let status = until("the first run pruned, two kept", || async {
        let s = schedules.get("pi").await.ok()?.status?;
        (s.past_successful_run_names.len() == 2 && !s.past_successful_run_names.contains(&first)).then_some(s)
    })
    .await;
    assert_eq!(status.schedule_state, ScheduleState::Scheduled);
    until("the first run deleted", || async {
        apps.get(&first).await.is_err().then_some(())
    })
    .await;

    // Each run was created at or after its tick (the name's), never before; ticks at least 3 s apart.
    let seen = runs(&apps, "pi").await;
    for (tick, created, _) in &seen {
        let tick_s = i64::try_from(tick / 1_000_000_000).unwrap_or_default();
        assert!(
            created.as_second() >= tick_s,
            "run for tick {tick} created early, at {created}"
        );
    }
    for pair in seen.windows(2) {
        assert!(
            pair[1].0 - pair[0].0 >= 3_000_000_000,
            "ticks {} {}",
            pair[0].0,
            pair[1].0
        );
    }
    // Owned by the schedule, labelled with its labels.
    let (_, _, run) = seen.last().expect("a run");
    assert_eq!(
        run.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("team"))
            .map(String::as_str),
        Some("pi")
    );
    let owner = &run.metadata.owner_references.as_ref().expect("owned")[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str()),
        ("ScheduledSparkApplication", "pi")
    );
    // The completed runs beyond the limit are gone: at most two completed remain.
    let completed = seen
        .iter()
        .filter(|(_, _, a)| state(a) == spark_operator_api::ApplicationStateType::Completed)
        .count();
    assert!(completed <= 2, "{completed} completed runs kept");

    // Suspended: no new run for several ticks.
    schedules
        .patch(
            "pi",
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": { "suspend": true } })),
        )
        .await
        .expect("suspended");
    let suspended = until("the suspension acknowledged", || async {
        let s = schedules.get("pi").await.ok()?.status?;
        s.next_run.is_none().then_some(s.last_run_name)
    })
    .await;
    tokio::time::sleep(Duration::from_secs(8)).await;
    let after = schedules.get("pi").await.expect("read").status.expect("status");
    assert_eq!(after.last_run_name, suspended, "no run while suspended");

    // An unreadable schedule: FailedValidation with the reason, no run.
    schedules
        .create(&PostParams::default(), &schedule("bad", "61 * * * *", 1))
        .await
        .expect("created (no webhook here to refuse it)");
    let bad = until("FailedValidation", || async {
        let s = schedules.get("bad").await.ok()?.status?;
        (s.schedule_state == ScheduleState::FailedValidation).then_some(s)
    })
    .await;
    assert!(bad.reason.contains("above maximum (59)"), "{}", bad.reason);
    assert!(runs(&apps, "bad").await.is_empty());

    // A schedule the CRD accepts but the controller cannot decode (an embedded volume it cannot read):
    // FailedValidation naming the field, and the watch goes on for the others.
    let mut undecodable = serde_json::to_value(schedule("undecodable", "@every 1s", 1)).expect("JSON");
    undecodable["spec"]["template"]["volumes"] = json!([{ "name": "v", "emptyDir": 5 }]);
    let raw: Api<kube::api::DynamicObject> = Api::namespaced_with(
        cluster.client.clone(),
        "default",
        &kube::api::ApiResource::erase::<ScheduledSparkApplication>(&()),
    );
    raw.create(
        &PostParams::default(),
        &serde_json::from_value(undecodable).expect("an object"),
    )
    .await
    .expect("created: the CRD keeps embedded volumes as they are");
    let unreadable = until("the undecodable schedule marked", || async {
        let s = raw.get("undecodable").await.ok()?;
        let status = s.data.get("status")?.clone();
        (status["scheduleState"] == "FailedValidation").then_some(status)
    })
    .await;
    assert!(
        unreadable["reason"]
            .as_str()
            .unwrap_or_default()
            .contains("spec.template.volumes"),
        "{unreadable}"
    );
    schedules
        .create(&PostParams::default(), &schedule("after", "@every 1s", 1))
        .await
        .expect("created");
    until("a run of a schedule created after it", || async {
        let s = schedules.get("after").await.ok()?.status?;
        (!s.last_run_name.is_empty()).then_some(())
    })
    .await;
}

/// Kubeflow's `spark-pi-scheduled.yaml`, its schedule shortened to `@every 2s`, its driver running
/// `run_time`, under `policy`.
fn kubeflow_example(name: &str, policy: &str, run_time: &str) -> ScheduledSparkApplication {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/kubeflow-examples/spark-pi-scheduled.yaml");
    let text = std::fs::read_to_string(&path).expect("Kubeflow's scheduled example");
    let mut example: serde_json::Value = serde_yaml::from_str(&text).expect("YAML");
    example["metadata"]["name"] = json!(name);
    example["spec"]["schedule"] = json!("@every 2s");
    example["spec"]["concurrencyPolicy"] = json!(policy);
    example["spec"]["template"]["driver"]["annotations"] =
        json!({ "sim.spark-operator.dev/run-time": run_time, "sim.spark-operator.dev/exit-code": "0" });
    serde_json::from_value(example).expect("a ScheduledSparkApplication")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubeflows_scheduled_example_runs_and_forbid_and_replace_hold() {
    let cluster = Cluster::start(ClusterOptions::default()).await;
    let _controller = cluster.controller(cluster.args(&[]));
    let schedules: Api<ScheduledSparkApplication> = Api::namespaced(cluster.client.clone(), "default");
    let apps = cluster.apps("default");

    // Allow, as the example: its runs complete.
    schedules
        .create(&PostParams::default(), &kubeflow_example("allow", "Allow", "1s"))
        .await
        .expect("created");
    until("a completed run of the example", || async {
        let s = schedules.get("allow").await.ok()?.status?;
        (!s.past_successful_run_names.is_empty()).then_some(())
    })
    .await;

    // Forbid, runs lasting 60 s: ticks pass, no second run starts while the first is active.
    schedules
        .create(&PostParams::default(), &kubeflow_example("forbid", "Forbid", "60s"))
        .await
        .expect("created");
    let first = until("forbid's first run", || async {
        let s = schedules.get("forbid").await.ok()?.status?;
        (!s.last_run_name.is_empty()).then_some(s.last_run_name)
    })
    .await;
    let ticks_later = until("three more ticks", || {
        let first = first.clone();
        let schedules = schedules.clone();
        async move {
            let s = schedules.get("forbid").await.ok()?.status?;
            let tick = |name: &str| name.rsplit('-').next()?.parse::<i128>().ok();
            let next = s.next_run.as_ref()?.0.as_nanosecond();
            (next - tick(&first)? >= 6_000_000_000).then_some(s)
        }
    })
    .await;
    assert_eq!(
        ticks_later.last_run_name, first,
        "Forbid started nothing while a run was active"
    );
    assert_eq!(runs(&apps, "forbid").await.len(), 1);

    // Replace, runs lasting 60 s: each tick deletes the active run and starts its own.
    schedules
        .create(&PostParams::default(), &kubeflow_example("replace", "Replace", "60s"))
        .await
        .expect("created");
    let first = until("replace's first run", || async {
        let s = schedules.get("replace").await.ok()?.status?;
        (!s.last_run_name.is_empty()).then_some(s.last_run_name)
    })
    .await;
    let second = until("a run replacing it", || {
        let first = first.clone();
        let schedules = schedules.clone();
        async move {
            let s = schedules.get("replace").await.ok()?.status?;
            (s.last_run_name != first).then_some(s.last_run_name)
        }
    })
    .await;
    until("the replaced run deleted", || {
        let apps = apps.clone();
        let first = first.clone();
        async move { apps.get(&first).await.is_err().then_some(()) }
    })
    .await;
    let live = runs(&apps, "replace")
        .await
        .into_iter()
        .filter(|(_, _, a)| a.metadata.deletion_timestamp.is_none() && !state(a).is_terminal())
        .count();
    assert!(
        live <= 1,
        "Replace keeps one run at a time, {live} live (second: {second})"
    );
}
