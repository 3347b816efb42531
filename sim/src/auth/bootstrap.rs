//! The bootstrap policy kube-apiserver creates at start (`plugin/pkg/auth/authorizer/rbac/
//! bootstrappolicy`): the user-facing roles (`cluster-admin`, `admin`, `edit`, `view` with their
//! aggregation), the discovery, basic-user and public-info roles every client needs, and the
//! controller roles of the controllers the sim runs (or that a workload controller may run as),
//! with the same rules, labels, annotations and bindings as the real policy. Roles the sim has no
//! use for (node bootstrap, certificates, volume controllers, ...) are left out.

use serde_json::{Value, json};

use crate::registry::Gvr;
use crate::status::ApiError;
use crate::store::{Store, WriteOptions};

const AGGREGATE_TO: &str = "rbac.authorization.k8s.io/aggregate-to-";
const TO_ADMIN: &str = "rbac.authorization.k8s.io/aggregate-to-admin";
const TO_EDIT: &str = "rbac.authorization.k8s.io/aggregate-to-edit";
const TO_VIEW: &str = "rbac.authorization.k8s.io/aggregate-to-view";

type Rule = Value;

/// A resource rule.
fn r(groups: &[&str], resources: &[&str], verbs: &[&str]) -> Rule {
    json!({ "apiGroups": groups, "resources": resources, "verbs": verbs })
}

/// A non-resource rule.
fn urls(urls: &[&str], verbs: &[&str]) -> Rule {
    json!({ "nonResourceURLs": urls, "verbs": verbs })
}

const READ: &[&str] = &["get", "list", "watch"];
const WRITE: &[&str] = &["create", "delete", "deletecollection", "patch", "update"];
const ALL_RW: &[&str] = &[
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];
const EVENT_WRITE: &[&str] = &["create", "patch", "update"];

fn events_rule() -> Rule {
    r(&["", "events.k8s.io"], &["events"], EVENT_WRITE)
}

fn meta(name: &str, labels: &[(&str, &str)]) -> Value {
    let mut l = json!({ "kubernetes.io/bootstrapping": "rbac-defaults" });
    for (k, v) in labels {
        l[*k] = json!(v);
    }
    json!({
        "name": name,
        "labels": l,
        "annotations": { "rbac.authorization.kubernetes.io/autoupdate": "true" },
    })
}

fn cluster_role(name: &str, labels: &[(&str, &str)], rules: Vec<Rule>) -> Value {
    json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": meta(name, labels),
        "rules": rules,
    })
}

/// A ClusterRole whose rules the aggregation controller fills from the roles labelled
/// `aggregate-to-<to>`.
fn aggregated(name: &str, to: &str, labels: &[(&str, &str)]) -> Value {
    json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": meta(name, labels),
        "aggregationRule": { "clusterRoleSelectors": [ { "matchLabels": { format!("{AGGREGATE_TO}{to}"): "true" } } ] },
    })
}

/// The bootstrap ClusterRoles.
pub fn cluster_roles() -> Vec<Value> {
    let to = |role: &str| match role {
        "admin" => (TO_ADMIN, "true"),
        "edit" => (TO_EDIT, "true"),
        _ => (TO_VIEW, "true"),
    };
    let mut roles = vec![
        aggregated("admin", "admin", &[]),
        cluster_role(
            "cluster-admin",
            &[],
            vec![r(&["*"], &["*"], &["*"]), urls(&["*"], &["*"])],
        ),
        aggregated("edit", "edit", &[to("admin")]),
        cluster_role(
            "system:aggregate-to-admin",
            &[to("admin")],
            vec![
                r(&["authorization.k8s.io"], &["localsubjectaccessreviews"], &["create"]),
                r(&["rbac.authorization.k8s.io"], &["rolebindings", "roles"], ALL_RW),
            ],
        ),
        cluster_role(
            "system:aggregate-to-edit",
            &[to("edit")],
            vec![
                r(
                    &[""],
                    &[
                        "pods/attach",
                        "pods/exec",
                        "pods/portforward",
                        "pods/proxy",
                        "secrets",
                        "services/proxy",
                    ],
                    READ,
                ),
                r(&[""], &["serviceaccounts"], &["impersonate"]),
                r(
                    &[""],
                    &["pods", "pods/attach", "pods/exec", "pods/portforward", "pods/proxy"],
                    WRITE,
                ),
                r(&[""], &["pods/eviction"], &["create"]),
                r(
                    &[""],
                    &[
                        "configmaps",
                        "events",
                        "persistentvolumeclaims",
                        "replicationcontrollers",
                        "replicationcontrollers/scale",
                        "secrets",
                        "serviceaccounts",
                        "services",
                        "services/proxy",
                    ],
                    WRITE,
                ),
                r(&[""], &["serviceaccounts/token"], &["create"]),
                r(
                    &["apps"],
                    &[
                        "daemonsets",
                        "deployments",
                        "deployments/rollback",
                        "deployments/scale",
                        "replicasets",
                        "replicasets/scale",
                        "statefulsets",
                        "statefulsets/scale",
                    ],
                    WRITE,
                ),
                r(&["autoscaling"], &["horizontalpodautoscalers"], WRITE),
                r(&["batch"], &["cronjobs", "jobs"], WRITE),
                r(
                    &["extensions"],
                    &[
                        "daemonsets",
                        "deployments",
                        "deployments/rollback",
                        "deployments/scale",
                        "ingresses",
                        "networkpolicies",
                        "replicasets",
                        "replicasets/scale",
                        "replicationcontrollers/scale",
                    ],
                    WRITE,
                ),
                r(&["policy"], &["poddisruptionbudgets"], WRITE),
                r(&["networking.k8s.io"], &["ingresses", "networkpolicies"], WRITE),
                r(&["coordination.k8s.io"], &["leases"], ALL_RW),
            ],
        ),
        cluster_role(
            "system:aggregate-to-view",
            &[to("view")],
            vec![
                r(
                    &[""],
                    &[
                        "configmaps",
                        "endpoints",
                        "persistentvolumeclaims",
                        "persistentvolumeclaims/status",
                        "pods",
                        "replicationcontrollers",
                        "replicationcontrollers/scale",
                        "serviceaccounts",
                        "services",
                        "services/status",
                    ],
                    READ,
                ),
                r(
                    &[""],
                    &[
                        "bindings",
                        "events",
                        "limitranges",
                        "namespaces/status",
                        "pods/log",
                        "pods/status",
                        "replicationcontrollers/status",
                        "resourcequotas",
                        "resourcequotas/status",
                    ],
                    READ,
                ),
                r(&[""], &["namespaces"], READ),
                r(&["discovery.k8s.io"], &["endpointslices"], READ),
                r(
                    &["apps"],
                    &[
                        "controllerrevisions",
                        "daemonsets",
                        "daemonsets/status",
                        "deployments",
                        "deployments/scale",
                        "deployments/status",
                        "replicasets",
                        "replicasets/scale",
                        "replicasets/status",
                        "statefulsets",
                        "statefulsets/scale",
                        "statefulsets/status",
                    ],
                    READ,
                ),
                r(
                    &["autoscaling"],
                    &["horizontalpodautoscalers", "horizontalpodautoscalers/status"],
                    READ,
                ),
                r(
                    &["batch"],
                    &["cronjobs", "cronjobs/status", "jobs", "jobs/status"],
                    READ,
                ),
                r(
                    &["extensions"],
                    &[
                        "daemonsets",
                        "daemonsets/status",
                        "deployments",
                        "deployments/scale",
                        "deployments/status",
                        "ingresses",
                        "ingresses/status",
                        "networkpolicies",
                        "replicasets",
                        "replicasets/scale",
                        "replicasets/status",
                        "replicationcontrollers/scale",
                    ],
                    READ,
                ),
                r(
                    &["policy"],
                    &["poddisruptionbudgets", "poddisruptionbudgets/status"],
                    READ,
                ),
                r(
                    &["networking.k8s.io"],
                    &["ingresses", "ingresses/status", "networkpolicies"],
                    READ,
                ),
            ],
        ),
        cluster_role(
            "system:auth-delegator",
            &[],
            vec![
                r(&["authentication.k8s.io"], &["tokenreviews"], &["create"]),
                r(&["authorization.k8s.io"], &["subjectaccessreviews"], &["create"]),
            ],
        ),
        cluster_role(
            "system:basic-user",
            &[],
            vec![
                r(
                    &["authorization.k8s.io"],
                    &["selfsubjectaccessreviews", "selfsubjectrulesreviews"],
                    &["create"],
                ),
                r(&["authentication.k8s.io"], &["selfsubjectreviews"], &["create"]),
            ],
        ),
        cluster_role(
            "system:discovery",
            &[],
            vec![urls(
                &[
                    "/api",
                    "/api/*",
                    "/apis",
                    "/apis/*",
                    "/healthz",
                    "/livez",
                    "/openapi",
                    "/openapi/*",
                    "/readyz",
                    "/version",
                    "/version/",
                ],
                &["get"],
            )],
        ),
        cluster_role(
            "system:kube-dns",
            &[],
            vec![r(&[""], &["endpoints", "services"], &["list", "watch"])],
        ),
        cluster_role(
            "system:monitoring",
            &[],
            vec![urls(
                &[
                    "/healthz",
                    "/healthz/*",
                    "/livez",
                    "/livez/*",
                    "/metrics",
                    "/metrics/slis",
                    "/readyz",
                    "/readyz/*",
                ],
                &["get"],
            )],
        ),
        cluster_role(
            "system:public-info-viewer",
            &[],
            vec![urls(
                &["/healthz", "/livez", "/readyz", "/version", "/version/"],
                &["get"],
            )],
        ),
        cluster_role(
            "system:service-account-issuer-discovery",
            &[],
            vec![urls(
                &["/.well-known/openid-configuration", "/openid/v1/jwks"],
                &["get"],
            )],
        ),
        aggregated("view", "view", &[to("edit")]),
    ];
    roles.extend(
        controller_roles()
            .into_iter()
            .map(|(name, rules)| cluster_role(&format!("system:controller:{name}"), &[], rules)),
    );
    roles
}

/// `controller_policy.go`: the roles of the controllers kube-controller-manager runs with
/// `--use-service-account-credentials`, for those the sim has (or that workload controllers
/// may act as).
fn controller_roles() -> Vec<(&'static str, Vec<Rule>)> {
    let apps = &["apps", "extensions"][..];
    vec![
        (
            "clusterrole-aggregation-controller",
            vec![r(
                &["rbac.authorization.k8s.io"],
                &["clusterroles"],
                &["escalate", "get", "list", "patch", "update", "watch"],
            )],
        ),
        (
            "daemon-set-controller",
            vec![
                r(apps, &["daemonsets"], READ),
                r(apps, &["daemonsets/status"], &["update"]),
                r(apps, &["daemonsets/finalizers"], &["update"]),
                r(&[""], &["nodes"], &["list", "watch"]),
                r(&[""], &["pods"], &["create", "delete", "list", "patch", "watch"]),
                r(&[""], &["pods/binding"], &["create"]),
                r(
                    &["apps"],
                    &["controllerrevisions"],
                    &["create", "delete", "get", "list", "patch", "update", "watch"],
                ),
                events_rule(),
            ],
        ),
        (
            "deployment-controller",
            vec![
                r(apps, &["deployments"], &["get", "list", "update", "watch"]),
                r(apps, &["deployments/status"], &["update"]),
                r(apps, &["deployments/finalizers"], &["update"]),
                r(
                    apps,
                    &["replicasets"],
                    &["create", "delete", "get", "list", "patch", "update", "watch"],
                ),
                r(&[""], &["pods"], &["get", "list", "update", "watch"]),
                events_rule(),
            ],
        ),
        (
            "endpoint-controller",
            vec![
                r(&[""], &["pods", "services"], READ),
                r(
                    &[""],
                    &["endpoints"],
                    &["create", "delete", "get", "list", "update", "watch"],
                ),
                r(&[""], &["endpoints/restricted"], &["create"]),
                events_rule(),
            ],
        ),
        (
            "endpointslice-controller",
            vec![
                r(&[""], &["nodes", "pods", "services"], READ),
                r(&[""], &["services/finalizers"], &["update"]),
                r(
                    &["discovery.k8s.io"],
                    &["endpointslices"],
                    &["create", "delete", "get", "list", "update", "watch"],
                ),
                events_rule(),
            ],
        ),
        (
            "generic-garbage-collector",
            vec![
                r(&["*"], &["*"], &["delete", "get", "list", "patch", "update", "watch"]),
                events_rule(),
            ],
        ),
        (
            "job-controller",
            vec![
                r(&["batch"], &["jobs"], &["get", "list", "patch", "update", "watch"]),
                r(&["batch"], &["jobs/status"], &["update"]),
                r(&["batch"], &["jobs/finalizers"], &["update"]),
                r(&[""], &["pods"], &["create", "delete", "list", "patch", "watch"]),
                events_rule(),
            ],
        ),
        (
            "namespace-controller",
            vec![
                r(&[""], &["namespaces"], &["delete", "get", "list", "watch"]),
                r(&[""], &["namespaces/finalize", "namespaces/status"], &["update"]),
                r(&["*"], &["*"], &["delete", "deletecollection", "get", "list", "watch"]),
            ],
        ),
        (
            "replicaset-controller",
            vec![
                r(apps, &["replicasets"], &["get", "list", "update", "watch"]),
                r(apps, &["replicasets/status"], &["update"]),
                r(apps, &["replicasets/finalizers"], &["update"]),
                r(&[""], &["pods"], &["create", "delete", "list", "patch", "watch"]),
                events_rule(),
            ],
        ),
        (
            "root-ca-cert-publisher",
            vec![r(&[""], &["configmaps"], &["create", "update"]), events_rule()],
        ),
        (
            "service-account-controller",
            vec![r(&[""], &["serviceaccounts"], &["create"]), events_rule()],
        ),
    ]
}

fn binding(name: &str, role: &str, subjects: Vec<Value>) -> Value {
    json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": meta(name, &[]),
        "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role },
        "subjects": subjects,
    })
}

fn group(name: &str) -> Value {
    json!({ "apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": name })
}

fn service_account(namespace: &str, name: &str) -> Value {
    json!({ "kind": "ServiceAccount", "name": name, "namespace": namespace })
}

/// The bootstrap ClusterRoleBindings (each named after its role).
pub fn cluster_role_bindings() -> Vec<Value> {
    let mut out = vec![
        binding("cluster-admin", "cluster-admin", vec![group("system:masters")]),
        binding(
            "system:basic-user",
            "system:basic-user",
            vec![group("system:authenticated")],
        ),
        binding(
            "system:discovery",
            "system:discovery",
            vec![group("system:authenticated")],
        ),
        binding(
            "system:kube-dns",
            "system:kube-dns",
            vec![service_account("kube-system", "kube-dns")],
        ),
        binding(
            "system:monitoring",
            "system:monitoring",
            vec![group("system:monitoring")],
        ),
        binding(
            "system:public-info-viewer",
            "system:public-info-viewer",
            vec![group("system:authenticated"), group("system:unauthenticated")],
        ),
        binding(
            "system:service-account-issuer-discovery",
            "system:service-account-issuer-discovery",
            vec![group("system:serviceaccounts")],
        ),
    ];
    for (name, _) in controller_roles() {
        let role = format!("system:controller:{name}");
        out.push(binding(&role, &role, vec![service_account("kube-system", name)]));
    }
    out
}

/// Creates the bootstrap policy (what is there already is left alone, as the apiserver's
/// reconciliation leaves roles without `autoupdate` changes).
pub async fn create(store: &Store) -> Result<(), ApiError> {
    let opts = WriteOptions {
        field_manager: Some("kube-apiserver".into()),
        ..Default::default()
    };
    let roles = Gvr::new("rbac.authorization.k8s.io", "v1", "clusterroles");
    let bindings = Gvr::new("rbac.authorization.k8s.io", "v1", "clusterrolebindings");
    for (gvr, objects) in [(&roles, cluster_roles()), (&bindings, cluster_role_bindings())] {
        for obj in objects {
            match store.create(gvr, "", obj, &opts).await {
                Ok(_) | Err(ApiError::AlreadyExists(_)) => {}
                Err(e) => return Err(e),
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_binding_names_a_bootstrap_role() {
        let roles: Vec<String> = cluster_roles()
            .iter()
            .map(|r| crate::meta::name(r).to_string())
            .collect();
        for b in cluster_role_bindings() {
            let role = b["roleRef"]["name"].as_str().unwrap_or_default().to_string();
            assert!(roles.contains(&role), "{role}");
        }
        let edit = cluster_roles()
            .into_iter()
            .find(|r| crate::meta::name(r) == "edit")
            .unwrap_or_default();
        assert_eq!(edit["metadata"]["labels"][format!("{AGGREGATE_TO}admin")], "true");
    }
}
