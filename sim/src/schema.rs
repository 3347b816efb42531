//! Structural schemas of custom resources: pruning of unknown fields, non-nullable `null`s and
//! `default`s, and the OpenAPI validation the apiextensions apiserver runs (kube-openapi's
//! `validate` package): types with their formats (`int32`, `int64`, `float`, `double`), enums,
//! required, numeric bounds, `multipleOf`, string lengths and `pattern`, item and property counts.
//! CEL rules (`x-kubernetes-validations`), `anyOf`/`oneOf`/`allOf`/`not` and string formats
//! (`date-time`, ...) are not checked. Updates are ratcheted (see [`validate_update`]).

use std::borrow::Cow;
use std::collections::HashMap;
use std::collections::hash_map::Entry;

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
        walk(&mut body, Some(schema), &mut PathText::default(), &mut unknown, true);
        if let Value::Object(mut m) = body {
            for (k, v) in kept {
                m.insert(k, v);
            }
            *root = m;
        }
    }
    unknown
}

/// Whether a `null` at a field of schema `s` is dropped before defaulting (apiextensions'
/// `PruneNonNullableNullsWithoutDefaults`): the field is not nullable and has no default (a default
/// replaces it instead).
fn drops_null(s: &Value) -> bool {
    s.get("nullable").and_then(Value::as_bool) != Some(true) && s.get("default").is_none()
}

/// Whether a `null` at a field of schema `s` is replaced by its default.
fn defaults_null(s: &Value) -> bool {
    s.get("nullable").and_then(Value::as_bool) != Some(true) && s.get("default").is_some()
}

/// Prunes `value` by `schema` as apiextensions' pruning does: whatever the value's type, an object's keys
/// are looked up in the schema's properties (or additionalProperties), an array's items under its
/// `items`; with no schema (an array under an object's schema, a key no schema knows) every key below
/// is unknown. Below `x-kubernetes-preserve-unknown-fields` nothing is unknown, but what the schema
/// describes is pruned as usual (apiextensions' `skipPrune`). Non-nullable `null`s are dropped or
/// defaulted, then defaults fill in what is missing.
fn walk(value: &mut Value, schema: Option<&Value>, path: &mut PathText, unknown: &mut Vec<String>, root: bool) {
    let preserve = schema.is_some_and(preserves_unknown);
    match value {
        Value::Object(map) => {
            let props = schema.and_then(|s| s.get("properties")).and_then(Value::as_object);
            let additional = schema.and_then(|s| s.get("additionalProperties"));
            let embedded = schema
                .and_then(|s| s.get("x-kubernetes-embedded-resource"))
                .and_then(Value::as_bool)
                == Some(true);
            map.retain(|key, v| {
                let sub = props
                    .and_then(|p| p.get(key))
                    .or_else(|| additional.filter(|a| a.is_object()));
                match sub {
                    Some(s) => {
                        if v.is_null() && drops_null(s) {
                            return false;
                        }
                        path.field(key, |path| walk(v, Some(s), path, unknown, false));
                        true
                    }
                    None => {
                        let allowed = preserve
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
            default_members(map, props, additional, path);
        }
        Value::Array(items) => {
            let item_schema = schema.and_then(|s| s.get("items"));
            if preserve && item_schema.is_none() {
                return;
            }
            for (i, item) in items.iter_mut().enumerate() {
                if item.is_null()
                    && let Some(s) = item_schema.filter(|s| defaults_null(s))
                {
                    *item = s["default"].clone();
                }
                path.index(i, |path| walk(item, item_schema, path, unknown, false));
            }
        }
        _ => {}
    }
}

/// Fills in the defaults of missing (or non-nullable `null`) members.
fn default_members(
    map: &mut Map<String, Value>,
    props: Option<&Map<String, Value>>,
    additional: Option<&Value>,
    path: &mut PathText,
) {
    if let Some(props) = props {
        for (key, s) in props {
            let missing = match map.get(key) {
                None => true,
                Some(v) => v.is_null() && defaults_null(s),
            };
            if missing && let Some(d) = s.get("default") {
                let mut d = d.clone();
                path.field(key, |path| walk(&mut d, Some(s), path, &mut Vec::new(), false));
                map.insert(key.clone(), d);
            }
        }
    }
    if let Some(s) = additional.filter(|a| defaults_null(a)) {
        for v in map.values_mut().filter(|v| v.is_null()) {
            *v = s["default"].clone();
        }
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
    if let Value::Object(map) = value
        && schema.get("x-kubernetes-embedded-resource").and_then(Value::as_bool) == Some(true)
    {
        check_embedded(map, path.as_str(), causes);
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
            check_list_type(items, schema, path.as_str(), causes);
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

/// `field.Duplicate`'s cause.
fn duplicate(path: String, value: &Value) -> FieldCause {
    FieldCause {
        reason: "FieldValueDuplicate".into(),
        field: path,
        message: format!("Duplicate value: {value}"),
    }
}

/// The uniqueness of `x-kubernetes-list-type: set` items and of `map` items' keys (apiextensions'
/// `listtype` validation): each repeated value is reported once, at its second occurrence.
fn check_list_type(items: &[Value], schema: &Value, path: &str, causes: &mut Vec<FieldCause>) {
    let keys: Vec<Cow<'_, Value>> = match schema.get("x-kubernetes-list-type").and_then(Value::as_str) {
        Some("set") => items.iter().map(Cow::Borrowed).collect(),
        Some("map") => {
            if let Some(i) = items.iter().position(|x| !x.is_null() && !x.is_object()) {
                causes.push(FieldCause::invalid(
                    format!("{path}[{i}]"),
                    &items[i],
                    "must be an object for an array of list-type map",
                ));
                return;
            }
            let key_fields: Vec<&str> = schema
                .get("x-kubernetes-list-map-keys")
                .and_then(Value::as_array)
                .map(|k| k.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            items
                .iter()
                .map(|x| {
                    Cow::Owned(Value::Object(
                        key_fields
                            .iter()
                            .filter_map(|k| x.get(*k).map(|v| ((*k).to_owned(), v.clone())))
                            .collect(),
                    ))
                })
                .collect()
        }
        _ => return,
    };
    // By their JSON text, as apiextensions compares compound items (linear in a list of any length);
    // the value says whether the repeat was reported already.
    let mut seen: HashMap<String, bool> = HashMap::new();
    for (i, key) in keys.iter().enumerate() {
        match seen.entry(key.to_string()) {
            Entry::Vacant(entry) => {
                entry.insert(false);
            }
            Entry::Occupied(mut entry) => {
                if !entry.insert(true) {
                    causes.push(duplicate(format!("{path}[{i}]"), key));
                }
            }
        }
    }
}

/// An `x-kubernetes-embedded-resource` object names its apiVersion and kind (apiextensions'
/// `objectmeta` validation of embedded resources; its metadata is not checked here).
fn check_embedded(map: &Map<String, Value>, path: &str, causes: &mut Vec<FieldCause>) {
    for key in ["apiVersion", "kind"] {
        let at = if path.is_empty() {
            key.to_owned()
        } else {
            format!("{path}.{key}")
        };
        match map.get(key) {
            None => causes.push(FieldCause::required(at)),
            Some(Value::String(text)) if text.is_empty() => {
                causes.push(FieldCause::invalid(
                    at,
                    &Value::String(String::new()),
                    "must not be empty",
                ));
            }
            Some(Value::String(text)) => {
                if key == "apiVersion" && text.matches('/').count() > 1 {
                    causes.push(FieldCause::invalid(
                        at,
                        &Value::String(text.clone()),
                        format!("unexpected GroupVersion string: {text}"),
                    ));
                }
            }
            Some(other) => causes.push(FieldCause::invalid(at, other, "must be a string")),
        }
    }
}

/// The field of an error kube-openapi reports without a path (a range check of a number against its
/// format): apiextensions turns the missing path into this text.
const NO_PATH: &str = "<nil>";

/// The format of a value's Go type after apiextensions decodes JSON (integers as int64, other numbers
/// as float64), as kube-openapi names it in a type error.
fn data_format(v: &Value) -> &'static str {
    match type_name(v) {
        "integer" => "int64",
        "number" => "float64",
        _ => "",
    }
}

/// Whether a number is an integer in JSON's sense (2.0 is), which an `integer` schema accepts.
fn is_json_integer(v: &Value) -> bool {
    v.is_i64() || v.is_u64() || v.as_f64().is_some_and(|f| f.fract() == 0.0 && f.is_finite())
}

/// The type check (kube-openapi's `typeValidator`): false when the value is not of the schema's type.
fn check_type(value: &Value, schema: &Value, path: &str, causes: &mut Vec<FieldCause>) -> bool {
    if path.is_empty() {
        return true;
    }
    let actual = type_name(value);
    if schema.get("x-kubernetes-int-or-string").and_then(Value::as_bool) == Some(true) {
        if matches!(actual, "integer" | "string") {
            return true;
        }
        causes.push(FieldCause::invalid(
            path,
            &Value::String(actual.into()),
            format!("{path} in body must be of type integer,string: \"{actual}\""),
        ));
        return false;
    }
    let Some(want) = schema.get("type").and_then(Value::as_str) else {
        return true;
    };
    let ok = actual == want
        || (want == "number" && actual == "integer")
        || (want == "integer" && actual == "number" && is_json_integer(value));
    if ok {
        return true;
    }
    // A number, boolean or object under a schema with a format is named by the formats (a string or an
    // array by the types), as kube-openapi does.
    let format = supported_format(schema);
    let (expected, shown) = if !format.is_empty() && !matches!(value, Value::String(_) | Value::Array(_)) {
        (format, data_format(value))
    } else {
        (want, actual)
    };
    causes.push(FieldCause::invalid(
        path,
        &Value::String(shown.into()),
        format!("{path} in body must be of type {expected}: \"{shown}\""),
    ));
    false
}

/// The schema's `format` when apiextensions keeps it (`StripUnsupportedFormatsPostProcessor`), for the
/// formats this module reads; "" otherwise.
fn supported_format(schema: &Value) -> &str {
    schema
        .get("format")
        .and_then(Value::as_str)
        .filter(|f| matches!(*f, "int32" | "int64" | "float" | "double"))
        .unwrap_or_default()
}

/// Whether a number fits the range of its schema's type and format (`IsValueValidAgainstRange`); the
/// error has no field path.
fn check_range(value: &Value, schema: &Value, path: &str, causes: &mut Vec<FieldCause>) {
    let (type_name, format) = match (schema.get("type").and_then(Value::as_str), supported_format(schema)) {
        (Some("integer"), f @ ("int32" | "int64")) => ("integer", f),
        (Some("integer"), _) => ("integer", ""),
        (Some("number"), f @ ("float" | "double")) => ("number", f),
        _ => return,
    };
    let fits = match (type_name, format) {
        ("integer", "int32") => value
            .as_f64()
            .is_some_and(|f| f.fract() == 0.0 && f >= f64::from(i32::MIN) && f <= f64::from(i32::MAX)),
        ("integer", _) => {
            value.as_i64().is_some() || value.as_f64().is_some_and(|f| f.fract() == 0.0 && f.abs() < 9.2e18)
        }
        ("number", "float") => value.as_f64().is_some_and(|f| f.abs() <= f64::from(f32::MAX)),
        _ => true,
    };
    if fits {
        return;
    }
    let message = if format.is_empty() {
        format!("Checked value must be of type {type_name} (default format) in {path}")
    } else {
        format!("Checked value must be of type {type_name} with format {format} in {path}")
    };
    causes.push(FieldCause::invalid(NO_PATH, &Value::String(String::new()), message));
}

/// Numeric bounds and `multipleOf` (kube-openapi's `numberValidator`), for any number whatever its type.
fn check_number(value: &Value, schema: &Value, path: &str, causes: &mut Vec<FieldCause>) {
    let Some(n) = value.as_f64() else {
        return;
    };
    check_range(value, schema, path, causes);
    let exclusive = |key: &str| schema.get(key).and_then(Value::as_bool) == Some(true);
    if let Some(m) = schema.get("multipleOf").and_then(Value::as_f64)
        && m > 0.0
        && (n / m).fract() != 0.0
    {
        causes.push(FieldCause::invalid(
            path,
            value,
            format!("{path} in body should be a multiple of {m}"),
        ));
    }
    if let Some(max) = schema.get("maximum").and_then(Value::as_f64) {
        if exclusive("exclusiveMaximum") && n >= max {
            causes.push(FieldCause::invalid(
                path,
                value,
                format!("{path} in body should be less than {max}"),
            ));
        } else if n > max {
            causes.push(FieldCause::invalid(
                path,
                value,
                format!("{path} in body should be less than or equal to {max}"),
            ));
        }
    }
    if let Some(min) = schema.get("minimum").and_then(Value::as_f64) {
        if exclusive("exclusiveMinimum") && n <= min {
            causes.push(FieldCause::invalid(
                path,
                value,
                format!("{path} in body should be greater than {min}"),
            ));
        } else if n < min {
            causes.push(FieldCause::invalid(
                path,
                value,
                format!("{path} in body should be greater than or equal to {min}"),
            ));
        }
    }
}

/// The compiled `pattern`s of every schema seen, as the apiserver compiles each once per CRD.
fn pattern_matches(pattern: &str, text: &str) -> bool {
    static COMPILED: std::sync::OnceLock<std::sync::Mutex<std::collections::HashMap<String, Option<regex::Regex>>>> =
        std::sync::OnceLock::new();
    let cache = COMPILED.get_or_init(Default::default);
    let mut cache = cache.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let compiled = cache
        .entry(pattern.to_owned())
        .or_insert_with(|| regex::Regex::new(pattern).ok());
    // A pattern Rust's regex cannot compile passes, as a pattern the apiserver refused never reached a CRD.
    compiled.as_ref().is_none_or(|r| r.is_match(text))
}

/// String lengths (in characters) and `pattern` (kube-openapi's `stringValidator`: the first failure only).
fn check_string(text: &str, value: &Value, schema: &Value, path: &str, causes: &mut Vec<FieldCause>) {
    let chars = text.chars().count() as u64;
    if let Some(max) = schema.get("maxLength").and_then(Value::as_u64)
        && chars > max
    {
        causes.push(FieldCause {
            reason: "FieldValueTooLong".into(),
            field: path.to_owned(),
            message: format!("Too long: may not be more than {max} bytes"),
        });
    } else if let Some(min) = schema.get("minLength").and_then(Value::as_u64)
        && chars < min
    {
        causes.push(FieldCause::invalid(
            path,
            value,
            format!("{path} in body should be at least {min} chars long"),
        ));
    } else if let Some(pattern) = schema.get("pattern").and_then(Value::as_str)
        && !pattern_matches(pattern, text)
    {
        causes.push(FieldCause::invalid(
            path,
            value,
            format!("{path} in body should match '{pattern}'"),
        ));
    }
}

/// `field.TooMany`'s cause.
fn too_many(path: &str, actual: usize, max: u64, what: &str) -> FieldCause {
    FieldCause {
        reason: "FieldValueTooMany".into(),
        field: path.to_owned(),
        message: format!("Too many: {actual}: must have at most {max} {what}"),
    }
}

/// Item and property counts (kube-openapi's `sliceValidator` and `objectValidator`).
fn check_counts(value: &Value, schema: &Value, path: &str, causes: &mut Vec<FieldCause>) {
    let get = |key: &str| schema.get(key).and_then(Value::as_u64);
    let (count, max_key, min_key, what, min_text) = match value {
        Value::Array(items) => (items.len(), "maxItems", "minItems", "items", "items"),
        Value::Object(map) => (map.len(), "maxProperties", "minProperties", "items", "properties"),
        _ => return,
    };
    if let Some(max) = get(max_key)
        && count as u64 > max
    {
        causes.push(too_many(path, count, max, what));
    }
    if let Some(min) = get(min_key)
        && (count as u64) < min
    {
        causes.push(FieldCause::invalid(
            path,
            &Value::Number(count.into()),
            format!("{path} in body should have at least {min} {min_text}"),
        ));
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
    // kube-openapi runs every validator that applies to the value's kind, whether or not its type matched.
    let typed = check_type(value, schema, path, causes);
    match value {
        Value::String(text) => check_string(text, value, schema, path, causes),
        Value::Number(_) => check_number(value, schema, path, causes),
        _ => {}
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
    if typed {
        check_counts(value, schema, path, causes);
    }
    typed
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
    #[test]
    fn non_nullable_nulls_are_dropped_or_defaulted_before_validation() {
        let schema = json!({ "type": "object", "properties": { "spec": { "type": "object", "properties": {
            "conf": { "type": "object", "additionalProperties": { "type": "string" } },
            "mode": { "type": "string", "default": "cluster" },
            "note": { "type": "string", "nullable": true }
        } } } });
        let mut obj = json!({ "spec": { "conf": { "a": null, "b": "x" }, "mode": null, "note": null } });
        assert!(prune_and_default(&mut obj, &schema).is_empty());
        assert_eq!(
            obj,
            json!({ "spec": { "conf": { "b": "x" }, "mode": "cluster", "note": null } })
        );
        assert!(validate(&obj, &schema).is_empty());
    }

    #[test]
    fn items_of_an_array_under_an_object_schema_are_unknown() {
        let mut obj = json!({ "spec": { "cores": 1, "free": [], "labels": [{ "a": "b" }] } });
        let unknown = prune_and_default(&mut obj, &schema());
        assert_eq!(unknown, ["spec.labels[0].a"]);
    }

    #[test]
    fn formats_strings_and_counts_are_checked_as_kube_openapi_checks_them() {
        let schema = json!({ "type": "object", "properties": { "spec": { "type": "object", "properties": {
            "small": { "type": "integer", "format": "int32", "maximum": 2147483647 },
            "big": { "type": "integer", "format": "int64" },
            "plain": { "type": "integer" },
            "name": { "type": "string", "maxLength": 3 },
            "pod": { "type": "string", "pattern": "^[a-z]+$" },
            "list": { "type": "array", "maxItems": 1, "items": { "type": "string" } }
        } } } });
        let causes = validate(
            &json!({ "spec": { "small": 3000000000u64, "big": 1.5, "plain": 2.0, "name": "four",
                "pod": "Not_A_Pod", "list": ["a", "b"] } }),
            &schema,
        );
        let messages: Vec<String> = causes.iter().map(|c| format!("{}: {}", c.field, c.message)).collect();
        assert_eq!(
            messages,
            [
                "spec.big: Invalid value: \"float64\": spec.big in body must be of type int64: \"float64\"",
                "<nil>: Invalid value: \"\": Checked value must be of type integer with format int64 in spec.big",
                "spec.list: Too many: 2: must have at most 1 items",
                "spec.name: Too long: may not be more than 3 bytes",
                "spec.pod: Invalid value: \"Not_A_Pod\": spec.pod in body should match '^[a-z]+$'",
                "<nil>: Invalid value: \"\": Checked value must be of type integer with format int32 in spec.small",
                "spec.small: Invalid value: 3000000000: spec.small in body should be less than or equal to 2147483647",
            ]
        );
    }
}
