//! How one setting is put into a pod without duplicating it, so that decorating twice changes nothing.
//!
//! "Already there" is judged by [`covers`]: the pod's value holds every field ours sets, with the same
//! values. The API server defaults fields between two decorations (a container's
//! `terminationMessagePath`, a port's `protocol`, a ConfigMap volume's `defaultMode`, ...), so plain
//! equality would see a defaulted copy of our own setting as a different one.

use serde::Serialize;
use serde_json::Value;

/// True when `existing` holds every field `ours` sets, with the same value; lists must have the same
/// length and cover item by item. Values that do not serialize are never covered.
pub(super) fn covers<T: Serialize>(existing: &T, ours: &T) -> bool {
    match (serde_json::to_value(existing), serde_json::to_value(ours)) {
        (Ok(existing), Ok(ours)) => value_covers(&existing, &ours),
        _ => false,
    }
}

fn value_covers(existing: &Value, ours: &Value) -> bool {
    match (existing, ours) {
        (_, Value::Null) => true,
        (Value::Object(existing), Value::Object(ours)) => ours.iter().all(|(key, value)| match existing.get(key) {
            Some(present) => value_covers(present, value),
            // An empty list or object we set is the same as one the pod leaves out.
            None => is_empty(value),
        }),
        (Value::Array(existing), Value::Array(ours)) => {
            existing.len() == ours.len() && existing.iter().zip(ours).all(|(e, o)| value_covers(e, o))
        }
        (existing, ours) => existing == ours,
    }
}

fn is_empty(value: &Value) -> bool {
    match value {
        Value::Null => true,
        Value::Array(items) => items.is_empty(),
        Value::Object(fields) => fields.is_empty(),
        _ => false,
    }
}

/// What putting an item into a list did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Put {
    /// The list already held it.
    Unchanged,
    /// It was appended.
    Added,
    /// An item with the same key was replaced by it, in place.
    Replaced,
}

/// Puts `item` into `list`, keyed by `same_key`: appended when no item has its key, left alone when the
/// item with its key covers it, replaced in place otherwise.
pub(super) fn upsert<T: Clone + Serialize>(list: &mut Vec<T>, item: &T, same_key: impl Fn(&T) -> bool) -> Put {
    match list.iter_mut().find(|existing| same_key(existing)) {
        Some(existing) if covers(existing, item) => Put::Unchanged,
        Some(existing) => {
            *existing = item.clone();
            Put::Replaced
        }
        None => {
            list.push(item.clone());
            Put::Added
        }
    }
}

/// Puts `item` into `list` under the same key rule as [`upsert`], but an item with the same key that
/// does not cover it is a conflict: `Err` with the index of that item, and the list is left alone.
pub(super) fn insert_or_conflict<T: Clone + Serialize>(
    list: &mut Vec<T>,
    item: &T,
    same_key: impl Fn(&T) -> bool,
) -> Result<Put, usize> {
    match list.iter().position(same_key) {
        Some(index) if covers(&list[index], item) => Ok(Put::Unchanged),
        Some(index) => Err(index),
        None => {
            list.push(item.clone());
            Ok(Put::Added)
        }
    }
}

/// Appends `item` unless an item of the list already covers it (lists without a key: tolerations,
/// host aliases, envFrom sources).
pub(super) fn append_unless_covered<T: Clone + Serialize>(list: &mut Vec<T>, item: &T) -> Put {
    if list.iter().any(|existing| covers(existing, item)) {
        Put::Unchanged
    } else {
        list.push(item.clone());
        Put::Added
    }
}

/// Sets an optional whole-object setting (affinity, security contexts, DNS config, lifecycle): ours
/// replaces the pod's unless the pod's already covers it.
pub(super) fn replace_unless_covered<T: Clone + Serialize>(slot: &mut Option<T>, ours: &T) {
    if !slot.as_ref().is_some_and(|existing| covers(existing, ours)) {
        *slot = Some(ours.clone());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn covering_ignores_fields_only_the_pod_has() {
        let defaulted = json!({"name": "x", "protocol": "TCP", "containerPort": 80});
        assert!(value_covers(&defaulted, &json!({"name": "x", "containerPort": 80})));
        assert!(!value_covers(&defaulted, &json!({"name": "x", "containerPort": 81})));
        assert!(!value_covers(
            &json!({"name": "x"}),
            &json!({"name": "x", "containerPort": 80})
        ));
    }

    #[test]
    fn lists_cover_item_by_item_and_empty_means_absent() {
        assert!(value_covers(&json!({"a": [1, 2]}), &json!({"a": [1, 2]})));
        assert!(!value_covers(&json!({"a": [1, 2]}), &json!({"a": [1]})));
        assert!(!value_covers(&json!({"a": [2, 1]}), &json!({"a": [1, 2]})));
        assert!(value_covers(&json!({}), &json!({"a": [], "b": {}})));
        assert!(!value_covers(&json!({}), &json!({"a": ""})));
    }

    #[test]
    fn upsert_appends_keeps_or_replaces_in_place() {
        let mut list = vec![json!({"k": 1, "v": "a", "d": true}), json!({"k": 2, "v": "b"})];
        let key = |k: i64| move |item: &Value| item["k"] == json!(k);
        assert_eq!(upsert(&mut list, &json!({"k": 1, "v": "a"}), key(1)), Put::Unchanged);
        assert_eq!(upsert(&mut list, &json!({"k": 1, "v": "z"}), key(1)), Put::Replaced);
        assert_eq!(list[0], json!({"k": 1, "v": "z"}));
        assert_eq!(upsert(&mut list, &json!({"k": 3}), key(3)), Put::Added);
        assert_eq!(list.len(), 3);
    }

    #[test]
    fn insert_or_conflict_reports_the_conflicting_index() {
        let mut list = vec![json!({"k": 1, "v": "a"})];
        let key = |item: &Value| item["k"] == json!(1);
        assert_eq!(insert_or_conflict(&mut list, &json!({"k": 1}), key), Ok(Put::Unchanged));
        assert_eq!(insert_or_conflict(&mut list, &json!({"k": 1, "v": "b"}), key), Err(0));
        assert_eq!(list, vec![json!({"k": 1, "v": "a"})]);
    }

    #[test]
    fn replace_unless_covered_keeps_a_defaulted_copy() {
        let mut slot = Some(json!({"a": 1, "defaulted": true}));
        replace_unless_covered(&mut slot, &json!({"a": 1}));
        assert_eq!(slot, Some(json!({"a": 1, "defaulted": true})));
        replace_unless_covered(&mut slot, &json!({"b": 2}));
        assert_eq!(slot, Some(json!({"b": 2})));
        let mut empty = None;
        replace_unless_covered(&mut empty, &json!(1));
        assert_eq!(empty, Some(json!(1)));
    }

    #[test]
    fn append_unless_covered_skips_a_covering_item() {
        let mut list = vec![json!({"key": "a", "effect": "NoSchedule", "tolerationSeconds": 5})];
        assert_eq!(
            append_unless_covered(&mut list, &json!({"key": "a", "effect": "NoSchedule"})),
            Put::Unchanged
        );
        assert_eq!(append_unless_covered(&mut list, &json!({"key": "b"})), Put::Added);
        assert_eq!(list.len(), 2);
    }
}
