//! Built-in admission plugins every real cluster runs, and the controllers they rely on:
//!
//! - [`NamespaceLifecycle`] (`k8s.io/apiserver/.../namespace/lifecycle`): nothing is created in
//!   a namespace that does not exist or is terminating; `default`, `kube-system` and
//!   `kube-public` cannot be deleted. The [namespace controller](namespace_controller) empties a
//!   deleted namespace and then finalizes it.
//! - [`ServiceAccountAdmission`] (`plugin/pkg/admission/serviceaccount`): a pod gets
//!   `serviceAccountName: default` when it names none, is rejected when its ServiceAccount does
//!   not exist, and gets the projected `kube-api-access-*` token volume. The
//!   [service-account controller](serviceaccounts_controller) creates the `default`
//!   ServiceAccount (and, as the root-CA publisher does, the `kube-root-ca.crt` ConfigMap) in
//!   every namespace.
//!
//! ResourceQuota is not simulated (usage tracking and the quota controller are not cheap).

pub mod namespace_controller;
pub mod serviceaccounts_controller;

use std::time::Duration;

use serde_json::{Value, json};

use crate::admission_seam::{AdmissionPlugin, AdmissionRequest, BoxFuture, Operation};
use crate::meta;
use crate::registry::Gvr;
use crate::status::ApiError;
use crate::store::{ChangeKind, Store};

/// Namespaces that may never be deleted.
pub const IMMORTAL_NAMESPACES: &[&str] = &["default", "kube-system", "kube-public"];

/// How long a pod creation waits for the `default` ServiceAccount of a new namespace (the real
/// plugin retries ten times, 100-200 ms apart).
const DEFAULT_SA_WAIT: Duration = Duration::from_secs(2);

/// `apierrors.NewForbidden(groupResource, name, err)`: `<resource> "<name>" is forbidden: <err>`.
pub fn forbidden(group: &str, resource: &str, name: &str, err: &str, causes: Option<Value>) -> ApiError {
    let qualified = if group.is_empty() {
        resource.to_string()
    } else {
        format!("{resource}.{group}")
    };
    let message = if name.is_empty() {
        format!("{qualified} is forbidden: {err}")
    } else {
        format!("{qualified} {name:?} is forbidden: {err}")
    };
    let mut details = json!({ "name": name, "kind": resource });
    if !group.is_empty() {
        details["group"] = json!(group);
    }
    if let Some(c) = causes {
        details["causes"] = c;
    }
    ApiError::Custom {
        code: 403,
        reason: "Forbidden".into(),
        message,
        details: Some(details),
    }
}

/// `admission.NewForbidden(attributes, err)`: the name comes from the request or its object.
fn forbidden_for(req: &AdmissionRequest, err: &str, causes: Option<Value>) -> ApiError {
    let name = if req.name.is_empty() {
        req.object.as_ref().map(meta::name).unwrap_or("")
    } else {
        req.name.as_str()
    };
    forbidden(&req.group, &req.resource, name, err, causes)
}

fn is_namespace(req: &AdmissionRequest) -> bool {
    req.group.is_empty() && req.kind == "Namespace"
}

/// The NamespaceLifecycle admission plugin (a mutating plugin, first in the chain).
pub struct NamespaceLifecycle {
    store: Store,
}

impl NamespaceLifecycle {
    pub fn new(store: Store) -> Self {
        Self { store }
    }

    async fn admit(&self, req: &AdmissionRequest) -> Result<(), ApiError> {
        if req.operation == Operation::Delete && is_namespace(req) && IMMORTAL_NAMESPACES.contains(&req.name.as_str()) {
            return Err(forbidden(
                &req.group,
                &req.resource,
                &req.name,
                "this namespace may not be deleted",
                None,
            ));
        }
        if is_namespace(req) || req.namespace.is_empty() {
            return Ok(());
        }
        if matches!(req.operation, Operation::Delete | Operation::Connect) {
            return Ok(());
        }
        // Access reviews must not reveal whether a namespace exists.
        if req.group == "authorization.k8s.io" && req.resource == "localsubjectaccessreviews" {
            return Ok(());
        }
        // A missing namespace answers with the lookup's own NotFound, as the real plugin does.
        let ns = self.store.get(&Gvr::new("", "v1", "namespaces"), "", &req.namespace)?;
        if req.operation == Operation::Create
            && ns.pointer("/status/phase").and_then(Value::as_str) == Some("Terminating")
        {
            let cause = json!([{
                "reason": "NamespaceTerminating",
                "message": format!("namespace {} is being terminated", req.namespace),
                "field": "metadata.namespace",
            }]);
            return Err(forbidden_for(
                req,
                &format!(
                    "unable to create new content in namespace {} because it is being terminated",
                    req.namespace
                ),
                Some(cause),
            ));
        }
        Ok(())
    }
}

impl AdmissionPlugin for NamespaceLifecycle {
    fn name(&self) -> &str {
        "NamespaceLifecycle"
    }

    fn mutate<'a>(&'a self, request: &'a mut AdmissionRequest) -> BoxFuture<'a, Result<(), ApiError>> {
        Box::pin(async move { self.admit(request).await })
    }
}

/// The ServiceAccount admission plugin (mutating: defaults and mounts on pod creation).
pub struct ServiceAccountAdmission {
    store: Store,
}

/// Where the token volume is mounted in every container.
pub const API_TOKEN_MOUNT_PATH: &str = "/var/run/secrets/kubernetes.io/serviceaccount";
const TOKEN_VOLUME_PREFIX: &str = "kube-api-access-";
const MIRROR_POD_ANNOTATION: &str = "kubernetes.io/config.mirror";

impl ServiceAccountAdmission {
    pub fn new(store: Store) -> Self {
        Self { store }
    }

    async fn admit(&self, req: &mut AdmissionRequest) -> Result<(), ApiError> {
        if !(req.group.is_empty() && req.resource == "pods" && req.subresource.is_empty())
            || req.operation != Operation::Create
        {
            return Ok(());
        }
        let Some(pod) = req.object.as_ref() else { return Ok(()) };
        if pod
            .pointer(&format!(
                "/metadata/annotations/{}",
                MIRROR_POD_ANNOTATION.replace('/', "~1")
            ))
            .is_some()
        {
            return check_mirror_pod(req);
        }
        let spec = pod.get("spec");
        let str_at = |f: &str| {
            spec.and_then(|s| s.get(f))
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string()
        };
        // `serviceAccount` is the deprecated alias the v1 API still accepts.
        let mut sa_name = str_at("serviceAccountName");
        if sa_name.is_empty() {
            sa_name = str_at("serviceAccount");
        }
        if sa_name.is_empty() {
            sa_name = "default".into();
        }
        let sa = match self.service_account(&req.namespace, &sa_name).await {
            Some(sa) => sa,
            None => {
                let err = format!(
                    "error looking up service account {}/{sa_name}: serviceaccount {sa_name:?} not found",
                    req.namespace
                );
                return Err(forbidden_for(req, &err, None));
            }
        };
        let Some(pod) = req.object.as_mut() else { return Ok(()) };
        let Some(spec) = pod.get_mut("spec").and_then(Value::as_object_mut) else {
            return Ok(());
        };
        spec.insert("serviceAccountName".into(), json!(sa_name));
        spec.insert("serviceAccount".into(), json!(sa_name));
        let automount = spec
            .get("automountServiceAccountToken")
            .and_then(Value::as_bool)
            .or_else(|| sa.get("automountServiceAccountToken").and_then(Value::as_bool))
            .unwrap_or(true);
        if automount {
            mount_token_volume(spec);
        }
        let has_pull_secrets = spec
            .get("imagePullSecrets")
            .and_then(Value::as_array)
            .is_some_and(|a| !a.is_empty());
        if !has_pull_secrets
            && let Some(secrets) = sa
                .get("imagePullSecrets")
                .and_then(Value::as_array)
                .filter(|a| !a.is_empty())
        {
            let names: Vec<Value> = secrets
                .iter()
                .map(|s| json!({ "name": s.get("name").cloned().unwrap_or(json!("")) }))
                .collect();
            spec.insert("imagePullSecrets".into(), Value::Array(names));
        }
        Ok(())
    }

    /// The ServiceAccount, waiting a little for `default` in a namespace the controller has not
    /// reached yet (driven by the change feed, not by sleeping).
    async fn service_account(&self, namespace: &str, name: &str) -> Option<Value> {
        let gvr = Gvr::new("", "v1", "serviceaccounts");
        if let Ok(sa) = self.store.get(&gvr, namespace, name) {
            return Some(sa);
        }
        if name != "default" {
            return None;
        }
        // Follow changes from now, then look again: a creation in between is not missed.
        let mut feed = self.store.changes(self.store.current_rv());
        if let Ok(sa) = self.store.get(&gvr, namespace, name) {
            return Some(sa);
        }
        let deadline = tokio::time::Instant::now() + DEFAULT_SA_WAIT;
        loop {
            let change = tokio::time::timeout_at(deadline, feed.next()).await.ok()?.ok()?;
            if change.kind == ChangeKind::Added
                && change.resource.group.is_empty()
                && change.resource.resource == "serviceaccounts"
                && meta::namespace(&change.object) == namespace
                && meta::name(&change.object) == name
            {
                return Some((*change.object).clone());
            }
        }
    }
}

fn check_mirror_pod(req: &AdmissionRequest) -> Result<(), ApiError> {
    let Some(spec) = req.object.as_ref().and_then(|p| p.get("spec")) else {
        return Ok(());
    };
    if spec
        .get("serviceAccountName")
        .and_then(Value::as_str)
        .is_some_and(|s| !s.is_empty())
    {
        return Err(forbidden_for(
            req,
            "a mirror pod may not reference service accounts",
            None,
        ));
    }
    let volumes = spec
        .get("volumes")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if volumes.iter().any(|v| v.get("secret").is_some()) {
        return Err(forbidden_for(req, "a mirror pod may not reference secrets", None));
    }
    Ok(())
}

/// Adds the projected API-access volume and mounts it in every container that does not already
/// mount something at the token path (`TokenVolumeSource()` of the real plugin).
fn mount_token_volume(spec: &mut serde_json::Map<String, Value>) {
    let existing = spec.get("volumes").and_then(Value::as_array).and_then(|vs| {
        vs.iter()
            .filter_map(|v| v.get("name").and_then(Value::as_str))
            .find(|n| n.starts_with(TOKEN_VOLUME_PREFIX))
            .map(str::to_string)
    });
    let volume_name = existing
        .clone()
        .unwrap_or_else(|| format!("{TOKEN_VOLUME_PREFIX}{}", meta::random_suffix()));
    let mount = json!({ "name": volume_name, "readOnly": true, "mountPath": API_TOKEN_MOUNT_PATH });
    let mut needed = false;
    for list in ["initContainers", "containers"] {
        let Some(Value::Array(containers)) = spec.get_mut(list) else {
            continue;
        };
        for c in containers.iter_mut() {
            let Some(c) = c.as_object_mut() else { continue };
            let mounts = c.entry("volumeMounts").or_insert_with(|| json!([]));
            let Value::Array(mounts) = mounts else { continue };
            if !mounts
                .iter()
                .any(|m| m.get("mountPath").and_then(Value::as_str) == Some(API_TOKEN_MOUNT_PATH))
            {
                mounts.push(mount.clone());
                needed = true;
            }
        }
    }
    if existing.is_none() && needed {
        let volume = json!({
            "name": volume_name,
            "projected": {
                "defaultMode": 420,
                "sources": [
                    { "serviceAccountToken": { "expirationSeconds": 3607, "path": "token" } },
                    { "configMap": { "name": "kube-root-ca.crt", "items": [{ "key": "ca.crt", "path": "ca.crt" }] } },
                    { "downwardAPI": { "items": [{ "path": "namespace", "fieldRef": { "apiVersion": "v1", "fieldPath": "metadata.namespace" } }] } }
                ]
            }
        });
        match spec.get_mut("volumes") {
            Some(Value::Array(vs)) => vs.push(volume),
            _ => {
                spec.insert("volumes".into(), json!([volume]));
            }
        }
    }
}

impl AdmissionPlugin for ServiceAccountAdmission {
    fn name(&self) -> &str {
        "ServiceAccount"
    }

    fn mutate<'a>(&'a self, request: &'a mut AdmissionRequest) -> BoxFuture<'a, Result<(), ApiError>> {
        Box::pin(async move { self.admit(request).await })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forbidden_reads_like_the_apiserver() {
        let e = forbidden(
            "",
            "pods",
            "x",
            "error looking up service account ns/sa: serviceaccount \"sa\" not found",
            None,
        );
        assert_eq!(
            e.to_string(),
            "pods \"x\" is forbidden: error looking up service account ns/sa: serviceaccount \"sa\" not found"
        );
        let s = e.to_status();
        assert_eq!(s["code"], 403);
        assert_eq!(s["reason"], "Forbidden");
        assert_eq!(s["details"]["kind"], "pods");
    }

    #[test]
    fn token_volume_is_mounted_once_in_every_container() {
        let mut pod = json!({
            "containers": [{ "name": "a" }, { "name": "b", "volumeMounts": [{ "name": "own", "mountPath": API_TOKEN_MOUNT_PATH }] }],
            "initContainers": [{ "name": "i" }]
        });
        let Some(spec) = pod.as_object_mut() else {
            panic!("object")
        };
        mount_token_volume(spec);
        mount_token_volume(spec);
        let volumes = pod["volumes"].as_array().cloned().unwrap_or_default();
        assert_eq!(volumes.len(), 1);
        let name = volumes[0]["name"].as_str().unwrap_or_default().to_string();
        assert!(name.starts_with(TOKEN_VOLUME_PREFIX));
        assert_eq!(pod["containers"][0]["volumeMounts"][0]["name"], json!(name));
        assert_eq!(pod["containers"][1]["volumeMounts"].as_array().map(Vec::len), Some(1));
        assert_eq!(
            pod["initContainers"][0]["volumeMounts"][0]["mountPath"],
            API_TOKEN_MOUNT_PATH
        );
    }
}
