//! OpenAPI v3 schemas of the built-in kinds, generated from k8s-openapi's `schemars` impls, for
//! `/openapi/v3/...` documents (`kubectl explain`, and kubectl's strategic-merge metadata, hence
//! the `x-kubernetes-patch-*` extensions the real documents carry).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex, OnceLock};

use k8s_openapi::api;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde_json::{Map, Value, json};

/// All definitions (`io.k8s.api.core.v1.Pod`, ...), refs pointing at `#/components/schemas/`.
pub(crate) fn definitions() -> &'static Map<String, Value> {
    static DEFS: OnceLock<Map<String, Value>> = OnceLock::new();
    DEFS.get_or_init(|| {
        let mut generator = schemars::generate::SchemaSettings::openapi3().into_generator();
        let mut kinds: Vec<(String, &str, &str, &str)> = Vec::new();
        macro_rules! kinds {
            ($($ty:ty => $g:expr, $v:expr, $k:expr;)*) => {
                $(
                    generator.subschema_for::<$ty>();
                    kinds.push((<$ty as schemars::JsonSchema>::schema_name().to_string(), $g, $v, $k));
                )*
            };
        }
        kinds! {
            api::core::v1::Pod => "", "v1", "Pod";
            api::core::v1::Service => "", "v1", "Service";
            api::core::v1::ConfigMap => "", "v1", "ConfigMap";
            api::core::v1::Secret => "", "v1", "Secret";
            api::core::v1::ServiceAccount => "", "v1", "ServiceAccount";
            api::core::v1::Namespace => "", "v1", "Namespace";
            api::core::v1::Node => "", "v1", "Node";
            api::core::v1::Event => "", "v1", "Event";
            api::core::v1::Endpoints => "", "v1", "Endpoints";
            api::core::v1::PersistentVolumeClaim => "", "v1", "PersistentVolumeClaim";
            api::core::v1::PersistentVolume => "", "v1", "PersistentVolume";
            api::core::v1::ResourceQuota => "", "v1", "ResourceQuota";
            api::core::v1::LimitRange => "", "v1", "LimitRange";
            api::apps::v1::Deployment => "apps", "v1", "Deployment";
            api::apps::v1::DaemonSet => "apps", "v1", "DaemonSet";
            api::apps::v1::ReplicaSet => "apps", "v1", "ReplicaSet";
            api::apps::v1::StatefulSet => "apps", "v1", "StatefulSet";
            api::apps::v1::ControllerRevision => "apps", "v1", "ControllerRevision";
            api::batch::v1::Job => "batch", "v1", "Job";
            api::batch::v1::CronJob => "batch", "v1", "CronJob";
            api::coordination::v1::Lease => "coordination.k8s.io", "v1", "Lease";
            api::discovery::v1::EndpointSlice => "discovery.k8s.io", "v1", "EndpointSlice";
            api::events::v1::Event => "events.k8s.io", "v1", "Event";
            api::networking::v1::NetworkPolicy => "networking.k8s.io", "v1", "NetworkPolicy";
            api::networking::v1::Ingress => "networking.k8s.io", "v1", "Ingress";
            api::policy::v1::PodDisruptionBudget => "policy", "v1", "PodDisruptionBudget";
            api::rbac::v1::Role => "rbac.authorization.k8s.io", "v1", "Role";
            api::rbac::v1::RoleBinding => "rbac.authorization.k8s.io", "v1", "RoleBinding";
            api::rbac::v1::ClusterRole => "rbac.authorization.k8s.io", "v1", "ClusterRole";
            api::rbac::v1::ClusterRoleBinding => "rbac.authorization.k8s.io", "v1", "ClusterRoleBinding";
            CustomResourceDefinition => "apiextensions.k8s.io", "v1", "CustomResourceDefinition";
            api::admissionregistration::v1::MutatingWebhookConfiguration => "admissionregistration.k8s.io", "v1", "MutatingWebhookConfiguration";
            api::admissionregistration::v1::ValidatingWebhookConfiguration => "admissionregistration.k8s.io", "v1", "ValidatingWebhookConfiguration";
            api::scheduling::v1::PriorityClass => "scheduling.k8s.io", "v1", "PriorityClass";
            api::storage::v1::StorageClass => "storage.k8s.io", "v1", "StorageClass";
        }
        let mut defs = generator.take_definitions(true);
        for (name, group, version, kind) in kinds {
            if let Some(Value::Object(schema)) = defs.get_mut(&name) {
                schema.insert("x-kubernetes-group-version-kind".into(), json!([{ "group": group, "version": version, "kind": kind }]));
            }
        }
        for (def, field, key) in PATCH_MERGE_KEYS {
            if let Some(prop) = defs.get_mut(*def).and_then(|d| d.pointer_mut(&format!("/properties/{field}"))).and_then(Value::as_object_mut) {
                prop.insert("x-kubernetes-patch-strategy".into(), json!("merge"));
                if !key.is_empty() {
                    prop.insert("x-kubernetes-patch-merge-key".into(), json!(key));
                }
            }
        }
        defs
    })
}

/// (definition, field, merge key): the `patchStrategy: merge` lists of the API (a set when the key
/// is empty), as in the apiserver's own OpenAPI documents.
const PATCH_MERGE_KEYS: &[(&str, &str, &str)] = &[
    ("io.k8s.api.core.v1.PodSpec", "containers", "name"),
    ("io.k8s.api.core.v1.PodSpec", "initContainers", "name"),
    ("io.k8s.api.core.v1.PodSpec", "ephemeralContainers", "name"),
    ("io.k8s.api.core.v1.PodSpec", "volumes", "name"),
    ("io.k8s.api.core.v1.PodSpec", "imagePullSecrets", "name"),
    ("io.k8s.api.core.v1.PodSpec", "hostAliases", "ip"),
    ("io.k8s.api.core.v1.PodSpec", "topologySpreadConstraints", "topologyKey"),
    ("io.k8s.api.core.v1.PodSpec", "resourceClaims", "name"),
    ("io.k8s.api.core.v1.PodSpec", "schedulingGates", "name"),
    ("io.k8s.api.core.v1.Container", "env", "name"),
    ("io.k8s.api.core.v1.Container", "ports", "containerPort"),
    ("io.k8s.api.core.v1.Container", "volumeMounts", "mountPath"),
    ("io.k8s.api.core.v1.Container", "volumeDevices", "devicePath"),
    ("io.k8s.api.core.v1.EphemeralContainer", "env", "name"),
    ("io.k8s.api.core.v1.EphemeralContainer", "ports", "containerPort"),
    ("io.k8s.api.core.v1.EphemeralContainer", "volumeMounts", "mountPath"),
    ("io.k8s.api.core.v1.PodStatus", "conditions", "type"),
    ("io.k8s.api.core.v1.PodStatus", "podIPs", "ip"),
    ("io.k8s.api.core.v1.ServiceSpec", "ports", "port"),
    ("io.k8s.api.core.v1.NodeStatus", "addresses", "type"),
    ("io.k8s.api.core.v1.NodeStatus", "conditions", "type"),
    ("io.k8s.api.core.v1.ServiceAccount", "secrets", "name"),
    ("io.k8s.api.apps.v1.DeploymentStatus", "conditions", "type"),
    ("io.k8s.api.apps.v1.DaemonSetStatus", "conditions", "type"),
    ("io.k8s.api.apps.v1.ReplicaSetStatus", "conditions", "type"),
    ("io.k8s.api.apps.v1.StatefulSetStatus", "conditions", "type"),
    ("io.k8s.api.batch.v1.JobStatus", "conditions", "type"),
    ("io.k8s.api.policy.v1.PodDisruptionBudgetStatus", "conditions", "type"),
    ("io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta", "finalizers", ""),
    (
        "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta",
        "ownerReferences",
        "uid",
    ),
];

/// Definitions by name.
pub type Schemas = BTreeMap<String, Value>;

/// The built-in schemas of one group/version, with every definition they reference, keyed by
/// definition name.
pub fn schemas_for(group: &str, version: &str) -> Arc<Schemas> {
    // Computed once per group/version: kubectl fetches these documents on every apply.
    type Cache = Mutex<HashMap<(String, String), Arc<Schemas>>>;
    static CACHE: OnceLock<Cache> = OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    let key = (group.to_string(), version.to_string());
    if let Some(hit) = cache.lock().unwrap_or_else(|e| e.into_inner()).get(&key) {
        return hit.clone();
    }
    let computed = Arc::new(compute(group, version));
    cache
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(key, computed.clone());
    computed
}

fn compute(group: &str, version: &str) -> BTreeMap<String, Value> {
    let defs = definitions();
    let mut todo: Vec<String> = defs
        .iter()
        .filter(|(_, s)| {
            s.get("x-kubernetes-group-version-kind")
                .and_then(Value::as_array)
                .is_some_and(|a| a.iter().any(|g| g["group"] == group && g["version"] == version))
        })
        .map(|(n, _)| n.clone())
        .collect();
    let mut seen = BTreeSet::new();
    while let Some(name) = todo.pop() {
        if !seen.insert(name.clone()) {
            continue;
        }
        if let Some(schema) = defs.get(&name) {
            collect_refs(schema, &mut todo);
        }
    }
    seen.into_iter()
        .filter_map(|n| defs.get(&n).map(|s| (n, s.clone())))
        .collect()
}

/// Fields of a built-in object that its kind does not have, as the apiserver's strict decoding
/// reports them (`spec.containers[0].imagee`). Empty for kinds without a schema here (and for
/// objects that do not decode: `decode::builtin` says why).
#[cfg(test)]
pub fn unknown_fields(group: &str, version: &str, kind: &str, obj: &Value) -> Vec<String> {
    crate::decode::builtin(group, version, kind, obj).unwrap_or_default()
}

/// The definition name and schema of a kind's objects, looked up once per kind (every write of a
/// built-in object asks).
pub(crate) fn root_schema(group: &str, version: &str, kind: &str) -> Option<(&'static str, &'static Value)> {
    type Roots = HashMap<(String, String, String), (&'static str, &'static Value)>;
    static ROOTS: OnceLock<Roots> = OnceLock::new();
    let roots = ROOTS.get_or_init(|| {
        let mut roots = Roots::new();
        for (name, schema) in definitions() {
            let gvks = schema.get("x-kubernetes-group-version-kind").and_then(Value::as_array);
            for gvk in gvks.into_iter().flatten() {
                let part = |k: &str| gvk.get(k).and_then(Value::as_str).map(str::to_string);
                let (Some(group), Some(version), Some(kind)) = (part("group"), part("version"), part("kind")) else {
                    continue;
                };
                // The first schema naming a kind is its own, as the scan this replaces found it.
                roots.entry((group, version, kind)).or_insert((name.as_str(), schema));
            }
        }
        roots
    });
    roots
        .get(&(group.to_string(), version.to_string(), kind.to_string()))
        .copied()
}

fn collect_refs(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            if let Some(r) = m
                .get("$ref")
                .and_then(Value::as_str)
                .and_then(|r| r.strip_prefix("#/components/schemas/"))
            {
                out.push(r.to_string());
            }
            m.values().for_each(|x| collect_refs(x, out));
        }
        Value::Array(a) => a.iter().for_each(|x| collect_refs(x, out)),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_fields_of_built_in_objects() {
        let pod = json!({ "apiVersion": "v1", "kind": "Pod", "metadata": { "name": "p", "labels": { "a": "b" }, "bogus": 1 },
            "spec": { "containers": [{ "name": "c", "image": "i", "imagee": "x", "resources": { "limits": { "cpu": "1" } },
                "env": [{ "name": "A", "valueFrom": { "fieldRef": { "fieldPath": "metadata.name" } } }] }],
                "nodeSelector": { "any": "thing" } }, "status": { "phase": "Running" } });
        assert_eq!(
            unknown_fields("", "v1", "Pod", &pod),
            ["metadata.bogus", "spec.containers[0].imagee"]
        );
        let crd = json!({ "spec": { "versions": [{ "name": "v1", "schema": { "openAPIV3Schema": { "type": "object",
            "properties": { "spec": { "x-kubernetes-preserve-unknown-fields": true } } } } }] } });
        assert!(unknown_fields("apiextensions.k8s.io", "v1", "CustomResourceDefinition", &crd).is_empty());
    }

    #[test]
    fn pods_with_their_references_and_merge_keys() {
        let core = schemas_for("", "v1");
        let pod = &core["io.k8s.api.core.v1.Pod"];
        assert_eq!(pod["x-kubernetes-group-version-kind"][0]["kind"], "Pod");
        // As in the apiserver's documents: a described reference is an `allOf` of one `$ref`.
        assert_eq!(
            pod["properties"]["spec"]["allOf"][0]["$ref"],
            "#/components/schemas/io.k8s.api.core.v1.PodSpec"
        );
        assert_eq!(
            core["io.k8s.api.core.v1.PodSpec"]["properties"]["containers"]["x-kubernetes-patch-merge-key"],
            "name"
        );
        assert!(core.contains_key("io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"));
        assert!(!core.contains_key("io.k8s.api.apps.v1.Deployment"));
        assert!(schemas_for("apps", "v1").contains_key("io.k8s.api.core.v1.PodSpec"));
    }
}
