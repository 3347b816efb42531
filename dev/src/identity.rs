//! Who the operator's processes run as in the simulated cluster: the chart's ServiceAccounts, bound by the
//! chart's RBAC only, as on a real cluster. Running them as the sim's administrator hid faults a real install
//! showed at once (a rule missing from the chart, a GET the operator may not make), so `spark-operator dev`
//! installs what Helm would: the operator's and the agents' namespaces and ServiceAccounts, and the Roles,
//! ClusterRoles and bindings `charts/spark-operator/templates/rbac.yaml` makes from
//! `files/permissions.yaml`, here made from the same list (`spark_operator_api::permissions::RULES`), with
//! the chart's names for the default release (`spark-operator` in namespace `spark-operator`). The chart's
//! rendering test (`e2e/tests/helm_chart.rs`) checks that Helm renders the same objects.
//!
//! What stays the administrator's is what the installer does (CRDs, job namespaces, webhook
//! configurations): this module is called with an administrator's client.

use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams, PostParams};
use kube::config::{AuthInfo, Kubeconfig};
use kube::core::GroupVersionKind;
use serde_json::{Value, json};
use spark_operator_api::permissions::{Component, Condition, RULES, ResourceName, Scope};

#[cfg(test)]
use crate::agents::AGENT_SERVICE_ACCOUNT;
use crate::agents::{AGENT_NAMESPACE, OPERATOR_NAMESPACE};

/// The chart's name of the release's objects (`spark-operator.fullname` for release `spark-operator`).
pub const FULLNAME: &str = "spark-operator";
/// The operator's ServiceAccount, in [`OPERATOR_NAMESPACE`] (`spark-operator.controller.serviceAccountName`).
pub const OPERATOR_SERVICE_ACCOUNT: &str = "spark-operator-controller";
/// How long the ServiceAccount tokens `dev` runs the operator and the agents with are valid. Long-lived
/// rather than refreshed: one dev session is shorter, and the sim signs with a key of its own start, so no
/// token outlives the cluster it was issued by anyway.
pub const TOKEN_LIFETIME: Duration = Duration::from_secs(7 * 24 * 3600);

/// What of the chart's values shapes its RBAC, for the release `dev` installs.
#[derive(Clone, Debug)]
pub struct Release {
    /// The release's namespace (the operator's).
    pub namespace: String,
    /// The agents' namespace (`agent.namespace`; agents are enabled).
    pub agent_namespace: String,
    /// `spark.jobNamespaces`: each gets a Role; never all namespaces here.
    pub job_namespaces: Vec<String>,
    /// `controller.batchScheduler.enable`.
    pub batch_scheduler: bool,
    /// `controller.driverPodDisruptionBudget.enable`.
    pub driver_pdb: bool,
    /// `webhook.ownerResources`: kinds of owner the webhook may read in the job namespaces, as
    /// `resource.group` (`configmaps`, `workflows.argoproj.io`).
    pub owner_resources: Vec<String>,
}

impl Release {
    /// The chart's defaults for these values, with `job_namespaces`.
    pub fn new(job_namespaces: Vec<String>) -> Self {
        Self {
            namespace: OPERATOR_NAMESPACE.to_owned(),
            agent_namespace: AGENT_NAMESPACE.to_owned(),
            job_namespaces,
            batch_scheduler: false,
            driver_pdb: false,
            owner_resources: Vec::new(),
        }
    }

    fn enabled(&self, condition: Option<Condition>) -> bool {
        match condition {
            None => true,
            // The job namespaces are a list, and the agents are enabled.
            Some(Condition::JobNamespaceSelector | Condition::AgentsDisabled) => false,
            Some(Condition::BatchScheduler) => self.batch_scheduler,
            Some(Condition::DriverPodDisruptionBudget) => self.driver_pdb,
        }
    }
}

/// Why the chart's identities could not be installed.
#[derive(Debug, thiserror::Error)]
pub enum IdentityError {
    #[error("creating {what}")]
    Create {
        what: String,
        #[source]
        source: kube::Error,
    },
    #[error("applying {kind} {name}")]
    Apply {
        kind: String,
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("the RBAC object {0} has no kind or name")]
    Malformed(Value),
    #[error("requesting a token for the ServiceAccount {namespace}/{name}")]
    Token {
        namespace: String,
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("the token request for {namespace}/{name} was answered without a token")]
    NoToken { namespace: String, name: String },
    #[error("reading the administrator's kubeconfig {}", path.display())]
    ReadKubeconfig {
        path: PathBuf,
        #[source]
        source: kube::config::KubeconfigError,
    },
    #[error("the kubeconfig {} has no current context with a user", path.display())]
    NoCurrentUser { path: PathBuf },
    #[error("serializing a kubeconfig")]
    Serialize(#[source] serde_json::Error),
    #[error("writing {}", path.display())]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// The chart's name of a component (`templates/rbac.yaml`): its roles' and its ServiceAccount's name.
pub fn component_name(component: Component) -> String {
    let suffix = match component {
        Component::Operator => "controller",
        Component::Agent => "agent",
        Component::Cleanup => "cleanup",
        Component::SparkDriver => "spark",
    };
    format!("{FULLNAME}-{suffix}")
}

/// The chart's names for the symbolic resource names (`templates/_helpers.tpl`); the components `dev`
/// runs are given these names too.
pub fn resolve(name: ResourceName) -> String {
    let suffix = match name {
        ResourceName::CaSecret => "webhook-ca",
        ResourceName::CaConfigMap => "ca",
        ResourceName::LeaderLease => "controller-lock",
        ResourceName::OperatorDeployment => "controller",
        ResourceName::MutatingWebhookConfiguration | ResourceName::ValidatingWebhookConfiguration => "webhook",
    };
    format!("{FULLNAME}-{suffix}")
}

/// The components `dev` runs, with the namespace of their ServiceAccount (named [`component_name`]).
fn components(release: &Release) -> [(Component, &str); 2] {
    [
        (Component::Operator, release.namespace.as_str()),
        (Component::Agent, release.agent_namespace.as_str()),
    ]
}

/// The Roles, ClusterRoles and their bindings of the operator and the agents, as `templates/rbac.yaml`
/// renders them for `release` (labels and annotations left out), in its order.
pub fn rbac_objects(release: &Release) -> Vec<Value> {
    let mut objects = Vec::new();
    for (component, account_namespace) in components(release) {
        let name = component_name(component);
        let scopes: [(Scope, Vec<Option<&str>>, String); 4] = [
            (Scope::Cluster, vec![None], name.clone()),
            (
                Scope::JobNamespaces,
                release.job_namespaces.iter().map(|n| Some(n.as_str())).collect(),
                format!("{name}-jobs"),
            ),
            (
                Scope::ReleaseNamespace,
                vec![Some(release.namespace.as_str())],
                name.clone(),
            ),
            (
                Scope::AgentNamespace,
                vec![Some(release.agent_namespace.as_str())],
                format!("{name}-agent-namespace"),
            ),
        ];
        for (scope, namespaces, role) in scopes {
            let mut rules: Vec<Value> = RULES
                .iter()
                .filter(|r| r.component == component && r.scope == scope && release.enabled(r.when))
                .map(|r| {
                    let mut rule = json!({"apiGroups": r.api_groups, "resources": r.resources, "verbs": r.verbs});
                    if !r.resource_names.is_empty() {
                        let mut names: Vec<String> = Vec::new();
                        for resolved in r.resource_names.iter().map(|n| resolve(*n)) {
                            if !names.contains(&resolved) {
                                names.push(resolved);
                            }
                        }
                        rule["resourceNames"] = json!(names);
                    }
                    rule
                })
                .collect();
            // `webhook.ownerResources`: the webhook reads owners of the listed kinds.
            if component == Component::Operator && scope == Scope::JobNamespaces {
                for kind in &release.owner_resources {
                    let (resource, group) = kind.split_once('.').unwrap_or((kind.as_str(), ""));
                    rules.push(json!({"apiGroups": [group], "resources": [resource], "verbs": ["get"]}));
                }
            }
            if rules.is_empty() {
                continue;
            }
            for namespace in namespaces {
                let (kind, binding) = match namespace {
                    Some(_) => ("Role", "RoleBinding"),
                    None => ("ClusterRole", "ClusterRoleBinding"),
                };
                let mut metadata = json!({"name": role});
                if let Some(namespace) = namespace {
                    metadata["namespace"] = json!(namespace);
                }
                objects.push(json!({
                    "apiVersion": "rbac.authorization.k8s.io/v1",
                    "kind": kind,
                    "metadata": metadata,
                    "rules": rules,
                }));
                objects.push(json!({
                    "apiVersion": "rbac.authorization.k8s.io/v1",
                    "kind": binding,
                    "metadata": metadata,
                    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": role},
                    "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": account_namespace}],
                }));
            }
        }
    }
    objects
}

async fn create_if_missing<K>(api: &Api<K>, object: K, what: &str) -> Result<(), IdentityError>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    match api.create(&PostParams::default(), &object).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(()),
        Err(source) => Err(IdentityError::Create {
            what: what.to_owned(),
            source,
        }),
    }
}

fn named<K: kube::Resource + Default>(name: &str) -> K {
    let mut object = K::default();
    object.meta_mut().name = Some(name.to_owned());
    object
}

/// Installs, as the chart does, the operator's and the agents' namespaces and ServiceAccounts and their
/// RBAC (server-side apply, so a second `dev` on the same cluster updates them). `client` must be an
/// administrator's: granting RBAC is the installer's job.
pub async fn install(client: &kube::Client, release: &Release) -> Result<(), IdentityError> {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    for namespace in [&release.namespace, &release.agent_namespace] {
        create_if_missing(&namespaces, named(namespace), &format!("the namespace {namespace}")).await?;
    }
    for (component, namespace) in components(release) {
        let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), namespace);
        let name = component_name(component);
        create_if_missing(
            &accounts,
            named(&name),
            &format!("the ServiceAccount {namespace}/{name}"),
        )
        .await?;
    }
    for object in rbac_objects(release) {
        apply(client, object).await?;
    }
    Ok(())
}

async fn apply(client: &kube::Client, object: Value) -> Result<(), IdentityError> {
    let (Some(kind), Some(name)) = (
        object["kind"].as_str().map(str::to_owned),
        object["metadata"]["name"].as_str().map(str::to_owned),
    ) else {
        return Err(IdentityError::Malformed(object));
    };
    let plural = format!("{}s", kind.to_lowercase());
    let gvk = GroupVersionKind::gvk("rbac.authorization.k8s.io", "v1", &kind);
    let resource = ApiResource::from_gvk_with_plural(&gvk, &plural);
    let api: Api<DynamicObject> = match object["metadata"]["namespace"].as_str() {
        Some(namespace) => Api::namespaced_with(client.clone(), namespace, &resource),
        None => Api::all_with(client.clone(), &resource),
    };
    api.patch(
        &name,
        &PatchParams::apply("spark-operator-dev").force(),
        &Patch::Apply(&object),
    )
    .await
    .map_err(|source| IdentityError::Apply { kind, name, source })?;
    Ok(())
}

/// Requests a token of the ServiceAccount `namespace/name` for the API server (TokenRequest, as `kubectl
/// create token --duration`), valid [`TOKEN_LIFETIME`].
pub async fn token(client: &kube::Client, namespace: &str, name: &str) -> Result<String, IdentityError> {
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), namespace);
    let request = TokenRequest {
        spec: TokenRequestSpec {
            // No audience: the API server's own.
            audiences: Vec::new(),
            expiration_seconds: i64::try_from(TOKEN_LIFETIME.as_secs()).ok(),
            ..TokenRequestSpec::default()
        },
        ..TokenRequest::default()
    };
    let status = accounts
        .create_token_request(name, &PostParams::default(), &request)
        .await
        .map_err(|source| IdentityError::Token {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            source,
        })?
        .status;
    status
        .map(|s| s.token)
        .filter(|t| !t.is_empty())
        .ok_or_else(|| IdentityError::NoToken {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
        })
}

/// Writes `<dir>/<name>.kubeconfig`, the administrator's kubeconfig (`admin`: same server, same CA) with its
/// current user replaced by a token of the ServiceAccount `namespace/name`, read from `<dir>/<name>.token`
/// (a `tokenFile`, as a pod's mounted token is read), and the context's namespace set to `namespace`.
/// Returns the kubeconfig's path.
pub async fn write_service_account_kubeconfig(
    client: &kube::Client,
    admin: &Path,
    dir: &Path,
    namespace: &str,
    name: &str,
) -> Result<PathBuf, IdentityError> {
    let token = token(client, namespace, name).await?;
    let token_file = dir.join(format!("{name}.token"));
    write(&token_file, token.as_bytes())?;
    let mut config = Kubeconfig::read_from(admin).map_err(|source| IdentityError::ReadKubeconfig {
        path: admin.to_owned(),
        source,
    })?;
    let no_user = || IdentityError::NoCurrentUser { path: admin.to_owned() };
    let current = config.current_context.clone().ok_or_else(no_user)?;
    let context = config
        .contexts
        .iter_mut()
        .find(|c| c.name == current)
        .and_then(|c| c.context.as_mut())
        .ok_or_else(no_user)?;
    context.namespace = Some(namespace.to_owned());
    // A user of its own, so the administrator's entry (shared with the kube-sim-admin context) is untouched.
    let user = format!("system:serviceaccount:{namespace}:{name}");
    context.user = Some(user.clone());
    config.auth_infos.retain(|a| a.name != user);
    config.auth_infos.push(kube::config::NamedAuthInfo {
        name: user,
        auth_info: Some(AuthInfo {
            token_file: Some(token_file.display().to_string()),
            ..AuthInfo::default()
        }),
        ..kube::config::NamedAuthInfo::default()
    });
    let path = dir.join(format!("{name}.kubeconfig"));
    write(&path, &serde_json::to_vec(&config).map_err(IdentityError::Serialize)?)?;
    Ok(path)
}

fn write(path: &Path, contents: &[u8]) -> Result<(), IdentityError> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(|source| IdentityError::Write {
            path: parent.to_owned(),
            source,
        })?;
    }
    std::fs::write(path, contents).map_err(|source| IdentityError::Write {
        path: path.to_owned(),
        source,
    })
}

/// The operator's ServiceAccount user name (`system:serviceaccount:<ns>:<name>`), as the API server's audit
/// log names it.
pub fn operator_user(release: &Release) -> String {
    format!("system:serviceaccount:{}:{OPERATOR_SERVICE_ACCOUNT}", release.namespace)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::expect_used, clippy::unwrap_used)]

    use super::*;

    #[test]
    fn the_names_are_the_charts_and_the_agents_module_agrees() {
        assert_eq!(component_name(Component::Operator), OPERATOR_SERVICE_ACCOUNT);
        assert_eq!(component_name(Component::Agent), AGENT_SERVICE_ACCOUNT);
        assert_eq!(resolve(ResourceName::CaConfigMap), "spark-operator-ca");
    }

    #[test]
    fn every_rule_of_the_operator_and_the_agents_is_granted_where_its_conditions_hold() {
        let mut release = Release::new(vec!["default".into(), "jobs".into()]);
        release.owner_resources = vec!["configmaps".into(), "workflows.argoproj.io".into()];
        let objects = rbac_objects(&release);
        let role = |kind: &str, namespace: Option<&str>, name: &str| {
            objects
                .iter()
                .find(|o| {
                    o["kind"] == kind
                        && o["metadata"]["name"] == name
                        && o["metadata"]["namespace"].as_str() == namespace
                })
                .unwrap_or_else(|| panic!("{kind} {namespace:?}/{name} in {objects:#?}"))
        };
        let jobs = role("Role", Some("jobs"), "spark-operator-controller-jobs");
        let rules = jobs["rules"].as_array().unwrap();
        assert!(rules.contains(&json!({"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]})));
        assert!(rules.contains(&json!({"apiGroups": ["argoproj.io"], "resources": ["workflows"], "verbs": ["get"]})));
        // Off by default, as in the chart.
        assert!(!rules.iter().any(|r| r["resources"][0] == "podgroups"));
        let binding = role("RoleBinding", Some("default"), "spark-operator-controller-jobs");
        assert_eq!(
            binding["subjects"],
            json!([{"kind": "ServiceAccount", "name": "spark-operator-controller", "namespace": "spark-operator"}])
        );
        let agent = role("ClusterRoleBinding", None, "spark-operator-agent");
        assert_eq!(agent["subjects"][0]["namespace"], "spark-operator-agent");
        let cluster = role("ClusterRole", None, "spark-operator-controller");
        assert!(
            cluster["rules"]
                .as_array()
                .unwrap()
                .iter()
                .any(|r| r["resourceNames"] == json!(["spark-operator-webhook"])
                    && r["resources"] == json!(["mutatingwebhookconfigurations"]))
        );
        // No cleanup hook and no Spark drivers' roles: `dev` runs neither as the chart's ServiceAccount.
        assert!(
            !objects
                .iter()
                .any(|o| o["metadata"]["name"].as_str().unwrap().contains("cleanup"))
        );

        release.batch_scheduler = true;
        let objects = rbac_objects(&release);
        let jobs = objects
            .iter()
            .find(|o| o["kind"] == "Role" && o["metadata"]["name"] == "spark-operator-controller-jobs")
            .unwrap();
        assert!(
            jobs["rules"]
                .as_array()
                .unwrap()
                .iter()
                .any(|r| r["resources"][0] == "podgroups")
        );
    }
}
