//! The review APIs, answered and never stored, as kube-apiserver serves them:
//! `authentication.k8s.io/v1` TokenReview and SelfSubjectReview (`kubectl auth whoami`),
//! `authorization.k8s.io/v1` SubjectAccessReview, SelfSubjectAccessReview (`kubectl auth can-i`),
//! LocalSubjectAccessReview and SelfSubjectRulesReview (`kubectl auth can-i --list`), and the
//! `serviceaccounts/token` subresource (TokenRequest), which mints a bound token with
//! [`crate::service_account_tokens`].

use serde_json::{Value, json};

use super::rules::PolicyRule;
use super::{Attributes, AuthorizationMode, Decision, authorize, rbac};
use crate::admission_seam::UserInfo;
use crate::registry::ResourceKey;
use crate::service_account_tokens::{self, ISSUER, ObjectRef, TokenRequest, TokenSigner};
use crate::status::{ApiError, FieldCause};
use crate::store::Store;

pub const AUTHENTICATION: &str = "authentication.k8s.io";
pub const AUTHORIZATION: &str = "authorization.k8s.io";

/// The API server's bearer-token authentication for the given audiences (TokenReview): the user,
/// or why the token was not accepted.
pub type TokenAuthenticator<'a> = dyn Fn(&str, &[String]) -> Result<UserInfo, String> + Sync + 'a;

/// What answering a review needs.
pub struct ReviewContext<'a> {
    pub store: &'a Store,
    pub mode: Option<AuthorizationMode>,
    pub signer: &'a TokenSigner,
    pub authenticate_token: &'a TokenAuthenticator<'a>,
    /// Who asks.
    pub user: &'a UserInfo,
}

/// Whether `(group, resource, subresource)` is answered here rather than stored.
pub fn is_review(group: &str, resource: &str, subresource: Option<&str>) -> bool {
    matches!(
        (group, resource, subresource),
        (AUTHENTICATION, "tokenreviews" | "selfsubjectreviews", None)
            | (
                AUTHORIZATION,
                "subjectaccessreviews"
                    | "selfsubjectaccessreviews"
                    | "localsubjectaccessreviews"
                    | "selfsubjectrulesreviews",
                None,
            )
            | ("", "serviceaccounts", Some("token"))
    )
}

/// Answers a POST of `body` to a review resource (201 and the review with its status).
pub fn serve(
    ctx: &ReviewContext<'_>,
    group: &str,
    resource: &str,
    namespace: &str,
    name: &str,
    body: Value,
) -> Result<Value, ApiError> {
    let mut review = body;
    if !review.is_object() {
        return Err(ApiError::BadRequest("the request body must be an object".into()));
    }
    let status = match (group, resource) {
        (AUTHENTICATION, "tokenreviews") => token_review(ctx, &review)?,
        (AUTHENTICATION, "selfsubjectreviews") => json!({ "userInfo": user_info(ctx.user) }),
        (AUTHORIZATION, "subjectaccessreviews") => subject_access_review(ctx, &review)?,
        (AUTHORIZATION, "localsubjectaccessreviews") => {
            let ns_in_spec = review
                .pointer("/spec/resourceAttributes/namespace")
                .and_then(Value::as_str)
                .unwrap_or("");
            if review.pointer("/spec/resourceAttributes").is_none() || ns_in_spec != namespace {
                return Err(ApiError::BadRequest(format!(
                    "spec.resourceAttributes.namespace must match namespace: {namespace}"
                )));
            }
            subject_access_review(ctx, &review)?
        }
        (AUTHORIZATION, "selfsubjectaccessreviews") => {
            let attrs = spec_attributes(&review, "SelfSubjectAccessReview")?;
            decision_status(decide(ctx, ctx.user, &attrs))
        }
        (AUTHORIZATION, "selfsubjectrulesreviews") => {
            let ns = review.pointer("/spec/namespace").and_then(Value::as_str).unwrap_or("");
            rules_review(ctx, ctx.user, ns)
        }
        ("", "serviceaccounts") => return token_request(ctx, namespace, name, review),
        _ => return Err(ApiError::ResourceNotServed),
    };
    let kind = match resource {
        "tokenreviews" => "TokenReview",
        "selfsubjectreviews" => "SelfSubjectReview",
        "subjectaccessreviews" => "SubjectAccessReview",
        "localsubjectaccessreviews" => "LocalSubjectAccessReview",
        "selfsubjectaccessreviews" => "SelfSubjectAccessReview",
        _ => "SelfSubjectRulesReview",
    };
    review["apiVersion"] = json!(format!("{group}/v1"));
    review["kind"] = json!(kind);
    let mut metadata = review.get("metadata").cloned().unwrap_or_else(|| json!({}));
    if !metadata.is_object() {
        metadata = json!({});
    }
    metadata["creationTimestamp"] = Value::Null;
    review["metadata"] = metadata;
    if review.get("spec").is_none() {
        review["spec"] = json!({});
    }
    review["status"] = status;
    Ok(review)
}

fn user_info(u: &UserInfo) -> Value {
    let mut v = json!({ "username": u.username, "groups": u.groups });
    if !u.uid.is_empty() {
        v["uid"] = json!(u.uid);
    }
    v
}

fn decide(ctx: &ReviewContext<'_>, user: &UserInfo, attrs: &Attributes) -> Decision {
    match ctx.mode {
        Some(mode) => authorize(ctx.store, mode, user, attrs),
        None => Decision {
            allowed: true,
            reason: String::new(),
        },
    }
}

fn decision_status(d: Decision) -> Value {
    let mut s = json!({ "allowed": d.allowed });
    if !d.reason.is_empty() {
        s["reason"] = json!(d.reason);
    }
    s
}

fn invalid(kind: &str, cause: FieldCause) -> ApiError {
    ApiError::invalid(AUTHORIZATION, kind, "", vec![cause])
}

/// The attributes a review's spec asks about (exactly one of resource and non-resource).
fn spec_attributes(review: &Value, kind: &str) -> Result<Attributes, ApiError> {
    let spec = review.get("spec").cloned().unwrap_or(Value::Null);
    let s = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).unwrap_or("").to_string();
    match (spec.get("resourceAttributes"), spec.get("nonResourceAttributes")) {
        (Some(r), None) if r.is_object() => Ok(Attributes {
            verb: s(r, "verb"),
            resource_request: true,
            api_group: s(r, "group"),
            api_version: s(r, "version"),
            resource: s(r, "resource"),
            subresource: s(r, "subresource"),
            namespace: s(r, "namespace"),
            name: s(r, "name"),
            path: String::new(),
        }),
        (None, Some(n)) if n.is_object() => Ok(Attributes::non_resource(&s(n, "verb"), &s(n, "path"))),
        (Some(_), Some(_)) => Err(invalid(
            kind,
            FieldCause::invalid(
                "spec.nonResourceAttributes",
                &json!(""),
                "cannot be specified in combination with resourceAttributes",
            ),
        )),
        _ => Err(invalid(
            kind,
            FieldCause::invalid(
                "spec.resourceAttributes",
                &json!(""),
                "exactly one of nonResourceAttributes or resourceAttributes must be specified",
            ),
        )),
    }
}

fn subject_access_review(ctx: &ReviewContext<'_>, review: &Value) -> Result<Value, ApiError> {
    let kind = review
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or("SubjectAccessReview");
    let attrs = spec_attributes(review, kind)?;
    let spec = &review["spec"];
    let user = UserInfo {
        username: spec.get("user").and_then(Value::as_str).unwrap_or("").to_string(),
        uid: spec.get("uid").and_then(Value::as_str).unwrap_or("").to_string(),
        groups: spec
            .get("groups")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .map(str::to_string)
            .collect(),
    };
    if user.username.is_empty() && user.groups.is_empty() {
        return Err(invalid(
            kind,
            FieldCause::invalid(
                "spec.user",
                &json!(""),
                "at least one of user or group must be specified",
            ),
        ));
    }
    Ok(decision_status(decide(ctx, &user, &attrs)))
}

/// `SelfSubjectRulesReview`: the rules the user holds in a namespace (cluster-wide ones included).
fn rules_review(ctx: &ReviewContext<'_>, user: &UserInfo, namespace: &str) -> Value {
    let (rules, errors) = match ctx.mode {
        Some(AuthorizationMode::Rbac) => rbac::rules_for(ctx.store, user, namespace),
        // AlwaysAllow (or no authorization): everything.
        _ => (
            vec![
                PolicyRule {
                    verbs: vec!["*".into()],
                    api_groups: vec!["*".into()],
                    resources: vec!["*".into()],
                    ..Default::default()
                },
                PolicyRule {
                    verbs: vec!["*".into()],
                    non_resource_urls: vec!["*".into()],
                    ..Default::default()
                },
            ],
            vec![],
        ),
    };
    let mut resource_rules = Vec::new();
    let mut non_resource_rules = Vec::new();
    for r in rules {
        if !r.resources.is_empty() {
            let mut v = json!({ "verbs": r.verbs, "apiGroups": r.api_groups, "resources": r.resources });
            if !r.resource_names.is_empty() {
                v["resourceNames"] = json!(r.resource_names);
            }
            resource_rules.push(v);
        }
        if !r.non_resource_urls.is_empty() {
            non_resource_rules.push(json!({ "verbs": r.verbs, "nonResourceURLs": r.non_resource_urls }));
        }
    }
    let mut status = json!({
        "resourceRules": resource_rules,
        "nonResourceRules": non_resource_rules,
        "incomplete": !errors.is_empty(),
    });
    if !errors.is_empty() {
        status["evaluationError"] = json!(rbac::aggregate(&errors));
    }
    status
}

fn token_review(ctx: &ReviewContext<'_>, review: &Value) -> Result<Value, ApiError> {
    let token = review.pointer("/spec/token").and_then(Value::as_str).unwrap_or("");
    if token.is_empty() {
        return Err(ApiError::invalid(
            AUTHENTICATION,
            "TokenReview",
            "",
            vec![FieldCause::required("spec.token")],
        ));
    }
    let mut audiences: Vec<String> = review
        .pointer("/spec/audiences")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(str::to_string)
        .collect();
    if audiences.is_empty() {
        audiences = vec![ISSUER.to_string()];
    }
    Ok(match (ctx.authenticate_token)(token, &audiences) {
        Ok(user) => json!({ "authenticated": true, "user": user_info(&user), "audiences": audiences }),
        Err(e) => json!({ "authenticated": false, "user": {}, "error": e }),
    })
}

/// `POST .../serviceaccounts/<name>/token`.
fn token_request(ctx: &ReviewContext<'_>, namespace: &str, name: &str, body: Value) -> Result<Value, ApiError> {
    let get = |resource: &str, ns: &str, n: &str| {
        ctx.store.get_stored(
            &ResourceKey {
                group: String::new(),
                resource: resource.into(),
            },
            ns,
            n,
        )
    };
    let sa = get("serviceaccounts", namespace, name).ok_or_else(|| ApiError::not_found("", "serviceaccounts", name))?;
    let spec = body.get("spec").cloned().unwrap_or_else(|| json!({}));
    let expiration = spec
        .get("expirationSeconds")
        .and_then(Value::as_i64)
        .unwrap_or(service_account_tokens::DEFAULT_EXPIRATION_SECONDS);
    let invalid = |field: &str, value: Value, detail: &str| {
        ApiError::invalid(
            AUTHENTICATION,
            "TokenRequest",
            name,
            vec![FieldCause::invalid(field, &value, detail)],
        )
    };
    if expiration < 600 {
        return Err(invalid(
            "spec.expirationSeconds",
            json!(expiration),
            "may not specify a duration less than 10 minutes",
        ));
    }
    if expiration > 1 << 32 {
        return Err(invalid(
            "spec.expirationSeconds",
            json!(expiration),
            "may not specify a duration larger than 2^32 seconds",
        ));
    }
    let audiences: Vec<String> = spec
        .get("audiences")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(str::to_string)
        .collect();
    let mut pod = None;
    let mut node = None;
    if let Some(bound) = spec.get("boundObjectRef").filter(|b| b.is_object()) {
        let s = |k: &str| bound.get(k).and_then(Value::as_str).unwrap_or("").to_string();
        let (kind, bound_name, uid) = (s("kind"), s("name"), s("uid"));
        let (resource, ns) = match kind.as_str() {
            "Pod" => ("pods", namespace),
            "Node" => ("nodes", ""),
            "Secret" => {
                return Err(ApiError::BadRequest(
                    "kube-sim does not bind tokens to Secrets (boundObjectRef.kind Secret)".into(),
                ));
            }
            other => {
                return Err(invalid(
                    "spec.boundObjectRef.kind",
                    json!(other),
                    "supported values: \"Pod\", \"Node\", \"Secret\"",
                ));
            }
        };
        let obj = get(resource, ns, &bound_name).ok_or_else(|| ApiError::not_found("", resource, &bound_name))?;
        let actual_uid = crate::meta::uid(&obj).to_string();
        if !uid.is_empty() && uid != actual_uid {
            return Err(ApiError::Conflict {
                target: crate::status::Target::new("", resource, &bound_name),
                detail: format!(
                    "the UID in the bound object reference ({uid}) does not match the UID in record. The object might have been deleted and then recreated"
                ),
            });
        }
        let r = Some(ObjectRef::new(bound_name, actual_uid));
        if resource == "pods" {
            // A pod-bound token also names the pod's node, as kube-apiserver adds it.
            if let Some(node_name) = obj.pointer("/spec/nodeName").and_then(Value::as_str)
                && let Some(n) = get("nodes", "", node_name)
            {
                node = Some(ObjectRef::new(node_name, crate::meta::uid(&n)));
            }
            pod = r;
        } else {
            node = r;
        }
    }
    let now = jiff::Timestamp::now().as_second();
    let token = ctx.signer.mint(
        &TokenRequest {
            namespace: namespace.to_string(),
            service_account: ObjectRef::new(name, crate::meta::uid(&sa)),
            pod,
            node,
            audiences: audiences.clone(),
            expiration_seconds: expiration,
        },
        now,
    );
    let exp = ctx
        .signer
        .verify_signature(&token)
        .map(|c| c.exp)
        .unwrap_or(now + expiration);
    let expiration_timestamp = jiff::Timestamp::from_second(exp)
        .map(|t| t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string())
        .unwrap_or_default();
    let mut out_spec = spec;
    out_spec["audiences"] = json!(if audiences.is_empty() {
        vec![ISSUER.to_string()]
    } else {
        audiences
    });
    out_spec["expirationSeconds"] = json!(expiration);
    if out_spec.get("boundObjectRef").is_none() {
        out_spec["boundObjectRef"] = Value::Null;
    }
    Ok(json!({
        "kind": "TokenRequest",
        "apiVersion": "authentication.k8s.io/v1",
        "metadata": { "name": name, "namespace": namespace, "creationTimestamp": null },
        "spec": out_spec,
        "status": { "token": token, "expirationTimestamp": expiration_timestamp },
    }))
}
