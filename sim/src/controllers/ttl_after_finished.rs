//! The TTL-after-finished controller (`pkg/controller/ttlafterfinished`): a Job with
//! `ttlSecondsAfterFinished` is deleted that long after it finished (its `Complete` or `Failed`
//! condition's `lastTransitionTime`), with `propagationPolicy: Background` (the garbage collector
//! then deletes its pods) and a uid precondition.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use super::job;
use super::queue::{self, Key, Reconciler};
use crate::meta;
use crate::registry::ResourceKey;
use crate::status::ApiError;
use crate::store::{Change, DeleteOptions, Store};

pub(crate) struct TtlAfterFinished;

fn wants(job: &Value) -> bool {
    job.pointer("/spec/ttlSecondsAfterFinished")
        .is_some_and(Value::is_number)
        && job::finished_at(job).is_some()
        && !meta::is_deleting(job)
}

impl Reconciler for TtlAfterFinished {
    const NAME: &'static str = "ttl-after-finished-controller";

    fn initial_keys(&mut self, objects: &[(ResourceKey, Arc<Value>)]) -> Vec<Key> {
        queue::keys_of(objects, "batch", "jobs", wants)
    }

    fn keys_for(&mut self, _store: &Store, change: &Change) -> Vec<Key> {
        let obj = &change.object;
        if change.resource.group == "batch" && change.resource.resource == "jobs" && wants(obj) {
            vec![queue::key_of(obj)]
        } else {
            Vec::new()
        }
    }

    async fn sync(&mut self, store: &Store, key: &Key) -> Result<Option<Duration>, ApiError> {
        let rk = ResourceKey {
            group: "batch".into(),
            resource: "jobs".into(),
        };
        let Some(j) = store.get_stored(&rk, &key.0, &key.1) else {
            return Ok(None);
        };
        let (Some(ttl), Some(finished)) = (
            j.pointer("/spec/ttlSecondsAfterFinished").and_then(Value::as_i64),
            job::finished_at(&j),
        ) else {
            return Ok(None);
        };
        if meta::is_deleting(&j) {
            return Ok(None);
        }
        let elapsed = jiff::Timestamp::now().duration_since(finished).as_secs_f64();
        if elapsed < ttl as f64 {
            return Ok(Some(Duration::from_secs_f64(ttl as f64 - elapsed + 0.05)));
        }
        let opts = DeleteOptions {
            propagation_policy: Some("Background".into()),
            precondition_uid: Some(meta::uid(&j).to_string()),
            ..Default::default()
        };
        match store.delete(&job::gvr(), &key.0, &key.1, &opts).await {
            Ok(_) | Err(ApiError::NotFound(_)) => Ok(None),
            Err(e) => Err(e),
        }
    }
}
