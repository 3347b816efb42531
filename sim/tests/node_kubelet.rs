//! The kubelet's waiting states and restarts through real clients: ErrImagePull then
//! ImagePullBackOff, CreateContainerConfigError until a ConfigMap appears, CrashLoopBackOff with
//! `logs --previous` over HTTP (kube-rs), and SIGKILL (137) for a container that ignores
//! SIGTERM past its grace period.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, LogParams, PostParams};
use kube_sim::node::NodesConfig;
use kube_sim::{Sim, SimConfig};
use serde_json::json;

async fn start() -> (Sim, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = SimConfig::new(dir.path().join("data"));
    config.root_ca_configmap = true;
    config.nodes = NodesConfig::with_nodes(1);
    config.nodes.kubelet.crash_loop_backoff = Duration::from_millis(200);
    config.nodes.kubelet.image_pull_backoff = Duration::from_millis(200);
    let sim = Sim::start(config).await.expect("sim starts");
    (sim, dir)
}

/// Polls the pod every 20 ms (at most 20 s) until `f` accepts it.
async fn until(api: &Api<Pod>, name: &str, what: &str, f: impl Fn(&serde_json::Value) -> bool) -> serde_json::Value {
    for _ in 0..1000 {
        if let Ok(p) = api.get(name).await {
            let v = serde_json::to_value(&p).expect("pod as json");
            if f(&v) {
                return v;
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("timed out waiting for {what}");
}

fn pod(name: &str, annotations: serde_json::Value, container: serde_json::Value, restart: &str) -> Pod {
    let mut c = json!({ "name": "main", "image": "registry.example/app:1" });
    if let (Some(c), Some(extra)) = (c.as_object_mut(), container.as_object()) {
        c.extend(extra.clone());
    }
    serde_json::from_value(json!({
        "metadata": { "name": name, "annotations": annotations },
        "spec": { "restartPolicy": restart, "terminationGracePeriodSeconds": 2, "containers": [c] }
    }))
    .expect("pod")
}

fn waiting_reason(p: &serde_json::Value) -> &str {
    p.pointer("/status/containerStatuses/0/state/waiting/reason")
        .and_then(|r| r.as_str())
        .unwrap_or("")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_reasons_restarts_and_previous_logs() {
    let (sim, _dir) = start().await;
    let client = sim.client().await.expect("client");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let pp = PostParams::default();

    // An image that cannot be pulled.
    let bad = pod(
        "bad-image",
        json!({ "sim.spark-operator.dev/image-pull": "fail" }),
        json!({}),
        "Always",
    );
    pods.create(&pp, &bad).await.expect("create");
    let p = until(&pods, "bad-image", "ErrImagePull", |p| {
        waiting_reason(p) == "ErrImagePull"
    })
    .await;
    let msg = p
        .pointer("/status/containerStatuses/0/state/waiting/message")
        .and_then(|m| m.as_str())
        .unwrap_or("");
    assert!(
        msg.contains("failed to pull and unpack image \"registry.example/app:1\""),
        "{msg}"
    );
    let p = until(&pods, "bad-image", "ImagePullBackOff", |p| {
        waiting_reason(p) == "ImagePullBackOff"
    })
    .await;
    assert_eq!(
        p.pointer("/status/containerStatuses/0/state/waiting/message")
            .and_then(|m| m.as_str()),
        Some("Back-off pulling image \"registry.example/app:1\"")
    );
    assert_eq!(p["status"]["phase"], "Pending");
    let err = pods
        .logs("bad-image", &LogParams::default())
        .await
        .expect_err("no logs yet");
    assert!(
        err.to_string()
            .contains("is waiting to start: trying and failing to pull image"),
        "{err}"
    );

    // An env reference to a ConfigMap that does not exist yet.
    let env = json!({ "env": [{ "name": "MODE", "valueFrom": { "configMapKeyRef": { "name": "settings", "key": "mode" } } }] });
    pods.create(
        &pp,
        &pod(
            "needs-config",
            json!({ "sim.spark-operator.dev/run-time": "forever" }),
            env,
            "Always",
        ),
    )
    .await
    .expect("create");
    let p = until(&pods, "needs-config", "CreateContainerConfigError", |p| {
        waiting_reason(p) == "CreateContainerConfigError"
    })
    .await;
    assert_eq!(
        p.pointer("/status/containerStatuses/0/state/waiting/message")
            .and_then(|m| m.as_str()),
        Some("configmap \"settings\" not found")
    );
    let cms: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::namespaced(client.clone(), "default");
    let cm =
        serde_json::from_value(json!({ "metadata": { "name": "settings" }, "data": { "mode": "fast" } })).expect("cm");
    cms.create(&pp, &cm).await.expect("configmap");
    until(
        &pods,
        "needs-config",
        "the container to start once the ConfigMap exists",
        |p| p["status"]["phase"] == "Running",
    )
    .await;

    // A crash loop: every run logs its number and fails.
    let crash = pod(
        "crasher",
        json!({ "sim.spark-operator.dev/run-time": "50ms", "sim.spark-operator.dev/exit-code": "2", "sim.spark-operator.dev/log": "crashing now" }),
        json!({}),
        "Always",
    );
    pods.create(&pp, &crash).await.expect("create");
    let p = until(&pods, "crasher", "CrashLoopBackOff", |p| {
        waiting_reason(p) == "CrashLoopBackOff"
            && p["status"]["containerStatuses"][0]["restartCount"].as_i64() >= Some(1)
    })
    .await;
    let cs = &p["status"]["containerStatuses"][0];
    assert_eq!(cs["lastState"]["terminated"]["exitCode"], 2);
    assert_eq!(cs["lastState"]["terminated"]["reason"], "Error");
    assert!(
        cs["state"]["waiting"]["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("back-off ")),
        "{cs}"
    );
    assert_eq!(p["status"]["phase"], "Running", "a restarting pod stays Running");
    let previous = pods
        .logs(
            "crasher",
            &LogParams {
                previous: true,
                ..LogParams::default()
            },
        )
        .await
        .expect("previous logs");
    assert_eq!(previous, "crashing now\n");
    let current = pods.logs("crasher", &LogParams::default()).await.expect("logs");
    assert_eq!(current, "crashing now\n");
    let err = pods
        .logs(
            "needs-config",
            &LogParams {
                previous: true,
                ..LogParams::default()
            },
        )
        .await
        .expect_err("no previous run");
    assert!(
        err.to_string()
            .contains("previous terminated container \"main\" in pod \"needs-config\" not found"),
        "{err}"
    );

    // `logs -f`: what is there, then new lines until the container ends.
    let talker = pod(
        "talker",
        json!({ "sim.spark-operator.dev/run-time": "300ms", "sim.spark-operator.dev/log": "first", "sim.spark-operator.dev/exit-log": "last" }),
        json!({}),
        "Never",
    );
    pods.create(&pp, &talker).await.expect("create");
    until(&pods, "talker", "talker running", |p| p["status"]["phase"] == "Running").await;
    let stream = pods
        .log_stream(
            "talker",
            &LogParams {
                follow: true,
                ..LogParams::default()
            },
        )
        .await
        .expect("follow");
    let mut followed = Vec::new();
    let mut lines = futures::AsyncBufReadExt::lines(stream);
    while let Some(line) = tokio::time::timeout(Duration::from_secs(20), futures::StreamExt::next(&mut lines))
        .await
        .expect("the followed log ends when the container does")
    {
        followed.push(line.expect("line"));
    }
    assert_eq!(followed, ["first", "last"]);

    // SIGTERM ignored: SIGKILL when the 2 s grace period ends, exit 137.
    let stubborn = pod(
        "stubborn",
        json!({ "sim.spark-operator.dev/sigterm": "ignore" }),
        json!({}),
        "Never",
    );
    pods.create(&pp, &stubborn).await.expect("create");
    until(&pods, "stubborn", "stubborn running", |p| {
        p["status"]["phase"] == "Running"
    })
    .await;
    let store = sim.store().clone();
    let (rv, _) = store.snapshot();
    let mut feed = store.changes(rv);
    pods.delete("stubborn", &Default::default()).await.expect("delete");
    let last = tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            let c = feed.next().await.expect("feed");
            if c.kind == kube_sim::store::ChangeKind::Deleted && c.object["metadata"]["name"] == "stubborn" {
                return serde_json::Value::clone(&c.object);
            }
        }
    })
    .await
    .expect("the kubelet finishes the deletion");
    let t = &last["status"]["containerStatuses"][0]["state"]["terminated"];
    assert_eq!(
        (t["exitCode"].as_i64(), t["reason"].as_str()),
        (Some(137), Some("Error")),
        "{last}"
    );
    assert_eq!(last["status"]["phase"], "Failed");
    sim.shutdown().await;
}
