//! Which containers are Spark's, and whose: read from the labels kubelet copies from the pod onto the CRI
//! sandbox (`spark-role`, the operator's app-name and submission-id labels, `spark-exec-id`) and the
//! `io.kubernetes.*` labels it adds. No API call: the runtime alone tells the agent everything it needs.

use std::collections::HashMap;
use std::fmt;

use spark_operator_api::labels::{
    LABEL_APP_NAME, LABEL_SPARK_APP_SELECTOR, LABEL_SPARK_EXEC_ID, LABEL_SPARK_ROLE, LABEL_SUBMISSION_ID, SparkRole,
};

/// kubelet's sandbox and container labels (`pkg/kubelet/kuberuntime/labels.go`).
pub const KUBE_POD_NAME: &str = "io.kubernetes.pod.name";
pub const KUBE_POD_NAMESPACE: &str = "io.kubernetes.pod.namespace";
pub const KUBE_POD_UID: &str = "io.kubernetes.pod.uid";
pub const KUBE_CONTAINER_NAME: &str = "io.kubernetes.container.name";
/// kubelet's container annotation naming the termination-log path inside the container.
pub const KUBE_TERMINATION_MESSAGE_PATH: &str = "io.kubernetes.container.terminationMessagePath";

/// A Spark container on this node: who it belongs to, as its labels say.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct SparkContainer {
    pub namespace: String,
    /// The SparkApplication (`sparkoperator.k8s.io/app-name`).
    pub app_name: String,
    /// The submission that made the pod (`sparkoperator.k8s.io/submission-id`); empty if unlabelled.
    pub submission_id: String,
    /// Spark's application id (`spark-app-selector`), if labelled.
    pub spark_app_id: Option<String>,
    pub pod_name: String,
    pub pod_uid: String,
    pub role: SparkRole,
    /// `spark-exec-id` of an executor.
    pub executor_id: Option<i64>,
    pub container_name: String,
    pub container_id: String,
    /// The container's restart attempt (CRI `metadata.attempt`).
    pub attempt: u32,
}

impl fmt::Display for SparkContainer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}/{} container {} (attempt {})",
            self.namespace, self.pod_name, self.container_name, self.attempt
        )
    }
}

/// The labels and metadata of one container as CRI reports them.
#[derive(Clone, Copy, Debug)]
pub struct CriLabels<'a> {
    /// The sandbox's labels (the pod's labels plus kubelet's).
    pub sandbox: &'a HashMap<String, String>,
    /// The container's own labels (kubelet's `io.kubernetes.container.name`, ...).
    pub container: &'a HashMap<String, String>,
    pub container_id: &'a str,
    /// CRI `ContainerMetadata`: name and attempt, when the runtime sent them.
    pub metadata_name: Option<&'a str>,
    pub attempt: u32,
}

/// The Spark container these labels describe, or None when the container is not a Spark driver or
/// executor launched for a SparkApplication (no `spark-role`, no app-name, or no pod identity).
pub fn spark_container(labels: CriLabels<'_>) -> Option<SparkContainer> {
    let get = |key: &str| {
        labels
            .sandbox
            .get(key)
            .or_else(|| labels.container.get(key))
            .map(String::as_str)
            .filter(|v| !v.is_empty())
    };
    let role = SparkRole::parse(get(LABEL_SPARK_ROLE)?)?;
    let container_name = labels
        .container
        .get(KUBE_CONTAINER_NAME)
        .map(String::as_str)
        .or(labels.metadata_name)
        .filter(|n| !n.is_empty())?;
    if labels.container_id.is_empty() {
        return None;
    }
    Some(SparkContainer {
        namespace: get(KUBE_POD_NAMESPACE)?.to_owned(),
        app_name: get(LABEL_APP_NAME)?.to_owned(),
        submission_id: get(LABEL_SUBMISSION_ID).unwrap_or_default().to_owned(),
        spark_app_id: get(LABEL_SPARK_APP_SELECTOR).map(str::to_owned),
        pod_name: get(KUBE_POD_NAME)?.to_owned(),
        pod_uid: get(KUBE_POD_UID)?.to_owned(),
        role,
        // A malformed id is not Spark's; the report still goes, without an id.
        executor_id: get(LABEL_SPARK_EXEC_ID).and_then(|v| v.parse().ok()),
        container_name: container_name.to_owned(),
        container_id: labels.container_id.to_owned(),
        attempt: labels.attempt,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    #[test]
    fn an_executor_is_read_from_its_sandbox_labels() {
        let sandbox = map(&[
            (KUBE_POD_NAME, "pi-exec-3"),
            (KUBE_POD_NAMESPACE, "jobs"),
            (KUBE_POD_UID, "u-1"),
            (LABEL_SPARK_ROLE, "executor"),
            (LABEL_APP_NAME, "pi"),
            (LABEL_SUBMISSION_ID, "s-1"),
            (LABEL_SPARK_EXEC_ID, "3"),
            (LABEL_SPARK_APP_SELECTOR, "spark-abc"),
        ]);
        let container = map(&[(KUBE_CONTAINER_NAME, "spark-kubernetes-executor")]);
        let found = spark_container(CriLabels {
            sandbox: &sandbox,
            container: &container,
            container_id: "c1",
            metadata_name: None,
            attempt: 2,
        })
        .unwrap();
        assert_eq!(found.role, SparkRole::Executor);
        assert_eq!(found.executor_id, Some(3));
        assert_eq!(found.namespace, "jobs");
        assert_eq!(found.spark_app_id.as_deref(), Some("spark-abc"));
        assert_eq!(found.attempt, 2);
    }

    #[test]
    fn containers_without_spark_labels_are_not_spark_containers() {
        let sandbox = map(&[
            (KUBE_POD_NAME, "web"),
            (KUBE_POD_NAMESPACE, "default"),
            (KUBE_POD_UID, "u"),
        ]);
        let container = map(&[(KUBE_CONTAINER_NAME, "nginx")]);
        let labels = CriLabels {
            sandbox: &sandbox,
            container: &container,
            container_id: "c",
            metadata_name: None,
            attempt: 0,
        };
        assert_eq!(spark_container(labels), None);
        // A spark-role without the operator's app-name label: Spark run by someone else.
        let sandbox = map(&[
            (KUBE_POD_NAME, "d"),
            (KUBE_POD_NAMESPACE, "default"),
            (KUBE_POD_UID, "u"),
            (LABEL_SPARK_ROLE, "driver"),
        ]);
        assert_eq!(
            spark_container(CriLabels {
                sandbox: &sandbox,
                ..labels
            }),
            None
        );
    }
}
