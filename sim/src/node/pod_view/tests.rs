//! Unit tests of a container's view against a bare store.

use std::os::unix::fs::PermissionsExt;

use base64::Engine as _;
use serde_json::{Value, json};

use super::*;
use crate::registry::Gvr;
use crate::store::{StoreConfig, WriteOptions};

struct Fixture {
    store: Store,
    tokens: TokenSigner,
    dir: tempfile::TempDir,
}

impl Fixture {
    async fn new() -> Fixture {
        let f = Fixture {
            store: Store::new(StoreConfig::default()),
            tokens: TokenSigner::new(),
            dir: tempfile::tempdir().unwrap(),
        };
        f.create("namespaces", "", json!({ "metadata": { "name": "default" } }))
            .await;
        f.create("namespaces", "", json!({ "metadata": { "name": "ns" } }))
            .await;
        f.create("namespaces", "", json!({ "metadata": { "name": "kube-system" } }))
            .await;
        f.create("serviceaccounts", "ns", json!({ "metadata": { "name": "default" } }))
            .await;
        let mut node = f.create("nodes", "", json!({ "metadata": { "name": "n1" } })).await;
        node["status"] = json!({ "allocatable": { "cpu": "8", "memory": "32Gi", "ephemeral-storage": "100Gi" } });
        f.store
            .update(
                &Gvr::new("", "v1", "nodes"),
                "",
                "n1",
                node,
                Some("status"),
                &WriteOptions::default(),
            )
            .await
            .unwrap();
        f
    }

    async fn create(&self, resource: &str, ns: &str, mut obj: Value) -> Value {
        let kind = match resource {
            "namespaces" => "Namespace",
            "serviceaccounts" => "ServiceAccount",
            "nodes" => "Node",
            "configmaps" => "ConfigMap",
            "secrets" => "Secret",
            "services" => "Service",
            "pods" => "Pod",
            other => panic!("no kind for {other}"),
        };
        obj["apiVersion"] = json!("v1");
        obj["kind"] = json!(kind);
        self.store
            .create(&Gvr::new("", "v1", resource), ns, obj, &WriteOptions::default())
            .await
            .unwrap()
            .object
    }

    fn node_root(&self) -> &Path {
        self.dir.path()
    }

    fn view(&self, pod: &Value) -> Result<View, ViewError> {
        self.view_of(pod, 0)
    }

    fn view_of(&self, pod: &Value, container: usize) -> Result<View, ViewError> {
        prepare(ViewInput {
            store: &self.store,
            node_root: self.node_root(),
            node_name: "n1",
            pod,
            container: &pod["spec"]["containers"][container],
            pod_ip: "127.1.0.5",
            host_ip: "127.0.1.1",
            tokens: &self.tokens,
        })
    }
}

/// A pod in `ns` with one container `c` and the given spec fields merged in.
fn pod(spec: Value) -> Value {
    let mut p = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": { "name": "p", "namespace": "ns", "uid": "uid-1", "labels": { "app": "x", "tier": "a.b" }, "annotations": { "note": "n", "q": "say \"hi\"" } },
        "spec": { "nodeName": "n1", "serviceAccountName": "default", "containers": [{ "name": "c", "image": "i" }] }
    });
    if let (Some(dst), Some(src)) = (p["spec"].as_object_mut(), spec.as_object()) {
        for (k, v) in src {
            dst.insert(k.clone(), v.clone());
        }
    }
    p
}

fn container(p: &mut Value, fields: Value) {
    if let (Some(dst), Some(src)) = (p["spec"]["containers"][0].as_object_mut(), fields.as_object()) {
        for (k, v) in src {
            dst.insert(k.clone(), v.clone());
        }
    }
}

fn mount<'a>(v: &'a View, target: &str) -> &'a ViewMount {
    v.mounts
        .iter()
        .find(|m| m.target == target)
        .unwrap_or_else(|| panic!("no mount at {target}: {:?}", v.mounts))
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p).unwrap().permissions().mode() & 0o7777
}

fn env<'a>(v: &'a View, name: &str) -> Option<&'a str> {
    v.env.iter().rev().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
}

fn config_error(r: Result<View, ViewError>) -> String {
    match r {
        Err(ViewError::Config(m)) => m,
        other => panic!("expected a config error, got {other:?}"),
    }
}

#[tokio::test]
async fn config_map_volume_with_items_modes_and_binary_data() {
    let f = Fixture::new().await;
    f.create(
        "configmaps",
        "ns",
        json!({ "metadata": { "name": "cm" }, "data": { "a": "A", "b": "B" }, "binaryData": { "bin": base64::engine::general_purpose::STANDARD.encode([0u8, 1, 2]) } }),
    )
    .await;
    let mut p = pod(json!({ "volumes": [
        { "name": "all", "configMap": { "name": "cm", "defaultMode": 0o440 } },
        { "name": "some", "configMap": { "name": "cm", "items": [{ "key": "a", "path": "dir/renamed", "mode": 0o600 }, { "key": "b", "path": "b" }] } },
    ] }));
    container(
        &mut p,
        json!({ "volumeMounts": [{ "name": "all", "mountPath": "/all" }, { "name": "some", "mountPath": "/some" }] }),
    );
    let v = f.view(&p).unwrap();
    let all = mount(&v, "/all");
    assert!(all.read_only, "ConfigMap volumes are always read-only");
    assert!(
        all.source
            .ends_with("var/lib/kubelet/pods/uid-1/volumes/kubernetes.io~configmap/all")
    );
    assert_eq!(read(&all.source.join("a")), "A");
    assert_eq!(std::fs::read(all.source.join("bin")).unwrap(), vec![0, 1, 2]);
    assert_eq!(mode(&all.source.join("a")), 0o440);
    assert_eq!(
        std::fs::read_link(all.source.join("a")).unwrap(),
        PathBuf::from("..data/a")
    );
    assert!(std::fs::read_link(all.source.join("..data")).is_ok());
    let some = mount(&v, "/some");
    assert_eq!(read(&some.source.join("dir/renamed")), "A");
    assert_eq!(mode(&some.source.join("dir/renamed")), 0o600);
    assert_eq!(mode(&some.source.join("b")), 0o644, "defaultMode 0644");
    assert!(!some.source.join("a").exists(), "only the items");
}

#[tokio::test]
async fn secret_volume_missing_optional_and_missing_key() {
    let f = Fixture::new().await;
    f.create(
        "secrets",
        "ns",
        json!({ "metadata": { "name": "s" }, "stringData": { "pw": "hunter2" } }),
    )
    .await;
    let p = pod(json!({ "volumes": [{ "name": "sec", "secret": { "secretName": "s", "defaultMode": 0o400 } }] }));
    let mut p2 = p.clone();
    container(
        &mut p2,
        json!({ "volumeMounts": [{ "name": "sec", "mountPath": "/sec", "readOnly": false }] }),
    );
    let v = f.view(&p2).unwrap();
    let m = mount(&v, "/sec");
    assert!(
        m.read_only,
        "Secret volumes are read-only even when the mount asks otherwise"
    );
    assert!(m.source.to_string_lossy().contains("kubernetes.io~secret/sec"));
    assert_eq!(read(&m.source.join("pw")), "hunter2");
    assert_eq!(mode(&m.source.join("pw")), 0o400);

    let missing = pod(json!({ "volumes": [{ "name": "v", "secret": { "secretName": "nope" } }] }));
    assert_eq!(
        config_error(f.view(&missing)),
        "MountVolume.SetUp failed for volume \"v\" : secret \"nope\" not found"
    );
    let optional = pod(json!({ "volumes": [{ "name": "v", "secret": { "secretName": "nope", "optional": true } }] }));
    f.view(&optional).unwrap();
    let bad_key = pod(
        json!({ "volumes": [{ "name": "v", "secret": { "secretName": "s", "items": [{ "key": "x", "path": "x" }] } }] }),
    );
    assert_eq!(
        config_error(f.view(&bad_key)),
        "MountVolume.SetUp failed for volume \"v\" : references non-existent secret key: x"
    );
    let cm = pod(json!({ "volumes": [{ "name": "v", "configMap": { "name": "nope" } }] }));
    assert_eq!(
        config_error(f.view(&cm)),
        "MountVolume.SetUp failed for volume \"v\" : configmap \"nope\" not found"
    );
}

#[tokio::test]
async fn projected_volume_with_a_token_the_signer_accepts() {
    let f = Fixture::new().await;
    f.create(
        "configmaps",
        "ns",
        json!({ "metadata": { "name": "kube-root-ca.crt" }, "data": { "ca.crt": "CA" } }),
    )
    .await;
    let stored = f.create("pods", "ns", pod(json!({ "volumes": [{ "name": "kube-api-access", "projected": { "defaultMode": 420, "sources": [
        { "serviceAccountToken": { "expirationSeconds": 3607, "path": "token" } },
        { "configMap": { "name": "kube-root-ca.crt", "items": [{ "key": "ca.crt", "path": "ca.crt" }] } },
        { "downwardAPI": { "items": [{ "path": "namespace", "fieldRef": { "apiVersion": "v1", "fieldPath": "metadata.namespace" } }] } },
        { "serviceAccountToken": { "audience": "vault", "expirationSeconds": 600, "path": "vault-token" } }
    ] } }] }))).await;
    let mut p = stored.clone();
    container(
        &mut p,
        json!({ "volumeMounts": [{ "name": "kube-api-access", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount" }] }),
    );
    let v = f.view(&p).unwrap();
    let m = mount(&v, "/var/run/secrets/kubernetes.io/serviceaccount");
    assert!(m.read_only);
    assert!(
        m.source
            .to_string_lossy()
            .contains("kubernetes.io~projected/kube-api-access")
    );
    assert_eq!(read(&m.source.join("ca.crt")), "CA");
    assert_eq!(read(&m.source.join("namespace")), "ns");
    assert_eq!(mode(&m.source.join("token")), 0o644);
    let token = read(&m.source.join("token"));
    let now = jiff::Timestamp::now().as_second();
    let user = f.tokens.authenticate(&f.store, &token, now).unwrap();
    assert_eq!(user.username, "system:serviceaccount:ns:default");
    assert_eq!(
        user.groups,
        vec![
            "system:serviceaccounts",
            "system:serviceaccounts:ns",
            "system:authenticated"
        ]
    );
    let claims = f.tokens.verify(&token, now).unwrap();
    assert_eq!(
        claims.kubernetes.pod.as_ref().map(|p| p.uid.as_str()),
        Some(crate::meta::uid(&stored))
    );
    assert_eq!(claims.kubernetes.node.as_ref().map(|n| n.name.as_str()), Some("n1"));
    assert_eq!(claims.kubernetes.warnafter, Some(claims.iat + 3607));
    // Another audience: a token, but not one the API server takes.
    let vault = read(&m.source.join("vault-token"));
    let c = f.tokens.verify(&vault, now);
    assert!(
        matches!(c, Err(crate::service_account_tokens::TokenError::Audience(_))),
        "{c:?}"
    );

    // The next start keeps the token (the kubelet renews at 80 % of its lifetime) and the
    // volume's directory; a ConfigMap change arrives with a refresh.
    let data = std::fs::read_link(m.source.join("..data")).unwrap();
    let again = f.view(&p).unwrap();
    let m2 = mount(&again, "/var/run/secrets/kubernetes.io/serviceaccount");
    assert_eq!(read(&m2.source.join("token")), token);
    assert_eq!(std::fs::read_link(m2.source.join("..data")).unwrap(), data);
    let mut cm = f
        .store
        .get(&Gvr::new("", "v1", "configmaps"), "ns", "kube-root-ca.crt")
        .unwrap();
    cm["data"]["ca.crt"] = json!("CA2");
    f.store
        .update(
            &Gvr::new("", "v1", "configmaps"),
            "ns",
            "kube-root-ca.crt",
            cm,
            None,
            &WriteOptions::default(),
        )
        .await
        .unwrap();
    refresh_volumes(&ViewInput {
        store: &f.store,
        node_root: f.node_root(),
        node_name: "n1",
        pod: &p,
        container: &p["spec"]["containers"][0],
        pod_ip: "127.1.0.5",
        host_ip: "127.0.1.1",
        tokens: &f.tokens,
    })
    .unwrap();
    assert_eq!(read(&m.source.join("ca.crt")), "CA2");
    assert_eq!(read(&m.source.join("token")), token);
    assert_ne!(std::fs::read_link(m2.source.join("..data")).unwrap(), data);

    // Pods running as one user get a token only that user can read.
    let mut as_user = p.clone();
    as_user["spec"]["securityContext"] = json!({ "runAsUser": 1234 });
    let v = f.view(&as_user).unwrap();
    let token = mount(&v, "/var/run/secrets/kubernetes.io/serviceaccount")
        .source
        .join("token");
    assert_eq!(mode(&token), 0o600);
    assert_eq!(
        std::os::unix::fs::MetadataExt::uid(&std::fs::metadata(&token).unwrap()),
        1234
    );

    let ctb = pod(
        json!({ "volumes": [{ "name": "v", "projected": { "sources": [{ "clusterTrustBundle": { "name": "x", "path": "b" } }] } }] }),
    );
    assert!(config_error(f.view(&ctb)).contains("clusterTrustBundle projections are not supported"));
}

#[tokio::test]
async fn downward_api_volume() {
    let f = Fixture::new().await;
    let mut p = pod(json!({ "volumes": [{ "name": "info", "downwardAPI": { "items": [
        { "path": "labels", "fieldRef": { "fieldPath": "metadata.labels" } },
        { "path": "app", "fieldRef": { "fieldPath": "metadata.labels['app']" } },
        { "path": "annotations", "fieldRef": { "fieldPath": "metadata.annotations" } },
        { "path": "note", "fieldRef": { "fieldPath": "metadata.annotations['note']" } },
        { "path": "name", "fieldRef": { "fieldPath": "metadata.name" } },
        { "path": "namespace", "fieldRef": { "fieldPath": "metadata.namespace" } },
        { "path": "uid", "fieldRef": { "fieldPath": "metadata.uid" }, "mode": 0o400 },
        { "path": "mem", "resourceFieldRef": { "containerName": "c", "resource": "limits.memory", "divisor": "1Mi" } },
        { "path": "cpu", "resourceFieldRef": { "containerName": "c", "resource": "requests.cpu", "divisor": "1m" } }
    ] } }] }));
    container(
        &mut p,
        json!({ "resources": { "limits": { "memory": "100Mi" }, "requests": { "cpu": "250m" } }, "volumeMounts": [{ "name": "info", "mountPath": "/etc/podinfo" }] }),
    );
    let v = f.view(&p).unwrap();
    let m = mount(&v, "/etc/podinfo");
    assert!(m.read_only);
    assert!(m.source.to_string_lossy().contains("kubernetes.io~downward-api/info"));
    let r = |f: &str| read(&m.source.join(f));
    assert_eq!(r("labels"), "app=\"x\"\ntier=\"a.b\"");
    assert_eq!(r("app"), "x");
    assert_eq!(r("annotations"), "note=\"n\"\nq=\"say \\\"hi\\\"\"");
    assert_eq!(r("note"), "n");
    assert_eq!(
        (r("name"), r("namespace"), r("uid")),
        ("p".into(), "ns".into(), "uid-1".into())
    );
    assert_eq!(mode(&m.source.join("uid")), 0o400);
    assert_eq!(r("mem"), "100");
    assert_eq!(r("cpu"), "250");
    let bad = pod(
        json!({ "volumes": [{ "name": "v", "downwardAPI": { "items": [{ "path": "x", "fieldRef": { "fieldPath": "spec.nodeName" } }] } }] }),
    );
    assert_eq!(
        config_error(f.view(&bad)),
        "MountVolume.SetUp failed for volume \"v\" : unsupported fieldPath: spec.nodeName"
    );
}

#[tokio::test]
async fn empty_dir_survives_restarts_and_host_path_types() {
    let f = Fixture::new().await;
    let mut p = pod(json!({ "volumes": [
        { "name": "scratch", "emptyDir": {} },
        { "name": "mem", "emptyDir": { "medium": "Memory" } },
        { "name": "logs", "hostPath": { "path": "/var/log/pods", "type": "DirectoryOrCreate" } },
        { "name": "file", "hostPath": { "path": "/etc/some.conf", "type": "FileOrCreate" } },
    ] }));
    container(
        &mut p,
        json!({ "volumeMounts": [
            { "name": "scratch", "mountPath": "/scratch" },
            { "name": "mem", "mountPath": "/dev/shm" },
            { "name": "logs", "mountPath": "/var/log/pods", "readOnly": true },
            { "name": "file", "mountPath": "/etc/some.conf" },
        ] }),
    );
    let v = f.view(&p).unwrap();
    let scratch = mount(&v, "/scratch");
    assert!(!scratch.read_only);
    assert!(
        scratch
            .source
            .to_string_lossy()
            .contains("kubernetes.io~empty-dir/scratch")
    );
    assert_eq!(mode(&scratch.source), 0o777);
    std::fs::write(scratch.source.join("kept"), "1").unwrap();
    assert!(mount(&v, "/dev/shm").source.is_dir());
    let logs = mount(&v, "/var/log/pods");
    assert_eq!(logs.source, f.node_root().join("var/log/pods"));
    assert!(logs.source.is_dir() && logs.read_only);
    assert!(mount(&v, "/etc/some.conf").source.is_file());
    let again = f.view(&p).unwrap();
    assert_eq!(
        read(&mount(&again, "/scratch").source.join("kept")),
        "1",
        "an emptyDir lives as long as the pod"
    );

    for (ty, path, what) in [
        ("Directory", "/no/dir", "a directory"),
        ("File", "/no/file", "a file"),
        ("Socket", "/var/log/pods", "a socket file"),
    ] {
        let p = pod(json!({ "volumes": [{ "name": "h", "hostPath": { "path": path, "type": ty } }] }));
        assert_eq!(
            config_error(f.view(&p)),
            format!("MountVolume.SetUp failed for volume \"h\" : hostPath type check failed: {path} is not {what}")
        );
    }
    let escape = pod(json!({ "volumes": [{ "name": "h", "hostPath": { "path": "/../../etc" } }] }));
    assert!(config_error(f.view(&escape)).contains("leaves the node's root"));
    let pvc = pod(json!({ "volumes": [{ "name": "data", "persistentVolumeClaim": { "claimName": "c" } }] }));
    let msg = config_error(f.view(&pvc));
    assert!(
        msg.starts_with(
            "MountVolume.SetUp failed for volume \"data\" : volume type persistentVolumeClaim is not supported"
        ),
        "{msg}"
    );
}

#[tokio::test]
async fn sub_paths_and_mount_order() {
    let f = Fixture::new().await;
    f.create(
        "configmaps",
        "ns",
        json!({ "metadata": { "name": "cm" }, "data": { "app.conf": "x=1" } }),
    )
    .await;
    let mut p = pod(
        json!({ "volumes": [{ "name": "work", "emptyDir": {} }, { "name": "cm", "configMap": { "name": "cm" } }] }),
    );
    container(
        &mut p,
        json!({
            "env": [{ "name": "POD", "valueFrom": { "fieldRef": { "fieldPath": "metadata.name" } } }],
            "volumeMounts": [
                { "name": "cm", "mountPath": "/work/conf/app.conf", "subPath": "app.conf" },
                { "name": "work", "mountPath": "/work/logs", "subPathExpr": "logs/$(POD)" },
                { "name": "work", "mountPath": "/work" },
                { "name": "work", "mountPath": "etc" },
            ]
        }),
    );
    let v = f.view(&p).unwrap();
    let targets: Vec<&str> = v.mounts.iter().map(|m| m.target.as_str()).collect();
    let pos = |t: &str| targets.iter().position(|x| *x == t).unwrap();
    assert!(
        pos("/work") < pos("/work/logs") && pos("/work") < pos("/work/conf/app.conf"),
        "{targets:?}"
    );
    assert!(
        pos("/etc") < pos("/etc/hosts") && pos("/etc") < pos("/etc/resolv.conf"),
        "{targets:?}"
    );
    let logs = mount(&v, "/work/logs");
    assert!(logs.source.is_dir() && logs.source.ends_with("logs/p"), "{logs:?}");
    let conf = mount(&v, "/work/conf/app.conf");
    assert!(conf.read_only);
    assert_eq!(read(&conf.source), "x=1");

    let mut missing = p.clone();
    missing["spec"]["containers"][0]["volumeMounts"] =
        json!([{ "name": "work", "mountPath": "/w", "subPathExpr": "$(NOPE)/$(POD)" }]);
    assert_eq!(config_error(f.view(&missing)), "missing value for NOPE");
    let mut abs = p.clone();
    abs["spec"]["containers"][0]["volumeMounts"] = json!([{ "name": "work", "mountPath": "/w", "subPath": "/etc" }]);
    assert_eq!(
        config_error(f.view(&abs)),
        "error SubPath `/etc` must not be an absolute path"
    );
    // A symlink in the volume that leads out of it.
    let work = f
        .node_root()
        .join("var/lib/kubelet/pods/uid-1/volumes/kubernetes.io~empty-dir/work");
    std::os::unix::fs::symlink("/etc", work.join("out")).unwrap();
    let mut out = p.clone();
    out["spec"]["containers"][0]["volumeMounts"] = json!([{ "name": "work", "mountPath": "/w", "subPath": "out" }]);
    assert_eq!(
        config_error(f.view(&out)),
        "failed to prepare subPath for volumeMount \"work\" of container \"c\""
    );
    let mut unknown = p.clone();
    unknown["spec"]["containers"][0]["volumeMounts"] = json!([{ "name": "ghost", "mountPath": "/g" }]);
    assert_eq!(
        config_error(f.view(&unknown)),
        "cannot find volume \"ghost\" to mount into container \"c\""
    );
}

#[tokio::test]
async fn env_in_the_kubelet_order_with_service_links() {
    let f = Fixture::new().await;
    f.create(
        "services",
        "default",
        json!({ "metadata": { "name": "kubernetes" }, "spec": { "clusterIP": "10.96.0.1", "ports": [{ "name": "https", "port": 443, "protocol": "TCP", "targetPort": 6443 }] } }),
    )
    .await;
    f.create(
        "services",
        "ns",
        json!({ "metadata": { "name": "my-db" }, "spec": { "clusterIP": "10.96.0.20", "ports": [{ "name": "sql", "port": 5432 }, { "name": "metrics", "port": 9187, "protocol": "UDP" }] } }),
    )
    .await;
    f.create(
        "services",
        "ns",
        json!({ "metadata": { "name": "headless" }, "spec": { "clusterIP": "None", "ports": [{ "port": 80 }] } }),
    )
    .await;
    f.create(
        "configmaps",
        "ns",
        json!({ "metadata": { "name": "cm" }, "data": { "A": "from-cm", "B": "b" } }),
    )
    .await;
    f.create(
        "secrets",
        "ns",
        json!({ "metadata": { "name": "s" }, "stringData": { "PW": "secret" } }),
    )
    .await;
    let mut p = pod(json!({}));
    container(
        &mut p,
        json!({
            "envFrom": [{ "configMapRef": { "name": "cm" } }, { "prefix": "S_", "secretRef": { "name": "s" } }, { "configMapRef": { "name": "gone", "optional": true } }],
            "env": [
                { "name": "B", "value": "over-$(A)" },
                { "name": "DB", "value": "$(MY_DB_SERVICE_HOST):$(MY_DB_SERVICE_PORT)/$(UNDEFINED)/$$(A)" },
                { "name": "MY_DB_SERVICE_HOST", "value": "mine" },
                { "name": "EMPTY" },
                { "name": "KEY", "valueFrom": { "configMapKeyRef": { "name": "cm", "key": "A" } } },
                { "name": "PW", "valueFrom": { "secretKeyRef": { "name": "s", "key": "PW" } } },
                { "name": "OPT", "valueFrom": { "secretKeyRef": { "name": "s", "key": "nope", "optional": true } } },
            ]
        }),
    );
    let v = f.view(&p).unwrap();
    let names: Vec<&str> = v.env.iter().map(|(n, _)| n.as_str()).collect();
    // Service links first (sorted by Service), then envFrom, then env.
    assert_eq!(
        names,
        vec![
            "KUBERNETES_SERVICE_HOST",
            "KUBERNETES_SERVICE_PORT",
            "KUBERNETES_SERVICE_PORT_HTTPS",
            "KUBERNETES_PORT",
            "KUBERNETES_PORT_443_TCP",
            "KUBERNETES_PORT_443_TCP_PROTO",
            "KUBERNETES_PORT_443_TCP_PORT",
            "KUBERNETES_PORT_443_TCP_ADDR",
            "MY_DB_SERVICE_PORT",
            "MY_DB_SERVICE_PORT_SQL",
            "MY_DB_SERVICE_PORT_METRICS",
            "MY_DB_PORT",
            "MY_DB_PORT_5432_TCP",
            "MY_DB_PORT_5432_TCP_PROTO",
            "MY_DB_PORT_5432_TCP_PORT",
            "MY_DB_PORT_5432_TCP_ADDR",
            "MY_DB_PORT_9187_UDP",
            "MY_DB_PORT_9187_UDP_PROTO",
            "MY_DB_PORT_9187_UDP_PORT",
            "MY_DB_PORT_9187_UDP_ADDR",
            "A",
            "B",
            "S_PW",
            "DB",
            "MY_DB_SERVICE_HOST",
            "EMPTY",
            "KEY",
            "PW",
        ]
    );
    assert_eq!(env(&v, "KUBERNETES_SERVICE_HOST"), Some("10.96.0.1"));
    assert_eq!(env(&v, "KUBERNETES_PORT"), Some("tcp://10.96.0.1:443"));
    assert_eq!(env(&v, "MY_DB_PORT_9187_UDP"), Some("udp://10.96.0.20:9187"));
    assert_eq!(env(&v, "MY_DB_PORT_9187_UDP_PROTO"), Some("udp"));
    assert_eq!(env(&v, "B"), Some("over-from-cm"));
    assert_eq!(env(&v, "DB"), Some("10.96.0.20:5432/$(UNDEFINED)/$(A)"));
    assert_eq!(
        env(&v, "MY_DB_SERVICE_HOST"),
        Some("mine"),
        "env wins over a service link"
    );
    assert_eq!(env(&v, "S_PW"), Some("secret"));
    assert_eq!(env(&v, "PW"), Some("secret"));
    assert_eq!(env(&v, "KEY"), Some("from-cm"));
    assert_eq!(env(&v, "EMPTY"), Some(""));
    assert_eq!(env(&v, "OPT"), None);

    // enableServiceLinks: false keeps only the kubernetes Service.
    let mut off = p.clone();
    off["spec"]["enableServiceLinks"] = json!(false);
    let v = f.view(&off).unwrap();
    assert!(env(&v, "KUBERNETES_SERVICE_HOST").is_some());
    assert_eq!(env(&v, "MY_DB_SERVICE_PORT"), None);

    for (var, msg) in [
        (
            json!({ "name": "X", "valueFrom": { "configMapKeyRef": { "name": "none", "key": "k" } } }),
            "configmap \"none\" not found",
        ),
        (
            json!({ "name": "X", "valueFrom": { "configMapKeyRef": { "name": "cm", "key": "k" } } }),
            "couldn't find key k in ConfigMap ns/cm",
        ),
        (
            json!({ "name": "X", "valueFrom": { "secretKeyRef": { "name": "s", "key": "k" } } }),
            "couldn't find key k in Secret ns/s",
        ),
        (
            json!({ "name": "X", "valueFrom": { "fieldRef": { "fieldPath": "spec.hostname" } } }),
            "unsupported fieldPath: spec.hostname",
        ),
        (
            json!({ "name": "X", "valueFrom": { "resourceFieldRef": { "resource": "limits.gpu" } } }),
            "unsupported container resource : limits.gpu",
        ),
    ] {
        let mut bad = pod(json!({}));
        container(&mut bad, json!({ "env": [var] }));
        assert_eq!(config_error(f.view(&bad)), msg);
    }
    let mut bad = pod(json!({}));
    container(&mut bad, json!({ "envFrom": [{ "secretRef": { "name": "none" } }] }));
    assert_eq!(config_error(f.view(&bad)), "secret \"none\" not found");
}

#[tokio::test]
async fn field_and_resource_refs() {
    let f = Fixture::new().await;
    let mut p = pod(json!({}));
    let field = |name: &str, path: &str| json!({ "name": name, "valueFrom": { "fieldRef": { "fieldPath": path } } });
    let res = |name: &str, r: &str, divisor: Option<&str>| {
        let mut v = json!({ "name": name, "valueFrom": { "resourceFieldRef": { "resource": r } } });
        if let Some(d) = divisor {
            v["valueFrom"]["resourceFieldRef"]["divisor"] = json!(d);
        }
        v
    };
    container(
        &mut p,
        json!({
            "resources": { "limits": { "memory": "1Gi" }, "requests": { "cpu": "250m", "ephemeral-storage": "1500M" } },
            "env": [
                field("NAME", "metadata.name"), field("NS", "metadata.namespace"), field("UID", "metadata.uid"),
                field("APP", "metadata.labels['app']"), field("NOTE", "metadata.annotations['note']"),
                field("MISSING", "metadata.labels['none']"),
                field("NODE", "spec.nodeName"), field("SA", "spec.serviceAccountName"),
                field("HOST_IP", "status.hostIP"), field("HOST_IPS", "status.hostIPs"),
                field("POD_IP", "status.podIP"), field("POD_IPS", "status.podIPs"),
                res("CPU_LIMIT", "limits.cpu", None), res("CPU_REQ", "requests.cpu", None),
                res("CPU_REQ_M", "requests.cpu", Some("1m")), res("MEM_LIMIT", "limits.memory", None),
                res("MEM_LIMIT_MI", "limits.memory", Some("1Mi")), res("MEM_REQ", "requests.memory", Some("1Mi")),
                res("EPH_REQ", "requests.ephemeral-storage", Some("1G")), res("EPH_LIMIT", "limits.ephemeral-storage", Some("1Gi")),
            ]
        }),
    );
    let v = f.view(&p).unwrap();
    for (name, want) in [
        ("NAME", "p"),
        ("NS", "ns"),
        ("UID", "uid-1"),
        ("APP", "x"),
        ("NOTE", "n"),
        ("MISSING", ""),
        ("NODE", "n1"),
        ("SA", "default"),
        ("HOST_IP", "127.0.1.1"),
        ("HOST_IPS", "127.0.1.1"),
        ("POD_IP", "127.1.0.5"),
        ("POD_IPS", "127.1.0.5"),
        // No cpu limit: the node's allocatable.
        ("CPU_LIMIT", "8"),
        // 250m in whole cores, rounded up.
        ("CPU_REQ", "1"),
        ("CPU_REQ_M", "250"),
        ("MEM_LIMIT", "1073741824"),
        ("MEM_LIMIT_MI", "1024"),
        // No memory request: the limit, as the API defaults it.
        ("MEM_REQ", "1024"),
        ("EPH_REQ", "2"),
        ("EPH_LIMIT", "100"),
    ] {
        assert_eq!(env(&v, name), Some(want), "{name}");
    }
}

#[tokio::test]
async fn hosts_resolv_and_hostname_files() {
    let f = Fixture::new().await;
    let long = "a".repeat(62) + "-b";
    let mut p = pod(json!({ "hostAliases": [{ "ip": "127.0.0.9", "hostnames": ["foo.local", "bar.local"] }] }));
    p["metadata"]["name"] = json!(long);
    let v = f.view(&p).unwrap();
    // 63 characters, then no trailing '-'.
    assert_eq!(v.hostname, "a".repeat(62));
    let hosts = read(&mount(&v, "/etc/hosts").source);
    assert_eq!(
        hosts,
        format!(
            "# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\nfe00::0\tip6-localnet\nfe00::0\tip6-mcastprefix\nfe00::1\tip6-allnodes\nfe00::2\tip6-allrouters\n127.1.0.5\t{}\n\n# Entries added by HostAliases.\n127.0.0.9\tfoo.local\tbar.local\n",
            "a".repeat(62)
        )
    );
    assert!(
        mount(&v, "/etc/hosts")
            .source
            .ends_with("var/lib/kubelet/pods/uid-1/etc-hosts")
    );
    let hostname = mount(&v, "/etc/hostname");
    assert_eq!(read(&hostname.source), format!("{}\n", "a".repeat(62)));
    assert!(hostname.source.ends_with("etc-hostname"));

    // Without kube-dns: the cluster's search path and no nameserver.
    let resolv = read(&mount(&v, "/etc/resolv.conf").source);
    assert!(
        resolv.starts_with("search ns.svc.cluster.local svc.cluster.local cluster.local"),
        "{resolv}"
    );
    assert!(!resolv.contains("nameserver"), "{resolv}");
    assert!(resolv.ends_with("options ndots:5\n"), "{resolv}");

    f.create(
        "services",
        "kube-system",
        // A bare store allocates from kubeadm's default range, 10.96.0.0/12.
        json!({ "metadata": { "name": "kube-dns" }, "spec": { "clusterIP": "10.96.0.10", "ports": [{ "name": "dns", "port": 53, "protocol": "UDP" }] } }),
    )
    .await;
    let mut sub = pod(json!({ "hostname": "web-0", "subdomain": "web", "setHostnameAsFQDN": true }));
    container(&mut sub, json!({ "terminationMessagePath": "/tmp/msg" }));
    let v = f.view(&sub).unwrap();
    assert_eq!(v.hostname, "web-0.web.ns.svc.cluster.local");
    let hosts = read(&mount(&v, "/etc/hosts").source);
    assert!(
        hosts.ends_with("127.1.0.5\tweb-0.web.ns.svc.cluster.local\tweb-0\n"),
        "{hosts}"
    );
    let resolv = read(&mount(&v, "/etc/resolv.conf").source);
    assert!(
        resolv.contains("\nnameserver 10.96.0.10\noptions ndots:5\n"),
        "{resolv}"
    );

    let none = pod(
        json!({ "dnsPolicy": "None", "dnsConfig": { "nameservers": ["127.0.0.53", "127.0.0.53"], "searches": ["a.example"], "options": [{ "name": "ndots", "value": "2" }, { "name": "edns0" }] } }),
    );
    let v = f.view(&none).unwrap();
    assert_eq!(
        read(&mount(&v, "/etc/resolv.conf").source),
        "search a.example\nnameserver 127.0.0.53\noptions ndots:2 edns0\n"
    );
    let merged =
        pod(json!({ "dnsConfig": { "nameservers": ["127.0.0.54"], "options": [{ "name": "ndots", "value": "1" }] } }));
    let v = f.view(&merged).unwrap();
    let resolv = read(&mount(&v, "/etc/resolv.conf").source);
    assert!(
        resolv.contains("nameserver 10.96.0.10\nnameserver 127.0.0.54\noptions ndots:1\n"),
        "{resolv}"
    );
    let default = pod(json!({ "dnsPolicy": "Default" }));
    let v = f.view(&default).unwrap();
    let host = dns::parse_resolv_conf(&std::fs::read_to_string("/etc/resolv.conf").unwrap_or_default());
    assert_eq!(read(&mount(&v, "/etc/resolv.conf").source), host.render());

    let bad = pod(json!({ "hostname": "Not_A_Label" }));
    assert!(config_error(f.view(&bad)).starts_with("pod Hostname \"Not_A_Label\" is not a valid DNS label"));
    let mut own = pod(json!({ "volumes": [{ "name": "e", "emptyDir": {} }] }));
    container(
        &mut own,
        json!({ "volumeMounts": [{ "name": "e", "mountPath": "/etc/hosts", "subPath": "hosts" }] }),
    );
    let v = f.view(&own).unwrap();
    assert_eq!(v.mounts.iter().filter(|m| m.target == "/etc/hosts").count(), 1);
    assert!(mount(&v, "/etc/hosts").source.to_string_lossy().contains("empty-dir"));
}

#[tokio::test]
async fn termination_log_user_and_working_dir() {
    let f = Fixture::new().await;
    let mut p = pod(json!({ "securityContext": { "runAsUser": 1000, "runAsGroup": 3000 } }));
    container(
        &mut p,
        json!({ "workingDir": "/app", "securityContext": { "runAsUser": 2000 } }),
    );
    let v = f.view(&p).unwrap();
    assert_eq!((v.run_as_user, v.run_as_group), (Some(2000), Some(3000)));
    assert_eq!(v.working_dir.as_deref(), Some("/app"));
    let log = v.termination_log.clone().unwrap();
    let m = mount(&v, "/dev/termination-log");
    assert!(!m.read_only);
    assert_eq!(m.source, log);
    assert_eq!(
        log.parent().unwrap(),
        f.node_root().join("var/lib/kubelet/pods/uid-1/containers/c")
    );
    assert_eq!(read(&log), "");
    assert_eq!(mode(&log), 0o666);
    // Each start has its own file.
    let again = f.view(&p).unwrap();
    assert_ne!(again.termination_log, Some(log));

    let mut custom = pod(json!({}));
    container(&mut custom, json!({ "terminationMessagePath": "/tmp/done" }));
    let v = f.view(&custom).unwrap();
    assert_eq!(mount(&v, "/tmp/done").source, v.termination_log.clone().unwrap());
    assert_eq!((v.run_as_user, v.working_dir.as_deref()), (None, None));

    remove(f.node_root(), "uid-1");
    assert!(!f.node_root().join("var/lib/kubelet/pods/uid-1").exists());
}

#[tokio::test]
async fn fs_group_owns_the_volumes() {
    use std::os::unix::fs::MetadataExt;
    let f = Fixture::new().await;
    f.create(
        "configmaps",
        "ns",
        json!({ "metadata": { "name": "cm" }, "data": { "a": "A" } }),
    )
    .await;
    let mut p = pod(json!({
        "securityContext": { "fsGroup": 2000 },
        "volumes": [{ "name": "cm", "configMap": { "name": "cm", "defaultMode": 0o400 } }, { "name": "e", "emptyDir": {} }]
    }));
    container(
        &mut p,
        json!({ "volumeMounts": [{ "name": "cm", "mountPath": "/cm" }, { "name": "e", "mountPath": "/e" }] }),
    );
    let v = f.view(&p).unwrap();
    let cm = &mount(&v, "/cm").source;
    let file = std::fs::metadata(cm.join("a")).unwrap();
    assert_eq!((file.gid(), file.mode() & 0o7777), (2000, 0o440));
    let e = std::fs::metadata(&mount(&v, "/e").source).unwrap();
    assert_eq!((e.gid(), e.mode() & 0o7777), (2000, 0o2777));
    let data = std::fs::read_link(cm.join("..data")).unwrap();
    f.view(&p).unwrap();
    assert_eq!(
        std::fs::read_link(cm.join("..data")).unwrap(),
        data,
        "an unchanged payload stays"
    );
}
