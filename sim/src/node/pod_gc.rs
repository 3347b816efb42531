//! The terminated-pod GC (the PodGC controller's `gcTerminated`): deletes pods that reached
//! Succeeded or Failed, with grace 0, either at once or a set time after they finished.
//! (The real controller's trigger is a count threshold, `--terminated-pod-gc-threshold`; a
//! time is what tests need to reproduce "deleted a millisecond after it finished".)

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::time::Duration;

use serde_json::Value;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use super::hub::PodEvent;
use crate::meta;
use crate::registry::Gvr;
use crate::status::ApiError;
use crate::store::{DeleteOptions, Store};

async fn delete(store: &Store, ns: &str, name: &str, uid: &str) {
    let opts = DeleteOptions {
        grace_period_seconds: Some(0),
        precondition_uid: Some(uid.to_string()),
        ..Default::default()
    };
    match store.delete(&Gvr::new("", "v1", "pods"), ns, name, &opts).await {
        Ok(_) | Err(ApiError::NotFound(_)) | Err(ApiError::Conflict { .. }) => {}
        Err(e) => tracing::warn!(pod = %format!("{ns}/{name}"), error = %e, "pod GC could not delete a finished pod"),
    }
}

/// Runs the GC (`after` zero: instant) until the cluster stops.
pub(crate) async fn run(
    store: Store,
    after: Duration,
    mut rx: mpsc::UnboundedReceiver<PodEvent>,
    mut stop: watch::Receiver<bool>,
) {
    // uid → (namespace, name), and when each is due.
    let mut waiting: HashMap<String, (String, String)> = HashMap::new();
    let mut due: BinaryHeap<Reverse<(Instant, String)>> = BinaryHeap::new();
    loop {
        let next = due.peek().map(|Reverse((t, _))| *t);
        tokio::select! {
            ev = rx.recv() => {
                let Some(ev) = ev else { return };
                let pod = ev.object();
                let uid = meta::uid(pod).to_string();
                match ev {
                    PodEvent::Deleted(_) => {
                        waiting.remove(&uid);
                    }
                    PodEvent::Upsert(_) => {
                        let finished = matches!(pod.pointer("/status/phase").and_then(Value::as_str), Some("Succeeded" | "Failed"));
                        if !finished || waiting.contains_key(&uid) {
                            continue;
                        }
                        // Remembered until its deletion is seen, so it is deleted once.
                        waiting.insert(uid.clone(), (meta::namespace(pod).to_string(), meta::name(pod).to_string()));
                        if after.is_zero() {
                            delete(&store, meta::namespace(pod), meta::name(pod), &uid).await;
                        } else {
                            due.push(Reverse((Instant::now() + after, uid)));
                        }
                    }
                }
            }
            _ = async { match next { Some(t) => tokio::time::sleep_until(t).await, None => std::future::pending().await } } => {
                let now = Instant::now();
                while let Some(Reverse((t, uid))) = due.peek().cloned() {
                    if t > now {
                        break;
                    }
                    due.pop();
                    if let Some((ns, name)) = waiting.get(&uid).cloned() {
                        delete(&store, &ns, &name, &uid).await;
                    }
                }
            }
            _ = stop.changed() => return,
        }
    }
}
