//! What keeps one bad application from stopping the others:
//!
//! - **Unreadable** applications (the controller cannot decode them, see [`crate::app::watched`]) get
//!   the condition `Invalid` (reason `UnreadableSpec`, the message naming the field) and a Warning Event,
//!   once per generation, and are left alone until they change.
//! - **A reconcile that panics** is contained to its application: it is counted
//!   (`spark_operator_reconcile_panics`), marked with the condition `ReconcileFailed`, and retried with
//!   a growing delay, while every other application goes on. The condition turns False once a reconcile
//!   succeeds again.
//!
//! Both are written as raw merge patches of the status, so they work whatever the status holds.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, PoisonError};
use std::time::Duration;

use futures::FutureExt;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::Action;
use serde_json::json;
use spark_operator_api::SparkApplication;
use spark_operator_runtime::error_chain::kube_error;

use crate::app::context::Ctx;
use crate::app::error::Error;
use crate::status::conditions;
use spark_operator_api::watched::{Unreadable, WatchedApp};

/// Condition type of an application the operator cannot handle.
pub(crate) const CONDITION_INVALID: &str = "Invalid";
/// Condition type of an application whose reconcile hit an internal error.
pub(crate) const CONDITION_RECONCILE_FAILED: &str = "ReconcileFailed";
/// Reason of an unreadable application.
pub(crate) const REASON_UNREADABLE: &str = "UnreadableSpec";
/// Longest wait between two reconciles of an application that keeps panicking.
const MAX_PANIC_BACKOFF: Duration = Duration::from_secs(300);

fn condition(type_: &str, status: bool, reason: &str, message: &str, generation: Option<i64>) -> serde_json::Value {
    let mut list = Vec::new();
    conditions::set(&mut list, type_, status, reason, message, Timestamp::now(), generation);
    serde_json::to_value(list).unwrap_or_default()
}

async fn patch_status(ctx: &Ctx, metadata: &ObjectMeta, patch: serde_json::Value) {
    let (Some(namespace), Some(name)) = (metadata.namespace.as_deref(), metadata.name.as_deref()) else {
        return;
    };
    // Raw JSON both ways: the object may not decode.
    let api: Api<WatchedApp> = Api::namespaced(ctx.client.clone(), namespace);
    if let Err(error) = api
        .patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        tracing::warn!(namespace, app = name, error = %kube_error(&error), "could not mark the application");
    }
}

/// Marks an application the controller cannot decode, once per generation.
pub(crate) async fn mark_unreadable(app: &Unreadable, reference: &ObjectReference, ctx: &Ctx) {
    let metadata = &app.metadata;
    let uid = metadata.uid.clone().unwrap_or_default();
    let generation = metadata.generation.unwrap_or_default();
    {
        let mut quarantine = ctx.quarantine.lock().unwrap_or_else(PoisonError::into_inner);
        if quarantine.unreadable.get(&uid) == Some(&generation) {
            return;
        }
        if quarantine.unreadable.len() > 100_000 {
            quarantine.unreadable.clear();
        }
        quarantine.unreadable.insert(uid, generation);
    }
    ctx.metrics.unreadable_applications.inc();
    // Names only: the reason names a field, never a value (specs hold credentials).
    tracing::warn!(
        namespace = metadata.namespace.as_deref().unwrap_or_default(),
        app = metadata.name.as_deref().unwrap_or_default(),
        "the application cannot be read; it is marked Invalid and skipped until it changes"
    );
    let message = format!(
        "the operator cannot read this application: {}; fix the field (until then it is not reconciled; other applications are not affected)",
        app.reason
    );
    // Conditions replaced whole: the rest of an unreadable status cannot be trusted either.
    let conditions = condition(
        CONDITION_INVALID,
        true,
        REASON_UNREADABLE,
        &message,
        metadata.generation,
    );
    patch_status(ctx, metadata, json!({ "status": { "conditions": conditions } })).await;
    ctx.events.warning(reference, REASON_UNREADABLE, &message).await;
}

/// Runs a reconcile of `app`, containing a panic to it.
pub(crate) async fn contained(
    app: Arc<SparkApplication>,
    ctx: Arc<Ctx>,
    reconcile: impl Future<Output = Result<Action, Error>>,
) -> Result<Action, Error> {
    let uid = app.metadata.uid.clone().unwrap_or_default();
    match AssertUnwindSafe(reconcile).catch_unwind().await {
        Ok(result) => {
            let recovered = {
                let mut quarantine = ctx.quarantine.lock().unwrap_or_else(PoisonError::into_inner);
                !quarantine.panics.is_empty() && quarantine.panics.remove(&uid).is_some()
            };
            if recovered && result.is_ok() {
                set_reconcile_failed(&ctx, &app, false, "Recovered", "reconciling works again").await;
            }
            result
        }
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic".to_owned());
            let count = {
                let mut quarantine = ctx.quarantine.lock().unwrap_or_else(PoisonError::into_inner);
                let count = quarantine.panics.entry(uid).or_insert(0);
                *count = count.saturating_add(1);
                *count
            };
            ctx.metrics.reconcile_panics.inc();
            tracing::error!(
                namespace = app.metadata.namespace.as_deref().unwrap_or_default(),
                app = app.metadata.name.as_deref().unwrap_or_default(),
                panic = what,
                attempt = count,
                "reconcile panicked (a bug in the operator); this application is retried later, the others are not affected"
            );
            if count == 1 {
                let message = "the operator hit an internal error reconciling this application (see the operator's log); it retries with a growing delay";
                set_reconcile_failed(&ctx, &app, true, "InternalError", message).await;
                ctx.events
                    .warning(&app.object_ref(&()), "ReconcilePanicked", message)
                    .await;
            }
            Ok(Action::requeue(panic_backoff(count)))
        }
    }
}

/// 5 s, doubling per consecutive panic, at most [`MAX_PANIC_BACKOFF`].
fn panic_backoff(count: u32) -> Duration {
    Duration::from_secs(5)
        .saturating_mul(2u32.saturating_pow(count.saturating_sub(1).min(16)))
        .min(MAX_PANIC_BACKOFF)
}

async fn set_reconcile_failed(ctx: &Ctx, app: &SparkApplication, failed: bool, reason: &str, message: &str) {
    let mut list = app.status.as_ref().map(|s| s.conditions.clone()).unwrap_or_default();
    conditions::set(
        &mut list,
        CONDITION_RECONCILE_FAILED,
        failed,
        reason,
        message,
        Timestamp::now(),
        app.metadata.generation,
    );
    let conditions = serde_json::to_value(list).unwrap_or_default();
    patch_status(ctx, &app.metadata, json!({ "status": { "conditions": conditions } })).await;
}

/// Test-only: panics in the reconcile of an application annotated `sparkoperator.k8s.io/test-panic`,
/// to prove containment end to end. Compiled only with the `test-hooks` feature, which no shipped
/// build enables.
#[cfg(feature = "test-hooks")]
pub(crate) fn injected_panic(app: &SparkApplication) {
    let annotated = app
        .metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key("sparkoperator.k8s.io/test-panic"));
    if annotated {
        #[allow(clippy::panic)]
        {
            panic!("injected by the test-hooks feature");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_panic_backoff_grows_and_is_bounded() {
        assert_eq!(panic_backoff(1), Duration::from_secs(5));
        assert_eq!(panic_backoff(2), Duration::from_secs(10));
        assert_eq!(panic_backoff(u32::MAX), MAX_PANIC_BACKOFF);
    }
}
