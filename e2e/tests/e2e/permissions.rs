//! Least privilege, both ways, for the rules of `api::permissions` (what the chart grants): a component
//! run under a ServiceAccount holding exactly its rules gets no 403, and the same run under one lacking
//! any single rule gets a 403 on a request that rule would have allowed (a real request of the real
//! component, read from the API server's audit log, not an access review).

use std::path::{Path, PathBuf};

use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};
use spark_operator_api::permissions::{Component, ResourceName, Rule, Scope, rules_of};
use spark_operator_controller::uninstall::{self, ObjectName, Plan};
use spark_operator_e2e::{Cluster, ClusterOptions};
use spark_operator_test_support::kube_access;

const RELEASE: &str = "spark-operator";
const AGENTS: &str = "spark-operator-agents";
const JOBS: &str = "default";

/// The release's names for the chart's symbolic resource names.
fn resolve(name: ResourceName) -> String {
    match name {
        ResourceName::CaSecret => "spark-operator-webhook-certs",
        ResourceName::CaConfigMap => "spark-operator-ca",
        ResourceName::LeaderLease => "spark-operator-lock",
        ResourceName::OperatorDeployment => "spark-operator",
        ResourceName::MutatingWebhookConfiguration => "spark-operator-webhook",
        ResourceName::ValidatingWebhookConfiguration => "spark-operator-webhook",
    }
    .to_owned()
}

fn scope_namespace(scope: Scope) -> Option<&'static str> {
    match scope {
        Scope::Cluster => None,
        Scope::JobNamespaces => Some(JOBS),
        Scope::ReleaseNamespace => Some(RELEASE),
        Scope::AgentNamespace => Some(AGENTS),
    }
}

async fn apply(
    client: &kube::Client,
    api_version: &str,
    kind: &str,
    plural: &str,
    namespace: Option<&str>,
    object: Value,
) {
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let resource = ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural);
    let api: Api<DynamicObject> = match namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &resource),
        None => Api::all_with(client.clone(), &resource),
    };
    let mut object = object;
    object["apiVersion"] = json!(api_version);
    object["kind"] = json!(kind);
    let name = object["metadata"]["name"].as_str().unwrap().to_owned();
    api.patch(
        &name,
        &PatchParams::apply("e2e-permissions").force(),
        &Patch::Apply(&object),
    )
    .await
    .unwrap_or_else(|e| panic!("applying {kind} {name}: {e}"));
}

/// A fresh ServiceAccount in the release namespace holding `component`'s rules except `without` (an
/// index into them), bound as the chart binds them; returns its kubeconfig and its user name.
async fn account_with(
    cluster: &Cluster,
    dir: &Path,
    component: Component,
    account: &str,
    without: Option<usize>,
) -> (PathBuf, String) {
    let token = kube_access::account(&cluster.client, RELEASE, account).await;
    for (index, rule) in rules_of(component).enumerate() {
        if Some(index) == without || rule.when.is_some() {
            continue;
        }
        let role = format!("{account}-{index}");
        let policy = json!([{
            "apiGroups": rule.api_groups,
            "resources": rule.resources,
            "verbs": rule.verbs,
            "resourceNames": rule.resource_names.iter().map(|n| resolve(*n)).collect::<Vec<_>>(),
        }]);
        let subject = json!([{"kind": "ServiceAccount", "name": account, "namespace": RELEASE}]);
        let rbac = "rbac.authorization.k8s.io/v1";
        match scope_namespace(rule.scope) {
            None => {
                apply(
                    &cluster.client,
                    rbac,
                    "ClusterRole",
                    "clusterroles",
                    None,
                    json!({"metadata": {"name": role}, "rules": policy}),
                )
                .await;
                apply(
                    &cluster.client,
                    rbac,
                    "ClusterRoleBinding",
                    "clusterrolebindings",
                    None,
                    json!({
                        "metadata": {"name": role},
                        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
                        "subjects": subject,
                    }),
                )
                .await;
            }
            Some(ns) => {
                apply(
                    &cluster.client,
                    rbac,
                    "Role",
                    "roles",
                    Some(ns),
                    json!({"metadata": {"name": role}, "rules": policy}),
                )
                .await;
                apply(
                    &cluster.client,
                    rbac,
                    "RoleBinding",
                    "rolebindings",
                    Some(ns),
                    json!({
                        "metadata": {"name": role},
                        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role},
                        "subjects": subject,
                    }),
                )
                .await;
            }
        }
    }
    let kubeconfig = kube_access::kubeconfig_with_token(&cluster.sim, dir, account, &token, RELEASE);
    (kubeconfig, format!("system:serviceaccount:{RELEASE}:{account}"))
}

async fn client_of(kubeconfig: &Path) -> kube::Client {
    let config = spark_operator_runtime::client::config_from(Some(kubeconfig))
        .await
        .unwrap();
    spark_operator_runtime::client::client(config).unwrap()
}

/// The audit log's answers to `user`'s requests: (code, verb, group, resource[/subresource], name).
fn answers(cluster: &Cluster, user: &str) -> Vec<(u16, String, String, String, Option<String>)> {
    cluster
        .sim
        .audit()
        .events()
        .into_iter()
        .filter(|e| e.username == user)
        .map(|e| {
            let resource = match &e.subresource {
                Some(sub) => format!("{}/{sub}", e.resource),
                None => e.resource.clone(),
            };
            (e.code, e.verb, e.group, resource, e.name)
        })
        .collect()
}

/// Whether `rule` would have allowed one of `user`'s refused requests.
fn refused_within(cluster: &Cluster, user: &str, rule: &Rule) -> bool {
    answers(cluster, user)
        .iter()
        .any(|(code, verb, group, resource, name)| {
            *code == 403 && rule.allows(group, resource, verb, name.as_deref(), resolve)
        })
}

fn forbidden(cluster: &Cluster, user: &str) -> Vec<String> {
    answers(cluster, user)
        .into_iter()
        .filter(|a| a.0 == 403)
        .map(|(_, verb, group, resource, name)| format!("{verb} {group}/{resource} {name:?}"))
        .collect()
}

/// What the pre-delete hook finds: both webhook configurations, the operator's Deployment, a driver
/// pod with the driver-protection finalizer, the CA Secret, both CA ConfigMaps and the Lease.
async fn release_objects(cluster: &Cluster) {
    let c = &cluster.client;
    let webhook = json!({"metadata": {"name": resolve(ResourceName::MutatingWebhookConfiguration)}, "webhooks": []});
    apply(
        c,
        "admissionregistration.k8s.io/v1",
        "MutatingWebhookConfiguration",
        "mutatingwebhookconfigurations",
        None,
        webhook.clone(),
    )
    .await;
    apply(
        c,
        "admissionregistration.k8s.io/v1",
        "ValidatingWebhookConfiguration",
        "validatingwebhookconfigurations",
        None,
        webhook,
    )
    .await;
    apply(c, "apps/v1", "Deployment", "deployments", Some(RELEASE), json!({
        "metadata": {"name": resolve(ResourceName::OperatorDeployment)},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app.kubernetes.io/name": "spark-operator", "app.kubernetes.io/component": "operator"}},
            "template": {
                "metadata": {"labels": {"app.kubernetes.io/name": "spark-operator", "app.kubernetes.io/component": "operator"}},
                "spec": {"containers": [{"name": "operator", "image": "spark-operator:dev"}]},
            },
        },
    }))
    .await;
    apply(
        c,
        "v1",
        "Pod",
        "pods",
        Some(JOBS),
        json!({
            "metadata": {
                "name": "driver",
                "labels": {"sparkoperator.k8s.io/launched-by-spark-operator": "true", "spark-role": "driver"},
                "finalizers": ["sparkoperator.k8s.io/driver-protection"],
            },
            "spec": {"containers": [{"name": "c", "image": "busybox"}]},
        }),
    )
    .await;
    apply(
        c,
        "v1",
        "Secret",
        "secrets",
        Some(RELEASE),
        json!({"metadata": {"name": resolve(ResourceName::CaSecret)}}),
    )
    .await;
    for ns in [RELEASE, AGENTS] {
        apply(
            c,
            "v1",
            "ConfigMap",
            "configmaps",
            Some(ns),
            json!({"metadata": {"name": resolve(ResourceName::CaConfigMap)}}),
        )
        .await;
    }
    apply(
        c,
        "coordination.k8s.io/v1",
        "Lease",
        "leases",
        Some(RELEASE),
        json!({"metadata": {"name": resolve(ResourceName::LeaderLease)}}),
    )
    .await;
}

fn cleanup_plan() -> Plan {
    let object = |ns: &str, name: ResourceName| ObjectName {
        namespace: ns.into(),
        name: resolve(name),
    };
    Plan {
        namespaces: vec![JOBS.into()],
        mutating_webhook_configuration: Some(resolve(ResourceName::MutatingWebhookConfiguration)),
        validating_webhook_configuration: Some(resolve(ResourceName::ValidatingWebhookConfiguration)),
        operator_deployment: Some(object(RELEASE, ResourceName::OperatorDeployment)),
        timeout: 30,
        release_finalizers: true,
        ca_secret: Some(object(RELEASE, ResourceName::CaSecret)),
        ca_config_map: vec![
            object(RELEASE, ResourceName::CaConfigMap),
            object(AGENTS, ResourceName::CaConfigMap),
        ],
        leader_election_lease: Some(object(RELEASE, ResourceName::LeaderLease)),
    }
}

async fn cleanup_cluster() -> Cluster {
    let cluster = Cluster::start(ClusterOptions {
        nodes: 1,
        ..ClusterOptions::default()
    })
    .await;
    for ns in [RELEASE, AGENTS] {
        apply(
            &cluster.client,
            "v1",
            "Namespace",
            "namespaces",
            None,
            json!({"metadata": {"name": ns}}),
        )
        .await;
    }
    cluster.sim.audit().enable();
    cluster
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cleanup_needs_every_rule_of_its_list_and_no_other() {
    let cluster = cleanup_cluster().await;
    let dir = tempfile::tempdir().unwrap();

    // Complete: every step runs and removes its objects, without a single 403.
    release_objects(&cluster).await;
    let (kubeconfig, user) = account_with(&cluster, dir.path(), Component::Cleanup, "cleanup-all", None).await;
    let mut out = Vec::new();
    let released = uninstall::run(&client_of(&kubeconfig).await, &cleanup_plan(), &mut out).await;
    let report = String::from_utf8_lossy(&out).into_owned();
    assert_eq!(released.map_err(|e| e.to_string()), Ok(1), "{report}");
    assert_eq!(forbidden(&cluster, &user), Vec::<String>::new(), "{report}");
    for line in [
        "delete-webhooks: deleted MutatingWebhookConfiguration",
        "delete-webhooks: deleted ValidatingWebhookConfiguration",
        "stop-operator: the pods of Deployment spark-operator/spark-operator are gone",
        "delete-operator-state: deleted Secret",
        "delete-operator-state: deleted ConfigMap spark-operator-agents/spark-operator-ca",
        "delete-operator-state: deleted Lease",
    ] {
        assert!(report.contains(line), "{line:?} not in:\n{report}");
    }

    // Each rule is needed: without it, the cleanup makes a request the rule would have allowed, and
    // is refused.
    let rules: Vec<&Rule> = rules_of(Component::Cleanup).collect();
    for (index, rule) in rules.iter().enumerate() {
        release_objects(&cluster).await;
        let account = format!("cleanup-without-{index}");
        let (kubeconfig, user) = account_with(&cluster, dir.path(), Component::Cleanup, &account, Some(index)).await;
        let mut out = Vec::new();
        let outcome = uninstall::run(&client_of(&kubeconfig).await, &cleanup_plan(), &mut out).await;
        let report = String::from_utf8_lossy(&out).into_owned();
        assert!(
            outcome.is_err(),
            "without {:?} the cleanup still succeeded:\n{report}",
            rule.operations
        );
        assert!(
            refused_within(&cluster, &user, rule),
            "without {:?} no request it allows was refused; refused: {:?}\n{report}",
            rule.operations,
            forbidden(&cluster, &user)
        );
    }
}
