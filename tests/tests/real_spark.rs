//! Real Spark in the simulated cluster: Kubeflow's `spark-pi-python.yaml` (Spark's own `pi.py`) runs
//! through the operator with Spark 4.3's own driver and executors as process pods, and reaches
//! COMPLETED with Spark's "Pi is roughly 3.1..." in the driver's log (within 0.05 of π).
//!
//! `apache/spark:4.3.0` (and `-python3`) is a directory local image built by
//! `sim/images/real-spark/build-image.sh` from pyspark 4.3.0's source package on PyPI (the full
//! distribution), with our own entrypoint (`sim/images/real-spark/entrypoint.sh`).
//!
//! Opt-in (needs root, Java 17, the distribution, ~1 GB of memory and a few CPU minutes):
//!
//! ```text
//! SPARK_HOME=$(/work/shared/tools/spark-submit-oracle/get-spark.sh)    # once: ~/.cache/spark-oracle/pyspark-4.3.0/deps
//! SPARK_E2E_REAL_SPARK=1 cargo test -p spark-operator-e2e --test real_spark -- --nocapture
//! ```
//!
//! `SPARK_E2E_SPARK_HOME_4` names another distribution directory (`pyspark-4.x/deps`). Without
//! `SPARK_E2E_REAL_SPARK=1` the test prints why it did not run (to stderr, uncaptured) and passes.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::io::Write as _;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, LogParams};
use kube_sim::node::LocalImage;
use spark_operator_api::ApplicationStateType;
use spark_operator_e2e::{Cluster, ClusterOptions, Poll, poll, state};

const ENV: &str = "SPARK_E2E_REAL_SPARK";
const HOME_ENV: &str = "SPARK_E2E_SPARK_HOME_4";
const LIMIT: Duration = Duration::from_secs(240);

fn spark_home() -> PathBuf {
    if let Some(home) = std::env::var_os(HOME_ENV) {
        return PathBuf::from(home);
    }
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .expect("HOME or XDG_CACHE_HOME");
    cache.join("spark-oracle/pyspark-4.3.0/deps")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spark_pi_python_completes_with_real_spark_4_3() {
    if std::env::var(ENV).as_deref() != Ok("1") {
        let _ = writeln!(
            std::io::stderr(),
            "SKIPPED real_spark: {ENV} is not 1. This opt-in test runs Spark 4.3's own driver and executors \
             (pyspark 4.3.0's distribution, Java 17, root); see the header of tests/tests/real_spark.rs"
        );
        return;
    }
    if let Err(reason) = kube_sim::node::sandbox::supported() {
        panic!("{ENV}=1 but process pods cannot run here: {reason}");
    }
    let home = spark_home();
    assert!(
        home.join("bin/spark-submit").is_file(),
        "{} has no bin/spark-submit: run /work/shared/tools/spark-submit-oracle/get-spark.sh (or set {HOME_ENV})",
        home.display()
    );
    // The machine-wide lock of every test that runs pods as processes.
    let lock = std::fs::File::create(std::env::temp_dir().join("kube-sim-process-pods.lock")).unwrap();
    lock.lock().unwrap();

    // The image: hard links into the distribution, next to it (same filesystem).
    let images = tempfile::tempdir_in(home.parent().unwrap()).unwrap();
    let image = images.path().join("spark-4.3.0");
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../sim/images/real-spark/build-image.sh");
    let built = std::process::Command::new(script)
        .arg(&home)
        .arg(&image)
        .output()
        .unwrap();
    assert!(built.status.success(), "{}", String::from_utf8_lossy(&built.stderr));

    let cluster = Cluster::start(ClusterOptions {
        nodes: 2,
        local_images: vec![
            LocalImage::new("apache/spark:4.3.0", &image),
            LocalImage::new("apache/spark:4.3.0-python3", &image),
        ],
        ..ClusterOptions::default()
    })
    .await;
    let _controller = cluster.controller(cluster.args(&[]));

    // Kubeflow's example, with the image and sparkVersion of the distribution we have.
    let yaml = include_str!("../fixtures/kubeflow-examples/spark-pi-python.yaml")
        .replace(
            "image: docker.io/apache/spark:4.0.4",
            "image: docker.io/apache/spark:4.3.0",
        )
        .replace("sparkVersion: 4.0.4", "sparkVersion: 4.3.0");
    assert!(yaml.contains("apache/spark:4.3.0") && yaml.contains("sparkVersion: 4.3.0"));
    let started = Instant::now();
    cluster.create_app(&yaml).await;
    let pods: Api<Pod> = Api::namespaced(cluster.client.clone(), "default");
    let apps = cluster.apps("default");
    // On a timeout the logs below say why; the state assertion fails after them.
    let app = poll(LIMIT, || async {
        match apps.get("spark-pi-python").await {
            Ok(app)
                if matches!(
                    state(&app),
                    ApplicationStateType::Completed | ApplicationStateType::Failed
                ) =>
            {
                Poll::Done(app)
            }
            Ok(app) => Poll::Pending(Some(app)),
            Err(_) => Poll::Pending(None),
        }
    })
    .await
    .unwrap_or_else(|last| last.expect("the application exists"));
    let elapsed = started.elapsed();
    let driver_log = pods
        .logs("spark-pi-python-driver", &LogParams::default())
        .await
        .unwrap_or_else(|e| format!("<no driver log: {e}>"));
    let mut executor_logs = String::new();
    for pod in pods
        .list(&ListParams::default().labels("spark-role=executor"))
        .await
        .unwrap()
    {
        let name = pod.metadata.name.clone().unwrap_or_default();
        let log = pods.logs(&name, &LogParams::default()).await.unwrap_or_default();
        executor_logs.push_str(&format!("----- {name}\n{log}\n"));
    }
    let _ = writeln!(
        std::io::stderr(),
        "real_spark: {:?} after {elapsed:?}\n----- driver\n{driver_log}\n{executor_logs}",
        state(&app)
    );
    assert_eq!(
        state(&app),
        ApplicationStateType::Completed,
        "status: {}",
        serde_json::to_string_pretty(&app.status).unwrap()
    );
    // pi.py samples 200,000 points (2 partitions): the estimate's standard error is about 0.004,
    // so "3.14" is not always its prefix (3.139160 was seen); within 0.05 is over 10 errors.
    let pi: f64 = driver_log
        .lines()
        .find_map(|l| l.strip_prefix("Pi is roughly "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no \"Pi is roughly\" line in the driver's log:\n{driver_log}"));
    assert!((pi - std::f64::consts::PI).abs() < 0.05, "Pi is roughly {pi}?");
    // Tasks ran on an executor pod the driver asked for, not in a local master.
    assert!(driver_log.contains("Registered executor"), "{driver_log}");
    assert!(driver_log.contains("(executor 1)"), "{driver_log}");
    assert!(!driver_log.contains("local["), "{driver_log}");
}
