//! `tests/real-k8s/check-up.sh` under `cargo test`: `build.sh` prints its directory; `up.sh` starts a control
//! plane whose `kubectl version` says v1.37, whose `/readyz` is ok and where a client-side `kubectl apply`
//! works; SIGTERM and SIGKILL of `up.sh` each leave no process and no open port; a restart keeps the PKI and
//! the objects; missing binaries give an error naming `build.sh`. (Its own control planes, apart from the
//! tier's.)

use spark_operator_e2e::helm::repo_root;

use crate::support::Tier;

pub async fn signals_leave_nothing(_tier: &'static Tier) {
    let script = repo_root().join("tests/real-k8s/check-up.sh");
    let out = tokio::process::Command::new("bash")
        .arg(&script)
        .output()
        .await
        .expect("check-up.sh runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let failures: Vec<&str> = stdout.lines().filter(|l| l.starts_with("FAIL")).collect();
    let summary = stdout.lines().last().unwrap_or_default();
    assert!(
        out.status.success() && failures.is_empty() && summary.ends_with(" passed, 0 failed"),
        "{}: {summary}\n{}\nstderr: {}",
        script.display(),
        failures.join("\n"),
        String::from_utf8_lossy(&out.stderr)
    );
    println!("  check-up.sh: {summary}");
}
