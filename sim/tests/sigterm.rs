//! `kube-sim serve` stops on SIGTERM with exit 0, also while clients hold long-running requests
//! open (a followed log of a container that never ends, a watch) and pods are terminating. The
//! wait is a deadline that bounds a failure, not a timing assertion.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic in a test is a failed assertion

mod common;

use std::process::Stdio;
use std::time::Duration;

use common::within;
use futures::{AsyncBufReadExt as _, StreamExt as _};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, LogParams, PostParams, WatchEvent, WatchParams};
use serde_json::json;
use tokio::process::Command;

/// How long the process may take to exit before the test fails.
const EXIT_DEADLINE: Duration = Duration::from_secs(20);

fn pod(name: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": { "name": name, "annotations": {
            // Runs forever, logs, and ignores SIGTERM: its deletion takes the whole grace period.
            "sim.spark-operator.dev/log-lines": "3",
            "sim.spark-operator.dev/sigterm": "ignore"
        } },
        "spec": { "terminationGracePeriodSeconds": 600, "containers": [{ "name": "c", "image": "busybox" }] }
    }))
    .unwrap()
}

#[tokio::test]
async fn sigterm_stops_kube_sim_serve_with_open_streams_and_running_pods() {
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    let mut served = Command::new(env!("CARGO_BIN_EXE_kube-sim"))
        .arg("serve")
        .arg("--data-dir")
        .arg(dir.path().join("data"))
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .arg("--nodes")
        .arg("2")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    within("kube-sim serve to write its kubeconfig", async {
        while std::fs::metadata(&kubeconfig).map_or(true, |m| m.len() == 0) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    let kc = kube::config::Kubeconfig::read_from(&kubeconfig).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .unwrap();
    let client = kube::Client::try_from(config).unwrap();
    let pods: Api<Pod> = Api::default_namespaced(client);

    // The `default` ServiceAccount is made by the sim's controller a moment after start.
    within("the first pod to be admitted", async {
        while pods.create(&PostParams::default(), &pod("a")).await.is_err() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    pods.create(&PostParams::default(), &pod("b")).await.unwrap();
    within("pod a to run", async {
        loop {
            let p = pods.get("a").await.unwrap();
            if p.status.and_then(|s| s.phase).as_deref() == Some("Running") {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    // Long-running requests: a followed log and a watch, both open when SIGTERM comes.
    let mut log = pods
        .log_stream(
            "a",
            &LogParams {
                follow: true,
                ..Default::default()
            },
        )
        .await
        .unwrap()
        .lines();
    let first = within("the followed log's first line", log.next()).await;
    assert!(first.is_some_and(|l| l.is_ok_and(|l| l.contains("log line"))));
    let mut watch = pods.watch(&WatchParams::default(), "0").await.unwrap().boxed();
    assert!(matches!(
        within("a watch event", watch.next()).await,
        Some(Ok(WatchEvent::Added(_)))
    ));
    // A pod terminating with a 600 s grace period.
    pods.delete("b", &DeleteParams::default()).await.unwrap();

    let pid = served.id().unwrap().to_string();
    let killed = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap();
    assert!(killed.success());
    let status = match tokio::time::timeout(EXIT_DEADLINE, served.wait()).await {
        Ok(status) => status.unwrap(),
        Err(_) => panic!("kube-sim serve was still running {EXIT_DEADLINE:?} after SIGTERM"),
    };
    assert!(status.success(), "kube-sim serve exited with {status}");
    drop((log, watch));
}
