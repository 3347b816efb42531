//! The RBAC authorizer and rule resolver (`plugin/pkg/auth/authorizer/rbac`,
//! `pkg/registry/rbac/validation`): the rules a user holds come from the ClusterRoleBindings
//! and, in a namespace, the RoleBindings whose subjects name the user, one of its groups or its
//! ServiceAccount.

use std::sync::Arc;

use serde_json::Value;

use super::rules::{PolicyRule, Subject, go_quote, rules_of, subjects_of};
use super::{Attributes, Decision};
use crate::admission_seam::UserInfo;
use crate::registry::ResourceKey;
use crate::store::Store;

pub const GROUP: &str = "rbac.authorization.k8s.io";

fn key(resource: &str) -> ResourceKey {
    ResourceKey {
        group: GROUP.into(),
        resource: resource.into(),
    }
}

/// A binding that applies to the user, with the rules of its role (or why they could not be read).
struct Applied {
    /// `ClusterRoleBinding "x" of ClusterRole "y" to User "z"`
    source: String,
    rules: Result<Vec<PolicyRule>, String>,
}

/// `roleRef` of a binding: `(kind, name)`.
fn role_ref(binding: &Value) -> (String, String) {
    let s = |k: &str| {
        binding
            .pointer(&format!("/roleRef/{k}"))
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    (s("kind"), s("name"))
}

/// `GetRoleReferenceRules`: the rules of the role a binding in `namespace` refers to.
pub(crate) fn role_ref_rules(
    store: &Store,
    kind: &str,
    name: &str,
    namespace: &str,
) -> Result<Vec<PolicyRule>, String> {
    match kind {
        "Role" => store
            .get_stored(&key("roles"), namespace, name)
            .map(|r| rules_of(&r))
            .ok_or_else(|| format!("role.rbac.authorization.k8s.io {} not found", go_quote(name))),
        "ClusterRole" => store
            .get_stored(&key("clusterroles"), "", name)
            .map(|r| rules_of(&r))
            .ok_or_else(|| format!("clusterrole.rbac.authorization.k8s.io {} not found", go_quote(name))),
        other => Err(format!("unsupported role reference kind: {}", go_quote(other))),
    }
}

/// `VisitRulesFor`: every binding that applies to `user` (cluster-wide, then in `namespace`),
/// lazily, so the authorizer can stop at the first allowing rule.
fn visit(store: &Store, user: &UserInfo, namespace: &str, mut f: impl FnMut(Applied) -> bool) {
    let bindings = |resource: &str, ns: Option<&str>| -> Vec<Arc<Value>> { store.stored_objects(&key(resource), ns) };
    for b in bindings("clusterrolebindings", None) {
        let Some(subject) = first_applying(&b, user, "") else {
            continue;
        };
        let (kind, name) = role_ref(&b);
        // A ClusterRoleBinding may only refer to a ClusterRole.
        let rules = if kind == "ClusterRole" {
            role_ref_rules(store, &kind, &name, "")
        } else {
            Err(format!("unsupported role reference kind: {}", go_quote(&kind)))
        };
        let source = format!(
            "ClusterRoleBinding {} of {kind} {} to {}",
            go_quote(crate::meta::name(&b)),
            go_quote(&name),
            subject.describe("")
        );
        if f(Applied { source, rules }) {
            return;
        }
    }
    if namespace.is_empty() {
        return;
    }
    for b in bindings("rolebindings", Some(namespace)) {
        let Some(subject) = first_applying(&b, user, namespace) else {
            continue;
        };
        let (kind, name) = role_ref(&b);
        let rules = role_ref_rules(store, &kind, &name, namespace);
        let source = format!(
            "RoleBinding {} of {kind} {} to {}",
            go_quote(&format!("{}/{namespace}", crate::meta::name(&b))),
            go_quote(&name),
            subject.describe(namespace)
        );
        if f(Applied { source, rules }) {
            return;
        }
    }
}

fn first_applying(binding: &Value, user: &UserInfo, namespace: &str) -> Option<Subject> {
    subjects_of(binding).into_iter().find(|s| s.applies_to(user, namespace))
}

/// `RBACAuthorizer.Authorize`.
pub(crate) fn authorize(store: &Store, user: &UserInfo, attrs: &Attributes) -> Decision {
    let mut errors = Vec::new();
    let mut allowed_by = None;
    visit(store, user, &attrs.namespace, |applied| match applied.rules {
        Ok(rules) => {
            if rules.iter().any(|r| r.allows(attrs)) {
                allowed_by = Some(applied.source);
                true
            } else {
                false
            }
        }
        Err(e) => {
            errors.push(e);
            false
        }
    });
    match allowed_by {
        Some(source) => Decision {
            allowed: true,
            reason: format!("RBAC: allowed by {source}"),
        },
        None => Decision {
            allowed: false,
            reason: if errors.is_empty() {
                String::new()
            } else {
                format!("RBAC: {}", aggregate(&errors))
            },
        },
    }
}

/// `utilerrors.NewAggregate(errs).Error()`.
pub(crate) fn aggregate(errors: &[String]) -> String {
    match errors {
        [one] => one.clone(),
        many => format!("[{}]", many.join(", ")),
    }
}

/// `RulesFor`: every rule `user` holds in `namespace` (cluster-wide ones included), and the
/// errors met on the way (missing roles).
pub(crate) fn rules_for(store: &Store, user: &UserInfo, namespace: &str) -> (Vec<PolicyRule>, Vec<String>) {
    let mut rules = Vec::new();
    let mut errors = Vec::new();
    visit(store, user, namespace, |applied| {
        match applied.rules {
            Ok(r) => rules.extend(r),
            Err(e) => errors.push(e),
        }
        false
    });
    (rules, errors)
}
