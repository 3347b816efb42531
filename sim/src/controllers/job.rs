//! The Job controller (`pkg/controller/job`) for `NonIndexed` Jobs as 1.33 runs them: up to
//! `parallelism` active pods until `completions` pods succeeded (without `completions`: until
//! one succeeded and none is active), pods labelled from the generated selector
//! (`batch.kubernetes.io/controller-uid`, `batch.kubernetes.io/job-name`, `controller-uid`,
//! `job-name`) and holding the `batch.kubernetes.io/job-tracking` finalizer until their end is
//! counted (through `status.uncountedTerminatedPods`, as the real controller). Failed pods —
//! and pods deleted before they succeeded, with `podReplacementPolicy: TerminatingOrFailed` — count
//! against `backoffLimit` (with `restartPolicy: OnFailure`, container restarts count too); a new
//! pod after a failure waits the pod failure backoff (10 s doubling, at most 6 min). More
//! failures than `backoffLimit`, or `activeDeadlineSeconds` passed, fail the Job: the
//! `FailureTarget` condition first, active pods deleted, then `Failed` (reasons
//! `BackoffLimitExceeded`, `DeadlineExceeded`) once no pod is terminating; success is
//! `SuccessCriteriaMet` then `Complete` (reason `CompletionsReached`), with `completionTime`.
//! Status: `active`, `ready`, `terminating`, `succeeded`, `failed`, `startTime`.
//! `suspend: true` creates no pods and deletes active ones. Not done: `Indexed` completion mode,
//! `podFailurePolicy`, `successPolicy`, `backoffLimitPerIndex`, `managedBy`.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use super::pods::{self, write_opts};
use super::queue::{self, Key, Reconciler};
use crate::meta;
use crate::registry::{Gvr, ResourceKey};
use crate::status::ApiError;
use crate::store::{Change, Store};

pub(crate) const TRACKING_FINALIZER: &str = "batch.kubernetes.io/job-tracking";
const BACKOFF_BASE: Duration = Duration::from_secs(10);
const BACKOFF_MAX: Duration = Duration::from_secs(360);

pub(crate) fn gvr() -> Gvr {
    Gvr::new("batch", "v1", "jobs")
}

pub(crate) struct Jobs;

impl Reconciler for Jobs {
    const NAME: &'static str = "job-controller";

    fn initial_keys(&mut self, objects: &[(ResourceKey, Arc<Value>)]) -> Vec<Key> {
        queue::keys_of(objects, "batch", "jobs", |_| true)
    }

    fn keys_for(&mut self, _store: &Store, change: &Change) -> Vec<Key> {
        match (change.resource.group.as_str(), change.resource.resource.as_str()) {
            ("batch", "jobs") => vec![queue::key_of(&change.object)],
            ("", "pods") => queue::controller_key(&change.object, "Job"),
            _ => Vec::new(),
        }
    }

    async fn sync(&mut self, store: &Store, key: &Key) -> Result<Option<Duration>, ApiError> {
        let rk = ResourceKey {
            group: "batch".into(),
            resource: "jobs".into(),
        };
        match store.get_stored(&rk, &key.0, &key.1) {
            Some(job) => sync_job(store, &job).await,
            None => {
                // The Job is gone: its pods must not keep the finalizer (the real controller
                // removes it from orphans too).
                release_orphans(store, &key.0, &key.1).await?;
                Ok(None)
            }
        }
    }
}

fn condition_true(job: &Value, ty: &str) -> Option<Value> {
    job.pointer("/status/conditions")
        .and_then(Value::as_array)?
        .iter()
        .find(|c| c["type"] == ty && c["status"] == "True")
        .cloned()
}

/// Finished: `Complete` or `Failed` is true.
pub(crate) fn finished_at(job: &Value) -> Option<jiff::Timestamp> {
    ["Complete", "Failed"].iter().find_map(|t| {
        condition_true(job, t).and_then(|c| {
            c.get("lastTransitionTime")
                .and_then(Value::as_str)
                .and_then(meta::parse_time)
        })
    })
}

fn has_finalizer(pod: &Value) -> bool {
    meta::finalizers(pod).iter().any(|f| f == TRACKING_FINALIZER)
}

async fn remove_finalizer(store: &Store, pod: &Value) -> Result<(), ApiError> {
    if !has_finalizer(pod) {
        return Ok(());
    }
    let kept: Vec<String> = meta::finalizers(pod)
        .into_iter()
        .filter(|f| f != TRACKING_FINALIZER)
        .collect();
    // A JSON patch with a test of the uid, so a pod recreated under the same name is left alone.
    let patch = json!([
        { "op": "test", "path": "/metadata/uid", "value": meta::uid(pod) },
        { "op": "replace", "path": "/metadata/finalizers", "value": kept },
    ]);
    match store
        .patch(
            &pods::pods_gvr(),
            meta::namespace(pod),
            meta::name(pod),
            &crate::store::PatchBody::Json(patch),
            None,
            &write_opts(),
        )
        .await
    {
        Ok(_) | Err(ApiError::NotFound(_)) => Ok(()),
        Err(e) => Err(e),
    }
}

async fn release_orphans(store: &Store, ns: &str, job_name: &str) -> Result<(), ApiError> {
    let list = store.list(&pods::pods_gvr(), Some(ns), &Default::default())?;
    for p in list["items"].as_array().into_iter().flatten() {
        if pods::controller_name(p, "Job") == Some(job_name) && has_finalizer(p) {
            remove_finalizer(store, p).await?;
        }
    }
    Ok(())
}

/// `isPodFailed` with `podReplacementPolicy: TerminatingOrFailed`: failed, or deleted before it
/// succeeded.
fn counts_as_failed(pod: &Value) -> bool {
    pods::phase(pod) == "Failed" || (meta::is_deleting(pod) && pods::phase(pod) != "Succeeded")
}

fn condition(ty: &str, reason: &str, message: &str, now: &str) -> Value {
    json!({ "type": ty, "status": "True", "lastProbeTime": now, "lastTransitionTime": now, "reason": reason, "message": message })
}

fn uids(status: &Value, which: &str) -> Vec<String> {
    status
        .pointer(&format!("/uncountedTerminatedPods/{which}"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(str::to_string)
        .collect()
}

async fn sync_job(store: &Store, job: &Value) -> Result<Option<Duration>, ApiError> {
    let ns = meta::namespace(job);
    let name = meta::name(job);
    let owned = pods::owned(store, &pods::pods_gvr(), ns, meta::uid(job))?;
    let mut status = job.get("status").cloned().unwrap_or_else(|| json!({}));
    let now = pods::now_string();
    let finished = finished_at(job).is_some();

    // 1. Pods that ended and still hold the finalizer are recorded as uncounted, the
    //    finalizers removed, then the uncounted ones move into the counts.
    let mut unc_succeeded = uids(&status, "succeeded");
    let mut unc_failed = uids(&status, "failed");
    let mut newly = Vec::new();
    for p in &owned {
        if !has_finalizer(p) {
            continue;
        }
        let uid = meta::uid(p).to_string();
        if unc_succeeded.contains(&uid) || unc_failed.contains(&uid) {
            newly.push(p.clone());
        } else if pods::phase(p) == "Succeeded" {
            unc_succeeded.push(uid);
            newly.push(p.clone());
        } else if counts_as_failed(p) || (finished && pods::is_terminal(p)) {
            unc_failed.push(uid);
            newly.push(p.clone());
        }
    }
    if !newly.is_empty() {
        status["uncountedTerminatedPods"] = json!({});
        if !unc_succeeded.is_empty() {
            status["uncountedTerminatedPods"]["succeeded"] = json!(unc_succeeded);
        }
        if !unc_failed.is_empty() {
            status["uncountedTerminatedPods"]["failed"] = json!(unc_failed);
        }
        let written = write_status(store, job, &status).await?;
        for p in &newly {
            remove_finalizer(store, p).await?;
        }
        let mut status2 = written.get("status").cloned().unwrap_or_else(|| json!({}));
        let add = |s: &mut Value, k: &str, n: usize| {
            let v = s.get(k).and_then(Value::as_i64).unwrap_or(0) + n as i64;
            s[k] = json!(v);
        };
        add(&mut status2, "succeeded", unc_succeeded.len());
        add(&mut status2, "failed", unc_failed.len());
        status2["uncountedTerminatedPods"] = json!({});
        write_status(store, &written, &status2).await?;
        // Look again with the counts in place.
        return Ok(Some(Duration::ZERO));
    }

    let active: Vec<&Value> = owned.iter().filter(|p| pods::is_active(p)).collect();
    let terminating = owned
        .iter()
        .filter(|p| meta::is_deleting(p) && !pods::is_terminal(p))
        .count();
    let succeeded = status.get("succeeded").and_then(Value::as_i64).unwrap_or(0);
    let failed = status.get("failed").and_then(Value::as_i64).unwrap_or(0);
    let spec_i = |k: &str| job.pointer(&format!("/spec/{k}")).and_then(Value::as_i64);
    let completions = spec_i("completions");
    let parallelism = spec_i("parallelism").unwrap_or(1).max(0);
    let backoff_limit = spec_i("backoffLimit").unwrap_or(6);
    let suspended = job.pointer("/spec/suspend").and_then(Value::as_bool) == Some(true);
    let mut again: Option<Duration> = None;

    if !finished && !suspended && status.get("startTime").is_none() {
        status["startTime"] = json!(now);
    }
    let mut conditions: Vec<Value> = status
        .get("conditions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let target = ["FailureTarget", "SuccessCriteriaMet"].iter().find_map(|t| {
        conditions
            .iter()
            .find(|c| c["type"] == *t && c["status"] == "True")
            .cloned()
    });

    if !finished && target.is_none() {
        // Decide whether the Job has just failed or succeeded.
        let restarts: i64 =
            if job.pointer("/spec/template/spec/restartPolicy").and_then(Value::as_str) == Some("OnFailure") {
                active
                    .iter()
                    .flat_map(|p| {
                        p.pointer("/status/containerStatuses")
                            .and_then(Value::as_array)
                            .into_iter()
                            .flatten()
                    })
                    .filter_map(|c| c.get("restartCount").and_then(Value::as_i64))
                    .sum()
            } else {
                0
            };
        let deadline = spec_i("activeDeadlineSeconds");
        let started = status
            .get("startTime")
            .and_then(Value::as_str)
            .and_then(meta::parse_time);
        let past_deadline = match (deadline, started) {
            (Some(secs), Some(start)) => {
                let elapsed = jiff::Timestamp::now().duration_since(start).as_secs_f64();
                if elapsed >= secs as f64 {
                    true
                } else {
                    again = Some(Duration::from_secs_f64(secs as f64 - elapsed + 0.05));
                    false
                }
            }
            _ => false,
        };
        let complete = match completions {
            Some(c) => succeeded >= c,
            None => succeeded > 0 && active.is_empty(),
        };
        let new_target = if failed > backoff_limit || (restarts > 0 && failed + restarts > backoff_limit) {
            Some(condition(
                "FailureTarget",
                "BackoffLimitExceeded",
                "Job has reached the specified backoff limit",
                &now,
            ))
        } else if past_deadline {
            Some(condition(
                "FailureTarget",
                "DeadlineExceeded",
                "Job was active longer than specified deadline",
                &now,
            ))
        } else if complete {
            Some(condition(
                "SuccessCriteriaMet",
                "CompletionsReached",
                "Reached expected number of succeeded pods",
                &now,
            ))
        } else {
            None
        };
        if let Some(t) = new_target {
            conditions.push(t);
            status["conditions"] = json!(conditions);
            write_status(store, job, &status).await?;
            return Ok(Some(Duration::ZERO));
        }
    }

    if let Some(t) = &target {
        // Ending: no active pod may stay; the terminal condition once none is left terminating.
        for p in &active {
            pods::delete_pod(store, p).await?;
        }
        if active.is_empty() && terminating == 0 && !finished {
            let (ty, reason, message) = if t["type"] == "SuccessCriteriaMet" {
                (
                    "Complete",
                    t["reason"].as_str().unwrap_or(""),
                    t["message"].as_str().unwrap_or(""),
                )
            } else {
                (
                    "Failed",
                    t["reason"].as_str().unwrap_or(""),
                    t["message"].as_str().unwrap_or(""),
                )
            };
            conditions.push(condition(ty, reason, message, &now));
            if ty == "Complete" {
                status["completionTime"] = json!(now);
            }
        }
    } else if !finished {
        if suspended {
            for p in &active {
                pods::delete_pod(store, p).await?;
            }
        } else {
            let want_active = match completions {
                Some(c) => parallelism.min((c - succeeded).max(0)),
                None if succeeded > 0 => active.len() as i64,
                None => parallelism,
            };
            let mut have = active.len() as i64;
            if have > want_active {
                let mut surplus: Vec<Value> = active.iter().map(|p| (*p).clone()).collect();
                surplus.sort_by(pods::deletion_order);
                for p in surplus.iter().take((have - want_active) as usize) {
                    pods::delete_pod(store, p).await?;
                }
            } else if have < want_active {
                // After failures, new pods wait the pod failure backoff from the last failure.
                let wait = failure_backoff(failed, &owned);
                if wait.is_zero() {
                    let template = job.pointer("/spec/template").cloned().unwrap_or_else(|| json!({}));
                    let owner = pods::controller_ref(job, "batch/v1", "Job");
                    while have < want_active {
                        let mut pod = pods::pod_from_template(&template, name, ns, owner.clone());
                        let mut fin = meta::finalizers(&pod);
                        fin.push(TRACKING_FINALIZER.into());
                        pod["metadata"]["finalizers"] = json!(fin);
                        pods::create_pod(store, ns, pod).await?;
                        have += 1;
                    }
                } else {
                    again = Some(again.map_or(wait, |a| a.min(wait)));
                }
            }
        }
    }

    let owned = pods::owned(store, &pods::pods_gvr(), ns, meta::uid(job))?;
    let active_now = owned.iter().filter(|p| pods::is_active(p)).count();
    let ready = owned.iter().filter(|p| pods::is_active(p) && pods::is_ready(p)).count();
    let terminating = owned
        .iter()
        .filter(|p| meta::is_deleting(p) && !pods::is_terminal(p))
        .count();
    status["conditions"] = json!(conditions);
    if conditions.is_empty()
        && let Some(m) = status.as_object_mut()
    {
        m.remove("conditions");
    }
    status["active"] = json!(active_now);
    status["ready"] = json!(ready);
    status["terminating"] = json!(terminating);
    status["uncountedTerminatedPods"] = json!({});
    if let Some(m) = status.as_object_mut() {
        // omitempty counters; `ready` and `terminating` are pointers and always written.
        for k in ["active", "succeeded", "failed"] {
            if m.get(k) == Some(&json!(0)) {
                m.remove(k);
            }
        }
    }
    write_status(store, job, &status).await?;
    Ok(again)
}

/// How long until a new pod may be created after `failed` failures: 10 s doubling per failure
/// (at most 6 min), from the newest failed pod's end.
fn failure_backoff(failed: i64, owned: &[Value]) -> Duration {
    if failed == 0 {
        return Duration::ZERO;
    }
    let delay = BACKOFF_BASE
        .saturating_mul(1u32 << (failed - 1).clamp(0, 20) as u32)
        .min(BACKOFF_MAX);
    let last = owned
        .iter()
        .filter(|p| pods::phase(p) == "Failed")
        .filter_map(|p| {
            p.pointer("/status/containerStatuses")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(|c| c.pointer("/state/terminated/finishedAt").and_then(Value::as_str))
                .filter_map(meta::parse_time)
                .max()
        })
        .max();
    let Some(last) = last else {
        return Duration::ZERO;
    };
    let since = Duration::try_from(jiff::Timestamp::now().duration_since(last)).unwrap_or(Duration::ZERO);
    delay.saturating_sub(since)
}

async fn write_status(store: &Store, job: &Value, status: &Value) -> Result<Value, ApiError> {
    if job.get("status") == Some(status) {
        return Ok(job.clone());
    }
    let mut obj = job.clone();
    obj["status"] = status.clone();
    Ok(store
        .update(
            &gvr(),
            meta::namespace(job),
            meta::name(job),
            obj,
            Some("status"),
            &write_opts(),
        )
        .await?
        .object)
}
