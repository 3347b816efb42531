//! Label selectors (equality- and set-based) and field selectors, with the apiserver's rules for
//! which fields each resource can be selected on.

use std::collections::BTreeSet;

use serde_json::Value;

/// Why a selector string was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SelectorError {
    #[error("unable to parse requirement: {0}")]
    ParseLabel(String),
    #[error("invalid selector: '{0}'; can't understand '{1}'")]
    ParseField(String, String),
    #[error("field label not supported: {0}")]
    UnsupportedField(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum LabelOp {
    Exists,
    NotExists,
    Equals(String),
    NotEquals(String),
    In(BTreeSet<String>),
    NotIn(BTreeSet<String>),
    Gt(i64),
    Lt(i64),
}

/// A parsed label selector: all requirements must hold.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LabelSelector {
    requirements: Vec<(String, LabelOp)>,
}

impl LabelSelector {
    /// Parses the `labelSelector` query parameter syntax (`a=b,c!=d,e in (f,g),!h`).
    pub fn parse(input: &str) -> Result<Self, SelectorError> {
        let mut requirements = Vec::new();
        for part in split_top_level(input) {
            let part = part.trim();
            if part.is_empty() {
                continue;
            }
            requirements.push(parse_requirement(part)?);
        }
        Ok(Self { requirements })
    }

    /// Builds a selector from a `metav1.LabelSelector` object (`matchLabels`, `matchExpressions`).
    pub fn from_object(selector: &Value) -> Result<Self, SelectorError> {
        let mut requirements = Vec::new();
        if let Some(labels) = selector.get("matchLabels").and_then(Value::as_object) {
            for (k, v) in labels {
                requirements.push((k.clone(), LabelOp::Equals(v.as_str().unwrap_or_default().to_string())));
            }
        }
        if let Some(exprs) = selector.get("matchExpressions").and_then(Value::as_array) {
            for e in exprs {
                let key = e.get("key").and_then(Value::as_str).unwrap_or_default().to_string();
                let values: BTreeSet<String> = e
                    .get("values")
                    .and_then(Value::as_array)
                    .map(|a| a.iter().filter_map(Value::as_str).map(str::to_string).collect())
                    .unwrap_or_default();
                let op = match e.get("operator").and_then(Value::as_str).unwrap_or_default() {
                    "In" => LabelOp::In(values),
                    "NotIn" => LabelOp::NotIn(values),
                    "Exists" => LabelOp::Exists,
                    "DoesNotExist" => LabelOp::NotExists,
                    other => {
                        return Err(SelectorError::ParseLabel(format!(
                            "{other:?} is not a valid pod selector operator"
                        )));
                    }
                };
                requirements.push((key, op));
            }
        }
        Ok(Self { requirements })
    }

    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    /// Whether an object's `metadata.labels` satisfy the selector.
    pub fn matches(&self, labels: Option<&serde_json::Map<String, Value>>) -> bool {
        self.requirements.iter().all(|(key, op)| {
            let value = labels.and_then(|l| l.get(key)).and_then(Value::as_str);
            match op {
                LabelOp::Exists => value.is_some(),
                LabelOp::NotExists => value.is_none(),
                LabelOp::Equals(v) => value == Some(v.as_str()),
                LabelOp::NotEquals(v) => value != Some(v.as_str()),
                LabelOp::In(set) => value.is_some_and(|v| set.contains(v)),
                LabelOp::NotIn(set) => value.is_none_or(|v| !set.contains(v)),
                LabelOp::Gt(n) => value.and_then(|v| v.parse::<i64>().ok()).is_some_and(|v| v > *n),
                LabelOp::Lt(n) => value.and_then(|v| v.parse::<i64>().ok()).is_some_and(|v| v < *n),
            }
        })
    }

    /// Convenience: matches the labels of a whole object.
    pub fn matches_object(&self, obj: &Value) -> bool {
        self.matches(obj.pointer("/metadata/labels").and_then(Value::as_object))
    }
}

/// Splits on commas that are not inside parentheses.
fn split_top_level(input: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let mut depth = 0usize;
    let mut start = 0;
    for (i, c) in input.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                parts.push(&input[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&input[start..]);
    parts
}

fn parse_set(rest: &str, whole: &str) -> Result<BTreeSet<String>, SelectorError> {
    let rest = rest.trim();
    let inner = rest
        .strip_prefix('(')
        .and_then(|r| r.strip_suffix(')'))
        .ok_or_else(|| SelectorError::ParseLabel(format!("{whole}: found '{rest}', expected: '('")))?;
    Ok(inner
        .split(',')
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect())
}

fn parse_requirement(part: &str) -> Result<(String, LabelOp), SelectorError> {
    if let Some(key) = part.strip_prefix('!') {
        return Ok((check_key(key.trim(), part)?, LabelOp::NotExists));
    }
    for (token, is_in) in [(" notin ", false), (" in ", true)] {
        if let Some(idx) = part.find(token) {
            let key = check_key(part[..idx].trim(), part)?;
            let set = parse_set(&part[idx + token.len()..], part)?;
            return Ok((key, if is_in { LabelOp::In(set) } else { LabelOp::NotIn(set) }));
        }
    }
    if let Some((k, v)) = part.split_once("!=") {
        return Ok((
            check_key(k.trim(), part)?,
            LabelOp::NotEquals(check_value(v.trim(), part)?),
        ));
    }
    if let Some((k, v)) = part.split_once("==") {
        return Ok((
            check_key(k.trim(), part)?,
            LabelOp::Equals(check_value(v.trim(), part)?),
        ));
    }
    if let Some((k, v)) = part.split_once('=') {
        return Ok((
            check_key(k.trim(), part)?,
            LabelOp::Equals(check_value(v.trim(), part)?),
        ));
    }
    for (op, gt) in [('>', true), ('<', false)] {
        if let Some((k, v)) = part.split_once(op) {
            let n = v.trim().parse::<i64>().map_err(|_| {
                SelectorError::ParseLabel(format!(
                    "{part}: for 'Gt', 'Lt' operators, the value must be an integer"
                ))
            })?;
            return Ok((
                check_key(k.trim(), part)?,
                if gt { LabelOp::Gt(n) } else { LabelOp::Lt(n) },
            ));
        }
    }
    Ok((check_key(part, part)?, LabelOp::Exists))
}

fn check_key(key: &str, whole: &str) -> Result<String, SelectorError> {
    let valid = !key.is_empty()
        && key.len() <= 317
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'));
    if valid {
        Ok(key.to_string())
    } else {
        Err(SelectorError::ParseLabel(format!("{whole}: invalid label key {key:?}")))
    }
}

fn check_value(value: &str, whole: &str) -> Result<String, SelectorError> {
    let valid = value.len() <= 63
        && value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if valid {
        Ok(value.to_string())
    } else {
        Err(SelectorError::ParseLabel(format!(
            "{whole}: invalid label value {value:?}"
        )))
    }
}

/// A parsed field selector: `metadata.name=x,status.phase!=Running`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FieldSelector {
    requirements: Vec<(String, bool, String)>,
}

impl FieldSelector {
    /// Parses a field selector and checks every field against what `resource` (in `group`)
    /// supports, as the apiserver does (unsupported fields are a 400).
    pub fn parse(input: &str, group: &str, resource: &str, crd_selectable: &[String]) -> Result<Self, SelectorError> {
        let mut requirements = Vec::new();
        for part in input.split(',') {
            let part = part.trim();
            if part.is_empty() {
                continue;
            }
            let (field, eq, value) = if let Some((f, v)) = part.split_once("!=") {
                (f, false, v)
            } else if let Some((f, v)) = part.split_once("==") {
                (f, true, v)
            } else if let Some((f, v)) = part.split_once('=') {
                (f, true, v)
            } else {
                return Err(SelectorError::ParseField(input.to_string(), part.to_string()));
            };
            let field = field.trim();
            if !field_supported(group, resource, field, crd_selectable) {
                return Err(SelectorError::UnsupportedField(field.to_string()));
            }
            requirements.push((field.to_string(), eq, value.trim().to_string()));
        }
        Ok(Self { requirements })
    }

    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    /// The value required for `field` by an equality requirement, if any (used to narrow lists).
    pub fn required_value(&self, field: &str) -> Option<&str> {
        self.requirements
            .iter()
            .find(|(f, eq, _)| f == field && *eq)
            .map(|(_, _, v)| v.as_str())
    }

    pub fn matches(&self, obj: &Value) -> bool {
        self.requirements.iter().all(|(field, eq, value)| {
            let actual = field_value(obj, field);
            (actual == *value) == *eq
        })
    }
}

/// The string form of a selectable field; missing fields are the empty string, as in the
/// apiserver's field sets.
fn field_value(obj: &Value, field: &str) -> String {
    let pointer = format!("/{}", field.replace('.', "/"));
    match obj.pointer(&pointer) {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Bool(b)) => b.to_string(),
        Some(Value::Number(n)) => n.to_string(),
        _ => {
            // Field sets give defaults for a few fields: an absent `spec.unschedulable` is "false".
            if field == "spec.unschedulable" || field == "spec.hostNetwork" {
                "false".into()
            } else {
                String::new()
            }
        }
    }
}

fn field_supported(group: &str, resource: &str, field: &str, crd_selectable: &[String]) -> bool {
    if field == "metadata.name" || field == "metadata.namespace" {
        return true;
    }
    let extra: &[&str] = match (group, resource) {
        ("", "pods") => &[
            "spec.nodeName",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "spec.hostNetwork",
            "status.phase",
            "status.podIP",
            "status.podIPs",
            "status.nominatedNodeName",
        ],
        ("", "events") => &[
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "reason",
            "reportingComponent",
            "source",
            "type",
        ],
        ("events.k8s.io", "events") => &[
            "regarding.kind",
            "regarding.namespace",
            "regarding.name",
            "regarding.uid",
            "regarding.apiVersion",
            "regarding.resourceVersion",
            "regarding.fieldPath",
            "reason",
            "reportingController",
            "type",
        ],
        ("", "secrets") => &["type"],
        ("", "namespaces") => &["status.phase"],
        ("", "nodes") => &["spec.unschedulable"],
        ("", "replicationcontrollers") | ("apps", "replicasets") => &["status.replicas"],
        ("batch", "jobs") => &["status.successful"],
        ("certificates.k8s.io", "certificatesigningrequests") => &["spec.signerName"],
        _ => &[],
    };
    extra.contains(&field) || crd_selectable.iter().any(|f| f == field)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn labels(v: Value) -> Value {
        json!({ "metadata": { "labels": v } })
    }

    #[test]
    fn equality_and_set_based_label_selectors() {
        let obj = labels(json!({ "app": "spark", "tier": "driver", "n": "5" }));
        let yes = [
            "app=spark",
            "app==spark",
            "app!=web",
            "tier in (driver, executor)",
            "tier notin (executor)",
            "app",
            "!missing",
            "app=spark,tier=driver",
            "n>3",
            "n<6",
            "",
        ];
        for s in yes {
            assert!(
                LabelSelector::parse(s).unwrap().matches_object(&obj),
                "{s} should match"
            );
        }
        let no = [
            "app=web",
            "tier in (executor)",
            "tier notin (driver,x)",
            "missing",
            "!app",
            "app=spark,tier=x",
            "n>5",
        ];
        for s in no {
            assert!(
                !LabelSelector::parse(s).unwrap().matches_object(&obj),
                "{s} should not match"
            );
        }
        assert!(LabelSelector::parse("missing notin (a)").unwrap().matches_object(&obj));
        assert!(LabelSelector::parse("a=b c").is_err());
        assert!(LabelSelector::parse("x in a,b").is_err());
    }

    #[test]
    fn label_selector_objects() {
        let sel = LabelSelector::from_object(&json!({
            "matchLabels": { "app": "spark" },
            "matchExpressions": [{ "key": "tier", "operator": "In", "values": ["driver"] }]
        }))
        .unwrap();
        assert!(sel.matches_object(&labels(json!({ "app": "spark", "tier": "driver" }))));
        assert!(!sel.matches_object(&labels(json!({ "app": "spark" }))));
    }

    #[test]
    fn field_selectors_follow_resource_rules() {
        let pod = json!({ "metadata": { "name": "p", "namespace": "ns" }, "spec": { "nodeName": "n1" }, "status": { "phase": "Running" } });
        let sel = FieldSelector::parse("spec.nodeName=n1,status.phase!=Failed", "", "pods", &[]).unwrap();
        assert!(sel.matches(&pod));
        assert!(
            !FieldSelector::parse("metadata.name=q", "", "pods", &[])
                .unwrap()
                .matches(&pod)
        );
        assert!(
            FieldSelector::parse("spec.nodeName=", "", "pods", &[])
                .unwrap()
                .matches(&json!({}))
        );
        assert_eq!(
            FieldSelector::parse("spec.nodeName=n1", "", "configmaps", &[])
                .unwrap_err()
                .to_string(),
            "field label not supported: spec.nodeName"
        );
        assert!(FieldSelector::parse("spec.x=1", "example.com", "things", &["spec.x".to_string()]).is_ok());
    }
}
