//! A burst of applications beyond the cluster's capacity, as a nightly batch lands: each application's
//! driver takes a CPU, and its executors need more than what is left once every driver has one.
//!
//! - With `batchScheduler: volcano` and the sim's gang admission, every application COMPLETES: a group is
//!   admitted only when its driver and executors fit together.
//! - The same burst with gang admission switched off (pods placed one by one) deadlocks: drivers hold
//!   every CPU while their executors wait. Proof the first test can fail.
//! - Without a batch scheduler, watched until every application is COMPLETED or says why it waits
//!   (`WaitingForCapacity`, `ExecutorsStarved`): none FAILED for capacity (Kubeflow fails most of them).
//!
//! 60 applications on 3 four-CPU nodes in CI; `SPARK_E2E_FULL=1` runs 500.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use spark_operator_api::ApplicationStateType as S;
use spark_operator_api::SparkApplication;
use spark_operator_e2e::{Cluster, ClusterOptions, app_yaml, state};

fn burst_size() -> usize {
    if std::env::var("SPARK_E2E_FULL").is_ok_and(|v| v == "1") {
        500
    } else {
        60
    }
}

fn small_nodes(volcano: kube_sim::node::Volcano) -> ClusterOptions {
    ClusterOptions {
        nodes: 3,
        node_cpu: "4".into(),
        node_memory: "64Gi".into(),
        node_pods: 110,
        normal_events: false,
        volcano,
        ..ClusterOptions::default()
    }
}

/// One application of the burst: a driver of 1 CPU running `run_time` once its two 1-CPU executors run.
fn burst_app(i: usize, batch_scheduler: Option<&str>) -> String {
    let extra = batch_scheduler.map_or(String::new(), |s| format!("  batchScheduler: {s}\n"));
    app_yaml(&format!("burst-{i:03}"), "1s", 0, 2, &extra)
}

async fn submit_burst(cluster: &Cluster, batch_scheduler: Option<&str>) -> usize {
    let count = burst_size();
    for i in 0..count {
        cluster.create_app(&burst_app(i, batch_scheduler)).await;
    }
    count
}

fn condition<'a>(
    app: &'a SparkApplication,
    type_: &str,
) -> Option<&'a k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition> {
    app.status.as_ref()?.conditions.iter().find(|c| c.type_ == type_)
}

/// How the burst stands: applications by state.
fn tally(apps: &BTreeMap<String, SparkApplication>) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for app in apps.values() {
        *out.entry(state(app).to_string()).or_default() += 1;
    }
    out
}

/// Waits until `done` holds for every application, or until nothing has changed for `stall` (a
/// deadlock); returns the last applications and whether they all got there.
async fn watch(
    cluster: &Cluster,
    count: usize,
    stall: Duration,
    limit: Duration,
    done: impl Fn(&SparkApplication) -> bool,
) -> (BTreeMap<String, SparkApplication>, bool) {
    let started = Instant::now();
    let mut last_change = Instant::now();
    let mut last_tally = BTreeMap::new();
    loop {
        let apps = cluster.all_apps("default").await;
        if apps.len() == count && apps.values().all(&done) {
            return (apps, true);
        }
        let now_tally = tally(&apps);
        if now_tally != last_tally {
            eprintln!("burst after {:?}: {now_tally:?}", started.elapsed());
            last_tally = now_tally;
            last_change = Instant::now();
        }
        if last_change.elapsed() >= stall || started.elapsed() >= limit {
            return (apps, false);
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_beyond_capacity_completes_with_volcano_gang_admission() {
    let cluster = Cluster::start(small_nodes(kube_sim::node::Volcano::Gang)).await;
    let _controller = cluster.controller(cluster.args(&["--enable-batch-scheduler"]));
    let count = submit_burst(&cluster, Some("volcano")).await;
    let limit = Duration::from_secs(if count > 100 { 1800 } else { 420 });
    let (apps, all) = watch(&cluster, count, Duration::from_secs(90), limit, |a| {
        state(a) == S::Completed
    })
    .await;
    assert!(all, "not every application completed: {:?}", tally(&apps));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_burst_deadlocks_without_gang_admission() {
    let cluster = Cluster::start(small_nodes(kube_sim::node::Volcano::NoGang)).await;
    let _controller = cluster.controller(cluster.args(&["--enable-batch-scheduler"]));
    let count = submit_burst(&cluster, Some("volcano")).await;
    let (apps, all) = watch(
        &cluster,
        count,
        Duration::from_secs(30),
        Duration::from_secs(300),
        |a| state(a) == S::Completed,
    )
    .await;
    assert!(
        !all,
        "the burst completed without gang admission: the test above proves nothing"
    );
    // Deadlocked: drivers running whose executors cannot be placed, nothing finishing.
    let running = apps.values().filter(|a| state(a) == S::Running).count();
    assert!(running >= 4, "drivers hold the CPUs: {:?}", tally(&apps));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_batch_scheduler_no_application_fails_for_capacity() {
    let cluster = Cluster::start(small_nodes(kube_sim::node::Volcano::Off)).await;
    // A short starvation threshold, so the deadlocked drivers say so within the test.
    let _controller = cluster.controller(cluster.args(&["--executor-starvation-threshold=5"]));
    let count = submit_burst(&cluster, None).await;
    let explained = |a: &SparkApplication| {
        state(a) == S::Completed
            || condition(a, "DriverScheduled").is_some_and(|c| c.status == "False" && c.reason == "WaitingForCapacity")
            || condition(a, "ExecutorsStarved").is_some_and(|c| c.status == "True")
    };
    let (apps, all) = watch(
        &cluster,
        count,
        Duration::from_secs(60),
        Duration::from_secs(600),
        |a| explained(a) || state(a) == S::Failed,
    )
    .await;
    let failed: Vec<_> = apps
        .iter()
        .filter(|(_, a)| state(a) == S::Failed)
        .map(|(name, a)| {
            (
                name.clone(),
                a.status.clone().unwrap_or_default().application_state.error_message,
            )
        })
        .collect();
    assert!(failed.is_empty(), "applications FAILED: {failed:#?}");
    assert!(
        all,
        "some application neither completed nor said why it waits: {:?}",
        tally(&apps)
    );
    let starved = apps
        .values()
        .filter(|a| condition(a, "ExecutorsStarved").is_some())
        .count();
    let waiting = apps
        .values()
        .filter(|a| condition(a, "DriverScheduled").is_some_and(|c| c.reason == "WaitingForCapacity"))
        .count();
    eprintln!(
        "{:?}; ExecutorsStarved {starved}, WaitingForCapacity {waiting}",
        tally(&apps)
    );
    assert!(
        waiting > 0,
        "the burst was beyond capacity: some driver waited for room"
    );
    assert!(
        starved > 0,
        "drivers that took the room their executors need say so (ExecutorsStarved)"
    );
    let message = apps
        .values()
        .find_map(|a| condition(a, "ExecutorsStarved").map(|c| c.message.clone()))
        .unwrap_or_default();
    assert!(
        message.contains("spec.batchScheduler"),
        "points to gang scheduling: {message}"
    );
}
