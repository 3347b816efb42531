//! Structural schemas of custom resources: pruning of unknown fields, `default`s, and the
//! OpenAPI validation the apiextensions apiserver runs (types, enums, required, bounds).
//! CEL rules (`x-kubernetes-validations`) and `pattern`/`format` are not checked. Updates are
//! ratcheted (see [`validate_update`]).

use serde_json::{Map, Value};

use crate::status::FieldCause;

fn preserves_unknown(schema: &Value) -> bool {
    schema
        .get("x-kubernetes-preserve-unknown-fields")
        .and_then(Value::as_bool)
        == Some(true)
}

/// A field path as text (`spec.containers[0].image`), built in place as a walk descends: one buffer
/// for the whole walk rather than a string per field visited (walks cover every field of every write).
#[derive(Debug, Default)]
pub(crate) struct PathText(String);

impl PathText {
    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }

    /// The path of `field` below this one, as a new string.
    pub(crate) fn joined(&self, field: &str) -> String {
        if self.0.is_empty() {
            field.to_string()
        } else {
            format!("{}.{field}", self.0)
        }
    }

    /// Runs `f` with the path of `field` below this one.
    pub(crate) fn field<R>(&mut self, field: &str, f: impl FnOnce(&mut Self) -> R) -> R {
        let len = self.0.len();
        if len > 0 {
            self.0.push('.');
        }
        self.0.push_str(field);
        let out = f(self);
        self.0.truncate(len);
        out
    }

    /// Runs `f` with the path of item `index` of this list.
    pub(crate) fn index<R>(&mut self, index: usize, f: impl FnOnce(&mut Self) -> R) -> R {
        use std::fmt::Write as _;
        let len = self.0.len();
        let _ = write!(self.0, "[{index}]");
        let out = f(self);
        self.0.truncate(len);
        out
    }
}

/// Drops fields the schema does not know (returning their paths, for field validation) and fills
/// in `default`s. `apiVersion`, `kind` and `metadata` at the root are left alone.
pub fn prune_and_default(obj: &mut Value, schema: &Value) -> Vec<String> {
    let mut unknown = Vec::new();
    if let Value::Object(root) = obj {
        let mut rest: Map<String, Value> = std::mem::take(root);
        let kept: Vec<(String, Value)> = ["apiVersion", "kind", "metadata"]
            .iter()
            .filter_map(|k| rest.remove(*k).map(|v| (k.to_string(), v)))
            .collect();
        let mut body = Value::Object(rest);
        walk(&mut body, schema, &mut PathText::default(), &mut unknown, true);
        if let Value::Object(mut m) = body {
            for (k, v) in kept {
                m.insert(k, v);
            }
            *root = m;
        }
    }
    unknown
}

fn walk(value: &mut Value, schema: &Value, path: &mut PathText, unknown: &mut Vec<String>, root: bool) {
    match value {
        Value::Object(map) => {
            let props = schema.get("properties").and_then(Value::as_object);
            let additional = schema.get("additionalProperties");
            let embedded = schema.get("x-kubernetes-embedded-resource").and_then(Value::as_bool) == Some(true);
            map.retain(|key, v| {
                let sub = props
                    .and_then(|p| p.get(key))
                    .or_else(|| additional.filter(|a| a.is_object()));
                match sub {
                    Some(s) => {
                        path.field(key, |path| walk(v, s, path, unknown, false));
                        true
                    }
                    None => {
                        let allowed = preserves_unknown(schema)
                            || additional == Some(&Value::Bool(true))
                            || (embedded && matches!(key.as_str(), "apiVersion" | "kind" | "metadata"))
                            || (root && matches!(key.as_str(), "apiVersion" | "kind" | "metadata"));
                        if !allowed {
                            unknown.push(path.joined(key));
                        }
                        allowed
                    }
                }
            });
            if let Some(props) = props {
                for (key, s) in props {
                    if !map.contains_key(key)
                        && let Some(d) = s.get("default")
                    {
                        let mut d = d.clone();
                        path.field(key, |path| walk(&mut d, s, path, &mut Vec::new(), false));
                        map.insert(key.clone(), d);
                    }
                }
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items") {
                for (i, item) in items.iter_mut().enumerate() {
                    path.index(i, |path| walk(item, item_schema, path, unknown, false));
                }
            }
        }
        _ => {}
    }
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// Validates an object against its CRD schema (the root's apiVersion/kind/metadata excluded).
pub fn validate(obj: &Value, schema: &Value) -> Vec<FieldCause> {
    validate_update(obj, None, schema)
}

/// Validates a new object, or an update against the old object with validation ratcheting as
/// kube-apiserver does it since 1.30 (KEP-4008, GA in 1.33): a value equal to its correlated old
/// value is not validated at all, so an object stored before its CRD was tightened can still be
/// written (a status update, a change elsewhere in the spec) as long as the invalid values stay as
/// they are. Correlation follows the apiserver: object properties by name, items of
/// `x-kubernetes-list-type: map` lists by their keys, of `set` lists by value; items of atomic lists
/// are not correlated (only an unchanged list as a whole is).
pub fn validate_update(obj: &Value, old: Option<&Value>, schema: &Value) -> Vec<FieldCause> {
    let mut causes = Vec::new();
    if let Value::Object(root) = obj {
        check_body(root, old.and_then(Value::as_object), schema, &mut causes);
    }
    causes
}

/// [`check`] of a root object's body: all of it but `apiVersion`, `kind` and `metadata`, which the schema
/// does not describe. Read in place (a root schema is an object's: its own checks are `required`).
fn check_body(
    root: &Map<String, Value>,
    old: Option<&Map<String, Value>>,
    schema: &Value,
    causes: &mut Vec<FieldCause>,
) {
    let in_body = |key: &str| !matches!(key, "apiVersion" | "kind" | "metadata");
    let body = || root.iter().filter(|(key, _)| in_body(key.as_str()));
    if let Some(old) = old
        && body().eq(old.iter().filter(|(key, _)| in_body(key.as_str())))
    {
        return;
    }
    check_members(
        body(),
        |key| in_body(key) && root.contains_key(key),
        |key| old.and_then(|o| o.get(key)),
        schema,
        &mut PathText::default(),
        causes,
    );
}

/// The checks of an object's members (`members`; `has` says whether one is there): the schema's
/// required members present, and each member against its schema (`old_member`: its old value).
fn check_members<'v, 'o>(
    members: impl Iterator<Item = (&'v String, &'v Value)>,
    has: impl Fn(&str) -> bool,
    old_member: impl Fn(&str) -> Option<&'o Value>,
    schema: &Value,
    path: &mut PathText,
    causes: &mut Vec<FieldCause>,
) {
    if let Some(required) = schema.get("required").and_then(Value::as_array) {
        for r in required.iter().filter_map(Value::as_str) {
            if !has(r) {
                causes.push(FieldCause::required(path.joined(r)));
            }
        }
    }
    let props = schema.get("properties").and_then(Value::as_object);
    let additional = schema.get("additionalProperties").filter(|a| a.is_object());
    for (k, v) in members {
        if let Some(s) = props.and_then(|p| p.get(k)).or(additional) {
            path.field(k, |path| check(v, old_member(k), s, path, causes));
        }
    }
}

/// The old item an array item correlates with, if the list type allows it.
fn correlated_item<'a>(item: &Value, old_items: &'a [Value], schema: &Value) -> Option<&'a Value> {
    match schema.get("x-kubernetes-list-type").and_then(Value::as_str) {
        Some("map") => {
            let keys: Vec<&str> = schema
                .get("x-kubernetes-list-map-keys")
                .and_then(Value::as_array)?
                .iter()
                .filter_map(Value::as_str)
                .collect();
            old_items
                .iter()
                .find(|o| keys.iter().all(|k| o.get(*k) == item.get(*k)))
        }
        Some("set") => old_items.iter().find(|o| *o == item),
        _ => None,
    }
}

fn check(value: &Value, old: Option<&Value>, schema: &Value, path: &mut PathText, causes: &mut Vec<FieldCause>) {
    if old == Some(value) {
        return;
    }
    if !check_value(value, schema, path.as_str(), causes) {
        return;
    }
    match value {
        Value::Object(map) => check_members(
            map.iter(),
            |key| map.contains_key(key),
            |key| old.and_then(|o| o.get(key)),
            schema,
            path,
            causes,
        ),
        Value::Array(items) => {
            if let Some(s) = schema.get("items") {
                let old_items = old.and_then(Value::as_array).map_or(&[][..], Vec::as_slice);
                for (i, item) in items.iter().enumerate() {
                    let old_item = correlated_item(item, old_items, schema);
                    path.index(i, |path| check(item, old_item, s, path, causes));
                }
            }
        }
        _ => {}
    }
}

/// The checks of `value` itself at `path` (type, enum, bounds), not of its members; false when its members
/// are not to be checked (it is null, or not of its type).
fn check_value(value: &Value, schema: &Value, path: &str, causes: &mut Vec<FieldCause>) -> bool {
    if value.is_null() {
        if schema.get("nullable").and_then(Value::as_bool) != Some(true)
            && schema.get("type").is_some()
            && !path.is_empty()
        {
            let want = schema.get("type").and_then(Value::as_str).unwrap_or("object");
            causes.push(FieldCause::invalid(
                path,
                &Value::String("null".into()),
                format!("{path} in body must be of type {want}: \"null\""),
            ));
        }
        return false;
    }
    let int_or_string = schema.get("x-kubernetes-int-or-string").and_then(Value::as_bool) == Some(true);
    if let Some(want) = schema.get("type").and_then(Value::as_str) {
        let actual = type_name(value);
        let ok = actual == want || (want == "number" && actual == "integer");
        if !ok && !path.is_empty() {
            causes.push(FieldCause::invalid(
                path,
                &Value::String(actual.into()),
                format!("{path} in body must be of type {want}: \"{actual}\""),
            ));
            return false;
        }
    } else if int_or_string && !matches!(type_name(value), "integer" | "string") {
        let actual = type_name(value);
        causes.push(FieldCause::invalid(
            path,
            &Value::String(actual.into()),
            format!("{path} in body must be of type integer,string: \"{actual}\""),
        ));
        return false;
    }
    if let Some(allowed) = schema.get("enum").and_then(Value::as_array)
        && !allowed.contains(value)
    {
        let list: Vec<String> = allowed
            .iter()
            .map(|a| match a {
                Value::String(s) => format!("{s:?}"),
                other => other.to_string(),
            })
            .collect();
        let shown = match value {
            Value::String(s) => format!("{s:?}"),
            other => other.to_string(),
        };
        causes.push(FieldCause {
            reason: "FieldValueNotSupported".into(),
            field: path.to_string(),
            message: format!("Unsupported value: {shown}: supported values: {}", list.join(", ")),
        });
    }
    if let Some(n) = value.as_f64() {
        if let Some(min) = schema.get("minimum").and_then(Value::as_f64)
            && n < min
        {
            causes.push(FieldCause::invalid(
                path,
                value,
                format!("{path} in body should be greater than or equal to {min}"),
            ));
        }
        if let Some(max) = schema.get("maximum").and_then(Value::as_f64)
            && n > max
        {
            causes.push(FieldCause::invalid(
                path,
                value,
                format!("{path} in body should be less than or equal to {max}"),
            ));
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Value {
        json!({ "type": "object", "properties": {
            "spec": { "type": "object", "required": ["type"], "properties": {
                "type": { "type": "string", "enum": ["Java", "Scala"] },
                "cores": { "type": "integer", "minimum": 1 },
                "mode": { "type": "string", "default": "cluster" },
                "free": { "type": "object", "x-kubernetes-preserve-unknown-fields": true },
                "labels": { "type": "object", "additionalProperties": { "type": "string" } },
                "port": { "x-kubernetes-int-or-string": true }
            } },
            "status": { "type": "object", "properties": { "state": { "type": "string" } } }
        } })
    }

    #[test]
    fn prunes_unknown_fields_and_defaults() {
        let mut obj = json!({ "apiVersion": "x/v1", "kind": "K", "metadata": { "name": "n" },
            "spec": { "type": "Java", "bogus": 1, "free": { "any": { "thing": 1 } }, "labels": { "a": "b" } }, "extra": true });
        let unknown = prune_and_default(&mut obj, &schema());
        assert_eq!(unknown, ["extra", "spec.bogus"]);
        assert_eq!(obj["spec"]["mode"], "cluster");
        assert_eq!(obj["spec"]["free"]["any"]["thing"], 1);
        assert_eq!(obj["metadata"]["name"], "n");
        assert!(obj.get("extra").is_none());
    }

    #[test]
    fn validates_types_enums_required_and_bounds() {
        let obj = json!({ "spec": { "type": "Go", "cores": "two" } });
        let causes = validate(&obj, &schema());
        let mut causes: Vec<(String, String)> = causes.into_iter().map(|c| (c.field, c.message)).collect();
        causes.sort();
        assert_eq!(causes[0].0, "spec.cores");
        assert_eq!(
            causes[0].1,
            "Invalid value: \"string\": spec.cores in body must be of type integer: \"string\""
        );
        assert_eq!(causes[1].0, "spec.type");
        assert_eq!(
            causes[1].1,
            "Unsupported value: \"Go\": supported values: \"Java\", \"Scala\""
        );
        let causes = validate(&json!({ "spec": { "cores": 0, "port": 80 } }), &schema());
        assert_eq!(causes.len(), 2, "{causes:?}");
        assert!(validate(&json!({ "spec": { "type": "Java", "port": "http" } }), &schema()).is_empty());
    }

    #[test]
    fn updates_ratchet_unchanged_invalid_values() {
        let schema = json!({ "type": "object", "properties": { "spec": { "type": "object", "properties": {
            "cores": { "type": "integer", "maximum": 8 },
            "note": { "type": "string" },
            "ports": { "type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"],
                "items": { "type": "object", "properties": { "name": { "type": "string" }, "port": { "type": "integer", "maximum": 65535 } } } },
            "args": { "type": "array", "items": { "type": "integer", "maximum": 10 } }
        } } } });
        let old = json!({ "spec": { "cores": 100, "ports": [{ "name": "a", "port": 70000 }], "args": [50] } });
        // Unchanged invalid values pass, whatever else changes.
        let new = json!({ "spec": { "cores": 100, "note": "x", "ports": [{ "name": "b", "port": 1 }, { "name": "a", "port": 70000 }], "args": [50] } });
        assert_eq!(validate_update(&new, Some(&old), &schema), Vec::new());
        // A changed value is validated; so is a new object.
        let new = json!({ "spec": { "cores": 101, "ports": [{ "name": "a", "port": 70001 }], "args": [50, 1] } });
        let fields: Vec<String> = validate_update(&new, Some(&old), &schema)
            .into_iter()
            .map(|c| c.field)
            .collect();
        assert_eq!(fields, ["spec.args[0]", "spec.cores", "spec.ports[0].port"]);
        assert_eq!(validate_update(&old, None, &schema).len(), 3);
    }
}
