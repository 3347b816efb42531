//! Conversion between the stored form of an object and the version a client reads or writes.
//!
//! Most resources are served in one version, so conversion only sets `apiVersion`. Events are
//! the exception: `events.k8s.io/v1` Events are `v1` Events stored under other field names.
//! CRDs with several versions use the `None` conversion strategy (only `apiVersion` changes).

use std::borrow::Cow;
use std::sync::Arc;

use serde_json::{Map, Value};

use crate::registry::{ResourceInfo, api_version};

/// (core/v1 field, events.k8s.io/v1 field)
const EVENT_FIELDS: &[(&str, &str)] = &[
    ("involvedObject", "regarding"),
    ("message", "note"),
    ("reportingComponent", "reportingController"),
    ("source", "deprecatedSource"),
    ("firstTimestamp", "deprecatedFirstTimestamp"),
    ("lastTimestamp", "deprecatedLastTimestamp"),
    ("count", "deprecatedCount"),
];

fn is_events_group(info: &ResourceInfo) -> bool {
    info.group == "events.k8s.io" && info.resource == "events"
}

/// Whether [`into_storage`] of [`into_version`] gives back exactly the stored object: not for Events,
/// whose renamed fields could collide with fields of the same name.
pub fn round_trips(info: &ResourceInfo) -> bool {
    !is_events_group(info)
}

/// Converts a stored object to what `info` in `version` serves.
pub fn to_version(info: &ResourceInfo, stored: &Value, version: &str) -> Value {
    into_version(info, stored.clone(), version)
}

/// [`to_version`] of an object the caller gives up (no copy).
pub fn into_version(info: &ResourceInfo, mut stored: Value, version: &str) -> Value {
    if let Value::Object(map) = &mut stored {
        if is_events_group(info) {
            rename_fields(map, EVENT_FIELDS.iter().map(|(core, ev)| (*core, *ev)));
        }
        map.insert("apiVersion".into(), Value::String(api_version(&info.group, version)));
        map.insert("kind".into(), Value::String(info.kind.clone()));
    }
    stored
}

/// [`to_version`] of a stored object, shared instead of copied where converting would change nothing.
pub fn shared_version(info: &ResourceInfo, stored: &Arc<Value>, version: &str) -> Arc<Value> {
    match as_version(info, stored, version) {
        Cow::Borrowed(_) => Arc::clone(stored),
        Cow::Owned(converted) => Arc::new(converted),
    }
}

/// [`to_version`] without a copy where it would change nothing (the object is stored in the version
/// served, as nearly all are): watches and lists match selectors against every object of a resource,
/// and a deep copy of each only to read it was most of their cost.
pub fn as_version<'a>(info: &ResourceInfo, stored: &'a Value, version: &str) -> Cow<'a, Value> {
    let field = |name: &str| stored.get(name).and_then(Value::as_str);
    if !is_events_group(info)
        && field("kind") == Some(info.kind.as_str())
        && field("apiVersion") == Some(api_version(&info.group, version).as_str())
    {
        Cow::Borrowed(stored)
    } else {
        Cow::Owned(to_version(info, stored, version))
    }
}

/// Converts an object a client sent (in `info`'s group and the given version) to its stored form.
pub fn to_storage(info: &ResourceInfo, obj: &Value) -> Value {
    into_storage(info, obj.clone())
}

/// [`to_storage`] of an object the caller gives up (no copy).
pub fn into_storage(info: &ResourceInfo, mut obj: Value) -> Value {
    if let Value::Object(map) = &mut obj {
        let storage_api_version = if is_events_group(info) {
            rename_fields(map, EVENT_FIELDS.iter().map(|(core, ev)| (*ev, *core)));
            "v1".to_string()
        } else {
            api_version(&info.group, &info.storage_version)
        };
        map.insert("apiVersion".into(), Value::String(storage_api_version));
        map.insert("kind".into(), Value::String(info.kind.clone()));
    }
    obj
}

fn rename_fields<'a>(map: &mut Map<String, Value>, pairs: impl Iterator<Item = (&'a str, &'a str)>) {
    for (from, to) in pairs {
        if let Some(v) = map.remove(from) {
            map.insert(to.to_string(), v);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::{Gvr, Registry};
    use serde_json::json;

    #[test]
    fn events_convert_both_ways() {
        let reg = Registry::builtin();
        let ev = reg.lookup(&Gvr::new("events.k8s.io", "v1", "events")).unwrap();
        let sent = json!({ "apiVersion": "events.k8s.io/v1", "kind": "Event", "note": "hi", "regarding": { "kind": "Pod" }, "reportingController": "c" });
        let stored = to_storage(&ev, &sent);
        assert_eq!(stored["apiVersion"], "v1");
        assert_eq!(stored["message"], "hi");
        assert_eq!(stored["involvedObject"]["kind"], "Pod");
        assert_eq!(to_version(&ev, &stored, "v1"), sent);
        let core = reg.lookup(&Gvr::new("", "v1", "events")).unwrap();
        assert_eq!(to_version(&core, &stored, "v1")["message"], "hi");
        // Renamed fields are never served from the stored object as it is.
        assert!(matches!(as_version(&ev, &stored, "v1"), Cow::Owned(_)));
        assert_eq!(*as_version(&ev, &stored, "v1"), sent);
    }

    #[test]
    fn an_object_stored_in_the_version_served_is_served_without_a_copy() {
        let reg = Registry::builtin();
        let pods = reg.lookup(&Gvr::new("", "v1", "pods")).unwrap();
        let stored = to_storage(&pods, &json!({ "metadata": { "name": "p" } }));
        let served = as_version(&pods, &stored, "v1");
        assert!(matches!(served, Cow::Borrowed(_)));
        assert_eq!(*served, to_version(&pods, &stored, "v1"));
        // Another kind or version in the stored object: converted, as before.
        for other in [
            json!({ "apiVersion": "v1", "kind": "Other" }),
            json!({ "apiVersion": "v2", "kind": "Pod" }),
            json!("x"),
        ] {
            let served = as_version(&pods, &other, "v1");
            assert!(matches!(served, Cow::Owned(_)), "{other}");
            assert_eq!(*served, to_version(&pods, &other, "v1"));
        }
    }
}
