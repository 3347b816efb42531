//! Real Spark in the simulated cluster, through the whole operator: the controller submits natively, the
//! webhook decorates (fail-closed), the node agents record every end and keep the logs, and Spark's own
//! driver and executors (Spark 4.3 and 3.5, as process pods of kube-sim's Spark image) do the work. Pods
//! are deleted the moment they end (`PodGc::Instant`, as an aggressive GC or a cleanup job would), so
//! what the application's status and `spark-operator logs` (the built binary) show came through the
//! agents.
//!
//! - Kubeflow's `spark-pi-python.yaml` (Spark's own `pi.py`) COMPLETED on Spark 4.3 (unchanged) and on
//!   Spark 3.5 (image `apache/spark:3.5.3`, `sparkVersion: 3.5.3`): "Pi is roughly 3.1..." in the driver's
//!   log, executors registering, tasks run in the executor's log, both read after the pods are gone; the
//!   executor pods created by the driver's ServiceAccount, with Spark's labels, an ownerReference to the
//!   driver pod and the application's executor settings from the webhook.
//! - Kubeflow's `spark-pi.yaml` (Scala SparkPi, unchanged): the examples jar is ours (see
//!   `kube_sim::node::real_spark`), compiled with javac against Spark's jars.
//! - Kubeflow's failing example (a class and a jar that do not exist): Spark's exit code (1: the jar's copy
//!   into the working directory throws, before the class is looked for) and message, recorded by the
//!   agents, retried per `onFailureRetries`, then FAILED; the fake driver's imitation ends the same way.
//! - Dynamic allocation (Kubeflow's `spark-pi-dynamic-allocation.yaml` running our `SparkPiInWaves`, on
//!   Spark 4.3 and 3.5): Spark adds executors for a backlog and removes idle ones; the status counts every
//!   executor once.
//! - With no webhook, an executor real Spark builds from the operator's executor pod template is the one
//!   the fake driver builds, key for key (`docs/executor-template.md`).
//!
//! Opt-in (needs root, Java 17, the distributions, ~2 GB of memory and a few CPU minutes):
//!
//! ```text
//! sim/images/real-spark/get-spark.sh 4.3.0 && sim/images/real-spark/get-spark.sh 3.5.3   # once, into ~/.cache
//! SPARK_E2E_REAL_SPARK=1 cargo test -p spark-operator --test real_spark -- --nocapture
//! ```
//!
//! `SPARK_E2E_SPARK_HOME_4` and `SPARK_E2E_SPARK_HOME_3_5` name other distribution directories. Without
//! `SPARK_E2E_REAL_SPARK=1` every test prints why it did not run (to stderr, uncaptured) and passes.

// Test code: a panic is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;
use spark_operator_test_support::kube_access::*;
use support::cli;

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt as _;
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use kube::runtime::watcher;
use kube_sim::node::PodGc;
use kube_sim::node::real_spark::{self, SparkDistribution};
use spark_operator_api::{ApplicationStateType, SparkApplication};
use spark_operator_e2e::{Cluster, ClusterOptions, Poll, poll, state};

const ENV: &str = "SPARK_E2E_REAL_SPARK";
/// The agents' namespace (`spark-operator logs --agent-namespace` by default).
const AGENTS: &str = "spark-operator-agent";
/// Far above a run's time: only bounds how long a failure takes to show.
const LIMIT: Duration = Duration::from_secs(300);

/// A Spark version line the tests run, and the distribution behind its image.
#[derive(Clone, Copy)]
struct Line {
    /// `4`, `3.5`: the images it backs (`apache/spark:4.*`).
    name: &'static str,
    /// The pinned release `get-spark.sh` fetches.
    release: &'static str,
    home_env: &'static str,
}

const SPARK_4: Line = Line {
    name: "4",
    release: "4.3.0",
    home_env: "SPARK_E2E_SPARK_HOME_4",
};
const SPARK_3_5: Line = Line {
    name: "3.5",
    release: "3.5.3",
    home_env: "SPARK_E2E_SPARK_HOME_3_5",
};

impl Line {
    fn home(self) -> PathBuf {
        if let Some(home) = std::env::var_os(self.home_env) {
            return PathBuf::from(home);
        }
        real_spark::cached_homes()
            .into_iter()
            .find(|h| h.line == self.name)
            .expect("HOME or XDG_CACHE_HOME, and a pinned release of the line")
            .dir
    }
}

fn say(text: &str) {
    let _ = writeln!(std::io::stderr(), "{text}");
}

/// False (and says why) unless the tier is asked for.
fn wanted(test: &str) -> bool {
    if std::env::var(ENV).as_deref() == Ok("1") {
        if let Err(reason) = kube_sim::node::sandbox::supported() {
            panic!("{ENV}=1 but process pods cannot run here: {reason}");
        }
        return true;
    }
    say(&format!(
        "SKIPPED {test}: {ENV} is not 1. This opt-in test runs Spark's own driver and executors \
         (pyspark distributions, Java 17, root); see the header of tests/real_spark.rs"
    ));
    false
}

/// The operator, its webhook and agents on a two-node sim whose Spark images run real Spark.
struct RealSpark {
    cluster: Cluster,
    _operator: spark_operator_e2e::agents::Operator,
    _agents: Vec<spark_operator_e2e::agents::Agent>,
    _webhook: Option<spark_operator_e2e::Webhook>,
    /// A kubeconfig whose token user may read logs (`spark-operator logs` needs a token).
    reader: PathBuf,
    _images: tempfile::TempDir,
    _dir: tempfile::TempDir,
    // Last: the machine-wide lock of every test that runs pods as processes, held until all is stopped.
    _lock: std::fs::File,
}

impl RealSpark {
    async fn start(lines: &[Line], pod_gc: PodGc) -> RealSpark {
        Self::start_with(lines, pod_gc, true).await
    }

    /// As [`RealSpark::start`], with the webhook or without it.
    async fn start_with(lines: &[Line], pod_gc: PodGc, webhook: bool) -> RealSpark {
        let lock = std::fs::File::create(std::env::temp_dir().join("kube-sim-process-pods.lock")).unwrap();
        lock.lock().unwrap();
        let mut local_images = Vec::new();
        let mut images = None;
        for line in lines {
            let home = line.home();
            let dist = SparkDistribution::open(&home).unwrap_or_else(|e| {
                panic!(
                    "{e}\n(Spark {}: run sim/images/real-spark/get-spark.sh {} or set {})",
                    line.name, line.release, line.home_env
                )
            });
            // Hard links into the distribution need the same filesystem: next to it.
            let dir: &tempfile::TempDir =
                images.get_or_insert_with(|| tempfile::tempdir_in(dist.home.parent().unwrap()).unwrap());
            let image = real_spark::build_image(&dist, &dir.path().join(&dist.version))
                .unwrap_or_else(|e| panic!("building the Spark {} image: {e}", dist.version));
            local_images.extend(real_spark::local_images(line.name, &image));
        }
        let cluster = Cluster::start(ClusterOptions {
            nodes: 2,
            pod_gc,
            local_images,
            ..ClusterOptions::default()
        })
        .await;
        let webhook = if webhook { Some(cluster.webhook().await) } else { None };
        let operator = cluster.operator(cluster.args(&[])).await;
        let agents = cluster.agents(&operator).await;
        let dir = tempfile::tempdir().unwrap();
        let reader = log_reader_kubeconfig(&cluster.sim, &cluster.client, dir.path(), AGENTS, "default").await;
        RealSpark {
            cluster,
            _operator: operator,
            _agents: agents,
            _webhook: webhook,
            reader,
            _images: images.unwrap(),
            _dir: dir,
            _lock: lock,
        }
    }

    /// Creates the application and waits until it ends; prints how long it took.
    async fn run(&self, yaml: &str) -> SparkApplication {
        let started = Instant::now();
        let created = self.cluster.create_app(yaml).await;
        let name = created.metadata.name.clone().unwrap();
        let apps = self.cluster.apps("default");
        let app = poll(LIMIT, || async {
            match apps.get(&name).await {
                Ok(app)
                    if matches!(
                        state(&app),
                        ApplicationStateType::Completed | ApplicationStateType::Failed
                    ) && app.status.as_ref().is_some_and(|s| {
                        // Every executor end counted, and the driver's reported by its node's agent (with
                        // its log's tail), not only seen by the pod watch.
                        s.uncounted_executor_terminations.is_empty()
                            && s.driver_termination.as_ref().is_some_and(|d| d.container_id.is_some())
                    }) =>
                {
                    Poll::Done(app)
                }
                Ok(app) => Poll::Pending(Some(app)),
                Err(_) => Poll::Pending(None),
            }
        })
        .await
        .unwrap_or_else(|last| last.expect("the application exists"));
        say(&format!(
            "real_spark: {name} {:?} after {:?}",
            state(&app),
            started.elapsed()
        ));
        app
    }

    /// `spark-operator logs NAME ARGS...` as the log reader: (stdout, the whole output for messages).
    async fn logs(&self, name: &str, extra: &[&str]) -> (String, Output) {
        let mut args: Vec<String> = vec![
            "logs".into(),
            name.into(),
            "--kubeconfig".into(),
            self.reader.display().to_string(),
        ];
        args.extend(extra.iter().map(|a| (*a).to_owned()));
        let output = cli::spark_operator(args).await;
        (String::from_utf8_lossy(&output.stdout).into_owned(), output)
    }

    /// Every pod of `default` as the API server first stored it (after admission) and whether it was
    /// deleted, from a watch started now.
    fn record_pods(&self) -> PodRecord {
        PodRecord::watch(&self.cluster.client)
    }
}

/// Pods by name: as first seen, and whether deleted since.
#[derive(Clone, Default)]
struct PodRecord(Arc<Mutex<BTreeMap<String, (Pod, bool)>>>);

impl PodRecord {
    /// Records the pods of `default` from a watch started now.
    fn watch(client: &kube::Client) -> PodRecord {
        let record = PodRecord::default();
        let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
        let seen = record.clone();
        tokio::spawn(async move {
            let mut events = watcher(pods, watcher::Config::default()).boxed();
            while let Some(event) = events.next().await {
                let mut seen = seen.0.lock().unwrap();
                match event {
                    Ok(watcher::Event::Apply(pod) | watcher::Event::InitApply(pod)) => {
                        let name = pod.metadata.name.clone().unwrap_or_default();
                        seen.entry(name).or_insert((pod, false));
                    }
                    Ok(watcher::Event::Delete(pod)) => {
                        let name = pod.metadata.name.clone().unwrap_or_default();
                        seen.entry(name).or_insert((pod, true)).1 = true;
                    }
                    _ => {}
                }
            }
        });
        record
    }

    fn executors(&self, app: &str) -> Vec<(Pod, bool)> {
        self.0
            .lock()
            .unwrap()
            .values()
            .filter(|(pod, _)| {
                let labels = pod.metadata.labels.clone().unwrap_or_default();
                labels.get("spark-role").map(String::as_str) == Some("executor")
                    && labels.get("sparkoperator.k8s.io/app-name").map(String::as_str) == Some(app)
            })
            .cloned()
            .collect()
    }

    fn get(&self, name: &str) -> Option<(Pod, bool)> {
        self.0.lock().unwrap().get(name).cloned()
    }
}

/// What every run on real Spark shows: the driver's log (after its pod is gone) with Pi and registered
/// executors and no local master, every executor pod made by the driver's ServiceAccount with Spark's
/// labels, an owner reference to the driver pod and its application's settings, and tasks in the first
/// executor's log.
async fn check_run(spark: &RealSpark, pods: &PodRecord, app: &SparkApplication, executor_label: Option<(&str, &str)>) {
    let name = app.metadata.name.clone().unwrap();
    let status = app.status.clone().unwrap();
    let driver_name = format!("{name}-driver");
    wait_for("the driver pod to be gone", || async {
        pods.get(&driver_name).filter(|(_, deleted)| *deleted).map(|_| ())
    })
    .await;
    let (driver_log, output) = spark.logs(&name, &[]).await;
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    // The sample's standard error is about 0.004 (pi.py: 200,000 points): within 0.05 is over 10 errors.
    let pi: f64 = driver_log
        .lines()
        .find_map(|l| l.split("Pi is roughly ").nth(1))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no \"Pi is roughly\" line in the driver's log:\n{driver_log}"));
    assert!((pi - std::f64::consts::PI).abs() < 0.05, "Pi is roughly {pi}?");
    assert!(driver_log.contains("Registered executor"), "{driver_log}");
    assert!(!driver_log.contains("local["), "{driver_log}");

    let executors = pods.executors(&name);
    assert!(!executors.is_empty(), "no executor pod of {name} was seen");
    let driver = pods.get(&driver_name).expect("the driver pod was seen").0;
    let creates: Vec<_> = spark
        .cluster
        .sim
        .audit()
        .events()
        .into_iter()
        .filter(|e| e.verb == "create" && e.resource == "pods" && e.subresource.is_none() && e.code == 201)
        .collect();
    for (pod, deleted) in &executors {
        let pod_name = pod.metadata.name.clone().unwrap();
        assert!(deleted, "{pod_name} is gone at the end");
        let labels = pod.metadata.labels.clone().unwrap_or_default();
        let label = |k: &str| labels.get(k).map(String::as_str);
        // Spark's labels, and the operator's from the webhook.
        assert_eq!(
            label("spark-app-selector"),
            Some(status.spark_application_id.as_str()),
            "{pod_name}"
        );
        assert!(
            label("spark-exec-id").is_some_and(|id| id.parse::<u32>().is_ok()),
            "{pod_name}"
        );
        assert_eq!(
            label("sparkoperator.k8s.io/submission-id"),
            Some(status.submission_id.as_str())
        );
        assert_eq!(label("sparkoperator.k8s.io/launched-by-spark-operator"), Some("true"));
        if let Some((key, value)) = executor_label {
            assert_eq!(label(key), Some(value), "{pod_name}: spec.executor.labels");
        }
        let owner = pod
            .metadata
            .owner_references
            .clone()
            .unwrap_or_default()
            .into_iter()
            .find(|o| o.kind == "Pod")
            .unwrap_or_else(|| panic!("{pod_name} has no owner reference to the driver pod"));
        assert_eq!(owner.name, driver_name);
        assert_eq!(Some(owner.uid), driver.metadata.uid.clone());
        // spec.executor.securityContext, which only the webhook puts on executors.
        let container = &pod.spec.as_ref().unwrap().containers[0];
        let security = container.security_context.clone().unwrap_or_default();
        assert_eq!(security.run_as_user, Some(185), "{pod_name}: {security:?}");
        assert_eq!(security.allow_privilege_escalation, Some(false), "{pod_name}");
        assert_eq!(
            security.seccomp_profile.map(|p| p.type_),
            Some("RuntimeDefault".to_owned()),
            "{pod_name}"
        );
        let creator = creates
            .iter()
            .find(|e| e.name.as_deref() == Some(pod_name.as_str()))
            .unwrap_or_else(|| panic!("no audited create of {pod_name}"));
        assert_eq!(creator.username, "system:serviceaccount:default:spark-operator-spark");
    }
    // With dynamic allocation an executor may be removed before it gets a task: one that ran some.
    let mut ids: Vec<u32> = executors
        .iter()
        .filter_map(|(pod, _)| pod.metadata.labels.as_ref()?.get("spark-exec-id")?.parse().ok())
        .collect();
    ids.sort_unstable();
    let mut logs = String::new();
    for id in ids {
        let (log, output) = spark.logs(&name, &["--executor", &id.to_string()]).await;
        assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
        if log.contains("Running task") && log.contains("Finished task") {
            return;
        }
        logs.push_str(&format!("----- executor {id}\n{log}\n"));
    }
    panic!("no executor ran a task:\n{logs}");
}

fn kubeflow(file: &str) -> String {
    std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/kubeflow-examples")
            .join(file),
    )
    .unwrap()
}

/// A Kubeflow example on another `apache/spark` tag, with the `sparkVersion` of that tag.
fn on_image(yaml: &str, tag: &str) -> String {
    let moved = yaml
        .replace(
            "image: docker.io/apache/spark:4.0.4",
            &format!("image: docker.io/apache/spark:{tag}"),
        )
        .replace("sparkVersion: 4.0.4", &format!("sparkVersion: {tag}"));
    assert!(
        moved.contains(&format!("apache/spark:{tag}")) && moved.contains(&format!("sparkVersion: {tag}")),
        "{moved}"
    );
    moved
}

async fn spark_pi_python(line: Line, yaml: String) {
    let spark = RealSpark::start(&[line], PodGc::Instant).await;
    spark.cluster.sim.audit().enable();
    let pods = spark.record_pods();
    let app = spark.run(&yaml).await;
    assert_eq!(
        state(&app),
        ApplicationStateType::Completed,
        "status: {}",
        serde_json::to_string_pretty(&app.status).unwrap()
    );
    check_run(&spark, &pods, &app, None).await;
    let termination = app
        .status
        .unwrap()
        .driver_termination
        .expect("the driver's end, recorded");
    assert_eq!(termination.exit_code, Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spark_pi_python_completes_with_real_spark_4_3() {
    if !wanted("spark_pi_python_completes_with_real_spark_4_3") {
        return;
    }
    // Kubeflow's manifest as it is: its apache/spark:4.0.4 runs on the 4.3 distribution.
    spark_pi_python(SPARK_4, kubeflow("spark-pi-python.yaml")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spark_pi_python_completes_with_real_spark_3_5() {
    if !wanted("spark_pi_python_completes_with_real_spark_3_5") {
        return;
    }
    spark_pi_python(SPARK_3_5, on_image(&kubeflow("spark-pi-python.yaml"), "3.5.3")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scala_spark_pi_completes_from_kubeflows_manifest() {
    if !wanted("scala_spark_pi_completes_from_kubeflows_manifest") {
        return;
    }
    let spark = RealSpark::start(&[SPARK_4], PodGc::Instant).await;
    spark.cluster.sim.audit().enable();
    let pods = spark.record_pods();
    let app = spark.run(&kubeflow("spark-pi.yaml")).await;
    assert_eq!(
        state(&app),
        ApplicationStateType::Completed,
        "status: {}",
        serde_json::to_string_pretty(&app.status).unwrap()
    );
    check_run(&spark, &pods, &app, Some(("version", "4.0.0"))).await;
}

/// The end of a run that failed: its driver's exit code and reason, and the lines of its log tail that
/// spark-submit writes before and for a failure (`Files ...` copied, `Exception in thread ...`,
/// `Warning: ...`, `Error: ...`).
fn failure(app: &SparkApplication) -> (Option<i32>, Option<String>, Vec<String>) {
    let driver = app
        .status
        .as_ref()
        .and_then(|s| s.driver_termination.clone())
        .expect("the driver's end, recorded");
    say(&format!(
        "real_spark: {} ended {:?} {:?}; its log's tail:\n{}",
        app.metadata.name.as_deref().unwrap_or_default(),
        driver.exit_code,
        driver.reason,
        driver.log_tail.as_deref().unwrap_or_default()
    ));
    let said = driver
        .log_tail
        .unwrap_or_default()
        .lines()
        .filter(|l| {
            ["Files ", "Exception in thread ", "Warning: ", "Error: "]
                .iter()
                .any(|p| l.starts_with(p))
        })
        .map(str::to_owned)
        .collect();
    (driver.exit_code, driver.reason, said)
}

/// Kubeflow's own failing example (a class and a jar that do not exist, `onFailureRetries: 3`) and
/// Kubeflow's `spark-pi.yaml` with a misspelt main class (`onFailureRetries: 1`) on real Spark: every
/// attempt fails with spark-submit's exit code and message (the missing jar's copy throws, exit 1; the
/// class not found, exit 101), as the agents recorded them though each driver pod was deleted as it
/// ended, and each ends FAILED after its retries. The fake driver ends both the same way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failing_applications_fail_as_spark_fails_them_and_the_fake_driver_agrees() {
    if !wanted("failing_applications_fail_as_spark_fails_them_and_the_fake_driver_agrees") {
        return;
    }
    let missing_jar = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/kubeflow-bad-examples/fail-application.yaml"),
    )
    .unwrap();
    let misspelt = kubeflow("spark-pi.yaml")
        .replace(
            "mainClass: org.apache.spark.examples.SparkPi",
            "mainClass: org.apache.spark.examples.SparkPI",
        )
        .replacen(
            "  sparkVersion: 4.0.4\n",
            "  sparkVersion: 4.0.4\n  restartPolicy:\n    type: OnFailure\n    onFailureRetries: 1\n    \
             onFailureRetryInterval: 1\n",
            1,
        );
    assert!(misspelt.contains("SparkPI") && misspelt.contains("onFailureRetries: 1"));
    let cases = [("fail-submission", &missing_jar, 4), ("spark-pi", &misspelt, 2)];
    let real = {
        let spark = RealSpark::start(&[SPARK_4], PodGc::Instant).await;
        let mut ends = Vec::new();
        for (name, yaml, attempts) in cases {
            let app = spark.run(yaml).await;
            let status = app.status.clone().unwrap();
            assert_eq!(state(&app), ApplicationStateType::Failed, "{name}: {status:#?}");
            assert_eq!(
                status.execution_attempts, attempts,
                "{name}: the first run and its retries"
            );
            ends.push(failure(&app));
        }
        ends
    };
    // In a driver pod Spark first copies the application's jars into its working directory
    // (SPARK-33782): the missing one throws before any class is looked for.
    assert_eq!(real[0].0, Some(1), "{:?}", real[0]);
    assert!(
        real[0]
            .2
            .iter()
            .any(|l| l == "Exception in thread \"main\" java.nio.file.NoSuchFileException: /non-existent.jar"),
        "{:?}",
        real[0]
    );
    assert_eq!(real[1].0, Some(101), "{:?}", real[1]);
    assert!(
        real[1]
            .2
            .iter()
            .any(|l| l == "Error: Failed to load class org.apache.spark.examples.SparkPI."),
        "{:?}",
        real[1]
    );
    // The same manifests on the fake driver (no local image: the scripted runtime imitates spark-submit).
    let fake = {
        let cluster = Cluster::start(ClusterOptions {
            nodes: 2,
            pod_gc: PodGc::Instant,
            ..ClusterOptions::default()
        })
        .await;
        let _webhook = cluster.webhook().await;
        let operator = cluster.operator(cluster.args(&[])).await;
        let _agents = cluster.agents(&operator).await;
        let mut ends = Vec::new();
        for (name, yaml, attempts) in cases {
            cluster.create_app(yaml).await;
            let app = cluster
                .wait_app("default", name, LIMIT, |a| {
                    state(a).is_terminal()
                        && a.status
                            .as_ref()
                            .and_then(|s| s.driver_termination.as_ref())
                            .is_some_and(|d| d.container_id.is_some())
                })
                .await;
            assert_eq!(app.status.as_ref().unwrap().execution_attempts, attempts, "{name}");
            ends.push(failure(&app));
        }
        ends
    };
    assert_eq!(fake, real, "the fake driver's ends, beside real Spark's");
}

/// Dynamic allocation on real Spark: Kubeflow's `spark-pi-dynamic-allocation.yaml` (initial 2, min 1,
/// max 5) running our `SparkPiInWaves` (two waves of 8 tasks of 1.5 s, 8 s apart) with a 2 s idle
/// timeout, on `image` of `line`: Spark adds executors for the backlog and removes idle ones between the
/// waves; the status counts every executor pod there was, once, none left running.
async fn dynamic_allocation(line: Line, image: &str) {
    let yaml = on_image(&kubeflow("spark-pi-dynamic-allocation.yaml"), image)
        .replace(
            "mainClass: org.apache.spark.examples.SparkPi",
            "mainClass: org.apache.spark.examples.sim.SparkPiInWaves",
        )
        .replacen(
            "  mainApplicationFile:",
            "  arguments: [\"2\", \"8\", \"1500\", \"8\"]\n  sparkConf:\n    \
             spark.dynamicAllocation.executorIdleTimeout: 2s\n    \
             spark.dynamicAllocation.schedulerBacklogTimeout: 1s\n  mainApplicationFile:",
            1,
        );
    assert!(yaml.contains("SparkPiInWaves") && yaml.contains("executorIdleTimeout"));
    let spark = RealSpark::start(&[line], PodGc::Instant).await;
    spark.cluster.sim.audit().enable();
    let pods = spark.record_pods();
    let app = spark.run(&yaml).await;
    let status = app.status.clone().unwrap();
    assert_eq!(state(&app), ApplicationStateType::Completed, "{status:#?}");
    check_run(&spark, &pods, &app, None).await;
    let (driver_log, _) = spark.logs("spark-pi-dynamic-allocation", &[]).await;
    assert!(driver_log.contains("because tasks are backlogged"), "{driver_log}");
    assert!(driver_log.contains("removed due to idle timeout"), "{driver_log}");

    let executors = pods.executors("spark-pi-dynamic-allocation");
    let counts = status.executor_counts.clone().expect("executor counts");
    say(&format!(
        "real_spark: {} executor pods; counts {counts:?}; states {:?}; failures {:?}",
        executors.len(),
        status.executor_state,
        status
            .recent_executor_failures
            .iter()
            .map(|f| (&f.pod_name, f.exit_code, &f.reason, &f.message))
            .collect::<Vec<_>>()
    ));
    assert!(executors.len() > 2, "Spark added executors beyond the initial 2");
    assert_eq!(counts.pending + counts.running, 0, "{counts:?}");
    assert_eq!(
        counts.completed + counts.failed + counts.unknown,
        executors.len() as i64,
        "every executor pod counted once: {counts:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dynamic_allocation_adds_and_removes_executors_and_status_counts_them() {
    if !wanted("dynamic_allocation_adds_and_removes_executors_and_status_counts_them") {
        return;
    }
    // Kubeflow's image tag, on the 4.3 distribution.
    dynamic_allocation(SPARK_4, "4.0.4").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dynamic_allocation_on_spark_3_5() {
    if !wanted("dynamic_allocation_on_spark_3_5") {
        return;
    }
    dynamic_allocation(SPARK_3_5, "3.5.3").await;
}

/// An executor pod as JSON with what differs from run to run put as placeholders: its names and ids,
/// the resource prefix Spark chose, the submission's and Spark's application ids; its status, node and
/// server-set metadata left out.
fn comparable(pod: &Pod, app: &SparkApplication) -> serde_json::Value {
    let status = app.status.clone().unwrap_or_default();
    let name = pod.metadata.name.clone().unwrap_or_default();
    let prefix = name.rsplit_once("-exec-").map_or(name.as_str(), |(p, _)| p).to_owned();
    let mut pod = pod.clone();
    pod.status = None;
    let meta = &mut pod.metadata;
    meta.uid = None;
    meta.resource_version = None;
    meta.creation_timestamp = None;
    meta.managed_fields = None;
    meta.generation = None;
    for owner in meta.owner_references.iter_mut().flatten() {
        owner.uid = String::new();
    }
    if let Some(spec) = pod.spec.as_mut() {
        spec.node_name = None;
    }
    let mut text = serde_json::to_string(&pod)
        .unwrap()
        .replace(&status.spark_application_id, "<spark-app-id>")
        .replace(&status.submission_id, "<submission-id>")
        .replace(&prefix, "<prefix>");
    let container = pod.spec.as_ref().map(|s| s.containers[0].clone()).unwrap_or_default();
    let env = |name: &str| {
        container
            .env
            .iter()
            .flatten()
            .find(|e| e.name == name)
            .and_then(|e| e.value.clone())
    };
    // Random per run: the local dir's name, the executor ConfigMap's id, the token volume's suffix,
    // and the driver pod's address.
    let config_map = pod.spec.iter().flat_map(|s| s.volumes.iter().flatten()).find_map(|v| {
        let name = v.config_map.as_ref()?.name.clone();
        name.starts_with("spark-exec-").then_some(name)
    });
    let token_volume = pod
        .spec
        .iter()
        .flat_map(|s| s.volumes.iter().flatten())
        .map(|v| v.name.clone())
        .find(|n| n.starts_with("kube-api-access-"));
    for (value, placeholder) in [
        (env("SPARK_LOCAL_DIRS"), "<local-dir>"),
        (env("SPARK_DRIVER_POD_IP"), "<driver-pod-ip>"),
        (config_map, "<executor-config-map>"),
        (token_volume, "<token-volume>"),
    ] {
        if let Some(value) = value.filter(|v| !v.is_empty()) {
            text = text.replace(&value, placeholder);
        }
    }
    let mut value: serde_json::Value = serde_json::from_str(&text).unwrap();
    // The JVM options Spark passes as SPARK_JAVA_OPT_n, in its map's order: compared as a set of values
    // apart (the fake passes Spark's own -D options, not the JVM module options SparkContext adds).
    if let Some(env) = value
        .pointer_mut("/spec/containers/0/env")
        .and_then(|e| e.as_array_mut())
    {
        env.retain(|e| !e["name"].as_str().unwrap_or_default().starts_with("SPARK_JAVA_OPT_"));
    }
    value
}

/// The values of an executor pod's SPARK_JAVA_OPT_n variables.
fn java_opts(pod: &Pod) -> std::collections::BTreeSet<String> {
    pod.spec
        .iter()
        .flat_map(|s| s.containers[0].env.iter().flatten())
        .filter(|e| e.name.starts_with("SPARK_JAVA_OPT_"))
        .filter_map(|e| e.value.clone())
        .collect()
}

/// The paths where `a` and `b` differ, with both values.
fn differences(a: &serde_json::Value, b: &serde_json::Value, path: &str, out: &mut Vec<String>) {
    use serde_json::Value;
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let keys: std::collections::BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            for k in keys {
                let (va, vb) = (x.get(k).unwrap_or(&Value::Null), y.get(k).unwrap_or(&Value::Null));
                differences(va, vb, &format!("{path}.{k}"), out);
            }
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
            for (i, (va, vb)) in x.iter().zip(y).enumerate() {
                // Name the element when it has a name (env vars, volumes, mounts).
                let id = va
                    .get("name")
                    .and_then(Value::as_str)
                    .map_or(i.to_string(), str::to_owned);
                differences(va, vb, &format!("{path}[{id}]"), out);
            }
        }
        _ if a != b => out.push(format!("{path}: real {a} / fake {b}")),
        _ => {}
    }
}

/// Without the webhook, the executor pods real Spark builds from the operator's executor pod template
/// are the ones the fake driver builds from it (docs/executor-template.md): same labels, annotations,
/// containers, env, resources, volumes, security context and tolerations, key for key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn executors_built_from_the_template_alone_match_the_fake_drivers() {
    if !wanted("executors_built_from_the_template_alone_match_the_fake_drivers") {
        return;
    }
    // The image and version of the distribution, so Spark's own spark-version label is the tag's.
    let yaml = on_image(&kubeflow("spark-pi.yaml"), "4.3.0")
        .replace("  - \"5000\"\n", "  - \"20\"\n")
        .replacen(
            "  driver:\n",
            "  volumes:\n  - {name: scratch, emptyDir: {}}\n  driver:\n",
            1,
        )
        .replacen(
            "  executor:\n",
            "  executor:\n    env:\n    - {name: TEAM, value: data}\n    annotations:\n      team: data\n    \
             tolerations:\n    - {key: trial, operator: Exists}\n    volumeMounts:\n    \
             - {name: scratch, mountPath: /scratch}\n    memoryOverhead: 256m\n    coreLimit: 1500m\n",
            1,
        );
    assert!(yaml.contains("coreLimit: 1500m") && yaml.contains("- \"20\""), "{yaml}");
    let executor_of = |pods: &PodRecord| {
        pods.executors("spark-pi")
            .into_iter()
            .map(|(pod, _)| pod)
            .find(|p| {
                p.metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get("spark-exec-id"))
                    .map(String::as_str)
                    == Some("1")
            })
            .expect("executor 1 was seen")
    };
    let real = {
        let spark = RealSpark::start_with(&[SPARK_4], PodGc::Off, false).await;
        let pods = spark.record_pods();
        let app = spark.run(&yaml).await;
        assert_eq!(state(&app), ApplicationStateType::Completed, "{:#?}", app.status);
        let pod = executor_of(&pods);
        (comparable(&pod, &app), java_opts(&pod))
    };
    let fake = {
        let cluster = Cluster::start(ClusterOptions {
            nodes: 2,
            ..ClusterOptions::default()
        })
        .await;
        let _controller = cluster.controller(cluster.args(&[]));
        let pods = PodRecord::watch(&cluster.client);
        cluster.create_app(&yaml).await;
        let app = cluster
            .wait_app("default", "spark-pi", LIMIT, |a| state(a).is_terminal())
            .await;
        assert_eq!(state(&app), ApplicationStateType::Completed, "{:#?}", app.status);
        let pod = executor_of(&pods);
        (comparable(&pod, &app), java_opts(&pod))
    };
    let ((real, real_opts), (fake, fake_opts)) = (real, fake);
    assert!(
        fake_opts.is_subset(&real_opts) && !fake_opts.is_empty(),
        "the fake's JVM options {fake_opts:?} among real Spark's {real_opts:?}"
    );
    let mut found = Vec::new();
    differences(&real, &fake, "", &mut found);
    assert!(
        found.is_empty(),
        "the fake driver's executor differs from real Spark's:\n{}\n\nreal: {}",
        found.join("\n"),
        serde_json::to_string_pretty(&real).unwrap()
    );
}
