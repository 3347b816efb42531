//! Decoding a built-in object as kube-apiserver decodes a request body into its Go types, judged
//! against the kind's OpenAPI schema (`openapi_builtin`): a value of the wrong JSON type (a bool
//! where a string goes, a string for an int32, `1.5` or 2^31 for an int32), or a malformed
//! quantity, is the 400 `Pod in version "v1" cannot be handled as a Pod: json: cannot unmarshal
//! bool into Go struct field ExecAction.spec.containers.readinessProbe.ProbeHandler.exec.command
//! of type string`; fields the kind does not have are collected for `fieldValidation`, in the
//! same walk. `null` is accepted anywhere, as Go's decoder leaves the zero value.
//!
//! Not judged: base64 of `format: byte` fields and RFC 3339 of times (only that they are strings).

use serde_json::{Map, Value};

use crate::openapi_builtin;
use crate::quantity;
use crate::schema::PathText;

const QUANTITY: &str = "io.k8s.apimachinery.pkg.api.resource.Quantity";
const INT_OR_STRING: &str = "io.k8s.apimachinery.pkg.util.intstr.IntOrString";
const PROBE: &str = "io.k8s.api.core.v1.Probe";
/// Fields of `core.Probe` that Go holds in its embedded `ProbeHandler` (named in Go's paths).
const PROBE_HANDLER_FIELDS: &[&str] = &["exec", "httpGet", "tcpSocket", "grpc"];

/// What decoding found: the unknown fields (`spec.containers[0].imagee`), or the first error as
/// the apiserver's decoder words it.
pub fn builtin(group: &str, version: &str, kind: &str, obj: &Value) -> Result<Vec<String>, String> {
    let Some((name, root)) = openapi_builtin::root_schema(group, version, kind) else {
        return Ok(Vec::new());
    };
    let mut walk = Walk {
        defs: openapi_builtin::definitions(),
        go_path: Vec::with_capacity(16),
        unknown: Vec::new(),
    };
    walk.value(&mut PathText::default(), obj, root, Some(name), name, 0)?;
    Ok(walk.unknown)
}

struct Walk<'a> {
    defs: &'a Map<String, Value>,
    /// The Go path (field names only, embedded structs named), for type errors.
    go_path: Vec<&'a str>,
    unknown: Vec<String>,
}

/// `json.UnmarshalTypeError`'s name for a JSON value.
fn json_kind(v: &Value) -> String {
    match v {
        Value::Null => "null".into(),
        Value::Bool(_) => "bool".into(),
        Value::Number(_) => "number".into(),
        Value::String(_) => "string".into(),
        Value::Array(_) => "array".into(),
        Value::Object(_) => "object".into(),
    }
}

/// The Go package-qualified name of a definition (`io.k8s.api.core.v1.Container` → `v1.Container`).
fn go_type_name(def: &str) -> String {
    let mut parts = def.rsplit('.');
    let name = parts.next().unwrap_or(def);
    match parts.next() {
        Some(pkg) => format!("{pkg}.{name}"),
        None => name.to_string(),
    }
}

fn short_name(def: &str) -> &str {
    def.rsplit('.').next().unwrap_or(def)
}

impl<'a> Walk<'a> {
    /// Follows `$ref`s and single-element `allOf`s, returning the schema and the definition named last.
    fn resolve(&self, mut schema: &'a Value, mut name: Option<&'a str>) -> (&'a Value, Option<&'a str>) {
        for _ in 0..8 {
            if let Some(r) = schema
                .get("$ref")
                .and_then(Value::as_str)
                .and_then(|r| r.strip_prefix("#/components/schemas/"))
            {
                match self.defs.get_key_value(r) {
                    Some((key, next)) => {
                        schema = next;
                        name = Some(key.as_str());
                    }
                    None => break,
                }
            } else if let Some([only]) = schema.get("allOf").and_then(Value::as_array).map(Vec::as_slice) {
                schema = only;
            } else {
                break;
            }
        }
        (schema, name)
    }

    /// The Go type a schema decodes into, for messages.
    fn go_type(&self, schema: &'a Value, name: Option<&'a str>) -> String {
        let (schema, name) = self.resolve(schema, name);
        match schema.get("type").and_then(Value::as_str) {
            Some("string") if schema.get("format").and_then(Value::as_str) == Some("byte") => "[]uint8".into(),
            Some("string") => match name {
                Some(n) if n.ends_with("meta.v1.Time") || n.ends_with("meta.v1.MicroTime") => go_type_name(n),
                _ => "string".into(),
            },
            Some("integer") => match schema.get("format").and_then(Value::as_str) {
                Some("int32") => "int32".into(),
                _ => "int64".into(),
            },
            Some("number") => "float64".into(),
            Some("boolean") => "bool".into(),
            Some("array") => match schema.get("items") {
                Some(items) => format!("[]{}", self.go_type(items, None)),
                None => "[]interface {}".into(),
            },
            Some("object") => match (name, schema.get("additionalProperties").filter(|a| a.is_object())) {
                (_, Some(values)) if schema.get("properties").is_none() => {
                    format!("map[string]{}", self.go_type(values, None))
                }
                (Some(n), _) => go_type_name(n),
                (None, _) => "map[string]interface {}".into(),
            },
            _ => name.map_or_else(|| "interface {}".into(), go_type_name),
        }
    }

    fn mismatch(&self, value_kind: String, schema: &'a Value, name: Option<&'a str>, strukt: &str) -> String {
        let go_type = self.go_type(schema, name);
        if self.go_path.is_empty() {
            format!("json: cannot unmarshal {value_kind} into Go value of type {go_type}")
        } else {
            format!(
                "json: cannot unmarshal {value_kind} into Go struct field {}.{} of type {go_type}",
                short_name(strukt),
                self.go_path.join(".")
            )
        }
    }

    /// Decodes `value` as `schema` (named `name` when it is a definition); `strukt` is the Go
    /// struct holding the field being decoded.
    fn value(
        &mut self,
        path: &mut PathText,
        value: &Value,
        schema: &'a Value,
        name: Option<&'a str>,
        strukt: &'a str,
        depth: usize,
    ) -> Result<(), String> {
        // Deeply nested CRD schemas (JSONSchemaProps) recurse; real objects are far shallower.
        if depth > 64 || value.is_null() {
            return Ok(());
        }
        let (schema, name) = self.resolve(schema, name);
        match name {
            Some(QUANTITY) => {
                return match value {
                    Value::String(s) => quantity::parse(s.trim()).map(drop).map_err(str::to_string),
                    Value::Number(n) => quantity::parse(&n.to_string()).map(drop).map_err(str::to_string),
                    Value::Bool(b) => quantity::parse(&b.to_string()).map(drop).map_err(str::to_string),
                    _ => Err(quantity::FORMAT_WRONG.to_string()),
                };
            }
            Some(INT_OR_STRING) => {
                return match value {
                    Value::String(_) => Ok(()),
                    Value::Number(n) if n.as_i64().is_some_and(|i| i32::try_from(i).is_ok()) => Ok(()),
                    Value::Number(n) => Err(format!("json: cannot unmarshal number {n} into Go value of type int32")),
                    other => Err(format!(
                        "json: cannot unmarshal {} into Go value of type int32",
                        json_kind(other)
                    )),
                };
            }
            _ => {}
        }
        // Schemas that take several shapes (JSONSchemaPropsOrBool, ...) or any JSON (`v1.JSON`,
        // RawExtension, FieldsV1: objects without fields) decode whatever they are given.
        let any_json = schema.get("oneOf").is_some()
            || schema.get("anyOf").is_some()
            || (schema.get("properties").is_none() && schema.get("additionalProperties").is_none());
        if any_json
            && !matches!(
                schema.get("type").and_then(Value::as_str),
                Some("string" | "integer" | "number" | "boolean" | "array")
            )
        {
            return Ok(());
        }
        let ok = match schema.get("type").and_then(Value::as_str) {
            Some("string") => value.is_string(),
            Some("boolean") => value.is_boolean(),
            Some("number") => value.is_number(),
            Some("integer") => {
                let Value::Number(n) = value else {
                    return Err(self.mismatch(json_kind(value), schema, name, strukt));
                };
                let fits = match schema.get("format").and_then(Value::as_str) {
                    Some("int32") => n.as_i64().is_some_and(|i| i32::try_from(i).is_ok()),
                    _ => n.as_i64().is_some(),
                };
                if !fits {
                    return Err(self.mismatch(format!("number {n}"), schema, name, strukt));
                }
                true
            }
            Some("array") => {
                let Value::Array(items) = value else {
                    return Err(self.mismatch(json_kind(value), schema, name, strukt));
                };
                if let Some(item_schema) = schema.get("items") {
                    for (i, item) in items.iter().enumerate() {
                        path.index(i, |path| self.value(path, item, item_schema, None, strukt, depth + 1))?;
                    }
                }
                true
            }
            Some("object") | None => {
                let Value::Object(map) = value else {
                    return Err(self.mismatch(json_kind(value), schema, name, strukt));
                };
                self.object(path, map, schema, name, strukt, depth)?;
                true
            }
            Some(_) => true,
        };
        if ok {
            Ok(())
        } else {
            Err(self.mismatch(json_kind(value), schema, name, strukt))
        }
    }

    fn object(
        &mut self,
        path: &mut PathText,
        map: &Map<String, Value>,
        schema: &'a Value,
        name: Option<&'a str>,
        strukt: &'a str,
        depth: usize,
    ) -> Result<(), String> {
        let props = schema.get("properties").and_then(Value::as_object);
        let additional = schema.get("additionalProperties").filter(|a| a.is_object());
        // Fields belong to this struct; a map's values stay in the struct that holds the map.
        let inner = match (props, name) {
            (Some(_), Some(n)) => n,
            _ => strukt,
        };
        for (k, v) in map {
            let Some((key, field_schema)) = props
                .and_then(|p| p.get_key_value(k))
                .map(|(key, s)| (Some(key.as_str()), s))
                .or_else(|| additional.map(|s| (None, s)))
            else {
                self.unknown.push(path.joined(k));
                continue;
            };
            let pushed = match key {
                Some(key) => {
                    let embedded = name == Some(PROBE) && PROBE_HANDLER_FIELDS.contains(&key);
                    if embedded {
                        self.go_path.push("ProbeHandler");
                    }
                    self.go_path.push(key);
                    if embedded { 2 } else { 1 }
                }
                None => 0,
            };
            let strukt = if name == Some(PROBE) && key.is_some_and(|k| PROBE_HANDLER_FIELDS.contains(&k)) {
                "ProbeHandler"
            } else {
                inner
            };
            let r = path.field(k, |path| self.value(path, v, field_schema, None, strukt, depth + 1));
            for _ in 0..pushed {
                self.go_path.pop();
            }
            r?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(spec: Value) -> Value {
        json!({ "apiVersion": "v1", "kind": "Pod", "metadata": { "name": "p" }, "spec": spec })
    }

    #[test]
    fn type_mismatches_are_worded_as_go_words_them() {
        let p = pod(
            json!({ "containers": [{ "name": "c", "image": "i", "readinessProbe": { "exec": { "command": [true] } } }] }),
        );
        assert_eq!(
            builtin("", "v1", "Pod", &p),
            Err("json: cannot unmarshal bool into Go struct field ExecAction.spec.containers.readinessProbe.ProbeHandler.exec.command of type string".into())
        );
        let p = pod(json!({ "containers": [{ "name": "c", "image": { "repository": "spark" } }] }));
        assert_eq!(
            builtin("", "v1", "Pod", &p),
            Err(
                "json: cannot unmarshal object into Go struct field Container.spec.containers.image of type string"
                    .into()
            )
        );
        let p = pod(json!({ "containers": "c" }));
        assert_eq!(
            builtin("", "v1", "Pod", &p),
            Err(
                "json: cannot unmarshal string into Go struct field PodSpec.spec.containers of type []v1.Container"
                    .into()
            )
        );
        let p =
            pod(json!({ "containers": [{ "name": "c", "image": "i", "livenessProbe": { "periodSeconds": 1.5 } }] }));
        assert_eq!(
            builtin("", "v1", "Pod", &p),
            Err("json: cannot unmarshal number 1.5 into Go struct field Probe.spec.containers.livenessProbe.periodSeconds of type int32".into())
        );
        let p = pod(json!({ "activeDeadlineSeconds": 3_000_000_000i64, "containers": [] }));
        assert_eq!(builtin("", "v1", "Pod", &p), Ok(Vec::new()), "int64 holds it");
        let p = json!({ "metadata": { "name": "p", "labels": { "a": 1 } } });
        assert_eq!(
            builtin("", "v1", "ConfigMap", &p),
            Err("json: cannot unmarshal number into Go struct field ObjectMeta.metadata.labels of type string".into())
        );
    }

    #[test]
    fn quantities_must_parse_and_null_is_the_zero_value() {
        let p = pod(
            json!({ "containers": [{ "name": "c", "image": "i", "resources": { "requests": { "cpu": "one" } } }] }),
        );
        assert_eq!(builtin("", "v1", "Pod", &p), Err(quantity::FORMAT_WRONG.into()));
        let p = pod(
            json!({ "containers": [{ "name": "c", "image": "i", "resources": { "requests": { "cpu": 1.5, "memory": " 1Gi " } },
            "ports": [{ "containerPort": 80 }], "livenessProbe": { "tcpSocket": { "port": "http" } } }],
            "nodeSelector": { "a": null }, "tolerations": null }),
        );
        assert_eq!(builtin("", "v1", "Pod", &p), Ok(Vec::new()));
        let p = pod(
            json!({ "containers": [{ "name": "c", "image": "i", "livenessProbe": { "tcpSocket": { "port": true } } }] }),
        );
        assert!(builtin("", "v1", "Pod", &p).is_err());
    }

    #[test]
    fn unknown_fields_are_collected_on_the_way() {
        let p = pod(json!({ "containers": [{ "name": "c", "image": "i", "imagee": "x" }], "bogus": 1 }));
        assert_eq!(
            builtin("", "v1", "Pod", &p),
            Ok(vec!["spec.bogus".to_string(), "spec.containers[0].imagee".to_string()])
        );
    }

    #[test]
    fn schemas_of_any_shape_take_what_they_are_given() {
        // JSONSchemaProps: `enum` items are any JSON, `additionalProperties` a bool or a schema.
        let crd = json!({ "metadata": { "name": "xs.example.com" }, "spec": { "group": "example.com", "scope": "Namespaced",
            "names": { "plural": "xs", "kind": "X" },
            "versions": [{ "name": "v1", "served": true, "storage": true, "schema": { "openAPIV3Schema": {
                "type": "object", "additionalProperties": false,
                "properties": { "mode": { "type": "string", "enum": ["a", 1, { "b": true }], "default": "a" },
                    "conf": { "type": "object", "additionalProperties": { "type": "string" } } } } } }] } });
        assert_eq!(
            builtin("apiextensions.k8s.io", "v1", "CustomResourceDefinition", &crd),
            Ok(Vec::new())
        );
    }
}
