//! What one container of a process pod sees: its mounts (volumes at their `mountPath`s and the
//! kubelet-managed `/etc/hosts`, `/etc/resolv.conf`, `/etc/hostname`, termination log), hostname,
//! resolved environment, working directory and user. The kubelet's volume manager and env
//! resolution; the container runtime (`sandbox`) turns a `View` into a process.
//!
//! - volumes (`volumes.rs`, written by the kubelet's AtomicWriter, `atomic_writer.rs`), with the
//!   downward API in `downward.rs`;
//! - the environment (`env.rs`);
//! - the hostname, `/etc/hosts` and `/etc/resolv.conf` (`dns.rs`);
//! - here: the container's mounts (`volumeMounts` with `subPath`/`subPathExpr`, the managed
//!   files, the termination log) in mount order, and its user and working directory.
//!
//! Files live where the kubelet keeps them: `<node_root>/var/lib/kubelet/pods/<uid>/`
//! (`volumes/kubernetes.io~<plugin>/<name>`, `etc-hosts`, `etc-hostname`, `resolv.conf`,
//! `containers/<container>/<id>`).

mod atomic_writer;
mod dns;
mod downward;
mod env;
mod volumes;

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Component, Path, PathBuf};

use serde_json::Value;

use crate::service_account_tokens::TokenSigner;
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
    /// Mints the pod's projected ServiceAccount tokens (`Shared::service_account_tokens`).
    pub tokens: &'a TokenSigner,
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
    /// A directory image's root layer, laid over the host's root (its `/etc/passwd` names the
    /// users' homes); none for an executable image.
    pub image_root: Option<PathBuf>,
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
    pub fn reason(&self) -> &'static str {
        match self {
            ViewError::Config(_) => "CreateContainerConfigError",
            ViewError::Files { .. } => "CreateContainerError",
        }
    }
}

/// Builds the container's view: sets up the pod's volumes and managed files and resolves the
/// container's environment and mounts. Called before each start of a container (a restart gets
/// fresh files, as the kubelet rewrites them).
pub(crate) fn prepare(input: ViewInput<'_>) -> Result<View, ViewError> {
    let pod = input.pod;
    let uid = crate::meta::uid(pod);
    if uid.is_empty() {
        return Err(ViewError::Config(format!(
            "pod {:?} has no uid",
            crate::meta::name(pod)
        )));
    }
    let dir = pod_dir(input.node_root, uid);
    std::fs::create_dir_all(&dir).map_err(files_err(&dir))?;
    let container_name = input.container.get("name").and_then(Value::as_str).unwrap_or("");

    let env = env::environment(&input)?;
    let (hostname, domain) = dns::hostname_and_domain(pod)?;
    let uts_hostname = if dns::host_network(pod) {
        input.node_name.to_string()
    } else {
        dns::uts_hostname(pod, &hostname, domain.as_deref())?
    };
    let volumes = volumes::materialize(&input, &dir)?;
    let mut mounts = volume_mounts(&input, container_name, &volumes, &env)?;

    // The kubelet's (`/etc/hosts`) and the runtime's (`/etc/hostname`, `/etc/resolv.conf`)
    // files, unless the container mounts something of its own there.
    let taken = |target: &str, mounts: &[ViewMount]| mounts.iter().any(|m| m.target == target);
    let mut managed: Vec<(&str, &str, String)> = vec![
        ("etc-hostname", "/etc/hostname", format!("{uts_hostname}\n")),
        (
            "resolv.conf",
            "/etc/resolv.conf",
            dns::pod_dns(input.store, pod).render(),
        ),
    ];
    // No pod IP yet: the kubelet mounts no hosts file.
    if !input.pod_ip.is_empty() || dns::host_network(pod) {
        managed.insert(
            0,
            (
                "etc-hosts",
                "/etc/hosts",
                dns::hosts_file(pod, input.pod_ip, &hostname, domain.as_deref()),
            ),
        );
    }
    for (file, target, content) in managed {
        if taken(target, &mounts) {
            continue;
        }
        let path = dir.join(file);
        write_replacing(&path, content.as_bytes(), 0o644)?;
        mounts.push(ViewMount {
            source: path,
            target: target.to_string(),
            read_only: false,
        });
    }

    let termination_path = input
        .container
        .get("terminationMessagePath")
        .and_then(Value::as_str)
        .unwrap_or("/dev/termination-log");
    let mut termination_log = None;
    if !termination_path.is_empty() {
        let target = clean_target(termination_path);
        if !taken(&target, &mounts) {
            let cdir = dir.join("containers").join(container_name);
            std::fs::create_dir_all(&cdir).map_err(files_err(&cdir))?;
            std::fs::set_permissions(&cdir, std::fs::Permissions::from_mode(0o750)).map_err(files_err(&cdir))?;
            // A new file for every start: the message of a previous run never leaks into this one.
            let id = format!("{:08x}", uuid::Uuid::new_v4().as_u128() as u32);
            let path = cdir.join(id);
            // 0666 so that a container running as any user can write its message.
            write_replacing(&path, b"", 0o666)?;
            mounts.push(ViewMount {
                source: path.clone(),
                target,
                read_only: false,
            });
            termination_log = Some(path);
        }
    }
    order_mounts(&mut mounts);

    let security = |field: &str| {
        input
            .container
            .pointer(&format!("/securityContext/{field}"))
            .or_else(|| pod.pointer(&format!("/spec/securityContext/{field}")))
            .and_then(Value::as_u64)
            .and_then(|v| u32::try_from(v).ok())
    };
    Ok(View {
        mounts,
        hostname: uts_hostname,
        env,
        working_dir: input
            .container
            .get("workingDir")
            .and_then(Value::as_str)
            .filter(|w| !w.is_empty())
            .map(str::to_string),
        run_as_user: security("runAsUser"),
        run_as_group: security("runAsGroup"),
        termination_log,
        image_root: None,
    })
}

/// Syncs the pod's volumes again, as the kubelet does periodically: ConfigMap and Secret changes
/// and tokens past 80 % of their lifetime reach running containers that mount the volume (not
/// those mounting a `subPath` of it). Only `input.pod` matters; `container` may be any of its
/// containers.
pub(crate) fn refresh_volumes(input: &ViewInput<'_>) -> Result<(), ViewError> {
    let uid = crate::meta::uid(input.pod);
    if uid.is_empty() {
        return Ok(());
    }
    volumes::materialize(input, &pod_dir(input.node_root, uid)).map(|_| ())
}

/// Removes what `prepare` wrote for a pod (its directory under `var/lib/kubelet/pods`).
pub(crate) fn remove(node_root: &Path, pod_uid: &str) {
    if pod_uid.is_empty() || pod_uid.contains('/') || pod_uid.starts_with('.') {
        return;
    }
    let _ = std::fs::remove_dir_all(pod_dir(node_root, pod_uid));
}

/// `<node_root>/var/lib/kubelet/pods/<uid>`
pub(crate) fn pod_dir(node_root: &Path, pod_uid: &str) -> PathBuf {
    node_root.join("var/lib/kubelet/pods").join(pod_uid)
}

fn files_err(path: &Path) -> impl FnOnce(std::io::Error) -> ViewError + '_ {
    move |source| ViewError::Files {
        path: path.to_path_buf(),
        source,
    }
}

/// Writes a whole file under a temporary name and renames it into place, so a running
/// container that has it open never sees it half-written.
fn write_replacing(path: &Path, content: &[u8], mode: u32) -> Result<(), ViewError> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, content).map_err(files_err(&tmp))?;
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(mode)).map_err(files_err(&tmp))?;
    std::fs::rename(&tmp, path).map_err(files_err(path))
}

/// An absolute, lexically clean path inside the container (the kubelet makes a relative
/// `mountPath` absolute).
fn clean_target(path: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for c in Path::new(path).components() {
        match c {
            Component::Normal(p) => parts.push(p.to_str().unwrap_or_default()),
            Component::ParentDir => {
                parts.pop();
            }
            _ => {}
        }
    }
    format!("/{}", parts.join("/"))
}

/// Parents before children: a mount inside another's target must come after it (a stable sort
/// by depth keeps the container's own order otherwise).
fn order_mounts(mounts: &mut [ViewMount]) {
    mounts.sort_by_key(|m| m.target.split('/').filter(|p| !p.is_empty()).count());
}

/// The container's `volumeMounts` (`makeMounts`): the volume's directory, or a path in it for a
/// `subPath`/`subPathExpr` (created as a directory if missing, refused if it leaves the volume).
fn volume_mounts(
    input: &ViewInput<'_>,
    container: &str,
    volumes: &BTreeMap<String, volumes::Volume>,
    env: &[(String, String)],
) -> Result<Vec<ViewMount>, ViewError> {
    let mut out = Vec::new();
    for m in input
        .container
        .get("volumeMounts")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let name = m.get("name").and_then(Value::as_str).unwrap_or("");
        let Some(vol) = volumes.get(name) else {
            return Err(ViewError::Config(format!(
                "cannot find volume {name:?} to mount into container {container:?}"
            )));
        };
        let mount_path = m.get("mountPath").and_then(Value::as_str).unwrap_or("");
        let sub_path = match m.get("subPathExpr").and_then(Value::as_str).filter(|s| !s.is_empty()) {
            Some(expr) => expand_sub_path(expr, env)?,
            None => m.get("subPath").and_then(Value::as_str).unwrap_or("").to_string(),
        };
        let source = if sub_path.is_empty() {
            vol.path.clone()
        } else {
            sub_path_source(&vol.path, &sub_path, name, container)?
        };
        let read_only = m.get("readOnly").and_then(Value::as_bool).unwrap_or(false) || vol.read_only;
        out.push(ViewMount {
            source,
            target: clean_target(mount_path),
            read_only,
        });
    }
    Ok(out)
}

/// `ExpandContainerVolumeMounts`: every `$(VAR)` must name a set, non-empty variable.
fn expand_sub_path(expr: &str, env: &[(String, String)]) -> Result<String, ViewError> {
    let missing = std::cell::RefCell::new(std::collections::BTreeSet::new());
    let expanded = crate::node::expand::expand(expr, |name| {
        let value = env
            .iter()
            .rev()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
            .filter(|v| !v.is_empty());
        if value.is_none() {
            missing.borrow_mut().insert(name.to_string());
        }
        value
    });
    let missing = missing.into_inner();
    if !missing.is_empty() {
        return Err(ViewError::Config(format!(
            "missing value for {}",
            missing.into_iter().collect::<Vec<_>>().join(", ")
        )));
    }
    Ok(expanded)
}

fn sub_path_source(volume: &Path, sub_path: &str, mount: &str, container: &str) -> Result<PathBuf, ViewError> {
    if sub_path.starts_with('/') {
        return Err(ViewError::Config(format!(
            "error SubPath `{sub_path}` must not be an absolute path"
        )));
    }
    if sub_path.split('/').any(|p| p == "..") {
        return Err(ViewError::Config(format!(
            "unable to provision SubPath `{sub_path}`: must not contain '..'"
        )));
    }
    let path = volume.join(sub_path);
    if std::fs::symlink_metadata(&path).is_err() {
        let created = std::fs::metadata(volume).and_then(|meta| {
            std::fs::create_dir_all(&path)?;
            std::fs::set_permissions(
                &path,
                std::fs::Permissions::from_mode(meta.permissions().mode() & 0o7777),
            )
        });
        if created.is_err() {
            return Err(ViewError::Config(format!(
                "failed to create subPath directory for volumeMount {mount:?} of container {container:?}"
            )));
        }
    }
    // What is bind-mounted is the resolved path, checked to be inside the volume (a symlink
    // must not lead out of it); later changes of the volume do not reach it, as on a kubelet.
    let prepare_failed = || {
        ViewError::Config(format!(
            "failed to prepare subPath for volumeMount {mount:?} of container {container:?}"
        ))
    };
    let resolved = std::fs::canonicalize(&path).map_err(|_| prepare_failed())?;
    let root = std::fs::canonicalize(volume).map_err(|_| prepare_failed())?;
    if !resolved.starts_with(&root) {
        return Err(prepare_failed());
    }
    Ok(resolved)
}

#[cfg(test)]
mod tests;
