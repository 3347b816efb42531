//! The RBAC a Spark job's driver needs, as the Kubeflow chart creates it in each job namespace
//! (`spark.rbac`): a ServiceAccount, a Role over pods, configmaps, persistentvolumeclaims and
//! services, and a RoleBinding of that Role to the ServiceAccount, all with one name
//! (`spark-operator-spark` for a release `spark-operator`). For tests and `spark-operator dev`,
//! which set up job namespaces as a chart install would.

use serde_json::{Value, json};

use crate::registry::Gvr;
use crate::status::ApiError;
use crate::store::{Store, WriteOptions};

/// The name the Kubeflow chart gives the Spark ServiceAccount, Role and RoleBinding for a
/// release named `spark-operator`.
pub const SPARK_SERVICE_ACCOUNT: &str = "spark-operator-spark";

/// The Spark Role's rules.
pub fn spark_role_rules() -> Value {
    json!([{
        "apiGroups": [""],
        "resources": ["pods", "configmaps", "persistentvolumeclaims", "services"],
        "verbs": ["get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"],
    }])
}

/// The three objects, for `namespace` and the ServiceAccount `name`.
pub fn spark_job_rbac(namespace: &str, name: &str) -> Vec<(Gvr, Value)> {
    let rbac = |resource: &str| Gvr::new("rbac.authorization.k8s.io", "v1", resource);
    vec![
        (
            Gvr::new("", "v1", "serviceaccounts"),
            json!({ "apiVersion": "v1", "kind": "ServiceAccount", "metadata": { "name": name, "namespace": namespace } }),
        ),
        (
            rbac("roles"),
            json!({
                "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                "metadata": { "name": name, "namespace": namespace },
                "rules": spark_role_rules(),
            }),
        ),
        (
            rbac("rolebindings"),
            json!({
                "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                "metadata": { "name": name, "namespace": namespace },
                "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name },
                "subjects": [{ "kind": "ServiceAccount", "name": name, "namespace": namespace }],
            }),
        ),
    ]
}

/// Creates [`spark_job_rbac`] through the store (what exists already is left alone).
pub async fn create_spark_job_rbac(store: &Store, namespace: &str, name: &str) -> Result<(), ApiError> {
    let opts = WriteOptions {
        field_manager: Some("kube-sim".into()),
        ..Default::default()
    };
    for (gvr, obj) in spark_job_rbac(namespace, name) {
        match store.create(&gvr, namespace, obj, &opts).await {
            Ok(_) | Err(ApiError::AlreadyExists(_)) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}
