//! The kubelet's AtomicWriter: a volume's files live in a timestamped directory
//! (`..2026_01_02_15_04_05.123456`), `..data` links to it, and each top-level name of the payload
//! links into `..data/`. A new payload goes into a new directory and `..data` is swapped with a
//! rename, so a reader never sees half of an update (kube-rs re-reads its token this way).

use std::collections::BTreeMap;
use std::io;
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::{Path, PathBuf};

const DATA_DIR: &str = "..data";
const DATA_DIR_TMP: &str = "..data_tmp";

/// One file of a payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FileProjection {
    pub data: Vec<u8>,
    pub mode: u32,
    /// Owner to set (projected ServiceAccount tokens of pods that run as one user).
    pub fs_user: Option<u32>,
}

/// Relative path → file.
pub(crate) type Payload = BTreeMap<String, FileProjection>;

#[derive(Debug, thiserror::Error)]
pub(crate) enum WriteError {
    /// A payload path the kubelet refuses (it would leave the volume).
    #[error("invalid path {path:?}: {reason}")]
    InvalidPath { path: String, reason: &'static str },
    #[error("writing {path}")]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> WriteError + '_ {
    move |source| WriteError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// The kubelet's `validatePath`: relative, no `..` element, not starting with `..`.
fn validate_path(path: &str) -> Result<(), WriteError> {
    let invalid = |reason| {
        Err(WriteError::InvalidPath {
            path: path.to_string(),
            reason,
        })
    };
    if path.is_empty() {
        return invalid("must not be empty");
    }
    if path.starts_with('/') {
        return invalid("must be relative path");
    }
    if path.split('/').any(|p| p == "..") {
        return invalid("must not contain '..'");
    }
    if path.starts_with("..") {
        return invalid("must not start with '..'");
    }
    Ok(())
}

/// Writes `payload` into `dir` (which must exist) as the kubelet's AtomicWriter does; a payload
/// equal to what is there already is left alone.
pub(crate) fn write(dir: &Path, payload: &Payload) -> Result<(), WriteError> {
    for path in payload.keys() {
        validate_path(path)?;
    }
    let data_link = dir.join(DATA_DIR);
    let old_ts = std::fs::read_link(&data_link).ok();
    let unchanged = old_ts
        .as_ref()
        .is_some_and(|ts| read_tree(&dir.join(ts)).is_ok_and(|current| same(&current, payload)));
    if !unchanged {
        let ts_name = new_ts_dir(dir)?;
        let ts_dir = dir.join(&ts_name);
        for (path, file) in payload {
            let full = ts_dir.join(path);
            if let Some(parent) = full.parent() {
                std::fs::create_dir_all(parent).map_err(io_err(parent))?;
            }
            std::fs::write(&full, &file.data).map_err(io_err(&full))?;
            std::fs::set_permissions(&full, std::fs::Permissions::from_mode(file.mode)).map_err(io_err(&full))?;
            if let Some(uid) = file.fs_user {
                std::os::unix::fs::lchown(&full, Some(uid), None).map_err(io_err(&full))?;
            }
        }
        let tmp = dir.join(DATA_DIR_TMP);
        let _ = std::fs::remove_file(&tmp);
        symlink(&ts_name, &tmp).map_err(io_err(&tmp))?;
        std::fs::rename(&tmp, &data_link).map_err(io_err(&data_link))?;
    }
    // The user-visible names: one link per top-level element of the payload.
    let wanted: std::collections::BTreeSet<&str> = payload.keys().map(|p| p.split('/').next().unwrap_or(p)).collect();
    for top in &wanted {
        let link = dir.join(top);
        if std::fs::symlink_metadata(&link).is_err() {
            symlink(Path::new(DATA_DIR).join(top), &link).map_err(io_err(&link))?;
        }
    }
    let entries = std::fs::read_dir(dir).map_err(io_err(dir))?;
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with("..") || wanted.contains(name.as_str()) {
            continue;
        }
        // Only the links this writer made go; anything else is not ours.
        if entry.file_type().is_ok_and(|t| t.is_symlink()) {
            let _ = std::fs::remove_file(entry.path());
        }
    }
    if !unchanged && let Some(old) = old_ts {
        let _ = std::fs::remove_dir_all(dir.join(old));
    }
    Ok(())
}

/// `..<UTC time>.<random>`, as the kubelet's `os.MkdirTemp(dir, "..2006_01_02_15_04_05.")`.
fn new_ts_dir(dir: &Path) -> Result<String, WriteError> {
    let stamp = jiff::Timestamp::now().strftime("..%Y_%m_%d_%H_%M_%S.").to_string();
    loop {
        let random = u32::from_le_bytes(uuid::Uuid::new_v4().as_bytes()[..4].try_into().unwrap_or([0; 4]));
        let name = format!("{stamp}{random}");
        let path = dir.join(&name);
        match std::fs::create_dir(&path) {
            Ok(()) => {
                std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).map_err(io_err(&path))?;
                return Ok(name);
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(io_err(&path)(e)),
        }
    }
}

/// Every file under `dir` (relative path → contents and mode).
fn read_tree(dir: &Path) -> io::Result<BTreeMap<String, (Vec<u8>, u32)>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        for entry in std::fs::read_dir(dir.join(&rel))? {
            let entry = entry?;
            let rel_child = rel.join(entry.file_name());
            let meta = entry.metadata()?;
            if meta.is_dir() {
                stack.push(rel_child);
            } else {
                let data = std::fs::read(entry.path())?;
                out.insert(
                    rel_child.to_string_lossy().into_owned(),
                    (data, meta.permissions().mode() & 0o7777),
                );
            }
        }
    }
    Ok(out)
}

fn same(current: &BTreeMap<String, (Vec<u8>, u32)>, payload: &Payload) -> bool {
    current.len() == payload.len()
        && payload.iter().all(|(path, f)| {
            current
                .get(path.trim_end_matches('/'))
                .is_some_and(|(data, mode)| *data == f.data && *mode == f.mode)
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(data: &str, mode: u32) -> FileProjection {
        FileProjection {
            data: data.as_bytes().to_vec(),
            mode,
            fs_user: None,
        }
    }

    fn read(p: &Path) -> String {
        std::fs::read_to_string(p).unwrap_or_else(|e| format!("<{e}>"))
    }

    #[test]
    fn writes_the_kubelet_layout_and_swaps_atomically() {
        let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let dir = tmp.path();
        let mut payload = Payload::new();
        payload.insert("a".into(), file("1", 0o644));
        payload.insert("sub/b".into(), file("2", 0o400));
        write(dir, &payload).unwrap_or_else(|e| panic!("{e}"));
        let ts = std::fs::read_link(dir.join("..data")).unwrap_or_default();
        let ts = ts.to_string_lossy().into_owned();
        assert!(
            ts.starts_with("..") && ts.len() > "..2026_01_01_00_00_00.".len(),
            "{ts}"
        );
        assert_eq!(std::fs::read_link(dir.join("a")).ok(), Some(PathBuf::from("..data/a")));
        assert_eq!(
            std::fs::read_link(dir.join("sub")).ok(),
            Some(PathBuf::from("..data/sub"))
        );
        assert_eq!(read(&dir.join("a")), "1");
        assert_eq!(read(&dir.join("sub/b")), "2");
        let mode = std::fs::metadata(dir.join("sub/b")).map(|m| m.permissions().mode() & 0o777);
        assert_eq!(mode.ok(), Some(0o400));

        // The same payload again: nothing changes.
        write(dir, &payload).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(std::fs::read_link(dir.join("..data")).ok(), Some(PathBuf::from(&ts)));

        // A new payload: new directory, the old one and the dropped name are gone.
        let mut next = Payload::new();
        next.insert("a".into(), file("3", 0o644));
        write(dir, &next).unwrap_or_else(|e| panic!("{e}"));
        let ts2 = std::fs::read_link(dir.join("..data")).unwrap_or_default();
        assert_ne!(ts2, PathBuf::from(&ts));
        assert!(!dir.join(&ts).exists());
        assert!(std::fs::symlink_metadata(dir.join("sub")).is_err());
        assert_eq!(read(&dir.join("a")), "3");
    }

    #[test]
    fn refuses_paths_out_of_the_volume() {
        let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        for bad in ["../x", "/etc/x", "a/../../x", "..x", ""] {
            let mut payload = Payload::new();
            payload.insert(bad.into(), file("", 0o644));
            assert!(
                matches!(write(tmp.path(), &payload), Err(WriteError::InvalidPath { .. })),
                "{bad}"
            );
        }
    }
}
