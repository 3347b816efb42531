//! kube-rs against the sim over HTTPS: a `kube::runtime::watcher` survives a forced disconnect
//! and a 410 Gone without missing or duplicating an event.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic in a test is a failed assertion

mod common;

use std::time::Duration;

use common::{start_sim, within};
use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, PostParams};
use kube::runtime::watcher::{self, Event};
use kube_sim::faults::{FaultAction, FaultRule};

fn cm(name: &str) -> ConfigMap {
    serde_json::from_value(serde_json::json!({ "metadata": { "name": name }, "data": { "k": name } })).unwrap()
}

fn describe(ev: &Event<ConfigMap>) -> String {
    let name = |c: &ConfigMap| c.metadata.name.clone().unwrap_or_default();
    match ev {
        Event::Init => "Init".into(),
        Event::InitApply(c) => format!("InitApply({})", name(c)),
        Event::InitDone => "InitDone".into(),
        Event::Apply(c) => format!("Apply({})", name(c)),
        Event::Delete(c) => format!("Delete({})", name(c)),
    }
}

#[tokio::test]
async fn watcher_survives_disconnect_and_410_without_losing_or_repeating_events() {
    let (sim, _dir) = start_sim(|c| c.bookmark_interval = Duration::from_millis(200)).await;
    let client = sim.client().await.unwrap();
    let api: Api<ConfigMap> = Api::namespaced(client, "default");
    for n in ["a", "b", "c"] {
        api.create(&PostParams::default(), &cm(n)).await.unwrap();
    }

    let mut events = watcher::watcher(api.clone(), watcher::Config::default()).boxed();
    // The next successful event, skipping the errors the watcher reports while it retries.
    let mut errors = 0usize;
    let mut next = async || loop {
        match within("a watcher event", events.next()).await {
            Some(Ok(ev)) => return describe(&ev),
            Some(Err(_)) => errors += 1,
            None => panic!("watcher stream ended"),
        }
    };

    let mut initial = vec![next().await, next().await, next().await, next().await, next().await];
    initial[1..4].sort();
    assert_eq!(
        initial,
        ["Init", "InitApply(a)", "InitApply(b)", "InitApply(c)", "InitDone"]
    );

    api.create(&PostParams::default(), &cm("d")).await.unwrap();
    assert_eq!(next().await, "Apply(d)");

    // 1. The server drops every watch: the watcher re-watches from its resourceVersion and
    //    sees exactly the change made meanwhile.
    sim.cut_all_watches();
    api.create(&PostParams::default(), &cm("e")).await.unwrap();
    assert_eq!(next().await, "Apply(e)");

    // 2. A 410: watches fail while a change is made and the history is compacted; when the
    //    watcher comes back its resourceVersion is too old, it relists, and the relist holds
    //    the change it could not watch.
    sim.faults().add(FaultRule {
        verb: Some("watch".into()),
        resource: Some("configmaps".into()),
        user_agent: None,
        action: FaultAction::Fail {
            code: 503,
            reason: "ServiceUnavailable".into(),
            message: "injected".into(),
        },
        times: None,
    });
    sim.cut_all_watches();
    api.create(&PostParams::default(), &cm("f")).await.unwrap();
    sim.store().compact();
    sim.faults().clear();

    let mut relist = vec![next().await];
    loop {
        let ev = next().await;
        let done = ev == "InitDone";
        relist.push(ev);
        if done {
            break;
        }
    }
    let last = relist.len() - 1;
    relist[1..last].sort();
    assert_eq!(
        relist,
        [
            "Init",
            "InitApply(a)",
            "InitApply(b)",
            "InitApply(c)",
            "InitApply(d)",
            "InitApply(e)",
            "InitApply(f)",
            "InitDone"
        ]
    );

    // Back to watching: exactly one event per change, in order.
    api.create(&PostParams::default(), &cm("g")).await.unwrap();
    api.delete("a", &DeleteParams::default()).await.unwrap();
    assert_eq!(next().await, "Apply(g)");
    assert_eq!(next().await, "Delete(a)");

    // Nothing else is pending: a change made now is the very next event.
    api.create(&PostParams::default(), &cm("h")).await.unwrap();
    assert_eq!(next().await, "Apply(h)");
    assert!(
        errors > 0,
        "the injected watch failures and the 410 surface as watcher errors"
    );
    sim.shutdown().await;
}
