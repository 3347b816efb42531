//! Every example in Kubeflow's repository (`tests/fixtures/kubeflow-examples/`, copied unchanged), each in
//! its own namespace, as a user migrating from Kubeflow would run them on `spark-operator dev`: the
//! ConfigMaps and Secrets they expect created, the Prometheus template's placeholders filled in, the
//! scheduled example's `@every 3m` shortened. Every SparkApplication reaches a terminal state: the Volcano
//! one through the integration (its PodGroup admitted by the sim's gang scheduler, then deleted), the
//! YuniKorn one and the kube-scheduler one with a failure that says what is missing.

use std::collections::BTreeMap;
use std::time::Duration;

use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, PostParams};
use serde_json::{Value, json};
use spark_operator_api::ApplicationStateType as S;
use spark_operator_api::scheduled::ScheduledSparkApplication;
use spark_operator_e2e::{Cluster, ClusterOptions, Poll, kubeflow_examples, poll, state};

const LIMIT: Duration = Duration::from_secs(150);

fn resource_of(object: &Value) -> ApiResource {
    let api_version = object["apiVersion"].as_str().unwrap_or_default();
    let kind = object["kind"].as_str().unwrap_or_default();
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    let plural = match kind {
        "ConfigMap" => "configmaps".to_owned(),
        "Secret" => "secrets".to_owned(),
        other => format!("{}s", other.to_lowercase()),
    };
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), &plural)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_kubeflow_example_reaches_a_terminal_state() {
    let examples = kubeflow_examples();
    let namespaces: Vec<String> = examples.iter().map(|(stem, _)| format!("ex-{stem}")).collect();
    let cluster = Cluster::start(ClusterOptions {
        job_namespaces: namespaces.clone(),
        volcano: kube_sim::node::Volcano::Gang,
        ..ClusterOptions::default()
    })
    .await;
    // As `spark-operator dev` runs it: batch scheduling on (Volcano installed); no kube-scheduler
    // names, as Kubeflow's chart; a short start timeout, so a pod no scheduler looks at fails quickly.
    let _controller = cluster.controller(cluster.args(&["--enable-batch-scheduler", "--driver-start-timeout=15"]));

    let mut apps: Vec<(String, String)> = Vec::new();
    let mut schedules: Vec<(String, String)> = Vec::new();
    let mut skipped = Vec::new();
    for ((stem, docs), namespace) in examples.iter().zip(&namespaces) {
        // spark-pi-configmap mounts the ConfigMap spark-pi-pod-template brings along.
        if stem == "spark-pi-configmap" {
            let configmaps: Api<k8s_openapi::api::core::v1::ConfigMap> =
                Api::namespaced(cluster.client.clone(), namespace);
            configmaps
                .create(
                    &PostParams::default(),
                    &serde_json::from_value(
                        json!({"metadata": {"name": "test-configmap"}, "data": {"KEY1": "VALUE1"}}),
                    )
                    .expect("a ConfigMap"),
                )
                .await
                .expect("the ConfigMap the example mounts");
        }
        for doc in docs {
            let mut doc = doc.clone();
            let kind = doc["kind"].as_str().unwrap_or_default().to_owned();
            if kind == "SparkConnect" {
                // Kubeflow's v1alpha1 Spark Connect server: not a SparkApplication, not supported here.
                skipped.push(stem.clone());
                continue;
            }
            doc["metadata"]["namespace"] = json!(namespace);
            if kind == "ScheduledSparkApplication" {
                doc["spec"]["schedule"] = json!("@every 5s");
            }
            let name = doc["metadata"]["name"].as_str().unwrap_or_default().to_owned();
            let api: Api<DynamicObject> = Api::namespaced_with(cluster.client.clone(), namespace, &resource_of(&doc));
            let object: DynamicObject = serde_json::from_value(doc).expect("an object");
            api.create(&PostParams::default(), &object)
                .await
                .unwrap_or_else(|e| panic!("{stem}: creating {kind} {name}: {e}"));
            match kind.as_str() {
                "SparkApplication" => apps.push((namespace.clone(), name)),
                "ScheduledSparkApplication" => schedules.push((namespace.clone(), name)),
                _ => {}
            }
        }
    }
    assert_eq!(skipped, vec!["sparkconnect-spark-connect".to_owned()]);

    // The scheduled example's first run ends: its schedule lists it among the past runs (the run itself
    // is pruned by the history limit once a later one ends, so the schedule's record is what is read).
    for (namespace, name) in &schedules {
        let api: Api<ScheduledSparkApplication> = Api::namespaced(cluster.client.clone(), namespace);
        let first = poll(LIMIT, || async {
            match api.get(name).await.ok().and_then(|s| s.status) {
                Some(s) if !s.last_run_name.is_empty() => Poll::Done(s.last_run_name),
                _ => Poll::Pending(()),
            }
        })
        .await
        .unwrap_or_else(|()| panic!("{namespace}/{name}: no first run"));
        let outcome = poll(LIMIT, || async {
            let status = api.get(name).await.ok().and_then(|s| s.status);
            match status {
                Some(s) if s.past_successful_run_names.contains(&first) => Poll::Done(S::Completed),
                Some(s) if s.past_failed_run_names.contains(&first) => Poll::Done(S::Failed),
                other => Poll::Pending(other),
            }
        })
        .await
        .unwrap_or_else(|last| panic!("{namespace}/{name}: its first run {first} did not end: {last:#?}"));
        assert_eq!(outcome, S::Completed, "{namespace}/{name}: its first run {first}");
    }

    let mut ended: BTreeMap<String, (S, String)> = BTreeMap::new();
    for (namespace, name) in &apps {
        let api = cluster.apps(namespace);
        // The TTL example deletes itself 30 s after it ends: its terminal state is seen before that.
        let app = poll(LIMIT, || async {
            match api.get_opt(name).await.ok().flatten() {
                Some(app) if state(&app).is_terminal() => Poll::Done(app),
                other => Poll::Pending(other.and_then(|a| a.status)),
            }
        })
        .await
        .unwrap_or_else(|last| panic!("{namespace}/{name} did not end; last status: {last:#?}"));
        let status = app.status.clone().unwrap_or_default();
        let mut message = status.application_state.error_message.clone();
        // The driver's own words, for a failure that was not expected.
        if let Some(pod) =
            Some(status.driver_info.pod_name.as_str()).filter(|p| !p.is_empty() && state(&app) == S::Failed)
        {
            let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(cluster.client.clone(), namespace);
            if let Ok(log) = pods.logs(pod, &Default::default()).await {
                message.push_str(&format!("\n--- driver log ---\n{log}"));
            }
        }
        ended.insert(format!("{namespace}/{name}"), (state(&app), message));
    }

    for (app, (end, message)) in &ended {
        if app.starts_with("ex-spark-pi-yunikorn/") {
            assert_eq!(*end, S::Failed, "{app}");
            assert!(
                message.contains("\"yunikorn\""),
                "{app}: says which scheduler is missing: {message}"
            );
        } else if app.starts_with("ex-spark-pi-kube-scheduler/") {
            assert_eq!(*end, S::Failed, "{app}");
            assert!(message.contains("spec.batchScheduler"), "{app}: {message}");
        } else {
            assert_eq!(*end, S::Completed, "{app}: {message}");
        }
    }

    // The Volcano example ran through its PodGroup, deleted once it ended.
    let groups: Api<DynamicObject> = Api::namespaced_with(
        cluster.client.clone(),
        "ex-spark-pi-volcano",
        &spark_operator_controller::submission::pod_group::volcano_resource(),
    );
    let driver: k8s_openapi::api::core::v1::Pod = Api::namespaced(cluster.client.clone(), "ex-spark-pi-volcano")
        .get("spark-pi-volcano-driver")
        .await
        .expect("the Volcano example's driver pod");
    let annotations = driver.metadata.annotations.unwrap_or_default();
    assert_eq!(
        annotations.get("scheduling.k8s.io/group-name").map(String::as_str),
        Some("spark-spark-pi-volcano-pg")
    );
    assert_eq!(driver.spec.and_then(|s| s.scheduler_name).as_deref(), Some("volcano"));
    poll(Duration::from_secs(30), || async {
        match groups.get_opt("spark-spark-pi-volcano-pg").await {
            Ok(None) => Poll::Done(()),
            _ => Poll::Pending(()),
        }
    })
    .await
    .unwrap_or_else(|()| panic!("the Volcano example's PodGroup was not deleted when it ended"));
}

/// Kubeflow's own e2e example of an application that must fail (a main class and a jar the image does not
/// have, `onFailureRetries: 3`): every attempt fails as Spark fails it in a driver pod (copying the missing
/// jar into the working directory throws: exit 1, as real Spark 4.3 and 3.5 do in `tests/real_spark.rs`),
/// and it ends FAILED after four, with the driver's exit code and reason in status.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubeflows_failing_example_fails_every_attempt_as_spark_does() {
    let cluster = Cluster::start(ClusterOptions::default()).await;
    let _controller = cluster.controller(cluster.args(&[]));
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/kubeflow-bad-examples/fail-application.yaml");
    let yaml = std::fs::read_to_string(path).expect("Kubeflow's failing example");
    let app = cluster.create_app(&yaml).await;
    let name = app.metadata.name.clone().unwrap_or_default();
    let app = cluster
        .wait_app("default", &name, LIMIT, |a| state(a).is_terminal())
        .await;
    let status = app.status.clone().unwrap_or_default();
    assert_eq!(state(&app), S::Failed, "{status:#?}");
    assert_eq!(status.execution_attempts, 4, "the first run and its 3 retries");
    let driver = status.driver_termination.clone().expect("the driver's end");
    assert_eq!(
        driver.exit_code,
        Some(1),
        "spark-submit's exit code for the copy's uncaught exception"
    );
    assert_eq!(driver.reason.as_deref(), Some("Error"));
    assert!(
        status
            .application_state
            .error_message
            .contains("exited with code 1 (Error)"),
        "{}",
        status.application_state.error_message
    );
}
