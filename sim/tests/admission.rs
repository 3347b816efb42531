//! Admission webhooks served by the test over TLS (rustls, an rcgen CA in `caBundle`), called
//! by the sim for requests made with a real kube-rs client.
#![allow(clippy::expect_used)]

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine as _;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use kube::api::{Api, PostParams};
use kube_sim::registry::Gvr;
use kube_sim::store::WriteOptions;
use kube_sim::{Sim, SimConfig};
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
use serde_json::{Value, json};

/// A CA the test trusts, and server certificates it issues.
struct TestCa {
    pem: String,
    issuer: Issuer<'static, KeyPair>,
}

impl TestCa {
    fn new(cn: &str) -> Self {
        let key = KeyPair::generate().expect("ca key");
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("ca params");
        params.distinguished_name.push(DnType::CommonName, cn);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let cert = params.self_signed(&key).expect("ca cert");
        Self {
            pem: cert.pem(),
            issuer: Issuer::new(params, key),
        }
    }

    fn bundle(&self) -> String {
        base64::engine::general_purpose::STANDARD.encode(&self.pem)
    }

    fn server_config(&self, names: &[&str]) -> Arc<rustls::ServerConfig> {
        let key = KeyPair::generate().expect("server key");
        let params =
            CertificateParams::new(names.iter().map(|s| s.to_string()).collect::<Vec<_>>()).expect("server params");
        let cert = params.signed_by(&key, &self.issuer).expect("server cert");
        let key = rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into());
        let mut config =
            rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
                .with_safe_default_protocol_versions()
                .expect("versions")
                .with_no_client_auth()
                .with_single_cert(vec![cert.der().clone()], key)
                .expect("server config");
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Arc::new(config)
    }
}

/// What the webhook server saw: (path, AdmissionReview request) per call.
type Calls = Arc<Mutex<Vec<(String, Value)>>>;

struct WebhookServer {
    addr: SocketAddr,
    calls: Calls,
    _task: tokio::task::JoinHandle<()>,
}

impl WebhookServer {
    fn calls_to(&self, path: &str) -> Vec<Value> {
        self.calls
            .lock()
            .expect("calls")
            .iter()
            .filter(|(p, _)| p == path)
            .map(|(_, r)| r.clone())
            .collect()
    }

    fn url(&self, path: &str) -> String {
        format!("https://{}{path}", self.addr)
    }
}

fn allow(uid: &str) -> Value {
    json!({ "uid": uid, "allowed": true })
}

fn patch_response(uid: &str, ops: Value, warning: &str) -> Value {
    let patch = base64::engine::general_purpose::STANDARD.encode(ops.to_string());
    json!({ "uid": uid, "allowed": true, "patchType": "JSONPatch", "patch": patch, "warnings": [warning] })
}

/// The test's webhooks, by path.
async fn answer(path: &str, request: &Value) -> Value {
    let uid = request["uid"].as_str().unwrap_or_default();
    let object = &request["object"];
    let labels = object
        .pointer("/metadata/labels")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    match path {
        "/mutate" => {
            let op = if labels.is_empty() {
                json!([{ "op": "add", "path": "/metadata/labels", "value": { "mutated": "yes" } }])
            } else {
                json!([{ "op": "add", "path": "/metadata/labels/mutated", "value": "yes" }])
            };
            patch_response(uid, op, "mutated by the test webhook")
        }
        "/warn" => json!({ "uid": uid, "allowed": true, "warnings": ["validated by the test webhook"] }),
        "/deny" => {
            if labels.get("deny").and_then(Value::as_str) == Some("true") {
                let name = object.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("");
                json!({ "uid": uid, "allowed": false, "status": { "code": 403, "reason": "Forbidden", "message": format!("no entry for {name}") } })
            } else {
                allow(uid)
            }
        }
        // Reinvocation: "first" records how many labels it saw; "second" adds one.
        "/first" => patch_response(
            uid,
            json!([{ "op": "add", "path": "/metadata/annotations", "value": { "first-saw": labels.len().to_string() } }]),
            "first",
        ),
        "/second" => patch_response(
            uid,
            json!([{ "op": "add", "path": "/metadata/labels/second", "value": "yes" }]),
            "second",
        ),
        "/slow" => {
            tokio::time::sleep(Duration::from_secs(3)).await;
            allow(uid)
        }
        _ => allow(uid),
    }
}

async fn start_webhook(ca: &TestCa, names: &[&str]) -> WebhookServer {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let acceptor = tokio_rustls::TlsAcceptor::from(ca.server_config(names));
    let calls: Calls = Arc::default();
    let seen = calls.clone();
    let task = tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else { return };
            let acceptor = acceptor.clone();
            let seen = seen.clone();
            tokio::spawn(async move {
                // A client that rejects our certificate ends the handshake: nothing to serve.
                let Ok(tls) = acceptor.accept(tcp).await else { return };
                let service = hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                    let seen = seen.clone();
                    async move {
                        let path = req.uri().path().to_string();
                        let body = req
                            .into_body()
                            .collect()
                            .await
                            .map(|b| b.to_bytes())
                            .unwrap_or_default();
                        let review: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                        seen.lock()
                            .expect("calls")
                            .push((path.clone(), review["request"].clone()));
                        let response = json!({
                            "apiVersion": "admission.k8s.io/v1",
                            "kind": "AdmissionReview",
                            "response": answer(&path, &review["request"]).await,
                        });
                        Ok::<_, std::convert::Infallible>(hyper::Response::new(Full::new(Bytes::from(
                            response.to_string(),
                        ))))
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(tls), service)
                    .await;
            });
        }
    });
    WebhookServer {
        addr,
        calls,
        _task: task,
    }
}

async fn start() -> (Sim, tempfile::TempDir, kube::Client) {
    let dir = tempfile::tempdir().expect("tempdir");
    let sim = Sim::start(SimConfig::new(dir.path().join("data")))
        .await
        .expect("sim starts");
    let client = sim.client().await.expect("client");
    (sim, dir, client)
}

async fn namespace(client: &kube::Client, name: &str, labels: Value) {
    let ns: Namespace =
        serde_json::from_value(json!({ "metadata": { "name": name, "labels": labels } })).expect("namespace");
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .expect("namespace created");
}

/// Stores a webhook configuration (through the store: configurations are not subject to
/// webhooks anyway).
async fn configure(sim: &Sim, kind: &str, name: &str, webhooks: Value) {
    let resource = match kind {
        "MutatingWebhookConfiguration" => "mutatingwebhookconfigurations",
        _ => "validatingwebhookconfigurations",
    };
    let config = json!({ "apiVersion": "admissionregistration.k8s.io/v1", "kind": kind, "metadata": { "name": name }, "webhooks": webhooks });
    sim.store()
        .create(
            &Gvr::new("admissionregistration.k8s.io", "v1", resource),
            "",
            config,
            &WriteOptions::default(),
        )
        .await
        .expect("webhook configuration");
}

fn hook(name: &str, url: &str, ca_bundle: &str, resources: &[&str], extra: Value) -> Value {
    let mut w = json!({
        "name": name,
        "clientConfig": { "url": url, "caBundle": ca_bundle },
        "rules": [{ "operations": ["CREATE", "UPDATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": resources }],
        "sideEffects": "None",
        "admissionReviewVersions": ["v1"],
    });
    if let (Value::Object(w), Value::Object(extra)) = (&mut w, extra) {
        w.extend(extra);
    }
    w
}

fn cm(name: &str, labels: Value) -> ConfigMap {
    serde_json::from_value(json!({ "metadata": { "name": name, "labels": labels }, "data": { "k": "v" } })).expect("cm")
}

fn labels_of(cm: &ConfigMap) -> HashMap<String, String> {
    cm.metadata.labels.clone().unwrap_or_default().into_iter().collect()
}

fn api_error(result: Result<impl std::fmt::Debug, kube::Error>) -> kube::core::Status {
    match result {
        Err(kube::Error::Api(e)) => *e,
        other => panic!("expected an API error, got {other:?}"),
    }
}

/// A loopback port nothing listens on.
async fn closed_port() -> u16 {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    l.local_addr().expect("addr").port()
}

#[tokio::test]
async fn webhooks_mutate_and_deny_as_configured() {
    let (sim, _dir, client) = start().await;
    let ca = TestCa::new("test-webhook-ca");
    let server = start_webhook(&ca, &["127.0.0.1"]).await;
    namespace(&client, "hooked", json!({ "webhooks": "on" })).await;
    namespace(&client, "plain", json!({})).await;
    configure(
        &sim,
        "MutatingWebhookConfiguration",
        "test-mutator",
        json!([hook(
            "mutate.test.io",
            &server.url("/mutate"),
            &ca.bundle(),
            &["configmaps"],
            json!({
                "namespaceSelector": { "matchLabels": { "webhooks": "on" } },
                "objectSelector": { "matchExpressions": [{ "key": "skip", "operator": "DoesNotExist" }] }
            })
        )]),
    )
    .await;
    configure(
        &sim,
        "ValidatingWebhookConfiguration",
        "test-validator",
        json!([hook(
            "deny.test.io",
            &server.url("/deny"),
            &ca.bundle(),
            &["configmaps"],
            json!({})
        )]),
    )
    .await;

    let hooked: Api<ConfigMap> = Api::namespaced(client.clone(), "hooked");
    let created = hooked
        .create(&PostParams::default(), &cm("a", json!({ "app": "spark" })))
        .await
        .expect("admitted");
    assert_eq!(
        labels_of(&created).get("mutated").map(String::as_str),
        Some("yes"),
        "the JSONPatch is applied"
    );
    assert_eq!(labels_of(&created).get("app").map(String::as_str), Some("spark"));
    let calls = server.calls_to("/mutate");
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0]["operation"], "CREATE");
    assert_eq!(calls[0]["namespace"], "hooked");
    assert_eq!(
        calls[0]["kind"],
        json!({ "group": "", "version": "v1", "kind": "ConfigMap" })
    );
    // The validating webhook sees the mutated object.
    let validated = server.calls_to("/deny");
    assert_eq!(
        validated
            .last()
            .and_then(|r| r.pointer("/object/metadata/labels/mutated")),
        Some(&json!("yes"))
    );

    // Denials come back as the apiserver words them, with the webhook's code.
    let e = api_error(
        hooked
            .create(&PostParams::default(), &cm("b", json!({ "deny": "true" })))
            .await,
    );
    assert_eq!(e.code, 403);
    assert_eq!(e.reason, "Forbidden");
    assert_eq!(
        e.message,
        "admission webhook \"deny.test.io\" denied the request: no entry for b"
    );
    assert!(hooked.get_opt("b").await.expect("get").is_none());

    // Selectors and rules filter.
    let skipped = hooked
        .create(&PostParams::default(), &cm("c", json!({ "skip": "1" })))
        .await
        .expect("admitted");
    assert!(
        !labels_of(&skipped).contains_key("mutated"),
        "objectSelector excludes it"
    );
    let plain: Api<ConfigMap> = Api::namespaced(client.clone(), "plain");
    let unlabelled = plain
        .create(&PostParams::default(), &cm("d", json!({})))
        .await
        .expect("admitted");
    assert!(
        !labels_of(&unlabelled).contains_key("mutated"),
        "namespaceSelector excludes it"
    );
    let before = server.calls.lock().expect("calls").len();
    let secrets: Api<Secret> = Api::namespaced(client.clone(), "hooked");
    let secret: Secret = serde_json::from_value(json!({ "metadata": { "name": "s" } })).expect("secret");
    secrets
        .create(&PostParams::default(), &secret)
        .await
        .expect("secret admitted");
    assert_eq!(
        server.calls.lock().expect("calls").len(),
        before,
        "no rule matches secrets"
    );
}

/// Webhooks' warnings reach the client as `Warning` headers, from either phase (the apiserver records every
/// webhook's warnings, whatever its phase or verdict).
#[tokio::test]
async fn warnings_reach_the_client_as_warning_headers() {
    let cases = [
        ("MutatingWebhookConfiguration", "/mutate", "mutated by the test webhook"),
        (
            "ValidatingWebhookConfiguration",
            "/warn",
            "validated by the test webhook",
        ),
    ];
    for (kind, path, warning) in cases {
        let (sim, _dir, client) = start().await;
        let ca = TestCa::new("test-webhook-ca");
        let server = start_webhook(&ca, &["127.0.0.1"]).await;
        configure(
            &sim,
            kind,
            "warner",
            json!([hook(
                "warn.test.io",
                &server.url(path),
                &ca.bundle(),
                &["configmaps"],
                json!({})
            )]),
        )
        .await;
        let body = serde_json::to_vec(&cm("w", json!({}))).expect("body");
        let request = http::Request::post("/api/v1/namespaces/default/configmaps")
            .header("content-type", "application/json")
            .body(body)
            .expect("request");
        let response = client
            .send(request.map(kube::client::Body::from))
            .await
            .expect("response");
        assert_eq!(response.status(), 201, "{kind}");
        let warnings: Vec<String> = response
            .headers()
            .get_all("warning")
            .iter()
            .filter_map(|v| v.to_str().ok())
            .map(str::to_string)
            .collect();
        assert_eq!(warnings, [format!("299 - {warning:?}")], "{kind}");
        assert_eq!(server.calls_to(path).len(), 1, "{kind}");
    }
}

/// A text warned by webhooks in both phases reaches the client once: kube-apiserver's warning recorder drops a
/// text it already recorded for the request (the operator's application check runs in both phases).
#[tokio::test]
async fn the_same_warning_from_both_phases_reaches_the_client_once() {
    let (sim, _dir, client) = start().await;
    let ca = TestCa::new("test-webhook-ca");
    let server = start_webhook(&ca, &["127.0.0.1"]).await;
    for kind in ["MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"] {
        configure(
            &sim,
            kind,
            "warner",
            json!([hook(
                "warn.test.io",
                &server.url("/warn"),
                &ca.bundle(),
                &["configmaps"],
                json!({})
            )]),
        )
        .await;
    }
    let body = serde_json::to_vec(&cm("w", json!({}))).expect("body");
    let request = http::Request::post("/api/v1/namespaces/default/configmaps")
        .header("content-type", "application/json")
        .body(body)
        .expect("request");
    let response = client
        .send(request.map(kube::client::Body::from))
        .await
        .expect("response");
    assert_eq!(response.status(), 201);
    let warnings: Vec<String> = response
        .headers()
        .get_all("warning")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .map(str::to_string)
        .collect();
    assert_eq!(server.calls_to("/warn").len(), 2, "both phases called the webhook");
    assert_eq!(warnings, [format!("299 - {:?}", "validated by the test webhook")]);
}

#[tokio::test]
async fn failure_policy_decides_when_the_webhook_cannot_be_called() {
    let (sim, _dir, client) = start().await;
    let ca = TestCa::new("test-webhook-ca");
    let port = closed_port().await;
    let down = format!("https://127.0.0.1:{port}/x");
    configure(
        &sim,
        "ValidatingWebhookConfiguration",
        "down",
        json!([
            hook(
                "down-fail.test.io",
                &down,
                &ca.bundle(),
                &["configmaps"],
                json!({ "failurePolicy": "Fail", "objectSelector": { "matchLabels": { "policy": "fail" } } })
            ),
            hook(
                "down-ignore.test.io",
                &down,
                &ca.bundle(),
                &["configmaps"],
                json!({ "failurePolicy": "Ignore", "objectSelector": { "matchLabels": { "policy": "ignore" } } })
            ),
        ]),
    )
    .await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let e = api_error(
        api.create(&PostParams::default(), &cm("f", json!({ "policy": "fail" })))
            .await,
    );
    assert_eq!(e.code, 500);
    assert_eq!(e.reason, "InternalError");
    assert_eq!(
        e.message,
        format!(
            "Internal error occurred: failed calling webhook \"down-fail.test.io\": failed to call webhook: Post \"https://127.0.0.1:{port}/x?timeout=10s\": dial tcp 127.0.0.1:{port}: connect: connection refused"
        )
    );
    assert!(api.get_opt("f").await.expect("get").is_none());
    api.create(&PostParams::default(), &cm("i", json!({ "policy": "ignore" })))
        .await
        .expect("Ignore admits");
}

#[tokio::test]
async fn a_wrong_ca_bundle_fails_the_handshake() {
    let (sim, _dir, client) = start().await;
    let ca = TestCa::new("the-real-ca");
    let other = TestCa::new("some-other-ca");
    let server = start_webhook(&ca, &["127.0.0.1"]).await;
    configure(
        &sim,
        "MutatingWebhookConfiguration",
        "mistrusted",
        json!([hook(
            "mistrusted.test.io",
            &server.url("/mutate"),
            &other.bundle(),
            &["configmaps"],
            json!({})
        )]),
    )
    .await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let e = api_error(api.create(&PostParams::default(), &cm("t", json!({}))).await);
    assert_eq!(e.code, 500);
    assert!(
        e.message
            .ends_with("tls: failed to verify certificate: x509: certificate signed by unknown authority"),
        "{}",
        e.message
    );
    assert!(e.message.starts_with(
        "Internal error occurred: failed calling webhook \"mistrusted.test.io\": failed to call webhook: Post"
    ));
    assert!(
        server.calls_to("/mutate").is_empty(),
        "no request is sent over an untrusted connection"
    );
}

#[tokio::test]
async fn timeouts_count_as_failures_to_call() {
    let (sim, _dir, client) = start().await;
    let ca = TestCa::new("test-webhook-ca");
    let server = start_webhook(&ca, &["127.0.0.1"]).await;
    configure(
        &sim,
        "ValidatingWebhookConfiguration",
        "slow",
        json!([hook(
            "slow.test.io",
            &server.url("/slow"),
            &ca.bundle(),
            &["configmaps"],
            json!({ "timeoutSeconds": 1 })
        )]),
    )
    .await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let e = api_error(api.create(&PostParams::default(), &cm("slow", json!({}))).await);
    assert_eq!(e.code, 500);
    assert!(
        e.message.ends_with("/slow?timeout=1s\": context deadline exceeded"),
        "{}",
        e.message
    );
}

#[tokio::test]
async fn service_references_resolve_through_endpoints() {
    let (sim, _dir, client) = start().await;
    let ca = TestCa::new("test-webhook-ca");
    // The certificate is for the service's DNS name, as a cluster-served webhook's is.
    let server = start_webhook(&ca, &["hook.hooks.svc"]).await;
    namespace(&client, "hooks", json!({})).await;
    let services = Gvr::new("", "v1", "services");
    let svc = json!({ "metadata": { "name": "hook" }, "spec": { "ports": [{ "name": "https", "port": 443, "targetPort": 8443 }] } });
    sim.store()
        .create(&services, "hooks", svc, &WriteOptions::default())
        .await
        .expect("service");
    let eps = json!({ "metadata": { "name": "hook" }, "subsets": [{
        "addresses": [{ "ip": "127.0.0.1" }], "ports": [{ "name": "https", "port": server.addr.port() }] }] });
    sim.store()
        .create(&Gvr::new("", "v1", "endpoints"), "hooks", eps, &WriteOptions::default())
        .await
        .expect("endpoints");
    let mut w = hook("svc.test.io", "", &ca.bundle(), &["configmaps"], json!({}));
    w["clientConfig"] =
        json!({ "service": { "namespace": "hooks", "name": "hook", "path": "/mutate" }, "caBundle": ca.bundle() });
    configure(&sim, "MutatingWebhookConfiguration", "by-service", json!([w])).await;

    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let created = api
        .create(&PostParams::default(), &cm("via-service", json!({})))
        .await
        .expect("admitted");
    assert_eq!(labels_of(&created).get("mutated").map(String::as_str), Some("yes"));
}

#[tokio::test]
async fn dry_run_needs_side_effect_free_webhooks() {
    let (sim, _dir, client) = start().await;
    let ca = TestCa::new("test-webhook-ca");
    let server = start_webhook(&ca, &["127.0.0.1"]).await;
    configure(
        &sim,
        "MutatingWebhookConfiguration",
        "effects",
        json!([hook(
            "effects.test.io",
            &server.url("/mutate"),
            &ca.bundle(),
            &["configmaps"],
            json!({ "sideEffects": "Some" })
        )]),
    )
    .await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let e = api_error(
        api.create(
            &PostParams {
                dry_run: true,
                ..Default::default()
            },
            &cm("dry", json!({})),
        )
        .await,
    );
    assert_eq!(e.code, 400);
    assert_eq!(
        e.message,
        "admission webhook \"effects.test.io\" does not support dry run"
    );
}

#[tokio::test]
async fn if_needed_webhooks_are_reinvoked_after_later_changes() {
    let (sim, _dir, client) = start().await;
    let ca = TestCa::new("test-webhook-ca");
    let server = start_webhook(&ca, &["127.0.0.1"]).await;
    configure(
        &sim,
        "MutatingWebhookConfiguration",
        "a-chain",
        json!([
            hook(
                "first.test.io",
                &server.url("/first"),
                &ca.bundle(),
                &["configmaps"],
                json!({ "reinvocationPolicy": "IfNeeded" })
            ),
            hook(
                "second.test.io",
                &server.url("/second"),
                &ca.bundle(),
                &["configmaps"],
                json!({})
            ),
        ]),
    )
    .await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let created = api
        .create(&PostParams::default(), &cm("chain", json!({ "app": "x" })))
        .await
        .expect("admitted");
    assert_eq!(
        server.calls_to("/first").len(),
        2,
        "called again after the second webhook changed the object"
    );
    assert_eq!(server.calls_to("/second").len(), 1);
    let annotations = created.metadata.annotations.unwrap_or_default();
    assert_eq!(
        annotations.get("first-saw").map(String::as_str),
        Some("2"),
        "the reinvocation saw the second webhook's label"
    );
}

#[tokio::test]
async fn equivalent_match_policy_sends_the_version_the_rule_names() {
    let (sim, _dir, client) = start().await;
    let ca = TestCa::new("test-webhook-ca");
    let server = start_webhook(&ca, &["127.0.0.1"]).await;
    let crd = json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": { "name": "gadgets.example.com" },
        "spec": { "group": "example.com", "scope": "Namespaced",
            "names": { "plural": "gadgets", "singular": "gadget", "kind": "Gadget", "listKind": "GadgetList" },
            "versions": [
                { "name": "v1", "served": true, "storage": true,
                  "schema": { "openAPIV3Schema": { "type": "object", "x-kubernetes-preserve-unknown-fields": true } } },
                { "name": "v2", "served": true, "storage": false,
                  "schema": { "openAPIV3Schema": { "type": "object", "x-kubernetes-preserve-unknown-fields": true } } }
            ] }
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
    let rule = |policy: &str, name: &str, path: &str| {
        json!({
            "name": name,
            "clientConfig": { "url": server.url(path), "caBundle": ca.bundle() },
            "rules": [{ "operations": ["CREATE"], "apiGroups": ["example.com"], "apiVersions": ["v2"], "resources": ["gadgets"] }],
            "matchPolicy": policy,
            "sideEffects": "None",
            "admissionReviewVersions": ["v1"],
        })
    };
    configure(
        &sim,
        "ValidatingWebhookConfiguration",
        "gadgets",
        json!([
            rule("Equivalent", "equivalent.test.io", "/equivalent"),
            rule("Exact", "exact.test.io", "/exact")
        ]),
    )
    .await;
    let gvk = kube::core::GroupVersionKind::gvk("example.com", "v1", "Gadget");
    let gadgets: Api<kube::core::DynamicObject> =
        Api::namespaced_with(client.clone(), "default", &kube::core::ApiResource::from_gvk(&gvk));
    let gadget: kube::core::DynamicObject = serde_json::from_value(
        json!({ "apiVersion": "example.com/v1", "kind": "Gadget", "metadata": { "name": "g" } }),
    )
    .expect("gadget");
    gadgets.create(&PostParams::default(), &gadget).await.expect("admitted");

    assert!(
        server.calls_to("/exact").is_empty(),
        "Exact only matches the version the client used"
    );
    let calls = server.calls_to("/equivalent");
    assert_eq!(calls.len(), 1);
    assert_eq!(
        calls[0]["kind"],
        json!({ "group": "example.com", "version": "v2", "kind": "Gadget" })
    );
    assert_eq!(
        calls[0]["requestKind"],
        json!({ "group": "example.com", "version": "v1", "kind": "Gadget" })
    );
    assert_eq!(calls[0]["object"]["apiVersion"], "example.com/v2");
}
