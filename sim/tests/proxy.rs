//! The API server's proxy subresources (`pods/proxy`, `services/proxy`, `nodes/proxy`) against
//! small HTTP(S) servers this test binds on loopback addresses standing for pods and kubelets.
//! No sim nodes run: pod status and Node objects are written by the test.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic in a test is a failed assertion

mod common;

use std::convert::Infallible;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;

use bytes::Bytes;
use common::{start_sim, within};
use http::{HeaderMap, Request, Response};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use k8s_openapi::api::core::v1::{Endpoints, Node, Pod, Service};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube_sim::Sim;
use serde_json::{Value, json};

/// A loopback address of its own for each backend, as pods get one each.
fn loopback_ip() -> Ipv4Addr {
    let b = uuid::Uuid::new_v4().into_bytes();
    Ipv4Addr::new(127, 1 + b[0] % 250, b[1], 1 + b[2] % 250)
}

/// What the backend answers: everything it saw, as JSON; `/redirect` redirects to `/target`,
/// `/cors` answers with CORS headers.
async fn echo(req: Request<Incoming>, tls: bool) -> Result<Response<Full<Bytes>>, Infallible> {
    let method = req.method().to_string();
    let uri = req.uri().to_string();
    let path = req.uri().path().to_string();
    let headers: serde_json::Map<String, Value> = req
        .headers()
        .iter()
        .map(|(k, v)| (k.to_string(), json!(v.to_str().unwrap_or("?"))))
        .collect();
    let body = req
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let seen = json!({
        "method": method, "uri": uri, "headers": headers, "tls": tls,
        "body": String::from_utf8_lossy(&body),
    });
    let mut resp = Response::builder()
        .header("content-type", "application/json")
        .header("x-echo-method", &method);
    match path.as_str() {
        "/redirect" => resp = resp.status(302).header("location", "/target"),
        "/cors" => {
            resp = resp
                .header("access-control-allow-origin", "*")
                .header("access-control-allow-methods", "GET")
        }
        "/teapot" => resp = resp.status(418),
        _ => {}
    }
    Ok(resp.body(Full::new(Bytes::from(seen.to_string()))).unwrap())
}

/// Serves [`echo`] on `ip` (any free port), over TLS when a config is given.
async fn backend(ip: Ipv4Addr, tls: Option<Arc<rustls::ServerConfig>>) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind((ip, 0))
        .await
        .expect("bind a loopback address");
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                return;
            };
            let tls = tls.clone();
            tokio::spawn(async move {
                let builder = hyper::server::conn::http1::Builder::new();
                match tls {
                    None => {
                        let svc = service_fn(|req| echo(req, false));
                        let _ = builder.serve_connection(TokioIo::new(tcp), svc).await;
                    }
                    Some(config) => {
                        let Ok(stream) = tokio_rustls::TlsAcceptor::from(config).accept(tcp).await else {
                            return;
                        };
                        let svc = service_fn(|req| echo(req, true));
                        let _ = builder.serve_connection(TokioIo::new(stream), svc).await;
                    }
                }
            });
        }
    });
    addr
}

/// A self-signed server certificate nobody trusts: the apiserver must not verify it.
fn self_signed_tls() -> Arc<rustls::ServerConfig> {
    let key = rcgen::KeyPair::generate().unwrap();
    let params = rcgen::CertificateParams::new(vec!["kubelet".to_string()]).unwrap();
    let cert = params.self_signed(&key).unwrap();
    let key = rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into());
    let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![cert.der().clone()], key)
        .unwrap();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Arc::new(config)
}

/// A port on `ip` with nothing listening.
async fn closed_port(ip: Ipv4Addr) -> u16 {
    let listener = tokio::net::TcpListener::bind((ip, 0)).await.unwrap();
    listener.local_addr().unwrap().port()
}

struct Answer {
    code: u16,
    headers: HeaderMap,
    body: Bytes,
}

impl Answer {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }

    /// What the backend saw (the body is the echo).
    fn seen(&self) -> Value {
        assert_eq!(self.code, 200, "{}", String::from_utf8_lossy(&self.body));
        self.json()
    }
}

/// One request straight over hyper with the kubeconfig's bearer token (no client retries, so
/// the test sees exactly what the server answered).
async fn raw(sim: &Sim, method: &str, path: &str, headers: &[(&str, &str)], body: &str) -> Answer {
    let tcp = tokio::net::TcpStream::connect(sim.addr()).await.unwrap();
    let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
    let tls = common::tls_client(sim).connect(name, tcp).await.unwrap();
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls)).await.unwrap();
    tokio::spawn(conn);
    let mut req = Request::builder()
        .method(method)
        .uri(path)
        .header("host", "localhost")
        .header("authorization", format!("Bearer {}", sim.token()));
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let req = req.body(Full::new(Bytes::from(body.to_string()))).unwrap();
    let resp = within(&format!("{method} {path}"), sender.send_request(req))
        .await
        .unwrap();
    let code = resp.status().as_u16();
    let headers = resp.headers().clone();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    Answer { code, headers, body }
}

/// Through kube-rs, as a client library would call the proxy.
async fn kube_request(client: &kube::Client, method: &str, path: &str, body: Vec<u8>) -> Answer {
    let req = Request::builder()
        .method(method)
        .uri(path)
        .header("content-type", "text/plain")
        .body(kube::client::Body::from(body))
        .unwrap();
    let resp = within(path, client.send(req)).await.expect("kube-rs request");
    let code = resp.status().as_u16();
    let headers = resp.headers().clone();
    let body = resp.into_body().collect_bytes().await.unwrap();
    Answer { code, headers, body }
}

/// A pod created through the API whose status says Running at `ip` (as its kubelet would write).
async fn running_pod(client: &kube::Client, name: &str, ip: Option<Ipv4Addr>, ports: &[u16]) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let ports: Vec<Value> = ports.iter().map(|p| json!({ "containerPort": p })).collect();
    let pod: Pod = serde_json::from_value(json!({
        "metadata": { "name": name },
        "spec": { "containers": [
            { "name": "sidecar", "image": "busybox" },
            { "name": "web", "image": "nginx", "ports": ports }
        ] }
    }))
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();
    let mut status = json!({ "phase": "Running" });
    if let Some(ip) = ip {
        status["podIP"] = json!(ip.to_string());
        status["podIPs"] = json!([{ "ip": ip.to_string() }]);
    }
    pods.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({ "status": status })),
    )
    .await
    .unwrap();
}

fn status_message(answer: &Answer) -> (u16, String, String) {
    let v = answer.json();
    assert_eq!(v["kind"], "Status", "{v}");
    (
        answer.code,
        v["reason"].as_str().unwrap_or("").to_string(),
        v["message"].as_str().unwrap_or("").to_string(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pod_proxy_forwards_methods_paths_bodies_and_headers() {
    let (sim, _dir) = start_sim(|_| {}).await;
    sim.audit().enable();
    let client = sim.client().await.unwrap();
    let ip = loopback_ip();
    let addr = backend(ip, None).await;
    let port = addr.port();
    running_pod(&client, "web", Some(ip), &[port]).await;

    // No port: the first declared container port (of the second container: the first has none).
    let base = "/api/v1/namespaces/default/pods/web/proxy";
    let seen = kube_request(&client, "GET", &format!("{base}/some/path?q=1&r=a%20b"), Vec::new())
        .await
        .seen();
    assert_eq!(seen["method"], "GET");
    assert_eq!(seen["uri"], "/some/path?q=1&r=a%20b");
    assert_eq!(seen["headers"]["x-forwarded-uri"], format!("{base}/some/path"));
    assert_eq!(seen["headers"]["x-forwarded-for"], "127.0.0.1");
    assert_eq!(seen["tls"], false);

    // name:port and scheme:name:port; a trailing slash is kept.
    for id in [format!("web:{port}"), format!("http:web:{port}")] {
        let path = format!("/api/v1/namespaces/default/pods/{id}/proxy/dir/");
        let seen = kube_request(&client, "GET", &path, Vec::new()).await.seen();
        assert_eq!(seen["uri"], "/dir/", "{id}");
    }

    // Every proxied method, with its body and headers; the credential stays at the apiserver.
    let pp = format!("/api/v1/namespaces/default/pods/web:{port}/proxy");
    for method in ["POST", "PUT", "PATCH", "DELETE", "OPTIONS"] {
        let seen = raw(
            &sim,
            method,
            &format!("{pp}/submit?x=y"),
            &[("content-type", "application/x-test"), ("x-custom", "kept")],
            "the body",
        )
        .await
        .seen();
        assert_eq!(seen["method"], method);
        assert_eq!(seen["uri"], "/submit?x=y");
        assert_eq!(seen["body"], "the body", "{method}");
        assert_eq!(seen["headers"]["content-type"], "application/x-test");
        assert_eq!(seen["headers"]["x-custom"], "kept");
        assert_eq!(seen["headers"]["host"], "localhost", "the client's Host is forwarded");
        assert!(seen["headers"].get("authorization").is_none(), "{seen}");
    }
    // The sub-path is decoded, cleaned as Go's path.Join does, and escaped again.
    let seen = raw(&sim, "GET", &format!("{pp}/a%20b/./x/../c%3Fd"), &[], "")
        .await
        .seen();
    assert_eq!(seen["uri"], "/a%20b/c%3Fd");
    let seen = raw(&sim, "GET", &format!("{pp}/a%20b/c%3Fd"), &[], "").await.seen();
    assert_eq!(seen["headers"]["x-forwarded-uri"], format!("{pp}/a b/c?d"));
    let posted = kube_request(&client, "POST", &format!("{pp}/kube"), b"from kube-rs".to_vec())
        .await
        .seen();
    assert_eq!(
        (posted["method"].as_str(), posted["body"].as_str()),
        (Some("POST"), Some("from kube-rs"))
    );
    let head = raw(&sim, "HEAD", &format!("{pp}/h"), &[], "").await;
    assert_eq!(head.code, 200);
    assert_eq!(head.headers["x-echo-method"], "HEAD");
    assert!(head.body.is_empty());

    // The backend's status, headers and body come back as they are, CORS headers removed.
    let teapot = raw(&sim, "GET", &format!("{pp}/teapot"), &[], "").await;
    assert_eq!(teapot.code, 418);
    assert_eq!(teapot.headers["content-type"], "application/json");
    let cors = raw(&sim, "GET", &format!("{pp}/cors"), &[], "").await;
    assert_eq!(cors.code, 200);
    assert!(cors.headers.get("access-control-allow-origin").is_none());
    assert!(cors.headers.get("access-control-allow-methods").is_none());

    // A redirect to a path on the backend stays under the proxy.
    let redirect = raw(&sim, "GET", &format!("{pp}/redirect"), &[], "").await;
    assert_eq!(redirect.code, 302);
    assert_eq!(redirect.headers["location"], format!("{pp}/target"));

    // `.../proxy` without a slash: 301 to `.../proxy/`, query kept; POST goes straight through.
    let bare = raw(&sim, "GET", &format!("{pp}?a=1"), &[], "").await;
    assert_eq!(bare.code, 301);
    assert_eq!(bare.headers["location"], format!("{pp}/?a=1"));
    let posted = raw(&sim, "POST", &pp, &[], "x").await.seen();
    assert_eq!(posted["uri"], "/");

    // Requests are recorded with the subresource and the method's verb.
    let audit: Vec<(String, u16)> = sim
        .audit()
        .events()
        .into_iter()
        .filter(|e| e.resource == "pods" && e.subresource.as_deref() == Some("proxy"))
        .map(|e| (e.verb, e.code))
        .collect();
    for verb in ["get", "create", "update", "patch", "delete", ""] {
        assert!(audit.iter().any(|(v, _)| v == verb), "verb {verb:?} in {audit:?}");
    }
    assert!(audit.contains(&("get".to_string(), 418)), "{audit:?}");
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pod_proxy_errors_read_like_the_apiserver() {
    let (sim, _dir) = start_sim(|_| {}).await;
    let client = sim.client().await.unwrap();
    let ip = loopback_ip();
    let closed = closed_port(ip).await;
    running_pod(&client, "down", Some(ip), &[closed]).await;
    running_pod(&client, "no-ip", None, &[8080]).await;

    let refused = raw(&sim, "GET", "/api/v1/namespaces/default/pods/down/proxy/x", &[], "").await;
    assert_eq!(
        status_message(&refused),
        (
            503,
            "ServiceUnavailable".to_string(),
            format!("error trying to reach service: dial tcp {ip}:{closed}: connect: connection refused")
        )
    );
    let no_ip = raw(&sim, "GET", "/api/v1/namespaces/default/pods/no-ip/proxy/", &[], "").await;
    assert_eq!(
        status_message(&no_ip),
        (400, "BadRequest".to_string(), "address not allowed".to_string())
    );
    let missing = raw(&sim, "GET", "/api/v1/namespaces/default/pods/nope/proxy/", &[], "").await;
    assert_eq!(
        status_message(&missing),
        (404, "NotFound".to_string(), "pods \"nope\" not found".to_string())
    );
    let invalid = raw(&sim, "GET", "/api/v1/namespaces/default/pods/a:b:c:d/proxy/", &[], "").await;
    assert_eq!(
        status_message(&invalid),
        (
            400,
            "BadRequest".to_string(),
            "invalid pod request \"a:b:c:d\"".to_string()
        )
    );
    let bad_scheme = raw(
        &sim,
        "GET",
        "/api/v1/namespaces/default/pods/ftp:down:21/proxy/",
        &[],
        "",
    )
    .await;
    assert_eq!(bad_scheme.code, 400);
    // Only core pods, services and nodes have the subresource.
    let configmap = raw(&sim, "GET", "/api/v1/namespaces/default/configmaps/x/proxy/", &[], "").await;
    assert_eq!(configmap.code, 404);
    let trace = raw(&sim, "TRACE", "/api/v1/namespaces/default/pods/down/proxy/", &[], "").await;
    assert_eq!(status_message(&trace).0, 405);
    // Unauthenticated requests never reach the backend.
    assert_eq!(
        unauthenticated_get(&sim, "/api/v1/namespaces/default/pods/down/proxy/").await,
        401
    );
    sim.shutdown().await;
}

/// A GET without credentials.
async fn unauthenticated_get(sim: &Sim, path: &str) -> u16 {
    let tcp = tokio::net::TcpStream::connect(sim.addr()).await.unwrap();
    let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
    let tls = common::tls_client(sim).connect(name, tcp).await.unwrap();
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls)).await.unwrap();
    tokio::spawn(conn);
    let req = Request::get(path)
        .header("host", "localhost")
        .body(Full::new(Bytes::new()))
        .unwrap();
    sender.send_request(req).await.unwrap().status().as_u16()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn service_proxy_picks_a_valid_endpoint_by_port() {
    let (sim, _dir) = start_sim(|_| {}).await;
    let client = sim.client().await.unwrap();
    let ip = loopback_ip();
    let addr = backend(ip, None).await;
    running_pod(&client, "web-0", Some(ip), &[addr.port()]).await;

    let services: Api<Service> = Api::namespaced(client.clone(), "default");
    let endpoints: Api<Endpoints> = Api::namespaced(client.clone(), "default");
    let svc = |name: &str| -> Service {
        serde_json::from_value(json!({
            "metadata": { "name": name },
            "spec": { "ports": [{ "name": "http", "port": 80, "targetPort": addr.port() }] }
        }))
        .unwrap()
    };
    for name in ["web", "empty", "no-endpoints", "stranger"] {
        services.create(&PostParams::default(), &svc(name)).await.unwrap();
    }
    // Selector-less Services: their Endpoints are written by hand, as for any external backend.
    let eps = |name: &str, address: Value| -> Endpoints {
        serde_json::from_value(json!({
            "metadata": { "name": name },
            "subsets": [{ "addresses": [address], "ports": [{ "name": "http", "port": addr.port() }] }]
        }))
        .unwrap()
    };
    let pod_ref = json!({ "kind": "Pod", "namespace": "default", "name": "web-0" });
    endpoints
        .create(
            &PostParams::default(),
            &eps("web", json!({ "ip": ip.to_string(), "targetRef": pod_ref })),
        )
        .await
        .unwrap();
    // An address that is no pod's: the apiserver skips it.
    endpoints
        .create(
            &PostParams::default(),
            &eps("stranger", json!({ "ip": ip.to_string() })),
        )
        .await
        .unwrap();
    let empty: Endpoints = serde_json::from_value(json!({ "metadata": { "name": "empty" } })).unwrap();
    endpoints.create(&PostParams::default(), &empty).await.unwrap();

    let base = "/api/v1/namespaces/default/services";
    for id in ["web:http", "web:80", "http:web:http"] {
        let seen = kube_request(
            &client,
            "GET",
            &format!("{base}/{id}/proxy/healthz?verbose"),
            Vec::new(),
        )
        .await
        .seen();
        assert_eq!(seen["uri"], "/healthz?verbose", "{id}");
        assert_eq!(seen["headers"]["x-forwarded-uri"], format!("{base}/{id}/proxy/healthz"));
    }
    let posted = raw(&sim, "POST", &format!("{base}/web:http/proxy/jobs"), &[], "{\"n\":1}")
        .await
        .seen();
    assert_eq!(
        (posted["method"].as_str(), posted["body"].as_str()),
        (Some("POST"), Some("{\"n\":1}"))
    );

    let unavailable = |message: String| (503, "ServiceUnavailable".to_string(), message);
    // No port: only an unnamed port matches, and this Service's port is named.
    let answer = raw(&sim, "GET", &format!("{base}/web/proxy/"), &[], "").await;
    assert_eq!(
        status_message(&answer),
        unavailable("no endpoints available for service \"web\"".into())
    );
    let answer = raw(&sim, "GET", &format!("{base}/web:81/proxy/"), &[], "").await;
    assert_eq!(
        status_message(&answer),
        unavailable("no service port 81 found for service \"web\"".into())
    );
    let answer = raw(&sim, "GET", &format!("{base}/empty:http/proxy/"), &[], "").await;
    assert_eq!(
        status_message(&answer),
        unavailable("no endpoints available for service \"empty\"".into())
    );
    let answer = raw(&sim, "GET", &format!("{base}/stranger:http/proxy/"), &[], "").await;
    assert_eq!(
        status_message(&answer),
        unavailable("no endpoints available for service \"stranger:http\"".into())
    );
    let answer = raw(&sim, "GET", &format!("{base}/no-endpoints:http/proxy/"), &[], "").await;
    assert_eq!(
        status_message(&answer),
        (
            404,
            "NotFound".to_string(),
            "endpoints \"no-endpoints\" not found".to_string()
        )
    );
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_proxy_reaches_the_kubelet_over_https_without_verifying_it() {
    let (sim, _dir) = start_sim(|_| {}).await;
    let client = sim.client().await.unwrap();
    let ip = loopback_ip();
    let kubelet = backend(ip, Some(self_signed_tls())).await;
    let plain = backend(ip, None).await;

    let nodes: Api<Node> = Api::all(client.clone());
    for name in ["n1", "bare"] {
        let node: Node = serde_json::from_value(json!({ "metadata": { "name": name } })).unwrap();
        nodes.create(&PostParams::default(), &node).await.unwrap();
    }
    let status = json!({ "status": {
        "addresses": [{ "type": "Hostname", "address": "n1" }, { "type": "InternalIP", "address": ip.to_string() }],
        "daemonEndpoints": { "kubeletEndpoint": { "Port": kubelet.port() } }
    } });
    nodes
        .patch_status("n1", &PatchParams::default(), &Patch::Merge(status))
        .await
        .unwrap();

    for id in ["n1".to_string(), format!("n1:{}", kubelet.port())] {
        let seen = kube_request(
            &client,
            "GET",
            &format!("/api/v1/nodes/{id}/proxy/metrics?x=1"),
            Vec::new(),
        )
        .await
        .seen();
        assert_eq!(seen["tls"], true, "{id}");
        assert_eq!(seen["uri"], "/metrics?x=1");
        assert_eq!(
            seen["headers"]["x-forwarded-uri"],
            format!("/api/v1/nodes/{id}/proxy/metrics")
        );
    }
    // Another port: the requested scheme (http by default) on the node's address.
    let seen = raw(
        &sim,
        "GET",
        &format!("/api/v1/nodes/n1:{}/proxy/other", plain.port()),
        &[],
        "",
    )
    .await
    .seen();
    assert_eq!(
        (seen["tls"].as_bool(), seen["uri"].as_str()),
        (Some(false), Some("/other"))
    );
    let seen = raw(&sim, "PUT", "/api/v1/nodes/n1/proxy/configz", &[], "cfg")
        .await
        .seen();
    assert_eq!(
        (seen["method"].as_str(), seen["body"].as_str()),
        (Some("PUT"), Some("cfg"))
    );

    let answer = raw(&sim, "GET", "/api/v1/nodes/bare/proxy/", &[], "").await;
    assert_eq!(answer.code, 500);
    assert_eq!(
        answer.json()["message"],
        "no preferred addresses found; known addresses: []"
    );
    let answer = raw(&sim, "GET", "/api/v1/nodes/ghost/proxy/", &[], "").await;
    assert_eq!(
        status_message(&answer),
        (404, "NotFound".to_string(), "nodes \"ghost\" not found".to_string())
    );
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discovery_lists_the_proxy_subresources() {
    let (sim, _dir) = start_sim(|_| {}).await;
    let (code, list) = common::raw_get(&sim, "/api/v1").await;
    assert_eq!(code, 200);
    let resources = list["resources"].as_array().unwrap();
    for (name, kind) in [
        ("pods/proxy", "PodProxyOptions"),
        ("services/proxy", "ServiceProxyOptions"),
        ("nodes/proxy", "NodeProxyOptions"),
    ] {
        let r = resources.iter().find(|r| r["name"] == name).expect(name);
        assert_eq!(r["kind"], kind);
        assert_eq!(r["verbs"], json!(["create", "delete", "get", "patch", "update"]));
    }
    sim.shutdown().await;
}

fn kubectl_on_path() -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|d| d.join("kubectl"))
        .find(|p| p.is_file())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_get_raw_through_the_pod_proxy() {
    let Some(kubectl) = kubectl_on_path() else {
        println!("SKIPPED kubectl get --raw through pods/proxy: kubectl is not on PATH");
        return;
    };
    let (sim, dir) = start_sim(|_| {}).await;
    let client = sim.client().await.unwrap();
    let ip = loopback_ip();
    let addr = backend(ip, None).await;
    running_pod(&client, "web", Some(ip), &[addr.port()]).await;

    let run = |args: Vec<String>| {
        let mut cmd = tokio::process::Command::new(&kubectl);
        cmd.arg("--kubeconfig")
            .arg(sim.kubeconfig_path())
            .args(args)
            .env("HOME", dir.path())
            .env_remove("KUBECONFIG")
            .stdin(std::process::Stdio::null());
        cmd
    };
    let path = format!(
        "/api/v1/namespaces/default/pods/web:{}/proxy/some/path?q=1",
        addr.port()
    );
    let out = within(
        "kubectl get --raw",
        run(vec!["get".into(), "--raw".into(), path]).output(),
    )
    .await
    .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let seen: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(seen["method"], "GET");
    assert_eq!(seen["uri"], "/some/path?q=1");
    assert!(seen["headers"].get("authorization").is_none());

    // A refused connection is kubectl's error with the apiserver's message.
    let closed = closed_port(ip).await;
    let path = format!("/api/v1/namespaces/default/pods/web:{closed}/proxy/");
    let out = within(
        "kubectl get --raw",
        run(vec!["get".into(), "--raw".into(), path]).output(),
    )
    .await
    .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("dial tcp {ip}:{closed}: connect: connection refused")),
        "{stderr}"
    );
    sim.shutdown().await;
}
