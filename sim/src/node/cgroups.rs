//! A process container's resource limits, as the runtime gives a container its cgroup: the
//! container's `resources.limits.memory` as `memory.limit_in_bytes` (the kernel's OOM killer ends it
//! past that: exit 137, reason `OOMKilled`) and `limits.cpu` as a CFS quota (`cpu.cfs_quota_us` per
//! 100 ms `cpu.cfs_period_us`), so a JVM in it sizes its heap and threads from them as it does in a
//! cluster. Requests set nothing here (a real kubelet turns them into `cpu.shares` only).
//!
//! cgroup v1 hierarchies only (`/sys/fs/cgroup/memory`, `/sys/fs/cgroup/cpu`): each container's
//! group is made under the sim's own (`<own path>/kube-sim/<sim pid>/<container id>`), so its use still
//! counts against whatever limits the sim itself runs under. A sim process that ended before its groups
//! were removed (killed, or a test that did not wait) leaves them empty; the next sim removes the groups
//! of sim processes that are gone. Where the hierarchy is missing or cannot be
//! written (cgroup v2 only, no root) the container runs without limits, said once in the log.

use std::path::{Path, PathBuf};
use std::sync::Once;

use serde_json::Value;

use super::quantity::{parse_milli, parse_units};

const ROOT: &str = "/sys/fs/cgroup";
/// The CFS period, as runc sets it.
const CFS_PERIOD_US: i128 = 100_000;
/// The smallest quota the kernel accepts.
const MIN_QUOTA_US: i128 = 1_000;

/// A container's limits.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Limits {
    pub memory_bytes: Option<i128>,
    pub cpu_millis: Option<i128>,
}

impl Limits {
    /// `resources.limits` of a container spec; unparseable quantities are left out (the API server
    /// refuses them before any kubelet sees them).
    pub fn of(container: &Value) -> Limits {
        let limit = |name: &str| {
            container.pointer(&format!("/resources/limits/{name}")).and_then(|v| {
                v.as_str()
                    .map(str::to_owned)
                    .or_else(|| v.as_i64().map(|n| n.to_string()))
            })
        };
        Limits {
            memory_bytes: limit("memory").and_then(|q| parse_units(&q)).filter(|b| *b > 0),
            cpu_millis: limit("cpu").and_then(|q| parse_milli(&q)).filter(|m| *m > 0),
        }
    }

    fn is_empty(&self) -> bool {
        self.memory_bytes.is_none() && self.cpu_millis.is_none()
    }
}

/// The groups made for one container.
#[derive(Debug)]
pub(crate) struct ContainerCgroup {
    memory: Option<PathBuf>,
    cpu: Option<PathBuf>,
}

impl ContainerCgroup {
    /// The `cgroup.procs` files the container's first process joins (writing `0`: itself).
    pub fn procs_files(&self) -> Vec<PathBuf> {
        [&self.memory, &self.cpu]
            .into_iter()
            .flatten()
            .map(|d| d.join("cgroup.procs"))
            .collect()
    }

    /// Whether the kernel's OOM killer ended a process of it (`oom_kill` in `memory.oom_control`).
    pub fn oom_killed(&self) -> bool {
        let Some(dir) = &self.memory else { return false };
        std::fs::read_to_string(dir.join("memory.oom_control"))
            .ok()
            .and_then(|text| {
                text.lines()
                    .find_map(|l| l.strip_prefix("oom_kill "))
                    .and_then(|n| n.trim().parse::<u64>().ok())
            })
            .is_some_and(|n| n > 0)
    }
}

impl Drop for ContainerCgroup {
    /// Removes the groups once the container's processes are gone. A container stopped by dropping its
    /// supervisor (SIGKILL) may still have processes dying: a thread kills what is left and retries for
    /// a few seconds, so no group is left behind.
    fn drop(&mut self) {
        let dirs: Vec<PathBuf> = [self.memory.take(), self.cpu.take()].into_iter().flatten().collect();
        let remove = move || {
            for _ in 0..100 {
                let mut left = false;
                for dir in &dirs {
                    if !dir.exists() || std::fs::remove_dir(dir).is_ok() {
                        continue;
                    }
                    left = true;
                    let procs = std::fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default();
                    let pids: Vec<&str> = procs.split_whitespace().collect();
                    if !pids.is_empty() {
                        let _ = std::process::Command::new("kill")
                            .args(["-s", "KILL"])
                            .args(&pids)
                            .output();
                    }
                }
                if !left {
                    return;
                }
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
            tracing::warn!(dirs = ?dirs, "a container's cgroups could not be removed");
        };
        // At once when nothing runs in them (the usual case: the process was waited for).
        if std::thread::Builder::new()
            .name("cgroup-cleanup".into())
            .spawn(remove)
            .is_err()
        {
            tracing::warn!("no thread to remove a container's cgroups");
        }
    }
}

/// The group of the calling process in a v1 hierarchy that has `controller` (from `/proc/self/cgroup`).
fn own_path(controller: &str) -> Option<String> {
    let text = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    text.lines().find_map(|line| {
        let mut parts = line.splitn(3, ':');
        let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        controllers.split(',').any(|c| c == controller).then(|| path.to_owned())
    })
}

/// `<hierarchy>/<own path>/kube-sim`: the groups of every sim process under this one's parent group.
fn sims_dir(controller: &str) -> std::io::Result<PathBuf> {
    let own = own_path(controller).ok_or_else(|| std::io::Error::other(format!("no v1 {controller} cgroup")))?;
    Ok(Path::new(ROOT)
        .join(controller)
        .join(own.trim_start_matches('/'))
        .join("kube-sim"))
}

/// Removes the (empty) groups of sim processes that no longer run.
fn sweep(sims: &Path) {
    for entry in std::fs::read_dir(sims).into_iter().flatten().flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        if pid == std::process::id() || Path::new("/proc").join(pid.to_string()).exists() {
            continue;
        }
        for group in std::fs::read_dir(entry.path()).into_iter().flatten().flatten() {
            if group.file_type().is_ok_and(|t| t.is_dir()) {
                let _ = std::fs::remove_dir(group.path());
            }
        }
        let _ = std::fs::remove_dir(entry.path());
    }
}

/// Makes `<hierarchy>/<own path>/kube-sim/<sim pid>/<id>` and writes `files` into it.
fn make(controller: &str, id: &str, files: &[(&str, String)]) -> std::io::Result<PathBuf> {
    let sims = sims_dir(controller)?;
    static SWEPT: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
    {
        let mut swept = SWEPT.lock().unwrap_or_else(|e| e.into_inner());
        if !swept.iter().any(|c| c == controller) {
            sweep(&sims);
            swept.push(controller.to_owned());
        }
    }
    let dir = sims.join(std::process::id().to_string()).join(id);
    std::fs::create_dir_all(&dir)?;
    for (file, value) in files {
        if let Err(error) = std::fs::write(dir.join(file), value) {
            let _ = std::fs::remove_dir(&dir);
            return Err(error);
        }
    }
    Ok(dir)
}

/// Whether containers get their limits here: a group made and removed in both hierarchies, or why not.
pub fn supported() -> Result<(), String> {
    for controller in ["memory", "cpu"] {
        let probe = sims_dir(controller)
            .and_then(|sims| {
                let dir = sims.join(format!("probe-{}", std::process::id()));
                std::fs::create_dir_all(&dir)?;
                std::fs::remove_dir(&dir)
            })
            .map_err(|e| format!("the cgroup v1 {controller} hierarchy cannot be written here: {e}"));
        probe?;
    }
    Ok(())
}

/// The cgroup of container `id` with `limits`; None when it has no limits or they cannot be set here.
pub(crate) fn create(id: &str, limits: Limits) -> Option<ContainerCgroup> {
    if limits.is_empty() {
        return None;
    }
    // Each limit on its own: one the kernel refuses leaves the other in place.
    let memory = limits.memory_bytes.and_then(|bytes| {
        // No swap for the container, as runc sets memsw to the limit where swap is accounted.
        let mut files = vec![("memory.limit_in_bytes", bytes.to_string())];
        let accounted = sims_dir("memory")
            .ok()
            .and_then(|sims| Some(sims.parent()?.join("memory.memsw.limit_in_bytes").exists()));
        if accounted == Some(true) {
            files.push(("memory.memsw.limit_in_bytes", bytes.to_string()));
        }
        made("memory", make("memory", id, &files))
    });
    let cpu = limits.cpu_millis.and_then(|millis| {
        // Saturating: an absurd limit is refused by the kernel (logged), not an overflow here.
        let quota = (millis.saturating_mul(CFS_PERIOD_US) / 1000).max(MIN_QUOTA_US);
        let files = [
            ("cpu.cfs_period_us", CFS_PERIOD_US.to_string()),
            ("cpu.cfs_quota_us", quota.to_string()),
        ];
        made("cpu", make("cpu", id, &files))
    });
    (memory.is_some() || cpu.is_some()).then_some(ContainerCgroup { memory, cpu })
}

/// The group, or None with the reason logged (once per process: every container would say the same).
fn made(controller: &str, result: std::io::Result<PathBuf>) -> Option<PathBuf> {
    static SAID: Once = Once::new();
    result
        .map_err(|error| {
            SAID.call_once(|| {
                tracing::warn!(controller, %error, "process containers run without this resource limit: its cgroup v1 group cannot be made here");
            });
        })
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn limits_are_read_from_the_container_spec() {
        let c = json!({"resources": {"limits": {"memory": "896Mi", "cpu": "1500m"}, "requests": {"cpu": "1"}}});
        assert_eq!(
            Limits::of(&c),
            Limits {
                memory_bytes: Some(896 * 1024 * 1024),
                cpu_millis: Some(1500)
            }
        );
        assert_eq!(
            Limits::of(&json!({"resources": {"limits": {"cpu": 2}}})).cpu_millis,
            Some(2000)
        );
        assert!(Limits::of(&json!({"resources": {"requests": {"memory": "1Gi"}}})).is_empty());
        assert!(create("none", Limits::default()).is_none());
    }
}
