//! RBAC as kube-apiserver enforces it: a ServiceAccount's token is refused (403, the apiserver's
//! message) until a binding grants the request — for a `resourceNames` rule, subresources, a
//! ClusterRole extended by aggregation and a non-resource URL — and `kubectl auth can-i --as`
//! agrees each time; escalation through Roles and bindings is refused; impersonation needs the
//! `impersonate` verb; the review APIs answer; AlwaysAllow allows what RBAC refuses; the fake
//! Spark driver fails without its Role and runs with it.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic in a test is a failed assertion

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use http_body_util::BodyExt;
use kube_sim::auth::AuthorizationMode;
use kube_sim::registry::Gvr;
use kube_sim::store::{Store, WriteOptions};
use kube_sim::{Sim, SimConfig};
use serde_json::{Value, json};

mod fake_driver;

const NS: &str = "team";
const SA_USER: &str = "system:serviceaccount:team:app";

async fn start(mode: AuthorizationMode) -> (Sim, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = SimConfig::new(dir.path().join("data"));
    config.authorization = mode;
    let sim = Sim::start(config).await.expect("sim starts");
    (sim, dir)
}

/// One HTTPS request straight over hyper, so the test sees exactly what the server answered.
async fn call(
    sim: &Sim,
    token: &str,
    method: &str,
    path: &str,
    body: Option<Value>,
    headers: &[(&str, &str)],
) -> (u16, Value, String) {
    let tcp = tokio::net::TcpStream::connect(sim.addr()).await.unwrap();
    let name = rustls_pki_types::ServerName::try_from("localhost").unwrap();
    let tls = common::tls_client(sim).connect(name, tcp).await.unwrap();
    let (mut sender, conn) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tls))
        .await
        .unwrap();
    tokio::spawn(conn);
    let mut req = http::Request::builder()
        .method(method)
        .uri(path)
        .header("host", "localhost")
        .header("content-type", "application/json");
    if !token.is_empty() {
        req = req.header("authorization", format!("Bearer {token}"));
    }
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let bytes = body.map(|b| serde_json::to_vec(&b).unwrap()).unwrap_or_default();
    let req = req.body(http_body_util::Full::new(bytes::Bytes::from(bytes))).unwrap();
    let resp = sender.send_request(req).await.unwrap();
    let code = resp.status().as_u16();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    let text = String::from_utf8_lossy(&body).into_owned();
    (code, serde_json::from_slice(&body).unwrap_or(Value::Null), text)
}

async fn admin(sim: &Sim, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
    let (code, v, _) = call(sim, sim.token(), method, path, body, &[]).await;
    (code, v)
}

fn rbac(resource: &str) -> Gvr {
    Gvr::new("rbac.authorization.k8s.io", "v1", resource)
}

async fn create(store: &Store, gvr: &Gvr, ns: &str, obj: Value) {
    store
        .create(gvr, ns, obj, &WriteOptions::default())
        .await
        .unwrap_or_else(|e| panic!("creating {gvr:?}: {e}"));
}

/// The namespace, the ServiceAccount `app`, a ConfigMap `a` and `b`, and a token for `app`
/// minted through the TokenRequest API.
async fn setup(sim: &Sim) -> String {
    let store = sim.store();
    create(
        store,
        &Gvr::new("", "v1", "namespaces"),
        "",
        json!({ "apiVersion": "v1", "kind": "Namespace", "metadata": { "name": NS } }),
    )
    .await;
    create(
        store,
        &Gvr::new("", "v1", "serviceaccounts"),
        NS,
        json!({ "apiVersion": "v1", "kind": "ServiceAccount", "metadata": { "name": "app" } }),
    )
    .await;
    for name in ["a", "b"] {
        create(
            store,
            &Gvr::new("", "v1", "configmaps"),
            NS,
            json!({ "apiVersion": "v1", "kind": "ConfigMap", "metadata": { "name": name }, "data": { "k": "v" } }),
        )
        .await;
    }
    let (code, answer) = admin(
        sim,
        "POST",
        &format!("/api/v1/namespaces/{NS}/serviceaccounts/app/token"),
        Some(json!({ "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": { "expirationSeconds": 3600 } })),
    )
    .await;
    assert_eq!(code, 201, "{answer}");
    assert_eq!(answer["kind"], "TokenRequest");
    answer["status"]["token"].as_str().expect("a token").to_string()
}

async fn bind(store: &Store, name: &str, kind: &str, role: &str) {
    create(
        store,
        &rbac("rolebindings"),
        NS,
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": { "name": name },
            "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": role },
            "subjects": [{ "kind": "ServiceAccount", "name": "app", "namespace": NS }],
        }),
    )
    .await;
}

fn kubectl() -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|d| d.join("kubectl"))
        .find(|p| p.is_file())
}

/// `kubectl auth can-i ARGS --as=<the ServiceAccount>`: Some(yes/no), None without kubectl.
fn can_i(kubeconfig: &Path, args: &[&str]) -> Option<bool> {
    let Some(kubectl) = kubectl() else {
        eprintln!("skipping the kubectl part: kubectl is not on PATH");
        return None;
    };
    let out = std::process::Command::new(kubectl)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(["auth", "can-i"])
        .args(args)
        .args(["-n", NS, &format!("--as={SA_USER}")])
        .output()
        .expect("kubectl runs");
    let said = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert!(
        said == "yes" || said == "no",
        "kubectl auth can-i said {said:?}, stderr {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(said == "yes")
}

fn assert_can_i(sim: &Sim, args: &[&str], expected: bool) {
    if let Some(said) = can_i(sim.kubeconfig_path(), args) {
        assert_eq!(said, expected, "kubectl auth can-i {args:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resource_names_rule_grants_one_object() {
    let (sim, _dir) = start(AuthorizationMode::Rbac).await;
    let token = setup(&sim).await;
    let path = |n: &str| format!("/api/v1/namespaces/{NS}/configmaps/{n}");
    let (code, status, _) = call(&sim, &token, "GET", &path("a"), None, &[]).await;
    assert_eq!(code, 403);
    assert_eq!(
        status["message"],
        r#"configmaps "a" is forbidden: User "system:serviceaccount:team:app" cannot get resource "configmaps" in API group "" in the namespace "team""#
    );
    assert_eq!(status["reason"], "Forbidden");
    assert_eq!(status["details"], json!({ "name": "a", "kind": "configmaps" }));
    assert_can_i(&sim, &["get", "configmaps/a"], false);

    create(
        sim.store(),
        &rbac("roles"),
        NS,
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": { "name": "read-a" },
            "rules": [{ "apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["a"], "verbs": ["get"] }],
        }),
    )
    .await;
    bind(sim.store(), "read-a", "Role", "read-a").await;
    let (code, cm, _) = call(&sim, &token, "GET", &path("a"), None, &[]).await;
    assert_eq!(code, 200, "{cm}");
    assert_eq!(cm["data"]["k"], "v");
    let (code, _, _) = call(&sim, &token, "GET", &path("b"), None, &[]).await;
    assert_eq!(code, 403, "another name is not granted");
    let (code, status, _) = call(
        &sim,
        &token,
        "GET",
        &format!("/api/v1/namespaces/{NS}/configmaps"),
        None,
        &[],
    )
    .await;
    assert_eq!(code, 403, "nor a list");
    assert_eq!(
        status["message"],
        r#"configmaps is forbidden: User "system:serviceaccount:team:app" cannot list resource "configmaps" in API group "" in the namespace "team""#
    );
    assert_can_i(&sim, &["get", "configmaps/a"], true);
    assert_can_i(&sim, &["get", "configmaps/b"], false);
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subresources_are_granted_apart_from_their_resource() {
    let (sim, _dir) = start(AuthorizationMode::Rbac).await;
    let token = setup(&sim).await;
    create(
        sim.store(),
        &Gvr::new("", "v1", "pods"),
        NS,
        json!({ "apiVersion": "v1", "kind": "Pod", "metadata": { "name": "p" },
                "spec": { "serviceAccountName": "app", "containers": [{ "name": "c", "image": "busybox" }] } }),
    )
    .await;
    let pod = format!("/api/v1/namespaces/{NS}/pods/p");
    let (code, status, _) = call(&sim, &token, "GET", &format!("{pod}/log"), None, &[]).await;
    assert_eq!(code, 403);
    assert_eq!(
        status["message"],
        r#"pods "p" is forbidden: User "system:serviceaccount:team:app" cannot get resource "pods/log" in API group "" in the namespace "team""#
    );
    let (code, _, _) = call(&sim, &token, "GET", &format!("{pod}/status"), None, &[]).await;
    assert_eq!(code, 403);
    assert_can_i(&sim, &["get", "pods", "--subresource=log"], false);

    create(
        sim.store(),
        &rbac("roles"),
        NS,
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": { "name": "logs" },
            "rules": [{ "apiGroups": [""], "resources": ["pods/log", "pods/status"], "verbs": ["get"] }],
        }),
    )
    .await;
    bind(sim.store(), "logs", "Role", "logs").await;
    let (code, answer, _) = call(&sim, &token, "GET", &format!("{pod}/status"), None, &[]).await;
    assert_eq!(code, 200, "{answer}");
    // Past authorization: the pod has no node, so the kubelet's answer is an error of its own.
    let (code, _, text) = call(&sim, &token, "GET", &format!("{pod}/log"), None, &[]).await;
    assert_ne!(code, 403, "{text}");
    let (code, _, _) = call(&sim, &token, "GET", &pod, None, &[]).await;
    assert_eq!(code, 403, "the subresource does not grant the pod");
    assert_can_i(&sim, &["get", "pods", "--subresource=log"], true);
    assert_can_i(&sim, &["get", "pods"], false);
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_aggregated_cluster_role_extends_edit() {
    let (sim, _dir) = start(AuthorizationMode::Rbac).await;
    let token = setup(&sim).await;
    // As Spark's docs grant a driver: `kubectl create rolebinding --clusterrole=edit`.
    match kubectl() {
        Some(kubectl) => {
            let out = std::process::Command::new(kubectl)
                .arg("--kubeconfig")
                .arg(sim.kubeconfig_path())
                .args([
                    "create",
                    "rolebinding",
                    "app-edit",
                    "--clusterrole=edit",
                    "--serviceaccount=team:app",
                    "-n",
                    NS,
                ])
                .output()
                .expect("kubectl runs");
            assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        }
        None => bind(sim.store(), "app-edit", "ClusterRole", "edit").await,
    }
    let (code, answer, _) = call(
        &sim,
        &token,
        "POST",
        &format!("/api/v1/namespaces/{NS}/configmaps"),
        Some(json!({ "apiVersion": "v1", "kind": "ConfigMap", "metadata": { "name": "c" } })),
        &[],
    )
    .await;
    assert_eq!(code, 201, "edit creates configmaps: {answer}");
    let leases = format!("/apis/rbac.authorization.k8s.io/v1/namespaces/{NS}/roles");
    let (code, _, _) = call(&sim, &token, "GET", &leases, None, &[]).await;
    assert_eq!(code, 403, "edit does not read roles");
    assert_can_i(&sim, &["list", "roles.rbac.authorization.k8s.io"], false);

    create(
        sim.store(),
        &rbac("clusterroles"),
        "",
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": { "name": "read-roles", "labels": { "rbac.authorization.k8s.io/aggregate-to-edit": "true" } },
            "rules": [{ "apiGroups": ["rbac.authorization.k8s.io"], "resources": ["roles"], "verbs": ["list"] }],
        }),
    )
    .await;
    let mut code = 0;
    for _ in 0..500 {
        code = call(&sim, &token, "GET", &leases, None, &[]).await.0;
        if code == 200 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(code, 200, "the aggregated rule reaches edit");
    let (_, edit) = admin(
        &sim,
        "GET",
        "/apis/rbac.authorization.k8s.io/v1/clusterroles/edit",
        None,
    )
    .await;
    assert!(
        edit["rules"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["resources"] == json!(["roles"]) && r["verbs"] == json!(["list"])),
        "{edit}"
    );
    // And `admin`, which aggregates `edit`, has it too.
    let (_, admin_role) = admin(
        &sim,
        "GET",
        "/apis/rbac.authorization.k8s.io/v1/clusterroles/admin",
        None,
    )
    .await;
    assert!(admin_role["rules"].as_array().unwrap().len() > edit["rules"].as_array().unwrap().len());
    assert_can_i(&sim, &["list", "roles.rbac.authorization.k8s.io"], true);
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn non_resource_urls_are_granted_by_path() {
    let (sim, _dir) = start(AuthorizationMode::Rbac).await;
    let token = setup(&sim).await;
    // Discovery and health are everyone's (system:discovery, system:public-info-viewer).
    for path in ["/api", "/apis", "/apis/apps/v1", "/version", "/healthz"] {
        assert_eq!(call(&sim, &token, "GET", path, None, &[]).await.0, 200, "{path}");
    }
    let (code, status, _) = call(&sim, &token, "GET", "/healthz/etcd", None, &[]).await;
    assert_eq!(code, 403);
    assert_eq!(
        status["message"],
        r#"forbidden: User "system:serviceaccount:team:app" cannot get path "/healthz/etcd""#
    );
    assert_can_i(&sim, &["get", "/healthz/etcd"], false);
    create(
        sim.store(),
        &rbac("clusterroles"),
        "",
        json!({ "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": { "name": "health" },
                "rules": [{ "nonResourceURLs": ["/healthz/*"], "verbs": ["get"] }] }),
    )
    .await;
    create(
        sim.store(),
        &rbac("clusterrolebindings"),
        "",
        json!({ "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": { "name": "health" },
                "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "health" },
                "subjects": [{ "kind": "Group", "name": "system:serviceaccounts:team", "apiGroup": "rbac.authorization.k8s.io" }] }),
    )
    .await;
    let (code, _, text) = call(&sim, &token, "GET", "/healthz/etcd", None, &[]).await;
    assert_eq!((code, text.as_str()), (200, "ok"));
    assert_can_i(&sim, &["get", "/healthz/etcd"], true);
    // Without credentials: 401, except what the public-info role gives anonymous users.
    assert_eq!(call(&sim, "", "GET", "/version", None, &[]).await.0, 200);
    assert_eq!(call(&sim, "", "GET", "/healthz/etcd", None, &[]).await.0, 403);
    sim.shutdown().await;
}

/// A ServiceAccount that administers its namespace (`admin`) cannot grant what it lacks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn escalation_is_refused_and_always_allow_does_not_check() {
    for mode in [AuthorizationMode::Rbac, AuthorizationMode::AlwaysAllow] {
        let (sim, _dir) = start(mode).await;
        let token = setup(&sim).await;
        bind(sim.store(), "app-admin", "ClusterRole", "admin").await;
        let roles = format!("/apis/rbac.authorization.k8s.io/v1/namespaces/{NS}/roles");
        let role = |name: &str, resource: &str| {
            json!({ "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": { "name": name },
                    "rules": [{ "apiGroups": [""], "resources": [resource], "verbs": ["get", "list"] }] })
        };
        let (code, answer, _) = call(&sim, &token, "POST", &roles, Some(role("pods", "pods")), &[]).await;
        assert_eq!(code, 201, "{mode}: what it holds it may grant: {answer}");
        let (code, status, _) = call(&sim, &token, "POST", &roles, Some(role("nodes", "nodes")), &[]).await;
        let bindings = format!("/apis/rbac.authorization.k8s.io/v1/namespaces/{NS}/rolebindings");
        let to_cluster_admin = json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": { "name": "root" },
            "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin" },
            "subjects": [{ "kind": "ServiceAccount", "name": "app", "namespace": NS }],
        });
        let (bind_code, bind_status, _) = call(&sim, &token, "POST", &bindings, Some(to_cluster_admin), &[]).await;
        if mode == AuthorizationMode::AlwaysAllow {
            assert_eq!(code, 201, "AlwaysAllow: {status}");
            assert_eq!(bind_code, 201, "AlwaysAllow: {bind_status}");
        } else {
            assert_eq!(code, 403);
            assert_eq!(
                status["message"],
                "roles.rbac.authorization.k8s.io \"nodes\" is forbidden: user \"system:serviceaccount:team:app\" (groups=[\"system:serviceaccounts\" \"system:serviceaccounts:team\" \"system:authenticated\"]) is attempting to grant RBAC permissions not currently held:\n{APIGroups:[\"\"], Resources:[\"nodes\"], Verbs:[\"get\" \"list\"]}"
            );
            assert_eq!(bind_code, 403);
            let msg = bind_status["message"].as_str().unwrap();
            assert!(
                msg.starts_with("rolebindings.rbac.authorization.k8s.io \"root\" is forbidden: user \"system:serviceaccount:team:app\""),
                "{msg}"
            );
            assert!(
                msg.contains("{APIGroups:[\"*\"], Resources:[\"*\"], Verbs:[\"*\"]}"),
                "{msg}"
            );
        }
        sim.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn always_allow_allows_what_rbac_refuses() {
    for (mode, expected) in [(AuthorizationMode::Rbac, 403), (AuthorizationMode::AlwaysAllow, 200)] {
        let (sim, _dir) = start(mode).await;
        let token = setup(&sim).await;
        let (code, _, _) = call(
            &sim,
            &token,
            "GET",
            &format!("/api/v1/namespaces/{NS}/configmaps/a"),
            None,
            &[],
        )
        .await;
        assert_eq!(code, expected, "{mode}");
        let (code, _, _) = call(&sim, &token, "GET", "/api/v1/nodes", None, &[]).await;
        assert_eq!(code, expected, "{mode}");
        sim.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn impersonation_needs_the_impersonate_verb() {
    let (sim, _dir) = start(AuthorizationMode::Rbac).await;
    let token = setup(&sim).await;
    let cm = format!("/api/v1/namespaces/{NS}/configmaps/a");
    // The admin may impersonate, and then is refused as the ServiceAccount would be.
    let (code, status, _) = call(&sim, sim.token(), "GET", &cm, None, &[("Impersonate-User", SA_USER)]).await;
    assert_eq!(code, 403);
    assert!(
        status["message"]
            .as_str()
            .unwrap()
            .contains(r#"User "system:serviceaccount:team:app" cannot get"#)
    );
    // The ServiceAccount may not impersonate anyone.
    let (code, status, _) = call(&sim, &token, "GET", &cm, None, &[("Impersonate-User", "jane")]).await;
    assert_eq!(code, 403);
    assert_eq!(
        status["message"],
        r#"users "jane" is forbidden: User "system:serviceaccount:team:app" cannot impersonate resource "users" in API group "" at the cluster scope"#
    );
    let (code, _, _) = call(
        &sim,
        &token,
        "GET",
        &cm,
        None,
        &[("Impersonate-User", "jane"), ("Impersonate-Group", "system:masters")],
    )
    .await;
    assert_eq!(code, 403);
    // SelfSubjectReview as the impersonated user (`kubectl auth whoami --as`).
    let (code, review) = {
        let (c, v, _) = call(
            &sim,
            sim.token(),
            "POST",
            "/apis/authentication.k8s.io/v1/selfsubjectreviews",
            Some(json!({ "apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview" })),
            &[("Impersonate-User", SA_USER)],
        )
        .await;
        (c, v)
    };
    assert_eq!(code, 201, "{review}");
    assert_eq!(review["status"]["userInfo"]["username"], SA_USER);
    assert_eq!(
        review["status"]["userInfo"]["groups"],
        json!([
            "system:serviceaccounts",
            "system:serviceaccounts:team",
            "system:authenticated"
        ])
    );
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn review_apis_answer() {
    let (sim, _dir) = start(AuthorizationMode::Rbac).await;
    let token = setup(&sim).await;
    bind(sim.store(), "app-view", "ClusterRole", "view").await;
    let sar = |verb: &str| {
        json!({ "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
                "spec": { "user": SA_USER, "groups": ["system:serviceaccounts"],
                          "resourceAttributes": { "namespace": NS, "verb": verb, "resource": "pods" } } })
    };
    let (code, get) = admin(
        &sim,
        "POST",
        "/apis/authorization.k8s.io/v1/subjectaccessreviews",
        Some(sar("get")),
    )
    .await;
    assert_eq!(code, 201, "{get}");
    assert_eq!(get["status"]["allowed"], true);
    assert_eq!(
        get["status"]["reason"],
        r#"RBAC: allowed by RoleBinding "app-view/team" of ClusterRole "view" to ServiceAccount "app/team""#
    );
    let (_, delete) = admin(
        &sim,
        "POST",
        "/apis/authorization.k8s.io/v1/subjectaccessreviews",
        Some(sar("delete")),
    )
    .await;
    assert_eq!(delete["status"]["allowed"], false);
    // A ServiceAccount may not ask about others, but may ask about itself.
    let (code, _, _) = call(
        &sim,
        &token,
        "POST",
        "/apis/authorization.k8s.io/v1/subjectaccessreviews",
        Some(sar("get")),
        &[],
    )
    .await;
    assert_eq!(code, 403);
    let ssar = json!({ "apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
                       "spec": { "resourceAttributes": { "namespace": NS, "verb": "list", "resource": "pods" } } });
    let (code, mine, _) = call(
        &sim,
        &token,
        "POST",
        "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
        Some(ssar),
        &[],
    )
    .await;
    assert_eq!(code, 201, "{mine}");
    assert_eq!(mine["status"]["allowed"], true);
    let rules = json!({ "apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectRulesReview", "spec": { "namespace": NS } });
    let (code, rules, _) = call(
        &sim,
        &token,
        "POST",
        "/apis/authorization.k8s.io/v1/selfsubjectrulesreviews",
        Some(rules),
        &[],
    )
    .await;
    assert_eq!(code, 201, "{rules}");
    assert!(
        rules["status"]["resourceRules"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["resources"].as_array().unwrap().contains(&json!("pods/log"))),
        "{rules}"
    );
    assert!(
        rules["status"]["nonResourceRules"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["nonResourceURLs"].as_array().unwrap().contains(&json!("/version")))
    );
    let tr = json!({ "apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": { "token": token } });
    let (code, review) = admin(&sim, "POST", "/apis/authentication.k8s.io/v1/tokenreviews", Some(tr)).await;
    assert_eq!(code, 201, "{review}");
    assert_eq!(review["status"]["authenticated"], true);
    assert_eq!(review["status"]["user"]["username"], SA_USER);
    let bad = json!({ "apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": { "token": "nope" } });
    let (_, review) = admin(&sim, "POST", "/apis/authentication.k8s.io/v1/tokenreviews", Some(bad)).await;
    assert_eq!(review["status"]["authenticated"], false);
    // Discovery lists the review kinds, create-only.
    let (_, list) = admin(&sim, "GET", "/apis/authorization.k8s.io/v1", None).await;
    let ssar = list["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "selfsubjectaccessreviews")
        .cloned();
    assert_eq!(ssar.map(|r| r["verbs"].clone()), Some(json!(["create"])));
    // kubectl auth whoami and can-i --list use SelfSubjectReview and SelfSubjectRulesReview.
    if let Some(kubectl) = kubectl() {
        let out = std::process::Command::new(&kubectl)
            .arg("--kubeconfig")
            .arg(sim.kubeconfig_path())
            .args([
                "auth",
                "whoami",
                "-o",
                "jsonpath={.status.userInfo.username}",
                &format!("--as={SA_USER}"),
            ])
            .output()
            .unwrap();
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            SA_USER,
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let out = std::process::Command::new(&kubectl)
            .arg("--kubeconfig")
            .arg(sim.kubeconfig_path())
            .args(["auth", "can-i", "--list", "-n", NS, &format!("--as={SA_USER}")])
            .output()
            .unwrap();
        let listed = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        assert!(listed.contains("pods/log"), "{listed}");
    } else {
        eprintln!("skipping the kubectl part: kubectl is not on PATH");
    }
    sim.shutdown().await;
}

/// Driver log, as `kubectl logs` shows it.
async fn driver_log(sim: &Sim) -> String {
    call(
        sim,
        sim.token(),
        "GET",
        "/api/v1/namespaces/default/pods/spark-pi-driver/log",
        None,
        &[],
    )
    .await
    .2
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fake_driver_needs_its_role() {
    for with_role in [false, true] {
        let (sim, _dir) = fake_driver::start().await;
        let store = sim.store().clone();
        if with_role {
            fake_driver::create_service_account(&store).await;
        } else {
            fake_driver::create_service_account_without_role(&store).await;
        }
        fake_driver::create_config_map(&store, fake_driver::spark_properties(&[])).await;
        store
            .create(
                &fake_driver::gvr("pods"),
                "default",
                fake_driver::driver_pod(json!({ "sim.spark-operator.dev/run-time": "200ms" })),
                &WriteOptions::default(),
            )
            .await
            .expect("driver pod");
        let done = fake_driver::until("the driver to finish", || {
            store
                .get(&fake_driver::gvr("pods"), "default", "spark-pi-driver")
                .ok()
                .filter(|p| p["status"]["phase"] == "Failed" || p["status"]["phase"] == "Succeeded")
        })
        .await;
        let log = driver_log(&sim).await;
        if with_role {
            assert_eq!(done["status"]["phase"], "Succeeded", "{log}");
        } else {
            assert_eq!(done["status"]["phase"], "Failed", "{log}");
            assert_eq!(
                done["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"],
                1
            );
            assert!(
                log.contains(r#"Forbidden!Configured service account doesn't have access. Service account may have been revoked. pods "spark-pi-driver" is forbidden: User "system:serviceaccount:default:spark" cannot get resource "pods" in API group "" in the namespace "default""#),
                "{log}"
            );
            let executors = store
                .list(&fake_driver::gvr("pods"), Some("default"), &Default::default())
                .unwrap();
            assert_eq!(
                executors["items"].as_array().unwrap().len(),
                1,
                "no executor was created"
            );
        }
        sim.shutdown().await;
    }
}

/// OwnerReferencesPermissionEnforcement as kube-apiserver enforces it (on in `spark-operator dev`, as
/// OpenShift runs it): a `blockOwnerDeletion: true` reference needs `update` on the owner's `finalizers`;
/// a reference without it does not; an update that changes references needs `delete` on the object; and
/// with the plugin off (kube-apiserver's default) nothing of this is asked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blocking_an_owners_deletion_needs_update_on_its_finalizers() {
    for enforced in [true, false] {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut config = SimConfig::new(dir.path().join("data"));
        config.owner_references_permission_enforcement = enforced;
        let sim = Sim::start(config).await.expect("sim starts");
        let token = setup(&sim).await;
        let store = sim.store();
        create(
            store,
            &rbac("roles"),
            NS,
            json!({
                "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": { "name": "writer" },
                "rules": [{ "apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "create", "update"] }],
            }),
        )
        .await;
        bind(store, "writer", "Role", "writer").await;
        let (_, owner) = admin(&sim, "GET", &format!("/api/v1/namespaces/{NS}/configmaps/a"), None).await;
        let uid = owner["metadata"]["uid"].as_str().expect("uid").to_owned();
        let dependent = |name: &str, block: Option<bool>| {
            let mut reference = json!({ "apiVersion": "v1", "kind": "ConfigMap", "name": "a", "uid": uid });
            if let Some(block) = block {
                reference["blockOwnerDeletion"] = json!(block);
            }
            json!({ "apiVersion": "v1", "kind": "ConfigMap", "metadata": { "name": name, "ownerReferences": [reference] } })
        };
        let post = |body: Value| {
            let (sim, token) = (&sim, &token);
            async move {
                call(
                    sim,
                    token,
                    "POST",
                    &format!("/api/v1/namespaces/{NS}/configmaps"),
                    Some(body),
                    &[],
                )
                .await
            }
        };
        let (code, _, text) = post(dependent("loose", Some(false))).await;
        assert_eq!(code, 201, "{text}");
        let (code, status, text) = post(dependent("blocking", Some(true))).await;
        if enforced {
            assert_eq!(code, 403, "{text}");
            assert_eq!(
                status["message"].as_str().unwrap_or_default(),
                r#"configmaps "blocking" is forbidden: cannot set blockOwnerDeletion if an ownerReference refers to a resource you can't set finalizers on: , <nil>"#
            );
        } else {
            assert_eq!(code, 201, "{text}");
        }
        // Changing the references of an existing object needs `delete` on it, which the Role does not give.
        let mut changed = dependent("loose", None);
        changed["metadata"]["ownerReferences"][0]["controller"] = json!(true);
        let (code, _, text) = call(
            &sim,
            &token,
            "PUT",
            &format!("/api/v1/namespaces/{NS}/configmaps/loose"),
            Some(changed),
            &[],
        )
        .await;
        if enforced {
            assert_eq!(code, 403, "{text}");
            assert!(
                text.contains("cannot set an ownerRef on a resource you can't delete"),
                "{text}"
            );
        } else {
            assert_eq!(code, 200, "{text}");
        }
        if enforced {
            // Granted the owner's finalizers, the blocking reference is admitted.
            create(
                store,
                &rbac("roles"),
                NS,
                json!({
                    "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": { "name": "finalizers" },
                    "rules": [{ "apiGroups": [""], "resources": ["configmaps/finalizers"], "verbs": ["update"] }],
                }),
            )
            .await;
            bind(store, "finalizers", "Role", "finalizers").await;
            let (code, _, text) = post(dependent("blocking", Some(true))).await;
            assert_eq!(code, 201, "{text}");
        }
        sim.shutdown().await;
    }
}
