//! The pod as the controller watches and caches it: only what it reads (names, labels, finalizers,
//! owners, deletion, node, phase, conditions, the containers' states), decoded leniently.
//!
//! Why not `k8s_openapi::api::core::v1::Pod`: the controller watches every driver and executor pod;
//! full pods (spec, managedFields) cost several times the decoding time and memory, and one malformed
//! field (a timestamp an API server wrote as `""`) would fail the whole watch event, stalling the
//! watch on that pod. Here a field that does not decode is read as absent.

use std::borrow::Cow;
use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use serde::{Deserialize, Deserializer, Serialize};

/// The largest executor id: Spark numbers executors with positive 32-bit integers (the pod watch and the
/// report receiver refuse any other).
pub const MAX_EXECUTOR_ID: i64 = i32::MAX as i64;

/// A driver or executor pod, slimmed down.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SparkPod {
    #[serde(default, deserialize_with = "slim_metadata")]
    pub metadata: ObjectMeta,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec: Option<PodSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<PodStatus>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodSpec {
    #[serde(default, deserialize_with = "lenient", skip_serializing_if = "Option::is_none")]
    pub node_name: Option<String>,
    /// Named in the message when no scheduler ever looks at the pod.
    #[serde(default, deserialize_with = "lenient", skip_serializing_if = "Option::is_none")]
    pub scheduler_name: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodStatus {
    #[serde(default, deserialize_with = "lenient", skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    #[serde(default, deserialize_with = "lenient", skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(default, deserialize_with = "lenient", skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(default, deserialize_with = "lenient_list", skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<PodCondition>,
    #[serde(default, deserialize_with = "lenient_list", skip_serializing_if = "Vec::is_empty")]
    pub container_statuses: Vec<ContainerStatus>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodCondition {
    #[serde(rename = "type", default)]
    pub type_: String,
    #[serde(default)]
    pub status: String,
    #[serde(default, deserialize_with = "lenient", skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(default, deserialize_with = "lenient", skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// When an executor started waiting for capacity (the Unschedulable condition's transition).
    #[serde(default, deserialize_with = "lenient", skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<Time>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContainerStatus {
    #[serde(default)]
    pub name: String,
    #[serde(default, deserialize_with = "lenient", skip_serializing_if = "Option::is_none")]
    pub state: Option<ContainerState>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContainerState {
    #[serde(default, deserialize_with = "lenient", skip_serializing_if = "Option::is_none")]
    pub waiting: Option<Waiting>,
    #[serde(default, deserialize_with = "lenient", skip_serializing_if = "Option::is_none")]
    pub terminated: Option<Terminated>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Waiting {
    #[serde(default, deserialize_with = "lenient", skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(default, deserialize_with = "lenient", skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Terminated {
    #[serde(default)]
    pub exit_code: i32,
    #[serde(default, deserialize_with = "lenient", skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(default, deserialize_with = "lenient", skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(default, deserialize_with = "lenient", skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<Time>,
}

/// A value that does not decode is absent.
fn lenient<'de, D: Deserializer<'de>, T: serde::de::DeserializeOwned>(d: D) -> Result<Option<T>, D::Error> {
    let value = serde_json::Value::deserialize(d)?;
    Ok(serde_json::from_value(value).ok())
}

/// A list whose undecodable entries are skipped.
fn lenient_list<'de, D: Deserializer<'de>, T: serde::de::DeserializeOwned>(d: D) -> Result<Vec<T>, D::Error> {
    let value = serde_json::Value::deserialize(d)?;
    let items = match value {
        serde_json::Value::Array(items) => items,
        _ => Vec::new(),
    };
    Ok(items
        .into_iter()
        .filter_map(|v| serde_json::from_value(v).ok())
        .collect())
}

/// The metadata the controller reads; managedFields and annotations are skipped.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct SlimMeta {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    namespace: Option<String>,
    #[serde(default)]
    uid: Option<String>,
    #[serde(default)]
    resource_version: Option<String>,
    #[serde(default, deserialize_with = "lenient")]
    labels: Option<BTreeMap<String, String>>,
    #[serde(default, deserialize_with = "lenient")]
    finalizers: Option<Vec<String>>,
    #[serde(default, deserialize_with = "lenient")]
    creation_timestamp: Option<Time>,
    #[serde(default, deserialize_with = "lenient")]
    deletion_timestamp: Option<Time>,
    #[serde(default, deserialize_with = "lenient")]
    owner_references: Option<Vec<OwnerReference>>,
}

fn slim_metadata<'de, D: Deserializer<'de>>(d: D) -> Result<ObjectMeta, D::Error> {
    let m = SlimMeta::deserialize(d)?;
    Ok(ObjectMeta {
        name: m.name,
        namespace: m.namespace,
        uid: m.uid,
        resource_version: m.resource_version,
        labels: m.labels,
        finalizers: m.finalizers,
        creation_timestamp: m.creation_timestamp,
        deletion_timestamp: m.deletion_timestamp,
        owner_references: m.owner_references,
        ..ObjectMeta::default()
    })
}

impl SparkPod {
    /// Whether this pod is the driver of the application whose uid is `app_uid`: the application
    /// *controls* it (a controlling ownerReference with that uid), as the controller's submission sets it.
    /// The one rule for trusting a driver pod, for the pod watch (whose executors then count) and for the
    /// report receiver (whose driver reports then decide the run): anyone may create a pod with our labels,
    /// but only the application's controller can make it the application's controlled dependent.
    pub fn is_driver_of(&self, app_uid: &str) -> bool {
        self.metadata
            .owner_references
            .iter()
            .flatten()
            .any(|owner| owner.uid == app_uid && owner.controller == Some(true))
    }
}

impl kube::Resource for SparkPod {
    type DynamicType = ();
    type Scope = k8s_openapi::NamespaceResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        "Pod".into()
    }

    fn group(_: &()) -> Cow<'_, str> {
        "".into()
    }

    fn version(_: &()) -> Cow<'_, str> {
        "v1".into()
    }

    fn plural(_: &()) -> Cow<'_, str> {
        "pods".into()
    }

    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn malformed_fields_read_as_absent_instead_of_failing_the_pod() {
        let pod: SparkPod = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "d", "namespace": "ns", "labels": {"a": "b"},
                "managedFields": [{"manager": "x", "fieldsV1": {"f:metadata": {}}}],
                "deletionTimestamp": "2024-01-01T00:00:00Z"},
            "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "i"}]},
            "status": {"phase": "Failed", "containerStatuses": [
                {"name": "c", "state": {"terminated": {"exitCode": 137, "reason": "ContainerStatusUnknown",
                    "startedAt": "", "finishedAt": ""}}},
                "not a container status"
            ]}
        }))
        .unwrap();
        assert_eq!(pod.metadata.name.as_deref(), Some("d"));
        assert!(pod.metadata.managed_fields.is_none());
        assert!(pod.metadata.deletion_timestamp.is_some());
        assert_eq!(pod.spec.unwrap().node_name.as_deref(), Some("n1"));
        let status = pod.status.unwrap();
        assert_eq!(status.container_statuses.len(), 1);
        let terminated = status.container_statuses[0].state.clone().unwrap().terminated.unwrap();
        assert_eq!(terminated.exit_code, 137);
        assert_eq!(terminated.finished_at, None);
    }

    #[test]
    fn it_is_served_where_pods_are() {
        use kube::Resource;
        assert_eq!(SparkPod::url_path(&(), Some("ns")), "/api/v1/namespaces/ns/pods");
        assert_eq!(SparkPod::api_version(&()), "v1");
    }
}
