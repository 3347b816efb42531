//! The real control plane of `tests/real-k8s/` (etcd, kube-apiserver, kube-controller-manager and
//! kube-scheduler built from Kubernetes' own Go modules by `build.sh`), started once per test binary by
//! `up.sh` and shared by its tests, which keep apart by namespace.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use crate::helm::repo_root;

/// The binaries `build.sh` makes.
const BINARIES: [&str; 5] = [
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kubectl",
];

/// A control plane started by `up.sh`; it runs until the test binary exits (it dies with the thread that
/// started it, which lives as long as the process).
#[derive(Debug)]
pub struct ControlPlane {
    data: PathBuf,
    bin: PathBuf,
}

static SHARED: OnceLock<Option<ControlPlane>> = OnceLock::new();

/// Why the real backend cannot run here, or None when it can.
fn missing() -> Option<String> {
    let bin = bin_dir();
    let absent: Vec<&str> = BINARIES.iter().copied().filter(|b| !bin.join(b).is_file()).collect();
    if !absent.is_empty() {
        return Some(format!(
            "the real control plane is not built ({} missing in {}): run tests/real-k8s/build.sh",
            absent.join(", "),
            bin.display()
        ));
    }
    // up.sh puts the components in their own PID namespace, which needs root.
    let uid = std::fs::read_to_string("/proc/self/status").ok().and_then(|s| {
        s.lines().find_map(|l| {
            l.strip_prefix("Uid:")
                .map(|u| u.split_whitespace().next().unwrap_or("").to_owned())
        })
    });
    if uid.as_deref() != Some("0") {
        return Some("tests/real-k8s/up.sh needs root (its components run in their own PID namespace)".into());
    }
    None
}

/// Where `build.sh` put the binaries (`REAL_K8S_BIN_DIR` overrides, as for `up.sh`).
pub fn bin_dir() -> PathBuf {
    std::env::var_os("REAL_K8S_BIN_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("target/real-k8s/bin"))
}

/// Whether this run must not skip: under `CI=true` a missing backend fails the test.
pub fn required() -> bool {
    std::env::var("CI").as_deref() == Ok("true")
}

/// Says in one line why a test skips, or panics under `CI=true`.
pub fn skip(reason: &str) {
    assert!(!required(), "CI=true and {reason}");
    println!("SKIPPED: {reason}");
}

impl ControlPlane {
    /// The control plane of this test binary, started at the first call; None (after one line saying why)
    /// when it cannot run here outside CI.
    pub fn shared() -> Option<&'static ControlPlane> {
        SHARED
            .get_or_init(|| match missing() {
                Some(reason) => {
                    skip(&reason);
                    None
                }
                None => Some(ControlPlane::start()),
            })
            .as_ref()
    }

    fn start() -> ControlPlane {
        let runs = repo_root().join("target/real-k8s/runs");
        std::fs::create_dir_all(&runs).expect("target/real-k8s/runs");
        remove_dead_runs(&runs);
        let data = runs.join(format!("{}-{}", std::process::id(), unique()));
        let (ready_tx, ready_rx) = std::sync::mpsc::channel::<Result<(), String>>();
        let up = repo_root().join("tests/real-k8s/up.sh");
        let dir = data.clone();
        // The thread that starts up.sh lives as long as it runs: `--pdeathsig` kills up.sh (and so the whole
        // control plane) when that thread ends, which is when this process ends, however it ends.
        std::thread::Builder::new()
            .name("real-k8s-up".into())
            .spawn(move || {
                let child = Command::new("setpriv")
                    .args(["--pdeathsig", "KILL", "--"])
                    .arg("bash")
                    .arg(&up)
                    .arg(&dir)
                    .stdin(Stdio::null())
                    .stdout(Stdio::piped())
                    .stderr(
                        std::fs::File::create(dir_log(&dir))
                            .map(Stdio::from)
                            .unwrap_or(Stdio::inherit()),
                    )
                    .spawn();
                let mut child = match child {
                    Ok(child) => child,
                    Err(error) => {
                        let _ = ready_tx.send(Err(format!("starting {}: {error}", up.display())));
                        return;
                    }
                };
                let mut lines = BufReader::new(child.stdout.take().expect("piped stdout")).lines();
                let first = lines.next();
                let _ = ready_tx.send(match first {
                    Some(Ok(line)) if line == "ready" => Ok(()),
                    other => Err(format!("up.sh printed {other:?} instead of `ready`")),
                });
                let status = child.wait();
                eprintln!("tests/real-k8s/up.sh {} ended: {status:?}", dir.display());
                // Keep the thread (and so the parent of up.sh) alive only while up.sh runs.
            })
            .expect("a thread for up.sh");
        std::fs::create_dir_all(&data).expect("the control plane's data directory");
        match ready_rx.recv() {
            Ok(Ok(())) => {}
            Ok(Err(why)) => panic!(
                "the real control plane did not start: {why}; up.sh's log: {}\n{}",
                dir_log(&data).display(),
                std::fs::read_to_string(dir_log(&data)).unwrap_or_default()
            ),
            Err(_) => panic!("the thread that runs up.sh ended before `ready`"),
        }
        unroute_test_ranges();
        ControlPlane { data, bin: bin_dir() }
    }

    /// The admin kubeconfig (system:masters).
    pub fn kubeconfig(&self) -> PathBuf {
        self.data.join("kubeconfig")
    }

    /// The cluster's PKI (`ca.crt`, `ca.key`, ...).
    pub fn pki(&self) -> PathBuf {
        self.data.join("pki")
    }

    /// kube-apiserver's Metadata-level audit log (one JSON event per line).
    pub fn audit_log(&self) -> PathBuf {
        self.data.join("audit.log")
    }

    pub fn data_dir(&self) -> &Path {
        &self.data
    }

    /// The built kubectl (1.37), as `kubectl --kubeconfig=<admin>` unless the caller sets another.
    pub fn kubectl(&self) -> Command {
        let mut command = Command::new(self.bin.join("kubectl"));
        command
            .env("KUBECONFIG", self.kubeconfig())
            .env_remove("http_proxy")
            .env_remove("https_proxy");
        command
    }

    /// The API server's URL, from the admin kubeconfig.
    pub fn server(&self) -> String {
        let text = std::fs::read_to_string(self.kubeconfig()).expect("the admin kubeconfig");
        text.lines()
            .find_map(|l| l.trim().strip_prefix("server: ").map(str::to_owned))
            .expect("a server in the admin kubeconfig")
    }

    /// A client as the admin.
    pub async fn admin(&self) -> kube::Client {
        client_from(&self.kubeconfig()).await
    }
}

/// A client from a kubeconfig file.
pub async fn client_from(kubeconfig: &Path) -> kube::Client {
    let kubeconfig = kube::config::Kubeconfig::read_from(kubeconfig).expect("a kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &kube::config::KubeConfigOptions::default())
        .await
        .expect("a client configuration");
    kube::Client::try_from(config).expect("a client")
}

fn dir_log(dir: &Path) -> PathBuf {
    dir.with_extension("up.log")
}

fn unique() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default()
}

/// Data directories of earlier runs whose test process is gone (their audit logs stay for the newest
/// run of each binary only while it runs; a finished run's directory goes at the next start).
fn remove_dead_runs(runs: &Path) {
    let Ok(entries) = std::fs::read_dir(runs) else { return };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(pid) = name.split('-').next().and_then(|p| p.parse::<u32>().ok()) else {
            continue;
        };
        if !Path::new(&format!("/proc/{pid}")).exists() {
            let path = entry.path();
            let _ = if path.is_dir() {
                std::fs::remove_dir_all(&path)
            } else {
                std::fs::remove_file(&path)
            };
        }
    }
}

/// The service and pod ranges (198.18.0.0/15, RFC 2544 benchmarking space) get an `unreachable` route on the
/// host: pods of the kubelet stand-in have addresses there, and nothing that tries to reach one may leave the
/// machine through its default route. Idempotent (`ip route replace`); a more specific route a test adds into
/// a network namespace it created still wins.
fn unroute_test_ranges() {
    let out = Command::new("ip")
        .args(["route", "replace", "unreachable", "198.18.0.0/15"])
        .output();
    match out {
        Ok(out) if out.status.success() => {}
        other => panic!("cannot add `ip route replace unreachable 198.18.0.0/15` (iproute2, root): {other:?}"),
    }
}
