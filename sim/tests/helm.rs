//! Helm v4 as a real client of the sim: the `helm-python-sdk` wheel (Helm's Go SDK in a shared library) driven
//! through `tests/helm/helm.py`, against the chart `tests/charts/hooks`: lint and template; install, upgrade and
//! uninstall with Helm's release storage (Secrets of type `helm.sh/release.v1`), server-side apply, hooks that are
//! plain objects and their delete policies; and hook Jobs that act with their ServiceAccount token.
//!
//! Needs `tests/helm/setup.sh` (`.ci/run` calls it) to have made the venv (`HELM_VENV`, default
//! `target/helm-venv`). Without it every test prints why it skips — except under `CI=true`, where a missing Helm
//! fails.
#![allow(clippy::expect_used, clippy::unwrap_used)]

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use kube_sim::Sim;
use kube_sim::audit::AuditEvent;
use kube_sim::node::{LocalImage, NodesConfig};
use kube_sim::registry::Gvr;
use kube_sim::store::{ListOptions, Store};
use serde_json::{Value, json};

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn chart() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/charts/hooks")
}

/// The venv's interpreter with `helm_python` importable, or why not (then the test skips, or fails under CI).
fn helm_python() -> Option<PathBuf> {
    let venv = std::env::var_os("HELM_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("target/helm-venv"));
    let python = venv.join("bin/python");
    let importable = std::process::Command::new(&python)
        .args(["-c", "import helm_python"])
        .output()
        .is_ok_and(|o| o.status.success());
    if importable {
        return Some(python);
    }
    let reason = format!(
        "no Helm SDK: {} cannot import helm_python (run tests/helm/setup.sh)",
        python.display()
    );
    assert!(std::env::var("CI").as_deref() != Ok("true"), "CI=true and {reason}");
    println!("SKIPPED: {reason}");
    None
}

/// One Helm driver.
struct Helm {
    python: PathBuf,
    /// Helm's cache, config and data directories: never the user's.
    home: tempfile::TempDir,
}

impl Helm {
    fn new() -> Option<Self> {
        Some(Self {
            python: helm_python()?,
            home: tempfile::tempdir().unwrap(),
        })
    }

    /// `helm.py <args>`: Ok(result) on exit 0, Err(Helm's error document) on exit 1.
    async fn run(&self, args: &[&str]) -> Result<Value, Value> {
        let out = tokio::process::Command::new(&self.python)
            .arg(repo_root().join("tests/helm/helm.py"))
            .args(args)
            .env("HELM_CACHE_HOME", self.home.path().join("cache"))
            .env("HELM_CONFIG_HOME", self.home.path().join("config"))
            .env("HELM_DATA_HOME", self.home.path().join("data"))
            .env_remove("KUBECONFIG")
            .kill_on_drop(true)
            .output()
            .await
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let doc: Value = serde_json::from_str(&stdout).unwrap_or_else(|e| {
            panic!(
                "helm.py {args:?}: not JSON ({e}), exit {:?}\nstdout: {stdout}\nstderr: {}",
                out.status.code(),
                String::from_utf8_lossy(&out.stderr)
            )
        });
        match out.status.code() {
            Some(0) => Ok(doc),
            Some(1) => Err(doc),
            code => panic!(
                "helm.py {args:?}: exit {code:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            ),
        }
    }

    /// A cluster action that must succeed.
    async fn ok(&self, sim: &Sim, action: &str, args: &[&str]) -> Value {
        let kubeconfig = sim.kubeconfig_path();
        let mut all = vec![action];
        all.extend_from_slice(args);
        all.extend(["--kubeconfig", kubeconfig.to_str().unwrap()]);
        self.run(&all)
            .await
            .unwrap_or_else(|e| panic!("helm {action} {args:?} failed: {e}"))
    }
}

fn gvr(group: &str, resource: &str) -> Gvr {
    match group {
        "" => Gvr::new("", "v1", resource),
        g => Gvr::new(g, "v1", resource),
    }
}

fn get(store: &Store, group: &str, resource: &str, name: &str) -> Option<Value> {
    store.get(&gvr(group, resource), "default", name).ok()
}

/// The release's storage Secrets, selected as Helm's storage driver selects them.
fn release_secrets(store: &Store, release: &str) -> Vec<Value> {
    let opts = ListOptions {
        label_selector: Some(format!("owner=helm,name={release}")),
        ..Default::default()
    };
    let list = store.list(&gvr("", "secrets"), Some("default"), &opts).unwrap();
    let mut items = list["items"].as_array().cloned().unwrap_or_default();
    items.sort_by_key(|s| s["metadata"]["name"].as_str().map(str::to_string));
    items
}

/// The audit log's answered writes of one object, as `verb code`.
fn writes(events: &[AuditEvent], resource: &str, name: &str) -> Vec<String> {
    events
        .iter()
        .filter(|e| e.resource == resource && e.name.as_deref() == Some(name) && e.verb != "get" && e.verb != "list")
        .map(|e| format!("{} {}", e.verb, e.code))
        .collect()
}

fn helm_owned(obj: &Value, release: &str) {
    let meta = &obj["metadata"];
    assert_eq!(meta["labels"]["app.kubernetes.io/managed-by"], "Helm", "{meta}");
    assert_eq!(meta["annotations"]["meta.helm.sh/release-name"], release, "{meta}");
    assert_eq!(
        meta["annotations"]["meta.helm.sh/release-namespace"], "default",
        "{meta}"
    );
}

#[tokio::test]
async fn lint_and_template_the_chart() {
    let Some(helm) = Helm::new() else { return };
    let chart = chart();
    let chart = chart.to_str().unwrap();

    for values in ["{}", r#"{"jobHooks": {"enabled": true}}"#] {
        let report = helm.run(&["lint", chart, "--set-json", values]).await.unwrap();
        assert_eq!(report["total_charts_linted"], 1, "{report}");
        assert_eq!(report["errors"], json!([]), "{report}");
        // Severity 2 is a warning, 3 an error; the chart has only the "icon is recommended" info.
        let serious: Vec<&Value> = report["messages"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m["severity"].as_i64().unwrap_or(3) >= 2)
            .collect();
        assert!(serious.is_empty(), "{report}");
    }
    // A broken chart is reported, so the lint above could have failed.
    let broken = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(broken.path().join("templates")).unwrap();
    std::fs::write(
        broken.path().join("Chart.yaml"),
        "apiVersion: v2\nname: broken\nversion: 0.1.0\n",
    )
    .unwrap();
    std::fs::write(
        broken.path().join("templates/cm.yaml"),
        "kind: ConfigMap\nmetadata: {{ .Values.nope.x }}\n",
    )
    .unwrap();
    let report = helm.run(&["lint", broken.path().to_str().unwrap()]).await.unwrap();
    assert_ne!(report["errors"], json!([]), "{report}");

    let rendered = helm
        .run(&[
            "template",
            chart,
            "r1",
            "--set-json",
            r#"{"replicas": 3, "message": "hi"}"#,
        ])
        .await
        .unwrap();
    let deployment = rendered["hooks/templates/deployment.yaml"].as_str().unwrap();
    assert!(deployment.contains("replicas: 3"), "{deployment}");
    assert!(deployment.contains("name: r1-web"), "{deployment}");
    assert!(
        rendered["hooks/templates/configmap.yaml"]
            .as_str()
            .unwrap()
            .contains(r#"message: "hi""#)
    );
    assert_eq!(rendered["hooks/templates/hook-jobs.yaml"].as_str().unwrap().trim(), "");
    let with_jobs = helm
        .run(&[
            "template",
            chart,
            "r1",
            "--set-json",
            r#"{"jobHooks": {"enabled": true}}"#,
        ])
        .await
        .unwrap();
    let jobs = with_jobs["hooks/templates/hook-jobs.yaml"].as_str().unwrap();
    for wanted in [
        "name: r1-pre-install",
        "name: r1-pre-delete",
        "helm.sh/hook: pre-delete",
        "kind: RoleBinding",
    ] {
        assert!(jobs.contains(wanted), "{wanted} in {jobs}");
    }
}

/// Everything here needs no controller: ConfigMaps, a Service, a Deployment nobody rolls out, ConfigMap hooks, the
/// release Secrets. `hookOnly` is the Helm CLI's default wait (hooks only); uninstall waits with kstatus (`watcher`)
/// for everything to be gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn install_upgrade_and_uninstall_a_release() {
    let Some(helm) = Helm::new() else { return };
    let (sim, _dir) = common::start_sim(|_| {}).await;
    sim.audit().enable();
    let store = sim.store();
    let chart = chart();
    let chart = chart.to_str().unwrap();

    // Install.
    let release = helm
        .ok(&sim, "install", &[chart, "r1", "--wait", "hookOnly", "--timeout", "60"])
        .await;
    assert_eq!(
        (release["status"].as_str(), release["revision"].as_i64()),
        (Some("deployed"), Some(1)),
        "{release}"
    );
    let config = get(store, "", "configmaps", "r1-config").expect("ConfigMap r1-config");
    assert_eq!(config["data"]["message"], "hello");
    helm_owned(&config, "r1");
    let service = get(store, "", "services", "r1-web").expect("Service r1-web");
    helm_owned(&service, "r1");
    assert_eq!(service["spec"]["ports"].as_array().map(Vec::len), Some(1), "{service}");
    let deployment = get(store, "apps", "deployments", "r1-web").expect("Deployment r1-web");
    helm_owned(&deployment, "r1");
    assert_eq!(deployment["spec"]["replicas"], 1);
    let secrets = release_secrets(store, "r1");
    assert_eq!(secrets.len(), 1, "{secrets:#?}");
    assert_eq!(secrets[0]["metadata"]["name"], "sh.helm.release.v1.r1.v1");
    assert_eq!(secrets[0]["type"], "helm.sh/release.v1");
    assert_eq!(secrets[0]["metadata"]["labels"]["status"], "deployed");
    assert_eq!(secrets[0]["metadata"]["labels"]["version"], "1");
    // The pre-install hook with hook-succeeded was created (Helm v4 creates with server-side apply: a patch that
    // answers 201), then deleted once the phase succeeded; the one with before-hook-creation stays.
    assert_eq!(get(store, "", "configmaps", "r1-pre-install-scratch"), None);
    let events = sim.audit().events();
    let scratch = writes(&events, "configmaps", "r1-pre-install-scratch");
    assert_eq!(scratch.first().map(String::as_str), Some("patch 201"), "{scratch:?}");
    assert_eq!(scratch.last().map(String::as_str), Some("delete 200"), "{scratch:?}");
    let first_deploy = get(store, "", "configmaps", "r1-last-deploy").expect("hook r1-last-deploy");
    assert_eq!(first_deploy["data"]["message"], "hello");
    let status = helm.ok(&sim, "status", &["r1"]).await;
    assert_eq!(status["status"], "deployed", "{status}");

    // Upgrade: the values change, the objects follow.
    let release = helm
        .ok(
            &sim,
            "upgrade",
            &[
                chart,
                "r1",
                "--set-json",
                r#"{"message": "bye", "replicas": 2}"#,
                "--wait",
                "hookOnly",
                "--timeout",
                "60",
            ],
        )
        .await;
    assert_eq!(
        (release["status"].as_str(), release["revision"].as_i64()),
        (Some("deployed"), Some(2)),
        "{release}"
    );
    assert_eq!(
        get(store, "", "configmaps", "r1-config").unwrap()["data"]["message"],
        "bye"
    );
    let upgraded = get(store, "apps", "deployments", "r1-web").unwrap();
    assert_eq!(upgraded["spec"]["replicas"], 2);
    let checksum = "/spec/template/metadata/annotations/checksum~1config";
    assert_ne!(
        upgraded.pointer(checksum),
        deployment.pointer(checksum),
        "the pod template follows the config"
    );
    // Applying the Service again (its port has no protocol) keeps one port.
    let service = get(store, "", "services", "r1-web").unwrap();
    assert_eq!(service["spec"]["ports"].as_array().map(Vec::len), Some(1), "{service}");
    let secrets = release_secrets(store, "r1");
    let states: Vec<(&str, &str)> = secrets
        .iter()
        .map(|s| {
            (
                s["metadata"]["name"].as_str().unwrap(),
                s["metadata"]["labels"]["status"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        states,
        [
            ("sh.helm.release.v1.r1.v1", "superseded"),
            ("sh.helm.release.v1.r1.v2", "deployed")
        ]
    );
    let second_deploy = get(store, "", "configmaps", "r1-last-deploy").unwrap();
    assert_eq!(second_deploy["data"]["message"], "bye");
    assert_ne!(
        second_deploy["metadata"]["uid"], first_deploy["metadata"]["uid"],
        "before-hook-creation deletes the old hook object and creates a new one"
    );

    // Uninstall: the release's objects and its storage go (deleting the Secrets is what failed before: client-go
    // sends their DeleteOptions as protobuf).
    let result = helm
        .ok(&sim, "uninstall", &["r1", "--wait", "watcher", "--timeout", "60"])
        .await;
    assert_eq!(result["release"]["status"], "uninstalled", "{result}");
    assert_eq!(get(store, "", "configmaps", "r1-config"), None);
    assert_eq!(get(store, "", "services", "r1-web"), None);
    assert_eq!(get(store, "apps", "deployments", "r1-web"), None);
    assert_eq!(release_secrets(store, "r1"), Vec::<Value>::new());
    let events = sim.audit().events();
    for secret in ["sh.helm.release.v1.r1.v1", "sh.helm.release.v1.r1.v2"] {
        assert!(
            writes(&events, "secrets", secret).contains(&"delete 200".to_string()),
            "{secret}"
        );
    }
    let scratch = writes(&events, "configmaps", "r1-pre-delete-scratch");
    assert_eq!(scratch, ["patch 201", "delete 200"], "pre-delete hook");
    // Hook objects are not part of the release's manifest: Helm leaves them, as on a real cluster.
    assert!(get(store, "", "configmaps", "r1-last-deploy").is_some());
    let gone = helm
        .run(&["status", "r1", "--kubeconfig", sim.kubeconfig_path().to_str().unwrap()])
        .await
        .unwrap_err();
    assert_eq!(gone["error"], "release: not found", "{gone}");
    sim.shutdown().await;
}

fn sandbox_python() -> Option<PathBuf> {
    // Outside /root and /home: a pod does not see those (a pyenv shim there would run, but not find what it runs).
    let path = std::env::var_os("PATH").unwrap_or_default();
    ["/usr/bin", "/usr/local/bin"]
        .into_iter()
        .map(PathBuf::from)
        .chain(std::env::split_paths(&path))
        .filter(|d| !d.starts_with("/root") && !d.starts_with("/home"))
        .map(|d| d.join("python3"))
        .find(|p| p.is_file())
}

/// Hook Jobs that act on the cluster: the pre-install Job creates a ConfigMap, the pre-delete Job deletes it, each a
/// python3 process pod using its ServiceAccount's token (from a Role and RoleBinding that are hooks themselves);
/// `--wait watcher` waits with kstatus for the Jobs to complete and the Deployment to be available.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hook_jobs_act_with_their_service_account() {
    let Some(helm) = Helm::new() else { return };
    if let Err(reason) = kube_sim::node::sandbox::supported() {
        println!("SKIPPED: {reason}");
        return;
    }
    let Some(python) = sandbox_python() else {
        println!("SKIPPED: no python3 outside /root and /home");
        return;
    };
    // Process pods take the machine-wide lock of tests/process_pods.rs (two cores).
    let lock = std::fs::File::create(std::env::temp_dir().join("kube-sim-process-pods.lock")).unwrap();
    lock.lock().unwrap();
    let (sim, _dir) = common::start_sim(|config| {
        config.root_ca_configmap = true;
        config.nodes = NodesConfig::with_nodes(1);
        config.nodes.kubelet.local_images = vec![LocalImage::new("kube-sim-test/hook-python", python)];
    })
    .await;
    let store = sim.store();
    let chart = chart();
    let chart = chart.to_str().unwrap();
    let values = r#"{"jobHooks": {"enabled": true}}"#;

    let release = helm
        .ok(
            &sim,
            "install",
            &[
                chart,
                "r1",
                "--set-json",
                values,
                "--wait",
                "watcher",
                "--timeout",
                "180",
            ],
        )
        .await;
    assert_eq!(release["status"], "deployed", "{release}");
    let made = get(store, "", "configmaps", "r1-made-by-pre-install").expect("the pre-install Job's ConfigMap");
    assert_eq!(made["data"]["made-by"], "pre-install hook");
    // hook-succeeded: the Jobs and their ServiceAccount, Role and RoleBinding are gone again.
    assert_eq!(get(store, "batch", "jobs", "r1-pre-install"), None);
    assert_eq!(get(store, "", "serviceaccounts", "r1-hook"), None);
    assert_eq!(get(store, "rbac.authorization.k8s.io", "roles", "r1-hook"), None);
    assert_eq!(get(store, "rbac.authorization.k8s.io", "rolebindings", "r1-hook"), None);
    let deployment = get(store, "apps", "deployments", "r1-web").unwrap();
    assert_eq!(deployment["status"]["availableReplicas"], 1, "{deployment}");

    helm.ok(&sim, "uninstall", &["r1", "--wait", "watcher", "--timeout", "180"])
        .await;
    assert_eq!(
        get(store, "", "configmaps", "r1-made-by-pre-install"),
        None,
        "the pre-delete Job deleted it"
    );
    assert_eq!(get(store, "batch", "jobs", "r1-pre-delete"), None);
    assert_eq!(get(store, "apps", "deployments", "r1-web"), None);
    assert_eq!(release_secrets(store, "r1"), Vec::<Value>::new());
    // The Deployment's and the Jobs' pods go with them (the garbage collector, background propagation).
    let mut pods = Value::Null;
    for _ in 0..600 {
        pods = store
            .list(&gvr("", "pods"), Some("default"), &ListOptions::default())
            .unwrap();
        if pods["items"].as_array().is_some_and(Vec::is_empty) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(pods["items"], json!([]), "pods left after uninstall");
    sim.shutdown().await;
}
