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
                let field = container_field(&self.ctrs[i]);
                self.event(
                    Some(&field),
                    "Normal",
                    "Pulled",
                    &format!("Container image {image:?} already present on machine"),
                )
                .await;
            }
            self.ctrs[i].pulled = true;
        }
        if let Some(msg) = super::refs::missing_env(&self.ctx.store, &self.pod, &self.ctrs[i].spec) {
            self.wait_with(
                i,
                "CreateContainerConfigError",
                msg.clone(),
                Some(("Failed", format!("Error: {msg}"))),
            )
            .await;
            return;
        }
        self.ctrs[i].reported = None;
        self.start(i, script).await;
    }

    /// Creates and starts the container in the runtime and launches its process.
    async fn start(&mut self, i: usize, script: super::script::Script) {
        let Some(sandbox) = self.sandbox.clone() else { return };
        let c = &self.ctrs[i];
        let attempt = if c.id.is_some() { c.attempt + 1 } else { 0 };
        let log_path =
            super::logs::container_log_path(&self.ctx.node_root, &self.ns, &self.name, &self.uid, &c.name, attempt);
        let log = match LogWriter::create(log_path.clone()) {
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
            log_path: log_path.display().to_string(),
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
        let pctx = ProcessCtx {
            shared: self.ctx.shared.clone(),
            pod: self.pod.clone(),
            container: c.spec.clone(),
            script,
            log,
            restart: attempt,
        };
        let tx = self.tx.clone();
        let handle = tokio::spawn(async move {
            let exit = process::run(pctx, sig_rx).await;
            let _ = tx.send(WorkerMsg::Exited { idx: i, attempt, exit });
        });
        c.process = Some((handle.abort_handle(), sig_tx));
        self.dirty = true;
    }
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
