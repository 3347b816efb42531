//! What one agent holds for one application, as its server answers and `spark-operator logs` reads it.

use serde::{Deserialize, Serialize};

/// The index of one application on one node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AppIndex {
    pub node: String,
    pub namespace: String,
    pub app_name: String,
    /// Oldest first.
    pub executions: Vec<Execution>,
}

/// One execution (submission) of the application.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Execution {
    /// The pods' `sparkoperator.k8s.io/submission-id`; empty when they had none.
    pub submission_id: String,
    /// When this node first saw one of its containers (nanoseconds since the epoch).
    pub first_seen: i64,
    pub containers: Vec<ContainerEntry>,
}

/// One container's copy.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContainerEntry {
    /// The CRI container id: how the log endpoint names it.
    pub id: String,
    /// `driver` or `executor`.
    pub role: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub executor_id: Option<i64>,
    pub pod: String,
    pub container: String,
    pub attempt: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spark_app_id: Option<String>,
    pub started_at: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<i64>,
    /// Still being copied.
    pub running: bool,
    /// Bytes of the copy (raw CRI records).
    pub bytes: u64,
    /// Copying stopped at a bound.
    #[serde(default)]
    pub truncated: bool,
}

/// The path of the index of `app` on an agent's server.
pub fn index_path(namespace: &str, app: &str) -> String {
    format!("/v1/namespaces/{namespace}/applications/{app}")
}

/// The path of one container's log on an agent's server.
pub fn log_path(namespace: &str, app: &str, container_id: &str) -> String {
    format!("/v1/namespaces/{namespace}/applications/{app}/containers/{container_id}/log")
}
