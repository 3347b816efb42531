//! A ScheduledSparkApplication with an `@every` schedule of seconds on the real control plane: its runs are
//! created (counted by the label the controller puts on them, never waiting for a minute boundary) and each
//! completes through the kubelet stand-in; deleting the schedule takes its runs with it (the real garbage
//! collector, through their ownerReferences).

use std::time::Duration;

use kube::api::{Api, ListParams};
use spark_operator_api::{ApplicationStateType as S, SparkApplication};
use spark_operator_e2e::{Poll, poll, state};

use crate::support::{Tier, kubectl, nodes};

pub const NAMESPACE: &str = "rcp-scheduled";
const LIMIT: Duration = Duration::from_secs(180);

fn schedule() -> String {
    format!(
        r#"apiVersion: sparkoperator.k8s.io/v1beta2
kind: ScheduledSparkApplication
metadata:
  name: every-5s
  namespace: {NAMESPACE}
spec:
  schedule: "@every 5s"
  concurrencyPolicy: Allow
  successfulRunHistoryLimit: 10
  template:
    type: Scala
    mode: cluster
    image: docker.io/apache/spark:4.0.4
    mainClass: org.apache.spark.examples.SparkPi
    mainApplicationFile: local:///opt/spark/examples/jars/spark-examples.jar
    sparkVersion: 4.0.4
    driver:
      cores: 1
      memory: 512m
      serviceAccount: spark-operator-spark
      annotations:
        sim.spark-operator.dev/run-time: "1s"
    executor:
      instances: 1
      cores: 1
      memory: 512m
"#
    )
}

pub async fn every_few_seconds_runs(tier: &'static Tier) {
    let cp = tier.control_plane;
    let admin = cp.admin().await;
    let _node = nodes(cp, &["rcp-node-scheduled"]).await;
    let operator = tier.install.start(cp, "scheduled-0", &[]);
    tier.install.route_webhooks_to(cp, &operator, NAMESPACE).await;
    let out = kubectl(cp, &["apply", "-f", "-"], &schedule());
    assert!(out.success, "{out:?}");

    let apps: Api<SparkApplication> = Api::namespaced(admin.clone(), NAMESPACE);
    let runs = ListParams::default().labels("sparkoperator.k8s.io/scheduled-app-name=every-5s");
    let completed = poll(LIMIT, || async {
        let list = apps.list(&runs).await.map(|l| l.items).unwrap_or_default();
        let done: Vec<String> = list
            .iter()
            .filter(|a| state(a) == S::Completed)
            .filter_map(|a| a.metadata.name.clone())
            .collect();
        if done.len() >= 2 {
            Poll::Done(done)
        } else {
            Poll::Pending(list.len())
        }
    })
    .await
    .unwrap_or_else(|n| panic!("two runs of the schedule did not complete ({n} runs made)"));
    assert!(
        completed.iter().all(|n| n.starts_with("every-5s-")),
        "runs are named after the schedule: {completed:?}"
    );

    let deleted = kubectl(
        cp,
        &[
            "delete",
            "scheduledsparkapplication",
            "every-5s",
            "-n",
            NAMESPACE,
            "--wait=true",
        ],
        "",
    );
    assert!(deleted.success, "{deleted:?}");
    poll(LIMIT, || async {
        let left = apps.list(&runs).await.map(|l| l.items.len()).unwrap_or(usize::MAX);
        if left == 0 { Poll::Done(()) } else { Poll::Pending(left) }
    })
    .await
    .unwrap_or_else(|left| panic!("{left} runs outlived their schedule"));
    drop(operator);
}
