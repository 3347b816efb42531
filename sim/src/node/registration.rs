//! A node as its kubelet registers it: the Node object (capacity, allocatable, labels, taints,
//! conditions, addresses, nodeInfo) and its Lease in `kube-node-lease`, renewed as heartbeat.

use serde_json::{Value, json};

use super::config::NodeSpec;
use crate::registry::Gvr;
use crate::status::ApiError;
use crate::store::{PatchBody, Store, WriteOptions};

pub(crate) const KUBELET_VERSION: &str = "v1.33.0";
pub(crate) const LEASE_NAMESPACE: &str = "kube-node-lease";
/// The kubelet's lease duration (`nodeLeaseDurationSeconds`).
pub(crate) const LEASE_SECONDS: i64 = 40;

pub(crate) fn nodes_gvr() -> Gvr {
    Gvr::new("", "v1", "nodes")
}

pub(crate) fn leases_gvr() -> Gvr {
    Gvr::new("coordination.k8s.io", "v1", "leases")
}

fn opts() -> WriteOptions {
    WriteOptions {
        field_manager: Some("kubelet".into()),
        ..Default::default()
    }
}

/// `metav1.MicroTime`: RFC 3339 with microseconds.
pub(crate) fn micro_time(ts: jiff::Timestamp) -> String {
    ts.strftime("%Y-%m-%dT%H:%M:%S%.6fZ").to_string()
}

fn node_object(spec: &NodeSpec, pod_cidr: &str) -> Value {
    let mut labels = json!({
        "beta.kubernetes.io/arch": "amd64",
        "beta.kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "kubernetes.io/hostname": spec.name,
        "kubernetes.io/os": "linux",
    });
    for (k, v) in &spec.labels {
        labels[k] = json!(v);
    }
    let mut node = json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": spec.name,
            "labels": labels,
            "annotations": {
                "node.alpha.kubernetes.io/ttl": "0",
                "volumes.kubernetes.io/controller-managed-attach-detach": "true",
            },
        },
        "spec": { "podCIDR": pod_cidr, "podCIDRs": [pod_cidr] },
    });
    if !spec.taints.is_empty() {
        node["spec"]["taints"] = spec
            .taints
            .iter()
            .map(|t| json!({ "key": t.key, "value": t.value, "effect": t.effect }))
            .collect();
    }
    node
}

/// The four conditions the kubelet reports; all healthy, Ready as given.
pub(crate) fn conditions(ready: bool, now: &str, ready_since: &str) -> Value {
    let c = |t: &str, status: &str, reason: &str, message: &str, since: &str| json!({ "type": t, "status": status, "lastHeartbeatTime": now, "lastTransitionTime": since, "reason": reason, "message": message });
    json!([
        c(
            "MemoryPressure",
            "False",
            "KubeletHasSufficientMemory",
            "kubelet has sufficient memory available",
            now
        ),
        c(
            "DiskPressure",
            "False",
            "KubeletHasNoDiskPressure",
            "kubelet has no disk pressure",
            now
        ),
        c(
            "PIDPressure",
            "False",
            "KubeletHasSufficientPID",
            "kubelet has sufficient PID available",
            now
        ),
        if ready {
            c(
                "Ready",
                "True",
                "KubeletReady",
                "kubelet is posting ready status",
                ready_since,
            )
        } else {
            c(
                "Ready",
                "False",
                "KubeletNotReady",
                "container runtime is down",
                ready_since,
            )
        },
    ])
}

fn node_status(spec: &NodeSpec, node_ip: &str, now: &str) -> Value {
    let resources = json!({
        "cpu": spec.cpu,
        "memory": spec.memory,
        "pods": spec.pods.to_string(),
        "ephemeral-storage": "100Gi",
        "hugepages-1Gi": "0",
        "hugepages-2Mi": "0",
    });
    let id = uuid::Uuid::new_v4().simple().to_string();
    json!({
        "capacity": resources,
        "allocatable": resources,
        "conditions": conditions(true, now, now),
        "addresses": [{ "type": "InternalIP", "address": node_ip }, { "type": "Hostname", "address": spec.name }],
        "daemonEndpoints": { "kubeletEndpoint": { "Port": crate::network::KUBELET_PORT } },
        "nodeInfo": {
            "machineID": id,
            "systemUUID": uuid::Uuid::new_v4().to_string(),
            "bootID": uuid::Uuid::new_v4().to_string(),
            "kernelVersion": "6.1.0-kube-sim",
            "osImage": "kube-sim simulated node",
            "containerRuntimeVersion": format!("containerd://{}", super::runtime::RUNTIME_VERSION.trim_start_matches('v')),
            "kubeletVersion": KUBELET_VERSION,
            "kubeProxyVersion": KUBELET_VERSION,
            "operatingSystem": "linux",
            "architecture": "amd64",
        },
        "images": [],
    })
}

/// Registers the node (Node, its status, its Lease) with its InternalIP and pod CIDR (from the
/// sim's loopback ranges). An existing Node is taken over.
pub(crate) async fn register(store: &Store, spec: &NodeSpec, node_ip: &str, pod_cidr: &str) -> Result<(), ApiError> {
    let node = match store
        .create(&nodes_gvr(), "", node_object(spec, pod_cidr), &opts())
        .await
    {
        Ok(w) => w.object,
        Err(ApiError::AlreadyExists(_)) => store.get(&nodes_gvr(), "", &spec.name)?,
        Err(e) => return Err(e),
    };
    let now = crate::meta::now_rfc3339();
    let status = json!({ "status": node_status(spec, node_ip, &now) });
    store
        .patch(
            &nodes_gvr(),
            "",
            &spec.name,
            &PatchBody::Merge(status),
            Some("status"),
            &opts(),
        )
        .await?;
    let lease = json!({
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {
            "name": spec.name,
            "namespace": LEASE_NAMESPACE,
            "ownerReferences": [{ "apiVersion": "v1", "kind": "Node", "name": spec.name, "uid": crate::meta::uid(&node) }],
        },
        "spec": {
            "holderIdentity": spec.name,
            "leaseDurationSeconds": LEASE_SECONDS,
            "renewTime": micro_time(jiff::Timestamp::now()),
        },
    });
    match store.create(&leases_gvr(), LEASE_NAMESPACE, lease, &opts()).await {
        Ok(_) => Ok(()),
        Err(ApiError::AlreadyExists(_)) => renew_lease(store, &spec.name).await,
        Err(e) => Err(e),
    }
}

/// The heartbeat: moves the lease's renewTime to now.
pub(crate) async fn renew_lease(store: &Store, node: &str) -> Result<(), ApiError> {
    let patch = json!({ "spec": { "holderIdentity": node, "renewTime": micro_time(jiff::Timestamp::now()) } });
    store
        .patch(
            &leases_gvr(),
            LEASE_NAMESPACE,
            node,
            &PatchBody::Merge(patch),
            None,
            &opts(),
        )
        .await
        .map(|_| ())
}

/// Posts Ready=True again (a kubelet that comes back).
pub(crate) async fn post_ready(store: &Store, node: &str) -> Result<(), ApiError> {
    let current = store.get(&nodes_gvr(), "", node)?;
    let now = crate::meta::now_rfc3339();
    let was_ready = current
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .and_then(|cs| cs.iter().find(|c| c["type"] == "Ready"))
        .filter(|c| c["status"] == "True")
        .and_then(|c| c["lastTransitionTime"].as_str().map(str::to_string));
    let since = was_ready.unwrap_or_else(|| now.clone());
    let patch = json!({ "status": { "conditions": conditions(true, &now, &since) } });
    store
        .patch(
            &nodes_gvr(),
            "",
            node,
            &PatchBody::Merge(patch),
            Some("status"),
            &opts(),
        )
        .await
        .map(|_| ())
}
