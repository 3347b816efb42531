//! The container ids whose end this node's agent has captured, kept on disk in the spool directory: a
//! restarted agent (an upgrade, a DaemonSet rollout) does not report again every exited container the
//! runtime still lists (kubelet keeps them until their pod goes). An id is added only once its report is in
//! the spool, so the index can cause a duplicate (a crash in between) but never a loss. Pruned to the
//! containers the runtime still lists: a removed container cannot come back (ids are unique).
//!
//! Format: one id per line, then `crc32c <8 hex digits>` of the lines before it; replaced atomically (tmp +
//! fsync + rename + directory fsync).

use std::collections::{BTreeSet, HashSet};
use std::fs::{self, File};
use std::io::{self, Write as _};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use crate::spool::acks::sync_dir;
use crate::spool::crc32c::crc32c;

const FILE_NAME: &str = "reported";
const TMP_NAME: &str = "reported.tmp";

/// A failed read or write of the index.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot read the index of reported containers {}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot write the index of reported containers {}", path.display())]
    Write {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("the index of reported containers' worker task failed")]
    Worker(#[source] tokio::task::JoinError),
}

fn encode(ids: &BTreeSet<String>) -> String {
    let mut body = String::new();
    for id in ids {
        body.push_str(id);
        body.push('\n');
    }
    let crc = crc32c(body.as_bytes());
    body.push_str(&format!("crc32c {crc:08x}\n"));
    body
}

fn decode(text: &str) -> Option<BTreeSet<String>> {
    let trimmed = text.strip_suffix('\n')?;
    let (body, last) = match trimmed.rfind('\n') {
        Some(at) => (&text[..=at], &trimmed[at + 1..]),
        None => ("", trimmed),
    };
    let crc = u32::from_str_radix(last.strip_prefix("crc32c ")?, 16).ok()?;
    (crc32c(body.as_bytes()) == crc).then(|| body.lines().map(str::to_owned).collect())
}

/// The index, on disk and in memory.
#[derive(Debug)]
pub struct Reported {
    dir: PathBuf,
    ids: BTreeSet<String>,
}

impl Reported {
    /// Reads the index in `dir` (the spool directory). A damaged index is an empty one: ends are
    /// reported again rather than lost.
    pub fn open(dir: &Path) -> Result<Self, Error> {
        let path = dir.join(FILE_NAME);
        let ids = match fs::read_to_string(&path) {
            Ok(text) => decode(&text).unwrap_or_else(|| {
                tracing::warn!(path = %path.display(), "the index of reported containers is damaged; exited containers may be reported again");
                BTreeSet::new()
            }),
            Err(e) if e.kind() == io::ErrorKind::NotFound => BTreeSet::new(),
            Err(source) => return Err(Error::Read { path, source }),
        };
        Ok(Self {
            dir: dir.to_path_buf(),
            ids,
        })
    }

    pub fn contains(&self, container_id: &str) -> bool {
        self.ids.contains(container_id)
    }

    pub fn ids(&self) -> impl Iterator<Item = &str> {
        self.ids.iter().map(String::as_str)
    }

    /// Records a captured end, durably.
    pub fn insert(&mut self, container_id: &str) -> Result<(), Error> {
        if self.ids.insert(container_id.to_owned()) {
            self.persist()?;
        }
        Ok(())
    }

    /// Forgets the containers the runtime no longer lists.
    pub fn retain_listed(&mut self, listed: &HashSet<String>) -> Result<(), Error> {
        let before = self.ids.len();
        self.ids.retain(|id| listed.contains(id));
        if self.ids.len() != before {
            self.persist()?;
        }
        Ok(())
    }

    fn persist(&self) -> Result<(), Error> {
        let path = self.dir.join(FILE_NAME);
        let write = || -> io::Result<()> {
            let tmp = self.dir.join(TMP_NAME);
            let mut file = File::create(&tmp)?;
            file.write_all(encode(&self.ids).as_bytes())?;
            file.sync_all()?;
            drop(file);
            fs::rename(&tmp, &path)?;
            sync_dir(&self.dir)
        };
        write().map_err(|source| Error::Write { path, source })
    }
}

/// The index shared by the capture (inserts) and the CRI watcher (prunes); file work on blocking threads.
#[derive(Clone, Debug)]
pub struct SharedReported(Arc<Mutex<Reported>>);

impl SharedReported {
    pub fn new(reported: Reported) -> Self {
        Self(Arc::new(Mutex::new(reported)))
    }

    /// The ids recorded, now.
    pub fn snapshot(&self) -> Vec<String> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .ids()
            .map(str::to_owned)
            .collect()
    }

    async fn with(&self, f: impl FnOnce(&mut Reported) -> Result<(), Error> + Send + 'static) -> Result<(), Error> {
        let inner = self.0.clone();
        tokio::task::spawn_blocking(move || f(&mut inner.lock().unwrap_or_else(PoisonError::into_inner)))
            .await
            .map_err(Error::Worker)?
    }

    pub async fn insert(&self, container_id: String) -> Result<(), Error> {
        self.with(move |r| r.insert(&container_id)).await
    }

    pub async fn retain_listed(&self, listed: HashSet<String>) -> Result<(), Error> {
        self.with(move |r| r.retain_listed(&listed)).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_index_survives_a_restart_is_pruned_and_a_damaged_one_is_empty() {
        let dir = tempfile::tempdir().unwrap();
        let mut reported = Reported::open(dir.path()).unwrap();
        assert!(!reported.contains("c1"));
        reported.insert("c1").unwrap();
        reported.insert("c2").unwrap();
        let reopened = Reported::open(dir.path()).unwrap();
        assert_eq!(reopened.ids().collect::<Vec<_>>(), ["c1", "c2"]);

        let mut reopened = reopened;
        reopened
            .retain_listed(&["c2".to_owned()].into_iter().collect())
            .unwrap();
        assert_eq!(Reported::open(dir.path()).unwrap().ids().collect::<Vec<_>>(), ["c2"]);

        let path = dir.path().join(FILE_NAME);
        let damaged = fs::read_to_string(&path).unwrap().replace("c2", "c3");
        fs::write(&path, damaged).unwrap();
        assert_eq!(Reported::open(dir.path()).unwrap().ids().count(), 0);
        assert_eq!(decode(&encode(&BTreeSet::new())), Some(BTreeSet::new()));
    }
}
