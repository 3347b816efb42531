//! How lists inside an object merge: the `patchMergeKey`/`listType` knowledge that strategic merge
//! patch and server-side apply need.
//!
//! For built-in kinds it is the table of Kubernetes' struct tags for the lists kubectl and
//! controllers actually patch; for custom resources it is read from the CRD's structural schema
//! (`x-kubernetes-list-type`, `x-kubernetes-list-map-keys`, `x-kubernetes-map-type`). Everything
//! else is atomic, as in Kubernetes.

use serde_json::Value;

/// How a list (or a map) at a path merges.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListType {
    /// An associative list keyed by these fields (strategic merge uses the first key).
    Map(Vec<String>),
    /// A set of scalars (merged by value).
    Set,
    /// Replaced as a whole.
    Atomic,
}

/// The schema knowledge for one kind.
#[derive(Debug, Clone, Copy)]
pub struct KindSchema<'a> {
    pub group: &'a str,
    pub kind: &'a str,
    /// The CRD's `openAPIV3Schema` for the version being written, for custom resources.
    pub crd_schema: Option<&'a Value>,
}

impl<'a> KindSchema<'a> {
    pub fn new(group: &'a str, kind: &'a str, crd_schema: Option<&'a Value>) -> Self {
        Self {
            group,
            kind,
            crd_schema,
        }
    }

    /// Whether this is a built-in kind (strategic merge patch is only served for those).
    pub fn is_builtin(&self) -> bool {
        self.crd_schema.is_none()
    }

    /// The list type at `path` (field names from the object root, list positions omitted).
    pub fn list_type(&self, path: &[&str]) -> ListType {
        if let [first, rest @ ..] = path
            && *first == "metadata"
        {
            return match rest {
                ["finalizers"] => ListType::Set,
                ["ownerReferences"] => keys(&["uid"]),
                _ => ListType::Atomic,
            };
        }
        match self.crd_schema {
            Some(schema) => crd_list_type(schema, path),
            None => builtin_list_type(self.group, self.kind, path),
        }
    }

    /// The default of a key field of the associative list at `path`, which structured-merge-diff uses for items
    /// that leave the key out (`getAssociativeKeyDefault`): a Service port applied without `protocol` is the
    /// stored `{port: 80, protocol: TCP}`, not a second port. Built-ins: the `default`s of k8s' OpenAPI.
    pub fn key_default(&self, path: &[&str], key: &str) -> Option<Value> {
        match self.crd_schema {
            Some(schema) => {
                let list = schema_at(schema, path)?;
                list.get("items")?.get("properties")?.get(key)?.get("default").cloned()
            }
            None => {
                let ports = match (self.group, self.kind, path) {
                    ("", "Service", ["spec", "ports"]) => true,
                    (group, kind, path) => pod_spec_prefix(group, kind).is_some_and(|prefix| {
                        path.len() == prefix.len() + 2
                            && path[..prefix.len()] == *prefix
                            && matches!(
                                &path[prefix.len()..],
                                ["containers" | "initContainers" | "ephemeralContainers", "ports"]
                            )
                    }),
                };
                (ports && key == "protocol").then(|| Value::String("TCP".into()))
            }
        }
    }

    /// Whether the map at `path` is atomic (`x-kubernetes-map-type: atomic`); built-in atomic
    /// structs (label selectors, ...) are treated as granular, which only matters for ownership.
    pub fn map_is_atomic(&self, path: &[&str]) -> bool {
        match self.crd_schema {
            Some(schema) => schema_at(schema, path)
                .is_some_and(|s| s.get("x-kubernetes-map-type").and_then(Value::as_str) == Some("atomic")),
            None => false,
        }
    }
}

fn keys(k: &[&str]) -> ListType {
    ListType::Map(k.iter().map(|s| s.to_string()).collect())
}

/// Where a kind keeps its PodSpec.
fn pod_spec_prefix(group: &str, kind: &str) -> Option<&'static [&'static str]> {
    match (group, kind) {
        ("", "Pod") => Some(&["spec"]),
        ("", "PodTemplate") => Some(&["template", "spec"]),
        ("", "ReplicationController")
        | ("apps", "Deployment" | "DaemonSet" | "ReplicaSet" | "StatefulSet")
        | ("batch", "Job") => Some(&["spec", "template", "spec"]),
        ("batch", "CronJob") => Some(&["spec", "jobTemplate", "spec", "template", "spec"]),
        _ => None,
    }
}

fn pod_spec_list_type(path: &[&str]) -> ListType {
    match path {
        ["containers" | "initContainers" | "ephemeralContainers"] => keys(&["name"]),
        ["volumes" | "imagePullSecrets" | "resourceClaims" | "schedulingGates"] => keys(&["name"]),
        ["hostAliases"] => keys(&["ip"]),
        ["topologySpreadConstraints"] => keys(&["topologyKey", "whenUnsatisfiable"]),
        ["containers" | "initContainers" | "ephemeralContainers", rest @ ..] => match rest {
            ["env"] => keys(&["name"]),
            ["ports"] => keys(&["containerPort", "protocol"]),
            ["volumeMounts"] => keys(&["mountPath"]),
            ["volumeDevices"] => keys(&["devicePath"]),
            _ => ListType::Atomic,
        },
        _ => ListType::Atomic,
    }
}

fn builtin_list_type(group: &str, kind: &str, path: &[&str]) -> ListType {
    if let Some(prefix) = pod_spec_prefix(group, kind)
        && path.len() > prefix.len()
        && path[..prefix.len()] == *prefix
    {
        return pod_spec_list_type(&path[prefix.len()..]);
    }
    match (group, kind, path) {
        (_, _, ["status", "conditions"]) => keys(&["type"]),
        ("", "Pod", ["status", "podIPs" | "hostIPs"]) => keys(&["ip"]),
        ("", "Service", ["spec", "ports"]) => keys(&["port", "protocol"]),
        ("", "Node", ["status", "addresses"]) => keys(&["type"]),
        ("", "Node", ["spec", "podCIDRs"]) => ListType::Set,
        ("", "ServiceAccount", ["secrets"]) => keys(&["name"]),
        ("", "Namespace", ["spec", "finalizers"]) => ListType::Set,
        ("apiextensions.k8s.io", "CustomResourceDefinition", ["spec", "versions"]) => keys(&["name"]),
        // +listType=map +listMapKey=name in admissionregistration/v1, so one manager can own one webhook's
        // caBundle while the installer owns the rest.
        (
            "admissionregistration.k8s.io",
            "MutatingWebhookConfiguration" | "ValidatingWebhookConfiguration",
            ["webhooks"],
        ) => keys(&["name"]),
        _ => ListType::Atomic,
    }
}

/// The sub-schema at a path, following `properties`, `items` and `additionalProperties`.
fn schema_at<'s>(schema: &'s Value, path: &[&str]) -> Option<&'s Value> {
    let mut cur = schema;
    for field in path {
        // Lists are transparent in paths: step into `items` first.
        while cur.get("type").and_then(Value::as_str) == Some("array") {
            cur = cur.get("items")?;
        }
        cur = match cur.get("properties").and_then(|p| p.get(*field)) {
            Some(s) => s,
            None => cur.get("additionalProperties").filter(|a| a.is_object())?,
        };
    }
    Some(cur)
}

fn crd_list_type(schema: &Value, path: &[&str]) -> ListType {
    let Some(s) = schema_at(schema, path) else {
        return ListType::Atomic;
    };
    match s.get("x-kubernetes-list-type").and_then(Value::as_str) {
        Some("map") => ListType::Map(
            s.get("x-kubernetes-list-map-keys")
                .and_then(Value::as_array)
                .map(|a| a.iter().filter_map(Value::as_str).map(str::to_string).collect())
                .unwrap_or_default(),
        ),
        Some("set") => ListType::Set,
        _ => ListType::Atomic,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn builtin_pod_spec_lists_under_every_template() {
        let pod = KindSchema::new("", "Pod", None);
        assert_eq!(pod.list_type(&["spec", "containers"]), keys(&["name"]));
        assert_eq!(pod.list_type(&["spec", "containers", "env"]), keys(&["name"]));
        assert_eq!(pod.list_type(&["spec", "tolerations"]), ListType::Atomic);
        let deploy = KindSchema::new("apps", "Deployment", None);
        assert_eq!(
            deploy.list_type(&["spec", "template", "spec", "volumes"]),
            keys(&["name"])
        );
        assert_eq!(deploy.list_type(&["metadata", "finalizers"]), ListType::Set);
    }

    #[test]
    fn crd_schema_list_types() {
        let schema = json!({ "type": "object", "properties": { "spec": { "type": "object", "properties": {
            "items": { "type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["id"],
                       "items": { "type": "object", "properties": { "tags": { "type": "array", "x-kubernetes-list-type": "set", "items": { "type": "string" } } } } },
            "plain": { "type": "array", "items": { "type": "string" } }
        } } } });
        let k = KindSchema::new("x.io", "Thing", Some(&schema));
        assert_eq!(k.list_type(&["spec", "items"]), keys(&["id"]));
        assert_eq!(k.list_type(&["spec", "items", "tags"]), ListType::Set);
        assert_eq!(k.list_type(&["spec", "plain"]), ListType::Atomic);
    }

    #[test]
    fn key_defaults() {
        let svc = KindSchema::new("", "Service", None);
        assert_eq!(svc.key_default(&["spec", "ports"], "protocol"), Some(json!("TCP")));
        assert_eq!(svc.key_default(&["spec", "ports"], "port"), None);
        let deploy = KindSchema::new("apps", "Deployment", None);
        let ports = ["spec", "template", "spec", "initContainers", "ports"];
        assert_eq!(deploy.key_default(&ports, "protocol"), Some(json!("TCP")));
        assert_eq!(deploy.key_default(&["spec", "ports"], "protocol"), None);
        let schema = json!({ "type": "object", "properties": { "spec": { "type": "object", "properties": {
            "items": { "type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["id", "zone"],
                       "items": { "type": "object", "properties": { "id": { "type": "string" }, "zone": { "type": "string", "default": "a" } } } }
        } } } });
        let k = KindSchema::new("x.io", "Thing", Some(&schema));
        assert_eq!(k.key_default(&["spec", "items"], "zone"), Some(json!("a")));
        assert_eq!(k.key_default(&["spec", "items"], "id"), None);
    }
}
