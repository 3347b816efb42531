//! The Volcano stand-in: PodGroups are admitted (Pending → Inqueue) only when their
//! `minResources` fit what is idle less what admitted groups reserve, only admitted groups' pods
//! are bound, `minMember` pods are bound together or not at all, and a group's reservation is
//! released when its pods finish. A burst of Spark-like applications (a driver that creates its
//! executor once it runs, as Spark does) beyond the cluster's capacity completes with gang
//! admission and deadlocks without it.
//!
//! The objects are those the operator makes for `batchScheduler: volcano`, as Kubeflow's
//! `internal/scheduler/volcano` does: a PodGroup `spark-<app>-pg` with `minMember: 1` and
//! `minResources` = driver + executors, pods with `schedulerName: volcano` and the
//! `scheduling.k8s.io/group-name` annotation.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::time::Duration;

use kube_sim::node::{NodeSpec, NodesConfig, Volcano};
use kube_sim::registry::Gvr;
use kube_sim::store::{Store, WriteOptions};
use kube_sim::{Sim, SimConfig};
use serde_json::{Value, json};

fn pods() -> Gvr {
    Gvr::new("", "v1", "pods")
}

fn podgroups() -> Gvr {
    Gvr::new("scheduling.volcano.sh", "v1beta1", "podgroups")
}

/// A sim with one node of `cpu` CPUs, the Volcano stand-in in `mode` and Volcano's CRD.
async fn start(cpu: &str, mode: Volcano) -> (Sim, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = SimConfig::new(dir.path().join("data"));
    config.root_ca_configmap = true;
    config.nodes = NodesConfig {
        nodes: vec![NodeSpec::numbered(1).capacity(cpu, "32Gi", 110)],
        volcano: mode,
        ..NodesConfig::default()
    };
    let sim = Sim::start(config).await.expect("sim starts");
    let crd = kube_sim::node::volcano::podgroup_crd().expect("Volcano's CRD parses");
    sim.store()
        .create(
            &Gvr::new("apiextensions.k8s.io", "v1", "customresourcedefinitions"),
            "",
            crd,
            &WriteOptions::default(),
        )
        .await
        .expect("the PodGroup CRD is installed");
    (sim, dir)
}

/// Polls `f` every 20 ms for up to 30 s; fails the test with `what` if it never returns Some.
async fn until<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    for _ in 0..1500 {
        if let Some(v) = f() {
            return v;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("timed out waiting for {what}");
}

/// The PodGroup the operator creates for application `app` (Kubeflow's `syncPodGroup`).
fn podgroup(app: &str, min_member: u32, min_resources: Option<Value>) -> Value {
    let mut spec = json!({ "minMember": min_member, "queue": "default" });
    if let Some(r) = min_resources {
        spec["minResources"] = r;
    }
    json!({
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": { "name": format!("spark-{app}-pg") },
        "spec": spec,
        "status": { "phase": "Pending" },
    })
}

/// A pod for Volcano in `group`, requesting `cpu`, running `run_time` (never restarted, as Spark's pods).
fn pod(name: &str, group: &str, cpu: &str, run_time: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "annotations": {
                "scheduling.k8s.io/group-name": group,
                "sim.spark-operator.dev/run-time": run_time,
            },
        },
        "spec": {
            "schedulerName": "volcano",
            "restartPolicy": "Never",
            "containers": [{ "name": "main", "image": "busybox:1.36",
                             "resources": { "requests": { "cpu": cpu, "memory": "512Mi" } } }],
        },
    })
}

async fn create(store: &Store, gvr: &Gvr, obj: Value) {
    store
        .create(gvr, "default", obj, &WriteOptions::default())
        .await
        .expect("object is created");
}

fn get(store: &Store, gvr: &Gvr, name: &str) -> Option<Value> {
    store.get(gvr, "default", name).ok()
}

fn phase(store: &Store, group: &str) -> String {
    get(store, &podgroups(), group)
        .and_then(|g| g.pointer("/status/phase").and_then(Value::as_str).map(str::to_string))
        .unwrap_or_default()
}

fn condition(obj: &Value, type_: &str) -> Option<Value> {
    obj.pointer("/status/conditions")?
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
        .cloned()
}

fn pod_phase(store: &Store, name: &str) -> String {
    get(store, &pods(), name)
        .and_then(|p| p.pointer("/status/phase").and_then(Value::as_str).map(str::to_string))
        .unwrap_or_default()
}

async fn group_phase(store: &Store, group: &str, want: &str) {
    until(&format!("PodGroup {group} {want}"), || {
        (phase(store, group) == want).then_some(())
    })
    .await;
}

async fn pod_running(store: &Store, name: &str) {
    until(&format!("pod {name} running"), || {
        (pod_phase(store, name) == "Running").then_some(())
    })
    .await;
}

/// The pod's `PodScheduled=False` (reason, message), once it has one.
async fn unscheduled(store: &Store, name: &str) -> (String, String) {
    until(&format!("pod {name} marked unschedulable"), || {
        let c = condition(&get(store, &pods(), name)?, "PodScheduled")?;
        (c["status"] == "False").then(|| {
            (
                c["reason"].as_str().unwrap_or("").to_string(),
                c["message"].as_str().unwrap_or("").to_string(),
            )
        })
    })
    .await
}

fn events_about(store: &Store, name: &str) -> Vec<(String, String, String)> {
    let list = store
        .list(&Gvr::new("", "v1", "events"), Some("default"), &Default::default())
        .expect("events");
    list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| e["involvedObject"]["name"] == name)
        .map(|e| {
            (
                e["reason"].as_str().unwrap_or("").to_string(),
                e["message"].as_str().unwrap_or("").to_string(),
                e["source"]["component"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admission_reserves_capacity_until_the_groups_pods_finish() {
    let (sim, _dir) = start("4", Volcano::Gang).await;
    let store = sim.store().clone();

    // A group whose minResources fit is admitted before it has any pod.
    create(
        &store,
        &podgroups(),
        podgroup("a", 1, Some(json!({ "cpu": "3", "memory": "2Gi" }))),
    )
    .await;
    group_phase(&store, "spark-a-pg", "Inqueue").await;

    // A second one does not fit beside a's reservation (3 + 2 > 4 CPUs): it stays Pending, with
    // the overcommit plugin's event.
    create(
        &store,
        &podgroups(),
        podgroup("b", 1, Some(json!({ "cpu": "2", "memory": "2Gi" }))),
    )
    .await;
    until("b's enqueue rejection", || {
        events_about(&store, "spark-b-pg")
            .into_iter()
            .find(|e| e.0 == "Unschedulable" && e.1 == "resource in cluster is overused: overused cpu")
    })
    .await;
    assert_eq!(phase(&store, "spark-b-pg"), "Pending");

    // a's driver is bound; a is Running and still reserves the 2 CPUs of its executor-to-be.
    create(&store, &pods(), pod("a-driver", "spark-a-pg", "1", "forever")).await;
    pod_running(&store, "a-driver").await;
    group_phase(&store, "spark-a-pg", "Running").await;
    let a = until("a's running count", || {
        get(&store, &podgroups(), "spark-a-pg").filter(|a| a["status"]["running"] == 1)
    })
    .await;
    let scheduled = condition(&a, "Scheduled").expect("a is ready");
    assert_eq!(scheduled["reason"], "tasks in gang are ready to be scheduled");
    let bound = events_about(&store, "a-driver");
    assert!(
        bound.iter().any(|e| e.0 == "Scheduled"
            && e.1 == "Successfully assigned default/a-driver to sim-node-1"
            && e.2 == "volcano"),
        "{bound:?}"
    );

    // b's driver stays Pending although 3 CPUs are free: they are a's.
    create(&store, &pods(), pod("b-driver", "spark-b-pg", "1", "forever")).await;
    let (reason, message) = unscheduled(&store, "b-driver").await;
    assert_eq!(reason, "Unschedulable");
    assert_eq!(
        message,
        "pod group is not ready, 1 Pending, 1 minAvailable; Pending: 1 Unschedulable"
    );
    let b = until("b's Unschedulable condition", || {
        let b = get(&store, &podgroups(), "spark-b-pg")?;
        condition(&b, "Unschedulable").map(|c| (b, c))
    })
    .await;
    assert_eq!(b.1["reason"], "NotEnoughResources");
    assert_eq!(
        b.1["message"],
        "1/1 tasks in gang unschedulable: pod group is not ready, 1 Pending, 1 minAvailable; Pending: 1 Unschedulable"
    );
    assert_eq!(b.0["status"]["phase"], "Pending");
    assert_eq!(pod_phase(&store, "b-driver"), "Pending");

    // a's executor, created later, finds its room, runs and finishes.
    create(&store, &pods(), pod("a-exec-1", "spark-a-pg", "2", "1s")).await;
    until("a's executor succeeded", || {
        (pod_phase(&store, "a-exec-1") == "Succeeded").then_some(())
    })
    .await;
    assert_eq!(
        phase(&store, "spark-b-pg"),
        "Pending",
        "a's driver still runs and holds its reservation"
    );

    // a's driver ends: every pod of a is finished, a is Completed and reserves nothing; b goes in.
    sim.nodes()
        .evict_pod("default", "a-driver", None)
        .await
        .expect("a's driver is stopped");
    group_phase(&store, "spark-a-pg", "Completed").await;
    group_phase(&store, "spark-b-pg", "Running").await;
    pod_running(&store, "b-driver").await;
    let a = get(&store, &podgroups(), "spark-a-pg").unwrap();
    assert_eq!(
        (a["status"]["succeeded"].as_i64(), a["status"]["failed"].as_i64()),
        (Some(1), Some(1)),
        "{a}"
    );

    // A deleted group releases its reservation too.
    create(&store, &podgroups(), podgroup("c", 1, Some(json!({ "cpu": "3" })))).await;
    until("c turned away while b reserves", || {
        events_about(&store, "spark-c-pg")
            .into_iter()
            .find(|e| e.0 == "Unschedulable" && e.1.starts_with("resource in cluster is overused"))
    })
    .await;
    store
        .delete(&podgroups(), "default", "spark-b-pg", &Default::default())
        .await
        .expect("b is deleted");
    store
        .delete(&pods(), "default", "b-driver", &Default::default())
        .await
        .expect("b's driver is deleted");
    until("b's driver gone", || {
        get(&store, &pods(), "b-driver").is_none().then_some(())
    })
    .await;
    group_phase(&store, "spark-c-pg", "Inqueue").await;
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn min_member_pods_are_bound_together_or_not_at_all() {
    let (sim, _dir) = start("4", Volcano::Gang).await;
    let store = sim.store().clone();

    // A pod whose PodGroup does not exist is left alone.
    create(&store, &pods(), pod("orphan", "spark-missing-pg", "1", "forever")).await;

    // Three pods of 2 CPUs must start together; one node of 4 CPUs holds two.
    create(&store, &podgroups(), podgroup("g", 3, None)).await;
    for i in 1..=3 {
        create(&store, &pods(), pod(&format!("g-{i}"), "spark-g-pg", "2", "forever")).await;
    }
    // Until all three exist the gang is not even valid; then two would fit, which is not enough.
    let want = vec![
        (
            "Schedulable".to_string(),
            "Pod default/g-1 can possibly be assigned to sim-node-1, once minAvailable is satisfied".to_string(),
        ),
        (
            "Schedulable".to_string(),
            "Pod default/g-2 can possibly be assigned to sim-node-1, once minAvailable is satisfied".to_string(),
        ),
        (
            "Unschedulable".to_string(),
            "0/1 nodes are unavailable: 1 Insufficient cpu.".to_string(),
        ),
    ];
    until("the gang's pods marked", || {
        let mut reasons = Vec::new();
        for i in 1..=3 {
            let c = condition(&get(&store, &pods(), &format!("g-{i}"))?, "PodScheduled")?;
            reasons.push((
                c["reason"].as_str().unwrap_or("").to_string(),
                c["message"].as_str().unwrap_or("").to_string(),
            ));
        }
        reasons.sort();
        (reasons == want).then_some(())
    })
    .await;
    for i in 1..=3 {
        let p = get(&store, &pods(), &format!("g-{i}")).unwrap();
        assert!(
            p["spec"]["nodeName"].is_null(),
            "no pod of an incomplete gang is bound: {p}"
        );
    }
    let g = get(&store, &podgroups(), "spark-g-pg").unwrap();
    assert_eq!(g["status"]["phase"], "Inqueue", "{g}");
    let c = condition(&g, "Unschedulable").expect("the gang is not ready");
    assert_eq!(
        c["message"],
        "1/3 tasks in gang unschedulable: pod group is not ready, 3 Pending, 3 minAvailable; \
         Pending: 1 Unschedulable, 2 Schedulable. Origin reason is g-3: 0/1 nodes are unavailable: 1 Insufficient cpu."
    );
    // The orphan's job was seen by every session since, and never touched.
    let orphan = get(&store, &pods(), "orphan").unwrap();
    assert!(
        orphan["spec"]["nodeName"].is_null() && orphan["status"].get("conditions").is_none(),
        "{orphan}"
    );

    // A second node: the whole gang fits and is bound at once.
    sim.nodes()
        .add_node(NodeSpec::numbered(2).capacity("4", "32Gi", 110))
        .await
        .expect("node added");
    for i in 1..=3 {
        pod_running(&store, &format!("g-{i}")).await;
    }
    group_phase(&store, "spark-g-pg", "Running").await;
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_volcano_its_pods_stay_pending() {
    let (sim, _dir) = start("4", Volcano::Off).await;
    let store = sim.store().clone();
    create(&store, &podgroups(), podgroup("a", 1, Some(json!({ "cpu": "1" })))).await;
    create(&store, &pods(), pod("a-driver", "spark-a-pg", "1", "forever")).await;
    // A default-scheduler pod created after it is placed; the Volcano pod is not, nor its group.
    let mut plain = pod("plain", "", "1", "forever");
    plain["spec"]["schedulerName"] = json!("default-scheduler");
    create(&store, &pods(), plain).await;
    pod_running(&store, "plain").await;
    let p = get(&store, &pods(), "a-driver").unwrap();
    assert!(
        p["spec"]["nodeName"].is_null() && p["status"].get("conditions").is_none(),
        "{p}"
    );
    assert_eq!(phase(&store, "spark-a-pg"), "Pending");
    sim.shutdown().await;
}

/// How a burst of applications ended.
#[derive(Debug, PartialEq, Eq)]
enum Burst {
    /// Every application ran its executor and finished.
    Completed,
    /// Every driver runs and waits for its executor, which fits nowhere: nothing can finish.
    Deadlocked,
}

/// Four applications (driver 1 CPU, one executor 1 CPU; PodGroup minResources 2 CPUs) at once
/// on 4 CPUs. Each driver creates its executor once it runs, as Spark's driver does, and the
/// application ends (its driver goes away) once the executor finished. Also returns the most
/// drivers seen bound at once.
async fn burst(mode: Volcano) -> (Burst, usize) {
    let (sim, _dir) = start("4", mode).await;
    let store = sim.store().clone();
    let apps = ["a", "b", "c", "d"];
    for app in apps {
        let group = format!("spark-{app}-pg");
        create(
            &store,
            &podgroups(),
            podgroup(app, 1, Some(json!({ "cpu": "2", "memory": "1Gi" }))),
        )
        .await;
        create(&store, &pods(), pod(&format!("{app}-driver"), &group, "1", "forever")).await;
    }
    let mut most_drivers = 0;
    let outcome = until("the burst to complete or deadlock", || {
        let drivers = apps
            .iter()
            .filter_map(|app| get(&store, &pods(), &format!("{app}-driver")))
            .filter(|d| d["spec"]["nodeName"].is_string())
            .count();
        most_drivers = most_drivers.max(drivers);
        let mut done = 0;
        let mut stuck = 0;
        for app in apps {
            let (driver, executor) = (format!("{app}-driver"), format!("{app}-exec-1"));
            let driver_pod = get(&store, &pods(), &driver);
            let exec_pod = get(&store, &pods(), &executor);
            match (&driver_pod, &exec_pod) {
                (None, Some(_)) => done += 1,
                (Some(d), None) if d["status"]["phase"] == "Running" => {
                    let store = store.clone();
                    let group = format!("spark-{app}-pg");
                    tokio::spawn(async move {
                        let p = pod(&executor, &group, "1", "500ms");
                        let _ = store.create(&pods(), "default", p, &WriteOptions::default()).await;
                    });
                }
                (Some(_), Some(e)) if e["status"]["phase"] == "Succeeded" => {
                    let store = store.clone();
                    tokio::spawn(async move {
                        let _ = store.delete(&pods(), "default", &driver, &Default::default()).await;
                    });
                }
                (Some(d), Some(e))
                    if d["status"]["phase"] == "Running"
                        && e["spec"]["nodeName"].is_null()
                        && condition(e, "PodScheduled").is_some_and(|c| c["reason"] == "Unschedulable") =>
                {
                    stuck += 1;
                }
                _ => {}
            }
        }
        if done == apps.len() {
            Some(Burst::Completed)
        } else if stuck == apps.len() {
            // Four running drivers hold the node's four CPUs; each waits for an executor that
            // needs one more. Nothing else runs, so nothing can free a CPU.
            Some(Burst::Deadlocked)
        } else {
            None
        }
    })
    .await;
    if outcome == Burst::Completed {
        for app in apps {
            group_phase(&store, &format!("spark-{app}-pg"), "Completed").await;
        }
    } else {
        let message = unscheduled(&store, "a-exec-1").await.1;
        assert!(message.contains("Insufficient cpu"), "{message}");
    }
    sim.shutdown().await;
    (outcome, most_drivers)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_beyond_capacity_completes_with_gang_admission() {
    // Two groups' minResources fill the node: never more than two drivers at once.
    let (outcome, most_drivers) = burst(Volcano::Gang).await;
    assert_eq!(outcome, Burst::Completed);
    assert!(most_drivers <= 2, "{most_drivers} drivers were bound at once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_burst_deadlocks_without_gang_admission() {
    let (outcome, most_drivers) = burst(Volcano::NoGang).await;
    assert_eq!(outcome, Burst::Deadlocked);
    assert_eq!(most_drivers, 4);
}
