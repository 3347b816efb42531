//! Least privilege of the installed chart: every rule of the Operator and Agent components
//! (`spark_operator_api::permissions`, which the chart's RBAC is generated from) is needed. The chart is
//! installed once by real Helm into the 3-node simulated cluster (RBAC enforced) with the production binary
//! as its image; then, for each rule in turn, the test removes exactly that rule from the installed
//! Role/ClusterRole that holds it, runs the smallest scenario that makes the component use it (restart
//! the operator's pods, submit a spark-pi, change a running application's spec, `spark-operator logs`,
//! ...), and requires the API server's audit log to show a 403 for the component's ServiceAccount on a
//! request the removed rule allows: a real request of the real binary, not an access review. Then it puts
//! the rule back and waits until the Deployment and the DaemonSet are ready again.
//!
//! The rules are iterated from the list, not named here: a new rule without a scenario fails the test
//! until one is written (or it is listed as not covered, with the reason, which the test prints).
//! Control: the same spark-pi and `spark-operator logs` with every rule present yield no 403.
//!
//! Same prerequisites and skip rules as `tests/helm_install.rs`.

// Test code: a panic is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;
use support::chart::*;

use std::collections::BTreeSet;
use std::path::Path;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Pod, Secret};
use k8s_openapi::api::rbac::v1::{ClusterRole, PolicyRule, Role};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use serde_json::json;
use spark_operator_api::SparkApplication;
use spark_operator_api::permissions::{Component, RULES, ResourceName, Rule, Scope};
use spark_operator_api::scheduled::ScheduledSparkApplication;
use spark_operator_dev::Cluster;

/// How long a scenario may take to reach its 403 (a leader may first wait out a dead leader's Lease).
const REACH: Duration = Duration::from_secs(90);

/// The chart's names for this release (`templates/_helpers.tpl`).
fn resolve(name: ResourceName) -> String {
    match name {
        ResourceName::CaSecret => "spark-operator-webhook-ca",
        ResourceName::CaConfigMap => "spark-operator-ca",
        ResourceName::LeaderLease => "spark-operator-controller-lock",
        ResourceName::OperatorDeployment => "spark-operator-controller",
        ResourceName::MutatingWebhookConfiguration | ResourceName::ValidatingWebhookConfiguration => {
            "spark-operator-webhook"
        }
    }
    .to_owned()
}

/// The chart's name of a component (`templates/rbac.yaml`) and its ServiceAccount's user name.
fn component_name(component: Component) -> &'static str {
    match component {
        Component::Operator => "spark-operator-controller",
        Component::Agent => "spark-operator-agent",
        Component::Cleanup => "spark-operator-cleanup",
        Component::SparkDriver => "spark-operator-spark",
    }
}

fn user_of(component: Component) -> String {
    let namespace = if component == Component::Agent {
        AGENTS
    } else {
        NAMESPACE
    };
    format!("system:serviceaccount:{namespace}:{}", component_name(component))
}

/// The installed role holding a rule of `component` in `scope`: (namespace or None for a ClusterRole,
/// name), as `templates/rbac.yaml` names them with the default `spark.jobNamespaces` (`[default]`).
fn role_of(component: Component, scope: Scope) -> (Option<&'static str>, String) {
    let name = component_name(component);
    match scope {
        Scope::Cluster => (None, name.to_owned()),
        Scope::JobNamespaces => (Some(JOBS), format!("{name}-jobs")),
        Scope::ReleaseNamespace => (Some(NAMESPACE), name.to_owned()),
        Scope::AgentNamespace => (Some(AGENTS), format!("{name}-agent-namespace")),
    }
}

/// Whether a rendered PolicyRule is `rule` as the chart renders it (resource names resolved).
fn renders(policy: &PolicyRule, rule: &Rule) -> bool {
    let strings = |v: &[&str]| v.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
    let names: Vec<String> = {
        let mut names: Vec<String> = rule.resource_names.iter().map(|n| resolve(*n)).collect();
        names.dedup();
        names
    };
    policy.api_groups.clone().unwrap_or_default() == strings(rule.api_groups)
        && policy.resources.clone().unwrap_or_default() == strings(rule.resources)
        && policy.verbs == strings(rule.verbs)
        && policy.resource_names.clone().unwrap_or_default() == names
}

/// Reads, replaces the rules of, the Role or ClusterRole holding a rule.
struct InstalledRole {
    client: kube::Client,
    namespace: Option<&'static str>,
    name: String,
}

impl InstalledRole {
    fn of(client: &kube::Client, rule: &Rule) -> Self {
        let (namespace, name) = role_of(rule.component, rule.scope);
        InstalledRole {
            client: client.clone(),
            namespace,
            name,
        }
    }

    fn describe(&self) -> String {
        match self.namespace {
            Some(ns) => format!("Role {ns}/{}", self.name),
            None => format!("ClusterRole {}", self.name),
        }
    }

    async fn rules(&self) -> Vec<PolicyRule> {
        match self.namespace {
            Some(ns) => Api::<Role>::namespaced(self.client.clone(), ns)
                .get(&self.name)
                .await
                .unwrap_or_else(|e| panic!("{}: {e}", self.describe()))
                .rules
                .unwrap_or_default(),
            None => Api::<ClusterRole>::all(self.client.clone())
                .get(&self.name)
                .await
                .unwrap_or_else(|e| panic!("{}: {e}", self.describe()))
                .rules
                .unwrap_or_default(),
        }
    }

    async fn set_rules(&self, rules: &[PolicyRule]) {
        // A JSON merge patch replaces the list whole.
        let patch = Patch::Merge(json!({ "rules": rules }));
        let params = PatchParams::default();
        match self.namespace {
            Some(ns) => {
                Api::<Role>::namespaced(self.client.clone(), ns)
                    .patch(&self.name, &params, &patch)
                    .await
                    .unwrap_or_else(|e| panic!("{}: {e}", self.describe()));
            }
            None => {
                Api::<ClusterRole>::all(self.client.clone())
                    .patch(&self.name, &params, &patch)
                    .await
                    .unwrap_or_else(|e| panic!("{}: {e}", self.describe()));
            }
        }
    }
}

/// What makes a component use a rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Scenario {
    /// The operator's pods restart: at start they read SparkApplications and pods, take part in leader
    /// election, and the webhook reads its CA Secret, publishes the CA in both CA ConfigMaps and patches
    /// the caBundle of both webhook configurations. `missing` is deleted first (by an administrator), so
    /// the operator has to create it.
    RestartOperator { missing: Option<Missing> },
    /// A spark-pi (driver 3s): its driver pod, ConfigMaps, Service and NetworkPolicy, the spec-hash
    /// annotation, its status, Events, and the finalizer's release when the driver ends.
    SparkPi,
    /// A spark-pi with `timeToLiveSeconds: 1`: the operator deletes it after it ends.
    SparkPiWithTimeToLive,
    /// A spark-pi with Prometheus monitoring: its `<app>-prom-conf` ConfigMap (server-side apply).
    SparkPiWithMonitoring,
    /// A spark-pi with a `driverIngressOptions` entry: its Service and Ingress (server-side apply).
    SparkPiWithDriverIngress,
    /// A running spark-pi whose spec changes: the operator deletes its driver pod to rerun.
    SpecChangeOfARunningApp,
    /// The agents' pods restart (new tokens), then a spark-pi: their reports reach the operator's receiver,
    /// which reviews their tokens.
    AgentReport,
    /// `spark-operator logs` of a finished application, through the agents' log server.
    Logs,
    /// A ScheduledSparkApplication every 2 s: its status, and its runs created.
    Schedule,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Missing {
    CaSecret,
    Lease,
}

/// Marks a ScheduledSparkApplication among the objects a scenario made.
const SCHEDULED: &str = "scheduled/";

/// Why a rule is not shown needed here (printed by the test).
const APPLY_CREATE_NOT_AUTHORIZED_BY_THE_SIM: &str = "not shown: the operator writes the CA ConfigMap by \
server-side apply, which real Kubernetes authorizes as `create` when the object is missing (docs: Server-Side \
Apply, RBAC and permissions); the sim authorizes it as `patch` only, so removing this rule gives no 403 here \
(sim gap, not a superfluous rule)";

/// The scenario of each rule: Ok(None) with the reason when none is run; Err for a rule this does not
/// know, which fails the test.
fn scenario_of(rule: &Rule) -> Result<Result<Scenario, &'static str>, String> {
    use Component::{Agent, Operator};
    use Scenario::*;
    use Scope::{AgentNamespace, Cluster, JobNamespaces, ReleaseNamespace};
    let resources = rule.resources.join(",");
    let verbs = rule.verbs.join(",");
    let named = !rule.resource_names.is_empty();
    if (rule.component, rule.scope, resources.as_str(), verbs.as_str())
        == (Operator, AgentNamespace, "configmaps", "create")
    {
        return Ok(Err(APPLY_CREATE_NOT_AUTHORIZED_BY_THE_SIM));
    }
    Ok(Ok(
        match (rule.component, rule.scope, resources.as_str(), verbs.as_str()) {
            (Operator, Cluster, "mutatingwebhookconfigurations" | "validatingwebhookconfigurations", _) => {
                RestartOperator { missing: None }
            }
            (Operator, Cluster, "tokenreviews", "create") => AgentReport,
            (Operator, JobNamespaces, "sparkapplications", "get,list,watch") => RestartOperator { missing: None },
            (Operator, JobNamespaces, "sparkapplications", "patch") => SparkPi,
            (Operator, JobNamespaces, "sparkapplications", "delete") => SparkPiWithTimeToLive,
            (Operator, JobNamespaces, "sparkapplications", "create") => Schedule,
            (Operator, JobNamespaces, "scheduledsparkapplications", "get,list,watch") => {
                RestartOperator { missing: None }
            }
            (Operator, JobNamespaces, "scheduledsparkapplications/status", "patch") => Schedule,
            (Operator, JobNamespaces, "sparkapplications/status", "patch") => SparkPi,
            // The driver pod is owned by its application with blockOwnerDeletion (the scheduled runs by
            // their schedule the same way; one rule covers both).
            (
                Operator,
                JobNamespaces,
                "sparkapplications/finalizers,scheduledsparkapplications/finalizers",
                "update",
            ) => SparkPi,
            (Operator, JobNamespaces, "pods", "get,list,watch") => RestartOperator { missing: None },
            (Operator, JobNamespaces, "pods", "create" | "patch") => SparkPi,
            (Operator, JobNamespaces, "pods", "delete") => SpecChangeOfARunningApp,
            (Operator, JobNamespaces, "configmaps", "create") => SparkPi,
            (Operator, JobNamespaces, "configmaps", "patch") => SparkPiWithMonitoring,
            (Operator, JobNamespaces, "services" | "networkpolicies", "create") => SparkPi,
            // The Spark UI Service, made for every application (`--enable-ui-service`, on by default).
            (Operator, JobNamespaces, "services", "patch") => SparkPi,
            (Operator, JobNamespaces, "ingresses", "create,patch") => SparkPiWithDriverIngress,
            (Operator, JobNamespaces, "events", _) => SparkPi,
            (Operator, ReleaseNamespace, "secrets", "create") => RestartOperator {
                missing: Some(Missing::CaSecret),
            },
            (Operator, ReleaseNamespace, "leases", "create") => RestartOperator {
                missing: Some(Missing::Lease),
            },
            (Operator, ReleaseNamespace | AgentNamespace, "secrets" | "configmaps" | "leases", _) if named => {
                RestartOperator { missing: None }
            }
            (Agent, Cluster, "tokenreviews" | "subjectaccessreviews", "create") => Logs,
            _ => {
                return Err(format!(
                    "no scenario for {:?} {:?} {resources} [{verbs}] ({:?}): write one in scenario_of",
                    rule.component, rule.scope, rule.operations
                ));
            }
        },
    ))
}

/// The audit log's position now (events kept plus those dropped), to read only what follows.
fn audit_mark(cluster: &Cluster) -> u64 {
    let audit = cluster.sim.audit();
    audit.dropped() + audit.events().len() as u64
}

/// `user`'s refused requests since `mark`: (verb, group, resource[/subresource], namespace, name).
fn refusals_since(cluster: &Cluster, mark: u64, user: &str) -> Vec<(String, String, String, String, Option<String>)> {
    let audit = cluster.sim.audit();
    let events = audit.events();
    let skip = mark.saturating_sub(audit.dropped()) as usize;
    events
        .into_iter()
        .skip(skip)
        .filter(|e| e.code == 403 && e.username == user)
        .map(|e| {
            let resource = match &e.subresource {
                Some(sub) => format!("{}/{sub}", e.resource),
                None => e.resource.clone(),
            };
            (e.verb, e.group, resource, e.namespace.unwrap_or_default(), e.name)
        })
        .collect()
}

/// The refusal of `rule`'s component since `mark` that `rule` would have allowed, if any.
fn refusal_within(cluster: &Cluster, mark: u64, rule: &Rule) -> Option<String> {
    let (namespace, _) = role_of(rule.component, rule.scope);
    refusals_since(cluster, mark, &user_of(rule.component))
        .into_iter()
        .find(|(verb, group, resource, ns, name)| {
            namespace.is_none_or(|n| n == ns)
                && (rule.allows(group, resource, verb, name.as_deref(), resolve)
                    // OwnerReferencesPermissionEnforcement refuses the dependent's write (the UI Service
                    // applied, the driver pod created, owned with blockOwnerDeletion), not a request on
                    // the owner's finalizers.
                    || (guards_owner_finalizers(rule) && matches!(verb.as_str(), "create" | "patch" | "update")))
        })
        .map(|(verb, group, resource, ns, name)| format!("{verb} {group}/{resource} {ns}/{}", name.unwrap_or_default()))
}

/// A rule that lets the component set `blockOwnerDeletion` on references to its owners' kinds: its
/// absence shows as the dependent's write refused at admission.
fn guards_owner_finalizers(rule: &Rule) -> bool {
    rule.verbs == ["update"] && rule.resources.iter().all(|r| r.ends_with("/finalizers"))
}

/// The pods of a workload (its selector), in `namespace`.
async fn workload_pods(client: &kube::Client, namespace: &str, selector: &str) -> Vec<Pod> {
    Api::<Pod>::namespaced(client.clone(), namespace)
        .list(&ListParams::default().labels(selector))
        .await
        .unwrap()
        .items
}

fn selector_of(labels: Option<&std::collections::BTreeMap<String, String>>) -> String {
    labels
        .into_iter()
        .flatten()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// The operator's Deployment (namespace, selector, replicas) and the agents' DaemonSet (namespace,
/// selector, pods).
async fn workload(client: &kube::Client, component: Component) -> (&'static str, String, usize) {
    match component {
        Component::Operator => {
            let d = Api::<Deployment>::namespaced(client.clone(), NAMESPACE)
                .get(component_name(component))
                .await
                .unwrap();
            let spec = d.spec.unwrap();
            (
                NAMESPACE,
                selector_of(spec.selector.match_labels.as_ref()),
                spec.replicas.unwrap_or(1) as usize,
            )
        }
        _ => {
            let d = Api::<DaemonSet>::namespaced(client.clone(), AGENTS)
                .get(component_name(Component::Agent))
                .await
                .unwrap();
            let nodes = d.status.map_or(0, |s| s.desired_number_scheduled) as usize;
            (
                AGENTS,
                selector_of(d.spec.unwrap().selector.match_labels.as_ref()),
                nodes,
            )
        }
    }
}

/// Deletes the workload's pods (its controller replaces them); returns their uids.
async fn restart(client: &kube::Client, component: Component) -> BTreeSet<String> {
    let (namespace, selector, _) = workload(client, component).await;
    let pods = Api::<Pod>::namespaced(client.clone(), namespace);
    let mut uids = BTreeSet::new();
    for pod in workload_pods(client, namespace, &selector).await {
        uids.insert(pod.metadata.uid.clone().unwrap_or_default());
        let name = pod.metadata.name.unwrap_or_default();
        match pods.delete(&name, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => panic!("deleting pod {namespace}/{name}: {e}"),
        }
    }
    uids
}

/// Waits until the workload has all its pods, none of them `old`, none terminating, all Ready.
async fn ready(cluster: &Cluster, component: Component, old: &BTreeSet<String>) {
    let client = &cluster.client;
    let (namespace, selector, wanted) = workload(client, component).await;
    eventually(&format!("{component:?} pods ready"), LIMIT, || async {
        let pods = workload_pods(client, namespace, &selector).await;
        let fine = pods
            .iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .filter(|p| !old.contains(p.metadata.uid.as_deref().unwrap_or_default()))
            .filter(|p| {
                p.status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
            })
            .count();
        if fine == wanted && pods.len() == wanted {
            Ok(())
        } else {
            Err(format!(
                "{fine}/{wanted} fresh and ready of {}\n{}",
                pods.len(),
                pods_report(client, namespace).await
            ))
        }
    })
    .await
}

async fn delete_missing(client: &kube::Client, missing: Missing) {
    let outcome = match missing {
        Missing::CaSecret => Api::<Secret>::namespaced(client.clone(), NAMESPACE)
            .delete(&resolve(ResourceName::CaSecret), &DeleteParams::default())
            .await
            .map(|_| ()),
        Missing::Lease => Api::<Lease>::namespaced(client.clone(), NAMESPACE)
            .delete(&resolve(ResourceName::LeaderLease), &DeleteParams::default())
            .await
            .map(|_| ()),
    };
    match outcome {
        Ok(()) => {}
        Err(kube::Error::Api(s)) if s.code == 404 => {}
        Err(e) => panic!("deleting {missing:?}: {e}"),
    }
}

/// Runs `spark-operator logs <app>` as the log reader; its output.
async fn logs(binary: &Path, reader: &Path, app: &str) -> (bool, String) {
    let out = tokio::process::Command::new(binary)
        .args(["logs", app, "-n", JOBS, "--kubeconfig", reader.to_str().unwrap()])
        .kill_on_drop(true)
        .output()
        .await
        .unwrap();
    (
        out.status.success(),
        format!(
            "{}\n{}",
            String::from_utf8_lossy(&out.stderr),
            String::from_utf8_lossy(&out.stdout)
        ),
    )
}

/// Starts a scenario; returns the applications it made (deleted once the rule is back) and whether it
/// restarted the component's pods (restarted again once the rule is back).
async fn start(
    cluster: &Cluster,
    scenario: Scenario,
    run: usize,
    binary: &Path,
    reader: &Path,
) -> (Vec<String>, Option<Component>) {
    let client = &cluster.client;
    let app = format!("least-privilege-{run}");
    match scenario {
        Scenario::RestartOperator { missing } => {
            if let Some(missing) = missing {
                delete_missing(client, missing).await;
            }
            restart(client, Component::Operator).await;
            (Vec::new(), Some(Component::Operator))
        }
        Scenario::SparkPi => {
            submit(client, spark_pi(&app, "3s")).await;
            (vec![app], None)
        }
        Scenario::SparkPiWithTimeToLive => {
            let mut pi = spark_pi(&app, "1s");
            pi["spec"]["timeToLiveSeconds"] = json!(1);
            submit(client, pi).await;
            (vec![app], None)
        }
        Scenario::SparkPiWithMonitoring => {
            let mut pi = spark_pi(&app, "1s");
            pi["spec"]["monitoring"] = json!({
                "exposeDriverMetrics": true,
                "exposeExecutorMetrics": true,
                "prometheus": { "jmxExporterJar": "/prometheus/jmx_prometheus_javaagent.jar", "port": 8090 },
            });
            submit(client, pi).await;
            (vec![app], None)
        }
        Scenario::SparkPiWithDriverIngress => {
            let mut pi = spark_pi(&app, "1s");
            pi["spec"]["driverIngressOptions"] = json!([
                { "servicePort": 4040, "ingressURLFormat": "{{$appName}}.{{$appNamespace}}.example.com" },
            ]);
            submit(client, pi).await;
            (vec![app], None)
        }
        Scenario::SpecChangeOfARunningApp => {
            submit(client, spark_pi(&app, "120s")).await;
            let apps: Api<SparkApplication> = Api::namespaced(client.clone(), JOBS);
            eventually(&format!("{app} RUNNING"), LIMIT, || async {
                let a = apps.get(&app).await.map_err(|e| e.to_string())?;
                let state = a
                    .status
                    .as_ref()
                    .map(|s| s.application_state.state.to_string())
                    .unwrap_or_default();
                if state == "RUNNING" { Ok(()) } else { Err(state) }
            })
            .await;
            apps.patch(
                &app,
                &PatchParams::default(),
                &Patch::Merge(json!({ "spec": { "arguments": ["10"] } })),
            )
            .await
            .unwrap();
            (vec![app], None)
        }
        Scenario::AgentReport => {
            restart(client, Component::Agent).await;
            submit(client, spark_pi(&app, "2s")).await;
            (vec![app], Some(Component::Agent))
        }
        Scenario::Logs => {
            let (ok, output) = logs(binary, reader, "control").await;
            assert!(!ok, "spark-operator logs succeeded without an agent rule:\n{output}");
            (Vec::new(), None)
        }
        Scenario::Schedule => {
            let mut template = spark_pi(&app, "1s")["spec"].clone();
            template["executor"]["instances"] = json!(1);
            let schedule: ScheduledSparkApplication = serde_json::from_value(json!({
                "apiVersion": "sparkoperator.k8s.io/v1beta2",
                "kind": "ScheduledSparkApplication",
                "metadata": { "name": app, "namespace": JOBS },
                "spec": { "schedule": "@every 2s", "template": template },
            }))
            .unwrap();
            Api::<ScheduledSparkApplication>::namespaced(client.clone(), JOBS)
                .create(&kube::api::PostParams::default(), &schedule)
                .await
                .unwrap();
            (vec![format!("{SCHEDULED}{app}")], None)
        }
    }
}

struct Outcome {
    rule: String,
    scenario: Scenario,
    refused: Option<String>,
    took: Duration,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_operator_and_agent_rule_of_the_installed_chart_is_needed() {
    let began = Instant::now();
    let Some((python, binary)) = prerequisites() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("helm");
    let cluster = start_cluster(dir.path(), &binary).await;
    let admin = cluster.client.clone();
    let kubeconfig = cluster.sim.kubeconfig_path().to_owned();
    let chart = repo_root().join("charts/spark-operator");
    helm(
        &python,
        &home,
        &kubeconfig,
        &["install", chart.to_str().unwrap(), RELEASE, "--timeout", "300"],
    )
    .await
    .unwrap_or_else(|e| panic!("helm install: {e}"));
    let none = BTreeSet::new();
    ready(&cluster, Component::Operator, &none).await;
    ready(&cluster, Component::Agent, &none).await;
    let reader = reader_kubeconfig(&cluster, dir.path()).await;
    println!("installed in {:?}", began.elapsed());

    // Control: with every rule present, the spark-pi and logs scenarios refuse nothing (so a 403 below is
    // the removed rule's doing), and the application whose logs the Logs scenario reads exists.
    let mark = audit_mark(&cluster);
    submit(&admin, spark_pi("control", "3s")).await;
    completed(&cluster, "control").await;
    let (ok, output) = logs(&binary, &reader, "control").await;
    assert!(ok, "spark-operator logs control: {output}");
    for component in [Component::Operator, Component::Agent] {
        assert_eq!(
            refusals_since(&cluster, mark, &user_of(component)),
            Vec::new(),
            "with every rule, spark-pi and logs refuse nothing to {component:?}"
        );
    }

    let mut outcomes = Vec::new();
    let mut not_covered = Vec::new();
    let rules = RULES
        .iter()
        .filter(|r| matches!(r.component, Component::Operator | Component::Agent));
    for (run, rule) in rules.enumerate() {
        let describe = format!(
            "{:?} {:?} {:?} {:?} [{}] {:?}",
            rule.component,
            rule.scope,
            rule.api_groups,
            rule.resources,
            rule.verbs.join(","),
            rule.resource_names
        );
        if let Some(when) = rule.when {
            not_covered.push(format!(
                "{describe}: only granted when `{}` (spark.jobNamespaceSelector set, agent.enable false, or controller.driverPodDisruptionBudget.enable), not in this install",
                when.key()
            ));
            continue;
        }
        let scenario = match scenario_of(rule).unwrap_or_else(|e| panic!("{e}")) {
            Ok(scenario) => scenario,
            Err(reason) => {
                not_covered.push(format!("{describe}: {reason}"));
                continue;
            }
        };
        let role = InstalledRole::of(&admin, rule);
        let original = role.rules().await;
        let kept: Vec<PolicyRule> = original.iter().filter(|p| !renders(p, rule)).cloned().collect();
        assert_eq!(
            kept.len() + 1,
            original.len(),
            "{describe}: exactly one rule of {} renders it: {original:#?}",
            role.describe()
        );
        role.set_rules(&kept).await;

        let started = Instant::now();
        let mark = audit_mark(&cluster);
        let (apps, restarted) = start(&cluster, scenario, run, &binary, &reader).await;
        let mut refused = None;
        while started.elapsed() < REACH {
            refused = refusal_within(&cluster, mark, rule);
            if refused.is_some() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        let took = started.elapsed();
        println!("{describe}: {scenario:?} → {refused:?} in {took:?}");
        if refused.is_none() {
            println!(
                "  refused to {}: {:?}",
                user_of(rule.component),
                refusals_since(&cluster, mark, &user_of(rule.component))
            );
        }

        // Back to healthy: the rule restored, pods restarted if the scenario restarted them (they may be
        // backing off), its applications gone.
        let restoring = Instant::now();
        role.set_rules(&original).await;
        for app in &apps {
            // A schedule goes with its runs (owned by it; the sim's GC deletes them).
            if let Some(schedule) = app.strip_prefix(SCHEDULED) {
                let _ = Api::<ScheduledSparkApplication>::namespaced(admin.clone(), JOBS)
                    .delete(schedule, &DeleteParams::background())
                    .await;
                continue;
            }
            let _ = Api::<SparkApplication>::namespaced(admin.clone(), JOBS)
                .delete(app, &DeleteParams::background())
                .await;
        }
        if let Some(component) = restarted {
            let old = restart(&admin, component).await;
            ready(&cluster, component, &old).await;
        }
        ready(&cluster, Component::Operator, &none).await;
        ready(&cluster, Component::Agent, &none).await;
        println!("  healthy again in {:?}", restoring.elapsed());
        outcomes.push(Outcome {
            rule: describe,
            scenario,
            refused,
            took,
        });
    }

    println!("\ncovered ({}):", outcomes.len());
    for o in &outcomes {
        println!(
            "  {} ← {:?} in {:?}: {}",
            o.rule,
            o.scenario,
            o.took,
            o.refused.as_deref().unwrap_or("NO 403")
        );
    }
    println!("not covered ({}):", not_covered.len());
    for line in &not_covered {
        println!("  {line}");
    }
    println!("total {:?}", began.elapsed());
    let unreached: Vec<&String> = outcomes
        .iter()
        .filter(|o| o.refused.is_none())
        .map(|o| &o.rule)
        .collect();
    assert!(
        unreached.is_empty(),
        "without these rules their scenario got no 403 (wrong scenario, or an unneeded rule): {unreached:#?}"
    );
    assert!(!outcomes.is_empty());
}
