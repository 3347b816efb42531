//! `spark.properties` as Java's `Properties.store` writes it, which is what the driver reads back.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use jiff::Timestamp;
use jiff::tz::TimeZone;

/// The comment Spark writes above the properties (`KubernetesClientUtils.buildSparkConfDirFilesMap`).
pub fn header_comment(config_map_name: &str) -> String {
    format!("Java properties built from Kubernetes config map with name: {config_map_name}")
}

/// `java.util.Date#toString` in UTC (`Sat Nov 22 03:14:00 UTC 2026`), the second comment line
/// `Properties.store` writes.
pub fn java_date(time: Timestamp) -> String {
    time.to_zoned(TimeZone::UTC)
        .strftime("%a %b %d %H:%M:%S UTC %Y")
        .to_string()
}

/// The text of a properties file: the comment, the date, then one `key=value` line per entry, escaped
/// as `Properties.store` escapes them (Java writes them in hash order; sorted here, which readers
/// cannot tell apart).
pub fn render(comment: &str, time: Timestamp, properties: &BTreeMap<String, String>) -> String {
    let mut out = String::with_capacity(64 + properties.len() * 64);
    out.push('#');
    out.push_str(&escape_comment(comment));
    out.push_str("\n#");
    out.push_str(&java_date(time));
    out.push('\n');
    for (key, value) in properties {
        out.push_str(&escape(key, true));
        out.push('=');
        out.push_str(&escape(value, false));
        out.push('\n');
    }
    out
}

/// `Properties.saveConvert` with unicode escaping: `\`, `=`, `:`, `#`, `!` and control characters are
/// escaped, a space only at the start (or anywhere in a key), and everything outside printable ASCII as
/// `\uXXXX` UTF-16 code units.
pub fn escape(text: &str, is_key: bool) -> String {
    let mut out = String::with_capacity(text.len() + 8);
    for (index, c) in text.chars().enumerate() {
        match c {
            '\\' => out.push_str("\\\\"),
            ' ' if index == 0 || is_key => out.push_str("\\ "),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\u{0c}' => out.push_str("\\f"),
            '=' | ':' | '#' | '!' => {
                out.push('\\');
                out.push(c);
            }
            ' '..='~' => out.push(c),
            _ => push_unicode_escape(&mut out, c),
        }
    }
    out
}

fn push_unicode_escape(out: &mut String, c: char) {
    let mut units = [0u16; 2];
    for unit in c.encode_utf16(&mut units) {
        // Writing to a String cannot fail.
        let _ = write!(out, "\\u{unit:04X}");
    }
}

/// `Properties.writeComments`: non-ASCII characters escaped, line breaks continued as new comments.
fn escape_comment(comment: &str) -> String {
    let mut out = String::with_capacity(comment.len());
    for c in comment.chars() {
        match c {
            '\n' => out.push_str("\n#"),
            '\r' => {}
            ' '..='~' => out.push(c),
            _ => push_unicode_escape(&mut out, c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_escaped_as_java_does() {
        assert_eq!(
            escape("k8s://http://127.0.0.1:443", false),
            "k8s\\://http\\://127.0.0.1\\:443"
        );
        assert_eq!(escape("-Dfoo=bar -Dx=y", false), "-Dfoo\\=bar -Dx\\=y");
        assert_eq!(escape("local:///x.zip#x", false), "local\\:///x.zip\\#x");
        assert_eq!(escape(" lead and inner", false), "\\ lead and inner");
        assert_eq!(escape("a key", true), "a\\ key");
        assert_eq!(escape("tab\there\\", false), "tab\\there\\\\");
        assert_eq!(escape("é😀", false), "\\u00E9\\uD83D\\uDE00");
    }

    #[test]
    fn dates_read_like_java_date_to_string() {
        // 2026-11-22T03:14:00Z was a Sunday.
        let time: Timestamp = "2026-11-22T03:14:00Z".parse().unwrap();
        assert_eq!(java_date(time), "Sun Nov 22 03:14:00 UTC 2026");
        let early: Timestamp = "2026-01-05T09:03:07Z".parse().unwrap();
        assert_eq!(java_date(early), "Mon Jan 05 09:03:07 UTC 2026", "days are two digits");
    }

    #[test]
    fn a_file_is_comment_date_then_sorted_lines() {
        let time: Timestamp = "2026-11-22T03:14:00Z".parse().unwrap();
        let properties = BTreeMap::from([
            ("spark.b".to_owned(), "2".to_owned()),
            ("spark.a".to_owned(), "x:y".to_owned()),
        ]);
        assert_eq!(
            render("made for café", time, &properties),
            "#made for caf\\u00E9\n#Sun Nov 22 03:14:00 UTC 2026\nspark.a=x\\:y\nspark.b=2\n"
        );
    }
}
