//! Benchmark (not a test): container exit to persisted status through the node agents, at a steady rate
//! of executor terminations, and what one `spark-operator agent` process costs.
//! `cargo build --release -p spark-operator && cargo bench -p spark-operator-e2e --bench terminations`
//! (`SPARK_BENCH_TERMINATIONS`, default 3000; `SPARK_BENCH_RATE`, terminations per second, default 100).
//!
//! A 3-node simulated cluster, the operator (controller + report receiver) in this process, and one agent
//! per node: node 1's is the release binary as its own process (when built; its CPU and peak memory are
//! read from /proc), the others run in this process. One application churns executors under dynamic
//! allocation at the given rate, each living a second. The latency of one termination is from its
//! container's `finished_at` (the runtime's clock, read from the node's CRI event stream by this bench) to
//! the moment this bench's watch of the SparkApplication first sees the report in its status (the
//! receiver's write; the watch's own delivery is included).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use kube::runtime::{WatchStreamExt, watcher};
use spark_operator_api::status::ExecutorCounts;
use spark_operator_dev::agents::{AGENT_NAMESPACE, AgentSetup, prepare_agent};
use spark_operator_e2e::{Cluster, ClusterOptions, app_yaml, cpu_ticks, free_port, state};
use spark_operator_proto::cri::v1::{ContainerEventType, GetEventsRequest};

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn now_ns() -> i64 {
    i64::try_from(jiff::Timestamp::now().as_nanosecond()).unwrap_or(i64::MAX)
}

/// Finish times of every container that stopped on the node, by container id.
async fn follow_exits(socket: std::path::PathBuf, exits: Arc<Mutex<HashMap<String, i64>>>) {
    let Ok(mut client) = spark_operator_proto::unix::connect_runtime_service(&socket).await else {
        return eprintln!("cannot connect to {}", socket.display());
    };
    let Ok(stream) = client.get_container_events(GetEventsRequest::default()).await else {
        return eprintln!("no events from {}", socket.display());
    };
    let mut stream = stream.into_inner();
    while let Ok(Some(event)) = stream.message().await {
        if event.container_event_type != ContainerEventType::ContainerStoppedEvent as i32 {
            continue;
        }
        if let Some(status) = event.containers_statuses.iter().find(|c| c.id == event.container_id) {
            exits
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(status.id.clone(), status.finished_at);
        }
    }
}

/// (utime + stime, peak resident memory) of a process, from /proc.
fn process_usage(pid: u32) -> Option<(Duration, u64)> {
    let ticks = cpu_ticks(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)?;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let peak_kib = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse::<u64>()
        .ok()?;
    Some((Duration::from_millis(ticks * 10), peak_kib * 1024))
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((p / 100.0) * (sorted.len() - 1) as f64).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

fn main() {
    let total = env_or("SPARK_BENCH_TERMINATIONS", 3000);
    let rate = env_or("SPARK_BENCH_RATE", 100);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("a runtime: {e}"));
    runtime.block_on(async {
        let cluster = Cluster::start(ClusterOptions {
            normal_events: false,
            ..ClusterOptions::big()
        })
        .await;
        let operator = cluster.operator(cluster.args(&[])).await;
        let exits: Arc<Mutex<HashMap<String, i64>>> = Arc::default();
        for node in cluster.sim.nodes().nodes() {
            tokio::spawn(follow_exits(node.cri_socket(), exits.clone()));
        }

        // Node 1's agent as its own process (the release binary), the others in this process.
        let binary = std::env::current_exe()
            .ok()
            .and_then(|exe| Some(exe.parent()?.parent()?.join("spark-operator")))
            .filter(|path| path.exists());
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("a temporary directory: {e}"));
        let mut agents = Vec::new();
        let mut process = None;
        for name in cluster.sim.nodes().node_names() {
            match (&binary, name.as_str()) {
                (Some(binary), "sim-node-1") => {
                    let node = cluster.sim.nodes().node(&name).unwrap_or_else(|| panic!("node {name}"));
                    let report_address = format!("https://127.0.0.1:{}", operator.reports_port);
                    let flags = prepare_agent(
                        &cluster.client,
                        AgentSetup {
                            node: &node,
                            dir: dir.path(),
                            report_address: &report_address,
                            ca_config_map: (AGENT_NAMESPACE, "spark-operator-ca"),
                        },
                    )
                    .await
                    .unwrap_or_else(|e| panic!("the agent's setup: {e}"));
                    let child = std::process::Command::new(binary)
                        .arg("agent")
                        .arg(format!("--kubeconfig={}", cluster.sim.kubeconfig_path().display()))
                        .arg(format!("--metrics-address=127.0.0.1:{}", free_port()))
                        .args(flags)
                        .env("RUST_LOG", "warn")
                        .spawn()
                        .unwrap_or_else(|e| panic!("starting {}: {e}", binary.display()));
                    process = Some(child);
                }
                _ => agents.push(cluster.agent(&name, &operator, &[]).await),
            }
        }
        if process.is_none() {
            println!("agent process: not measured (build it first: cargo build --release -p spark-operator)");
        }

        // Each status version the API server stores, as a watch sees it.
        let seen_at: Arc<Mutex<HashMap<String, i64>>> = Arc::default();
        // The application's last status: its executor counts and the reports still uncounted.
        let last: Arc<Mutex<Option<(ExecutorCounts, usize)>>> = Arc::default();
        let watch = tokio::spawn({
            let (apps, seen_at, last) = (cluster.apps("default"), seen_at.clone(), last.clone());
            async move {
                let config = watcher::Config::default().fields("metadata.name=terminations");
                let mut stream = std::pin::pin!(watcher(apps, config).applied_objects());
                while let Some(Ok(app)) = stream.next().await {
                    let now = now_ns();
                    let status = app.status.clone().unwrap_or_default();
                    let mut seen = seen_at.lock().unwrap_or_else(|e| e.into_inner());
                    for report in &status.uncounted_executor_terminations {
                        if let Some(id) = &report.container_id {
                            seen.entry(id.clone()).or_insert(now);
                        }
                    }
                    *last.lock().unwrap_or_else(|e| e.into_inner()) = Some((
                        status.executor_counts.clone().unwrap_or_default(),
                        status.uncounted_executor_terminations.len(),
                    ));
                    if state(&app).is_terminal() {
                        break;
                    }
                }
            }
        });

        let spec = "  dynamicAllocation:\n    enabled: true\n    initialExecutors: 0\n    minExecutors: 0\n    maxExecutors: 500\n";
        let yaml = app_yaml("terminations", "0s", 0, 1, spec).replace(
            "      sim.spark-operator.dev/exit-code: \"0\"",
            &format!(
                "      sim.spark-operator.dev/exit-code: \"0\"\n      sim.spark-operator.dev/churn-executors: \"{total}\"\n      sim.spark-operator.dev/churn-rate: \"{rate}\"\n      sim.spark-operator.dev/executor-lifetime: \"1s\""
            ),
        );
        let cpu_before = process.as_ref().and_then(|c| process_usage(c.id())).map(|u| u.0);
        let bench_cpu_before = process_usage(std::process::id()).map(|u| u.0);
        let started = Instant::now();
        cluster.create_app(&yaml).await;
        let limit = Duration::from_secs(total / rate.max(1) * 3 + 120);
        let _ = tokio::time::timeout(limit, watch).await;
        let wall = started.elapsed();
        let usage = process.as_ref().and_then(|c| process_usage(c.id()));
        let bench_cpu = process_usage(std::process::id()).map(|u| u.0);

        let exits = exits.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let seen_at = seen_at.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let mut latencies: Vec<f64> = seen_at
            .iter()
            .filter_map(|(id, seen)| Some((seen - exits.get(id)?) as f64 / 1e6))
            .collect();
        latencies.sort_by(f64::total_cmp);
        println!(
            "{} of {total} executor terminations seen in status at {rate}/s over {:.1} s: container exit to \
             persisted status p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
            latencies.len(),
            wall.as_secs_f64(),
            percentile(&latencies, 50.0),
            percentile(&latencies, 99.0),
            latencies.last().copied().unwrap_or(f64::NAN),
        );
        // An end the leader's pod watch counted before its agent's report came is not in the latencies
        // (the report is then a duplicate and changes nothing): the counts show none is lost.
        if let Some((counts, uncounted)) = last.lock().unwrap_or_else(|e| e.into_inner()).clone() {
            println!(
                "the application's last status: {} executors counted (completed {}, failed {}, unknown {}), \
                 {uncounted} reports not counted yet",
                counts.total(),
                counts.completed,
                counts.failed,
                counts.unknown
            );
        }
        if let (Some((cpu, peak)), Some(before)) = (usage, cpu_before) {
            let cpu = cpu.saturating_sub(before);
            let node_share = latencies.len() as f64 / 3.0;
            println!(
                "agent process (node 1 of 3, about {node_share:.0} terminations): {:.2} s CPU over {:.1} s ({:.1} % of a core, \
                 {:.2} ms per termination), peak resident memory {:.1} MiB",
                cpu.as_secs_f64(),
                wall.as_secs_f64(),
                cpu.as_secs_f64() / wall.as_secs_f64() * 100.0,
                cpu.as_secs_f64() * 1000.0 / node_share.max(1.0),
                peak as f64 / (1024.0 * 1024.0),
            );
        }
        // Latency here is mostly queueing when this process (the sim with its kubelets churning pods,
        // the operator, two agents) saturates the machine: said next to the figures.
        if let (Some(after), Some(before)) = (bench_cpu, bench_cpu_before) {
            let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
            let busy = after.saturating_sub(before).as_secs_f64() / wall.as_secs_f64();
            println!(
                "this process (the simulated cluster, the operator, two agents): {:.0} % of a core over the run, \
                 the machine has {cores}",
                busy * 100.0
            );
        }
        if let Some(mut child) = process {
            let _ = child.kill();
            let _ = child.wait();
        }
        drop(agents);
    });
}
