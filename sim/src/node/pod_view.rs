//! What one container of a process pod sees: its mounts (volumes at their `mountPath`s and the
//! kubelet-managed `/etc/hosts`, `/etc/resolv.conf`, `/etc/hostname`, termination log), hostname,
//! resolved environment, working directory and user. The kubelet's volume manager and env
//! resolution; the container runtime (`sandbox`) turns a `View` into a process.
//!
//! Interface shared by the kubelet volume/env work and the process runtime; the first version
//! resolves literal env values only and mounts nothing.
#![allow(dead_code)] // wired into the kubelet by the process runtime

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::store::Store;

/// Everything `prepare` reads.
pub(crate) struct ViewInput<'a> {
    pub store: &'a Store,
    /// `<data-dir>/nodes/<node>`: the simulated node's root (hostPaths resolve under it).
    pub node_root: &'a Path,
    pub node_name: &'a str,
    pub pod: &'a Value,
    /// The container's spec (an element of `spec.containers` or `spec.initContainers`).
    pub container: &'a Value,
    pub pod_ip: &'a str,
    pub host_ip: &'a str,
}

/// One bind mount into the pod's view.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ViewMount {
    /// A file or directory on this machine.
    pub source: PathBuf,
    /// Absolute path inside the pod.
    pub target: String,
    pub read_only: bool,
}

/// What the runtime needs to start the container's process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct View {
    /// In mount order (a mount under another's target comes after it).
    pub mounts: Vec<ViewMount>,
    pub hostname: String,
    /// Fully resolved, in the kubelet's order (service links, `envFrom`, `env`); later entries
    /// win over earlier ones with the same name.
    pub env: Vec<(String, String)>,
    pub working_dir: Option<String>,
    pub run_as_user: Option<u32>,
    pub run_as_group: Option<u32>,
    /// The host file mounted at the container's `terminationMessagePath`; read after exit.
    pub termination_log: Option<PathBuf>,
}

/// Why a container's view could not be made; the kubelet shows it as the waiting reason.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ViewError {
    /// A ConfigMap, Secret or key the env or a volume needs is missing: CreateContainerConfigError.
    #[error("{0}")]
    Config(String),
    /// Files could not be written: CreateContainerError.
    #[error("failed to prepare the container's files at {path}")]
    Files {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl ViewError {
    /// The container's waiting reason for this error.
    #[allow(dead_code)]
    pub fn reason(&self) -> &'static str {
        match self {
            ViewError::Config(_) => "CreateContainerConfigError",
            ViewError::Files { .. } => "CreateContainerError",
        }
    }
}

/// Builds the container's view.
#[allow(dead_code)]
pub(crate) fn prepare(input: ViewInput<'_>) -> Result<View, ViewError> {
    let env = input
        .container
        .get("env")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|e| {
            let name = e.get("name")?.as_str()?;
            let value = e.get("value").and_then(Value::as_str).unwrap_or_default();
            Some((name.to_string(), value.to_string()))
        })
        .collect();
    let hostname = input
        .pod
        .pointer("/spec/hostname")
        .and_then(Value::as_str)
        .unwrap_or_else(|| crate::meta::name(input.pod))
        .to_string();
    Ok(View {
        mounts: Vec::new(),
        hostname,
        env,
        working_dir: input
            .container
            .get("workingDir")
            .and_then(Value::as_str)
            .map(str::to_string),
        run_as_user: None,
        run_as_group: None,
        termination_log: None,
    })
}

/// Removes what `prepare` wrote for a pod (its directory under `var/lib/kubelet/pods`).
#[allow(dead_code)]
pub(crate) fn remove(node_root: &Path, pod_uid: &str) {
    let _ = std::fs::remove_dir_all(node_root.join("var/lib/kubelet/pods").join(pod_uid));
}
