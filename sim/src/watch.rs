//! Watches: a stream of changes to one resource from a resourceVersion, with the apiserver's
//! semantics for `resourceVersion` ("" / "0" / specific), bookmarks, `sendInitialEvents`,
//! selectors (an object leaving the selection is DELETED, entering it ADDED), timeouts and
//! 410 Gone for a compacted resourceVersion. Plus the all-resources change feed for in-process
//! controllers.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::time::Instant;

use crate::convert;
use crate::registry::{Gvr, ResourceInfo};
use crate::selectors::{FieldSelector, LabelSelector};
use crate::status::ApiError;
use crate::store::{Change, ChangeKind, Store};

/// Options of a watch.
#[derive(Debug, Clone, Default)]
pub struct WatchOptions {
    pub resource_version: Option<String>,
    pub resource_version_match: Option<String>,
    pub label_selector: Option<String>,
    pub field_selector: Option<String>,
    pub allow_bookmarks: bool,
    pub send_initial_events: Option<bool>,
    pub timeout: Option<Duration>,
    /// How often bookmarks are sent (the apiserver sends them about every minute).
    pub bookmark_interval: Option<Duration>,
}

/// One watch event, ready to serialize as `{"type": ..., "object": ...}`.
#[derive(Debug, Clone, PartialEq)]
pub struct WatchEvent {
    /// `ADDED`, `MODIFIED`, `DELETED`, `BOOKMARK` or `ERROR`.
    pub type_: &'static str,
    pub object: Value,
}

/// As the map `{"object": ..., "type": ...}` (serde_json's maps keep their keys sorted), written straight
/// from the event: a watch sends every event it selects, and building that map first copied the object.
impl serde::Serialize for WatchEvent {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap as _;
        let mut map = serializer.serialize_map(Some(2))?;
        map.serialize_entry("object", &self.object)?;
        map.serialize_entry("type", self.type_)?;
        map.end()
    }
}

const DEFAULT_BOOKMARK_INTERVAL: Duration = Duration::from_secs(60);
/// The apiserver's default `--min-request-timeout` is 1800 s.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(1800);
/// How long a watch from a future resourceVersion waits for it (the watch cache waits 3 s).
const FUTURE_RV_WAIT: Duration = Duration::from_secs(3);

/// An open watch. Call [`WatchStream::next`] until it returns None (the server ended the watch).
pub struct WatchStream {
    store: Store,
    info: Arc<ResourceInfo>,
    version: String,
    namespace: Option<String>,
    labels: LabelSelector,
    fields: FieldSelector,
    cursor: u64,
    /// Wait until this resourceVersion exists before streaming (watch from a future RV).
    wait_for: Option<(u64, Instant)>,
    pending: VecDeque<WatchEvent>,
    allow_bookmarks: bool,
    bookmark_interval: Duration,
    next_bookmark: Instant,
    deadline: Instant,
    latest: tokio::sync::watch::Receiver<u64>,
    epoch: tokio::sync::watch::Receiver<u64>,
    ended: bool,
}

impl Store {
    /// Opens a watch on a resource (all namespaces when `namespace` is None).
    pub fn watch(&self, gvr: &Gvr, namespace: Option<&str>, opts: &WatchOptions) -> Result<WatchStream, ApiError> {
        let info = self.resolve(gvr)?;
        let labels = match opts.label_selector.as_deref() {
            Some(s) => LabelSelector::parse(s).map_err(|e| ApiError::BadRequest(e.to_string()))?,
            None => LabelSelector::default(),
        };
        let selectable = info
            .crd
            .as_ref()
            .and_then(|c| c.selectable_fields.get(&gvr.version))
            .cloned()
            .unwrap_or_default();
        let fields = match opts.field_selector.as_deref() {
            Some(s) => FieldSelector::parse(s, &info.group, &info.resource, &selectable)
                .map_err(|e| ApiError::BadRequest(e.to_string()))?,
            None => FieldSelector::default(),
        };
        let rv_param = opts.resource_version.as_deref().unwrap_or("");
        let requested: Option<u64> = match rv_param {
            "" | "0" => None,
            s => Some(
                s.parse()
                    .map_err(|_| ApiError::BadRequest(format!("invalid resource version: {s}")))?,
            ),
        };
        if opts.send_initial_events == Some(true) && opts.resource_version_match.as_deref() != Some("NotOlderThan") {
            return Err(ApiError::invalid(
                "meta.k8s.io",
                "ListOptions",
                "",
                vec![crate::status::FieldCause::forbidden(
                    "resourceVersionMatch",
                    "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
                )],
            ));
        }
        let interval = opts.bookmark_interval.unwrap_or(DEFAULT_BOOKMARK_INTERVAL);
        let now = Instant::now();
        let namespace = if info.namespaced {
            namespace.filter(|n| !n.is_empty()).map(str::to_string)
        } else {
            None
        };
        let mut stream = WatchStream {
            store: self.clone(),
            info: info.clone(),
            version: gvr.version.clone(),
            namespace,
            labels,
            fields,
            cursor: 0,
            wait_for: None,
            pending: VecDeque::new(),
            allow_bookmarks: opts.allow_bookmarks,
            bookmark_interval: interval,
            next_bookmark: now + interval,
            deadline: now + opts.timeout.unwrap_or(DEFAULT_TIMEOUT),
            latest: self.inner.latest.subscribe(),
            epoch: self.inner.watch_epoch.subscribe(),
            ended: false,
        };
        stream.epoch.mark_unchanged();
        // "Get state and start at most recent" unless a specific RV without initial events was
        // asked for; sendInitialEvents=false means no initial state even for "".
        let initial = match (requested, opts.send_initial_events) {
            (_, Some(true)) => true,
            (_, Some(false)) => false,
            (None, None) => true,
            (Some(_), None) => false,
        };
        let state = self.lock();
        if initial {
            stream.cursor = state.rv;
            if let Some(table) = state.tables.get(&info.storage) {
                for obj in table.values() {
                    let v = convert::as_version(&info, obj, &gvr.version);
                    if stream.selected(&v) {
                        stream.pending.push_back(WatchEvent {
                            type_: "ADDED",
                            object: v.into_owned(),
                        });
                    }
                }
            }
            if opts.send_initial_events == Some(true) {
                let cursor = requested.map_or(state.rv, |r| r.max(state.rv));
                let mut bm = stream.bookmark_object(cursor);
                bm["metadata"]["annotations"] = json!({ "k8s.io/initial-events-end": "true" });
                stream.pending.push_back(WatchEvent {
                    type_: "BOOKMARK",
                    object: bm,
                });
            }
        } else if let Some(rv) = requested {
            if rv > state.rv {
                stream.cursor = state.rv;
                stream.wait_for = Some((rv, now + FUTURE_RV_WAIT));
            } else {
                stream.cursor = rv;
            }
        }
        drop(state);
        Ok(stream)
    }
}

impl WatchStream {
    fn selected(&self, obj: &Value) -> bool {
        let ns_ok = match &self.namespace {
            Some(ns) => crate::meta::namespace(obj) == ns,
            None => true,
        };
        ns_ok && self.labels.matches_object(obj) && self.fields.matches(obj)
    }

    fn bookmark_object(&self, rv: u64) -> Value {
        json!({
            "kind": self.info.kind,
            "apiVersion": crate::registry::api_version(&self.info.group, &self.version),
            "metadata": { "resourceVersion": rv.to_string() }
        })
    }

    fn error_event(err: &ApiError) -> WatchEvent {
        WatchEvent {
            type_: "ERROR",
            object: err.to_status(),
        }
    }

    /// Turns a committed change into the event this watcher sees, if any.
    fn event_for(&self, change: &Change) -> Option<WatchEvent> {
        if change.resource != self.info.storage {
            return None;
        }
        let now = convert::as_version(&self.info, &change.object, &self.version);
        let now_selected = self.selected(&now);
        let before_selected = change
            .previous
            .as_ref()
            .is_some_and(|p| self.selected(&convert::as_version(&self.info, p, &self.version)));
        let type_ = match change.kind {
            ChangeKind::Added => now_selected.then_some("ADDED")?,
            ChangeKind::Deleted => (now_selected || before_selected).then_some("DELETED")?,
            ChangeKind::Modified => match (before_selected, now_selected) {
                (true, true) => "MODIFIED",
                (false, true) => "ADDED",
                (true, false) => "DELETED",
                (false, false) => return None,
            },
        };
        Some(WatchEvent {
            type_,
            object: now.into_owned(),
        })
    }

    /// Pulls committed changes after the cursor into `pending`; an ERROR 410 if they are gone.
    fn catch_up(&mut self) {
        let state = self.store.lock();
        if let Some((want, until)) = self.wait_for {
            if state.rv < want {
                if Instant::now() >= until {
                    let err = ApiError::TooLargeResourceVersion {
                        requested: want,
                        current: state.rv,
                    };
                    drop(state);
                    self.pending.push_back(Self::error_event(&err));
                    self.ended = true;
                }
                return;
            }
            self.wait_for = None;
            self.cursor = want;
        }
        if self.cursor < state.compacted_rv {
            let err = ApiError::Expired(format!(
                "too old resource version: {} ({})",
                self.cursor, state.compacted_rv
            ));
            drop(state);
            self.pending.push_back(Self::error_event(&err));
            self.ended = true;
            return;
        }
        let start = state.history.partition_point(|c| c.rv <= self.cursor);
        let changes: Vec<Arc<Change>> = state.history.range(start..).cloned().collect();
        let latest = state.rv;
        drop(state);
        for change in changes {
            if let Some(ev) = self.event_for(&change) {
                self.pending.push_back(ev);
            }
        }
        self.cursor = latest;
    }

    /// The next event, or None once the watch has ended (timeout, an ERROR already delivered,
    /// or the server cut it).
    pub async fn next(&mut self) -> Option<WatchEvent> {
        loop {
            if let Some(ev) = self.pending.pop_front() {
                return Some(ev);
            }
            if self.ended {
                return None;
            }
            if self.epoch.has_changed().unwrap_or(true) {
                self.ended = true;
                return None;
            }
            self.catch_up();
            if !self.pending.is_empty() || self.ended {
                continue;
            }
            let now = Instant::now();
            if now >= self.deadline {
                self.ended = true;
                return None;
            }
            if self.allow_bookmarks && now >= self.next_bookmark && self.wait_for.is_none() {
                self.next_bookmark = now + self.bookmark_interval;
                return Some(WatchEvent {
                    type_: "BOOKMARK",
                    object: self.bookmark_object(self.cursor),
                });
            }
            let mut wake = self.deadline;
            if self.allow_bookmarks {
                wake = wake.min(self.next_bookmark);
            }
            if let Some((_, until)) = self.wait_for {
                wake = wake.min(until);
            }
            tokio::select! {
                r = self.latest.changed() => { if r.is_err() { self.ended = true; } }
                r = self.epoch.changed() => { let _ = r; self.ended = true; }
                _ = tokio::time::sleep_until(wake) => {}
            }
        }
    }

    /// The watch as a `futures::Stream`.
    pub fn into_stream(self) -> impl futures::Stream<Item = WatchEvent> + Send {
        futures::stream::unfold(self, |mut s| async move { s.next().await.map(|ev| (ev, s)) })
    }
}

/// Every committed change of every resource, in order: what the garbage collector and other
/// in-process controllers follow. Start it from [`Store::snapshot`]'s resourceVersion.
pub struct ChangeFeed {
    store: Store,
    cursor: u64,
    pending: VecDeque<Arc<Change>>,
    latest: tokio::sync::watch::Receiver<u64>,
}

impl Store {
    /// Follows all changes after resourceVersion `after`.
    pub fn changes(&self, after: u64) -> ChangeFeed {
        ChangeFeed {
            store: self.clone(),
            cursor: after,
            pending: VecDeque::new(),
            latest: self.inner.latest.subscribe(),
        }
    }
}

impl ChangeFeed {
    /// The next change; `Err(Expired)` when the feed fell behind the retained history (start
    /// again from a new [`Store::snapshot`]).
    pub async fn next(&mut self) -> Result<Arc<Change>, ApiError> {
        loop {
            if let Some(c) = self.pending.pop_front() {
                return Ok(c);
            }
            {
                let state = self.store.lock();
                if self.cursor < state.compacted_rv {
                    return Err(ApiError::Expired(format!(
                        "too old resource version: {} ({})",
                        self.cursor, state.compacted_rv
                    )));
                }
                let start = state.history.partition_point(|c| c.rv <= self.cursor);
                self.pending.extend(state.history.range(start..).cloned());
                self.cursor = state.rv;
                self.latest.mark_unchanged();
            }
            if self.pending.is_empty() && self.latest.changed().await.is_err() {
                return Err(ApiError::ServiceUnavailable("the store was shut down".into()));
            }
        }
    }
}
