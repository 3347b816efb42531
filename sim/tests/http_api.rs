//! The HTTP API through kube-rs: authentication, tables, discovery, pagination, server-side
//! apply, status subresource, deletes, limits and fault injection.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic in a test is a failed assertion

mod common;

use std::time::Duration;

use common::{start_sim, within};
use futures::StreamExt;
use http::header::{ACCEPT, CONTENT_TYPE};
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use kube::core::DynamicObject;
use kube::discovery::ApiResource;
use kube_sim::faults::{FaultAction, FaultRule};
use serde_json::{Value, json};

fn cm(name: &str, data: Value) -> ConfigMap {
    serde_json::from_value(json!({ "metadata": { "name": name }, "data": data })).unwrap()
}

fn api_error(e: kube::Error) -> kube::core::Status {
    match e {
        kube::Error::Api(s) => *s,
        other => panic!("expected an API error, got {other:?}"),
    }
}

async fn raw(client: &kube::Client, req: http::Request<Vec<u8>>) -> (u16, String, Value) {
    let resp = client.send(req.map(Into::into)).await.unwrap();
    let code = resp.status().as_u16();
    let ct = resp
        .headers()
        .get(CONTENT_TYPE)
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default();
    let body = resp.into_body().collect_bytes().await.unwrap();
    (code, ct, serde_json::from_slice(&body).unwrap_or(Value::Null))
}

#[tokio::test]
async fn authentication_by_certificate_or_token_only() {
    let (sim, _dir) = start_sim(|_| {}).await;
    let by_token = sim.client_for_context("kube-sim-token").await.unwrap();
    let ns: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(by_token);
    assert!(ns.get("default").await.is_ok());

    let mut anonymous = kube::Config::new(sim.url().parse().unwrap());
    anonymous.root_cert = Some(vec![sim.pki().ca_cert_der.to_vec()]);
    let anonymous = kube::Client::try_from(anonymous).unwrap();
    let err = api_error(
        Api::<ConfigMap>::namespaced(anonymous.clone(), "default")
            .list(&ListParams::default())
            .await
            .unwrap_err(),
    );
    assert_eq!((err.code, err.reason.as_str()), (401, "Unauthorized"));
    // Health and version are public, as with anonymous auth on a real apiserver.
    let (code, _, _) = raw(&anonymous, http::Request::get("/version").body(vec![]).unwrap()).await;
    assert_eq!(code, 200);
    sim.shutdown().await;
}

#[tokio::test]
async fn tables_discovery_and_pagination() {
    let (sim, _dir) = start_sim(|_| {}).await;
    let client = sim.client().await.unwrap();
    let table = http::Request::get("/api/v1/namespaces")
        .header(ACCEPT, "application/json;as=Table;v=v1;g=meta.k8s.io,application/json")
        .body(vec![])
        .unwrap();
    let (code, _, t) = raw(&client, table).await;
    assert_eq!((code, t["kind"].as_str()), (200, Some("Table")));
    let cols: Vec<&str> = t["columnDefinitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(cols, ["Name", "Status", "Age"]);
    assert_eq!(t["rows"][0]["cells"][1], "Active");
    assert_eq!(t["rows"][0]["object"]["kind"], "PartialObjectMetadata");

    let agg = http::Request::get("/apis")
        .header(
            ACCEPT,
            "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json",
        )
        .body(vec![])
        .unwrap();
    let (_, ct, doc) = raw(&client, agg).await;
    assert_eq!(
        ct,
        "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
    );
    assert_eq!(doc["kind"], "APIGroupDiscoveryList");
    let (_, ct, legacy) = raw(&client, http::Request::get("/apis").body(vec![]).unwrap()).await;
    assert_eq!(
        (ct.as_str(), legacy["kind"].as_str()),
        ("application/json", Some("APIGroupList"))
    );
    // kube-rs discovery over the legacy endpoints.
    let discovery = kube::Discovery::new(client.clone()).run().await.unwrap();
    assert!(discovery.groups().any(|g| g.name() == "coordination.k8s.io"));

    let api: Api<ConfigMap> = Api::namespaced(client, "default");
    for i in 0..5 {
        api.create(&PostParams::default(), &cm(&format!("c{i}"), json!({})))
            .await
            .unwrap();
    }
    let first = api.list(&ListParams::default().limit(2)).await.unwrap();
    assert_eq!(first.items.len(), 2);
    assert_eq!(first.metadata.remaining_item_count, Some(3));
    let token = first.metadata.continue_.clone().unwrap();
    let second = api
        .list(&ListParams::default().limit(2).continue_token(&token))
        .await
        .unwrap();
    assert_eq!(second.items[0].metadata.name.as_deref(), Some("c2"));
    assert_eq!(second.metadata.resource_version, first.metadata.resource_version);
    sim.shutdown().await;
}

#[tokio::test]
async fn apply_status_and_delete_over_http() {
    let (sim, _dir) = start_sim(|_| {}).await;
    let client = sim.client().await.unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let applied =
        json!({ "apiVersion": "v1", "kind": "ConfigMap", "metadata": { "name": "ssa" }, "data": { "k": "a" } });
    let created = cms
        .patch("ssa", &PatchParams::apply("alice"), &Patch::Apply(&applied))
        .await
        .unwrap();
    assert_eq!(
        created.metadata.managed_fields.unwrap()[0].manager.as_deref(),
        Some("alice")
    );
    let other = json!({ "apiVersion": "v1", "kind": "ConfigMap", "metadata": { "name": "ssa" }, "data": { "k": "b" } });
    let err = api_error(
        cms.patch("ssa", &PatchParams::apply("bob"), &Patch::Apply(&other))
            .await
            .unwrap_err(),
    );
    assert_eq!((err.code, err.reason.as_str()), (409, "Conflict"));
    assert!(err.message.contains("conflict with \"alice\""), "{}", err.message);
    let forced = cms
        .patch("ssa", &PatchParams::apply("bob").force(), &Patch::Apply(&other))
        .await
        .unwrap();
    assert_eq!(forced.data.unwrap()["k"], "b");

    // Status subresource of a pod, and what DELETE answers.
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let pod: Pod = serde_json::from_value(
        json!({ "metadata": { "name": "p" }, "spec": { "containers": [{ "name": "c", "image": "i" }] } }),
    )
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();
    let st = json!({ "status": { "phase": "Running", "podIP": "10.0.0.5" }, "spec": { "nodeName": "ignored" } });
    let p = pods
        .patch_status("p", &PatchParams::default(), &Patch::Merge(&st))
        .await
        .unwrap();
    assert_eq!(p.status.unwrap().phase.as_deref(), Some("Running"));
    assert_eq!(p.spec.unwrap().node_name, None);
    assert!(
        pods.delete("p", &DeleteParams::default()).await.unwrap().is_left(),
        "pods return the object"
    );
    assert!(
        cms.delete("ssa", &DeleteParams::default()).await.unwrap().is_right(),
        "configmaps return a Status"
    );
    let err = api_error(cms.get("ssa").await.unwrap_err());
    assert_eq!(
        (err.code, err.reason.as_str(), err.message.as_str()),
        (404, "NotFound", "configmaps \"ssa\" not found")
    );

    // A resource nobody serves.
    let ar = ApiResource::from_gvk(&kube::core::GroupVersionKind::gvk("example.com", "v1", "Nope"));
    let nope: Api<DynamicObject> = Api::namespaced_with(client, "default", &ar);
    assert_eq!(
        api_error(nope.list(&ListParams::default()).await.unwrap_err()).code,
        404
    );
    sim.shutdown().await;
}

#[tokio::test]
async fn request_and_object_size_limits() {
    let (sim, _dir) = start_sim(|_| {}).await;
    let client = sim.client().await.unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    // A ConfigMap's data is refused by validation above 1 MiB, as kube-apiserver refuses it.
    let too_big_for_a_config_map = cm("big", json!({ "k": "x".repeat(1100 * 1024) }));
    let err = api_error(
        cms.create(&PostParams::default(), &too_big_for_a_config_map)
            .await
            .unwrap_err(),
    );
    assert_eq!(
        (err.code, err.message.as_str()),
        (
            422,
            "ConfigMap \"big\" is invalid: : Too long: may not be more than 1048576 bytes"
        )
    );
    // An object no size rule limits (an env value) meets etcd's 1.5 MiB request limit.
    let pods: Api<Pod> = Api::namespaced(client, "default");
    let too_big_for_etcd: Pod = serde_json::from_value(json!({
        "metadata": { "name": "big" },
        "spec": { "containers": [{ "name": "c", "image": "i", "env": [{ "name": "V", "value": "x".repeat(1600 * 1024) }] }] }
    }))
    .unwrap();
    let err = api_error(
        pods.create(&PostParams::default(), &too_big_for_etcd)
            .await
            .unwrap_err(),
    );
    assert_eq!(
        (err.code, err.message.as_str()),
        (500, "etcdserver: request is too large")
    );
    let too_big_to_send = cm("huge", json!({ "k": "x".repeat(3200 * 1024) }));
    let err = api_error(cms.create(&PostParams::default(), &too_big_to_send).await.unwrap_err());
    assert_eq!((err.code, err.reason.as_str()), (413, "RequestEntityTooLarge"));
    sim.shutdown().await;
}

#[tokio::test]
async fn faults_fail_requests_and_make_the_server_unavailable() {
    let (sim, _dir) = start_sim(|c| c.bookmark_interval = Duration::from_millis(100)).await;
    let client = sim.client().await.unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    sim.faults().add(FaultRule {
        verb: Some("create".into()),
        resource: Some("configmaps".into()),
        user_agent: None,
        // Not 429/503: kube-rs retries those by itself.
        action: FaultAction::Fail {
            code: 500,
            reason: "InternalError".into(),
            message: "injected failure".into(),
        },
        times: Some(1),
    });
    let err = api_error(
        cms.create(&PostParams::default(), &cm("a", json!({})))
            .await
            .unwrap_err(),
    );
    assert_eq!((err.code, err.message.as_str()), (500, "injected failure"));
    cms.create(&PostParams::default(), &cm("a", json!({}))).await.unwrap();

    sim.faults().make_unavailable(Duration::from_secs(600));
    let (code, _) = common::raw_get(&sim, "/readyz").await;
    assert_eq!(code, 503);
    let (code, status) = common::raw_get(&sim, "/api/v1/namespaces/default/configmaps/a").await;
    assert_eq!((code, status["reason"].as_str()), (503, Some("ServiceUnavailable")));
    sim.faults().clear();
    assert!(cms.get("a").await.is_ok());

    // A watch with bookmarks gets them, and ends when the server cuts watches.
    let rv = cms
        .list(&ListParams::default())
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    let mut stream = cms.watch(&WatchParams::default(), &rv).await.unwrap().boxed();
    let ev = within("a bookmark", stream.next()).await.unwrap().unwrap();
    assert!(matches!(ev, WatchEvent::Bookmark(_)), "{ev:?}");
    sim.cut_all_watches();
    loop {
        match within("the end of the watch", stream.next()).await {
            None => break,
            Some(Ok(WatchEvent::Bookmark(_))) => continue,
            Some(other) => panic!("unexpected {other:?}"),
        }
    }
    sim.shutdown().await;
}

/// fabric8 (Spark's Kubernetes client) watches over WebSocket: the sim switches protocols for a
/// watch and sends each event as one text frame, as kube-apiserver does; a close is answered.
#[tokio::test]
async fn watch_over_websocket() {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let (sim, _dir) = common::start_sim(|_| {}).await;
    let connector = common::tls_client(&sim);
    let connect = || async {
        let tcp = tokio::net::TcpStream::connect(sim.addr()).await.unwrap();
        let name = rustls_pki_types::ServerName::try_from("localhost").unwrap();
        connector.connect(name, tcp).await.unwrap()
    };
    let request = |path: &str| {
        format!(
            "GET {path} HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {}\r\nConnection: Upgrade\r\n\
             Upgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n",
            sim.token()
        )
    };
    // Reads up to the end of the response head.
    async fn head(tls: &mut (impl tokio::io::AsyncRead + Unpin)) -> String {
        let mut buf = Vec::new();
        while !buf.ends_with(b"\r\n\r\n") {
            let mut b = [0u8; 1];
            tls.read_exact(&mut b).await.unwrap();
            buf.push(b[0]);
        }
        String::from_utf8(buf).unwrap()
    }

    // Not a watch: answered as plain HTTP, no switch.
    let mut plain = connect().await;
    plain
        .write_all(request("/api/v1/namespaces/default/configmaps").as_bytes())
        .await
        .unwrap();
    let h = common::within("the list's head", head(&mut plain)).await;
    assert!(h.starts_with("HTTP/1.1 200"), "{h}");

    let mut tls = connect().await;
    tls.write_all(request("/api/v1/namespaces/default/configmaps?watch=true").as_bytes())
        .await
        .unwrap();
    let h = common::within("the switch", head(&mut tls)).await;
    assert!(h.starts_with("HTTP/1.1 101"), "{h}");
    assert!(
        h.to_ascii_lowercase()
            .contains("sec-websocket-accept: s3pplmbitxaq9kygzzhzrbk+xoo="),
        "{h}"
    );

    let client = sim.client().await.unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(client, "default");
    cms.create(&PostParams::default(), &cm("over-ws", json!({"a": "b"})))
        .await
        .unwrap();
    let event: Value = common::within("the ADDED frame", async {
        loop {
            let mut h = [0u8; 2];
            tls.read_exact(&mut h).await.unwrap();
            assert_eq!(h[0], 0x81, "a final text frame");
            assert_eq!(h[1] & 0x80, 0, "server frames are not masked");
            let len = match h[1] & 0x7f {
                126 => {
                    let mut b = [0u8; 2];
                    tls.read_exact(&mut b).await.unwrap();
                    usize::from(u16::from_be_bytes(b))
                }
                127 => panic!("an event this small needs no 64-bit length"),
                n => usize::from(n),
            };
            let mut payload = vec![0u8; len];
            tls.read_exact(&mut payload).await.unwrap();
            let v: Value = serde_json::from_slice(&payload).unwrap();
            if v["object"]["metadata"]["name"] == "over-ws" {
                break v;
            }
        }
    })
    .await;
    assert_eq!(event["type"], "ADDED");
    assert_eq!(event["object"]["data"]["a"], "b");

    // A masked close from the client gets a close back.
    let mask = [1u8, 2, 3, 4];
    let code = 1000u16.to_be_bytes();
    let mut close = vec![0x88, 0x80 | 2];
    close.extend_from_slice(&mask);
    close.extend(code.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
    tls.write_all(&close).await.unwrap();
    let answer = common::within("the close", async {
        let mut rest = Vec::new();
        let _ = tls.read_to_end(&mut rest).await;
        rest
    })
    .await;
    // Frames already on their way may come first; the last one is the close.
    assert!(answer.ends_with(&[0x88, 2, 0x03, 0xe8]), "{answer:?}");
}
