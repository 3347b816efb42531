//! The work queue every workload controller runs on, as client-go's informer + rate-limited
//! queue: the controller maps each change of [`Store::changes`] to the keys it must look at,
//! keys are synced one at a time (a key queued twice is synced once), a failed sync is retried
//! with a per-key exponential backoff, and a sync may ask to be looked at again after a delay
//! (`minReadySeconds`, `activeDeadlineSeconds`, TTLs, progress deadlines).

use std::collections::{HashMap, HashSet, VecDeque};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio::sync::mpsc;

use crate::registry::ResourceKey;
use crate::status::ApiError;
use crate::store::{Change, Store};

/// A namespaced object: (namespace, name).
pub(crate) type Key = (String, String);

/// The key of a namespaced object.
pub(crate) fn key_of(o: &Value) -> Key {
    (crate::meta::namespace(o).to_string(), crate::meta::name(o).to_string())
}

/// The keys of the listed objects of `group`/`resource` that `pick` accepts (the informer's
/// initial list).
pub(crate) fn keys_of(
    objects: &[(ResourceKey, Arc<Value>)],
    group: &str,
    resource: &str,
    pick: impl Fn(&Value) -> bool,
) -> Vec<Key> {
    objects
        .iter()
        .filter(|(k, o)| k.group == group && k.resource == resource && pick(o))
        .map(|(_, o)| key_of(o))
        .collect()
}

/// The key of the object of `kind` that controls `dependent` (its controller ownerReference), if any.
pub(crate) fn controller_key(dependent: &Value, kind: &str) -> Vec<Key> {
    super::pods::controller_name(dependent, kind)
        .map(|n| vec![(crate::meta::namespace(dependent).to_string(), n.to_string())])
        .unwrap_or_default()
}

const FIRST_RETRY: Duration = Duration::from_millis(20);
const MAX_RETRY: Duration = Duration::from_secs(10);

/// One controller: which keys a change concerns and how a key is synced.
pub(crate) trait Reconciler: Send + 'static {
    /// For logs.
    const NAME: &'static str;
    /// The keys to queue after a (re)list of everything (the informers' initial list).
    fn initial_keys(&mut self, objects: &[(ResourceKey, Arc<Value>)]) -> Vec<Key>;
    /// The keys a committed change concerns.
    fn keys_for(&mut self, store: &Store, change: &Change) -> Vec<Key>;
    /// Makes the world what `key` calls for. `Ok(Some(d))`: look again after `d`.
    fn sync(&mut self, store: &Store, key: &Key) -> impl Future<Output = Result<Option<Duration>, ApiError>> + Send;
}

/// Runs `r` on `store` until the store's change feed ends (the task is aborted with the sim).
pub(crate) async fn run<R: Reconciler>(store: Store, mut r: R) {
    let (later_tx, mut later_rx) = mpsc::unbounded_channel::<Key>();
    let mut queue: VecDeque<Key> = VecDeque::new();
    let mut queued: HashSet<Key> = HashSet::new();
    let mut backoff: HashMap<Key, Duration> = HashMap::new();
    let enqueue = |queue: &mut VecDeque<Key>, queued: &mut HashSet<Key>, key: Key| {
        if queued.insert(key.clone()) {
            queue.push_back(key);
        }
    };
    let relist = |r: &mut R, queue: &mut VecDeque<Key>, queued: &mut HashSet<Key>| {
        let (rv, objects) = store.snapshot();
        for k in r.initial_keys(&objects) {
            enqueue(queue, queued, k);
        }
        store.changes(rv)
    };
    let mut feed = relist(&mut r, &mut queue, &mut queued);
    let later = |key: Key, delay: Duration| {
        let tx = later_tx.clone();
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            let _ = tx.send(key);
        });
    };
    loop {
        tokio::select! {
            biased;
            change = feed.next() => match change {
                Ok(change) => {
                    for k in r.keys_for(&store, &change) {
                        enqueue(&mut queue, &mut queued, k);
                    }
                }
                Err(ApiError::Expired(_)) => feed = relist(&mut r, &mut queue, &mut queued),
                Err(e) => {
                    tracing::info!(controller = R::NAME, error = %e, "controller stops: the change feed ended");
                    return;
                }
            },
            Some(key) = later_rx.recv() => enqueue(&mut queue, &mut queued, key),
            _ = std::future::ready(()), if !queue.is_empty() => {
                let Some(key) = queue.pop_front() else { continue };
                queued.remove(&key);
                match r.sync(&store, &key).await {
                    Ok(again) => {
                        backoff.remove(&key);
                        if let Some(d) = again {
                            later(key, d);
                        }
                    }
                    Err(e) => {
                        let delay = backoff.get(&key).map(|d| (*d * 2).min(MAX_RETRY)).unwrap_or(FIRST_RETRY);
                        backoff.insert(key.clone(), delay);
                        tracing::debug!(controller = R::NAME, key = %format!("{}/{}", key.0, key.1), error = %e, retry_in = ?delay, "sync failed");
                        later(key, delay);
                    }
                }
            }
        }
    }
}
