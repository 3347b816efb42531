//! Bound ServiceAccount tokens, as kube-apiserver's TokenRequest issues them to kubelets and its
//! ServiceAccount authenticator accepts them: JWTs (`header.payload.signature`, base64url) with
//! the bound-token claims (`iss`, `sub`, `aud`, `exp`, `iat`, `nbf`, `jti`, and `kubernetes.io`
//! naming the namespace, the ServiceAccount, the pod and the node by name and uid).
//!
//! Differences from a real cluster: tokens are signed with HMAC-SHA256 (`alg: HS256`) under a
//! random key made per sim (a real apiserver signs RS256/ES256 with `--service-account-key-file`,
//! and publishes the keys at `/openid/v1/jwks`, which the sim does not serve); tokens bound to a
//! Secret (legacy) are not issued.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ring::hmac;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::admission_seam::UserInfo;
use crate::registry::ResourceKey;
use crate::store::Store;

/// kube-apiserver's `--service-account-issuer` in a default cluster (kubeadm, kind).
pub const ISSUER: &str = "https://kubernetes.default.svc.cluster.local";

/// What a projected `serviceAccountToken` gets when it asks for no `expirationSeconds` (the
/// API's default for the field).
pub const DEFAULT_EXPIRATION_SECONDS: i64 = 3600;

/// The expiration the ServiceAccount admission asks for in `kube-api-access-*` volumes. With
/// `--service-account-extend-token-expiration` (on by default) the apiserver issues such pod-bound
/// tokens for a year instead, with a `warnafter` claim at the requested expiration, so that
/// clients that never re-read the file keep working.
pub const WARN_ONLY_EXPIRATION_SECONDS: i64 = 3607;
const EXTENDED_EXPIRATION_SECONDS: i64 = 365 * 24 * 3600;

/// go-jose's `DefaultLeeway`, which the authenticator allows on `exp`, `nbf` and deletions.
const LEEWAY_SECONDS: i64 = 60;

/// An object a token is bound to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObjectRef {
    pub name: String,
    pub uid: String,
}

impl ObjectRef {
    pub fn new(name: impl Into<String>, uid: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            uid: uid.into(),
        }
    }
}

/// What to mint a token for (a TokenRequest with its bound object).
#[derive(Debug, Clone)]
pub struct TokenRequest {
    pub namespace: String,
    pub service_account: ObjectRef,
    pub pod: Option<ObjectRef>,
    pub node: Option<ObjectRef>,
    /// Empty: the API server's own audience (the issuer).
    pub audiences: Vec<String>,
    pub expiration_seconds: i64,
}

/// The `kubernetes.io` claim.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KubernetesClaims {
    pub namespace: String,
    pub serviceaccount: ObjectRef,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<ObjectRef>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<ObjectRef>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warnafter: Option<i64>,
}

/// A token's payload.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Claims {
    pub aud: Vec<String>,
    pub exp: i64,
    pub iat: i64,
    pub iss: String,
    pub jti: String,
    #[serde(rename = "kubernetes.io")]
    pub kubernetes: KubernetesClaims,
    pub nbf: i64,
    pub sub: String,
}

/// Why a bearer token was not accepted (the reason the apiserver logs; clients only see 401).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TokenError {
    #[error("token is not a JWT")]
    Malformed,
    #[error("token signature is invalid")]
    Signature,
    #[error("token issuer {0:?} is not {ISSUER:?}")]
    Issuer(String),
    #[error("token audiences {0:?} is invalid for the target audiences [\"{ISSUER}\"]")]
    Audience(Vec<String>),
    #[error("service account token has expired")]
    Expired,
    #[error("service account token is not valid yet")]
    NotValidYet,
    #[error("serviceaccounts {0:?} not found")]
    ServiceAccountNotFound(String),
    #[error("service account {0} has been deleted")]
    ServiceAccountDeleted(String),
    #[error("service account UID ({actual}) does not match claim ({claim})")]
    ServiceAccountUid { actual: String, claim: String },
    #[error("service account token has been invalidated")]
    Invalidated,
    #[error("pod UID ({actual}) does not match service account pod ref claim ({claim})")]
    PodUid { actual: String, claim: String },
}

/// Signs and verifies a sim's ServiceAccount tokens.
pub struct TokenSigner {
    key: hmac::Key,
    /// The JWT header's `kid`: lets a reader tell two sims' tokens apart.
    key_id: String,
}

impl std::fmt::Debug for TokenSigner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenSigner").field("key_id", &self.key_id).finish()
    }
}

impl Default for TokenSigner {
    fn default() -> Self {
        Self::new()
    }
}

impl TokenSigner {
    /// A signer with a fresh random key.
    pub fn new() -> Self {
        // A v4 uuid is 122 random bits from the OS; two of them make a 256-bit key.
        let mut secret = Vec::with_capacity(32);
        secret.extend_from_slice(uuid::Uuid::new_v4().as_bytes());
        secret.extend_from_slice(uuid::Uuid::new_v4().as_bytes());
        Self {
            key: hmac::Key::new(hmac::HMAC_SHA256, &secret),
            key_id: uuid::Uuid::new_v4().simple().to_string(),
        }
    }

    /// Mints a token as the TokenRequest API does at `now` (unix seconds).
    pub fn mint(&self, req: &TokenRequest, now: i64) -> String {
        let audiences = if req.audiences.is_empty() {
            vec![ISSUER.to_string()]
        } else {
            req.audiences.clone()
        };
        let mut exp = req.expiration_seconds;
        let mut warnafter = None;
        if req.pod.is_some() && exp == WARN_ONLY_EXPIRATION_SECONDS && audiences.iter().all(|a| a == ISSUER) {
            warnafter = Some(now + exp);
            exp = EXTENDED_EXPIRATION_SECONDS;
        }
        let claims = Claims {
            aud: audiences,
            exp: now + exp,
            iat: now,
            iss: ISSUER.into(),
            jti: uuid::Uuid::new_v4().to_string(),
            kubernetes: KubernetesClaims {
                namespace: req.namespace.clone(),
                serviceaccount: req.service_account.clone(),
                pod: req.pod.clone(),
                node: req.node.clone(),
                warnafter,
            },
            nbf: now,
            sub: format!("system:serviceaccount:{}:{}", req.namespace, req.service_account.name),
        };
        self.sign(&claims)
    }

    /// Signs arbitrary claims (tests make expired or odd tokens with it).
    pub fn sign(&self, claims: &Claims) -> String {
        let header = serde_json::json!({ "alg": "HS256", "kid": self.key_id });
        let payload = serde_json::to_vec(claims).unwrap_or_default();
        let signing_input = format!(
            "{}.{}",
            URL_SAFE_NO_PAD.encode(header.to_string()),
            URL_SAFE_NO_PAD.encode(payload)
        );
        let tag = hmac::sign(&self.key, signing_input.as_bytes());
        format!("{signing_input}.{}", URL_SAFE_NO_PAD.encode(tag.as_ref()))
    }

    /// Checks the signature, issuer, audience and validity window; returns the claims.
    pub fn verify(&self, token: &str, now: i64) -> Result<Claims, TokenError> {
        self.verify_for(token, now, &[ISSUER.to_string()])
    }

    /// [`TokenSigner::verify`] for other audiences (a TokenReview's `spec.audiences`): the
    /// token must be for at least one of them.
    pub fn verify_for(&self, token: &str, now: i64, audiences: &[String]) -> Result<Claims, TokenError> {
        let claims = self.verify_signature(token)?;
        if claims.iss != ISSUER {
            return Err(TokenError::Issuer(claims.iss));
        }
        if !claims.aud.iter().any(|a| audiences.contains(a)) {
            return Err(TokenError::Audience(claims.aud));
        }
        if now > claims.exp + LEEWAY_SECONDS {
            return Err(TokenError::Expired);
        }
        if now + LEEWAY_SECONDS < claims.nbf {
            return Err(TokenError::NotValidYet);
        }
        Ok(claims)
    }

    /// The claims of a token this signer made, whatever its audience and times.
    pub fn verify_signature(&self, token: &str) -> Result<Claims, TokenError> {
        let (signing_input, signature) = token.rsplit_once('.').ok_or(TokenError::Malformed)?;
        let Some((header, payload)) = signing_input.split_once('.') else {
            return Err(TokenError::Malformed);
        };
        if payload.contains('.') {
            return Err(TokenError::Malformed);
        }
        let header: Value = URL_SAFE_NO_PAD
            .decode(header)
            .ok()
            .and_then(|h| serde_json::from_slice(&h).ok())
            .ok_or(TokenError::Malformed)?;
        if header.get("alg").and_then(Value::as_str) != Some("HS256") {
            return Err(TokenError::Signature);
        }
        let signature = URL_SAFE_NO_PAD.decode(signature).map_err(|_| TokenError::Malformed)?;
        hmac::verify(&self.key, signing_input.as_bytes(), &signature).map_err(|_| TokenError::Signature)?;
        let claims: Claims = URL_SAFE_NO_PAD
            .decode(payload)
            .ok()
            .and_then(|p| serde_json::from_slice(&p).ok())
            .ok_or(TokenError::Malformed)?;
        Ok(claims)
    }

    /// The ServiceAccount authenticator: a valid token whose ServiceAccount and pod still exist
    /// (same uid, not deleted for longer than the leeway) is `system:serviceaccount:<ns>:<sa>`.
    pub fn authenticate(&self, store: &Store, token: &str, now: i64) -> Result<UserInfo, TokenError> {
        self.authenticate_for(store, token, now, &[ISSUER.to_string()])
    }

    /// [`TokenSigner::authenticate`] for other audiences (TokenReview).
    pub fn authenticate_for(
        &self,
        store: &Store,
        token: &str,
        now: i64,
        audiences: &[String],
    ) -> Result<UserInfo, TokenError> {
        let claims = self.verify_for(token, now, audiences)?;
        let k = &claims.kubernetes;
        let ns = k.namespace.as_str();
        let deleted_long_ago = |obj: &Value| {
            obj.pointer("/metadata/deletionTimestamp")
                .and_then(Value::as_str)
                .and_then(crate::meta::parse_time)
                .is_some_and(|t| t.as_second() < now - LEEWAY_SECONDS)
        };
        let sa = get(store, "serviceaccounts", ns, &k.serviceaccount.name)
            .ok_or_else(|| TokenError::ServiceAccountNotFound(k.serviceaccount.name.clone()))?;
        if deleted_long_ago(&sa) {
            return Err(TokenError::ServiceAccountDeleted(format!(
                "{ns}/{}",
                k.serviceaccount.name
            )));
        }
        if crate::meta::uid(&sa) != k.serviceaccount.uid {
            return Err(TokenError::ServiceAccountUid {
                actual: crate::meta::uid(&sa).to_string(),
                claim: k.serviceaccount.uid.clone(),
            });
        }
        if let Some(pod_ref) = &k.pod {
            let pod = get(store, "pods", ns, &pod_ref.name).ok_or(TokenError::Invalidated)?;
            if deleted_long_ago(&pod) {
                return Err(TokenError::Invalidated);
            }
            if crate::meta::uid(&pod) != pod_ref.uid {
                return Err(TokenError::PodUid {
                    actual: crate::meta::uid(&pod).to_string(),
                    claim: pod_ref.uid.clone(),
                });
            }
        }
        Ok(UserInfo {
            username: format!("system:serviceaccount:{ns}:{}", k.serviceaccount.name),
            uid: k.serviceaccount.uid.clone(),
            groups: vec![
                "system:serviceaccounts".into(),
                format!("system:serviceaccounts:{ns}"),
                "system:authenticated".into(),
            ],
        })
    }
}

fn get(store: &Store, resource: &str, ns: &str, name: &str) -> Option<std::sync::Arc<Value>> {
    store.get_stored(
        &ResourceKey {
            group: String::new(),
            resource: resource.into(),
        },
        ns,
        name,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(exp: i64) -> TokenRequest {
        TokenRequest {
            namespace: "ns".into(),
            service_account: ObjectRef::new("sa", "sa-uid"),
            pod: Some(ObjectRef::new("p", "p-uid")),
            node: Some(ObjectRef::new("n", "n-uid")),
            audiences: vec![],
            expiration_seconds: exp,
        }
    }

    fn decode_part(token: &str, i: usize) -> Value {
        let part = token.split('.').nth(i).unwrap_or_default();
        serde_json::from_slice(&URL_SAFE_NO_PAD.decode(part).unwrap_or_default()).unwrap_or(Value::Null)
    }

    #[test]
    fn mints_bound_token_claims() {
        let s = TokenSigner::new();
        let t = s.mint(&request(600), 1000);
        assert_eq!(decode_part(&t, 0)["alg"], "HS256");
        let c = decode_part(&t, 1);
        assert_eq!(c["iss"], ISSUER);
        assert_eq!(c["sub"], "system:serviceaccount:ns:sa");
        assert_eq!(c["aud"], serde_json::json!([ISSUER]));
        assert_eq!(
            (c["iat"].as_i64(), c["nbf"].as_i64(), c["exp"].as_i64()),
            (Some(1000), Some(1000), Some(1600))
        );
        assert_eq!(c["kubernetes.io"]["serviceaccount"]["uid"], "sa-uid");
        assert_eq!(c["kubernetes.io"]["pod"]["name"], "p");
        assert_eq!(c["kubernetes.io"]["node"]["uid"], "n-uid");
        assert!(c["kubernetes.io"].get("warnafter").is_none());
        assert!(s.verify(&t, 1500).is_ok());
    }

    #[test]
    fn the_admission_default_is_extended_with_warnafter() {
        let s = TokenSigner::new();
        let c = decode_part(&s.mint(&request(3607), 0), 1);
        assert_eq!(c["exp"].as_i64(), Some(EXTENDED_EXPIRATION_SECONDS));
        assert_eq!(c["kubernetes.io"]["warnafter"].as_i64(), Some(3607));
        // Not for other audiences.
        let mut r = request(3607);
        r.audiences = vec!["vault".into()];
        assert_eq!(decode_part(&s.mint(&r, 0), 1)["exp"].as_i64(), Some(3607));
    }

    #[test]
    fn rejects_forged_expired_early_and_foreign_tokens() {
        let s = TokenSigner::new();
        let t = s.mint(&request(600), 1000);
        assert_eq!(s.verify(&t, 1600 + 61), Err(TokenError::Expired));
        assert!(s.verify(&t, 1600 + 60).is_ok(), "one minute of leeway");
        assert_eq!(s.verify(&t, 1000 - 61), Err(TokenError::NotValidYet));
        assert_eq!(TokenSigner::new().verify(&t, 1000), Err(TokenError::Signature));
        let mut parts: Vec<&str> = t.split('.').collect();
        let mut claims = decode_part(&t, 1);
        claims["sub"] = "system:serviceaccount:kube-system:admin".into();
        let forged = URL_SAFE_NO_PAD.encode(claims.to_string());
        parts[1] = &forged;
        assert_eq!(s.verify(&parts.join("."), 1000), Err(TokenError::Signature));
        assert_eq!(s.verify("abc", 1000), Err(TokenError::Malformed));
        assert_eq!(s.verify("a.b.c.d", 1000), Err(TokenError::Malformed));
        let mut r = request(600);
        r.audiences = vec!["vault".into()];
        assert_eq!(
            s.verify(&s.mint(&r, 1000), 1000),
            Err(TokenError::Audience(vec!["vault".into()]))
        );
    }
}
