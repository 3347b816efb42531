//! Authorization, as kube-apiserver's `--authorization-mode` authorizers decide it.
//!
//! - [`AuthorizationMode::Rbac`] (the default) is the RBAC authorizer (`rbac.go`): Roles,
//!   ClusterRoles and their bindings read from the store at every decision ([`rules`] holds the
//!   matching), with the bootstrap policy ([`bootstrap`]) created at start and ClusterRole
//!   aggregation kept up by [`aggregation`]; [`AuthorizationMode::AlwaysAllow`] allows everything.
//! - Members of `system:masters` are always allowed (the privileged-group authorizer that runs
//!   before the configured ones).
//! - [`escalation`] refuses Roles and bindings that grant more than their author holds.
//! - [`impersonation`] turns `Impersonate-*` headers into the acting user; [`reviews`] serves
//!   TokenReview, TokenRequest, SelfSubjectReview and the four access reviews.
//!
//! Every HTTP request is authorized by the API server before it is handled; in-process writers
//! that act as a user (the fake Spark driver) ask [`crate::store::Store::authorize`] — the same
//! decision — before they write. In-process controllers write as themselves unchecked, as
//! system components whose bootstrap roles would allow them.

pub mod aggregation;
pub mod bootstrap;
pub mod escalation;
pub mod impersonation;
pub(crate) mod rbac;
pub mod reviews;
pub mod rules;
pub mod spark;

use serde_json::json;

use crate::admission_seam::UserInfo;
use crate::status::ApiError;
use crate::store::Store;

/// `system:masters`: always allowed, never subject to escalation checks.
pub const PRIVILEGED_GROUP: &str = "system:masters";
pub const ALL_AUTHENTICATED: &str = "system:authenticated";
pub const ALL_UNAUTHENTICATED: &str = "system:unauthenticated";
pub const ANONYMOUS: &str = "system:anonymous";

/// kube-apiserver's `--authorization-mode` (the sim knows two).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum AuthorizationMode {
    #[default]
    Rbac,
    AlwaysAllow,
}

/// A mode that is not one of the sim's.
#[derive(Debug, thiserror::Error)]
#[error("authorization mode {0:?} is not supported: choose RBAC or AlwaysAllow")]
pub struct UnknownMode(String);

impl std::str::FromStr for AuthorizationMode {
    type Err = UnknownMode;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "RBAC" => Ok(Self::Rbac),
            "AlwaysAllow" => Ok(Self::AlwaysAllow),
            other => Err(UnknownMode(other.to_string())),
        }
    }
}

impl std::fmt::Display for AuthorizationMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Rbac => "RBAC",
            Self::AlwaysAllow => "AlwaysAllow",
        })
    }
}

/// What is asked (`authorizer.Attributes`, as the apiserver's `RequestInfo` derives them).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Attributes {
    pub verb: String,
    /// Resource requests: group, version, resource, subresource, namespace, name.
    pub resource_request: bool,
    pub api_group: String,
    pub api_version: String,
    pub resource: String,
    pub subresource: String,
    pub namespace: String,
    pub name: String,
    /// Non-resource requests: the URL path.
    pub path: String,
}

impl Attributes {
    /// A resource request.
    pub fn resource(verb: &str, group: &str, resource: &str, namespace: &str, name: &str) -> Self {
        Self {
            verb: verb.into(),
            resource_request: true,
            api_group: group.into(),
            resource: resource.into(),
            namespace: namespace.into(),
            name: name.into(),
            ..Default::default()
        }
    }

    pub fn with_subresource(mut self, subresource: &str) -> Self {
        self.subresource = subresource.into();
        self
    }

    /// A non-resource request (`/healthz`, `/apis`, ...).
    pub fn non_resource(verb: &str, path: &str) -> Self {
        Self {
            verb: verb.into(),
            path: path.into(),
            ..Default::default()
        }
    }
}

/// An authorizer's answer; `reason` is what a SubjectAccessReview reports.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Decision {
    pub allowed: bool,
    pub reason: String,
}

/// Decides `attrs` for `user` under `mode`.
pub fn authorize(store: &Store, mode: AuthorizationMode, user: &UserInfo, attrs: &Attributes) -> Decision {
    if user.groups.iter().any(|g| g == PRIVILEGED_GROUP) {
        return Decision {
            allowed: true,
            reason: String::new(),
        };
    }
    match mode {
        AuthorizationMode::AlwaysAllow => Decision {
            allowed: true,
            reason: String::new(),
        },
        AuthorizationMode::Rbac => rbac::authorize(store, user, attrs),
    }
}

/// The 403 kube-apiserver answers a denied request with (`responsewriters.ForbiddenStatusError`).
pub fn forbidden(user: &UserInfo, attrs: &Attributes, reason: &str) -> ApiError {
    let msg = forbidden_message(user, attrs);
    let msg = if reason.is_empty() {
        msg
    } else {
        format!("{msg}: {reason}")
    };
    forbidden_error(&attrs.api_group, &attrs.resource, &attrs.name, &msg)
}

/// `apierrors.NewForbidden(groupResource, name, err)`.
pub fn forbidden_error(group: &str, resource: &str, name: &str, err: &str) -> ApiError {
    let qualified = if group.is_empty() {
        resource.to_string()
    } else {
        format!("{resource}.{group}")
    };
    let message = if qualified.is_empty() {
        format!("forbidden: {err}")
    } else if name.is_empty() {
        format!("{qualified} is forbidden: {err}")
    } else {
        format!("{qualified} \"{name}\" is forbidden: {err}")
    };
    let mut details = json!({});
    if !resource.is_empty() {
        details["kind"] = json!(resource);
    }
    if !name.is_empty() {
        details["name"] = json!(name);
    }
    if !group.is_empty() {
        details["group"] = json!(group);
    }
    ApiError::Custom {
        code: 403,
        reason: "Forbidden".into(),
        message,
        details: Some(details),
    }
}

/// `forbiddenMessage`.
fn forbidden_message(user: &UserInfo, a: &Attributes) -> String {
    let who = rules::go_quote(&user.username);
    if !a.resource_request {
        return format!("User {who} cannot {} path {}", a.verb, rules::go_quote(&a.path));
    }
    let resource = if a.subresource.is_empty() {
        a.resource.clone()
    } else {
        format!("{}/{}", a.resource, a.subresource)
    };
    let (res, group) = (rules::go_quote(&resource), rules::go_quote(&a.api_group));
    if a.namespace.is_empty() {
        format!(
            "User {who} cannot {} resource {res} in API group {group} at the cluster scope",
            a.verb
        )
    } else {
        format!(
            "User {who} cannot {} resource {res} in API group {group} in the namespace {}",
            a.verb,
            rules::go_quote(&a.namespace)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sa() -> UserInfo {
        UserInfo {
            username: "system:serviceaccount:ns:sa".into(),
            uid: String::new(),
            groups: vec!["system:serviceaccounts".into()],
        }
    }

    #[test]
    fn messages_are_kube_apiservers() {
        let e = forbidden(&sa(), &Attributes::resource("get", "", "pods", "ns", "p"), "");
        assert_eq!(
            e.to_string(),
            r#"pods "p" is forbidden: User "system:serviceaccount:ns:sa" cannot get resource "pods" in API group "" in the namespace "ns""#
        );
        assert_eq!(e.code(), 403);
        let e = forbidden(
            &sa(),
            &Attributes::resource("list", "rbac.authorization.k8s.io", "clusterroles", "", ""),
            "",
        );
        assert_eq!(
            e.to_string(),
            r#"clusterroles.rbac.authorization.k8s.io is forbidden: User "system:serviceaccount:ns:sa" cannot list resource "clusterroles" in API group "rbac.authorization.k8s.io" at the cluster scope"#
        );
        let e = forbidden(
            &sa(),
            &Attributes::resource("get", "", "pods", "ns", "p").with_subresource("log"),
            "",
        );
        assert!(
            e.to_string()
                .contains(r#"cannot get resource "pods/log" in API group """#)
        );
        let e = forbidden(&sa(), &Attributes::non_resource("get", "/metrics"), "");
        assert_eq!(
            e.to_string(),
            r#"forbidden: User "system:serviceaccount:ns:sa" cannot get path "/metrics""#
        );
    }
}
