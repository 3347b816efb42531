//! Helm v4 for the chart's rendering test (`e2e/tests/helm_chart.rs`): the `helm-python-sdk` wheel (Helm's Go SDK)
//! driven through `tests/helm/helm.py`, which prints one JSON document per call. Needs `tests/helm/setup.sh` to
//! have made the venv (`HELM_VENV`, default `target/helm-venv`); without it [`Helm::new`] says why and gives None
//! (the test skips), except under `CI=true`, where a missing Helm fails.

use std::path::{Path, PathBuf};

use serde_json::Value;

/// The repository's root: this crate's parent directory.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The repository's chart.
pub fn chart() -> PathBuf {
    repo_root().join("charts/spark-operator")
}

pub struct Helm {
    python: PathBuf,
    /// Helm's cache, config and data directories: never the user's.
    home: tempfile::TempDir,
}

impl Helm {
    pub fn new() -> Option<Self> {
        let venv = std::env::var_os("HELM_VENV")
            .map(PathBuf::from)
            .unwrap_or_else(|| repo_root().join("target/helm-venv"));
        let python = venv.join("bin/python");
        let importable = std::process::Command::new(&python)
            .args(["-c", "import helm_python"])
            .output()
            .is_ok_and(|o| o.status.success());
        if !importable {
            let reason = format!(
                "no Helm SDK: {} cannot import helm_python (run tests/helm/setup.sh)",
                python.display()
            );
            assert!(std::env::var("CI").as_deref() != Ok("true"), "CI=true and {reason}");
            println!("SKIPPED: {reason}");
            return None;
        }
        Some(Self {
            python,
            home: tempfile::tempdir().expect("a temporary directory"),
        })
    }

    /// `helm.py <args>`: Ok(result) on exit 0, Err(Helm's error document) on exit 1.
    pub fn run(&self, args: &[&str]) -> Result<Value, Value> {
        let out = std::process::Command::new(&self.python)
            .arg(repo_root().join("tests/helm/helm.py"))
            .args(args)
            .env("HELM_CACHE_HOME", self.home.path().join("cache"))
            .env("HELM_CONFIG_HOME", self.home.path().join("config"))
            .env("HELM_DATA_HOME", self.home.path().join("data"))
            .env_remove("KUBECONFIG")
            .output()
            .expect("helm.py runs");
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

    /// `helm template CHART NAME -n NS --set-json VALUES`: {template path: manifest} or Helm's error.
    pub fn template(&self, chart: &Path, name: &str, namespace: &str, values: &Value) -> Result<Value, Value> {
        let chart = chart.to_str().expect("a UTF-8 chart path");
        self.run(&[
            "template",
            chart,
            name,
            "-n",
            namespace,
            "--set-json",
            &values.to_string(),
        ])
    }
}

/// The objects of rendered templates (NOTES.txt left out), in template order.
pub fn objects(rendered: &Value) -> Vec<Value> {
    let mut out = Vec::new();
    let Some(files) = rendered.as_object() else {
        panic!("not a rendering: {rendered}")
    };
    for (path, manifest) in files {
        if path.ends_with("NOTES.txt") {
            continue;
        }
        let text = manifest.as_str().unwrap_or_default();
        for doc in serde_yaml::Deserializer::from_str(text) {
            let value: serde_yaml::Value =
                serde::Deserialize::deserialize(doc).unwrap_or_else(|e| panic!("{path}: not YAML: {e}\n{text}"));
            if value.is_null() {
                continue;
            }
            out.push(serde_json::to_value(value).unwrap_or_else(|e| panic!("{path}: not JSON-like: {e}")));
        }
    }
    out
}

/// The rendered NOTES.txt.
pub fn notes(rendered: &Value) -> String {
    rendered
        .as_object()
        .and_then(|files| files.iter().find(|(path, _)| path.ends_with("NOTES.txt")))
        .and_then(|(_, notes)| notes.as_str())
        .unwrap_or_default()
        .to_owned()
}

/// A values file (YAML) as the JSON object helm.py takes.
pub fn values_file(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let yaml: serde_yaml::Value = serde_yaml::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::to_value(yaml).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}
