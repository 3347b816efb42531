//! What `spark-operator logs` does with the caller's kube client: find the agent pods, ask each one's
//! index through the API server's `pods/proxy`, choose the container, stream its log. The caller's bearer
//! token goes along in [`TOKEN_HEADER`] so the agent can check the caller's own rights (see
//! [`super::access`]).

use std::collections::BTreeMap;

use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::BodyExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use kube::client::{Body, ConfigExt};
use tower::{Layer, ServiceExt};

use super::access::TOKEN_HEADER;
use super::index::{self, AppIndex, ContainerEntry};

/// Where the agents are.
#[derive(Clone, Debug)]
pub struct Agents {
    pub namespace: String,
    /// Label selector of the agent pods.
    pub selector: String,
    pub port: u16,
}

/// One agent pod that can be asked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AgentPod {
    pub name: String,
    pub node: String,
}

/// Why the agents could not be asked.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(
        "the kubeconfig's user has no bearer token ({0}); the agents check who you are with your token, as the API server's proxy does not forward a client certificate: use a kubeconfig user with a token, tokenFile or an exec plugin"
    )]
    NoToken(&'static str),
    #[error("could not set up the kubeconfig's authentication")]
    Auth(#[source] kube::Error),
    #[error("could not get a bearer token from the kubeconfig's user")]
    Token(#[source] tower::BoxError),
    #[error("could not list the agent pods in namespace {namespace} (selector {selector})")]
    ListAgents {
        namespace: String,
        selector: String,
        #[source]
        source: kube::Error,
    },
    #[error("could not build the request to agent pod {pod}")]
    Request {
        pod: String,
        #[source]
        source: http::Error,
    },
    #[error("could not reach agent pod {pod} on node {node} through the API server")]
    Ask {
        pod: String,
        node: String,
        #[source]
        source: kube::Error,
    },
    #[error("agent pod {pod} on node {node} answered {code}: {message}")]
    Refused {
        pod: String,
        node: String,
        code: u16,
        message: String,
    },
    #[error("agent pod {pod} answered an index that could not be read")]
    BadIndex {
        pod: String,
        #[source]
        source: serde_json::Error,
    },
}

/// The bearer token the kubeconfig's user sends: a `token`, a `tokenFile`, or what its exec plugin (or
/// auth provider) returns, obtained through kube's own authentication layer so every kind kube supports
/// works the same. A user with only a client certificate (or a username and password) has none.
pub async fn bearer_token(config: &kube::Config) -> Result<String, Error> {
    let Some(layer) = config.auth_layer().map_err(Error::Auth)? else {
        return Err(Error::NoToken(
            "it authenticates with a client certificate or not at all",
        ));
    };
    // The layer sets the Authorization header of the request passing through it; this service only looks.
    let capture = tower::service_fn(|request: Request<Body>| async move {
        let header = request.headers().get(http::header::AUTHORIZATION).cloned();
        Ok::<_, tower::BoxError>(http::Response::new(header))
    });
    let header = layer
        .layer(capture)
        .oneshot(Request::new(Body::empty()))
        .await
        .map_err(Error::Token)?;
    let value = header.body().as_ref().and_then(|v| v.to_str().ok()).unwrap_or_default();
    match value.strip_prefix("Bearer ") {
        Some(token) if !token.trim().is_empty() => Ok(token.trim().to_owned()),
        _ if value.starts_with("Basic ") => Err(Error::NoToken("it authenticates with a username and password")),
        _ => Err(Error::NoToken("its authentication sets no bearer token")),
    }
}

/// The running agent pods (with an IP), by name.
pub async fn agent_pods(client: &kube::Client, agents: &Agents) -> Result<Vec<AgentPod>, Error> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), &agents.namespace);
    let list = pods
        .list(&ListParams::default().labels(&agents.selector))
        .await
        .map_err(|source| Error::ListAgents {
            namespace: agents.namespace.clone(),
            selector: agents.selector.clone(),
            source,
        })?;
    let mut found: Vec<AgentPod> = list
        .items
        .into_iter()
        .filter(|pod| {
            let status = pod.status.as_ref();
            status.and_then(|s| s.phase.as_deref()) == Some("Running")
                && status
                    .and_then(|s| s.pod_ip.as_deref())
                    .is_some_and(|ip| !ip.is_empty())
                && pod.metadata.deletion_timestamp.is_none()
        })
        .filter_map(|pod| {
            Some(AgentPod {
                node: pod.spec.as_ref().and_then(|s| s.node_name.clone()).unwrap_or_default(),
                name: pod.metadata.name?,
            })
        })
        .collect();
    found.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(found)
}

/// The API server path reaching `path` on an agent pod's log server.
pub fn proxy_path(agents: &Agents, pod: &str, path: &str) -> String {
    format!(
        "/api/v1/namespaces/{}/pods/https:{pod}:{}/proxy{path}",
        agents.namespace, agents.port
    )
}

async fn get(
    client: &kube::Client,
    agents: &Agents,
    pod: &AgentPod,
    token: &str,
    path: &str,
) -> Result<http::Response<Body>, Error> {
    let request = Request::get(proxy_path(agents, &pod.name, path))
        .header(TOKEN_HEADER, token)
        .body(Body::empty())
        .map_err(|source| Error::Request {
            pod: pod.name.clone(),
            source,
        })?;
    client.send(request).await.map_err(|source| Error::Ask {
        pod: pod.name.clone(),
        node: pod.node.clone(),
        source,
    })
}

/// The message of a Kubernetes `Status` body, or the body itself.
fn message_of(body: &[u8]) -> String {
    serde_json::from_slice::<serde_json::Value>(body)
        .ok()
        .and_then(|v| v.get("message").and_then(|m| m.as_str()).map(str::to_owned))
        .unwrap_or_else(|| String::from_utf8_lossy(body).trim().to_owned())
}

/// What the agents answered.
#[derive(Debug, Default)]
pub struct Asked {
    /// Each agent's index of the application; agents holding nothing of it are left out.
    pub held: Vec<(AgentPod, AppIndex)>,
    /// Agents that could not be asked (a node down, an agent restarting): the others still count.
    pub unreachable: Vec<Error>,
}

/// Asks every agent for its index of `namespace/app`, at once. A refusal (401, 403: the caller may not
/// read these logs, and every agent would say so) is an error; an agent that cannot be reached is
/// reported in [`Asked::unreachable`].
pub async fn indexes(
    client: &kube::Client,
    agents: &Agents,
    pods: &[AgentPod],
    token: &str,
    namespace: &str,
    app: &str,
) -> Result<Asked, Error> {
    let asks = pods.iter().map(|pod| async move {
        let response = get(client, agents, pod, token, &index::index_path(namespace, app)).await?;
        let code = response.status();
        let body = response
            .into_body()
            .collect_bytes()
            .await
            .map_err(|source| Error::Ask {
                pod: pod.name.clone(),
                node: pod.node.clone(),
                source,
            })?;
        if code == StatusCode::NOT_FOUND && message_of(&body).starts_with("this node holds no logs") {
            return Ok(None);
        }
        if !code.is_success() {
            return Err(Error::Refused {
                pod: pod.name.clone(),
                node: pod.node.clone(),
                code: code.as_u16(),
                message: message_of(&body),
            });
        }
        let index: AppIndex = serde_json::from_slice(&body).map_err(|source| Error::BadIndex {
            pod: pod.name.clone(),
            source,
        })?;
        Ok(Some((pod.clone(), index)))
    });
    let mut asked = Asked::default();
    for answer in futures::future::join_all(asks).await {
        match answer {
            Ok(Some(found)) => asked.held.push(found),
            Ok(None) => {}
            Err(error @ Error::Refused { code: 401 | 403, .. }) => return Err(error),
            Err(error) => asked.unreachable.push(error),
        }
    }
    Ok(asked)
}

/// Streams one container's log from `pod` to `out`, chunk by chunk, as it arrives.
#[allow(clippy::too_many_arguments)]
pub async fn stream_log(
    client: &kube::Client,
    agents: &Agents,
    pod: &AgentPod,
    token: &str,
    namespace: &str,
    app: &str,
    container_id: &str,
    follow: bool,
    out: &mut (dyn FnMut(&[u8]) -> std::io::Result<()> + Send),
) -> Result<(), Error> {
    let mut path = index::log_path(namespace, app, container_id);
    if follow {
        path.push_str("?follow=true");
    }
    let response = get(client, agents, pod, token, &path).await?;
    let code = response.status();
    let mut body = response.into_body();
    let failed = |source| Error::Ask {
        pod: pod.name.clone(),
        node: pod.node.clone(),
        source,
    };
    if !code.is_success() {
        let body: Bytes = body.collect_bytes().await.map_err(failed)?;
        return Err(Error::Refused {
            pod: pod.name.clone(),
            node: pod.node.clone(),
            code: code.as_u16(),
            message: message_of(&body),
        });
    }
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(failed)?;
        if let Ok(data) = frame.into_data()
            && out(&data).is_err()
        {
            // The reader went away (a closed pipe): nothing more to show.
            return Ok(());
        }
    }
    Ok(())
}

/// Which container to show.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Selection {
    /// The application's current submission (its status' `submissionID`), shown by default.
    pub current_submission: Option<String>,
    /// The N-th oldest execution (1 = the first) instead.
    pub attempt: Option<usize>,
    /// An executor instead of the driver.
    pub executor: Option<i64>,
}

/// The container chosen, and which of the agents holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Chosen {
    /// Index into the `held` list given to [`choose`].
    pub agent: usize,
    pub submission_id: String,
    pub container: ContainerEntry,
}

/// Why there is nothing to show.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Nothing {
    #[error("no agent holds logs of this application")]
    NotHeld,
    #[error(
        "no agent holds logs of its current execution (submission {submission}); executions held, oldest first: {held}; choose one with --attempt N"
    )]
    CurrentNotHeld { submission: String, held: String },
    #[error("there is no execution {asked}: the agents hold {count} execution(s) of this application")]
    NoSuchAttempt { asked: usize, count: usize },
    #[error("no driver log of execution {submission} is held")]
    NoDriver { submission: String },
    #[error("no log of executor {executor} of execution {submission} is held; executors held: {held}")]
    NoExecutor {
        executor: i64,
        submission: String,
        held: String,
    },
}

/// Chooses the container to show among what the agents hold.
pub fn choose(held: &[(AgentPod, AppIndex)], selection: &Selection) -> Result<Chosen, Nothing> {
    // Executions across nodes, by submission id, first seen anywhere.
    let mut executions: BTreeMap<&str, i64> = BTreeMap::new();
    for (_, index) in held {
        for execution in &index.executions {
            let first = executions.entry(execution.submission_id.as_str()).or_insert(i64::MAX);
            *first = (*first).min(execution.first_seen);
        }
    }
    if executions.is_empty() {
        return Err(Nothing::NotHeld);
    }
    let mut ordered: Vec<(i64, &str)> = executions.into_iter().map(|(id, first)| (first, id)).collect();
    ordered.sort();
    let submission = match (selection.attempt, selection.current_submission.as_deref()) {
        (Some(n), _) => match n.checked_sub(1).and_then(|i| ordered.get(i)) {
            Some((_, id)) => (*id).to_owned(),
            None => {
                return Err(Nothing::NoSuchAttempt {
                    asked: n,
                    count: ordered.len(),
                });
            }
        },
        (None, Some(current)) if !current.is_empty() => {
            if !ordered.iter().any(|(_, id)| *id == current) {
                return Err(Nothing::CurrentNotHeld {
                    submission: current.to_owned(),
                    held: ordered.iter().map(|(_, id)| *id).collect::<Vec<_>>().join(", "),
                });
            }
            current.to_owned()
        }
        // No current submission known: the newest execution.
        _ => ordered.last().map(|(_, id)| (*id).to_owned()).unwrap_or_default(),
    };
    let candidates = held.iter().enumerate().flat_map(|(agent, (_, index))| {
        index
            .executions
            .iter()
            .filter(|e| e.submission_id == submission)
            .flat_map(move |e| e.containers.iter().map(move |c| (agent, c)))
    });
    let wanted: Vec<(usize, &ContainerEntry)> = match selection.executor {
        None => candidates.filter(|(_, c)| c.role == "driver").collect(),
        Some(id) => candidates
            .filter(|(_, c)| c.role == "executor" && c.executor_id == Some(id))
            .collect(),
    };
    // Several: restarts of the same container; the newest attempt is the one to show.
    let Some((agent, container)) = wanted.into_iter().max_by_key(|(_, c)| (c.started_at, c.attempt)) else {
        return Err(match selection.executor {
            None => Nothing::NoDriver { submission },
            Some(executor) => {
                let mut ids: Vec<i64> = held
                    .iter()
                    .flat_map(|(_, index)| &index.executions)
                    .filter(|e| e.submission_id == submission)
                    .flat_map(|e| &e.containers)
                    .filter_map(|c| c.executor_id)
                    .collect();
                ids.sort_unstable();
                ids.dedup();
                let held = if ids.is_empty() {
                    "none".to_owned()
                } else {
                    ids.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")
                };
                Nothing::NoExecutor {
                    executor,
                    submission,
                    held,
                }
            }
        });
    };
    Ok(Chosen {
        agent,
        submission_id: submission,
        container: container.clone(),
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use kube::config::{KubeConfigOptions, Kubeconfig};
    use serde_json::json;

    use super::*;

    async fn config_with_user(user: serde_json::Value) -> kube::Config {
        let kubeconfig: Kubeconfig = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Config",
            "clusters": [{ "name": "c", "cluster": { "server": "https://127.0.0.1:6443" } }],
            "users": [{ "name": "u", "user": user }],
            "contexts": [{ "name": "x", "context": { "cluster": "c", "user": "u" } }],
            "current-context": "x",
        }))
        .unwrap();
        kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
            .await
            .unwrap()
    }

    #[tokio::test]
    async fn the_token_comes_from_a_static_token_or_an_exec_plugin_and_never_from_a_certificate() {
        let config = config_with_user(json!({ "token": "static-token" })).await;
        assert_eq!(bearer_token(&config).await.unwrap(), "static-token");

        let credential = r#"{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"token":"from-plugin"}}"#;
        let config = config_with_user(json!({ "exec": {
            "apiVersion": "client.authentication.k8s.io/v1",
            "command": "sh",
            "args": ["-c", format!("echo '{credential}'")],
            "interactiveMode": "Never",
        } }))
        .await;
        assert_eq!(bearer_token(&config).await.unwrap(), "from-plugin");

        let config = config_with_user(json!({ "username": "u", "password": "p" })).await;
        let error = bearer_token(&config).await.unwrap_err();
        assert!(error.to_string().contains("username and password"), "{error}");
    }
}
