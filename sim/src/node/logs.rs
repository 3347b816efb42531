//! Container logs in the CRI format that containerd writes and the kubelet reads:
//! `<RFC3339Nano> <stdout|stderr> <F|P> <text>` per line, one file per container run at
//! `<node>/var/log/pods/<ns>_<pod>_<uid>/<container>/<restart>.log`; and the `pods/log`
//! subresource that serves them (`kubectl logs`), with the kubelet's options and errors.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use bytes::Bytes;
use serde_json::Value;

use crate::registry::Gvr;
use crate::status::ApiError;
use crate::store::Store;

/// Why a log file could not be opened for writing.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    #[error("creating the log directory {path}")]
    CreateDir { path: String, source: std::io::Error },
    #[error("opening the log file {path}")]
    Open { path: String, source: std::io::Error },
}

/// Which output a line came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    Stdout,
    Stderr,
}

impl Stream {
    fn as_str(self) -> &'static str {
        match self {
            Stream::Stdout => "stdout",
            Stream::Stderr => "stderr",
        }
    }
}

/// `<node root>/var/log/pods/<ns>_<pod>_<uid>`, the directory the kubelet gives the runtime.
pub fn pod_log_dir(node_root: &Path, namespace: &str, pod: &str, uid: &str) -> PathBuf {
    node_root.join("var/log/pods").join(format!("{namespace}_{pod}_{uid}"))
}

/// The file of one container run.
pub fn container_log_path(
    node_root: &Path,
    namespace: &str,
    pod: &str,
    uid: &str,
    container: &str,
    restart: u32,
) -> PathBuf {
    pod_log_dir(node_root, namespace, pod, uid)
        .join(container)
        .join(format!("{restart}.log"))
}

/// `path` (under `node_root`) as the node sees it: absolute from the node's `/`.
pub fn node_path(node_root: &Path, path: &Path) -> String {
    match path.strip_prefix(node_root) {
        Ok(inside) => format!("/{}", inside.display()),
        Err(_) => path.display().to_string(),
    }
}

/// The node directory of a node in a sim's data directory.
pub fn node_root(data_dir: &Path, node: &str) -> PathBuf {
    data_dir.join("nodes").join(node)
}

/// containerd splits a line longer than this into partial (`P`) records.
pub const MAX_RECORD: usize = 16 * 1024;

/// The kubelet's log rotation policy (`containerLogMaxSize`, `containerLogMaxFiles`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rotation {
    /// Rotate once the file is larger than this; 0: never.
    pub max_size: u64,
    /// Files kept, the current one included (at least 2, as the kubelet requires).
    pub max_files: usize,
}

impl Default for Rotation {
    fn default() -> Self {
        Self {
            max_size: 10 * 1024 * 1024,
            max_files: 5,
        }
    }
}

/// The kubelet's rotated-file suffix format (`20060102-150405`).
const ROTATED_FORMAT: &str = "%Y%m%d-%H%M%S";

#[derive(Debug)]
struct Open {
    file: std::fs::File,
    size: u64,
}

/// Appends lines to one container's log file, as containerd's CRI logger does, and rotates it
/// as the kubelet's container log manager does.
#[derive(Debug)]
pub struct LogWriter {
    path: PathBuf,
    rotation: Rotation,
    file: Mutex<Open>,
}

impl LogWriter {
    pub fn create(path: PathBuf) -> Result<Self, LogError> {
        Self::with_rotation(path, Rotation::default())
    }

    pub fn with_rotation(path: PathBuf, rotation: Rotation) -> Result<Self, LogError> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|source| LogError::CreateDir {
                path: dir.display().to_string(),
                source,
            })?;
        }
        let file = open_append(&path)?;
        let size = file.metadata().map(|m| m.len()).unwrap_or(0);
        Ok(Self {
            path,
            rotation,
            file: Mutex::new(Open { file, size }),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Writes one full line (`F`); text with newlines becomes several lines.
    pub fn line(&self, stream: Stream, text: &str) {
        for l in text.split('\n') {
            self.record(stream, l.as_bytes(), false);
        }
    }

    /// Writes one line of a process's output (without its newline); `partial` when the output
    /// ended without one. Longer than [`MAX_RECORD`]: `P` records, then the rest.
    pub fn record(&self, stream: Stream, text: &[u8], partial: bool) {
        let ts = jiff::Timestamp::now();
        let mut buf = Vec::with_capacity(text.len() + 64);
        let mut chunks = text.chunks(MAX_RECORD).peekable();
        if text.is_empty() {
            buf.extend_from_slice(
                format!("{ts} {} {} \n", stream.as_str(), if partial { "P" } else { "F" }).as_bytes(),
            );
        }
        while let Some(chunk) = chunks.next() {
            let tag = if partial || chunks.peek().is_some() { "P" } else { "F" };
            buf.extend_from_slice(format!("{ts} {} {tag} ", stream.as_str()).as_bytes());
            buf.extend_from_slice(chunk);
            buf.push(b'\n');
        }
        let mut open = self.file.lock().unwrap_or_else(|e| e.into_inner());
        // A full disk loses log lines, as with a real runtime; the container keeps running.
        if let Err(e) = open.file.write_all(&buf) {
            tracing::warn!(path = %self.path.display(), error = %e, "writing a container log line");
            return;
        }
        open.size += buf.len() as u64;
        if self.rotation.max_size > 0 && open.size > self.rotation.max_size {
            self.rotate(&mut open);
        }
    }

    /// The kubelet's `rotateLog`: drop the oldest rotated files beyond `max_files - 2`, rename
    /// the current file to `<name>.<timestamp>` and reopen (containerd's `ReopenContainerLog`).
    fn rotate(&self, open: &mut Open) {
        let Some(name) = self.path.file_name().map(|n| n.to_string_lossy().into_owned()) else {
            return;
        };
        let dir = self.path.parent().unwrap_or(Path::new("."));
        let mut rotated = rotated_files(dir, &name);
        let keep = self.rotation.max_files.max(2) - 2;
        while rotated.len() > keep {
            let oldest = rotated.remove(0);
            if let Err(e) = std::fs::remove_file(&oldest) {
                tracing::warn!(path = %oldest.display(), error = %e, "removing a rotated container log");
            }
        }
        let suffix = jiff::Timestamp::now().strftime(ROTATED_FORMAT).to_string();
        let target = dir.join(format!("{name}.{suffix}"));
        if let Err(e) = std::fs::rename(&self.path, &target) {
            tracing::warn!(path = %self.path.display(), error = %e, "rotating a container log");
            return;
        }
        match open_append(&self.path) {
            Ok(f) => {
                open.file = f;
                open.size = 0;
            }
            Err(e) => tracing::warn!(error = %crate::error_chain::ErrorChain(&e), "reopening a rotated container log"),
        }
    }
}

fn open_append(path: &Path) -> Result<std::fs::File, LogError> {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|source| LogError::Open {
            path: path.display().to_string(),
            source,
        })
}

/// The rotated files of log `name` in `dir`, oldest first (the timestamps sort as text).
pub fn rotated_files(dir: &Path, name: &str) -> Vec<PathBuf> {
    let prefix = format!("{name}.");
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
        .map(|e| e.path())
        .collect();
    out.sort();
    out
}

/// A failed container's termination message under `FallbackToLogsOnError`: the last 80 lines
/// of its log, at most 2048 bytes (the kubelet's limits).
pub fn tail_for_message(path: &Path) -> String {
    let content = std::fs::read_to_string(path).unwrap_or_default();
    let lines = parse(&content);
    let start = lines.len().saturating_sub(80);
    let mut text: String = lines[start..].iter().map(|l| format!("{}\n", l.text)).collect();
    if text.len() > 2048 {
        let mut cut = text.len() - 2048;
        while !text.is_char_boundary(cut) {
            cut += 1;
        }
        text = text[cut..].to_string();
    }
    text
}

/// One parsed log line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogLine {
    pub timestamp: String,
    pub stream: String,
    pub text: String,
}

/// Parses CRI log content, joining partial (`P`) lines with what follows them.
pub fn parse(content: &str) -> Vec<LogLine> {
    let mut out = Vec::new();
    let mut partial: Option<LogLine> = None;
    for raw in content.lines() {
        let mut parts = raw.splitn(4, ' ');
        let (Some(ts), Some(stream), Some(tag)) = (parts.next(), parts.next(), parts.next()) else {
            continue;
        };
        let text = parts.next().unwrap_or("");
        let mut line = match partial.take() {
            Some(mut p) => {
                p.text.push_str(text);
                p
            }
            None => LogLine {
                timestamp: ts.to_string(),
                stream: stream.to_string(),
                text: text.to_string(),
            },
        };
        if tag == "P" {
            partial = Some(line);
            continue;
        }
        line.timestamp = ts.to_string();
        out.push(line);
    }
    out.extend(partial);
    out
}

/// `pods/log` options, as the apiserver's `PodLogOptions`.
#[derive(Debug, Clone, Default)]
pub struct LogQuery {
    pub container: Option<String>,
    pub previous: bool,
    pub follow: bool,
    pub timestamps: bool,
    pub tail_lines: Option<i64>,
    pub since_seconds: Option<i64>,
    pub since_time: Option<String>,
    pub limit_bytes: Option<i64>,
}

/// The body of a `pods/log` answer.
pub enum LogBody {
    Full(Vec<u8>),
    /// `follow=true`: what is there, then new lines until the container stops.
    Follow(futures::stream::BoxStream<'static, Bytes>),
}

/// How often a followed log is checked for new lines.
const FOLLOW_POLL: Duration = Duration::from_millis(100);

/// Serves `GET /api/v1/namespaces/{ns}/pods/{name}/log` from the node's log files.
pub fn pod_log(store: &Store, data_dir: &Path, namespace: &str, name: &str, q: &LogQuery) -> Result<LogBody, ApiError> {
    let pod = store.get(&Gvr::new("", "v1", "pods"), namespace, name)?;
    let container = choose_container(&pod, q.container.as_deref())?;
    let node = pod.pointer("/spec/nodeName").and_then(Value::as_str).unwrap_or("");
    if node.is_empty() {
        // The apiserver has no kubelet to ask and answers with an empty body.
        return Ok(LogBody::Full(Vec::new()));
    }
    let restart = log_attempt(&pod, &container, q.previous)?;
    let uid = crate::meta::uid(&pod);
    let path = container_log_path(&node_root(data_dir, node), namespace, name, uid, &container, restart);
    let content = std::fs::read_to_string(&path).map_err(|e| {
        ApiError::BadRequest(format!(
            "failed to try resolving symlinks in path {:?}: lstat {}: {e}",
            path.display(),
            path.display()
        ))
    })?;
    let since = since_cutoff(q)?;
    let lines: Vec<LogLine> = parse(&content)
        .into_iter()
        .filter(|l| since.as_ref().is_none_or(|s| l.timestamp.as_str() >= s.as_str()))
        .collect();
    let tail = match q.tail_lines {
        Some(n) if n >= 0 => lines.len().saturating_sub(n as usize),
        _ => 0,
    };
    let mut body = render(&lines[tail..], q.timestamps);
    if let Some(limit) = q.limit_bytes.filter(|l| *l >= 0) {
        body.truncate(limit as usize);
    }
    if !q.follow || q.previous {
        return Ok(LogBody::Full(body));
    }
    let state = FollowState {
        cuts: store.watch_cuts(),
        store: store.clone(),
        path,
        namespace: namespace.to_string(),
        name: name.to_string(),
        uid: uid.to_string(),
        container,
        restart,
        offset: content.len(),
        first: Some(body),
        timestamps: q.timestamps,
        done: false,
    };
    Ok(LogBody::Follow(Box::pin(futures::stream::unfold(state, follow_next))))
}

struct FollowState {
    /// Ends the follow when the server cuts its watches (on shutdown): a follow of a container
    /// that never stops would otherwise hold the connection, and the process, open.
    cuts: tokio::sync::watch::Receiver<u64>,
    store: Store,
    path: PathBuf,
    namespace: String,
    name: String,
    uid: String,
    container: String,
    restart: u32,
    offset: usize,
    first: Option<Vec<u8>>,
    timestamps: bool,
    done: bool,
}

async fn follow_next(mut s: FollowState) -> Option<(Bytes, FollowState)> {
    if let Some(first) = s.first.take() {
        return Some((Bytes::from(first), s));
    }
    loop {
        if s.done {
            return None;
        }
        // Read what is new; a line may still be half-written, so only complete lines count.
        let content = std::fs::read(&s.path).unwrap_or_default();
        if content.len() < s.offset {
            // Rotated: the file was renamed and a new one started.
            s.offset = 0;
        }
        let fresh = content.get(s.offset..).unwrap_or_default();
        let complete = fresh.iter().rposition(|b| *b == b'\n').map(|i| i + 1).unwrap_or(0);
        if complete > 0 {
            let text = String::from_utf8_lossy(&fresh[..complete]).into_owned();
            s.offset += complete;
            let body = render(&parse(&text), s.timestamps);
            if !body.is_empty() {
                return Some((Bytes::from(body), s));
            }
            continue;
        }
        if !still_running(&s) {
            s.done = true;
            continue;
        }
        tokio::select! {
            _ = tokio::time::sleep(FOLLOW_POLL) => {}
            _ = s.cuts.changed() => s.done = true,
        }
    }
}

/// Whether the followed container run can still write.
fn still_running(s: &FollowState) -> bool {
    let Some(pod) = s.store.get_stored(
        &crate::registry::ResourceKey {
            group: String::new(),
            resource: "pods".into(),
        },
        &s.namespace,
        &s.name,
    ) else {
        return false;
    };
    if crate::meta::uid(&pod) != s.uid {
        return false;
    }
    let Some(status) = find_status(&pod, &s.container) else {
        return false;
    };
    let restarts = status.get("restartCount").and_then(Value::as_u64).unwrap_or(0) as u32;
    restarts == s.restart && status.pointer("/state/terminated").is_none()
}

fn render(lines: &[LogLine], timestamps: bool) -> Vec<u8> {
    let mut out = Vec::new();
    for l in lines {
        if timestamps {
            out.extend_from_slice(l.timestamp.as_bytes());
            out.push(b' ');
        }
        out.extend_from_slice(l.text.as_bytes());
        out.push(b'\n');
    }
    out
}

fn since_cutoff(q: &LogQuery) -> Result<Option<String>, ApiError> {
    if let Some(t) = q.since_time.as_deref().filter(|t| !t.is_empty()) {
        let ts = crate::meta::parse_time(t).ok_or_else(|| ApiError::BadRequest(format!("invalid sinceTime: {t}")))?;
        return Ok(Some(ts.to_string()));
    }
    if let Some(secs) = q.since_seconds {
        if secs < 1 {
            return Err(ApiError::BadRequest("sinceSeconds must be greater than 0".into()));
        }
        let ts = jiff::Timestamp::now() - jiff::SignedDuration::from_secs(secs);
        return Ok(Some(ts.to_string()));
    }
    Ok(None)
}

fn container_names(pod: &Value, list: &str) -> Vec<String> {
    pod.pointer(&format!("/spec/{list}"))
        .and_then(Value::as_array)
        .map(|cs| {
            cs.iter()
                .filter_map(|c| c.get("name").and_then(Value::as_str))
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

/// The apiserver's `validateContainer`.
fn choose_container(pod: &Value, requested: Option<&str>) -> Result<String, ApiError> {
    let name = crate::meta::name(pod);
    let containers = container_names(pod, "containers");
    let inits = container_names(pod, "initContainers");
    match requested.filter(|c| !c.is_empty()) {
        Some(c) if containers.iter().chain(inits.iter()).any(|n| n == c) => Ok(c.to_string()),
        Some(c) => Err(ApiError::BadRequest(format!(
            "container {c} is not valid for pod {name}"
        ))),
        None if containers.len() == 1 => Ok(containers[0].clone()),
        None => {
            let mut msg = format!(
                "a container name must be specified for pod {name}, choose one of: [{}]",
                containers.join(" ")
            );
            if !inits.is_empty() {
                msg.push_str(&format!(" or one of the init containers: [{}]", inits.join(" ")));
            }
            Err(ApiError::BadRequest(msg))
        }
    }
}

fn find_status<'a>(pod: &'a Value, container: &str) -> Option<&'a Value> {
    ["containerStatuses", "initContainerStatuses"]
        .iter()
        .filter_map(|l| pod.pointer(&format!("/status/{l}")).and_then(Value::as_array))
        .flatten()
        .find(|s| s.get("name").and_then(Value::as_str) == Some(container))
}

/// Which run's file to read, with the kubelet's `validateContainerLogStatus` errors.
/// `restartCount` is the attempt number of the newest container; `lastState` is that newest one
/// while the container waits to restart (CrashLoopBackOff), else the one before it.
fn log_attempt(pod: &Value, container: &str, previous: bool) -> Result<u32, ApiError> {
    let name = crate::meta::name(pod);
    let bad = |m: String| ApiError::BadRequest(m);
    let Some(status) = find_status(pod, container) else {
        return Err(bad(format!(
            "container {container:?} in pod {name:?} is waiting to start: ContainerCreating"
        )));
    };
    let newest = status.get("restartCount").and_then(Value::as_u64).unwrap_or(0) as u32;
    let has_id = |v: Option<&Value>| {
        v.and_then(|t| t.get("containerID"))
            .and_then(Value::as_str)
            .is_some_and(|s| !s.is_empty())
    };
    let last = status.pointer("/lastState/terminated");
    let waiting = status.pointer("/state/waiting").is_some();
    let last_attempt = if waiting { Some(newest) } else { newest.checked_sub(1) };
    if previous {
        return match last_attempt.filter(|_| has_id(last)) {
            Some(a) => Ok(a),
            None => Err(bad(format!(
                "previous terminated container {container:?} in pod {name:?} not found"
            ))),
        };
    }
    if status.pointer("/state/running").is_some() || has_id(status.pointer("/state/terminated")) {
        return Ok(newest);
    }
    if status.pointer("/state/terminated").is_some() || last.is_some() {
        return match last_attempt.filter(|_| has_id(last)) {
            Some(a) => Ok(a),
            None => Err(bad(format!("container {container:?} in pod {name:?} is terminated"))),
        };
    }
    let reason = status
        .pointer("/state/waiting/reason")
        .and_then(Value::as_str)
        .unwrap_or("ContainerCreating");
    let what = match reason {
        "ErrImagePull" => "image can't be pulled".to_string(),
        "ImagePullBackOff" => "trying and failing to pull image".to_string(),
        other => other.to_string(),
    };
    Err(bad(format!(
        "container {container:?} in pod {name:?} is waiting to start: {what}"
    )))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn writes_and_parses_cri_lines() {
        let dir = tempfile::tempdir().unwrap();
        let w = LogWriter::create(dir.path().join("c/0.log")).unwrap();
        w.line(Stream::Stdout, "hello");
        w.line(Stream::Stderr, "a\nb");
        let content = std::fs::read_to_string(w.path()).unwrap();
        for l in content.lines() {
            let parts: Vec<&str> = l.splitn(4, ' ').collect();
            assert!(parts[0].parse::<jiff::Timestamp>().is_ok(), "{l}");
            assert!(parts[0].ends_with('Z'));
            assert_eq!(parts[2], "F");
        }
        let lines = parse(&content);
        assert_eq!(
            lines.iter().map(|l| l.text.as_str()).collect::<Vec<_>>(),
            ["hello", "a", "b"]
        );
        assert_eq!(lines[1].stream, "stderr");
        let joined = parse("t1 stdout P ab\nt2 stdout F cd\n");
        assert_eq!(
            joined,
            vec![LogLine {
                timestamp: "t2".into(),
                stream: "stdout".into(),
                text: "abcd".into()
            }]
        );
    }

    #[test]
    fn kubelet_errors_for_waiting_and_previous() {
        let pod = json!({
            "metadata": { "name": "p" },
            "spec": { "containers": [{ "name": "a" }, { "name": "b" }] },
            "status": { "containerStatuses": [
                { "name": "a", "restartCount": 0, "state": { "waiting": { "reason": "ImagePullBackOff" } } },
                { "name": "b", "restartCount": 2, "state": { "waiting": { "reason": "CrashLoopBackOff" } },
                  "lastState": { "terminated": { "containerID": "containerd://x", "exitCode": 1 } } }
            ] }
        });
        let err = choose_container(&pod, None).unwrap_err().to_string();
        assert_eq!(
            err,
            "a container name must be specified for pod p, choose one of: [a b]"
        );
        let err = log_attempt(&pod, "a", false).unwrap_err().to_string();
        assert_eq!(
            err,
            "container \"a\" in pod \"p\" is waiting to start: trying and failing to pull image"
        );
        assert_eq!(log_attempt(&pod, "b", false).unwrap(), 2);
        assert_eq!(log_attempt(&pod, "b", true).unwrap(), 2);
        let err = log_attempt(&pod, "a", true).unwrap_err().to_string();
        assert_eq!(err, "previous terminated container \"a\" in pod \"p\" not found");
    }

    #[test]
    fn long_lines_become_partial_records_and_files_rotate() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c/0.log");
        let w = LogWriter::with_rotation(
            path.clone(),
            Rotation {
                max_size: 0,
                max_files: 5,
            },
        )
        .unwrap();
        w.record(Stream::Stdout, &vec![b'x'; MAX_RECORD * 2 + 5], false);
        let content = std::fs::read_to_string(&path).unwrap();
        let tags: Vec<&str> = content.lines().map(|l| l.split(' ').nth(2).unwrap()).collect();
        assert_eq!(tags, ["P", "P", "F"]);
        assert_eq!(parse(&content)[0].text.len(), MAX_RECORD * 2 + 5);

        let w = LogWriter::with_rotation(
            dir.path().join("d/0.log"),
            Rotation {
                max_size: 100,
                max_files: 3,
            },
        )
        .unwrap();
        // Old rotated files with distinct names: only the newest max_files - 1 stay.
        for old in [
            "0.log.20200101-000000",
            "0.log.20200101-000001",
            "0.log.20200101-000002",
        ] {
            std::fs::write(dir.path().join("d").join(old), "x").unwrap();
        }
        w.line(Stream::Stdout, &"y".repeat(200));
        let mut names: Vec<String> = std::fs::read_dir(dir.path().join("d"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(names.len(), 3, "{names:?}");
        assert_eq!(names[0], "0.log");
        assert_eq!(names[1], "0.log.20200101-000002");
        assert!(names[2].starts_with("0.log.20") && names[2].len() == "0.log.20261125-101010".len());
        assert_eq!(std::fs::metadata(dir.path().join("d/0.log")).unwrap().len(), 0);
    }
}
