//! The fake Spark driver: the default program of a `spark-role=driver` pod's driver container.
//!
//! Like Spark's driver it reads `spark.properties` from the ConfigMap volume mounted at its
//! conf dir (and the executor pod template from the one mounted where
//! `spark.kubernetes.executor.podTemplateFile` points), finds its own pod, creates the executor
//! ConfigMap and the executor pods through the API (see `spark_executor.rs`), waits for them to run, replaces failed ones (up to
//! `spark.executor.maxNumFailures`, then exits 11), runs for the scripted time, shuts its
//! executors down and deletes them (`spark.kubernetes.executor.deleteOnTermination`), and exits
//! with the scripted code. With `spark.dynamicAllocation.enabled=true` and the `churn-executors`
//! script key it churns executors instead: at most `spark.dynamicAllocation.maxExecutors` at
//! once, created at `churn-rate` per second, each released `executor-lifetime` after it runs.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use super::Shared;
use super::allocation::AllocationConf;
use super::hub::{PodEvent, label, pods_key};
use super::process::{Exit, ProcessCtx, Signal, next_signal, run_for};
use super::script::RunTime;
use super::spark_conf::{SparkConf, parse_properties, properties_path};
use super::spark_executor::{self, ExecutorInput};
use super::{spark_image, spark_main};
use crate::admission_seam::UserInfo;
use crate::auth::Attributes;
use crate::registry::{Gvr, ResourceKey};
use crate::status::ApiError;
use crate::store::{DeleteOptions, ListOptions, WriteOptions};

/// `ExecutorExitCode.EXCEED_MAX_EXECUTOR_FAILURES`.
const EXIT_MAX_EXECUTOR_FAILURES: i32 = 11;
/// The driver's default job length when the script does not say.
const DEFAULT_RUN_TIME: Duration = Duration::from_secs(1);

/// Reads the properties file through the volume it is mounted from, or Spark's error.
fn read_conf(ctx: &ProcessCtx, shared: &Shared) -> Result<SparkConf, String> {
    let path = properties_path(&ctx.container);
    read_mounted_file(ctx, shared, &path)
        .map(|text| SparkConf(parse_properties(&text)))
        .ok_or_else(|| {
            format!("java.lang.IllegalArgumentException: requirement failed: Properties file {path} does not exist")
        })
}

/// The executor pod template (`spark.kubernetes.executor.podTemplateFile`), read as Spark reads it:
/// from the file, which in a driver pod is a key of the pod-template ConfigMap mounted at its
/// directory. Spark loads it once when the SparkContext starts and fails there when it cannot.
fn read_executor_template(ctx: &ProcessCtx, shared: &Shared, conf: &SparkConf) -> Result<Option<Value>, String> {
    let Some(path) = conf.get("spark.kubernetes.executor.podTemplateFile") else {
        return Ok(None);
    };
    let path = path.strip_prefix("file://").unwrap_or(path);
    let text = read_mounted_file(ctx, shared, path);
    match text.as_deref().map(serde_yaml::from_str::<Value>) {
        Some(Ok(pod)) if pod.is_object() => Ok(Some(pod)),
        _ => Err("org.apache.spark.SparkException: Could not load pod from template file.".to_string()),
    }
}

/// The content of `path` in the driver container: the ConfigMap volume mounted at the longest
/// prefix of the path, and the key that file comes from (its `items`, else the file name).
fn read_mounted_file(ctx: &ProcessCtx, shared: &Shared, path: &str) -> Option<String> {
    let (mount, _, file) = ctx
        .container
        .get("volumeMounts")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|m| {
            let mp = m.get("mountPath").and_then(Value::as_str)?.trim_end_matches('/');
            path.strip_prefix(mp)
                .and_then(|rest| rest.strip_prefix('/'))
                .map(|rest| (m, mp.len(), rest.to_string()))
        })
        .max_by_key(|(_, len, _)| *len)?;
    let vol_name = mount.get("name").and_then(Value::as_str).unwrap_or("");
    let cm = ctx
        .pod
        .pointer("/spec/volumes")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .find(|v| v["name"] == vol_name)
        .and_then(|v| v.get("configMap"))?;
    let items = cm.get("items").and_then(Value::as_array).filter(|i| !i.is_empty());
    let key = match items {
        Some(items) => items
            .iter()
            .find(|i| i["path"] == file.as_str())
            .and_then(|i| i["key"].as_str())?
            .to_string(),
        None => file,
    };
    let ns = crate::meta::namespace(&ctx.pod);
    let name = cm.get("name").and_then(Value::as_str).unwrap_or("");
    let key_ref = ResourceKey {
        group: String::new(),
        resource: "configmaps".into(),
    };
    shared.store.get_stored(&key_ref, ns, name).and_then(|o| {
        o.pointer(&format!("/data/{}", key.replace('~', "~0").replace('/', "~1")))
            .and_then(Value::as_str)
            .map(str::to_string)
    })
}

struct Executor {
    name: String,
    node: String,
    uid: String,
    running_since: Option<Instant>,
    /// The driver let it go (shutdown or delete): its end is not a failure.
    released: bool,
}

struct Driver {
    ctx: ProcessCtx,
    shared: Arc<Shared>,
    conf: SparkConf,
    app_id: String,
    namespace: String,
    driver_pod: Value,
    prefix: String,
    config_map: String,
    /// The executor pod template, when `spark.kubernetes.executor.podTemplateFile` names one.
    template: Option<Value>,
    user: UserInfo,
    rx: mpsc::UnboundedReceiver<PodEvent>,
    /// Executors created and not yet finished (finished ones are forgotten: bounded memory).
    execs: HashMap<u64, Executor>,
    /// Executors seen running for the first time, for the churn loop to schedule their release.
    newly_running: Vec<u64>,
    /// Whether a failed executor is replaced at once (static allocation; the churn loop keeps
    /// its own count).
    replace_failed: bool,
    next_id: u64,
    /// How executor creation is paced (`ExecutorPodsAllocator`).
    alloc: AllocationConf,
    failures: i64,
    max_failures: i64,
    delete_on_termination: bool,
}

/// Runs the driver program.
pub(crate) async fn run(ctx: ProcessCtx, mut signals: watch::Receiver<Signal>) -> Exit {
    let Some(shared) = ctx.shared() else {
        return Exit::code(1);
    };
    let mut conf = match read_conf(&ctx, &shared) {
        Ok(c) => c,
        Err(msg) => {
            ctx.err(&format!("Exception in thread \"main\" {msg}"));
            return Exit::code(1);
        }
    };

    // spark-submit loads the application before anything else of Spark runs.
    if let Some(image) = ctx
        .container
        .get("image")
        .and_then(Value::as_str)
        .and_then(spark_image::official)
    {
        let launch = spark_main::launch(&image, &ctx.container, &conf);
        for line in &launch.log {
            ctx.err(line);
        }
        if let Some(code) = launch.exit {
            return Exit::code(code);
        }
    }
    let template = match read_executor_template(&ctx, &shared, &conf) {
        Ok(t) => t,
        Err(msg) => {
            ctx.err(&format!("ERROR SparkContext: Error initializing SparkContext.\n{msg}"));
            return Exit::code(1);
        }
    };
    let spark_version = label(&ctx.pod, "spark-version")
        .unwrap_or(spark_executor::SPARK_VERSION)
        .to_string();
    ctx.out(&format!("INFO SparkContext: Running Spark version {spark_version}"));
    let app_name = conf.get_or("spark.app.name", "spark").to_string();
    ctx.out(&format!("INFO SparkContext: Submitted application: {app_name}"));
    let namespace = conf.get_or("spark.kubernetes.namespace", "default").to_string();
    let pod_name = conf
        .get("spark.kubernetes.driver.pod.name")
        .unwrap_or(crate::meta::name(&ctx.pod))
        .to_string();
    // Spark's client authenticates with the token mounted in the pod: the pod's own ServiceAccount
    // (from the conf, or from a pod template that names one), not what the conf says.
    let sa = ctx
        .pod
        .pointer("/spec/serviceAccountName")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .unwrap_or("default")
        .to_string();
    let user = UserInfo {
        username: format!("system:serviceaccount:{namespace}:{sa}"),
        uid: String::new(),
        groups: vec![
            "system:serviceaccounts".into(),
            format!("system:serviceaccounts:{namespace}"),
            "system:authenticated".into(),
        ],
    };
    // Spark's first API call: the driver reads its own pod (`ExecutorPodsAllocator`); a
    // ServiceAccount without a Role for pods fails SparkContext's start here.
    let get_pod = Attributes::resource("get", "", "pods", &namespace, &pod_name);
    if let Err(e) = shared.store.authorize(&user, &get_pod) {
        ctx.err(&format!(
            "ERROR SparkContext: Error initializing SparkContext.\n{}",
            fabric8_error("GET", &format!("api/v1/namespaces/{namespace}/pods/{pod_name}"), &e)
        ));
        return Exit::code(1);
    }
    let Some(driver_pod) = shared.store.get_stored(&pods_key(), &namespace, &pod_name) else {
        ctx.err(&format!(
            "Exception in thread \"main\" org.apache.spark.SparkException: No pod was found named {pod_name} in the cluster in the namespace {namespace} (this was supposed to be the driver pod.)."
        ));
        return Exit::code(1);
    };
    conf.bind_to_pod_ip(&driver_pod);
    let app_id = conf
        .get("spark.app.id")
        .map(str::to_string)
        .unwrap_or_else(|| format!("spark-{}", uuid::Uuid::new_v4().simple()));
    let dynamic = conf.bool_or("spark.dynamicAllocation.enabled", false);
    // `SchedulerBackendUtils.getInitialTargetExecutorNumber`: 2 by default, or under dynamic
    // allocation the largest of min, initial and spark.executor.instances (unset: 0).
    let instances = if dynamic {
        let min = conf.int_or("spark.dynamicAllocation.minExecutors", 0);
        let initial = conf.int_or("spark.dynamicAllocation.initialExecutors", 0);
        let fixed = conf.int_or("spark.executor.instances", 0);
        match (min, initial, fixed) {
            (Ok(a), Ok(b), Ok(c)) => Ok(a.max(b).max(c)),
            (Err(e), _, _) | (_, Err(e), _) | (_, _, Err(e)) => Err(e),
        }
    } else {
        conf.int_or("spark.executor.instances", 2)
    };
    let max_execs = conf.int_or("spark.dynamicAllocation.maxExecutors", i64::from(i32::MAX));
    let (instances, max_execs) = match (instances, max_execs) {
        (Ok(i), Ok(m)) => (i.max(0), m.max(0)),
        (Err(e), _) | (_, Err(e)) => {
            ctx.err(&format!(
                "Exception in thread \"main\" java.lang.IllegalArgumentException: {e}"
            ));
            return Exit::code(1);
        }
    };
    let effective = if dynamic { max_execs } else { instances };
    let default_failures = if effective > i64::from(i32::MAX) / 2 {
        i64::from(i32::MAX)
    } else {
        (2 * effective).max(3)
    };
    let max_failures = conf
        .int_or("spark.executor.maxNumFailures", default_failures)
        .unwrap_or(default_failures);
    let alloc = match AllocationConf::from_conf(&conf) {
        Ok(a) => a,
        Err(e) => {
            ctx.err(&format!(
                "Exception in thread \"main\" java.lang.IllegalArgumentException: requirement failed: {e}"
            ));
            return Exit::code(1);
        }
    };
    let (tx, rx) = mpsc::unbounded_channel();
    shared.hub.add_driver(&app_id, tx);
    let mut driver = Driver {
        prefix: conf
            .get("spark.kubernetes.executor.podNamePrefix")
            .map(str::to_string)
            .unwrap_or_else(|| spark_executor::resource_name_prefix(&app_name)),
        config_map: format!("spark-exec-{}-conf-map", spark_executor::unique_id()),
        delete_on_termination: conf.bool_or("spark.kubernetes.executor.deleteOnTermination", true),
        template,
        ctx,
        shared: shared.clone(),
        conf,
        app_id: app_id.clone(),
        namespace,
        driver_pod: Value::clone(&driver_pod),
        user,
        rx,
        execs: HashMap::new(),
        newly_running: Vec::new(),
        replace_failed: true,
        next_id: 0,
        alloc,
        failures: 0,
        max_failures,
    };
    let exit = driver.main(dynamic, instances, max_execs, &mut signals).await;
    shared.hub.remove_driver(&app_id);
    shared.allocations.remove(&app_id);
    exit
}

/// What ended the job early.
enum Stop {
    Sigterm,
    Failed(Exit),
}

impl Driver {
    /// What the API server would decide for this request by the driver's ServiceAccount.
    fn authorize(&self, verb: &str, resource: &str, name: &str) -> Result<(), ApiError> {
        self.shared.store.authorize(
            &self.user,
            &Attributes::resource(verb, "", resource, &self.namespace, name),
        )
    }

    fn write_opts(&self) -> WriteOptions {
        WriteOptions {
            user_agent: Some("fabric8-kubernetes-client/7.1.0".into()),
            user: self.user.clone(),
            ..Default::default()
        }
    }

    async fn main(
        &mut self,
        dynamic: bool,
        instances: i64,
        max_execs: i64,
        signals: &mut watch::Receiver<Signal>,
    ) -> Exit {
        let cm = spark_executor::executor_config_map(&self.config_map, &self.namespace, &self.app_id, &self.driver_pod);
        let created = match self.authorize("create", "configmaps", "") {
            Ok(()) => {
                self.shared
                    .store
                    .create(
                        &Gvr::new("", "v1", "configmaps"),
                        &self.namespace,
                        cm,
                        &self.write_opts(),
                    )
                    .await
            }
            Err(e) => Err(e),
        };
        if let Err(e) = created {
            self.ctx.err(&format!(
                "ERROR SparkContext: Error initializing SparkContext.\n{}",
                fabric8_error("POST", &format!("api/v1/namespaces/{}/configmaps", self.namespace), &e)
            ));
            return Exit::code(1);
        }
        let script = self.ctx.script.clone();
        let outcome = match (dynamic, script.churn_executors) {
            (true, Some(total)) => {
                self.churn(total, max_execs, script.churn_rate, script.executor_lifetime, signals)
                    .await
            }
            _ => self.static_executors(instances, signals).await,
        };
        let outcome = match outcome {
            Ok(()) => {
                self.ctx.out("INFO DAGScheduler: Job 0 started");
                let run_time = script.run_time.or(Some(RunTime::For(DEFAULT_RUN_TIME)));
                self.run_job(run_time, signals).await
            }
            Err(stop) => Err(stop),
        };
        self.stop().await;
        match outcome {
            Ok(()) => {
                let exit = self.ctx.scripted_exit();
                if exit.code != 0 && !exit.oom {
                    self.ctx.err("Exception in thread \"main\" org.apache.spark.SparkException: Job aborted due to stage failure (scripted by sim.spark-operator.dev/exit-code)");
                }
                exit
            }
            Err(Stop::Sigterm) => {
                self.ctx.err("ERROR SparkContext: RECEIVED SIGNAL TERM");
                self.ctx.on_sigterm().await
            }
            Err(Stop::Failed(exit)) => exit,
        }
    }

    /// Runs the job for `run_time`, replacing executors that fail meanwhile.
    async fn run_job(&mut self, run_time: Option<RunTime>, signals: &mut watch::Receiver<Signal>) -> Result<(), Stop> {
        let job = run_for(run_time, None);
        tokio::pin!(job);
        loop {
            tokio::select! {
                _ = &mut job => return Ok(()),
                _ = next_signal(signals) => return Err(Stop::Sigterm),
                ev = self.rx.recv() => {
                    if let Some(ev) = ev {
                        self.observe(ev).await?;
                    }
                }
            }
        }
    }

    /// Creates executors round by round as `ExecutorPodsAllocator` does (see
    /// [`super::allocation`]) until `target` run.
    async fn static_executors(&mut self, target: i64, signals: &mut watch::Receiver<Signal>) -> Result<(), Stop> {
        let target = usize::try_from(target).unwrap_or(usize::MAX);
        let mut next_round = Instant::now();
        loop {
            let now = Instant::now();
            if next_round <= now {
                let known = self.execs.len();
                let not_running = self.execs.values().filter(|e| e.running_since.is_none()).count();
                let n = self.alloc.round_size(target, known, not_running);
                if n > 0 {
                    self.ctx.out(&format!(
                        "INFO ExecutorPodsAllocator: Going to request {n} executors from Kubernetes for ResourceProfile Id: 0, target: {target}, known: {known}, sharedSlotFromPendingPods: {}.",
                        self.alloc.max_pending.saturating_sub(not_running)
                    ));
                }
                for _ in 0..n {
                    self.create_executor().await;
                }
                self.shared.allocations.record(&self.app_id, n);
                next_round = now + self.alloc.batch_delay;
            }
            let running = self.execs.values().filter(|e| e.running_since.is_some()).count();
            if running >= target {
                self.ctx.out("INFO KubernetesClusterSchedulerBackend: SchedulerBackend is ready for scheduling beginning after reached minRegisteredResourcesRatio: 0.8");
                return Ok(());
            }
            tokio::select! {
                _ = next_signal(signals) => return Err(Stop::Sigterm),
                ev = self.rx.recv() => {
                    if let Some(ev) = ev {
                        self.observe(ev).await?;
                    }
                }
                _ = tokio::time::sleep_until(next_round) => {}
            }
        }
    }

    async fn churn(
        &mut self,
        total: u64,
        max_execs: i64,
        rate: Option<f64>,
        lifetime: Duration,
        signals: &mut watch::Receiver<Signal>,
    ) -> Result<(), Stop> {
        let interval = rate.map(|r| Duration::from_secs_f64(1.0 / r));
        let max_execs = usize::try_from(max_execs).unwrap_or(usize::MAX);
        let mut next_create = Instant::now();
        let mut release: BinaryHeap<Reverse<(Instant, u64)>> = BinaryHeap::new();
        let mut created = 0u64;
        self.replace_failed = false;
        loop {
            let now = Instant::now();
            while created < total && self.execs.len() < max_execs && next_create <= now {
                self.create_executor().await;
                created += 1;
                if let Some(i) = interval {
                    next_create = (next_create + i).max(now - i);
                }
            }
            for id in self.newly_running.drain(..) {
                release.push(Reverse((now + lifetime, id)));
            }
            while let Some(Reverse((due, id))) = release.peek().copied() {
                if due > now {
                    break;
                }
                release.pop();
                self.release(id).await;
            }
            if created >= total && self.execs.is_empty() {
                self.ctx.out(&format!(
                    "INFO ExecutorPodsAllocator: churned through {created} executors"
                ));
                return Ok(());
            }
            let mut wake = release.peek().map(|Reverse((t, _))| *t);
            if created < total && self.execs.len() < max_execs {
                wake = Some(wake.map_or(next_create, |w| w.min(next_create)));
            }
            tokio::select! {
                _ = next_signal(signals) => return Err(Stop::Sigterm),
                ev = self.rx.recv() => {
                    if let Some(ev) = ev {
                        self.observe(ev).await?;
                        while let Ok(ev) = self.rx.try_recv() {
                            self.observe(ev).await?;
                        }
                    }
                }
                _ = async { match wake { Some(t) => tokio::time::sleep_until(t).await, None => std::future::pending().await } } => {}
            }
        }
    }

    /// Creates the next executor pod; a failure uses up its id, as in Spark.
    async fn create_executor(&mut self) {
        self.next_id += 1;
        let id = self.next_id;
        let spark_user = self
            .ctx
            .container
            .get("env")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .find(|e| e["name"] == "SPARK_USER")
            .and_then(|e| e["value"].as_str())
            .unwrap_or("root")
            .to_string();
        let pod = spark_executor::executor_pod(&ExecutorInput {
            conf: &self.conf,
            app_id: &self.app_id,
            exec_id: id,
            driver_pod: &self.driver_pod,
            name_prefix: &self.prefix,
            config_map: &self.config_map,
            spark_user: &spark_user,
            template: self.template.as_ref(),
        });
        let pod = match pod {
            Ok(p) => p,
            Err(msg) => {
                self.ctx.err(&format!(
                    "WARN ExecutorPodsAllocator: Exception when requesting new executors: {msg}"
                ));
                return;
            }
        };
        let name = crate::meta::name(&pod).to_string();
        let created = match self.authorize("create", "pods", "") {
            Ok(()) => {
                self.shared
                    .store
                    .create(&Gvr::new("", "v1", "pods"), &self.namespace, pod, &self.write_opts())
                    .await
            }
            Err(e) => Err(e),
        };
        match created {
            Ok(_) => {
                self.execs.insert(
                    id,
                    Executor {
                        name,
                        node: String::new(),
                        uid: String::new(),
                        running_since: None,
                        released: false,
                    },
                );
            }
            Err(e) => {
                self.ctx.err(&format!(
                    "WARN ExecutorPodsAllocator: Exception when requesting new executors\n{}",
                    fabric8_error("POST", &format!("api/v1/namespaces/{}/pods", self.namespace), &e)
                ));
            }
        }
    }

    /// Tells an executor to shut down (it exits 0); deletes its pod if it cannot be reached.
    async fn release(&mut self, id: u64) {
        let Some(e) = self.execs.get_mut(&id) else { return };
        e.released = true;
        let reached = self.shared.signal_executor(&e.node, &e.uid);
        if !reached {
            let name = e.name.clone();
            self.delete_pod(&name).await;
        }
    }

    async fn delete_pod(&self, name: &str) {
        if let Err(e) = self.authorize("delete", "pods", name) {
            self.ctx.err(&format!(
                "WARN ExecutorPodsLifecycleManager: deleting executor pod {name}: {e}"
            ));
            return;
        }
        match self
            .shared
            .store
            .delete(
                &Gvr::new("", "v1", "pods"),
                &self.namespace,
                name,
                &DeleteOptions {
                    user: self.user.clone(),
                    ..Default::default()
                },
            )
            .await
        {
            Ok(_) | Err(ApiError::NotFound(_)) => {}
            Err(e) => self.ctx.err(&format!(
                "WARN ExecutorPodsLifecycleManager: deleting executor pod {name}: {e}"
            )),
        }
    }

    /// Follows one executor pod event (`ExecutorPodsLifecycleManager`).
    async fn observe(&mut self, ev: PodEvent) -> Result<(), Stop> {
        let pod = ev.object().clone();
        let Some(id) = label(&pod, "spark-exec-id").and_then(|i| i.parse::<u64>().ok()) else {
            return Ok(());
        };
        let deleted = matches!(ev, PodEvent::Deleted(_));
        let Some(e) = self.execs.get_mut(&id) else {
            return Ok(());
        };
        e.uid = crate::meta::uid(&pod).to_string();
        e.node = super::hub::node_name(&pod).to_string();
        let phase = pod
            .pointer("/status/phase")
            .and_then(Value::as_str)
            .unwrap_or("Pending");
        if phase == "Running" && e.running_since.is_none() {
            e.running_since = Some(Instant::now());
            self.newly_running.push(id);
        }
        let terminal = matches!(phase, "Succeeded" | "Failed");
        if !(terminal || deleted) {
            return Ok(());
        }
        let (released, name) = (e.released, e.name.clone());
        self.execs.remove(&id);
        if !released {
            self.failures += 1;
            let why = if deleted {
                "deleted".to_string()
            } else {
                exit_summary(&pod)
            };
            self.ctx.err(&format!(
                "ERROR TaskSchedulerImpl: Lost executor {id} on {}: {why}",
                crate::meta::name(&pod)
            ));
            if self.failures > self.max_failures {
                self.ctx.err(&format!(
                    "ERROR ExecutorPodsAllocator: Max number of executor failures ({}) reached",
                    self.max_failures
                ));
                return Err(Stop::Failed(Exit::code(EXIT_MAX_EXECUTOR_FAILURES)));
            }
        }
        if terminal && !deleted && self.delete_on_termination {
            self.delete_pod(&name).await;
        }
        if !released && !deleted && self.replace_failed {
            // The allocator asks for a replacement to keep the target.
            self.create_executor().await;
        }
        Ok(())
    }

    /// `SparkContext.stop()`: executors shut down, then their pods, ConfigMap and the driver
    /// Service are deleted.
    async fn stop(&mut self) {
        for e in self.execs.values_mut() {
            e.released = true;
            self.shared.signal_executor(&e.node, &e.uid);
        }
        let opts = DeleteOptions {
            user: self.user.clone(),
            ..Default::default()
        };
        let selector = format!("spark-app-selector={},spark-role=executor", self.app_id);
        let list = ListOptions {
            label_selector: Some(selector.clone()),
            ..Default::default()
        };
        if self.delete_on_termination {
            for (resource, what) in [("pods", "executor pods"), ("configmaps", "executor ConfigMap")] {
                let deleted = match self.authorize("deletecollection", resource, "") {
                    Ok(()) => self
                        .shared
                        .store
                        .delete_collection(&Gvr::new("", "v1", resource), Some(&self.namespace), &list, &opts)
                        .await
                        .map(drop),
                    Err(e) => Err(e),
                };
                if let Err(e) = deleted {
                    self.ctx.err(&format!(
                        "WARN KubernetesClusterSchedulerBackend: deleting the {what}: {e}"
                    ));
                }
            }
        }
        if self
            .conf
            .bool_or("spark.kubernetes.driver.service.deleteOnTermination", true)
        {
            let svc = ListOptions {
                label_selector: Some(format!("spark-app-selector={}", self.app_id)),
                ..Default::default()
            };
            let deleted = match self.authorize("deletecollection", "services", "") {
                Ok(()) => self
                    .shared
                    .store
                    .delete_collection(&Gvr::new("", "v1", "services"), Some(&self.namespace), &svc, &opts)
                    .await
                    .map(drop),
                Err(e) => Err(e),
            };
            if let Err(e) = deleted {
                self.ctx.err(&format!(
                    "WARN KubernetesClusterSchedulerBackend: deleting the driver service: {e}"
                ));
            }
        }
        self.ctx.out("INFO SparkContext: Successfully stopped SparkContext");
    }
}

/// How fabric8 reports a failed request (`KubernetesClientException`), with the hint it adds
/// to a 403 for in-cluster clients.
fn fabric8_error(method: &str, path: &str, e: &ApiError) -> String {
    let hint = if e.code() == 403 {
        "Forbidden!Configured service account doesn't have access. Service account may have been revoked. "
    } else {
        ""
    };
    format!(
        "io.fabric8.kubernetes.client.KubernetesClientException: Failure executing: {method} at: https://kubernetes.default.svc/{path}. Message: {hint}{e}."
    )
}

/// `The executor with id N exited with exit code C(reason).` as Spark logs it.
fn exit_summary(pod: &Value) -> String {
    let status = pod.pointer("/status/containerStatuses/0/state/terminated");
    let code = status.and_then(|t| t["exitCode"].as_i64()).unwrap_or(-1);
    let reason = status.and_then(|t| t["reason"].as_str()).unwrap_or("");
    format!("The executor exited with exit code {code}({reason}).")
}
