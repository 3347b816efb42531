//! `OwnerReferencesPermissionEnforcement` (kube-apiserver's `plugin/pkg/admission/gc/gc_admission.go`), off
//! by default as in kube-apiserver and on in OpenShift: a write that changes an object's ownerReferences
//! needs `delete` on the object (an update; a create could simply not have been made), and a
//! `blockOwnerDeletion: true` reference that is new needs `update` on the owner's `finalizers`
//! subresource, since it keeps the owner from being deleted in the foreground.

use serde_json::Value;

use crate::admission_seam::{AdmissionPlugin, AdmissionRequest, BoxFuture, Operation};
use crate::auth::Attributes;
use crate::registry::split_api_version;
use crate::status::ApiError;
use crate::store::Store;

use super::builtin::forbidden;

/// The admission plugin.
pub struct OwnerReferencesPermissionEnforcement {
    store: Store,
}

impl OwnerReferencesPermissionEnforcement {
    pub fn new(store: Store) -> Self {
        Self { store }
    }

    fn check(&self, req: &AdmissionRequest) -> Result<(), ApiError> {
        if !matches!(req.operation, Operation::Create | Operation::Update) {
            return Ok(());
        }
        // The plugin's whitelist: a pod's status writes never touch its owners.
        if req.group.is_empty() && req.resource == "pods" && req.subresource == "status" {
            return Ok(());
        }
        let new = owner_references(req.object.as_ref());
        let old = owner_references(req.old_object.as_deref());
        let changing = match req.old_object {
            None => !new.is_empty(),
            Some(_) => new != old,
        };
        if !changing {
            return Ok(());
        }
        let Some(mode) = self.store.authorization_mode() else {
            return Ok(());
        };
        let deny = |err: String| {
            let name = if req.name.is_empty() {
                req.object.as_ref().map(crate::meta::name).unwrap_or("")
            } else {
                req.name.as_str()
            };
            forbidden(&req.group, &req.resource, name, &err, None)
        };
        if req.operation != Operation::Create {
            let attrs = Attributes {
                api_version: req.version.clone(),
                ..Attributes::resource("delete", &req.group, &req.resource, &req.namespace, &req.name)
            };
            let decision = crate::auth::authorize(&self.store, mode, &req.user, &attrs);
            if !decision.allowed {
                return Err(deny(format!(
                    "cannot set an ownerRef on a resource you can't delete: {}, <nil>",
                    decision.reason
                )));
            }
        }
        let registry = self.store.registry();
        for reference in newly_blocking(&new, &old) {
            let api_version = reference.get("apiVersion").and_then(Value::as_str).unwrap_or_default();
            let kind = reference.get("kind").and_then(Value::as_str).unwrap_or_default();
            let (group, _) = split_api_version(api_version);
            let Some(info) = registry.lookup_kind(&group, kind) else {
                return Err(deny(format!(
                    "cannot set blockOwnerDeletion in this case because cannot find RESTMapping for APIVersion {api_version} Kind {kind}: no matches for kind {kind:?} in version {api_version:?}"
                )));
            };
            let name = reference.get("name").and_then(Value::as_str).unwrap_or_default();
            let namespace = if info.namespaced { req.namespace.as_str() } else { "" };
            let attrs = Attributes::resource("update", &info.group, &info.resource, namespace, name)
                .with_subresource("finalizers");
            let decision = crate::auth::authorize(&self.store, mode, &req.user, &attrs);
            if !decision.allowed {
                return Err(deny(format!(
                    "cannot set blockOwnerDeletion if an ownerReference refers to a resource you can't set finalizers on: {}, <nil>",
                    decision.reason
                )));
            }
        }
        Ok(())
    }
}

impl AdmissionPlugin for OwnerReferencesPermissionEnforcement {
    fn name(&self) -> &str {
        "OwnerReferencesPermissionEnforcement"
    }

    fn validate<'a>(&'a self, request: &'a AdmissionRequest) -> BoxFuture<'a, Result<(), ApiError>> {
        Box::pin(async move { self.check(request) })
    }
}

fn owner_references(object: Option<&Value>) -> Vec<Value> {
    object
        .and_then(|o| o.pointer("/metadata/ownerReferences"))
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

fn blocks(reference: &Value) -> bool {
    reference.get("blockOwnerDeletion").and_then(Value::as_bool) == Some(true)
}

/// The references in `new` that block their owner's deletion and did not in `old` (matched by uid).
fn newly_blocking<'a>(new: &'a [Value], old: &[Value]) -> Vec<&'a Value> {
    new.iter()
        .filter(|reference| blocks(reference))
        .filter(|reference| {
            let uid = reference.get("uid");
            !old.iter().any(|o| o.get("uid") == uid && blocks(o))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn only_references_that_newly_block_need_the_owners_finalizers() {
        let a = json!({"uid": "a", "blockOwnerDeletion": true});
        let b = json!({"uid": "b", "blockOwnerDeletion": true});
        let b_loose = json!({"uid": "b"});
        let c = json!({"uid": "c", "blockOwnerDeletion": false});
        let new = vec![a.clone(), b.clone(), c];
        assert_eq!(newly_blocking(&new, &[]), vec![&a, &b]);
        assert_eq!(newly_blocking(&new, std::slice::from_ref(&b)), vec![&a]);
        assert_eq!(newly_blocking(&new, &[b_loose]), vec![&a, &b]);
    }
}
