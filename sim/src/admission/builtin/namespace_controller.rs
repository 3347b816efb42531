//! The namespace controller (`pkg/controller/namespace`): a deleted namespace is Terminating
//! (the store sets that), its content is deleted (background propagation), the status shows what
//! remains, and once nothing is left the `kubernetes` finalizer is removed through
//! `namespaces/<name>/finalize`, which lets the store remove the namespace.
//!
//! It follows the change feed: a namespace is looked at again when it changes or when anything
//! in it is removed.

use std::collections::{BTreeMap, HashSet};

use serde_json::{Value, json};

use crate::admission_seam::UserInfo;
use crate::error_chain::ErrorChain;
use crate::gc::BackgroundTask;
use crate::meta;
use crate::registry::{Gvr, ResourceInfo};
use crate::status::ApiError;
use crate::store::{ChangeKind, DeleteOptions, Store, WriteOptions};

/// The finalizer the namespace controller owns (`spec.finalizers`).
pub const KUBERNETES_FINALIZER: &str = "kubernetes";

const CONFLICT_RETRIES: usize = 5;

/// Starts the namespace controller on `store`.
pub fn spawn(store: &Store) -> BackgroundTask {
    let store = store.clone();
    BackgroundTask::spawn("namespace-controller", async move { run(store).await })
}

/// Why a namespace could not be finished this time (it is looked at again on the next change).
#[derive(Debug, thiserror::Error)]
enum NamespaceError {
    #[error("deleting {resource} {namespace}/{name}")]
    DeleteContent {
        resource: String,
        namespace: String,
        name: String,
        source: ApiError,
    },
    #[error("updating the status of namespace {namespace}")]
    Status { namespace: String, source: ApiError },
    #[error("finalizing namespace {namespace}")]
    Finalize { namespace: String, source: ApiError },
}

async fn run(store: Store) {
    let (rv, objects) = store.snapshot();
    let mut terminating: HashSet<String> = objects
        .iter()
        .filter(|(k, o)| is_namespaces(&k.group, &k.resource) && meta::is_deleting(o))
        .map(|(_, o)| meta::name(o).to_string())
        .collect();
    for ns in terminating.clone() {
        sync(&store, &ns).await;
    }
    let mut feed = store.changes(rv);
    loop {
        // Take every change already committed before syncing, so a burst of removals in one
        // namespace costs one sync.
        let mut dirty = Vec::new();
        let mut next = Some(feed.next().await);
        while let Some(result) = next.take() {
            let change = match result {
                Ok(c) => c,
                Err(ApiError::Expired(_)) => {
                    // Fell behind: look at every terminating namespace again.
                    feed = store.changes(store.current_rv());
                    let nss = store.list(&Gvr::new("", "v1", "namespaces"), None, &Default::default());
                    let items = nss
                        .ok()
                        .and_then(|l| l["items"].as_array().cloned())
                        .unwrap_or_default();
                    terminating = items
                        .iter()
                        .filter(|o| meta::is_deleting(o))
                        .map(|o| meta::name(o).to_string())
                        .collect();
                    dirty.extend(terminating.iter().cloned());
                    break;
                }
                Err(_) => return,
            };
            let obj = &change.object;
            if is_namespaces(&change.resource.group, &change.resource.resource) {
                let name = meta::name(obj).to_string();
                if change.kind == ChangeKind::Deleted {
                    terminating.remove(&name);
                } else if meta::is_deleting(obj) && terminating.insert(name.clone()) {
                    // Our own status updates come back as changes: only new deletions need a sync.
                    dirty.push(name);
                }
            } else if change.kind == ChangeKind::Deleted && terminating.contains(meta::namespace(obj)) {
                dirty.push(meta::namespace(obj).to_string());
            }
            next = futures::FutureExt::now_or_never(feed.next());
        }
        let mut done = HashSet::new();
        for ns in dirty {
            if terminating.contains(&ns) && done.insert(ns.clone()) {
                sync(&store, &ns).await;
            }
        }
    }
}

fn is_namespaces(group: &str, resource: &str) -> bool {
    group.is_empty() && resource == "namespaces"
}

fn controller_user() -> UserInfo {
    UserInfo {
        username: "system:serviceaccount:kube-system:namespace-controller".into(),
        uid: String::new(),
        groups: vec![
            "system:serviceaccounts".into(),
            "system:serviceaccounts:kube-system".into(),
            "system:authenticated".into(),
        ],
    }
}

fn write_options() -> WriteOptions {
    WriteOptions {
        field_manager: Some("kube-controller-manager".into()),
        user: controller_user(),
        ..Default::default()
    }
}

async fn sync(store: &Store, namespace: &str) {
    if let Err(e) = sync_inner(store, namespace).await {
        tracing::warn!(error = %ErrorChain(&e), namespace, "namespace deletion step failed; retried on the next change");
    }
}

/// What remains in a namespace, by resource and by finalizer.
#[derive(Default)]
struct Remaining {
    by_resource: BTreeMap<String, usize>,
    by_finalizer: BTreeMap<String, usize>,
}

async fn sync_inner(store: &Store, namespace: &str) -> Result<(), NamespaceError> {
    let ns_gvr = Gvr::new("", "v1", "namespaces");
    let Ok(ns) = store.get(&ns_gvr, "", namespace) else {
        return Ok(());
    };
    if !meta::is_deleting(&ns) || !spec_finalizers(&ns).iter().any(|f| f == KUBERNETES_FINALIZER) {
        return Ok(());
    }
    let remaining = delete_content(store, namespace).await?;
    update_conditions(store, namespace, &remaining).await?;
    if remaining.by_resource.is_empty() {
        finalize(store, namespace).await?;
    }
    Ok(())
}

/// Deletes every object in the namespace that is not already being deleted; returns what is
/// still there afterwards.
async fn delete_content(store: &Store, namespace: &str) -> Result<Remaining, NamespaceError> {
    let namespaced: Vec<std::sync::Arc<ResourceInfo>> =
        store.registry().all().into_iter().filter(|i| i.namespaced).collect();
    let mut seen_storage = HashSet::new();
    let mut remaining = Remaining::default();
    let opts = DeleteOptions {
        propagation_policy: Some("Background".into()),
        user: controller_user(),
        ..Default::default()
    };
    for info in namespaced {
        // Resources sharing storage (core and events.k8s.io Events) are one set of objects.
        if !seen_storage.insert(info.storage.clone()) {
            continue;
        }
        let gvr = Gvr::new(&info.group, &info.storage_version, &info.resource);
        let Ok(list) = store.list(&gvr, Some(namespace), &Default::default()) else {
            continue;
        };
        for item in list["items"].as_array().map(Vec::as_slice).unwrap_or_default() {
            let name = meta::name(item);
            if !meta::is_deleting(item) {
                match store.delete(&gvr, namespace, name, &opts).await {
                    Ok(d) if d.gone => continue,
                    Ok(_) | Err(ApiError::NotFound(_)) => {}
                    Err(source) => {
                        return Err(NamespaceError::DeleteContent {
                            resource: info.resource.clone(),
                            namespace: namespace.into(),
                            name: name.into(),
                            source,
                        });
                    }
                }
            }
            if store.get_stored(&info.storage, namespace, name).is_some() {
                *remaining
                    .by_resource
                    .entry(format!("{}.{}", info.resource, info.group))
                    .or_default() += 1;
                for f in meta::finalizers(item) {
                    *remaining.by_finalizer.entry(f).or_default() += 1;
                }
            }
        }
    }
    Ok(remaining)
}

fn spec_finalizers(ns: &Value) -> Vec<String> {
    ns.pointer("/spec/finalizers")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).map(str::to_string).collect())
        .unwrap_or_default()
}

/// The five deletion conditions the real controller keeps on a terminating namespace.
fn conditions(remaining: &Remaining) -> Vec<(&'static str, &'static str, &'static str, String)> {
    let mut out = vec![
        (
            "NamespaceDeletionDiscoveryFailure",
            "False",
            "ResourcesDiscovered",
            "All resources successfully discovered".to_string(),
        ),
        (
            "NamespaceDeletionGroupVersionParsingFailure",
            "False",
            "ParsedGroupVersions",
            "All legacy kube types successfully parsed".to_string(),
        ),
        (
            "NamespaceDeletionContentFailure",
            "False",
            "ContentDeleted",
            "All content successfully deleted, may be waiting on finalization".to_string(),
        ),
    ];
    if remaining.by_resource.is_empty() {
        out.push((
            "NamespaceContentRemaining",
            "False",
            "ContentRemoved",
            "All content successfully removed".to_string(),
        ));
    } else {
        let list: Vec<String> = remaining
            .by_resource
            .iter()
            .map(|(r, n)| format!("{r} has {n} resource instances"))
            .collect();
        out.push((
            "NamespaceContentRemaining",
            "True",
            "SomeResourcesRemain",
            format!("Some resources are remaining: {}", list.join(", ")),
        ));
    }
    if remaining.by_finalizer.is_empty() {
        out.push((
            "NamespaceFinalizersRemaining",
            "False",
            "ContentHasNoFinalizers",
            "All content-preserving finalizers finished".to_string(),
        ));
    } else {
        let list: Vec<String> = remaining
            .by_finalizer
            .iter()
            .map(|(f, n)| format!("{f} in {n} resource instances"))
            .collect();
        out.push((
            "NamespaceFinalizersRemaining",
            "True",
            "SomeFinalizersRemain",
            format!(
                "Some content in the namespace has finalizers remaining: {}",
                list.join(", ")
            ),
        ));
    }
    out
}

async fn update_conditions(store: &Store, namespace: &str, remaining: &Remaining) -> Result<(), NamespaceError> {
    let gvr = Gvr::new("", "v1", "namespaces");
    let fail = |source| NamespaceError::Status {
        namespace: namespace.into(),
        source,
    };
    for _ in 0..CONFLICT_RETRIES {
        let Ok(mut ns) = store.get(&gvr, "", namespace) else {
            return Ok(());
        };
        let old: Vec<Value> = ns
            .pointer("/status/conditions")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let now = meta::now_rfc3339();
        let new: Vec<Value> = conditions(remaining)
            .into_iter()
            .map(|(type_, status, reason, message)| {
                // The transition time moves only when the status does.
                let since = old
                    .iter()
                    .find(|c| c["type"] == type_ && c["status"] == status)
                    .and_then(|c| c.get("lastTransitionTime").cloned())
                    .unwrap_or(json!(now));
                json!({ "type": type_, "status": status, "lastTransitionTime": since, "reason": reason, "message": message })
            })
            .collect();
        if new == old {
            return Ok(());
        }
        ns["status"]["conditions"] = Value::Array(new);
        match store
            .update(&gvr, "", namespace, ns, Some("status"), &write_options())
            .await
        {
            Ok(_) | Err(ApiError::NotFound(_)) => return Ok(()),
            Err(ApiError::Conflict { .. }) => continue,
            Err(e) => return Err(fail(e)),
        }
    }
    Ok(())
}

async fn finalize(store: &Store, namespace: &str) -> Result<(), NamespaceError> {
    let gvr = Gvr::new("", "v1", "namespaces");
    for _ in 0..CONFLICT_RETRIES {
        let Ok(mut ns) = store.get(&gvr, "", namespace) else {
            return Ok(());
        };
        let kept: Vec<String> = spec_finalizers(&ns)
            .into_iter()
            .filter(|f| f != KUBERNETES_FINALIZER)
            .collect();
        ns["spec"]["finalizers"] = json!(kept);
        match store
            .update(&gvr, "", namespace, ns, Some("finalize"), &write_options())
            .await
        {
            Ok(_) | Err(ApiError::NotFound(_)) => return Ok(()),
            Err(ApiError::Conflict { .. }) => continue,
            Err(source) => {
                return Err(NamespaceError::Finalize {
                    namespace: namespace.into(),
                    source,
                });
            }
        }
    }
    Ok(())
}
