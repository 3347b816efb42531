//! The catalog of served resources: the built-in kinds and the ones CustomResourceDefinitions add.
//!
//! Discovery, the HTTP router, tables and the store all read from here, so a CRD that becomes
//! established is served everywhere at once.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::Value;

/// How a caller addresses a resource: `apps/v1/deployments`, `v1/pods` (empty group).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Gvr {
    pub group: String,
    pub version: String,
    pub resource: String,
}

impl Gvr {
    pub fn new(group: &str, version: &str, resource: &str) -> Self {
        Self {
            group: group.into(),
            version: version.into(),
            resource: resource.into(),
        }
    }

    /// `v1` or `apps/v1`.
    pub fn api_version(&self) -> String {
        api_version(&self.group, &self.version)
    }
}

/// The storage identity of a resource, independent of the version it is read in.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ResourceKey {
    pub group: String,
    pub resource: String,
}

/// `v1` for the core group, `group/version` otherwise.
pub fn api_version(group: &str, version: &str) -> String {
    if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    }
}

/// Splits an apiVersion into (group, version).
pub fn split_api_version(api_version: &str) -> (String, String) {
    match api_version.split_once('/') {
        Some((g, v)) => (g.to_string(), v.to_string()),
        None => (String::new(), api_version.to_string()),
    }
}

/// One `additionalPrinterColumns` entry of a CRD version.
#[derive(Debug, Clone, PartialEq)]
pub struct PrinterColumn {
    pub name: String,
    pub type_: String,
    pub format: String,
    pub description: String,
    pub priority: i64,
    pub json_path: String,
}

/// What a resource is and how it behaves.
#[derive(Debug, Clone)]
pub struct ResourceInfo {
    pub group: String,
    /// Served versions, the preferred one first.
    pub versions: Vec<String>,
    /// The version objects are stored in.
    pub storage_version: String,
    pub resource: String,
    pub singular: String,
    pub kind: String,
    pub list_kind: String,
    pub namespaced: bool,
    pub short_names: Vec<String>,
    pub categories: Vec<String>,
    /// Has a `/status` subresource (so spec and status are written separately).
    pub status_subresource: bool,
    /// Other subresources served (or to be served) for discovery: `log`, `finalize`, `scale`, ...
    pub extra_subresources: Vec<String>,
    /// Maintains `metadata.generation`.
    pub has_generation: bool,
    /// DELETE answers with the deleted object instead of a Status (pods, serviceaccounts, ...).
    pub return_deleted_object: bool,
    /// The storage this resource shares (events.k8s.io/v1 events are core/v1 events).
    pub storage: ResourceKey,
    /// Set for resources added by a CRD.
    pub crd: Option<CrdInfo>,
}

/// What a CRD adds on top of the common fields.
#[derive(Debug, Clone, Default)]
pub struct CrdInfo {
    /// CRD name (`<plural>.<group>`).
    pub name: String,
    /// `openAPIV3Schema` per version.
    pub schemas: BTreeMap<String, Value>,
    /// `additionalPrinterColumns` per version.
    pub printer_columns: BTreeMap<String, Vec<PrinterColumn>>,
    /// `selectableFields` per version, as field selector names (`spec.foo`).
    pub selectable_fields: BTreeMap<String, Vec<String>>,
}

impl ResourceInfo {
    pub fn key(&self) -> ResourceKey {
        ResourceKey {
            group: self.group.clone(),
            resource: self.resource.clone(),
        }
    }

    pub fn serves(&self, version: &str) -> bool {
        self.versions.iter().any(|v| v == version)
    }

    pub fn preferred_version(&self) -> &str {
        self.versions
            .first()
            .map(String::as_str)
            .unwrap_or(&self.storage_version)
    }

    /// The verbs discovery advertises.
    pub fn verbs(&self) -> Vec<&'static str> {
        if crate::auth::reviews::is_review(&self.group, &self.resource, None) {
            return vec!["create"];
        }
        vec![
            "create",
            "delete",
            "deletecollection",
            "get",
            "list",
            "patch",
            "update",
            "watch",
        ]
    }

    pub fn is_crd_backed(&self) -> bool {
        self.crd.is_some()
    }
}

/// A built-in resource description, compact enough to list them all in one table.
struct Builtin {
    group: &'static str,
    version: &'static str,
    resource: &'static str,
    singular: &'static str,
    kind: &'static str,
    namespaced: bool,
    short_names: &'static [&'static str],
    categories: &'static [&'static str],
    status: bool,
    extra: &'static [&'static str],
    generation: bool,
}

const fn b(
    group: &'static str,
    version: &'static str,
    resource: &'static str,
    singular: &'static str,
    kind: &'static str,
    namespaced: bool,
) -> Builtin {
    Builtin {
        group,
        version,
        resource,
        singular,
        kind,
        namespaced,
        short_names: &[],
        categories: &[],
        status: false,
        extra: &[],
        generation: false,
    }
}

impl Builtin {
    const fn short(mut self, s: &'static [&'static str]) -> Self {
        self.short_names = s;
        self
    }
    const fn cats(mut self, c: &'static [&'static str]) -> Self {
        self.categories = c;
        self
    }
    const fn status(mut self) -> Self {
        self.status = true;
        self
    }
    const fn extra(mut self, e: &'static [&'static str]) -> Self {
        self.extra = e;
        self
    }
    const fn gen_(mut self) -> Self {
        self.generation = true;
        self
    }
}

const ALL: &[&str] = &["all"];

/// The built-in resources, in the order discovery lists their groups.
const BUILTINS: &[Builtin] = &[
    b("", "v1", "namespaces", "namespace", "Namespace", false)
        .short(&["ns"])
        .status()
        .extra(&["finalize"]),
    b("", "v1", "pods", "pod", "Pod", true)
        .short(&["po"])
        .cats(ALL)
        .status()
        .extra(&["log", "binding", "eviction", "ephemeralcontainers"]),
    b("", "v1", "services", "service", "Service", true)
        .short(&["svc"])
        .cats(ALL)
        .status(),
    b("", "v1", "configmaps", "configmap", "ConfigMap", true).short(&["cm"]),
    b("", "v1", "secrets", "secret", "Secret", true),
    b("", "v1", "serviceaccounts", "serviceaccount", "ServiceAccount", true)
        .short(&["sa"])
        .extra(&["token"]),
    b("", "v1", "events", "event", "Event", true).short(&["ev"]),
    b("", "v1", "nodes", "node", "Node", false).short(&["no"]).status(),
    b("", "v1", "endpoints", "endpoints", "Endpoints", true).short(&["ep"]),
    b(
        "",
        "v1",
        "persistentvolumeclaims",
        "persistentvolumeclaim",
        "PersistentVolumeClaim",
        true,
    )
    .short(&["pvc"])
    .status(),
    b(
        "",
        "v1",
        "persistentvolumes",
        "persistentvolume",
        "PersistentVolume",
        false,
    )
    .short(&["pv"])
    .status(),
    b("", "v1", "resourcequotas", "resourcequota", "ResourceQuota", true)
        .short(&["quota"])
        .status(),
    b("", "v1", "limitranges", "limitrange", "LimitRange", true).short(&["limits"]),
    b("apps", "v1", "deployments", "deployment", "Deployment", true)
        .short(&["deploy"])
        .cats(ALL)
        .status()
        .extra(&["scale"])
        .gen_(),
    b("apps", "v1", "daemonsets", "daemonset", "DaemonSet", true)
        .short(&["ds"])
        .cats(ALL)
        .status()
        .gen_(),
    b("apps", "v1", "replicasets", "replicaset", "ReplicaSet", true)
        .short(&["rs"])
        .cats(ALL)
        .status()
        .extra(&["scale"])
        .gen_(),
    b("apps", "v1", "statefulsets", "statefulset", "StatefulSet", true)
        .short(&["sts"])
        .cats(ALL)
        .status()
        .extra(&["scale"])
        .gen_(),
    b(
        "apps",
        "v1",
        "controllerrevisions",
        "controllerrevision",
        "ControllerRevision",
        true,
    ),
    b("batch", "v1", "jobs", "job", "Job", true).cats(ALL).status().gen_(),
    b("batch", "v1", "cronjobs", "cronjob", "CronJob", true)
        .short(&["cj"])
        .cats(ALL)
        .status()
        .gen_(),
    b("coordination.k8s.io", "v1", "leases", "lease", "Lease", true),
    b(
        "discovery.k8s.io",
        "v1",
        "endpointslices",
        "endpointslice",
        "EndpointSlice",
        true,
    )
    .gen_(),
    b("events.k8s.io", "v1", "events", "event", "Event", true).short(&["ev"]),
    b(
        "networking.k8s.io",
        "v1",
        "networkpolicies",
        "networkpolicy",
        "NetworkPolicy",
        true,
    )
    .short(&["netpol"])
    .gen_(),
    b("networking.k8s.io", "v1", "ingresses", "ingress", "Ingress", true)
        .short(&["ing"])
        .status()
        .gen_(),
    b(
        "policy",
        "v1",
        "poddisruptionbudgets",
        "poddisruptionbudget",
        "PodDisruptionBudget",
        true,
    )
    .short(&["pdb"])
    .status()
    .gen_(),
    b("rbac.authorization.k8s.io", "v1", "roles", "role", "Role", true),
    b(
        "rbac.authorization.k8s.io",
        "v1",
        "rolebindings",
        "rolebinding",
        "RoleBinding",
        true,
    ),
    b(
        "rbac.authorization.k8s.io",
        "v1",
        "clusterroles",
        "clusterrole",
        "ClusterRole",
        false,
    ),
    b(
        "rbac.authorization.k8s.io",
        "v1",
        "clusterrolebindings",
        "clusterrolebinding",
        "ClusterRoleBinding",
        false,
    ),
    // Reviews: answered by `auth::reviews`, never stored.
    b(
        "authentication.k8s.io",
        "v1",
        "tokenreviews",
        "tokenreview",
        "TokenReview",
        false,
    ),
    b(
        "authentication.k8s.io",
        "v1",
        "selfsubjectreviews",
        "selfsubjectreview",
        "SelfSubjectReview",
        false,
    ),
    b(
        "authorization.k8s.io",
        "v1",
        "localsubjectaccessreviews",
        "localsubjectaccessreview",
        "LocalSubjectAccessReview",
        true,
    ),
    b(
        "authorization.k8s.io",
        "v1",
        "selfsubjectaccessreviews",
        "selfsubjectaccessreview",
        "SelfSubjectAccessReview",
        false,
    ),
    b(
        "authorization.k8s.io",
        "v1",
        "selfsubjectrulesreviews",
        "selfsubjectrulesreview",
        "SelfSubjectRulesReview",
        false,
    ),
    b(
        "authorization.k8s.io",
        "v1",
        "subjectaccessreviews",
        "subjectaccessreview",
        "SubjectAccessReview",
        false,
    ),
    b(
        "apiextensions.k8s.io",
        "v1",
        "customresourcedefinitions",
        "customresourcedefinition",
        "CustomResourceDefinition",
        false,
    )
    .short(&["crd", "crds"])
    .cats(&["api-extensions"])
    .status()
    .gen_(),
    b(
        "admissionregistration.k8s.io",
        "v1",
        "mutatingwebhookconfigurations",
        "mutatingwebhookconfiguration",
        "MutatingWebhookConfiguration",
        false,
    )
    .cats(&["api-extensions"])
    .gen_(),
    b(
        "admissionregistration.k8s.io",
        "v1",
        "validatingwebhookconfigurations",
        "validatingwebhookconfiguration",
        "ValidatingWebhookConfiguration",
        false,
    )
    .cats(&["api-extensions"])
    .gen_(),
    b(
        "scheduling.k8s.io",
        "v1",
        "priorityclasses",
        "priorityclass",
        "PriorityClass",
        false,
    )
    .short(&["pc"]),
    b(
        "storage.k8s.io",
        "v1",
        "storageclasses",
        "storageclass",
        "StorageClass",
        false,
    )
    .short(&["sc"]),
];

/// Resources whose DELETE returns the object (`ReturnDeletedObject: true` in their registry).
const RETURNS_DELETED_OBJECT: &[(&str, &str)] = &[
    ("", "pods"),
    ("", "serviceaccounts"),
    ("storage.k8s.io", "storageclasses"),
];

/// The served resources. Cheap to clone: entries are shared.
#[derive(Debug, Clone, Default)]
pub struct Registry {
    /// Keyed by (group, resource).
    resources: BTreeMap<ResourceKey, Arc<ResourceInfo>>,
    /// Group order for discovery: built-in groups first in their usual order, then CRD groups.
    group_order: Vec<String>,
}

impl Registry {
    /// The registry of a fresh cluster: the built-in resources only.
    pub fn builtin() -> Self {
        let mut reg = Registry::default();
        for bi in BUILTINS {
            let storage = if bi.group == "events.k8s.io" {
                ResourceKey {
                    group: String::new(),
                    resource: "events".into(),
                }
            } else {
                ResourceKey {
                    group: bi.group.into(),
                    resource: bi.resource.into(),
                }
            };
            let info = ResourceInfo {
                group: bi.group.into(),
                versions: vec![bi.version.into()],
                storage_version: bi.version.into(),
                resource: bi.resource.into(),
                singular: bi.singular.into(),
                kind: bi.kind.into(),
                list_kind: format!("{}List", bi.kind),
                namespaced: bi.namespaced,
                short_names: bi.short_names.iter().map(|s| s.to_string()).collect(),
                categories: bi.categories.iter().map(|s| s.to_string()).collect(),
                status_subresource: bi.status,
                extra_subresources: bi.extra.iter().map(|s| s.to_string()).collect(),
                has_generation: bi.generation,
                return_deleted_object: RETURNS_DELETED_OBJECT.contains(&(bi.group, bi.resource)),
                storage,
                crd: None,
            };
            reg.insert(info);
        }
        reg
    }

    /// Adds or replaces a resource.
    pub fn insert(&mut self, info: ResourceInfo) {
        if !self.group_order.contains(&info.group) {
            self.group_order.push(info.group.clone());
        }
        self.resources.insert(info.key(), Arc::new(info));
    }

    /// Removes a resource (a CRD was deleted).
    pub fn remove(&mut self, key: &ResourceKey) -> Option<Arc<ResourceInfo>> {
        let removed = self.resources.remove(key);
        if let Some(info) = &removed
            && !self.resources.keys().any(|k| k.group == info.group)
        {
            self.group_order.retain(|g| g != &info.group);
        }
        removed
    }

    /// The resource served at group/version/resource, if that version is served.
    pub fn lookup(&self, gvr: &Gvr) -> Option<Arc<ResourceInfo>> {
        let key = ResourceKey {
            group: gvr.group.clone(),
            resource: gvr.resource.clone(),
        };
        self.resources
            .get(&key)
            .filter(|info| info.serves(&gvr.version))
            .cloned()
    }

    /// The resource of a group and kind (any served version), as owner references and
    /// admission need.
    pub fn lookup_kind(&self, group: &str, kind: &str) -> Option<Arc<ResourceInfo>> {
        self.resources
            .values()
            .find(|info| info.group == group && info.kind == kind)
            .cloned()
    }

    pub fn get(&self, key: &ResourceKey) -> Option<Arc<ResourceInfo>> {
        self.resources.get(key).cloned()
    }

    /// All resources, in discovery order (groups in order, resources by name).
    pub fn all(&self) -> Vec<Arc<ResourceInfo>> {
        let mut out = Vec::new();
        for group in &self.group_order {
            out.extend(self.resources.values().filter(|r| &r.group == group).cloned());
        }
        out
    }

    /// Groups with their served versions (preferred first), in discovery order; the core group
    /// ("") included.
    pub fn groups(&self) -> Vec<(String, Vec<String>)> {
        let mut out: Vec<(String, Vec<String>)> = Vec::new();
        for group in &self.group_order {
            let mut versions: Vec<String> = Vec::new();
            for info in self.resources.values().filter(|r| &r.group == group) {
                for v in &info.versions {
                    if !versions.contains(v) {
                        versions.push(v.clone());
                    }
                }
            }
            versions.sort_by(|a, b| compare_versions(b, a));
            out.push((group.clone(), versions));
        }
        out
    }

    /// Resources of one group/version.
    pub fn in_group_version(&self, group: &str, version: &str) -> Vec<Arc<ResourceInfo>> {
        self.resources
            .values()
            .filter(|r| r.group == group && r.serves(version))
            .cloned()
            .collect()
    }
}

/// Kubernetes version priority: GA > beta > alpha, higher numbers first (`v2` > `v1` > `v1beta2`).
pub fn compare_versions(a: &str, b: &str) -> std::cmp::Ordering {
    fn rank(v: &str) -> (u8, u64, u64) {
        let Some(rest) = v.strip_prefix('v') else {
            return (0, 0, 0);
        };
        let digits: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
        let Ok(major) = digits.parse::<u64>() else {
            return (0, 0, 0);
        };
        let tail = &rest[digits.len()..];
        if tail.is_empty() {
            return (3, major, 0);
        }
        let (level, num) = if let Some(n) = tail.strip_prefix("beta") {
            (2, n)
        } else if let Some(n) = tail.strip_prefix("alpha") {
            (1, n)
        } else {
            return (0, 0, 0);
        };
        match num.parse::<u64>() {
            Ok(minor) => (level, major, minor),
            Err(_) => (0, 0, 0),
        }
    }
    rank(a).cmp(&rank(b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_lookup_by_gvr_and_kind() {
        let reg = Registry::builtin();
        let pods = reg.lookup(&Gvr::new("", "v1", "pods")).unwrap();
        assert!(pods.namespaced && pods.status_subresource && pods.return_deleted_object);
        assert!(reg.lookup(&Gvr::new("", "v2", "pods")).is_none());
        assert_eq!(reg.lookup_kind("apps", "Deployment").unwrap().resource, "deployments");
        let ev = reg.lookup(&Gvr::new("events.k8s.io", "v1", "events")).unwrap();
        assert_eq!(
            ev.storage,
            ResourceKey {
                group: String::new(),
                resource: "events".into()
            }
        );
    }

    #[test]
    fn version_priority_matches_kubernetes() {
        let mut v = vec!["v1alpha1", "v1beta1", "v1", "v2beta1", "v2", "v1beta2"];
        v.sort_by(|a, b| compare_versions(b, a));
        assert_eq!(v, vec!["v2", "v1", "v2beta1", "v1beta2", "v1beta1", "v1alpha1"]);
    }
}
