//! One pod on one node, from the moment it is bound until its final status is written (and,
//! when it was deleted, until the kubelet removes it with grace 0). Event-driven, like the
//! kubelet's pod workers: it wakes for pod updates, process exits and its own timers only.
//!
//! Container starts, restarts and pulls are in `containers.rs`; the status it reports is built
//! in `pod_status.rs`.

use std::path::PathBuf;
use std::sync::{Arc, Weak};
use std::time::Duration;

use serde_json::{Map, Value, json};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use super::Shared;
use super::config::KubeletConfig;
use super::events::Recorder;
use super::pod_status::{self, CState, Cond, ContainerView, PhaseCounts, TermInfo, Written};
use super::process::{Exit, Signal};
use super::runtime::Runtime;
use super::script::{self, Program, Script, ScriptError};
use crate::store::Store;

/// What a pod worker is told.
#[derive(Debug)]
pub(crate) enum WorkerMsg {
    /// The pod changed in the API.
    Update(Arc<Value>),
    /// The pod is gone from the API (force deletion, or the kubelet's own final delete).
    Gone,
    /// A container's process ended by itself (or on SIGTERM).
    Exited { idx: usize, attempt: u32, exit: Exit },
    /// Node-pressure eviction.
    Evict { message: String },
    /// The Spark driver told this executor to shut down.
    DriverShutdown,
    /// A process container's prober reports.
    Probe {
        idx: usize,
        attempt: u32,
        event: super::probes::ProbeEvent,
    },
}

/// What every worker of a node shares.
pub(crate) struct WorkerCtx {
    pub shared: Weak<Shared>,
    pub store: Store,
    pub node: String,
    pub node_root: PathBuf,
    /// The sim's data directory, hidden from process containers.
    pub data_dir: PathBuf,
    pub host_ip: String,
    pub runtime: Arc<Runtime>,
    pub recorder: Recorder,
    pub config: KubeletConfig,
    pub online: watch::Receiver<bool>,
    pub config_changes: watch::Receiver<u64>,
}

/// The kubelet never gives containers less than this to stop (`minimumGracePeriodInSeconds`).
const MIN_GRACE: Duration = Duration::from_secs(2);

/// One container of the pod and everything the kubelet tracks about it.
pub(crate) struct Ctr {
    pub name: String,
    pub spec: Value,
    pub image: String,
    pub init: bool,
    /// An init container with `restartPolicy: Always`.
    pub sidecar: bool,
    pub script: Result<Script, ScriptError>,
    /// The attempt number of the newest container (the API's restartCount).
    pub attempt: u32,
    pub id: Option<String>,
    pub state: CState,
    pub last: Option<TermInfo>,
    pub process: Option<(tokio::task::AbortHandle, watch::Sender<Signal>)>,
    pub log_path: Option<PathBuf>,
    pub wake: Option<Instant>,
    pub pulled: bool,
    pub pull_started: Option<Instant>,
    pub pull_backoff: Duration,
    /// None until the first restart: the kubelet restarts at once the first time.
    pub crash_backoff: Option<Duration>,
    /// The last warning recorded for this container, so a waiting container is not reported
    /// again on every retry.
    pub reported: Option<String>,
    /// A local image's executable: the container runs a real process.
    pub local: Option<PathBuf>,
    /// The readiness probe's result (true without a readiness probe while running).
    pub ready: bool,
    /// The startup probe succeeded (true without one while running).
    pub started: bool,
    pub prober: Option<tokio::task::AbortHandle>,
    /// A probe failure is killing the container: SIGKILL at this time if it still runs.
    pub kill_at: Option<Instant>,
}

impl Ctr {
    fn new(spec: &Value, init: bool, pod: &Value, config: &KubeletConfig) -> Self {
        let name = spec.get("name").and_then(Value::as_str).unwrap_or("").to_string();
        let image = spec.get("image").and_then(Value::as_str).unwrap_or("").to_string();
        let local = super::local_images::lookup(&config.local_images, &image).map(PathBuf::from);
        let sidecar = init && spec.get("restartPolicy").and_then(Value::as_str) == Some("Always");
        Self {
            name,
            image,
            init,
            sidecar,
            script: script::resolve(pod, spec, &config.image_scripts),
            spec: spec.clone(),
            attempt: 0,
            id: None,
            state: CState::waiting("ContainerCreating", None),
            last: None,
            process: None,
            log_path: None,
            wake: None,
            pulled: false,
            pull_started: None,
            pull_backoff: config.image_pull_backoff,
            crash_backoff: None,
            reported: None,
            local,
            ready: false,
            started: false,
            prober: None,
            kill_at: None,
        }
    }

    pub fn running(&self) -> bool {
        matches!(self.state, CState::Running { .. })
    }

    /// Ready as the status reports it: running and its readiness probe (if any) succeeded.
    pub fn is_ready(&self) -> bool {
        self.running() && self.ready
    }

    pub fn has_readiness(&self) -> bool {
        self.spec.get("readinessProbe").is_some()
    }

    pub fn has_startup(&self) -> bool {
        self.spec.get("startupProbe").is_some()
    }

    pub(crate) fn stop_prober(&mut self) {
        if let Some(p) = self.prober.take() {
            p.abort();
        }
    }

    fn exit_code(&self) -> Option<i32> {
        match &self.state {
            CState::Terminated(t) => Some(t.exit_code),
            _ => None,
        }
    }
}

struct Terminating {
    deadline: Instant,
}

pub(crate) struct Worker {
    pub(crate) ctx: Arc<WorkerCtx>,
    pub(crate) pod: Arc<Value>,
    pub(crate) ns: String,
    pub(crate) name: String,
    pub(crate) uid: String,
    pub(crate) restart_policy: String,
    pub(crate) tx: mpsc::UnboundedSender<WorkerMsg>,
    rx: mpsc::UnboundedReceiver<WorkerMsg>,
    pub(crate) ctrs: Vec<Ctr>,
    pub(crate) n_init: usize,
    pub(crate) sandbox: Option<String>,
    pub(crate) pod_ip: Option<String>,
    sandbox_retry: Option<Instant>,
    /// When the volumes of a pod with running process containers are synced next.
    volume_sync: Option<Instant>,
    volume_error: Option<String>,
    start_time: String,
    conds: Vec<Cond>,
    terminating: Option<Terminating>,
    /// Main containers are done; remaining sidecars are being stopped.
    completing: bool,
    final_phase: Option<&'static str>,
    evicted: Option<String>,
    gone: bool,
    pub(crate) dirty: bool,
    retry_write: Option<Instant>,
    /// Events decided where nothing can be awaited (probe results), recorded on the next step.
    pending_events: Vec<(Option<String>, &'static str, &'static str, String)>,
}

impl Worker {
    pub fn new(ctx: Arc<WorkerCtx>, pod: Arc<Value>) -> (Self, mpsc::UnboundedSender<WorkerMsg>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let list = |f: &str| {
            pod.pointer(&format!("/spec/{f}"))
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default()
        };
        let inits = list("initContainers");
        let mut ctrs: Vec<Ctr> = inits.iter().map(|c| Ctr::new(c, true, &pod, &ctx.config)).collect();
        ctrs.extend(list("containers").iter().map(|c| Ctr::new(c, false, &pod, &ctx.config)));
        let now = crate::meta::now_rfc3339();
        let conds = pod_status::KUBELET_CONDITIONS
            .iter()
            .map(|t| Cond {
                type_: t,
                status: false,
                reason: None,
                message: None,
                since: now.clone(),
            })
            .collect();
        let worker = Self {
            ns: crate::meta::namespace(&pod).to_string(),
            name: crate::meta::name(&pod).to_string(),
            uid: crate::meta::uid(&pod).to_string(),
            restart_policy: pod
                .pointer("/spec/restartPolicy")
                .and_then(Value::as_str)
                .unwrap_or("Always")
                .to_string(),
            n_init: inits.len(),
            ctx,
            pod,
            tx: tx.clone(),
            rx,
            ctrs,
            sandbox: None,
            pod_ip: None,
            sandbox_retry: None,
            volume_sync: None,
            volume_error: None,
            start_time: now,
            conds,
            terminating: None,
            completing: false,
            final_phase: None,
            evicted: None,
            gone: false,
            dirty: true,
            retry_write: None,
            pending_events: Vec::new(),
        };
        (worker, tx)
    }

    pub(crate) async fn event(&self, field: Option<&str>, type_: &str, reason: &str, message: &str) {
        self.ctx
            .recorder
            .record(&self.pod, "Pod", field, type_, reason, message)
            .await;
    }

    /// Runs the pod until its final status is written.
    pub async fn run(mut self) {
        let mut online = self.ctx.online.clone();
        let mut config_changes = self.ctx.config_changes.clone();
        config_changes.mark_unchanged();
        loop {
            let now = Instant::now();
            self.step(now).await;
            if self.dirty && *online.borrow() && self.retry_write.is_none_or(|t| t <= now) {
                self.flush().await;
            }
            if self.final_phase.is_some() && !self.dirty {
                // The deletion may not have reached this worker yet: ask the store.
                let stored = self.ctx.store.get_stored(&super::hub::pods_key(), &self.ns, &self.name);
                let deleting = stored.is_some_and(|p| crate::meta::uid(&p) == self.uid && crate::meta::is_deleting(&p));
                if !self.gone && deleting {
                    pod_status::finish_deletion(&self.ctx.store, &self.ns, &self.name, &self.uid).await;
                }
                return;
            }
            let wake = self.next_wake();
            tokio::select! {
                msg = self.rx.recv() => {
                    if let Some(m) = msg {
                        self.handle(m);
                    }
                    while let Ok(m) = self.rx.try_recv() {
                        self.handle(m);
                    }
                }
                _ = sleep_until(wake) => {}
                r = config_changes.changed() => {
                    if r.is_err() {
                        // The cluster is shutting down; nothing will change any more.
                        std::future::pending::<()>().await;
                    }
                }
                r = online.changed() => {
                    if r.is_err() {
                        std::future::pending::<()>().await;
                    }
                }
            }
        }
    }

    fn next_wake(&self) -> Option<Instant> {
        let mut wake = self.ctrs.iter().filter_map(|c| c.wake).min();
        let mut add = |t: Option<Instant>| {
            if let Some(t) = t {
                wake = Some(wake.map_or(t, |w| w.min(t)));
            }
        };
        add(self.terminating.as_ref().map(|t| t.deadline));
        for c in &self.ctrs {
            add(c.kill_at);
        }
        add(self.sandbox_retry);
        add(self.volume_sync);
        if self.dirty {
            add(self.retry_write);
        }
        wake
    }

    fn handle(&mut self, msg: WorkerMsg) {
        match msg {
            WorkerMsg::Update(pod) => {
                // Annotations may have been fixed: containers that could not resolve their
                // script try again.
                for c in self.ctrs.iter_mut().filter(|c| c.script.is_err()) {
                    c.script = script::resolve(&pod, &c.spec, &self.ctx.config.image_scripts);
                }
                if let Some(t) = &mut self.terminating {
                    // A second delete may shorten the grace period, never lengthen it.
                    let deadline = Instant::now() + grace_of(&pod);
                    t.deadline = t.deadline.min(deadline);
                }
                self.pod = pod;
            }
            WorkerMsg::Gone => self.gone = true,
            WorkerMsg::Exited { idx, attempt, exit } => {
                if self.ctrs.get(idx).is_some_and(|c| c.attempt == attempt && c.running()) {
                    self.record_exit(idx, exit);
                }
            }
            WorkerMsg::Evict { message } => {
                if self.final_phase.is_none() && self.evicted.is_none() {
                    self.evicted = Some(message);
                }
            }
            WorkerMsg::DriverShutdown => {
                for c in &self.ctrs {
                    let executor =
                        c.local.is_none() && c.script.as_ref().is_ok_and(|s| s.program == Program::SparkExecutor);
                    if let (true, Some((_, sig))) = (executor, &c.process) {
                        sig.send_if_modified(|s| {
                            let changed = *s == Signal::None;
                            if changed {
                                *s = Signal::DriverShutdown;
                            }
                            changed
                        });
                    }
                }
            }
            WorkerMsg::Probe { idx, attempt, event } => {
                if self.ctrs.get(idx).is_some_and(|c| c.attempt == attempt && c.running()) {
                    self.probe_event(idx, event);
                }
            }
        }
    }

    /// What the kubelet does with a probe's report: `Unhealthy` for a failure; readiness sets
    /// the container's `ready`; a failed startup or liveness probe kills the container (restarted
    /// per `restartPolicy`).
    fn probe_event(&mut self, i: usize, event: super::probes::ProbeEvent) {
        use super::probes::{ProbeEvent, ProbeKind};
        let field = container_field(&self.ctrs[i]);
        match event {
            ProbeEvent::Failed { kind, output } => {
                let msg = format!("{} probe failed: {output}", kind.title());
                self.pending_events.push((Some(field), "Warning", "Unhealthy", msg));
            }
            ProbeEvent::Result { kind, success } => match kind {
                ProbeKind::Readiness => {
                    self.ctrs[i].ready = success;
                    self.dirty = true;
                }
                ProbeKind::Startup if success => {
                    self.ctrs[i].started = true;
                    if !self.ctrs[i].has_readiness() {
                        self.ctrs[i].ready = true;
                    }
                    self.dirty = true;
                }
                _ if success => {}
                _ => {
                    if self.terminating.is_some() || self.ctrs[i].kill_at.is_some() {
                        return;
                    }
                    let c = &mut self.ctrs[i];
                    let msg = format!("Container {} failed {} probe, will be restarted", c.name, kind.lower());
                    if let Some((_, sig)) = &c.process {
                        sig.send_replace(Signal::Term);
                    }
                    // The probe's own terminationGracePeriodSeconds wins over the pod's.
                    let grace = c
                        .spec
                        .pointer(&format!("/{}/terminationGracePeriodSeconds", kind.field()))
                        .and_then(Value::as_i64)
                        .map_or_else(|| grace_of(&self.pod), |s| Duration::from_secs(s.max(0) as u64));
                    c.kill_at = Some(Instant::now() + grace.max(MIN_GRACE));
                    self.pending_events.push((Some(field), "Normal", "Killing", msg));
                }
            },
        }
    }

    async fn step(&mut self, now: Instant) {
        self.sync_volumes(now);
        for (field, type_, reason, msg) in std::mem::take(&mut self.pending_events) {
            self.event(field.as_deref(), type_, reason, &msg).await;
        }
        if self.final_phase.is_some() {
            return;
        }
        for i in 0..self.ctrs.len() {
            if self.ctrs[i].kill_at.is_some_and(|t| t <= now) && self.ctrs[i].running() && self.terminating.is_none() {
                if let Some((abort, _)) = self.ctrs[i].process.take() {
                    abort.abort();
                }
                self.record_exit(i, Exit::code(137));
            }
        }
        if self.terminating.is_none() {
            let deleting = self.gone || crate::meta::is_deleting(&self.pod);
            if deleting || self.evicted.is_some() {
                let grace = if self.gone || self.evicted.is_some() {
                    MIN_GRACE
                } else {
                    grace_of(&self.pod)
                };
                self.begin_termination(now, grace).await;
            }
        }
        if self.terminating.is_some() {
            self.step_terminating(now).await;
            return;
        }
        if self.sandbox.is_none() && !self.setup_sandbox(now).await {
            return;
        }
        let mut init_ok = true;
        for i in 0..self.n_init {
            if !self.ctrs[i].sidecar && self.ctrs[i].exit_code() == Some(0) {
                continue;
            }
            self.advance(i, now).await;
            let c = &self.ctrs[i];
            let through = if c.sidecar {
                c.running() || c.last.is_some()
            } else {
                c.exit_code() == Some(0)
            };
            if !through {
                init_ok = false;
                break;
            }
        }
        if init_ok {
            for i in self.n_init..self.ctrs.len() {
                self.advance(i, now).await;
            }
        }
        let init_failed = self.ctrs[..self.n_init]
            .iter()
            .any(|c| !c.sidecar && c.exit_code().is_some_and(|e| e != 0) && !self.should_restart(c, e_or(c)));
        let mains_done = init_ok
            && self.ctrs[self.n_init..]
                .iter()
                .all(|c| c.exit_code().is_some_and(|e| !self.should_restart(c, e)));
        if init_failed {
            self.finalize(false);
        } else if mains_done {
            // Sidecars are stopped once the main containers are done (1.29+).
            if self.ctrs.iter().any(Ctr::running) {
                self.completing = true;
                let grace = grace_of(&self.pod);
                self.begin_termination(now, grace).await;
            } else {
                self.finalize(false);
            }
        }
    }

    /// Whether the kubelet restarts this container after it exited with `code`.
    /// Syncs the volumes of a pod whose process containers run, every `sync_frequency`, as the
    /// kubelet does: ConfigMap/Secret changes and renewed tokens reach the files they mount.
    fn sync_volumes(&mut self, now: Instant) {
        let Some(c) = self.ctrs.iter().find(|c| c.local.is_some() && c.running()) else {
            self.volume_sync = None;
            return;
        };
        let due = *self.volume_sync.get_or_insert(now + self.ctx.config.sync_frequency);
        if due > now {
            return;
        }
        self.volume_sync = Some(now + self.ctx.config.sync_frequency);
        let Some(shared) = self.ctx.shared.upgrade() else {
            return;
        };
        let pod_ip = self.pod_ip.clone().unwrap_or_default();
        let input = super::pod_view::ViewInput {
            store: &self.ctx.store,
            node_root: &self.ctx.node_root,
            node_name: &self.ctx.node,
            pod: &self.pod,
            container: &c.spec,
            pod_ip: &pod_ip,
            host_ip: &self.ctx.host_ip,
            tokens: &shared.service_account_tokens,
        };
        if let Err(e) = super::pod_view::refresh_volumes(&input) {
            // The files stay as they were; the next sync tries again.
            tracing::warn!(pod = %self.name, namespace = %self.ns, error = %crate::error_chain::ErrorChain(&e), "volume sync failed");
        }
    }

    pub(crate) fn should_restart(&self, c: &Ctr, code: i32) -> bool {
        if self.terminating.is_some() || self.completing {
            return false;
        }
        if c.sidecar {
            return true;
        }
        match self.restart_policy.as_str() {
            "Never" => false,
            "OnFailure" => code != 0,
            _ => !c.init || code != 0,
        }
    }

    async fn setup_sandbox(&mut self, now: Instant) -> bool {
        if self.sandbox_retry.is_some_and(|t| t > now) {
            return false;
        }
        self.sandbox_retry = None;
        if let Some(msg) = super::refs::missing_volume(&self.ctx.store, &self.pod) {
            if self.volume_error.as_deref() != Some(msg.as_str()) {
                self.event(None, "Warning", "FailedMount", &msg).await;
                self.volume_error = Some(msg);
                self.dirty = true;
            }
            return false;
        }
        self.volume_error = None;
        match self.ctx.runtime.run_sandbox(&self.pod, 0) {
            Ok((id, ip)) => {
                self.sandbox = Some(id);
                self.pod_ip = Some(ip.to_string());
                self.dirty = true;
                true
            }
            Err(e) => {
                self.event(
                    None,
                    "Warning",
                    "FailedCreatePodSandBox",
                    &format!("Failed to create pod sandbox: {e}"),
                )
                .await;
                self.sandbox_retry = Some(now + Duration::from_secs(10));
                false
            }
        }
    }

    async fn begin_termination(&mut self, now: Instant, grace: Duration) {
        self.terminating = Some(Terminating {
            deadline: now + grace.max(MIN_GRACE),
        });
        for i in 0..self.ctrs.len() {
            let c = &mut self.ctrs[i];
            c.wake = None;
            c.stop_prober();
            if let (true, Some((_, sig))) = (c.running(), &c.process) {
                // An executor already told to shut down by its driver finishes that instead.
                sig.send_if_modified(|s| {
                    let fresh = *s == Signal::None;
                    if fresh {
                        *s = Signal::Term;
                    }
                    fresh
                });
                let field = container_field(c);
                let msg = format!("Stopping container {}", c.name);
                self.event(Some(&field), "Normal", "Killing", &msg).await;
            }
        }
        self.dirty = true;
    }

    async fn step_terminating(&mut self, now: Instant) {
        let Some(deadline) = self.terminating.as_ref().map(|t| t.deadline) else {
            return;
        };
        if now >= deadline {
            // SIGKILL: whatever still runs dies with 137.
            for i in 0..self.ctrs.len() {
                if self.ctrs[i].running() {
                    if let Some((abort, _)) = self.ctrs[i].process.take() {
                        abort.abort();
                    }
                    self.record_exit(i, Exit::code(137));
                }
            }
        }
        if self.ctrs.iter().any(Ctr::running) {
            return;
        }
        self.finalize(!self.completing);
    }

    /// The pod is done: its final phase, its sandbox stopped.
    fn finalize(&mut self, pod_is_terminal: bool) {
        if pod_is_terminal {
            for c in &mut self.ctrs {
                if let CState::Waiting { .. } = c.state {
                    c.state = match c.last.take() {
                        Some(last) => CState::Terminated(last),
                        None => CState::Terminated(TermInfo {
                            exit_code: 137,
                            reason: "ContainerStatusUnknown".into(),
                            message: Some("The container could not be located when the pod was terminated".into()),
                            started_at: String::new(),
                            finished_at: String::new(),
                            container_id: None,
                        }),
                    };
                }
            }
        }
        let phase = if self.evicted.is_some() {
            "Failed"
        } else {
            pod_status::phase(self.counts(), &self.restart_policy, pod_is_terminal)
        };
        // A pod whose containers wait forever (an unresolvable init failure with a restarting
        // policy) is not final; only Succeeded and Failed are.
        let phase = if matches!(phase, "Succeeded" | "Failed") {
            phase
        } else {
            "Failed"
        };
        if let Some(sb) = &self.sandbox {
            self.ctx.runtime.stop_sandbox(sb);
        }
        self.final_phase = Some(phase);
        self.dirty = true;
    }

    /// The counts `getPhase` works from.
    fn counts(&self) -> PhaseCounts {
        let mut c = PhaseCounts::default();
        for ctr in &self.ctrs[..self.n_init] {
            match (&ctr.state, &ctr.last) {
                (CState::Running { .. }, _) if ctr.sidecar => {}
                (CState::Running { .. }, _) => c.pending_init += 1,
                (CState::Terminated(t), _) if t.exit_code == 0 => {}
                (CState::Terminated(_), _) => c.failed_init += 1,
                (CState::Waiting { .. }, Some(last)) if last.exit_code == 0 || ctr.sidecar => {}
                (CState::Waiting { .. }, Some(_)) => c.failed_init += 1,
                (CState::Waiting { .. }, None) => c.pending_init += 1,
            }
        }
        for ctr in &self.ctrs[self.n_init..] {
            match (&ctr.state, &ctr.last) {
                (CState::Running { .. }, _) => c.running += 1,
                (CState::Terminated(t), _) => {
                    c.stopped += 1;
                    if t.exit_code == 0 {
                        c.succeeded += 1;
                    }
                }
                (CState::Waiting { .. }, Some(_)) => c.stopped += 1,
                (CState::Waiting { .. }, None) => c.waiting += 1,
            }
        }
        c
    }

    /// Records the end of a container's current run.
    pub(crate) fn record_exit(&mut self, i: usize, exit: Exit) {
        let c = &mut self.ctrs[i];
        let Some(id) = c.id.clone() else { return };
        c.process = None;
        c.stop_prober();
        c.kill_at = None;
        c.ready = false;
        c.started = false;
        if let Some(message) = exit.start_error {
            // The command never ran: the runtime keeps a created container, the kubelet shows
            // why and tries again after the back-off.
            if let Err(e) = self.ctx.runtime.exit_container(&id, exit.code, false) {
                tracing::debug!(error = %e, "container vanished from the runtime");
            }
            c.state = CState::waiting("CreateContainerError", Some(message.clone()));
            c.wake = Some(Instant::now() + self.ctx.config.crash_loop_backoff);
            let field = container_field(c);
            self.pending_events
                .push((Some(field), "Warning", "Failed", format!("Error: {message}")));
            self.dirty = true;
            return;
        }
        if let Err(e) = self.ctx.runtime.exit_container(&id, exit.code, exit.oom) {
            tracing::debug!(error = %e, "container vanished from the runtime");
        }
        let reason = if exit.oom {
            "OOMKilled"
        } else if exit.code == 0 {
            "Completed"
        } else {
            "Error"
        };
        let fallback = c.spec.get("terminationMessagePolicy").and_then(Value::as_str) == Some("FallbackToLogsOnError");
        let message = match exit.message.filter(|m| !m.is_empty()) {
            Some(m) => Some(m),
            None if fallback && exit.code != 0 => c.log_path.as_deref().map(super::logs::tail_for_message),
            None => None,
        };
        let started_at = match &c.state {
            CState::Running { started_at } => started_at.clone(),
            _ => crate::meta::now_rfc3339(),
        };
        c.state = CState::Terminated(TermInfo {
            exit_code: exit.code,
            reason: reason.into(),
            message,
            started_at,
            finished_at: crate::meta::now_rfc3339(),
            container_id: Some(id),
        });
        self.dirty = true;
    }

    /// Writes the current status; on failure it is retried a little later.
    async fn flush(&mut self) {
        let fields = self.status_fields();
        match pod_status::write(&self.ctx.store, &self.ns, &self.name, &self.uid, &fields, "kubelet").await {
            Ok(Written::Yes) => {
                self.dirty = false;
                self.retry_write = None;
            }
            Ok(Written::Gone) => {
                self.gone = true;
                self.dirty = false;
            }
            Err(e) => {
                tracing::warn!(node = %self.ctx.node, pod = %format!("{}/{}", self.ns, self.name), error = %e, "writing pod status; will retry");
                self.retry_write = Some(Instant::now() + Duration::from_secs(1));
            }
        }
    }

    fn set_cond(&mut self, type_: &str, status: bool, reason: Option<String>, message: Option<String>) {
        let now = crate::meta::now_rfc3339();
        if let Some(c) = self.conds.iter_mut().find(|c| c.type_ == type_) {
            if c.status != status {
                c.since = now;
            }
            c.status = status;
            c.reason = reason;
            c.message = message;
        }
    }

    /// The kubelet's status fields.
    fn status_fields(&mut self) -> Map<String, Value> {
        let counts = self.counts();
        let phase = self
            .final_phase
            .unwrap_or_else(|| pod_status::phase(counts, &self.restart_policy, false));
        let done = self.final_phase.is_some();
        let init_done = counts.pending_init == 0 && counts.failed_init == 0;
        let incomplete: Vec<String> = self.ctrs[..self.n_init]
            .iter()
            .filter(|c| {
                if c.sidecar {
                    !c.running()
                } else {
                    c.exit_code() != Some(0)
                }
            })
            .map(|c| c.name.clone())
            .collect();
        let unready: Vec<String> = self.ctrs[self.n_init..]
            .iter()
            .filter(|c| !c.is_ready())
            .map(|c| c.name.clone())
            .collect();
        let sandbox_ready = self.sandbox.is_some() && !done;
        self.set_cond("PodReadyToStartContainers", sandbox_ready, None, None);
        if done && phase == "Succeeded" {
            self.set_cond("Initialized", true, Some("PodCompleted".into()), None);
        } else if init_done || incomplete.is_empty() {
            self.set_cond("Initialized", true, None, None);
        } else {
            let msg = format!("containers with incomplete status: [{}]", incomplete.join(" "));
            self.set_cond("Initialized", false, Some("ContainersNotInitialized".into()), Some(msg));
        }
        for t in ["Ready", "ContainersReady"] {
            if done {
                self.set_cond(t, false, Some("PodCompleted".into()), None);
            } else if unready.is_empty() {
                self.set_cond(t, true, None, None);
            } else {
                let msg = format!("containers with unready status: [{}]", unready.join(" "));
                self.set_cond(t, false, Some("ContainersNotReady".into()), Some(msg));
            }
        }
        let mut f = Map::new();
        f.insert("phase".into(), json!(phase));
        f.insert(
            "conditions".into(),
            Value::Array(self.conds.iter().map(Cond::to_json).collect()),
        );
        f.insert("hostIP".into(), json!(self.ctx.host_ip));
        f.insert("hostIPs".into(), json!([{ "ip": self.ctx.host_ip }]));
        if let Some(ip) = &self.pod_ip {
            f.insert("podIP".into(), json!(ip));
            f.insert("podIPs".into(), json!([{ "ip": ip }]));
        }
        f.insert("startTime".into(), json!(self.start_time));
        let initializing = self.n_init > 0 && !init_done;
        let view = |c: &Ctr| {
            let placeholder = c.id.is_none()
                && c.last.is_none()
                && matches!(&c.state, CState::Waiting { reason, .. } if reason == "ContainerCreating");
            let state = if placeholder && initializing && (!c.init || self.sandbox.is_none()) {
                CState::waiting("PodInitializing", None)
            } else {
                c.state.clone()
            };
            let image_ref = c.id.as_ref().map(|_| super::runtime::image_digest_ref(&c.image));
            pod_status::container_status(&ContainerView {
                name: &c.name,
                image: &c.image,
                state: &state,
                last: c.last.as_ref(),
                restart_count: c.attempt,
                ready: c.is_ready(),
                started: c.running() && c.started,
                container_id: c.id.as_deref(),
                image_ref,
            })
        };
        if self.n_init > 0 {
            f.insert(
                "initContainerStatuses".into(),
                Value::Array(self.ctrs[..self.n_init].iter().map(view).collect()),
            );
        }
        f.insert(
            "containerStatuses".into(),
            Value::Array(self.ctrs[self.n_init..].iter().map(view).collect()),
        );
        if let Some(msg) = &self.evicted {
            f.insert("reason".into(), json!("Evicted"));
            f.insert("message".into(), json!(msg));
        }
        f
    }

    /// The DisruptionTarget condition the kubelet adds to a pod it evicts.
    pub(crate) fn eviction_condition(message: &str) -> Value {
        json!({
            "type": "DisruptionTarget",
            "status": "True",
            "lastProbeTime": null,
            "lastTransitionTime": crate::meta::now_rfc3339(),
            "reason": "TerminationByKubelet",
            "message": message,
        })
    }
}

fn e_or(c: &Ctr) -> i32 {
    c.exit_code().unwrap_or(0)
}

/// `spec.containers{name}`, the field path events about a container carry.
pub(crate) fn container_field(c: &Ctr) -> String {
    if c.init {
        format!("spec.initContainers{{{}}}", c.name)
    } else {
        format!("spec.containers{{{}}}", c.name)
    }
}

/// The grace period of a deletion in progress.
fn grace_of(pod: &Value) -> Duration {
    let secs = pod
        .pointer("/metadata/deletionGracePeriodSeconds")
        .and_then(Value::as_i64)
        .or_else(|| {
            pod.pointer("/spec/terminationGracePeriodSeconds")
                .and_then(Value::as_i64)
        })
        .unwrap_or(30);
    Duration::from_secs(secs.max(0) as u64)
}

async fn sleep_until(t: Option<Instant>) {
    match t {
        Some(t) => tokio::time::sleep_until(t).await,
        None => std::future::pending::<()>().await,
    }
}
