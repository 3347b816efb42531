//! Controllers dying mid-run: a killed controller restarted makes no second driver for any
//! application; with two replicas, the standby takes over when the leader dies and finishes the work.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::Api;
use spark_operator_e2e::{Cluster, ClusterOptions, Poll, app_yaml, assert_completed_once, poll, record_drivers, state};

const APPS: usize = 30;
const LIMIT: Duration = Duration::from_secs(180);

async fn create_apps(cluster: &Cluster, prefix: &str) {
    for i in 0..APPS {
        cluster
            .create_app(&app_yaml(&format!("{prefix}-{i}"), "1s", 0, 1, ""))
            .await;
    }
}

/// Waits until at least `n` applications have a driver pod, so the kill lands mid-run.
async fn wait_submitted(cluster: &Cluster, n: usize) {
    poll(LIMIT, || async {
        let submitted = cluster
            .all_apps("default")
            .await
            .values()
            .filter(|a| a.status.as_ref().is_some_and(|s| s.execution_attempts > 0))
            .count();
        if submitted >= n {
            Poll::Done(())
        } else {
            Poll::Pending(submitted)
        }
    })
    .await
    .unwrap_or_else(|submitted| panic!("only {submitted} applications were submitted"));
}

/// Every application completed, each with one execution and one driver pod ever.
async fn assert_all_completed_once(cluster: &Cluster, drivers: &Mutex<BTreeMap<String, BTreeSet<String>>>) {
    let apps = poll(LIMIT, || async {
        let apps = cluster.all_apps("default").await;
        let done = apps.values().filter(|a| state(a).is_terminal()).count();
        if done == APPS {
            Poll::Done(apps)
        } else {
            Poll::Pending(done)
        }
    })
    .await
    .unwrap_or_else(|done| panic!("only {done} of {APPS} applications ended"));
    assert_completed_once(apps.values(), drivers);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_controller_restarted_makes_no_second_driver() {
    let cluster = Cluster::start(ClusterOptions::big()).await;
    let (drivers, _recorder) = record_drivers(&cluster.client, "default");
    create_apps(&cluster, "restart").await;
    let first = cluster.controller(cluster.args(&[]));
    wait_submitted(&cluster, APPS / 3).await;
    first.kill();
    let _second = cluster.controller(cluster.args(&[]));
    assert_all_completed_once(&cluster, &drivers).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_standby_finishes_the_work_when_the_leader_dies() {
    let cluster = Cluster::start(ClusterOptions::big()).await;
    let (drivers, _recorder) = record_drivers(&cluster.client, "default");
    let elected = |identity: &str| {
        cluster.args(&[
            "--leader-election=true",
            "--leader-election-lease-duration=3",
            "--leader-election-retry-period=1",
            &format!("--identity={identity}"),
        ])
    };
    let leases: Api<Lease> = Api::namespaced(cluster.client.clone(), "default");
    let holder = || async {
        leases
            .get_opt("spark-operator-controller-lock")
            .await
            .ok()
            .flatten()
            .and_then(|l| l.spec)
            .and_then(|s| s.holder_identity)
    };
    let leader = cluster.controller(elected("replica-a"));
    poll(LIMIT, || async {
        match holder().await.as_deref() {
            Some("replica-a") => Poll::Done(()),
            other => Poll::Pending(other.map(str::to_owned)),
        }
    })
    .await
    .unwrap_or_else(|h| panic!("replica-a did not become the leader (holder {h:?})"));
    let _standby = cluster.controller(elected("replica-b"));

    create_apps(&cluster, "ha").await;
    wait_submitted(&cluster, APPS / 3).await;
    leader.kill();
    let killed = std::time::Instant::now();
    poll(Duration::from_secs(30), || async {
        match holder().await.as_deref() {
            Some("replica-b") => Poll::Done(()),
            other => Poll::Pending(other.map(str::to_owned)),
        }
    })
    .await
    .unwrap_or_else(|h| panic!("the standby did not take over (holder {h:?})"));
    // For the record (a figure, not an assertion): client-go's rule gives at most the lease
    // duration plus a retry period after the last renewal.
    println!(
        "the standby held the lease {:?} after the leader was killed (lease 3 s, retry 1 s)",
        killed.elapsed()
    );
    assert_all_completed_once(&cluster, &drivers).await;
}
