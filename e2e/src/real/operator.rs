//! The operator on the real control plane as a platform team installs it: the chart rendered by Helm
//! (`helm template`), its CRDs, ServiceAccounts and RBAC applied as they are, the webhook configurations with
//! the chart's `service` swapped for a `url` on 127.0.0.1 (no pod network yet), and the production binary run
//! as processes with the Deployment's arguments, as the chart's ServiceAccount (a TokenRequest token in a
//! `tokenFile`, refreshed), bound by the chart's RBAC only.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::api::{Api, PostParams};
use serde_json::{Value, json};

use super::control_plane::{ControlPlane, skip};
use crate::helm::{self, Helm, repo_root};
use crate::{Poll, free_port, poll};

/// The Helm release: its name and namespace (the chart's names derive from it: `spark-operator-controller`,
/// the drivers' `spark-operator-spark`).
pub const RELEASE: &str = "spark-operator";
pub const RELEASE_NAMESPACE: &str = "spark-operator";

/// How long a token of the operator's ServiceAccount lives; the file is rewritten well before.
const TOKEN_SECONDS: i64 = 3600;
const TOKEN_REFRESH: Duration = Duration::from_secs(20 * 60);

/// The production binary (`cargo build --no-default-features -p spark-operator --target-dir
/// target/production`, which `.ci/run` builds), as the chart's image runs it.
pub fn production_binary() -> PathBuf {
    std::env::var_os("SPARK_OPERATOR_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("target/production/debug/spark-operator"))
}

/// The chart, rendered for the real control plane and applied, and what it says the operator runs with.
pub struct Install {
    /// The Deployment's container arguments, as rendered (with `$(POD_IP)` and its ports still in them).
    args: Vec<String>,
    /// The Deployment's plain environment variables (`RUST_LOG`, the log format, `--set`'s `env`).
    env: Vec<(String, String)>,
    mutating: Value,
    validating: Value,
    /// The operator's kubeconfig: the chart's ServiceAccount, by `tokenFile`.
    kubeconfig: PathBuf,
    pub service_account: String,
    pub job_namespaces: Vec<String>,
    _refresh: tokio::task::JoinHandle<()>,
}

impl Install {
    /// Renders the chart with `values` (merged over the job namespaces), creates the job namespaces and
    /// applies the chart's CRDs, ServiceAccounts and RBAC. None (after one line saying why) when Helm or the
    /// production binary is missing outside CI.
    pub async fn new(control_plane: &ControlPlane, job_namespaces: &[&str], values: Value) -> Option<Install> {
        if !production_binary().is_file() {
            skip(&format!(
                "no production binary at {} (cargo build --no-default-features --locked -p spark-operator --target-dir target/production)",
                production_binary().display()
            ));
            return None;
        }
        let helm = Helm::new()?;
        let mut all_values = json!({ "spark": { "jobNamespaces": job_namespaces } });
        merge(&mut all_values, values);
        let rendered = helm
            .template(&helm::chart(), RELEASE, RELEASE_NAMESPACE, &all_values)
            .unwrap_or_else(|e| panic!("helm template: {e}"));
        let objects = helm::objects(&rendered);

        let admin = control_plane.admin().await;
        let mut namespaces: Vec<&str> = vec![RELEASE_NAMESPACE];
        namespaces.extend(job_namespaces.iter().copied());
        for namespace in namespaces {
            ensure_namespace(control_plane, namespace);
        }
        kubectl_apply(control_plane, &repo_root().join("charts/spark-operator/crds"));
        // Polled, not `kubectl wait`: it fails at once on a CRD whose status has no conditions yet.
        crate::wait_crds_established(
            &admin,
            &[
                "sparkapplications.sparkoperator.k8s.io",
                "scheduledsparkapplications.sparkoperator.k8s.io",
            ],
        )
        .await;

        // What a Deployment's pod would be: RBAC and accounts as rendered; the workloads become processes.
        let installed: Vec<&Value> = objects
            .iter()
            .filter(|o| {
                matches!(
                    o["kind"].as_str(),
                    Some(
                        "Namespace" | "ServiceAccount" | "ClusterRole" | "ClusterRoleBinding" | "Role" | "RoleBinding"
                    )
                )
            })
            .collect();
        let dir = tempfile::tempdir().expect("a temporary directory");
        let file = dir.path().join("chart.yaml");
        let docs: Vec<String> = installed
            .iter()
            .map(|o| serde_yaml::to_string(o).expect("YAML"))
            .collect();
        std::fs::write(&file, docs.join("---\n")).expect("the rendered objects");
        kubectl_apply(control_plane, &file);

        let deployment = objects
            .iter()
            .find(|o| o["kind"] == "Deployment" && o["metadata"]["name"] == format!("{RELEASE}-controller"))
            .expect("the chart renders the operator's Deployment");
        let pod = &deployment["spec"]["template"]["spec"];
        let container = &pod["containers"][0];
        let args: Vec<String> = container["args"]
            .as_array()
            .expect("the operator's args")
            .iter()
            .map(|a| a.as_str().expect("a string argument").to_owned())
            .collect();
        let env: Vec<(String, String)> = container["env"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|e| Some((e["name"].as_str()?.to_owned(), e["value"].as_str()?.to_owned())))
            .collect();
        let service_account = pod["serviceAccountName"]
            .as_str()
            .expect("the Deployment's ServiceAccount")
            .to_owned();
        let configuration = |kind: &str| {
            objects
                .iter()
                .find(|o| o["kind"] == kind)
                .cloned()
                .unwrap_or_else(|| panic!("the chart renders a {kind}"))
        };

        let token_file = control_plane.data_dir().join(format!("{service_account}.token"));
        write_token(&admin, &service_account, &token_file).await;
        let kubeconfig = token_kubeconfig(control_plane, &service_account, &token_file);
        let refresh = {
            let admin = admin.clone();
            let service_account = service_account.clone();
            tokio::spawn(async move {
                loop {
                    tokio::time::sleep(TOKEN_REFRESH).await;
                    write_token(&admin, &service_account, &token_file).await;
                }
            })
        };
        Some(Install {
            args,
            env,
            mutating: configuration("MutatingWebhookConfiguration"),
            validating: configuration("ValidatingWebhookConfiguration"),
            kubeconfig,
            service_account,
            job_namespaces: job_namespaces.iter().map(|n| (*n).to_owned()).collect(),
            _refresh: refresh,
        })
    }

    /// The operator's user name in the API server's eyes (audit log, `user.username`).
    pub fn username(&self) -> String {
        format!("system:serviceaccount:{RELEASE_NAMESPACE}:{}", self.service_account)
    }

    /// The Deployment's arguments after the subcommand, `$(POD_IP)` as 127.0.0.1 (to parse them as the binary
    /// would).
    pub fn controller_args(&self) -> Vec<String> {
        self.args
            .iter()
            .skip(1)
            .map(|a| a.replace("$(POD_IP)", "127.0.0.1"))
            .collect()
    }

    /// The leader election Lease the chart names (`--leader-election-lease-name`), in the release namespace.
    pub fn lease_name(&self) -> String {
        self.args
            .iter()
            .find_map(|a| a.strip_prefix("--leader-election-lease-name="))
            .expect("the chart names the Lease")
            .to_owned()
    }

    /// The operator's kubeconfig (its ServiceAccount).
    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    /// Starts one replica (`name` is its pod name: identity in the Lease) with the Deployment's arguments,
    /// `$(POD_IP)` = 127.0.0.1 and free ports, then `extra` flags (which replace the chart's of the same name).
    pub fn start(&self, control_plane: &ControlPlane, name: &str, extra: &[&str]) -> Operator {
        let webhook_port = free_port();
        let metrics_port = free_port();
        let mut args: Vec<String> = self
            .args
            .iter()
            .map(|a| {
                let (flag, _) = a.split_once('=').unwrap_or((a, ""));
                match flag {
                    "--webhook-address" => format!("--webhook-address=127.0.0.1:{webhook_port}"),
                    "--metrics-address" => format!("--metrics-address=127.0.0.1:{metrics_port}"),
                    "--reports-address" => format!("--reports-address=127.0.0.1:{}", free_port()),
                    _ => a.replace("$(POD_IP)", "127.0.0.1"),
                }
            })
            .collect();
        // The webhook is reached by address here, not through its Service: its certificate must say so.
        args.push("--webhook-ip-addresses=127.0.0.1".into());
        // `extra` wins: a flag given there replaces the chart's (clap takes most flags once).
        for flag in extra {
            let name = flag.split_once('=').map_or(*flag, |(name, _)| name);
            args.retain(|a| a.split_once('=').map_or(a.as_str(), |(n, _)| n) != name);
            args.push((*flag).to_owned());
        }
        let log = control_plane.data_dir().join(format!("operator-{name}.log"));
        let child = Command::new("setpriv")
            .args(["--pdeathsig", "KILL", "--"])
            .arg(production_binary())
            .args(&args)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .env("KUBECONFIG", &self.kubeconfig)
            .env("HOSTNAME", name)
            .env("POD_IP", "127.0.0.1")
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&log).map(Stdio::from).unwrap_or(Stdio::null()))
            .stderr(
                std::fs::File::options()
                    .append(true)
                    .open(&log)
                    .map(Stdio::from)
                    .unwrap_or(Stdio::null()),
            )
            .spawn()
            .expect("the operator starts");
        Operator {
            name: name.to_owned(),
            child: Some(child),
            webhook_port,
            metrics_port,
            log,
        }
    }

    /// Applies the chart's webhook configurations with each `service` swapped for the URL of `operator`'s
    /// webhook on 127.0.0.1 (as a Service's endpoints would move to it), then waits until the API server gets
    /// its answers: an invalid application refused in a dry run in `namespace`.
    pub async fn route_webhooks_to(&self, control_plane: &ControlPlane, operator: &Operator, namespace: &str) {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let mut docs = Vec::new();
        for configuration in [&self.mutating, &self.validating] {
            let mut configuration = configuration.clone();
            for webhook in configuration["webhooks"].as_array_mut().expect("webhooks").iter_mut() {
                let path = webhook["clientConfig"]["service"]["path"]
                    .as_str()
                    .unwrap_or("/")
                    .to_owned();
                webhook["clientConfig"] =
                    json!({ "url": format!("https://127.0.0.1:{}{path}", operator.webhook_port) });
            }
            docs.push(serde_yaml::to_string(&configuration).expect("YAML"));
        }
        let file = dir.path().join("webhooks.yaml");
        std::fs::write(&file, docs.join("---\n")).expect("the webhook configurations");
        kubectl_apply(control_plane, &file);
        wait_for_webhook(control_plane, namespace, operator).await;
    }
}

/// Waits until the webhook refuses an invalid application in a dry run (it answers, with a `caBundle` the
/// API server trusts).
pub async fn wait_for_webhook(control_plane: &ControlPlane, namespace: &str, operator: &Operator) {
    let admin = control_plane.admin().await;
    let apps: Api<spark_operator_api::SparkApplication> = Api::namespaced(admin, namespace);
    let mut probe: spark_operator_api::SparkApplication =
        serde_yaml::from_str(&crate::app_yaml("webhook-probe", "1s", 0, 1, "")).expect("a probe application");
    probe.metadata.namespace = Some(namespace.to_owned());
    probe.spec.driver.pod.memory = Some("lots".into());
    let dry_run = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let answered = poll(Duration::from_secs(90), || async {
        match apps.create(&dry_run, &probe).await {
            Err(kube::Error::Api(status)) if status.message.contains("spec.driver.memory") => Poll::Done(()),
            other => Poll::Pending(format!("{other:?}")),
        }
    })
    .await;
    if let Err(last) = answered {
        panic!(
            "the webhook of {} never answered the API server: {last}\n{}",
            operator.name,
            operator.log_tail()
        );
    }
}

/// One replica of the operator: a process of the production binary; killed (SIGKILL) when dropped.
pub struct Operator {
    pub name: String,
    child: Option<Child>,
    pub webhook_port: u16,
    pub metrics_port: u16,
    log: PathBuf,
}

impl Operator {
    /// Stops it at once, mid-whatever, as `kill -9` would.
    pub fn kill(mut self) {
        self.stop();
    }

    /// Whether the process still runs.
    pub fn is_running(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| c.try_wait().ok().flatten().is_none())
    }

    /// The last lines of its log (for a failure's message).
    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        format!(
            "--- last lines of {} ---\n{}",
            self.log.display(),
            lines[lines.len().saturating_sub(40)..].join("\n")
        )
    }

    fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Operator {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Creates `namespace` unless it exists.
pub fn ensure_namespace(control_plane: &ControlPlane, namespace: &str) {
    let out = control_plane
        .kubectl()
        .args(["create", "namespace", namespace])
        .output()
        .expect("kubectl create namespace");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() || stderr.contains("AlreadyExists"),
        "creating namespace {namespace}: {stderr}"
    );
}

/// `kubectl apply --server-side -f PATH` as the admin (the installer).
pub fn kubectl_apply(control_plane: &ControlPlane, path: &Path) {
    let out = control_plane
        .kubectl()
        .args([
            "apply",
            "--server-side",
            "--force-conflicts",
            "--field-manager=e2e-installer",
            "-f",
        ])
        .arg(path)
        .output()
        .expect("kubectl apply");
    assert!(
        out.status.success(),
        "kubectl apply -f {}: {}",
        path.display(),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A token of the operator's ServiceAccount (TokenRequest, as `kubectl create token`), written to `file`.
async fn write_token(admin: &kube::Client, service_account: &str, file: &Path) {
    let accounts: Api<ServiceAccount> = Api::namespaced(admin.clone(), RELEASE_NAMESPACE);
    let request = TokenRequest {
        spec: TokenRequestSpec {
            audiences: Vec::new(),
            expiration_seconds: Some(TOKEN_SECONDS),
            ..TokenRequestSpec::default()
        },
        ..TokenRequest::default()
    };
    let issued = accounts
        .create_token_request(service_account, &PostParams::default(), &request)
        .await
        .expect("a token of the operator's ServiceAccount");
    let token = issued.status.expect("a token").token;
    // Written aside and renamed: a reader never sees half a token.
    let aside = file.with_extension("new");
    std::fs::write(&aside, token).expect("the token file");
    std::fs::rename(&aside, file).expect("the token file");
}

/// A kubeconfig of the admin's cluster whose user reads its token from `token_file` (kube-rs re-reads it).
fn token_kubeconfig(control_plane: &ControlPlane, name: &str, token_file: &Path) -> PathBuf {
    let mut config = kube::config::Kubeconfig::read_from(control_plane.kubeconfig()).expect("the admin kubeconfig");
    let auth = kube::config::AuthInfo {
        token_file: Some(token_file.display().to_string()),
        ..kube::config::AuthInfo::default()
    };
    // Every user of the admin's kubeconfig becomes this one (it has exactly one: the admin).
    for named in &mut config.auth_infos {
        named.auth_info = Some(auth.clone());
    }
    let path = control_plane.data_dir().join(format!("{name}.kubeconfig"));
    std::fs::write(&path, serde_json::to_vec(&config).expect("a kubeconfig")).expect("the operator's kubeconfig");
    path
}

/// Merges `patch` into `base` (objects key by key; anything else replaces).
fn merge(base: &mut Value, patch: Value) {
    match (base, patch) {
        (Value::Object(base), Value::Object(patch)) => {
            for (key, value) in patch {
                merge(base.entry(key).or_insert(Value::Null), value);
            }
        }
        (base, patch) => *base = patch,
    }
}
