//! The spool's ack file: which records of the segments still on disk were acknowledged, and the next
//! sequence number (so sequences are never reused, even after every segment was deleted). Replaced
//! atomically: written to a temporary file, fsynced, renamed over the old one, and the directory fsynced.
//!
//! Format: `"SPAK" | version u32 | next_seq u64 | count u32 | count × seq u64 | crc32c u32` (little-endian,
//! the checksum over everything before it).

use std::collections::BTreeSet;
use std::fs::{self, File};
use std::io::{self, Write as _};
use std::path::Path;

use super::crc32c::crc32c;

const MAGIC: &[u8; 4] = b"SPAK";
const VERSION: u32 = 1;
pub const FILE_NAME: &str = "acks";
const TMP_NAME: &str = "acks.tmp";

/// What the ack file holds.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Acks {
    pub next_seq: u64,
    pub acked: BTreeSet<u64>,
}

pub fn encode(acks: &Acks) -> Vec<u8> {
    let mut out = Vec::with_capacity(24 + acks.acked.len() * 8);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&VERSION.to_le_bytes());
    out.extend_from_slice(&acks.next_seq.to_le_bytes());
    let count = u32::try_from(acks.acked.len()).unwrap_or(u32::MAX);
    out.extend_from_slice(&count.to_le_bytes());
    for seq in acks.acked.iter().take(count as usize) {
        out.extend_from_slice(&seq.to_le_bytes());
    }
    let crc = crc32c(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

/// None when the bytes are not a whole, intact ack file.
pub fn decode(bytes: &[u8]) -> Option<Acks> {
    let (body, crc) = bytes.split_at_checked(bytes.len().checked_sub(4)?)?;
    if crc32c(body).to_le_bytes() != crc || body.get(..4)? != MAGIC {
        return None;
    }
    let u32_at = |at: usize| Some(u32::from_le_bytes(body.get(at..at + 4)?.try_into().ok()?));
    let u64_at = |at: usize| Some(u64::from_le_bytes(body.get(at..at + 8)?.try_into().ok()?));
    if u32_at(4)? != VERSION {
        return None;
    }
    let next_seq = u64_at(8)?;
    let count = u32_at(16)? as usize;
    if body.len() != 20 + count * 8 {
        return None;
    }
    let acked = (0..count)
        .map(|i| u64_at(20 + i * 8))
        .collect::<Option<BTreeSet<u64>>>()?;
    Some(Acks { next_seq, acked })
}

/// Reads the ack file: Ok(None) when there is none; Err(InvalidData) when it is damaged.
pub fn read(dir: &Path) -> io::Result<Option<Acks>> {
    match fs::read(dir.join(FILE_NAME)) {
        Ok(bytes) => decode(&bytes)
            .map(Some)
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "the ack file is damaged")),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// Replaces the ack file durably.
pub fn write(dir: &Path, acks: &Acks) -> io::Result<()> {
    let tmp = dir.join(TMP_NAME);
    let mut file = File::create(&tmp)?;
    file.write_all(&encode(acks))?;
    file.sync_all()?;
    drop(file);
    fs::rename(&tmp, dir.join(FILE_NAME))?;
    sync_dir(dir)
}

/// fsyncs a directory, so a file created, renamed or removed in it survives a crash.
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ack_files_round_trip_and_damage_is_refused() {
        let acks = Acks {
            next_seq: 42,
            acked: [3, 5, 41].into_iter().collect(),
        };
        let bytes = encode(&acks);
        assert_eq!(decode(&bytes), Some(acks.clone()));
        let mut flipped = bytes.clone();
        flipped[9] ^= 0x10;
        assert_eq!(decode(&flipped), None);
        assert_eq!(decode(&bytes[..bytes.len() - 1]), None);
        assert_eq!(decode(b""), None);

        let dir = tempfile::tempdir().unwrap();
        assert_eq!(read(dir.path()).unwrap(), None);
        write(dir.path(), &acks).unwrap();
        assert_eq!(read(dir.path()).unwrap(), Some(acks));
        assert!(!dir.path().join(TMP_NAME).exists());
    }
}
