//! What the node agents need in the simulated cluster, as the chart's DaemonSet gives it to them in a
//! real one: the operator's namespace and the agents' ServiceAccount, a token of it for the report
//! receiver's audience (the projected volume), the operator's CA bundle (the mounted `spark-operator-ca`
//! ConfigMap), and a pod on each node standing for the agent there, whose loopback address the in-process
//! agent's log server binds, so `spark-operator logs` reaches it through the API server's `pods/proxy`
//! exactly as it reaches a DaemonSet pod.

use std::net::IpAddr;
use std::path::Path;
use std::time::Duration;

use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod, ServiceAccount};
use kube::api::{Api, PostParams};
use serde_json::json;

/// The operator's namespace (the chart's default).
pub const OPERATOR_NAMESPACE: &str = "spark-operator";
/// The agents' namespace (the chart's default: the operator's namespace with `-agent`): apart from the
/// operator's, since the agents' hostPaths need Pod Security `privileged` and the operator's is `restricted`.
pub const AGENT_NAMESPACE: &str = "spark-operator-agent";
/// The agents' ServiceAccount, in [`AGENT_NAMESPACE`] (the receiver's default `--agent-service-account`).
pub const AGENT_SERVICE_ACCOUNT: &str = "spark-operator-agent";
/// The audience of the agents' tokens (the receiver's default `--agent-token-audience`).
pub const AGENT_TOKEN_AUDIENCE: &str = "spark-operator";
/// The labels of the agents' pods (what `spark-operator logs --agent-selector` looks for by default).
pub const AGENT_POD_LABELS: [(&str, &str); 2] = [
    ("app.kubernetes.io/name", "spark-operator"),
    ("app.kubernetes.io/component", "agent"),
];
/// The port of the agents' log servers (`spark-operator logs --agent-port` by default).
pub const AGENT_LOG_PORT: u16 = 9444;

/// Why the agents' setup failed.
#[derive(Debug, thiserror::Error)]
pub enum AgentSetupError {
    #[error("creating {what}")]
    Create {
        what: String,
        #[source]
        source: kube::Error,
    },
    #[error("requesting a token for the agents' ServiceAccount")]
    Token(#[source] kube::Error),
    #[error("the token request was answered without a token")]
    NoToken,
    #[error("writing {}", path.display())]
    Write {
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the ConfigMap {namespace}/{name} has no ca.crt after {waited:?}")]
    NoCaBundle {
        namespace: String,
        name: String,
        waited: Duration,
    },
    #[error("the agent pod on node {node} has no address after {waited:?}")]
    NoPodAddress { node: String, waited: Duration },
}

async fn create_if_missing<K>(api: &Api<K>, object: serde_json::Value, what: &str) -> Result<(), AgentSetupError>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    let object: K = serde_json::from_value(object).map_err(|e| AgentSetupError::Create {
        what: what.to_owned(),
        source: kube::Error::SerdeError(e),
    })?;
    match api.create(&PostParams::default(), &object).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(()),
        Err(source) => Err(AgentSetupError::Create {
            what: what.to_owned(),
            source,
        }),
    }
}

/// The operator's and the agents' namespaces and the agents' ServiceAccount (kept if they exist).
pub async fn create_agent_identity(client: &kube::Client) -> Result<(), AgentSetupError> {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    create_if_missing(
        &namespaces,
        json!({"metadata": {"name": OPERATOR_NAMESPACE}}),
        "the operator's namespace",
    )
    .await?;
    create_if_missing(
        &namespaces,
        json!({"metadata": {"name": AGENT_NAMESPACE}}),
        "the agents' namespace",
    )
    .await?;
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), AGENT_NAMESPACE);
    create_if_missing(
        &accounts,
        json!({"metadata": {"name": AGENT_SERVICE_ACCOUNT}}),
        "the agents' ServiceAccount",
    )
    .await
}

/// Writes to `path` a token of the agents' ServiceAccount for the receiver's audience, valid a day.
pub async fn write_agent_token(client: &kube::Client, path: &Path) -> Result<(), AgentSetupError> {
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), AGENT_NAMESPACE);
    let request = TokenRequest {
        spec: TokenRequestSpec {
            audiences: vec![AGENT_TOKEN_AUDIENCE.into()],
            expiration_seconds: Some(24 * 3600),
            ..Default::default()
        },
        ..Default::default()
    };
    let token = accounts
        .create_token_request(AGENT_SERVICE_ACCOUNT, &PostParams::default(), &request)
        .await
        .map_err(AgentSetupError::Token)?
        .status
        .ok_or(AgentSetupError::NoToken)?
        .token;
    write(path, token.as_bytes())
}

fn write(path: &Path, contents: &[u8]) -> Result<(), AgentSetupError> {
    std::fs::write(path, contents).map_err(|source| AgentSetupError::Write {
        path: path.to_owned(),
        source,
    })
}

/// Waits (at most `wait`) for the operator to publish its CA bundle in the ConfigMap `namespace/name`
/// and writes it to `path`.
pub async fn write_ca_bundle(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    path: &Path,
    wait: Duration,
) -> Result<(), AgentSetupError> {
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        let bundle = maps
            .get_opt(name)
            .await
            .ok()
            .flatten()
            .and_then(|m| m.data)
            .and_then(|mut d| d.remove("ca.crt"))
            .filter(|b| !b.is_empty());
        if let Some(bundle) = bundle {
            return write(path, bundle.as_bytes());
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(AgentSetupError::NoCaBundle {
                namespace: namespace.to_owned(),
                name: name.to_owned(),
                waited: wait,
            });
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Creates (if missing) the pod standing for the agent on `node`, labelled as the DaemonSet's pods are,
/// and returns its address once the kubelet gave it one: the agent's log server binds it.
pub async fn publish_agent_pod(client: &kube::Client, node: &str, wait: Duration) -> Result<IpAddr, AgentSetupError> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), AGENT_NAMESPACE);
    let name = format!("spark-operator-agent-{node}");
    let labels: serde_json::Map<String, serde_json::Value> = AGENT_POD_LABELS
        .iter()
        .map(|(k, v)| ((*k).to_owned(), json!(v)))
        .collect();
    create_if_missing(
        &pods,
        json!({
            "metadata": {"name": name, "labels": labels},
            "spec": {
                "nodeName": node,
                "serviceAccountName": AGENT_SERVICE_ACCOUNT,
                "containers": [{
                    "name": "agent",
                    "image": "spark-operator:dev",
                    "ports": [{"name": "logs", "containerPort": AGENT_LOG_PORT}],
                }],
            },
        }),
        &format!("the agent pod on node {node}"),
    )
    .await?;
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        let ip = pods
            .get_opt(&name)
            .await
            .ok()
            .flatten()
            .and_then(|p| p.status?.pod_ip)
            .and_then(|ip| ip.parse().ok());
        if let Some(ip) = ip {
            return Ok(ip);
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(AgentSetupError::NoPodAddress {
                node: node.to_owned(),
                waited: wait,
            });
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Where one node's agent finds what it needs, and where it reports.
#[derive(Clone, Debug)]
pub struct AgentSetup<'a> {
    /// The node, as the sim knows it.
    pub node: &'a kube_sim::node::NodeHandle,
    /// The agent's own directory (spool, log store, token, CA bundle); kept across restarts.
    pub dir: &'a Path,
    /// The report receiver's URL (`https://...`).
    pub report_address: &'a str,
    /// The ConfigMap the operator publishes its CA bundle in: namespace and name.
    pub ca_config_map: (&'a str, &'a str),
}

/// Prepares one node's agent as the chart's DaemonSet would (token, CA bundle, its pod) and returns the
/// `spark-operator agent` flags for it (without the runtime's).
pub async fn prepare_agent(client: &kube::Client, setup: AgentSetup<'_>) -> Result<Vec<String>, AgentSetupError> {
    const WAIT: Duration = Duration::from_secs(60);
    let dir = setup.dir;
    std::fs::create_dir_all(dir).map_err(|source| AgentSetupError::Write {
        path: dir.to_owned(),
        source,
    })?;
    let (ca, token) = (dir.join("ca.crt"), dir.join("token"));
    let (namespace, name) = setup.ca_config_map;
    write_ca_bundle(client, namespace, name, &ca, WAIT).await?;
    write_agent_token(client, &token).await?;
    // Its log server on the address of the pod standing for it on its node, as a DaemonSet pod's.
    let address = publish_agent_pod(client, setup.node.name(), WAIT).await?;
    Ok(vec![
        format!("--node-name={}", setup.node.name()),
        format!("--cri-socket={}", setup.node.cri_socket().display()),
        // The runtime reports the node's paths; this process sees the node's `/` here.
        format!("--host-root={}", setup.node.root_dir().display()),
        format!("--spool-dir={}", dir.join("spool").display()),
        format!("--report-address={}", setup.report_address),
        format!("--ca-bundle={}", ca.display()),
        format!("--token-file={}", token.display()),
        format!("--log-store-dir={}", dir.join("logs").display()),
        format!("--log-address={}", std::net::SocketAddr::new(address, AGENT_LOG_PORT)),
    ])
}
