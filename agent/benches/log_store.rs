//! The log store's cost of copying while it holds many finished containers: the followers' CPU per poll,
//! with `held` finished containers kept (a node's week of executors) and `running` containers
//! writing a line every few milliseconds.
//!
//! ```text
//! cargo bench -p spark-operator-agent --bench log_store
//! LOG_BENCH_HELD=100000 LOG_BENCH_RUNNING=50 LOG_BENCH_SECONDS=10 cargo bench -p spark-operator-agent --bench log_store
//! ```
//!
//! Prints the followers' CPU time (their threads' own, from `/proc/self/task/*/schedstat`) and that time per
//! poll (every poll while lines are written finds some; the last few, as the copies catch up, do not).
//! Every line written is checked to have been copied.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)] // a bench: a panic is a failed run

use std::io::Write as _;
use std::path::Path;
use std::time::{Duration, Instant};

use spark_operator_agent::identity::SparkContainer;
use spark_operator_agent::logs::layout::{self, ContainerMeta};
use spark_operator_agent::logs::{LogArgs, LogSource, LogStore};
use spark_operator_api::labels::SparkRole;

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn container(app: &str, pod: &str, id: &str) -> SparkContainer {
    SparkContainer {
        namespace: "bench".into(),
        app_name: app.into(),
        submission_id: "s".into(),
        spark_app_id: Some("spark-1".into()),
        pod_name: pod.into(),
        pod_uid: "uid".into(),
        role: SparkRole::Executor,
        executor_id: Some(1),
        container_name: "spark-kubernetes-executor".into(),
        container_id: id.into(),
        attempt: 0,
    }
}

/// `held` finished containers in the store's directory, 20 to an application, 16 lines (1.3 KiB) of log each.
fn fill(store_dir: &Path, held: u64) {
    let log = "2026-01-01T00:00:00.000000000Z stdout F an executor's line of about sixty bytes.....\n".repeat(16);
    for i in 0..held {
        let app = format!("done-{}", i / 20);
        let id = format!("held{i:08}");
        let mut meta = ContainerMeta::new(
            &container(&app, &format!("{app}-exec-{i}"), &id),
            "node",
            Path::new("/gone"),
            1,
            1,
        );
        meta.finished_at = Some(jiff::Timestamp::now().as_nanosecond() as i64);
        let dir = store_dir.join(meta.relative_dir().unwrap());
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(meta.log_file_name()), &log).unwrap();
        layout::write_meta(&dir, &meta).unwrap();
    }
}

/// Nanoseconds on CPU of this process's log follower threads (named `log-<container id>`).
fn followers_cpu_nanos() -> u64 {
    let mut total = 0;
    for task in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
        let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        if !comm.starts_with("log-run") {
            continue;
        }
        let schedstat = std::fs::read_to_string(task.path().join("schedstat")).unwrap_or_default();
        total += schedstat
            .split_whitespace()
            .next()
            .and_then(|n| n.parse::<u64>().ok())
            .unwrap_or(0);
    }
    total
}

fn main() {
    let held = env("LOG_BENCH_HELD", 20_000);
    let running = env("LOG_BENCH_RUNNING", 50);
    let seconds = env("LOG_BENCH_SECONDS", 10);
    let dir = tempfile::tempdir().unwrap();
    let store_dir = dir.path().join("store");
    let started = Instant::now();
    fill(&store_dir, held);
    println!(
        "filled the store with {held} finished containers in {:.1?}",
        started.elapsed()
    );

    let args = LogArgs {
        log_store_dir: store_dir,
        ..LogArgs::default()
    };
    let opened = Instant::now();
    let store = LogStore::open(&args, "node").unwrap();
    println!("opened the store in {:.1?}", opened.elapsed());

    let sources: Vec<_> = (0..running)
        .map(|i| {
            let path = dir.path().join(format!("pods/bench_run-{i}_uid/spark/0.log"));
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, "").unwrap();
            store.container_started(LogSource {
                container: container("running", &format!("run-{i}"), &format!("run{i:08}")),
                log_path: path.clone(),
                started_at: 1,
            });
            std::fs::OpenOptions::new().append(true).open(path).unwrap()
        })
        .collect();

    // Every source gets a line every 10 ms, so each of a follower's polls (every 250 ms) finds some.
    let cpu_before = followers_cpu_nanos();
    let window = Instant::now();
    let mut lines = 0u64;
    let mut sources = sources;
    while window.elapsed() < Duration::from_secs(seconds) {
        for (i, source) in sources.iter_mut().enumerate() {
            writeln!(
                source,
                "2026-01-01T00:00:00.000000000Z stdout F line {lines} of run-{i}"
            )
            .unwrap();
        }
        lines += 1;
        std::thread::sleep(Duration::from_millis(10));
    }
    // Let the last polls copy what was written, then read the followers' time.
    std::thread::sleep(args.log_poll_interval * 3);
    let cpu = Duration::from_nanos(followers_cpu_nanos() - cpu_before);
    let elapsed = window.elapsed();

    for i in 0..running {
        let copy = store.copy_of("bench", "running", &format!("run{i:08}")).unwrap().0;
        let copied = std::fs::read_to_string(copy).unwrap().lines().count() as u64;
        assert_eq!(copied, lines, "run-{i}: every line copied");
    }
    let polls = (elapsed.as_secs_f64() / args.log_poll_interval.as_secs_f64()) * running as f64;
    println!(
        "held {held}, running {running}, {lines} lines each over {elapsed:.1?}: followers' CPU {:.1} ms ({:.1} % of a core), {:.1} µs per poll",
        cpu.as_secs_f64() * 1e3,
        cpu.as_secs_f64() / elapsed.as_secs_f64() * 100.0,
        cpu.as_secs_f64() * 1e6 / polls,
    );
    store.close();
}
