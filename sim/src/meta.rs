//! Small helpers over `metadata` of JSON objects, timestamps and generated names.

use serde_json::{Map, Value, json};

/// `metadata.<field>` as a string, or "".
pub fn str_field<'a>(obj: &'a Value, field: &str) -> &'a str {
    obj.get("metadata")
        .and_then(|m| m.get(field))
        .and_then(Value::as_str)
        .unwrap_or("")
}

pub fn name(obj: &Value) -> &str {
    str_field(obj, "name")
}

pub fn namespace(obj: &Value) -> &str {
    str_field(obj, "namespace")
}

pub fn resource_version(obj: &Value) -> &str {
    str_field(obj, "resourceVersion")
}

pub fn uid(obj: &Value) -> &str {
    str_field(obj, "uid")
}

/// `metadata` as a mutable map, created if missing or not an object.
pub fn metadata_mut(obj: &mut Value) -> &mut Map<String, Value> {
    if !obj.is_object() {
        *obj = json!({});
    }
    let Value::Object(root) = obj else {
        unreachable!("just made an object")
    };
    let meta = root.entry("metadata").or_insert_with(|| json!({}));
    if !meta.is_object() {
        *meta = json!({});
    }
    match meta {
        Value::Object(m) => m,
        _ => unreachable!("just made an object"),
    }
}

pub fn set(obj: &mut Value, field: &str, value: Value) {
    metadata_mut(obj).insert(field.to_string(), value);
}

pub fn remove(obj: &mut Value, field: &str) -> Option<Value> {
    metadata_mut(obj).remove(field)
}

pub fn finalizers(obj: &Value) -> Vec<String> {
    obj.pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).map(str::to_string).collect())
        .unwrap_or_default()
}

pub fn is_deleting(obj: &Value) -> bool {
    obj.pointer("/metadata/deletionTimestamp").is_some_and(|v| !v.is_null())
}

pub fn generation(obj: &Value) -> i64 {
    obj.pointer("/metadata/generation").and_then(Value::as_i64).unwrap_or(0)
}

/// Now, as metav1.Time serializes it (RFC 3339, whole seconds, UTC).
pub fn now_rfc3339() -> String {
    rfc3339(jiff::Timestamp::now())
}

pub fn rfc3339(ts: jiff::Timestamp) -> String {
    ts.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// Parses a metav1.Time or MicroTime.
pub fn parse_time(s: &str) -> Option<jiff::Timestamp> {
    s.parse::<jiff::Timestamp>().ok()
}

/// The alphabet of `utilrand.String`: no vowels (no words) and no confusable characters.
const NAME_ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

/// A random suffix as `generateName` gets: 5 characters.
pub fn random_suffix() -> String {
    let bytes = uuid::Uuid::new_v4().into_bytes();
    bytes
        .iter()
        .take(5)
        .map(|b| NAME_ALPHABET[*b as usize % NAME_ALPHABET.len()] as char)
        .collect()
}

/// Kubernetes' human-readable duration (`duration.HumanDuration`), as tables show ages.
pub fn human_duration(d: std::time::Duration) -> String {
    let secs = d.as_secs() as i64;
    if secs < 0 {
        return "<invalid>".into();
    }
    if secs < 60 * 2 {
        return format!("{secs}s");
    }
    let minutes = secs / 60;
    if minutes < 10 {
        let s = secs % 60;
        return if s == 0 {
            format!("{minutes}m")
        } else {
            format!("{minutes}m{s}s")
        };
    }
    if minutes < 60 * 3 {
        return format!("{minutes}m");
    }
    let hours = secs / 3600;
    if hours < 8 {
        let m = minutes % 60;
        return if m == 0 {
            format!("{hours}h")
        } else {
            format!("{hours}h{m}m")
        };
    }
    if hours < 48 {
        return format!("{hours}h");
    }
    if hours < 24 * 8 {
        let h = hours % 24;
        let days = hours / 24;
        return if h == 0 {
            format!("{days}d")
        } else {
            format!("{days}d{h}h")
        };
    }
    if hours < 24 * 365 * 2 {
        return format!("{}d", hours / 24);
    }
    if hours < 24 * 365 * 8 {
        let days = hours / 24;
        let dy = days % 365;
        return if dy == 0 {
            format!("{}y", days / 365)
        } else {
            format!("{}y{}d", days / 365, dy)
        };
    }
    format!("{}y", hours / 24 / 365)
}

/// The age of a timestamp string as tables show it; `<unknown>` when absent.
pub fn age(timestamp: &str) -> String {
    match parse_time(timestamp) {
        Some(ts) => {
            let now = jiff::Timestamp::now();
            let d = now.duration_since(ts);
            human_duration(std::time::Duration::from_secs(d.as_secs().max(0) as u64))
        }
        None => "<unknown>".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn human_durations_like_kubectl() {
        assert_eq!(human_duration(Duration::from_secs(5)), "5s");
        assert_eq!(human_duration(Duration::from_secs(150)), "2m30s");
        assert_eq!(human_duration(Duration::from_secs(3600)), "60m");
        assert_eq!(human_duration(Duration::from_secs(4 * 3600 + 60)), "4h1m");
        assert_eq!(human_duration(Duration::from_secs(3 * 86400)), "3d");
    }

    #[test]
    fn suffixes_use_the_name_alphabet() {
        let s = random_suffix();
        assert_eq!(s.len(), 5);
        assert!(s.bytes().all(|b| NAME_ALPHABET.contains(&b)));
    }
}
