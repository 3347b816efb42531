//! Every Kubernetes permission the operator's processes need, with the operations that need it: the one
//! list the Helm chart's RBAC is generated from (`spark-operator permissions` writes
//! `charts/spark-operator/files/permissions.yaml`) and the least-privilege tests grant from, so a new API
//! call without its rule fails a test instead of a production install.
//!
//! Each [`Rule`] is granted as a unit (one RBAC PolicyRule). No two rules grant the same (component,
//! scope, group, resource, verb, resource name): removing a rule really removes the permission, which is
//! what the tests proving that each rule is needed rely on.

use std::fmt::Write;

/// The process (or workload) a rule is granted to, each with its own ServiceAccount.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Component {
    /// `spark-operator operator`: the controller, the admission webhook and the report receiver.
    Operator,
    /// `spark-operator agent`: the node agents (their log server).
    Agent,
    /// `spark-operator cleanup`: the chart's pre-delete hook.
    Cleanup,
    /// The Spark drivers' own ServiceAccount in the job namespaces (executors, their ConfigMaps, ...).
    SparkDriver,
}

impl Component {
    pub const ALL: [Component; 4] = [
        Component::Operator,
        Component::Agent,
        Component::Cleanup,
        Component::SparkDriver,
    ];

    /// The key in the generated file.
    pub fn key(self) -> &'static str {
        match self {
            Component::Operator => "operator",
            Component::Agent => "agent",
            Component::Cleanup => "cleanup",
            Component::SparkDriver => "sparkDriver",
        }
    }
}

/// Where a rule is granted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Scope {
    /// A ClusterRole bound by a ClusterRoleBinding (cluster-scoped resources, reviews).
    Cluster,
    /// The namespaces Spark jobs run in: a ClusterRole + ClusterRoleBinding when that is every
    /// namespace, otherwise a Role + RoleBinding in each.
    JobNamespaces,
    /// The namespace the chart is installed in (the operator's Deployment).
    ReleaseNamespace,
    /// The agents' own namespace (Pod Security `privileged` for their hostPaths).
    AgentNamespace,
}

impl Scope {
    pub const ALL: [Scope; 4] = [
        Scope::Cluster,
        Scope::JobNamespaces,
        Scope::ReleaseNamespace,
        Scope::AgentNamespace,
    ];

    /// The key in the generated file.
    pub fn key(self) -> &'static str {
        match self {
            Scope::Cluster => "cluster",
            Scope::JobNamespaces => "jobNamespaces",
            Scope::ReleaseNamespace => "releaseNamespace",
            Scope::AgentNamespace => "agentNamespace",
        }
    }
}

/// A name the chart resolves to a real object's name (they depend on the release and its values).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ResourceName {
    /// The webhook's CA Secret, shared by the replicas (`--webhook-secret-name`).
    CaSecret,
    /// The ConfigMap publishing the CA bundle to the agents (`--webhook-ca-config-map`).
    CaConfigMap,
    /// The leader-election Lease (`--leader-election-lease-name`).
    LeaderLease,
    /// The operator's Deployment (the cleanup hook scales it to zero).
    OperatorDeployment,
    MutatingWebhookConfiguration,
    ValidatingWebhookConfiguration,
}

impl ResourceName {
    pub fn symbol(self) -> &'static str {
        match self {
            ResourceName::CaSecret => "caSecret",
            ResourceName::CaConfigMap => "caConfigMap",
            ResourceName::LeaderLease => "leaderLease",
            ResourceName::OperatorDeployment => "operatorDeployment",
            ResourceName::MutatingWebhookConfiguration => "mutatingWebhookConfiguration",
            ResourceName::ValidatingWebhookConfiguration => "validatingWebhookConfiguration",
        }
    }
}

/// When a rule is granted only with some configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Condition {
    /// The operator selects its job namespaces by label (`--namespace-selector`), so it follows the
    /// namespaces themselves.
    JobNamespaceSelector,
    /// The chart runs no agents (`agent.enable: false`): the operator then publishes its CA ConfigMap in
    /// its own namespace instead of the agents'.
    AgentsDisabled,
    /// The operator manages driver PodDisruptionBudgets (`controller.driverPodDisruptionBudget.enable`,
    /// `--enable-driver-pdb`).
    DriverPodDisruptionBudget,
    /// Batch schedulers are enabled (`controller.batchScheduler.enable`, `--enable-batch-scheduler`): the
    /// operator creates and deletes their PodGroups.
    BatchScheduler,
}

impl Condition {
    pub fn key(self) -> &'static str {
        match self {
            Condition::JobNamespaceSelector => "jobNamespaceSelector",
            Condition::AgentsDisabled => "agentsDisabled",
            Condition::DriverPodDisruptionBudget => "driverPodDisruptionBudget",
            Condition::BatchScheduler => "batchScheduler",
        }
    }
}

/// One RBAC rule, granted as a unit, and why.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rule {
    pub component: Component,
    pub scope: Scope,
    pub api_groups: &'static [&'static str],
    /// Plural resource names, subresources as `sparkapplications/status`.
    pub resources: &'static [&'static str],
    pub verbs: &'static [&'static str],
    /// Empty: any object.
    pub resource_names: &'static [ResourceName],
    pub when: Option<Condition>,
    /// The operations that need the rule, as `component: what it does`.
    pub operations: &'static [&'static str],
}

const CORE: &[&str] = &[""];
const SPARK: &[&str] = &["sparkoperator.k8s.io"];
const NO_NAMES: &[ResourceName] = &[];

const fn rule(
    component: Component,
    scope: Scope,
    api_groups: &'static [&'static str],
    resources: &'static [&'static str],
    verbs: &'static [&'static str],
    operations: &'static [&'static str],
) -> Rule {
    Rule {
        component,
        scope,
        api_groups,
        resources,
        verbs,
        resource_names: NO_NAMES,
        when: None,
        operations,
    }
}

const fn named(rule: Rule, resource_names: &'static [ResourceName]) -> Rule {
    Rule { resource_names, ..rule }
}

use Component::{Agent, Cleanup, Operator, SparkDriver};
use ResourceName::{
    CaConfigMap, CaSecret, LeaderLease, MutatingWebhookConfiguration, OperatorDeployment,
    ValidatingWebhookConfiguration,
};
use Scope::{AgentNamespace, Cluster, JobNamespaces, ReleaseNamespace};

/// Every rule. Order: component, then scope, as the generated file lists them.
pub static RULES: &[Rule] = &[
    // --- operator, cluster-wide
    named(
        rule(
            Operator,
            Cluster,
            &["admissionregistration.k8s.io"],
            &["mutatingwebhookconfigurations"],
            &["get", "list", "watch", "patch"],
            &[
                "webhook: keep the caBundle of the mutating webhook configuration (watched, so one created later gets it at once)",
            ],
        ),
        &[MutatingWebhookConfiguration],
    ),
    named(
        rule(
            Operator,
            Cluster,
            &["admissionregistration.k8s.io"],
            &["validatingwebhookconfigurations"],
            &["get", "list", "watch", "patch"],
            &[
                "webhook: keep the caBundle of the validating webhook configuration (watched, so one created later gets it at once)",
            ],
        ),
        &[ValidatingWebhookConfiguration],
    ),
    rule(
        Operator,
        Cluster,
        &["authentication.k8s.io"],
        &["tokenreviews"],
        &["create"],
        &["report receiver: authenticate an agent's ServiceAccount token"],
    ),
    Rule {
        when: Some(Condition::JobNamespaceSelector),
        ..rule(
            Operator,
            Cluster,
            CORE,
            &["namespaces"],
            &["list", "watch"],
            &["controller: follow the namespaces --namespace-selector selects"],
        )
    },
    // --- operator, in the job namespaces
    rule(
        Operator,
        JobNamespaces,
        SPARK,
        &["sparkapplications"],
        &["get", "list", "watch"],
        &[
            "controller: follow SparkApplications",
            "webhook: find the SparkApplication of a driver or executor pod",
            "report receiver: read the SparkApplication of a report",
        ],
    ),
    rule(
        Operator,
        JobNamespaces,
        SPARK,
        &["sparkapplications/finalizers", "scheduledsparkapplications/finalizers"],
        &["update"],
        &[
            "controller: own a driver pod by its application with blockOwnerDeletion (OwnerReferencesPermissionEnforcement)",
            "scheduled: own a run by its ScheduledSparkApplication with blockOwnerDeletion (OwnerReferencesPermissionEnforcement)",
        ],
    ),
    rule(
        Operator,
        JobNamespaces,
        SPARK,
        &["sparkapplications"],
        &["patch"],
        &["controller: record the hash of the spec it submitted (annotation)"],
    ),
    rule(
        Operator,
        JobNamespaces,
        SPARK,
        &["sparkapplications"],
        &["delete"],
        &[
            "controller: delete an application whose timeToLiveSeconds passed",
            "scheduled: delete a run replaced (concurrencyPolicy Replace) or beyond the history limits",
        ],
    ),
    rule(
        Operator,
        JobNamespaces,
        SPARK,
        &["sparkapplications"],
        &["create"],
        &["scheduled: start a run of a ScheduledSparkApplication"],
    ),
    rule(
        Operator,
        JobNamespaces,
        SPARK,
        &["scheduledsparkapplications"],
        &["get", "list", "watch"],
        &["scheduled: follow ScheduledSparkApplications"],
    ),
    rule(
        Operator,
        JobNamespaces,
        SPARK,
        &["scheduledsparkapplications/status"],
        &["patch"],
        &["scheduled: write a ScheduledSparkApplication's status"],
    ),
    rule(
        Operator,
        JobNamespaces,
        SPARK,
        &["sparkapplications/status"],
        &["patch"],
        &[
            "controller: write an application's status",
            "report receiver: record a reported driver or executor end in the status",
        ],
    ),
    rule(
        Operator,
        JobNamespaces,
        CORE,
        &["pods"],
        &["create"],
        &["controller: create a driver pod"],
    ),
    rule(
        Operator,
        JobNamespaces,
        CORE,
        &["pods"],
        &["get", "list", "watch"],
        &[
            "controller: follow driver and executor pods",
            "report receiver: read the pod of a report",
        ],
    ),
    rule(
        Operator,
        JobNamespaces,
        CORE,
        &["pods"],
        &["patch"],
        &["controller: release the driver-protection finalizer once the driver's end is recorded"],
    ),
    rule(
        Operator,
        JobNamespaces,
        CORE,
        &["pods"],
        &["delete"],
        &["controller: delete a driver pod (retry, restart, spec change, timeout)"],
    ),
    rule(
        Operator,
        JobNamespaces,
        CORE,
        &["configmaps"],
        &["create"],
        &["controller: create a driver's ConfigMap (spark.properties) and executor pod template"],
    ),
    rule(
        Operator,
        JobNamespaces,
        CORE,
        &["configmaps"],
        &["patch"],
        &["controller: apply an application's Prometheus ConfigMap (monitoring)"],
    ),
    rule(
        Operator,
        JobNamespaces,
        CORE,
        &["services"],
        &["create"],
        &["controller: create a driver's Service"],
    ),
    rule(
        Operator,
        JobNamespaces,
        CORE,
        &["services"],
        &["patch"],
        &["controller: apply an application's Spark UI Service and driverIngressOptions Services (server-side apply)"],
    ),
    rule(
        Operator,
        JobNamespaces,
        &["networking.k8s.io"],
        &["networkpolicies"],
        &["create"],
        &["controller: create a driver's NetworkPolicy (Spark 4)"],
    ),
    rule(
        Operator,
        JobNamespaces,
        &["networking.k8s.io"],
        &["ingresses"],
        &["create", "patch"],
        &[
            "controller: apply an application's Spark UI Ingress (--ingress-url-format) and driverIngressOptions Ingresses (server-side apply: create when missing, patch)",
        ],
    ),
    Rule {
        when: Some(Condition::BatchScheduler),
        ..rule(
            Operator,
            JobNamespaces,
            &["scheduling.volcano.sh", "scheduling.x-k8s.io"],
            &["podgroups"],
            &["create", "delete"],
            &[
                "controller: create an application's Volcano or coscheduling PodGroup before its driver, delete it when the application ends",
            ],
        )
    },
    Rule {
        when: Some(Condition::DriverPodDisruptionBudget),
        ..rule(
            Operator,
            JobNamespaces,
            &["policy"],
            &["poddisruptionbudgets"],
            &["create", "patch"],
            &["controller: apply the driver PodDisruptionBudget an application asks for (server-side apply)"],
        )
    },
    Rule {
        when: Some(Condition::DriverPodDisruptionBudget),
        ..rule(
            Operator,
            JobNamespaces,
            &["policy"],
            &["poddisruptionbudgets"],
            &["delete"],
            &[
                "controller: delete a driver PodDisruptionBudget when its application ends, reruns, is suspended or no longer asks for one",
            ],
        )
    },
    rule(
        Operator,
        JobNamespaces,
        &["events.k8s.io"],
        &["events"],
        &["create", "patch"],
        &[
            "controller: record an application's state transitions as Events",
            "webhook: record a refused Spark pod as an Event",
        ],
    ),
    // --- operator, in its own namespace
    rule(
        Operator,
        ReleaseNamespace,
        CORE,
        &["secrets"],
        &["create"],
        &["webhook: create the CA Secret the replicas share"],
    ),
    named(
        rule(
            Operator,
            ReleaseNamespace,
            CORE,
            &["secrets"],
            &["get", "list", "watch", "update"],
            &["webhook: read, watch the shared CA Secret and rotate its CA"],
        ),
        &[CaSecret],
    ),
    Rule {
        when: Some(Condition::AgentsDisabled),
        ..rule(
            Operator,
            ReleaseNamespace,
            CORE,
            &["configmaps"],
            &["create"],
            &[
                "webhook: create the CA ConfigMap (server-side apply of a missing object), in its own namespace when there are no agents",
            ],
        )
    },
    Rule {
        when: Some(Condition::AgentsDisabled),
        ..named(
            rule(
                Operator,
                ReleaseNamespace,
                CORE,
                &["configmaps"],
                &["get", "patch"],
                &["webhook: publish the CA bundle in the CA ConfigMap, in its own namespace when there are no agents"],
            ),
            &[CaConfigMap],
        )
    },
    rule(
        Operator,
        ReleaseNamespace,
        &["coordination.k8s.io"],
        &["leases"],
        &["create"],
        &["controller: create the leader-election Lease"],
    ),
    named(
        rule(
            Operator,
            ReleaseNamespace,
            &["coordination.k8s.io"],
            &["leases"],
            &["get", "update"],
            &["controller: acquire, renew and release the leader-election Lease"],
        ),
        &[LeaderLease],
    ),
    // --- operator, in the agents' namespace
    rule(
        Operator,
        AgentNamespace,
        CORE,
        &["configmaps"],
        &["create"],
        &["webhook: create the CA ConfigMap in the agents' namespace (server-side apply of a missing object)"],
    ),
    named(
        rule(
            Operator,
            AgentNamespace,
            CORE,
            &["configmaps"],
            &["get", "patch"],
            &["webhook: publish the CA bundle in the agents' namespace"],
        ),
        &[CaConfigMap],
    ),
    // --- agent
    rule(
        Agent,
        Cluster,
        &["authentication.k8s.io"],
        &["tokenreviews"],
        &["create"],
        &["log server: authenticate a `spark-operator logs` caller's token"],
    ),
    rule(
        Agent,
        Cluster,
        &["authorization.k8s.io"],
        &["subjectaccessreviews"],
        &["create"],
        &["log server: check that the caller may get pods/log in the namespace"],
    ),
    // --- cleanup (the pre-delete hook)
    named(
        rule(
            Cleanup,
            Cluster,
            &["admissionregistration.k8s.io"],
            &["mutatingwebhookconfigurations"],
            &["delete"],
            &["cleanup: delete the mutating webhook configuration"],
        ),
        &[MutatingWebhookConfiguration],
    ),
    named(
        rule(
            Cleanup,
            Cluster,
            &["admissionregistration.k8s.io"],
            &["validatingwebhookconfigurations"],
            &["delete"],
            &["cleanup: delete the validating webhook configuration"],
        ),
        &[ValidatingWebhookConfiguration],
    ),
    rule(
        Cleanup,
        JobNamespaces,
        CORE,
        &["pods"],
        &["get", "list"],
        &["cleanup: find the driver pods with the driver-protection finalizer"],
    ),
    rule(
        Cleanup,
        JobNamespaces,
        CORE,
        &["pods"],
        &["patch"],
        &["cleanup: release the driver-protection finalizer"],
    ),
    named(
        rule(
            Cleanup,
            ReleaseNamespace,
            &["apps"],
            &["deployments"],
            &["get", "patch"],
            &["cleanup: scale the operator's Deployment to zero and read its pod selector"],
        ),
        &[OperatorDeployment],
    ),
    rule(
        Cleanup,
        ReleaseNamespace,
        CORE,
        &["pods"],
        &["list"],
        &["cleanup: wait until the operator's pods are gone"],
    ),
    named(
        rule(
            Cleanup,
            ReleaseNamespace,
            CORE,
            &["secrets"],
            &["delete"],
            &["cleanup: delete the CA Secret"],
        ),
        &[CaSecret],
    ),
    named(
        rule(
            Cleanup,
            ReleaseNamespace,
            CORE,
            &["configmaps"],
            &["delete"],
            &["cleanup: delete the CA ConfigMap"],
        ),
        &[CaConfigMap],
    ),
    named(
        rule(
            Cleanup,
            ReleaseNamespace,
            &["coordination.k8s.io"],
            &["leases"],
            &["delete"],
            &["cleanup: delete the leader-election Lease"],
        ),
        &[LeaderLease],
    ),
    named(
        rule(
            Cleanup,
            AgentNamespace,
            CORE,
            &["configmaps"],
            &["delete"],
            &["cleanup: delete the CA ConfigMap in the agents' namespace"],
        ),
        &[CaConfigMap],
    ),
    // --- the Spark drivers: Kubeflow's Role, kept as is (Spark's own client decides what it calls)
    rule(
        SparkDriver,
        JobNamespaces,
        CORE,
        &["pods", "configmaps", "persistentvolumeclaims", "services"],
        &[
            "get",
            "list",
            "watch",
            "create",
            "update",
            "patch",
            "delete",
            "deletecollection",
        ],
        &["driver: create, follow and delete its executor pods, their ConfigMaps, volume claims and Services"],
    ),
];

/// One permission a rule grants: what an RBAC decision is made on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Grant {
    pub component: Component,
    pub scope: Scope,
    pub group: &'static str,
    pub resource: &'static str,
    pub verb: &'static str,
    /// None: any object.
    pub name: Option<ResourceName>,
}

impl Rule {
    /// Every (group, resource, verb, name) the rule grants.
    pub fn grants(&self) -> Vec<Grant> {
        let names: Vec<Option<ResourceName>> = if self.resource_names.is_empty() {
            vec![None]
        } else {
            self.resource_names.iter().copied().map(Some).collect()
        };
        let mut grants = Vec::new();
        for group in self.api_groups {
            for resource in self.resources {
                for verb in self.verbs {
                    for name in &names {
                        grants.push(Grant {
                            component: self.component,
                            scope: self.scope,
                            group,
                            resource,
                            verb,
                            name: *name,
                        });
                    }
                }
            }
        }
        grants
    }

    /// Whether the rule allows `verb` on `group`/`resource` (subresource as `pods/log`) named `name`.
    pub fn allows(
        &self,
        group: &str,
        resource: &str,
        verb: &str,
        name: Option<&str>,
        resolve: impl Fn(ResourceName) -> String,
    ) -> bool {
        self.api_groups.contains(&group)
            && self.resources.contains(&resource)
            && self.verbs.contains(&verb)
            && (self.resource_names.is_empty()
                || name.is_some_and(|n| self.resource_names.iter().any(|r| resolve(*r) == n)))
    }
}

/// The rules of one component.
pub fn rules_of(component: Component) -> impl Iterator<Item = &'static Rule> {
    RULES.iter().filter(move |r| r.component == component)
}

/// What is wrong with a list of rules: grants made twice, `create` limited by name (RBAC cannot:
/// the name of an object to be created is not known when the request is authorized), rules without
/// an operation.
pub fn problems(rules: &[Rule]) -> Vec<String> {
    let mut problems = Vec::new();
    let mut seen = std::collections::BTreeMap::new();
    for (index, rule) in rules.iter().enumerate() {
        if rule.operations.is_empty() {
            problems.push(format!(
                "rule {index} ({:?}) names no operation that needs it",
                rule.resources
            ));
        }
        if rule.verbs.contains(&"create") && !rule.resource_names.is_empty() {
            problems.push(format!(
                "rule {index} ({:?}) limits create by resourceNames, which RBAC cannot enforce; grant create in its own rule without names",
                rule.resources
            ));
        }
        for grant in rule.grants() {
            if let Some(first) = seen.insert(grant, index) {
                problems.push(format!("rules {first} and {index} both grant {grant:?}"));
            }
        }
    }
    problems
}

/// The command that regenerates the chart's copy; the drift test points at it.
pub const REGENERATE_COMMAND: &str = "spark-operator permissions --output charts/spark-operator/files/permissions.yaml";

fn quoted(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn flow(items: impl IntoIterator<Item = impl AsRef<str>>) -> String {
    let items: Vec<String> = items.into_iter().map(|i| quoted(i.as_ref())).collect();
    format!("[{}]", items.join(", "))
}

/// The list as the chart reads it (`charts/spark-operator/files/permissions.yaml`).
pub fn render_yaml(rules: &[Rule]) -> String {
    let mut out = format!("# Generated from api/src/permissions.rs by `{REGENERATE_COMMAND}`; do not edit.\n");
    for component in Component::ALL {
        let _ = writeln!(out, "{}:", component.key());
        for scope in Scope::ALL {
            let in_scope: Vec<&Rule> = rules
                .iter()
                .filter(|r| r.component == component && r.scope == scope)
                .collect();
            if in_scope.is_empty() {
                let _ = writeln!(out, "  {}: []", scope.key());
                continue;
            }
            let _ = writeln!(out, "  {}:", scope.key());
            for rule in in_scope {
                let _ = writeln!(out, "    - operations: {}", flow(rule.operations));
                let _ = writeln!(out, "      apiGroups: {}", flow(rule.api_groups));
                let _ = writeln!(out, "      resources: {}", flow(rule.resources));
                let _ = writeln!(out, "      verbs: {}", flow(rule.verbs));
                if !rule.resource_names.is_empty() {
                    let _ = writeln!(
                        out,
                        "      resourceNames: {}",
                        flow(rule.resource_names.iter().map(|n| n.symbol()))
                    );
                }
                if let Some(when) = rule.when {
                    let _ = writeln!(out, "      when: {}", when.key());
                }
            }
        }
    }
    out
}

/// The list as a Markdown table (`docs/permissions.md`).
pub fn render_markdown(rules: &[Rule]) -> String {
    let mut out = String::from(
        "# Permissions\n\n<!-- Generated from api/src/permissions.rs by `spark-operator permissions --markdown --output docs/permissions.md`; do not edit. -->\n\n",
    );
    out.push_str(
        "Every Kubernetes permission the chart grants, and the operations that need it. Scopes: `cluster` (ClusterRole), \
`jobNamespaces` (a Role in each job namespace, or a ClusterRole when jobs run in every namespace), `releaseNamespace` \
(the chart's namespace), `agentNamespace` (the agents' namespace). Resource names are the chart's symbols for the \
release's object names. The end-to-end tests (`e2e/tests/e2e/permissions.rs`) run each component with exactly \
these rules and check that none is missing and none is superfluous.\n\n",
    );
    out.push_str("| Component | Scope | API group | Resources | Verbs | Names | When | Operations |\n");
    out.push_str("|---|---|---|---|---|---|---|---|\n");
    for rule in rules {
        let groups: Vec<&str> = rule
            .api_groups
            .iter()
            .map(|g| if g.is_empty() { "(core)" } else { g })
            .collect();
        let names: Vec<&str> = rule.resource_names.iter().map(|n| n.symbol()).collect();
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} | {} |",
            rule.component.key(),
            rule.scope.key(),
            groups.join(", "),
            rule.resources.join(", "),
            rule.verbs.join(", "),
            names.join(", "),
            rule.when.map(Condition::key).unwrap_or_default(),
            rule.operations.join("; ").replace('|', "\\|"),
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_list_grants_nothing_twice_and_no_create_by_name() {
        assert_eq!(problems(RULES), Vec::<String>::new());
    }

    #[test]
    fn the_checks_catch_a_duplicate_grant_and_a_named_create() {
        let duplicate = [RULES[0], named(RULES[0], &[MutatingWebhookConfiguration])];
        // One problem per grant the two share: every verb of every resource of the first rule.
        let shared = RULES[0].verbs.len() * RULES[0].resources.len();
        assert!(shared > 0);
        assert_eq!(problems(&duplicate).len(), shared, "{:?}", problems(&duplicate));
        let named_create = named(
            rule(Operator, ReleaseNamespace, CORE, &["secrets"], &["create"], &["x"]),
            &[CaSecret],
        );
        assert_eq!(problems(&[named_create]).len(), 1);
        let no_operation = rule(Operator, Cluster, CORE, &["nodes"], &["get"], &[]);
        assert_eq!(problems(&[no_operation]).len(), 1);
    }

    #[test]
    fn the_yaml_has_every_component_with_its_four_scopes_and_reads_back_as_the_rules() {
        let yaml = render_yaml(RULES);
        let value: serde_yaml::Value = serde_yaml::from_str(&yaml).unwrap();
        let mut read = 0;
        for component in Component::ALL {
            for scope in Scope::ALL {
                let rules = value[component.key()][scope.key()].as_sequence().unwrap();
                let expected: Vec<&Rule> = RULES
                    .iter()
                    .filter(|r| r.component == component && r.scope == scope)
                    .collect();
                assert_eq!(rules.len(), expected.len(), "{}.{}", component.key(), scope.key());
                for (rule, expected) in rules.iter().zip(expected) {
                    let strings = |key: &str| -> Vec<String> {
                        rule[key]
                            .as_sequence()
                            .map(|s| s.iter().map(|v| v.as_str().unwrap().to_owned()).collect())
                            .unwrap_or_default()
                    };
                    assert_eq!(strings("verbs"), expected.verbs);
                    assert_eq!(strings("apiGroups"), expected.api_groups);
                    assert_eq!(strings("resources"), expected.resources);
                    assert_eq!(strings("operations"), expected.operations);
                    let names: Vec<&str> = expected.resource_names.iter().map(|n| n.symbol()).collect();
                    assert_eq!(strings("resourceNames"), names);
                    assert_eq!(rule["when"].as_str(), expected.when.map(Condition::key));
                    read += 1;
                }
            }
        }
        assert_eq!(read, RULES.len());
    }

    #[test]
    fn allows_matches_group_resource_verb_and_resolved_name() {
        let lease = RULES
            .iter()
            .find(|r| r.resources == ["leases"] && r.verbs.contains(&"update"))
            .unwrap();
        let resolve = |_: ResourceName| "spark-operator-lock".to_owned();
        assert!(lease.allows(
            "coordination.k8s.io",
            "leases",
            "update",
            Some("spark-operator-lock"),
            resolve
        ));
        assert!(!lease.allows("coordination.k8s.io", "leases", "update", Some("other"), resolve));
        assert!(!lease.allows("coordination.k8s.io", "leases", "update", None, resolve));
        assert!(!lease.allows(
            "coordination.k8s.io",
            "leases",
            "delete",
            Some("spark-operator-lock"),
            resolve
        ));
    }
}
