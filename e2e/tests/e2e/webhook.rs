//! The admission webhook on the simulated cluster, which calls it over HTTPS with the caBundle the
//! webhook keeps, as kube-apiserver does:
//!
//! - spec mistakes and foreign owners are refused at create, with every error and its path (through
//!   kubectl too), a same-namespace owner is admitted, and Kubeflow's examples are admitted;
//! - a rich application's executors get every setting from the webhook alone (template path off);
//! - **deleted applications**, trials where the application is deleted while its driver creates
//!   executors, three ways: webhook on with the template off (every executor fully configured or
//!   refused), template only (only the documented gaps), and webhook registered but down with
//!   `failurePolicy: Ignore` and the template off (half-configured pods appear: the test can fail).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use serde::Deserialize as _;
use serde_json::Value;
use spark_operator_api::SparkApplication;
use spark_operator_e2e::{Cluster, ClusterOptions, app_yaml, free_port};

const LIMIT: Duration = Duration::from_secs(120);

/// The Kubeflow examples every one of which is admitted: the ten of the project's reference folder
/// (`../shared/fixtures/kubeflow-examples`, of which `tests/fixtures/kubeflow-examples` holds identical copies
/// beside Kubeflow's other examples).
const ADMITTED_EXAMPLES: [&str; 10] = [
    "spark-pi-configmap.yaml",
    "spark-pi-custom-resource.yaml",
    "spark-pi-dynamic-allocation.yaml",
    "spark-pi-pod-template.yaml",
    "spark-pi-prometheus.yaml",
    "spark-pi-python.yaml",
    "spark-pi-scheduled.yaml",
    "spark-pi-ttl.yaml",
    "spark-pi-volcano.yaml",
    "spark-pi.yaml",
];

async fn create_err(cluster: &Cluster, yaml: &str) -> Option<String> {
    let app: SparkApplication = serde_yaml::from_str(yaml).expect("a manifest");
    match cluster.apps("default").create(&PostParams::default(), &app).await {
        Ok(_) => None,
        Err(kube::Error::Api(status)) => Some(status.message),
        Err(other) => Some(other.to_string()),
    }
}

const FIVE_MISTAKES: &str = r#"apiVersion: sparkoperator.k8s.io/v1beta2
kind: SparkApplication
metadata:
  name: five-mistakes
  namespace: default
spec:
  type: Scala
  mode: cluster
  image: docker.io/apache/spark:4.0.4
  mainClass: org.apache.spark.examples.SparkPi
  mainApplicationFile: local:///opt/spark/examples/jars/spark-examples.jar
  sparkVersion: 4.0.4
  sparkConf:
    spark.master: "local[*]"
  nodeSelector:
    disktype: ssd
  dynamicAllocation:
    enabled: true
    minExecutors: 5
    maxExecutors: 2
  driver:
    cores: 1
    memory: 512 megabytes
    nodeSelector:
      zone: a
  executor:
    instances: 1
    cores: 1
    memory: lots
"#;
const FIVE_PATHS: [&str; 5] = [
    "spec.sparkConf[spark.master]",
    "spec.nodeSelector",
    "spec.dynamicAllocation",
    "spec.driver.memory",
    "spec.executor.memory",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mistakes_and_foreign_owners_are_refused_at_create_and_kubeflow_examples_admitted() {
    let cluster = Cluster::start(ClusterOptions {
        nodes: 0,
        ..ClusterOptions::default()
    })
    .await;
    let _webhook = cluster.webhook().await;

    let message = create_err(&cluster, FIVE_MISTAKES)
        .await
        .expect("five mistakes are refused");
    for path in FIVE_PATHS {
        assert!(message.contains(path), "{path} in: {message}");
    }
    // kubectl shows the same, as users see it at `kubectl apply`.
    if let Ok(output) = std::process::Command::new("kubectl")
        .args([
            "--kubeconfig",
            &cluster.sim.kubeconfig_path().display().to_string(),
            "apply",
            "-f",
            "-",
        ])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut child| {
            use std::io::Write as _;
            if let Some(stdin) = child.stdin.as_mut() {
                stdin.write_all(FIVE_MISTAKES.as_bytes())?;
            }
            child.wait_with_output()
        })
    {
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "kubectl apply succeeded: {stderr}");
        for path in FIVE_PATHS {
            assert!(stderr.contains(path), "{path} in kubectl's output: {stderr}");
        }
    } else {
        eprintln!("kubectl is not on PATH: the kubectl half of this check is skipped");
    }

    // An owner in another namespace: Kubernetes would garbage-collect the application at once.
    let owned = |name: &str, owner: &str, uid: &str| {
        app_yaml(name, "1s", 0, 1, "").replace(
            "  namespace: default\n",
            &format!(
                "  namespace: default\n  ownerReferences:\n  - {{apiVersion: v1, kind: ConfigMap, name: {owner}, uid: {uid}}}\n"
            ),
        )
    };
    let config_maps: Api<ConfigMap> = Api::namespaced(cluster.client.clone(), "default");
    let local: ConfigMap = serde_json::from_value(serde_json::json!({"metadata": {"name": "local-owner"}})).unwrap();
    let local = config_maps.create(&PostParams::default(), &local).await.unwrap();
    let elsewhere: ConfigMap =
        serde_json::from_value(serde_json::json!({"metadata": {"name": "remote-owner"}})).unwrap();
    let remote = Api::<ConfigMap>::namespaced(cluster.client.clone(), "kube-system")
        .create(&PostParams::default(), &elsewhere)
        .await
        .unwrap();
    let refused = create_err(
        &cluster,
        &owned("foreign", "remote-owner", remote.metadata.uid.as_deref().unwrap()),
    )
    .await
    .expect("a foreign owner is refused");
    assert!(
        refused.contains("metadata.ownerReferences[0]") && refused.contains("garbage-collects"),
        "{refused}"
    );
    let missing = create_err(&cluster, &owned("orphan", "nobody", "0000"))
        .await
        .expect("a missing owner is refused");
    assert!(missing.contains("is not in namespace"), "{missing}");
    assert_eq!(
        create_err(
            &cluster,
            &owned("local", "local-owner", local.metadata.uid.as_deref().unwrap())
        )
        .await,
        None
    );

    // Every Kubeflow example is admitted.
    let examples = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/kubeflow-examples");
    let mut admitted = 0;
    for file in ADMITTED_EXAMPLES {
        let path = examples.join(file);
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
            .replace("{IMAGE_REGISTRY}", "registry.example.com")
            .replace("{IMAGE_REPOSITORY}", "spark")
            .replace("{IMAGE_TAG}", "4.0.4");
        // Each example in a namespace of its own: several share names.
        let namespace = format!("ex-{}", path.file_stem().unwrap().to_string_lossy());
        let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(cluster.client.clone());
        let ns = serde_json::from_value(serde_json::json!({"metadata": {"name": namespace}})).unwrap();
        namespaces.create(&PostParams::default(), &ns).await.unwrap();
        for document in serde_yaml::Deserializer::from_str(&text) {
            let mut object = Value::deserialize(document).unwrap();
            object["metadata"]["namespace"] = Value::from(namespace.clone());
            let kind = object["kind"].as_str().unwrap_or_default().to_owned();
            let api_version = object["apiVersion"].as_str().unwrap_or_default().to_owned();
            if !api_version.starts_with("sparkoperator.k8s.io/") {
                // What the example needs beside it (a ConfigMap, a Secret), of whatever kind it is.
                let (group, version) = api_version.split_once('/').unwrap_or(("", &api_version));
                let gvk = kube::core::GroupVersionKind::gvk(group, version, &kind);
                let (resource, _) = kube::discovery::pinned_kind(&cluster.client, &gvk).await.unwrap();
                let api: Api<kube::api::DynamicObject> =
                    Api::namespaced_with(cluster.client.clone(), &namespace, &resource);
                let object: kube::api::DynamicObject = serde_json::from_value(object).unwrap();
                api.create(&PostParams::default(), &object).await.unwrap();
                continue;
            }
            let resource = kube::api::ApiResource {
                group: "sparkoperator.k8s.io".into(),
                version: "v1beta2".into(),
                api_version: "sparkoperator.k8s.io/v1beta2".into(),
                plural: format!("{}s", kind.to_lowercase()),
                kind,
            };
            let api: Api<kube::api::DynamicObject> =
                Api::namespaced_with(cluster.client.clone(), &namespace, &resource);
            let object: kube::api::DynamicObject = serde_json::from_value(object).unwrap();
            api.create(&PostParams::default(), &object)
                .await
                .unwrap_or_else(|e| panic!("{} is refused: {e}", path.display()));
            admitted += 1;
        }
    }
    assert_eq!(admitted, 10);

    // A sample of the bad-manifest corpus, through the API server: each one refused (by the schema or by
    // the webhook), naming one of the fields its file expects.
    let corpus = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../api/tests/bad-manifests");
    let mut files: Vec<_> = std::fs::read_dir(&corpus).unwrap().map(|e| e.unwrap().path()).collect();
    files.sort();
    let mut tried = 0;
    for path in files.iter().step_by(7) {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        let expected: Vec<String> = text
            .lines()
            .filter_map(|l| l.strip_prefix("# expect: "))
            .map(|l| l.split_whitespace().next().unwrap_or_default().to_owned())
            .collect();
        // Only single objects of our kinds (the corpus also holds unreadable inputs for `validate`).
        let Ok(object) = serde_yaml::from_str::<Value>(&text) else {
            continue;
        };
        let kind = object["kind"].as_str().unwrap_or_default().to_owned();
        if expected.is_empty()
            || object["apiVersion"] != "sparkoperator.k8s.io/v1beta2"
            || !matches!(kind.as_str(), "SparkApplication" | "ScheduledSparkApplication")
            || !object["metadata"]["name"].is_string()
        {
            continue;
        }
        let resource = kube::api::ApiResource {
            group: "sparkoperator.k8s.io".into(),
            version: "v1beta2".into(),
            api_version: "sparkoperator.k8s.io/v1beta2".into(),
            plural: format!("{}s", kind.to_lowercase()),
            kind,
        };
        let api: Api<kube::api::DynamicObject> = Api::namespaced_with(cluster.client.clone(), "default", &resource);
        let Ok(object) = serde_json::from_value::<kube::api::DynamicObject>(object) else {
            continue;
        };
        let dry = PostParams {
            dry_run: true,
            ..PostParams::default()
        };
        match api.create(&dry, &object).await {
            Ok(_) => panic!("{} was admitted", path.display()),
            // The schema names a map key `a.b` where `validate` writes `a[b]`: either form names the field.
            Err(kube::Error::Api(status)) => assert!(
                expected.iter().any(|field| {
                    let field = field.trim_end_matches(':');
                    let dotted = field.replace('[', ".").replace(']', "");
                    status.message.contains(field) || status.message.contains(&dotted)
                }),
                "{}: {} names none of {expected:?}",
                path.display(),
                status.message
            ),
            Err(other) => panic!("{}: {other}", path.display()),
        }
        tried += 1;
    }
    assert!(tried >= 20, "only {tried} corpus manifests were sent");
}

/// How a trial runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// The webhook registered fail-closed and running; the executor template off.
    WebhookOnly,
    /// No webhook; the executor template on.
    TemplateOnly,
    /// The webhook registered with `failurePolicy: Ignore` but not running; the template off.
    WebhookDownIgnored,
}

/// What the executor pods of the trials carried when they were created.
#[derive(Debug, Default)]
struct Outcome {
    /// Every setting, the webhook-only ones included.
    complete: usize,
    /// Every setting that survives Spark's template handling, but not the webhook-only memory limit.
    template_gaps_only: usize,
    /// Missing a setting that even the template carries: half-configured.
    half_configured: usize,
    /// Executor creations the webhook denied, from the drivers' logs.
    refused: usize,
}

/// The trial application: executors created one a second (so the deletion lands mid-creation), with
/// settings the checks below look for.
fn trial_app(name: &str) -> String {
    let base = app_yaml(name, "40s", 0, 8, "");
    base.replace(
        "  executor:\n    instances: 8\n",
        "  sparkConf:\n    spark.kubernetes.allocation.batch.size: \"1\"\n  volumes:\n  - {name: scratch, emptyDir: {}}\n  executor:\n    instances: 8\n    memoryLimit: 1g\n    env:\n    - {name: TRIAL_TEAM, value: data}\n    tolerations:\n    - {key: trial, operator: Exists}\n    volumeMounts:\n    - {name: scratch, mountPath: /scratch}\n",
    )
}

fn classify(pod: &Value, outcome: &mut Outcome) {
    let containers = pod["spec"]["containers"].as_array().cloned().unwrap_or_default();
    let spark = containers
        .iter()
        .find(|c| c["name"] == "spark-kubernetes-executor")
        .cloned()
        .unwrap_or_default();
    let env = spark["env"].to_string();
    let survives = env.contains("TRIAL_TEAM")
        && pod["spec"]["tolerations"].to_string().contains("\"trial\"")
        && spark["volumeMounts"].to_string().contains("/scratch");
    let memory_limit =
        spark["resources"]["limits"]["memory"] == "1Gi" || spark["resources"]["limits"]["memory"] == "1g";
    match (survives, memory_limit) {
        (true, true) => outcome.complete += 1,
        (true, false) => outcome.template_gaps_only += 1,
        _ => outcome.half_configured += 1,
    }
}

fn trials() -> usize {
    if std::env::var("SPARK_E2E_FULL").is_ok_and(|v| v == "1") {
        1000
    } else {
        100
    }
}

/// One wave of trials: the applications are created, and each is deleted (`--cascade=orphan`, leaving its
/// driver behind to go on creating executors for an application that is gone) once its driver has begun
/// creating executors; then the drivers are given a few seconds.
async fn run_wave(cluster: &Cluster, created: &Mutex<BTreeMap<String, Value>>, wave: &[String]) {
    for app in wave {
        cluster.create_app(&trial_app(app)).await;
    }
    let apps = cluster.apps("default");
    let mut deleted = std::collections::BTreeSet::new();
    let orphan = DeleteParams {
        propagation_policy: Some(kube::api::PropagationPolicy::Orphan),
        ..DeleteParams::default()
    };
    let deadline = tokio::time::Instant::now() + LIMIT;
    while deleted.len() < wave.len() {
        let started: Vec<String> = {
            let created = created.lock().unwrap();
            created
                .values()
                .filter_map(|p| {
                    p["metadata"]["labels"]["sparkoperator.k8s.io/app-name"]
                        .as_str()
                        .map(str::to_owned)
                })
                .filter(|app| wave.contains(app))
                .collect()
        };
        for app in started {
            if deleted.insert(app.clone()) {
                let _ = apps.delete(&app, &orphan).await;
            }
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "only {} of {} trials' drivers created an executor",
            deleted.len(),
            wave.len()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The orphaned drivers keep creating executors for a few seconds.
    tokio::time::sleep(Duration::from_secs(6)).await;
}

async fn run_trials(mode: Mode) -> Outcome {
    let cluster = Cluster::start(ClusterOptions::big()).await;
    let template = if mode == Mode::TemplateOnly { "true" } else { "false" };
    let _controller = cluster.controller(cluster.args(&[&format!("--executor-template={template}")]));
    let _webhook = match mode {
        Mode::WebhookOnly => Some(cluster.webhook().await),
        Mode::WebhookDownIgnored => {
            cluster.register_webhook(free_port(), "Ignore").await;
            None
        }
        Mode::TemplateOnly => None,
    };

    // Every executor pod as it was created.
    let created: Arc<Mutex<BTreeMap<String, Value>>> = Arc::default();
    let seen = created.clone();
    let pods: Api<Pod> = Api::namespaced(cluster.client.clone(), "default");
    tokio::spawn(async move {
        let mut events =
            std::pin::pin!(watcher(pods, watcher::Config::default().labels("spark-role=executor")).touched_objects());
        while let Some(event) = events.next().await {
            let Ok(pod) = event else { continue };
            let name = pod.metadata.name.clone().unwrap_or_default();
            let value = serde_json::to_value(&pod).unwrap_or_default();
            seen.lock().unwrap().entry(name).or_insert(value);
        }
    });

    // Trials run in waves of at most 100 applications, so the full run (1,000) keeps the cluster the
    // size of the CI run; each wave's pods are deleted once they have been judged.
    let count = trials();
    let mut outcome = Outcome::default();
    let mut first = 0;
    while first < count {
        let wave: Vec<String> = (first..count.min(first + 100)).map(|i| format!("trial-{i}")).collect();
        run_wave(&cluster, &created, &wave).await;
        let drivers: Api<Pod> = Api::namespaced(cluster.client.clone(), "default");
        for app in &wave {
            // Refusals, as the drivers saw them (Spark logs the API server's answer to a failed executor
            // request).
            if let Ok(log) = drivers.logs(&format!("{app}-driver"), &Default::default()).await {
                outcome.refused += log.matches("denied the request").count();
            }
            let pods = ListParams::default().labels(&format!("sparkoperator.k8s.io/app-name={app}"));
            let _ = drivers.delete_collection(&DeleteParams::default(), &pods).await;
        }
        first += wave.len();
    }
    for pod in created.lock().unwrap().values() {
        classify(pod, &mut outcome);
    }
    println!("{mode:?}, {count} trials: {outcome:?}");
    let listed = cluster
        .apps("default")
        .list(&ListParams::default())
        .await
        .map(|l| l.items.len())
        .unwrap_or(0);
    assert_eq!(listed, 0, "every trial application was deleted");
    outcome
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_webhook_no_executor_of_a_deleted_application_is_half_configured() {
    let outcome = run_trials(Mode::WebhookOnly).await;
    assert_eq!(outcome.half_configured + outcome.template_gaps_only, 0, "{outcome:?}");
    assert!(outcome.complete > 0, "{outcome:?}");
    assert!(
        outcome.refused > 0,
        "the drivers never tried to create executors after the deletion: {outcome:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_template_alone_executors_miss_only_the_documented_gaps() {
    let outcome = run_trials(Mode::TemplateOnly).await;
    assert_eq!(outcome.half_configured, 0, "{outcome:?}");
    assert!(outcome.template_gaps_only > 0, "{outcome:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_webhook_down_and_ignored_half_configured_executors_appear() {
    let outcome = run_trials(Mode::WebhookDownIgnored).await;
    assert!(
        outcome.half_configured > 0,
        "the trials cannot tell a half-configured pod: {outcome:?}"
    );
}
