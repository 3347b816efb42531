//! The production `spark-operator` binary, unmodified, as pods of the simulated cluster: its image is
//! mapped to the built binary (`--local-image`), so each pod is a real process in its own view.
//!
//! Two replicas mount different ConfigMaps at the same path (`/etc/webhook`, the webhook's serving
//! certificate and key) at the same time; each serves the certificate of its own ConfigMap, which a
//! TLS client that trusts only that certificate tells apart. Both configure their client in-cluster
//! (kube-rs: the ServiceAccount token and CA mounted by the kubelet, `KUBERNETES_SERVICE_HOST` set to
//! `kubernetes.default.svc`), so every request goes through the cluster's DNS and the `kubernetes`
//! Service's proxy at `:443`; the sim's audit log shows each replica's requests under its
//! ServiceAccount, with its own identity (the pod's host name) in the User-Agent.

// Test code: a panic is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Api, PostParams};
use kube_sim::node::LocalImage;
use rustls::pki_types::{CertificateDer, ServerName};
use serde_json::json;
use spark_operator_dev::{Cluster, ClusterOptions};

const IMAGE: &str = "ghcr.io/kubeflow/spark-operator/controller:2.3.0";
const LIMIT: Duration = Duration::from_secs(120);

/// A self-signed serving certificate for `name` and its key, in PEM.
fn certificate(name: &str) -> (String, String) {
    let key = rcgen::KeyPair::generate().unwrap();
    let params = rcgen::CertificateParams::new(vec![name.to_owned()]).unwrap();
    let cert = params.self_signed(&key).unwrap();
    (cert.pem(), key.serialize_pem())
}

/// Whether a TLS client that trusts only `trusted` (a PEM certificate) for `name` completes a
/// handshake with `address`.
async fn trusts(address: &str, name: &str, trusted: &str) -> Result<(), String> {
    let mut roots = rustls::RootCertStore::empty();
    let der: Vec<CertificateDer<'static>> = rustls_pemfile_certs(trusted);
    for c in der {
        roots.add(c).map_err(|e| e.to_string())?;
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let tcp = tokio::net::TcpStream::connect(address)
        .await
        .map_err(|e| e.to_string())?;
    let server = ServerName::try_from(name.to_owned()).map_err(|e| e.to_string())?;
    connector
        .connect(server, tcp)
        .await
        .map(|_| ())
        .map_err(|e| e.to_string())
}

fn rustls_pemfile_certs(pem: &str) -> Vec<CertificateDer<'static>> {
    use rustls::pki_types::pem::PemObject as _;
    CertificateDer::pem_slice_iter(pem.as_bytes())
        .map(|c| c.unwrap())
        .collect()
}

fn replica(name: &str, config_map: &str) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": { "name": name, "labels": { "app": "spark-operator" } },
        "spec": {
            "terminationGracePeriodSeconds": 5,
            "containers": [{
                "name": "operator",
                "image": IMAGE,
                "args": [
                    "operator",
                    "--metrics-address=$(POD_IP):8080",
                    "--webhook-address=$(POD_IP):9443",
                    "--webhook-cert-file=/etc/webhook/tls.crt",
                    "--webhook-key-file=/etc/webhook/tls.key",
                    "--leader-election-namespace=default",
                ],
                "env": [
                    { "name": "POD_IP", "valueFrom": { "fieldRef": { "fieldPath": "status.podIP" } } },
                    // kube-rs builds `https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT`: with the
                    // Service's DNS name every request resolves through the cluster DNS.
                    { "name": "KUBERNETES_SERVICE_HOST", "value": "kubernetes.default.svc" },
                ],
                "ports": [{ "name": "metrics", "containerPort": 8080 }, { "name": "webhook", "containerPort": 9443 }],
                "readinessProbe": { "httpGet": { "path": "/readyz", "port": "metrics" }, "periodSeconds": 1 },
                "volumeMounts": [{ "name": "certs", "mountPath": "/etc/webhook", "readOnly": true }],
            }],
            "volumes": [{ "name": "certs", "configMap": { "name": config_map } }],
        }
    }))
    .unwrap()
}

/// What the operator's ServiceAccount (here `default/default`, which the replicas run as) needs, as
/// the Helm chart's controller and webhook ClusterRoles grant it: the cluster enforces RBAC.
async fn grant_operator_rbac(cluster: &Cluster) {
    let all = [
        "create",
        "delete",
        "deletecollection",
        "get",
        "list",
        "patch",
        "update",
        "watch",
    ];
    let role = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": { "name": "spark-operator" },
        "rules": [
            { "apiGroups": [""], "resources": ["pods", "configmaps", "services", "persistentvolumeclaims"], "verbs": all },
            { "apiGroups": [""], "resources": ["events"], "verbs": ["create", "patch", "update"] },
            { "apiGroups": [""], "resources": ["nodes", "resourcequotas"], "verbs": ["get", "list", "watch"] },
            { "apiGroups": [""], "resources": ["secrets"], "verbs": ["create", "get", "update"] },
            { "apiGroups": ["networking.k8s.io", "extensions"], "resources": ["ingresses"], "verbs": all },
            { "apiGroups": ["policy"], "resources": ["poddisruptionbudgets"], "verbs": all },
            { "apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create", "get", "list", "update", "watch"] },
            { "apiGroups": ["sparkoperator.k8s.io"], "resources": ["sparkapplications", "scheduledsparkapplications"], "verbs": all },
            { "apiGroups": ["sparkoperator.k8s.io"],
              "resources": ["sparkapplications/status", "sparkapplications/finalizers",
                            "scheduledsparkapplications/status", "scheduledsparkapplications/finalizers"],
              "verbs": ["get", "patch", "update"] },
            { "apiGroups": ["admissionregistration.k8s.io"],
              "resources": ["mutatingwebhookconfigurations", "validatingwebhookconfigurations"],
              "verbs": ["get", "list", "patch", "update", "watch"] },
        ],
    });
    let binding = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": { "name": "spark-operator" },
        "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "spark-operator" },
        "subjects": [{ "kind": "ServiceAccount", "name": "default", "namespace": "default" }],
    });
    for (resource, object) in [("clusterroles", role), ("clusterrolebindings", binding)] {
        cluster
            .sim
            .store()
            .create(
                &kube_sim::registry::Gvr::new("rbac.authorization.k8s.io", "v1", resource),
                "",
                object,
                &Default::default(),
            )
            .await
            .unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_read_their_own_config_map_at_the_same_path_and_call_the_api_server() {
    if let Err(reason) = kube_sim::node::sandbox::supported() {
        println!("SKIPPED: {reason}");
        return;
    }
    // The machine-wide lock of every test that runs pods as processes (two cores).
    let lock = std::fs::File::create(std::env::temp_dir().join("kube-sim-process-pods.lock")).unwrap();
    lock.lock().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let options = ClusterOptions {
        nodes: 1,
        local_images: vec![LocalImage::new(IMAGE, env!("CARGO_BIN_EXE_spark-operator"))],
        ..ClusterOptions::default()
    };
    let cluster = Cluster::start(dir.path(), &options).await.unwrap();
    let client = cluster.client.clone();
    cluster.sim.audit().enable();

    grant_operator_rbac(&cluster).await;

    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let mut certs = Vec::new();
    for replica in ["a", "b"] {
        let name = format!("replica-{replica}.webhook.test");
        let (cert, key) = certificate(&name);
        config_maps
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({
                    "metadata": { "name": format!("webhook-{replica}") },
                    "data": { "tls.crt": cert, "tls.key": key },
                }))
                .unwrap(),
            )
            .await
            .unwrap();
        certs.push((name, cert));
    }
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    for which in ["a", "b"] {
        pods.create(
            &PostParams::default(),
            &replica(&format!("operator-{which}"), &format!("webhook-{which}")),
        )
        .await
        .unwrap();
    }

    // Both ready (their /readyz, probed by the kubelet on the pod's address).
    let mut ips = Vec::new();
    for replica in ["a", "b"] {
        let name = format!("operator-{replica}");
        let deadline = tokio::time::Instant::now() + LIMIT;
        loop {
            let pod = pods.get(&name).await.unwrap();
            let status = pod.status.unwrap_or_default();
            let ready = status
                .conditions
                .as_deref()
                .unwrap_or_default()
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "True");
            if ready {
                ips.push(status.pod_ip.clone().unwrap());
                break;
            }
            if tokio::time::Instant::now() > deadline {
                let log = std::fs::read_dir(cluster.sim.nodes().node("sim-node-1").unwrap().log_dir())
                    .map(|d| {
                        d.flatten()
                            .map(|e| e.path().display().to_string())
                            .collect::<Vec<_>>()
                            .join(", ")
                    })
                    .unwrap_or_default();
                panic!("{name} not ready within {LIMIT:?}; status {status:?}; logs under {log}");
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    // Each serves the certificate of its own ConfigMap, and only that one.
    for (i, ip) in ips.iter().enumerate() {
        let address = format!("{ip}:9443");
        for (j, (name, cert)) in certs.iter().enumerate() {
            let outcome = trusts(&address, name, cert).await;
            if i == j {
                assert!(
                    outcome.is_ok(),
                    "replica {i} should serve its own certificate: {outcome:?}"
                );
            } else {
                assert!(outcome.is_err(), "replica {i} serves replica {j}'s certificate");
            }
        }
    }

    // Both called the API server in-cluster: as the pod's ServiceAccount, with the pod's identity.
    let events = cluster.sim.audit().events();
    for replica in ["a", "b"] {
        let identity = format!("(operator-{replica}-");
        let theirs: Vec<_> = events.iter().filter(|e| e.user_agent.contains(&identity)).collect();
        assert!(
            !theirs.is_empty(),
            "no request from operator-{replica} in the audit log"
        );
        assert!(
            theirs
                .iter()
                .all(|e| e.username == "system:serviceaccount:default:default"),
            "operator-{replica} authenticated as something other than its ServiceAccount: {:?}",
            theirs
                .iter()
                .map(|e| &e.username)
                .collect::<std::collections::BTreeSet<_>>()
        );
        assert!(
            theirs.iter().any(|e| e.resource == "leases"),
            "operator-{replica} never asked for the leader Lease"
        );
        let refused: Vec<_> = theirs.iter().filter(|e| e.code == 403).collect();
        assert!(refused.is_empty(), "operator-{replica} was refused: {refused:?}");
    }
}
