//! CRC-32C (Castagnoli), the checksum of the spool's records: table-driven, one byte at a time. Written
//! here rather than taken from a crate: it is twenty lines, and records are small and rare.

/// The reflected Castagnoli polynomial (0x1EDC6F41).
const POLYNOMIAL: u32 = 0x82F6_3B78;

const TABLE: [u32; 256] = table();

const fn table() -> [u32; 256] {
    let mut table = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        #[allow(clippy::cast_possible_truncation)] // i < 256
        let mut crc = i as u32;
        let mut bit = 0;
        while bit < 8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ POLYNOMIAL
            } else {
                crc >> 1
            };
            bit += 1;
        }
        table[i] = crc;
        i += 1;
    }
    table
}

/// Continues a CRC-32C over `data` (start with 0).
pub fn update(crc: u32, data: &[u8]) -> u32 {
    let mut crc = !crc;
    for byte in data {
        crc = TABLE[((crc ^ u32::from(*byte)) & 0xff) as usize] ^ (crc >> 8);
    }
    !crc
}

/// The CRC-32C of `data`.
pub fn crc32c(data: &[u8]) -> u32 {
    update(0, data)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_the_published_check_values() {
        // The CRC catalogue's check value for CRC-32/ISCSI, and RFC 3720 B.4's test patterns.
        assert_eq!(crc32c(b"123456789"), 0xE306_9283);
        assert_eq!(crc32c(&[0u8; 32]), 0x8A91_36AA);
        assert_eq!(crc32c(&[0xffu8; 32]), 0x62A8_AB43);
        let ascending: Vec<u8> = (0u8..32).collect();
        assert_eq!(crc32c(&ascending), 0x46DD_794E);
        assert_eq!(crc32c(b""), 0);
    }

    #[test]
    fn can_be_computed_in_pieces() {
        assert_eq!(update(update(0, b"1234"), b"56789"), crc32c(b"123456789"));
    }
}
