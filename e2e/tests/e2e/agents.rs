//! The node agents' path (docs/agent.md): every Spark container's end reaches the status through the
//! agent on its node, when the controller's own pod watch cannot see any termination (a sim fault that
//! hides them from the operator's requests: get, list and watch alike), pods are deleted the instant they
//! finish, agents and the controller are killed, and status writes fail for a while. The same runs with
//! the agents stopped end in wrong states: proof the tests can fail.

use std::collections::BTreeMap;
use std::time::Duration;

use kube_sim::faults::{FaultAction, FaultRule};
use kube_sim::node::PodGc;
use spark_operator_api::state::TerminationObserver;
use spark_operator_api::{ApplicationStateType as S, SparkApplication};
use spark_operator_e2e::agents::Agent;
use spark_operator_e2e::{Cluster, ClusterOptions, Poll, app_yaml, poll, state};

/// The operator's identity, in the User-Agent of its requests: what the faults single out.
const BLIND: &str = "blind-operator";
const LIMIT: Duration = Duration::from_secs(300);

/// Applications in CI; `SPARK_E2E_FULL=1` runs the full size.
fn apps() -> usize {
    if std::env::var("SPARK_E2E_FULL").is_ok_and(|v| v == "1") {
        1000
    } else {
        100
    }
}

/// What application `i` does: its driver's exit code, and whether its executor 1 fails (exit 3).
fn script(i: usize) -> (i32, bool) {
    (if i % 5 == 4 { 1 } else { 0 }, i % 4 == 1)
}

fn yaml(name: &str, i: usize, run_time: &str) -> String {
    let (exit_code, executor_fails) = script(i);
    // Spark replaces a failed executor: the replacement needs time to start before the driver ends and
    // deletes it, or it never runs and is rightly counted UNKNOWN (no container, no exit).
    let run_time = if executor_fails { "4s" } else { run_time };
    let failing = if executor_fails {
        "    annotations:\n      sim.spark-operator.dev/exec-1.run-time: \"100ms\"\n      sim.spark-operator.dev/exec-1.exit-code: \"3\"\n"
    } else {
        ""
    };
    app_yaml(name, run_time, exit_code, 2, "").replacen("  executor:\n", &format!("  executor:\n{failing}"), 1)
}

/// A blind operator: pods never show it a termination, and they are deleted the moment they finish.
async fn blind_cluster() -> Cluster {
    let cluster = Cluster::start(ClusterOptions {
        pod_gc: PodGc::Instant,
        normal_events: false,
        ..ClusterOptions::big()
    })
    .await;
    cluster.sim.faults().hide_terminations(format!("({BLIND})"));
    cluster
}

fn operator_flags(cluster: &Cluster) -> spark_operator_e2e::ControllerFlags {
    cluster.args(&[&format!("--identity={BLIND}")])
}

/// Waits until every application is terminal and nothing is left to record: no agent holds a report
/// and no status an uncounted one (an application may end before its executors' reports are counted),
/// continuously for `quiet` (longer than an agent takes to find an end no event told it of: a relist or a
/// poll). Returns the applications by name.
async fn settled_for(
    cluster: &Cluster,
    count: usize,
    agents: &[Agent],
    quiet: Duration,
) -> BTreeMap<String, SparkApplication> {
    let since = std::cell::Cell::new(None::<tokio::time::Instant>);
    poll(LIMIT, || async {
        let apps = cluster.all_apps("default").await;
        let done = apps.values().filter(|a| state(a).is_terminal()).count();
        let uncounted: usize = apps
            .values()
            .filter_map(|a| a.status.as_ref())
            .map(|s| s.uncounted_executor_terminations.len())
            .sum();
        let mut spooled = 0.0;
        for agent in agents {
            spooled += agent.metric("spark_operator_agent_spool_records").await;
        }
        if done == count && uncounted == 0 && spooled == 0.0 {
            let start = since.get().unwrap_or_else(tokio::time::Instant::now);
            since.set(Some(start));
            if start.elapsed() >= quiet {
                return Poll::Done(apps);
            }
        } else {
            since.set(None);
        }
        Poll::Pending((done, uncounted, spooled))
    })
    .await
    .unwrap_or_else(|(done, uncounted, spooled)| {
        panic!("{done} of {count} applications ended; {uncounted} reports uncounted, {spooled} spooled")
    })
}

/// [`settled_for`] where every end reaches its agent as an event.
async fn settled(cluster: &Cluster, count: usize, agents: &[Agent]) -> BTreeMap<String, SparkApplication> {
    settled_for(cluster, count, agents, Duration::ZERO).await
}

/// What is wrong with application `i`'s end, if anything: its state, the driver's recorded exit code and
/// observer, the executors' counts and failures.
fn wrong(name: &str, i: usize, app: &SparkApplication, executors_per_app: Option<i64>) -> Option<String> {
    let (exit_code, executor_fails) = script(i);
    let status = app.status.clone().unwrap_or_default();
    let expected = if exit_code == 0 { S::Completed } else { S::Failed };
    let mut problems = Vec::new();
    if state(app) != expected {
        problems.push(format!(
            "{:?} instead of {expected:?} ({})",
            state(app),
            status.application_state.error_message
        ));
    }
    match &status.driver_termination {
        Some(t) if t.exit_code == Some(exit_code) && t.observed_by == Some(TerminationObserver::Agent) => {}
        other => problems.push(format!("driver termination {other:?}")),
    }
    let counts = status.executor_counts.clone().unwrap_or_default();
    let failed = i64::from(executor_fails);
    if counts.unknown != 0 || counts.failed != failed || counts.completed < 1 || counts.pending + counts.running != 0 {
        problems.push(format!(
            "executor counts {counts:?}, uncounted reports {:?}",
            status
                .uncounted_executor_terminations
                .iter()
                .map(|t| (&t.pod_name, t.exit_code))
                .collect::<Vec<_>>()
        ));
    }
    if let Some(total) = executors_per_app
        && counts.total() != total
    {
        problems.push(format!("{} executors counted, {total} ran", counts.total()));
    }
    if executor_fails
        && !status
            .recent_executor_failures
            .iter()
            .any(|f| f.executor_id == Some(1) && f.exit_code == Some(3))
    {
        problems.push(format!(
            "executor 1's exit 3 missing: {:?}",
            status.recent_executor_failures
        ));
    }
    (!problems.is_empty()).then(|| format!("{name}: {}", problems.join("; ")))
}

fn report(apps: &BTreeMap<String, SparkApplication>, executors_per_app: Option<i64>) -> Vec<String> {
    apps.iter()
        .filter_map(|(name, app)| {
            let i: usize = name.rsplit('-').next()?.parse().ok()?;
            wrong(name, i, app, executors_per_app)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agents_record_every_end_the_blind_pod_watch_cannot_see() {
    let count = apps();
    let cluster = blind_cluster().await;
    let operator = cluster.operator(operator_flags(&cluster)).await;
    let agents = cluster.agents(&operator).await;
    for i in 0..count {
        cluster.create_app(&yaml(&format!("blind-{i}"), i, "1s")).await;
    }
    let apps = settled(&cluster, count, &agents).await;
    let wrong = report(&apps, None);
    assert!(
        wrong.is_empty(),
        "{} of {count} wrong: {:#?}",
        wrong.len(),
        &wrong[..wrong.len().min(5)]
    );

    // Terminations travelled on the runtime's events: hardly any was first found by a relist (one whose
    // event was still queued behind a relist counts too), and relists stayed at their period's count.
    let (mut events, mut ends, mut repairs) = (0.0, 0.0, 0.0);
    for agent in &agents {
        events += agent.metric("spark_operator_agent_cri_events").await;
        ends += agent.metric("spark_operator_agent_containers_ended").await;
        repairs += agent.metric("spark_operator_agent_cri_repairs").await;
        let relists = agent.metric("spark_operator_agent_cri_relists").await;
        assert!(relists <= 10.0, "{}: {relists} relists", agent.node);
    }
    assert!(events > 0.0 && ends > 0.0);
    assert!(
        repairs * 100.0 <= ends,
        "{repairs} of {ends} ends found by relists, not events"
    );
    eprintln!(
        "{count} applications, every end recorded by the agents ({events} CRI events consumed, {ends} ends, {repairs} \
         found by relists)"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_agents_the_blind_pod_watch_ends_applications_wrongly() {
    let count = 10;
    let cluster = blind_cluster().await;
    let _operator = cluster.operator(operator_flags(&cluster)).await;
    for i in 0..count {
        cluster.create_app(&yaml(&format!("blind-{i}"), i, "1s")).await;
    }
    let apps = settled(&cluster, count, &[]).await;
    let wrong = report(&apps, None);
    eprintln!("without agents: {} of {count} applications ended wrongly", wrong.len());
    assert_eq!(wrong.len(), count, "every application should lack its ends: {wrong:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agents_and_the_controller_killed_meanwhile_lose_and_double_nothing() {
    let count = 30;
    let cluster = blind_cluster().await;
    let operator = cluster.operator(operator_flags(&cluster)).await;
    let agents = cluster.agents(&operator).await;
    // No executor fails here, so every application ran exactly two: a report counted twice shows.
    for i in 0..count {
        let name = format!("restart-{}", i * 20);
        cluster.create_app(&yaml(&name, i * 20, "3s")).await;
    }
    poll(LIMIT, || async {
        let apps = cluster.all_apps("default").await;
        // Running or already over: under load a short run can pass Running between two polls.
        let started = apps
            .values()
            .filter(|a| state(a) == S::Running || state(a).is_terminal())
            .count();
        if started * 2 >= count {
            Poll::Done(())
        } else {
            Poll::Pending(started)
        }
    })
    .await
    .unwrap_or_else(|started| panic!("only {started} applications started"));
    // Every agent goes for 5 s while drivers and executors exit; the operator is killed and restarted in
    // the middle of it.
    for agent in agents {
        agent.kill();
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    operator.kill();
    let operator = cluster.operator(operator_flags(&cluster)).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let agents = cluster.agents(&operator).await;
    let apps = settled(&cluster, count, &agents).await;
    let wrong = report(&apps, Some(2));
    assert!(
        wrong.is_empty(),
        "{} of {count} wrong: {:#?}",
        wrong.len(),
        &wrong[..wrong.len().min(5)]
    );
    let mut repairs = 0.0;
    for agent in &agents {
        repairs += agent.metric("spark_operator_agent_cri_repairs").await;
    }
    eprintln!("{count} applications right after the kills; {repairs} ends found by relists after the restart");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_status_write_leaves_the_report_spooled_until_it_is_recorded() {
    let count = 3;
    let cluster = blind_cluster().await;
    let operator = cluster.operator(operator_flags(&cluster)).await;
    let agents = cluster.agents(&operator).await;
    for i in 0..count {
        cluster
            // Long enough that every driver still runs when the writes start failing.
            .create_app(&yaml(&format!("spooled-{}", i * 20), i * 20, "10s"))
            .await;
    }
    poll(LIMIT, || async {
        let apps = cluster.all_apps("default").await;
        let running = apps.values().filter(|a| state(a) == S::Running).count();
        if running == count {
            Poll::Done(())
        } else {
            Poll::Pending(running)
        }
    })
    .await
    .unwrap_or_else(|running| panic!("only {running} applications running"));
    cluster.sim.faults().add(FaultRule {
        verb: Some("patch".into()),
        resource: Some("sparkapplications/status".into()),
        user_agent: Some(format!("({BLIND})")),
        action: FaultAction::Fail {
            code: 500,
            reason: "InternalError".into(),
            message: "etcdserver: request timed out".into(),
        },
        times: None,
    });
    // The drivers end; their reports are answered RETRY and stay spooled.
    let retried = poll(LIMIT, || async {
        let mut retries = 0.0;
        let mut depth = 0.0;
        for agent in &agents {
            retries += agent
                .metric("spark_operator_agent_report_acks{verdict=\"retry\"}")
                .await;
            depth += agent.metric("spark_operator_agent_spool_records").await;
        }
        if retries >= count as f64 && depth >= count as f64 {
            Poll::Done((retries, depth))
        } else {
            Poll::Pending((retries, depth))
        }
    })
    .await
    .unwrap_or_else(|seen| panic!("the reports were not retried and spooled: {seen:?}"));
    for app in cluster.all_apps("default").await.values() {
        let status = app.status.clone().unwrap_or_default();
        assert!(
            status.driver_termination.is_none(),
            "recorded while writes fail: {status:?}"
        );
    }
    cluster.sim.faults().clear();
    cluster.sim.faults().hide_terminations(format!("({BLIND})"));
    let apps = settled(&cluster, count, &agents).await;
    let wrong = report(&apps, Some(2));
    assert!(wrong.is_empty(), "{wrong:#?}");
    // `settled` waited for every agent's spool to empty: the reports retried were delivered.
    eprintln!("(retries, spooled) while writes failed: {retried:?}");
}

/// Application `i` of the runtime-faults run: its driver OOM-killed (`i % 3 == 0`), its executor 2
/// OOM-killed (`i % 3 == 1`), or nothing wrong.
fn faulty_yaml(i: usize) -> String {
    let name = format!("faults-{i}");
    match i % 3 {
        0 => app_yaml(&name, "2s", 0, 2, "").replacen(
            "      sim.spark-operator.dev/exit-code: \"0\"\n",
            "      sim.spark-operator.dev/exit-code: \"0\"\n      sim.spark-operator.dev/oom-kill: \"true\"\n",
            1,
        ),
        1 => app_yaml(&name, "4s", 0, 2, "").replacen(
            "  executor:\n",
            "  executor:\n    annotations:\n      sim.spark-operator.dev/exec-2.run-time: \"200ms\"\n      sim.spark-operator.dev/exec-2.oom-kill: \"true\"\n",
            1,
        ),
        _ => app_yaml(&name, "2s", 0, 2, ""),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runtimes_that_drop_reorder_delay_and_restart_still_report_every_end_right() {
    use spark_operator_proto::cri::v1::ContainerEventType;
    let count = 24;
    let cluster = Cluster::start(ClusterOptions {
        nodes: 4,
        pod_gc: PodGc::Instant,
        normal_events: false,
        ..ClusterOptions::big()
    })
    .await;
    cluster.sim.faults().hide_terminations(format!("({BLIND})"));
    let node = |n: usize| cluster.sim.nodes().node(&format!("sim-node-{n}")).unwrap();
    // Node 1 drops every STOPPED event (the exit is only found by a relist); node 2 sends STARTED after
    // STOPPED and sets OOMKilled a second late, without an event; node 3's runtime restarts mid-run;
    // node 4 sends no events at all (CRI-O's default).
    node(1)
        .cri_faults()
        .drop_events_of_type(ContainerEventType::ContainerStoppedEvent, None);
    node(2).cri_faults().hold_started_until_stopped(None);
    node(2).cri_faults().delay_oom_reason(Duration::from_secs(1));
    node(4).cri_faults().set_pod_events(false);
    let operator = cluster.operator(operator_flags(&cluster)).await;
    let mut agents = Vec::new();
    for n in 1..=4 {
        let name = format!("sim-node-{n}");
        agents.push(
            cluster
                .agent(&name, &operator, &["--relist-period=2s", "--oom-settle-delay=3s"])
                .await,
        );
    }
    for i in 0..count {
        cluster.create_app(&faulty_yaml(i)).await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    node(3).cri_faults().restart_runtime(Duration::from_secs(3));
    // Node 1 finds ends by relists (2 s), node 4 by polls (5 s).
    let apps = settled_for(&cluster, count, &agents, Duration::from_secs(7)).await;

    let mut wrong = Vec::new();
    for (name, app) in &apps {
        let i: usize = name.rsplit('-').next().and_then(|i| i.parse().ok()).unwrap();
        let status = app.status.clone().unwrap_or_default();
        let driver = status.driver_termination.clone().unwrap_or_default();
        let counts = status.executor_counts.clone().unwrap_or_default();
        let oom_executor = status
            .recent_executor_failures
            .iter()
            .any(|f| f.executor_id == Some(2) && f.exit_code == Some(137) && f.reason.as_deref() == Some("OOMKilled"));
        let right = driver.observed_by == Some(TerminationObserver::Agent)
            && counts.unknown == 0
            && match i % 3 {
                0 => {
                    state(app) == S::Failed
                        && driver.exit_code == Some(137)
                        && driver.reason.as_deref() == Some("OOMKilled")
                }
                1 => state(app) == S::Completed && counts.failed == 1 && oom_executor,
                _ => state(app) == S::Completed && counts.failed == 0,
            };
        if !right {
            wrong.push(format!(
                "{name}: {:?}, driver {:?}/{:?}/{:?}, executors {counts:?} {:?}, failures {:?}",
                state(app),
                driver.exit_code,
                driver.reason,
                driver.observed_by,
                status
                    .recent_executors
                    .values()
                    .map(|e| (e.executor_id, e.state, e.node_name.clone()))
                    .collect::<Vec<_>>(),
                status
                    .recent_executor_failures
                    .iter()
                    .map(|f| (f.executor_id, f.exit_code, f.reason.clone()))
                    .collect::<Vec<_>>()
            ));
        }
    }
    assert!(wrong.is_empty(), "{} of {count} wrong: {wrong:#?}", wrong.len());
    let dropping = agents[0].metric("spark_operator_agent_cri_repairs").await;
    let restarted = agents[2].metric("spark_operator_agent_cri_repairs").await;
    assert!(
        dropping > 0.0,
        "node 1's exits were found by relists and counted as repairs"
    );
    assert_eq!(
        agents[3].metric("spark_operator_agent_cri_polling").await,
        1.0,
        "node 4 polls"
    );
    eprintln!(
        "repairs: {dropping} on the node that drops STOPPED, {restarted} on the restarted one; OOM settles on node 2: {}",
        agents[1].metric("spark_operator_agent_cri_oom_settles").await
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_records_the_reports_it_receives() {
    use k8s_openapi::api::coordination::v1::Lease;
    let count = 10;
    let cluster = blind_cluster().await;
    // Both replicas are blind: only the agents' reports, which reach the standby alone, can end a run.
    cluster.sim.faults().hide_terminations("(blind-");
    let elected = |identity: &str| {
        cluster.args(&[
            "--leader-election=true",
            "--leader-election-lease-duration=3",
            "--leader-election-retry-period=1",
            &format!("--identity={identity}"),
        ])
    };
    let _leader = cluster.operator(elected("blind-leader")).await;
    let leases: kube::Api<Lease> = kube::Api::namespaced(cluster.client.clone(), "default");
    poll(LIMIT, || async {
        let holder = leases
            .get_opt("spark-operator-controller-lock")
            .await
            .ok()
            .flatten()
            .and_then(|l| l.spec?.holder_identity);
        if holder.as_deref() == Some("blind-leader") {
            Poll::Done(())
        } else {
            Poll::Pending(holder)
        }
    })
    .await
    .unwrap_or_else(|holder| panic!("the first replica did not lead (holder {holder:?})"));
    let standby = cluster.operator(elected("blind-standby")).await;
    let agents = cluster.agents(&standby).await;
    for i in 0..count {
        cluster.create_app(&yaml(&format!("standby-{i}"), i, "1s")).await;
    }
    let apps = settled(&cluster, count, &agents).await;
    let wrong = report(&apps, None);
    assert!(wrong.is_empty(), "{wrong:#?}");
    let holder = leases
        .get_opt("spark-operator-controller-lock")
        .await
        .unwrap()
        .and_then(|l| l.spec?.holder_identity);
    assert_eq!(holder.as_deref(), Some("blind-leader"), "the standby stayed a standby");
}
