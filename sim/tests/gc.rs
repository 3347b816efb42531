//! The garbage collector through a real kube-rs client: background, foreground and orphan
//! deletion, and the cross-namespace owner reference that makes a dependent vanish.
#![allow(clippy::expect_used)]

use std::future::Future;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Event, Namespace};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, PropagationPolicy};
use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
use kube_sim::registry::Gvr;
use kube_sim::store::{Store, StoreConfig, WriteOptions};
use kube_sim::{Sim, SimConfig};
use serde_json::json;

async fn start() -> (Sim, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("tempdir");
    let sim = Sim::start(SimConfig::new(dir.path().join("data")))
        .await
        .expect("sim starts");
    (sim, dir)
}

/// Polls `check` until it holds; fails the test with `what` after 10 s.
async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !check().await {
        assert!(tokio::time::Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn namespace(client: &kube::Client, name: &str) {
    let ns: Namespace = serde_json::from_value(json!({ "metadata": { "name": name } })).expect("namespace");
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .expect("namespace created");
}

fn owner_ref(owner: &ConfigMap, block: bool) -> OwnerReference {
    OwnerReference {
        api_version: "v1".into(),
        kind: "ConfigMap".into(),
        name: owner.metadata.name.clone().expect("name"),
        uid: owner.metadata.uid.clone().expect("uid"),
        block_owner_deletion: block.then_some(true),
        controller: None,
    }
}

fn cm(name: &str, owners: Vec<OwnerReference>, finalizers: &[&str]) -> ConfigMap {
    let mut c: ConfigMap =
        serde_json::from_value(json!({ "metadata": { "name": name }, "data": { "k": "v" } })).expect("cm");
    if !owners.is_empty() {
        c.metadata.owner_references = Some(owners);
    }
    if !finalizers.is_empty() {
        c.metadata.finalizers = Some(finalizers.iter().map(|f| f.to_string()).collect());
    }
    c
}

async fn gone(api: &Api<ConfigMap>, name: &str) -> bool {
    api.get_opt(name).await.expect("get").is_none()
}

/// Creates a dependent of a missing owner and waits for the GC to delete it: everything the GC
/// was told before it has then been looked at (it works in change order).
async fn gc_caught_up(api: &Api<ConfigMap>) {
    let ghost = OwnerReference {
        api_version: "v1".into(),
        kind: "ConfigMap".into(),
        name: "ghost".into(),
        uid: "00000000-0000-0000-0000-000000000000".into(),
        ..Default::default()
    };
    let name = format!("sentinel-{}", uuid::Uuid::new_v4().simple());
    api.create(&PostParams::default(), &cm(&name, vec![ghost], &[]))
        .await
        .expect("sentinel");
    eventually("the GC to collect the sentinel", || gone(api, &name)).await;
}

#[tokio::test]
async fn cross_namespace_owner_reference_gets_the_dependent_deleted() {
    let (sim, _dir) = start().await;
    let client = sim.client().await.expect("client");
    namespace(&client, "argo").await;
    namespace(&client, "spark").await;

    // An Argo-like CRD: the Workflow lives in "argo", its "SparkApplication" in "spark".
    let crd = json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": { "name": "workflows.argoproj.io" },
        "spec": { "group": "argoproj.io", "scope": "Namespaced",
            "names": { "plural": "workflows", "singular": "workflow", "kind": "Workflow", "listKind": "WorkflowList" },
            "versions": [{ "name": "v1alpha1", "served": true, "storage": true,
                "schema": { "openAPIV3Schema": { "type": "object", "x-kubernetes-preserve-unknown-fields": true } } }] }
    });
    sim.store()
        .create(
            &Gvr::new("apiextensions.k8s.io", "v1", "customresourcedefinitions"),
            "",
            crd,
            &WriteOptions::default(),
        )
        .await
        .expect("crd");
    let gvk = GroupVersionKind::gvk("argoproj.io", "v1alpha1", "Workflow");
    let workflows: Api<DynamicObject> = Api::namespaced_with(client.clone(), "argo", &ApiResource::from_gvk(&gvk));
    let wf: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow", "metadata": { "name": "nightly" }, "spec": {}
    }))
    .expect("workflow");
    let wf = workflows
        .create(&PostParams::default(), &wf)
        .await
        .expect("workflow created");
    let wf_uid = wf.metadata.uid.clone().expect("uid");
    let to_wf = OwnerReference {
        api_version: "argoproj.io/v1alpha1".into(),
        kind: "Workflow".into(),
        name: "nightly".into(),
        uid: wf_uid.clone(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    };

    let in_argo: Api<ConfigMap> = Api::namespaced(client.clone(), "argo");
    let in_spark: Api<ConfigMap> = Api::namespaced(client.clone(), "spark");
    in_argo
        .create(&PostParams::default(), &cm("same-ns", vec![to_wf.clone()], &[]))
        .await
        .expect("same-namespace dependent");
    in_spark
        .create(&PostParams::default(), &cm("cross-ns", vec![to_wf], &[]))
        .await
        .expect("cross-namespace dependent");

    // The owner is looked up only in "spark", where it is not: the dependent goes.
    eventually("the cross-namespace dependent to be collected", || {
        gone(&in_spark, "cross-ns")
    })
    .await;
    gc_caught_up(&in_argo).await;
    assert!(
        !gone(&in_argo, "same-ns").await,
        "a dependent in the owner's namespace must stay"
    );
    assert!(
        workflows.get_opt("nightly").await.expect("get").is_some(),
        "the owner is untouched"
    );

    // The collector says why, as the real one does.
    let events: Api<Event> = Api::namespaced(client.clone(), "spark");
    let listed = events.list(&ListParams::default()).await.expect("events");
    let warning = listed
        .items
        .iter()
        .find(|e| e.reason.as_deref() == Some("OwnerRefInvalidNamespace"))
        .expect("an OwnerRefInvalidNamespace event");
    assert_eq!(warning.type_.as_deref(), Some("Warning"));
    assert_eq!(warning.involved_object.name.as_deref(), Some("cross-ns"));
    assert_eq!(
        warning.message.as_deref(),
        Some(format!("ownerRef [argoproj.io/v1alpha1/Workflow, namespace: spark, name: nightly, uid: {wf_uid}] does not exist in namespace \"spark\"").as_str())
    );
}

#[tokio::test]
async fn background_deletion_collects_dependents_whose_owners_are_all_gone() {
    let (sim, _dir) = start().await;
    let client = sim.client().await.expect("client");
    namespace(&client, "team").await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "team");
    let owner = api
        .create(&PostParams::default(), &cm("owner", vec![], &[]))
        .await
        .expect("owner");
    let other = api
        .create(&PostParams::default(), &cm("other-owner", vec![], &[]))
        .await
        .expect("other owner");
    api.create(
        &PostParams::default(),
        &cm("dep-1", vec![owner_ref(&owner, false)], &[]),
    )
    .await
    .expect("dep-1");
    api.create(&PostParams::default(), &cm("dep-2", vec![owner_ref(&owner, true)], &[]))
        .await
        .expect("dep-2");
    api.create(
        &PostParams::default(),
        &cm("shared", vec![owner_ref(&owner, false), owner_ref(&other, false)], &[]),
    )
    .await
    .expect("shared");

    // The default propagation is Background: the owner goes at once, its dependents after.
    api.delete("owner", &DeleteParams::default())
        .await
        .expect("delete owner");
    assert!(gone(&api, "owner").await);
    eventually("dep-1 and dep-2 to be collected", || async {
        gone(&api, "dep-1").await && gone(&api, "dep-2").await
    })
    .await;

    // A dependent with a live owner stays, without the reference to the gone one.
    eventually(
        "the dangling reference to be removed from the shared dependent",
        || async {
            let shared = api.get("shared").await.expect("shared stays");
            let refs = shared.metadata.owner_references.unwrap_or_default();
            refs.len() == 1 && refs[0].name == "other-owner"
        },
    )
    .await;
    api.delete("other-owner", &DeleteParams::default())
        .await
        .expect("delete the other owner");
    eventually("the shared dependent to be collected", || gone(&api, "shared")).await;
}

#[tokio::test]
async fn foreground_deletion_waits_for_blocking_dependents() {
    let (sim, _dir) = start().await;
    let client = sim.client().await.expect("client");
    namespace(&client, "fg").await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "fg");
    let owner = api
        .create(&PostParams::default(), &cm("owner", vec![], &[]))
        .await
        .expect("owner");
    // A blocking dependent held by a finalizer, a non-blocking one, and a blocking one.
    api.create(
        &PostParams::default(),
        &cm("held", vec![owner_ref(&owner, true)], &["example.com/hold"]),
    )
    .await
    .expect("held");
    api.create(
        &PostParams::default(),
        &cm("loose", vec![owner_ref(&owner, false)], &[]),
    )
    .await
    .expect("loose");
    api.create(
        &PostParams::default(),
        &cm("blocking", vec![owner_ref(&owner, true)], &[]),
    )
    .await
    .expect("blocking");

    api.delete(
        "owner",
        &DeleteParams {
            propagation_policy: Some(PropagationPolicy::Foreground),
            ..Default::default()
        },
    )
    .await
    .expect("delete in the foreground");
    let terminating = api.get("owner").await.expect("the owner stays while dependents remain");
    assert!(terminating.metadata.deletion_timestamp.is_some());
    assert!(
        terminating
            .metadata
            .finalizers
            .unwrap_or_default()
            .contains(&"foregroundDeletion".to_string())
    );

    eventually("the unheld dependents to be collected", || async {
        gone(&api, "loose").await && gone(&api, "blocking").await
    })
    .await;
    eventually("the held dependent to be terminating", || async {
        api.get("held")
            .await
            .expect("held")
            .metadata
            .deletion_timestamp
            .is_some()
    })
    .await;
    gc_caught_up(&api).await;
    assert!(
        !gone(&api, "owner").await,
        "a blocking dependent still exists: the owner must wait"
    );

    // Releasing the held dependent lets it go, and then the owner.
    api.patch(
        "held",
        &PatchParams::default(),
        &Patch::Merge(json!({ "metadata": { "finalizers": null } })),
    )
    .await
    .expect("release the held dependent");
    eventually("the owner to be deleted after its blocking dependents", || {
        gone(&api, "owner")
    })
    .await;
}

#[tokio::test]
async fn orphan_deletion_keeps_dependents_without_the_reference() {
    let (sim, _dir) = start().await;
    let client = sim.client().await.expect("client");
    namespace(&client, "orph").await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "orph");
    let owner = api
        .create(&PostParams::default(), &cm("owner", vec![], &[]))
        .await
        .expect("owner");
    let keeper = api
        .create(&PostParams::default(), &cm("keeper", vec![], &[]))
        .await
        .expect("keeper");
    api.create(
        &PostParams::default(),
        &cm("child", vec![owner_ref(&owner, true), owner_ref(&keeper, false)], &[]),
    )
    .await
    .expect("child");
    api.create(
        &PostParams::default(),
        &cm("only-child", vec![owner_ref(&owner, false)], &[]),
    )
    .await
    .expect("only child");

    api.delete(
        "owner",
        &DeleteParams {
            propagation_policy: Some(PropagationPolicy::Orphan),
            ..Default::default()
        },
    )
    .await
    .expect("delete orphaning");
    eventually("the owner to be deleted once its dependents are orphaned", || {
        gone(&api, "owner")
    })
    .await;
    let child = api.get("child").await.expect("child kept");
    let refs = child.metadata.owner_references.unwrap_or_default();
    assert_eq!(refs.iter().map(|r| r.name.as_str()).collect::<Vec<_>>(), ["keeper"]);
    let only = api.get("only-child").await.expect("only child kept");
    assert!(
        only.metadata.owner_references.is_none(),
        "the last reference is removed: {:?}",
        only.metadata.owner_references
    );
    gc_caught_up(&api).await;
    assert!(
        !gone(&api, "only-child").await,
        "an orphaned dependent is not collected later"
    );
}

#[tokio::test]
async fn unresolvable_owners_and_namespaced_owners_of_cluster_objects_are_left_alone() {
    let (sim, _dir) = start().await;
    let client = sim.client().await.expect("client");
    namespace(&client, "odd").await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "odd");
    let owner = api
        .create(&PostParams::default(), &cm("owner", vec![], &[]))
        .await
        .expect("owner");

    // A kind nothing serves: the real GC retries forever instead of deleting.
    let unknown = OwnerReference {
        api_version: "example.com/v1".into(),
        kind: "Gadget".into(),
        name: "g".into(),
        uid: "11111111-1111-1111-1111-111111111111".into(),
        ..Default::default()
    };
    api.create(&PostParams::default(), &cm("unknown-owner", vec![unknown], &[]))
        .await
        .expect("dependent of an unknown kind");
    // A cluster-scoped object naming a namespaced owner: never collected.
    let namespaces = Api::<Namespace>::all(client.clone());
    let mut ns: Namespace = serde_json::from_value(json!({ "metadata": { "name": "owned-ns" } })).expect("namespace");
    ns.metadata.owner_references = Some(vec![owner_ref(&owner, false)]);
    namespaces
        .create(&PostParams::default(), &ns)
        .await
        .expect("cluster-scoped dependent");

    gc_caught_up(&api).await;
    assert!(!gone(&api, "unknown-owner").await);
    assert!(namespaces.get_opt("owned-ns").await.expect("get").is_some());
}

#[tokio::test]
async fn the_collector_runs_on_a_bare_store() {
    let store = Store::new(StoreConfig::default());
    let _gc = kube_sim::gc::spawn(&store);
    let cms = Gvr::new("", "v1", "configmaps");
    let opts = WriteOptions::default();
    let owner = store
        .create(&cms, "default", json!({ "metadata": { "name": "owner" } }), &opts)
        .await
        .expect("owner");
    let uid = owner.object["metadata"]["uid"].as_str().expect("uid").to_string();
    let dep = json!({ "metadata": { "name": "dep", "ownerReferences": [{ "apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": uid }] } });
    store.create(&cms, "default", dep, &opts).await.expect("dependent");
    store
        .delete(&cms, "default", "owner", &Default::default())
        .await
        .expect("delete owner");
    eventually("the dependent to be collected", || async {
        store.get(&cms, "default", "dep").is_err()
    })
    .await;
}
