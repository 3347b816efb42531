//! Two `spark-operator operator` processes (the built binary) against the simulated cluster, as the
//! chart's Deployment runs them:
//!
//! - the standby serves (its admission webhook answers, `/readyz` is 200) while it does not lead;
//! - **fencing**: a leader whose Lease updates the API server refuses (a sim fault on its User-Agent),
//!   alive and otherwise healthy, stops every write before the standby acquires the Lease; checked in
//!   the sim's audit log against the Lease's own times, not against a wall clock;
//! - the old leader stays up as a standby; when the new leader is killed it takes over again, and every
//!   application completes with exactly one driver pod;
//! - a leader whose ScheduledSparkApplication watch never lists (every list refused, as when its RBAC rule
//!   is missing) still stops on SIGTERM and releases its Lease (how long it took is printed, not asserted).

// Test code: a panic is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube_sim::audit::AuditEvent;
use kube_sim::faults::{FaultAction, FaultRule};
use spark_operator_dev::{Cluster, ClusterOptions};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const APPS: usize = 20;
const LEASE: &str = "spark-operator-controller-lock";
const LEASE_SECONDS: i64 = 3;
const LIMIT: Duration = Duration::from_secs(180);

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap()
}

/// One operator process.
struct Operator {
    identity: String,
    metrics: u16,
    webhook: u16,
    child: tokio::process::Child,
    log: std::path::PathBuf,
}

impl Operator {
    fn start(identity: &str, kubeconfig: &Path, master: &str, dir: &Path) -> Operator {
        let metrics = free_port();
        let webhook = free_port();
        let log = dir.join(format!("{identity}.log"));
        let child = tokio::process::Command::new(env!("CARGO_BIN_EXE_spark-operator"))
            .args([
                "operator".to_owned(),
                format!("--kubeconfig={}", kubeconfig.display()),
                format!("--identity={identity}"),
                format!("--leader-election-lease-duration={LEASE_SECONDS}"),
                "--leader-election-retry-period=1".to_owned(),
                format!("--metrics-address=127.0.0.1:{metrics}"),
                format!("--webhook-address=127.0.0.1:{webhook}"),
                // The test posts reviews itself, over plain HTTP.
                "--webhook-plain-http=true".to_owned(),
                // Two processes on one host: each its own port.
                format!("--reports-address=127.0.0.1:{}", free_port()),
                format!("--spark-master-url={master}"),
            ])
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        Operator {
            identity: identity.to_owned(),
            metrics,
            webhook,
            child,
            log,
        }
    }

    fn agent(&self) -> String {
        format!("({})", self.identity)
    }

    fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

/// One HTTP/1.1 request on loopback: (status, body).
async fn http(port: u16, method: &str, path: &str, body: &str) -> Option<(u16, String)> {
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.ok()?;
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await.ok()?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response).await.ok()?;
    let text = String::from_utf8_lossy(&response).into_owned();
    let code = text.split_whitespace().nth(1)?.parse().ok()?;
    Some((
        code,
        text.split_once("\r\n\r\n")
            .map(|(_, b)| b.to_owned())
            .unwrap_or_default(),
    ))
}

async fn until<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + LIMIT;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(tokio::time::Instant::now() < deadline, "{what}: not within {LIMIT:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Every version of the Lease's spec ever seen: (holder, acquire time, renew time).
type LeaseHistory = Arc<Mutex<Vec<(String, Timestamp, Timestamp)>>>;

fn record_lease(client: &kube::Client) -> LeaseHistory {
    let history = LeaseHistory::default();
    let seen = history.clone();
    let leases: Api<Lease> = Api::namespaced(client.clone(), "default");
    tokio::spawn(async move {
        let config = watcher::Config::default().fields(&format!("metadata.name={LEASE}"));
        let mut events = std::pin::pin!(watcher(leases, config).touched_objects());
        while let Some(event) = events.next().await {
            let Ok(lease) = event else { continue };
            let Some(spec) = lease.spec else { continue };
            if let (Some(holder), Some(acquired), Some(renewed)) =
                (spec.holder_identity, spec.acquire_time, spec.renew_time)
            {
                seen.lock().unwrap().push((holder, acquired.0, renewed.0));
            }
        }
    });
    history
}

fn holder(history: &LeaseHistory) -> Option<String> {
    history.lock().unwrap().last().map(|(h, _, _)| h.clone())
}

/// Driver pod uids by application.
fn count_drivers(client: &kube::Client) -> Arc<Mutex<BTreeMap<String, BTreeSet<String>>>> {
    let drivers = Arc::new(Mutex::new(BTreeMap::<String, BTreeSet<String>>::new()));
    let seen = drivers.clone();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    tokio::spawn(async move {
        let mut events =
            std::pin::pin!(watcher(pods, watcher::Config::default().labels("spark-role=driver")).touched_objects());
        while let Some(event) = events.next().await {
            let Ok(pod) = event else { continue };
            let labels = pod.metadata.labels.clone().unwrap_or_default();
            if let (Some(app), Some(uid)) = (labels.get("sparkoperator.k8s.io/app-name"), pod.metadata.uid.clone()) {
                seen.lock().unwrap().entry(app.clone()).or_default().insert(uid);
            }
        }
    });
    drivers
}

fn app(name: &str) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "sparkoperator.k8s.io/v1beta2",
        "kind": "SparkApplication",
        "metadata": { "name": name, "namespace": "default" },
        "spec": {
            "type": "Scala", "mode": "cluster", "image": "docker.io/apache/spark:4.0.4",
            "sparkVersion": "4.0.4", "mainClass": "org.apache.spark.examples.SparkPi",
            "mainApplicationFile": "local:///opt/spark/examples/jars/spark-examples.jar",
            // The Spark ServiceAccount of a job namespace, with the Role its driver needs.
            "driver": { "cores": 1, "memory": "512m", "serviceAccount": "spark-operator-spark",
                "annotations": { "sim.spark-operator.dev/run-time": "12s", "sim.spark-operator.dev/exit-code": "0" } },
            "executor": { "instances": 1, "cores": 1, "memory": "512m" }
        }
    })
}

/// Writes other than the Lease's by one replica, from the audit log.
fn writes_by(events: &[AuditEvent], operator: &Operator) -> Vec<AuditEvent> {
    events
        .iter()
        .filter(|e| e.is_write() && e.resource != "leases" && e.user_agent.contains(&operator.agent()))
        .cloned()
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fenced_leader_stops_writing_before_its_standby_leads_and_the_work_completes_once() {
    let dir = tempfile::tempdir().unwrap();
    let cluster = Cluster::start(dir.path(), &ClusterOptions::big()).await.unwrap();
    cluster.sim.audit().enable();
    let kubeconfig = cluster.sim.kubeconfig_path().to_path_buf();
    let master = cluster.spark_master_url();
    let leases = record_lease(&cluster.client);
    let drivers = count_drivers(&cluster.client);

    let mut a = Operator::start("replica-a", &kubeconfig, &master, dir.path());
    until("replica-a leads", || async {
        (holder(&leases).as_deref() == Some("replica-a")).then_some(())
    })
    .await;
    let mut b = Operator::start("replica-b", &kubeconfig, &master, dir.path());

    // The standby serves: ready, and its webhook answers a review (denying an invalid application).
    until("the standby is ready", || async {
        http(b.metrics, "GET", "/readyz", "")
            .await
            .filter(|(code, _)| *code == 200)
    })
    .await;
    let mut invalid = app("invalid");
    invalid["spec"]["driver"]["memory"] = "lots".into();
    let review = serde_json::json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": { "uid": "r-1", "namespace": "default", "operation": "CREATE", "object": invalid },
    });
    let (code, answer) = http(
        b.webhook,
        "POST",
        "/validate-sparkoperator-k8s-io-v1beta2-sparkapplication",
        &review.to_string(),
    )
    .await
    .expect("the standby's webhook answers");
    assert_eq!(code, 200, "{answer}");
    assert!(
        answer.contains("\"allowed\":false") && answer.contains("spec.driver.memory"),
        "{answer}"
    );
    let (_, metrics) = http(b.metrics, "GET", "/metrics", "").await.unwrap();
    assert!(metrics.contains("spark_operator_leader 0"), "{metrics}");
    assert_eq!(
        holder(&leases).as_deref(),
        Some("replica-a"),
        "the standby does not lead"
    );

    let apps: Api<spark_operator_api::SparkApplication> = Api::namespaced(cluster.client.clone(), "default");
    for i in 0..APPS {
        let object = serde_json::from_value(app(&format!("fenced-{i}"))).unwrap();
        apps.create(&PostParams::default(), &object).await.unwrap();
    }
    until("replica-a submits", || async {
        let submitted = writes_by(&cluster.sim.audit().events(), &a)
            .iter()
            .filter(|e| e.resource == "pods" && e.verb == "create")
            .count();
        (submitted >= APPS / 2).then_some(())
    })
    .await;

    // The leader's Lease updates now fail; the process is otherwise fine.
    cluster.sim.faults().add(FaultRule {
        verb: Some("update".into()),
        resource: Some("leases.coordination.k8s.io".into()),
        user_agent: Some(a.agent()),
        action: FaultAction::Fail {
            code: 500,
            reason: "InternalError".into(),
            message: "injected: the leader's lease updates fail".into(),
        },
        times: None,
    });
    // Work keeps arriving while the lease changes hands, so a leader that kept reconciling would write.
    let mut created = APPS;
    let mut taken_over_at = None;
    loop {
        let object = serde_json::from_value(app(&format!("fenced-{created}"))).unwrap();
        apps.create(&PostParams::default(), &object).await.unwrap();
        created += 1;
        tokio::time::sleep(Duration::from_millis(200)).await;
        if holder(&leases).as_deref() == Some("replica-b") {
            let since = *taken_over_at.get_or_insert_with(tokio::time::Instant::now);
            if since.elapsed() >= Duration::from_secs(3) {
                break;
            }
        }
        assert!(created < APPS + 300, "replica-b did not take over");
    }
    let history = leases.lock().unwrap().clone();
    let (_, b_acquired, _) = history
        .iter()
        .rev()
        .find(|(h, _, _)| h == "replica-b")
        .cloned()
        .unwrap();
    let a_renewed = history
        .iter()
        .filter(|(h, _, _)| h == "replica-a")
        .map(|(_, _, r)| *r)
        .max()
        .unwrap();
    // The takeover follows client-go's rule, read from the Lease itself.
    assert!(
        b_acquired >= a_renewed + jiff::SignedDuration::from_secs(LEASE_SECONDS),
        "replica-b acquired at {b_acquired}, less than {LEASE_SECONDS}s after replica-a's last renewal at {a_renewed}"
    );
    // Fencing: nothing replica-a wrote reached the API server at or after replica-b's acquisition.
    let events = cluster.sim.audit().events();
    let a_writes = writes_by(&events, &a);
    let late: Vec<&AuditEvent> = a_writes.iter().filter(|e| e.received >= b_acquired).collect();
    assert!(
        late.is_empty(),
        "replica-a wrote after replica-b acquired the lease at {b_acquired}: {late:#?}\n{}",
        a.log()
    );
    let b_writes = writes_by(&events, &b);
    let early: Vec<&AuditEvent> = b_writes.iter().filter(|e| e.received < b_acquired).collect();
    assert!(early.is_empty(), "replica-b wrote before it led: {early:#?}");
    let last_a = a_writes.iter().map(|e| e.received).max().unwrap();
    println!(
        "replica-a's last write reached the API server {:?} before replica-b acquired the lease ({} writes by replica-a in all)",
        b_acquired.duration_since(last_a),
        a_writes.len()
    );
    assert!(
        a.is_running(),
        "a fenced leader keeps running (it serves):\n{}",
        a.log()
    );
    let (_, metrics) = http(a.metrics, "GET", "/metrics", "").await.unwrap();
    assert!(metrics.contains("spark_operator_leader 0"), "{metrics}");

    // The old leader rejoins as a standby; the new leader dies; the old one takes over and finishes.
    cluster.sim.faults().clear();
    b.child.start_kill().unwrap();
    let _ = b.child.wait().await;
    until("replica-a leads again", || async {
        (holder(&leases).as_deref() == Some("replica-a")).then_some(())
    })
    .await;
    let history = leases.lock().unwrap().clone();
    let (_, a_acquired, _) = history
        .iter()
        .rev()
        .find(|(h, _, _)| h == "replica-a")
        .cloned()
        .unwrap();
    let b_renewed = history
        .iter()
        .filter(|(h, _, _)| h == "replica-b")
        .map(|(_, _, r)| *r)
        .max()
        .unwrap();
    assert!(a_acquired >= b_renewed + jiff::SignedDuration::from_secs(LEASE_SECONDS));

    let done = until("every application ends", || async {
        let list = apps.list(&Default::default()).await.ok()?;
        let ended = list.items.iter().filter(|a| a.state().is_terminal()).count();
        (ended == created).then_some(list.items)
    })
    .await;
    for app in &done {
        let name = app.metadata.name.clone().unwrap();
        assert_eq!(
            app.state(),
            spark_operator_api::ApplicationStateType::Completed,
            "{name}: {:#?}",
            app.status
        );
        let status = app.status.clone().unwrap_or_default();
        assert_eq!(status.submission_attempts, 1, "{name} was submitted more than once");
        let count = drivers.lock().unwrap().get(&name).map_or(0, BTreeSet::len);
        assert_eq!(count, 1, "{name} had {count} driver pods");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_whose_watch_never_lists_stops_on_sigterm_and_releases_its_lease() {
    let dir = tempfile::tempdir().unwrap();
    let cluster = Cluster::start(dir.path(), &ClusterOptions::default()).await.unwrap();
    cluster.sim.audit().enable();
    // Every list of ScheduledSparkApplications is refused, as without the rule that grants it: that
    // controller's cache never fills.
    cluster.sim.faults().add(FaultRule {
        verb: Some("list".into()),
        resource: Some("scheduledsparkapplications".into()),
        user_agent: None,
        action: FaultAction::Fail {
            code: 403,
            reason: "Forbidden".into(),
            message: "injected: scheduledsparkapplications is forbidden".into(),
        },
        times: None,
    });
    let kubeconfig = cluster.sim.kubeconfig_path().to_path_buf();
    let leases = record_lease(&cluster.client);
    let mut a = Operator::start("replica-a", &kubeconfig, &cluster.spark_master_url(), dir.path());
    until("replica-a leads", || async {
        (holder(&leases).as_deref() == Some("replica-a")).then_some(())
    })
    .await;
    until("replica-a's list of ScheduledSparkApplications is refused", || async {
        cluster
            .sim
            .audit()
            .events()
            .iter()
            .any(|e| e.resource == "scheduledsparkapplications" && e.code == 403 && e.user_agent.contains(&a.agent()))
            .then_some(())
    })
    .await;

    let pid = a.child.id().unwrap().to_string();
    let signalled = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap();
    assert!(signalled.success(), "kill -TERM {pid}");
    // Without a bound on the shutdown it never exits: kube-runtime's Controller waits for its cache first.
    let signalled_at = tokio::time::Instant::now();
    let exited = tokio::time::timeout(LIMIT, a.child.wait()).await;
    assert!(
        exited.is_ok(),
        "the operator was still running {LIMIT:?} after SIGTERM; its log:\n{}",
        a.log()
    );
    println!("stopped {:?} after SIGTERM", signalled_at.elapsed());
    let lease = Api::<Lease>::namespaced(cluster.client.clone(), "default")
        .get(LEASE)
        .await
        .unwrap();
    assert_eq!(
        lease.spec.and_then(|s| s.holder_identity),
        None,
        "the lease is released on the way out; the log:\n{}",
        a.log()
    );
}
