//! The EndpointSlice controller (`pkg/controller/endpointslice`): for every Service with a
//! selector, `discovery.k8s.io/v1` EndpointSlices (`addressType: IPv4`, generated names
//! `<service>-xxxxx`, owned by the Service) listing the matching pods of its namespace that have
//! an IP and are not finished for good — terminating pods included, with the conditions
//! `ready` (ready and not terminating, or `publishNotReadyAddresses`), `serving` (ready) and
//! `terminating` — with `targetRef`, `nodeName` and `hostname` (pods whose `subdomain` is the
//! Service). Pods are grouped by their resolved ports (`targetPort` by number or by container
//! port name), at most 100 endpoints a slice; a Service without matching pods has one empty
//! placeholder slice. Labels: the Service's, `kubernetes.io/service-name`,
//! `endpointslice.kubernetes.io/managed-by: endpointslice-controller.k8s.io` and
//! `service.kubernetes.io/headless` for headless Services. Slices of a deleted Service go with
//! it through the garbage collector (owner reference). Selector-less Services (whose Endpoints
//! the mirroring controller would copy) get none. The Endpoints controller
//! (`network/endpoints.rs`) shares the pod and port rules.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value, json};

use super::pods::{self, write_opts};
use super::queue::{Key, Reconciler};
use crate::meta;
use crate::network::endpoints as ep;
use crate::registry::{Gvr, ResourceKey};
use crate::status::ApiError;
use crate::store::{Change, ChangeKind, DeleteOptions, ListOptions, Store};

pub(crate) const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";
pub(crate) const MANAGED_BY_LABEL: &str = "endpointslice.kubernetes.io/managed-by";
pub(crate) const MANAGED_BY: &str = "endpointslice-controller.k8s.io";
const HEADLESS_LABEL: &str = "service.kubernetes.io/headless";
const TRIGGER_TIME: &str = "endpoints.kubernetes.io/last-change-trigger-time";
const MAX_ENDPOINTS: usize = 100;

fn gvr() -> Gvr {
    Gvr::new("discovery.k8s.io", "v1", "endpointslices")
}

#[derive(Default)]
pub(crate) struct EndpointSlices {
    /// Services with a selector, by namespace: name → selector.
    selectors: HashMap<String, HashMap<String, Map<String, Value>>>,
}

impl EndpointSlices {
    fn remember(&mut self, svc: &Value, deleted: bool) {
        let ns = meta::namespace(svc).to_string();
        let name = meta::name(svc).to_string();
        match ep::selector(svc).filter(|_| !deleted) {
            Some(sel) => {
                self.selectors.entry(ns).or_default().insert(name, sel);
            }
            None => {
                if let Some(m) = self.selectors.get_mut(&ns) {
                    m.remove(&name);
                }
            }
        }
    }
}

impl Reconciler for EndpointSlices {
    const NAME: &'static str = "endpointslice-controller";

    fn initial_keys(&mut self, objects: &[(ResourceKey, Arc<Value>)]) -> Vec<Key> {
        self.selectors.clear();
        let mut keys = Vec::new();
        for (k, o) in objects {
            if k.group.is_empty() && k.resource == "services" {
                self.remember(o, false);
                keys.push((meta::namespace(o).to_string(), meta::name(o).to_string()));
            }
        }
        keys
    }

    fn keys_for(&mut self, _store: &Store, change: &Change) -> Vec<Key> {
        let obj = &change.object;
        let ns = meta::namespace(obj).to_string();
        match (change.resource.group.as_str(), change.resource.resource.as_str()) {
            ("", "services") => {
                self.remember(obj, change.kind == ChangeKind::Deleted);
                vec![(ns, meta::name(obj).to_string())]
            }
            ("", "pods") => {
                let Some(services) = self.selectors.get(&ns) else {
                    return Vec::new();
                };
                let labels = |o: &Value| o.pointer("/metadata/labels").and_then(Value::as_object).cloned();
                let now = labels(obj);
                let before = change.previous.as_deref().and_then(labels);
                services
                    .iter()
                    .filter(|(_, sel)| ep::matches(sel, now.as_ref()) || ep::matches(sel, before.as_ref()))
                    .map(|(n, _)| (ns.clone(), n.clone()))
                    .collect()
            }
            // Someone else changed a slice this controller manages: put it back.
            ("discovery.k8s.io", "endpointslices") => {
                let labels = obj.pointer("/metadata/labels");
                let label = |k: &str| labels.and_then(|l| l.get(k)).and_then(Value::as_str);
                match (label(SERVICE_NAME_LABEL), label(MANAGED_BY_LABEL)) {
                    (Some(svc), Some(MANAGED_BY)) => vec![(ns, svc.to_string())],
                    _ => Vec::new(),
                }
            }
            _ => Vec::new(),
        }
    }

    async fn sync(&mut self, store: &Store, key: &Key) -> Result<Option<Duration>, ApiError> {
        let svc_key = ResourceKey {
            group: String::new(),
            resource: "services".into(),
        };
        let Some(service) = store.get_stored(&svc_key, &key.0, &key.1) else {
            // The garbage collector deletes its slices (they are owned by the Service).
            return Ok(None);
        };
        if meta::is_deleting(&service) {
            return Ok(None);
        }
        sync_service(store, &service).await.map(|()| None)
    }
}

/// The endpoints of `pods` for `service`, grouped by their ports (as JSON text).
fn desired(service: &Value, pods: &[Value]) -> BTreeMap<String, Vec<Value>> {
    let publish_not_ready = service
        .pointer("/spec/publishNotReadyAddresses")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let svc_ports: Vec<&Value> = service
        .pointer("/spec/ports")
        .and_then(Value::as_array)
        .map(|p| p.iter().collect())
        .unwrap_or_default();
    let svc_name = meta::name(service);
    let mut groups: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    for pod in pods {
        if !ep::should_be_in_endpoints(pod, true) {
            continue;
        }
        let Some(ip) = pod
            .pointer("/status/podIP")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
        else {
            continue;
        };
        let serving = ep::is_ready(pod);
        let terminating = meta::is_deleting(pod);
        let mut endpoint = json!({
            "addresses": [ip],
            "conditions": {
                "ready": publish_not_ready || (serving && !terminating),
                "serving": serving,
                "terminating": terminating,
            },
        });
        ep::add_pod_identity(&mut endpoint, pod, svc_name);
        let mut ports = Vec::new();
        for sp in &svc_ports {
            let Some(number) = ep::find_port(pod, sp) else { continue };
            let mut port = json!({
                "name": sp.get("name").and_then(Value::as_str).unwrap_or(""),
                "port": number,
                "protocol": sp.get("protocol").and_then(Value::as_str).unwrap_or("TCP"),
            });
            if let Some(a) = sp.get("appProtocol") {
                port["appProtocol"] = a.clone();
            }
            ports.push(port);
        }
        ports.sort_by_key(|p| p.to_string());
        groups.entry(json!(ports).to_string()).or_default().push(endpoint);
    }
    for eps in groups.values_mut() {
        eps.sort_by_key(|e| {
            e.pointer("/targetRef/name")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string()
        });
    }
    groups
}

/// Makes the slices of `service` what its pods call for: slices with the same ports are reused
/// (rewritten only when they differ), missing ones created, surplus ones deleted.
async fn sync_service(store: &Store, service: &Value) -> Result<(), ApiError> {
    let ns = meta::namespace(service);
    let name = meta::name(service);
    let Some(sel) = ep::selector(service) else {
        return Ok(());
    };
    let label_selector = sel
        .iter()
        .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
        .collect::<Vec<_>>()
        .join(",");
    let pods = store.list(
        &pods::pods_gvr(),
        Some(ns),
        &ListOptions {
            label_selector: Some(label_selector),
            ..Default::default()
        },
    )?;
    let pods: Vec<Value> = pods["items"].as_array().cloned().unwrap_or_default();
    let groups = desired(service, &pods);
    // (ports as JSON text or "null" for the placeholder, endpoints) per wanted slice.
    let mut wanted: Vec<(String, Vec<Value>)> = Vec::new();
    for (ports, eps) in groups {
        for chunk in eps.chunks(MAX_ENDPOINTS) {
            wanted.push((ports.clone(), chunk.to_vec()));
        }
    }
    if wanted.is_empty() {
        wanted.push(("null".into(), Vec::new()));
    }

    let existing = store.list(
        &gvr(),
        Some(ns),
        &ListOptions {
            label_selector: Some(format!("{SERVICE_NAME_LABEL}={name},{MANAGED_BY_LABEL}={MANAGED_BY}")),
            ..Default::default()
        },
    )?;
    let mut existing: Vec<Value> = existing["items"].as_array().cloned().unwrap_or_default();
    existing.sort_by_key(|s| meta::name(s).to_string());

    let mut labels = service
        .pointer("/metadata/labels")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    labels.insert(SERVICE_NAME_LABEL.into(), json!(name));
    labels.insert(MANAGED_BY_LABEL.into(), json!(MANAGED_BY));
    if service.pointer("/spec/clusterIP").and_then(Value::as_str) == Some("None") {
        labels.insert(HEADLESS_LABEL.into(), json!(""));
    }
    let now = pods::now_string();
    for (ports, eps) in wanted {
        let ports_value: Value = serde_json::from_str(&ports).unwrap_or(Value::Null);
        let pos = existing
            .iter()
            .position(|s| s.get("ports").cloned().unwrap_or(Value::Null) == ports_value);
        match pos.map(|i| existing.remove(i)) {
            Some(current) => {
                let same = current.get("endpoints").cloned().unwrap_or(json!([])) == json!(eps)
                    && current.pointer("/metadata/labels") == Some(&json!(labels));
                if same {
                    continue;
                }
                let mut obj = current.clone();
                obj["metadata"]["labels"] = json!(labels);
                if !obj["metadata"]["annotations"].is_object() {
                    obj["metadata"]["annotations"] = json!({});
                }
                obj["metadata"]["annotations"][TRIGGER_TIME] = json!(now);
                obj["endpoints"] = json!(eps);
                store
                    .update(&gvr(), ns, meta::name(&current), obj, None, &write_opts())
                    .await?;
            }
            None => {
                let slice = json!({
                    "apiVersion": "discovery.k8s.io/v1",
                    "kind": "EndpointSlice",
                    "metadata": {
                        "generateName": format!("{name}-"),
                        "namespace": ns,
                        "labels": labels,
                        "annotations": { TRIGGER_TIME: now },
                        "ownerReferences": [pods::controller_ref(service, "v1", "Service")],
                    },
                    "addressType": "IPv4",
                    "endpoints": eps,
                    "ports": ports_value,
                });
                store.create(&gvr(), ns, slice, &write_opts()).await?;
            }
        }
    }
    for stale in existing {
        let opts = DeleteOptions {
            precondition_uid: Some(meta::uid(&stale).to_string()),
            ..Default::default()
        };
        match store.delete(&gvr(), ns, meta::name(&stale), &opts).await {
            Ok(_) | Err(ApiError::NotFound(_)) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terminating_pods_stay_with_their_conditions() {
        let svc = json!({ "metadata": { "name": "web", "namespace": "ns" },
            "spec": { "selector": { "app": "web" }, "ports": [{ "name": "http", "port": 80, "protocol": "TCP", "targetPort": 8080 }] } });
        let pod = |name: &str, ready: bool, deleting: bool| {
            let mut p = json!({ "metadata": { "name": name, "namespace": "ns", "uid": name },
                "spec": { "nodeName": "n1", "containers": [{ "name": "c" }] },
                "status": { "phase": "Running", "podIP": format!("127.1.128.{}", name.len()),
                    "conditions": [{ "type": "Ready", "status": if ready { "True" } else { "False" } }] } });
            if deleting {
                p["metadata"]["deletionTimestamp"] = json!("2025-01-01T00:00:00Z");
            }
            p
        };
        let groups = desired(
            &svc,
            &[pod("a", true, false), pod("bb", true, true), pod("ccc", false, false)],
        );
        assert_eq!(groups.len(), 1);
        let eps = groups.values().next().cloned().unwrap_or_default();
        let conds: Vec<(String, Value)> = eps
            .iter()
            .map(|e| {
                (
                    e["targetRef"]["name"].as_str().unwrap_or("").to_string(),
                    e["conditions"].clone(),
                )
            })
            .collect();
        assert_eq!(
            conds,
            vec![
                (
                    "a".into(),
                    json!({ "ready": true, "serving": true, "terminating": false })
                ),
                (
                    "bb".into(),
                    json!({ "ready": false, "serving": true, "terminating": true })
                ),
                (
                    "ccc".into(),
                    json!({ "ready": false, "serving": false, "terminating": false })
                ),
            ]
        );
        assert_eq!(eps[0]["nodeName"], "n1");
        let ports: Value =
            serde_json::from_str(groups.keys().next().map(String::as_str).unwrap_or("")).unwrap_or_default();
        assert_eq!(ports, json!([{ "name": "http", "port": 8080, "protocol": "TCP" }]));
    }
}
