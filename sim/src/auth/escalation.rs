//! Privilege-escalation prevention on RBAC writes (`pkg/registry/rbac/*/policybased`): a user may
//! create or update a Role or ClusterRole only with rules it holds itself (or with the `escalate`
//! verb on it), and a binding only to a role whose rules it holds (or with the `bind` verb on
//! the role). `system:masters` is exempt. Setting an `aggregationRule` needs cluster-admin's
//! rights. Runs as an admission plugin, so in-process writers are held to it too.

use serde_json::Value;

use super::rules::{PolicyRule, go_quote, go_quote_list, rules_of, uncovered};
use super::{Attributes, PRIVILEGED_GROUP, authorize, forbidden_error, rbac};
use crate::admission_seam::{AdmissionPlugin, AdmissionRequest, BoxFuture, Operation};
use crate::status::ApiError;
use crate::store::Store;

/// The admission plugin; decisions use the store's authorization mode.
pub struct EscalationCheck {
    store: Store,
}

impl EscalationCheck {
    pub fn new(store: Store) -> Self {
        Self { store }
    }

    fn check(&self, req: &AdmissionRequest) -> Result<(), ApiError> {
        let Some(mode) = self.store.authorization_mode() else {
            return Ok(());
        };
        if req.group != rbac::GROUP || !matches!(req.operation, Operation::Create | Operation::Update) {
            return Ok(());
        }
        // `EscalationAllowed`
        if req.user.groups.iter().any(|g| g == PRIVILEGED_GROUP) {
            return Ok(());
        }
        let Some(obj) = &req.object else { return Ok(()) };
        if let Some(old) = &req.old_object
            && only_gc_fields_changed(obj, old)
        {
            return Ok(());
        }
        match req.resource.as_str() {
            "roles" | "clusterroles" => {
                let may_escalate = authorize(
                    &self.store,
                    mode,
                    &req.user,
                    &Attributes::resource("escalate", rbac::GROUP, &req.resource, &req.namespace, &req.name),
                );
                if may_escalate.allowed {
                    return Ok(());
                }
                self.confirm_no_escalation(req, &rules_of(obj))?;
                let has_aggregation = obj.get("aggregationRule").is_some_and(|a| !a.is_null());
                let aggregation_changed = req
                    .old_object
                    .as_ref()
                    .is_none_or(|old| old.get("aggregationRule") != obj.get("aggregationRule"));
                if req.resource == "clusterroles" && has_aggregation && aggregation_changed {
                    let full = vec![
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
                    ];
                    if self.confirm_no_escalation(req, &full).is_err() {
                        return Err(forbidden_error(
                            rbac::GROUP,
                            &req.resource,
                            &req.name,
                            "must have cluster-admin privileges to use the aggregationRule",
                        ));
                    }
                }
                Ok(())
            }
            "rolebindings" | "clusterrolebindings" => {
                let kind = obj.pointer("/roleRef/kind").and_then(Value::as_str).unwrap_or("");
                let name = obj.pointer("/roleRef/name").and_then(Value::as_str).unwrap_or("");
                // `BindingAuthorized`: the `bind` verb on the referenced role.
                let role_resource = format!("{}s", kind.to_ascii_lowercase());
                let bind = Attributes::resource("bind", rbac::GROUP, &role_resource, &req.namespace, name);
                if authorize(&self.store, mode, &req.user, &bind).allowed {
                    return Ok(());
                }
                let rules = rbac::role_ref_rules(&self.store, kind, name, &req.namespace)
                    .map_err(|_| ApiError::not_found(rbac::GROUP, &role_resource, name))?;
                self.confirm_no_escalation(req, &rules)
            }
            _ => Ok(()),
        }
    }

    /// `ConfirmNoEscalation`: the user's own rules (in the request's namespace) must cover `rules`.
    fn confirm_no_escalation(&self, req: &AdmissionRequest, rules: &[PolicyRule]) -> Result<(), ApiError> {
        let (owned, errors) = rbac::rules_for(&self.store, &req.user, &req.namespace);
        let missing = uncovered(&owned, rules);
        if missing.is_empty() {
            return Ok(());
        }
        let mut msg = format!(
            "user {} (groups={}) is attempting to grant RBAC permissions not currently held:\n{}",
            go_quote(&req.user.username),
            go_quote_list(&req.user.groups),
            missing.join("\n")
        );
        if !errors.is_empty() {
            msg.push_str(&format!("; resolution errors: [{}]", errors.join(" ")));
        }
        Err(forbidden_error(rbac::GROUP, &req.resource, &req.name, &msg))
    }
}

/// `IsOnlyMutatingGCFields`: an update that only touches owner references and finalizers is
/// not checked (so the garbage collector can always finish its work).
fn only_gc_fields_changed(new: &Value, old: &Value) -> bool {
    let strip = |v: &Value| {
        let mut v = v.clone();
        if let Some(m) = v.get_mut("metadata").and_then(Value::as_object_mut) {
            for k in [
                "ownerReferences",
                "finalizers",
                "resourceVersion",
                "managedFields",
                "generation",
            ] {
                m.remove(k);
            }
        }
        v
    };
    strip(new) == strip(old)
}

impl AdmissionPlugin for EscalationCheck {
    fn name(&self) -> &str {
        "RBACEscalation"
    }

    fn validate<'a>(&'a self, request: &'a AdmissionRequest) -> BoxFuture<'a, Result<(), ApiError>> {
        Box::pin(async move { self.check(request) })
    }
}
