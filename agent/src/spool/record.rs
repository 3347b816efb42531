//! The spool's record format: `len u32 | crc32c u32 | seq u64 | payload`, little-endian, where `len` is
//! the payload's length and the checksum covers `seq` and the payload (so a record moved to another
//! sequence number fails it too).

use super::crc32c;

/// Bytes before the payload.
pub const HEADER_LEN: usize = 16;

/// No report comes near this; a larger length is a corrupt header, not a record to read.
pub const MAX_PAYLOAD: usize = 16 * 1024 * 1024;

fn checksum(seq: u64, payload: &[u8]) -> u32 {
    crc32c::update(crc32c::crc32c(&seq.to_le_bytes()), payload)
}

/// One record, ready to append.
pub fn encode(seq: u64, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_LEN + payload.len());
    // Callers check the length against MAX_PAYLOAD first.
    let len = u32::try_from(payload.len()).unwrap_or(u32::MAX);
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&checksum(seq, payload).to_le_bytes());
    out.extend_from_slice(&seq.to_le_bytes());
    out.extend_from_slice(payload);
    out
}

/// A record found in a segment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Found {
    pub seq: u64,
    /// Where the record starts in the segment.
    pub offset: u64,
    pub payload_len: u32,
}

/// What a scan of one segment found.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Scan {
    pub records: Vec<Found>,
    /// Records skipped: a bad checksum, or a truncated tail (counted once).
    pub corrupt: u64,
}

fn u32_at(bytes: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(bytes.get(at..at + 4)?.try_into().ok()?))
}

fn u64_at(bytes: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(bytes.get(at..at + 8)?.try_into().ok()?))
}

/// Reads every record of a segment's bytes. A record whose checksum fails is skipped and the scan goes
/// on after it (its length is still plausible); a header cut short, a length past the end or beyond
/// [`MAX_PAYLOAD`] ends the scan (a torn append, or a length that cannot be trusted to find the next
/// record).
pub fn scan(bytes: &[u8]) -> Scan {
    let mut scan = Scan::default();
    let mut at = 0usize;
    while at < bytes.len() {
        let (Some(len), Some(crc), Some(seq)) = (u32_at(bytes, at), u32_at(bytes, at + 4), u64_at(bytes, at + 8))
        else {
            scan.corrupt += 1;
            break;
        };
        let len_usize = len as usize;
        let end = at + HEADER_LEN + len_usize;
        if len_usize > MAX_PAYLOAD || end > bytes.len() {
            scan.corrupt += 1;
            break;
        }
        if checksum(seq, &bytes[at + HEADER_LEN..end]) == crc {
            scan.records.push(Found {
                seq,
                offset: at as u64,
                payload_len: len,
            });
        } else {
            scan.corrupt += 1;
        }
        at = end;
    }
    scan
}

/// The payload of the record at the start of `bytes`, if it is whole and its checksum holds.
pub fn decode_one(bytes: &[u8], seq: u64) -> Option<&[u8]> {
    let len = u32_at(bytes, 0)? as usize;
    let crc = u32_at(bytes, 4)?;
    if u64_at(bytes, 8)? != seq || len > MAX_PAYLOAD {
        return None;
    }
    let payload = bytes.get(HEADER_LEN..HEADER_LEN + len)?;
    (checksum(seq, payload) == crc).then_some(payload)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_damage_is_found() {
        let mut bytes = encode(7, b"seven");
        bytes.extend(encode(8, b""));
        bytes.extend(encode(9, b"nine"));
        let scan = scan(&bytes);
        assert_eq!(scan.corrupt, 0);
        assert_eq!(scan.records.iter().map(|r| r.seq).collect::<Vec<_>>(), [7, 8, 9]);
        let third = &scan.records[2];
        assert_eq!(decode_one(&bytes[third.offset as usize..], 9), Some(&b"nine"[..]));
        assert_eq!(decode_one(&bytes[third.offset as usize..], 8), None, "wrong sequence");

        // A flipped payload bit: that record only is skipped.
        let mut flipped = bytes.clone();
        flipped[HEADER_LEN] ^= 1;
        let damaged = super::scan(&flipped);
        assert_eq!(damaged.corrupt, 1);
        assert_eq!(damaged.records.iter().map(|r| r.seq).collect::<Vec<_>>(), [8, 9]);

        // A torn tail: the whole records before it are kept.
        let torn = &bytes[..bytes.len() - 2];
        let damaged = super::scan(torn);
        assert_eq!((damaged.records.len(), damaged.corrupt), (2, 1));
    }
}
