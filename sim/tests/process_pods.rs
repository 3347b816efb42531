//! Pods whose image is a local image run a real process: its output in the node's CRI log files
//! and through `kubectl logs`, its exit code on the CRI socket, `command`/`args` replacement and
//! `$(VAR)` expansion, a missing command, SIGTERM and SIGKILL on deletion, restarts, probes, log
//! rotation, its own hostname and PID 1, and no process left when `kube-sim serve` is SIGKILLed.
//!
//! Every test takes one machine-wide file lock (two cores; the lib's sandbox tests take it too)
//! and is skipped with a printed reason where the kernel refuses namespaces or overlayfs.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use kube_sim::node::{LocalImage, NodesConfig};
use kube_sim::registry::Gvr;
use kube_sim::store::{DeleteOptions, Store, WriteOptions};
use kube_sim::{Sim, SimConfig};
use serde_json::{Value, json};
use spark_operator_proto::cri::v1 as cri;
use spark_operator_proto::unix::connect_runtime_service;

const IMAGE: &str = "example.com/tools/app:1.0";

/// The machine-wide lock for tests that start real processes.
fn machine_lock() -> std::fs::File {
    let f = std::fs::File::create(std::env::temp_dir().join("kube-sim-process-pods.lock")).unwrap();
    f.lock().unwrap();
    f
}

/// Skips (with the reason printed) where process pods cannot run.
fn skip() -> bool {
    match kube_sim::node::sandbox::supported() {
        Ok(()) => false,
        Err(reason) => {
            println!("SKIPPED: {reason}");
            true
        }
    }
}

/// A sim with one node and `IMAGE` mapped to a shell script written here as its entrypoint.
async fn start(tune: impl FnOnce(&mut NodesConfig)) -> (Sim, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("tempdir");
    let entry = dir.path().join("entrypoint.sh");
    std::fs::write(
        &entry,
        "#!/bin/sh\necho \"entrypoint $*\"\necho \"to stderr\" >&2\necho \"host=$(hostname) pid=$$ root=$(ls -A /root | wc -l)\"\nexit 3\n",
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(&entry, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut config = SimConfig::new(dir.path().join("data"));
    config.root_ca_configmap = true;
    config.nodes = NodesConfig::with_nodes(1);
    config.nodes.kubelet.crash_loop_backoff = Duration::from_millis(50);
    config.nodes.kubelet.local_images = vec![LocalImage::new(IMAGE, &entry)];
    tune(&mut config.nodes);
    let sim = Sim::start(config).await.expect("sim starts");
    (sim, dir)
}

fn pods() -> Gvr {
    Gvr::new("", "v1", "pods")
}

fn pod(name: &str, restart: &str, container: Value) -> Value {
    let mut c = json!({ "name": "main", "image": IMAGE });
    if let (Value::Object(c), Value::Object(extra)) = (&mut c, container) {
        c.extend(extra);
    }
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": { "name": name },
        "spec": { "restartPolicy": restart, "terminationGracePeriodSeconds": 2, "containers": [c] }
    })
}

async fn create(store: &Store, p: Value) {
    store
        .create(&pods(), "default", p, &WriteOptions::default())
        .await
        .expect("create pod");
}

/// The pod once `pred` holds (polled every 50 ms, at most 60 s).
async fn until(store: &Store, name: &str, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
    for _ in 0..1200 {
        if let Ok(p) = store.get(&pods(), "default", name)
            && pred(&p)
        {
            return p;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let last = store.get(&pods(), "default", name).ok();
    panic!("timed out waiting for pod {name} to be {what}; last: {last:#?}");
}

fn status(p: &Value) -> &Value {
    &p["status"]["containerStatuses"][0]
}

fn log_file(sim: &Sim, p: &Value, restart: u32) -> PathBuf {
    let node = sim.nodes().node("sim-node-1").unwrap();
    node.log_dir()
        .join(format!(
            "default_{}_{}",
            p["metadata"]["name"].as_str().unwrap(),
            p["metadata"]["uid"].as_str().unwrap()
        ))
        .join("main")
        .join(format!("{restart}.log"))
}

/// The text of the CRI records of a log file.
fn log_texts(path: &Path) -> Vec<(String, String)> {
    let content = std::fs::read_to_string(path).unwrap_or_default();
    content
        .lines()
        .map(|l| {
            let mut parts = l.splitn(4, ' ');
            let ts = parts.next().unwrap();
            assert!(ts.parse::<jiff::Timestamp>().is_ok(), "RFC 3339 timestamp in {l:?}");
            let stream = parts.next().unwrap().to_string();
            let tag = parts.next().unwrap().to_string();
            (format!("{stream} {tag}"), parts.next().unwrap_or("").to_string())
        })
        .collect()
}

fn kubectl() -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|d| d.join("kubectl"))
        .find(|p| p.is_file())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_local_image_runs_a_real_process() {
    if skip() {
        return;
    }
    let _lock = machine_lock();
    let (sim, dir) = start(|_| {}).await;
    let store = sim.store().clone();
    let node = sim.nodes().node("sim-node-1").unwrap();
    assert!(node.cri_socket().ends_with("run/containerd/containerd.sock"));
    let mut client = connect_runtime_service(node.cri_socket()).await.expect("connect");
    let mut events = client
        .get_container_events(cri::GetEventsRequest {})
        .await
        .expect("GetContainerEvents")
        .into_inner();

    // The entrypoint with expanded args.
    create(
        &store,
        pod(
            "entry",
            "Never",
            json!({ "args": ["a", "$(GREETING)", "$$(GREETING)"], "env": [{ "name": "GREETING", "value": "hi" }] }),
        ),
    )
    .await;
    // `command` replaces the entrypoint.
    create(
        &store,
        pod(
            "command",
            "Never",
            json!({
                "command": ["/bin/sh", "-c", "echo \"$(GREETING) from $0, HOME=$HOME KUBECONFIG=${KUBECONFIG:-unset}\"; head -c 40000 /dev/zero | tr '\\0' x; echo", "$(GREETING)-arg"],
                "env": [{ "name": "GREETING", "value": "hello" }]
            }),
        ),
    )
    .await;
    // A command that is not in the container.
    create(
        &store,
        pod("missing", "Never", json!({ "command": ["no-such-command"] })),
    )
    .await;

    let entry = until(&store, "entry", "Failed", |p| p["status"]["phase"] == "Failed").await;
    let term = &status(&entry)["state"]["terminated"];
    assert_eq!(
        (term["exitCode"].as_i64(), term["reason"].as_str()),
        (Some(3), Some("Error")),
        "{entry:#}"
    );
    let texts = log_texts(&log_file(&sim, &entry, 0));
    assert!(
        texts.contains(&("stdout F".into(), "entrypoint a hi $(GREETING)".into())),
        "{texts:?}"
    );
    assert!(texts.contains(&("stderr F".into(), "to stderr".into())), "{texts:?}");
    // Its own UTS and PID namespaces, and the host's /root hidden.
    assert!(
        texts.contains(&("stdout F".into(), "host=entry pid=1 root=0".into())),
        "{texts:?}"
    );

    let command = until(&store, "command", "Succeeded", |p| p["status"]["phase"] == "Succeeded").await;
    let texts = log_texts(&log_file(&sim, &command, 0));
    assert_eq!(
        texts[0],
        (
            "stdout F".into(),
            "hello from hello-arg, HOME=/root KUBECONFIG=unset".into()
        )
    );
    // A 40000-character line: two 16 KiB partial records and the rest.
    assert_eq!(texts[1].0, "stdout P");
    assert_eq!(texts[2].0, "stdout P");
    assert_eq!(texts[3].0, "stdout F");
    assert_eq!(texts[1].1.len() + texts[2].1.len() + texts[3].1.len(), 40000);

    let missing = until(&store, "missing", "CreateContainerError", |p| {
        status(p)["state"]["waiting"]["reason"] == "CreateContainerError"
    })
    .await;
    let msg = status(&missing)["state"]["waiting"]["message"]
        .as_str()
        .unwrap_or("")
        .to_string();
    assert!(
        msg.contains(r#"exec: "no-such-command": executable file not found in $PATH"#)
            && msg.starts_with("failed to create containerd task"),
        "{msg}"
    );

    // The CRI socket shows the exit code, reason and log path of the real process.
    let id = status(&entry)["containerID"]
        .as_str()
        .unwrap()
        .trim_start_matches("containerd://")
        .to_string();
    let st = client
        .container_status(cri::ContainerStatusRequest {
            container_id: id.clone(),
            verbose: false,
        })
        .await
        .expect("ContainerStatus")
        .into_inner()
        .status
        .unwrap();
    assert_eq!((st.exit_code, st.reason.as_str()), (3, "Error"));
    // The node's own path, as containerd reports it; the file is under the node's root.
    let node_root = sim.nodes().node("sim-node-1").unwrap().root_dir().to_owned();
    assert!(st.log_path.starts_with("/var/log/pods/"), "{}", st.log_path);
    assert_eq!(
        node_root.join(st.log_path.trim_start_matches('/')),
        log_file(&sim, &entry, 0)
    );
    let stopped = tokio::time::timeout(Duration::from_secs(30), async {
        while let Some(Ok(e)) = futures::StreamExt::next(&mut events).await {
            if e.container_id == id && e.container_event_type == cri::ContainerEventType::ContainerStoppedEvent as i32 {
                return e;
            }
        }
        panic!("event stream ended");
    })
    .await
    .expect("a STOPPED event for the container");
    let own = stopped.containers_statuses.iter().find(|s| s.id == id).unwrap();
    assert_eq!(own.exit_code, 3);

    match kubectl() {
        None => println!("SKIPPED kubectl logs: kubectl is not on PATH"),
        Some(bin) => {
            let out = tokio::process::Command::new(bin)
                .arg("--kubeconfig")
                .arg(sim.kubeconfig_path())
                .args(["logs", "entry"])
                .env("HOME", dir.path())
                .output()
                .await
                .expect("kubectl runs");
            let stdout = String::from_utf8_lossy(&out.stdout);
            assert!(
                out.status.success(),
                "kubectl logs: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            // stdout and stderr are separate pipes: their order in the file is not the program's.
            assert!(stdout.lines().any(|l| l == "entrypoint a hi $(GREETING)"), "{stdout}");
            assert!(stdout.lines().any(|l| l == "to stderr"), "{stdout}");
        }
    }
    sim.shutdown().await;
}

/// The exit code of the pod's container, from the CRI socket (the pod object is gone).
async fn cri_exit_code(sim: &Sim, pod: &str) -> i32 {
    let node = sim.nodes().node("sim-node-1").unwrap();
    let mut client = connect_runtime_service(node.cri_socket()).await.expect("connect");
    for _ in 0..600 {
        let list = client
            .list_containers(cri::ListContainersRequest {
                filter: Some(cri::ContainerFilter {
                    label_selector: [("io.kubernetes.pod.name".to_string(), pod.to_string())].into(),
                    ..Default::default()
                }),
            })
            .await
            .unwrap()
            .into_inner()
            .containers;
        if let Some(c) = list.first()
            && c.state == cri::ContainerState::ContainerExited as i32
        {
            let st = client
                .container_status(cri::ContainerStatusRequest {
                    container_id: c.id.clone(),
                    verbose: false,
                })
                .await
                .unwrap()
                .into_inner()
                .status
                .unwrap();
            return st.exit_code;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the container of {pod} never exited");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deletion_sends_sigterm_then_sigkill() {
    if skip() {
        return;
    }
    let _lock = machine_lock();
    let (sim, _dir) = start(|_| {}).await;
    let store = sim.store().clone();
    // A program with a SIGTERM handler exits with the code it chose.
    create(
        &store,
        pod(
            "handles",
            "Never",
            json!({ "command": ["/bin/sh", "-c", "trap 'echo got TERM; exit 7' TERM; echo up; while :; do sleep 0.1; done"] }),
        ),
    )
    .await;
    // PID 1 without a handler ignores SIGTERM: SIGKILL after the grace period.
    create(
        &store,
        pod(
            "ignores",
            "Never",
            json!({ "command": ["/bin/sh", "-c", "while :; do sleep 0.1; done"] }),
        ),
    )
    .await;
    for name in ["handles", "ignores"] {
        let p = until(&store, name, "Running", |p| p["status"]["phase"] == "Running").await;
        // The handler must be installed before the signal comes.
        let log = log_file(&sim, &p, 0);
        if name == "handles" {
            for _ in 0..600 {
                if log_texts(&log).iter().any(|(_, t)| t == "up") {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        store
            .delete(&pods(), "default", name, &DeleteOptions::default())
            .await
            .expect("delete");
    }
    assert_eq!(cri_exit_code(&sim, "handles").await, 7);
    assert_eq!(cri_exit_code(&sim, "ignores").await, 137);
    sim.shutdown().await;
}

/// A free port on 127.0.0.1.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restarts_and_probes() {
    if skip() {
        return;
    }
    let _lock = machine_lock();
    let (sim, _dir) = start(|_| {}).await;
    let store = sim.store().clone();
    // OnFailure restarts a failing process.
    create(
        &store,
        pod(
            "fails",
            "OnFailure",
            json!({ "command": ["/bin/sh", "-c", "echo run; exit 1"] }),
        ),
    )
    .await;
    // Readiness over HTTP: the server starts once the test lets it (a gate port it listens on).
    let (gate, port) = (tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap(), free_port());
    let gate_port = gate.local_addr().unwrap().port();
    let server = format!(
        "import socket, http.server as h\ns = socket.create_connection(('127.0.0.1', {gate_port}))\ns.recv(1)\nh.HTTPServer(('127.0.0.1', {port}), h.SimpleHTTPRequestHandler).serve_forever()\n"
    );
    create(
        &store,
        pod(
            "web",
            "Always",
            json!({
                "command": ["/usr/bin/python3", "-c", server],
                "ports": [{ "name": "http", "containerPort": port }],
                "readinessProbe": {
                    // The sim's pod IPs are not on this machine yet; the probe's host field is.
                    "httpGet": { "host": "127.0.0.1", "port": "http", "path": "/", "httpHeaders": [{ "name": "X-Probe", "value": "1" }] },
                    "periodSeconds": 1
                }
            }),
        ),
    )
    .await;
    // Liveness by exec inside the container: fails once the process breaks itself.
    create(
        &store,
        pod(
            "breaks",
            "Always",
            json!({
                "command": ["/bin/sh", "-c", "sleep 1; touch /tmp/broken; while :; do sleep 0.1; done"],
                "livenessProbe": { "exec": { "command": ["/bin/sh", "-c", "! test -e /tmp/broken"] }, "periodSeconds": 1, "failureThreshold": 1 }
            }),
        ),
    )
    .await;

    let (mut conn, _) = tokio::time::timeout(Duration::from_secs(60), gate.accept())
        .await
        .expect("the web container connects to the gate")
        .unwrap();
    let web = until(&store, "web", "Running", |p| p["status"]["phase"] == "Running").await;
    // Running, and not ready: nothing serves yet.
    let ready = |p: &Value| {
        p["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| c["type"] == "Ready" && c["status"] == "True")
    };
    assert!(!ready(&web) && status(&web)["ready"] == false, "{web:#}");
    tokio::io::AsyncWriteExt::write_all(&mut conn, b"x").await.unwrap();
    let web = until(&store, "web", "Ready", |p| ready(p)).await;
    assert_eq!(status(&web)["ready"], true);

    let fails = until(&store, "fails", "restarted twice", |p| {
        status(p)["restartCount"].as_u64() >= Some(2)
    })
    .await;
    assert_eq!(status(&fails)["lastState"]["terminated"]["exitCode"], 1);
    assert!(log_texts(&log_file(&sim, &fails, 1)).contains(&("stdout F".into(), "run".into())));

    let breaks = until(&store, "breaks", "restarted", |p| {
        status(p)["restartCount"].as_u64() >= Some(1)
    })
    .await;
    // SIGTERM is ignored by the shell (PID 1 without a handler): SIGKILL after the grace period.
    assert_eq!(
        status(&breaks)["lastState"]["terminated"]["exitCode"],
        137,
        "{breaks:#}"
    );
    let events = store
        .list(&Gvr::new("", "v1", "events"), Some("default"), &Default::default())
        .unwrap();
    let messages: Vec<(String, String)> = events["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["involvedObject"]["name"] == "breaks")
        .map(|e| {
            (
                e["reason"].as_str().unwrap_or("").into(),
                e["message"].as_str().unwrap_or("").into(),
            )
        })
        .collect();
    assert!(
        messages
            .iter()
            .any(|(r, m)| r == "Unhealthy" && m.starts_with("Liveness probe failed")),
        "{messages:?}"
    );
    assert!(
        messages.contains(&(
            "Killing".into(),
            "Container main failed liveness probe, will be restarted".into()
        )),
        "{messages:?}"
    );
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_are_rotated() {
    if skip() {
        return;
    }
    let _lock = machine_lock();
    let (sim, _dir) = start(|n| {
        n.kubelet.container_log_max_size = 4096;
        n.kubelet.container_log_max_files = 3;
    })
    .await;
    let store = sim.store().clone();
    create(
        &store,
        pod(
            "chatty",
            "Never",
            json!({ "command": ["/bin/sh", "-c", "i=0; while [ $i -lt 300 ]; do echo \"line $i of a chatty process ..........................\"; i=$((i+1)); done; echo last"] }),
        ),
    )
    .await;
    // A scripted container is rotated too.
    let mut scripted = pod("scripted", "Never", json!({ "image": "busybox" }));
    scripted["metadata"]["annotations"] =
        json!({ "sim.spark-operator.dev/log-lines": "300", "sim.spark-operator.dev/run-time": "0s" });
    create(&store, scripted).await;
    for name in ["chatty", "scripted"] {
        let p = until(&store, name, "Succeeded", |p| p["status"]["phase"] == "Succeeded").await;
        let current = log_file(&sim, &p, 0);
        let dir = current.parent().unwrap();
        let rotated: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n != "0.log")
            .collect();
        assert!(!rotated.is_empty() && rotated.len() <= 2, "{name}: {rotated:?}");
        for r in &rotated {
            // 0.log.20261125-101010, as the kubelet names them.
            let suffix = r.strip_prefix("0.log.").unwrap_or_else(|| panic!("{r}"));
            assert!(suffix.len() == 15 && suffix.as_bytes()[8] == b'-', "{r}");
        }
        assert!(std::fs::metadata(&current).unwrap().len() <= 4096 + 200);
        if name == "chatty" {
            let texts = log_texts(&current);
            assert_eq!(texts.last().map(|t| t.1.as_str()), Some("last"));
        }
    }
    sim.shutdown().await;
}

/// Processes whose environment holds `marker`.
fn marked_processes(marker: &str) -> Vec<u32> {
    let needle = format!("PROCESS_POD_MARKER={marker}");
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/environ"))
                .is_ok_and(|env| env.split(|b| *b == 0).any(|kv| kv == needle.as_bytes()))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_of_kube_sim_serve_leaves_no_process() {
    if skip() {
        return;
    }
    let _lock = machine_lock();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    let mut served = tokio::process::Command::new(env!("CARGO_BIN_EXE_kube-sim"))
        .arg("serve")
        .arg("--data-dir")
        .arg(dir.path().join("data"))
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .arg("--local-image")
        .arg("marker-image=/bin/sh")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    for _ in 0..1200 {
        if std::fs::metadata(&kubeconfig).is_ok_and(|m| m.len() > 0) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let kc = kube::config::Kubeconfig::read_from(&kubeconfig).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .unwrap();
    let client = kube::Client::try_from(config).unwrap();
    let api: kube::Api<k8s_openapi::api::core::v1::Pod> = kube::Api::namespaced(client, "default");
    let marker = uuid::Uuid::new_v4().simple().to_string();
    // Pod two runs as another user: changing the user clears a parent-death signal set before it.
    for (name, user) in [("one", None), ("two", Some(65534))] {
        let p: k8s_openapi::api::core::v1::Pod = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": { "name": name },
            "spec": { "containers": [{
                "name": "main", "image": "marker-image",
                // A child in the background and one in the foreground: the whole namespace goes.
                "args": ["-c", "sleep 1000 & sleep 1000"],
                "env": [{ "name": "PROCESS_POD_MARKER", "value": marker }],
                "securityContext": { "runAsUser": user, "runAsGroup": user }
            }] }
        }))
        .unwrap();
        api.create(&Default::default(), &p).await.unwrap();
    }
    let mut found = Vec::new();
    for _ in 0..1200 {
        found = marked_processes(&marker);
        if found.len() >= 6 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(found.len() >= 6, "two pods of three processes each: {found:?}");
    served.start_kill().unwrap();
    served.wait().await.unwrap();
    let mut left = found;
    for _ in 0..600 {
        left = marked_processes(&marker);
        if left.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(left.is_empty(), "processes left behind after SIGKILL: {left:?}");
}

/// A container's limits are its cgroup's: its process finds its memory limit and CPU quota where a JVM
/// looks for them (its groups in `/proc/self/cgroup` under `/sys/fs/cgroup`), and one that allocates
/// past the memory limit is killed by the kernel: exit 137, `OOMKilled`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resource_limits_are_the_containers_cgroups() {
    if skip() {
        return;
    }
    if let Err(reason) = kube_sim::node::cgroups::supported() {
        println!("SKIPPED: {reason}");
        return;
    }
    let _lock = machine_lock();
    let (sim, _dir) = start(|_| {}).await;
    let store = sim.store().clone();
    let limits = json!({ "limits": { "memory": "64Mi", "cpu": "250m" } });
    let show = "m=$(awk -F: '$2 ~ /(^|,)memory(,|$)/ {print $3}' /proc/self/cgroup); \
                c=$(awk -F: '$2 ~ /(^|,)cpu(,|$)/ {print $3}' /proc/self/cgroup); \
                echo \"memory=$(cat /sys/fs/cgroup/memory$m/memory.limit_in_bytes) quota=$(cat /sys/fs/cgroup/cpu$c/cpu.cfs_quota_us) period=$(cat /sys/fs/cgroup/cpu$c/cpu.cfs_period_us)\"";
    create(
        &store,
        pod(
            "limited",
            "Never",
            json!({ "command": ["/bin/sh", "-c", show], "resources": limits }),
        ),
    )
    .await;
    create(
        &store,
        pod(
            "greedy",
            "Never",
            json!({ "command": ["python3", "-c", "b = b'x' * (512 * 1024 * 1024); print('survived')"], "resources": limits }),
        ),
    )
    .await;
    let limited = until(&store, "limited", "Succeeded", |p| p["status"]["phase"] == "Succeeded").await;
    let said = log_texts(&log_file(&sim, &limited, 0))
        .into_iter()
        .map(|(_, text)| text)
        .collect::<Vec<_>>()
        .join("\n");
    assert!(
        said.contains("memory=67108864 quota=25000 period=100000"),
        "the limits as the container sees them: {said}"
    );
    let greedy = until(&store, "greedy", "ended", |p| {
        matches!(p["status"]["phase"].as_str(), Some("Failed" | "Succeeded"))
    })
    .await;
    let terminated = &status(&greedy)["state"]["terminated"];
    assert_eq!(
        (terminated["exitCode"].as_i64(), terminated["reason"].as_str()),
        (Some(137), Some("OOMKilled")),
        "{terminated}: {:?}",
        log_texts(&log_file(&sim, &greedy, 0))
    );
    sim.shutdown().await;
}
