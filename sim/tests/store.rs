//! Storage semantics through the in-process store API (the same code path HTTP requests take).
#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic in a test is a failed assertion

use std::sync::{Arc, Mutex};

use kube_sim::admission_seam::{AdmissionPlugin, AdmissionRequest, BoxFuture, Operation};
use kube_sim::registry::Gvr;
use kube_sim::status::ApiError;
use kube_sim::store::{DeleteOptions, ListOptions, PatchBody, Store, StoreConfig, WriteOptions};
use kube_sim::watch::WatchOptions;
use serde_json::{Value, json};

fn pods() -> Gvr {
    Gvr::new("", "v1", "pods")
}
fn cms() -> Gvr {
    Gvr::new("", "v1", "configmaps")
}
fn crds() -> Gvr {
    Gvr::new("apiextensions.k8s.io", "v1", "customresourcedefinitions")
}
fn things() -> Gvr {
    Gvr::new("example.com", "v1", "things")
}
fn opts(manager: &str) -> WriteOptions {
    WriteOptions {
        field_manager: Some(manager.into()),
        ..Default::default()
    }
}

fn with_grace(seconds: i64) -> DeleteOptions {
    DeleteOptions {
        grace_period_seconds: Some(seconds),
        ..Default::default()
    }
}

fn pod(name: &str, labels: Value) -> Value {
    json!({ "apiVersion": "v1", "kind": "Pod", "metadata": { "name": name, "labels": labels },
            "spec": { "containers": [{ "name": "main", "image": "busybox:1.36", "env": [{ "name": "A", "value": "1" }] }] } })
}

fn thing_crd() -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": { "name": "things.example.com" },
        "spec": { "group": "example.com", "scope": "Namespaced",
            "names": { "plural": "things", "singular": "thing", "kind": "Thing", "shortNames": ["th"] },
            "versions": [{ "name": "v1", "served": true, "storage": true, "subresources": { "status": {} },
                "schema": { "openAPIV3Schema": { "type": "object", "x-kubernetes-preserve-unknown-fields": true } } }] }
    })
}

async fn store_with_crd() -> Store {
    let store = Store::new(StoreConfig::default());
    store.create(&crds(), "", thing_crd(), &opts("test")).await.unwrap();
    store
}

/// The next watch event, failing the test instead of hanging.
async fn next(w: &mut kube_sim::watch::WatchStream) -> Option<kube_sim::watch::WatchEvent> {
    tokio::time::timeout(std::time::Duration::from_secs(10), w.next())
        .await
        .expect("a watch event within 10s")
}

fn rv(v: &Value) -> String {
    v["metadata"]["resourceVersion"].as_str().unwrap().to_string()
}

#[tokio::test]
async fn stale_updates_conflict_and_resource_versions_grow() {
    let store = Store::new(StoreConfig::default());
    let a = store
        .create(
            &cms(),
            "ns",
            json!({ "metadata": { "name": "c" }, "data": { "k": "1" } }),
            &opts("t"),
        )
        .await
        .unwrap()
        .object;
    assert!(a["metadata"]["uid"].is_string() && a["metadata"]["creationTimestamp"].is_string());
    let mut b = a.clone();
    b["data"]["k"] = json!("2");
    let b = store
        .update(&cms(), "ns", "c", b, None, &opts("t"))
        .await
        .unwrap()
        .object;
    assert!(rv(&b).parse::<u64>().unwrap() > rv(&a).parse::<u64>().unwrap());
    // Writing with the old resourceVersion is a 409 with the apiserver's text.
    let mut stale = a.clone();
    stale["data"]["k"] = json!("3");
    let err = store
        .update(&cms(), "ns", "c", stale.clone(), None, &opts("t"))
        .await
        .unwrap_err();
    assert_eq!(err.code(), 409);
    assert_eq!(
        err.to_string(),
        "Operation cannot be fulfilled on configmaps \"c\": the object has been modified; please apply your changes to the latest version and try again"
    );
    // Without a resourceVersion the update is unconditional.
    stale["metadata"].as_object_mut().unwrap().remove("resourceVersion");
    assert_eq!(
        store
            .update(&cms(), "ns", "c", stale, None, &opts("t"))
            .await
            .unwrap()
            .object["data"]["k"],
        "3"
    );
    // A no-op write keeps the resourceVersion.
    let cur = store.get(&cms(), "ns", "c").unwrap();
    let same = store
        .update(&cms(), "ns", "c", cur.clone(), None, &opts("t"))
        .await
        .unwrap()
        .object;
    assert_eq!(rv(&same), rv(&cur));
    let dup = store
        .create(&cms(), "ns", json!({ "metadata": { "name": "c" } }), &opts("t"))
        .await
        .unwrap_err();
    assert!(matches!(dup, ApiError::AlreadyExists(_)));
    assert!(matches!(
        store.get(&cms(), "ns", "nope").unwrap_err(),
        ApiError::NotFound(_)
    ));
}

#[tokio::test]
async fn generation_bumps_on_spec_changes_only_and_status_is_a_subresource() {
    let store = store_with_crd().await;
    let t = store
        .create(&things(), "ns", json!({ "apiVersion": "example.com/v1", "kind": "Thing", "metadata": { "name": "t" }, "spec": { "n": 1 }, "status": { "s": "ignored" } }), &opts("t"))
        .await
        .unwrap()
        .object;
    assert_eq!(t["metadata"]["generation"], 1);
    assert!(t.get("status").is_none(), "status is dropped on create");
    let label = PatchBody::Merge(json!({ "metadata": { "labels": { "x": "y" } } }));
    let t = store
        .patch(&things(), "ns", "t", &label, None, &opts("t"))
        .await
        .unwrap()
        .object;
    assert_eq!(
        t["metadata"]["generation"], 1,
        "metadata changes do not bump generation"
    );
    let status = PatchBody::Merge(json!({ "status": { "phase": "Running" }, "spec": { "n": 99 } }));
    let t = store
        .patch(&things(), "ns", "t", &status, Some("status"), &opts("t"))
        .await
        .unwrap()
        .object;
    assert_eq!(
        (
            t["metadata"]["generation"].clone(),
            t["status"]["phase"].clone(),
            t["spec"]["n"].clone()
        ),
        (json!(1), json!("Running"), json!(1))
    );
    let main = PatchBody::Merge(json!({ "status": { "phase": "Hacked" }, "spec": { "n": 2 } }));
    let t = store
        .patch(&things(), "ns", "t", &main, None, &opts("t"))
        .await
        .unwrap()
        .object;
    assert_eq!(
        (t["metadata"]["generation"].clone(), t["status"]["phase"].clone()),
        (json!(2), json!("Running"))
    );

    // A built-in kind with generation.
    let deploy = Gvr::new("apps", "v1", "deployments");
    let d = json!({ "metadata": { "name": "d" }, "spec": { "selector": { "matchLabels": { "a": "b" } },
        "template": { "metadata": { "labels": { "a": "b" } }, "spec": { "containers": [{ "name": "c", "image": "i" }] } } } });
    let d = store.create(&deploy, "ns", d, &opts("t")).await.unwrap().object;
    assert_eq!(
        (d["metadata"]["generation"].clone(), d["spec"]["replicas"].clone()),
        (json!(1), json!(1))
    );
    let d = store
        .patch(
            &deploy,
            "ns",
            "d",
            &PatchBody::Merge(json!({ "spec": { "replicas": 3 } })),
            None,
            &opts("t"),
        )
        .await
        .unwrap()
        .object;
    assert_eq!(d["metadata"]["generation"], 2);
    // Kinds without generation never get one.
    let c = store
        .create(&cms(), "ns", json!({ "metadata": { "name": "g" } }), &opts("t"))
        .await
        .unwrap()
        .object;
    assert!(c["metadata"].get("generation").is_none());
}

#[tokio::test]
async fn finalizers_hold_deletion_until_the_last_one_goes() {
    let store = Store::new(StoreConfig::default());
    let gvr = cms();
    let w = WatchOptions {
        resource_version: Some(store.current_rv().to_string()),
        ..Default::default()
    };
    let mut watch = store.watch(&gvr, Some("ns"), &w).unwrap();
    store
        .create(
            &gvr,
            "ns",
            json!({ "metadata": { "name": "f", "finalizers": ["a.io/x", "b.io/y"] } }),
            &opts("t"),
        )
        .await
        .unwrap();
    let d = store.delete(&gvr, "ns", "f", &DeleteOptions::default()).await.unwrap();
    assert!(!d.gone);
    assert!(d.object["metadata"]["deletionTimestamp"].is_string());
    assert_eq!(d.object["metadata"]["deletionGracePeriodSeconds"], 0);
    // Deleting again changes nothing.
    let again = store.delete(&gvr, "ns", "f", &DeleteOptions::default()).await.unwrap();
    assert_eq!(rv(&again.object), rv(&d.object));
    // No new finalizers while deleting.
    let add = PatchBody::Merge(json!({ "metadata": { "finalizers": ["a.io/x", "b.io/y", "c.io/z"] } }));
    assert_eq!(
        store
            .patch(&gvr, "ns", "f", &add, None, &opts("t"))
            .await
            .unwrap_err()
            .code(),
        422
    );
    let one = PatchBody::Merge(json!({ "metadata": { "finalizers": ["b.io/y"] } }));
    store.patch(&gvr, "ns", "f", &one, None, &opts("t")).await.unwrap();
    assert!(store.get(&gvr, "ns", "f").is_ok());
    let none = PatchBody::Json(json!([{ "op": "remove", "path": "/metadata/finalizers" }]));
    let last = store.patch(&gvr, "ns", "f", &none, None, &opts("t")).await.unwrap();
    assert!(last.object["metadata"]["deletionTimestamp"].is_string());
    assert!(matches!(store.get(&gvr, "ns", "f").unwrap_err(), ApiError::NotFound(_)));
    let mut types = Vec::new();
    for _ in 0..4 {
        types.push(next(&mut watch).await.unwrap().type_);
    }
    assert_eq!(types, ["ADDED", "MODIFIED", "MODIFIED", "DELETED"]);
}

/// The apiserver's `shouldDeleteDuringUpdate`: an update deletes an object only when it removes
/// the object's last finalizer and no grace period is left. A kubelet writing the final status of
/// a pod it is stopping (grace pending, no finalizers) must not make the pod vanish before its
/// terminal phase is visible, and a released finalizer waits for the kubelet's grace-0 delete.
#[tokio::test]
async fn updates_of_a_terminating_pod_delete_it_only_when_the_last_finalizer_goes_with_no_grace_left() {
    let store = Store::new(StoreConfig::default());
    for name in ["plain", "held"] {
        let mut p = pod(name, json!({}));
        if name == "held" {
            p["metadata"]["finalizers"] = json!(["example.com/hold"]);
        }
        store.create(&pods(), "ns", p, &opts("t")).await.unwrap();
        store.bind_pod("ns", name, "node-1", &opts("scheduler")).await.unwrap();
        let d = store
            .delete(&pods(), "ns", name, &DeleteOptions::default())
            .await
            .unwrap();
        assert!(!d.gone, "{name}: a bound pod waits for its kubelet");
    }

    // The kubelet reports the final phase of the pod it stopped: an ordinary update.
    let mut plain = store.get(&pods(), "ns", "plain").unwrap();
    plain["status"] = json!({ "phase": "Succeeded" });
    let w = store
        .update(&pods(), "ns", "plain", plain, Some("status"), &opts("kubelet"))
        .await
        .unwrap();
    assert_eq!(w.object["status"]["phase"], "Succeeded");
    assert_eq!(
        store.get(&pods(), "ns", "plain").unwrap()["status"]["phase"],
        "Succeeded",
        "still there, with its terminal phase, until the kubelet's final delete"
    );

    // Releasing the finalizer while the grace period runs leaves the pod to its kubelet ...
    let mut held = store.get(&pods(), "ns", "held").unwrap();
    held["metadata"]["finalizers"] = json!([]);
    store
        .update(&pods(), "ns", "held", held, None, &opts("operator"))
        .await
        .unwrap();
    assert!(store.get(&pods(), "ns", "held").is_ok());
    // ... whose grace-0 delete removes both.
    for name in ["plain", "held"] {
        let d = store.delete(&pods(), "ns", name, &with_grace(0)).await.unwrap();
        assert!(d.gone, "{name}");
    }

    // A finalizer removed after the grace-0 delete deletes the pod with that update.
    let mut p = pod("late", json!({}));
    p["metadata"]["finalizers"] = json!(["example.com/hold"]);
    store.create(&pods(), "ns", p, &opts("t")).await.unwrap();
    store
        .bind_pod("ns", "late", "node-1", &opts("scheduler"))
        .await
        .unwrap();
    let d = store.delete(&pods(), "ns", "late", &with_grace(0)).await.unwrap();
    assert!(!d.gone, "the finalizer holds it");
    let mut late = d.object;
    late["metadata"]["finalizers"] = json!([]);
    store
        .update(&pods(), "ns", "late", late, None, &opts("operator"))
        .await
        .unwrap();
    assert_eq!(store.get(&pods(), "ns", "late").unwrap_err().code(), 404);
}

#[tokio::test]
async fn pods_not_on_a_node_go_at_once_bound_pods_get_their_grace_period() {
    let store = Store::new(StoreConfig::default());
    store
        .create(&pods(), "ns", pod("free", json!({})), &opts("t"))
        .await
        .unwrap();
    let d = store.delete(&pods(), "ns", "free", &with_grace(30)).await.unwrap();
    assert!(d.gone);
    store
        .create(&pods(), "ns", pod("bound", json!({})), &opts("t"))
        .await
        .unwrap();
    let b = store
        .bind_pod("ns", "bound", "node-1", &opts("scheduler"))
        .await
        .unwrap()
        .object;
    assert_eq!(b["spec"]["nodeName"], "node-1");
    assert_eq!(
        store
            .bind_pod("ns", "bound", "node-2", &opts("scheduler"))
            .await
            .unwrap_err()
            .code(),
        409
    );
    let d = store
        .delete(&pods(), "ns", "bound", &DeleteOptions::default())
        .await
        .unwrap();
    assert!(!d.gone);
    assert_eq!(d.object["metadata"]["deletionGracePeriodSeconds"], 30);
    let d = store.delete(&pods(), "ns", "bound", &with_grace(0)).await.unwrap();
    assert!(d.gone, "grace period 0 removes it");
    // Pod spec is immutable apart from images and a few fields.
    store
        .create(&pods(), "ns", pod("p", json!({})), &opts("t"))
        .await
        .unwrap();
    let bad = PatchBody::Strategic(
        json!({ "spec": { "containers": [{ "name": "main", "env": [{ "name": "B", "value": "2" }] }] } }),
    );
    let err = store
        .patch(&pods(), "ns", "p", &bad, None, &opts("t"))
        .await
        .unwrap_err();
    assert_eq!(err.code(), 422);
    assert!(err.to_string().contains("pod updates may not change fields"), "{err}");
}

#[tokio::test]
async fn label_and_field_selectors_and_pagination() {
    let store = Store::new(StoreConfig::default());
    for (i, tier) in ["driver", "executor", "executor", "other"].iter().enumerate() {
        store
            .create(
                &pods(),
                "ns",
                pod(&format!("p{i}"), json!({ "tier": tier, "app": "spark" })),
                &opts("t"),
            )
            .await
            .unwrap();
    }
    store.bind_pod("ns", "p1", "n1", &opts("s")).await.unwrap();
    let names = |l: &Value| {
        l["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["metadata"]["name"].as_str().unwrap().to_string())
            .collect::<Vec<_>>()
    };
    let list = |label: Option<&str>, field: Option<&str>| ListOptions {
        label_selector: label.map(str::to_string),
        field_selector: field.map(str::to_string),
        ..Default::default()
    };
    assert_eq!(
        names(
            &store
                .list(&pods(), Some("ns"), &list(Some("tier in (driver,executor)"), None))
                .unwrap()
        ),
        ["p0", "p1", "p2"]
    );
    assert_eq!(
        names(
            &store
                .list(&pods(), Some("ns"), &list(Some("tier!=executor,app=spark"), None))
                .unwrap()
        ),
        ["p0", "p3"]
    );
    assert_eq!(
        names(
            &store
                .list(&pods(), None, &list(None, Some("spec.nodeName=n1")))
                .unwrap()
        ),
        ["p1"]
    );
    assert_eq!(
        names(
            &store
                .list(
                    &pods(),
                    Some("ns"),
                    &list(None, Some("status.phase=Pending,metadata.name!=p0"))
                )
                .unwrap()
        ),
        ["p1", "p2", "p3"]
    );
    let err = store
        .list(&cms(), None, &list(None, Some("spec.nodeName=n1")))
        .unwrap_err();
    assert_eq!(
        (err.code(), err.to_string()),
        (400, "field label not supported: spec.nodeName".to_string())
    );
    assert!(names(&store.list(&pods(), Some("other"), &ListOptions::default()).unwrap()).is_empty());

    // limit/continue: pages at one resourceVersion with remainingItemCount.
    let first = store
        .list(
            &pods(),
            Some("ns"),
            &ListOptions {
                limit: Some(3),
                ..Default::default()
            },
        )
        .unwrap();
    assert_eq!(names(&first), ["p0", "p1", "p2"]);
    assert_eq!(first["metadata"]["remainingItemCount"], 1);
    let token = first["metadata"]["continue"].as_str().unwrap().to_string();
    store
        .create(&pods(), "ns", pod("p9", json!({})), &opts("t"))
        .await
        .unwrap();
    let second = store
        .list(
            &pods(),
            Some("ns"),
            &ListOptions {
                limit: Some(3),
                continue_token: Some(token),
                ..Default::default()
            },
        )
        .unwrap();
    assert_eq!(names(&second), ["p3"], "the page is from the first page's snapshot");
    assert_eq!(rv(&second), rv(&first));
    assert!(second["metadata"].get("continue").is_none());
    // A continue token from before a compaction is expired (410).
    let page = store
        .list(
            &pods(),
            Some("ns"),
            &ListOptions {
                limit: Some(1),
                ..Default::default()
            },
        )
        .unwrap();
    store.compact();
    let stale = ListOptions {
        limit: Some(1),
        continue_token: page["metadata"]["continue"].as_str().map(str::to_string),
        ..Default::default()
    };
    let err = store.list(&pods(), Some("ns"), &stale).unwrap_err();
    assert_eq!((err.code(), err.reason()), (410, "Expired"));
}

#[tokio::test]
async fn patch_types_and_strategic_merge_keys() {
    let store = store_with_crd().await;
    store
        .create(&pods(), "ns", pod("p", json!({ "a": "1" })), &opts("t"))
        .await
        .unwrap();
    let smp = PatchBody::Strategic(json!({ "spec": { "containers": [{ "name": "main", "image": "busybox:1.37" }] } }));
    let p = store
        .patch(&pods(), "ns", "p", &smp, None, &opts("t"))
        .await
        .unwrap()
        .object;
    assert_eq!(p["spec"]["containers"][0]["image"], "busybox:1.37");
    assert_eq!(
        p["spec"]["containers"][0]["env"][0]["name"], "A",
        "strategic merge keeps the rest of the container"
    );
    let merge = PatchBody::Merge(json!({ "metadata": { "labels": { "a": null, "b": "2" } } }));
    let p = store
        .patch(&pods(), "ns", "p", &merge, None, &opts("t"))
        .await
        .unwrap()
        .object;
    assert_eq!(p["metadata"]["labels"], json!({ "b": "2" }));
    let jp = PatchBody::Json(json!([{ "op": "test", "path": "/metadata/labels/b", "value": "wrong" }]));
    assert_eq!(
        store
            .patch(&pods(), "ns", "p", &jp, None, &opts("t"))
            .await
            .unwrap_err()
            .code(),
        422
    );
    // Custom resources do not take strategic merge patches.
    store
        .create(
            &things(),
            "ns",
            json!({ "apiVersion": "example.com/v1", "kind": "Thing", "metadata": { "name": "t" } }),
            &opts("t"),
        )
        .await
        .unwrap();
    let err = store
        .patch(&things(), "ns", "t", &PatchBody::Strategic(json!({})), None, &opts("t"))
        .await
        .unwrap_err();
    assert_eq!(err.code(), 415);
    assert!(matches!(
        store
            .patch(&pods(), "ns", "nope", &merge, None, &opts("t"))
            .await
            .unwrap_err(),
        ApiError::NotFound(_)
    ));
}

#[tokio::test]
async fn server_side_apply_tracks_owners_conflicts_and_force() {
    let store = store_with_crd().await;
    let applied = |n: i64| json!({ "apiVersion": "example.com/v1", "kind": "Thing", "metadata": { "name": "t", "labels": { "team": "a" } }, "spec": { "n": n, "owner": "alice" } });
    let apply = |m: &str, force: bool| WriteOptions {
        field_manager: Some(m.into()),
        force,
        ..Default::default()
    };
    let created = store
        .patch(
            &things(),
            "ns",
            "t",
            &PatchBody::Apply(applied(1)),
            None,
            &apply("alice", false),
        )
        .await
        .unwrap();
    assert!(created.created, "apply creates a missing object");
    assert_eq!(created.object["metadata"]["managedFields"][0]["manager"], "alice");
    assert_eq!(created.object["metadata"]["managedFields"][0]["operation"], "Apply");
    // An update by someone else takes ownership of what it changes.
    let upd = PatchBody::Merge(json!({ "spec": { "n": 5 } }));
    store
        .patch(&things(), "ns", "t", &upd, None, &opts("bob"))
        .await
        .unwrap();
    let err = store
        .patch(
            &things(),
            "ns",
            "t",
            &PatchBody::Apply(applied(1)),
            None,
            &apply("alice", false),
        )
        .await
        .unwrap_err();
    assert_eq!(err.code(), 409);
    assert_eq!(
        err.to_string(),
        "Apply failed with 1 conflict: conflict with \"bob\" using example.com/v1: .spec.n"
    );
    assert_eq!(
        err.to_status()["details"]["causes"][0]["reason"],
        "FieldManagerConflict"
    );
    let forced = store
        .patch(
            &things(),
            "ns",
            "t",
            &PatchBody::Apply(applied(1)),
            None,
            &apply("alice", true),
        )
        .await
        .unwrap()
        .object;
    assert_eq!(forced["spec"]["n"], 1);
    // Applying less removes what alice alone owned.
    let less =
        json!({ "apiVersion": "example.com/v1", "kind": "Thing", "metadata": { "name": "t" }, "spec": { "n": 1 } });
    let t = store
        .patch(
            &things(),
            "ns",
            "t",
            &PatchBody::Apply(less),
            None,
            &apply("alice", false),
        )
        .await
        .unwrap()
        .object;
    assert!(t["spec"].get("owner").is_none());
    assert!(t["metadata"].get("labels").is_none());
    let missing_manager = store
        .patch(
            &things(),
            "ns",
            "t",
            &PatchBody::Apply(applied(1)),
            None,
            &WriteOptions::default(),
        )
        .await
        .unwrap_err();
    assert_eq!(missing_manager.code(), 422);
}

#[tokio::test]
async fn objects_over_etcds_limit_are_rejected_with_its_error() {
    let store = Store::new(StoreConfig::default());
    // A pod: no size rule limits an env value (a ConfigMap's data stops at 1 MiB in validation).
    let pod = |name: &str, value: String| {
        json!({ "metadata": { "name": name },
                "spec": { "containers": [{ "name": "c", "image": "i", "env": [{ "name": "V", "value": value }] }] } })
    };
    let err = store
        .create(&pods(), "ns", pod("big", "x".repeat(1600 * 1024)), &opts("t"))
        .await
        .unwrap_err();
    assert_eq!(
        (err.code(), err.to_string()),
        (500, "etcdserver: request is too large".to_string())
    );
    assert!(err.to_status().get("reason").is_none());
    store
        .create(&pods(), "ns", pod("ok", "x".repeat(1400 * 1024)), &opts("t"))
        .await
        .unwrap();
    let err = store
        .create(
            &cms(),
            "ns",
            json!({ "metadata": { "name": "cm" }, "data": { "k": "x".repeat(1100 * 1024) } }),
            &opts("t"),
        )
        .await
        .unwrap_err();
    assert_eq!(err.code(), 422, "{err}");
}

#[tokio::test]
async fn generate_name_dry_run_and_validation() {
    let store = Store::new(StoreConfig::default());
    let before = store.current_rv();
    let dry = WriteOptions {
        dry_run: true,
        ..opts("t")
    };
    let d = store
        .create(&cms(), "ns", json!({ "metadata": { "generateName": "cm-" } }), &dry)
        .await
        .unwrap()
        .object;
    assert!(d["metadata"]["name"].as_str().unwrap().starts_with("cm-"));
    assert_eq!(store.current_rv(), before, "dry run stores nothing");
    let c = store
        .create(
            &cms(),
            "ns",
            json!({ "metadata": { "generateName": "cm-" } }),
            &opts("t"),
        )
        .await
        .unwrap()
        .object;
    assert_eq!(c["metadata"]["name"].as_str().unwrap().len(), "cm-".len() + 5);
    let err = store
        .create(&cms(), "ns", json!({ "metadata": {} }), &opts("t"))
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "ConfigMap \"\" is invalid: metadata.name: Required value: name or generateName is required"
    );
    let err = store
        .create(
            &pods(),
            "ns",
            json!({ "metadata": { "name": "p" }, "spec": {} }),
            &opts("t"),
        )
        .await
        .unwrap_err();
    assert_eq!(err.code(), 422);
    assert_eq!(err.to_status()["details"]["causes"][0]["field"], "spec.containers");
}

#[tokio::test]
async fn watches_follow_selectors_and_expire() {
    let store = Store::new(StoreConfig {
        history_limit: 4,
        ..Default::default()
    });
    // Watch from a specific resourceVersion ("0" would mean "any", i.e. the current state).
    store
        .create(&cms(), "other", json!({ "metadata": { "name": "z" } }), &opts("t"))
        .await
        .unwrap();
    let start = store.current_rv().to_string();
    let w = WatchOptions {
        resource_version: Some(start.clone()),
        label_selector: Some("app=x".into()),
        ..Default::default()
    };
    let mut watch = store.watch(&cms(), None, &w).unwrap();
    store
        .create(
            &cms(),
            "ns",
            json!({ "metadata": { "name": "a", "labels": { "app": "y" } } }),
            &opts("t"),
        )
        .await
        .unwrap();
    store
        .patch(
            &cms(),
            "ns",
            "a",
            &PatchBody::Merge(json!({ "metadata": { "labels": { "app": "x" } } })),
            None,
            &opts("t"),
        )
        .await
        .unwrap();
    store
        .patch(
            &cms(),
            "ns",
            "a",
            &PatchBody::Merge(json!({ "data": { "k": "v" } })),
            None,
            &opts("t"),
        )
        .await
        .unwrap();
    store
        .patch(
            &cms(),
            "ns",
            "a",
            &PatchBody::Merge(json!({ "metadata": { "labels": { "app": "z" } } })),
            None,
            &opts("t"),
        )
        .await
        .unwrap();
    let types: Vec<&str> = vec![
        next(&mut watch).await.unwrap().type_,
        next(&mut watch).await.unwrap().type_,
        next(&mut watch).await.unwrap().type_,
    ];
    assert_eq!(
        types,
        ["ADDED", "MODIFIED", "DELETED"],
        "entering and leaving the selection"
    );
    // The history keeps 4 changes: a watch from the start is now too old.
    store
        .create(&cms(), "ns", json!({ "metadata": { "name": "b" } }), &opts("t"))
        .await
        .unwrap();
    let mut old = store
        .watch(
            &cms(),
            None,
            &WatchOptions {
                resource_version: Some(start),
                ..Default::default()
            },
        )
        .unwrap();
    let ev = next(&mut old).await.unwrap();
    assert_eq!(ev.type_, "ERROR");
    assert_eq!(
        (ev.object["code"].clone(), ev.object["reason"].clone()),
        (json!(410), json!("Expired"))
    );
    assert!(next(&mut old).await.is_none());
    // "" starts with the current state.
    let mut fresh = store.watch(&cms(), Some("ns"), &WatchOptions::default()).unwrap();
    assert_eq!(next(&mut fresh).await.unwrap().type_, "ADDED");
    assert_eq!(next(&mut fresh).await.unwrap().type_, "ADDED");
    // sendInitialEvents ends the initial state with a bookmark.
    let w = WatchOptions {
        send_initial_events: Some(true),
        resource_version_match: Some("NotOlderThan".into()),
        allow_bookmarks: true,
        ..Default::default()
    };
    let mut streaming = store.watch(&cms(), Some("ns"), &w).unwrap();
    next(&mut streaming).await.unwrap();
    next(&mut streaming).await.unwrap();
    let bm = next(&mut streaming).await.unwrap();
    assert_eq!(bm.type_, "BOOKMARK");
    assert_eq!(
        bm.object["metadata"]["annotations"]["k8s.io/initial-events-end"],
        "true"
    );
    store.cut_all_watches();
    assert!(next(&mut streaming).await.is_none(), "cut watches end");
}

/// Records what admission saw and denies pods named "denied".
struct Recorder(Arc<Mutex<Vec<String>>>);

impl AdmissionPlugin for Recorder {
    fn name(&self) -> &str {
        "recorder"
    }
    fn mutate<'a>(&'a self, req: &'a mut AdmissionRequest) -> BoxFuture<'a, Result<(), ApiError>> {
        Box::pin(async move {
            self.0.lock().unwrap().push(format!(
                "mutate {} {} name={:?}",
                req.operation.as_str(),
                req.resource,
                req.name
            ));
            if req.operation == Operation::Create
                && let Some(obj) = req.object.as_mut()
            {
                obj["metadata"]["labels"] = json!({ "mutated": "yes" });
            }
            Ok(())
        })
    }
    fn validate<'a>(&'a self, req: &'a AdmissionRequest) -> BoxFuture<'a, Result<(), ApiError>> {
        Box::pin(async move {
            self.0
                .lock()
                .unwrap()
                .push(format!("validate {} name={:?}", req.operation.as_str(), req.name));
            if req.name.starts_with("denied") {
                return Err(ApiError::Forbidden(format!(
                    "admission webhook \"test\" denied the request: no {}",
                    req.name
                )));
            }
            Ok(())
        })
    }
}

#[tokio::test]
async fn admission_runs_mutating_then_validating_in_the_write_path() {
    let store = Store::new(StoreConfig::default());
    let seen = Arc::new(Mutex::new(Vec::new()));
    store.add_admission_plugin(Arc::new(Recorder(seen.clone())));
    let c = store
        .create(
            &cms(),
            "ns",
            json!({ "metadata": { "generateName": "g-" } }),
            &opts("t"),
        )
        .await
        .unwrap()
        .object;
    assert_eq!(c["metadata"]["labels"]["mutated"], "yes");
    let err = store
        .create(&cms(), "ns", json!({ "metadata": { "name": "denied-1" } }), &opts("t"))
        .await
        .unwrap_err();
    assert_eq!(err.code(), 403);
    assert!(store.get(&cms(), "ns", "denied-1").is_err());
    let name = c["metadata"]["name"].as_str().unwrap().to_string();
    store
        .delete(&cms(), "ns", &name, &DeleteOptions::default())
        .await
        .unwrap();
    let seen = seen.lock().unwrap().clone();
    assert_eq!(
        seen[0], "mutate CREATE configmaps name=\"\"",
        "generateName is resolved after mutating admission"
    );
    assert_eq!(seen[1], format!("validate CREATE name={name:?}"));
    assert_eq!(
        seen[4..],
        [
            format!("mutate DELETE configmaps name={name:?}"),
            format!("validate DELETE name={name:?}")
        ]
    );
}

#[tokio::test]
async fn crds_serve_their_resource_until_deleted() {
    let store = store_with_crd().await;
    let crd = store.get(&crds(), "", "things.example.com").unwrap();
    let established = crd["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .any(|c| c["type"] == "Established" && c["status"] == "True");
    assert!(established);
    store
        .create(
            &things(),
            "ns",
            json!({ "apiVersion": "example.com/v1", "kind": "Thing", "metadata": { "name": "t" } }),
            &opts("t"),
        )
        .await
        .unwrap();
    let gone = store
        .delete(&crds(), "", "things.example.com", &DeleteOptions::default())
        .await
        .unwrap();
    assert!(!gone.gone || gone.object["metadata"]["deletionTimestamp"].is_string());
    assert!(
        store.get(&crds(), "", "things.example.com").is_err(),
        "the cleanup finalizer ran"
    );
    assert!(matches!(
        store.get(&things(), "ns", "t").unwrap_err(),
        ApiError::ResourceNotServed
    ));
}

#[tokio::test]
async fn delete_collection_and_namespace_termination() {
    let store = Store::new(StoreConfig::default());
    for (n, l) in [("a", "x"), ("b", "x"), ("c", "y")] {
        store
            .create(
                &cms(),
                "ns",
                json!({ "metadata": { "name": n, "labels": { "l": l } } }),
                &opts("t"),
            )
            .await
            .unwrap();
    }
    let list = ListOptions {
        label_selector: Some("l=x".into()),
        ..Default::default()
    };
    let deleted = store
        .delete_collection(&cms(), Some("ns"), &list, &DeleteOptions::default())
        .await
        .unwrap();
    assert_eq!(deleted["items"].as_array().unwrap().len(), 2);
    assert_eq!(
        store.list(&cms(), Some("ns"), &ListOptions::default()).unwrap()["items"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    let ns = Gvr::new("", "v1", "namespaces");
    store
        .create(&ns, "", json!({ "metadata": { "name": "team" } }), &opts("t"))
        .await
        .unwrap();
    let d = store.delete(&ns, "", "team", &DeleteOptions::default()).await.unwrap();
    assert!(!d.gone);
    assert_eq!(d.object["status"]["phase"], "Terminating");
    // What the namespace controller does once the namespace is empty.
    let fin = json!({ "apiVersion": "v1", "kind": "Namespace", "metadata": { "name": "team" }, "spec": { "finalizers": [] } });
    let done = store
        .update(&ns, "", "team", fin, Some("finalize"), &opts("namespace-controller"))
        .await
        .unwrap();
    assert!(done.object["metadata"]["deletionTimestamp"].is_string());
    assert!(store.get(&ns, "", "team").is_err());
}

/// A validating plugin that warns.
struct Warner;

impl AdmissionPlugin for Warner {
    fn name(&self) -> &str {
        "warner"
    }
    fn validate_with_warnings<'a>(&'a self, req: &'a mut AdmissionRequest) -> BoxFuture<'a, Result<(), ApiError>> {
        Box::pin(async move {
            req.warnings.push(format!("{} is deprecated", req.resource));
            Ok(())
        })
    }
}

#[tokio::test]
async fn validating_admission_can_return_warnings() {
    let store = Store::new(StoreConfig::default());
    store.add_admission_plugin(Arc::new(Warner));
    let written = store
        .create(&cms(), "ns", json!({ "metadata": { "name": "w" } }), &opts("t"))
        .await
        .unwrap();
    assert_eq!(written.warnings, ["configmaps is deprecated"]);
}

/// Pod validation through the write path, worded as kube-apiserver words it (one error bare, several
/// in brackets), and what it accepts.
#[tokio::test]
async fn pods_are_refused_and_accepted_as_kube_apiserver_does() {
    let store = Store::new(StoreConfig::default());
    let create = |name: &str, container: Value| {
        let store = store.clone();
        let body = json!({ "metadata": { "name": name }, "spec": { "containers": [container] } });
        async move { store.create(&pods(), "ns", body, &opts("t")).await }
    };
    let err = create(
        "x",
        json!({ "name": "c", "image": "i", "imagePullPolicy": "Sometimes" }),
    )
    .await
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "Pod \"x\" is invalid: spec.containers[0].imagePullPolicy: Unsupported value: \"Sometimes\": supported values: \"Always\", \"IfNotPresent\", \"Never\""
    );
    assert_eq!(err.code(), 422);
    let err = create(
        "y",
        json!({ "name": "c", "image": "i", "env": [{ "name": "A=B" }],
        "ports": [{ "containerPort": 65536 }] }),
    )
    .await
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "Pod \"y\" is invalid: [spec.containers[0].ports[0].containerPort: Invalid value: 65536: must be between 1 and 65535, inclusive, \
         spec.containers[0].env[0].name: Invalid value: \"A=B\": a valid environment variable name must consist only of printable ASCII characters other than '=']"
    );

    // A legal 70-character name (a DNS-1123 subdomain may be 253), a relaxed env name and a
    // relative mount path (the kubelet makes it absolute) are accepted.
    let long = "a".repeat(70);
    let created = create(
        &long,
        json!({ "name": "c", "image": "i", "env": [{ "name": "my var", "value": "1" }] }),
    )
    .await
    .unwrap();
    assert_eq!(created.object["metadata"]["name"], long.as_str());
    let body = json!({ "metadata": { "name": "rel" }, "spec": {
        "volumes": [{ "name": "data", "emptyDir": {} }],
        "containers": [{ "name": "c", "image": "i", "volumeMounts": [{ "name": "data", "mountPath": "data" }] }] } });
    store.create(&pods(), "ns", body, &opts("t")).await.unwrap();
}

/// CRD validation ratcheting (1.30+, GA in 1.33): an object stored under a looser CRD keeps its
/// now-invalid value through status writes and unrelated spec changes; changing that value to
/// another invalid one is refused.
#[tokio::test]
async fn crd_validation_ratchets_unchanged_values() {
    let crd = |max: Option<i64>| {
        let mut replicas = json!({ "type": "integer" });
        if let Some(m) = max {
            replicas["maximum"] = json!(m);
        }
        json!({
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": { "name": "things.example.com" },
            "spec": { "group": "example.com", "scope": "Namespaced",
                "names": { "plural": "things", "singular": "thing", "kind": "Thing" },
                "versions": [{ "name": "v1", "served": true, "storage": true, "subresources": { "status": {} },
                    "schema": { "openAPIV3Schema": { "type": "object", "properties": {
                        "spec": { "type": "object", "properties": {
                            "replicas": replicas, "note": { "type": "string" } } },
                        "status": { "type": "object", "properties": { "state": { "type": "string" } } } } } } }] }
        })
    };
    let store = Store::new(StoreConfig::default());
    store.create(&crds(), "", crd(None), &opts("t")).await.unwrap();
    let thing = json!({ "apiVersion": "example.com/v1", "kind": "Thing", "metadata": { "name": "t" },
        "spec": { "replicas": 50 } });
    store.create(&things(), "ns", thing, &opts("t")).await.unwrap();

    // Tighten the CRD.
    let mut tightened = store.get(&crds(), "", "things.example.com").unwrap();
    let rv_now = rv(&tightened);
    tightened["spec"] = crd(Some(10))["spec"].clone();
    tightened["metadata"]["resourceVersion"] = json!(rv_now);
    store
        .update(&crds(), "", "things.example.com", tightened, None, &opts("t"))
        .await
        .unwrap();
    let fresh = json!({ "apiVersion": "example.com/v1", "kind": "Thing", "metadata": { "name": "u" },
        "spec": { "replicas": 50 } });
    let err = store.create(&things(), "ns", fresh, &opts("t")).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "Thing.example.com \"u\" is invalid: spec.replicas: Invalid value: 50: spec.replicas in body should be less than or equal to 10"
    );

    // A status write keeps the spec as stored: its invalid replicas is unchanged, so it passes.
    let mut current = store.get(&things(), "ns", "t").unwrap();
    current["status"] = json!({ "state": "Running" });
    let written = store
        .update(&things(), "ns", "t", current, Some("status"), &opts("t"))
        .await
        .unwrap();
    assert_eq!(written.object["status"]["state"], "Running");

    // A spec change elsewhere, replicas kept: passes.
    let mut current = written.object.clone();
    current["spec"]["note"] = json!("changed");
    let written = store
        .update(&things(), "ns", "t", current, None, &opts("t"))
        .await
        .unwrap();
    assert_eq!(written.object["spec"]["replicas"], 50);

    // Changing replicas to another invalid value is validated and refused.
    let mut current = written.object.clone();
    current["spec"]["replicas"] = json!(60);
    let err = store
        .update(&things(), "ns", "t", current, None, &opts("t"))
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "Thing.example.com \"t\" is invalid: spec.replicas: Invalid value: 60: spec.replicas in body should be less than or equal to 10"
    );
}
