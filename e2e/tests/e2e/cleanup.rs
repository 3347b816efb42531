//! `spark-operator cleanup` (an uninstall, a Helm pre-delete hook): every pod the operator launched
//! loses the driver-protection finalizer, other finalizers stay, other pods are untouched.

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PostParams};
use spark_operator_e2e::{Cluster, ClusterOptions};

fn pod(name: &str, launched: bool, finalizers: &[&str]) -> Pod {
    let labels = if launched {
        serde_json::json!({"sparkoperator.k8s.io/launched-by-spark-operator": "true", "spark-role": "driver"})
    } else {
        serde_json::json!({"app": "other"})
    };
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "labels": labels, "finalizers": finalizers},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]}
    }))
    .expect("a pod")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cleanup_releases_every_driver_protection_finalizer() {
    let cluster = Cluster::start(ClusterOptions {
        nodes: 0,
        ..ClusterOptions::default()
    })
    .await;
    let pods: Api<Pod> = Api::namespaced(cluster.client.clone(), "default");
    let protection = "sparkoperator.k8s.io/driver-protection";
    for created in [
        pod("driver-a", true, &[protection]),
        pod("driver-b", true, &[protection, "example.com/keep"]),
        pod("unrelated", false, &["example.com/keep"]),
    ] {
        pods.create(&PostParams::default(), &created).await.expect("created");
    }
    let released = spark_operator_controller::app::driver_finalizer::cleanup(&cluster.client, &[])
        .await
        .expect("cleanup");
    assert_eq!(released, 2);
    let finalizers = |name: &'static str| {
        let pods = pods.clone();
        async move {
            pods.get(name)
                .await
                .expect("pod")
                .metadata
                .finalizers
                .unwrap_or_default()
        }
    };
    assert!(finalizers("driver-a").await.is_empty());
    assert_eq!(finalizers("driver-b").await, ["example.com/keep"]);
    assert_eq!(finalizers("unrelated").await, ["example.com/keep"]);
    // Idempotent.
    let again = spark_operator_controller::app::driver_finalizer::cleanup(&cluster.client, &["default".into()])
        .await
        .expect("cleanup");
    assert_eq!(again, 0);
}
