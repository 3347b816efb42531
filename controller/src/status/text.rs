//! Cutting free text to a byte bound on a character boundary: messages, reasons and Event notes keep their
//! start, log tails keep their end.

/// Cuts `text` to at most `max` bytes on a character boundary.
pub(crate) fn truncate_utf8(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_owned()
}

/// The last `max` bytes of `text`, starting on a character boundary: a log's tail is its end.
pub(crate) fn tail_utf8(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let mut start = text.len() - max;
    while !text.is_char_boundary(start) {
        start += 1;
    }
    text[start..].to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truncation_respects_character_boundaries() {
        assert_eq!(truncate_utf8("héllo", 2), "h");
        assert_eq!(truncate_utf8("abc", 10), "abc");
    }

    #[test]
    fn a_tail_respects_character_boundaries() {
        assert_eq!(tail_utf8("héllo", 4), "llo", "never splits a character");
        assert_eq!(tail_utf8("abc", 10), "abc");
    }
}
