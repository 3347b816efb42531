//! The store: one follower thread per running container copying its CRI log into the store, the index of
//! what is held, and the bounds (per application, in total, by age).
//!
//! Followers are threads rather than tasks: they do blocking file I/O and sleep between polls, a node runs
//! at most a few hundred pods (kubelet's `maxPods`, 110 by default), and the hooks the CRI watcher calls
//! stay plain functions that need no runtime.

use std::collections::{BTreeMap, HashMap};
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, RecvTimeoutError, TryRecvError};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use super::follow::{Follower, Resumed};
use super::index::{AppIndex, ContainerEntry, Execution};
use super::layout::{self, ContainerMeta};
use super::metrics::LogMetrics;
use super::{Error, LogArgs, LogSource};

/// Bytes read from a source per poll step, at most.
const CHUNK: usize = 256 * 1024;
/// Bytes copied before the follower looks at its signals again.
const BUDGET: u64 = 4 * 1024 * 1024;
/// How often bounds by age are checked.
const SWEEP_EVERY: Duration = Duration::from_secs(60);

#[derive(Clone, Copy, Debug)]
pub(crate) struct Limits {
    pub max_bytes: u64,
    pub max_app_bytes: u64,
    pub max_age: Duration,
    pub poll: Duration,
}

/// The log store (cheap to clone; every clone is the same store).
#[derive(Clone, Debug)]
pub struct LogStore {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    root: PathBuf,
    node: String,
    limits: Limits,
    state: Mutex<State>,
    metrics: Arc<LogMetrics>,
}

#[derive(Debug, Default)]
struct State {
    containers: HashMap<String, Entry>,
    /// Bytes held in total and by each application, kept with `containers` (through `insert`, `grow` and
    /// `remove`): a copy that grows checks its bounds without summing every container the node holds.
    total_bytes: u64,
    apps: HashMap<AppKey, AppHeld>,
    followers: HashMap<String, Handle>,
    janitor: Option<(mpsc::Sender<Signal>, JoinHandle<()>)>,
    closed: bool,
}

/// An application: its namespace and name.
type AppKey = (String, String);

/// What the store holds of one application.
#[derive(Debug, Default)]
struct AppHeld {
    bytes: u64,
    containers: usize,
}

#[derive(Debug)]
struct Entry {
    meta: ContainerMeta,
    /// Absolute directory of the container's files.
    dir: PathBuf,
    /// Bytes of the copy; changed only through `State::grow`, which keeps the sums.
    bytes: u64,
}

impl Entry {
    fn app(&self) -> AppKey {
        (self.meta.namespace.clone(), self.meta.app_name.clone())
    }
}

impl State {
    fn insert(&mut self, id: String, entry: Entry) {
        let held = self.apps.entry(entry.app()).or_default();
        held.bytes += entry.bytes;
        held.containers += 1;
        self.total_bytes += entry.bytes;
        if let Some(old) = self.containers.insert(id, entry) {
            self.forget(&old);
        }
    }

    fn remove(&mut self, id: &str) -> Option<Entry> {
        let entry = self.containers.remove(id)?;
        self.forget(&entry);
        Some(entry)
    }

    /// Counts `n` more bytes of `id`'s copy; its application, or None when the store does not hold it.
    fn grow(&mut self, id: &str, n: u64) -> Option<AppKey> {
        let entry = self.containers.get_mut(id)?;
        entry.bytes += n;
        let app = entry.app();
        if let Some(held) = self.apps.get_mut(&app) {
            held.bytes += n;
        }
        self.total_bytes += n;
        Some(app)
    }

    fn app_bytes(&self, app: &AppKey) -> u64 {
        self.apps.get(app).map_or(0, |held| held.bytes)
    }

    /// Takes a container that left `containers` out of the sums.
    fn forget(&mut self, entry: &Entry) {
        self.total_bytes = self.total_bytes.saturating_sub(entry.bytes);
        let app = entry.app();
        if let Some(held) = self.apps.get_mut(&app) {
            held.bytes = held.bytes.saturating_sub(entry.bytes);
            held.containers = held.containers.saturating_sub(1);
            if held.containers == 0 {
                self.apps.remove(&app);
            }
        }
    }
}

#[derive(Debug)]
struct Handle {
    signals: mpsc::Sender<Signal>,
    thread: Option<JoinHandle<()>>,
}

#[derive(Debug)]
enum Signal {
    Exited(i64),
    Stop,
}

/// What the bounds say after a container's copy grew.
#[derive(Debug, PartialEq, Eq)]
enum Verdict {
    Continue,
    /// Stop copying this container: the named bound is reached and nothing may be evicted.
    Truncate(&'static str),
}

fn now_nanos() -> i64 {
    jiff::Timestamp::now().as_nanosecond() as i64
}

/// A line in the CRI format the copy is in, written by the agent itself.
fn marker(text: &str) -> String {
    format!("{} stderr F [spark-operator agent] {text}\n", jiff::Timestamp::now())
}

impl LogStore {
    /// Opens the store at `--log-store-dir` for node `node`: rebuilds the index from the directory,
    /// resumes copying the containers that were not finished when the agent stopped (from where it
    /// stopped, if their source is still there; else they are marked finished), and applies the bounds.
    pub fn open(args: &LogArgs, node: &str) -> Result<LogStore, Error> {
        let limits = Limits {
            max_bytes: args.log_store_max_bytes,
            max_app_bytes: args.log_store_max_app_bytes,
            max_age: args.log_store_max_age,
            poll: args.log_poll_interval,
        };
        Self::open_with(&args.log_store_dir, node, limits)
    }

    pub(crate) fn open_with(root: &Path, node: &str, limits: Limits) -> Result<LogStore, Error> {
        std::fs::create_dir_all(root).map_err(|source| Error::CreateStore {
            path: root.to_owned(),
            source,
        })?;
        let store = LogStore {
            inner: Arc::new(Inner {
                root: root.to_owned(),
                node: node.to_owned(),
                limits,
                state: Mutex::new(State::default()),
                metrics: Arc::new(LogMetrics::default()),
            }),
        };
        let mut resumed = 0;
        for meta_path in layout::meta_files(root) {
            let meta = match std::fs::read(&meta_path)
                .map_err(|e| e.to_string())
                .and_then(|b| serde_json::from_slice::<ContainerMeta>(&b).map_err(|e| e.to_string()))
            {
                Ok(meta) => meta,
                Err(error) => {
                    tracing::warn!(path = %meta_path.display(), %error, "skipping an unreadable log store entry");
                    continue;
                }
            };
            let Some(dir) = meta_path.parent().map(Path::to_path_buf) else {
                continue;
            };
            if store.resume(meta, dir) {
                resumed += 1;
            }
        }
        let (held, bytes) = {
            let state = store.lock();
            (state.containers.len(), state.total_bytes)
        };
        store.inner.metrics.bytes.set(bytes as i64);
        tracing::info!(root = %root.display(), held, bytes, resumed, "log store opened");
        store.sweep();
        store.start_janitor();
        Ok(store)
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A follower that panicked leaves consistent state behind (every update is one assignment).
        self.inner.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The store's metrics, to register with the runtime's registry.
    pub fn metrics(&self) -> Arc<LogMetrics> {
        self.inner.metrics.clone()
    }

    /// How often followers (and followed reads of a copy) look for more.
    pub fn poll_interval(&self) -> Duration {
        self.inner.limits.poll
    }

    pub fn root(&self) -> &Path {
        &self.inner.root
    }

    /// A container found in the store at open: resume it if it was not finished. True when resumed.
    fn resume(&self, mut meta: ContainerMeta, dir: PathBuf) -> bool {
        let log = dir.join(meta.log_file_name());
        let bytes = std::fs::metadata(&log).map(|m| m.len()).unwrap_or(0);
        let id = meta.container_id.clone();
        let mut follower = None;
        if meta.finished_at.is_none() && meta.truncated && !meta.log_path.exists() {
            // Cut at a bound before the agent stopped, and its source is gone: it ended meanwhile.
            meta.finished_at = Some(now_nanos());
            let _ = layout::write_meta(&dir, &meta);
        }
        if meta.finished_at.is_none() && !meta.truncated {
            let (found, how) = match &meta.checkpoint {
                Some(checkpoint) => {
                    let extra = bytes as i64 - checkpoint.copied as i64;
                    let (f, how) = Follower::resume(&meta.log_path, CHUNK, checkpoint, extra);
                    (Some(f), how)
                }
                None if meta.log_path.exists() => (Some(Follower::start(&meta.log_path, CHUNK)), Resumed::Exactly),
                None => (None, Resumed::SourceGone),
            };
            match how {
                Resumed::SourceGone => {
                    // The pod and its logs went while the agent was away: the copy is all there is.
                    let finished = std::fs::metadata(&log)
                        .and_then(|m| m.modified())
                        .ok()
                        .and_then(|t| jiff::Timestamp::try_from(t).ok())
                        .map_or_else(now_nanos, |t| t.as_nanosecond() as i64);
                    meta.finished_at = Some(finished);
                    meta.checkpoint = None;
                    if let Err(error) = layout::write_meta(&dir, &meta) {
                        tracing::warn!(container_id = %id, error = %error, "could not record a container's end");
                    }
                    tracing::info!(container_id = %id, path = %meta.log_path.display(), "log source gone while the agent was stopped; marked finished");
                }
                Resumed::WithGap => {
                    self.inner.metrics.gaps.inc();
                    tracing::warn!(container_id = %id, path = %meta.log_path.display(), "the file being copied was rotated away while the agent was stopped; lines may be missing");
                    let line = marker(
                        "lines may be missing here: the log was rotated and removed while the agent was not running",
                    );
                    let _ = append(&log, line.as_bytes());
                    follower = found;
                }
                Resumed::Exactly => follower = found,
            }
        }
        let bytes = std::fs::metadata(&log).map(|m| m.len()).unwrap_or(0);
        if let Some(follower) = &follower {
            // Where the copy stands now (after any line the store added): a second restart resumes here.
            meta.checkpoint = follower.checkpoint(bytes);
            if let Err(error) = layout::write_meta(&dir, &meta) {
                tracing::warn!(container_id = %id, %error, "could not checkpoint a container's log copy");
            }
        }
        let running = follower.is_some();
        let mut state = self.lock();
        state.insert(id.clone(), Entry { meta, dir, bytes });
        if let Some(follower) = follower {
            self.spawn_follower(&mut state, &id, follower, log);
        }
        running
    }

    /// A Spark container started (or was found running): copy its log from the beginning. Idempotent: a
    /// container already known is left as it is.
    pub fn container_started(&self, source: LogSource) {
        let id = source.container.container_id.clone();
        let mut meta = ContainerMeta::new(
            &source.container,
            &self.inner.node,
            &source.log_path,
            source.started_at,
            now_nanos(),
        );
        let Some(relative) = meta.relative_dir() else {
            tracing::warn!(container = %source.container, container_id = %id, "not copying a log: a name of the container would leave the store's directory");
            return;
        };
        let dir = self.inner.root.join(relative);
        let mut state = self.lock();
        if state.closed || state.containers.contains_key(&id) {
            return;
        }
        let log = dir.join(meta.log_file_name());
        let created = std::fs::create_dir_all(&dir)
            .and_then(|()| OpenOptions::new().create(true).append(true).open(&log).map(drop))
            .and_then(|()| layout::write_meta(&dir, &meta));
        if let Err(error) = created {
            tracing::warn!(container = %source.container, container_id = %id, dir = %dir.display(), %error, "could not create a container's log copy");
            return;
        }
        let follower = Follower::start(&source.log_path, CHUNK);
        meta.checkpoint = follower.checkpoint(0);
        tracing::info!(container = %source.container, container_id = %id, source = %source.log_path.display(), "copying a container's log");
        state.insert(id.clone(), Entry { meta, dir, bytes: 0 });
        self.spawn_follower(&mut state, &id, follower, log);
    }

    /// A container exited: drain its log to the end, then close it.
    pub fn container_exited(&self, container_id: &str, finished_at: i64) {
        let mut state = self.lock();
        if let Some(handle) = state.followers.get(container_id)
            && handle.signals.send(Signal::Exited(finished_at)).is_ok()
        {
            return;
        }
        // Not being followed (stopped at a bound, or never copied): it is finished now.
        if let Some(entry) = state.containers.get_mut(container_id)
            && entry.meta.finished_at.is_none()
        {
            entry.meta.finished_at = Some(finished_at);
            entry.meta.checkpoint = None;
            if let Err(error) = layout::write_meta(&entry.dir, &entry.meta) {
                tracing::warn!(container_id, %error, "could not record a container's end");
            }
        }
    }

    fn spawn_follower(&self, state: &mut State, id: &str, follower: Follower, log: PathBuf) {
        let (signals, receiver) = mpsc::channel();
        let store = self.clone();
        let container_id = id.to_owned();
        let thread = std::thread::Builder::new()
            .name(format!("log-{}", id.chars().take(12).collect::<String>()))
            .spawn(move || store.follow(&container_id, follower, &log, &receiver));
        match thread {
            Ok(thread) => {
                state.followers.insert(
                    id.to_owned(),
                    Handle {
                        signals,
                        thread: Some(thread),
                    },
                );
                self.inner.metrics.followed.set(state.followers.len() as i64);
            }
            Err(error) => tracing::warn!(container_id = id, %error, "could not start following a container's log"),
        }
    }

    /// One container's follower: copy, checkpoint at every switch of source file, stop at a bound, finish
    /// once the container exited and its log is drained.
    fn follow(&self, id: &str, mut follower: Follower, log: &Path, signals: &mpsc::Receiver<Signal>) {
        let mut copy = match OpenOptions::new().append(true).open(log) {
            Ok(file) => file,
            Err(error) => {
                tracing::warn!(container_id = id, path = %log.display(), %error, "could not open a container's log copy");
                self.finish(id, None, None);
                return;
            }
        };
        let mut length = copy.metadata().map(|m| m.len()).unwrap_or(0);
        let mut exited: Option<i64> = None;
        loop {
            let polled = follower.poll(BUDGET, &mut |bytes| {
                copy.write_all(bytes)?;
                length += bytes.len() as u64;
                Ok(())
            });
            let progress = match polled {
                Ok(progress) => progress,
                Err(error) => {
                    tracing::warn!(container_id = id, %error, "reading a container's log");
                    Default::default()
                }
            };
            if progress.switched {
                self.checkpoint(id, follower.checkpoint(length));
            }
            if progress.copied > 0
                && let Verdict::Truncate(bound) = self.grew(id, progress.copied)
            {
                let line = marker(&format!("the rest of this log was not kept: {bound} was reached"));
                let _ = copy.write_all(line.as_bytes());
                self.add_bytes(id, line.len() as u64);
                self.inner.metrics.truncated.inc();
                tracing::warn!(container_id = id, bound, "stopped copying a container's log at a bound");
                self.finish(id, exited, Some(true));
                return;
            }
            // kubelet removes a container's log directory only once the container is removed: it ended
            // even if its exit was never reported.
            if progress.gone && exited.is_none() && follower.directory_gone() {
                exited = Some(now_nanos());
                continue;
            }
            let signal = if progress.idle {
                if let Some(finished_at) = exited {
                    let mut tail = Vec::new();
                    follower.flush(&mut tail);
                    if !tail.is_empty() && copy.write_all(&tail).is_ok() {
                        self.grew(id, tail.len() as u64);
                    }
                    self.finish(id, Some(finished_at), None);
                    return;
                }
                signals.recv_timeout(self.inner.limits.poll)
            } else {
                signals.try_recv().map_err(|e| match e {
                    TryRecvError::Empty => RecvTimeoutError::Timeout,
                    TryRecvError::Disconnected => RecvTimeoutError::Disconnected,
                })
            };
            match signal {
                Ok(Signal::Exited(at)) => exited = Some(at),
                Ok(Signal::Stop) | Err(RecvTimeoutError::Disconnected) => {
                    self.checkpoint(id, follower.checkpoint(length));
                    return;
                }
                Err(RecvTimeoutError::Timeout) => {}
            }
        }
    }

    fn checkpoint(&self, id: &str, checkpoint: Option<super::follow::Checkpoint>) {
        let mut state = self.lock();
        if let Some(entry) = state.containers.get_mut(id) {
            entry.meta.checkpoint = checkpoint;
            if let Err(error) = layout::write_meta(&entry.dir, &entry.meta) {
                tracing::warn!(container_id = id, %error, "could not checkpoint a container's log copy");
            }
        }
    }

    /// The follower of `id` is done: record the end (when known) and whether it was cut.
    fn finish(&self, id: &str, finished_at: Option<i64>, truncated: Option<bool>) {
        let mut state = self.lock();
        state.followers.remove(id);
        self.inner.metrics.followed.set(state.followers.len() as i64);
        if let Some(entry) = state.containers.get_mut(id) {
            if let Some(at) = finished_at {
                entry.meta.finished_at = Some(at);
            }
            if let Some(truncated) = truncated {
                entry.meta.truncated = truncated;
            }
            entry.meta.checkpoint = None;
            if let Err(error) = layout::write_meta(&entry.dir, &entry.meta) {
                tracing::warn!(container_id = id, %error, "could not record a container's end");
            }
            if finished_at.is_some() {
                tracing::info!(
                    container_id = id,
                    bytes = entry.bytes,
                    "container's log copied to its end"
                );
            }
        }
    }

    fn add_bytes(&self, id: &str, n: u64) {
        self.lock().grow(id, n);
        self.inner.metrics.bytes.add(n as i64);
    }

    /// Counts `n` more bytes of `id`'s copy and applies the size bounds: the application's oldest finished
    /// containers go first when it is over its bound, the oldest finished applications when the store is
    /// over its total; when nothing may go, this container stops copying.
    fn grew(&self, id: &str, n: u64) -> Verdict {
        let mut state = self.lock();
        let Some(app) = state.grow(id, n) else {
            return Verdict::Continue;
        };
        self.inner.metrics.bytes.add(n as i64);
        let limits = self.inner.limits;
        if limits.max_app_bytes > 0 {
            // Only an application over its bound is searched for what may go.
            while state.app_bytes(&app) > limits.max_app_bytes {
                let oldest = state
                    .containers
                    .iter()
                    .filter(|(_, e)| e.meta.namespace == app.0 && e.meta.app_name == app.1)
                    .filter_map(|(cid, e)| e.meta.finished_at.map(|at| (at, cid.clone())))
                    .min();
                let Some((_, victim)) = oldest else {
                    return Verdict::Truncate("--log-store-max-app-bytes");
                };
                self.drop_container(&mut state, &victim);
            }
        }
        if limits.max_bytes > 0 {
            while state.total_bytes > limits.max_bytes {
                let Some(victim) = oldest_finished_app(&state, None) else {
                    return Verdict::Truncate("--log-store-max-bytes");
                };
                self.evict_app(&mut state, &victim, "size");
            }
        }
        Verdict::Continue
    }

    /// Removes one finished container's copy (the per-application bound).
    fn drop_container(&self, state: &mut State, id: &str) {
        let Some(entry) = state.remove(id) else {
            return;
        };
        for name in [entry.meta.log_file_name(), entry.meta.meta_file_name()] {
            let _ = std::fs::remove_file(entry.dir.join(name));
        }
        // Empty directories up to the application's go too.
        let mut dir = entry.dir.clone();
        for _ in 0..3 {
            if std::fs::remove_dir(&dir).is_err() {
                break;
            }
            if !dir.pop() {
                break;
            }
        }
        self.inner.metrics.bytes.add(-(entry.bytes as i64));
        self.inner.metrics.dropped_containers.inc();
        tracing::info!(container_id = id, namespace = %entry.meta.namespace, app = %entry.meta.app_name, bytes = entry.bytes, "dropped a finished container's log: its application is over --log-store-max-app-bytes");
    }

    /// Removes every copy of a finished application.
    fn evict_app(&self, state: &mut State, app: &AppKey, reason: &'static str) {
        let ids: Vec<String> = state
            .containers
            .iter()
            .filter(|(_, e)| e.meta.namespace == app.0 && e.meta.app_name == app.1)
            .map(|(id, _)| id.clone())
            .collect();
        let mut bytes = 0;
        for id in &ids {
            if let Some(entry) = state.remove(id) {
                bytes += entry.bytes;
            }
        }
        let dir = self.inner.root.join(&app.0).join(&app.1);
        if let Err(error) = std::fs::remove_dir_all(&dir)
            && error.kind() != std::io::ErrorKind::NotFound
        {
            tracing::warn!(dir = %dir.display(), %error, "could not remove an evicted application's logs");
        }
        let _ = std::fs::remove_dir(self.inner.root.join(&app.0));
        self.inner.metrics.bytes.add(-(bytes as i64));
        self.inner.metrics.evicted(reason);
        tracing::info!(namespace = %app.0, app = %app.1, containers = ids.len(), bytes, reason, "evicted a finished application's logs");
    }

    /// Applies the bounds that do not wait for a copy to grow: applications finished longer ago than
    /// `--log-store-max-age`, and the total (after a restart with a smaller bound).
    pub fn sweep(&self) {
        let mut state = self.lock();
        let limits = self.inner.limits;
        if !limits.max_age.is_zero() {
            let cutoff = now_nanos().saturating_sub(i64::try_from(limits.max_age.as_nanos()).unwrap_or(i64::MAX));
            while let Some(app) = oldest_finished_app(&state, Some(cutoff)) {
                self.evict_app(&mut state, &app, "age");
            }
        }
        if limits.max_bytes > 0 {
            while state.total_bytes > limits.max_bytes {
                let Some(app) = oldest_finished_app(&state, None) else {
                    break;
                };
                self.evict_app(&mut state, &app, "size");
            }
        }
    }

    fn start_janitor(&self) {
        let (signals, receiver) = mpsc::channel();
        let store = Arc::downgrade(&self.inner);
        let thread = std::thread::Builder::new().name("log-janitor".into()).spawn(move || {
            while let Err(RecvTimeoutError::Timeout) = receiver.recv_timeout(SWEEP_EVERY) {
                let Some(inner) = store.upgrade() else { return };
                LogStore { inner }.sweep();
            }
        });
        if let Ok(thread) = thread {
            self.lock().janitor = Some((signals, thread));
        }
    }

    /// Stops every follower (each checkpoints where it stands, so a store opened later resumes there) and
    /// waits for them. Hooks called afterwards do nothing.
    pub fn close(&self) {
        let threads: Vec<JoinHandle<()>> = {
            let mut state = self.lock();
            state.closed = true;
            let mut threads: Vec<JoinHandle<()>> = state
                .followers
                .values_mut()
                .filter_map(|h| {
                    let _ = h.signals.send(Signal::Stop);
                    h.thread.take()
                })
                .collect();
            if let Some((signals, thread)) = state.janitor.take() {
                let _ = signals.send(Signal::Stop);
                threads.push(thread);
            }
            threads
        };
        for thread in threads {
            let _ = thread.join();
        }
    }

    /// What this node holds for one application, or None when it holds nothing of it.
    pub fn index(&self, namespace: &str, app: &str) -> Option<AppIndex> {
        let state = self.lock();
        let mut executions: BTreeMap<String, Execution> = BTreeMap::new();
        for (id, entry) in &state.containers {
            let meta = &entry.meta;
            if meta.namespace != namespace || meta.app_name != app {
                continue;
            }
            let execution = executions
                .entry(meta.submission_id.clone())
                .or_insert_with(|| Execution {
                    submission_id: meta.submission_id.clone(),
                    first_seen: meta.first_seen,
                    containers: Vec::new(),
                });
            execution.first_seen = execution.first_seen.min(meta.first_seen);
            execution.containers.push(ContainerEntry {
                id: id.clone(),
                role: meta.role.clone(),
                executor_id: meta.executor_id,
                pod: meta.pod_name.clone(),
                container: meta.container_name.clone(),
                attempt: meta.attempt,
                spark_app_id: meta.spark_app_id.clone(),
                started_at: meta.started_at,
                finished_at: meta.finished_at,
                running: state.followers.contains_key(id),
                bytes: entry.bytes,
                truncated: meta.truncated,
            });
        }
        if executions.is_empty() {
            return None;
        }
        let mut executions: Vec<Execution> = executions.into_values().collect();
        for execution in &mut executions {
            execution
                .containers
                .sort_by(|a, b| (a.started_at, &a.pod, a.attempt).cmp(&(b.started_at, &b.pod, b.attempt)));
        }
        executions.sort_by(|a, b| (a.first_seen, &a.submission_id).cmp(&(b.first_seen, &b.submission_id)));
        Some(AppIndex {
            node: self.inner.node.clone(),
            namespace: namespace.to_owned(),
            app_name: app.to_owned(),
            executions,
        })
    }

    /// Where one container's copy is and whether it is still being copied.
    pub fn copy_of(&self, namespace: &str, app: &str, container_id: &str) -> Option<(PathBuf, bool)> {
        let state = self.lock();
        let entry = state.containers.get(container_id)?;
        (entry.meta.namespace == namespace && entry.meta.app_name == app).then(|| {
            (
                entry.dir.join(entry.meta.log_file_name()),
                state.followers.contains_key(container_id),
            )
        })
    }

    /// Whether `container_id`'s copy is still being written (false once finished or gone).
    pub fn is_copying(&self, container_id: &str) -> bool {
        self.lock().followers.contains_key(container_id)
    }
}

/// The finished application (every container finished) with the oldest last finish, if any; with `before`,
/// only one that finished before it.
fn oldest_finished_app(state: &State, before: Option<i64>) -> Option<AppKey> {
    let mut apps: HashMap<(&str, &str), Option<i64>> = HashMap::new();
    for entry in state.containers.values() {
        let key = (entry.meta.namespace.as_str(), entry.meta.app_name.as_str());
        let last = apps.entry(key).or_insert(Some(i64::MIN));
        *last = match (*last, entry.meta.finished_at) {
            (Some(a), Some(b)) => Some(a.max(b)),
            _ => None,
        };
    }
    apps.into_iter()
        .filter_map(|(key, last)| last.map(|at| (at, key)))
        .filter(|(at, _)| before.is_none_or(|cutoff| *at < cutoff))
        .min()
        .map(|(_, (ns, app))| (ns.to_owned(), app.to_owned()))
}

fn append(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut file: File = OpenOptions::new().append(true).create(true).open(path)?;
    file.write_all(bytes)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // a panic in a test is a failed assertion
    use super::*;
    use crate::identity::SparkContainer;
    use spark_operator_api::labels::SparkRole;

    fn entry(app: &str, bytes: u64) -> Entry {
        let container = SparkContainer {
            namespace: "ns".into(),
            app_name: app.into(),
            submission_id: "s".into(),
            spark_app_id: None,
            pod_name: "p".into(),
            pod_uid: "u".into(),
            role: SparkRole::Executor,
            executor_id: Some(1),
            container_name: "c".into(),
            container_id: "id".into(),
            attempt: 0,
        };
        Entry {
            meta: ContainerMeta::new(&container, "n", Path::new("/log"), 0, 0),
            dir: PathBuf::from("/store"),
            bytes,
        }
    }

    /// The sums `State` keeps, recomputed from its containers.
    fn recount(state: &State) -> (u64, BTreeMap<AppKey, (u64, usize)>) {
        let mut apps: BTreeMap<AppKey, (u64, usize)> = BTreeMap::new();
        for entry in state.containers.values() {
            let held = apps.entry(entry.app()).or_default();
            held.0 += entry.bytes;
            held.1 += 1;
        }
        (state.containers.values().map(|e| e.bytes).sum(), apps)
    }

    fn kept(state: &State) -> (u64, BTreeMap<AppKey, (u64, usize)>) {
        let apps = state
            .apps
            .iter()
            .map(|(app, held)| (app.clone(), (held.bytes, held.containers)))
            .collect();
        (state.total_bytes, apps)
    }

    #[test]
    fn the_held_bytes_stay_the_sums_of_the_containers_held() {
        // xorshift: the same 5,000 steps every run.
        let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next = |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        let mut state = State::default();
        for step in 0..5_000 {
            let id = format!("c{}", next(60));
            let app = format!("app-{}", next(4));
            match next(4) {
                // A new container, or one held before that comes back under another application.
                0 => state.insert(id, entry(&app, next(1_000))),
                1 | 2 => {
                    state.grow(&id, next(500));
                }
                _ => {
                    state.remove(&id);
                }
            }
            assert_eq!(kept(&state), recount(&state), "after step {step}");
        }
        // Every application that no longer holds a container is forgotten.
        for id in state.containers.keys().cloned().collect::<Vec<_>>() {
            state.remove(&id);
        }
        assert_eq!((state.total_bytes, state.apps.len()), (0, 0));
    }
}
