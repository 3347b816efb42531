//! Starting and restarting one container of a pod worker: script, image pull (with
//! ErrImagePull / ImagePullBackOff), env references (CreateContainerConfigError), creating and
//! starting it in the runtime, its process, and CrashLoopBackOff between restarts.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::Value;
use tokio::sync::watch;
use tokio::time::Instant;

use super::logs::LogWriter;
use super::pod_status::CState;
use super::pod_worker::{Worker, WorkerMsg, container_field};
use super::probes::{ExecTarget, Probe, ProbeKind};
use super::process::{self, ProcessCtx, Signal};
use super::runtime::ContainerConfig;
use crate::error_chain::ErrorChain;

/// How long the kubelet shows ErrImagePull before the back-off starts.
const ERR_IMAGE_PULL_SHOWN: std::time::Duration = std::time::Duration::from_secs(1);

impl Worker {
    /// Moves container `i` on if it is due: restart after an exit, or start.
    pub(crate) async fn advance(&mut self, i: usize, now: Instant) {
        match &self.ctrs[i].state {
            CState::Running { .. } => {}
            CState::Terminated(t) => {
                let code = t.exit_code;
                if !self.should_restart(&self.ctrs[i], code) {
                    return;
                }
                let config = &self.ctx.config;
                let c = &mut self.ctrs[i];
                match c.crash_backoff {
                    None => {
                        c.crash_backoff = Some(config.crash_loop_backoff);
                        self.try_start(i, now).await;
                    }
                    Some(backoff) => {
                        let last = match &c.state {
                            CState::Terminated(t) => Some(t.clone()),
                            _ => None,
                        };
                        c.last = last;
                        let secs = backoff.as_secs_f64();
                        let shown = if secs >= 1.0 {
                            format!("{}s", secs.round())
                        } else {
                            format!("{}ms", backoff.as_millis())
                        };
                        let msg = format!(
                            "back-off {shown} restarting failed container={} pod={}_{}({})",
                            c.name, self.name, self.ns, self.uid
                        );
                        c.state = CState::waiting("CrashLoopBackOff", Some(msg));
                        c.wake = Some(now + backoff);
                        c.crash_backoff = Some((backoff * 2).min(config.crash_loop_backoff_max));
                        self.dirty = true;
                        let field = container_field(&self.ctrs[i]);
                        let msg = format!(
                            "Back-off restarting failed container {} in pod {}_{}({})",
                            self.ctrs[i].name, self.name, self.ns, self.uid
                        );
                        self.event(Some(&field), "Warning", "BackOff", &msg).await;
                    }
                }
            }
            CState::Waiting { .. } => {
                if self.ctrs[i].wake.is_some_and(|w| w > now) {
                    return;
                }
                self.ctrs[i].wake = None;
                self.try_start(i, now).await;
            }
        }
    }

    /// Sets a waiting state and records a warning the first time it is seen.
    /// The container cannot be created: waiting with `reason`, a `Failed` Event, retried after the
    /// crash-loop back-off from `now`.
    async fn fail_create(&mut self, i: usize, reason: &str, message: String, now: Instant) {
        let event = format!("Error: {message}");
        self.wait_with(i, reason, message, Some(("Failed", event))).await;
        self.ctrs[i].wake = Some(now + self.ctx.config.crash_loop_backoff);
    }

    async fn wait_with(&mut self, i: usize, reason: &str, message: String, event: Option<(&str, String)>) {
        let c = &mut self.ctrs[i];
        let state = CState::waiting(reason, Some(message.clone()));
        if c.state != state {
            c.state = state;
            self.dirty = true;
        }
        if let Some((ev_reason, ev_msg)) = event
            && self.ctrs[i].reported.as_deref() != Some(ev_msg.as_str())
        {
            self.ctrs[i].reported = Some(ev_msg.clone());
            let field = container_field(&self.ctrs[i]);
            self.event(Some(&field), "Warning", ev_reason, &ev_msg).await;
        }
    }

    async fn try_start(&mut self, i: usize, now: Instant) {
        if self.ctrs[i].local.is_some() {
            self.try_start_local(i, now).await;
            return;
        }
        let script = match &self.ctrs[i].script {
            Ok(s) => s.clone(),
            Err(e) => {
                let msg = e.to_string();
                self.wait_with(
                    i,
                    "CreateContainerConfigError",
                    msg.clone(),
                    Some(("Failed", format!("Error: {msg}"))),
                )
                .await;
                return;
            }
        };
        let image = self.ctrs[i].image.clone();
        if !self.ctrs[i].pulled {
            if let Some(fail) = &script.image_pull {
                let backoff = self.ctrs[i].pull_backoff;
                let in_err = matches!(&self.ctrs[i].state, CState::Waiting { reason, .. } if reason == "ErrImagePull");
                if in_err {
                    let c = &mut self.ctrs[i];
                    c.state = CState::waiting("ImagePullBackOff", Some(format!("Back-off pulling image {image:?}")));
                    c.wake = Some(now + backoff);
                    c.pull_backoff = (backoff * 2).min(self.ctx.config.image_pull_backoff_max);
                    self.dirty = true;
                    let field = container_field(&self.ctrs[i]);
                    self.event(
                        Some(&field),
                        "Normal",
                        "BackOff",
                        &format!("Back-off pulling image {image:?}"),
                    )
                    .await;
                } else {
                    let reference = super::runtime::normalize_image(&image);
                    let err = fail.message.clone().unwrap_or_else(|| {
                        format!(
                            "rpc error: code = NotFound desc = failed to pull and unpack image {reference:?}: failed to resolve reference {reference:?}: {reference}: not found"
                        )
                    });
                    self.ctrs[i].state = CState::waiting("ErrImagePull", Some(err.clone()));
                    self.ctrs[i].wake = Some(now + ERR_IMAGE_PULL_SHOWN.min(backoff));
                    self.dirty = true;
                    let field = container_field(&self.ctrs[i]);
                    self.event(
                        Some(&field),
                        "Warning",
                        "Failed",
                        &format!("Failed to pull image {image:?}: {err}"),
                    )
                    .await;
                    self.event(Some(&field), "Warning", "Failed", "Error: ErrImagePull")
                        .await;
                }
                return;
            }
            if !script.pull_time.is_zero() {
                match self.ctrs[i].pull_started {
                    None => {
                        self.ctrs[i].pull_started = Some(now);
                        self.ctrs[i].wake = Some(now + script.pull_time);
                        let field = container_field(&self.ctrs[i]);
                        self.event(Some(&field), "Normal", "Pulling", &format!("Pulling image {image:?}"))
                            .await;
                        return;
                    }
                    Some(t) if t + script.pull_time > now => {
                        self.ctrs[i].wake = Some(t + script.pull_time);
                        return;
                    }
                    Some(t) => {
                        let took = format!("{:.3}s", (now - t).as_secs_f64());
                        let msg = format!(
                            "Successfully pulled image {image:?} in {took} ({took} including waiting). Image size: 0 bytes."
                        );
                        let field = container_field(&self.ctrs[i]);
                        self.event(Some(&field), "Normal", "Pulled", &msg).await;
                    }
                }
            } else {
                self.image_present(i).await;
            }
            self.ctrs[i].pulled = true;
        }
        if self.env_refs_missing(i).await {
            return;
        }
        self.ctrs[i].reported = None;
        self.start(i, Run::Script(script)).await;
    }

    /// The kubelet's event for an image it need not pull.
    async fn image_present(&self, i: usize) {
        let field = container_field(&self.ctrs[i]);
        let image = &self.ctrs[i].image;
        self.event(
            Some(&field),
            "Normal",
            "Pulled",
            &format!("Container image {image:?} already present on machine"),
        )
        .await;
    }

    /// Whether a ConfigMap, Secret or key the container's env names is missing; if so the
    /// container waits in CreateContainerConfigError.
    async fn env_refs_missing(&mut self, i: usize) -> bool {
        let Some(msg) = super::refs::missing_env(&self.ctx.store, &self.pod, &self.ctrs[i].spec) else {
            return false;
        };
        self.wait_with(
            i,
            "CreateContainerConfigError",
            msg.clone(),
            Some(("Failed", format!("Error: {msg}"))),
        )
        .await;
        true
    }

    /// A container whose image is a local image: its view, its command, then a real process.
    async fn try_start_local(&mut self, i: usize, now: Instant) {
        let Some(entrypoint) = self.ctrs[i].local.clone() else {
            return;
        };
        if !self.ctrs[i].pulled {
            self.image_present(i).await;
            self.ctrs[i].pulled = true;
        }
        if self.env_refs_missing(i).await {
            return;
        }
        let pod_ip = self.pod_ip.clone().unwrap_or_default();
        let spec = self.ctrs[i].spec.clone();
        // The node cluster is shutting down: nothing starts any more.
        let Some(shared) = self.ctx.shared.upgrade() else {
            return;
        };
        let prepared = super::pod_view::prepare(super::pod_view::ViewInput {
            store: &self.ctx.store,
            node_root: &self.ctx.node_root,
            node_name: &self.ctx.node,
            pod: &self.pod,
            container: &spec,
            pod_ip: &pod_ip,
            host_ip: &self.ctx.host_ip,
            tokens: &shared.service_account_tokens,
        });
        // A directory image: its configuration and root layer (`local_images::image_dir`).
        let image = if entrypoint.is_dir() {
            match super::local_images::image_dir(&entrypoint) {
                Ok(image) => Some(image),
                Err(msg) => {
                    self.fail_create(i, "CreateContainerError", msg, now).await;
                    return;
                }
            }
        } else {
            None
        };
        let view = match prepared {
            Ok(mut v) => {
                if let Some(image) = &image {
                    // containerd: the image's env first, the container's overrides it; the image's
                    // working directory unless the container sets one.
                    let mut env = image.env.clone();
                    env.extend(std::mem::take(&mut v.env));
                    v.env = env;
                    if v.working_dir.is_none() {
                        v.working_dir = image.working_dir.clone();
                    }
                    v.image_root = Some(image.rootfs.clone());
                }
                v
            }
            Err(e) => {
                let msg = ErrorChain(&e).to_string();
                self.fail_create(i, e.reason(), msg, now).await;
                return;
            }
        };
        // `command` replaces the entrypoint, `args` the default arguments (a local image has
        // none), both expanded against the container's environment.
        let words = |f: &str| -> Vec<String> {
            spec.get(f)
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .map(|w| super::expand::expand_with_env(w, &view.env))
                .collect()
        };
        let (command, args) = (words("command"), words("args"));
        // As the runtime: `command` replaces the image's Entrypoint (and drops its Cmd), `args`
        // replaces its Cmd.
        let mut argv = match (&image, command.is_empty()) {
            (_, false) => command,
            (Some(image), true) => image.entrypoint.clone(),
            (None, true) => vec![entrypoint.display().to_string()],
        };
        match &image {
            Some(image) if args.is_empty() && spec.get("command").is_none() => argv.extend(image.cmd.clone()),
            _ => argv.extend(args),
        }
        if argv.is_empty() {
            let msg = "failed to create containerd task: failed to create shim task: OCI runtime create failed: runc create failed: unable to start container process: no command specified: unknown".to_string();
            self.fail_create(i, "CreateContainerError", msg, now).await;
            return;
        }
        let layer = image.as_ref().map(|image| image.rootfs.clone());
        let entrypoint = if image.is_some() { None } else { Some(entrypoint) };
        let data_dir = std::fs::canonicalize(&self.ctx.data_dir).unwrap_or_else(|_| self.ctx.data_dir.clone());
        let masks = vec![data_dir];
        let env = super::sandbox::final_env(&view);
        let checked = super::sandbox::supported()
            .map_err(super::sandbox::SandboxError::Unsupported)
            .and_then(|()| {
                super::sandbox::check_command(&view, &env, &argv[0], entrypoint.as_deref(), layer.as_deref(), &masks)
            });
        if let Err(e) = checked {
            let msg = e.to_string();
            self.fail_create(i, "CreateContainerError", msg, now).await;
            return;
        }
        self.ctrs[i].reported = None;
        self.start(
            i,
            Run::Local(LocalRun {
                view: Arc::new(view),
                argv,
                entrypoint,
                layer,
                masks,
            }),
        )
        .await;
    }

    /// Creates and starts the container in the runtime and launches its process.
    async fn start(&mut self, i: usize, run: Run) {
        let Some(sandbox) = self.sandbox.clone() else { return };
        let c = &self.ctrs[i];
        let attempt = if c.id.is_some() { c.attempt + 1 } else { 0 };
        let log_path =
            super::logs::container_log_path(&self.ctx.node_root, &self.ns, &self.name, &self.uid, &c.name, attempt);
        let rotation = super::logs::Rotation {
            max_size: self.ctx.config.container_log_max_size,
            max_files: self.ctx.config.container_log_max_files,
        };
        let log = match LogWriter::with_rotation(log_path.clone(), rotation) {
            Ok(l) => Arc::new(l),
            Err(e) => {
                // The kubelet's message carries the whole cause (which path, which OS error).
                let message = ErrorChain(&e).to_string();
                self.wait_with(
                    i,
                    "CreateContainerError",
                    message.clone(),
                    Some(("Failed", format!("Error: {message}"))),
                )
                .await;
                return;
            }
        };
        let mut labels = HashMap::new();
        labels.insert("io.kubernetes.container.name".to_string(), c.name.clone());
        labels.insert("io.kubernetes.pod.name".to_string(), self.name.clone());
        labels.insert("io.kubernetes.pod.namespace".to_string(), self.ns.clone());
        labels.insert("io.kubernetes.pod.uid".to_string(), self.uid.clone());
        labels.insert("io.cri-containerd.kind".to_string(), "container".to_string());
        let mut annotations = HashMap::new();
        annotations.insert("io.kubernetes.container.hash".to_string(), container_hash(&c.spec));
        annotations.insert("io.kubernetes.container.restartCount".to_string(), attempt.to_string());
        let spec_str = |f: &str, d: &str| c.spec.get(f).and_then(Value::as_str).unwrap_or(d).to_string();
        annotations.insert(
            "io.kubernetes.container.terminationMessagePath".to_string(),
            spec_str("terminationMessagePath", "/dev/termination-log"),
        );
        annotations.insert(
            "io.kubernetes.container.terminationMessagePolicy".to_string(),
            spec_str("terminationMessagePolicy", "File"),
        );
        let grace = self
            .pod
            .pointer("/spec/terminationGracePeriodSeconds")
            .and_then(Value::as_i64)
            .unwrap_or(30);
        annotations.insert(
            "io.kubernetes.pod.terminationGracePeriod".to_string(),
            grace.to_string(),
        );
        if let Some(ports) = c
            .spec
            .get("ports")
            .filter(|p| p.as_array().is_some_and(|a| !a.is_empty()))
        {
            annotations.insert("io.kubernetes.container.ports".to_string(), ports.to_string());
        }
        let config = ContainerConfig {
            name: c.name.clone(),
            attempt,
            image: c.image.clone(),
            labels,
            annotations,
            // As the node sees it (containerd reports `/var/log/pods/...`), not where this node's root
            // lies in the sim's data directory: an agent on the node mounts the node's paths.
            log_path: super::logs::node_path(&self.ctx.node_root, &log_path),
        };
        let runtime = self.ctx.runtime.clone();
        let id = match runtime.create_container(&sandbox, config) {
            Ok(id) => id,
            Err(e) => {
                self.wait_with(
                    i,
                    "CreateContainerError",
                    e.to_string(),
                    Some(("Failed", format!("Error: {e}"))),
                )
                .await;
                return;
            }
        };
        let field = container_field(&self.ctrs[i]);
        let name = self.ctrs[i].name.clone();
        self.event(Some(&field), "Normal", "Created", &format!("Created container: {name}"))
            .await;
        let launched = match &run {
            Run::Script(_) => None,
            Run::Local(l) => {
                let scratch = self
                    .ctx
                    .node_root
                    .join("run/containerd/io.containerd.runtime.v2.task/k8s.io")
                    .join(&id);
                let limits = super::cgroups::Limits::of(&self.ctrs[i].spec);
                let launch = super::sandbox::Launch {
                    view: &l.view,
                    argv: &l.argv,
                    entrypoint: l.entrypoint.as_deref(),
                    layer: l.layer.as_deref(),
                    scratch: &scratch,
                    masks: &l.masks,
                    cgroup: super::cgroups::create(&id, limits),
                };
                match super::sandbox::launch(launch) {
                    Ok(p) => Some(p),
                    Err(e) => {
                        let msg = e.to_string();
                        self.fail_create(i, "CreateContainerError", msg, Instant::now()).await;
                        return;
                    }
                }
            }
        };
        if let Err(e) = runtime.start_container(&id) {
            self.wait_with(i, "CreateContainerError", e.to_string(), None).await;
            return;
        }
        self.event(Some(&field), "Normal", "Started", &format!("Started container {name}"))
            .await;
        let c = &mut self.ctrs[i];
        if let CState::Terminated(t) = &c.state {
            c.last = Some(t.clone());
        }
        c.id = Some(id);
        c.attempt = attempt;
        c.log_path = Some(log_path);
        c.state = CState::Running {
            started_at: crate::meta::now_rfc3339(),
        };
        let (sig_tx, sig_rx) = watch::channel(Signal::None);
        let tx = self.tx.clone();
        let handle = match (run, launched) {
            (Run::Local(l), Some(launched)) => {
                let probes: Vec<Probe> = [ProbeKind::Startup, ProbeKind::Liveness, ProbeKind::Readiness]
                    .into_iter()
                    .filter_map(|k| Probe::parse(&c.spec, k, self.pod_ip.as_deref().unwrap_or("")))
                    .collect();
                c.started = !c.has_startup();
                c.ready = c.started && !c.has_readiness();
                if !probes.is_empty() {
                    let target = ExecTarget {
                        view: l.view.clone(),
                        scratch: launched.scratch.clone(),
                    };
                    let prober = tokio::spawn(super::probes::run(probes, target, tx.clone(), i, attempt));
                    c.prober = Some(prober.abort_handle());
                }
                let termination_log = l.view.termination_log.clone();
                tokio::spawn(async move {
                    let exit = super::sandbox::supervise(launched, log, sig_rx, termination_log).await;
                    let _ = tx.send(WorkerMsg::Exited { idx: i, attempt, exit });
                })
            }
            // Launched above for every local run.
            (Run::Local(_), None) => return,
            (Run::Script(script), _) => {
                // Scripted containers have no probes: ready once running.
                c.started = true;
                c.ready = true;
                let pctx = ProcessCtx {
                    shared: self.ctx.shared.clone(),
                    pod: self.pod.clone(),
                    container: c.spec.clone(),
                    script,
                    log,
                    restart: attempt,
                };
                tokio::spawn(async move {
                    let exit = process::run(pctx, sig_rx).await;
                    let _ = tx.send(WorkerMsg::Exited { idx: i, attempt, exit });
                })
            }
        };
        c.process = Some((handle.abort_handle(), sig_tx));
        self.dirty = true;
    }
}

/// What a started container runs.
enum Run {
    /// A scripted program (`process.rs`).
    Script(super::script::Script),
    /// A real process from a local image (`sandbox.rs`).
    Local(LocalRun),
}

struct LocalRun {
    view: Arc<super::pod_view::View>,
    argv: Vec<String>,
    /// The local image's executable, bound at its own path (not for a directory image).
    entrypoint: Option<std::path::PathBuf>,
    /// A directory image's root filesystem, laid over the host's.
    layer: Option<std::path::PathBuf>,
    masks: Vec<std::path::PathBuf>,
}

/// A stable hash of what identifies the container's spec (name, image, command, args), as the
/// kubelet annotates containers with a hash of their spec.
fn container_hash(spec: &Value) -> String {
    use std::hash::{Hash as _, Hasher as _};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    for field in ["name", "image", "command", "args"] {
        match spec.get(field) {
            Some(Value::String(s)) => s.hash(&mut h),
            Some(Value::Array(items)) => items.iter().filter_map(Value::as_str).for_each(|s| s.hash(&mut h)),
            _ => 0u8.hash(&mut h),
        }
    }
    format!("{:x}", h.finish() as u32)
}
