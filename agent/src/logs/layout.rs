//! Where the store keeps what: `<store>/<namespace>/<app>/<submission>/<pod>/<container>/<attempt>.log`
//! (the raw CRI records, so timestamps, streams and partial records are kept) and `<attempt>.json` next to
//! it (who the container is, whether it finished, where the copy stands in the source). The index is these
//! files: a restarted agent rebuilds it by walking the directory.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::follow::Checkpoint;
use crate::identity::SparkContainer;

/// The directory name standing for an empty submission id (a pod without the label). A label value never
/// is `_` alone (it must start and end with a letter or digit).
pub const NO_SUBMISSION: &str = "_";

/// What the store knows of one container, as `<attempt>.json`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContainerMeta {
    pub container_id: String,
    pub namespace: String,
    pub app_name: String,
    /// Empty when the pod had no submission-id label.
    #[serde(default)]
    pub submission_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spark_app_id: Option<String>,
    pub pod_name: String,
    #[serde(default)]
    pub pod_uid: String,
    /// `driver` or `executor`.
    pub role: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub executor_id: Option<i64>,
    pub container_name: String,
    pub attempt: u32,
    /// The node the agent ran on.
    pub node: String,
    /// Nanoseconds since the epoch (the runtime's), 0 when unknown.
    pub started_at: i64,
    /// When the store first saw the container (nanoseconds since the epoch).
    pub first_seen: i64,
    /// When the container finished (the runtime's time), or when the store gave up on its source.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<i64>,
    /// The CRI log path the copy is made from.
    pub log_path: PathBuf,
    /// Copying stopped at a bound (`--log-store-max-app-bytes` or `--log-store-max-bytes`); the copy ends
    /// with a line saying so.
    #[serde(default)]
    pub truncated: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint: Option<Checkpoint>,
}

impl ContainerMeta {
    pub fn new(container: &SparkContainer, node: &str, log_path: &Path, started_at: i64, first_seen: i64) -> Self {
        Self {
            container_id: container.container_id.clone(),
            namespace: container.namespace.clone(),
            app_name: container.app_name.clone(),
            submission_id: container.submission_id.clone(),
            spark_app_id: container.spark_app_id.clone(),
            pod_name: container.pod_name.clone(),
            pod_uid: container.pod_uid.clone(),
            role: container.role.as_str().to_owned(),
            executor_id: container.executor_id,
            container_name: container.container_name.clone(),
            attempt: container.attempt,
            node: node.to_owned(),
            started_at,
            first_seen,
            finished_at: None,
            log_path: log_path.to_owned(),
            truncated: false,
            checkpoint: None,
        }
    }

    /// The directory of this container's files, relative to the store, or None when a name could escape
    /// it (a path separator, `.` or `..`, or empty).
    pub fn relative_dir(&self) -> Option<PathBuf> {
        let submission = if self.submission_id.is_empty() {
            NO_SUBMISSION
        } else {
            self.submission_id.as_str()
        };
        let parts = [
            self.namespace.as_str(),
            self.app_name.as_str(),
            submission,
            self.pod_name.as_str(),
            self.container_name.as_str(),
        ];
        if !parts.iter().all(|p| is_safe_component(p)) {
            return None;
        }
        Some(parts.iter().collect())
    }

    pub fn log_file_name(&self) -> String {
        format!("{}.log", self.attempt)
    }

    pub fn meta_file_name(&self) -> String {
        format!("{}.json", self.attempt)
    }
}

/// A name that is one path component and stays inside its directory.
pub fn is_safe_component(name: &str) -> bool {
    !name.is_empty() && name != "." && name != ".." && !name.contains(['/', '\\', '\0'])
}

/// Every `<attempt>.json` under the store, with its directory: `<ns>/<app>/<sub>/<pod>/<container>/`.
pub fn meta_files(root: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut dirs = vec![(root.to_owned(), 0usize)];
    while let Some((dir, depth)) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let Ok(kind) = entry.file_type() else { continue };
            if kind.is_dir() && depth < 5 {
                dirs.push((path, depth + 1));
            } else if kind.is_file() && depth == 5 && path.extension().is_some_and(|e| e == "json") {
                found.push(path);
            }
        }
    }
    found.sort();
    found
}

/// Writes `meta` next to its log through a temporary file and a rename, so a crash leaves the old or the
/// new one, never half of one.
pub fn write_meta(dir: &Path, meta: &ContainerMeta) -> std::io::Result<()> {
    let body = serde_json::to_vec_pretty(meta).map_err(std::io::Error::other)?;
    let target = dir.join(meta.meta_file_name());
    let temporary = dir.join(format!(".{}.tmp", meta.meta_file_name()));
    std::fs::write(&temporary, body)?;
    std::fs::rename(&temporary, &target)
}
