//! Benchmark (not a test): CPU per submission and submissions per minute of the controller against
//! the simulated cluster, side by side with Spark's own `spark-submit` through the same cluster when
//! `SPARK_HOME` is set. `cargo bench -p spark-operator-e2e --bench submissions`
//! (`SPARK_BENCH_APPS`, default 1000; `SPARK_BENCH_SPARK_SUBMITS`, default 5).
//!
//! The cluster has no nodes, so drivers stay Pending: what is measured is submission alone, from
//! the SparkApplication's creation to its driver pod, ConfigMaps and Service existing and the status
//! saying SUBMITTED. The controller runs on its own threads; their CPU time (from /proc) is the figure,
//! the API server's is not counted. spark-submit's figure is the CPU time of its JVM (bash's `times`
//! for its children), one submission after the other, as Kubeflow runs one JVM per application.

use std::time::{Duration, Instant};

use futures::StreamExt;
use spark_operator_api::ApplicationStateType as S;
use spark_operator_e2e::{CONTROLLER_THREAD, Cluster, ClusterOptions, Poll, app_yaml, cpu_ticks, poll};

/// CPU time of the controller's threads (Linux: utime + stime of /proc/self/task/*/stat).
fn controller_cpu() -> Duration {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return Duration::ZERO;
    };
    // Clock ticks per second: 100 on Linux.
    let ticks: u64 = tasks
        .flatten()
        .filter(|task| {
            std::fs::read_to_string(task.path().join("comm")).is_ok_and(|c| c.trim().starts_with(CONTROLLER_THREAD))
        })
        .filter_map(|task| std::fs::read_to_string(task.path().join("stat")).ok())
        .filter_map(|stat| cpu_ticks(&stat))
        .sum();
    Duration::from_millis(ticks * 10)
}

async fn submitted(cluster: &Cluster) -> usize {
    cluster
        .all_apps("default")
        .await
        .values()
        .filter(|a| a.state() == S::Submitted)
        .count()
}

fn main() {
    let apps: usize = std::env::var("SPARK_BENCH_APPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("a runtime: {e}"));
    runtime.block_on(async {
        let cluster = Cluster::start(ClusterOptions {
            nodes: 0,
            ..ClusterOptions::default()
        })
        .await;
        let _controller = cluster.controller(cluster.args(&["--driver-finalizer=true"]));
        // Warm up: caches synced, connections open.
        cluster.create_app(&app_yaml("warm-up", "1s", 0, 1, "")).await;
        cluster
            .wait_app("default", "warm-up", Duration::from_secs(60), |a| {
                a.state() == S::Submitted
            })
            .await;

        let cpu_before = controller_cpu();
        let started = Instant::now();
        futures::stream::iter(0..apps)
            .for_each_concurrent(32, |i| {
                let cluster = &cluster;
                async move {
                    cluster
                        .create_app(&app_yaml(&format!("bench-{i}"), "1s", 0, 1, ""))
                        .await;
                }
            })
            .await;
        let total = apps + 1;
        poll(Duration::from_secs(600), || async {
            let n = submitted(&cluster).await;
            if n >= total { Poll::Done(()) } else { Poll::Pending(n) }
        })
        .await
        .unwrap_or_else(|n| panic!("only {n} of {total} applications were submitted"));
        let wall = started.elapsed();
        let cpu = controller_cpu().saturating_sub(cpu_before);
        let per_minute = apps as f64 / wall.as_secs_f64() * 60.0;
        let cpu_ms = cpu.as_secs_f64() * 1000.0 / apps as f64;
        println!(
            "operator: {apps} submissions, {per_minute:.0} submissions/min, controller CPU {cpu_ms:.2} ms per \
             submission ({:.1} s CPU over {:.1} s)",
            cpu.as_secs_f64(),
            wall.as_secs_f64(),
        );

        match std::env::var_os("SPARK_HOME") {
            None => {
                println!("spark-submit: skipped (set SPARK_HOME, see ../shared/tools/spark-submit-oracle/get-spark.sh)")
            }
            Some(home) => {
                let runs: usize = std::env::var("SPARK_BENCH_SPARK_SUBMITS")
                    .ok()
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(5);
                let (wall, cpu) = spark_submits(&cluster, std::path::Path::new(&home), runs).await;
                let per_minute_jvm = runs as f64 / wall.as_secs_f64() * 60.0;
                let cpu_ms_jvm = cpu.as_secs_f64() * 1000.0 / runs as f64;
                println!(
                    "spark-submit: {runs} submissions one after the other, {per_minute_jvm:.0} submissions/min, \
                     {cpu_ms_jvm:.0} ms CPU per submission ({:.1} s wall each)",
                    wall.as_secs_f64() / runs as f64
                );
                println!(
                    "ratio: the operator uses {:.0}x less CPU per submission and submits {:.0}x faster",
                    cpu_ms_jvm / cpu_ms,
                    per_minute / per_minute_jvm
                );
            }
        }
    });
}

/// Runs `runs` cluster-mode SparkPi submissions through Spark's own spark-submit against the same
/// cluster, one after the other: (wall time, CPU time of the JVMs).
async fn spark_submits(cluster: &Cluster, spark_home: &std::path::Path, runs: usize) -> (Duration, Duration) {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("a temporary directory: {e}"));
    let ca = dir.path().join("ca.crt");
    std::fs::write(&ca, &cluster.sim.pki().ca_cert_pem).unwrap_or_else(|e| panic!("writing the CA: {e}"));
    let submit = spark_home.join("bin/spark-submit");
    let mut script = String::new();
    for i in 0..runs {
        let confs = [
            "spark.kubernetes.submission.waitAppCompletion=false".to_owned(),
            "spark.kubernetes.namespace=default".to_owned(),
            "spark.kubernetes.container.image=spark:4.0.0".to_owned(),
            format!("spark.kubernetes.driver.pod.name=jvm-{i}-driver"),
            format!("spark.app.name=jvm-{i}"),
            "spark.kubernetes.authenticate.driver.serviceAccountName=default".to_owned(),
            "spark.executor.instances=1".to_owned(),
            format!("spark.kubernetes.authenticate.submission.caCertFile={}", ca.display()),
            format!(
                "spark.kubernetes.authenticate.submission.oauthToken={}",
                cluster.sim.token()
            ),
        ];
        script.push_str(&format!(
            "'{}' --master 'k8s://{}' --deploy-mode cluster --class org.apache.spark.examples.SparkPi {} \
             local:///opt/spark/examples/jars/spark-examples.jar 1000 >/dev/null 2>&1 || echo FAILED {i} >&2\n",
            submit.display(),
            cluster.sim.url(),
            confs
                .iter()
                .map(|c| format!("--conf '{c}'"))
                .collect::<Vec<_>>()
                .join(" "),
        ));
    }
    // bash's `times`: the second line is the user and system CPU time of the shell's children.
    script.push_str("times\n");
    let started = Instant::now();
    let output = tokio::process::Command::new("bash")
        .arg("-c")
        .arg(&script)
        .env("SPARK_HOME", spark_home)
        .output()
        .await
        .unwrap_or_else(|e| panic!("running bash: {e}"));
    let wall = started.elapsed();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!stderr.contains("FAILED"), "spark-submit failed: {stderr}");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let children = stdout.lines().last().unwrap_or_default();
    let cpu = children.split_whitespace().map(bash_duration).sum();
    (wall, cpu)
}

/// `1m4.400s` as bash's `times` prints it.
fn bash_duration(text: &str) -> Duration {
    let (minutes, seconds) = text.trim_end_matches('s').split_once('m').unwrap_or(("0", "0"));
    let minutes: f64 = minutes.parse().unwrap_or(0.0);
    let seconds: f64 = seconds.parse().unwrap_or(0.0);
    Duration::from_secs_f64(minutes * 60.0 + seconds)
}
