//! Kubernetes name and label syntax. Each check returns what is wrong, phrased to be appended to a path.

const MAX_LABEL: usize = 63;
const MAX_SUBDOMAIN: usize = 253;

fn is_alnum_lower(c: char) -> bool {
    c.is_ascii_lowercase() || c.is_ascii_digit()
}

/// Whether `value` has a DNS-1123 label's characters and ends, its length aside:
/// `[a-z0-9]([-a-z0-9]*[a-z0-9])?`. The one home of that rule (kube-apiserver's messages, in `kube`, and
/// ours, below, are built on it).
pub(crate) fn has_dns1123_label_chars(value: &str) -> bool {
    dns1123_label_chars_problem(value).is_none()
}

fn dns1123_label_chars_problem(label: &str) -> Option<&'static str> {
    if !label.chars().all(|c| is_alnum_lower(c) || c == '-') {
        return Some("may contain only lower-case letters, digits and '-'");
    }
    if !label.starts_with(is_alnum_lower) || !label.ends_with(is_alnum_lower) {
        return Some("must start and end with a lower-case letter or digit");
    }
    None
}

/// What is wrong with a DNS-1123 label (a namespace, a container name), phrased to follow the value; None
/// when it is one.
pub fn dns1123_label_problem(label: &str) -> Option<&'static str> {
    if label.is_empty() {
        return Some("is empty");
    }
    if label.len() > MAX_LABEL {
        return Some("is longer than 63 characters");
    }
    dns1123_label_chars_problem(label)
}

/// A DNS-1035 label (Service names, and so SparkApplication names): `[a-z]([-a-z0-9]*[a-z0-9])?`, at most
/// 63 characters.
pub fn dns1035_label(name: &str) -> Result<(), String> {
    if let Some(problem) = dns1123_label_problem(name) {
        return Err(format!(
            "{name:?} {problem}: use at most 63 lower-case letters, digits and '-', starting with a letter"
        ));
    }
    if !name.starts_with(|c: char| c.is_ascii_lowercase()) {
        return Err(format!(
            "{name:?} must start with a lower-case letter (it names Services, which are DNS-1035 labels)"
        ));
    }
    Ok(())
}

/// What is wrong with a DNS-1123 subdomain (pod and ConfigMap names: dot-separated DNS-1123 labels, at
/// most 253 characters), phrased to follow the value; None when it is one.
pub fn dns1123_subdomain_problem(name: &str) -> Option<String> {
    if name.len() > MAX_SUBDOMAIN {
        return Some("is longer than 253 characters".into());
    }
    name.split('.').find_map(|label| {
        dns1123_label_problem(label).map(|problem| format!("is not a DNS-1123 subdomain: the part {label:?} {problem}"))
    })
}

/// A DNS-1123 subdomain (pod and ConfigMap names): dot-separated DNS-1123 labels, at most 253 characters.
pub fn dns1123_subdomain(name: &str) -> Result<(), String> {
    match dns1123_subdomain_problem(name) {
        None => Ok(()),
        Some(problem) if name.len() > MAX_SUBDOMAIN => Err(format!("{name:?} {problem}")),
        Some(problem) => Err(format!(
            "{name:?} {problem}; use lower-case letters, digits, '-' and '.', starting and ending with a letter or digit"
        )),
    }
}

fn qualified_name_problem(name: &str) -> Option<&'static str> {
    if name.is_empty() {
        return Some("is empty");
    }
    if name.len() > MAX_LABEL {
        return Some("is longer than 63 characters");
    }
    if !name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    {
        return Some("may contain only letters, digits, '-', '_' and '.'");
    }
    if !name.starts_with(|c: char| c.is_ascii_alphanumeric()) || !name.ends_with(|c: char| c.is_ascii_alphanumeric()) {
        return Some("must start and end with a letter or digit");
    }
    None
}

/// A label or annotation key: `[prefix/]name`, the prefix a DNS-1123 subdomain, the name at most 63 characters.
pub fn label_key(key: &str) -> Result<(), String> {
    let (prefix, name) = match key.rsplit_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    if let Some(prefix) = prefix
        && dns1123_subdomain(prefix).is_err()
    {
        return Err(format!(
            "key {key:?} has an invalid prefix {prefix:?}: the prefix must be a DNS-1123 subdomain such as example.com"
        ));
    }
    if let Some(problem) = qualified_name_problem(name) {
        return Err(format!("key {key:?}: the name part {name:?} {problem}"));
    }
    Ok(())
}

/// A label value: empty, or at most 63 letters, digits, '-', '_' and '.', starting and ending alphanumeric.
pub fn label_value(value: &str) -> Result<(), String> {
    if value.is_empty() {
        return Ok(());
    }
    match qualified_name_problem(value) {
        Some(problem) => Err(format!("value {value:?} {problem}")),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dns1035_labels() {
        for good in ["spark-pi", "a", "a1", &"a".repeat(63)] {
            assert!(dns1035_label(good).is_ok(), "{good}");
        }
        for bad in [
            "",
            "1spark",
            "Spark",
            "spark_pi",
            "spark-",
            "-spark",
            "spark.pi",
            &"a".repeat(64),
        ] {
            assert!(dns1035_label(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn dns1123_subdomains() {
        for good in ["spark-pi-driver", "1abc", "a.b.c", &"a".repeat(63)] {
            assert!(dns1123_subdomain(good).is_ok(), "{good}");
        }
        for bad in [
            "",
            "a..b",
            "A",
            "a_b",
            "a-",
            &format!("{}.b", "a".repeat(64)),
            &"a.".repeat(130),
        ] {
            assert!(dns1123_subdomain(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn label_keys_and_values() {
        for good in [
            "version",
            "sparkoperator.k8s.io/app-name",
            "app.kubernetes.io/name",
            "A_b.c",
        ] {
            assert!(label_key(good).is_ok(), "{good}");
        }
        for bad in ["", "/x", "Bad_Prefix/x", "x/", "-x", &"a".repeat(64)] {
            assert!(label_key(bad).is_err(), "{bad}");
        }
        for good in ["", "4.0.0", "true", "a-b_c.d"] {
            assert!(label_value(good).is_ok(), "{good}");
        }
        for bad in ["-a", "a b", "a/b", &"a".repeat(64)] {
            assert!(label_value(bad).is_err(), "{bad}");
        }
    }
}
