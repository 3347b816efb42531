//! The endpoints controller, as kube-controller-manager's (`pkg/controller/endpoint`): for every
//! Service with a selector, an Endpoints object of the same name lists the pods of its namespace
//! that match the selector and have an IP — ready ones in `addresses`, others in
//! `notReadyAddresses` (all in `addresses` with `publishNotReadyAddresses`), terminating and
//! finished pods left out — with the Service's ports resolved against each pod (`targetPort` by
//! number, or by container port name and protocol; a pod without that named port is left out of
//! that port). Subsets are repacked as `RepackSubsets` does. Services without a selector are
//! left alone; a deleted Service's Endpoints are deleted, as the real controller does.
//!
//! It follows [`Store::changes`]; failed writes are retried with a backoff.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::time::Duration;

use serde_json::{Map, Value, json};
use tokio::sync::{mpsc, watch};

use crate::meta;
use crate::registry::{Gvr, ResourceKey};
use crate::status::ApiError;
use crate::store::{Change, ChangeKind, DeleteOptions, ListOptions, Store, WriteOptions};

/// The headless-Service label the controller puts on Endpoints (`v1.IsHeadlessService`).
const HEADLESS_LABEL: &str = "service.kubernetes.io/headless";
const TRIGGER_TIME: &str = "endpoints.kubernetes.io/last-change-trigger-time";
const FIRST_RETRY: Duration = Duration::from_millis(20);
const MAX_RETRY: Duration = Duration::from_secs(10);

type Key = (String, String);
/// A subset being built: its addresses and its ports.
type Group = (Vec<Value>, Vec<Value>);

fn key_of(resource: &str) -> ResourceKey {
    ResourceKey {
        group: String::new(),
        resource: resource.into(),
    }
}

fn opts() -> WriteOptions {
    WriteOptions {
        field_manager: Some("kube-controller-manager".into()),
        ..Default::default()
    }
}

struct Controller {
    store: Store,
    /// Services with a selector, by namespace: name → selector.
    selectors: HashMap<String, HashMap<String, Map<String, Value>>>,
    queue: VecDeque<Key>,
    queued: HashSet<Key>,
    backoff: HashMap<Key, Duration>,
    retry_tx: mpsc::UnboundedSender<Key>,
}

pub(crate) async fn run(store: Store, mut stop: watch::Receiver<bool>) {
    let (retry_tx, mut retry_rx) = mpsc::unbounded_channel();
    let mut c = Controller {
        store: store.clone(),
        selectors: HashMap::new(),
        queue: VecDeque::new(),
        queued: HashSet::new(),
        backoff: HashMap::new(),
        retry_tx,
    };
    let mut feed = store.changes(c.resync());
    loop {
        tokio::select! {
            biased;
            _ = stop.changed() => return,
            change = feed.next() => match change {
                Ok(change) => c.observe(&change),
                Err(ApiError::Expired(_)) => feed = store.changes(c.resync()),
                Err(e) => {
                    tracing::info!(error = %e, "endpoints controller stops: the change feed ended");
                    return;
                }
            },
            Some(key) = retry_rx.recv() => c.enqueue(key),
            _ = std::future::ready(()), if !c.queue.is_empty() => {
                if let Some(key) = c.queue.pop_front() {
                    c.queued.remove(&key);
                    c.process(key).await;
                }
            }
        }
    }
}

impl Controller {
    /// Reads every Service and queues all of them (the informers' initial list).
    fn resync(&mut self) -> u64 {
        let (rv, objects) = self.store.snapshot();
        self.selectors.clear();
        let services = key_of("services");
        for (key, obj) in &objects {
            if *key == services {
                let k = (meta::namespace(obj).to_string(), meta::name(obj).to_string());
                if let Some(sel) = selector(obj) {
                    self.selectors.entry(k.0.clone()).or_default().insert(k.1.clone(), sel);
                    self.enqueue(k);
                }
            }
        }
        rv
    }

    fn enqueue(&mut self, key: Key) {
        if self.queued.insert(key.clone()) {
            self.queue.push_back(key);
        }
    }

    fn observe(&mut self, change: &Change) {
        let obj = &change.object;
        let ns = meta::namespace(obj).to_string();
        let name = meta::name(obj).to_string();
        match change.resource.resource.as_str() {
            _ if !change.resource.group.is_empty() => {}
            "services" => {
                let sel = (change.kind != ChangeKind::Deleted).then(|| selector(obj)).flatten();
                match sel {
                    Some(sel) => {
                        self.selectors.entry(ns.clone()).or_default().insert(name.clone(), sel);
                        self.enqueue((ns, name));
                    }
                    None => {
                        if let Some(m) = self.selectors.get_mut(&ns) {
                            m.remove(&name);
                        }
                        if change.kind == ChangeKind::Deleted {
                            self.enqueue((ns, name));
                        }
                    }
                }
            }
            "pods" => {
                let Some(services) = self.selectors.get(&ns) else {
                    return;
                };
                let labels = |o: &Value| o.pointer("/metadata/labels").and_then(Value::as_object).cloned();
                let now = labels(obj);
                let before = change.previous.as_deref().and_then(labels);
                let hit: Vec<String> = services
                    .iter()
                    .filter(|(_, sel)| matches(sel, now.as_ref()) || matches(sel, before.as_ref()))
                    .map(|(n, _)| n.clone())
                    .collect();
                for svc in hit {
                    self.enqueue((ns.clone(), svc));
                }
            }
            // Someone else edited or deleted Endpoints this controller owns: put them back.
            "endpoints" if self.selectors.get(&ns).is_some_and(|m| m.contains_key(&name)) => {
                self.enqueue((ns, name));
            }
            _ => {}
        }
    }

    async fn process(&mut self, key: Key) {
        match sync(&self.store, &key.0, &key.1).await {
            Ok(()) => {
                self.backoff.remove(&key);
            }
            Err(e) => {
                let delay = self
                    .backoff
                    .get(&key)
                    .map(|d| (*d * 2).min(MAX_RETRY))
                    .unwrap_or(FIRST_RETRY);
                self.backoff.insert(key.clone(), delay);
                tracing::debug!(service = %format!("{}/{}", key.0, key.1), error = %e, retry_in = ?delay, "syncing endpoints");
                let tx = self.retry_tx.clone();
                tokio::spawn(async move {
                    tokio::time::sleep(delay).await;
                    let _ = tx.send(key);
                });
            }
        }
    }
}

/// A Service's non-empty `spec.selector`.
pub(crate) fn selector(svc: &Value) -> Option<Map<String, Value>> {
    svc.pointer("/spec/selector")
        .and_then(Value::as_object)
        .filter(|m| !m.is_empty())
        .cloned()
}

pub(crate) fn matches(selector: &Map<String, Value>, labels: Option<&Map<String, Value>>) -> bool {
    labels.is_some_and(|l| selector.iter().all(|(k, v)| l.get(k) == Some(v)))
}

/// `syncService`: makes the Endpoints of `ns/name` what its Service and pods call for.
async fn sync(store: &Store, ns: &str, name: &str) -> Result<(), ApiError> {
    let endpoints_gvr = Gvr::new("", "v1", "endpoints");
    let Some(service) = store.get_stored(&key_of("services"), ns, name) else {
        return match store.delete(&endpoints_gvr, ns, name, &DeleteOptions::default()).await {
            Ok(_) | Err(ApiError::NotFound(_)) => Ok(()),
            Err(e) => Err(e),
        };
    };
    let Some(sel) = selector(&service) else { return Ok(()) };
    let label_selector = sel
        .iter()
        .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
        .collect::<Vec<_>>()
        .join(",");
    let pods = store.list(
        &Gvr::new("", "v1", "pods"),
        Some(ns),
        &ListOptions {
            label_selector: Some(label_selector),
            ..Default::default()
        },
    )?;
    let pods: Vec<Value> = pods["items"].as_array().cloned().unwrap_or_default();
    let subsets = subsets_for(&service, &pods);

    let headless = service.pointer("/spec/clusterIP").and_then(Value::as_str) == Some("None");
    let mut labels = service
        .pointer("/metadata/labels")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    let current = store.get_stored(&key_of("endpoints"), ns, name);
    if let Some(current) = &current {
        let mut current_labels = current
            .pointer("/metadata/labels")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        current_labels.remove(HEADLESS_LABEL);
        let current_subsets = current.get("subsets").cloned().unwrap_or(json!([]));
        if current_subsets == json!(subsets) && current_labels == labels {
            return Ok(());
        }
    }
    if headless {
        labels.insert(HEADLESS_LABEL.into(), json!(""));
    }
    let now = jiff::Timestamp::now().to_string();
    match current {
        None => {
            let mut obj = json!({
                "apiVersion": "v1", "kind": "Endpoints",
                "metadata": { "name": name, "namespace": ns, "labels": labels, "annotations": { TRIGGER_TIME: now } },
            });
            if !subsets.is_empty() {
                obj["subsets"] = json!(subsets);
            }
            match store.create(&endpoints_gvr, ns, obj, &opts()).await {
                Ok(_) => Ok(()),
                // Created meanwhile (AlreadyExists too): retried, compared again then.
                Err(e) => Err(e),
            }
        }
        Some(current) => {
            let mut obj = (*current).clone();
            obj["metadata"]["labels"] = json!(labels);
            if !obj["metadata"]["annotations"].is_object() {
                obj["metadata"]["annotations"] = json!({});
            }
            obj["metadata"]["annotations"][TRIGGER_TIME] = json!(now);
            if subsets.is_empty() {
                if let Some(m) = obj.as_object_mut() {
                    m.remove("subsets");
                }
            } else {
                obj["subsets"] = json!(subsets);
            }
            store
                .update(&endpoints_gvr, ns, name, obj, None, &opts())
                .await
                .map(|_| ())
        }
    }
}

/// The repacked subsets for a Service and the pods its selector matches.
fn subsets_for(service: &Value, pods: &[Value]) -> Vec<Value> {
    let publish_not_ready = service
        .pointer("/spec/publishNotReadyAddresses")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let headless = service.pointer("/spec/clusterIP").and_then(Value::as_str) == Some("None");
    let svc_ports: Vec<&Value> = service
        .pointer("/spec/ports")
        .and_then(Value::as_array)
        .map(|p| p.iter().collect())
        .unwrap_or_default();
    let svc_name = meta::name(service);
    // Port (as JSON text, a sentinel "" for a headless Service without ports) → address → ready.
    let mut by_port: BTreeMap<String, BTreeMap<String, (Value, bool)>> = BTreeMap::new();
    for pod in pods {
        if !should_be_in_endpoints(pod, false) {
            continue;
        }
        let Some(ip) = pod
            .pointer("/status/podIP")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
        else {
            continue;
        };
        let mut address = json!({ "ip": ip });
        add_pod_identity(&mut address, pod, svc_name);
        let ready = publish_not_ready || is_ready(pod);
        let address_key = address.to_string();
        let mut add = |port_key: String| {
            by_port
                .entry(port_key)
                .or_default()
                .insert(address_key.clone(), (address.clone(), ready));
        };
        if svc_ports.is_empty() {
            if headless {
                add(String::new());
            }
            continue;
        }
        for sp in &svc_ports {
            let Some(number) = find_port(pod, sp) else { continue };
            let mut port = json!({
                "port": number,
                "protocol": sp.get("protocol").and_then(Value::as_str).unwrap_or("TCP"),
            });
            if let Some(n) = sp.get("name").and_then(Value::as_str).filter(|n| !n.is_empty()) {
                port["name"] = json!(n);
            }
            if let Some(a) = sp.get("appProtocol") {
                port["appProtocol"] = a.clone();
            }
            add(port.to_string());
        }
    }
    // Ports offered by the same set of addresses share a subset.
    let mut groups: BTreeMap<Vec<(String, bool)>, Group> = BTreeMap::new();
    for (port, addresses) in by_port {
        let set: Vec<(String, bool)> = addresses.iter().map(|(k, (_, r))| (k.clone(), *r)).collect();
        let entry = groups
            .entry(set)
            .or_insert_with(|| (addresses.values().cloned().map(|(a, _)| a).collect(), Vec::new()));
        if !port.is_empty()
            && let Ok(p) = serde_json::from_str::<Value>(&port)
        {
            entry.1.push(p);
        }
    }
    let mut out: Vec<Value> = groups
        .into_iter()
        .map(|(set, (addresses, mut ports))| {
            let ready: BTreeSet<&String> = set.iter().filter(|(_, r)| *r).map(|(k, _)| k).collect();
            let mut ready_addrs = Vec::new();
            let mut not_ready = Vec::new();
            for a in addresses {
                if ready.contains(&a.to_string()) {
                    ready_addrs.push(a);
                } else {
                    not_ready.push(a);
                }
            }
            let by_ip = |a: &Value, b: &Value| ip_sort_key(a).cmp(&ip_sort_key(b));
            ready_addrs.sort_by(by_ip);
            not_ready.sort_by(by_ip);
            ports.sort_by_key(|p| p.to_string());
            let mut subset = json!({});
            if !ready_addrs.is_empty() {
                subset["addresses"] = json!(ready_addrs);
            }
            if !not_ready.is_empty() {
                subset["notReadyAddresses"] = json!(not_ready);
            }
            if !ports.is_empty() {
                subset["ports"] = json!(ports);
            }
            subset
        })
        .collect();
    out.sort_by_key(|s| s.to_string());
    out
}

fn ip_sort_key(a: &Value) -> (Option<std::net::Ipv4Addr>, String) {
    let ip = a.get("ip").and_then(Value::as_str).unwrap_or("");
    (ip.parse().ok(), ip.to_string())
}

/// `ShouldPodBeInEndpoints`: not terminating (unless `include_terminating`, as for
/// EndpointSlices), not finished for good.
pub(crate) fn should_be_in_endpoints(pod: &Value, include_terminating: bool) -> bool {
    if meta::is_deleting(pod) && !include_terminating {
        return false;
    }
    let phase = pod.pointer("/status/phase").and_then(Value::as_str).unwrap_or("");
    match pod
        .pointer("/spec/restartPolicy")
        .and_then(Value::as_str)
        .unwrap_or("Always")
    {
        "Never" => phase != "Failed" && phase != "Succeeded",
        "OnFailure" => phase != "Succeeded",
        _ => true,
    }
}

pub(crate) fn is_ready(pod: &Value) -> bool {
    pod.pointer("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|cs| cs.iter().any(|c| c["type"] == "Ready" && c["status"] == "True"))
}

/// `podutil.FindPort`: a numeric `targetPort` as is; a named one is the container port with that
/// name and the Service port's protocol.
pub(crate) fn find_port(pod: &Value, service_port: &Value) -> Option<i64> {
    let protocol = service_port.get("protocol").and_then(Value::as_str).unwrap_or("TCP");
    match service_port.get("targetPort").or_else(|| service_port.get("port")) {
        Some(Value::Number(n)) => n.as_i64(),
        Some(Value::String(name)) => pod
            .pointer("/spec/containers")
            .and_then(Value::as_array)?
            .iter()
            .flat_map(|c| c.get("ports").and_then(Value::as_array).into_iter().flatten())
            .find(|p| {
                p.get("name").and_then(Value::as_str) == Some(name)
                    && p.get("protocol").and_then(Value::as_str).unwrap_or("TCP") == protocol
            })
            .and_then(|p| p.get("containerPort").and_then(Value::as_i64)),
        _ => None,
    }
}

/// What an Endpoints address and an EndpointSlice endpoint both say of their pod: `targetRef`,
/// `nodeName` when bound, and `hostname` when the pod's `subdomain` is the Service.
pub(crate) fn add_pod_identity(endpoint: &mut Value, pod: &Value, svc_name: &str) {
    endpoint["targetRef"] =
        json!({ "kind": "Pod", "namespace": meta::namespace(pod), "name": meta::name(pod), "uid": meta::uid(pod) });
    if let Some(node) = pod
        .pointer("/spec/nodeName")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
    {
        endpoint["nodeName"] = json!(node);
    }
    let hostname = pod.pointer("/spec/hostname").and_then(Value::as_str).unwrap_or("");
    let subdomain = pod.pointer("/spec/subdomain").and_then(Value::as_str).unwrap_or("");
    if !hostname.is_empty() && subdomain == svc_name {
        endpoint["hostname"] = json!(hostname);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str, ip: &str, ready: bool, ports: Value) -> Value {
        json!({
            "metadata": { "name": name, "namespace": "ns", "uid": format!("uid-{name}") },
            "spec": { "nodeName": "n1", "containers": [{ "name": "c", "ports": ports }] },
            "status": { "phase": "Running", "podIP": ip, "conditions": [{ "type": "Ready", "status": if ready { "True" } else { "False" } }] },
        })
    }

    #[test]
    fn ready_not_ready_named_ports_and_repacking() {
        let svc = json!({
            "metadata": { "name": "web", "namespace": "ns" },
            "spec": { "clusterIP": "127.1.0.20", "selector": { "app": "web" }, "ports": [
                { "name": "http", "port": 80, "protocol": "TCP", "targetPort": "http" },
                { "name": "metrics", "port": 9090, "protocol": "TCP", "targetPort": 9090 },
            ] },
        });
        let pods = [
            pod(
                "a",
                "127.1.128.2",
                true,
                json!([{ "name": "http", "containerPort": 8080, "protocol": "TCP" }]),
            ),
            pod(
                "b",
                "127.1.128.3",
                false,
                json!([{ "name": "http", "containerPort": 8081, "protocol": "TCP" }]),
            ),
            // No port named http: only in the metrics port's subset.
            pod("c", "127.1.128.4", true, json!([])),
        ];
        let subsets = subsets_for(&svc, &pods);
        // Pod a on http is 8080, pod b on http is 8081: different ports, different subsets.
        let a = &subsets
            .iter()
            .find(|s| s["ports"][0]["port"] == 8080)
            .cloned()
            .unwrap_or_default();
        assert_eq!(a["addresses"][0]["targetRef"]["name"], "a");
        assert_eq!(a["addresses"][0]["nodeName"], "n1");
        let b = &subsets
            .iter()
            .find(|s| s["ports"][0]["port"] == 8081)
            .cloned()
            .unwrap_or_default();
        assert_eq!(b["notReadyAddresses"][0]["ip"], "127.1.128.3");
        assert!(b.get("addresses").is_none());
        let m = &subsets
            .iter()
            .find(|s| s["ports"][0]["port"] == 9090)
            .cloned()
            .unwrap_or_default();
        assert_eq!(m["addresses"].as_array().map(Vec::len), Some(2));
        assert_eq!(m["notReadyAddresses"].as_array().map(Vec::len), Some(1));
        assert_eq!(subsets.len(), 3);
    }

    #[test]
    fn terminating_finished_and_hostnames() {
        let svc = json!({
            "metadata": { "name": "sub", "namespace": "ns" },
            "spec": { "clusterIP": "None", "selector": { "app": "x" }, "publishNotReadyAddresses": true },
        });
        let mut a = pod("a", "127.1.128.2", false, json!([]));
        a["spec"]["hostname"] = json!("host-a");
        a["spec"]["subdomain"] = json!("sub");
        let mut gone = pod("gone", "127.1.128.3", true, json!([]));
        gone["metadata"]["deletionTimestamp"] = json!("2025-01-01T00:00:00Z");
        let mut done = pod("done", "127.1.128.4", false, json!([]));
        done["spec"]["restartPolicy"] = json!("Never");
        done["status"]["phase"] = json!("Succeeded");
        let subsets = subsets_for(&svc, &[a, gone, done]);
        assert_eq!(subsets.len(), 1, "{subsets:?}");
        // publishNotReadyAddresses: the unready pod is in addresses; no ports on a headless Service.
        assert_eq!(subsets[0]["addresses"][0]["hostname"], "host-a");
        assert_eq!(subsets[0]["addresses"].as_array().map(Vec::len), Some(1));
        assert!(subsets[0].get("ports").is_none());
    }
}
