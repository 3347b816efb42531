//! The production `spark-operator` binary, unmodified, as pods of the simulated cluster: its image is
//! mapped to the built binary (`--local-image`), so each pod is a real process in its own view.
//!
//! A Deployment of it becomes ready pods, `kubectl rollout status` and `kubectl logs` work, and a
//! template change rolls new pods out in place of the old.
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

/// Every log file of the pod's containers, for a failure message.
fn container_logs(cluster: &Cluster, pod: &Pod) -> String {
    let Some(node) = pod.spec.as_ref().and_then(|s| s.node_name.clone()) else {
        return "(not scheduled)".to_owned();
    };
    let dir = cluster.sim.nodes().node(&node).unwrap().log_dir().join(format!(
        "default_{}_{}",
        pod.metadata.name.clone().unwrap_or_default(),
        pod.metadata.uid.clone().unwrap_or_default()
    ));
    let mut out = String::new();
    for entry in walk(&dir) {
        out.push_str(&format!(
            "== {}\n{}\n",
            entry.display(),
            std::fs::read_to_string(&entry).unwrap_or_default()
        ));
    }
    out
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            files.extend(walk(&path));
        } else {
            files.push(path);
        }
    }
    files.sort();
    files
}

fn replica_pod(name: &str, config_map: &str) -> Pod {
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
                    // Pods share the host's network in the sim: every server binds its pod's address.
                    "--reports-address=$(POD_IP):9444",
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
            &replica_pod(&format!("operator-{which}"), &format!("webhook-{which}")),
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
            let status = pod.status.clone().unwrap_or_default();
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
                panic!(
                    "{name} not ready within {LIMIT:?}; status {status:?}; its log:\n{}",
                    container_logs(&cluster, &pod)
                );
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

/// `kubectl` on PATH, if any.
fn kubectl() -> Option<std::path::PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|d| d.join("kubectl"))
        .find(|p| p.is_file())
}

/// Runs kubectl against the cluster; (success, stdout + stderr).
fn run_kubectl(kubectl: &std::path::Path, cluster: &Cluster, args: &[&str]) -> (bool, String) {
    let out = std::process::Command::new(kubectl)
        .args(args)
        .env("KUBECONFIG", cluster.sim.kubeconfig_path())
        .output()
        .unwrap();
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

fn operator_deployment(revision: &str) -> serde_json::Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": { "name": "spark-operator" },
        "spec": {
            "replicas": 2,
            "selector": { "matchLabels": { "app": "spark-operator" } },
            "strategy": { "type": "RollingUpdate", "rollingUpdate": { "maxSurge": 1, "maxUnavailable": 0 } },
            "template": {
                "metadata": { "labels": { "app": "spark-operator" }, "annotations": { "revision": revision } },
                "spec": {
                    "terminationGracePeriodSeconds": 5,
                    "containers": [{
                        "name": "operator",
                        "image": IMAGE,
                        "args": [
                            "operator",
                            "--metrics-address=$(POD_IP):8080",
                            "--webhook-address=$(POD_IP):9443",
                            // No agents here, and a report receiver needs the operator's CA (a Secret
                            // this Kubeflow-like role cannot watch).
                            "--reports-address=off",
                            "--webhook-plain-http=true",
                            "--leader-election-namespace=default",
                        ],
                        "env": [{ "name": "POD_IP", "valueFrom": { "fieldRef": { "fieldPath": "status.podIP" } } }],
                        "ports": [{ "name": "metrics", "containerPort": 8080 }],
                        "readinessProbe": { "httpGet": { "path": "/readyz", "port": "metrics" }, "periodSeconds": 1 },
                    }],
                }
            }
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deployment_of_the_operator_becomes_ready_pods_and_rolls_over() {
    if let Err(reason) = kube_sim::node::sandbox::supported() {
        println!("SKIPPED: {reason}");
        return;
    }
    let Some(kubectl) = kubectl() else {
        println!("SKIPPED: kubectl is not on PATH");
        return;
    };
    let lock = std::fs::File::create(std::env::temp_dir().join("kube-sim-process-pods.lock")).unwrap();
    lock.lock().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let options = ClusterOptions {
        nodes: 2,
        local_images: vec![LocalImage::new(IMAGE, env!("CARGO_BIN_EXE_spark-operator"))],
        ..ClusterOptions::default()
    };
    let cluster = Cluster::start(dir.path(), &options).await.unwrap();
    grant_operator_rbac(&cluster).await;
    let deployments: Api<k8s_openapi::api::apps::v1::Deployment> = Api::namespaced(cluster.client.clone(), "default");
    deployments
        .create(
            &PostParams::default(),
            &serde_json::from_value(operator_deployment("1")).unwrap(),
        )
        .await
        .unwrap();
    let (ok, out) = run_kubectl(
        &kubectl,
        &cluster,
        &["rollout", "status", "deployment/spark-operator", "--timeout=120s"],
    );
    assert!(ok, "kubectl rollout status: {out}");
    let pods: Api<Pod> = Api::namespaced(cluster.client.clone(), "default");
    let first: std::collections::BTreeSet<String> = ready_pods(&pods).await;
    assert_eq!(first.len(), 2, "two ready replicas: {first:?}");
    let (ok, out) = run_kubectl(&kubectl, &cluster, &["logs", "deployment/spark-operator"]);
    assert!(
        ok && out.contains("serving admission reviews"),
        "kubectl logs deployment/spark-operator: {out}"
    );

    // A rolling update: a template change replaces both pods.
    deployments
        .replace("spark-operator", &PostParams::default(), &{
            let mut d: k8s_openapi::api::apps::v1::Deployment =
                serde_json::from_value(operator_deployment("2")).unwrap();
            d.metadata.resource_version = deployments
                .get("spark-operator")
                .await
                .unwrap()
                .metadata
                .resource_version;
            d
        })
        .await
        .unwrap();
    let (ok, out) = run_kubectl(
        &kubectl,
        &cluster,
        &["rollout", "status", "deployment/spark-operator", "--timeout=120s"],
    );
    assert!(ok, "kubectl rollout status after the update: {out}");
    let deadline = tokio::time::Instant::now() + LIMIT;
    loop {
        let second = ready_pods(&pods).await;
        let all = pods.list(&Default::default()).await.unwrap().items;
        let revisions: Vec<_> = all
            .iter()
            .filter_map(|p| p.metadata.annotations.as_ref()?.get("revision").cloned())
            .collect();
        if second.len() == 2 && second.is_disjoint(&first) && revisions.iter().all(|r| r == "2") {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the update did not replace the pods: ready {second:?}, before {first:?}, revisions {revisions:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn ready_pods(pods: &Api<Pod>) -> std::collections::BTreeSet<String> {
    pods.list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter(|p| {
            p.status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
        })
        .filter_map(|p| p.metadata.name)
        .collect()
}
