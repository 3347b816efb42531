//! Server-side apply: merging an applied configuration into the live object, conflicts with
//! other managers, `force`, and removal of fields a manager stopped applying.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

use crate::list_types::{KindSchema, ListType};
use crate::managed_fields::{self, FieldPath, FieldSet, ManagedEntry, PathElement, path_string, value_at};
use crate::status::ApiError;

/// One apply request.
pub struct ApplyRequest<'a> {
    pub applied: &'a Value,
    pub schema: KindSchema<'a>,
    pub manager: &'a str,
    pub api_version: &'a str,
    pub subresource: &'a str,
    pub force: bool,
    pub now: &'a str,
}

/// Applies `req.applied` onto `live` (None when the object does not exist yet) and returns the
/// new object with its managedFields, or the 409 the real apiserver returns for conflicts.
pub fn apply(live: Option<&Value>, req: &ApplyRequest<'_>) -> Result<Value, ApiError> {
    let mut live_obj = live.cloned().unwrap_or_else(|| json!({}));
    // Items that leave a defaulted key field out are matched (and written) with the default, as
    // structured-merge-diff does; the manager still owns only the fields it sent.
    fill_key_defaults(&mut live_obj, &req.schema, &mut Vec::new());
    let live_obj = &live_obj;
    let applied_set = FieldSet::of(req.applied, &req.schema, false);
    let mut keyed = req.applied.clone();
    fill_key_defaults(&mut keyed, &req.schema, &mut Vec::new());
    let applied = &keyed;
    let mut entries = managed_fields::read(live_obj);
    let me = ManagedEntry {
        manager: req.manager.to_string(),
        operation: "Apply".into(),
        api_version: req.api_version.to_string(),
        time: req.now.to_string(),
        subresource: req.subresource.to_string(),
        fields: FieldSet::default(),
    };
    let previous = entries
        .iter()
        .find(|e| e.same_slot(&me))
        .map(|e| e.fields.clone())
        .unwrap_or_default();

    if !req.force {
        let mut conflicts: Vec<(String, FieldPath)> = Vec::new();
        for p in &applied_set.paths {
            if !matches!(p.last(), Some(PathElement::Field(_) | PathElement::Index(_))) {
                continue;
            }
            let Some(live_value) = value_at(live_obj, p) else {
                continue;
            };
            if value_at(applied, p).is_some_and(|applied| same_value(live_value, applied)) {
                continue;
            }
            for e in entries
                .iter()
                .filter(|e| !e.same_slot(&me) && e.fields.paths.contains(p))
            {
                conflicts.push((manager_label(e), p.clone()));
            }
        }
        if !conflicts.is_empty() {
            return Err(conflict_error(&conflicts));
        }
    }

    let mut merged = live_obj.clone();
    merge_into(&mut merged, applied, &req.schema, &mut Vec::new());

    // Fields this manager applied before but not now go, unless someone else owns them too.
    let others: Vec<&ManagedEntry> = entries.iter().filter(|e| !e.same_slot(&me)).collect();
    let mut dropped: Vec<FieldPath> = previous
        .difference(&applied_set)
        .paths
        .into_iter()
        .filter(|p| !others.iter().any(|e| e.fields.paths.iter().any(|q| q.starts_with(p))))
        .collect();
    dropped.sort_by_key(|p| std::cmp::Reverse(p.len()));
    for p in &dropped {
        remove_path(&mut merged, p);
    }
    // Maps and lists left empty by the removal go too, unless someone owns them.
    let owned_by_anyone = |q: &[PathElement]| {
        applied_set
            .paths
            .iter()
            .chain(others.iter().flat_map(|e| e.fields.paths.iter()))
            .any(|p| p.starts_with(q))
    };
    for p in &dropped {
        for len in (1..p.len()).rev() {
            let parent = &p[..len];
            let empty = match value_at(&merged, parent) {
                Some(Value::Object(m)) => m.is_empty(),
                Some(Value::Array(a)) => a.is_empty(),
                _ => false,
            };
            if !empty || owned_by_anyone(parent) {
                break;
            }
            remove_path(&mut merged, parent);
        }
    }

    if req.force {
        for e in entries.iter_mut().filter(|e| !e.same_slot(&me)) {
            e.fields = e.fields.difference(&applied_set);
        }
    }
    match entries.iter_mut().find(|e| e.same_slot(&me)) {
        Some(e) => {
            e.fields = applied_set;
            e.time = req.now.to_string();
            e.api_version = req.api_version.to_string();
        }
        None => entries.insert(
            0,
            ManagedEntry {
                fields: applied_set,
                ..me
            },
        ),
    }
    managed_fields::write(&mut merged, &entries);
    Ok(merged)
}

/// Equality as structured-merge-diff compares values: numbers by value, so an int and a float of the
/// same number (`1` from Go's YAML, `1.0` from a client that writes floats) are one value, not a conflict.
fn same_value(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x == y || x.as_f64().zip(y.as_f64()).is_some_and(|(x, y)| x == y),
        (Value::Array(x), Value::Array(y)) => x.len() == y.len() && x.iter().zip(y).all(|(x, y)| same_value(x, y)),
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| same_value(v, w)))
        }
        _ => a == b,
    }
}

/// How a conflicting manager is named in messages (`printManager` in the apiserver).
fn manager_label(e: &ManagedEntry) -> String {
    let mut s = format!("{:?}", e.manager);
    if !e.subresource.is_empty() {
        s = format!("{s} with subresource {:?}", e.subresource);
    }
    if e.operation == "Update" {
        s = format!("{s} using {}", e.api_version);
    }
    s
}

fn conflict_error(conflicts: &[(String, FieldPath)]) -> ApiError {
    let message = if let [(manager, path)] = conflicts {
        format!(
            "Apply failed with 1 conflict: conflict with {manager}: {}",
            path_string(path)
        )
    } else {
        let mut by_manager: BTreeMap<&str, Vec<String>> = BTreeMap::new();
        for (m, p) in conflicts {
            by_manager.entry(m.as_str()).or_default().push(path_string(p));
        }
        let mut lines = Vec::new();
        for (m, paths) in by_manager {
            lines.push(format!("conflicts with {m}:"));
            lines.extend(paths.into_iter().map(|p| format!("- {p}")));
        }
        format!("Apply failed with {} conflicts: {}", conflicts.len(), lines.join("\n"))
    };
    let causes: Vec<Value> = conflicts
        .iter()
        .map(|(m, p)| json!({ "reason": "FieldManagerConflict", "message": format!("conflict with {m}"), "field": path_string(p) }))
        .collect();
    ApiError::Custom {
        code: 409,
        reason: "Conflict".into(),
        message,
        details: Some(json!({ "causes": causes })),
    }
}

/// Writes the schema's default into every associative-list item that lacks a defaulted key field.
fn fill_key_defaults(value: &mut Value, schema: &KindSchema<'_>, names: &mut Vec<String>) {
    match value {
        Value::Object(m) => {
            for (k, v) in m.iter_mut() {
                names.push(k.clone());
                fill_key_defaults(v, schema, names);
                names.pop();
            }
        }
        Value::Array(items) => {
            let path: Vec<&str> = names.iter().map(String::as_str).collect();
            let defaults: Vec<(String, Value)> = match schema.list_type(&path) {
                ListType::Map(keys) => keys
                    .into_iter()
                    .filter_map(|k| schema.key_default(&path, &k).map(|d| (k, d)))
                    .collect(),
                _ => Vec::new(),
            };
            for item in items.iter_mut() {
                if let Value::Object(fields) = item {
                    for (k, d) in &defaults {
                        fields.entry(k.clone()).or_insert_with(|| d.clone());
                    }
                }
                fill_key_defaults(item, schema, names);
            }
        }
        _ => {}
    }
}

/// Merges an applied configuration into an object by the schema's list semantics.
fn merge_into<'a>(target: &mut Value, applied: &'a Value, schema: &KindSchema<'_>, names: &mut Vec<&'a str>) {
    match (target, applied) {
        (Value::Object(t), Value::Object(a)) if !schema.map_is_atomic(names) => {
            for (k, v) in a {
                names.push(k.as_str());
                match t.get_mut(k) {
                    Some(existing) if !v.is_null() => merge_into(existing, v, schema, names),
                    _ => {
                        t.insert(k.clone(), v.clone());
                    }
                }
                names.pop();
            }
        }
        (Value::Array(t), Value::Array(a)) => match schema.list_type(names) {
            ListType::Map(keys) => {
                for item in a {
                    let pos = t.iter().position(|x| keys.iter().all(|k| x.get(k) == item.get(k)));
                    match pos {
                        Some(i) => merge_into(&mut t[i], item, schema, names),
                        None => t.push(item.clone()),
                    }
                }
            }
            ListType::Set => {
                for item in a {
                    if !t.contains(item) {
                        t.push(item.clone());
                    }
                }
            }
            ListType::Atomic => *t = a.clone(),
        },
        (t, a) => *t = a.clone(),
    }
}

/// Removes the field, list item or set member at a path.
fn remove_path(obj: &mut Value, path: &[PathElement]) {
    let Some((last, parent_path)) = path.split_last() else {
        return;
    };
    let mut cur = obj;
    for el in parent_path {
        let next = match el {
            PathElement::Field(f) => cur.get_mut(f),
            PathElement::Index(i) => cur.get_mut(*i),
            PathElement::Key(k) => {
                let key: Map<String, Value> = serde_json::from_str(k).unwrap_or_default();
                cur.as_array_mut()
                    .and_then(|a| a.iter_mut().find(|x| key.iter().all(|(kk, kv)| x.get(kk) == Some(kv))))
            }
            PathElement::Value(v) => {
                let want: Value = serde_json::from_str(v).unwrap_or(Value::Null);
                cur.as_array_mut().and_then(|a| a.iter_mut().find(|x| **x == want))
            }
        };
        match next {
            Some(n) => cur = n,
            None => return,
        }
    }
    match last {
        PathElement::Field(f) => {
            if let Value::Object(m) = cur {
                m.remove(f);
            }
        }
        PathElement::Index(i) => {
            if let Value::Array(a) = cur
                && *i < a.len()
            {
                a.remove(*i);
            }
        }
        PathElement::Key(k) => {
            let key: Map<String, Value> = serde_json::from_str(k).unwrap_or_default();
            if let Value::Array(a) = cur {
                a.retain(|x| !key.iter().all(|(kk, kv)| x.get(kk) == Some(kv)));
            }
        }
        PathElement::Value(v) => {
            let want: Value = serde_json::from_str(v).unwrap_or(Value::Null);
            if let Value::Array(a) = cur {
                a.retain(|x| *x != want);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req<'a>(applied: &'a Value, manager: &'a str, force: bool) -> ApplyRequest<'a> {
        ApplyRequest {
            applied,
            schema: KindSchema::new("apps", "Deployment", None),
            manager,
            api_version: "apps/v1",
            subresource: "",
            force,
            now: "2024-01-01T00:00:00Z",
        }
    }

    #[test]
    fn apply_conflict_force_and_removal() {
        let a1 = json!({ "apiVersion": "apps/v1", "kind": "Deployment", "metadata": { "name": "d", "labels": { "x": "1", "y": "1" } }, "spec": { "replicas": 1 } });
        let live = apply(None, &req(&a1, "alice", false)).unwrap();
        assert_eq!(live["metadata"]["managedFields"][0]["manager"], "alice");

        // Same value from another manager: shared, no conflict.
        let same = json!({ "spec": { "replicas": 1 } });
        let live = apply(Some(&live), &req(&same, "bob", false)).unwrap();
        // The same number written as a float (Go's YAML gives 1, serde 1.0): still the same value.
        let float = json!({ "spec": { "replicas": 1.0 } });
        apply(Some(&live), &req(&float, "carol", false)).unwrap();
        // Different value: conflict naming alice.
        let other = json!({ "spec": { "replicas": 3 } });
        let err = apply(Some(&live), &req(&other, "bob", false)).unwrap_err();
        assert_eq!(err.code(), 409);
        assert_eq!(
            err.to_string(),
            "Apply failed with 1 conflict: conflict with \"alice\": .spec.replicas"
        );
        // Forced: bob takes it.
        let live = apply(Some(&live), &req(&other, "bob", true)).unwrap();
        assert_eq!(live["spec"]["replicas"], 3);

        // alice stops applying label y: it is removed; x stays.
        let a2 = json!({ "metadata": { "name": "d", "labels": { "x": "1" } } });
        let live = apply(Some(&live), &req(&a2, "alice", false)).unwrap();
        assert_eq!(live["metadata"]["labels"], json!({ "x": "1" }));
        assert_eq!(live["spec"]["replicas"], 3, "owned by bob, kept");
    }

    #[test]
    fn a_key_field_left_out_is_its_default() {
        // Helm v4 applies a chart's Service without `protocol`; the stored port has the default.
        let applied = json!({ "apiVersion": "v1", "kind": "Service", "metadata": { "name": "s" },
            "spec": { "ports": [{ "name": "http", "port": 80, "targetPort": "http" }] } });
        let live = json!({ "apiVersion": "v1", "kind": "Service", "metadata": { "name": "s" },
            "spec": { "ports": [{ "name": "http", "port": 80, "protocol": "TCP", "targetPort": "http" }] } });
        let first = apply(Some(&live), &svc_req(&applied)).unwrap();
        assert_eq!(first["spec"]["ports"], live["spec"]["ports"]);
        let fields = &first["metadata"]["managedFields"][0]["fieldsV1"]["f:spec"]["f:ports"];
        let item = &fields[r#"k:{"port":80,"protocol":"TCP"}"#];
        assert!(item.get("f:port").is_some(), "{fields}");
        assert!(
            item.get("f:protocol").is_none(),
            "only what was sent is owned: {fields}"
        );
        let again = apply(Some(&first), &svc_req(&applied)).unwrap();
        assert_eq!(again["spec"]["ports"], live["spec"]["ports"]);
    }

    fn svc_req(applied: &Value) -> ApplyRequest<'_> {
        ApplyRequest {
            applied,
            schema: KindSchema::new("", "Service", None),
            manager: "helm",
            api_version: "v1",
            subresource: "",
            force: false,
            now: "2024-01-01T00:00:00Z",
        }
    }

    #[test]
    fn containers_merge_by_key() {
        let live = json!({ "spec": { "template": { "spec": { "containers": [{ "name": "a", "image": "1" }, { "name": "b", "image": "2" }] } } } });
        let applied = json!({ "spec": { "template": { "spec": { "containers": [{ "name": "b", "image": "3" }] } } } });
        let out = apply(Some(&live), &req(&applied, "m", true)).unwrap();
        assert_eq!(out["spec"]["template"]["spec"]["containers"][0]["image"], "1");
        assert_eq!(out["spec"]["template"]["spec"]["containers"][1]["image"], "3");
    }
}
