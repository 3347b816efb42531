//! Process pods on the cluster's network: a pod serves HTTP on its own address, another pod reaches
//! it through its Service (by the cluster DNS names and by the service-link address), the API
//! server's `pods/proxy` reaches it (`kubectl get --raw`), and a ConfigMap change reaches the files a
//! running pod mounts.
//!
//! Shares the machine-wide lock of `process_pods.rs` (two cores) and skips, with the reason printed,
//! where the kernel refuses namespaces or overlayfs.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::path::PathBuf;
use std::time::Duration;

use kube_sim::node::{LocalImage, NodesConfig};
use kube_sim::registry::Gvr;
use kube_sim::store::{Store, WriteOptions};
use kube_sim::{Sim, SimConfig};
use serde_json::{Value, json};

/// Python's image, mapped to this machine's interpreter.
const PYTHON: &str = "python:3.11-slim";

fn machine_lock() -> std::fs::File {
    let f = std::fs::File::create(std::env::temp_dir().join("kube-sim-process-pods.lock")).unwrap();
    f.lock().unwrap();
    f
}

fn skip() -> bool {
    if let Err(reason) = kube_sim::node::sandbox::supported() {
        println!("SKIPPED: {reason}");
        return true;
    }
    if python().is_none() {
        println!("SKIPPED: no python3 on PATH");
        return true;
    }
    false
}

/// The machine's interpreter, outside `/root` and `/home`: a pod does not see those (a pyenv shim
/// there would run, but not find what it runs).
fn python() -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    ["/usr/bin", "/usr/local/bin"]
        .into_iter()
        .map(PathBuf::from)
        .chain(std::env::split_paths(&path))
        .filter(|d| !d.starts_with("/root") && !d.starts_with("/home"))
        .map(|d| d.join("python3"))
        .find(|p| p.is_file())
}

fn kubectl() -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|d| d.join("kubectl"))
        .find(|p| p.is_file())
}

async fn start(nodes: usize) -> (Sim, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let mut config = SimConfig::new(dir.path().join("data"));
    config.root_ca_configmap = true;
    config.nodes = NodesConfig::with_nodes(nodes);
    config.nodes.kubelet.local_images = vec![LocalImage::new(PYTHON, python().unwrap())];
    // The kubelet syncs volumes every minute; a second keeps the ConfigMap-change check short.
    config.nodes.kubelet.sync_frequency = Duration::from_secs(1);
    let sim = Sim::start(config).await.expect("sim starts");
    (sim, dir)
}

fn gvr(resource: &str) -> Gvr {
    Gvr::new("", "v1", resource)
}

async fn create(store: &Store, resource: &str, object: Value) {
    store
        .create(&gvr(resource), "default", object, &WriteOptions::default())
        .await
        .unwrap_or_else(|e| panic!("create {resource}: {e}"));
}

/// The pod once `pred` holds (polled every 100 ms, at most 90 s).
async fn until(store: &Store, name: &str, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
    for _ in 0..900 {
        if let Ok(p) = store.get(&gvr("pods"), "default", name)
            && pred(&p)
        {
            return p;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let last = store.get(&gvr("pods"), "default", name).ok();
    panic!("timed out waiting for pod {name} to be {what}; last: {last:#?}");
}

fn ready(p: &Value) -> bool {
    p["status"]["conditions"]
        .as_array()
        .is_some_and(|c| c.iter().any(|c| c["type"] == "Ready" && c["status"] == "True"))
}

fn phase(p: &Value) -> &str {
    p["status"]["phase"].as_str().unwrap_or("")
}

/// The text of the current log file of a pod's only container, on its node.
fn log_of(sim: &Sim, p: &Value) -> String {
    let node = p["spec"]["nodeName"].as_str().unwrap();
    let dir = sim.nodes().node(node).unwrap().log_dir().join(format!(
        "default_{}_{}",
        p["metadata"]["name"].as_str().unwrap(),
        p["metadata"]["uid"].as_str().unwrap()
    ));
    std::fs::read_to_string(dir.join("main").join("0.log")).unwrap_or_default()
}

/// A web server pod: `python3 -m http.server` on its pod address, serving a ConfigMap's files.
fn web_pod(node: Option<&str>) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": { "name": "web", "labels": { "app": "web" } },
        "spec": {
            "nodeName": node,
            "terminationGracePeriodSeconds": 1,
            "containers": [{
                "name": "main", "image": PYTHON,
                "args": ["-m", "http.server", "8080", "--bind", "$(POD_IP)", "--directory", "/srv/site"],
                "env": [{ "name": "POD_IP", "valueFrom": { "fieldRef": { "fieldPath": "status.podIP" } } }],
                "ports": [{ "name": "http", "containerPort": 8080 }],
                "readinessProbe": { "httpGet": { "path": "/index.html", "port": "http" }, "periodSeconds": 1 },
                "volumeMounts": [{ "name": "site", "mountPath": "/srv/site" }],
            }],
            "volumes": [{ "name": "site", "configMap": { "name": "site" } }],
        }
    })
}

const CLIENT: &str = r#"
import os, sys, urllib.request
urls = [
    "http://web/index.html",
    "http://web.default.svc/index.html",
    "http://web.default.svc.cluster.local/index.html",
    "http://%s:%s/index.html" % (os.environ["WEB_SERVICE_HOST"], os.environ["WEB_SERVICE_PORT"]),
]
failed = 0
for url in urls:
    try:
        body = urllib.request.urlopen(url, timeout=10).read().decode().strip()
        print("%s -> %s" % (url, body))
    except Exception as e:
        print("%s -> error %s" % (url, e))
        failed += 1
sys.exit(failed)
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_process_pod_reaches_another_through_its_service_and_the_api_server_proxies_to_it() {
    if skip() {
        return;
    }
    let _lock = machine_lock();
    let (sim, _dir) = start(2).await;
    let store = sim.store();
    create(
        store,
        "configmaps",
        json!({
            "apiVersion": "v1", "kind": "ConfigMap", "metadata": { "name": "site" },
            "data": { "index.html": "hello from web" }
        }),
    )
    .await;
    create(store, "pods", web_pod(Some("sim-node-1"))).await;
    create(
        store,
        "services",
        json!({
            "apiVersion": "v1", "kind": "Service", "metadata": { "name": "web" },
            "spec": { "selector": { "app": "web" }, "ports": [{ "name": "http", "port": 80, "targetPort": "http" }] }
        }),
    )
    .await;
    let web = until(store, "web", "Ready", ready).await;
    let web_ip = web["status"]["podIP"].as_str().unwrap().to_owned();
    assert!(web_ip.starts_with("127."), "pod address {web_ip} is not on loopback");

    // Another process pod, on the other node, through the Service: short name, namespaced names and
    // the service-link environment (the Service existed before the pod).
    create(
        store,
        "pods",
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": { "name": "client" },
            "spec": {
                "nodeName": "sim-node-2",
                "restartPolicy": "Never",
                "containers": [{ "name": "main", "image": PYTHON, "args": ["-c", CLIENT] }],
            }
        }),
    )
    .await;
    let client = until(store, "client", "finished", |p| {
        matches!(phase(p), "Succeeded" | "Failed")
    })
    .await;
    let log = log_of(&sim, &client);
    assert_eq!(phase(&client), "Succeeded", "the client's requests failed:\n{log}");
    assert_eq!(
        log.matches("-> hello from web").count(),
        4,
        "every URL answered by web:\n{log}"
    );
    let service_ip = store.get(&gvr("services"), "default", "web").unwrap()["spec"]["clusterIP"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        log.contains(&format!("http://{service_ip}:80/index.html -> hello from web")),
        "{log}"
    );

    // The API server's proxy, as kubectl reaches it.
    match kubectl() {
        None => println!("SKIPPED (kubectl part): kubectl is not on PATH"),
        Some(kubectl) => {
            let out = std::process::Command::new(kubectl)
                .args([
                    "get",
                    "--raw",
                    "/api/v1/namespaces/default/pods/web:8080/proxy/index.html",
                ])
                .env("KUBECONFIG", sim.kubeconfig_path())
                .output()
                .unwrap();
            let stdout = String::from_utf8_lossy(&out.stdout);
            assert!(
                out.status.success() && stdout.trim() == "hello from web",
                "kubectl get --raw: {}\n{}",
                stdout,
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }

    // A ConfigMap change reaches the running pod's files with the kubelet's next sync.
    let mut site = store.get(&gvr("configmaps"), "default", "site").unwrap();
    site["data"]["index.html"] = json!("hello again");
    store
        .update(
            &gvr("configmaps"),
            "default",
            "site",
            site,
            None,
            &WriteOptions::default(),
        )
        .await
        .unwrap();
    let url = format!("http://{web_ip}:8080/index.html");
    let mut body = String::new();
    for _ in 0..900 {
        body = get(&url).await.unwrap_or_default();
        if body == "hello again" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        body, "hello again",
        "the ConfigMap's change never reached the pod's volume"
    );
    sim.shutdown().await;
}

/// A plain HTTP GET's body.
async fn get(url: &str) -> Option<String> {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let rest = url.strip_prefix("http://")?;
    let (host, path) = rest.split_once('/')?;
    let mut stream = tokio::net::TcpStream::connect(host).await.ok()?;
    let request = format!("GET /{path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.ok()?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response).await.ok()?;
    let text = String::from_utf8_lossy(&response).into_owned();
    text.split_once("\r\n\r\n").map(|(_, b)| b.trim().to_owned())
}
