//! The container ids whose end this node's agent has captured, kept on disk in the spool directory: a
//! restarted agent (an upgrade, a DaemonSet rollout) does not report again every exited container the
//! runtime still lists (kubelet keeps them until their pod goes). An id is added only once its report is in
//! the spool, so the index can cause a duplicate (a crash in between) but never a loss. Pruned to the
//! containers the runtime still lists: a removed container cannot come back (ids are unique).
//!
//! Format: one line per id, `<id> <crc32c of the id, 8 hex digits>`. A captured end appends its line and
//! is not fsynced: a line lost in a crash only costs a duplicate report, which the receiver recognises
//! by its container id, while rewriting and fsyncing the whole index per end was about a quarter of
//! the agent's samples in a profile at 100 ends/s. A line that fails its checksum (a torn append) is
//! skipped. Pruning rewrites the file atomically (tmp + fsync + rename + directory fsync). An index in
//! the earlier format (ids, then one `crc32c <hex>` line over them all) is still read.

use std::collections::{BTreeSet, HashSet};
use std::fs::{self, File, OpenOptions};
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

fn line(id: &str) -> String {
    format!("{id} {:08x}\n", crc32c(id.as_bytes()))
}

fn encode(ids: &BTreeSet<String>) -> String {
    ids.iter().map(|id| line(id)).collect()
}

/// The ids of an index file: its intact lines (a damaged one is skipped), or the earlier format whole.
/// The second value counts the lines skipped.
fn decode(text: &str) -> (BTreeSet<String>, usize) {
    if let Some(ids) = decode_whole(text) {
        return (ids, 0);
    }
    let mut skipped = 0;
    let ids = text
        .lines()
        .filter_map(|l| {
            let intact = l
                .rsplit_once(' ')
                .and_then(|(id, crc)| (u32::from_str_radix(crc, 16).ok()? == crc32c(id.as_bytes())).then_some(id));
            skipped += usize::from(intact.is_none());
            intact.map(str::to_owned)
        })
        .collect();
    (ids, skipped)
}

/// The earlier format: one id per line, then `crc32c <8 hex digits>` of the lines before it.
fn decode_whole(text: &str) -> Option<BTreeSet<String>> {
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
        let (ids, rewrite) = match fs::read(&path) {
            Ok(bytes) => {
                let (ids, skipped) = decode(&String::from_utf8_lossy(&bytes));
                if skipped > 0 {
                    tracing::warn!(path = %path.display(), skipped, "damaged lines in the index of reported containers; their containers may be reported again");
                }
                // Damaged lines, a torn last append or the earlier format: rewritten whole, so appends
                // start on a line of their own.
                let clean =
                    skipped == 0 && bytes.last().is_none_or(|b| *b == b'\n') && encode(&ids).len() == bytes.len();
                (ids, !clean)
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => (BTreeSet::new(), false),
            Err(source) => return Err(Error::Read { path, source }),
        };
        let reported = Self {
            dir: dir.to_path_buf(),
            ids,
        };
        if rewrite {
            reported.persist()?;
        }
        Ok(reported)
    }

    pub fn contains(&self, container_id: &str) -> bool {
        self.ids.contains(container_id)
    }

    pub fn ids(&self) -> impl Iterator<Item = &str> {
        self.ids.iter().map(String::as_str)
    }

    /// Records a captured end (appended, not fsynced: see the module docs).
    pub fn insert(&mut self, container_id: &str) -> Result<(), Error> {
        if !self.ids.insert(container_id.to_owned()) {
            return Ok(());
        }
        let path = self.dir.join(FILE_NAME);
        let append = || -> io::Result<()> {
            let mut file = OpenOptions::new().create(true).append(true).open(&path)?;
            file.write_all(line(container_id).as_bytes())
        };
        append().map_err(|source| Error::Write { path, source })
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

    fn ids(dir: &Path) -> Vec<String> {
        Reported::open(dir).unwrap().ids().map(str::to_owned).collect()
    }

    #[test]
    fn the_index_survives_a_restart_is_pruned_and_a_damaged_line_is_skipped() {
        let dir = tempfile::tempdir().unwrap();
        let mut reported = Reported::open(dir.path()).unwrap();
        assert!(!reported.contains("c1"));
        for id in ["c1", "c2", "c3", "c2"] {
            reported.insert(id).unwrap();
        }
        assert_eq!(ids(dir.path()), ["c1", "c2", "c3"]);
        let path = dir.path().join(FILE_NAME);
        assert_eq!(
            fs::read_to_string(&path).unwrap().lines().count(),
            3,
            "one line per id, appended once"
        );

        let mut reopened = Reported::open(dir.path()).unwrap();
        reopened
            .retain_listed(&["c2".to_owned(), "c3".to_owned()].into_iter().collect())
            .unwrap();
        assert_eq!(ids(dir.path()), ["c2", "c3"]);
        assert!(!dir.path().join(TMP_NAME).exists());

        // A line whose checksum fails (c3 changed on disk) and a torn last append: only they are lost,
        // and only as duplicates to come.
        let damaged = fs::read_to_string(&path).unwrap().replace("\nc3 ", "\nc4 ") + "c5 0123";
        fs::write(&path, damaged).unwrap();
        assert_eq!(ids(dir.path()), ["c2"]);
        let mut reopened = Reported::open(dir.path()).unwrap();
        reopened.insert("c6").unwrap();
        assert_eq!(
            ids(dir.path()),
            ["c2", "c6"],
            "an append after a torn line starts a line of its own"
        );
    }

    #[test]
    fn an_index_in_the_earlier_format_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let body = "c1\nc2\n";
        let earlier = format!("{body}crc32c {:08x}\n", crc32c(body.as_bytes()));
        fs::write(dir.path().join(FILE_NAME), &earlier).unwrap();
        assert_eq!(ids(dir.path()), ["c1", "c2"]);
        // Damaged, it is an empty index: its containers are reported again rather than lost.
        fs::write(dir.path().join(FILE_NAME), earlier.replace("c2", "c3")).unwrap();
        assert_eq!(ids(dir.path()), Vec::<String>::new());
    }
}
