//! The whole agent (`spark_operator_agent::run`, as `spark-operator agent` runs it) on a simulated node,
//! reporting to an in-test receiver over TLS: a Spark driver that fails is reported with its exit code and
//! log tail, acknowledged, and gone from the spool; readiness and metrics are the runtime's.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic in a test is a failed assertion

mod common;

use std::time::Duration;

use common::{Receiver, TOKEN, pki, serve, until, within};
use kube_sim::node::NodesConfig;
use kube_sim::registry::Gvr;
use kube_sim::store::WriteOptions;
use kube_sim::{Sim, SimConfig};
use serde_json::json;
use spark_operator_agent::AgentArgs;
use spark_operator_agent::logs::LogArgs;
use spark_operator_api::labels::{LABEL_APP_NAME, LABEL_SPARK_ROLE, LABEL_SUBMISSION_ID};
use spark_operator_proto::agent::v1::Role;
use spark_operator_runtime::args::Listen;
use spark_operator_runtime::shutdown::Shutdown;
use spark_operator_runtime::{Runtime, RuntimeSettings};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_reports_a_driver_end_to_the_receiver_and_empties_its_spool() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = SimConfig::new(dir.path().join("data"));
    config.root_ca_configmap = true;
    config.nodes = NodesConfig::with_nodes(1);
    let sim = Sim::start(config).await.unwrap();
    let node = sim.nodes().node("sim-node-1").unwrap();

    let receiver = Receiver::default();
    let port = serve(receiver.clone(), pki(dir.path())).await;
    std::fs::write(dir.path().join("token"), TOKEN).unwrap();
    let spool_dir = dir.path().join("spool");
    let args = AgentArgs {
        node_name: "sim-node-1".into(),
        cri_socket: node.cri_socket(),
        host_root: node.root_dir().to_owned(),
        spool_dir: spool_dir.clone(),
        spool_max_bytes: 16 * 1024 * 1024,
        spool_max_age: Duration::from_secs(3600),
        report_address: format!("https://localhost:{port}").parse().unwrap(),
        ca_bundle: dir.path().join("ca.crt"),
        token_file: dir.path().join("token"),
        relist_period: Duration::from_secs(60),
        oom_settle_delay: Duration::from_secs(2),
        log_tail_lines: 10,
        log_tail_bytes: 4096,
        logs: LogArgs {
            log_store_dir: dir.path().join("logs"),
            log_address: "127.0.0.1:0".parse().unwrap(),
            ..LogArgs::default()
        },
    };
    let kube = spark_operator_runtime::client::config_from(Some(sim.kubeconfig_path()))
        .await
        .unwrap();
    let settings = RuntimeSettings {
        identity: "agent-sim-node-1".into(),
        election: None,
        metrics: Listen::Off,
    };
    let (stop, shutdown) = Shutdown::new();
    let runtime = Runtime::start(kube, settings, shutdown).await.unwrap();
    let readiness = runtime.readiness().clone();
    let registry = runtime.metrics().clone();
    let agent = tokio::spawn(async move {
        let result = spark_operator_agent::run(args, &runtime).await;
        runtime.stop().await;
        result
    });
    until("the agent to be ready (CRI connected, API server answering)", || {
        readiness.is_ready()
    })
    .await;

    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": "pi-driver",
            "labels": { LABEL_SPARK_ROLE: "driver", LABEL_APP_NAME: "pi", LABEL_SUBMISSION_ID: "s7" },
            "annotations": {
                "sim.spark-operator.dev/program": "script",
                "sim.spark-operator.dev/run-time": "100ms",
                "sim.spark-operator.dev/exit-code": "2",
                "sim.spark-operator.dev/exit-log": "Exception in thread \"main\" java.lang.RuntimeException: no input",
            }
        },
        "spec": { "restartPolicy": "Never", "containers": [{ "name": "spark-kubernetes-driver", "image": "apache/spark:4.0.1" }] }
    });
    sim.store()
        .create(&Gvr::new("", "v1", "pods"), "default", pod, &WriteOptions::default())
        .await
        .unwrap();

    until("the driver's report to reach the receiver", || {
        !receiver.seen.lock().unwrap().reports.is_empty()
    })
    .await;
    let report = receiver.seen.lock().unwrap().reports[0].clone();
    assert_eq!(
        (
            report.pod_name.as_str(),
            report.app_name.as_str(),
            report.submission_id.as_str()
        ),
        ("pi-driver", "pi", "s7")
    );
    assert_eq!(report.role, Role::Driver as i32);
    assert_eq!((report.exit_code, report.reason.as_str()), (2, "Error"));
    assert!(
        report.log_tail.contains("java.lang.RuntimeException: no input"),
        "{:?}",
        report.log_tail
    );
    assert_eq!(report.node_name, "sim-node-1");

    // Acknowledged: the spool empties and the metrics say so.
    until("the spool to be empty", || {
        registry
            .render()
            .contains("spark_operator_agent_report_acks{verdict=\"ok\"} 1\n")
    })
    .await;
    until("the acknowledged segment to be deleted", || {
        std::fs::read_dir(&spool_dir)
            .unwrap()
            .all(|e| !e.unwrap().file_name().to_string_lossy().starts_with("seg-"))
    })
    .await;
    // The spool's gauges are set after the segment is deleted and the acks are synced to disk.
    until("the spool's gauges to count nothing", || {
        let text = registry.render();
        text.contains("spark_operator_agent_spool_records 0\n") && text.contains("spark_operator_agent_spool_bytes 0\n")
    })
    .await;
    let text = registry.render();
    assert!(text.contains("spark_operator_agent_containers_ended 1\n"), "{text}");
    assert!(
        text.contains("spark_operator_agent_report_stream_connected 1\n"),
        "{text}"
    );
    assert_eq!(receiver.count(&report.container_id), 1);

    stop.fire();
    within("the agent to stop", agent).await.unwrap().unwrap();
}
