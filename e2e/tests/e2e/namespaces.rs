//! `--namespaces a,b`: one watch per namespace, and only those namespaces reconciled. Each watch's
//! relist sweeps only its own namespace's executors: a relist in one namespace must not take the
//! live executors of another for deleted ones.

use std::time::Duration;

use spark_operator_api::ApplicationStateType as S;
use spark_operator_e2e::{Cluster, ClusterOptions, Poll, app_yaml, poll, state};

const LIMIT: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listed_namespaces_are_reconciled_and_keep_their_executors_through_a_relist() {
    let cluster = Cluster::start(ClusterOptions::default()).await;
    for name in ["team-a", "team-b", "team-c"] {
        cluster.job_namespace(name).await;
    }
    let _controller = cluster.controller(cluster.args(&["--namespaces=team-a,team-b"]));
    for ns in ["team-a", "team-b", "team-c"] {
        let yaml = app_yaml("job", "6s", 0, 2, "").replace("namespace: default", &format!("namespace: {ns}"));
        cluster.create_app(&yaml).await;
    }

    // Both watched applications have their executors running ...
    for ns in ["team-a", "team-b"] {
        cluster
            .wait_app(ns, "job", LIMIT, |a| {
                a.status
                    .as_ref()
                    .and_then(|s| s.executor_counts.as_ref())
                    .is_some_and(|c| c.running == 2)
            })
            .await;
    }
    // ... when every watch has to relist (its resourceVersion is too old after the disconnect).
    cluster.sim.store().compact();
    cluster.sim.cut_all_watches();

    for ns in ["team-a", "team-b"] {
        // The driver can end before its executors' last events are in (Spark stops its executors as it
        // exits); the counts settle right after. A lost event leaves one running forever and fails here.
        let app = cluster
            .wait_app(ns, "job", LIMIT, |a| {
                let settled = a
                    .status
                    .as_ref()
                    .and_then(|s| s.executor_counts.as_ref())
                    .is_some_and(|c| c.running == 0 && c.pending == 0);
                state(a).is_terminal() && settled
            })
            .await;
        let status = app.status.clone().unwrap_or_default();
        assert_eq!(state(&app), S::Completed, "{ns}: {status:#?}");
        let counts = status.executor_counts.clone().expect("executor counts");
        assert_eq!(
            (counts.completed, counts.unknown, counts.total()),
            (2, 0, 2),
            "{ns}: each executor counted once, by how it really ended: {counts:?}"
        );
    }
    // The namespace outside the list is never touched.
    let untouched = poll(Duration::from_secs(2), || async {
        let app = cluster.apps("team-c").get("job").await.expect("team-c/job");
        if app.status.is_some() {
            Poll::Done(app)
        } else {
            Poll::Pending(())
        }
    })
    .await;
    assert!(untouched.is_err(), "team-c/job was reconciled: {:?}", untouched.ok());
}
