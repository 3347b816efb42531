//! ServiceAccount tokens as pods get them: a token bound to a pod authenticates over HTTPS as its
//! ServiceAccount (kube-rs with a bearer token, the audit log names the user), and stops working
//! when it is tampered with, expired, or its pod or ServiceAccount is gone.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic in a test is a failed assertion

mod common;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, ServiceAccount};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube_sim::Sim;
use kube_sim::service_account_tokens::{Claims, ObjectRef, TokenRequest};
use serde_json::json;

use common::{start_sim, within};

/// A kube-rs client of the sim that authenticates with `token` only.
async fn client_with_token(sim: &Sim, token: &str) -> kube::Client {
    let kc = kube::config::Kubeconfig::read_from(sim.kubeconfig_path()).unwrap();
    let opts = kube::config::KubeConfigOptions {
        context: Some("kube-sim-token".into()),
        ..Default::default()
    };
    let mut config = kube::Config::from_custom_kubeconfig(kc, &opts).await.unwrap();
    config.auth_info.token = Some(token.to_string().into());
    kube::Client::try_from(config).unwrap()
}

/// The answer's HTTP status: 200 for a successful get, else the API error's code.
async fn get_status(sim: &Sim, token: &str) -> u16 {
    let pods: Api<Pod> = Api::namespaced(client_with_token(sim, token).await, "default");
    match within("a get", pods.list(&ListParams::default())).await {
        Ok(_) => 200,
        Err(kube::Error::Api(status)) => status.code,
        Err(e) => panic!("unexpected error: {e}"),
    }
}

async fn create_pod(sim: &Sim, name: &str, sa: &str) -> Pod {
    let pods: Api<Pod> = Api::namespaced(sim.client().await.unwrap(), "default");
    let pod: Pod = serde_json::from_value(json!({
        "metadata": { "name": name },
        "spec": { "serviceAccountName": sa, "containers": [{ "name": "c", "image": "busybox" }] }
    }))
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap()
}

fn token_for(sim: &Sim, sa: &ServiceAccount, pod: &Pod, expiration_seconds: i64) -> String {
    let req = TokenRequest {
        namespace: "default".into(),
        service_account: ObjectRef::new(sa.metadata.name.clone().unwrap(), sa.metadata.uid.clone().unwrap()),
        pod: Some(ObjectRef::new(
            pod.metadata.name.clone().unwrap(),
            pod.metadata.uid.clone().unwrap(),
        )),
        node: None,
        audiences: vec![],
        expiration_seconds,
    };
    sim.service_account_tokens()
        .mint(&req, jiff::Timestamp::now().as_second())
}

#[tokio::test]
async fn pod_tokens_authenticate_as_their_service_account_until_invalid() {
    let (sim, _dir) = start_sim(|_| {}).await;
    let admin = sim.client().await.unwrap();
    let sas: Api<ServiceAccount> = Api::namespaced(admin.clone(), "default");
    let sa = sas
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({ "metadata": { "name": "runner" } })).unwrap(),
        )
        .await
        .unwrap();
    // What the pod's ServiceAccount does below (create a ConfigMap, read and list pods), granted as a
    // real cluster's RBAC demands.
    let grant = json!([
        { "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": { "name": "runner", "namespace": "default" },
          "rules": [{ "apiGroups": [""], "resources": ["configmaps"], "verbs": ["create"] },
                    { "apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"] }] },
        { "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": { "name": "runner", "namespace": "default" },
          "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "runner" },
          "subjects": [{ "kind": "ServiceAccount", "name": "runner", "namespace": "default" }] },
    ]);
    for (resource, obj) in ["roles", "rolebindings"].into_iter().zip(grant.as_array().unwrap()) {
        sim.store()
            .create(
                &kube_sim::registry::Gvr::new("rbac.authorization.k8s.io", "v1", resource),
                "default",
                obj.clone(),
                &Default::default(),
            )
            .await
            .unwrap();
    }
    let worker = create_pod(&sim, "worker", "runner").await;
    let other = create_pod(&sim, "other", "runner").await;
    // The admission's 3607 s: extended to a year, as kube-apiserver does by default.
    let token = token_for(&sim, &sa, &worker, 3607);
    let other_token = token_for(&sim, &sa, &other, 600);

    sim.audit().enable();
    let client = client_with_token(&sim, &token).await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    cms.create(
        &PostParams::default(),
        &serde_json::from_value(json!({ "metadata": { "name": "written-by-a-pod" } })).unwrap(),
    )
    .await
    .unwrap();
    let pods: Api<Pod> = Api::namespaced(client, "default");
    pods.get("worker").await.unwrap();
    let events = sim.audit().events();
    let create = events
        .iter()
        .find(|e| e.verb == "create" && e.resource == "configmaps")
        .expect("the create is audited");
    assert_eq!(create.username, "system:serviceaccount:default:runner");
    assert_eq!(create.code, 201);
    // The object's name, as kube-apiserver completes a create's objectRef from the request's object.
    assert_eq!(create.name.as_deref(), Some("written-by-a-pod"));
    // Tampered: claims changed without the key, or a signature bit flipped.
    let parts: Vec<&str> = token.split('.').collect();
    let mut claims: serde_json::Value = serde_json::from_slice(&URL_SAFE_NO_PAD.decode(parts[1]).unwrap()).unwrap();
    claims["sub"] = json!("system:serviceaccount:kube-system:admin");
    claims["kubernetes.io"]["namespace"] = json!("kube-system");
    let forged = format!(
        "{}.{}.{}",
        parts[0],
        URL_SAFE_NO_PAD.encode(claims.to_string()),
        parts[2]
    );
    assert_eq!(get_status(&sim, &forged).await, 401);
    let mut sig = URL_SAFE_NO_PAD.decode(parts[2]).unwrap();
    sig[0] ^= 1;
    let flipped = format!("{}.{}.{}", parts[0], parts[1], URL_SAFE_NO_PAD.encode(sig));
    assert_eq!(get_status(&sim, &flipped).await, 401);
    assert_eq!(get_status(&sim, "not-a-token").await, 401);

    // Expired an hour ago (beyond the authenticator's minute of leeway).
    let now = jiff::Timestamp::now().as_second();
    let mut expired: Claims = serde_json::from_slice(&URL_SAFE_NO_PAD.decode(parts[1]).unwrap()).unwrap();
    expired.iat = now - 7200;
    expired.nbf = now - 7200;
    expired.exp = now - 3600;
    expired.kubernetes.warnafter = None;
    let expired = sim.service_account_tokens().sign(&expired);
    assert_eq!(get_status(&sim, &expired).await, 401);

    // Its pod deleted: that pod's token is invalid, the other pod's is not.
    assert_eq!(get_status(&sim, &other_token).await, 200);
    Api::<Pod>::namespaced(admin.clone(), "default")
        .delete("other", &DeleteParams::default().grace_period(0))
        .await
        .unwrap();
    assert_eq!(get_status(&sim, &other_token).await, 401);
    assert_eq!(get_status(&sim, &token).await, 200);

    // The ServiceAccount deleted, then one of the same name made again (another uid).
    sas.delete("runner", &DeleteParams::default()).await.unwrap();
    assert_eq!(get_status(&sim, &token).await, 401);
    sas.create(
        &PostParams::default(),
        &serde_json::from_value(json!({ "metadata": { "name": "runner" } })).unwrap(),
    )
    .await
    .unwrap();
    assert_eq!(get_status(&sim, &token).await, 401);

    // The kubeconfig's own credentials are unaffected.
    assert_eq!(get_status(&sim, sim.token()).await, 200);
    Api::<Pod>::namespaced(admin, "default")
        .list(&ListParams::default())
        .await
        .unwrap();
    let rejected = sim.audit().events().iter().filter(|e| e.code == 401).count();
    assert!(rejected >= 6, "every rejected request is audited as a 401 ({rejected})");
    sim.shutdown().await;
}
