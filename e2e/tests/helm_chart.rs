//! The Helm chart `charts/spark-operator`, rendered without a cluster: strict lint, the objects it renders with
//! its defaults and with Kubeflow's default values file, RBAC exactly as `files/permissions.yaml` says, unknown
//! and renamed keys refused with a message that names the key, and a current values table.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::collections::BTreeSet;
use std::path::PathBuf;

use serde_json::{Value, json};
use spark_operator_e2e::helm::{Helm, chart, notes, objects, repo_root, values_file};

const NS: &str = "spark-operator";
const RELEASE: &str = "spark-operator";

fn kubeflow_values() -> PathBuf {
    repo_root().join("tests/fixtures/kubeflow-chart/values.yaml")
}

fn find<'a>(objects: &'a [Value], kind: &str, name: &str) -> &'a Value {
    objects
        .iter()
        .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name} among {:?}", summary(objects)))
}

fn summary(objects: &[Value]) -> Vec<String> {
    objects
        .iter()
        .map(|o| format!("{} {}/{}", o["kind"], o["metadata"]["namespace"], o["metadata"]["name"]))
        .collect()
}

fn args(container: &Value) -> Vec<String> {
    container["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap().to_owned())
        .collect()
}

fn render(helm: &Helm, values: &Value) -> Value {
    helm.template(&chart(), RELEASE, NS, values)
        .unwrap_or_else(|e| panic!("the chart does not render with {values}: {e}"))
}

#[test]
fn lint_is_clean_with_defaults_and_with_kubeflow_values() {
    let Some(helm) = Helm::new() else { return };
    let chart = chart();
    for values in [json!({}), values_file(&kubeflow_values())] {
        let report = helm
            .run(&[
                "lint",
                chart.to_str().unwrap(),
                "-n",
                NS,
                "--set-json",
                &values.to_string(),
            ])
            .unwrap();
        assert_eq!(report["total_charts_linted"], 1, "{report}");
        assert_eq!(report["errors"], json!([]), "{report}");
        assert_eq!(report["messages"], json!([]), "{report}");
    }
}

#[test]
fn defaults_render_the_operator_the_agent_and_the_webhook_configurations() {
    let Some(helm) = Helm::new() else { return };
    let rendered = render(&helm, &json!({}));
    let objects = objects(&rendered);

    let deployment = find(&objects, "Deployment", "spark-operator-controller");
    assert_eq!(deployment["spec"]["replicas"], 2);
    let pod = &deployment["spec"]["template"]["spec"];
    assert_eq!(
        deployment["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/component"],
        "operator"
    );
    assert_eq!(pod["serviceAccountName"], "spark-operator-controller");
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    assert_eq!(pod["securityContext"]["runAsUser"], 65532);
    let operator = &pod["containers"][0];
    assert!(operator.get("command").is_none(), "args only: {operator}");
    assert_eq!(operator["image"], "spark-operator/spark-operator:0.1.0");
    let operator_args = args(operator);
    assert_eq!(operator_args[0], "operator");
    for expected in [
        "--metrics-address=$(POD_IP):8080",
        "--webhook-address=$(POD_IP):9443",
        "--reports-address=$(POD_IP):9444",
        "--leader-election-namespace=spark-operator",
        "--leader-election-lease-name=spark-operator-controller-lock",
        "--namespaces=default",
        "--webhook-ca-secret=spark-operator-webhook-ca",
        "--webhook-ca-config-map=spark-operator-ca",
        "--webhook-ca-config-map-namespace=spark-operator-agent",
        "--agent-service-account=spark-operator-agent:spark-operator-agent",
        "--reports-service-name=spark-operator-reports",
    ] {
        assert!(
            operator_args.iter().any(|a| a == expected),
            "{expected} not in {operator_args:?}"
        );
    }
    let security = &operator["securityContext"];
    assert_eq!(security["readOnlyRootFilesystem"], true);
    assert_eq!(security["allowPrivilegeEscalation"], false);
    assert_eq!(security["capabilities"]["drop"], json!(["ALL"]));
    assert_eq!(security["seccompProfile"]["type"], "RuntimeDefault");
    assert_eq!(operator["readinessProbe"]["httpGet"]["path"], "/readyz");
    assert_eq!(operator["livenessProbe"]["httpGet"]["path"], "/healthz");
    assert!(operator["resources"]["requests"]["cpu"].is_string(), "{operator}");
    find(&objects, "PodDisruptionBudget", "spark-operator-controller");
    let webhook_service = find(&objects, "Service", "spark-operator-webhook");
    assert_eq!(webhook_service["spec"]["ports"][0]["port"], 443);
    let reports_service = find(&objects, "Service", "spark-operator-reports");
    assert_eq!(reports_service["spec"]["ports"][0]["port"], 9444);

    for kind in ["MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"] {
        let configuration = find(&objects, kind, "spark-operator-webhook");
        for webhook in configuration["webhooks"].as_array().unwrap() {
            let client = &webhook["clientConfig"];
            assert!(
                client.get("caBundle").is_none(),
                "the operator fills caBundle: {webhook}"
            );
            assert_eq!(client["service"]["name"], "spark-operator-webhook");
            assert_eq!(client["service"]["namespace"], NS);
            assert_eq!(client["service"]["port"], 443);
            assert_eq!(webhook["sideEffects"], "None");
            assert_eq!(webhook["admissionReviewVersions"], json!(["v1"]));
            assert_eq!(webhook["failurePolicy"], "Fail");
            assert_eq!(
                webhook["namespaceSelector"]["matchExpressions"][0],
                json!({"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["default"]})
            );
        }
    }

    let namespace = find(&objects, "Namespace", "spark-operator-agent");
    assert_eq!(
        namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"],
        "privileged"
    );
    let daemonset = find(&objects, "DaemonSet", "spark-operator-agent");
    assert_eq!(daemonset["metadata"]["namespace"], "spark-operator-agent");
    let template = &daemonset["spec"]["template"];
    assert_eq!(
        template["metadata"]["labels"]["app.kubernetes.io/name"],
        "spark-operator"
    );
    assert_eq!(template["metadata"]["labels"]["app.kubernetes.io/component"], "agent");
    let pod = &template["spec"];
    assert_eq!(pod["priorityClassName"], "system-node-critical");
    assert_eq!(pod["tolerations"], json!([{"operator": "Exists"}]));
    assert_eq!(pod["terminationGracePeriodSeconds"], 60);
    let host_paths: BTreeSet<&str> = pod["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|v| v["hostPath"]["path"].as_str())
        .collect();
    assert_eq!(
        host_paths,
        BTreeSet::from([
            "/run/containerd/containerd.sock",
            "/var/log/pods",
            "/var/lib/spark-operator-agent/spool",
            "/var/lib/spark-operator-agent/logs",
        ])
    );
    let token = pod["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "token")
        .unwrap();
    assert_eq!(
        token["projected"]["sources"][0]["serviceAccountToken"]["audience"],
        "spark-operator"
    );
    let agent = &pod["containers"][0];
    assert!(agent.get("command").is_none(), "args only: {agent}");
    let agent_args = args(agent);
    assert_eq!(agent_args[0], "agent");
    for expected in [
        "--node-name=$(NODE_NAME)",
        "--report-address=https://spark-operator-reports.spark-operator.svc:9444",
        "--log-address=$(POD_IP):9444",
        "--token-file=/var/run/secrets/spark-operator/token",
        "--ca-bundle=/etc/spark-operator/ca/ca.crt",
    ] {
        assert!(
            agent_args.iter().any(|a| a == expected),
            "{expected} not in {agent_args:?}"
        );
    }
    let security = &agent["securityContext"];
    assert_ne!(security["privileged"], true);
    assert_eq!(security["allowPrivilegeEscalation"], false);
    assert_eq!(security["readOnlyRootFilesystem"], true);
    assert_eq!(security["capabilities"]["drop"], json!(["ALL"]));

    let job = find(&objects, "Job", "spark-operator-cleanup");
    assert_eq!(job["metadata"]["annotations"]["helm.sh/hook"], "pre-delete");
    let cleanup = &job["spec"]["template"]["spec"]["containers"][0];
    assert!(cleanup.get("command").is_none(), "args only: {cleanup}");
    let cleanup_args = args(cleanup);
    assert_eq!(cleanup_args[0], "cleanup");
    assert!(cleanup_args.contains(&"--ca-config-map=spark-operator-agent/spark-operator-ca".to_owned()));
    assert_eq!(cleanup["securityContext"]["runAsNonRoot"], true);
    find(&objects, "ServiceAccount", "spark-operator-spark");
}

#[test]
fn kubeflow_default_values_install_unchanged() {
    let Some(helm) = Helm::new() else { return };
    let rendered = render(&helm, &values_file(&kubeflow_values()));
    let objects = objects(&rendered);
    let deployment = find(&objects, "Deployment", "spark-operator-controller");
    assert_eq!(
        deployment["spec"]["replicas"], 1,
        "controller.replicas 1, webhook.replicas 1"
    );
    let operator = &deployment["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(
        operator["image"], "spark-operator/spark-operator:0.1.0",
        "Kubeflow's image is replaced"
    );
    let operator_args = args(operator);
    assert!(
        operator_args.contains(&"--concurrency=10".to_owned()),
        "{operator_args:?}"
    );
    assert!(
        operator_args.contains(&"--max-tracked-executors=1000".to_owned()),
        "{operator_args:?}"
    );
    assert!(notes(&rendered).contains("Kubeflow's image"), "{}", notes(&rendered));

    // A key that is accepted and not honoured is warned about when changed.
    let mut values = values_file(&kubeflow_values());
    values["controller"]["pprof"]["enable"] = json!(true);
    let rendered = render(&helm, &values);
    assert!(
        notes(&rendered).contains("controller.pprof.enable = true"),
        "{}",
        notes(&rendered)
    );
}

#[test]
fn batch_scheduler_values_become_kubeflows_flags() {
    let Some(helm) = Helm::new() else { return };
    let operator_args = |values: &Value| {
        let rendered = render(&helm, values);
        let objects = objects(&rendered);
        let deployment = find(&objects, "Deployment", "spark-operator-controller");
        (
            args(&deployment["spec"]["template"]["spec"]["containers"][0]),
            notes(&rendered),
        )
    };
    // Kubeflow's default: off, nothing passed (the operator's default is off), nothing warned about.
    let (off, notes) = operator_args(&values_file(&kubeflow_values()));
    assert!(
        !off.iter()
            .any(|a| a.contains("batch-scheduler") || a.contains("kube-scheduler")),
        "{off:?}"
    );
    assert!(!notes.contains("batchScheduler"), "{notes}");

    let mut values = values_file(&kubeflow_values());
    values["controller"]["batchScheduler"] = json!({
        "enable": true,
        "kubeSchedulerNames": ["scheduler-plugins-scheduler", "other"],
        "default": "volcano",
    });
    let (on, notes) = operator_args(&values);
    for flag in [
        "--enable-batch-scheduler=true",
        "--kube-scheduler-names=scheduler-plugins-scheduler,other",
        "--default-batch-scheduler=volcano",
    ] {
        assert!(on.contains(&flag.to_owned()), "{flag} not in {on:?}");
    }
    assert!(!notes.contains("batchScheduler"), "no longer reserved: {notes}");
}

#[test]
fn ui_and_driver_pdb_values_become_kubeflows_flags() {
    let Some(helm) = Helm::new() else { return };
    let operator_args = |values: &Value| {
        let rendered = render(&helm, values);
        let objects = objects(&rendered);
        let deployment = find(&objects, "Deployment", "spark-operator-controller");
        (
            args(&deployment["spec"]["template"]["spec"]["containers"][0]),
            notes(&rendered),
        )
    };
    let has = |args: &[String], prefix: &str| args.iter().any(|a| a.starts_with(prefix));

    // Kubeflow's defaults: the UI Service on, no Ingress, no PodDisruptionBudget, nothing warned about.
    let (kubeflow, notes) = operator_args(&values_file(&kubeflow_values()));
    assert!(
        kubeflow.contains(&"--enable-ui-service=true".to_owned()),
        "{kubeflow:?}"
    );
    assert!(
        kubeflow.contains(&"--enable-driver-pdb=false".to_owned()),
        "{kubeflow:?}"
    );
    assert!(!has(&kubeflow, "--ingress-"), "{kubeflow:?}");
    for key in ["uiService", "uiIngress", "driverPodDisruptionBudget"] {
        assert!(!notes.contains(key), "{notes}");
    }

    // Everything set, as Kubeflow's chart passes it (deployment.yaml: the Ingress flags only with
    // uiIngress.enable, TLS and annotations as JSON).
    let mut values = values_file(&kubeflow_values());
    values["controller"]["uiService"]["enable"] = json!(true);
    values["controller"]["uiIngress"] = json!({
        "enable": true,
        "urlFormat": "{{$appName}}.{{$appNamespace}}.spark.example.com",
        "ingressClassName": "nginx",
        "tls": [{"hosts": ["*.spark.example.com"], "secretName": "spark-tls"}],
        "annotations": {"cert-manager.io/cluster-issuer": "letsencrypt"},
    });
    values["controller"]["driverPodDisruptionBudget"]["enable"] = json!(true);
    let (all, _) = operator_args(&values);
    for flag in [
        "--enable-ui-service=true",
        "--ingress-url-format={{$appName}}.{{$appNamespace}}.spark.example.com",
        "--ingress-class-name=nginx",
        r#"--ingress-tls=[{"hosts":["*.spark.example.com"],"secretName":"spark-tls"}]"#,
        r#"--ingress-annotations={"cert-manager.io/cluster-issuer":"letsencrypt"}"#,
        "--enable-driver-pdb=true",
    ] {
        assert!(all.contains(&flag.to_owned()), "{flag} not in {all:?}");
    }

    // Ingress settings without uiIngress.enable are not passed (as Kubeflow's chart).
    values["controller"]["uiIngress"]["enable"] = json!(false);
    values["controller"]["uiService"]["enable"] = json!(false);
    let (off, _) = operator_args(&values);
    assert!(off.contains(&"--enable-ui-service=false".to_owned()), "{off:?}");
    assert!(!has(&off, "--ingress-"), "{off:?}");

    // enable without a URL format makes no Ingress: said in the notes.
    values["controller"]["uiIngress"] = json!({"enable": true, "urlFormat": ""});
    values["controller"]["uiService"]["enable"] = json!(true);
    let (args, notes) = operator_args(&values);
    assert!(!has(&args, "--ingress-url-format"), "{args:?}");
    assert!(
        notes.contains("controller.uiIngress.enable is true without controller.uiIngress.urlFormat"),
        "{notes}"
    );
}

/// The rules permissions.yaml gives a component in a scope, as the chart must render them.
/// `when`: the conditions (`when` keys) the values meet.
fn expected_rules(permissions: &Value, component: &str, scope: &str, when: &[&str]) -> Vec<Value> {
    let names = json!({
        "caSecret": "spark-operator-webhook-ca",
        "caConfigMap": "spark-operator-ca",
        "leaderLease": "spark-operator-controller-lock",
        "operatorDeployment": "spark-operator-controller",
        "mutatingWebhookConfiguration": "spark-operator-webhook",
        "validatingWebhookConfiguration": "spark-operator-webhook",
    });
    let rules = permissions[component][scope].as_array().cloned().unwrap_or_default();
    rules
        .into_iter()
        .filter(|r| match r.get("when") {
            None => true,
            Some(w) => when.iter().any(|c| w == *c),
        })
        .map(|r| {
            let mut rule = json!({"apiGroups": r["apiGroups"], "resources": r["resources"], "verbs": r["verbs"]});
            if let Some(symbolic) = r.get("resourceNames") {
                let resolved: Vec<Value> = symbolic
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|n| names[n.as_str().unwrap()].clone())
                    .collect();
                rule["resourceNames"] = json!(resolved);
            }
            rule
        })
        .collect()
}

fn check_rbac(helm: &Helm, values: Value, when: &[&str], job_namespaces: &[&str]) {
    let selector = when.contains(&"jobNamespaceSelector");
    let permissions = values_file(&chart().join("files/permissions.yaml"));
    let objects = objects(&render(helm, &values));
    let roles: Vec<&Value> = objects
        .iter()
        .filter(|o| o["kind"] == "Role" || o["kind"] == "ClusterRole")
        .collect();
    let mut seen = 0;
    let components = [
        ("operator", "spark-operator-controller", "spark-operator-controller", NS),
        (
            "agent",
            "spark-operator-agent",
            "spark-operator-agent",
            "spark-operator-agent",
        ),
        ("cleanup", "spark-operator-cleanup", "spark-operator-cleanup", NS),
        ("sparkDriver", "spark-operator-spark", "spark-operator-spark", ""),
    ];
    for (component, name, account, account_ns) in components {
        let cluster_wide = selector || job_namespaces.is_empty();
        let mut scopes: Vec<(&str, String, Option<String>)> = vec![("cluster", name.to_owned(), None)];
        if cluster_wide {
            scopes.push(("jobNamespaces", format!("{name}-jobs"), None));
        } else {
            for ns in job_namespaces {
                scopes.push(("jobNamespaces", format!("{name}-jobs"), Some((*ns).to_owned())));
            }
        }
        scopes.push(("releaseNamespace", name.to_owned(), Some(NS.to_owned())));
        scopes.push((
            "agentNamespace",
            format!("{name}-agent-namespace"),
            Some("spark-operator-agent".into()),
        ));
        for (scope, role_name, namespace) in scopes {
            let rules = expected_rules(&permissions, component, scope, when);
            let kind = if namespace.is_some() { "Role" } else { "ClusterRole" };
            let found = roles.iter().find(|r| {
                r["kind"] == kind
                    && r["metadata"]["name"] == role_name.as_str()
                    && r["metadata"]["namespace"].as_str() == namespace.as_deref()
            });
            if rules.is_empty() {
                assert!(
                    found.is_none(),
                    "{component} {scope}: no rules, yet {kind} {role_name} is rendered"
                );
                continue;
            }
            let role = found.unwrap_or_else(|| panic!("{component} {scope}: no {kind} {role_name} in {namespace:?}"));
            assert_eq!(role["rules"], json!(rules), "{component} {scope}");
            seen += 1;
            let binding_kind = if namespace.is_some() {
                "RoleBinding"
            } else {
                "ClusterRoleBinding"
            };
            let binding = objects
                .iter()
                .find(|b| {
                    b["kind"] == binding_kind
                        && b["metadata"]["name"] == role_name.as_str()
                        && b["metadata"]["namespace"].as_str() == namespace.as_deref()
                })
                .unwrap_or_else(|| panic!("{component} {scope}: no {binding_kind} {role_name}"));
            assert_eq!(binding["roleRef"]["name"], role_name.as_str());
            let subject_ns = if account_ns.is_empty() {
                namespace.clone().unwrap_or_else(|| NS.to_owned())
            } else {
                account_ns.to_owned()
            };
            assert_eq!(
                binding["subjects"],
                json!([{"kind": "ServiceAccount", "name": account, "namespace": subject_ns}]),
                "{component} {scope}"
            );
            if component == "cleanup" {
                assert_eq!(role["metadata"]["annotations"]["helm.sh/hook"], "pre-delete");
            }
        }
    }
    // Nothing more than permissions.yaml gives.
    assert_eq!(roles.len(), seen, "{:?}", summary(&objects));
}

/// `webhook.ownerResources` grants the operator `get` on each listed kind in the job namespaces, so the
/// webhook checks such owners in full (issue 30, fault 2); nothing else changes, and no wildcard appears.
#[test]
fn listed_owner_kinds_become_reads_in_the_job_namespaces() {
    let Some(helm) = Helm::new() else { return };
    let values = json!({"spark": {"jobNamespaces": ["a"]}, "webhook": {"ownerResources": ["workflows.argoproj.io", "configmaps"]}});
    let with = objects(&render(&helm, &values));
    let role = find(&with, "Role", "spark-operator-controller-jobs");
    assert_eq!(role["metadata"]["namespace"], "a");
    let rules = role["rules"].as_array().unwrap();
    let tail: Vec<&Value> = rules.iter().rev().take(2).rev().collect();
    assert_eq!(
        tail,
        [
            &json!({"apiGroups": ["argoproj.io"], "resources": ["workflows"], "verbs": ["get"]}),
            &json!({"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}),
        ]
    );
    let without = objects(&render(&helm, &json!({"spark": {"jobNamespaces": ["a"]}})));
    let plain = find(&without, "Role", "spark-operator-controller-jobs");
    assert_eq!(plain["rules"].as_array().unwrap().len() + 2, rules.len());
    for object in &with {
        for rule in object["rules"].as_array().into_iter().flatten() {
            assert!(!rule["resources"].to_string().contains('*'), "{rule}");
            assert!(!rule["verbs"].to_string().contains('*'), "{rule}");
        }
    }
}

#[test]
fn rbac_is_exactly_what_permissions_yaml_gives() {
    let Some(helm) = Helm::new() else { return };
    check_rbac(&helm, json!({}), &[], &["default"]);
    check_rbac(&helm, json!({"spark": {"jobNamespaces": ["a", "b"]}}), &[], &["a", "b"]);
    check_rbac(&helm, json!({"spark": {"jobNamespaces": [""]}}), &[], &[]);
    check_rbac(
        &helm,
        json!({"spark": {"jobNamespaces": [], "jobNamespaceSelector": "team=spark"}}),
        &["jobNamespaceSelector"],
        &[],
    );
    // The driver PodDisruptionBudget rules only with the feature on.
    check_rbac(
        &helm,
        json!({"controller": {"driverPodDisruptionBudget": {"enable": true}}}),
        &["driverPodDisruptionBudget"],
        &["default"],
    );
    // The PodGroup rules only with batch scheduling on.
    check_rbac(
        &helm,
        json!({"controller": {"batchScheduler": {"enable": true}}}),
        &["batchScheduler"],
        &["default"],
    );
}

#[test]
fn a_misspelled_key_is_refused_by_the_schema() {
    let Some(helm) = Helm::new() else { return };
    let error = helm
        .template(&chart(), RELEASE, NS, &json!({"controller": {"replica": 3}}))
        .expect_err("controller.replica is refused");
    let message = error["error"].as_str().unwrap();
    assert!(message.contains("/controller"), "{message}");
    assert!(message.contains("'replica' not allowed"), "{message}");
}

#[test]
fn renamed_keys_are_refused_with_the_key_to_use() {
    let Some(helm) = Helm::new() else { return };
    let error = helm
        .template(&chart(), RELEASE, NS, &json!({"sparkJobNamespaces": ["jobs"]}))
        .expect_err("sparkJobNamespaces is refused");
    let message = error["error"].as_str().unwrap();
    assert!(message.contains("set spark.jobNamespaces instead"), "{message}");
    let error = helm
        .template(&chart(), RELEASE, NS, &json!({"webhook": {"timeout": 30}}))
        .expect_err("webhook.timeout is refused");
    assert!(
        error["error"].as_str().unwrap().contains("webhook.timeoutSeconds"),
        "{error}"
    );
}

#[test]
fn the_values_table_and_schema_are_current() {
    let check = |dir: &std::path::Path| {
        std::process::Command::new("python3")
            .arg(dir.join("gen-values-table.py"))
            .arg("--check")
            .output()
            .expect("python3 runs")
    };
    let out = check(&chart());
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    // A changed description makes the copy stale, so the check above could fail.
    let copy = tempfile::tempdir().unwrap();
    for file in ["gen-values-table.py", "values.yaml", "README.md", "values.schema.json"] {
        std::fs::copy(chart().join(file), copy.path().join(file)).unwrap();
    }
    let values = std::fs::read_to_string(copy.path().join("values.yaml")).unwrap();
    std::fs::write(
        copy.path().join("values.yaml"),
        values.replace("# -- Image pull policy.", "# -- The image pull policy."),
    )
    .unwrap();
    assert_eq!(check(copy.path()).status.code(), Some(1));
}

/// `spark-operator dev` runs the operator and the agents as the chart's ServiceAccounts with the RBAC it
/// makes from the same list (`spark_operator_dev::identity`): Helm renders exactly those objects for the
/// operator and the agents (labels and annotations aside), with and without the values that change them.
#[test]
fn dev_grants_what_the_chart_renders_for_the_operator_and_the_agents() {
    use spark_operator_dev::identity::{Release, rbac_objects};
    let Some(helm) = Helm::new() else { return };
    let strip = |object: &Value| {
        let mut object = object.clone();
        if let Some(metadata) = object["metadata"].as_object_mut() {
            metadata.remove("labels");
            metadata.remove("annotations");
        }
        object
    };
    let mut release = Release::new(vec!["default".into(), "jobs".into()]);
    for (values, batch, pdb, owners) in [
        (
            json!({"spark": {"jobNamespaces": ["default", "jobs"]}}),
            false,
            false,
            vec![],
        ),
        (
            json!({
                "spark": {"jobNamespaces": ["default", "jobs"]},
                "controller": {"batchScheduler": {"enable": true}, "driverPodDisruptionBudget": {"enable": true}},
                "webhook": {"ownerResources": ["configmaps", "workflows.example.test"]},
            }),
            true,
            true,
            vec!["configmaps".to_owned(), "workflows.example.test".to_owned()],
        ),
    ] {
        release.batch_scheduler = batch;
        release.driver_pdb = pdb;
        release.owner_resources = owners;
        let rendered: Vec<Value> = objects(&render(&helm, &values))
            .iter()
            .filter(|o| o["apiVersion"] == "rbac.authorization.k8s.io/v1")
            .filter(|o| {
                let component = &o["metadata"]["labels"]["app.kubernetes.io/component"];
                component == "operator" || component == "agent"
            })
            .map(strip)
            .collect();
        assert_eq!(rendered, rbac_objects(&release), "{values}");
    }
}
