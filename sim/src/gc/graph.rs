//! The garbage collector's view of the cluster: who owns whom, by uid.
//!
//! Like the real GC's `uidToNode` graph, it is built from the store's change feed, so finding the
//! dependents of a deleted owner never scans the store.

use std::collections::{HashMap, HashSet};

use serde_json::Value;

use crate::meta;
use crate::registry::ResourceKey;

/// Where one object lives, and which incarnation of it (uid).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct ObjId {
    pub key: ResourceKey,
    pub namespace: String,
    pub name: String,
    pub uid: String,
}

impl ObjId {
    pub fn of(key: &ResourceKey, obj: &Value) -> Self {
        Self {
            key: key.clone(),
            namespace: meta::namespace(obj).to_string(),
            name: meta::name(obj).to_string(),
            uid: meta::uid(obj).to_string(),
        }
    }
}

/// One entry of `metadata.ownerReferences`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct OwnerRef {
    pub api_version: String,
    pub kind: String,
    pub name: String,
    pub uid: String,
    pub block_owner_deletion: bool,
}

impl OwnerRef {
    /// The owner references of an object; entries that do not parse are skipped (the apiserver's
    /// validation rejects them on write, so they only come from a bypassed store).
    pub fn all_of(obj: &Value) -> Vec<OwnerRef> {
        let Some(list) = obj.pointer("/metadata/ownerReferences").and_then(Value::as_array) else {
            return Vec::new();
        };
        list.iter()
            .filter_map(|r| {
                let s = |f: &str| r.get(f).and_then(Value::as_str).map(str::to_string);
                Some(OwnerRef {
                    api_version: s("apiVersion")?,
                    kind: s("kind")?,
                    name: s("name")?,
                    uid: s("uid")?,
                    block_owner_deletion: r.get("blockOwnerDeletion").and_then(Value::as_bool).unwrap_or(false),
                })
            })
            .collect()
    }
}

/// Owner uid → dependents, and uid → identity for every object the GC follows.
#[derive(Debug, Default)]
pub(crate) struct Graph {
    dependents: HashMap<String, HashSet<ObjId>>,
    objects: HashMap<String, ObjId>,
}

impl Graph {
    pub fn clear(&mut self) {
        self.dependents.clear();
        self.objects.clear();
    }

    /// Records that `id` exists with `owners`.
    pub fn insert(&mut self, id: &ObjId, owners: &[OwnerRef]) {
        self.objects.insert(id.uid.clone(), id.clone());
        self.link(id, owners);
    }

    /// Forgets `id` (deleted) and its edges to `owners`. Its own dependents stay listed under its
    /// uid until they change, so the collector can still find them.
    pub fn remove(&mut self, id: &ObjId, owners: &[OwnerRef]) {
        if self.objects.get(&id.uid).is_some_and(|o| o == id) {
            self.objects.remove(&id.uid);
        }
        self.unlink(id, owners);
    }

    pub fn link(&mut self, id: &ObjId, owners: &[OwnerRef]) {
        for o in owners {
            self.dependents.entry(o.uid.clone()).or_default().insert(id.clone());
        }
    }

    pub fn unlink(&mut self, id: &ObjId, owners: &[OwnerRef]) {
        for o in owners {
            if let Some(set) = self.dependents.get_mut(&o.uid) {
                set.remove(id);
                if set.is_empty() {
                    self.dependents.remove(&o.uid);
                }
            }
        }
    }

    pub fn dependents_of(&self, uid: &str) -> Vec<ObjId> {
        self.dependents
            .get(uid)
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default()
    }

    pub fn has_dependents(&self, uid: &str) -> bool {
        self.dependents.get(uid).is_some_and(|s| !s.is_empty())
    }

    /// The object with this uid, if the GC has seen it.
    pub fn object(&self, uid: &str) -> Option<&ObjId> {
        self.objects.get(uid)
    }
}

/// How a dependent's owner references changed: (added, removed, changed as (old, new)).
pub(crate) fn diff(old: &[OwnerRef], new: &[OwnerRef]) -> (Vec<OwnerRef>, Vec<OwnerRef>, Vec<(OwnerRef, OwnerRef)>) {
    let mut added = Vec::new();
    let mut changed = Vec::new();
    for n in new {
        match old.iter().find(|o| o.uid == n.uid) {
            Some(o) if o != n => changed.push((o.clone(), n.clone())),
            Some(_) => {}
            None => added.push(n.clone()),
        }
    }
    let removed = old
        .iter()
        .filter(|o| !new.iter().any(|n| n.uid == o.uid))
        .cloned()
        .collect();
    (added, removed, changed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn r(uid: &str, block: bool) -> OwnerRef {
        OwnerRef {
            api_version: "v1".into(),
            kind: "Pod".into(),
            name: "p".into(),
            uid: uid.into(),
            block_owner_deletion: block,
        }
    }

    #[test]
    fn parses_owner_references() {
        let obj = json!({ "metadata": { "ownerReferences": [
            { "apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "1", "blockOwnerDeletion": true },
            { "apiVersion": "v1", "kind": "Pod", "name": "broken" }
        ] } });
        assert_eq!(OwnerRef::all_of(&obj), vec![r("1", true)]);
    }

    #[test]
    fn diffs_by_uid() {
        let (added, removed, changed) = diff(&[r("1", true), r("2", false)], &[r("1", false), r("3", false)]);
        assert_eq!(added, vec![r("3", false)]);
        assert_eq!(removed, vec![r("2", false)]);
        assert_eq!(changed, vec![(r("1", true), r("1", false))]);
    }

    #[test]
    fn dependents_survive_their_owner_until_they_change() {
        let key = ResourceKey {
            group: String::new(),
            resource: "configmaps".into(),
        };
        let owner = ObjId {
            key: key.clone(),
            namespace: "a".into(),
            name: "o".into(),
            uid: "1".into(),
        };
        let dep = ObjId {
            key,
            namespace: "a".into(),
            name: "d".into(),
            uid: "2".into(),
        };
        let mut g = Graph::default();
        g.insert(&owner, &[]);
        g.insert(&dep, &[r("1", false)]);
        g.remove(&owner, &[]);
        assert_eq!(g.dependents_of("1"), vec![dep.clone()]);
        g.remove(&dep, &[r("1", false)]);
        assert!(!g.has_dependents("1"));
    }
}
