//! The node's container runtime: pod sandboxes and containers as containerd keeps them, with
//! the labels and annotations the kubelet passes, and the container event stream that CRI's
//! `GetContainerEvents` serves. The kubelet drives it; `cri.rs` exposes it.

use std::collections::{BTreeSet, HashMap};
use std::net::Ipv4Addr;
use std::sync::Mutex;

use serde_json::Value;
use spark_operator_proto::cri::v1 as cri;
use tokio::sync::{broadcast, watch};
use tokio::time::Instant;

use super::cri_faults::FaultState;

/// How many container events a slow `GetContainerEvents` client may fall behind before it misses
/// some (containerd drops events when its queue is full, too).
const EVENT_BUFFER: usize = 16_384;

/// A runtime call that failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RuntimeError {
    #[error(
        "failed to setup network for sandbox {sandbox:?}: plugin type=\"host-local\" failed (add): failed to allocate for range 0: no IP addresses available in range set: {range}"
    )]
    NoIpAvailable { sandbox: String, range: String },
    #[error("an error occurred when try to find container {0:?}: not found")]
    ContainerNotFound(String),
    #[error("an error occurred when try to find sandbox {0:?}: not found")]
    SandboxNotFound(String),
}

#[derive(Debug, Clone)]
struct Sandbox {
    id: String,
    name: String,
    namespace: String,
    uid: String,
    attempt: u32,
    ready: bool,
    created_at: i64,
    ip: Option<Ipv4Addr>,
    labels: HashMap<String, String>,
    annotations: HashMap<String, String>,
    /// Container ids in creation order.
    containers: Vec<String>,
}

/// What the kubelet asks for when it creates a container.
#[derive(Debug, Clone)]
pub struct ContainerConfig {
    pub name: String,
    pub attempt: u32,
    pub image: String,
    pub labels: HashMap<String, String>,
    pub annotations: HashMap<String, String>,
    pub log_path: String,
}

#[derive(Debug, Clone)]
struct Container {
    id: String,
    sandbox_id: String,
    config: ContainerConfig,
    image_ref: String,
    state: cri::ContainerState,
    created_at: i64,
    started_at: i64,
    finished_at: i64,
    exit_code: i32,
    reason: String,
    message: String,
    /// An OOM kill whose reason shows `Error` until then (a delayed TaskOOM, see `cri_faults.rs`).
    oom_reason_at: Option<Instant>,
}

#[derive(Default)]
struct State {
    sandboxes: HashMap<String, Sandbox>,
    containers: HashMap<String, Container>,
    /// Sandbox ids by pod uid.
    by_uid: HashMap<String, Vec<String>>,
    /// Host octets (last byte) of the pod IPs in use.
    ips_in_use: BTreeSet<u8>,
    next_ip: u8,
    faults: FaultState,
}

/// One node's runtime.
pub struct Runtime {
    /// The first three octets of the node's pod CIDR, a /24 of the sim's `--cluster-cidr`
    /// (`127.B.<128+n-1>.0/24` by default).
    pod_net: [u8; 3],
    state: Mutex<State>,
    events: broadcast::Sender<cri::ContainerEventResponse>,
    /// Counts runtime restarts; open event streams end when it changes.
    restarts: watch::Sender<u64>,
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime")
            .field("pod_net", &self.pod_net)
            .finish_non_exhaustive()
    }
}

fn now_ns() -> i64 {
    i64::try_from(jiff::Timestamp::now().as_nanosecond()).unwrap_or(i64::MAX)
}

/// A 64-hex-character id like containerd's.
pub fn new_id() -> String {
    format!("{}{}", uuid::Uuid::new_v4().simple(), uuid::Uuid::new_v4().simple())
}

/// `spark:4.0.0` → `docker.io/library/spark:4.0.0`, the reference containerd reports.
pub fn normalize_image(image: &str) -> String {
    let first = image.split('/').next().unwrap_or("");
    let has_registry = image.contains('/') && (first.contains('.') || first.contains(':') || first == "localhost");
    let with_repo = if has_registry {
        image.to_string()
    } else if image.contains('/') {
        format!("docker.io/{image}")
    } else {
        format!("docker.io/library/{image}")
    };
    let last = with_repo.rsplit('/').next().unwrap_or("");
    if with_repo.contains('@') || last.contains(':') {
        with_repo
    } else {
        format!("{with_repo}:latest")
    }
}

/// A stable fake digest reference for an image (`repo@sha256:<64 hex>`), as `imageID` shows.
pub fn image_digest_ref(image: &str) -> String {
    use std::hash::{Hash as _, Hasher as _};
    let normalized = normalize_image(image);
    let repo = match normalized.rsplit_once('@') {
        Some((r, _)) => r.to_string(),
        None => {
            let (head, last) = normalized.rsplit_once('/').unwrap_or(("", &normalized));
            let name = last.split(':').next().unwrap_or(last);
            if head.is_empty() {
                name.to_string()
            } else {
                format!("{head}/{name}")
            }
        }
    };
    let mut hex = String::new();
    for salt in 0u8..4 {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        (salt, &normalized).hash(&mut h);
        hex.push_str(&format!("{:016x}", h.finish()));
    }
    format!("{repo}@sha256:{hex}")
}

impl Runtime {
    /// A runtime whose network plugin (host-local, as containerd's CNI) allocates from
    /// `pod_cidr`, a /24 (a longer prefix is widened to its /24).
    pub fn new(pod_cidr: crate::network::Ipv4Cidr) -> Self {
        let (events, _) = broadcast::channel(EVENT_BUFFER);
        let (restarts, _) = watch::channel(0);
        let [a, b, c, _] = pod_cidr.base().octets();
        Self {
            pod_net: [a, b, c],
            state: Mutex::new(State {
                next_ip: 2,
                ..State::default()
            }),
            events,
            restarts,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Container events from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<cri::ContainerEventResponse> {
        self.events.subscribe()
    }

    /// Changes when the runtime restarts (see [`super::cri_faults::CriFaults::restart_runtime`]).
    pub fn restarts(&self) -> watch::Receiver<u64> {
        self.restarts.subscribe()
    }

    pub(crate) fn with_faults<R>(&self, f: impl FnOnce(&mut FaultState) -> R) -> R {
        f(&mut self.lock().faults)
    }

    /// Whether the runtime is down: CRI calls fail.
    pub fn is_down(&self) -> bool {
        self.lock().faults.is_down()
    }

    /// Whether GetContainerEvents sends events (CRI-O's `enable_pod_events`).
    pub fn pod_events_enabled(&self) -> bool {
        self.lock().faults.pod_events()
    }

    /// A runtime restart with `downtime`: the event streams end, held events are lost.
    pub(crate) fn restart(&self, downtime: std::time::Duration) {
        self.lock().faults.go_down(downtime);
        self.restarts.send_modify(|n| *n += 1);
    }

    /// Ends every fault and sends the STARTED events still held back.
    pub(crate) fn clear_faults(&self) {
        let mut st = self.lock();
        for id in st.faults.clear() {
            if let Some(sandbox) = st.containers.get(&id).map(|c| c.sandbox_id.clone()) {
                self.deliver(&mut st, &id, &sandbox, cri::ContainerEventType::ContainerStartedEvent);
            }
        }
    }

    /// The pod CIDR this runtime's network plugin allocates from.
    pub fn pod_cidr(&self) -> String {
        let [a, b, c] = self.pod_net;
        format!("{a}.{b}.{c}.0/24")
    }

    /// `RunPodSandbox`: creates and starts the sandbox, with an IP from the node's range.
    pub fn run_sandbox(&self, pod: &Value, attempt: u32) -> Result<(String, Ipv4Addr), RuntimeError> {
        let id = new_id();
        let meta = |f: &str| {
            pod.pointer(&format!("/metadata/{f}"))
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string()
        };
        let (name, namespace, uid) = (meta("name"), meta("namespace"), meta("uid"));
        let mut labels: HashMap<String, String> = string_map(pod.pointer("/metadata/labels"));
        labels.insert("io.kubernetes.pod.name".into(), name.clone());
        labels.insert("io.kubernetes.pod.namespace".into(), namespace.clone());
        labels.insert("io.kubernetes.pod.uid".into(), uid.clone());
        labels.insert("io.cri-containerd.kind".into(), "sandbox".into());
        let mut annotations = string_map(pod.pointer("/metadata/annotations"));
        annotations.insert("kubernetes.io/config.seen".into(), jiff::Timestamp::now().to_string());
        annotations.insert("kubernetes.io/config.source".into(), "api".into());
        let mut st = self.lock();
        let octet = (0..253u16)
            .map(|i| 2 + ((u16::from(st.next_ip) - 2 + i) % 253) as u8)
            .find(|o| !st.ips_in_use.contains(o))
            .ok_or_else(|| {
                let [a, b, c] = self.pod_net;
                RuntimeError::NoIpAvailable {
                    sandbox: id.clone(),
                    range: format!("{a}.{b}.{c}.1-{a}.{b}.{c}.254"),
                }
            })?;
        st.ips_in_use.insert(octet);
        st.next_ip = if octet >= 254 { 2 } else { octet + 1 };
        let [a, b, c] = self.pod_net;
        let ip = Ipv4Addr::new(a, b, c, octet);
        let sandbox = Sandbox {
            id: id.clone(),
            name,
            namespace,
            uid,
            attempt,
            ready: true,
            created_at: now_ns(),
            ip: Some(ip),
            labels,
            annotations,
            containers: Vec::new(),
        };
        st.by_uid.entry(sandbox.uid.clone()).or_default().push(id.clone());
        st.sandboxes.insert(id.clone(), sandbox);
        self.emit(&mut st, &id, &id, cri::ContainerEventType::ContainerCreatedEvent);
        self.emit(&mut st, &id, &id, cri::ContainerEventType::ContainerStartedEvent);
        Ok((id, ip))
    }

    /// `StopPodSandbox`: the sandbox is no longer ready and its IP is released.
    pub fn stop_sandbox(&self, id: &str) {
        let mut st = self.lock();
        let Some(sb) = st.sandboxes.get_mut(id) else { return };
        if !sb.ready {
            return;
        }
        sb.ready = false;
        let ip = sb.ip.take();
        if let Some(ip) = ip {
            st.ips_in_use.remove(&ip.octets()[3]);
        }
        self.emit(&mut st, id, id, cri::ContainerEventType::ContainerStoppedEvent);
    }

    /// `CreateContainer` in a sandbox.
    pub fn create_container(&self, sandbox_id: &str, config: ContainerConfig) -> Result<String, RuntimeError> {
        let id = new_id();
        let mut st = self.lock();
        let sb = st
            .sandboxes
            .get_mut(sandbox_id)
            .ok_or_else(|| RuntimeError::SandboxNotFound(sandbox_id.to_string()))?;
        sb.containers.push(id.clone());
        let image_ref = image_digest_ref(&config.image);
        let c = Container {
            id: id.clone(),
            sandbox_id: sandbox_id.to_string(),
            config,
            image_ref,
            state: cri::ContainerState::ContainerCreated,
            created_at: now_ns(),
            started_at: 0,
            finished_at: 0,
            exit_code: 0,
            reason: String::new(),
            message: String::new(),
            oom_reason_at: None,
        };
        st.containers.insert(id.clone(), c);
        self.emit(&mut st, &id, sandbox_id, cri::ContainerEventType::ContainerCreatedEvent);
        Ok(id)
    }

    /// `StartContainer`; returns the start time in nanoseconds.
    pub fn start_container(&self, id: &str) -> Result<i64, RuntimeError> {
        let mut st = self.lock();
        let c = st
            .containers
            .get_mut(id)
            .ok_or_else(|| RuntimeError::ContainerNotFound(id.to_string()))?;
        c.state = cri::ContainerState::ContainerRunning;
        c.started_at = now_ns();
        let (started, sandbox) = (c.started_at, c.sandbox_id.clone());
        self.emit(&mut st, id, &sandbox, cri::ContainerEventType::ContainerStartedEvent);
        Ok(started)
    }

    /// The container's process ended (by itself, SIGTERM or SIGKILL); returns the finish time.
    /// The reason is containerd's: `OOMKilled` when the cgroup OOM killer ended it, else
    /// `Completed` for exit code 0 and `Error` otherwise.
    pub fn exit_container(&self, id: &str, exit_code: i32, oom: bool) -> Result<i64, RuntimeError> {
        let mut st = self.lock();
        let oom_reason_at = if oom { st.faults.oom_reason_at() } else { None };
        let c = st
            .containers
            .get_mut(id)
            .ok_or_else(|| RuntimeError::ContainerNotFound(id.to_string()))?;
        if c.state == cri::ContainerState::ContainerExited {
            return Ok(c.finished_at);
        }
        if c.started_at == 0 {
            c.started_at = now_ns();
        }
        c.state = cri::ContainerState::ContainerExited;
        c.finished_at = now_ns();
        c.exit_code = exit_code;
        c.oom_reason_at = oom_reason_at;
        c.reason = if oom {
            "OOMKilled".into()
        } else if exit_code == 0 {
            "Completed".into()
        } else {
            "Error".into()
        };
        let (finished, sandbox) = (c.finished_at, c.sandbox_id.clone());
        self.emit(&mut st, id, &sandbox, cri::ContainerEventType::ContainerStoppedEvent);
        Ok(finished)
    }

    /// Removes everything of a pod (container GC after the pod object is gone): its containers
    /// first, then the sandbox, each with a deleted event.
    pub fn remove_pod(&self, pod_uid: &str) {
        let mut st = self.lock();
        let sandboxes: Vec<String> = st.by_uid.remove(pod_uid).unwrap_or_default();
        for sb_id in sandboxes {
            let containers = st
                .sandboxes
                .get(&sb_id)
                .map(|s| s.containers.clone())
                .unwrap_or_default();
            for cid in containers {
                if st.containers.remove(&cid).is_some() {
                    if let Some(sb) = st.sandboxes.get_mut(&sb_id) {
                        sb.containers.retain(|c| c != &cid);
                    }
                    self.emit(&mut st, &cid, &sb_id, cri::ContainerEventType::ContainerDeletedEvent);
                }
            }
            if let Some(sb) = st.sandboxes.get_mut(&sb_id)
                && sb.ready
            {
                sb.ready = false;
                let ip = sb.ip.take();
                if let Some(ip) = ip {
                    st.ips_in_use.remove(&ip.octets()[3]);
                }
                self.emit(&mut st, &sb_id, &sb_id, cri::ContainerEventType::ContainerStoppedEvent);
            }
            // The deleted event still names the sandbox; containerd sends it with a nil status.
            st.sandboxes.remove(&sb_id);
            self.emit(&mut st, &sb_id, &sb_id, cri::ContainerEventType::ContainerDeletedEvent);
        }
    }

    /// Whether anything of this pod is still known to the runtime.
    pub fn has_pod(&self, pod_uid: &str) -> bool {
        self.lock().by_uid.contains_key(pod_uid)
    }

    /// An event as the runtime generates it, through the faults in force (`cri_faults.rs`).
    fn emit(&self, st: &mut State, container_id: &str, sandbox_id: &str, kind: cri::ContainerEventType) {
        use cri::ContainerEventType as T;
        if st.faults.is_down() {
            // The runtime is not running: nothing generates events for what changes meanwhile.
            return;
        }
        if container_id == sandbox_id {
            self.send(st, container_id, sandbox_id, kind);
            return;
        }
        match kind {
            T::ContainerStartedEvent if st.faults.hold_started(container_id) => {}
            T::ContainerStoppedEvent => {
                let held = st.faults.release_started(container_id);
                self.deliver(st, container_id, sandbox_id, kind);
                if held {
                    self.deliver(st, container_id, sandbox_id, T::ContainerStartedEvent);
                }
            }
            T::ContainerDeletedEvent => {
                if st.faults.release_started(container_id) {
                    self.deliver(st, container_id, sandbox_id, T::ContainerStartedEvent);
                }
                self.deliver(st, container_id, sandbox_id, kind);
            }
            _ => self.deliver(st, container_id, sandbox_id, kind),
        }
    }

    /// A container event, unless the faults drop it.
    fn deliver(&self, st: &mut State, container_id: &str, sandbox_id: &str, kind: cri::ContainerEventType) {
        if st.faults.drop_event(kind) {
            tracing::debug!(
                container_id,
                kind = kind.as_str_name(),
                "container event discarded (injected fault)"
            );
            return;
        }
        self.send(st, container_id, sandbox_id, kind);
    }

    fn send(&self, st: &State, container_id: &str, sandbox_id: &str, kind: cri::ContainerEventType) {
        // Building statuses costs; nobody listening means nothing to build.
        if self.events.receiver_count() == 0 {
            return;
        }
        let event = cri::ContainerEventResponse {
            container_id: container_id.to_string(),
            container_event_type: kind as i32,
            created_at: now_ns(),
            pod_sandbox_status: st.sandboxes.get(sandbox_id).map(sandbox_status),
            containers_statuses: container_statuses(st, sandbox_id),
        };
        let _ = self.events.send(event);
    }

    // --- CRI reads ---

    pub fn version(&self) -> cri::VersionResponse {
        cri::VersionResponse {
            version: "0.1.0".into(),
            runtime_name: "containerd".into(),
            runtime_version: RUNTIME_VERSION.into(),
            runtime_api_version: "v1".into(),
        }
    }

    pub fn list_sandboxes(&self, filter: Option<&cri::PodSandboxFilter>) -> Vec<cri::PodSandbox> {
        let st = self.lock();
        let mut out: Vec<cri::PodSandbox> = st
            .sandboxes
            .values()
            .filter(|s| {
                let Some(f) = filter else { return true };
                (f.id.is_empty() || s.id.starts_with(&f.id))
                    && f.state.as_ref().is_none_or(|v| v.state == sandbox_state(s) as i32)
                    && f.label_selector.iter().all(|(k, v)| s.labels.get(k) == Some(v))
            })
            .map(|s| cri::PodSandbox {
                id: s.id.clone(),
                metadata: Some(sandbox_metadata(s)),
                state: sandbox_state(s) as i32,
                created_at: s.created_at,
                labels: s.labels.clone(),
                annotations: s.annotations.clone(),
                runtime_handler: String::new(),
            })
            .collect();
        out.sort_by_key(|s| s.created_at);
        out
    }

    pub fn sandbox_status(&self, id: &str) -> Result<(cri::PodSandboxStatus, Vec<cri::ContainerStatus>), RuntimeError> {
        let st = self.lock();
        let sb = resolve_id(st.sandboxes.keys(), id).and_then(|full| st.sandboxes.get(&full));
        let sb = sb.ok_or_else(|| RuntimeError::SandboxNotFound(id.to_string()))?;
        Ok((sandbox_status(sb), container_statuses(&st, &sb.id)))
    }

    pub fn list_containers(&self, filter: Option<&cri::ContainerFilter>) -> Vec<cri::Container> {
        let st = self.lock();
        let mut out: Vec<cri::Container> = st
            .containers
            .values()
            .filter(|c| {
                let Some(f) = filter else { return true };
                (f.id.is_empty() || c.id.starts_with(&f.id))
                    && (f.pod_sandbox_id.is_empty() || c.sandbox_id.starts_with(&f.pod_sandbox_id))
                    && f.state.as_ref().is_none_or(|v| v.state == c.state as i32)
                    && f.label_selector.iter().all(|(k, v)| c.config.labels.get(k) == Some(v))
            })
            .map(|c| cri::Container {
                id: c.id.clone(),
                pod_sandbox_id: c.sandbox_id.clone(),
                metadata: Some(cri::ContainerMetadata {
                    name: c.config.name.clone(),
                    attempt: c.config.attempt,
                }),
                image: Some(image_spec(c)),
                image_ref: c.image_ref.clone(),
                state: c.state as i32,
                created_at: c.created_at,
                labels: c.config.labels.clone(),
                annotations: c.config.annotations.clone(),
                image_id: c.image_ref.clone(),
            })
            .collect();
        out.sort_by_key(|c| c.created_at);
        out
    }

    pub fn container_status(&self, id: &str) -> Result<cri::ContainerStatus, RuntimeError> {
        let st = self.lock();
        let c = resolve_id(st.containers.keys(), id).and_then(|full| st.containers.get(&full));
        c.map(container_status)
            .ok_or_else(|| RuntimeError::ContainerNotFound(id.to_string()))
    }
}

/// What `Version` reports as the runtime's version (a simulated containerd).
pub const RUNTIME_VERSION: &str = "v1.7.27-kube-sim";

/// containerd accepts any unique prefix of an id.
fn resolve_id<'a>(ids: impl Iterator<Item = &'a String>, prefix: &str) -> Option<String> {
    if prefix.is_empty() {
        return None;
    }
    let mut found = ids.filter(|i| i.starts_with(prefix));
    let first = found.next()?.clone();
    found.next().is_none().then_some(first)
}

fn string_map(v: Option<&Value>) -> HashMap<String, String> {
    v.and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| v.as_str().map(|s| (k.clone(), s.to_string())))
                .collect()
        })
        .unwrap_or_default()
}

fn sandbox_state(s: &Sandbox) -> cri::PodSandboxState {
    if s.ready {
        cri::PodSandboxState::SandboxReady
    } else {
        cri::PodSandboxState::SandboxNotready
    }
}

fn sandbox_metadata(s: &Sandbox) -> cri::PodSandboxMetadata {
    cri::PodSandboxMetadata {
        name: s.name.clone(),
        uid: s.uid.clone(),
        namespace: s.namespace.clone(),
        attempt: s.attempt,
    }
}

fn sandbox_status(s: &Sandbox) -> cri::PodSandboxStatus {
    cri::PodSandboxStatus {
        id: s.id.clone(),
        metadata: Some(sandbox_metadata(s)),
        state: sandbox_state(s) as i32,
        created_at: s.created_at,
        network: Some(cri::PodSandboxNetworkStatus {
            ip: s.ip.map(|ip| ip.to_string()).unwrap_or_default(),
            additional_ips: Vec::new(),
        }),
        labels: s.labels.clone(),
        annotations: s.annotations.clone(),
        runtime_handler: String::new(),
    }
}

fn image_spec(c: &Container) -> cri::ImageSpec {
    cri::ImageSpec {
        image: normalize_image(&c.config.image),
        annotations: HashMap::new(),
        user_specified_image: c.config.image.clone(),
        runtime_handler: String::new(),
    }
}

fn container_status(c: &Container) -> cri::ContainerStatus {
    let reason = match c.oom_reason_at {
        Some(at) if Instant::now() < at => "Error".to_string(),
        _ => c.reason.clone(),
    };
    cri::ContainerStatus {
        id: c.id.clone(),
        metadata: Some(cri::ContainerMetadata {
            name: c.config.name.clone(),
            attempt: c.config.attempt,
        }),
        state: c.state as i32,
        created_at: c.created_at,
        started_at: c.started_at,
        finished_at: c.finished_at,
        exit_code: c.exit_code,
        image: Some(image_spec(c)),
        image_ref: c.image_ref.clone(),
        reason,
        message: c.message.clone(),
        labels: c.config.labels.clone(),
        annotations: c.config.annotations.clone(),
        // The sim keeps no volume mounts per container; a runtime that sends none is allowed.
        mounts: Vec::new(),
        log_path: c.config.log_path.clone(),
        image_id: c.image_ref.clone(),
        image_source: String::new(),
    }
}

fn container_statuses(st: &State, sandbox_id: &str) -> Vec<cri::ContainerStatus> {
    st.sandboxes
        .get(sandbox_id)
        .map(|sb| {
            sb.containers
                .iter()
                .filter_map(|id| st.containers.get(id))
                .map(container_status)
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn images_are_normalized_like_containerd() {
        assert_eq!(normalize_image("spark:4.0.0"), "docker.io/library/spark:4.0.0");
        assert_eq!(normalize_image("apache/spark"), "docker.io/apache/spark:latest");
        assert_eq!(normalize_image("ghcr.io/x/y:1"), "ghcr.io/x/y:1");
        let d = image_digest_ref("spark:4.0.0");
        assert!(
            d.starts_with("docker.io/library/spark@sha256:") && d.len() == "docker.io/library/spark@sha256:".len() + 64,
            "{d}"
        );
    }

    #[test]
    fn lifecycle_events_and_statuses() {
        let rt = Runtime::new("127.9.129.0/24".parse().unwrap());
        let mut events = rt.subscribe();
        let pod = json!({ "metadata": { "name": "p", "namespace": "ns", "uid": "u1", "labels": { "app": "x" } } });
        let (sb, ip) = rt.run_sandbox(&pod, 0).unwrap();
        assert_eq!(ip.to_string(), "127.9.129.2");
        let cfg = ContainerConfig {
            name: "c".into(),
            attempt: 0,
            image: "busybox".into(),
            labels: HashMap::new(),
            annotations: HashMap::new(),
            log_path: "/x".into(),
        };
        let id = rt.create_container(&sb, cfg).unwrap();
        rt.start_container(&id).unwrap();
        rt.exit_container(&id, 137, true).unwrap();
        rt.stop_sandbox(&sb);
        let status = rt.container_status(&id[..12]).unwrap();
        assert_eq!((status.exit_code, status.reason.as_str()), (137, "OOMKilled"));
        rt.remove_pod("u1");
        let mut kinds = Vec::new();
        while let Ok(e) = events.try_recv() {
            kinds.push((e.container_id == sb, e.container_event_type));
        }
        use cri::ContainerEventType as T;
        assert_eq!(
            kinds,
            vec![
                (true, T::ContainerCreatedEvent as i32),
                (true, T::ContainerStartedEvent as i32),
                (false, T::ContainerCreatedEvent as i32),
                (false, T::ContainerStartedEvent as i32),
                (false, T::ContainerStoppedEvent as i32),
                (true, T::ContainerStoppedEvent as i32),
                (false, T::ContainerDeletedEvent as i32),
                (true, T::ContainerDeletedEvent as i32),
            ]
        );
        assert!(rt.list_containers(None).is_empty());
    }
}
