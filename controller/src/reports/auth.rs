//! Who may send reports: the node agents' ServiceAccounts, proven by their projected token
//! (`authorization: Bearer <token>` gRPC metadata, audience `--agent-token-audience`), checked with a
//! TokenReview against the API server, as kube-rbac-proxy and the kubelet check tokens. The review
//! names the audience, so a token meant for the API server or another service is refused here.
//!
//! Results are cached briefly per token (bounded), so a reconnecting fleet of agents costs one review
//! per agent, not one per stream; a refusal is cached for less time than an acceptance. A token is
//! never logged.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use kube::api::{Api, PostParams};
use spark_operator_proto::tonic::metadata::MetadataMap;
use spark_operator_proto::tonic::{Code, Status};
use spark_operator_runtime::error_chain::ErrorChain;

use super::ServiceAccount;

/// How long an accepted token is trusted without another review (a deleted ServiceAccount's token is
/// refused at most this long after).
const ACCEPTED_FOR: Duration = Duration::from_secs(30);
/// How long a refused token is refused without another review.
const REFUSED_FOR: Duration = Duration::from_secs(5);
/// Tokens whose review is cached at most (an agent per node; a cluster of thousands of nodes still fits).
const MAX_CACHED: usize = 4096;
/// TokenReviews in flight at once: anyone who reaches the port can make the receiver send one per
/// stream with a new made-up token, and the API server must not feel it.
const MAX_REVIEWS_IN_FLIGHT: usize = 32;
/// Longest token considered (bound ServiceAccount tokens are around 1 KiB).
const MAX_TOKEN_BYTES: usize = 16 * 1024;

/// Why a stream of reports is refused.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Error {
    #[error(
        "no bearer token: the agent must send its ServiceAccount token as `authorization: Bearer <token>` metadata"
    )]
    MissingToken,
    #[error(
        "the `authorization` metadata is not `Bearer <token>` (or the token is longer than {MAX_TOKEN_BYTES} bytes)"
    )]
    MalformedToken,
    #[error("the API server did not accept the token: {why}")]
    NotAuthenticated { why: String },
    #[error(
        "the token is not issued for the audience {audience:?}: project the agent's token with `audience: {audience}` \
         (--agent-token-audience)"
    )]
    WrongAudience { audience: String },
    #[error(
        "{user} may not send termination reports: only the agents' ServiceAccounts may ({accepted}; --agent-service-account)"
    )]
    NotAnAgent { user: String, accepted: String },
    #[error("reviewing the agent's token with the API server (TokenReview)")]
    Review(#[source] kube::Error),
}

impl Error {
    /// The gRPC status the agent gets: who it is not (Unauthenticated), what it may not do
    /// (PermissionDenied), or that nobody could tell now (Unavailable: the agent retries).
    pub(crate) fn status(&self) -> Status {
        let code = match self {
            Error::MissingToken
            | Error::MalformedToken
            | Error::NotAuthenticated { .. }
            | Error::WrongAudience { .. } => Code::Unauthenticated,
            Error::NotAnAgent { .. } => Code::PermissionDenied,
            Error::Review(_) => Code::Unavailable,
        };
        Status::new(code, ErrorChain(self).to_string())
    }

    /// A copy for the cache: refusals are cached, failed reviews are not.
    fn cached(&self) -> Option<Error> {
        match self {
            Error::MissingToken => Some(Error::MissingToken),
            Error::MalformedToken => Some(Error::MalformedToken),
            Error::NotAuthenticated { why } => Some(Error::NotAuthenticated { why: why.clone() }),
            Error::WrongAudience { audience } => Some(Error::WrongAudience {
                audience: audience.clone(),
            }),
            Error::NotAnAgent { user, accepted } => Some(Error::NotAnAgent {
                user: user.clone(),
                accepted: accepted.clone(),
            }),
            Error::Review(_) => None,
        }
    }
}

struct Entry {
    at: Instant,
    outcome: Result<String, Error>,
}

impl Entry {
    fn fresh(&self, now: Instant) -> bool {
        let ttl = if self.outcome.is_ok() {
            ACCEPTED_FOR
        } else {
            REFUSED_FOR
        };
        now.duration_since(self.at) < ttl
    }
}

/// Checks agents' tokens.
pub(crate) struct Authenticator {
    reviews: Api<TokenReview>,
    audience: String,
    /// `system:serviceaccount:NS:NAME` of each accepted ServiceAccount.
    accepted: Vec<String>,
    cache: Mutex<HashMap<String, Entry>>,
    in_flight: tokio::sync::Semaphore,
}

impl std::fmt::Debug for Authenticator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Authenticator")
            .field("audience", &self.audience)
            .field("accepted", &self.accepted)
            .finish_non_exhaustive()
    }
}

impl Authenticator {
    pub(crate) fn new(client: kube::Client, audience: &str, accepted: &[ServiceAccount]) -> Self {
        Self {
            reviews: Api::all(client),
            audience: audience.to_owned(),
            accepted: accepted.iter().map(ServiceAccount::username).collect(),
            cache: Mutex::new(HashMap::new()),
            in_flight: tokio::sync::Semaphore::new(MAX_REVIEWS_IN_FLIGHT),
        }
    }

    /// The agent's user name (`system:serviceaccount:NS:NAME`) if the request's token is an accepted
    /// agent's.
    pub(crate) async fn authenticate(&self, metadata: &MetadataMap) -> Result<String, Error> {
        let token = bearer(metadata)?;
        let now = Instant::now();
        if let Some(entry) = self.lock().get(token).filter(|e| e.fresh(now)) {
            return match &entry.outcome {
                Ok(user) => Ok(user.clone()),
                Err(refusal) => Err(refusal.cached().unwrap_or(Error::MalformedToken)),
            };
        }
        let outcome = self.review(token).await;
        if let Some(cached) = match &outcome {
            Ok(user) => Some(Ok(user.clone())),
            Err(error) => error.cached().map(Err),
        } {
            self.remember(
                token,
                Entry {
                    at: now,
                    outcome: cached,
                },
            );
        }
        outcome
    }

    async fn review(&self, token: &str) -> Result<String, Error> {
        // Never closed, so acquiring fails only if it were; then review anyway.
        let _slot = self.in_flight.acquire().await.ok();
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: Some(token.to_owned()),
                audiences: Some(vec![self.audience.clone()]),
            },
            ..TokenReview::default()
        };
        let reviewed = self
            .reviews
            .create(&PostParams::default(), &review)
            .await
            .map_err(Error::Review)?;
        let status = reviewed.status.unwrap_or_default();
        if status.authenticated != Some(true) {
            return Err(Error::NotAuthenticated {
                why: status
                    .error
                    .filter(|e| !e.is_empty())
                    .unwrap_or_else(|| "invalid or expired token".to_owned()),
            });
        }
        // The API server says which of the requested audiences the token is for; none means it is not
        // bound to ours (Kubernetes asks clients to check this).
        if !status.audiences.iter().flatten().any(|a| *a == self.audience) {
            return Err(Error::WrongAudience {
                audience: self.audience.clone(),
            });
        }
        let user = status.user.and_then(|u| u.username).unwrap_or_default();
        if !self.accepted.contains(&user) {
            return Err(Error::NotAnAgent {
                user: if user.is_empty() {
                    "an anonymous user".to_owned()
                } else {
                    user
                },
                accepted: self.accepted.join(", "),
            });
        }
        Ok(user)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Entry>> {
        self.cache.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn remember(&self, token: &str, entry: Entry) {
        let mut cache = self.lock();
        if cache.len() >= MAX_CACHED && !cache.contains_key(token) {
            let now = Instant::now();
            cache.retain(|_, e| e.fresh(now));
            // Still full of fresh entries: the oldest goes.
            if cache.len() >= MAX_CACHED
                && let Some(oldest) = cache.iter().min_by_key(|(_, e)| e.at).map(|(t, _)| t.clone())
            {
                cache.remove(&oldest);
            }
        }
        cache.insert(token.to_owned(), entry);
    }

    #[cfg(test)]
    /// Tokens cached now (for tests).
    pub(crate) fn cached_tokens(&self) -> usize {
        self.lock().len()
    }
}

/// The token of `authorization: Bearer <token>`.
fn bearer(metadata: &MetadataMap) -> Result<&str, Error> {
    let value = metadata.get("authorization").ok_or(Error::MissingToken)?;
    let value = value.to_str().map_err(|_| Error::MalformedToken)?;
    let (scheme, token) = value.trim().split_once(' ').ok_or(Error::MalformedToken)?;
    let token = token.trim();
    if !scheme.eq_ignore_ascii_case("bearer") || token.is_empty() || token.len() > MAX_TOKEN_BYTES {
        return Err(Error::MalformedToken);
    }
    Ok(token)
}

#[cfg(test)]
mod tests {
    use spark_operator_proto::tonic::metadata::MetadataValue;

    use super::*;

    fn metadata(value: Option<&str>) -> MetadataMap {
        let mut map = MetadataMap::new();
        if let Some(value) = value {
            map.insert("authorization", MetadataValue::try_from(value).unwrap());
        }
        map
    }

    #[test]
    fn the_bearer_token_is_read_from_the_metadata() {
        assert_eq!(bearer(&metadata(Some("Bearer abc.def"))).unwrap(), "abc.def");
        assert_eq!(bearer(&metadata(Some("bearer  abc "))).unwrap(), "abc");
        assert!(matches!(bearer(&metadata(None)), Err(Error::MissingToken)));
        for bad in ["Basic abc", "Bearer", "Bearer ", "abc"] {
            assert!(
                matches!(bearer(&metadata(Some(bad))), Err(Error::MalformedToken)),
                "{bad}"
            );
        }
        let long = format!("Bearer {}", "a".repeat(MAX_TOKEN_BYTES + 1));
        assert!(matches!(bearer(&metadata(Some(&long))), Err(Error::MalformedToken)));
    }

    /// An authenticator whose API server is unreachable: any review it makes fails.
    fn offline() -> Authenticator {
        let config = kube::Config::new("http://127.0.0.1:1".parse().unwrap());
        let client = kube::Client::try_from(config).unwrap();
        let agents = [ServiceAccount {
            namespace: "spark-operator".into(),
            name: "spark-operator-agent".into(),
        }];
        Authenticator::new(client, "spark-operator", &agents)
    }

    #[tokio::test]
    async fn reviews_are_cached_briefly_and_boundedly() {
        let auth = offline();
        let agent = "system:serviceaccount:spark-operator:spark-operator-agent".to_owned();
        let now = Instant::now();
        auth.remember(
            "fresh",
            Entry {
                at: now,
                outcome: Ok(agent.clone()),
            },
        );
        auth.remember(
            "refused",
            Entry {
                at: now,
                outcome: Err(Error::NotAuthenticated { why: "expired".into() }),
            },
        );
        let old = now.checked_sub(ACCEPTED_FOR + Duration::from_secs(1)).unwrap();
        auth.remember(
            "stale",
            Entry {
                at: old,
                outcome: Ok(agent.clone()),
            },
        );
        // Answered from the cache: the API server is not asked (it cannot be reached).
        assert_eq!(auth.authenticate(&metadata(Some("Bearer fresh"))).await.unwrap(), agent);
        assert!(matches!(
            auth.authenticate(&metadata(Some("Bearer refused"))).await,
            Err(Error::NotAuthenticated { .. })
        ));
        // Past its time the token is reviewed again; a review that fails is not cached.
        let error = auth.authenticate(&metadata(Some("Bearer stale"))).await.unwrap_err();
        assert!(matches!(error, Error::Review(_)), "{error}");
        assert_eq!(error.status().code(), Code::Unavailable);
        let before = auth.cached_tokens();
        assert!(auth.authenticate(&metadata(Some("Bearer other"))).await.is_err());
        assert_eq!(auth.cached_tokens(), before, "failed reviews are not remembered");

        for i in 0..MAX_CACHED + 10 {
            auth.remember(
                &format!("token-{i}"),
                Entry {
                    at: Instant::now(),
                    outcome: Ok(agent.clone()),
                },
            );
        }
        assert_eq!(auth.cached_tokens(), MAX_CACHED);
    }

    #[test]
    fn refusals_map_to_grpc_codes_with_readable_messages() {
        let denied = Error::NotAnAgent {
            user: "system:serviceaccount:default:spark".into(),
            accepted: "system:serviceaccount:spark-operator:spark-operator-agent".into(),
        }
        .status();
        assert_eq!(denied.code(), Code::PermissionDenied);
        assert!(
            denied.message().contains("default:spark may not send"),
            "{}",
            denied.message()
        );
        assert_eq!(Error::MissingToken.status().code(), Code::Unauthenticated);
        let audience = Error::WrongAudience {
            audience: "spark-operator".into(),
        }
        .status();
        assert_eq!(audience.code(), Code::Unauthenticated);
        assert!(audience.message().contains("audience: spark-operator"));
    }
}
