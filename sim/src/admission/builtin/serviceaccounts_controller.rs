//! The service-account controller (`pkg/controller/serviceaccount`): every active namespace has
//! a `default` ServiceAccount, recreated if deleted. With a cluster CA it also does what the
//! root-CA publisher (`pkg/controller/certificates/rootcacertpublisher`) does: a
//! `kube-root-ca.crt` ConfigMap with `ca.crt` in every namespace, which the projected
//! `kube-api-access-*` volumes of pods refer to.

use serde_json::{Value, json};

use crate::admission_seam::UserInfo;
use crate::gc::BackgroundTask;
use crate::meta;
use crate::registry::Gvr;
use crate::status::ApiError;
use crate::store::{Change, ChangeKind, Store, WriteOptions};

pub const DEFAULT_SERVICE_ACCOUNT: &str = "default";
pub const ROOT_CA_CONFIGMAP: &str = "kube-root-ca.crt";
const ROOT_CA_DESCRIPTION: &str = "Contains a CA bundle that can be used to verify the kube-apiserver when using internal endpoints such as the internal service IP or kubernetes.default.svc. No other usage is guaranteed across distributions of Kubernetes clusters.";

/// Starts the controller; `root_ca_pem` enables the `kube-root-ca.crt` ConfigMaps.
pub fn spawn(store: &Store, root_ca_pem: Option<String>) -> BackgroundTask {
    let store = store.clone();
    BackgroundTask::spawn(
        "serviceaccounts-controller",
        async move { run(store, root_ca_pem).await },
    )
}

async fn run(store: Store, root_ca: Option<String>) {
    let (rv, objects) = store.snapshot();
    for (key, obj) in &objects {
        if key.group.is_empty() && key.resource == "namespaces" {
            ensure(&store, meta::name(obj), root_ca.as_deref()).await;
        }
    }
    let mut feed = store.changes(rv);
    loop {
        let change = match feed.next().await {
            Ok(c) => c,
            Err(ApiError::Expired(_)) => {
                feed = store.changes(store.current_rv());
                let nss = store.list(&Gvr::new("", "v1", "namespaces"), None, &Default::default());
                for ns in nss
                    .ok()
                    .and_then(|l| l["items"].as_array().cloned())
                    .unwrap_or_default()
                {
                    ensure(&store, meta::name(&ns), root_ca.as_deref()).await;
                }
                continue;
            }
            Err(_) => return,
        };
        if let Some(ns) = namespace_to_check(&change, root_ca.is_some()) {
            ensure(&store, &ns, root_ca.as_deref()).await;
        }
    }
}

/// The namespace a change calls for a look at: a namespace added, or what we keep there
/// removed or changed.
fn namespace_to_check(change: &Change, publish_ca: bool) -> Option<String> {
    let obj = &change.object;
    let (group, resource) = (change.resource.group.as_str(), change.resource.resource.as_str());
    match (group, resource) {
        ("", "namespaces") if change.kind == ChangeKind::Added => Some(meta::name(obj).to_string()),
        ("", "serviceaccounts") if change.kind == ChangeKind::Deleted && meta::name(obj) == DEFAULT_SERVICE_ACCOUNT => {
            Some(meta::namespace(obj).to_string())
        }
        ("", "configmaps")
            if publish_ca && meta::name(obj) == ROOT_CA_CONFIGMAP && change.kind != ChangeKind::Added =>
        {
            Some(meta::namespace(obj).to_string())
        }
        _ => None,
    }
}

fn user() -> UserInfo {
    UserInfo {
        username: "system:serviceaccount:kube-system:service-account-controller".into(),
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
        user: user(),
        ..Default::default()
    }
}

/// Creates what is missing in an active namespace. Failures (the namespace started terminating,
/// a race with a client) are left to the next change.
async fn ensure(store: &Store, namespace: &str, root_ca: Option<&str>) {
    let Ok(ns) = store.get(&Gvr::new("", "v1", "namespaces"), "", namespace) else {
        return;
    };
    if meta::is_deleting(&ns) || ns.pointer("/status/phase").and_then(Value::as_str) == Some("Terminating") {
        return;
    }
    let sa_gvr = Gvr::new("", "v1", "serviceaccounts");
    if store.get(&sa_gvr, namespace, DEFAULT_SERVICE_ACCOUNT).is_err() {
        let sa =
            json!({ "apiVersion": "v1", "kind": "ServiceAccount", "metadata": { "name": DEFAULT_SERVICE_ACCOUNT } });
        match store.create(&sa_gvr, namespace, sa, &write_options()).await {
            Ok(_) | Err(ApiError::AlreadyExists(_)) => {}
            Err(e) => tracing::debug!(namespace, error = %e, "could not create the default ServiceAccount"),
        }
    }
    if let Some(ca) = root_ca {
        publish_root_ca(store, namespace, ca).await;
    }
}

async fn publish_root_ca(store: &Store, namespace: &str, ca: &str) {
    let gvr = Gvr::new("", "v1", "configmaps");
    let desired_data = json!({ "ca.crt": ca });
    let result = match store.get(&gvr, namespace, ROOT_CA_CONFIGMAP) {
        Ok(cm) if cm.get("data") == Some(&desired_data) => return,
        Ok(mut cm) => {
            // Someone edited it: put the CA back, as the publisher does.
            cm["data"] = desired_data;
            store
                .update(&gvr, namespace, ROOT_CA_CONFIGMAP, cm, None, &write_options())
                .await
                .map(|_| ())
        }
        Err(_) => {
            let cm = json!({
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": { "name": ROOT_CA_CONFIGMAP, "annotations": { "kubernetes.io/description": ROOT_CA_DESCRIPTION } },
                "data": desired_data,
            });
            match store.create(&gvr, namespace, cm, &write_options()).await {
                Err(ApiError::AlreadyExists(_)) => Ok(()),
                other => other.map(|_| ()),
            }
        }
    };
    if let Err(e) = result {
        tracing::debug!(namespace, error = %e, "could not publish the root CA ConfigMap");
    }
}
