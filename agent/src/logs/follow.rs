//! Following one container's CRI log file the way kubelet writes and rotates it.
//!
//! kubelet rotates `0.log` by renaming it to `0.log.<YYYYMMDD-hhmmss>` and having the runtime reopen a new
//! `0.log`; it later gzips or deletes the rotated files, and removes the whole directory once the pod is
//! gone. The follower keeps the file it reads open, so a rename or an unlink never loses what is still in
//! it (Fluent Bit's `st_nlink` rule: drain through the open descriptor, then close). A rotation is seen as
//! `0.log` naming another inode; the old descriptor is drained to its end, rotated files that appeared in
//! between (several rotations between two polls) are read next, oldest first, then the new `0.log` from
//! its start. Only whole records (ending in a newline) are handed out, so a record is never split between
//! two files of the copy, and the position handed out is always a record boundary.

use std::collections::VecDeque;
use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// Which file: device and inode, stable across renames.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileId {
    pub dev: u64,
    pub ino: u64,
}

impl FileId {
    fn of(meta: &std::fs::Metadata) -> Self {
        Self {
            dev: meta.dev(),
            ino: meta.ino(),
        }
    }
}

/// Where the copy stands in the source, persisted so a restarted agent continues where it stopped.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Checkpoint {
    /// The source file being read.
    pub file: FileId,
    /// Bytes of that file already in the copy (a record boundary).
    pub offset: u64,
    /// The copy's length when this checkpoint was taken: every byte of the copy after it came from
    /// `file` from `offset` on, so the copy's real length tells where to continue.
    pub copied: u64,
    /// The newest rotated file name (`0.log.<timestamp>`) read or queued so far, and its file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub watermark: Option<(String, FileId)>,
}

struct Source {
    file: File,
    id: FileId,
    /// Read position in the file.
    read: u64,
}

/// What one poll did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Progress {
    /// Bytes handed out.
    pub copied: u64,
    /// The source file changed (rotation): checkpoint before handing out more.
    pub switched: bool,
    /// Everything written so far has been handed out (nothing more to read right now).
    pub idle: bool,
    /// No file is open and the log path does not exist (the pod's log directory is gone).
    pub gone: bool,
}

/// Follows one CRI log path across rotations.
pub struct Follower {
    path: PathBuf,
    current: Option<Source>,
    queue: VecDeque<Source>,
    watermark: Option<(String, FileId)>,
    /// Bytes read after the last newline of the current file.
    pending: Vec<u8>,
    /// What one read fills, zeroed once: zeroing a chunk on every read (an idle container's follower
    /// reads on every poll) was most of a follower's CPU.
    buffer: Box<[u8]>,
}

impl std::fmt::Debug for Follower {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Follower")
            .field("path", &self.path)
            .field("current", &self.current.as_ref().map(|s| (s.id, s.read)))
            .field("queued", &self.queue.len())
            .finish_non_exhaustive()
    }
}

/// How a resumed follower found its place.
#[derive(Debug, PartialEq, Eq)]
pub enum Resumed {
    /// The file read last is still there: nothing was missed.
    Exactly,
    /// That file is gone (rotated away and deleted while the agent was stopped): continuing with the
    /// files that are left, so some lines may be missing.
    WithGap,
    /// Neither the file nor the log path exists any more.
    SourceGone,
}

impl Follower {
    /// Reads `chunk` bytes at most per read.
    fn new(path: &Path, chunk: usize) -> Self {
        Self {
            path: path.to_owned(),
            current: None,
            queue: VecDeque::new(),
            watermark: None,
            pending: Vec::new(),
            buffer: vec![0; chunk.max(4096)].into_boxed_slice(),
        }
    }

    /// A follower of a container seen for the first time: its rotated files still on disk (oldest first),
    /// then the log path, each from its start, all opened at once so kubelet deleting a rotated file cannot
    /// take it away. A path that does not exist yet is opened on a later poll.
    pub fn start(path: &Path, chunk: usize) -> Self {
        let mut follower = Self::new(path, chunk);
        follower.queue_rotated_and_path();
        follower.current = follower.queue.pop_front();
        follower
    }

    /// A follower continuing from a checkpoint taken by an earlier agent, `extra` bytes after it (the copy
    /// grew by that much after the checkpoint was written).
    pub fn resume(path: &Path, chunk: usize, checkpoint: &Checkpoint, extra: i64) -> (Self, Resumed) {
        let mut follower = Self::new(path, chunk);
        follower.watermark = checkpoint.watermark.clone();
        let offset = checkpoint.offset.saturating_add_signed(extra);
        let at_path = open(path).filter(|(_, id)| *id == checkpoint.file);
        let found = match at_path {
            Some((file, id)) => Some((None, file, id)),
            None => rotated_siblings(path).into_iter().find_map(|(name, p)| {
                open(&p)
                    .filter(|(_, id)| *id == checkpoint.file)
                    .map(|(f, id)| (Some(name), f, id))
            }),
        };
        let resumed = match found {
            Some((rotated_name, mut file, id)) => {
                if file.seek(SeekFrom::Start(offset)).is_err() {
                    return (follower, Resumed::SourceGone);
                }
                follower.current = Some(Source { file, id, read: offset });
                if let Some(name) = rotated_name {
                    // Rotated while the agent was away: later rotated files, then the path, follow.
                    follower.watermark = Some((name, id));
                    follower.queue_rotated_and_path();
                }
                Resumed::Exactly
            }
            None => {
                follower.queue_rotated_and_path();
                follower.current = follower.queue.pop_front();
                if follower.current.is_none() {
                    return (follower, Resumed::SourceGone);
                }
                Resumed::WithGap
            }
        };
        (follower, resumed)
    }

    /// The directory of the log path no longer exists (kubelet removed the pod's logs).
    pub fn directory_gone(&self) -> bool {
        self.path.parent().is_some_and(|dir| !dir.exists())
    }

    /// Where the copy stands, for a checkpoint (`copied`: the copy's length now).
    pub fn checkpoint(&self, copied: u64) -> Option<Checkpoint> {
        self.current.as_ref().map(|s| Checkpoint {
            file: s.id,
            offset: s.read - self.pending.len() as u64,
            copied,
            watermark: self.watermark.clone(),
        })
    }

    /// Rotated files newer than the watermark (all of them without one), oldest first, opened.
    fn rotated_after(&self, held: Option<FileId>) -> Vec<(String, File, FileId)> {
        let mut out = Vec::new();
        for (name, path) in rotated_siblings(&self.path) {
            // An equal name is a newer file only if it replaced the one read under that name (kubelet's
            // rename within the same second).
            let newer = match &self.watermark {
                None => true,
                Some((mark, mark_id)) => {
                    name.as_str() > mark.as_str()
                        || (name == *mark && open(&path).is_some_and(|(_, id)| id != *mark_id))
                }
            };
            if !newer {
                continue;
            }
            if let Some((file, id)) = open(&path)
                && Some(id) != held
            {
                out.push((name, file, id));
            }
        }
        out
    }

    /// Queues the files not yet read, oldest first, each once: the rotated files newer than the
    /// watermark, then the file at the path.
    fn queue_rotated_and_path(&mut self) {
        let held = self.current.as_ref().map(|s| s.id);
        // The path is opened before the rotated files are listed: a rotation between the two then finds
        // the file under its rotated name. Listed first, a file rotated in between was in neither, and the
        // watermark passed it for good.
        let at_path = open(&self.path);
        for (name, file, id) in self.rotated_after(held) {
            self.watermark = Some((name, id));
            // A file queued from the path on an earlier call, rotated since, is listed now: read it once.
            if !self.queue.iter().any(|s| s.id == id) {
                self.queue.push_back(Source { file, id, read: 0 });
            }
        }
        if let Some((file, id)) = at_path
            && Some(id) != held
            && !self.queue.iter().any(|s| s.id == id)
        {
            self.queue.push_back(Source { file, id, read: 0 });
        }
    }

    /// Ends a last record that has no newline (the writer died mid-record): appended to `out` with one.
    pub fn flush(&mut self, out: &mut Vec<u8>) {
        if !self.pending.is_empty() {
            out.append(&mut self.pending);
            out.push(b'\n');
        }
    }

    /// Reads what is there, up to `budget` bytes, handing whole records to `out`. Returns early, with
    /// `switched`, when it moves to another file, so the caller checkpoints before that file is copied.
    pub fn poll(&mut self, budget: u64, out: &mut dyn FnMut(&[u8]) -> io::Result<()>) -> io::Result<Progress> {
        let mut progress = Progress::default();
        loop {
            if progress.copied >= budget {
                return Ok(progress);
            }
            let Some(source) = self.current.as_mut() else {
                // Nothing open: the path did not exist yet, or every file was drained and closed.
                self.queue_rotated_and_path();
                match self.queue.pop_front() {
                    Some(next) => {
                        // Back to the caller first: its checkpoint must name the new file before any
                        // byte of it is copied.
                        self.current = Some(next);
                        progress.switched = true;
                        return Ok(progress);
                    }
                    None => {
                        progress.idle = true;
                        progress.gone = true;
                        return Ok(progress);
                    }
                }
            };
            let read = read_chunk(source, &mut self.pending, &mut self.buffer)?;
            if read > 0 {
                progress.copied += emit_records(&mut self.pending, out)?;
                continue;
            }
            // At the end of the open file. Still the file at the path: wait for more.
            let at_path = std::fs::metadata(&self.path).ok().map(|m| FileId::of(&m));
            if at_path == Some(source.id) && self.queue.is_empty() {
                progress.idle = true;
                return Ok(progress);
            }
            // Rotated (the path names another file), or deleted: whatever the writer put in the old file
            // before the new one existed is there now; drain it to the end through the descriptor.
            let held = source.id;
            while read_chunk(source, &mut self.pending, &mut self.buffer)? > 0 {
                progress.copied += emit_records(&mut self.pending, out)?;
            }
            // A last record without its newline (the writer died mid-write) still ends here.
            if !self.pending.is_empty() {
                self.pending.push(b'\n');
                progress.copied += emit_records(&mut self.pending, out)?;
            }
            // Where did ours go? Its rotated name moves the watermark, so only newer files follow.
            if let Some(name) = rotated_siblings(&self.path)
                .into_iter()
                .find(|(_, p)| std::fs::metadata(p).is_ok_and(|m| FileId::of(&m) == held))
                .map(|(name, _)| name)
                && self
                    .watermark
                    .as_ref()
                    .is_none_or(|(mark, _)| name.as_str() >= mark.as_str())
            {
                self.watermark = Some((name, held));
            }
            self.queue_rotated_and_path();
            self.current = self.queue.pop_front();
            progress.switched = true;
            if self.current.is_none() {
                progress.idle = true;
                progress.gone = true;
            }
            return Ok(progress);
        }
    }
}

/// Reads one chunk from `source` (through `buffer`) onto the end of `pending`; 0 at the end of the file.
fn read_chunk(source: &mut Source, pending: &mut Vec<u8>, buffer: &mut [u8]) -> io::Result<usize> {
    let read = loop {
        match source.file.read(buffer) {
            Ok(n) => break n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    };
    pending.extend_from_slice(&buffer[..read]);
    source.read += read as u64;
    Ok(read)
}

/// Hands out every whole record of `pending`, keeping the unfinished rest.
fn emit_records(pending: &mut Vec<u8>, out: &mut dyn FnMut(&[u8]) -> io::Result<()>) -> io::Result<u64> {
    let Some(last) = pending.iter().rposition(|b| *b == b'\n') else {
        return Ok(0);
    };
    out(&pending[..=last])?;
    pending.drain(..=last);
    Ok(last as u64 + 1)
}

fn open(path: &Path) -> Option<(File, FileId)> {
    let file = File::open(path).ok()?;
    let id = FileId::of(&file.metadata().ok()?);
    Some((file, id))
}

/// kubelet's rotated copies of `path` that are still plain text (`<name>.<timestamp>`, not the `.gz` it
/// compresses them into nor its `.tmp` leftovers), oldest first: the timestamps sort as text.
pub fn rotated_siblings(path: &Path) -> Vec<(String, PathBuf)> {
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
        return Vec::new();
    };
    let prefix = format!("{}.", name.to_string_lossy());
    let mut out: Vec<(String, PathBuf)> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let name = entry.file_name().to_string_lossy().into_owned();
            (name.starts_with(&prefix) && !name.ends_with(".gz") && !name.ends_with(".tmp"))
                .then(|| (name, entry.path()))
        })
        .collect();
    out.sort();
    out
}
