//! The clusterrole-aggregation controller (`pkg/controller/clusterroleaggregation`): a
//! ClusterRole with an `aggregationRule` gets as `rules` the rules of every other ClusterRole
//! its `clusterRoleSelectors` select (by name order, each rule once), whenever any ClusterRole
//! changes.

use serde_json::{Value, json};

use super::rules::{PolicyRule, rules_of};
use crate::admission_seam::UserInfo;
use crate::gc::BackgroundTask;
use crate::meta;
use crate::registry::{Gvr, ResourceKey};
use crate::selectors::LabelSelector;
use crate::status::ApiError;
use crate::store::{Store, WriteOptions};

fn key() -> ResourceKey {
    ResourceKey {
        group: super::rbac::GROUP.into(),
        resource: "clusterroles".into(),
    }
}

fn user() -> UserInfo {
    UserInfo {
        username: "system:serviceaccount:kube-system:clusterrole-aggregation-controller".into(),
        uid: String::new(),
        groups: vec![
            "system:serviceaccounts".into(),
            "system:serviceaccounts:kube-system".into(),
            "system:authenticated".into(),
        ],
    }
}

/// Starts the controller; [`aggregate_all`] has usually run once before (so the bootstrap
/// roles are complete when the API server opens).
pub fn spawn(store: &Store) -> BackgroundTask {
    let store = store.clone();
    BackgroundTask::spawn("clusterrole-aggregation-controller", async move {
        let mut feed = store.changes(store.current_rv());
        aggregate_all(&store).await;
        loop {
            match feed.next().await {
                Ok(change) => {
                    if change.resource == key() {
                        aggregate_all(&store).await;
                    }
                }
                Err(ApiError::Expired(_)) => {
                    feed = store.changes(store.current_rv());
                    aggregate_all(&store).await;
                }
                Err(_) => return,
            }
        }
    })
}

/// The rules an aggregated role should have (`syncClusterRole`).
fn aggregated_rules(role: &Value, all: &[std::sync::Arc<Value>]) -> Vec<PolicyRule> {
    let mut out: Vec<PolicyRule> = Vec::new();
    let selectors = role
        .pointer("/aggregationRule/clusterRoleSelectors")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    for selector in selectors {
        let Ok(sel) = LabelSelector::from_object(&selector) else {
            continue;
        };
        let mut matching: Vec<&std::sync::Arc<Value>> = all
            .iter()
            .filter(|r| meta::name(r) != meta::name(role) && sel.matches_object(r))
            .collect();
        matching.sort_by(|a, b| meta::name(a).cmp(meta::name(b)));
        for r in matching {
            for rule in rules_of(r) {
                if !out.contains(&rule) {
                    out.push(rule);
                }
            }
        }
    }
    out
}

/// One pass over every aggregated ClusterRole, repeated while a pass changes something (an
/// aggregated role may select another: `admin` takes `edit`, which takes `view`).
pub async fn aggregate_all(store: &Store) {
    let gvr = Gvr::new(super::rbac::GROUP, "v1", "clusterroles");
    let opts = WriteOptions {
        field_manager: Some("clusterrole-aggregation-controller".into()),
        user: user(),
        ..Default::default()
    };
    // Bounded: each pass can only add rules selected by a role changed in the previous one.
    for _ in 0..8 {
        let all = store.stored_objects(&key(), None);
        let mut changed = false;
        for role in all
            .iter()
            .filter(|r| r.get("aggregationRule").is_some_and(|a| !a.is_null()))
        {
            let rules = aggregated_rules(role, &all);
            if rules_of(role) == rules && role.get("rules").is_some_and(Value::is_array) {
                continue;
            }
            let mut updated = Value::clone(role);
            updated["rules"] = json!(rules);
            match store.update(&gvr, "", meta::name(role), updated, None, &opts).await {
                Ok(_) => changed = true,
                // Someone else changed it meanwhile: the change feed brings it back.
                Err(e) => tracing::debug!(role = meta::name(role), error = %e, "aggregating a ClusterRole"),
            }
        }
        if !changed {
            return;
        }
    }
}
