//! The harness of the end-to-end tests: a simulated cluster (kube-sim, with nodes, kubelets and the
//! fake Spark driver) with the CRDs installed, controllers run in-process (and killed by aborting
//! their task), and bounded waits. Tests never assert on wall-clock time; every wait has a deadline
//! that only bounds how long a failure takes to show.
//!
//! This crate is test code only: a panic here is a failed test, so it may `expect`.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use clap::Parser;
use kube::api::{Api, ListParams, PostParams};
use spark_operator_api::SparkApplication;
use spark_operator_controller::ControllerArgs;
pub use spark_operator_dev::ClusterOptions;
use spark_operator_runtime::{Runtime, RuntimeArgs, shutdown::Shutdown};

pub mod agents;
pub mod helm;
pub mod real;

/// A running simulated cluster with the operator's CRDs (set up as `spark-operator dev` sets it up).
pub struct Cluster {
    pub sim: kube_sim::Sim,
    pub client: kube::Client,
    _dir: tempfile::TempDir,
}

/// Logs of the code under test, when `RUST_LOG` asks for them.
pub fn init_logging() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()))
        .with_test_writer()
        .try_init();
}

/// The flags of an in-process controller: the runtime's and the controller's, as `spark-operator
/// controller` takes them.
#[derive(Clone, Debug, Parser)]
#[command(args_override_self = true)]
pub struct ControllerFlags {
    #[command(flatten)]
    pub runtime: RuntimeArgs,
    #[command(flatten)]
    pub controller: ControllerArgs,
}

impl Cluster {
    pub async fn start(options: ClusterOptions) -> Cluster {
        init_logging();
        let dir = tempfile::tempdir().expect("a temporary directory");
        let cluster = spark_operator_dev::Cluster::start(dir.path(), &options)
            .await
            .expect("the simulated cluster starts with the CRDs");
        Cluster {
            sim: cluster.sim,
            client: cluster.client,
            _dir: dir,
        }
    }

    /// Controller flags for tests: no leader election, no endpoints, then `extra` (which win).
    pub fn args(&self, extra: &[&str]) -> ControllerFlags {
        let mut argv = vec![
            "controller".to_owned(),
            "--leader-election=false".to_owned(),
            "--metrics-address=off".to_owned(),
            format!("--spark-master-url=k8s://{}", self.sim.url()),
        ];
        argv.extend(extra.iter().map(|a| (*a).to_owned()));
        ControllerFlags::try_parse_from(argv).expect("valid controller flags")
    }

    /// Starts a controller in this process, on its own thread and runtime as if it were its own
    /// process; dropping it (or [`Controller::kill`]) stops it at once, as `kill -9` would.
    pub fn controller(&self, flags: ControllerFlags) -> Controller {
        self.component(CONTROLLER_THREAD, flags.runtime.settings(), move |operator| {
            Box::pin(async move {
                if let Err(error) = spark_operator_controller::run(flags.controller, &operator).await {
                    eprintln!("controller stopped: {error}");
                }
            })
        })
    }

    /// Runs one component on its own thread, tokio runtime and client, as a separate process would;
    /// killing it drops the runtime, which cancels every task mid-whatever.
    fn component(
        &self,
        thread_name: &'static str,
        settings: spark_operator_runtime::RuntimeSettings,
        run: impl FnOnce(Runtime) -> std::pin::Pin<Box<dyn Future<Output = ()>>> + Send + 'static,
    ) -> Controller {
        let kubeconfig = self.sim.kubeconfig_path().to_path_buf();
        let (kill, killed) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name(thread_name.into())
            .stack_size(STACK)
            .spawn(move || {
                let runtime = tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(2)
                    .thread_name(thread_name)
                    .thread_stack_size(STACK)
                    .enable_all()
                    .build()
                    .expect("a runtime for the component");
                runtime.block_on(async move {
                    let config = spark_operator_runtime::client::config_from(Some(&kubeconfig))
                        .await
                        .expect("a client configuration");
                    let operator = Runtime::start(config, settings, Shutdown::never())
                        .await
                        .expect("the runtime starts");
                    tokio::select! {
                        _ = run(operator) => {}
                        _ = killed => {}
                    }
                });
                runtime.shutdown_background();
            })
            .expect("a thread for the component");
        Controller {
            kill: Some(kill),
            thread: Some(thread),
        }
    }

    /// Creates `namespace` as a Spark job namespace, as the chart sets one up: with the
    /// `spark-operator-spark` ServiceAccount and the Role its drivers need (RBAC is enforced).
    pub async fn job_namespace(&self, namespace: &str) {
        spark_operator_dev::create_job_namespace(&self.sim, namespace)
            .await
            .expect("a Spark job namespace");
    }

    pub fn apps(&self, namespace: &str) -> Api<SparkApplication> {
        Api::namespaced(self.client.clone(), namespace)
    }

    /// Creates a SparkApplication from YAML.
    pub async fn create_app(&self, yaml: &str) -> SparkApplication {
        let app: SparkApplication = serde_yaml::from_str(yaml).expect("a SparkApplication manifest");
        let namespace = app.metadata.namespace.clone().unwrap_or_else(|| "default".into());
        self.apps(&namespace)
            .create(&PostParams::default(), &app)
            .await
            .expect("the application is created")
    }

    /// Waits until the application satisfies `done`; panics with its last status after `limit`.
    pub async fn wait_app(
        &self,
        namespace: &str,
        name: &str,
        limit: Duration,
        done: impl Fn(&SparkApplication) -> bool,
    ) -> SparkApplication {
        wait_app(&self.apps(namespace), name, limit, done).await
    }

    /// Every application of a namespace, by name.
    pub async fn all_apps(&self, namespace: &str) -> BTreeMap<String, SparkApplication> {
        self.apps(namespace)
            .list(&ListParams::default())
            .await
            .expect("listing applications")
            .items
            .into_iter()
            .map(|a| (a.metadata.name.clone().unwrap_or_default(), a))
            .collect()
    }
}

/// An admission webhook running in this process (TLS, its own CA Secret), as if it were its own process.
pub struct Webhook {
    pub port: u16,
    inner: Controller,
}

impl Webhook {
    /// Stops it at once.
    pub fn kill(self) {
        self.inner.kill();
    }
}

impl Cluster {
    /// Registers the webhook configurations for a webhook on `port` of 127.0.0.1, as an installer does.
    pub async fn register_webhook(&self, port: u16, failure_policy: &str) {
        use k8s_openapi::api::admissionregistration::v1::{
            MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
        };
        use kube::api::{Patch, PatchParams};
        use spark_operator_webhook::configuration::{
            self, ConfigurationInput, Endpoint, MUTATING_NAME, Scope, VALIDATING_NAME,
        };
        let input = ConfigurationInput {
            endpoint: Endpoint::Url(format!("https://127.0.0.1:{port}")),
            failure_policy: failure_policy.to_owned(),
            timeout_seconds: 10,
            scope: Scope::All,
            ca_bundle: Vec::new(),
        };
        let apply = PatchParams::apply("e2e-installer").force();
        let mutating: Api<MutatingWebhookConfiguration> = Api::all(self.client.clone());
        mutating
            .patch(MUTATING_NAME, &apply, &Patch::Apply(configuration::mutating(&input)))
            .await
            .expect("the mutating webhook registers");
        let validating: Api<ValidatingWebhookConfiguration> = Api::all(self.client.clone());
        validating
            .patch(
                VALIDATING_NAME,
                &apply,
                &Patch::Apply(configuration::validating(&input)),
            )
            .await
            .expect("the validating webhook registers");
    }

    /// Starts the webhook (TLS, certificate for 127.0.0.1), registers it fail-closed, and waits until the
    /// API server gets answers from it (an invalid application refused in a dry run).
    pub async fn webhook(&self) -> Webhook {
        let port = free_port();
        self.register_webhook(port, "Fail").await;
        let webhook = self.start_webhook(port);
        let apps = self.apps("default");
        let mut probe: SparkApplication =
            serde_yaml::from_str(&app_yaml("webhook-probe", "1s", 0, 1, "")).expect("a probe application");
        probe.spec.driver.pod.memory = Some("lots".into());
        let refused = poll(Duration::from_secs(60), || async {
            match apps
                .create(
                    &PostParams {
                        dry_run: true,
                        ..PostParams::default()
                    },
                    &probe,
                )
                .await
            {
                Err(kube::Error::Api(status)) if status.message.contains("spec.driver.memory") => Poll::Done(()),
                other => Poll::Pending(format!("{other:?}")),
            }
        })
        .await;
        if let Err(last) = refused {
            panic!("the webhook never answered the API server: {last}");
        }
        webhook
    }

    /// Starts the webhook on `port` without registering it.
    pub fn start_webhook(&self, port: u16) -> Webhook {
        let settings = spark_operator_runtime::RuntimeSettings {
            identity: "e2e-webhook".into(),
            election: None,
            metrics: spark_operator_runtime::args::Listen::Off,
        };
        let inner = self.component("spark-webhook", settings, move |operator| {
            Box::pin(async move {
                let mut args = spark_operator_webhook::WebhookArgs::listening_on(([127, 0, 0, 1], port).into());
                args.webhook_ip_addresses = vec![std::net::IpAddr::from([127, 0, 0, 1])];
                if let Err(error) = spark_operator_webhook::run(args, &operator).await {
                    eprintln!("webhook stopped: {error}");
                }
            })
        });
        Webhook { port, inner }
    }
}

/// Name of every thread of an in-process controller (benchmarks measure their CPU time).
pub const CONTROLLER_THREAD: &str = "spark-ctl";
/// The thread name of in-process node agents.
pub const AGENT_THREAD: &str = "spark-agent";

/// Stack of the controller's threads: kube-runtime's controller nests deeply in debug builds.
const STACK: usize = 16 * 1024 * 1024;

/// A controller running in this process.
pub struct Controller {
    kill: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Controller {
    /// Whether its thread still runs (a controller that panicked or returned has stopped).
    pub fn is_running(&self) -> bool {
        self.thread.as_ref().is_some_and(|t| !t.is_finished())
    }

    /// Stops it at once, mid-whatever, as `kill -9` would.
    pub fn kill(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        if let Some(kill) = self.kill.take() {
            let _ = kill.send(());
        }
        if let Some(thread) = self.thread.take() {
            // Joining blocks this thread. On a test's multi-threaded runtime (which also runs the sim) it
            // must not hold a worker: a task parked in that worker's LIFO slot (say, the sim answering the
            // component's last request) cannot be stolen by the other worker and would wait for the join
            // that waits for it.
            let multi_thread = tokio::runtime::Handle::try_current()
                .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread);
            if multi_thread {
                tokio::task::block_in_place(|| {
                    let _ = thread.join();
                });
            } else {
                let _ = thread.join();
            }
        }
    }
}

impl Drop for Controller {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Waits until the application `name` of `apps` satisfies `done`; panics with its last status after `limit`
/// (either backend).
pub async fn wait_app(
    apps: &Api<SparkApplication>,
    name: &str,
    limit: Duration,
    done: impl Fn(&SparkApplication) -> bool,
) -> SparkApplication {
    let last = poll(limit, || async {
        match apps.get_opt(name).await.ok().flatten() {
            Some(app) if done(&app) => Poll::Done(app),
            other => Poll::Pending(other),
        }
    })
    .await;
    match last {
        Ok(app) => app,
        Err(last) => panic!(
            "{}/{name} did not get there within {limit:?}; last status: {}",
            apps.namespace().unwrap_or_default(),
            serde_json::to_string_pretty(&last.and_then(|a| a.status)).unwrap_or_default()
        ),
    }
}

/// The uids of every driver pod seen, by application name.
pub type DriverRecord = Arc<Mutex<BTreeMap<String, BTreeSet<String>>>>;

/// Records the uid of every driver pod ever created in `namespace`, by application (from a watch, until the
/// returned task is aborted or the runtime ends): a second driver for one application shows there.
pub fn record_drivers(client: &kube::Client, namespace: &str) -> (DriverRecord, tokio::task::JoinHandle<()>) {
    use futures::StreamExt;
    use kube::runtime::{WatchStreamExt, watcher};
    let drivers = Arc::new(Mutex::new(BTreeMap::<String, BTreeSet<String>>::new()));
    let seen = drivers.clone();
    let pods: Api<spark_operator_controller::pod::SparkPod> = Api::namespaced(client.clone(), namespace);
    let task = tokio::spawn(async move {
        let mut events =
            std::pin::pin!(watcher(pods, watcher::Config::default().labels("spark-role=driver")).touched_objects());
        while let Some(event) = events.next().await {
            let Ok(pod) = event else { continue };
            let labels = pod.metadata.labels.clone().unwrap_or_default();
            if let (Some(app), Some(uid)) = (labels.get("sparkoperator.k8s.io/app-name"), pod.metadata.uid.clone())
                && let Ok(mut drivers) = seen.lock()
            {
                drivers.entry(app.clone()).or_default().insert(uid);
            }
        }
    });
    (drivers, task)
}

/// Every application of `apps` COMPLETED with one execution, one submission and one driver pod ever (as
/// [`record_drivers`] saw them): no failure or failover ran anything twice.
pub fn assert_completed_once<'a>(
    apps: impl IntoIterator<Item = &'a SparkApplication>,
    drivers: &Mutex<BTreeMap<String, BTreeSet<String>>>,
) {
    let drivers = drivers.lock().map(|d| d.clone()).unwrap_or_default();
    for app in apps {
        let name = app.metadata.name.clone().unwrap_or_default();
        let status = app.status.clone().unwrap_or_default();
        assert_eq!(
            state(app),
            spark_operator_api::ApplicationStateType::Completed,
            "{name}: {status:#?}"
        );
        assert_eq!(status.execution_attempts, 1, "{name} ran more than once");
        assert_eq!(status.submission_attempts, 1, "{name} was submitted more than once");
        let count = drivers.get(&name).map_or(0, BTreeSet::len);
        assert_eq!(count, 1, "{name} had {count} driver pods");
    }
}

/// Kubeflow's examples (`tests/fixtures/kubeflow-examples/`, copied unchanged), by file stem, each as its
/// documents, with the Prometheus template's placeholders filled in (its image names a registry of the
/// reader's own).
pub fn kubeflow_examples() -> Vec<(String, Vec<serde_json::Value>)> {
    let dir = helm::repo_root().join("tests/fixtures/kubeflow-examples");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .expect("the examples")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    let mut out = Vec::new();
    for path in files {
        let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or_default().to_owned();
        let text = std::fs::read_to_string(&path)
            .expect("an example")
            .replace("{IMAGE_REGISTRY}/{IMAGE_REPOSITORY}/", "registry.example.com/spark/");
        let docs = serde_yaml::Deserializer::from_str(&text)
            .filter_map(|doc| <serde_json::Value as serde::Deserialize>::deserialize(doc).ok())
            .filter(|v| !v.is_null())
            .collect();
        out.push((stem, docs));
    }
    out
}

/// Waits up to a minute until every CRD of `names` is Established; panics naming the first that is not.
pub async fn wait_crds_established(client: &kube::Client, names: &[&str]) {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for name in names {
        let established = poll(Duration::from_secs(60), || async {
            let crd = match crds.get(name).await {
                Ok(crd) => crd,
                Err(error) => return Poll::Pending(error.to_string()),
            };
            let conditions = crd.status.and_then(|s| s.conditions).unwrap_or_default();
            if conditions
                .iter()
                .any(|c| c.type_ == "Established" && c.status == "True")
            {
                Poll::Done(())
            } else {
                Poll::Pending(format!("conditions {conditions:?}"))
            }
        })
        .await;
        if let Err(last) = established {
            panic!("the CRD {name} is not established after a minute: {last}");
        }
    }
}

/// One poll's verdict.
pub enum Poll<T, P> {
    Done(T),
    Pending(P),
}

/// Polls every 100 ms until done or `limit` passed; returns the last pending value on timeout.
pub async fn poll<T, P, F, Fut>(limit: Duration, mut check: F) -> Result<T, P>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Poll<T, P>>,
{
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        match check().await {
            Poll::Done(value) => return Ok(value),
            Poll::Pending(last) => {
                if tokio::time::Instant::now() >= deadline {
                    return Err(last);
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A small SparkApplication whose driver (the sim's fake Spark driver) runs `run_time`, then exits with
/// `exit_code`; `extra_spec` is merged into the spec (YAML mapping lines, indented by two). The driver
/// runs as `spark-operator-spark`, the ServiceAccount with the Spark Role in job namespaces.
pub fn app_yaml(name: &str, run_time: &str, exit_code: i32, executors: u32, extra_spec: &str) -> String {
    format!(
        r#"apiVersion: sparkoperator.k8s.io/v1beta2
kind: SparkApplication
metadata:
  name: {name}
  namespace: default
spec:
  type: Scala
  mode: cluster
  image: docker.io/apache/spark:4.0.4
  mainClass: org.apache.spark.examples.SparkPi
  mainApplicationFile: local:///opt/spark/examples/jars/spark-examples.jar
  sparkVersion: 4.0.4
  driver:
    cores: 1
    memory: 512m
    serviceAccount: spark-operator-spark
    annotations:
      sim.spark-operator.dev/run-time: "{run_time}"
      sim.spark-operator.dev/exit-code: "{exit_code}"
  executor:
    instances: {executors}
    cores: 1
    memory: 512m
{extra_spec}"#
    )
}

/// The state of an application.
pub fn state(app: &SparkApplication) -> spark_operator_api::ApplicationStateType {
    app.state()
}

/// utime + stime, in clock ticks, of a `/proc/<pid>/stat` or `/proc/<pid>/task/<tid>/stat` text: the fields
/// after the parenthesised command, where the state is field 3, utime 14 and stime 15.
pub fn cpu_ticks(stat: &str) -> Option<u64> {
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    Some(fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?)
}

/// A free port on the loopback interface (for a controller's `--metrics-address`).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// One plain HTTP/1.1 GET on the loopback interface: (status code, body), `None` when nothing answers.
pub async fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.ok()?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.ok()?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response).await.ok()?;
    let text = String::from_utf8_lossy(&response).into_owned();
    let code = text.split_whitespace().nth(1)?.parse().ok()?;
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    Some((code, body))
}

/// The value of an unlabelled metric in a Prometheus text exposition.
pub fn metric(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}
