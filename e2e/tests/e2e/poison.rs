//! One bad object never stops the others: applications the controller cannot decode (stored under an
//! older, looser CRD), one whose reconcile panics (the `test-hooks` feature), a forged executor pod and an
//! application the API server refuses, next to a good application, with a controller restart in between.
//! The good application completes with exactly its own executor counted; the controller never stops; the
//! bad ones carry a readable condition naming the field; `/readyz` tells the truth; no message anywhere
//! reads like Rust `Debug`.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Event, Pod};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ListParams, PostParams};
use kube_sim::faults::{FaultAction, FaultRule};
use serde_json::{Value, json};
use spark_operator_api::{ApplicationStateType as S, SparkApplication};
use spark_operator_e2e::{Cluster, ClusterOptions, Poll, app_yaml, free_port, http_get as get, metric, poll, state};

const LIMIT: Duration = Duration::from_secs(90);
const DEBUG_MARKS: [&str; 3] = ["Some(", "Status {", "ApiError"];

/// The CRD as an older release might have had it: no bounds at all.
fn loosened(mut value: Value) -> Value {
    match &mut value {
        Value::Object(map) => {
            for key in [
                "maximum",
                "minimum",
                "exclusiveMaximum",
                "exclusiveMinimum",
                "maxLength",
                "pattern",
                "format",
            ] {
                map.remove(key);
            }
            for child in map.values_mut() {
                *child = loosened(child.take());
            }
        }
        Value::Array(items) => {
            for item in items {
                *item = loosened(item.take());
            }
        }
        _ => {}
    }
    value
}

/// Replaces the CRD whole (an apply by another field manager would keep the fields the first one set).
async fn install_crd(cluster: &Cluster, crd: &CustomResourceDefinition) {
    let crds: Api<CustomResourceDefinition> = Api::all(cluster.client.clone());
    let name = crd.metadata.name.clone().unwrap();
    let current = crds.get(&name).await.expect("the CRD is installed");
    let mut replacement = crd.clone();
    replacement.metadata.resource_version = current.metadata.resource_version;
    crds.replace(&name, &PostParams::default(), &replacement)
        .await
        .expect("the CRD is replaced");
}

/// Creates a SparkApplication from raw JSON (the Rust types cannot hold the poison ones).
async fn create_raw(cluster: &Cluster, object: Value) {
    let api: Api<kube::api::DynamicObject> = Api::namespaced_with(
        cluster.client.clone(),
        "default",
        &kube::api::ApiResource::erase::<SparkApplication>(&()),
    );
    let object = serde_json::from_value(object).unwrap();
    api.create(&PostParams::default(), &object)
        .await
        .expect("the API server accepts it");
}

fn raw_app(name: &str) -> Value {
    let app: Value = serde_yaml::from_str(&app_yaml(name, "3s", 0, 1, "")).unwrap();
    app
}

/// The conditions of an application read raw: (type, status, reason, message).
async fn conditions(cluster: &Cluster, name: &str) -> Vec<(String, String, String, String)> {
    let api: Api<kube::api::DynamicObject> = Api::namespaced_with(
        cluster.client.clone(),
        "default",
        &kube::api::ApiResource::erase::<SparkApplication>(&()),
    );
    let Ok(object) = api.get(name).await else {
        return Vec::new();
    };
    object.data["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| {
            let text = |k: &str| c[k].as_str().unwrap_or_default().to_owned();
            (text("type"), text("status"), text("reason"), text("message"))
        })
        .collect()
}

async fn wait_condition(cluster: &Cluster, name: &str, type_: &str) -> (String, String, String, String) {
    poll(LIMIT, || async {
        let found = conditions(cluster, name)
            .await
            .into_iter()
            .find(|c| c.0 == type_ && c.1 == "True");
        match found {
            Some(c) => Poll::Done(c),
            None => Poll::Pending(conditions(cluster, name).await),
        }
    })
    .await
    .unwrap_or_else(|last| panic!("{name} never got {type_}: {last:?}"))
}

async fn readyz(port: u16) -> Option<u16> {
    get(port, "/readyz").await.map(|(code, _)| code)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn poison_objects_are_contained_and_the_good_application_completes_across_a_restart() {
    let cluster = Cluster::start(ClusterOptions::default()).await;
    let current = spark_operator_api::crd::all_crds()
        .into_iter()
        .find(|c| c.metadata.name.as_deref() == Some("sparkapplications.sparkoperator.k8s.io"))
        .unwrap();
    let older: CustomResourceDefinition =
        serde_json::from_value(loosened(serde_json::to_value(&current).unwrap())).unwrap();
    install_crd(&cluster, &older).await;

    // Stored under the older CRD: values the Rust types cannot hold.
    let mut cores = raw_app("poison-cores");
    cores["spec"]["driver"]["cores"] = json!(3_000_000_000_i64);
    create_raw(&cluster, cores).await;
    let mut volume = raw_app("poison-volume");
    volume["spec"]["volumes"] = json!([{ "name": "v", "emptyDir": 5 }]);
    create_raw(&cluster, volume).await;
    // Today's CRD, as after an operator upgrade: the stored objects stay as they are.
    install_crd(&cluster, &current).await;

    let mut panics = raw_app("poison-panic");
    panics["metadata"]["annotations"] = json!({ "sparkoperator.k8s.io/test-panic": "yes" });
    create_raw(&cluster, panics).await;

    let port = free_port();
    let metrics_flag = format!("--metrics-address=127.0.0.1:{port}");
    let first = cluster.controller(cluster.args(&[&metrics_flag]));

    // An API refusal reaches status as Kubernetes words it.
    cluster.sim.faults().add(FaultRule {
        verb: Some("create".into()),
        resource: Some("configmaps".into()),
        user_agent: None,
        action: FaultAction::Fail {
            code: 403,
            reason: "Forbidden".into(),
            message: r#"configmaps "refused" is forbidden: exceeded quota: compute-resources"#.into(),
        },
        times: Some(1),
    });
    cluster.create_app(&app_yaml("refused", "1s", 0, 1, "")).await;
    let refused = cluster
        .wait_app("default", "refused", LIMIT, |a| {
            !a.status
                .as_ref()
                .is_none_or(|s| s.application_state.error_message.is_empty())
        })
        .await;
    let message = refused.status.unwrap().application_state.error_message;
    assert!(
        message.contains("is forbidden: exceeded quota") && message.contains("(Forbidden, 403)"),
        "{message}"
    );
    cluster.sim.faults().clear();

    cluster.create_app(&app_yaml("good", "6s", 0, 1, "")).await;
    let good = cluster
        .wait_app("default", "good", LIMIT, |a| state(a) == S::Running)
        .await;
    let submission = good.status.clone().unwrap().submission_id;

    // A pod anyone could create with the operator's labels, claiming to be one of good's executors.
    let pods: Api<Pod> = Api::namespaced(cluster.client.clone(), "default");
    let forged: Pod = serde_json::from_value(json!({
        "metadata": { "name": "forged-exec-1", "labels": {
            "spark-role": "executor", "spark-exec-id": "9223372036854775807",
            "sparkoperator.k8s.io/app-name": "good", "sparkoperator.k8s.io/submission-id": submission,
            "sparkoperator.k8s.io/launched-by-spark-operator": "true", "spark-app-selector": "forged" } },
        "spec": { "containers": [{ "name": "spark-kubernetes-executor", "image": "docker.io/apache/spark:4.0.4" }] }
    }))
    .unwrap();
    pods.create(&PostParams::default(), &forged).await.unwrap();

    let (_, _, reason, message) = wait_condition(&cluster, "poison-cores", "Invalid").await;
    assert_eq!(reason, "UnreadableSpec");
    assert!(message.contains("spec.driver.cores"), "{message}");
    let (_, _, _, message) = wait_condition(&cluster, "poison-volume", "Invalid").await;
    assert!(message.contains("spec.volumes"), "{message}");
    let (_, _, reason, _) = wait_condition(&cluster, "poison-panic", "ReconcileFailed").await;
    assert_eq!(reason, "InternalError");
    assert_eq!(readyz(port).await, Some(200), "the watches list, whatever the objects");
    let (_, text) = get(port, "/metrics").await.unwrap();
    assert!(
        metric(&text, "spark_operator_reconcile_panics").is_some_and(|n| n >= 1.0),
        "{text}"
    );
    assert!(
        metric(&text, "spark_operator_unreadable_applications").is_some_and(|n| n >= 2.0),
        "{text}"
    );
    assert!(
        metric(&text, "spark_operator_untrusted_pods").is_some_and(|n| n >= 1.0),
        "{text}"
    );
    assert!(first.is_running(), "the controller survived the panic");

    // Restart: the initial list holds the unreadable objects, and must not stall.
    first.kill();
    let port = free_port();
    let metrics_flag = format!("--metrics-address=127.0.0.1:{port}");
    let second = cluster.controller(cluster.args(&[&metrics_flag]));
    let good = cluster
        .wait_app("default", "good", LIMIT, |a| state(a).is_terminal())
        .await;
    assert_eq!(state(&good), S::Completed);
    let counts = good.status.unwrap().executor_counts.unwrap_or_default();
    assert_eq!(
        (counts.total(), counts.completed),
        (1, 1),
        "only good's own executor counts: {counts:?}"
    );
    assert!(
        poll(LIMIT, || async {
            match readyz(port).await {
                Some(200) => Poll::Done(()),
                other => Poll::Pending(other),
            }
        })
        .await
        .is_ok()
    );

    // /readyz says so while the applications cannot be listed: the history is compacted, so the watch
    // must relist, and the list is refused.
    cluster.sim.faults().add(FaultRule {
        verb: Some("list".into()),
        resource: Some("sparkapplications".into()),
        user_agent: None,
        action: FaultAction::Fail {
            code: 403,
            reason: "Forbidden".into(),
            message: "sparkapplications.sparkoperator.k8s.io is forbidden: injected".into(),
        },
        times: None,
    });
    // A write the application watch does not see moves the history past its resourceVersion, so the
    // compaction surely leaves that version behind and the watch has to relist.
    let marker: k8s_openapi::api::core::v1::ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "history-marker"}})).unwrap();
    Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(cluster.client.clone(), "default")
        .create(&PostParams::default(), &marker)
        .await
        .unwrap();
    cluster.sim.store().compact();
    cluster.sim.cut_all_watches();
    let unready = poll(LIMIT, || async {
        match get(port, "/readyz").await {
            Some((503, body)) => Poll::Done(body),
            other => Poll::Pending(other),
        }
    })
    .await
    .expect("/readyz turns 503 while the watch cannot list");
    assert!(unready.contains("watch"), "{unready}");
    cluster.sim.faults().clear();
    poll(LIMIT, || async {
        match readyz(port).await {
            Some(200) => Poll::Done(()),
            other => Poll::Pending(other),
        }
    })
    .await
    .expect("ready again once the watch lists");
    assert!(second.is_running(), "the restarted controller never stopped");

    // Every message the run produced reads like Kubernetes, not like Rust Debug.
    let mut messages = BTreeMap::new();
    let api: Api<kube::api::DynamicObject> = Api::namespaced_with(
        cluster.client.clone(),
        "default",
        &kube::api::ApiResource::erase::<SparkApplication>(&()),
    );
    for app in api.list(&ListParams::default()).await.unwrap() {
        let name = app.metadata.name.clone().unwrap_or_default();
        messages.insert(
            format!("{name} errorMessage"),
            app.data["status"]["applicationState"]["errorMessage"].to_string(),
        );
        for (type_, _, _, message) in conditions(&cluster, &name).await {
            messages.insert(format!("{name} condition {type_}"), message);
        }
    }
    let events: Api<Event> = Api::namespaced(cluster.client.clone(), "default");
    for event in events.list(&ListParams::default()).await.unwrap() {
        let key = format!("event {}", event.metadata.name.clone().unwrap_or_default());
        messages.insert(key, event.message.clone().unwrap_or_default());
    }
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(cluster.client.clone(), "default");
    for event in events.list(&ListParams::default()).await.unwrap() {
        let key = format!("events.k8s.io {}", event.metadata.name.clone().unwrap_or_default());
        messages.insert(key, event.note.clone().unwrap_or_default());
    }
    assert!(messages.len() > 10, "{messages:#?}");
    for (source, message) in &messages {
        for mark in DEBUG_MARKS {
            assert!(!message.contains(mark), "{source} reads like Rust Debug: {message}");
        }
    }
}
