//! An application's life: spark-pi to COMPLETED with its executors; a failing driver retried per
//! policy to FAILED; a driver that cannot pull its image failed after the start timeout; Prometheus
//! monitoring with the ConfigMap its pods mount.

use std::process::Command;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Event, Pod, ServiceAccount};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::{Api, ListParams, PostParams};
use serde::de::DeserializeOwned;
use spark_operator_api::ApplicationStateType as S;
use spark_operator_e2e::{Cluster, ClusterOptions, app_yaml, poll, state};

const LIMIT: Duration = Duration::from_secs(90);

async fn create<K>(client: &kube::Client, doc: serde_json::Value)
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + DeserializeOwned
        + serde::Serialize
        + std::fmt::Debug,
{
    let object: K = serde_json::from_value(doc).expect("a valid object");
    let api: Api<K> = Api::namespaced(client.clone(), "default");
    match api.create(&PostParams::default(), &object).await {
        // As `kubectl apply` leaves what the cluster already has: `default` is a Spark job namespace,
        // with the chart's `spark-operator-spark` ServiceAccount.
        Ok(_) => {}
        Err(kube::Error::Api(status)) if status.code == 409 => {}
        Err(e) => panic!("creating {object:?}: {e}"),
    }
}

/// `kubectl apply -f examples/spark-pi.yaml`, by kind.
async fn apply_example(cluster: &Cluster) {
    let text = include_str!("../../../examples/spark-pi.yaml");
    for document in serde_yaml::Deserializer::from_str(text) {
        let doc: serde_json::Value = serde::Deserialize::deserialize(document).expect("YAML");
        match doc["kind"].as_str() {
            Some("ServiceAccount") => create::<ServiceAccount>(&cluster.client, doc).await,
            Some("Role") => create::<Role>(&cluster.client, doc).await,
            Some("RoleBinding") => create::<RoleBinding>(&cluster.client, doc).await,
            Some("SparkApplication") => {
                cluster.create_app(&serde_json::to_string(&doc).expect("JSON")).await;
            }
            other => panic!("unexpected kind {other:?} in the example"),
        }
    }
}

fn kubectl(cluster: &Cluster, args: &[&str]) -> Option<String> {
    let output = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(cluster.sim.kubeconfig_path())
        .args(args)
        .output()
        .ok()?;
    assert!(
        output.status.success(),
        "kubectl {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    Some(String::from_utf8_lossy(&output.stdout).into_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spark_pi_completes_with_its_executors_recorded() {
    let cluster = Cluster::start(ClusterOptions::default()).await;
    let _controller = cluster.controller(cluster.args(&[]));
    apply_example(&cluster).await;
    // Spark stops its executors as the driver exits, so their last events can follow the driver's end;
    // the counts settle right after (an executor whose end was lost would stay running and fail here).
    let app = cluster
        .wait_app("default", "spark-pi", LIMIT, |a| {
            let settled = a
                .status
                .as_ref()
                .and_then(|s| s.executor_counts.as_ref())
                .is_some_and(|c| c.running == 0 && c.pending == 0);
            state(a).is_terminal() && settled
        })
        .await;
    let status = app.status.clone().unwrap_or_default();
    assert_eq!(state(&app), S::Completed, "{status:#?}");
    assert_eq!(status.execution_attempts, 1);
    let driver = status.driver_termination.clone().expect("the driver's end is recorded");
    assert_eq!(driver.exit_code, Some(0));
    assert_eq!(driver.pod_name, "spark-pi-driver");
    let counts = status.executor_counts.clone().expect("executor counts");
    assert_eq!(counts.total(), 2, "{counts:?}");
    // The kubelet writes the terminal phase of an executor its driver deleted before removing it,
    // so its end is known (not UNKNOWN).
    assert_eq!(counts.completed, 2, "{counts:?}");
    assert_eq!(status.recent_executors.len(), 2);
    assert_eq!(status.executor_state.len(), 2);
    assert!(
        status
            .conditions
            .iter()
            .any(|c| c.type_ == "Complete" && c.status == "True")
    );

    // Every transition is an Event, Completed included.
    let events: Api<Event> = Api::namespaced(cluster.client.clone(), "default");
    let reasons: Vec<String> = poll(Duration::from_secs(10), || async {
        let list = events.list(&ListParams::default()).await.expect("events");
        let reasons: Vec<String> = list
            .items
            .iter()
            .filter(|e| e.involved_object.name.as_deref() == Some("spark-pi"))
            .filter_map(|e| e.reason.clone())
            .collect();
        if reasons.iter().any(|r| r == "SparkApplicationCompleted") {
            spark_operator_e2e::Poll::Done(reasons)
        } else {
            spark_operator_e2e::Poll::Pending(reasons)
        }
    })
    .await
    .unwrap_or_else(|reasons| panic!("no SparkApplicationCompleted event: {reasons:?}"));
    for reason in [
        "SparkApplicationSubmitted",
        "SparkDriverRunning",
        "SparkDriverCompleted",
    ] {
        assert!(reasons.iter().any(|r| r == reason), "{reason} missing from {reasons:?}");
    }

    // What a user sees (when kubectl is installed).
    if let Some(table) = kubectl(&cluster, &["get", "sparkapp", "spark-pi"]) {
        assert!(table.contains("COMPLETED"), "{table}");
        let describe = kubectl(&cluster, &["describe", "sparkapp", "spark-pi"]).unwrap_or_default();
        for expected in [
            "Driver Termination",
            "Exit Code:",
            "Executor Counts",
            "SparkApplicationCompleted",
        ] {
            assert!(describe.contains(expected), "{expected} missing from:\n{describe}");
        }
    } else {
        eprintln!("kubectl is not installed: skipping the kubectl part");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_driver_is_retried_per_policy_then_failed() {
    let cluster = Cluster::start(ClusterOptions::default()).await;
    let _controller = cluster.controller(cluster.args(&[]));
    let policy = "  restartPolicy:\n    type: OnFailure\n    onFailureRetries: 3\n    onFailureRetryInterval: 1\n";
    cluster.create_app(&app_yaml("exits-1", "200ms", 1, 1, policy)).await;
    let app = cluster
        .wait_app("default", "exits-1", LIMIT, |a| state(a).is_terminal())
        .await;
    let status = app.status.clone().unwrap_or_default();
    assert_eq!(state(&app), S::Failed, "{status:#?}");
    assert_eq!(status.execution_attempts, 4, "3 retries after the first run");
    let driver = status.driver_termination.expect("the last driver's end is recorded");
    assert_eq!(driver.exit_code, Some(1));
    assert!(
        status.application_state.error_message.contains("code 1"),
        "{}",
        status.application_state.error_message
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_driver_that_cannot_pull_its_image_fails_after_the_start_timeout() {
    let cluster = Cluster::start(ClusterOptions::default()).await;
    let _controller = cluster.controller(cluster.args(&["--driver-start-timeout=2"]));
    let yaml = app_yaml(
        "no-image",
        "1s",
        0,
        1,
        "  restartPolicy:\n    type: OnFailure\n    onFailureRetries: 1\n    onFailureRetryInterval: 1\n",
    )
    .replace(
        "      sim.spark-operator.dev/exit-code: \"0\"",
        "      sim.spark-operator.dev/exit-code: \"0\"\n      sim.spark-operator.dev/image-pull: fail",
    );
    cluster.create_app(&yaml).await;
    let app = cluster
        .wait_app("default", "no-image", LIMIT, |a| state(a).is_terminal())
        .await;
    let status = app.status.clone().unwrap_or_default();
    assert_eq!(state(&app), S::Failed, "{status:#?}");
    assert_eq!(status.execution_attempts, 2, "the attempt failed, then its one retry");
    let driver = status.driver_termination.expect("the reason is recorded");
    let reason = driver.reason.unwrap_or_default();
    assert!(
        reason == "ImagePullBackOff" || reason == "ErrImagePull",
        "reason {reason:?}"
    );
    assert!(
        status
            .application_state
            .error_message
            .contains("did not start within 2s")
    );
    // The stuck pod does not hold its quota forever.
    let pods: Api<Pod> = Api::namespaced(cluster.client.clone(), "default");
    poll(Duration::from_secs(20), || async {
        match pods.get_opt("no-image-driver").await {
            Ok(None) => spark_operator_e2e::Poll::Done(()),
            _ => spark_operator_e2e::Poll::Pending(()),
        }
    })
    .await
    .unwrap_or_else(|()| panic!("the stuck driver pod was not deleted"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_monitoring_gets_its_config_map_and_runs() {
    let cluster = Cluster::start(ClusterOptions::default()).await;
    let _controller = cluster.controller(cluster.args(&[]));
    // As in Kubeflow's spark-pi-prometheus.yaml: the exporter's configuration is not in the image,
    // so the pods mount `<app>-prom-conf`, which nobody but the operator creates.
    let monitoring = "  monitoring:\n    exposeDriverMetrics: true\n    exposeExecutorMetrics: true\n    prometheus:\n      \
                      jmxExporterJar: /prometheus/jmx_prometheus_javaagent-0.11.0.jar\n      port: 8090\n";
    cluster.create_app(&app_yaml("monitored", "1s", 0, 1, monitoring)).await;
    let app = cluster
        .wait_app("default", "monitored", LIMIT, |a| state(a).is_terminal())
        .await;
    assert_eq!(state(&app), S::Completed, "{:#?}", app.status);
    let config_maps: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::namespaced(cluster.client.clone(), "default");
    let cm = config_maps
        .get("monitored-prom-conf")
        .await
        .expect("the exporter's ConfigMap");
    let data = cm.data.unwrap_or_default();
    assert!(
        data.contains_key("metrics.properties") && data.contains_key("prometheus.yaml"),
        "{data:?}"
    );
    let owner = &cm.metadata.owner_references.unwrap_or_default()[0];
    assert_eq!(
        owner.uid,
        app.metadata.uid.unwrap_or_default(),
        "owned by the application"
    );
}
