//! The capture tool's normalization (`shared/tools/spark-submit-oracle/normalize.py`), in Rust: random
//! ids and times become placeholders, and `spark.properties` payloads get their lines sorted. Maps need
//! no sorting here: JSON objects compare regardless of key order.

use serde_json::Value;

pub fn normalize(value: Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(map.into_iter().map(|(k, v)| (k, normalize(v))).collect()),
        Value::Array(items) => Value::Array(items.into_iter().map(normalize).collect()),
        Value::String(text) if text.contains('\n') && text.contains('=') => Value::String(sort_properties(&text)),
        Value::String(text) => Value::String(normalize_text(&text)),
        other => other,
    }
}

/// normalize.py's handling of a properties payload: comment lines first, then the sorted entries.
pub fn sort_properties(text: &str) -> String {
    let text = normalize_text(text);
    let lines: Vec<&str> = text.split('\n').collect();
    let head: Vec<&str> = lines.iter().copied().filter(|l| l.starts_with('#')).collect();
    let mut body: Vec<&str> = lines
        .iter()
        .copied()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    body.sort_unstable();
    let mut out = head.into_iter().chain(body).collect::<Vec<_>>().join("\n");
    out.push('\n');
    out
}

fn is_hex(b: u8) -> bool {
    b.is_ascii_digit() || (b'a'..=b'f').contains(&b)
}

fn hex_run(bytes: &[u8], at: usize, len: usize) -> bool {
    bytes.len() >= at + len && bytes[at..at + len].iter().all(|b| is_hex(*b))
}

/// Rewrites every match of `matcher` (which returns the match length at a position, given the whole
/// text) with what `replace` makes of the matched text, scanning left to right as `re.sub` does.
fn substitute(text: &str, matcher: impl Fn(&[u8], usize) -> Option<usize>, replace: impl Fn(&str) -> String) -> String {
    let bytes = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    while at < bytes.len() {
        if let Some(len) = matcher(bytes, at) {
            out.push_str(&replace(&text[at..at + len]));
            at += len;
        } else {
            let c = text[at..].chars().next().unwrap_or('\u{fffd}');
            out.push(c);
            at += c.len_utf8();
        }
    }
    out
}

/// normalize.py's SUBS, in its order.
pub fn normalize_text(text: &str) -> String {
    // spark-<32 hex>: Spark's application id.
    let text = substitute(
        text,
        |b, i| (b[i..].starts_with(b"spark-") && hex_run(b, i + 6, 32)).then_some(38),
        |_| "<APP_ID>".to_owned(),
    );
    // (?<=-)<16 hex>(?=-): Spark's unique ids inside names.
    let text = substitute(
        &text,
        |b, i| (i > 0 && b[i - 1] == b'-' && hex_run(b, i, 16) && b.get(i + 16) == Some(&b'-')).then_some(16),
        |_| "<UID16>".to_owned(),
    );
    // UUIDs.
    let text = substitute(
        &text,
        |b, i| {
            let groups = [8, 4, 4, 4, 12];
            let mut at = i;
            for (n, len) in groups.iter().enumerate() {
                if !hex_run(b, at, *len) {
                    return None;
                }
                at += len;
                if n < groups.len() - 1 {
                    if b.get(at) != Some(&b'-') {
                        return None;
                    }
                    at += 1;
                }
            }
            Some(at - i)
        },
        |_| "<UUID>".to_owned(),
    );
    let digits_after = |prefix: &'static [u8]| {
        move |b: &[u8], i: usize| {
            if !b[i..].starts_with(prefix) {
                return None;
            }
            let digits = b[i + prefix.len()..].iter().take_while(|c| c.is_ascii_digit()).count();
            (digits > 0).then_some(prefix.len() + digits)
        }
    };
    let text = substitute(&text, digits_after(b"spark.app.submitTime="), |_| {
        "spark.app.submitTime=<SUBMIT_TIME>".to_owned()
    });
    let text = substitute(&text, digits_after(b"127.0.0.1:"), |_| "127.0.0.1:<PORT>".to_owned());
    let text = substitute(&text, digits_after(b"127.0.0.1\\:"), |_| {
        "127.0.0.1\\:<PORT>".to_owned()
    });
    text.split('\n')
        .map(|line| if is_date_comment(line) { "#<DATE>" } else { line })
        .collect::<Vec<_>>()
        .join("\n")
}

/// `^#\w{3} \w{3} \d\d \d\d:\d\d:\d\d \w+ \d{4}$`.
fn is_date_comment(line: &str) -> bool {
    let Some(rest) = line.strip_prefix('#') else {
        return false;
    };
    let parts: Vec<&str> = rest.split(' ').collect();
    let word = |s: &str| !s.is_empty() && s.chars().all(|c| c.is_alphanumeric() || c == '_');
    let digits = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| b.is_ascii_digit());
    let time = |s: &str| {
        let t: Vec<&str> = s.split(':').collect();
        t.len() == 3 && t.iter().all(|p| digits(p, 2))
    };
    parts.len() == 6
        && word(parts[0])
        && parts[0].len() == 3
        && word(parts[1])
        && parts[1].len() == 3
        && digits(parts[2], 2)
        && time(parts[3])
        && word(parts[4])
        && digits(parts[5], 4)
}

#[test]
fn normalization_matches_the_python_tool() {
    let text = "spark-pi-9b5e8aa20138403b-driver-svc spark-0123456789abcdef0123456789abcdef \
                /var/data/spark-0a1b2c3d-0000-4000-8000-00000000000f k8s://http://127.0.0.1:34023";
    assert_eq!(
        normalize_text(text),
        "spark-pi-<UID16>-driver-svc <APP_ID> /var/data/spark-<UUID> k8s://http://127.0.0.1:<PORT>"
    );
    let properties = "#header\n#Sun Nov 22 03:14:00 UTC 2026\nspark.b=1\nspark.app.submitTime=1795316792140\nspark.master=k8s\\://http\\://127.0.0.1\\:34023\n";
    assert_eq!(
        sort_properties(properties),
        "#header\n#<DATE>\nspark.app.submitTime=<SUBMIT_TIME>\nspark.b=1\nspark.master=k8s\\://http\\://127.0.0.1\\:<PORT>\n"
    );
    // Not unique ids: too short, or not between dashes.
    assert_eq!(
        normalize_text("a-0123456789abcde-b x0123456789abcdef-"),
        "a-0123456789abcde-b x0123456789abcdef-"
    );
}
