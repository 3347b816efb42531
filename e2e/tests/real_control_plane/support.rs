//! What the scenarios share: the tier (control plane and the installed chart), kubectl with its warnings, and
//! applications for a namespace.

use std::io::Write;
use std::process::Stdio;

use spark_operator_e2e::real::ControlPlane;
use spark_operator_e2e::real::kubelet::{Kubelet, KubeletOptions};
use spark_operator_e2e::real::operator::Install;

/// The control plane and the chart installed on it (once, for every scenario).
pub struct Tier {
    pub control_plane: &'static ControlPlane,
    pub install: Install,
}

/// What one kubectl run gave.
#[derive(Debug)]
pub struct Kubectl {
    pub success: bool,
    pub stdout: String,
    pub stderr: String,
}

impl Kubectl {
    /// The `Warning: ...` lines kubectl printed (what the API server's `Warning` headers said).
    pub fn warnings(&self) -> Vec<&str> {
        self.stderr.lines().filter(|l| l.starts_with("Warning:")).collect()
    }
}

/// kubectl (the built 1.37) as the admin, `input` on its stdin.
pub fn kubectl(control_plane: &ControlPlane, args: &[&str], input: &str) -> Kubectl {
    let mut child = control_plane
        .kubectl()
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kubectl runs");
    child
        .stdin
        .take()
        .expect("kubectl's stdin")
        .write_all(input.as_bytes())
        .expect("kubectl reads its input");
    let out = child.wait_with_output().expect("kubectl ends");
    Kubectl {
        success: out.status.success(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// [`spark_operator_e2e::app_yaml`] in `namespace`.
pub fn app_in(namespace: &str, name: &str, run_time: &str, exit_code: i32, executors: u32, extra_spec: &str) -> String {
    spark_operator_e2e::app_yaml(name, run_time, exit_code, executors, extra_spec)
        .replace("namespace: default", &format!("namespace: {namespace}"))
}

/// Kubelet stand-ins with the default capacity, one per name, each Ready when this returns; dropped, they stop
/// and delete their Nodes.
pub async fn nodes(control_plane: &ControlPlane, names: &[&str]) -> Vec<Kubelet> {
    let mut nodes = Vec::with_capacity(names.len());
    for name in names {
        let options = KubeletOptions {
            name: (*name).to_owned(),
            ..KubeletOptions::default()
        };
        nodes.push(Kubelet::start(control_plane, options).await);
    }
    nodes
}
