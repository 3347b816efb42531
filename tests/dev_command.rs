//! `spark-operator dev` (the built binary) as a newcomer runs it: the operator runs as the chart's ServiceAccount,
//! bound by the chart's RBAC only, so the webhook's owner checks answer as on a real cluster (issue 30, fault 2):
//!
//! - a SparkApplication whose owner is in another namespace is refused, with the explanation (Kubernetes looks the
//!   owner up in the application's namespace and garbage-collects the application at once);
//! - one whose owner is missing is refused;
//! - one owned by a ConfigMap in its namespace is admitted (`--owner-resources=configmaps`, as the chart's
//!   `webhook.ownerResources`, lets the operator read ConfigMaps, so the owner is checked in full, without a warning);
//! - one owned by a `Workflow` (a kind of a CRD the test installs, as Argo's) in its namespace is admitted **with a
//!   warning** saying what could not be checked: the chart grants no read of that kind. The warning exists only
//!   because the operator is not the administrator: with `dev` running the operator on the admin kubeconfig (as it
//!   did before), the webhook reads the Workflow and this case fails with "no warning about the Workflow owner"
//!   (seen by running the test with `config_from(Some(cluster.sim.kubeconfig_path()))` for the operator's runtime in
//!   `src/commands/dev.rs`). Control, in the test itself: once the operator is granted `get` on workflows (what
//!   `webhook.ownerResources` would add), the same application is admitted without the warning and a Workflow owner
//!   in another namespace is refused;
//! - with OwnerReferencesPermissionEnforcement on (it is, in `dev`), a submitted application completes: the driver
//!   pod's ownerReference with blockOwnerDeletion needs `update` on `sparkapplications/finalizers`, which the chart
//!   grants (issue 30, fault 1). With `sparkapplications/finalizers` taken out of that rule in
//!   `api/src/permissions.rs`, spark-pi does not reach COMPLETED and this test fails there (seen once).

// Test code: a panic is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Stdio;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DynamicObject, PostParams};
use kube::core::GroupVersionKind;
use serde_json::{Value, json};
use spark_operator_api::SparkApplication;
use tokio::io::{AsyncBufReadExt, BufReader};

/// Only bounds how long a failure takes to show.
const LIMIT: Duration = Duration::from_secs(120);
const JOBS: &str = "default";

/// `spark-operator dev`, stopped by SIGTERM (or killed, if the test panics first).
struct Dev {
    child: tokio::process::Child,
    data_dir: tempfile::TempDir,
}

impl Dev {
    /// Starts it and waits until it says what to try (the cluster and the operator are up by then).
    async fn start(extra: &[&str]) -> Dev {
        let data_dir = tempfile::tempdir().unwrap();
        let stderr = std::fs::File::create(data_dir.path().join("dev.log")).unwrap();
        let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_spark-operator"))
            .arg("dev")
            .arg(format!("--data-dir={}", data_dir.path().join("cluster").display()))
            .args(["--nodes=2", "--metrics-address=off"])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .kill_on_drop(true)
            .spawn()
            .expect("spark-operator dev starts");
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let mut said = String::new();
        let ready = tokio::time::timeout(LIMIT, async {
            while let Some(line) = lines.next_line().await.unwrap() {
                said.push_str(&line);
                said.push('\n');
                if line.contains("Ctrl-C stops everything") {
                    return true;
                }
            }
            false
        })
        .await;
        let dev = Dev { child, data_dir };
        assert!(
            matches!(ready, Ok(true)),
            "spark-operator dev did not get ready; it said:\n{said}\nits log:\n{}",
            dev.log()
        );
        assert!(
            said.contains("runs as the chart's ServiceAccount spark-operator/spark-operator-controller"),
            "{said}"
        );
        assert!(
            said.contains(&format!("export KUBECONFIG={}", dev.kubeconfig().display())),
            "{said}"
        );
        dev
    }

    /// The administrator's kubeconfig, the one it prints.
    fn kubeconfig(&self) -> std::path::PathBuf {
        self.data_dir.path().join("cluster/kubeconfig")
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.data_dir.path().join("dev.log")).unwrap_or_default()
    }

    async fn client(&self) -> kube::Client {
        let config = spark_operator_runtime::client::config_from(Some(&self.kubeconfig()))
            .await
            .unwrap();
        spark_operator_runtime::client::client(config).unwrap()
    }

    /// SIGTERM, as Ctrl-C: it stops everything and exits 0.
    async fn stop(mut self) {
        let pid = self.child.id().unwrap().to_string();
        let signalled = std::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap();
        assert!(signalled.success());
        let status = tokio::time::timeout(LIMIT, self.child.wait())
            .await
            .expect("dev stops on SIGTERM")
            .unwrap();
        assert!(status.success(), "{status}; its log:\n{}", self.log());
    }
}

/// What the API server answered a create: status, the Status message when refused, the Warning headers.
struct Answer {
    status: u16,
    message: String,
    warnings: Vec<String>,
}

/// Creates `app` in the job namespace with dryRun=All (the webhooks are called; nothing is stored, so
/// nothing runs), keeping the answer's Warning headers, which kube-rs's typed API drops.
async fn try_create(client: &kube::Client, app: &Value) -> Answer {
    let request = http::Request::post(format!(
        "/apis/sparkoperator.k8s.io/v1beta2/namespaces/{JOBS}/sparkapplications?dryRun=All"
    ))
    .header("content-type", "application/json")
    .body(serde_json::to_vec(app).unwrap())
    .unwrap();
    let response = client.send(request.map(kube::client::Body::from)).await.unwrap();
    let status = response.status().as_u16();
    let warnings = response
        .headers()
        .get_all("warning")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .map(str::to_owned)
        .collect();
    let body = response.into_body().collect_bytes().await.unwrap();
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    Answer {
        status,
        message: body["message"].as_str().unwrap_or_default().to_owned(),
        warnings,
    }
}

fn app(name: &str, owner: Option<(&str, &str, &str, &str)>) -> Value {
    let mut metadata = json!({
        "name": name,
        "namespace": JOBS,
        "annotations": {"sim.spark-operator.dev/run-time": "2s", "sim.spark-operator.dev/exit-code": "0"},
    });
    if let Some((api_version, kind, name, uid)) = owner {
        metadata["ownerReferences"] = json!([{"apiVersion": api_version, "kind": kind, "name": name, "uid": uid}]);
    }
    json!({
        "apiVersion": "sparkoperator.k8s.io/v1beta2",
        "kind": "SparkApplication",
        "metadata": metadata,
        "spec": {
            "type": "Scala",
            "mode": "cluster",
            "image": "spark:3.5.3",
            "mainClass": "org.apache.spark.examples.SparkPi",
            "mainApplicationFile": "local:///opt/spark/examples/jars/spark-examples.jar",
            "sparkVersion": "3.5.3",
            "driver": {"cores": 1, "memory": "512m", "serviceAccount": "spark-operator-spark"},
            "executor": {"instances": 1, "cores": 1, "memory": "512m"},
        },
    })
}

/// An Argo `Workflow`-like kind the operator has no RBAC for.
async fn install_workflow_crd(client: &kube::Client) -> ApiResource {
    let crd: CustomResourceDefinition = serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "workflows.example.test"},
        "spec": {
            "group": "example.test",
            "scope": "Namespaced",
            "names": {"plural": "workflows", "singular": "workflow", "kind": "Workflow"},
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}},
            }],
        },
    }))
    .unwrap();
    Api::<CustomResourceDefinition>::all(client.clone())
        .create(&PostParams::default(), &crd)
        .await
        .unwrap();
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("example.test", "v1", "Workflow"), "workflows")
}

async fn create_workflow(client: &kube::Client, resource: &ApiResource, namespace: &str, name: &str) -> String {
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, resource);
    let mut workflow = DynamicObject::new(name, resource);
    workflow.data = json!({"spec": {"entrypoint": "main"}});
    // The CRD is served as soon as it is created, but allow for a moment's delay, as on a real server.
    let deadline = Instant::now() + LIMIT;
    loop {
        match api.create(&PostParams::default(), &workflow).await {
            Ok(created) => return created.metadata.uid.unwrap(),
            Err(error) if Instant::now() < deadline => {
                eprintln!("creating Workflow {namespace}/{name}: {error}; retrying");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(error) => panic!("creating Workflow {namespace}/{name}: {error}"),
        }
    }
}

async fn create_config_map(client: &kube::Client, namespace: &str, name: &str) -> String {
    let map: ConfigMap = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
    Api::<ConfigMap>::namespaced(client.clone(), namespace)
        .create(&PostParams::default(), &map)
        .await
        .unwrap()
        .metadata
        .uid
        .unwrap()
}

fn owner_warnings(answer: &Answer) -> Vec<&String> {
    answer
        .warnings
        .iter()
        .filter(|w| w.contains("metadata.ownerReferences"))
        .collect()
}

fn assert_refused_for_its_owner(answer: &Answer, what: &str) {
    assert!(
        !(200..300).contains(&answer.status),
        "{what} was admitted: {:?}",
        answer.warnings
    );
    for expected in [
        "metadata.ownerReferences[0]",
        "is not in namespace \"default\"",
        "garbage-collects this object at once",
    ] {
        assert!(
            answer.message.contains(expected),
            "{what}: {expected} not in {}",
            answer.message
        );
    }
}

/// The job namespace's webhook answers (it is registered fail-closed before its certificate is served).
async fn wait_for_the_webhook(client: &kube::Client, dev: &Dev) {
    let deadline = Instant::now() + LIMIT;
    loop {
        let answer = try_create(client, &app("probe", None)).await;
        if answer.status == 201 {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the webhook never admitted a plain application: {} {}\n{}",
            answer.status,
            answer.message,
            dev.log()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dev_runs_the_operator_as_the_charts_service_account_and_owners_are_checked_as_on_a_real_cluster() {
    let dev = Dev::start(&["--owner-resources=configmaps"]).await;
    let client = dev.client().await;
    wait_for_the_webhook(&client, &dev).await;

    let workflows = install_workflow_crd(&client).await;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "team-b"}})).unwrap(),
        )
        .await
        .unwrap();
    let elsewhere = create_config_map(&client, "team-b", "their-owner").await;
    let local = create_config_map(&client, JOBS, "local-owner").await;
    let workflow = create_workflow(&client, &workflows, JOBS, "nightly").await;

    // An owner in another namespace: refused, with why and what to do.
    let answer = try_create(
        &client,
        &app("foreign", Some(("v1", "ConfigMap", "their-owner", &elsewhere))),
    )
    .await;
    assert_refused_for_its_owner(&answer, "an application owned by a ConfigMap of another namespace");
    assert!(
        answer.message.contains("create this object in its owner's namespace"),
        "{}",
        answer.message
    );

    // A missing owner: refused.
    let answer = try_create(
        &client,
        &app(
            "orphan",
            Some(("v1", "ConfigMap", "gone", "0d9f7a52-6a0c-4b8e-9a43-000000000000")),
        ),
    )
    .await;
    assert_refused_for_its_owner(&answer, "an application whose owner does not exist");

    // An owner in its namespace, of a kind the operator may read: admitted, nothing to warn about.
    let answer = try_create(&client, &app("local", Some(("v1", "ConfigMap", "local-owner", &local)))).await;
    assert_eq!(answer.status, 201, "{}", answer.message);
    assert!(owner_warnings(&answer).is_empty(), "{:?}", answer.warnings);

    // An owner in its namespace of a kind the chart's RBAC does not let the operator read: admitted, with a
    // warning that says what could not be checked (with the operator as admin there is none: see the top).
    let owned_by_workflow = app(
        "by-workflow",
        Some(("example.test/v1", "Workflow", "nightly", &workflow)),
    );
    let answer = try_create(&client, &owned_by_workflow).await;
    assert_eq!(answer.status, 201, "{}", answer.message);
    let warnings = owner_warnings(&answer);
    assert_eq!(
        warnings.len(),
        1,
        "no warning about the Workflow owner: {:?}",
        answer.warnings
    );
    for expected in [
        "could not check that the owner example.test/v1 Workflow/nightly exists in namespace",
        "as the operator may not read that kind",
        "webhook.ownerResources",
    ] {
        assert!(warnings[0].contains(expected), "{expected} not in {}", warnings[0]);
    }
    // The webhook asked a SelfSubjectAccessReview as the chart's ServiceAccount rather than GET and be refused.
    assert!(
        warnings[0].contains(r#"its RBAC does not allow get on \"workflows\" in API group \"example.test\""#),
        "the warning says which read the operator lacks: {}",
        warnings[0]
    );

    // Control: what `webhook.ownerResources: [workflows.example.test]` adds, granted by the administrator. The
    // warning goes, and a Workflow owner in another namespace is now refused: it was the missing read.
    grant_workflow_reads(&client).await;
    let deadline = Instant::now() + LIMIT;
    loop {
        let answer = try_create(&client, &owned_by_workflow).await;
        assert_eq!(answer.status, 201, "{}", answer.message);
        if owner_warnings(&answer).is_empty() {
            break;
        }
        assert!(Instant::now() < deadline, "still warned about: {:?}", answer.warnings);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let theirs = create_workflow(&client, &workflows, "team-b", "their-workflow").await;
    let answer = try_create(
        &client,
        &app(
            "foreign-workflow",
            Some(("example.test/v1", "Workflow", "their-workflow", &theirs)),
        ),
    )
    .await;
    assert_refused_for_its_owner(&answer, "an application owned by a Workflow of another namespace");

    // A real submission with OwnerReferencesPermissionEnforcement on: the driver pod is owned by its application
    // with blockOwnerDeletion, which the chart's finalizers rule allows.
    let apps: Api<SparkApplication> = Api::namespaced(client.clone(), JOBS);
    let spark_pi: SparkApplication = serde_json::from_value(app("spark-pi", None)).unwrap();
    apps.create(&PostParams::default(), &spark_pi).await.unwrap();
    let deadline = Instant::now() + LIMIT;
    let state = loop {
        let state = apps
            .get("spark-pi")
            .await
            .unwrap()
            .status
            .and_then(|s| serde_json::to_value(s.application_state.state).ok())
            .and_then(|s| s.as_str().map(str::to_owned))
            .unwrap_or_default();
        if state == "COMPLETED" || state.contains("FAIL") {
            break state;
        }
        assert!(
            Instant::now() < deadline,
            "spark-pi is {state:?}; dev's log:\n{}",
            dev.log()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(state, "COMPLETED", "dev's log:\n{}", dev.log());

    dev.stop().await;
}

/// A Role letting the operator's ServiceAccount read Workflows in the job namespace, as the chart makes one
/// for `webhook.ownerResources`.
async fn grant_workflow_reads(client: &kube::Client) {
    let role: Role = serde_json::from_value(json!({
        "metadata": {"name": "read-workflows"},
        "rules": [{"apiGroups": ["example.test"], "resources": ["workflows"], "verbs": ["get"]}],
    }))
    .unwrap();
    Api::<Role>::namespaced(client.clone(), JOBS)
        .create(&PostParams::default(), &role)
        .await
        .unwrap();
    let binding: RoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "read-workflows"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "read-workflows"},
        "subjects": [{"kind": "ServiceAccount", "name": "spark-operator-controller", "namespace": "spark-operator"}],
    }))
    .unwrap();
    Api::<RoleBinding>::namespaced(client.clone(), JOBS)
        .create(&PostParams::default(), &binding)
        .await
        .unwrap();
}
