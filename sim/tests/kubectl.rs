//! kubectl against the in-process sim: the commands a platform team runs every day.
//! Skipped, with a printed reason, only when `kubectl` is not on PATH.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic in a test is a failed assertion

mod common;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use common::within;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

const WORKSPACE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
const EXAMPLES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/fixtures/kubeflow-examples");
/// The Kubeflow examples this test applies: the ten of the project's reference folder
/// (`../shared/fixtures/kubeflow-examples`, of which `tests/fixtures/kubeflow-examples` holds identical copies
/// beside Kubeflow's other examples).
const APPLIED_EXAMPLES: [&str; 10] = [
    "spark-pi-configmap.yaml",
    "spark-pi-custom-resource.yaml",
    "spark-pi-dynamic-allocation.yaml",
    "spark-pi-pod-template.yaml",
    "spark-pi-prometheus.yaml",
    "spark-pi-python.yaml",
    "spark-pi-scheduled.yaml",
    "spark-pi-ttl.yaml",
    "spark-pi-volcano.yaml",
    "spark-pi.yaml",
];

fn kubectl_on_path() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join("kubectl"))
        .find(|p| p.is_file())
}

struct Kubectl {
    bin: PathBuf,
    kubeconfig: PathBuf,
    home: PathBuf,
}

struct Out {
    ok: bool,
    stdout: String,
    stderr: String,
}

impl Kubectl {
    fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(&self.bin);
        cmd.arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .arg("--cache-dir")
            .arg(self.home.join("cache"))
            .args(args)
            .env("HOME", &self.home)
            .env_remove("KUBECONFIG")
            .stdin(Stdio::null());
        cmd
    }

    async fn run(&self, args: &[&str]) -> Out {
        let out = within(&format!("kubectl {}", args.join(" ")), self.command(args).output())
            .await
            .expect("kubectl runs");
        Out {
            ok: out.status.success(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    /// Runs and requires success.
    async fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args).await;
        assert!(
            out.ok,
            "kubectl {} failed:\n{}\n{}",
            args.join(" "),
            out.stdout,
            out.stderr
        );
        out.stdout
    }
}

/// The chart's CRDs.
fn crd_dir() -> PathBuf {
    Path::new(WORKSPACE).join("charts/spark-operator/crds")
}

/// The printer column names of the SparkApplication CRD, as kubectl prints them.
fn sparkapp_columns(dir: &Path) -> Vec<String> {
    for entry in std::fs::read_dir(dir).unwrap() {
        let text = std::fs::read_to_string(entry.unwrap().path()).unwrap();
        let crd: serde_json::Value = serde_yaml::from_str(&text).unwrap();
        if crd["spec"]["names"]["kind"] == "SparkApplication" {
            let cols = crd["spec"]["versions"][0]["additionalPrinterColumns"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            let mut names = vec!["NAME".to_string()];
            names.extend(
                cols.iter()
                    .filter(|c| c["priority"].as_i64().unwrap_or(0) == 0)
                    .map(|c| c["name"].as_str().unwrap().to_uppercase()),
            );
            return names;
        }
    }
    panic!("no SparkApplication CRD in {}", dir.display());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_works_against_the_sim() {
    let Some(bin) = kubectl_on_path() else {
        eprintln!("SKIPPED kubectl_works_against_the_sim: kubectl is not on PATH");
        return;
    };
    // The `kube-sim serve` binary, as a user runs it: its kubeconfig appears once it serves.
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    let mut served = Command::new(env!("CARGO_BIN_EXE_kube-sim"))
        .arg("serve")
        .arg("--data-dir")
        .arg(dir.path().join("data"))
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        // The API server alone: pods stay Pending, as the script expects.
        .args(["--nodes", "0"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("kube-sim serve starts");
    within("kube-sim serve to write its kubeconfig", async {
        while std::fs::metadata(&kubeconfig).map_or(true, |m| m.len() == 0) {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    })
    .await;
    let k = Kubectl {
        bin,
        kubeconfig: kubeconfig.clone(),
        home: dir.path().join("home"),
    };
    let manifests = dir.path().join("manifests");
    std::fs::create_dir_all(&manifests).unwrap();
    let write = |name: &str, text: &str| {
        let p = manifests.join(name);
        std::fs::write(&p, text).unwrap();
        p.display().to_string()
    };

    // Discovery and a namespace.
    let version = k.ok(&["version", "-o", "json"]).await;
    assert!(version.contains("\"gitVersion\": \"v1.33.1\""), "{version}");
    // Imperative creates send protobuf bodies.
    assert!(
        k.ok(&["create", "namespace", "spark-test"])
            .await
            .contains("namespace/spark-test created")
    );
    k.ok(&["create", "configmap", "conf", "-n", "spark-test", "--from-literal=k=v"])
        .await;
    k.ok(&[
        "create",
        "secret",
        "generic",
        "creds",
        "-n",
        "spark-test",
        "--from-literal=pw=s3cret",
    ])
    .await;
    k.ok(&[
        "create",
        "deployment",
        "web",
        "-n",
        "spark-test",
        "--image=nginx:1.27",
        "--replicas=0",
    ])
    .await;
    let got = k
        .ok(&[
            "get",
            "cm/conf",
            "secret/creds",
            "deploy/web",
            "-n",
            "spark-test",
            "-o",
            "jsonpath={.items[*].data} {.items[2].spec.replicas} {.items[2].spec.strategy.type}",
        ])
        .await;
    assert_eq!(got, r#"{"k":"v"} {"pw":"czNjcmV0"} 0 RollingUpdate"#);
    let nss = k.ok(&["get", "namespaces"]).await;
    assert!(
        nss.lines().any(|l| l.starts_with("spark-test") && l.contains("Active")),
        "{nss}"
    );

    // CRDs, then every Kubeflow example.
    let crds = crd_dir();
    k.ok(&["apply", "-f", &crds.display().to_string()]).await;
    k.ok(&[
        "wait",
        "--for",
        "condition=established",
        "crd/sparkapplications.sparkoperator.k8s.io",
        "--timeout=20s",
    ])
    .await;
    let mut applied = Vec::new();
    let mut examples: Vec<PathBuf> = APPLIED_EXAMPLES.iter().map(|f| Path::new(EXAMPLES).join(f)).collect();
    examples.sort();
    for example in examples {
        let text = std::fs::read_to_string(&example).unwrap();
        let out = k.run(&["apply", "-f", &example.display().to_string()]).await;
        if text.contains("{IMAGE_REGISTRY}") {
            // A template, not a manifest: kubectl itself cannot parse it, the server is never asked.
            assert!(
                !out.ok && out.stderr.contains("error parsing"),
                "{}: {}",
                example.display(),
                out.stderr
            );
            eprintln!(
                "note: {} is a template with placeholders; kubectl rejects it before sending",
                example.display()
            );
            continue;
        }
        assert!(out.ok, "applying {}: {}", example.display(), out.stderr);
        applied.push(example);
    }
    assert!(applied.len() >= 8, "most examples apply: {applied:?}");

    // get with the CRD's printer columns, -o yaml, describe.
    let table = k.ok(&["get", "sparkapp", "-n", "default"]).await;
    let header: Vec<&str> = table.lines().next().unwrap().split_whitespace().collect();
    let expected = sparkapp_columns(&crds);
    assert_eq!(header.join(" "), expected.join(" "), "{table}");
    assert!(table.lines().any(|l| l.starts_with("spark-pi ")), "{table}");
    let yaml = k.ok(&["get", "sparkapplication", "spark-pi", "-o", "yaml"]).await;
    assert!(
        yaml.contains("kind: SparkApplication") && yaml.contains("mainClass: org.apache.spark.examples.SparkPi"),
        "{yaml}"
    );
    let described = k.ok(&["describe", "sparkapp", "spark-pi"]).await;
    assert!(
        described.lines().next().unwrap().starts_with("Name:") && described.contains("spark-pi"),
        "{described}"
    );

    // kubectl asks for strict field validation: a typo is a 400, worded as the apiserver words it.
    let typo = write(
        "typo.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: typo\n  namespace: spark-test\ndata:\n  k: v\nbogus: 1\n",
    );
    let out = k.run(&["apply", "-f", &typo]).await;
    assert!(
        !out.ok
            && out.stderr.contains(
                r#"ConfigMap in version "v1" cannot be handled as a ConfigMap: strict decoding error: unknown field "bogus""#
            ),
        "{}",
        out.stderr
    );

    // explain reads /openapi/v3, for built-in kinds and CRDs alike.
    let explained = k.ok(&["explain", "pods.spec.containers.env"]).await;
    assert!(
        explained.contains("FIELD: env <[]EnvVar>") && explained.contains("name\t<string> -required-"),
        "{explained}"
    );
    let explained = k.ok(&["explain", "sparkapplications.spec.driver.cores"]).await;
    assert!(
        explained.contains("KIND:       SparkApplication") && explained.contains("FIELD: cores <integer>"),
        "{explained}"
    );

    // patch --type merge bumps the generation.
    k.ok(&[
        "patch",
        "sparkapp",
        "spark-pi",
        "--type",
        "merge",
        "-p",
        r#"{"spec":{"arguments":["10"]}}"#,
    ])
    .await;
    let got = k
        .ok(&[
            "get",
            "sparkapp",
            "spark-pi",
            "-o",
            "jsonpath={.metadata.generation} {.spec.arguments[0]}",
        ])
        .await;
    assert_eq!(got, "2 10");

    // Strategic merge patch of a pod: the container is merged by name, its env kept.
    let pod = write(
        "pod.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\n  namespace: spark-test\nspec:\n  containers:\n  - name: main\n    image: busybox:1.36\n    env:\n    - name: A\n      value: \"1\"\n",
    );
    k.ok(&["apply", "-f", &pod]).await;
    let pods = k.ok(&["get", "pods", "-n", "spark-test"]).await;
    let header: Vec<&str> = pods.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(header, ["NAME", "READY", "STATUS", "RESTARTS", "AGE"]);
    assert!(
        pods.lines().nth(1).unwrap().starts_with("p ") && pods.contains("Pending"),
        "{pods}"
    );
    k.ok(&[
        "patch",
        "pod",
        "p",
        "-n",
        "spark-test",
        "-p",
        r#"{"spec":{"containers":[{"name":"main","image":"busybox:1.37"}]}}"#,
    ])
    .await;
    let got = k
        .ok(&[
            "get",
            "pod",
            "p",
            "-n",
            "spark-test",
            "-o",
            "jsonpath={.spec.containers[0].image} {.spec.containers[0].env[0].name}",
        ])
        .await;
    assert_eq!(got, "busybox:1.37 A");

    // Server-side apply: ownership, conflicts, --force-conflicts.
    let cm = write(
        "cm.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ssa\n  namespace: spark-test\ndata:\n  k: one\n",
    );
    assert!(
        k.ok(&["apply", "--server-side", "-f", &cm])
            .await
            .contains("serverside-applied")
    );
    let cm2 = write(
        "cm2.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ssa\n  namespace: spark-test\ndata:\n  k: two\n",
    );
    let conflict = k
        .run(&["apply", "--server-side", "--field-manager", "other", "-f", &cm2])
        .await;
    assert!(
        !conflict.ok && conflict.stderr.contains("conflict"),
        "{}",
        conflict.stderr
    );
    k.ok(&[
        "apply",
        "--server-side",
        "--field-manager",
        "other",
        "--force-conflicts",
        "-f",
        &cm2,
    ])
    .await;
    let owners = k
        .ok(&[
            "get",
            "cm",
            "ssa",
            "-n",
            "spark-test",
            "-o",
            "jsonpath={.data.k} {.metadata.managedFields[*].manager}",
        ])
        .await;
    assert!(owners.starts_with("two ") && owners.contains("other"), "{owners}");

    // get -w sees a change.
    let watched = write(
        "w.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: watched\n  namespace: spark-test\ndata:\n  a: \"1\"\n",
    );
    k.ok(&["apply", "-f", &watched]).await;
    let mut watch = k
        .command(&[
            "get",
            "configmap",
            "watched",
            "-n",
            "spark-test",
            "-w",
            "--output-watch-events",
        ])
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(watch.stdout.take().unwrap()).lines();
    let first = within("the first watch line", lines.next_line())
        .await
        .unwrap()
        .unwrap();
    assert!(first.starts_with("EVENT"), "{first}");
    let added = within("the ADDED line", lines.next_line()).await.unwrap().unwrap();
    assert!(added.starts_with("ADDED") && added.contains("watched"), "{added}");
    k.ok(&[
        "patch",
        "configmap",
        "watched",
        "-n",
        "spark-test",
        "--type",
        "merge",
        "-p",
        r#"{"data":{"b":"2"}}"#,
    ])
    .await;
    let modified = within("the MODIFIED line", lines.next_line()).await.unwrap().unwrap();
    let cells: Vec<&str> = modified.split_whitespace().collect();
    assert_eq!(&cells[..3], ["MODIFIED", "watched", "2"], "{modified}");
    let _ = watch.kill().await;

    // A finalizer holds a delete; `wait --for=delete` returns once it is removed.
    k.ok(&[
        "patch",
        "sparkapp",
        "spark-pi-ttl",
        "--type",
        "merge",
        "-p",
        r#"{"metadata":{"finalizers":["test.example.com/hold"]}}"#,
    ])
    .await;
    k.ok(&["delete", "sparkapp", "spark-pi-ttl", "--wait=false"]).await;
    let ts = k
        .ok(&[
            "get",
            "sparkapp",
            "spark-pi-ttl",
            "-o",
            "jsonpath={.metadata.deletionTimestamp}",
        ])
        .await;
    assert!(!ts.is_empty(), "deletionTimestamp is set while the finalizer holds it");
    let waiter = k
        .command(&["wait", "--for=delete", "sparkapp/spark-pi-ttl", "--timeout=20s"])
        .output();
    let waiter = tokio::spawn(waiter);
    tokio::time::sleep(Duration::from_millis(300)).await;
    k.ok(&[
        "patch",
        "sparkapp",
        "spark-pi-ttl",
        "--type",
        "json",
        "-p",
        r#"[{"op":"remove","path":"/metadata/finalizers"}]"#,
    ])
    .await;
    let waited = within("kubectl wait --for=delete", waiter).await.unwrap().unwrap();
    assert!(waited.status.success(), "{}", String::from_utf8_lossy(&waited.stderr));
    let gone = k.run(&["get", "sparkapp", "spark-pi-ttl"]).await;
    assert!(!gone.ok && gone.stderr.contains("NotFound"), "{}", gone.stderr);

    // Errors come back as kubectl prints a real server's.
    let missing = k.run(&["get", "configmap", "nope", "-n", "spark-test"]).await;
    assert_eq!(
        missing.stderr.trim(),
        "Error from server (NotFound): configmaps \"nope\" not found"
    );
    let smp = k.run(&["patch", "sparkapp", "spark-pi", "-p", r#"{"spec":{}}"#]).await;
    assert!(
        !smp.ok
            && smp
                .stderr
                .contains("application/strategic-merge-patch+json is not supported"),
        "{}",
        smp.stderr
    );

    k.ok(&["delete", "-f", &crds.display().to_string()]).await;
    let crd_gone = k.run(&["get", "sparkapp", "-A"]).await;
    assert!(!crd_gone.ok, "the resource is no longer served once its CRD is deleted");

    // SIGTERM stops it cleanly.
    let pid = served.id().expect("a running server").to_string();
    let term = Command::new("kill").args(["-TERM", &pid]).status().await.unwrap();
    assert!(term.success());
    let exit = within("kube-sim serve to stop on SIGTERM", served.wait())
        .await
        .unwrap();
    assert!(exit.success(), "kube-sim serve exited with {exit}");
}
