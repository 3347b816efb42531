//! What the collector does for one work item: the real collector's `attemptToDeleteItem`,
//! `processDeletingDependentsItem` and `orphanDependents`, against the live store.

use std::sync::Arc;

use serde_json::{Value, json};

use super::graph::{ObjId, OwnerRef};
use super::{Collector, GcError, Work};
use crate::admission_seam::UserInfo;
use crate::meta;
use crate::registry::{Gvr, ResourceInfo, split_api_version};
use crate::status::ApiError;
use crate::store::{DeleteOptions, PatchBody, WriteOptions};

/// `metav1.FinalizerDeleteDependents`
pub(crate) const FOREGROUND: &str = "foregroundDeletion";
/// `metav1.FinalizerOrphanDependents`
pub(crate) const ORPHAN: &str = "orphan";

/// Conflicting writes retried before the step is handed back to the backoff queue.
const CONFLICT_RETRIES: usize = 5;

/// How one owner reference stands.
enum Class {
    /// The owner exists and is not deleting its dependents in the foreground.
    Solid,
    /// No object of that kind, name and uid exists where the owner must be.
    Dangling,
    /// The owner is deleting in the foreground (`foregroundDeletion` finalizer).
    Waiting,
}

/// Why an owner reference cannot be judged; the dependent is left alone.
enum Unresolvable {
    /// No served resource for the reference's apiVersion and kind (`restMappingError`).
    NoMapping,
    /// A cluster-scoped dependent naming a namespaced kind.
    NamespacedOwnerOfClusterScoped,
}

impl Collector {
    /// `attemptToDeleteItem`: deletes `id` if all its owners are absent.
    pub(super) async fn attempt(&mut self, id: &ObjId) -> Result<(), GcError> {
        let Some(latest) = self.live(id) else { return Ok(()) };
        if meta::is_deleting(&latest) {
            // Being deleted is a one-way trip: only an owner waiting for its dependents has work.
            if has_finalizer(&latest, FOREGROUND) {
                return self.process_deleting_dependents(id).await;
            }
            return Ok(());
        }
        let refs = OwnerRef::all_of(&latest);
        if refs.is_empty() {
            return Ok(());
        }
        let (mut solid, mut dangling, mut waiting) = (Vec::new(), Vec::new(), Vec::new());
        for r in &refs {
            match self.classify(id, r) {
                Ok(Class::Solid) => solid.push(r),
                Ok(Class::Dangling) => {
                    self.report_invalid_namespace(id, r).await;
                    dangling.push(r);
                }
                Ok(Class::Waiting) => waiting.push(r),
                Err(Unresolvable::NoMapping) => {
                    tracing::debug!(dependent = %id.name, owner_kind = %r.kind, api_version = %r.api_version, "owner kind not served; leaving the dependent alone");
                    self.unresolved.insert(id.clone());
                    return Ok(());
                }
                Err(Unresolvable::NamespacedOwnerOfClusterScoped) => {
                    self.report_invalid_namespace(id, r).await;
                    return Ok(());
                }
            }
        }
        self.unresolved.remove(id);
        if !solid.is_empty() {
            if dangling.is_empty() && waiting.is_empty() {
                return Ok(());
            }
            let uids: Vec<&str> = dangling.iter().chain(waiting.iter()).map(|r| r.uid.as_str()).collect();
            return self.remove_owner_refs(id, &uids).await;
        }
        if !waiting.is_empty() && self.graph.has_dependents(&id.uid) {
            // Delete in the foreground too, so its own blocking dependents go first. A dependent
            // already deleting in the foreground may be waiting for us: unblock to break a cycle.
            for dep in self.graph.dependents_of(&id.uid) {
                if self
                    .live(&dep)
                    .is_some_and(|d| meta::is_deleting(&d) && has_finalizer(&d, FOREGROUND))
                {
                    self.unblock_owner_refs(id).await?;
                    break;
                }
            }
            return self.delete(id, "Foreground").await;
        }
        let policy = if has_finalizer(&latest, ORPHAN) {
            "Orphan"
        } else if has_finalizer(&latest, FOREGROUND) {
            "Foreground"
        } else {
            "Background"
        };
        self.delete(id, policy).await
    }

    /// `processDeletingDependentsItem`: an owner deleting in the foreground loses its
    /// `foregroundDeletion` finalizer once no dependent blocks it.
    async fn process_deleting_dependents(&mut self, owner: &ObjId) -> Result<(), GcError> {
        let mut blocking = Vec::new();
        for dep in self.graph.dependents_of(&owner.uid) {
            let Some(live) = self.live(&dep) else { continue };
            if OwnerRef::all_of(&live)
                .iter()
                .any(|r| r.uid == owner.uid && r.block_owner_deletion)
            {
                blocking.push((dep, live));
            }
        }
        if blocking.is_empty() {
            return self.remove_finalizer(owner, FOREGROUND).await;
        }
        for (dep, live) in blocking {
            if !(meta::is_deleting(&live) && has_finalizer(&live, FOREGROUND)) {
                self.enqueue(Work::Attempt(dep));
            }
        }
        Ok(())
    }

    /// `attemptToOrphan`: removes the references to `owner` from its dependents, then the
    /// owner's `orphan` finalizer.
    pub(super) async fn orphan(&mut self, owner: &ObjId) -> Result<(), GcError> {
        if self.live(owner).is_none() {
            return Ok(());
        }
        for dep in self.graph.dependents_of(&owner.uid) {
            self.remove_owner_refs(&dep, &[owner.uid.as_str()]).await?;
        }
        self.remove_finalizer(owner, ORPHAN).await
    }

    fn classify(&self, id: &ObjId, r: &OwnerRef) -> Result<Class, Unresolvable> {
        let info = match self.resolve(&r.api_version, &r.kind) {
            Some(info) => info,
            // client-go's discovery mapper also maps `<Kind>List` to a guessed resource; a GET on
            // it is a 404, so such a reference is simply absent.
            None if r
                .kind
                .strip_suffix("List")
                .is_some_and(|k| self.resolve(&r.api_version, k).is_some()) =>
            {
                return Ok(Class::Dangling);
            }
            None => return Err(Unresolvable::NoMapping),
        };
        if info.namespaced && id.namespace.is_empty() {
            return Err(Unresolvable::NamespacedOwnerOfClusterScoped);
        }
        let ns = if info.namespaced { id.namespace.as_str() } else { "" };
        match self.store.get_stored(&info.storage, ns, &r.name) {
            Some(owner) if meta::uid(&owner) == r.uid => {
                if meta::is_deleting(&owner) && has_finalizer(&owner, FOREGROUND) {
                    Ok(Class::Waiting)
                } else {
                    Ok(Class::Solid)
                }
            }
            _ => Ok(Class::Dangling),
        }
    }

    /// The REST mapping of an owner reference: exactly its group and version, its kind as
    /// written or all lowercase (as client-go's discovery mapper registers them).
    fn resolve(&self, api_version: &str, kind: &str) -> Option<Arc<ResourceInfo>> {
        if api_version.is_empty() || api_version.matches('/').count() > 1 || kind.is_empty() {
            return None;
        }
        let (group, version) = split_api_version(api_version);
        if version.is_empty() {
            return None;
        }
        self.registry.all().into_iter().find(|info| {
            info.group == group && (info.kind == kind || info.kind.to_lowercase() == kind) && info.serves(&version)
        })
    }

    /// The object if it still is the incarnation `id` names.
    fn live(&self, id: &ObjId) -> Option<Arc<Value>> {
        self.store
            .get_stored(&id.key, &id.namespace, &id.name)
            .filter(|o| meta::uid(o) == id.uid)
    }

    fn gvr(&self, id: &ObjId) -> Option<Gvr> {
        let info = self.registry.get(&id.key)?;
        Some(Gvr::new(&info.group, &info.storage_version, &info.resource))
    }

    async fn delete(&mut self, id: &ObjId, policy: &str) -> Result<(), GcError> {
        let Some(gvr) = self.gvr(id) else { return Ok(()) };
        tracing::debug!(resource = %id.key.resource, namespace = %id.namespace, name = %id.name, policy, "garbage collecting");
        let opts = DeleteOptions {
            propagation_policy: Some(policy.to_string()),
            precondition_uid: Some(id.uid.clone()),
            user: gc_user(),
            ..Default::default()
        };
        match self.store.delete(&gvr, &id.namespace, &id.name, &opts).await {
            // A Conflict is the uid precondition: another object of that name now.
            Ok(_) | Err(ApiError::NotFound(_)) | Err(ApiError::Conflict { .. }) => Ok(()),
            Err(source) => Err(GcError::Delete {
                what: describe(id),
                source,
            }),
        }
    }

    /// Removes the owner references with these uids (a JSON merge patch guarded by the
    /// resourceVersion, as the real collector's fallback patch).
    async fn remove_owner_refs(&mut self, id: &ObjId, uids: &[&str]) -> Result<(), GcError> {
        self.rewrite_owner_refs(id, |refs| {
            refs.retain(|r| !r.get("uid").and_then(Value::as_str).is_some_and(|u| uids.contains(&u)));
        })
        .await
        .map_err(|source| GcError::RemoveOwnerRefs {
            what: describe(id),
            source,
        })
    }

    /// Sets `blockOwnerDeletion: false` on every blocking reference of `id`.
    async fn unblock_owner_refs(&mut self, id: &ObjId) -> Result<(), GcError> {
        self.rewrite_owner_refs(id, |refs| {
            for r in refs.iter_mut() {
                if r.get("blockOwnerDeletion").and_then(Value::as_bool) == Some(true) {
                    r["blockOwnerDeletion"] = json!(false);
                }
            }
        })
        .await
        .map_err(|source| GcError::Unblock {
            what: describe(id),
            source,
        })
    }

    async fn rewrite_owner_refs(&self, id: &ObjId, edit: impl Fn(&mut Vec<Value>)) -> Result<(), ApiError> {
        let Some(gvr) = self.gvr(id) else { return Ok(()) };
        let mut last = None;
        for _ in 0..CONFLICT_RETRIES {
            let Some(latest) = self.live(id) else { return Ok(()) };
            let before: Vec<Value> = latest
                .pointer("/metadata/ownerReferences")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            let mut after = before.clone();
            edit(&mut after);
            if after == before {
                return Ok(());
            }
            let refs = if after.is_empty() {
                Value::Null
            } else {
                Value::Array(after)
            };
            let body =
                json!({ "metadata": { "resourceVersion": meta::resource_version(&latest), "ownerReferences": refs } });
            match self
                .store
                .patch(
                    &gvr,
                    &id.namespace,
                    &id.name,
                    &PatchBody::Merge(body),
                    None,
                    &gc_write_options(),
                )
                .await
            {
                Ok(_) | Err(ApiError::NotFound(_)) => return Ok(()),
                Err(e @ ApiError::Conflict { .. }) => last = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last.unwrap_or_else(|| ApiError::Internal("conflicting writes".into())))
    }

    async fn remove_finalizer(&self, id: &ObjId, finalizer: &'static str) -> Result<(), GcError> {
        let fail = |source| GcError::RemoveFinalizer {
            what: describe(id),
            finalizer,
            source,
        };
        let Some(gvr) = self.gvr(id) else { return Ok(()) };
        let mut last = None;
        for _ in 0..CONFLICT_RETRIES {
            let Some(latest) = self.live(id) else { return Ok(()) };
            let before = meta::finalizers(&latest);
            let after: Vec<&String> = before.iter().filter(|f| *f != finalizer).collect();
            if after.len() == before.len() {
                return Ok(());
            }
            let finalizers = if after.is_empty() { Value::Null } else { json!(after) };
            let body =
                json!({ "metadata": { "resourceVersion": meta::resource_version(&latest), "finalizers": finalizers } });
            match self
                .store
                .patch(
                    &gvr,
                    &id.namespace,
                    &id.name,
                    &PatchBody::Merge(body),
                    None,
                    &gc_write_options(),
                )
                .await
            {
                Ok(_) | Err(ApiError::NotFound(_)) => return Ok(()),
                Err(e @ ApiError::Conflict { .. }) => last = Some(e),
                Err(e) => return Err(fail(e)),
            }
        }
        Err(fail(
            last.unwrap_or_else(|| ApiError::Internal("conflicting writes".into())),
        ))
    }

    /// The Warning Event the real graph builder records when a dependent names an owner that
    /// exists in another namespace (or a cluster-scoped dependent names a namespaced owner).
    async fn report_invalid_namespace(&mut self, id: &ObjId, r: &OwnerRef) {
        let Some(owner) = self.graph.object(&r.uid) else { return };
        if owner.namespace.is_empty() || owner.namespace == id.namespace {
            return;
        }
        if !self.reported.insert((id.uid.clone(), r.uid.clone())) {
            return;
        }
        let Some(info) = self.registry.get(&id.key) else { return };
        let message = format!(
            "ownerRef [{}/{}, namespace: {}, name: {}, uid: {}] does not exist in namespace {:?}",
            r.api_version, r.kind, id.namespace, r.name, r.uid, id.namespace
        );
        let involved = json!({
            "kind": info.kind,
            "namespace": id.namespace,
            "name": id.name,
            "uid": id.uid,
            "apiVersion": crate::registry::api_version(&info.group, &info.storage_version),
        });
        let event_ns = if id.namespace.is_empty() {
            "default"
        } else {
            id.namespace.as_str()
        };
        if let Err(e) = record_warning(
            &self.store,
            event_ns,
            &id.name,
            involved,
            "OwnerRefInvalidNamespace",
            &message,
        )
        .await
        {
            tracing::debug!(error = %e, "could not record the OwnerRefInvalidNamespace event");
        }
    }
}

fn has_finalizer(obj: &Value, finalizer: &str) -> bool {
    meta::finalizers(obj).iter().any(|f| f == finalizer)
}

fn describe(id: &ObjId) -> String {
    let res = if id.key.group.is_empty() {
        id.key.resource.clone()
    } else {
        format!("{}.{}", id.key.resource, id.key.group)
    };
    if id.namespace.is_empty() {
        format!("{res} {}", id.name)
    } else {
        format!("{res} {}/{}", id.namespace, id.name)
    }
}

/// The identity the real collector writes with.
fn gc_user() -> UserInfo {
    UserInfo {
        username: "system:serviceaccount:kube-system:generic-garbage-collector".into(),
        uid: String::new(),
        groups: vec![
            "system:serviceaccounts".into(),
            "system:serviceaccounts:kube-system".into(),
            "system:authenticated".into(),
        ],
    }
}

fn gc_write_options() -> WriteOptions {
    WriteOptions {
        field_manager: Some("kube-controller-manager".into()),
        user: gc_user(),
        ..Default::default()
    }
}

/// Records a core/v1 Warning Event from the garbage collector, named as client-go's recorder
/// names events (`<object>.<unix nanos in hex>`).
async fn record_warning(
    store: &crate::store::Store,
    namespace: &str,
    object_name: &str,
    involved: Value,
    reason: &str,
    message: &str,
) -> Result<(), ApiError> {
    let now = jiff::Timestamp::now();
    let name = format!("{object_name}.{:x}", now.as_nanosecond());
    let ts = meta::rfc3339(now);
    let event = json!({
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": { "name": name, "namespace": namespace },
        "involvedObject": involved,
        "reason": reason,
        "message": message,
        "source": { "component": "garbage-collector-controller" },
        "firstTimestamp": ts,
        "lastTimestamp": ts,
        "count": 1,
        "type": "Warning",
        "eventTime": null,
        "reportingComponent": "garbage-collector-controller",
        "reportingInstance": "",
    });
    store
        .create(&Gvr::new("", "v1", "events"), namespace, event, &gc_write_options())
        .await
        .map(|_| ())
}
