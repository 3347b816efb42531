//! A copy rendered as `kubectl logs` prints a container's log: the messages of both streams in file order,
//! partial records joined into their line, one line per `\n`.

use std::fs::File;
use std::io::{self, Read};
use std::path::Path;

use crate::cri_log::{LineJoiner, parse_record};

/// A joined line longer than this is cut (kubelet's own limit for `kubectl logs` is none; this keeps a
/// runaway line from taking the agent's memory).
const MAX_LINE_BYTES: usize = 1 << 20;
const CHUNK: usize = 256 * 1024;

/// Reads a copy from its start, incrementally (the copy may still grow).
#[derive(Debug)]
pub struct Reader {
    file: File,
    pending: Vec<u8>,
    joiner: LineJoiner,
    timestamps: bool,
}

impl Reader {
    /// `timestamps`: prefix each line with the timestamp of its first record, as `kubectl logs
    /// --timestamps`.
    pub fn open(path: &Path, timestamps: bool) -> io::Result<Self> {
        Ok(Self {
            file: File::open(path)?,
            pending: Vec::new(),
            joiner: LineJoiner::new(MAX_LINE_BYTES),
            timestamps,
        })
    }

    /// The lines completed by what the copy holds now (at most about one chunk of it); empty at its end.
    /// `Ok(None)` when nothing more could be read.
    pub fn next_chunk(&mut self) -> io::Result<Option<Vec<u8>>> {
        let start = self.pending.len();
        self.pending.resize(start + CHUNK, 0);
        let read = match self.file.read(&mut self.pending[start..]) {
            Ok(n) => n,
            Err(error) => {
                self.pending.truncate(start);
                return Err(error);
            }
        };
        self.pending.truncate(start + read);
        if read == 0 {
            return Ok(None);
        }
        let mut out = Vec::new();
        let Some(last) = self.pending.iter().rposition(|b| *b == b'\n') else {
            return Ok(Some(out));
        };
        for raw in self.pending[..last].split(|b| *b == b'\n') {
            if raw.is_empty() {
                continue;
            }
            if let Ok(record) = parse_record(raw)
                && let Some(line) = self.joiner.push(record)
            {
                self.render(&mut out, &line);
            }
        }
        self.pending.drain(..=last);
        Ok(Some(out))
    }

    /// Lines whose last record never came (the container died mid-line), as they are.
    pub fn finish(&mut self) -> Vec<u8> {
        let mut out = Vec::new();
        for line in self.joiner.flush() {
            self.render(&mut out, &line);
        }
        out
    }

    fn render(&self, out: &mut Vec<u8>, line: &crate::cri_log::Line) {
        if self.timestamps {
            out.extend_from_slice(line.timestamp.as_bytes());
            out.push(b' ');
        }
        out.extend_from_slice(line.text.as_bytes());
        out.push(b'\n');
    }
}

/// The whole copy as `kubectl logs` prints it.
pub fn render_all(path: &Path, timestamps: bool) -> io::Result<Vec<u8>> {
    let mut reader = Reader::open(path, timestamps)?;
    let mut out = Vec::new();
    while let Some(chunk) = reader.next_chunk()? {
        out.extend(chunk);
    }
    out.extend(reader.finish());
    Ok(out)
}
