//! The fake driver on an official Spark image fails as spark-submit does when the application is
//! not in the image (`sim/images/spark-images.txt`): a missing main class exits 101 with
//! "Failed to load class", a missing Python file exits 2 with Python's message; the same
//! application on an image the listing does not know runs.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use kube_sim::Sim;
use kube_sim::store::WriteOptions;
use serde_json::{Value, json};

mod fake_driver;
use fake_driver::*;

const PI: &str = "org.apache.spark.examples.SparkPi";
const EXAMPLES: &str = "local:///opt/spark/examples/jars/spark-examples.jar";

/// Runs a driver pod with `image`, main class and primary resource to its end: its terminated
/// state, its log, and whether it asked for executors.
async fn run_driver(image: &str, class: &str, primary: &str) -> (Value, String, bool) {
    let (sim, _dir) = start().await;
    let store = sim.store().clone();
    create_service_account(&store).await;
    let jars = if primary.ends_with(".jar") { primary } else { "" };
    create_config_map(&store, spark_properties(&[("spark.jars", jars)])).await;
    let mut pod = driver_pod(json!({ "sim.spark-operator.dev/run-time": "100ms" }));
    let container = &mut pod["spec"]["containers"][0];
    container["image"] = json!(image);
    container["args"] = json!([
        "driver",
        "--properties-file",
        "/opt/spark/conf/spark.properties",
        "--class",
        class,
        primary,
        "10"
    ]);
    store
        .create(&gvr("pods"), "default", pod, &WriteOptions::default())
        .await
        .expect("driver pod");
    let done = until("the driver to end", || {
        store
            .get(&gvr("pods"), "default", "spark-pi-driver")
            .ok()
            .filter(|p| matches!(p["status"]["phase"].as_str(), Some("Succeeded" | "Failed")))
    })
    .await;
    let log = driver_log(&sim, &done);
    let executors = log.contains("ExecutorPodsAllocator: Going to request");
    sim.shutdown().await;
    let terminated = done["status"]["containerStatuses"][0]["state"]["terminated"].clone();
    (terminated, log, executors)
}

fn driver_log(sim: &Sim, pod: &Value) -> String {
    let node = sim
        .nodes()
        .node(pod["spec"]["nodeName"].as_str().expect("node"))
        .expect("node handle");
    let uid = pod["metadata"]["uid"].as_str().expect("uid");
    let path = node
        .log_dir()
        .join(format!("default_spark-pi-driver_{uid}/spark-kubernetes-driver/0.log"));
    std::fs::read_to_string(path).expect("driver log file")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_main_class_fails_with_spark_exit_code_and_message() {
    let (term, log, executors) =
        run_driver("apache/spark:4.0.4", "org.apache.spark.examples.NoSuchClass", EXAMPLES).await;
    assert_eq!(
        (term["exitCode"].as_i64(), term["reason"].as_str()),
        (Some(101), Some("Error")),
        "{log}"
    );
    assert!(
        log.contains(" stderr F Error: Failed to load class org.apache.spark.examples.NoSuchClass."),
        "{log}"
    );
    assert!(
        !log.contains("SparkContext"),
        "spark-submit stops before the SparkContext: {log}"
    );
    assert!(!executors, "no executors without a SparkContext");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubeflows_failing_application_fails_on_its_image() {
    // test/e2e/bad_examples/fail-application.yaml: mainClass non-existent, local:///non-existent.jar.
    let (term, log, _) = run_driver("spark:3.5.2", "non-existent", "local:///non-existent.jar").await;
    assert_eq!(term["exitCode"], 101, "{log}");
    assert!(
        log.contains("WARN DependencyUtils: Local jar /non-existent.jar does not exist, skipping."),
        "{log}"
    );
    assert!(log.contains("Error: Failed to load class non-existent."), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spark_pi_in_the_image_completes() {
    let (term, log, executors) = run_driver("docker.io/apache/spark:4.0.4", PI, EXAMPLES).await;
    assert_eq!(
        (term["exitCode"].as_i64(), term["reason"].as_str()),
        (Some(0), Some("Completed")),
        "{log}"
    );
    assert!(executors, "{log}");
    assert!(!log.contains("DependencyUtils"), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_python_file_fails_as_python_does() {
    let (term, log, _) = run_driver(
        "apache/spark:4.0.4",
        "org.apache.spark.deploy.PythonRunner",
        "local:///opt/spark/examples/src/main/python/no_such_example.py",
    )
    .await;
    assert_eq!(term["exitCode"], 2, "{log}");
    assert!(
        log.contains(" stderr F python3: can't open file '/opt/spark/examples/src/main/python/no_such_example.py': [Errno 2] No such file or directory"),
        "{log}"
    );
    let (term, log, _) = run_driver(
        "apache/spark:4.0.4",
        "org.apache.spark.deploy.PythonRunner",
        "local:///opt/spark/examples/src/main/python/pi.py",
    )
    .await;
    assert_eq!(term["exitCode"], 0, "pi.py is in the image: {log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_image_the_listing_does_not_know_is_not_checked() {
    // The same missing class as above: an unknown image (or tag) runs it as before.
    for image in ["registry.example.com/team/spark:4.0.4", "apache/spark:latest"] {
        let (term, log, _) = run_driver(image, "org.apache.spark.examples.NoSuchClass", EXAMPLES).await;
        assert_eq!(term["exitCode"], 0, "{image}: {log}");
        assert!(!log.contains("Failed to load class"), "{log}");
    }
}
