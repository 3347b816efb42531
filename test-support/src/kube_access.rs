//! Used by the agent's log tests (`agent/tests/logs_on_sim.rs`), `spark-operator logs` tests
//! (`tests/logs_command.rs`), the chart's tests and the end-to-end tests: objects made as an administrator,
//! ServiceAccount tokens, kubeconfigs with a token user (a log reader's among them), and bounded waits. A panic
//! here is a failed test.

use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{Namespace, Pod, ServiceAccount};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::{Api, PostParams};
use kube::config::{AuthInfo, Kubeconfig};
use kube_sim::Sim;
use serde_json::{Value, json};

/// Waits for `check` to give a value; the deadline only bounds how long a failure takes to show.
pub async fn wait_for<T, F: std::future::Future<Output = Option<T>>>(what: &str, mut check: impl FnMut() -> F) -> T {
    for _ in 0..600 {
        if let Some(value) = check().await {
            return value;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("timed out waiting for {what}");
}

pub async fn create<K>(client: &kube::Client, namespace: &str, object: Value) -> K
where
    K: kube::Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + serde::Serialize
        + std::fmt::Debug,
{
    let object: K = serde_json::from_value(object).unwrap();
    Api::<K>::namespaced(client.clone(), namespace)
        .create(&PostParams::default(), &object)
        .await
        .unwrap()
}

pub async fn create_cluster_wide<K>(client: &kube::Client, object: Value) -> K
where
    K: kube::Resource<DynamicType = (), Scope = k8s_openapi::ClusterResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + serde::Serialize
        + std::fmt::Debug,
{
    let object: K = serde_json::from_value(object).unwrap();
    Api::<K>::all(client.clone())
        .create(&PostParams::default(), &object)
        .await
        .unwrap()
}

pub async fn namespace(client: &kube::Client, name: &str) {
    create_cluster_wide::<Namespace>(client, json!({ "metadata": { "name": name } })).await;
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), name);
    wait_for("the default ServiceAccount", || {
        let accounts = accounts.clone();
        async move { accounts.get_opt("default").await.ok().flatten() }
    })
    .await;
}

/// A ServiceAccount and a token of it (TokenRequest, as `kubectl create token`).
pub async fn account(client: &kube::Client, namespace: &str, name: &str) -> String {
    create::<ServiceAccount>(client, namespace, json!({ "metadata": { "name": name } })).await;
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), namespace);
    let request = TokenRequest {
        spec: TokenRequestSpec {
            audiences: Vec::new(),
            expiration_seconds: Some(3600),
            ..TokenRequestSpec::default()
        },
        ..TokenRequest::default()
    };
    let issued = accounts
        .create_token_request(name, &PostParams::default(), &request)
        .await
        .unwrap();
    issued.status.unwrap().token
}

/// A kubeconfig for the sim whose user authenticates with `token` (from a tokenFile, as many clusters'
/// credentials are written), with `namespace` as the context's namespace.
pub fn kubeconfig_with_token(sim: &Sim, dir: &Path, name: &str, token: &str, namespace: &str) -> PathBuf {
    let token_file = dir.join(format!("{name}.token"));
    std::fs::write(&token_file, token).unwrap();
    let mut config = Kubeconfig::read_from(sim.kubeconfig_path()).unwrap();
    let current = config.current_context.clone().unwrap();
    let context = config.contexts.iter_mut().find(|c| c.name == current).unwrap();
    let context = context.context.as_mut().unwrap();
    context.namespace = Some(namespace.to_owned());
    let user = context.user.clone().unwrap();
    let auth = config.auth_infos.iter_mut().find(|a| a.name == user).unwrap();
    auth.auth_info = Some(AuthInfo {
        token_file: Some(token_file.display().to_string()),
        ..AuthInfo::default()
    });
    let path = dir.join(format!("{name}.kubeconfig"));
    std::fs::write(&path, serde_json::to_vec(&config).unwrap()).unwrap();
    path
}

pub async fn running_pod(client: &kube::Client, namespace: &str, name: &str) -> Pod {
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    wait_for(&format!("pod {name} running"), || {
        let pods = pods.clone();
        async move {
            let pod = pods.get(name).await.ok()?;
            let status = pod.status.as_ref()?;
            let running = status
                .container_statuses
                .as_ref()?
                .first()?
                .state
                .as_ref()?
                .running
                .is_some();
            (running && status.pod_ip.is_some()).then_some(pod)
        }
    })
    .await
}

/// A kubeconfig whose user, the ServiceAccount `reader` of `jobs`, may do what `spark-operator logs` needs:
/// `get pods/log` and read SparkApplications in `jobs`, list and proxy to the agents' pods in `agents`.
pub async fn log_reader_kubeconfig(sim: &Sim, admin: &kube::Client, dir: &Path, agents: &str, jobs: &str) -> PathBuf {
    create::<Role>(
        admin,
        agents,
        json!({
            "metadata": { "name": "agent-proxy" },
            "rules": [
                { "apiGroups": [""], "resources": ["pods"], "verbs": ["list"] },
                { "apiGroups": [""], "resources": ["pods/proxy"], "verbs": ["get"] },
            ],
        }),
    )
    .await;
    create::<Role>(
        admin,
        jobs,
        json!({
            "metadata": { "name": "log-reader" },
            "rules": [
                { "apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"] },
                { "apiGroups": ["sparkoperator.k8s.io"], "resources": ["sparkapplications"], "verbs": ["get"] },
            ],
        }),
    )
    .await;
    let token = account(admin, jobs, "reader").await;
    for (ns, role) in [(agents, "agent-proxy"), (jobs, "log-reader")] {
        create::<RoleBinding>(
            admin,
            ns,
            json!({
                "metadata": { "name": role },
                "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role },
                "subjects": [{ "kind": "ServiceAccount", "name": "reader", "namespace": jobs }],
            }),
        )
        .await;
    }
    kubeconfig_with_token(sim, dir, "reader", &token, jobs)
}
