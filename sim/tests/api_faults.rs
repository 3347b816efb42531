//! API-server faults aimed at one client or one subresource: pods whose container terminations a
//! chosen client cannot see (`Faults::hide_terminations`), and failures of a custom resource's
//! status writes only (`FaultRule.resource = "<plural>/status"`).
#![allow(clippy::expect_used, clippy::unwrap_used)]

mod common;

use std::time::Duration;

use futures::StreamExt as _;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube_sim::Sim;
use kube_sim::faults::{FaultAction, FaultRule};
use kube_sim::node::NodesConfig;
use kube_sim::registry::Gvr;
use kube_sim::store::{Store, WriteOptions};
use serde_json::{Value, json};

use common::within;

/// A kube-rs client of the sim that names itself `user_agent`, as the operator names its identity.
async fn client_as(sim: &Sim, user_agent: &str) -> kube::Client {
    let kc = kube::config::Kubeconfig::read_from(sim.kubeconfig_path()).unwrap();
    let mut config = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .unwrap();
    config.headers.push((
        http::header::USER_AGENT,
        http::HeaderValue::from_str(user_agent).unwrap(),
    ));
    kube::Client::try_from(config).unwrap()
}

fn pods() -> Gvr {
    Gvr::new("", "v1", "pods")
}

async fn create_pod(store: &Store, name: &str, restart_policy: &str, script: &[(&str, &str)]) {
    let annotations: serde_json::Map<String, Value> = script
        .iter()
        .map(|(k, v)| (format!("sim.spark-operator.dev/{k}"), json!(v)))
        .collect();
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": { "name": name, "labels": { "app": "hidden" }, "annotations": annotations },
        "spec": { "restartPolicy": restart_policy, "containers": [{ "name": "main", "image": "busybox:1.36" }] }
    });
    store
        .create(&pods(), "default", pod, &WriteOptions::default())
        .await
        .expect("create pod");
}

/// The pod once `ready` holds for it (polled every 20 ms, at most 20 s).
async fn settled(store: &Store, name: &str, ready: impl Fn(&Value) -> bool) -> Value {
    for _ in 0..1000 {
        if let Ok(p) = store.get(&pods(), "default", name)
            && ready(&p)
        {
            return p;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("timed out waiting for pod {name}");
}

fn phase(p: &Value) -> &str {
    p["status"]["phase"].as_str().unwrap_or("")
}

/// Whether anything in the pod shows that a container ended.
fn shows_termination(p: &Value) -> bool {
    let text = p["status"].to_string();
    text.contains("\"terminated\"") || matches!(phase(p), "Succeeded" | "Failed")
}

/// The objects of a watch's events up to the DELETED event of pod `name`.
async fn watched_until_deleted(
    stream: &mut (impl futures::Stream<Item = kube::Result<WatchEvent<DynamicObject>>> + Unpin),
    name: &str,
) -> Vec<Value> {
    let mut objects = Vec::new();
    loop {
        match within("the watch events", stream.next()).await.unwrap().unwrap() {
            WatchEvent::Added(o) | WatchEvent::Modified(o) => objects.push(serde_json::to_value(o).unwrap()),
            WatchEvent::Deleted(o) => {
                let deleted = serde_json::to_value(o).unwrap();
                let done = deleted["metadata"]["name"] == name;
                objects.push(deleted);
                if done {
                    return objects;
                }
            }
            WatchEvent::Bookmark(_) => {}
            WatchEvent::Error(e) => panic!("{e:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terminations_are_hidden_from_the_chosen_client_only() {
    let (sim, _dir) = common::start_sim(|c| {
        c.root_ca_configmap = true;
        c.nodes = NodesConfig::with_nodes(1);
        c.nodes.kubelet.crash_loop_backoff = Duration::from_millis(50);
    })
    .await;
    let store = sim.store().clone();
    create_pod(&store, "failed", "Never", &[("run-time", "50ms"), ("exit-code", "3")]).await;
    // A first run that fails, then one that succeeds: lastState.terminated and a terminated state.
    create_pod(
        &store,
        "retried",
        "OnFailure",
        &[("run-time", "50ms"), ("exit-code", "1,0")],
    )
    .await;
    create_pod(&store, "running", "Never", &[]).await;
    let truth = settled(&store, "failed", |p| phase(p) == "Failed").await;
    settled(&store, "retried", |p| phase(p) == "Succeeded").await;
    settled(&store, "running", |p| phase(p) == "Running").await;

    sim.faults().hide_terminations("(controller-a)");
    let hidden: Api<DynamicObject> = Api::default_namespaced_with(
        client_as(&sim, "spark-operator/0.1.0 (controller-a)").await,
        &ApiResource::erase::<k8s_openapi::api::core::v1::Pod>(&()),
    );
    let truthful: Api<DynamicObject> = Api::default_namespaced_with(
        client_as(&sim, "spark-operator/0.1.0 (controller-b)").await,
        &ApiResource::erase::<k8s_openapi::api::core::v1::Pod>(&()),
    );
    let value = |o: DynamicObject| serde_json::to_value(o).unwrap();

    // get
    let seen = value(hidden.get("failed").await.unwrap());
    assert!(!shows_termination(&seen), "{seen:#}");
    assert_eq!(phase(&seen), "Running");
    assert_eq!(
        seen["status"]["containerStatuses"][0]["state"]["running"]["startedAt"],
        truth["status"]["containerStatuses"][0]["state"]["terminated"]["startedAt"]
    );
    let told = value(truthful.get("failed").await.unwrap());
    assert_eq!(phase(&told), "Failed");
    assert_eq!(
        told["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"],
        3
    );

    // list
    let seen = hidden.list(&ListParams::default()).await.unwrap();
    assert_eq!(seen.items.len(), 3);
    assert!(seen.items.into_iter().map(value).all(|p| !shows_termination(&p)));
    let told = truthful.list(&ListParams::default()).await.unwrap();
    let told_terminated = told.items.into_iter().map(value).filter(shows_termination).count();
    assert_eq!(
        told_terminated, 2,
        "the other client sees the failed and the retried pod end"
    );

    // Table (kubectl get): the STATUS column follows what the client may see.
    let status_column = |client: &Api<DynamicObject>| {
        let req = http::Request::get("/api/v1/namespaces/default/pods/failed")
            .header("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
            .body(Vec::new())
            .unwrap();
        let client: kube::Client = client.clone().into_client();
        async move {
            let table: Value = client.request(req).await.unwrap();
            table["rows"][0]["cells"][2].clone()
        }
    };
    assert_eq!(status_column(&hidden).await, "Running");
    assert_eq!(status_column(&truthful).await, "Error");

    // watch, including the object of the DELETED event.
    let mut hidden_watch = hidden.watch(&WatchParams::default(), "0").await.unwrap().boxed();
    let mut truthful_watch = truthful.watch(&WatchParams::default(), "0").await.unwrap().boxed();
    store
        .delete(&pods(), "default", "retried", &Default::default())
        .await
        .expect("delete");
    let hidden_events = watched_until_deleted(&mut hidden_watch, "retried").await;
    let truthful_events = watched_until_deleted(&mut truthful_watch, "retried").await;
    assert!(
        hidden_events.len() > 3,
        "the initial pods and the deletion: {hidden_events:#?}"
    );
    assert!(
        hidden_events.iter().all(|p| !shows_termination(p)),
        "{hidden_events:#?}"
    );
    let deleted = hidden_events.last().unwrap();
    assert_eq!(deleted["status"]["containerStatuses"][0]["lastState"], json!({}));
    let deleted = truthful_events.last().unwrap();
    assert_eq!(
        deleted["status"]["containerStatuses"][0]["lastState"]["terminated"]["exitCode"],
        1
    );
    assert_eq!(deleted["status"]["phase"], "Succeeded");

    // Shown again: the same client sees the truth.
    sim.faults().show_terminations("(controller-a)");
    assert_eq!(phase(&value(hidden.get("failed").await.unwrap())), "Failed");
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fault_fails_only_the_status_subresource_of_a_custom_resource() {
    let (sim, _dir) = common::start_sim(|_| {}).await;
    sim.store()
        .create(
            &Gvr::new("apiextensions.k8s.io", "v1", "customresourcedefinitions"),
            "",
            json!({
                "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
                "metadata": { "name": "sparkapplications.sparkoperator.k8s.io" },
                "spec": { "group": "sparkoperator.k8s.io", "scope": "Namespaced",
                    "names": { "plural": "sparkapplications", "singular": "sparkapplication", "kind": "SparkApplication" },
                    "versions": [{ "name": "v1beta2", "served": true, "storage": true, "subresources": { "status": {} },
                        "schema": { "openAPIV3Schema": { "type": "object", "x-kubernetes-preserve-unknown-fields": true } } }] }
            }),
            &WriteOptions::default(),
        )
        .await
        .expect("create the CRD");
    let gvk = GroupVersionKind::gvk("sparkoperator.k8s.io", "v1beta2", "SparkApplication");
    let apps: Api<DynamicObject> = Api::default_namespaced_with(
        sim.client().await.unwrap(),
        &ApiResource::from_gvk_with_plural(&gvk, "sparkapplications"),
    );
    let app: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "sparkoperator.k8s.io/v1beta2", "kind": "SparkApplication",
        "metadata": { "name": "app" }, "spec": { "type": "Scala" }
    }))
    .unwrap();
    apps.create(&PostParams::default(), &app).await.unwrap();
    let status = |state: &str| Patch::Merge(json!({ "status": { "applicationState": { "state": state } } }));
    let label = |v: &str| Patch::Merge(json!({ "metadata": { "labels": { "step": v } } }));
    let fail = |times| FaultRule {
        verb: Some("patch".into()),
        resource: Some("sparkapplications/status".into()),
        user_agent: None,
        // Not 429/503: kube-rs retries those by itself.
        action: FaultAction::Fail {
            code: 500,
            reason: "InternalError".into(),
            message: "injected status write failure".into(),
        },
        times,
    };
    let pp = PatchParams::default();

    // Without the fault the status write goes through.
    apps.patch_status("app", &pp, &status("SUBMITTED")).await.unwrap();

    // Twice: two status writes fail, a write of the object itself does not, the third status write works.
    sim.faults().add(fail(Some(2)));
    for _ in 0..2 {
        let err = apps.patch_status("app", &pp, &status("RUNNING")).await.unwrap_err();
        let kube::Error::Api(status) = err else {
            panic!("{err:?}")
        };
        assert_eq!(
            (status.code, status.message.as_str()),
            (500, "injected status write failure")
        );
        apps.patch("app", &pp, &label("between")).await.unwrap();
    }
    apps.patch_status("app", &pp, &status("RUNNING")).await.unwrap();

    // Until removed.
    sim.faults().add(fail(None));
    for _ in 0..3 {
        assert!(apps.patch_status("app", &pp, &status("COMPLETED")).await.is_err());
    }
    sim.faults().clear();
    apps.patch_status("app", &pp, &status("COMPLETED")).await.unwrap();
    let got = serde_json::to_value(apps.get("app").await.unwrap()).unwrap();
    assert_eq!(got["status"]["applicationState"]["state"], "COMPLETED");
    assert_eq!(got["metadata"]["labels"]["step"], "between");
    sim.shutdown().await;
}
