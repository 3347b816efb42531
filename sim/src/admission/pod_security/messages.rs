//! How check results become the plugin's words: one check's reason and detail, the aggregate of
//! several (`policy/checks.go`), and the per-pod lines of a namespace relabel warning.

use std::collections::BTreeMap;

/// What one check says about a pod (`policy.CheckResult`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckResult {
    pub allowed: bool,
    /// Short and always shown, e.g. `host namespaces`.
    pub forbidden_reason: String,
    /// The specifics, shown in parentheses when one object is checked; may be empty.
    pub forbidden_detail: String,
}

impl CheckResult {
    pub fn allowed() -> Self {
        Self {
            allowed: true,
            forbidden_reason: String::new(),
            forbidden_detail: String::new(),
        }
    }

    pub fn forbidden(reason: impl Into<String>, detail: impl Into<String>) -> Self {
        Self {
            allowed: false,
            forbidden_reason: reason.into(),
            forbidden_detail: detail.into(),
        }
    }
}

/// The forbidden results of every check run, in check order (`policy.AggregateCheckResult`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Aggregate {
    reasons: Vec<String>,
    details: Vec<String>,
}

/// The reason a check that forbids without saying why is reported with.
const UNKNOWN_FORBIDDEN_REASON: &str = "unknown forbidden reason";

impl Aggregate {
    pub fn of(results: &[CheckResult]) -> Self {
        let mut agg = Aggregate::default();
        for r in results.iter().filter(|r| !r.allowed) {
            agg.reasons.push(if r.forbidden_reason.is_empty() {
                UNKNOWN_FORBIDDEN_REASON.to_string()
            } else {
                r.forbidden_reason.clone()
            });
            agg.details.push(r.forbidden_detail.clone());
        }
        agg
    }

    pub fn allowed(&self) -> bool {
        self.reasons.is_empty()
    }

    /// `host ports, privileged containers` (used for namespace-wide warnings).
    pub fn forbidden_reason(&self) -> String {
        self.reasons.join(", ")
    }

    /// `host ports (8080, 9090), privileged containers`: each non-empty detail in parentheses.
    pub fn forbidden_detail(&self) -> String {
        self.reasons
            .iter()
            .zip(&self.details)
            .map(|(r, d)| if d.is_empty() { r.clone() } else { format!("{r} ({d})") })
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// `"a", "b"` — items quoted without escaping, as the plugin's `joinQuote`.
pub fn join_quote<S: AsRef<str>>(items: &[S]) -> String {
    if items.is_empty() {
        return String::new();
    }
    let inner: Vec<&str> = items.iter().map(AsRef::as_ref).collect();
    format!("\"{}\"", inner.join("\", \""))
}

pub fn pluralize<'a>(singular: &'a str, plural: &'a str, count: usize) -> &'a str {
    if count == 1 { singular } else { plural }
}

/// Go's `%q` for the strings the plugin quotes with it (annotation values, names).
pub fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => out.push_str(&format!("\\x{:02x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Pods sharing one namespace-wide warning: the lexically first name and how many there are.
#[derive(Debug, Clone, Default)]
pub struct PodCount {
    pub first_name: String,
    pub count: usize,
}

/// Prefixes each warning with its pods (`decoratePodWarnings`) and sorts them.
pub fn decorate_pod_warnings(order: &[String], counts: &BTreeMap<String, PodCount>) -> Vec<String> {
    let mut out: Vec<String> = order
        .iter()
        .map(|warning| match counts.get(warning) {
            None | Some(PodCount { count: 0, .. }) => warning.clone(),
            Some(PodCount { first_name, count: 1 }) => format!("{first_name}: {warning}"),
            Some(PodCount { first_name, count: 2 }) => format!("{first_name} (and 1 other pod): {warning}"),
            Some(PodCount { first_name, count }) => {
                format!("{first_name} (and {} other pods): {warning}", count - 1)
            }
        })
        .collect();
    out.sort();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aggregate_details_go_in_parentheses_in_check_order() {
        let agg = Aggregate::of(&[
            CheckResult::forbidden("hostPort", "container \"c\" uses hostPort 80"),
            CheckResult::allowed(),
            CheckResult::forbidden("privileged", ""),
            CheckResult::forbidden("", "x"),
        ]);
        assert!(!agg.allowed());
        assert_eq!(
            agg.forbidden_detail(),
            "hostPort (container \"c\" uses hostPort 80), privileged, unknown forbidden reason (x)"
        );
        assert_eq!(agg.forbidden_reason(), "hostPort, privileged, unknown forbidden reason");
        assert!(Aggregate::of(&[CheckResult::allowed()]).allowed());
    }

    #[test]
    fn quoting_and_plurals() {
        assert_eq!(join_quote(&["a", "b"]), "\"a\", \"b\"");
        assert_eq!(join_quote::<&str>(&[]), "");
        assert_eq!(pluralize("container", "containers", 2), "containers");
        assert_eq!(go_quote("a\"b\\"), "\"a\\\"b\\\\\"");
    }

    #[test]
    fn pod_warnings_name_the_first_pod_and_count_the_others() {
        let mut counts = BTreeMap::new();
        counts.insert(
            "privileged".to_string(),
            PodCount {
                first_name: "a".into(),
                count: 3,
            },
        );
        counts.insert(
            "hostPort".to_string(),
            PodCount {
                first_name: "z".into(),
                count: 1,
            },
        );
        counts.insert(
            "seLinuxOptions".to_string(),
            PodCount {
                first_name: "m".into(),
                count: 2,
            },
        );
        let order = vec![
            "privileged".to_string(),
            "hostPort".to_string(),
            "seLinuxOptions".to_string(),
        ];
        assert_eq!(
            decorate_pod_warnings(&order, &counts),
            vec![
                "a (and 2 other pods): privileged",
                "m (and 1 other pod): seLinuxOptions",
                "z: hostPort"
            ]
        );
    }
}
