//! The CRI container log format that containerd and CRI-O write under `/var/log/pods`:
//! `<RFC3339Nano timestamp> <stdout|stderr> <P|F> <message>\n`, a line longer than the runtime's limit
//! split into `P` (partial) records ended by an `F` (full) one. What `kubectl logs` prints is the messages
//! joined back into lines, which is what the agent's log tail and `spark-operator logs` show too.

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::path::Path;

/// Which stream a record came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stream {
    Stdout,
    Stderr,
}

/// One record of a CRI log file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Record<'a> {
    pub timestamp: &'a str,
    pub stream: Stream,
    /// `P`: the line continues in the next record of the same stream.
    pub partial: bool,
    /// The text, without the trailing newline.
    pub message: &'a [u8],
}

/// Why a line is not a CRI log record.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    #[error("a CRI log record needs a timestamp, a stream, a tag and a message separated by spaces")]
    MissingField,
    #[error("the stream of a CRI log record must be stdout or stderr")]
    BadStream,
    #[error("the tag of a CRI log record must be P or F")]
    BadTag,
    #[error("the timestamp of a CRI log record is not UTF-8")]
    BadTimestamp,
}

/// Parses one record (with or without its trailing newline).
pub fn parse_record(line: &[u8]) -> Result<Record<'_>, ParseError> {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    let mut fields = line.splitn(4, |b| *b == b' ');
    let timestamp = fields
        .next()
        .filter(|t| !t.is_empty())
        .ok_or(ParseError::MissingField)?;
    let stream = match fields.next().ok_or(ParseError::MissingField)? {
        b"stdout" => Stream::Stdout,
        b"stderr" => Stream::Stderr,
        _ => return Err(ParseError::BadStream),
    };
    let partial = match fields.next().ok_or(ParseError::MissingField)? {
        b"P" => true,
        b"F" => false,
        _ => return Err(ParseError::BadTag),
    };
    // An empty full line is written as `<ts> stdout F ` or even without the last space.
    let message = fields.next().unwrap_or_default();
    Ok(Record {
        timestamp: std::str::from_utf8(timestamp).map_err(|_| ParseError::BadTimestamp)?,
        stream,
        partial,
        message,
    })
}

/// One log line with its partial records joined.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Line {
    /// The timestamp of its first record.
    pub timestamp: String,
    pub stream: Stream,
    /// The text, lossily decoded, without a newline.
    pub text: String,
    /// More than the joiner's cap arrived; the rest was dropped.
    pub truncated: bool,
}

/// Joins partial records into lines, per stream (the runtime may interleave stdout and stderr records),
/// keeping at most `max_line_bytes` of one line.
#[derive(Debug)]
pub struct LineJoiner {
    max_line_bytes: usize,
    pending: [Option<Pending>; 2],
}

#[derive(Debug)]
struct Pending {
    timestamp: String,
    bytes: Vec<u8>,
    truncated: bool,
}

impl LineJoiner {
    pub fn new(max_line_bytes: usize) -> Self {
        Self {
            max_line_bytes,
            pending: [None, None],
        }
    }

    fn slot(stream: Stream) -> usize {
        match stream {
            Stream::Stdout => 0,
            Stream::Stderr => 1,
        }
    }

    /// Adds a record; returns the line it completes, if any.
    pub fn push(&mut self, record: Record<'_>) -> Option<Line> {
        let max = self.max_line_bytes;
        let pending = self.pending[Self::slot(record.stream)].get_or_insert_with(|| Pending {
            timestamp: record.timestamp.to_owned(),
            bytes: Vec::new(),
            truncated: false,
        });
        let room = max.saturating_sub(pending.bytes.len());
        if record.message.len() > room {
            pending.bytes.extend_from_slice(&record.message[..room]);
            pending.truncated = true;
        } else {
            pending.bytes.extend_from_slice(record.message);
        }
        if record.partial {
            return None;
        }
        let done = self.pending[Self::slot(record.stream)].take()?;
        Some(Line {
            timestamp: done.timestamp,
            stream: record.stream,
            text: String::from_utf8_lossy(&done.bytes).into_owned(),
            truncated: done.truncated,
        })
    }

    /// Lines still waiting for their last record (a container that died mid-line), as they are.
    pub fn flush(&mut self) -> Vec<Line> {
        let mut lines = Vec::new();
        for (slot, stream) in [(0, Stream::Stdout), (1, Stream::Stderr)] {
            if let Some(done) = self.pending[slot].take() {
                lines.push(Line {
                    timestamp: done.timestamp,
                    stream,
                    text: String::from_utf8_lossy(&done.bytes).into_owned(),
                    truncated: done.truncated,
                });
            }
        }
        lines.sort_by(|a, b| a.timestamp.cmp(&b.timestamp));
        lines
    }
}

/// The last lines of a CRI log file, joined, at most `max_lines` lines and `max_bytes` bytes (whole lines,
/// newest kept), read from at most the file's last `window` bytes. Malformed records are skipped.
pub fn tail(path: &Path, max_lines: usize, max_bytes: usize, window: u64) -> io::Result<String> {
    let mut file = File::open(path)?;
    let len = file.metadata()?.len();
    let start = len.saturating_sub(window);
    file.seek(SeekFrom::Start(start))?;
    let mut bytes = Vec::new();
    file.take(window).read_to_end(&mut bytes)?;
    // Reading from the middle of the file: the first record may be cut; skip to the next one.
    let body = if start > 0 {
        match bytes.iter().position(|b| *b == b'\n') {
            Some(at) => &bytes[at + 1..],
            None => &[][..],
        }
    } else {
        &bytes[..]
    };
    let mut joiner = LineJoiner::new(max_bytes.max(1));
    let mut lines: Vec<String> = Vec::new();
    for raw in body.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
        if let Ok(record) = parse_record(raw)
            && let Some(line) = joiner.push(record)
        {
            lines.push(line.text);
        }
    }
    lines.extend(joiner.flush().into_iter().map(|l| l.text));
    Ok(last_lines(&lines, max_lines, max_bytes))
}

/// The newest whole lines of `lines` within `max_lines` and `max_bytes` (newlines counted), oldest first.
/// A single newest line longer than `max_bytes` is cut to its last `max_bytes` bytes.
pub fn last_lines(lines: &[String], max_lines: usize, max_bytes: usize) -> String {
    let mut kept: Vec<&str> = Vec::new();
    let mut size = 0usize;
    for line in lines.iter().rev().take(max_lines) {
        let cost = line.len() + 1;
        if size + cost > max_bytes {
            if kept.is_empty() {
                let mut from = line.len().saturating_sub(max_bytes.saturating_sub(1));
                while !line.is_char_boundary(from) {
                    from += 1;
                }
                kept.push(&line[from..]);
            }
            break;
        }
        size += cost;
        kept.push(line);
    }
    kept.reverse();
    let mut out = kept.join("\n");
    if !out.is_empty() {
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_parse_and_partials_join_per_stream() {
        let mut joiner = LineJoiner::new(1024);
        let input = [
            "2026-01-01T00:00:00.000000001Z stdout P hello ",
            "2026-01-01T00:00:00.000000002Z stderr F oops",
            "2026-01-01T00:00:00.000000003Z stdout F world",
            "2026-01-01T00:00:00.000000004Z stdout F ",
        ];
        let lines: Vec<Line> = input
            .iter()
            .filter_map(|l| joiner.push(parse_record(l.as_bytes()).unwrap()))
            .collect();
        let texts: Vec<&str> = lines.iter().map(|l| l.text.as_str()).collect();
        assert_eq!(texts, ["oops", "hello world", ""]);
        assert_eq!(lines[1].timestamp, "2026-01-01T00:00:00.000000001Z");
        assert_eq!(lines[0].stream, Stream::Stderr);
    }

    #[test]
    fn malformed_records_are_errors() {
        assert_eq!(parse_record(b"").unwrap_err(), ParseError::MissingField);
        assert_eq!(parse_record(b"ts stdin F x").unwrap_err(), ParseError::BadStream);
        assert_eq!(parse_record(b"ts stdout X x").unwrap_err(), ParseError::BadTag);
        assert_eq!(parse_record(b"ts stdout").unwrap_err(), ParseError::MissingField);
    }

    #[test]
    fn joined_lines_are_capped() {
        let mut joiner = LineJoiner::new(4);
        assert!(joiner.push(parse_record(b"t stdout P abc").unwrap()).is_none());
        let line = joiner.push(parse_record(b"t stdout F def").unwrap()).unwrap();
        assert_eq!(line.text, "abcd");
        assert!(line.truncated);
    }

    #[test]
    fn the_tail_keeps_the_newest_whole_lines_within_bounds() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("0.log");
        let mut body = String::new();
        for i in 0..100 {
            body.push_str(&format!("2026-01-01T00:00:00Z stdout F line {i}\n"));
        }
        body.push_str("2026-01-01T00:00:01Z stderr P cut ");
        std::fs::write(&path, body).unwrap();
        let tail = tail(&path, 3, 4096, 1 << 20).unwrap();
        assert_eq!(tail, "line 98\nline 99\ncut \n");
        // Bytes bound: only what fits, newest first.
        let tail2 = super::tail(&path, 100, 16, 1 << 20).unwrap();
        assert_eq!(tail2, "line 99\ncut \n");
        // A window in the middle of a record skips the cut record.
        let tail3 = super::tail(&path, 2, 4096, 80).unwrap();
        assert_eq!(tail3, "line 99\ncut \n");
    }
}
