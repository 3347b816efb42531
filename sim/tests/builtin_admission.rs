//! NamespaceLifecycle, ServiceAccount admission and their controllers, through kube-rs.
#![allow(clippy::expect_used)]

use std::future::Future;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod, ServiceAccount};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube_sim::{Sim, SimConfig};
use serde_json::json;

async fn start(tune: impl FnOnce(&mut SimConfig)) -> (Sim, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = SimConfig::new(dir.path().join("data"));
    tune(&mut config);
    let sim = Sim::start(config).await.expect("sim starts");
    (sim, dir)
}

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

fn api_error(result: Result<impl std::fmt::Debug, kube::Error>) -> kube::core::Status {
    match result {
        Err(kube::Error::Api(e)) => *e,
        other => panic!("expected an API error, got {other:?}"),
    }
}

async fn create_namespace(client: &kube::Client, name: &str) {
    let ns: Namespace = serde_json::from_value(json!({ "metadata": { "name": name } })).expect("namespace");
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .expect("namespace created");
}

fn pod(name: &str, service_account: Option<&str>) -> Pod {
    let mut spec = json!({ "containers": [{ "name": "main", "image": "busybox:1.36" }] });
    if let Some(sa) = service_account {
        spec["serviceAccountName"] = json!(sa);
    }
    serde_json::from_value(json!({ "metadata": { "name": name }, "spec": spec })).expect("pod")
}

#[tokio::test]
async fn creating_in_a_missing_namespace_fails_with_the_real_message() {
    let (sim, _dir) = start(|_| {}).await;
    let client = sim.client().await.expect("client");
    let cms: Api<ConfigMap> = Api::namespaced(client, "nope");
    let cm: ConfigMap = serde_json::from_value(json!({ "metadata": { "name": "c" } })).expect("cm");
    let e = api_error(cms.create(&PostParams::default(), &cm).await);
    assert_eq!(e.code, 404);
    assert_eq!(e.reason, "NotFound");
    assert_eq!(e.message, "namespaces \"nope\" not found");
}

#[tokio::test]
async fn namespace_deletion_removes_its_content_then_the_namespace() {
    let (sim, _dir) = start(|_| {}).await;
    let client = sim.client().await.expect("client");
    create_namespace(&client, "doomed").await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "doomed");
    for name in ["a", "b"] {
        let cm: ConfigMap = serde_json::from_value(json!({ "metadata": { "name": name } })).expect("cm");
        cms.create(&PostParams::default(), &cm).await.expect("cm");
    }
    let held: ConfigMap =
        serde_json::from_value(json!({ "metadata": { "name": "held", "finalizers": ["example.com/hold"] } }))
            .expect("cm");
    cms.create(&PostParams::default(), &held).await.expect("held cm");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "doomed");
    pods.create(&PostParams::default(), &pod("p", None)).await.expect("pod");

    let namespaces = Api::<Namespace>::all(client.clone());
    namespaces
        .delete("doomed", &DeleteParams::default())
        .await
        .expect("delete namespace");
    let ns = namespaces.get("doomed").await.expect("terminating namespace stays");
    assert_eq!(ns.status.and_then(|s| s.phase).as_deref(), Some("Terminating"));

    // Nothing new may be created while it terminates.
    let late: ConfigMap = serde_json::from_value(json!({ "metadata": { "name": "late" } })).expect("cm");
    let e = api_error(cms.create(&PostParams::default(), &late).await);
    assert_eq!(e.code, 403);
    assert_eq!(e.reason, "Forbidden");
    assert_eq!(
        e.message,
        "configmaps \"late\" is forbidden: unable to create new content in namespace doomed because it is being terminated"
    );

    eventually("the content to be deleted", || async {
        pods.get_opt("p").await.expect("get").is_none() && cms.get_opt("a").await.expect("get").is_none()
    })
    .await;
    // The held object keeps the namespace, and the namespace says why.
    eventually("the namespace to report what remains", || async {
        let ns = namespaces.get("doomed").await.expect("namespace");
        let conditions = ns.status.and_then(|s| s.conditions).unwrap_or_default();
        conditions.iter().any(|c| {
            c.type_ == "NamespaceFinalizersRemaining"
                && c.status == "True"
                && c.message.as_deref()
                    == Some("Some content in the namespace has finalizers remaining: example.com/hold in 1 resource instances")
        }) && conditions.iter().any(|c| {
            c.type_ == "NamespaceContentRemaining"
                && c.message.as_deref() == Some("Some resources are remaining: configmaps. has 1 resource instances")
        })
    })
    .await;
    assert!(
        cms.get("held")
            .await
            .expect("held")
            .metadata
            .deletion_timestamp
            .is_some()
    );

    cms.patch(
        "held",
        &PatchParams::default(),
        &Patch::Merge(json!({ "metadata": { "finalizers": null } })),
    )
    .await
    .expect("release the held object");
    eventually("the namespace to be gone", || async {
        namespaces.get_opt("doomed").await.expect("get").is_none()
    })
    .await;
}

#[tokio::test]
async fn protected_namespaces_cannot_be_deleted() {
    let (sim, _dir) = start(|_| {}).await;
    let namespaces = Api::<Namespace>::all(sim.client().await.expect("client"));
    for name in ["default", "kube-system", "kube-public"] {
        let e = api_error(namespaces.delete(name, &DeleteParams::default()).await);
        assert_eq!(e.code, 403);
        assert_eq!(
            e.message,
            format!("namespaces \"{name}\" is forbidden: this namespace may not be deleted")
        );
    }
    assert!(
        namespaces
            .get("default")
            .await
            .expect("default")
            .metadata
            .deletion_timestamp
            .is_none()
    );
}

#[tokio::test]
async fn pods_need_their_service_account() {
    let (sim, _dir) = start(|_| {}).await;
    let client = sim.client().await.expect("client");
    create_namespace(&client, "spark-jobs").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "spark-jobs");

    let e = api_error(pods.create(&PostParams::default(), &pod("x", Some("spark"))).await);
    assert_eq!(e.code, 403);
    assert_eq!(e.reason, "Forbidden");
    assert_eq!(
        e.message,
        "pods \"x\" is forbidden: error looking up service account spark-jobs/spark: serviceaccount \"spark\" not found"
    );

    // The default ServiceAccount is made by the controller; a pod naming none gets it.
    let created = pods
        .create(&PostParams::default(), &pod("d", None))
        .await
        .expect("pod with the default account");
    let spec = created.spec.expect("spec");
    assert_eq!(spec.service_account_name.as_deref(), Some("default"));
    let volume = spec
        .volumes
        .unwrap_or_default()
        .into_iter()
        .find(|v| v.name.starts_with("kube-api-access-"))
        .expect("the projected token volume");
    let sources = volume.projected.and_then(|p| p.sources).unwrap_or_default();
    assert_eq!(sources.len(), 3);
    let mounts = spec.containers[0].volume_mounts.clone().unwrap_or_default();
    assert!(
        mounts
            .iter()
            .any(|m| m.name == volume.name && m.mount_path == "/var/run/secrets/kubernetes.io/serviceaccount")
    );

    // Once the account exists, the pod is admitted and inherits its pull secrets.
    let sas: Api<ServiceAccount> = Api::namespaced(client.clone(), "spark-jobs");
    let sa: ServiceAccount = serde_json::from_value(json!({
        "metadata": { "name": "spark" }, "imagePullSecrets": [{ "name": "registry" }], "automountServiceAccountToken": false
    }))
    .expect("sa");
    sas.create(&PostParams::default(), &sa).await.expect("service account");
    let admitted = pods
        .create(&PostParams::default(), &pod("x", Some("spark")))
        .await
        .expect("admitted");
    let spec = admitted.spec.expect("spec");
    assert_eq!(spec.image_pull_secrets.unwrap_or_default()[0].name, "registry");
    assert!(
        spec.volumes.unwrap_or_default().is_empty(),
        "automountServiceAccountToken: false on the account"
    );

    // A deleted default account comes back, as the controller recreates it.
    sas.delete("default", &DeleteParams::default())
        .await
        .expect("delete default");
    eventually("the default ServiceAccount to be recreated", || async {
        sas.get_opt("default").await.expect("get").is_some()
    })
    .await;
}

#[tokio::test]
async fn the_root_ca_configmap_is_published_when_asked_for() {
    let (sim, _dir) = start(|c| c.root_ca_configmap = true).await;
    let client = sim.client().await.expect("client");
    create_namespace(&client, "with-ca").await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "with-ca");
    eventually("kube-root-ca.crt", || async {
        cms.get_opt("kube-root-ca.crt").await.expect("get").is_some()
    })
    .await;
    let cm = cms.get("kube-root-ca.crt").await.expect("cm");
    assert_eq!(
        cm.data.unwrap_or_default().get("ca.crt").map(String::as_str),
        Some(sim.pki().ca_cert_pem.as_str())
    );
}

#[tokio::test]
async fn built_in_admission_can_be_switched_off() {
    let (sim, _dir) = start(|c| c.builtin_admission = false).await;
    let cms: Api<ConfigMap> = Api::namespaced(sim.client().await.expect("client"), "nowhere");
    let cm: ConfigMap = serde_json::from_value(json!({ "metadata": { "name": "c" } })).expect("cm");
    cms.create(&PostParams::default(), &cm)
        .await
        .expect("no NamespaceLifecycle: admitted");
}
