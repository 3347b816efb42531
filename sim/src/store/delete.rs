//! Deletes: finalizers and `deletionTimestamp`, pod grace periods, propagation policies (the
//! finalizers the garbage collector acts on), preconditions, deletecollection, and the cleanup
//! of a deleted CRD's instances.

use std::sync::Arc;

use serde_json::{Value, json};

use super::crd::{self, CLEANUP_FINALIZER};
use super::write::{PatchBody, is_still, namespace_pending};
use super::{ChangeKind, ListOptions, State, Store, WriteOptions};
use crate::admission_seam::{Operation, UserInfo};
use crate::convert;
use crate::meta;
use crate::registry::{Gvr, ResourceInfo};
use crate::status::ApiError;

/// Optimistic retries of one write racing others (etcd3's GuaranteedUpdate retries until it wins).
const MAX_RETRIES: usize = 1000;

/// The result of a delete.
#[derive(Debug, Clone)]
pub struct Deleted {
    /// The object: its last state if `gone`, else with `deletionTimestamp` set.
    pub object: Value,
    /// Removed from storage now (false: waiting for finalizers or a pod's grace period).
    pub gone: bool,
    pub warnings: Vec<String>,
}

/// `DeleteOptions`.
#[derive(Debug, Clone, Default)]
pub struct DeleteOptions {
    pub grace_period_seconds: Option<i64>,
    /// `Background`, `Foreground` or `Orphan`.
    pub propagation_policy: Option<String>,
    pub precondition_uid: Option<String>,
    pub precondition_resource_version: Option<String>,
    pub dry_run: bool,
    pub user: UserInfo,
}

impl Store {
    /// Deletes an object: at once when nothing holds it, else it gets a `deletionTimestamp` and
    /// waits for its finalizers (or a bound pod for its kubelet).
    pub async fn delete(
        &self,
        gvr: &Gvr,
        namespace: &str,
        name: &str,
        opts: &DeleteOptions,
    ) -> Result<Deleted, ApiError> {
        let info = self.resolve(gvr)?;
        let ns = if info.namespaced {
            namespace.to_string()
        } else {
            String::new()
        };
        for _ in 0..MAX_RETRIES {
            let current = self
                .get_stored(&info.storage, &ns, name)
                .ok_or_else(|| ApiError::not_found(&info.group, &info.resource, name))?;
            check_preconditions(&info, name, &current, opts)?;
            let wo = WriteOptions {
                dry_run: opts.dry_run,
                user: opts.user.clone(),
                ..Default::default()
            };
            let mut req = self.admission_request(
                &info,
                gvr,
                Operation::Delete,
                "",
                &ns,
                None,
                Some(&current),
                opts.dry_run,
                &wo.user,
            );
            req.name = name.to_string();
            self.mutate(&mut req).await?;
            self.validate(&mut req).await?;

            let mut next = (*current).clone();
            let mut finalizers = meta::finalizers(&next);
            match opts.propagation_policy.as_deref() {
                Some("Orphan") => {
                    finalizers.retain(|f| f != "foregroundDeletion");
                    if !finalizers.iter().any(|f| f == "orphan") {
                        finalizers.push("orphan".into());
                    }
                }
                Some("Foreground") => {
                    finalizers.retain(|f| f != "orphan");
                    if !finalizers.iter().any(|f| f == "foregroundDeletion") {
                        finalizers.push("foregroundDeletion".into());
                    }
                }
                Some("Background") => finalizers.retain(|f| f != "orphan" && f != "foregroundDeletion"),
                Some(other) => {
                    return Err(ApiError::invalid(
                        "meta.k8s.io",
                        "DeleteOptions",
                        "",
                        vec![crate::status::FieldCause::not_supported(
                            "propagationPolicy",
                            &json!(other),
                            &["Foreground", "Background", "Orphan", "nil"],
                        )],
                    ));
                }
                None => {}
            }
            let grace = pod_grace_period(&info, &current, opts);
            let pending = !finalizers.is_empty() || grace > 0 || namespace_pending(&info, &current);
            let now = jiff::Timestamp::now();
            let mut changed = meta::finalizers(&current) != finalizers;
            if !finalizers.is_empty() || changed {
                meta::set(&mut next, "finalizers", json!(finalizers));
            }
            if pending {
                let deadline = now + jiff::SignedDuration::from_secs(grace);
                let existing_grace = current
                    .pointer("/metadata/deletionGracePeriodSeconds")
                    .and_then(Value::as_i64);
                if !meta::is_deleting(&current) || existing_grace.is_some_and(|g| grace < g) {
                    meta::set(&mut next, "deletionTimestamp", json!(meta::rfc3339(deadline)));
                    meta::set(&mut next, "deletionGracePeriodSeconds", json!(grace));
                    changed = true;
                }
                if (info.group.as_str(), info.kind.as_str()) == ("", "Namespace")
                    && next["status"]["phase"] != "Terminating"
                {
                    next["status"]["phase"] = json!("Terminating");
                    changed = true;
                }
                if !changed {
                    return Ok(Deleted {
                        object: convert::to_version(&info, &current, &gvr.version),
                        gone: false,
                        warnings: req.warnings,
                    });
                }
                if opts.dry_run {
                    return Ok(Deleted {
                        object: convert::to_version(&info, &next, &gvr.version),
                        gone: false,
                        warnings: req.warnings,
                    });
                }
                let committed = {
                    let mut state = self.lock();
                    if !is_still(&state, &info, &ns, name, &current) {
                        continue;
                    }
                    self.commit(
                        &mut state,
                        &info.storage,
                        ChangeKind::Modified,
                        next,
                        Some(current.clone()),
                    )
                };
                if crd::is_crd(&info) {
                    self.cleanup_crd(&committed).await;
                    let object = match self.get_stored(&info.storage, "", name) {
                        Some(o) => convert::to_version(&info, &o, &gvr.version),
                        None => convert::to_version(&info, &committed, &gvr.version),
                    };
                    return Ok(Deleted {
                        object,
                        gone: false,
                        warnings: req.warnings,
                    });
                }
                return Ok(Deleted {
                    object: convert::to_version(&info, &committed, &gvr.version),
                    gone: false,
                    warnings: req.warnings,
                });
            }
            if opts.dry_run {
                return Ok(Deleted {
                    object: convert::to_version(&info, &current, &gvr.version),
                    gone: true,
                    warnings: req.warnings,
                });
            }
            let mut state = self.lock();
            if !is_still(&state, &info, &ns, name, &current) {
                continue;
            }
            let last = (*current).clone();
            let gone = self.remove_locked(&mut state, &info, current.clone(), last);
            return Ok(Deleted {
                object: convert::to_version(&info, &gone, &gvr.version),
                gone: true,
                warnings: req.warnings,
            });
        }
        Err(ApiError::Internal(format!(
            "too many concurrent writes to {} {name:?}; try again",
            info.resource
        )))
    }

    /// Deletes every object a list would return; answers with the list of what was deleted.
    pub async fn delete_collection(
        &self,
        gvr: &Gvr,
        namespace: Option<&str>,
        list: &ListOptions,
        opts: &DeleteOptions,
    ) -> Result<Value, ApiError> {
        let info = self.resolve(gvr)?;
        let listed = self.list(
            gvr,
            namespace,
            &ListOptions {
                limit: None,
                continue_token: None,
                ..list.clone()
            },
        )?;
        let mut deleted = Vec::new();
        for item in listed["items"].as_array().cloned().unwrap_or_default() {
            match self.delete(gvr, meta::namespace(&item), meta::name(&item), opts).await {
                Ok(d) => deleted.push(d.object),
                Err(ApiError::NotFound(_)) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(json!({
            "apiVersion": gvr.api_version(),
            "kind": info.list_kind,
            "metadata": { "resourceVersion": self.current_rv().to_string() },
            "items": deleted,
        }))
    }

    /// Removes an object from storage (state locked) and does what follows a removal.
    pub(super) fn remove_locked(
        &self,
        state: &mut State,
        info: &ResourceInfo,
        current: Arc<Value>,
        last: Value,
    ) -> Arc<Value> {
        let gone = self.commit(state, &info.storage, ChangeKind::Deleted, last, Some(current));
        if crd::is_crd(info)
            && let Some(served) = crd::resource_info(&gone)
        {
            state.registry.remove(&served.key());
            state.tables.remove(&served.storage);
        }
        gone
    }

    /// What the apiextensions finalizer controller does for a deleted CRD: delete every instance,
    /// then drop the cleanup finalizer so the CRD goes.
    fn cleanup_crd<'a>(&'a self, crd_obj: &'a Value) -> crate::admission_seam::BoxFuture<'a, ()> {
        Box::pin(self.cleanup_crd_inner(crd_obj))
    }

    async fn cleanup_crd_inner(&self, crd_obj: &Value) {
        let Some(served) = crd::resource_info(crd_obj) else {
            return;
        };
        let gvr = Gvr::new(&served.group, &served.storage_version, &served.resource);
        let items: Vec<(String, String)> = self
            .lock()
            .tables
            .get(&served.storage)
            .map(|t| t.keys().cloned().collect())
            .unwrap_or_default();
        for (ns, name) in items {
            // An instance held by its own finalizer keeps the CRD terminating, as in Kubernetes.
            let _ = Box::pin(self.delete(&gvr, &ns, &name, &DeleteOptions::default())).await;
        }
        let remaining = self.lock().tables.get(&served.storage).is_some_and(|t| !t.is_empty());
        if remaining {
            return;
        }
        let crd_gvr = Gvr::new("apiextensions.k8s.io", "v1", "customresourcedefinitions");
        let name = meta::name(crd_obj).to_string();
        let remove = json!({ "metadata": { "$deleteFromPrimitiveList/finalizers": [CLEANUP_FINALIZER] } });
        if let Err(e) = self
            .patch(
                &crd_gvr,
                "",
                &name,
                &PatchBody::Strategic(remove),
                None,
                &WriteOptions {
                    field_manager: Some("kube-apiserver".into()),
                    ..Default::default()
                },
            )
            .await
        {
            tracing::warn!(crd = %name, error = %e, "could not finalize the CustomResourceDefinition");
        }
    }
}

/// The grace period a pod deletion gets: 0 (at once) for pods no kubelet runs, else the request's
/// or the pod's `terminationGracePeriodSeconds`.
fn pod_grace_period(info: &ResourceInfo, pod: &Value, opts: &DeleteOptions) -> i64 {
    if (info.group.as_str(), info.kind.as_str()) != ("", "Pod") {
        return 0;
    }
    let unbound = pod
        .pointer("/spec/nodeName")
        .and_then(Value::as_str)
        .unwrap_or("")
        .is_empty();
    let finished = matches!(
        pod.pointer("/status/phase").and_then(Value::as_str),
        Some("Succeeded" | "Failed")
    );
    if unbound || finished {
        return 0;
    }
    let requested = opts
        .grace_period_seconds
        .or_else(|| {
            pod.pointer("/spec/terminationGracePeriodSeconds")
                .and_then(Value::as_i64)
        })
        .unwrap_or(30);
    requested.max(0)
}

fn check_preconditions(info: &ResourceInfo, name: &str, current: &Value, opts: &DeleteOptions) -> Result<(), ApiError> {
    let fail = |detail: String| ApiError::Conflict {
        target: crate::status::Target::new(&info.group, &info.resource, name),
        detail,
    };
    if let Some(uid) = opts.precondition_uid.as_deref().filter(|u| !u.is_empty())
        && uid != meta::uid(current)
    {
        return Err(fail(format!(
            "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
            meta::uid(current)
        )));
    }
    if let Some(rv) = opts.precondition_resource_version.as_deref().filter(|r| !r.is_empty())
        && rv != meta::resource_version(current)
    {
        return Err(fail(format!(
            "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {}",
            meta::resource_version(current)
        )));
    }
    Ok(())
}
