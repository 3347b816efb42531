//! Pod Security admission through real clients: kube-rs (typed and raw requests, to read the
//! `Warning` headers) and kubectl (skipped with a printed reason when it is not on PATH).
#![allow(clippy::expect_used)]

use std::path::PathBuf;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PostParams};
use kube_sim::{Sim, SimConfig};
use serde_json::{Value, json};

async fn start(tune: impl FnOnce(&mut SimConfig)) -> (Sim, tempfile::TempDir, kube::Client) {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = SimConfig::new(dir.path().join("data"));
    tune(&mut config);
    let sim = Sim::start(config).await.expect("sim starts");
    let client = sim.client().await.expect("client");
    (sim, dir, client)
}

/// A raw request through kube-rs' client: status, body and the `Warning` headers.
struct Answer {
    status: u16,
    body: Value,
    warnings: Vec<String>,
}

async fn send(client: &kube::Client, method: &str, path: &str, content_type: &str, body: &Value) -> Answer {
    let request = http::Request::builder()
        .method(method)
        .uri(path)
        .header("content-type", content_type)
        .body(serde_json::to_vec(body).expect("body"))
        .expect("request");
    let response = client
        .send(request.map(kube::client::Body::from))
        .await
        .expect("response");
    let status = response.status().as_u16();
    let warnings = response
        .headers()
        .get_all("warning")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .map(str::to_string)
        .collect();
    let bytes = response.into_body().collect_bytes().await.expect("body bytes");
    let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    Answer { status, body, warnings }
}

async fn post(client: &kube::Client, path: &str, body: &Value) -> Answer {
    send(client, "POST", path, "application/json", body).await
}

async fn merge_patch(client: &kube::Client, path: &str, body: &Value) -> Answer {
    send(client, "PATCH", path, "application/merge-patch+json", body).await
}

/// The text of a `Warning: 299 - "..."` header.
fn warning_text(header: &str) -> String {
    header
        .strip_prefix("299 - \"")
        .and_then(|s| s.strip_suffix('"'))
        .unwrap_or(header)
        .replace("\\\"", "\"")
        .replace("\\\\", "\\")
}

fn texts(a: &Answer) -> Vec<String> {
    a.warnings.iter().map(|w| warning_text(w)).collect()
}

async fn namespace(client: &kube::Client, name: &str, labels: Value) {
    let a = post(
        client,
        "/api/v1/namespaces",
        &json!({ "metadata": { "name": name, "labels": labels } }),
    )
    .await;
    assert_eq!(a.status, 201, "namespace {name}: {}", a.body);
}

/// A pod with nothing set: fine for baseline, four violations of restricted.
fn bare_pod(name: &str) -> Value {
    json!({ "apiVersion": "v1", "kind": "Pod", "metadata": { "name": name },
            "spec": { "containers": [{ "name": "c", "image": "busybox:1.36" }] } })
}

/// A pod the restricted level admits.
fn restricted_pod(name: &str) -> Value {
    json!({ "apiVersion": "v1", "kind": "Pod", "metadata": { "name": name },
            "spec": {
                "securityContext": { "runAsNonRoot": true, "seccompProfile": { "type": "RuntimeDefault" } },
                "containers": [{ "name": "c", "image": "busybox:1.36", "securityContext": {
                    "allowPrivilegeEscalation": false, "capabilities": { "drop": ["ALL"] } } }] } })
}

/// A pod that breaks baseline three ways.
fn baseline_violating_pod(name: &str) -> Value {
    json!({ "apiVersion": "v1", "kind": "Pod", "metadata": { "name": name },
            "spec": {
                "hostNetwork": true,
                "volumes": [{ "name": "host", "hostPath": { "path": "/var/log" } }],
                "containers": [{ "name": "c", "image": "busybox:1.36",
                                 "securityContext": { "privileged": true } }] } })
}

const RESTRICTED_VIOLATIONS: &str = "allowPrivilegeEscalation != false (container \"c\" must set securityContext.allowPrivilegeEscalation=false), \
unrestricted capabilities (container \"c\" must set securityContext.capabilities.drop=[\"ALL\"]), \
runAsNonRoot != true (pod or container \"c\" must set securityContext.runAsNonRoot=true), \
seccompProfile (pod or container \"c\" must set securityContext.seccompProfile.type to \"RuntimeDefault\" or \"Localhost\")";

fn enforce(level: &str) -> Value {
    json!({ "pod-security.kubernetes.io/enforce": level })
}

#[tokio::test]
async fn enforce_restricted_refuses_with_the_apiservers_message_and_nothing_else_does() {
    let (sim, _dir, client) = start(|_| {}).await;
    namespace(&client, "strict", enforce("restricted")).await;
    namespace(&client, "open", json!({})).await;

    // Through kube-rs' typed API: a 403 Forbidden with the exact message.
    let pods: Api<Pod> = Api::namespaced(client.clone(), "strict");
    let pod: Pod = serde_json::from_value(bare_pod("p")).expect("pod");
    let status = match pods.create(&PostParams::default(), &pod).await {
        Err(kube::Error::Api(s)) => s,
        other => panic!("expected a refusal, got {other:?}"),
    };
    assert_eq!(status.code, 403);
    assert_eq!(status.reason, "Forbidden");
    assert_eq!(
        status.message,
        format!("pods \"p\" is forbidden: violates PodSecurity \"restricted:latest\": {RESTRICTED_VIOLATIONS}")
    );
    assert!(pods.get_opt("p").await.expect("get").is_none());

    // The same pod where nothing is enforced: admitted, without warnings.
    let a = post(&client, "/api/v1/namespaces/open/pods", &bare_pod("p")).await;
    assert_eq!(a.status, 201, "{}", a.body);
    assert!(a.warnings.is_empty(), "{:?}", a.warnings);

    // A compliant pod where restricted is enforced: admitted, without warnings.
    let a = post(&client, "/api/v1/namespaces/strict/pods", &restricted_pod("ok")).await;
    assert_eq!(a.status, 201, "{}", a.body);
    assert!(a.warnings.is_empty(), "{:?}", a.warnings);

    // A pinned older version runs the checks of its time: v1.18 had no seccomp requirement yet,
    // nor the capability dropping (v1.22).
    namespace(
        &client,
        "old",
        json!({ "pod-security.kubernetes.io/enforce": "restricted", "pod-security.kubernetes.io/enforce-version": "v1.18" }),
    )
    .await;
    let a = post(&client, "/api/v1/namespaces/old/pods", &bare_pod("p")).await;
    assert_eq!(a.status, 403);
    assert_eq!(
        a.body["message"],
        "pods \"p\" is forbidden: violates PodSecurity \"restricted:v1.18\": \
         allowPrivilegeEscalation != false (container \"c\" must set securityContext.allowPrivilegeEscalation=false), \
         runAsNonRoot != true (pod or container \"c\" must set securityContext.runAsNonRoot=true)"
    );
    sim.shutdown().await;
}

#[tokio::test]
async fn switched_off_the_plugin_admits_what_it_would_refuse() {
    let (sim, _dir, client) = start(|c| c.pod_security_admission = false).await;
    namespace(&client, "strict", enforce("restricted")).await;
    let a = post(&client, "/api/v1/namespaces/strict/pods", &bare_pod("p")).await;
    assert_eq!(a.status, 201, "{}", a.body);
    assert!(a.warnings.is_empty(), "{:?}", a.warnings);
    // Not even label values are checked.
    let a = post(
        &client,
        "/api/v1/namespaces",
        &json!({ "metadata": { "name": "odd", "labels": enforce("strict") } }),
    )
    .await;
    assert_eq!(a.status, 201, "{}", a.body);
    sim.shutdown().await;
}

#[tokio::test]
async fn baseline_refuses_host_access_and_privileged_admits_it() {
    let (sim, _dir, client) = start(|_| {}).await;
    namespace(&client, "base", enforce("baseline")).await;
    namespace(&client, "priv", enforce("privileged")).await;

    let a = post(&client, "/api/v1/namespaces/base/pods", &baseline_violating_pod("b")).await;
    assert_eq!(a.status, 403);
    assert_eq!(
        a.body["message"],
        "pods \"b\" is forbidden: violates PodSecurity \"baseline:latest\": host namespaces (hostNetwork=true), \
         hostPath volumes (volume \"host\"), privileged (container \"c\" must not set securityContext.privileged=true)"
    );
    assert_eq!(a.body["details"], json!({ "name": "b", "kind": "pods" }));

    // Each on its own is refused too.
    let mut only_host_network = bare_pod("hn");
    only_host_network["spec"]["hostNetwork"] = json!(true);
    let a = post(&client, "/api/v1/namespaces/base/pods", &only_host_network).await;
    assert_eq!(a.status, 403);
    assert_eq!(
        a.body["message"],
        "pods \"hn\" is forbidden: violates PodSecurity \"baseline:latest\": host namespaces (hostNetwork=true)"
    );

    // The bare pod is fine for baseline.
    let a = post(&client, "/api/v1/namespaces/base/pods", &bare_pod("p")).await;
    assert_eq!(a.status, 201, "{}", a.body);

    let a = post(&client, "/api/v1/namespaces/priv/pods", &baseline_violating_pod("b")).await;
    assert_eq!(a.status, 201, "{}", a.body);
    assert!(a.warnings.is_empty(), "{:?}", a.warnings);
    sim.shutdown().await;
}

#[tokio::test]
async fn warn_admits_with_a_warning_header_and_workloads_are_only_warned() {
    let (sim, _dir, client) = start(|_| {}).await;
    namespace(
        &client,
        "warned",
        json!({ "pod-security.kubernetes.io/warn": "restricted" }),
    )
    .await;
    let a = post(&client, "/api/v1/namespaces/warned/pods", &bare_pod("p")).await;
    assert_eq!(a.status, 201, "{}", a.body);
    assert_eq!(
        texts(&a),
        [format!(
            "would violate PodSecurity \"restricted:latest\": {RESTRICTED_VIOLATIONS}"
        )]
    );

    // A Deployment whose template violates the enforced level is created, with a warning (its
    // pods are what enforcement refuses).
    namespace(&client, "strict", enforce("restricted")).await;
    let template = bare_pod("ignored");
    let deployment = json!({
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": { "name": "d" },
        "spec": { "replicas": 1, "selector": { "matchLabels": { "app": "d" } },
                  "template": { "metadata": { "labels": { "app": "d" } }, "spec": template["spec"] } } });
    let a = post(&client, "/apis/apps/v1/namespaces/strict/deployments", &deployment).await;
    assert_eq!(a.status, 201, "{}", a.body);
    assert_eq!(
        texts(&a),
        [format!(
            "would violate PodSecurity \"restricted:latest\": {RESTRICTED_VIOLATIONS}"
        )]
    );
    // A CronJob's template is where a CronJob keeps it.
    let cronjob = json!({
        "apiVersion": "batch/v1", "kind": "CronJob", "metadata": { "name": "cj" },
        "spec": { "schedule": "* * * * *", "jobTemplate": { "spec": { "template": {
            "spec": { "restartPolicy": "Never", "hostPID": true, "containers": template["spec"]["containers"] } } } } } });
    let a = post(&client, "/apis/batch/v1/namespaces/strict/cronjobs", &cronjob).await;
    assert_eq!(a.status, 201, "{}", a.body);
    assert_eq!(texts(&a).len(), 1, "{:?}", a.warnings);
    assert!(
        texts(&a)[0].starts_with(
            "would violate PodSecurity \"restricted:latest\": host namespaces (hostPID=true), allowPrivilegeEscalation"
        ),
        "{:?}",
        a.warnings
    );
    // A compliant template gets no warning.
    let mut fine = deployment.clone();
    fine["metadata"]["name"] = json!("fine");
    fine["spec"]["template"]["spec"] = restricted_pod("x")["spec"].clone();
    let a = post(&client, "/apis/apps/v1/namespaces/strict/deployments", &fine).await;
    assert_eq!(a.status, 201, "{}", a.body);
    assert!(a.warnings.is_empty(), "{:?}", a.warnings);
    sim.shutdown().await;
}

#[tokio::test]
async fn raising_the_enforce_level_warns_about_existing_pods() {
    let (sim, _dir, client) = start(|_| {}).await;
    namespace(&client, "team", json!({})).await;
    for pod in [
        bare_pod("b-2"),
        bare_pod("b-1"),
        restricted_pod("ok"),
        baseline_violating_pod("host"),
    ] {
        let a = post(&client, "/api/v1/namespaces/team/pods", &pod).await;
        assert_eq!(a.status, 201, "{}", a.body);
    }
    let a = merge_patch(
        &client,
        "/api/v1/namespaces/team",
        &json!({ "metadata": { "labels": enforce("restricted") } }),
    )
    .await;
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(
        texts(&a),
        [
            "existing pods in namespace \"team\" violate the new PodSecurity enforce level \"restricted:latest\"",
            "b-1 (and 1 other pod): allowPrivilegeEscalation != false, unrestricted capabilities, runAsNonRoot != true, seccompProfile",
            "host: host namespaces, privileged, allowPrivilegeEscalation != false, unrestricted capabilities, restricted volume types, runAsNonRoot != true, seccompProfile",
        ]
    );
    // The label is set although pods violate it (the plugin only warns).
    assert_eq!(
        a.body["metadata"]["labels"]["pod-security.kubernetes.io/enforce"],
        "restricted"
    );
    // Relaxing, or relabeling to the same level, does not look at the pods again.
    let a = merge_patch(
        &client,
        "/api/v1/namespaces/team",
        &json!({ "metadata": { "labels": enforce("baseline") } }),
    )
    .await;
    assert_eq!(a.status, 200, "{}", a.body);
    assert!(a.warnings.is_empty(), "{:?}", a.warnings);
    // Raising it again at a pinned version names that version.
    let a = merge_patch(
        &client,
        "/api/v1/namespaces/team",
        &json!({ "metadata": { "labels": { "pod-security.kubernetes.io/enforce": "restricted",
                                              "pod-security.kubernetes.io/enforce-version": "v1.30" } } }),
    )
    .await;
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(
        texts(&a).first().map(String::as_str),
        Some("existing pods in namespace \"team\" violate the new PodSecurity enforce level \"restricted:v1.30\"")
    );
    sim.shutdown().await;
}

#[tokio::test]
async fn namespace_labels_with_bad_values_are_invalid() {
    let (sim, _dir, client) = start(|_| {}).await;
    let a = post(
        &client,
        "/api/v1/namespaces",
        &json!({ "metadata": { "name": "bad", "labels": {
            "pod-security.kubernetes.io/enforce": "strict",
            "pod-security.kubernetes.io/warn-version": "1.30" } } }),
    )
    .await;
    assert_eq!(a.status, 422, "{}", a.body);
    assert_eq!(a.body["reason"], "Invalid");
    assert_eq!(
        a.body["message"],
        "Namespace \"bad\" is invalid: [metadata.labels[pod-security.kubernetes.io/enforce]: Invalid value: \"strict\": \
         must be one of privileged, baseline, restricted, metadata.labels[pod-security.kubernetes.io/warn-version]: \
         Invalid value: \"1.30\": must be \"latest\" or \"v1.x\"]"
    );
    namespace(&client, "good", json!({})).await;
    let a = merge_patch(
        &client,
        "/api/v1/namespaces/good",
        &json!({ "metadata": { "labels": { "pod-security.kubernetes.io/audit": "loud" } } }),
    )
    .await;
    assert_eq!(a.status, 422, "{}", a.body);
    assert_eq!(
        a.body["message"],
        "Namespace \"good\" is invalid: metadata.labels[pod-security.kubernetes.io/audit]: Invalid value: \"loud\": \
         must be one of privileged, baseline, restricted"
    );
    sim.shutdown().await;
}

#[tokio::test]
async fn pod_updates_are_checked_only_when_images_or_containers_change() {
    let (sim, _dir, client) = start(|_| {}).await;
    namespace(&client, "later", json!({})).await;
    let a = post(&client, "/api/v1/namespaces/later/pods", &bare_pod("p")).await;
    assert_eq!(a.status, 201, "{}", a.body);
    let a = merge_patch(
        &client,
        "/api/v1/namespaces/later",
        &json!({ "metadata": { "labels": enforce("restricted") } }),
    )
    .await;
    assert_eq!(a.status, 200, "{}", a.body);

    // Metadata and status changes of a pod that now violates the enforced level go through.
    let a = merge_patch(
        &client,
        "/api/v1/namespaces/later/pods/p",
        &json!({ "metadata": { "labels": { "touched": "yes" } } }),
    )
    .await;
    assert_eq!(a.status, 200, "{}", a.body);
    assert!(a.warnings.is_empty(), "{:?}", a.warnings);
    let a = merge_patch(
        &client,
        "/api/v1/namespaces/later/pods/p/status",
        &json!({ "status": { "message": "still here" } }),
    )
    .await;
    assert_eq!(a.status, 200, "{}", a.body);

    // A new image is looked at, and refused.
    let a = send(
        &client,
        "PATCH",
        "/api/v1/namespaces/later/pods/p",
        "application/strategic-merge-patch+json",
        &json!({ "spec": { "containers": [{ "name": "c", "image": "busybox:1.37" }] } }),
    )
    .await;
    assert_eq!(a.status, 403, "{}", a.body);
    assert_eq!(
        a.body["message"],
        format!("pods \"p\" is forbidden: violates PodSecurity \"restricted:latest\": {RESTRICTED_VIOLATIONS}")
    );
    sim.shutdown().await;
}

fn kubectl_on_path() -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|d| d.join("kubectl"))
        .find(|p| p.is_file())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_prints_the_warnings_and_the_refusal() {
    let Some(kubectl) = kubectl_on_path() else {
        println!("SKIPPED kubectl and Pod Security: kubectl is not on PATH");
        return;
    };
    let (sim, dir, client) = start(|_| {}).await;
    namespace(
        &client,
        "warned",
        json!({ "pod-security.kubernetes.io/warn": "restricted" }),
    )
    .await;
    namespace(&client, "strict", enforce("restricted")).await;
    let file = dir.path().join("pod.json");
    std::fs::write(&file, serde_json::to_vec(&bare_pod("p")).expect("json")).expect("write");
    let kubectl_run = |args: &[&str]| {
        std::process::Command::new(&kubectl)
            .arg("--kubeconfig")
            .arg(sim.kubeconfig_path())
            .args(args)
            .env("HOME", dir.path())
            .env_remove("KUBECONFIG")
            .stdin(std::process::Stdio::null())
            .output()
            .expect("kubectl runs")
    };
    let path = file.to_string_lossy().to_string();

    let out = tokio::task::block_in_place(|| kubectl_run(&["-n", "warned", "create", "-f", &path]));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(
        stderr.trim_end(),
        format!("Warning: would violate PodSecurity \"restricted:latest\": {RESTRICTED_VIOLATIONS}")
    );

    let out = tokio::task::block_in_place(|| kubectl_run(&["-n", "strict", "create", "-f", &path]));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert_eq!(
        stderr.trim_end(),
        format!(
            "Error from server (Forbidden): error when creating \"{path}\": pods \"p\" is forbidden: \
             violates PodSecurity \"restricted:latest\": {RESTRICTED_VIOLATIONS}"
        )
    );

    let out = tokio::task::block_in_place(|| {
        kubectl_run(&[
            "label",
            "namespace",
            "warned",
            "pod-security.kubernetes.io/enforce=restricted",
        ])
    });
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(
        stderr.trim_end(),
        "Warning: existing pods in namespace \"warned\" violate the new PodSecurity enforce level \"restricted:latest\"\n\
         Warning: p: allowPrivilegeEscalation != false, unrestricted capabilities, runAsNonRoot != true, seccompProfile"
    );
    sim.shutdown().await;
}
