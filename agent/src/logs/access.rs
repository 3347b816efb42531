//! Who may read the logs the agent keeps: whoever Kubernetes RBAC lets `get` `pods/log` in the
//! application's namespace, as for `kubectl logs`.
//!
//! The caller reaches the agent through the API server's `pods/proxy`, which authenticates the caller but
//! drops its `Authorization` header before forwarding, and proves nothing to the agent about who asked
//! (it only needs `get pods/proxy` on the agent's pod). So `spark-operator logs` sends the caller's own
//! bearer token again in [`TOKEN_HEADER`]; the agent asks the API server who it is (TokenReview) and
//! whether that user may read pod logs there (SubjectAccessReview with the reviewed user, groups, uid and
//! extra). Its ServiceAccount needs `create` on both (the `system:auth-delegator` ClusterRole).

use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec};
use kube::api::{Api, PostParams};

/// The header carrying the caller's bearer token through the API server's proxy.
pub const TOKEN_HEADER: &str = "x-spark-operator-token";

/// What the reviews decided.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    Allowed {
        user: String,
    },
    /// No token, or one the API server does not accept: 401.
    Unauthenticated(String),
    /// Authenticated, but not allowed: 403.
    Forbidden(String),
}

/// Why no decision could be made (the API server could not be asked).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("could not review the caller's token with the API server")]
    TokenReview(#[source] kube::Error),
    #[error("could not ask the API server whether {user} may read pod logs in namespace {namespace}")]
    AccessReview {
        user: String,
        namespace: String,
        #[source]
        source: kube::Error,
    },
}

/// Decides whether the holder of `token` may read the logs of pods in `namespace`.
pub async fn authorize(client: &kube::Client, token: Option<&str>, namespace: &str) -> Result<Decision, Error> {
    let Some(token) = token.map(str::trim).filter(|t| !t.is_empty()) else {
        return Ok(Decision::Unauthenticated(format!(
            "Unauthorized: send your Kubernetes bearer token in the {TOKEN_HEADER} header (the API server's proxy does not pass Authorization on); `spark-operator logs` does this"
        )));
    };
    let review = TokenReview {
        spec: TokenReviewSpec {
            token: Some(token.to_owned()),
            audiences: None,
        },
        ..TokenReview::default()
    };
    let reviewed = Api::<TokenReview>::all(client.clone())
        .create(&PostParams::default(), &review)
        .await
        .map_err(Error::TokenReview)?;
    let status = reviewed.status.unwrap_or_default();
    if status.authenticated != Some(true) {
        let why = status
            .error
            .filter(|e| !e.is_empty())
            .map(|e| format!(": {e}"))
            .unwrap_or_default();
        return Ok(Decision::Unauthenticated(format!(
            "Unauthorized: the API server did not accept the token{why}"
        )));
    }
    let user = status.user.unwrap_or_default();
    let username = user.username.clone().unwrap_or_default();
    let access = SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: user.username.clone(),
            groups: user.groups.clone(),
            uid: user.uid.clone(),
            extra: user.extra.clone(),
            resource_attributes: Some(ResourceAttributes {
                namespace: Some(namespace.to_owned()),
                verb: Some("get".into()),
                group: Some(String::new()),
                resource: Some("pods".into()),
                subresource: Some("log".into()),
                ..ResourceAttributes::default()
            }),
            ..SubjectAccessReviewSpec::default()
        },
        ..SubjectAccessReview::default()
    };
    let decided = Api::<SubjectAccessReview>::all(client.clone())
        .create(&PostParams::default(), &access)
        .await
        .map_err(|source| Error::AccessReview {
            user: username.clone(),
            namespace: namespace.to_owned(),
            source,
        })?;
    let status = decided.status.unwrap_or_default();
    if status.allowed && status.denied != Some(true) {
        return Ok(Decision::Allowed { user: username });
    }
    let reason = status
        .reason
        .filter(|r| !r.is_empty())
        .map(|r| format!(": {r}"))
        .unwrap_or_default();
    Ok(Decision::Forbidden(format!(
        "pods is forbidden: User \"{username}\" cannot get resource \"pods/log\" in API group \"\" in the namespace \"{namespace}\"{reason}"
    )))
}
