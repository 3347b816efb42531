//! The kubelet stand-in (`e2e/src/real/kubelet.rs`) on the real control plane: its node registers and
//! stays Ready, the real scheduler binds pods to it, it reports their lifecycle, a driver-like pod makes
//! and deletes its executors as its own ServiceAccount, and deletions are finalized by the node. The
//! API server's audit log says who did what; a ServiceAccount without the Role is refused the same
//! executor creation, and the node is refused another node's status.
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Node, Pod, ServiceAccount};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams,
};
use serde_json::{Value, json};
use spark_operator_e2e::real::ControlPlane;
use spark_operator_e2e::real::kubelet::{Kubelet, KubeletOptions, service_account_client};
use spark_operator_e2e::{Poll, poll};

const NAMESPACE: &str = "kubelet-standin";
const NODE: &str = "standin-1";
/// Bounds how long a failure takes to show; nothing is asserted about time.
const LIMIT: Duration = Duration::from_secs(60);
const APP_ID: &str = "spark-0a1b2c3d4e5f";
const DRIVER: &str = "standin-pi-driver";
const EXECUTORS: [&str; 2] = ["standin-pi-exec-1", "standin-pi-exec-2"];
const SPARK_USER: &str = "system:serviceaccount:kubelet-standin:spark";
const NODE_USER: &str = "system:node:standin-1";

const PROPERTIES: &str = "spark.app.id=spark-0a1b2c3d4e5f
spark.app.name=standin-pi
spark.kubernetes.namespace=kubelet-standin
spark.kubernetes.driver.pod.name=standin-pi-driver
spark.kubernetes.container.image=docker.io/apache/spark:4.0.4
spark.kubernetes.executor.podNamePrefix=standin-pi
spark.kubernetes.authenticate.driver.serviceAccountName=spark
spark.executor.instances=2
spark.executor.cores=1
spark.executor.memory=512m
spark.driver.host=standin-pi-driver-svc.kubelet-standin.svc
spark.driver.port=7078
";

pub async fn runs_pods_and_drivers_make_executors(control_plane: &'static ControlPlane) {
    let admin = control_plane.admin().await;
    setup(&admin).await;

    // The node registers, becomes Ready and loses the not-ready taint (start returns only then).
    let kubelet = Kubelet::start(
        control_plane,
        KubeletOptions {
            name: NODE.into(),
            ..KubeletOptions::default()
        },
    )
    .await;
    let nodes: Api<Node> = Api::all(admin.clone());
    let node = nodes.get(NODE).await.expect("the stand-in's Node");
    check_node(&node);
    let lease = lease_renewals(&admin, node.metadata.uid.as_deref().unwrap_or_default()).await;
    println!("  node {NODE} Ready, untainted; Lease renewed ({lease})");

    let pods: Api<Pod> = Api::namespaced(admin.clone(), NAMESPACE);
    plain_pod_fails_with_its_exit_code(&pods, &nodes).await;
    driver_makes_and_deletes_executors_as_its_service_account(control_plane, &admin, &pods).await;
    protections_without_the_role(control_plane, &admin, &kubelet).await;
    deleted_pod_is_finalized_by_the_node(control_plane, &pods).await;

    // Still Ready and untainted after all that: the node lifecycle controller left it alone.
    let node = nodes.get(NODE).await.expect("the stand-in's Node");
    check_node(&node);
    // Whatever the node wrote was allowed (the Node authorizer and NodeRestriction let a kubelet do it),
    // but for the other node's status, refused on purpose above.
    let refused: Vec<Value> = audit(control_plane)
        .into_iter()
        .filter(|e| e["user"]["username"] == NODE_USER && e["responseStatus"]["code"] == 403)
        .filter(|e| e["objectRef"]["name"] != "someone-else")
        .collect();
    assert!(refused.is_empty(), "the API server refused the node: {refused:#?}");

    drop(kubelet);
    // The control plane is shared: no Ready-looking node and no namespace are left for later scenarios.
    let _ = nodes.delete(NODE, &DeleteParams::default()).await;
    let namespaces: Api<Namespace> = Api::all(admin.clone());
    let _ = namespaces.delete(NAMESPACE, &DeleteParams::default()).await;
}

/// The namespace, the drivers' ServiceAccount `spark` with a Role for what Spark's driver does, and
/// `nobody`, a ServiceAccount without it.
async fn setup(admin: &kube::Client) {
    create(
        Api::<Namespace>::all(admin.clone()),
        json!({ "metadata": { "name": NAMESPACE } }),
    )
    .await;
    for name in ["spark", "nobody"] {
        create(
            Api::<ServiceAccount>::namespaced(admin.clone(), NAMESPACE),
            json!({ "metadata": { "name": name } }),
        )
        .await;
    }
    create(
        Api::<Role>::namespaced(admin.clone(), NAMESPACE),
        json!({
            "metadata": { "name": "spark-driver" },
            "rules": [
                { "apiGroups": [""], "resources": ["pods"], "verbs": ["create", "get", "list", "watch", "delete"] },
                // Spark's driver creates its executors' ConfigMap (and reads its own conf).
                { "apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "create"] },
            ],
        }),
    )
    .await;
    create(
        Api::<RoleBinding>::namespaced(admin.clone(), NAMESPACE),
        json!({
            "metadata": { "name": "spark-driver" },
            "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "spark-driver" },
            "subjects": [{ "kind": "ServiceAccount", "name": "spark", "namespace": NAMESPACE }],
        }),
    )
    .await;
}

async fn create<K>(api: Api<K>, object: Value) -> K
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    let object: K = serde_json::from_value(object).expect("an object");
    api.create(&PostParams::default(), &object).await.expect("created")
}

fn check_node(node: &Node) {
    let labels = node.metadata.labels.clone().unwrap_or_default();
    assert_eq!(labels.get("kubernetes.io/hostname").map(String::as_str), Some(NODE));
    assert_eq!(labels.get("kubernetes.io/os").map(String::as_str), Some("linux"));
    assert_eq!(labels.get("kubernetes.io/arch").map(String::as_str), Some("amd64"));
    let status = node.status.clone().unwrap_or_default();
    let condition = |kind: &str| {
        status
            .conditions
            .iter()
            .flatten()
            .find(|c| c.type_ == kind)
            .map(|c| c.status.clone())
    };
    assert_eq!(condition("Ready").as_deref(), Some("True"), "{status:#?}");
    for pressure in ["MemoryPressure", "DiskPressure", "PIDPressure"] {
        assert_eq!(condition(pressure).as_deref(), Some("False"), "{pressure}");
    }
    let capacity = status.capacity.clone().unwrap_or_default();
    assert_eq!(capacity.get("cpu").map(|q| q.0.as_str()), Some("32"));
    assert_eq!(capacity.get("pods").map(|q| q.0.as_str()), Some("110"));
    let info = status.node_info.clone().unwrap_or_default();
    assert!(info.kubelet_version.starts_with("v1.37."), "{info:?}");
    let taints = node.spec.as_ref().and_then(|s| s.taints.clone()).unwrap_or_default();
    assert!(
        taints.is_empty(),
        "the node lifecycle controller tainted the node: {taints:?}"
    );
}

/// The node's Lease: held by it for 40 s, owned by its Node, and renewed (its renewTime advances).
async fn lease_renewals(admin: &kube::Client, node_uid: &str) -> String {
    let leases: Api<Lease> = Api::namespaced(admin.clone(), "kube-node-lease");
    let first = leases.get(NODE).await.expect("the node's Lease");
    let spec = first.spec.clone().unwrap_or_default();
    assert_eq!(spec.holder_identity.as_deref(), Some(NODE));
    assert_eq!(spec.lease_duration_seconds, Some(40));
    let owner = first.metadata.owner_references.clone().unwrap_or_default();
    assert!(
        owner
            .iter()
            .any(|o| o.kind == "Node" && o.name == NODE && o.uid == node_uid),
        "{owner:?}"
    );
    let before = spec.renew_time.expect("a renewTime").0;
    let renewed = poll(Duration::from_secs(40), || async {
        let lease = leases.get(NODE).await.ok();
        match lease.and_then(|l| l.spec).and_then(|s| s.renew_time).map(|t| t.0) {
            Some(after) if after > before => Poll::Done(after),
            other => Poll::Pending(other),
        }
    })
    .await;
    match renewed {
        Ok(after) => format!("{before} -> {after}"),
        Err(last) => panic!("the Lease was not renewed: renewTime {before}, then {last:?}"),
    }
}

/// Every version of pod `name` from `resource_version` on, until `done` holds for one (or it is deleted).
async fn versions(pods: &Api<Pod>, name: &str, resource_version: &str, done: impl Fn(&Pod) -> bool) -> Vec<Pod> {
    let mut seen = Vec::new();
    let mut from = resource_version.to_owned();
    let deadline = tokio::time::Instant::now() + LIMIT;
    loop {
        let params = WatchParams::default()
            .fields(&format!("metadata.name={name}"))
            .timeout(30);
        let mut stream = pods.watch(&params, &from).await.expect("a watch").boxed();
        loop {
            let next = tokio::time::timeout_at(deadline, stream.next()).await;
            let event = match next {
                Ok(Some(Ok(event))) => event,
                Ok(Some(Err(error))) => panic!("watching {name}: {error}"),
                Ok(None) => break,
                Err(_) => panic!(
                    "{name} did not get there within {LIMIT:?}; versions seen: {:#?}",
                    seen.iter().map(|p: &Pod| p.status.clone()).collect::<Vec<_>>()
                ),
            };
            match event {
                WatchEvent::Added(pod) | WatchEvent::Modified(pod) => {
                    from = pod.metadata.resource_version.clone().unwrap_or_default();
                    let finished = done(&pod);
                    seen.push(pod);
                    if finished {
                        return seen;
                    }
                }
                WatchEvent::Deleted(_) => return seen,
                WatchEvent::Bookmark(bookmark) => from = bookmark.metadata.resource_version,
                WatchEvent::Error(error) => panic!("watching {name}: {error:?}"),
            }
        }
    }
}

fn phase(pod: &Pod) -> String {
    pod.status.as_ref().and_then(|s| s.phase.clone()).unwrap_or_default()
}

fn terminated(pod: &Pod) -> Option<k8s_openapi::api::core::v1::ContainerStateTerminated> {
    pod.status
        .as_ref()?
        .container_statuses
        .as_ref()?
        .first()?
        .state
        .as_ref()?
        .terminated
        .clone()
}

/// A pod scripted to run 2 s and exit 3, bound by the real scheduler: Pending (as reported by the node),
/// Running (with an address from the node's pod CIDR), Failed with exit code 3.
async fn plain_pod_fails_with_its_exit_code(pods: &Api<Pod>, nodes: &Api<Node>) {
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {
            "name": "plain",
            "annotations": {
                "sim.spark-operator.dev/run-time": "2s",
                "sim.spark-operator.dev/exit-code": "3",
            },
        },
        "spec": {
            "restartPolicy": "Never",
            "initContainers": [{ "name": "setup", "image": "busybox:1.36" }],
            "containers": [{ "name": "main", "image": "busybox:1.36" }],
        },
    }))
    .expect("a pod");
    let created = pods
        .create(&PostParams::default(), &pod)
        .await
        .expect("the pod is created");
    let rv = created.metadata.resource_version.clone().unwrap_or_default();
    let seen = versions(pods, "plain", &rv, |p| {
        matches!(phase(p).as_str(), "Succeeded" | "Failed")
    })
    .await;
    let phases: Vec<String> = seen.iter().map(phase).collect();
    // The node's own Pending report carries the host's address; then Running, then Failed.
    let reported_pending = seen.iter().position(|p| {
        phase(p) == "Pending" && p.status.as_ref().and_then(|s| s.host_ip.as_deref()) == Some("127.0.0.1")
    });
    let running = seen.iter().position(|p| phase(p) == "Running");
    assert!(
        matches!((reported_pending, running), (Some(a), Some(b)) if a < b),
        "phases: {phases:?}"
    );
    let last = seen.last().expect("a version");
    assert_eq!(phase(last), "Failed", "phases: {phases:?}");
    assert_eq!(last.spec.as_ref().and_then(|s| s.node_name.as_deref()), Some(NODE));
    let end = terminated(last).expect("the container terminated");
    assert_eq!((end.exit_code, end.reason.as_deref()), (3, Some("Error")), "{end:?}");
    assert!(end.finished_at.is_some() && end.started_at.is_some(), "{end:?}");
    let status = last.status.clone().unwrap_or_default();
    let init = status.init_container_statuses.unwrap_or_default();
    let init_end = init
        .first()
        .and_then(|c| c.state.as_ref())
        .and_then(|s| s.terminated.clone());
    assert_eq!(
        init_end.map(|t| t.exit_code),
        Some(0),
        "the init container completed first"
    );
    // The address came from the node's pod CIDR, which the controller manager allocated.
    let running = &seen[running.unwrap_or_default()];
    let pod_ip = running
        .status
        .as_ref()
        .and_then(|s| s.pod_ip.clone())
        .unwrap_or_default();
    let cidr = nodes
        .get(NODE)
        .await
        .ok()
        .and_then(|n| n.spec)
        .and_then(|s| s.pod_cidr)
        .expect("the controller manager allocated the node a pod CIDR");
    let network = cidr
        .split_once('/')
        .and_then(|(ip, _)| ip.rsplit_once('.').map(|(n, _)| n.to_owned()));
    assert!(
        cidr.ends_with("/24") && network.is_some_and(|n| pod_ip.starts_with(&format!("{n}."))),
        "pod IP {pod_ip} not in {cidr}"
    );
    let ready = running
        .status
        .as_ref()
        .and_then(|s| s.conditions.clone())
        .unwrap_or_default()
        .into_iter()
        .filter(|c| c.status == "True")
        .map(|c| c.type_)
        .collect::<Vec<_>>();
    for kind in [
        "PodScheduled",
        "Initialized",
        "ContainersReady",
        "Ready",
        "PodReadyToStartContainers",
    ] {
        assert!(
            ready.iter().any(|k| k == kind),
            "{kind} not True while running: {ready:?}"
        );
    }
    println!("  plain pod: {phases:?}, exit code 3, IP {pod_ip} in {cidr}");
}

/// A driver-like pod (as the operator builds one: `spark.properties` from a ConfigMap mounted at
/// /opt/spark/conf) whose ServiceAccount `spark` may manage pods: its two executors appear, created by
/// that ServiceAccount with a token bound to the driver pod, run on the node, are deleted by it, and the
/// driver succeeds.
async fn driver_makes_and_deletes_executors_as_its_service_account(
    control_plane: &ControlPlane,
    admin: &kube::Client,
    pods: &Api<Pod>,
) {
    create(
        Api::<ConfigMap>::namespaced(admin.clone(), NAMESPACE),
        json!({ "metadata": { "name": "standin-pi-conf-map" }, "data": { "spark.properties": PROPERTIES } }),
    )
    .await;
    let driver: Pod = serde_json::from_value(driver_pod()).expect("a driver pod");
    let created = pods
        .create(&PostParams::default(), &driver)
        .await
        .expect("the driver is created");
    let rv = created.metadata.resource_version.clone().unwrap_or_default();
    let executors = Api::<Pod>::namespaced(admin.clone(), NAMESPACE);
    let selector = format!("spark-app-selector={APP_ID},spark-role=executor");
    let running = poll(LIMIT, || async {
        let list = executors.list(&ListParams::default().labels(&selector)).await;
        let list: Vec<Pod> = list.map(|l| l.items).unwrap_or_default();
        let names: Vec<String> = list
            .iter()
            .filter(|p| phase(p) == "Running")
            .filter_map(|p| p.metadata.name.clone())
            .collect();
        if names.len() == EXECUTORS.len() {
            Poll::Done(list)
        } else {
            Poll::Pending(
                list.iter()
                    .map(|p| (p.metadata.name.clone(), phase(p)))
                    .collect::<Vec<_>>(),
            )
        }
    })
    .await
    .unwrap_or_else(|last| panic!("the driver's two executors did not run: {last:?}"));
    let mut names: Vec<String> = running.iter().filter_map(|p| p.metadata.name.clone()).collect();
    names.sort();
    assert_eq!(names, EXECUTORS, "the executors Spark names");
    for executor in &running {
        assert_eq!(executor.spec.as_ref().and_then(|s| s.node_name.as_deref()), Some(NODE));
        let owner = executor.metadata.owner_references.clone().unwrap_or_default();
        assert!(owner.iter().any(|o| o.kind == "Pod" && o.name == DRIVER), "{owner:?}");
    }
    let seen = versions(pods, DRIVER, &rv, |p| {
        matches!(phase(p).as_str(), "Succeeded" | "Failed")
    })
    .await;
    let last = seen.last().expect("a version");
    assert_eq!(phase(last), "Succeeded", "{:#?}", last.status);
    let end = terminated(last).expect("the driver terminated");
    assert_eq!((end.exit_code, end.reason.as_deref()), (0, Some("Completed")));
    // The executors were deleted before the driver ended, and the node finalized them.
    let gone = poll(LIMIT, || async {
        match executors.list(&ListParams::default().labels(&selector)).await {
            Ok(list) if list.items.is_empty() => Poll::Done(()),
            other => Poll::Pending(format!("{:?}", other.map(|l| l.items.len()))),
        }
    })
    .await;
    assert!(gone.is_ok(), "the executors are still there: {gone:?}");

    // Who did what, from the API server's audit log.
    let events = audit(control_plane);
    for executor in EXECUTORS {
        let by = |verb: &str, user: &str| {
            events.iter().find(|e| {
                e["verb"] == verb
                    && e["objectRef"]["resource"] == "pods"
                    && e["objectRef"]["name"] == executor
                    && e["objectRef"]["subresource"].is_null()
                    && e["user"]["username"] == user
                    && e["responseStatus"]["code"]
                        .as_u64()
                        .is_some_and(|c| (200..300).contains(&c))
            })
        };
        let creation = by("create", SPARK_USER).unwrap_or_else(|| panic!("no create of {executor} by {SPARK_USER}"));
        // The token was bound to the driver pod, as a projected one is.
        assert_eq!(
            creation["user"]["extra"]["authentication.kubernetes.io/pod-name"],
            json!([DRIVER]),
            "{creation:#}"
        );
        assert!(
            by("delete", SPARK_USER).is_some(),
            "no delete of {executor} by the driver"
        );
        assert!(
            by("delete", NODE_USER).is_some(),
            "no final delete of {executor} by the node"
        );
        let creators: Vec<&Value> = events
            .iter()
            .filter(|e| {
                e["verb"] == "create" && e["objectRef"]["name"] == executor && e["objectRef"]["subresource"].is_null()
            })
            .map(|e| &e["user"]["username"])
            .collect();
        assert_eq!(
            creators,
            [&json!(SPARK_USER)],
            "{executor} created once, by the driver's ServiceAccount"
        );
    }
    let status_writes = events
        .iter()
        .filter(|e| {
            e["objectRef"]["subresource"] == "status"
                && e["objectRef"]["name"] == DRIVER
                && e["user"]["username"] == NODE_USER
        })
        .count();
    assert!(
        status_writes >= 3,
        "the driver's status written by the node {status_writes} times"
    );
    println!("  driver: executors {EXECUTORS:?} created, run, deleted by {SPARK_USER}; driver Succeeded");
}

fn driver_pod() -> Value {
    json!({
        "metadata": {
            "name": DRIVER,
            "labels": { "spark-role": "driver", "spark-app-selector": APP_ID, "spark-version": "4.0.4" },
            "annotations": { "sim.spark-operator.dev/run-time": "2s" },
        },
        "spec": {
            "restartPolicy": "Never",
            "serviceAccountName": "spark",
            "containers": [{
                "name": "spark-kubernetes-driver",
                "image": "docker.io/apache/spark:4.0.4",
                "args": [
                    "driver", "--properties-file", "/opt/spark/conf/spark.properties",
                    "--class", "org.apache.spark.examples.SparkPi",
                    "local:///opt/spark/examples/jars/spark-examples.jar",
                ],
                "env": [
                    { "name": "SPARK_USER", "value": "spark" },
                    { "name": "SPARK_CONF_DIR", "value": "/opt/spark/conf" },
                ],
                "volumeMounts": [{ "name": "spark-conf-volume-driver", "mountPath": "/opt/spark/conf" }],
            }],
            "volumes": [{
                "name": "spark-conf-volume-driver",
                "configMap": {
                    "name": "standin-pi-conf-map",
                    "items": [{ "key": "spark.properties", "path": "spark.properties", "mode": 420 }],
                },
            }],
        },
    })
}

/// What keeps the stand-in honest: the executor creation the driver did is refused to a ServiceAccount
/// without the Role (so the stand-in really acted as `spark`), and the node may not write another
/// node's status (so it really is `system:node:standin-1` under the Node authorizer).
async fn protections_without_the_role(control_plane: &ControlPlane, admin: &kube::Client, kubelet: &Kubelet) {
    use kube_sim::node::spark_conf::{SparkConf, parse_properties};
    use kube_sim::node::spark_executor::{ExecutorInput, executor_pod};
    let driver = serde_json::to_value(
        Api::<Pod>::namespaced(admin.clone(), NAMESPACE)
            .get(DRIVER)
            .await
            .expect("the driver pod"),
    )
    .expect("the driver pod as JSON");
    let conf = SparkConf(parse_properties(PROPERTIES));
    let executor = executor_pod(&ExecutorInput {
        conf: &conf,
        app_id: APP_ID,
        exec_id: 3,
        driver_pod: &driver,
        name_prefix: "standin-pi",
        config_map: "spark-exec-conf-map",
        spark_user: "spark",
        template: None,
    })
    .expect("an executor pod");
    let executor: DynamicObject = serde_json::from_value(executor).expect("an executor pod object");
    let dry_run = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let as_account = |account: &'static str| async move {
        let client = service_account_client(control_plane, NAMESPACE, account, None)
            .await
            .expect("a ServiceAccount client");
        Api::<DynamicObject>::namespaced_with(client, NAMESPACE, &ApiResource::erase::<Pod>(&()))
    };
    // With the Role the same creation is allowed (a dry run); without it, 403.
    as_account("spark")
        .await
        .create(&dry_run, &executor)
        .await
        .expect("spark may create the executor");
    match as_account("nobody").await.create(&dry_run, &executor).await {
        Err(kube::Error::Api(status)) if status.code == 403 => {}
        other => panic!("a ServiceAccount without the Role created an executor: {other:?}"),
    }
    // Another node (no kubelet; unschedulable, so that nothing lands on it): the Node authorizer lets a
    // node patch node statuses, NodeRestriction only its own.
    let other = "someone-else";
    let others: Api<Node> = Api::all(admin.clone());
    create(
        others.clone(),
        json!({ "metadata": { "name": other }, "spec": { "unschedulable": true, "taints": [{ "key": "standin/none", "effect": "NoSchedule" }] } }),
    )
    .await;
    let nodes: Api<Node> = Api::all(kubelet.client().clone());
    let patch = Patch::Strategic(json!({ "status": { "conditions": [{ "type": "Ready", "status": "True" }] } }));
    let refused = nodes.patch_status(other, &PatchParams::default(), &patch).await;
    let _ = others.delete(other, &DeleteParams::default()).await;
    match refused {
        Err(kube::Error::Api(status)) if status.code == 403 => {}
        other => panic!("the node wrote another node's status: {other:?}"),
    }
    println!("  without the Role: executor creation refused (403); another node's status refused to the node (403)");
}

/// A pod that runs until stopped, deleted by the admin (grace period 30 s): the node stops it (exit code
/// 143) and deletes it for good.
async fn deleted_pod_is_finalized_by_the_node(control_plane: &ControlPlane, pods: &Api<Pod>) {
    let pod: Pod = serde_json::from_value(json!({
        "metadata": { "name": "sleeper" },
        "spec": { "restartPolicy": "Never", "containers": [{ "name": "main", "image": "busybox:1.36" }] },
    }))
    .expect("a pod");
    let created = pods
        .create(&PostParams::default(), &pod)
        .await
        .expect("the pod is created");
    let rv = created.metadata.resource_version.clone().unwrap_or_default();
    let seen = versions(pods, "sleeper", &rv, |p| phase(p) == "Running").await;
    let rv = seen
        .last()
        .and_then(|p| p.metadata.resource_version.clone())
        .unwrap_or_default();
    pods.delete("sleeper", &DeleteParams::default())
        .await
        .expect("the deletion is accepted");
    // Until the Deleted event: the last version is the node's final report.
    let seen = versions(pods, "sleeper", &rv, |_| false).await;
    let last = seen.last().expect("a version before the deletion");
    assert!(last.metadata.deletion_timestamp.is_some());
    assert_eq!(phase(last), "Failed");
    let end = terminated(last).expect("the container was stopped");
    assert_eq!((end.exit_code, end.reason.as_deref()), (143, Some("Error")));
    match pods.get_opt("sleeper").await {
        Ok(None) => {}
        other => panic!("the pod is still there: {other:?}"),
    }
    let finalized = audit(control_plane).into_iter().any(|e| {
        e["verb"] == "delete"
            && e["objectRef"]["name"] == "sleeper"
            && e["user"]["username"] == NODE_USER
            && e["responseStatus"]["code"] == 200
    });
    assert!(finalized, "the node did not delete the pod");
    // An already finished pod (the plain one, Failed) is finalized by the node as well.
    pods.delete("plain", &DeleteParams::default())
        .await
        .expect("the deletion is accepted");
    let gone = poll(LIMIT, || async {
        match pods.get_opt("plain").await {
            Ok(None) => Poll::Done(()),
            other => Poll::Pending(format!("{:?}", other.map(|p| p.map(|p| p.metadata.deletion_timestamp)))),
        }
    })
    .await;
    assert!(gone.is_ok(), "the finished pod was not finalized: {gone:?}");
    println!("  deleted pods: a running one stopped (143), it and a finished one deleted by {NODE_USER}");
}

/// The audit log's events (blocking mode: an answered request is in it).
fn audit(control_plane: &ControlPlane) -> Vec<Value> {
    std::fs::read_to_string(control_plane.audit_log())
        .expect("the audit log")
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}
