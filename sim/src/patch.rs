//! The non-apply patch types: JSON merge patch (RFC 7386), JSON patch (RFC 6902) and Kubernetes'
//! strategic merge patch.

use serde_json::{Map, Value};

use crate::list_types::{KindSchema, ListType};

/// Why a patch could not be applied.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PatchError {
    #[error("invalid JSON Patch: {0}")]
    ParseJsonPatch(String),
    #[error("{0}")]
    ApplyJsonPatch(String),
    #[error("unable to find api field in struct {0} for the json field \"{1}\"")]
    StrategicDirective(String, String),
    #[error("{0}")]
    Strategic(String),
}

/// JSON merge patch: maps merge, `null` deletes, everything else replaces.
pub fn merge_patch(target: &mut Value, patch: &Value) {
    json_patch::merge(target, patch);
}

/// JSON patch (RFC 6902).
pub fn json_patch(target: &mut Value, patch: &Value) -> Result<(), PatchError> {
    let ops: json_patch::Patch =
        serde_json::from_value(patch.clone()).map_err(|e| PatchError::ParseJsonPatch(e.to_string()))?;
    json_patch::patch(target, &ops).map_err(|e| PatchError::ApplyJsonPatch(e.to_string()))
}

const SET_ORDER: &str = "$setElementOrder/";
const DELETE_FROM_PRIMITIVE: &str = "$deleteFromPrimitiveList/";

/// Strategic merge patch as `k8s.io/apimachinery/pkg/util/strategicpatch` applies it, with merge
/// keys from [`KindSchema`]: `$patch` (merge/replace/delete), `$retainKeys`,
/// `$setElementOrder/<list>` and `$deleteFromPrimitiveList/<list>`.
pub fn strategic_merge_patch(original: &Value, patch: &Value, schema: &KindSchema<'_>) -> Result<Value, PatchError> {
    let (Value::Object(orig), Value::Object(p)) = (original, patch) else {
        return Err(PatchError::Strategic(
            "strategic merge patch: the patch must be a JSON object".into(),
        ));
    };
    Ok(merge_map(orig, p, schema, &mut Vec::new())?
        .map(Value::Object)
        .unwrap_or(Value::Object(Map::new())))
}

/// Merges a patch map into an original map; `None` means the map itself is deleted.
fn merge_map<'p>(
    orig: &Map<String, Value>,
    patch: &'p Map<String, Value>,
    schema: &KindSchema<'_>,
    path: &mut Vec<&'p str>,
) -> Result<Option<Map<String, Value>>, PatchError> {
    match patch.get("$patch").and_then(Value::as_str) {
        Some("delete") => return Ok(None),
        Some("replace") => {
            let mut out = patch.clone();
            out.remove("$patch");
            return Ok(Some(strip_directives(out)));
        }
        Some("merge") | None => {}
        Some(other) => {
            return Err(PatchError::Strategic(format!(
                "Unknown patch type: {other} in map: {patch:?}"
            )));
        }
    }
    let mut out = orig.clone();
    for (key, pv) in patch {
        if key == "$patch" || key == "$retainKeys" || key.starts_with(SET_ORDER) {
            continue;
        }
        if let Some(list_name) = key.strip_prefix(DELETE_FROM_PRIMITIVE) {
            if let (Some(Value::Array(items)), Value::Array(remove)) = (out.get_mut(list_name), pv) {
                items.retain(|i| !remove.contains(i));
            }
            continue;
        }
        if pv.is_null() {
            out.remove(key);
            continue;
        }
        path.push(key.as_str());
        let merged = match (out.get(key), pv) {
            (Some(Value::Object(o)), Value::Object(p)) => merge_map(o, p, schema, path)?.map(Value::Object),
            (Some(Value::Array(o)), Value::Array(p)) => Some(Value::Array(merge_list(o, p, schema, path)?)),
            (None, Value::Object(p)) => merge_map(&Map::new(), p, schema, path)?.map(Value::Object),
            (None, Value::Array(p)) => Some(Value::Array(merge_list(&[], p, schema, path)?)),
            (_, other) => Some(other.clone()),
        };
        path.pop();
        match merged {
            Some(v) => {
                out.insert(key.clone(), v);
            }
            None => {
                out.remove(key);
            }
        }
    }
    if let Some(Value::Array(retain)) = patch.get("$retainKeys") {
        let keep: Vec<&str> = retain.iter().filter_map(Value::as_str).collect();
        out.retain(|k, _| keep.contains(&k.as_str()));
    }
    for (key, order) in patch {
        if let (Some(list_name), Value::Array(order)) = (key.strip_prefix(SET_ORDER), order) {
            path.push(list_name);
            let merge_key = match schema.list_type(path) {
                ListType::Map(keys) => keys.first().cloned(),
                _ => None,
            };
            path.pop();
            if let Some(Value::Array(items)) = out.get_mut(list_name) {
                reorder(items, order, merge_key.as_deref());
            }
        }
    }
    Ok(Some(out))
}

fn merge_list<'p>(
    orig: &[Value],
    patch: &'p [Value],
    schema: &KindSchema<'_>,
    path: &mut Vec<&'p str>,
) -> Result<Vec<Value>, PatchError> {
    // A `{"$patch": "replace"}` element replaces the whole list with the other elements.
    if patch
        .iter()
        .any(|i| i.get("$patch").and_then(Value::as_str) == Some("replace"))
    {
        return Ok(patch
            .iter()
            .filter(|i| i.get("$patch").is_none())
            .cloned()
            .map(|v| match v {
                Value::Object(m) => Value::Object(strip_directives(m)),
                other => other,
            })
            .collect());
    }
    match schema.list_type(path) {
        ListType::Map(keys) => {
            let Some(merge_key) = keys.first() else {
                return Ok(patch.to_vec());
            };
            let mut out: Vec<Value> = orig.to_vec();
            for item in patch {
                let Value::Object(pm) = item else {
                    return Err(PatchError::Strategic(format!(
                        "merging an object in json but data type is not map, the key is {merge_key}"
                    )));
                };
                let Some(kv) = pm.get(merge_key) else {
                    return Err(PatchError::Strategic(format!(
                        "map: {pm:?} does not contain declared merge key: {merge_key}"
                    )));
                };
                let pos = out.iter().position(|o| o.get(merge_key) == Some(kv));
                let deleting = pm.get("$patch").and_then(Value::as_str) == Some("delete");
                match (pos, deleting) {
                    (Some(i), true) => {
                        out.remove(i);
                    }
                    (None, true) => {}
                    (Some(i), false) => {
                        let merged = match &out[i] {
                            Value::Object(om) => merge_map(om, pm, schema, path)?,
                            _ => Some(strip_directives(pm.clone())),
                        };
                        match merged {
                            Some(m) => out[i] = Value::Object(m),
                            None => {
                                out.remove(i);
                            }
                        }
                    }
                    (None, false) => {
                        if let Some(m) = merge_map(&Map::new(), pm, schema, path)? {
                            out.push(Value::Object(m));
                        }
                    }
                }
            }
            Ok(out)
        }
        ListType::Set => {
            let mut out = orig.to_vec();
            for item in patch {
                if !out.contains(item) {
                    out.push(item.clone());
                }
            }
            Ok(out)
        }
        ListType::Atomic => Ok(patch
            .iter()
            .cloned()
            .map(|v| match v {
                Value::Object(m) => Value::Object(strip_directives(m)),
                other => other,
            })
            .collect()),
    }
}

/// Orders list items as `$setElementOrder` says; items it does not name keep their relative order
/// after the named ones.
fn reorder(items: &mut Vec<Value>, order: &[Value], merge_key: Option<&str>) {
    let key_of = |v: &Value| -> Value {
        match merge_key {
            Some(k) => v.get(k).cloned().unwrap_or(Value::Null),
            None => v.clone(),
        }
    };
    let order_keys: Vec<Value> = order.iter().map(&key_of).collect();
    let mut named: Vec<(usize, Value)> = Vec::new();
    let mut rest: Vec<Value> = Vec::new();
    for item in items.drain(..) {
        match order_keys.iter().position(|k| *k == key_of(&item)) {
            Some(i) => named.push((i, item)),
            None => rest.push(item),
        }
    }
    named.sort_by_key(|(i, _)| *i);
    items.extend(named.into_iter().map(|(_, v)| v));
    items.extend(rest);
}

/// Removes patch directives from a value that is inserted whole.
fn strip_directives(mut m: Map<String, Value>) -> Map<String, Value> {
    m.retain(|k, _| !k.starts_with('$'));
    for v in m.values_mut() {
        match v {
            Value::Object(inner) => *inner = strip_directives(std::mem::take(inner)),
            Value::Array(items) => {
                items.retain(|i| i.get("$patch").is_none() || i.as_object().is_some_and(|o| o.len() > 1));
                for i in items.iter_mut() {
                    if let Value::Object(inner) = i {
                        *inner = strip_directives(std::mem::take(inner));
                    }
                }
            }
            _ => {}
        }
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod() -> Value {
        json!({
            "metadata": { "name": "p", "labels": { "a": "1" }, "finalizers": ["x"] },
            "spec": { "containers": [
                { "name": "main", "image": "busybox", "env": [{ "name": "A", "value": "1" }] },
                { "name": "side", "image": "envoy" }
            ] }
        })
    }

    fn smp(orig: &Value, patch: Value) -> Value {
        strategic_merge_patch(orig, &patch, &KindSchema::new("", "Pod", None)).unwrap()
    }

    #[test]
    fn containers_merge_by_name() {
        let out = smp(
            &pod(),
            json!({ "spec": { "containers": [{ "name": "main", "image": "alpine" }] } }),
        );
        assert_eq!(out["spec"]["containers"][0]["image"], "alpine");
        assert_eq!(out["spec"]["containers"][0]["env"][0]["name"], "A");
        assert_eq!(out["spec"]["containers"][1]["name"], "side");
        let merged = merge_patch_of(
            &pod(),
            json!({ "spec": { "containers": [{ "name": "main", "image": "alpine" }] } }),
        );
        assert_eq!(
            merged["spec"]["containers"].as_array().unwrap().len(),
            1,
            "merge patch replaces lists"
        );
    }

    fn merge_patch_of(orig: &Value, patch: Value) -> Value {
        let mut v = orig.clone();
        merge_patch(&mut v, &patch);
        v
    }

    #[test]
    fn env_merges_and_deletes() {
        let out = smp(
            &pod(),
            json!({ "spec": { "containers": [{ "name": "main", "env": [{ "name": "B", "value": "2" }, { "name": "A", "$patch": "delete" }] }] } }),
        );
        assert_eq!(
            out["spec"]["containers"][0]["env"],
            json!([{ "name": "B", "value": "2" }])
        );
    }

    #[test]
    fn directives() {
        let out = smp(
            &pod(),
            json!({ "metadata": { "finalizers": ["y"], "labels": { "a": null, "b": "2" } } }),
        );
        assert_eq!(out["metadata"]["finalizers"], json!(["x", "y"]));
        assert_eq!(out["metadata"]["labels"], json!({ "b": "2" }));
        let out = smp(
            &pod(),
            json!({ "metadata": { "$deleteFromPrimitiveList/finalizers": ["x"] } }),
        );
        assert_eq!(out["metadata"]["finalizers"], json!([]));
        let out = smp(
            &pod(),
            json!({ "spec": { "containers": [{ "name": "only", "image": "i" }, { "$patch": "replace" }] } }),
        );
        assert_eq!(out["spec"]["containers"], json!([{ "name": "only", "image": "i" }]));
        let out = smp(
            &pod(),
            json!({ "spec": { "$setElementOrder/containers": [{ "name": "side" }, { "name": "main" }], "containers": [{ "name": "main", "image": "x" }] } }),
        );
        assert_eq!(out["spec"]["containers"][0]["name"], "side");
        assert_eq!(out["spec"]["containers"][1]["image"], "x");
        let out = smp(
            &pod(),
            json!({ "metadata": { "labels": { "$patch": "replace", "z": "9" } } }),
        );
        assert_eq!(out["metadata"]["labels"], json!({ "z": "9" }));
    }

    #[test]
    fn json_patch_ops_and_errors() {
        let mut v = pod();
        json_patch(
            &mut v,
            &json!([{ "op": "replace", "path": "/metadata/labels/a", "value": "2" }]),
        )
        .unwrap();
        assert_eq!(v["metadata"]["labels"]["a"], "2");
        assert!(json_patch(&mut v, &json!([{ "op": "remove", "path": "/nope" }])).is_err());
        assert!(json_patch(&mut v, &json!({ "op": "x" })).is_err());
    }
}
