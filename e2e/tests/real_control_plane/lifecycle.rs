//! Submission and lifecycle on the real control plane, the operator bound by the chart's RBAC with
//! OwnerReferencesPermissionEnforcement on, pods run by the kubelet stand-in: the objects of a submission
//! (the kinds and counts `submit::objects` gives, the function the oracle test checks against spark-submit),
//! RUNNING → COMPLETED with the driver's finalizer released, FAILED with the exit code, retries per
//! `onFailureRetries`, and a deleted application's dependents removed by the real garbage collector.

use std::collections::BTreeMap;
use std::time::Duration;

use clap::Parser;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Service};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::api::{Api, ListParams};
use spark_operator_api::labels::FINALIZER_DRIVER_PROTECTION;
use spark_operator_api::{ApplicationStateType as S, SparkApplication};
use spark_operator_controller::ControllerArgs;
use spark_operator_controller::app::submit;
use spark_operator_controller::submission::{SubmissionIds, SubmissionInput};
use spark_operator_e2e::{Poll, poll, state, wait_app};

use crate::support::{Tier, app_in, kubectl, nodes};

pub const NAMESPACE: &str = "rcp-lifecycle";
const LIMIT: Duration = Duration::from_secs(180);

/// The operator's flags as the chart renders them, read by the flag definitions they are for.
#[derive(Parser)]
#[command(ignore_errors = true)]
struct OperatorFlags {
    #[command(flatten)]
    controller: ControllerArgs,
}

/// Kind → how many objects one submission of `app` makes, by the builder the controller creates from.
fn expected_kinds(tier: &Tier, app: &SparkApplication) -> BTreeMap<&'static str, usize> {
    let args = tier.install.controller_args();
    let flags = OperatorFlags::parse_from(std::iter::once("operator".to_owned()).chain(args));
    let options = flags.controller.submission_options();
    let ids = SubmissionIds::from_random([1; 16], [2; 16], [[3; 3], [4; 3], [5; 3]], 0);
    let submission = submit::objects(&SubmissionInput {
        app,
        submission_id: "00000000-0000-0000-0000-000000000000",
        ids: &ids,
        submit_time: jiff::Timestamp::UNIX_EPOCH,
        spark_master_url: "k8s://https://198.18.128.1:443",
        spark_user: "spark",
        options: &options,
    })
    .expect("the application builds");
    let (services, ingresses) = submission.driver_access.services_and_ingresses();
    let mut kinds = BTreeMap::new();
    kinds.insert("Pod", 1);
    kinds.insert(
        "ConfigMap",
        1 + usize::from(submission.executor_pod_template.is_some())
            + usize::from(submission.prometheus_config_map.is_some()),
    );
    kinds.insert("Service", 1 + services.len());
    kinds.insert("NetworkPolicy", usize::from(submission.network_policy.is_some()));
    assert!(ingresses.is_empty(), "no Ingress expected of this application");
    kinds
}

/// Kind → the objects in the namespace owned by any of `uids` (the application, and the driver pod, which owns
/// what Spark hangs on it: the properties ConfigMap, the driver Service, the NetworkPolicy).
async fn owned_by(client: &kube::Client, uids: &[&str]) -> BTreeMap<&'static str, Vec<String>> {
    fn owned<K: kube::Resource>(items: Vec<K>, uids: &[&str]) -> Vec<String> {
        items
            .into_iter()
            .filter(|o| {
                o.meta()
                    .owner_references
                    .iter()
                    .flatten()
                    .any(|r| uids.contains(&r.uid.as_str()))
            })
            .map(|o| o.meta().name.clone().unwrap_or_default())
            .collect()
    }
    let all = ListParams::default();
    let mut kinds = BTreeMap::new();
    kinds.insert(
        "Pod",
        owned(
            Api::<Pod>::namespaced(client.clone(), NAMESPACE)
                .list(&all)
                .await
                .expect("pods")
                .items,
            uids,
        ),
    );
    kinds.insert(
        "ConfigMap",
        owned(
            Api::<ConfigMap>::namespaced(client.clone(), NAMESPACE)
                .list(&all)
                .await
                .expect("configmaps")
                .items,
            uids,
        ),
    );
    kinds.insert(
        "Service",
        owned(
            Api::<Service>::namespaced(client.clone(), NAMESPACE)
                .list(&all)
                .await
                .expect("services")
                .items,
            uids,
        ),
    );
    kinds.insert(
        "NetworkPolicy",
        owned(
            Api::<NetworkPolicy>::namespaced(client.clone(), NAMESPACE)
                .list(&all)
                .await
                .expect("networkpolicies")
                .items,
            uids,
        ),
    );
    kinds
}

pub async fn submission_lifecycle_retries_and_gc(tier: &'static Tier) {
    let cp = tier.control_plane;
    let admin = cp.admin().await;
    let _nodes = nodes(cp, &["rcp-node-1", "rcp-node-2"]).await;
    let operator = tier.install.start(cp, "lifecycle-0", &[]);
    tier.install.route_webhooks_to(cp, &operator, NAMESPACE).await;
    let apps: Api<SparkApplication> = Api::namespaced(admin.clone(), NAMESPACE);

    let retry = "  restartPolicy:\n    type: OnFailure\n    onFailureRetries: 2\n    onFailureRetryInterval: 1\n";
    for (name, run_time, exit_code, executors, extra) in [
        ("completes", "4s", 0, 2, ""),
        ("fails", "1s", 3, 1, ""),
        ("retries", "500ms", 1, 1, retry),
    ] {
        let out = kubectl(
            cp,
            &["apply", "-f", "-"],
            &app_in(NAMESPACE, name, run_time, exit_code, executors, extra),
        );
        assert!(out.success, "{name}: {out:?}");
    }

    // RUNNING, with exactly the objects the builder makes, each owned by the application.
    let running = wait_app(&apps, "completes", LIMIT, |a| state(a) == S::Running).await;
    let uid = running.metadata.uid.clone().expect("a uid");
    let expected = expected_kinds(tier, &running);
    let status = running.status.clone().unwrap_or_default();
    let pods: Api<Pod> = Api::namespaced(admin.clone(), NAMESPACE);
    let driver_uid = pods
        .get(&status.driver_info.pod_name)
        .await
        .expect("the driver pod")
        .metadata
        .uid
        .expect("a uid");
    // Executors and their ConfigMap are the driver's doing (Spark's), not the submission's: left out.
    let mut created = owned_by(&admin, &[&uid, &driver_uid]).await;
    for names in created.values_mut() {
        names.retain(|name| !name.contains("-exec-") && !name.starts_with("spark-exec-"));
    }
    let counts: BTreeMap<&str, usize> = created.iter().map(|(k, v)| (*k, v.len())).collect();
    assert_eq!(counts, expected, "the submission's objects: {created:?}");
    assert_eq!(created["Pod"], vec![status.driver_info.pod_name.clone()], "{status:#?}");

    // COMPLETED, the executors counted, the driver's finalizer released.
    let completed = wait_app(&apps, "completes", LIMIT, |a| {
        state(a).is_terminal()
            && a.status
                .as_ref()
                .and_then(|s| s.executor_counts.as_ref())
                .is_some_and(|c| c.running == 0 && c.pending == 0)
    })
    .await;
    let status = completed.status.clone().unwrap_or_default();
    assert_eq!(state(&completed), S::Completed, "{status:#?}");
    assert_eq!(status.execution_attempts, 1);
    let driver = status.driver_termination.clone().expect("the driver's end is recorded");
    assert_eq!(driver.exit_code, Some(0), "{driver:?}");
    assert_eq!(
        status.executor_counts.clone().expect("executor counts").total(),
        2,
        "{status:#?}"
    );
    poll(LIMIT, || async {
        match pods.get_opt(&driver.pod_name).await {
            Ok(Some(pod))
                if pod
                    .metadata
                    .finalizers
                    .iter()
                    .flatten()
                    .any(|f| f == FINALIZER_DRIVER_PROTECTION) =>
            {
                Poll::Pending(pod.metadata.finalizers)
            }
            _ => Poll::Done(()),
        }
    })
    .await
    .unwrap_or_else(|f| panic!("the driver's finalizer was not released: {f:?}"));

    // FAILED with the exit code; retried per policy.
    let failed = wait_app(&apps, "fails", LIMIT, |a| state(a).is_terminal()).await;
    let status = failed.status.clone().unwrap_or_default();
    assert_eq!(state(&failed), S::Failed, "{status:#?}");
    assert_eq!(
        status.driver_termination.as_ref().and_then(|d| d.exit_code),
        Some(3),
        "{status:#?}"
    );
    assert!(
        status.application_state.error_message.contains("code 3"),
        "{}",
        status.application_state.error_message
    );
    let retried = wait_app(&apps, "retries", LIMIT, |a| state(a).is_terminal()).await;
    let status = retried.status.clone().unwrap_or_default();
    assert_eq!(state(&retried), S::Failed, "{status:#?}");
    assert_eq!(
        status.execution_attempts, 3,
        "2 retries after the first run: {status:#?}"
    );

    // Deleted: the real garbage collector removes what the application owned.
    let deleted = kubectl(
        cp,
        &[
            "delete",
            "sparkapplication",
            "completes",
            "-n",
            NAMESPACE,
            "--wait=true",
        ],
        "",
    );
    assert!(deleted.success, "{deleted:?}");
    poll(LIMIT, || async {
        let left = owned_by(&admin, &[&uid, &driver_uid]).await;
        if left.values().all(Vec::is_empty) {
            Poll::Done(())
        } else {
            Poll::Pending(left)
        }
    })
    .await
    .unwrap_or_else(|left| panic!("the garbage collector left the application's objects: {left:?}"));
    for name in ["fails", "retries"] {
        let out = kubectl(
            cp,
            &["delete", "sparkapplication", name, "-n", NAMESPACE, "--wait=true"],
            "",
        );
        assert!(out.success, "{out:?}");
    }
    drop(operator);
}
