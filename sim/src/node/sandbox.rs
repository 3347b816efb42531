//! The process container runtime's launcher: turns a container's [`View`] into a real process
//! in its own mount, UTS and PID namespaces, as runc would, with util-linux tools (no `unsafe`,
//! so no `pre_exec`):
//!
//! `setpriv --pdeathsig KILL unshare --mount --uts --pid --fork --kill-child -- sh launch.sh`
//!
//! `launch.sh` (PID 1 of the new PID namespace until it `exec`s the command) mounts a
//! copy-on-write overlay of the host's root filesystem (upper and work directories in the
//! container's scratch directory), binds `/dev` and `/sys`, mounts a fresh `/proc`, masks
//! `/root`, `/home`, `/tmp` and the sim's data directory with empty tmpfs, binds every view mount
//! (staged under the new root, then moved into place from inside the `chroot`, so `mkdir -p` of a
//! target never follows a symlink out onto the host), sets the hostname, and `exec`s
//! `chroot ROOT [setpriv --reuid --regid] env -i [-C WORKDIR] ENV... COMMAND ARGS...` with only
//! the view's environment. There is no network namespace: the process binds its pod's loopback
//! address itself.
//!
//! No orphans: the sim's child (`unshare`) carries a parent-death SIGKILL, `unshare` kills its
//! child (the namespace's init, i.e. the container process) when it dies, and the kernel kills
//! every other process of a PID namespace when its init dies. Parent death is the death of the
//! spawning *thread*, so containers are spawned from async tasks (runtime worker threads live as
//! long as the sim), never from `spawn_blocking`.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::OnceLock;
use std::time::Duration;

use tokio::io::AsyncReadExt as _;
use tokio::process::{Child, Command};

use super::logs::{LogWriter, MAX_RECORD, Stream};
use super::pod_view::View;

/// The environment of the tools that set a container up; never the sim's own (it may hold
/// KUBECONFIG or credentials).
const TOOLS_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
/// containerd's default `PATH` for an image that sets none.
pub(crate) const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
/// Paths of the host masked by empty tmpfs in every container.
const MASKED: &[&str] = &["/root", "/home", "/tmp"];
/// Where view mounts are staged inside the new root before they are moved into place.
const STAGE: &str = "/.kube-sim-mounts";

/// Why a container process could not be started.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SandboxError {
    #[error("failed to create containerd task: {0}")]
    Unsupported(String),
    #[error("failed to create containerd task: failed to prepare {path}")]
    Scratch {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("failed to create containerd task: scratch path {0:?} cannot be used in overlay mount options")]
    BadPath(String),
    #[error("failed to create containerd task: failed to start the container process")]
    Spawn(#[source] std::io::Error),
    #[error(
        "failed to create containerd task: failed to create shim task: OCI runtime create failed: runc create failed: unable to start container process: {0}: unknown"
    )]
    Exec(String),
}

/// Whether this machine lets the sim create namespaces and overlay mounts (root, util-linux,
/// overlayfs); the reason when not. Checked once per process.
pub fn supported() -> Result<(), String> {
    static CHECK: OnceLock<Result<(), String>> = OnceLock::new();
    CHECK.get_or_init(check_support).clone()
}

fn check_support() -> Result<(), String> {
    let dir = std::env::temp_dir().join(format!("kube-sim-sandbox-check-{}", std::process::id()));
    let d = quote(&dir.display().to_string());
    let script = format!(
        "set -e; mkdir -p {d}/u {d}/w {d}/r; mount -t overlay overlay -o lowerdir=/,upperdir={d}/u,workdir={d}/w {d}/r; hostname kube-sim-check; mount -t proc proc {d}/r/proc"
    );
    let out = std::process::Command::new("unshare")
        .args([
            "--mount",
            "--uts",
            "--pid",
            "--fork",
            "--propagation",
            "private",
            "--",
            "/bin/sh",
            "-c",
        ])
        .arg(&script)
        .env_clear()
        .env("PATH", TOOLS_PATH)
        .stdin(Stdio::null())
        .output();
    let _ = std::fs::remove_dir_all(&dir);
    match out {
        Ok(o) if o.status.success() => Ok(()),
        Ok(o) => Err(format!(
            "the kernel refused namespaces or an overlay mount (process pods need root, unshare and overlayfs): {}",
            String::from_utf8_lossy(&o.stderr).trim()
        )),
        Err(e) => Err(format!("cannot run unshare (util-linux) for process pods: {e}")),
    }
}

/// What to start.
pub(crate) struct Launch<'a> {
    pub view: &'a View,
    /// The command and its arguments, expanded.
    pub argv: &'a [String],
    /// The local image's executable: bound read-only at its own path, so it is there even when
    /// it lives on a path the container does not otherwise see.
    pub entrypoint: Option<&'a Path>,
    /// A directory image's root filesystem: the overlay's upper lower layer, over the host's `/`.
    pub layer: Option<&'a Path>,
    /// A fresh directory of this container: overlay upper/work dirs, the root, scripts.
    pub scratch: &'a Path,
    /// More host directories to hide (the sim's data directory: kubeconfig, other pods' files).
    pub masks: &'a [PathBuf],
    /// The container's resource limits (`cgroups.rs`), if it has any and they can be set here.
    pub cgroup: Option<super::cgroups::ContainerCgroup>,
}

/// A started container process.
pub(crate) struct Launched {
    pub child: Child,
    pub scratch: PathBuf,
    /// Kept until the process is gone (then removed), to tell an OOM kill.
    pub cgroup: Option<super::cgroups::ContainerCgroup>,
}

/// The container's environment as containerd builds it: `PATH` (the image's default), `HOSTNAME`,
/// then the view's env in order (later wins), `HOME` if still unset (runc: the user's home,
/// `/root` for root).
pub(crate) fn final_env(view: &View) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = vec![
        ("PATH".into(), DEFAULT_PATH.into()),
        ("HOSTNAME".into(), view.hostname.clone()),
    ];
    for (k, v) in &view.env {
        env.retain(|(n, _)| n != k);
        env.push((k.clone(), v.clone()));
    }
    if !env.iter().any(|(k, _)| k == "HOME") {
        env.push((
            "HOME".into(),
            home_of(view.run_as_user.unwrap_or(0), view.image_root.as_deref()),
        ));
    }
    env
}

/// The user's home from the container's `/etc/passwd` (the image layer's, else the host's); `/`
/// for a user without an entry (runc's default).
fn home_of(uid: u32, image_root: Option<&Path>) -> String {
    if uid == 0 {
        return "/root".into();
    }
    let passwd = image_root
        .and_then(|r| std::fs::read_to_string(r.join("etc/passwd")).ok())
        .or_else(|| std::fs::read_to_string("/etc/passwd").ok())
        .unwrap_or_default();
    passwd
        .lines()
        .map(|l| l.split(':').collect::<Vec<_>>())
        .find(|f| f.len() > 5 && f[2] == uid.to_string())
        .map(|f| f[5].to_string())
        .unwrap_or_else(|| "/".into())
}

/// Where a path of the container is on this machine, if the container can see it.
fn host_path(
    view: &View,
    entrypoint: Option<&Path>,
    layer: Option<&Path>,
    masks: &[PathBuf],
    path: &str,
) -> Option<PathBuf> {
    for m in view.mounts.iter().rev() {
        let target = m.target.trim_end_matches('/');
        if path == target {
            return Some(m.source.clone());
        }
        if let Some(rest) = path.strip_prefix(target).and_then(|r| r.strip_prefix('/')) {
            return Some(m.source.join(rest));
        }
    }
    if entrypoint.is_some_and(|e| e == Path::new(path)) {
        return Some(PathBuf::from(path));
    }
    if let Some(in_layer) = layer.map(|l| l.join(path.trim_start_matches('/')))
        && std::fs::symlink_metadata(&in_layer).is_ok()
    {
        return Some(in_layer);
    }
    let hidden = MASKED
        .iter()
        .map(PathBuf::from)
        .chain(masks.iter().cloned())
        .any(|m| Path::new(path).starts_with(&m));
    (!hidden).then(|| PathBuf::from(path))
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Checks that the command exists in the container's view, as runc does before `exec`; the
/// error is runc's.
pub(crate) fn check_command(
    view: &View,
    env: &[(String, String)],
    argv0: &str,
    entrypoint: Option<&Path>,
    layer: Option<&Path>,
    masks: &[PathBuf],
) -> Result<(), SandboxError> {
    if argv0.contains('/') {
        let abs = if argv0.starts_with('/') {
            argv0.to_string()
        } else {
            let wd = view.working_dir.as_deref().unwrap_or("/");
            format!("{}/{argv0}", wd.trim_end_matches('/'))
        };
        return match host_path(view, entrypoint, layer, masks, &abs) {
            Some(p) if p.exists() => Ok(()),
            _ => Err(SandboxError::Exec(format!(
                "exec: {argv0:?}: stat {argv0}: no such file or directory"
            ))),
        };
    }
    let path = env
        .iter()
        .rev()
        .find(|(k, _)| k == "PATH")
        .map_or(DEFAULT_PATH, |(_, v)| v.as_str());
    let found = path
        .split(':')
        .filter(|d| d.starts_with('/'))
        .filter_map(|d| {
            host_path(
                view,
                entrypoint,
                layer,
                masks,
                &format!("{}/{argv0}", d.trim_end_matches('/')),
            )
        })
        .any(|p| is_executable(&p));
    if found {
        Ok(())
    } else {
        Err(SandboxError::Exec(format!(
            "exec: {argv0:?}: executable file not found in $PATH"
        )))
    }
}

/// Quotes a word for `sh`.
pub(crate) fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// Starts the container process. Must be called from a thread that lives as long as the sim
/// (see the module docs).
pub(crate) fn launch(l: Launch<'_>) -> Result<Launched, SandboxError> {
    supported().map_err(SandboxError::Unsupported)?;
    let scratch = l.scratch;
    let s = scratch.display().to_string();
    if s.contains([',', ':', '\n']) {
        return Err(SandboxError::BadPath(s));
    }
    if let Some(layer) = l.layer.map(|p| p.display().to_string())
        && layer.contains([',', ':', '\n'])
    {
        return Err(SandboxError::BadPath(layer));
    }
    std::fs::create_dir_all(scratch).map_err(|source| SandboxError::Scratch {
        path: s.clone(),
        source,
    })?;
    let (outer, inner) = scripts(&l);
    let stage_script = scratch.join("phase2.sh");
    for (path, text) in [(scratch.join("launch.sh"), &outer), (stage_script, &inner)] {
        std::fs::write(&path, text).map_err(|source| SandboxError::Scratch {
            path: path.display().to_string(),
            source,
        })?;
    }
    let child = Command::new("setpriv")
        .args([
            "--pdeathsig",
            "KILL",
            "unshare",
            "--mount",
            "--uts",
            "--pid",
            "--fork",
            "--kill-child",
        ])
        .args(["--propagation", "private", "--", "/bin/sh"])
        .arg(scratch.join("launch.sh"))
        .env_clear()
        .env("PATH", TOOLS_PATH)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(SandboxError::Spawn)?;
    Ok(Launched {
        child,
        scratch: scratch.to_path_buf(),
        cgroup: l.cgroup,
    })
}

/// The two scripts: `launch.sh` (outside the new root) and `phase2.sh` (inside it).
fn scripts(l: &Launch<'_>) -> (String, String) {
    let view = l.view;
    let sq = |p: &Path| quote(&p.display().to_string());
    let s = l.scratch;
    let mut o = String::new();
    // Setup errors go to setup.err, the program's stderr stays the pipe (saved in fd 9).
    o.push_str(&format!("exec 9>&2 2>{}\nset -eu\n", sq(&s.join("setup.err"))));
    o.push_str(&format!("R={}\n", sq(&s.join("rootfs"))));
    o.push_str(&format!(
        "mkdir -p \"$R\" {u} {w}\nmount -t overlay overlay -o lowerdir=/,upperdir={us},workdir={ws} \"$R\"\n",
        u = sq(&s.join("upper")),
        w = sq(&s.join("work")),
        us = s.join("upper").display(),
        ws = s.join("work").display(),
    ));
    o.push_str(&layer_mounts(l.layer, s));
    o.push_str("mount --rbind /dev \"$R/dev\"\nmount --rbind /sys \"$R/sys\"\nmount -t proc proc \"$R/proc\"\n");
    o.push_str("mount -t tmpfs -o mode=700 tmpfs \"$R/root\"\nmount -t tmpfs -o mode=755 tmpfs \"$R/home\"\n");
    o.push_str("mount -t tmpfs -o mode=1777 tmpfs \"$R/tmp\"\n");
    for m in l.masks {
        let q = quote(&m.display().to_string());
        o.push_str(&format!(
            "if [ -d \"$R\"{q} ]; then mount -t tmpfs -o mode=755 tmpfs \"$R\"{q}; fi\n"
        ));
    }
    o.push_str(&format!("mkdir -p \"$R{STAGE}\"\n"));
    let mut inner = String::from("set -eu\n");
    let mut binds: Vec<(PathBuf, String, bool)> = view
        .mounts
        .iter()
        .map(|m| (m.source.clone(), m.target.clone(), m.read_only))
        .collect();
    if let Some(e) = l.entrypoint {
        binds.insert(0, (e.to_path_buf(), e.display().to_string(), true));
    }
    for (n, (source, target, ro)) in binds.iter().enumerate() {
        let staged = format!("{STAGE}/{n}");
        let t = quote(target);
        let src = sq(source);
        // A file is bound over a file, a directory over a directory.
        o.push_str(&format!(
            "if [ -d {src} ]; then mkdir \"$R{staged}\"; else : > \"$R{staged}\"; fi\nmount --bind {src} \"$R{staged}\"\n"
        ));
        inner.push_str(&format!(
            "if [ -d {staged} ]; then mkdir -p {t}; else mkdir -p \"$(dirname {t})\"; [ -e {t} ] || : > {t}; fi\nmount --move {staged} {t}\n"
        ));
        if *ro {
            inner.push_str(&format!("mount -o remount,bind,ro {t}\n"));
        }
    }
    inner.push_str(&format!("rm -rf {STAGE}\nhostname {}\n", quote(&view.hostname)));
    let wd = view.working_dir.clone().unwrap_or_else(|| "/".into());
    inner.push_str(&format!("mkdir -p {}\n", quote(&wd)));
    o.push_str(&format!(
        "cp {} \"$R{STAGE}/phase2.sh\"\nchroot \"$R\" /bin/sh {STAGE}/phase2.sh\n",
        sq(&s.join("phase2.sh"))
    ));
    // The container's cgroups: this shell joins them (`0` is the writer), and the process it becomes;
    // before the pid file, so a failure here is a setup failure.
    for procs in l.cgroup.iter().flat_map(super::cgroups::ContainerCgroup::procs_files) {
        o.push_str(&format!("echo 0 > {}\n", sq(&procs)));
    }
    // The host PID of this shell, which becomes the container process: /proc here is the host's.
    o.push_str(&format!(
        "read -r pid rest < /proc/self/stat\necho \"$pid\" > {p}.tmp\nmv {p}.tmp {p}\n",
        p = sq(&s.join("pid"))
    ));
    o.push_str("exec 2>&9 9>&-\nexec chroot \"$R\"");
    if view.run_as_user.is_some() || view.run_as_group.is_some() {
        // setpriv needs both ids; Kubernetes' default group is the image's, 0 here. Changing the user
        // clears the parent-death signal `unshare --kill-child` set: set again after the change, or the
        // process outlives a killed sim.
        o.push_str(&format!(
            " setpriv --reuid={} --regid={} --clear-groups --pdeathsig KILL --",
            view.run_as_user.unwrap_or(0),
            view.run_as_group.unwrap_or(0)
        ));
    }
    o.push_str(&format!(" env -i -C {}", quote(&wd)));
    for (k, v) in final_env(view) {
        o.push(' ');
        o.push_str(&quote(&format!("{k}={v}")));
    }
    for a in l.argv {
        o.push(' ');
        o.push_str(&quote(a));
    }
    o.push('\n');
    (o, inner)
}

/// A directory image's layer, one overlay per top-level directory of it: the image's directory
/// over the host's (overlayfs refuses the layer and `/` as lower layers of one mount, since one
/// contains the other), writes in the container's scratch. Top-level files and directories
/// that contain the layer itself are left out.
fn layer_mounts(layer: Option<&Path>, scratch: &Path) -> String {
    let Some(layer) = layer else { return String::new() };
    let mut dirs: Vec<String> = std::fs::read_dir(layer)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .filter_map(|e| e.file_name().to_str().map(str::to_string))
        .filter(|d| !layer.starts_with(Path::new("/").join(d)) && !d.contains([',', ':', '\n']))
        .collect();
    dirs.sort();
    let mut o = String::new();
    for d in dirs {
        let image = layer.join(&d).display().to_string();
        let (u, w) = (
            scratch.join("layer/upper").join(&d),
            scratch.join("layer/work").join(&d),
        );
        let host = format!("/{d}");
        let lower = if Path::new(&host).is_dir() {
            format!("{image}:{host}")
        } else {
            image
        };
        o.push_str(&format!(
            "mkdir -p {uq} {wq} \"$R\"{t}\nmount -t overlay overlay -o lowerdir={lower},upperdir={u},workdir={w} \"$R\"{t}\n",
            uq = quote(&u.display().to_string()),
            wq = quote(&w.display().to_string()),
            u = u.display(),
            w = w.display(),
            t = quote(&host),
        ));
    }
    o
}

/// The host PID of the container process (its namespace's PID 1), once it is set up.
pub(crate) fn host_pid(scratch: &Path) -> Option<u32> {
    std::fs::read_to_string(scratch.join("pid")).ok()?.trim().parse().ok()
}

/// Why the container never got to run its command (setup failed), if it did not.
pub(crate) fn setup_failure(scratch: &Path) -> Option<String> {
    if scratch.join("pid").exists() {
        return None;
    }
    let err = std::fs::read_to_string(scratch.join("setup.err")).unwrap_or_default();
    Some(if err.trim().is_empty() {
        "the container's namespaces could not be set up".into()
    } else {
        err.trim().lines().last().unwrap_or_default().to_string()
    })
}

/// Sends a signal to a process by PID (`kill(1)`: std has no `kill(2)` without `unsafe`).
pub(crate) async fn signal(pid: u32, signal: &str) {
    let status = Command::new("kill")
        .args(["-s", signal, &pid.to_string()])
        .env_clear()
        .env("PATH", TOOLS_PATH)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .await;
    if let Err(e) = status {
        tracing::warn!(pid, signal, error = %e, "signalling a container process");
    }
}

/// Copies a process's output into the container's log, one CRI record per line, lines longer
/// than 16 KiB split into partial records, as containerd's logger does.
pub(crate) async fn pump(mut from: impl tokio::io::AsyncRead + Unpin, log: std::sync::Arc<LogWriter>, stream: Stream) {
    let mut pending: Vec<u8> = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        pending.extend_from_slice(&buf[..n]);
        let mut start = 0;
        while let Some(nl) = pending[start..].iter().position(|b| *b == b'\n') {
            log.record(stream, &pending[start..start + nl], false);
            start += nl + 1;
        }
        pending.drain(..start);
        while pending.len() >= MAX_RECORD {
            log.record(stream, &pending[..MAX_RECORD], true);
            pending.drain(..MAX_RECORD);
        }
    }
    if !pending.is_empty() {
        log.record(stream, &pending, false);
    }
}

/// The exit code as the runtime reports it: the code, or 128 + the signal that killed it.
pub(crate) fn exit_code(status: std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt as _;
    status
        .code()
        .or_else(|| status.signal().map(|s| 128 + s))
        .unwrap_or(255)
}

/// Runs `argv` inside the container's namespaces and root (an exec probe), with the container's
/// environment and user; returns the exit code and output, or None on timeout.
pub(crate) async fn exec_in(
    pid: u32,
    view: &View,
    argv: &[String],
    timeout: Duration,
) -> Result<Option<(i32, String)>, std::io::Error> {
    let mut cmd = Command::new("nsenter");
    cmd.args(["-t", &pid.to_string(), "-m", "-u", "-p", "-r", "-w", "--"]);
    if view.run_as_user.is_some() || view.run_as_group.is_some() {
        cmd.arg("setpriv")
            .arg(format!("--reuid={}", view.run_as_user.unwrap_or(0)))
            .arg(format!("--regid={}", view.run_as_group.unwrap_or(0)))
            .args(["--clear-groups", "--"]);
    }
    cmd.args(["env", "-i"]);
    for (k, v) in final_env(view) {
        cmd.arg(format!("{k}={v}"));
    }
    let child = cmd
        .args(argv)
        .env_clear()
        .env("PATH", TOOLS_PATH)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()?;
    match tokio::time::timeout(timeout, child.wait_with_output()).await {
        Ok(out) => {
            let out = out?;
            let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
            text.push_str(&String::from_utf8_lossy(&out.stderr));
            Ok(Some((exit_code(out.status), text)))
        }
        Err(_) => Ok(None),
    }
}

/// Removes a container's scratch directory when its supervisor ends, also when it is aborted
/// (SIGKILL at the end of a grace period).
struct ScratchGuard(PathBuf);

impl Drop for ScratchGuard {
    fn drop(&mut self) {
        if let Err(e) = std::fs::remove_dir_all(&self.0)
            && e.kind() != std::io::ErrorKind::NotFound
        {
            tracing::debug!(dir = %self.0.display(), error = %e, "removing a container's scratch directory");
        }
    }
}

/// The most of a termination message file the kubelet reads.
const MAX_TERMINATION_MESSAGE: usize = 4096;

/// Runs a started container to its end: its output into the log, SIGTERM to its PID 1 when the
/// kubelet signals (a program without a handler ignores it, as PID 1 of a real container does);
/// SIGKILL is dropping this future (the child is killed on drop, and with it the namespace).
pub(crate) async fn supervise(
    launched: Launched,
    log: std::sync::Arc<LogWriter>,
    mut signals: tokio::sync::watch::Receiver<super::process::Signal>,
    termination_log: Option<PathBuf>,
) -> super::process::Exit {
    let Launched {
        mut child,
        scratch,
        cgroup,
    } = launched;
    let _guard = ScratchGuard(scratch.clone());
    let pumps: Vec<_> = [
        child
            .stdout
            .take()
            .map(|o| tokio::spawn(pump(o, log.clone(), Stream::Stdout))),
        child
            .stderr
            .take()
            .map(|e| tokio::spawn(pump(e, log.clone(), Stream::Stderr))),
    ]
    .into_iter()
    .flatten()
    .collect();
    let (mut listening, mut term_pending) = (true, false);
    let status = loop {
        tokio::select! {
            st = child.wait() => break st,
            sig = super::process::next_signal(&mut signals), if listening => {
                listening = false;
                term_pending = sig == super::process::Signal::Term;
            }
            // The setup shell is still running: the signal goes to the process once it exists.
            _ = tokio::time::sleep(Duration::from_millis(50)), if term_pending => {}
        }
        if term_pending && let Some(pid) = host_pid(&scratch) {
            // Sent once, as the kubelet's StopContainer does; SIGKILL comes from the worker.
            signal(pid, "TERM").await;
            term_pending = false;
        }
    };
    for p in pumps {
        let _ = p.await;
    }
    let code = match status {
        Ok(st) => exit_code(st),
        Err(e) => {
            tracing::warn!(error = %e, "waiting for a container process");
            255
        }
    };
    if let Some(reason) = setup_failure(&scratch) {
        let mut exit = super::process::Exit::code(128);
        exit.start_error = Some(format!(
            "failed to create containerd task: failed to create shim task: OCI runtime create failed: {reason}: unknown"
        ));
        return exit;
    }
    let message = termination_log.and_then(|p| std::fs::read(p).ok()).map(|mut b| {
        b.truncate(MAX_TERMINATION_MESSAGE);
        String::from_utf8_lossy(&b).into_owned()
    });
    // The kernel's OOM killer ended a process of its memory cgroup: containerd's OOMKilled, with the
    // task's own exit code. When that was PID 1 (SIGKILL: 137), `unshare --fork` cannot pass the signal
    // on and exits 1 ("sigprocmask unblock failed"): read as the 137 it stands for.
    let oom = cgroup.as_ref().is_some_and(super::cgroups::ContainerCgroup::oom_killed);
    drop(cgroup);
    super::process::Exit {
        code: if oom && code == 1 { 137 } else { code },
        oom,
        message,
        start_error: None,
    }
}

#[cfg(test)]
mod tests {
    use super::super::pod_view::ViewMount;
    use super::*;

    /// Tests that start real processes take this machine-wide lock (two cores, several test
    /// binaries).
    fn machine_lock() -> std::fs::File {
        let f = std::fs::File::create(std::env::temp_dir().join("kube-sim-process-pods.lock")).unwrap();
        f.lock().unwrap();
        f
    }

    fn view(hostname: &str, mounts: Vec<ViewMount>) -> View {
        View {
            mounts,
            hostname: hostname.into(),
            env: vec![("MARK".into(), "x".into())],
            working_dir: Some("/data".into()),
            run_as_user: None,
            run_as_group: None,
            termination_log: None,
            image_root: None,
        }
    }

    async fn run(view: &View, scratch: &Path, script: &str) -> (i32, String) {
        run_in(view, scratch, None, script).await
    }

    async fn run_in(view: &View, scratch: &Path, layer: Option<&Path>, script: &str) -> (i32, String) {
        let argv = vec!["/bin/sh".to_string(), "-c".to_string(), script.to_string()];
        let launched = launch(Launch {
            view,
            argv: &argv,
            entrypoint: None,
            layer,
            scratch,
            masks: &[],
            cgroup: None,
        })
        .unwrap();
        let out = launched.child.wait_with_output().await.unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
        (exit_code(out.status), text)
    }

    #[tokio::test]
    async fn a_directory_image_layer_lies_over_the_host_root() {
        if let Err(reason) = supported() {
            println!("skipped: {reason}");
            return;
        }
        let _lock = machine_lock();
        let dir = tempfile::tempdir().unwrap();
        let layer = dir.path().join("rootfs");
        std::fs::create_dir_all(layer.join("opt/img")).unwrap();
        std::fs::create_dir_all(layer.join("etc")).unwrap();
        std::fs::write(layer.join("opt/img/hello"), "from the image").unwrap();
        std::fs::write(layer.join("etc/kube-sim-layer-test"), "image etc").unwrap();
        let v = view("img", vec![]);
        let env = final_env(&v);
        // The command is found in the layer, not on the host.
        assert!(check_command(&v, &env, "/opt/img/hello", None, Some(&layer), &[]).is_ok());
        assert!(check_command(&v, &env, "/opt/img/hello", None, None, &[]).is_err());
        let script = "cat /opt/img/hello; echo; cat /etc/kube-sim-layer-test; echo; \
                      test -x /bin/sh && echo host-below; echo w > /opt/img/written && echo writable";
        let (code, out) = run_in(&v, &dir.path().join("s"), Some(&layer), script).await;
        assert_eq!(code, 0, "{out}");
        assert_eq!(
            out.lines().collect::<Vec<_>>(),
            ["from the image", "image etc", "host-below", "writable"],
            "{out}"
        );
        // Writes go to the container's upper layer, never into the image.
        assert!(!layer.join("opt/img/written").exists());
        // HOME comes from the image's /etc/passwd.
        std::fs::write(
            layer.join("etc/passwd"),
            "root:x:0:0::/root:/bin/sh\nspark:x:185:185::/home/spark:/bin/sh\n",
        )
        .unwrap();
        let spark = View {
            run_as_user: Some(185),
            image_root: Some(layer.clone()),
            ..v.clone()
        };
        let home = final_env(&spark).into_iter().find(|(k, _)| k == "HOME").map(|(_, v)| v);
        assert_eq!(home.as_deref(), Some("/home/spark"));
        // Without the layer the image's files are not there.
        let (_, out) = run(&v, &dir.path().join("s2"), "cat /opt/img/hello || echo absent").await;
        assert!(out.contains("absent"), "{out}");
    }

    #[tokio::test]
    async fn two_containers_see_their_own_directory_at_the_same_path() {
        if let Err(reason) = supported() {
            println!("skipped: {reason}");
            return;
        }
        let _lock = machine_lock();
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        std::fs::create_dir_all(&a).unwrap();
        std::fs::create_dir_all(&b).unwrap();
        std::fs::write(a.join("who"), "a").unwrap();
        std::fs::write(b.join("who"), "b").unwrap();
        let mount = |source: &Path, ro| ViewMount {
            source: source.to_path_buf(),
            target: "/data".into(),
            read_only: ro,
        };
        let shared = dir.path().join("shared");
        std::fs::create_dir_all(&shared).unwrap();
        let both = |source: &Path, ro| {
            vec![
                mount(source, ro),
                ViewMount {
                    source: shared.clone(),
                    target: "/shared".into(),
                    read_only: false,
                },
            ]
        };
        let (va, vb) = (view("pod-a", both(&a, false)), view("pod-b", both(&b, true)));
        // Both run at the same time: each reads /data only once the other has started.
        let script = "touch /shared/$(hostname); i=0; \
                      while [ $(ls /shared | wc -l) -lt 2 ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i+1)); done; \
                      cat /data/who; echo; hostname; echo pid=$$; echo env=$MARK; pwd; \
                      ls -A /root | wc -l; (echo w >> /data/wrote) 2>/dev/null || echo read-only; \
                      test -e /etc/kube-sim-host-only && echo host-file-visible; \
                      echo leak > /etc/kube-sim-written; ls /shared | wc -l";
        std::fs::write("/etc/kube-sim-host-only", "x").unwrap();
        let (sa, sb) = (dir.path().join("sa"), dir.path().join("sb"));
        let ((ca, oa), (cb, ob)) = tokio::join!(run(&va, &sa, script), run(&vb, &sb, script));
        let _ = std::fs::remove_file("/etc/kube-sim-host-only");
        assert_eq!((ca, cb), (0, 0), "{oa}\n{ob}");
        let la: Vec<&str> = oa.lines().collect();
        let lb: Vec<&str> = ob.lines().collect();
        assert_eq!(
            &la[..7],
            ["a", "pod-a", "pid=1", "env=x", "/data", "0", "host-file-visible"],
            "{oa}"
        );
        assert_eq!(
            &lb[..8],
            [
                "b",
                "pod-b",
                "pid=1",
                "env=x",
                "/data",
                "0",
                "read-only",
                "host-file-visible"
            ],
            "{ob}"
        );
        assert!(a.join("wrote").exists() && !b.join("wrote").exists());
        assert_eq!((la.last(), lb.last()), (Some(&"2"), Some(&"2")), "they ran together");
        // Writes outside the mounts stay in the container's overlay.
        assert!(!Path::new("/etc/kube-sim-written").exists());
    }

    #[tokio::test]
    async fn commands_are_checked_against_the_view() {
        let dir = tempfile::tempdir().unwrap();
        let v = view("p", vec![]);
        let env = final_env(&v);
        assert!(check_command(&v, &env, "sh", None, None, &[]).is_ok());
        let e = check_command(&v, &env, "no-such-command", None, None, &[])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains(r#"exec: "no-such-command": executable file not found in $PATH"#),
            "{e}"
        );
        let missing = dir.path().join("x");
        let e = check_command(
            &v,
            &env,
            &missing.display().to_string(),
            None,
            None,
            &[dir.path().to_path_buf()],
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("no such file or directory"), "{e}");
        assert_eq!(
            env.iter().find(|(k, _)| k == "HOME").map(|(_, v)| v.as_str()),
            Some("/root")
        );
        assert_eq!(
            env.iter().find(|(k, _)| k == "HOSTNAME").map(|(_, v)| v.as_str()),
            Some("p")
        );
    }
}
