//! Benchmark (not a test): the admission webhook's own latency, reviews posted straight to it; then the
//! latency the API server adds for it, pods created through the API server with the webhook registered
//! (over TLS, as kube-apiserver calls it) against the same without any webhook.
//! `cargo bench -p spark-operator-e2e --bench admission` (`SPARK_BENCH_RATE`, reviews per second, default
//! 1000; `SPARK_BENCH_SECONDS`, default 10).
//!
//! The webhook runs in this process against the simulated cluster (its application cache and live reads
//! are real); the load is open-loop: a review is sent every 1/rate s whatever the answers do, over a pool
//! of keep-alive connections, half pod mutations (an executor of an existing application, the full
//! decoration and JSONPatch), half SparkApplication validations. Latency is measured at the client, from
//! send to the whole answer read.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;
use spark_operator_api::SparkApplication;
use spark_operator_e2e::{Cluster, ClusterOptions, app_yaml, free_port};
use spark_operator_runtime::args::Listen;
use spark_operator_runtime::shutdown::Shutdown;
use spark_operator_runtime::{Runtime, RuntimeSettings};
use spark_operator_webhook::WebhookArgs;
use spark_operator_webhook::server::{MUTATE_POD_PATH, VALIDATE_PATH};

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[index.min(sorted.len() - 1)]
}

fn report(what: &str, mut latencies: Vec<Duration>) {
    latencies.sort();
    println!(
        "{what}: {} reviews, p50 {:?}, p99 {:?}, max {:?}",
        latencies.len(),
        percentile(&latencies, 0.5),
        percentile(&latencies, 0.99),
        latencies.last().copied().unwrap_or_default()
    );
}

fn main() {
    let rate: u64 = std::env::var("SPARK_BENCH_RATE")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    let seconds: u64 = std::env::var("SPARK_BENCH_SECONDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("a runtime: {e}"));
    runtime.block_on(async move {
        let cluster = Cluster::start(ClusterOptions {
            nodes: 0,
            ..ClusterOptions::default()
        })
        .await;
        let app = cluster.create_app(&app_yaml("bench", "1s", 0, 1, "")).await;
        let apps: Api<SparkApplication> = Api::namespaced(cluster.client.clone(), "default");
        apps.patch_status("bench", &PatchParams::default(), &Patch::Merge(json!({"status": {"submissionID": "s-1"}})))
            .await
            .unwrap_or_else(|e| panic!("status: {e}"));

        let port = free_port();
        let config = spark_operator_runtime::client::config_from(Some(cluster.sim.kubeconfig_path()))
            .await
            .unwrap_or_else(|e| panic!("config: {e}"));
        let settings = RuntimeSettings {
            identity: "bench".into(),
            election: None,
            metrics: Listen::Off,
        };
        let operator = Arc::new(
            Runtime::start(config, settings, Shutdown::never())
                .await
                .unwrap_or_else(|e| panic!("runtime: {e}")),
        );
        let mut args = WebhookArgs::listening_on(([127, 0, 0, 1], port).into());
        // Plain HTTP: the webhook's own work is measured here, not TLS; the API server's figure below is.
        args.webhook_plain_http = true;
        let server = operator.clone();
        tokio::spawn(async move { spark_operator_webhook::run(args, &server).await });

        let pod = json!({
            "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": "u", "kind": {"group": "", "version": "v1", "kind": "Pod"}, "operation": "CREATE",
                "namespace": "default", "object": {
                    "apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": "bench-exec-1", "namespace": "default", "labels": {
                        "spark-role": "executor", "sparkoperator.k8s.io/app-name": "bench",
                        "sparkoperator.k8s.io/submission-id": "s-1",
                        "sparkoperator.k8s.io/launched-by-spark-operator": "true"}},
                    "spec": {"containers": [{"name": "spark-kubernetes-executor", "image": "docker.io/apache/spark:4.0.4"}]}}}
        })
        .to_string();
        let mut object = serde_json::to_value(&app).unwrap_or_default();
        object["metadata"]["name"] = json!("another");
        let validation = json!({
            "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": "v", "kind": {"group": "sparkoperator.k8s.io", "version": "v1beta2", "kind": "SparkApplication"},
                "operation": "CREATE", "namespace": "default", "object": object}
        })
        .to_string();

        let client: Client<_, Full<Bytes>> = Client::builder(TokioExecutor::new())
            .pool_max_idle_per_host(64)
            .build_http();
        let send = |path: &'static str, body: String| {
            let client = client.clone();
            async move {
                let request = hyper::Request::post(format!("http://127.0.0.1:{port}{path}"))
                    .header("content-type", "application/json")
                    .body(Full::new(Bytes::from(body)))
                    .ok()?;
                let started = Instant::now();
                let response = client.request(request).await.ok()?;
                let ok = response.status().is_success();
                let body = response.into_body().collect().await.ok()?.to_bytes();
                (ok && body.starts_with(b"{")).then(|| started.elapsed())
            }
        };
        // Ready once a mutation answers (the application cache has listed).
        let deadline = Instant::now() + Duration::from_secs(30);
        while send(MUTATE_POD_PATH, pod.clone()).await.is_none() {
            assert!(Instant::now() < deadline, "the webhook never answered");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }

        let total = rate * seconds;
        let mut ticks = tokio::time::interval(Duration::from_nanos(1_000_000_000 / rate.max(1)));
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
        let mut tasks = tokio::task::JoinSet::new();
        let started = Instant::now();
        for i in 0..total {
            ticks.tick().await;
            let (path, body) = if i % 2 == 0 { (MUTATE_POD_PATH, pod.clone()) } else { (VALIDATE_PATH, validation.clone()) };
            let send = send(path, body);
            tasks.spawn(async move { (path, send.await) });
        }
        let mut mutations = Vec::new();
        let mut validations = Vec::new();
        let mut failed = 0;
        while let Some(result) = tasks.join_next().await {
            match result {
                Ok((path, Some(latency))) if path == MUTATE_POD_PATH => mutations.push(latency),
                Ok((_, Some(latency))) => validations.push(latency),
                _ => failed += 1,
            }
        }
        let elapsed = started.elapsed();
        println!(
            "webhook, reviews posted directly: {total} in {elapsed:?} ({:.0}/s offered {rate}/s), {failed} failed",
            total as f64 / elapsed.as_secs_f64()
        );
        report("pod mutation", mutations);
        report("application validation", validations);

        // Through the API server: executor pods of the application created at `api_rate` per second,
        // first with no webhook registered, then with it registered (TLS, its own certificates).
        let api_rate: u64 = std::env::var("SPARK_BENCH_API_RATE").ok().and_then(|v| v.parse().ok()).unwrap_or(200);
        let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(cluster.client.clone(), "default");
        let create_pods = |label: &'static str| {
            let pods = pods.clone();
            async move {
                let mut ticks = tokio::time::interval(Duration::from_nanos(1_000_000_000 / api_rate.max(1)));
                let mut tasks = tokio::task::JoinSet::new();
                for i in 0..api_rate * 5 {
                    ticks.tick().await;
                    let pods = pods.clone();
                    tasks.spawn(async move {
                        let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(json!({
                            "metadata": {"name": format!("{label}-exec-{i}"), "labels": {
                                "spark-role": "executor", "sparkoperator.k8s.io/app-name": "bench",
                                "sparkoperator.k8s.io/submission-id": "s-1",
                                "sparkoperator.k8s.io/launched-by-spark-operator": "true"}},
                            "spec": {"containers": [{"name": "spark-kubernetes-executor", "image": "docker.io/apache/spark:4.0.4"}]}
                        }))
                        .ok()?;
                        let started = Instant::now();
                        pods.create(&kube::api::PostParams::default(), &pod).await.ok()?;
                        Some(started.elapsed())
                    });
                }
                let mut latencies = Vec::new();
                while let Some(result) = tasks.join_next().await {
                    if let Ok(Some(latency)) = result {
                        latencies.push(latency);
                    }
                }
                latencies
            }
        };
        let without = create_pods("plain").await;
        let tls_port = free_port();
        let mut tls = WebhookArgs::listening_on(([127, 0, 0, 1], tls_port).into());
        tls.webhook_ip_addresses = vec![std::net::IpAddr::from([127, 0, 0, 1])];
        cluster.register_webhook(tls_port, "Fail").await;
        let server = operator.clone();
        tokio::spawn(async move { spark_operator_webhook::run(tls, &server).await });
        // Registered: wait until the API server gets the webhook's answers (a dry-run pod of an application
        // that does not exist is refused).
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let probe: k8s_openapi::api::core::v1::Pod = serde_json::from_value(json!({
                "metadata": {"name": "probe", "labels": {"spark-role": "executor", "sparkoperator.k8s.io/app-name": "no-such-app",
                    "sparkoperator.k8s.io/submission-id": "s-1", "sparkoperator.k8s.io/launched-by-spark-operator": "true"}},
                "spec": {"containers": [{"name": "spark-kubernetes-executor", "image": "docker.io/apache/spark:4.0.4"}]}
            }))
            .unwrap_or_default();
            let dry = kube::api::PostParams { dry_run: true, ..Default::default() };
            if let Err(kube::Error::Api(status)) = pods.create(&dry, &probe).await
                && status.message.contains("does not exist")
            {
                break;
            }
            assert!(Instant::now() < deadline, "the API server never got the webhook's answers");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let with = create_pods("webhook").await;
        println!("pods created through the API server at {api_rate}/s for 5 s:");
        report("  without a webhook", without);
        report("  with the webhook (TLS)", with);
    });
}
