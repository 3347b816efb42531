//! Structural checks of a raw manifest against the full schema: every wrong type, missing required field
//! and out-of-range number with its path, and every field the schema does not know.
//!
//! This is what the API server would do if the CRD carried the full core/v1 schemas, plus what it does not
//! tell anyone: fields it does not know are pruned silently. Inside embedded core/v1 objects (kept whole by
//! `x-kubernetes-preserve-unknown-fields`) unknown fields survive in etcd but are dropped when the objects
//! are decoded to build pods, so they are reported too.

use serde_json::{Map, Value};

use crate::embedded::{FULL_SCHEMA_KEY, PARTIAL_KEY};
use crate::field::{FieldError, FieldPath};

/// A field present in a manifest that its schema does not define.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnknownField {
    pub path: FieldPath,
    /// Inside an embedded core/v1 object (affinity, volumes, a pod template, ...).
    pub in_embedded_object: bool,
}

impl UnknownField {
    /// What happens to the field, and what to do.
    pub fn message(&self) -> &'static str {
        if self.in_embedded_object {
            "unknown field: Kubernetes has no such field here, so it is ignored when the pod is built; check its spelling and indentation"
        } else {
            "unknown field: the API server drops it silently; check its spelling and indentation"
        }
    }
}

/// Everything the structural walk found.
#[derive(Debug, Default)]
pub(crate) struct Findings {
    pub errors: Vec<FieldError>,
    pub unknown: Vec<UnknownField>,
    /// JSON pointers of the values the errors are about (not of missing required fields), so a caller
    /// can drop them and still check the rest of the object.
    pub bad_values: Vec<String>,
    /// The field paths of the same values.
    pub bad_paths: Vec<FieldPath>,
}

/// Where the walk is: the rendered field path and the JSON pointer of the same value.
#[derive(Clone)]
struct At {
    path: FieldPath,
    pointer: String,
}

impl At {
    fn child(&self, key: &str) -> Self {
        Self {
            path: self.path.child(key),
            pointer: format!("{}/{}", self.pointer, escape(key)),
        }
    }

    fn key(&self, key: &str) -> Self {
        Self {
            path: self.path.key(key),
            pointer: format!("{}/{}", self.pointer, escape(key)),
        }
    }

    fn index(&self, index: usize) -> Self {
        Self {
            path: self.path.index(index),
            pointer: format!("{}/{index}", self.pointer),
        }
    }
}

fn escape(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

impl Findings {
    fn bad(&mut self, at: &At, message: String) {
        self.errors.push(FieldError::new(at.path.clone(), message));
        self.bad_values.push(at.pointer.clone());
        self.bad_paths.push(at.path.clone());
    }
}

#[derive(Clone, Copy, Default)]
struct Scope {
    embedded: bool,
    // Required fields are not enforced (pod templates).
    partial: bool,
}

/// Checks `value` against `schema`, adding what is wrong to `findings`.
pub(crate) fn check(value: &Value, schema: &Value, path: &FieldPath, findings: &mut Findings) {
    walk(
        value,
        schema,
        &At {
            path: path.clone(),
            pointer: String::new(),
        },
        Scope::default(),
        findings,
    );
}

fn describe(value: &Value) -> String {
    match value {
        Value::Null => "null".to_owned(),
        Value::Bool(b) => format!("the boolean {b}"),
        Value::Number(n) => format!("the number {n}"),
        Value::String(s) => format!("the string {s:?}"),
        Value::Array(_) => "a list".to_owned(),
        Value::Object(_) => "an object".to_owned(),
    }
}

fn type_error(expected: &str, value: &Value, at: &At, findings: &mut Findings) {
    let hint = match (expected, value) {
        ("a string", Value::Number(_) | Value::Bool(_)) => {
            ": quote the value (YAML reads 4.0 or true as a number or boolean)"
        }
        ("an integer" | "a number", Value::String(_)) | ("a boolean", Value::String(_)) => ": remove the quotes",
        ("an integer", Value::Number(_)) => ": use a whole number",
        ("an object", Value::Array(_)) => ": remove the leading '-'",
        ("a list", Value::Object(_)) => ": start each item with '-'",
        _ => "",
    };
    findings.bad(at, format!("expected {expected}, got {}{hint}", describe(value)));
}

fn schema_type(node: &Map<String, Value>) -> Option<&str> {
    match node.get("type")? {
        Value::String(ty) => Some(ty),
        Value::Array(types) => types.iter().filter_map(Value::as_str).find(|t| *t != "null"),
        _ => None,
    }
}

fn walk(value: &Value, schema: &Value, at: &At, scope: Scope, findings: &mut Findings) {
    let Some(node) = schema.as_object() else { return };
    // The API server prunes nulls of non-nullable fields before validating: a null is an absent field.
    if value.is_null() {
        return;
    }
    if let Some(full) = node.get(FULL_SCHEMA_KEY) {
        if !value.is_object() {
            type_error("an object", value, at, findings);
            return;
        }
        let partial = scope.partial || node.get(PARTIAL_KEY) == Some(&Value::Bool(true));
        walk(
            value,
            full,
            at,
            Scope {
                embedded: true,
                partial,
            },
            findings,
        );
        return;
    }
    if let Some(all) = node.get("allOf").and_then(Value::as_array) {
        for sub in all {
            walk(value, sub, at, scope, findings);
        }
    }
    if let Some(branches) = node
        .get("anyOf")
        .or_else(|| node.get("oneOf"))
        .and_then(Value::as_array)
    {
        walk_alternatives(value, branches, at, scope, findings);
    }
    if node.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true)) {
        if !(value.is_number() || value.is_string()) {
            type_error("a number or a string", value, at, findings);
        }
        return;
    }
    match schema_type(node) {
        Some("object") => walk_object(value, node, at, scope, findings),
        Some("array") => match value.as_array() {
            Some(items) => {
                if let Some(item_schema) = node.get("items") {
                    for (index, item) in items.iter().enumerate() {
                        walk(item, item_schema, &at.index(index), scope, findings);
                    }
                }
            }
            None => type_error("a list", value, at, findings),
        },
        Some("string") => match value.as_str() {
            Some(text) => check_string(text, node, at, findings),
            None => type_error("a string", value, at, findings),
        },
        Some("integer") => check_integer(value, node, at, findings),
        Some("number") if !value.is_number() => type_error("a number", value, at, findings),
        Some("boolean") if !value.is_boolean() => type_error("a boolean", value, at, findings),
        _ => {}
    }
}

fn walk_alternatives(value: &Value, branches: &[Value], at: &At, scope: Scope, findings: &mut Findings) {
    let mut best: Option<Findings> = None;
    for branch in branches {
        let mut trial = Findings::default();
        walk(value, branch, at, scope, &mut trial);
        if trial.errors.is_empty() {
            findings.unknown.extend(trial.unknown);
            return;
        }
        if best.as_ref().is_none_or(|b| trial.errors.len() < b.errors.len()) {
            best = Some(trial);
        }
    }
    if let Some(best) = best {
        findings.errors.extend(best.errors);
        findings.bad_values.extend(best.bad_values);
        findings.bad_paths.extend(best.bad_paths);
        findings.unknown.extend(best.unknown);
    }
}

fn walk_object(value: &Value, node: &Map<String, Value>, at: &At, scope: Scope, findings: &mut Findings) {
    let Some(object) = value.as_object() else {
        type_error("an object", value, at, findings);
        return;
    };
    let properties = node.get("properties").and_then(Value::as_object);
    let additional = node.get("additionalProperties");
    let preserve = node.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true));
    for (key, child) in object {
        if let Some(child_schema) = properties.and_then(|p| p.get(key)) {
            walk(child, child_schema, &at.child(key), scope, findings);
        } else if let Some(additional @ Value::Object(_)) = additional {
            walk(child, additional, &at.key(key), scope, findings);
        } else if !(preserve || additional == Some(&Value::Bool(true))) {
            findings.unknown.push(UnknownField {
                path: at.path.child(key),
                in_embedded_object: scope.embedded,
            });
        }
    }
    if scope.partial {
        return;
    }
    for required in node
        .get("required")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
    {
        if object.get(required).is_none_or(Value::is_null) {
            findings
                .errors
                .push(FieldError::new(at.path.child(required), "is required"));
        }
    }
}

fn check_string(text: &str, node: &Map<String, Value>, at: &At, findings: &mut Findings) {
    if let Some(allowed) = node.get("enum").and_then(Value::as_array) {
        let allowed: Vec<&str> = allowed.iter().filter_map(Value::as_str).collect();
        if !allowed.is_empty() && !allowed.contains(&text) {
            let list = allowed.iter().map(|a| format!("{a:?}")).collect::<Vec<_>>().join(", ");
            findings.bad(at, format!("{text:?} is not allowed: use one of {list}"));
        }
    }
    if node.get("format").and_then(Value::as_str) == Some("date-time")
        && text.parse::<k8s_openapi::jiff::Timestamp>().is_err()
    {
        findings.bad(
            at,
            format!("{text:?} is not a time: use RFC 3339, e.g. 2024-06-01T10:00:00Z"),
        );
    }
}

fn check_integer(value: &Value, node: &Map<String, Value>, at: &At, findings: &mut Findings) {
    let number = match value {
        Value::Number(n) => n.as_i64().map(i128::from).or_else(|| n.as_u64().map(i128::from)),
        _ => None,
    };
    let Some(number) = number else {
        type_error("an integer", value, at, findings);
        return;
    };
    let (low, high) = match node.get("format").and_then(Value::as_str) {
        Some("int32") => (i128::from(i32::MIN), i128::from(i32::MAX)),
        _ => (i128::from(i64::MIN), i128::from(i64::MAX)),
    };
    if number < low || number > high {
        let bits = if high == i128::from(i32::MAX) { 32 } else { 64 };
        findings.bad(at, format!("{number} does not fit a {bits}-bit integer"));
        return;
    }
    let bound = |key: &str| node.get(key).and_then(Value::as_f64);
    if let Some(minimum) = bound("minimum")
        && (number as f64) < minimum
    {
        findings.bad(at, format!("must be at least {minimum}, got {number}"));
    }
    if let Some(maximum) = bound("maximum")
        && (number as f64) > maximum
    {
        findings.bad(at, format!("must be at most {maximum}, got {number}"));
    }
}

/// Puts a placeholder into every required field that is missing (or was nulled because its value was
/// wrong), so that the object still decodes and the rest of it gets validated: the first allowed value of
/// an enum, the minimum of a number, an empty string, list or object (filled in turn). Returns the paths
/// of the placeholders: the caller has already reported these fields and drops what validation says about
/// them. Pod templates are left alone (their required fields are Spark's to fill in).
pub(crate) fn fill_required(value: &mut Value, schema: &Value) -> Vec<FieldPath> {
    let mut filled = Vec::new();
    fill(value, schema, &FieldPath::root(), 0, &mut filled);
    filled
}

// Schemas nest only as deep as the types do; the bound keeps a recursive schema from looping.
const MAX_FILL_DEPTH: usize = 64;

fn fill(value: &mut Value, schema: &Value, path: &FieldPath, depth: usize, filled: &mut Vec<FieldPath>) {
    let Some(node) = schema.as_object() else { return };
    if depth > MAX_FILL_DEPTH {
        return;
    }
    if let Some(full) = node.get(FULL_SCHEMA_KEY) {
        if node.get(PARTIAL_KEY) != Some(&Value::Bool(true)) {
            fill(value, full, path, depth + 1, filled);
        }
        return;
    }
    for sub in node.get("allOf").and_then(Value::as_array).into_iter().flatten() {
        fill(value, sub, path, depth + 1, filled);
    }
    match value {
        Value::Object(object) => {
            let properties = node.get("properties").and_then(Value::as_object);
            for required in node
                .get("required")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
            {
                if object.get(required).is_none_or(Value::is_null)
                    && let Some(child) = properties.and_then(|p| p.get(required))
                {
                    object.insert(required.to_owned(), placeholder(child));
                    filled.push(path.child(required));
                }
            }
            for (key, child) in object.iter_mut() {
                if let Some(child_schema) = properties.and_then(|p| p.get(key)) {
                    fill(child, child_schema, &path.child(key), depth + 1, filled);
                } else if let Some(additional @ Value::Object(_)) = node.get("additionalProperties") {
                    fill(child, additional, &path.key(key), depth + 1, filled);
                }
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = node.get("items") {
                for (index, item) in items.iter_mut().enumerate() {
                    fill(item, item_schema, &path.index(index), depth + 1, filled);
                }
            }
        }
        _ => {}
    }
}

fn placeholder(schema: &Value) -> Value {
    let node = schema.as_object();
    let node_type = node.and_then(schema_type);
    let first_enum = node
        .and_then(|n| n.get("enum"))
        .and_then(Value::as_array)
        .and_then(|values| values.iter().find(|v| !v.is_null()).cloned());
    if let Some(value) = first_enum {
        return value;
    }
    let full = node.and_then(|n| n.get(FULL_SCHEMA_KEY));
    match (node_type, full) {
        (_, Some(full)) => placeholder(full),
        (Some("string"), _) => Value::from(""),
        (Some("integer"), _) => {
            let minimum = node.and_then(|n| n.get("minimum")).and_then(Value::as_f64);
            // Bounds come from i32/i64 constants: the cast is exact.
            Value::from(minimum.map_or(0, |m| m as i64))
        }
        (Some("number"), _) => Value::from(0),
        (Some("boolean"), _) => Value::Bool(false),
        (Some("array"), _) => Value::Array(Vec::new()),
        _ => Value::Object(Map::new()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn run(value: Value, schema: Value) -> Findings {
        let mut findings = Findings::default();
        check(&value, &schema, &FieldPath::new("spec"), &mut findings);
        findings
    }

    fn paths(errors: &[FieldError]) -> Vec<&str> {
        errors.iter().map(|e| e.path.as_str()).collect()
    }

    #[test]
    fn reports_every_type_error_with_its_path() {
        let schema = json!({
            "type": "object",
            "required": ["name"],
            "properties": {
                "name": {"type": "string"},
                "cores": {"type": "integer", "format": "int32", "minimum": 1},
                "enabled": {"type": "boolean"},
                "items": {"type": "array", "items": {"type": "object", "properties": {"x": {"type": "number"}}}},
                "mode": {"type": "string", "enum": ["cluster", "client", null]},
                "labels": {"type": "object", "additionalProperties": {"type": "string"}}
            }
        });
        let findings = run(
            json!({"cores": "two", "enabled": "true", "items": [{"x": 1}, {"x": "y"}], "mode": "local", "labels": {"a": 1}}),
            schema,
        );
        assert_eq!(
            paths(&findings.errors),
            [
                "spec.cores",
                "spec.enabled",
                "spec.items[1].x",
                "spec.labels[a]",
                "spec.mode",
                "spec.name"
            ]
        );
        assert!(findings.errors[0].message.contains("remove the quotes"));
        assert!(findings.errors[4].message.contains("\"cluster\""));
    }

    #[test]
    fn ranges_and_int32_overflow() {
        let schema =
            json!({"type": "object", "properties": {"cores": {"type": "integer", "format": "int32", "minimum": 1}}});
        assert_eq!(run(json!({"cores": 0}), schema.clone()).errors.len(), 1);
        assert_eq!(run(json!({"cores": 3_000_000_000u64}), schema.clone()).errors.len(), 1);
        assert_eq!(run(json!({"cores": 1.5}), schema.clone()).errors.len(), 1);
        assert!(run(json!({"cores": 2}), schema).errors.is_empty());
    }

    #[test]
    fn nulls_count_as_absent() {
        let schema = json!({"type": "object", "required": ["a"], "properties": {"a": {"type": "string"}, "b": {"type": "string"}}});
        let findings = run(json!({"a": null, "b": null}), schema);
        assert_eq!(paths(&findings.errors), ["spec.a"]);
    }

    #[test]
    fn unknown_fields_are_listed_unless_preserved() {
        let schema = json!({
            "type": "object",
            "properties": {
                "known": {"type": "string"},
                "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                "embedded": {
                    "type": "object",
                    "x-kubernetes-preserve-unknown-fields": true,
                    FULL_SCHEMA_KEY: {"type": "object", "required": ["name"], "properties": {"name": {"type": "string"}}}
                },
                "template": {
                    "type": "object",
                    "x-kubernetes-preserve-unknown-fields": true,
                    PARTIAL_KEY: true,
                    FULL_SCHEMA_KEY: {"type": "object", "required": ["containers"], "properties": {"containers": {"type": "array"}}}
                }
            }
        });
        let findings = run(
            json!({"known": "x", "knwon": "y", "free": {"anything": 1}, "embedded": {"nmae": "z"}, "template": {"extra": 1}}),
            schema,
        );
        let mut unknown: Vec<_> = findings
            .unknown
            .iter()
            .map(|u| (u.path.as_str(), u.in_embedded_object))
            .collect();
        unknown.sort();
        assert_eq!(
            unknown,
            [
                ("spec.embedded.nmae", true),
                ("spec.knwon", false),
                ("spec.template.extra", true)
            ]
        );
        assert_eq!(
            paths(&findings.errors),
            ["spec.embedded.name"],
            "required is enforced except in templates"
        );
    }

    #[test]
    fn int_or_string_and_date_time() {
        let schema = json!({
            "type": "object",
            "properties": {
                "q": {"x-kubernetes-int-or-string": true},
                "t": {"type": "string", "format": "date-time"}
            }
        });
        assert!(
            run(json!({"q": 1, "t": "2024-06-01T10:00:00Z"}), schema.clone())
                .errors
                .is_empty()
        );
        assert!(run(json!({"q": "500m"}), schema.clone()).errors.is_empty());
        assert_eq!(
            paths(&run(json!({"q": true, "t": "yesterday"}), schema).errors),
            ["spec.q", "spec.t"]
        );
    }
}
