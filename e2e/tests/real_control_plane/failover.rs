//! Two operator processes on the real control plane, leader election on the real Lease: the standby takes
//! over when the leader is killed mid-run (SIGKILL) and finishes the work; every application completes
//! once, with one driver pod, one submission and one execution (the fencing of the sim's `ha` test, here
//! against kube-apiserver's Lease and resourceVersions).

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, ListParams};
use spark_operator_api::SparkApplication;
use spark_operator_e2e::real::operator::RELEASE_NAMESPACE;
use spark_operator_e2e::{Poll, assert_completed_once, poll, record_drivers, state};

use crate::support::{Tier, app_in, kubectl, nodes};

pub const NAMESPACE: &str = "rcp-failover";
const APPS: usize = 12;
const LIMIT: Duration = Duration::from_secs(240);
/// Short lease timing, so that the takeover is quick (the chart's own values: 15 s and 2 s).
const ELECTION: [&str; 2] = ["--leader-election-lease-duration=3", "--leader-election-retry-period=1"];

pub async fn the_standby_finishes_the_work(tier: &'static Tier) {
    let cp = tier.control_plane;
    let admin = cp.admin().await;
    let _nodes = nodes(cp, &["rcp-node-ha-1", "rcp-node-ha-2"]).await;
    let (drivers, recorder) = record_drivers(&admin, NAMESPACE);

    let leases: Api<Lease> = Api::namespaced(admin.clone(), RELEASE_NAMESPACE);
    let lease_name = tier.install.lease_name();
    let holder = || async {
        leases
            .get_opt(&lease_name)
            .await
            .ok()
            .flatten()
            .and_then(|l| l.spec)
            .and_then(|s| s.holder_identity)
    };
    let leader = tier.install.start(cp, "replica-a", &ELECTION);
    tier.install.route_webhooks_to(cp, &leader, NAMESPACE).await;
    poll(LIMIT, || async {
        match holder().await.as_deref() {
            // The identity is the pod name (HOSTNAME) and a per-process suffix.
            Some(h) if h.starts_with("replica-a-") => Poll::Done(()),
            other => Poll::Pending(other.map(str::to_owned)),
        }
    })
    .await
    .unwrap_or_else(|h| {
        panic!(
            "replica-a did not become the leader (holder {h:?})\n{}",
            leader.log_tail()
        )
    });
    let standby = tier.install.start(cp, "replica-b", &ELECTION);

    for i in 0..APPS {
        let out = kubectl(
            cp,
            &["apply", "-f", "-"],
            &app_in(NAMESPACE, &format!("ha-{i}"), "3s", 0, 1, ""),
        );
        assert!(out.success, "{out:?}");
    }
    let apps: Api<SparkApplication> = Api::namespaced(admin.clone(), NAMESPACE);
    poll(LIMIT, || async {
        let submitted = apps
            .list(&ListParams::default())
            .await
            .map(|l| {
                l.items
                    .iter()
                    .filter(|a| a.status.as_ref().is_some_and(|s| s.execution_attempts > 0))
                    .count()
            })
            .unwrap_or_default();
        if submitted >= APPS / 3 {
            Poll::Done(())
        } else {
            Poll::Pending(submitted)
        }
    })
    .await
    .unwrap_or_else(|n| panic!("only {n} applications were submitted"));
    leader.kill();
    // The Service's endpoints would move to the surviving replica: so do the webhook configurations.
    tier.install.route_webhooks_to(cp, &standby, NAMESPACE).await;
    poll(Duration::from_secs(60), || async {
        match holder().await.as_deref() {
            Some(h) if h.starts_with("replica-b-") => Poll::Done(()),
            other => Poll::Pending(other.map(str::to_owned)),
        }
    })
    .await
    .unwrap_or_else(|h| panic!("the standby did not take over (holder {h:?})\n{}", standby.log_tail()));

    let all_done = poll(LIMIT, || async {
        let list = apps
            .list(&ListParams::default())
            .await
            .map(|l| l.items)
            .unwrap_or_default();
        if list.len() == APPS && list.iter().all(|a| state(a).is_terminal()) {
            Poll::Done(list)
        } else {
            Poll::Pending(())
        }
    })
    .await
    .unwrap_or_else(|()| panic!("not every application ended\n{}", standby.log_tail()));
    recorder.abort();
    assert_completed_once(&all_done, &drivers);
    let out = kubectl(
        cp,
        &["delete", "sparkapplications", "--all", "-n", NAMESPACE, "--wait=true"],
        "",
    );
    assert!(out.success, "{out:?}");
    drop(standby);
}
