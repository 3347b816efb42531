//! Reports on disk until the operator acknowledges them. A report counts as captured only once its
//! record is appended to a segment file and fsynced (and, for a new segment, its directory too).
//!
//! - Segment files `seg-<first sequence>.spool` hold records ([`record`]); the process appends to one
//!   active segment and rolls to a new one when it is full or old. After a restart it never appends to an
//!   old segment: a torn tail there stays behind the last whole record, skipped and counted.
//! - The ack file ([`acks`]) lists the acknowledged records of the segments still on disk; a segment whose
//!   records are all acknowledged (or dropped) is deleted.
//! - On open every segment is scanned; unacknowledged records are pending again, in sequence order.
//! - Bounds: the segments' bytes and the age of their newest record. Over a bound, the oldest segments go
//!   whole (their unacknowledged records counted in `spool_dropped_records`).
//!
//! The payload is the `TerminationReport` protobuf; the spool itself does not look inside it.

pub mod acks;
pub mod crc32c;
pub mod record;

use std::collections::{BTreeMap, BTreeSet};
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read as _, Seek as _, SeekFrom, Write as _};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use crate::metrics::AgentMetrics;
use acks::Acks;

const SEGMENT_PREFIX: &str = "seg-";
const SEGMENT_SUFFIX: &str = ".spool";

/// A failed spool operation; each names the file or directory.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot create the spool directory {}", path.display())]
    CreateDir {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot list the spool directory {}", path.display())]
    List {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot read spool segment {}", path.display())]
    ReadSegment {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot create spool segment {}", path.display())]
    CreateSegment {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot append to spool segment {}", path.display())]
    Append {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot delete spool segment {}", path.display())]
    DeleteSegment {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot write the spool's ack file in {}", path.display())]
    WriteAcks {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot sync the spool directory {}", path.display())]
    SyncDir {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("a report of {size} bytes cannot fit in a spool of {max_bytes} bytes; raise --spool-max-bytes")]
    TooLarge { size: usize, max_bytes: u64 },
    #[error("the spool's worker task failed")]
    Worker(#[source] tokio::task::JoinError),
}

/// How much the spool may hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SpoolLimits {
    /// All segment files together.
    pub max_bytes: u64,
    /// A segment whose newest record is older than this is dropped.
    pub max_age: Duration,
    /// A segment is rolled once it reaches this size.
    pub segment_bytes: u64,
}

impl SpoolLimits {
    /// Segments of a sixteenth of the bound (at least 64 KiB), so dropping the oldest segment drops no more
    /// than a sixteenth of the spool; at most 4 MiB, because the ack file lists the acknowledged records of
    /// every segment still on disk and is rewritten on each acknowledgement.
    pub fn new(max_bytes: u64, max_age: Duration) -> Self {
        Self {
            max_bytes,
            max_age,
            segment_bytes: (max_bytes / 16).clamp(64 * 1024, 4 * 1024 * 1024),
        }
    }
}

#[derive(Debug)]
struct Segment {
    path: PathBuf,
    bytes: u64,
    /// The sequences of the intact records in it.
    records: BTreeSet<u64>,
    /// When its newest record was appended (the file's modification time after a restart).
    last_write: SystemTime,
}

#[derive(Debug)]
struct Active {
    first_seq: u64,
    file: File,
    opened: SystemTime,
}

#[derive(Clone, Copy, Debug)]
struct Entry {
    segment: u64,
    offset: u64,
    len: u32,
    captured: SystemTime,
}

/// What opening the spool found.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Recovered {
    pub pending: usize,
    pub corrupt: u64,
    pub segments_deleted: usize,
}

/// The on-disk spool. Blocking: use it from a blocking thread ([`SharedSpool`] does).
#[derive(Debug)]
pub struct Spool {
    dir: PathBuf,
    limits: SpoolLimits,
    segments: BTreeMap<u64, Segment>,
    active: Option<Active>,
    pending: BTreeMap<u64, Entry>,
    acked: BTreeSet<u64>,
    next_seq: u64,
    metrics: Arc<AgentMetrics>,
}

fn segment_name(first_seq: u64) -> String {
    format!("{SEGMENT_PREFIX}{first_seq:020}{SEGMENT_SUFFIX}")
}

fn parse_segment_name(name: &str) -> Option<u64> {
    name.strip_prefix(SEGMENT_PREFIX)?
        .strip_suffix(SEGMENT_SUFFIX)?
        .parse()
        .ok()
}

impl Spool {
    /// Opens (or creates) the spool in `dir`: scans every segment, skips and counts damaged records,
    /// deletes segments with nothing left to send, and makes every unacknowledged record pending again.
    pub fn open(dir: &Path, limits: SpoolLimits, metrics: Arc<AgentMetrics>) -> Result<(Self, Recovered), Error> {
        fs::create_dir_all(dir).map_err(|source| Error::CreateDir {
            path: dir.to_path_buf(),
            source,
        })?;
        let stored = match acks::read(dir) {
            Ok(stored) => stored.unwrap_or_default(),
            Err(error) => {
                // Without it every record is sent again: duplicates, which the receiver tolerates.
                tracing::warn!(dir = %dir.display(), %error, "the spool's ack file cannot be read; resending every record");
                Acks::default()
            }
        };
        let mut spool = Self {
            dir: dir.to_path_buf(),
            limits,
            segments: BTreeMap::new(),
            active: None,
            pending: BTreeMap::new(),
            acked: BTreeSet::new(),
            next_seq: stored.next_seq.max(1),
            metrics,
        };
        let mut recovered = Recovered::default();
        let entries = fs::read_dir(dir).map_err(|source| Error::List {
            path: dir.to_path_buf(),
            source,
        })?;
        let mut found = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|source| Error::List {
                path: dir.to_path_buf(),
                source,
            })?;
            if let Some(first_seq) = entry.file_name().to_str().and_then(parse_segment_name) {
                found.push((first_seq, entry.path()));
            }
        }
        found.sort();
        for (first_seq, path) in found {
            let read_error = |source| Error::ReadSegment {
                path: path.clone(),
                source,
            };
            let bytes = fs::read(&path).map_err(read_error)?;
            let last_write = fs::metadata(&path)
                .and_then(|m| m.modified())
                .unwrap_or_else(|_| SystemTime::now());
            let scan = record::scan(&bytes);
            recovered.corrupt += scan.corrupt;
            let mut records = BTreeSet::new();
            for found in scan.records {
                spool.next_seq = spool.next_seq.max(found.seq + 1);
                records.insert(found.seq);
                if stored.acked.contains(&found.seq) {
                    spool.acked.insert(found.seq);
                } else {
                    spool.pending.insert(
                        found.seq,
                        Entry {
                            segment: first_seq,
                            offset: found.offset,
                            len: found.payload_len,
                            captured: last_write,
                        },
                    );
                }
            }
            spool.segments.insert(
                first_seq,
                Segment {
                    path,
                    bytes: bytes.len() as u64,
                    records,
                    last_write,
                },
            );
        }
        spool.metrics.spool_corrupt_records.add(recovered.corrupt);
        let done: Vec<u64> = spool
            .segments
            .iter()
            .filter(|(_, s)| s.records.iter().all(|seq| !spool.pending.contains_key(seq)))
            .map(|(first, _)| *first)
            .collect();
        recovered.segments_deleted = done.len();
        for first in done {
            spool.delete_segment(first)?;
        }
        if recovered.segments_deleted > 0 || stored.acked != spool.acked {
            spool.persist_acks()?;
        }
        recovered.pending = spool.pending.len();
        spool.update_metrics();
        Ok((spool, recovered))
    }

    /// Appends `payload` as a new record, durably: the record and (for a new segment) the directory are
    /// fsynced before this returns its sequence number. Drops the oldest segments first if the new
    /// record would not fit the bounds.
    pub fn append(&mut self, payload: &[u8], now: SystemTime) -> Result<u64, Error> {
        let size = record::HEADER_LEN + payload.len();
        if payload.len() > record::MAX_PAYLOAD || size as u64 > self.limits.max_bytes {
            return Err(Error::TooLarge {
                size,
                max_bytes: self.limits.max_bytes,
            });
        }
        self.expire(now)?;
        while self.total_bytes() + size as u64 > self.limits.max_bytes {
            let Some(oldest) = self.segments.keys().next().copied() else {
                break;
            };
            self.drop_segment(oldest, "the spool is over its byte bound")?;
        }
        let roll = match (
            &self.active,
            self.active.as_ref().and_then(|a| self.segments.get(&a.first_seq)),
        ) {
            (Some(active), Some(segment)) => {
                segment.bytes + size as u64 > self.limits.segment_bytes
                    || now.duration_since(active.opened).unwrap_or_default() > self.limits.max_age / 8
            }
            _ => true,
        };
        let seq = self.next_seq;
        if roll {
            self.active = None;
            let path = self.dir.join(segment_name(seq));
            let file = OpenOptions::new()
                .create_new(true)
                .append(true)
                .open(&path)
                .map_err(|source| Error::CreateSegment {
                    path: path.clone(),
                    source,
                })?;
            acks::sync_dir(&self.dir).map_err(|source| Error::SyncDir {
                path: self.dir.clone(),
                source,
            })?;
            self.segments.insert(
                seq,
                Segment {
                    path,
                    bytes: 0,
                    records: BTreeSet::new(),
                    last_write: now,
                },
            );
            self.active = Some(Active {
                first_seq: seq,
                file,
                opened: now,
            });
        }
        let Some(active) = self.active.as_mut() else {
            // Just set above.
            return Err(Error::Append {
                path: self.dir.clone(),
                source: io::Error::other("no active segment"),
            });
        };
        let first_seq = active.first_seq;
        let Some(segment) = self.segments.get_mut(&first_seq) else {
            return Err(Error::Append {
                path: self.dir.clone(),
                source: io::Error::other("the active segment is not indexed"),
            });
        };
        let bytes = record::encode(seq, payload);
        let written = active.file.write_all(&bytes).and_then(|()| active.file.sync_data());
        if let Err(source) = written {
            // The segment may end in a partial record now: never append after it.
            let path = segment.path.clone();
            segment.bytes += bytes.len() as u64;
            self.active = None;
            return Err(Error::Append { path, source });
        }
        let offset = segment.bytes;
        segment.bytes += bytes.len() as u64;
        segment.records.insert(seq);
        segment.last_write = now;
        self.next_seq = seq + 1;
        self.pending.insert(
            seq,
            Entry {
                segment: first_seq,
                offset,
                len: u32::try_from(payload.len()).unwrap_or(u32::MAX),
                captured: now,
            },
        );
        self.update_metrics();
        Ok(seq)
    }

    /// Marks a record acknowledged (durably, in the ack file) and deletes its segment once nothing in
    /// it is pending. Acknowledging an unknown or already acknowledged sequence does nothing.
    pub fn ack(&mut self, seq: u64) -> Result<(), Error> {
        self.ack_all(&[seq])
    }

    /// [`Spool::ack`] for several records with one write of the ack file: the receiver answers the
    /// reports of one status write together, and the ack file was replaced (and fsynced) per answer.
    pub fn ack_all(&mut self, seqs: &[u64]) -> Result<(), Error> {
        let mut touched = BTreeSet::new();
        for seq in seqs {
            if let Some(entry) = self.pending.remove(seq) {
                self.acked.insert(*seq);
                touched.insert(entry.segment);
            }
        }
        if touched.is_empty() {
            return Ok(());
        }
        let done: Vec<u64> = touched
            .into_iter()
            .filter(|first| {
                self.segments
                    .get(first)
                    .is_some_and(|s| s.records.iter().all(|r| !self.pending.contains_key(r)))
            })
            .collect();
        let result = done
            .into_iter()
            .try_for_each(|first| self.delete_segment(first))
            .and_then(|()| self.persist_acks());
        self.update_metrics();
        result
    }

    /// The pending (unacknowledged) sequences, oldest first.
    pub fn pending(&self) -> Vec<u64> {
        self.pending.keys().copied().collect()
    }

    pub fn is_pending(&self, seq: u64) -> bool {
        self.pending.contains_key(&seq)
    }

    /// The payload of a pending record, read back from its segment; None when it is not pending, or no
    /// longer intact on disk (then it is counted as corrupt and forgotten).
    pub fn read(&mut self, seq: u64) -> Result<Option<Vec<u8>>, Error> {
        let Some(entry) = self.pending.get(&seq).copied() else {
            return Ok(None);
        };
        let Some(segment) = self.segments.get(&entry.segment) else {
            return Ok(None);
        };
        let path = segment.path.clone();
        let read_error = |source| Error::ReadSegment {
            path: path.clone(),
            source,
        };
        let mut file = File::open(&path).map_err(read_error)?;
        file.seek(SeekFrom::Start(entry.offset)).map_err(read_error)?;
        let mut bytes = vec![0u8; record::HEADER_LEN + entry.len as usize];
        let intact = match file.read_exact(&mut bytes) {
            Ok(()) => record::decode_one(&bytes, seq).map(<[u8]>::to_vec),
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => None,
            Err(source) => return Err(read_error(source)),
        };
        if intact.is_none() {
            tracing::warn!(seq, segment = %path.display(), "a spooled report was damaged on disk; it is lost");
            self.metrics.spool_corrupt_records.inc();
            self.ack(seq)?;
        }
        Ok(intact)
    }

    /// Drops the segments whose newest record is older than the age bound; returns how many pending
    /// records went with them.
    pub fn expire(&mut self, now: SystemTime) -> Result<u64, Error> {
        let old: Vec<u64> = self
            .segments
            .iter()
            .filter(|(_, s)| now.duration_since(s.last_write).unwrap_or_default() > self.limits.max_age)
            .map(|(first, _)| *first)
            .collect();
        let mut dropped = 0;
        for first in old {
            dropped += self.drop_segment(first, "its reports are older than --spool-max-age")?;
        }
        Ok(dropped)
    }

    /// Bytes of the segment files.
    pub fn total_bytes(&self) -> u64 {
        self.segments.values().map(|s| s.bytes).sum()
    }

    /// Deletes a segment with its pending records, counting them as dropped.
    fn drop_segment(&mut self, first: u64, why: &str) -> Result<u64, Error> {
        let Some(segment) = self.segments.get(&first) else {
            return Ok(0);
        };
        let lost: Vec<u64> = segment
            .records
            .iter()
            .copied()
            .filter(|seq| self.pending.contains_key(seq))
            .collect();
        if !lost.is_empty() {
            tracing::warn!(
                segment = %segment.path.display(),
                dropped = lost.len(),
                first = lost.first().copied(),
                last = lost.last().copied(),
                why,
                "dropping unacknowledged reports from the spool"
            );
        }
        for seq in &lost {
            self.pending.remove(seq);
        }
        self.metrics.spool_dropped_records.add(lost.len() as u64);
        self.delete_segment(first)?;
        self.persist_acks()?;
        self.update_metrics();
        Ok(lost.len() as u64)
    }

    fn delete_segment(&mut self, first: u64) -> Result<(), Error> {
        if self.active.as_ref().is_some_and(|a| a.first_seq == first) {
            self.active = None;
        }
        let Some(segment) = self.segments.remove(&first) else {
            return Ok(());
        };
        match fs::remove_file(&segment.path) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(source) => {
                return Err(Error::DeleteSegment {
                    path: segment.path,
                    source,
                });
            }
        }
        for seq in &segment.records {
            self.acked.remove(seq);
        }
        acks::sync_dir(&self.dir).map_err(|source| Error::SyncDir {
            path: self.dir.clone(),
            source,
        })
    }

    fn persist_acks(&self) -> Result<(), Error> {
        let stored = Acks {
            next_seq: self.next_seq,
            acked: self.acked.clone(),
        };
        acks::write(&self.dir, &stored).map_err(|source| Error::WriteAcks {
            path: self.dir.clone(),
            source,
        })
    }

    fn update_metrics(&self) {
        self.metrics
            .spool_records
            .set(i64::try_from(self.pending.len()).unwrap_or(i64::MAX));
        self.metrics
            .spool_bytes
            .set(i64::try_from(self.total_bytes()).unwrap_or(i64::MAX));
        self.metrics
            .set_spool_oldest(self.pending.values().map(|e| e.captured).min());
    }
}

/// The spool shared by the pipeline (appends) and the delivery stream (reads, acks): every operation runs
/// on a blocking thread, and appends wake the delivery stream.
#[derive(Clone, Debug)]
pub struct SharedSpool {
    spool: Arc<Mutex<Spool>>,
    appended: Arc<tokio::sync::Notify>,
}

impl SharedSpool {
    pub fn new(spool: Spool) -> Self {
        Self {
            spool: Arc::new(Mutex::new(spool)),
            appended: Arc::new(tokio::sync::Notify::new()),
        }
    }

    async fn with<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Spool) -> Result<T, Error> + Send + 'static,
    ) -> Result<T, Error> {
        let spool = self.spool.clone();
        tokio::task::spawn_blocking(move || {
            // A poisoned lock means an operation panicked mid-way; the files are the truth and every
            // operation leaves the index consistent with them before it can fail.
            let mut guard = spool.lock().unwrap_or_else(PoisonError::into_inner);
            f(&mut guard)
        })
        .await
        .map_err(Error::Worker)?
    }

    /// Appends durably; the report is captured once this returns.
    pub async fn append(&self, payload: Vec<u8>) -> Result<u64, Error> {
        let seq = self.with(move |s| s.append(&payload, SystemTime::now())).await?;
        self.appended.notify_one();
        Ok(seq)
    }

    pub async fn ack(&self, seq: u64) -> Result<(), Error> {
        self.with(move |s| s.ack(seq)).await
    }

    pub async fn ack_all(&self, seqs: Vec<u64>) -> Result<(), Error> {
        self.with(move |s| s.ack_all(&seqs)).await
    }

    pub async fn read(&self, seq: u64) -> Result<Option<Vec<u8>>, Error> {
        self.with(move |s| s.read(seq)).await
    }

    pub async fn pending(&self) -> Result<Vec<u64>, Error> {
        self.with(|s| Ok(s.pending())).await
    }

    pub async fn expire(&self) -> Result<u64, Error> {
        self.with(|s| s.expire(SystemTime::now())).await
    }

    /// Resolves after the next append (or at once if one happened since the last call).
    pub async fn appended(&self) {
        self.appended.notified().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> SpoolLimits {
        SpoolLimits {
            max_bytes: 1024 * 1024,
            max_age: Duration::from_secs(3600),
            segment_bytes: 256,
        }
    }

    fn open(dir: &Path, limits: SpoolLimits) -> (Spool, Recovered, Arc<AgentMetrics>) {
        let metrics = Arc::new(AgentMetrics::default());
        let (spool, recovered) = Spool::open(dir, limits, metrics.clone()).unwrap();
        (spool, recovered, metrics)
    }

    fn segment_files(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with(SEGMENT_PREFIX))
            .collect();
        names.sort();
        names
    }

    fn payload(i: u64) -> Vec<u8> {
        format!("report number {i} with some bytes").into_bytes()
    }

    #[test]
    fn records_round_trip_and_restart_requeues_what_was_not_acked() {
        let dir = tempfile::tempdir().unwrap();
        let now = SystemTime::now();
        let (mut spool, recovered, metrics) = open(dir.path(), limits());
        assert_eq!(recovered, Recovered::default());
        let seqs: Vec<u64> = (0..10).map(|i| spool.append(&payload(i), now).unwrap()).collect();
        assert_eq!(seqs, (1..=10).collect::<Vec<_>>());
        assert!(segment_files(dir.path()).len() > 1, "small segments roll");
        assert_eq!(spool.read(4).unwrap(), Some(payload(3)));
        for seq in [1, 2, 5, 9] {
            spool.ack(seq).unwrap();
        }
        assert_eq!(spool.read(5).unwrap(), None, "acked");
        assert_eq!(metrics.spool_records.get(), 6);
        drop(spool);

        let (mut spool, recovered, metrics) = open(dir.path(), limits());
        assert_eq!(recovered.pending, 6);
        assert_eq!(recovered.corrupt, 0);
        assert_eq!(spool.pending(), [3, 4, 6, 7, 8, 10]);
        for seq in spool.pending() {
            assert_eq!(spool.read(seq).unwrap(), Some(payload(seq - 1)));
        }
        assert_eq!(metrics.spool_records.get(), 6);
        // Sequences are never reused after a restart.
        assert_eq!(spool.append(b"new", now).unwrap(), 11);
    }

    #[test]
    fn segments_whose_records_are_all_acked_are_deleted_and_sequences_survive_an_empty_spool() {
        let dir = tempfile::tempdir().unwrap();
        let now = SystemTime::now();
        let (mut spool, _, metrics) = open(dir.path(), limits());
        let seqs: Vec<u64> = (0..12).map(|i| spool.append(&payload(i), now).unwrap()).collect();
        let before = segment_files(dir.path());
        assert!(before.len() >= 3, "{before:?}");
        // Acknowledge in reverse: the segments go only once all their records are acked.
        for seq in seqs.iter().rev() {
            spool.ack(*seq).unwrap();
        }
        assert_eq!(segment_files(dir.path()), Vec::<String>::new());
        assert_eq!(metrics.spool_records.get(), 0);
        assert_eq!(metrics.spool_bytes.get(), 0);
        assert_eq!(metrics.spool_oldest_age_seconds(now), 0);
        drop(spool);
        let (mut spool, recovered, _) = open(dir.path(), limits());
        assert_eq!(recovered.pending, 0);
        assert_eq!(spool.append(b"next", now).unwrap(), 13);
    }

    #[test]
    fn records_acknowledged_together_are_written_once_and_stay_acknowledged() {
        let dir = tempfile::tempdir().unwrap();
        let now = SystemTime::now();
        let (mut spool, _, metrics) = open(dir.path(), limits());
        let seqs: Vec<u64> = (0..12).map(|i| spool.append(&payload(i), now).unwrap()).collect();
        let before = segment_files(dir.path());
        // Every record of the first segments and a few of the others, an unknown one and a repeat.
        let acked: Vec<u64> = seqs.iter().copied().filter(|s| *s <= 6 || s % 3 == 0).collect();
        let ack_file = dir.path().join(acks::FILE_NAME);
        spool.ack_all(&[acked.as_slice(), &[99, 3]].concat()).unwrap();
        let written = fs::metadata(&ack_file).unwrap().modified().unwrap();
        let pending: Vec<u64> = seqs.iter().copied().filter(|s| !acked.contains(s)).collect();
        assert_eq!(spool.pending(), pending);
        assert_eq!(metrics.spool_records.get(), pending.len() as i64);
        let after = segment_files(dir.path());
        assert!(
            after.len() < before.len(),
            "segments of acknowledged records go: {before:?} {after:?}"
        );
        // Nothing new to acknowledge: the ack file is not written again.
        spool.ack_all(&acked).unwrap();
        spool.ack_all(&[]).unwrap();
        assert_eq!(fs::metadata(&ack_file).unwrap().modified().unwrap(), written);
        drop(spool);
        let (spool, recovered, _) = open(dir.path(), limits());
        assert_eq!(recovered.pending, pending.len());
        assert_eq!(spool.pending(), pending);
    }

    #[test]
    fn a_damaged_ack_file_resends_rather_than_loses() {
        let dir = tempfile::tempdir().unwrap();
        let now = SystemTime::now();
        let mut big = limits();
        big.segment_bytes = 1024 * 1024;
        let (mut spool, _, _) = open(dir.path(), big);
        for i in 0..3 {
            spool.append(&payload(i), now).unwrap();
        }
        spool.ack(2).unwrap();
        drop(spool);
        let ack_file = dir.path().join(acks::FILE_NAME);
        let mut bytes = fs::read(&ack_file).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 0xff;
        fs::write(&ack_file, bytes).unwrap();
        let (spool, recovered, _) = open(dir.path(), big);
        // The acknowledgement of 2 is lost with the file: 2 goes again (a harmless duplicate).
        assert_eq!(recovered.pending, 3);
        assert_eq!(spool.pending(), [1, 2, 3]);
    }

    #[test]
    fn truncated_and_damaged_records_are_skipped_and_counted() {
        let dir = tempfile::tempdir().unwrap();
        let now = SystemTime::now();
        let mut big = limits();
        big.segment_bytes = 1024 * 1024;
        let (mut spool, _, _) = open(dir.path(), big);
        for i in 0..4 {
            spool.append(&payload(i), now).unwrap();
        }
        drop(spool);
        let files = segment_files(dir.path());
        assert_eq!(files.len(), 1);
        let path = dir.path().join(&files[0]);
        let mut bytes = fs::read(&path).unwrap();
        let one = record::HEADER_LEN + payload(0).len();
        // Record 2: a flipped payload byte. Record 4: a torn tail.
        bytes[one + record::HEADER_LEN + 3] ^= 0x40;
        bytes.truncate(bytes.len() - 5);
        fs::write(&path, &bytes).unwrap();

        let (mut spool, recovered, metrics) = open(dir.path(), big);
        assert_eq!(recovered.corrupt, 2);
        assert_eq!(metrics.spool_corrupt_records.get(), 2);
        assert_eq!(spool.pending(), [1, 3]);
        assert_eq!(spool.read(3).unwrap(), Some(payload(2)));
        // The damaged segment is never appended to again; new records go to a new one, numbered after
        // the last intact record (a torn record was never captured, so its number is free).
        assert_eq!(spool.append(b"after", now).unwrap(), 4);
        assert_eq!(segment_files(dir.path()).len(), 2);
    }

    #[test]
    fn over_the_byte_bound_the_oldest_records_are_dropped_and_counted() {
        let dir = tempfile::tempdir().unwrap();
        let now = SystemTime::now();
        let one = (record::HEADER_LEN + payload(0).len()) as u64;
        let bounded = SpoolLimits {
            max_bytes: one * 6,
            max_age: Duration::from_secs(3600),
            segment_bytes: one * 2,
        };
        let (mut spool, _, metrics) = open(dir.path(), bounded);
        for i in 0..6 {
            spool.append(&payload(i), now).unwrap();
        }
        assert_eq!(metrics.spool_dropped_records.get(), 0);
        spool.append(&payload(6), now).unwrap();
        // The oldest segment (records 1 and 2) made room.
        assert_eq!(metrics.spool_dropped_records.get(), 2);
        assert_eq!(spool.pending(), [3, 4, 5, 6, 7]);
        assert!(spool.total_bytes() <= bounded.max_bytes);
        assert!(matches!(
            spool.append(&vec![0u8; one as usize * 6], now),
            Err(Error::TooLarge { .. })
        ));
        drop(spool);
        let (spool, _, _) = open(dir.path(), bounded);
        assert_eq!(spool.pending(), [3, 4, 5, 6, 7], "the drop is durable");
    }

    #[test]
    fn over_the_age_bound_the_oldest_records_are_dropped_and_counted() {
        let dir = tempfile::tempdir().unwrap();
        let start = SystemTime::now();
        let aged = SpoolLimits {
            max_bytes: 1024 * 1024,
            max_age: Duration::from_secs(60),
            segment_bytes: 1024 * 1024,
        };
        let (mut spool, _, metrics) = open(dir.path(), aged);
        spool.append(&payload(0), start).unwrap();
        spool.append(&payload(1), start).unwrap();
        // Past an eighth of the age bound the active segment rolls, so the old one can age out alone.
        let later = start + Duration::from_secs(30);
        spool.append(&payload(2), later).unwrap();
        assert_eq!(spool.expire(start + Duration::from_secs(59)).unwrap(), 0);
        assert_eq!(spool.expire(start + Duration::from_secs(61)).unwrap(), 2);
        assert_eq!(metrics.spool_dropped_records.get(), 2);
        assert_eq!(spool.pending(), [3]);
        assert_eq!(segment_files(dir.path()).len(), 1);
    }
}
