//! Field sets and `metadata.managedFields` (FieldsV1), as structured-merge-diff tracks them:
//! which manager owns which fields, updated on every write.

use std::collections::BTreeSet;

use serde_json::{Map, Value, json};

use crate::list_types::{KindSchema, ListType};

/// One step of a field path.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PathElement {
    /// `f:<name>`
    Field(String),
    /// `k:{"name":"x"}` — an associative list item by its keys (canonical JSON).
    Key(String),
    /// `v:"x"` — a set member (JSON).
    Value(String),
    /// `i:3`
    Index(usize),
}

pub type FieldPath = Vec<PathElement>;

/// Renders a path as structured-merge-diff prints it: `.spec.containers[name="a"].image`.
pub fn path_string(path: &[PathElement]) -> String {
    let mut s = String::new();
    for el in path {
        match el {
            PathElement::Field(f) => {
                s.push('.');
                s.push_str(f);
            }
            PathElement::Key(k) => {
                let parts: Vec<String> = serde_json::from_str::<Map<String, Value>>(k)
                    .map(|m| m.iter().map(|(k, v)| format!("{k}={v}")).collect())
                    .unwrap_or_default();
                s.push_str(&format!("[{}]", parts.join(",")));
            }
            PathElement::Value(v) => s.push_str(&format!("[={v}]")),
            PathElement::Index(i) => s.push_str(&format!("[{i}]")),
        }
    }
    s
}

/// A set of field paths. A path is a member when its field is owned; the parents of members are
/// implied.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FieldSet {
    pub paths: BTreeSet<FieldPath>,
}

/// Top-level and metadata fields no manager owns.
fn ignored(path: &[PathElement]) -> bool {
    match path {
        [PathElement::Field(f)] => f == "apiVersion" || f == "kind",
        [PathElement::Field(m), PathElement::Field(f)] if m == "metadata" => matches!(
            f.as_str(),
            "name"
                | "namespace"
                | "uid"
                | "resourceVersion"
                | "generation"
                | "creationTimestamp"
                | "deletionTimestamp"
                | "deletionGracePeriodSeconds"
                | "managedFields"
                | "selfLink"
                | "generateName"
        ),
        _ => false,
    }
}

impl FieldSet {
    /// The fields an object sets. `with_parents` also makes every map and list a member (as
    /// Update operations record `.`), which apply sets do not.
    pub fn of(obj: &Value, schema: &KindSchema<'_>, with_parents: bool) -> Self {
        let mut set = FieldSet::default();
        let mut path = Vec::new();
        let mut names = Vec::new();
        walk(obj, schema, with_parents, &mut path, &mut names, &mut set.paths);
        set
    }

    pub fn difference(&self, other: &FieldSet) -> FieldSet {
        FieldSet {
            paths: self.paths.difference(&other.paths).cloned().collect(),
        }
    }

    pub fn union(&self, other: &FieldSet) -> FieldSet {
        FieldSet {
            paths: self.paths.union(&other.paths).cloned().collect(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.paths.is_empty()
    }

    /// FieldsV1 JSON.
    pub fn to_fields_v1(&self) -> Value {
        Value::Object(self.to_fields_v1_map())
    }

    /// FieldsV1 JSON, as the map it is.
    fn to_fields_v1_map(&self) -> Map<String, Value> {
        let mut root = Map::new();
        for path in &self.paths {
            let mut node = &mut root;
            for (i, el) in path.iter().enumerate() {
                let key = element_key(el);
                let child = node.entry(key).or_insert_with(|| json!({}));
                let Value::Object(child) = child else { break };
                if i == path.len() - 1 {
                    // A member that also has children is written as `.`.
                    if !child.is_empty() {
                        child.insert(".".into(), json!({}));
                    }
                }
                node = child;
            }
        }
        // Members recorded before their children were added: mark with `.`.
        mark_members(&mut root, &self.paths, &mut Vec::new());
        root
    }

    /// Parses FieldsV1 JSON; unknown keys are skipped.
    pub fn from_fields_v1(v: &Value) -> Self {
        let mut set = FieldSet::default();
        if let Value::Object(m) = v {
            parse_node(m, &mut Vec::new(), &mut set.paths);
        }
        set
    }
}

fn element_key(el: &PathElement) -> String {
    match el {
        PathElement::Field(f) => format!("f:{f}"),
        PathElement::Key(k) => format!("k:{k}"),
        PathElement::Value(v) => format!("v:{v}"),
        PathElement::Index(i) => format!("i:{i}"),
    }
}

fn mark_members(node: &mut Map<String, Value>, members: &BTreeSet<FieldPath>, path: &mut FieldPath) {
    let keys: Vec<String> = node.keys().filter(|k| *k != ".").cloned().collect();
    for key in keys {
        let Some(el) = parse_element(&key) else { continue };
        path.push(el);
        if let Some(Value::Object(child)) = node.get_mut(&key) {
            if members.contains(path) && !child.is_empty() {
                child.insert(".".into(), json!({}));
            }
            mark_members(child, members, path);
        }
        path.pop();
    }
}

fn parse_element(key: &str) -> Option<PathElement> {
    let (prefix, rest) = key.split_at_checked(2)?;
    match prefix {
        "f:" => Some(PathElement::Field(rest.to_string())),
        "k:" => Some(PathElement::Key(rest.to_string())),
        "v:" => Some(PathElement::Value(rest.to_string())),
        "i:" => rest.parse().ok().map(PathElement::Index),
        _ => None,
    }
}

fn parse_node(m: &Map<String, Value>, path: &mut FieldPath, out: &mut BTreeSet<FieldPath>) {
    for (key, child) in m {
        if key == "." {
            if !path.is_empty() {
                out.insert(path.clone());
            }
            continue;
        }
        let Some(el) = parse_element(key) else { continue };
        path.push(el);
        match child {
            Value::Object(c) if !c.is_empty() => parse_node(c, path, out),
            _ => {
                out.insert(path.clone());
            }
        }
        path.pop();
    }
}

fn walk<'v>(
    value: &'v Value,
    schema: &KindSchema<'_>,
    with_parents: bool,
    path: &mut FieldPath,
    names: &mut Vec<&'v str>,
    out: &mut BTreeSet<FieldPath>,
) {
    match value {
        Value::Object(m) if !m.is_empty() && !schema.map_is_atomic(names) => {
            if with_parents && !path.is_empty() {
                out.insert(path.clone());
            }
            for (k, v) in m {
                path.push(PathElement::Field(k.clone()));
                if !ignored(path) {
                    names.push(k.as_str());
                    walk(v, schema, with_parents, path, names, out);
                    names.pop();
                }
                path.pop();
            }
        }
        Value::Array(items) if !items.is_empty() => match schema.list_type(names) {
            ListType::Map(keys) => {
                if with_parents {
                    out.insert(path.clone());
                }
                for item in items {
                    let mut key = Map::new();
                    for k in &keys {
                        if let Some(v) = item.get(k).cloned().or_else(|| schema.key_default(names, k)) {
                            key.insert(k.clone(), v);
                        }
                    }
                    path.push(PathElement::Key(Value::Object(key).to_string()));
                    out.insert(path.clone());
                    if let Value::Object(fields) = item {
                        for (k, v) in fields {
                            path.push(PathElement::Field(k.clone()));
                            names.push(k.as_str());
                            walk(v, schema, with_parents, path, names, out);
                            names.pop();
                            path.pop();
                        }
                    }
                    path.pop();
                }
            }
            ListType::Set => {
                if with_parents {
                    out.insert(path.clone());
                }
                for item in items {
                    path.push(PathElement::Value(item.to_string()));
                    out.insert(path.clone());
                    path.pop();
                }
            }
            ListType::Atomic => {
                out.insert(path.clone());
            }
        },
        _ => {
            if !path.is_empty() {
                out.insert(path.clone());
            }
        }
    }
}

/// The value at a field path, if present.
pub fn value_at<'v>(obj: &'v Value, path: &[PathElement]) -> Option<&'v Value> {
    let mut cur = obj;
    for el in path {
        cur = match el {
            PathElement::Field(f) => cur.get(f)?,
            PathElement::Index(i) => cur.get(*i)?,
            PathElement::Key(k) => {
                let key: Map<String, Value> = serde_json::from_str(k).ok()?;
                cur.as_array()?
                    .iter()
                    .find(|item| key.iter().all(|(kk, kv)| item.get(kk) == Some(kv)))?
            }
            PathElement::Value(v) => {
                let want: Value = serde_json::from_str(v).ok()?;
                cur.as_array()?.iter().find(|item| **item == want)?
            }
        };
    }
    Some(cur)
}

/// One `managedFields` entry.
#[derive(Debug, Clone, PartialEq)]
pub struct ManagedEntry {
    pub manager: String,
    /// `Apply` or `Update`.
    pub operation: String,
    pub api_version: String,
    pub time: String,
    pub subresource: String,
    pub fields: FieldSet,
}

impl ManagedEntry {
    pub fn to_json(&self) -> Value {
        self.to_json_with(self.fields.to_fields_v1())
    }

    /// The entry's JSON with `fields_v1` for its fields (its own `fields` are not read).
    fn to_json_with(&self, fields_v1: Value) -> Value {
        let mut v = json!({
            "manager": self.manager,
            "operation": self.operation,
            "apiVersion": self.api_version,
            "time": self.time,
            "fieldsType": "FieldsV1",
            "fieldsV1": fields_v1,
        });
        if !self.subresource.is_empty() {
            v["subresource"] = json!(self.subresource);
        }
        v
    }

    pub fn from_json(v: &Value) -> Option<Self> {
        let mut entry = Self::header_of(v)?;
        entry.fields = v.get("fieldsV1").map(FieldSet::from_fields_v1).unwrap_or_default();
        Some(entry)
    }

    /// The entry without its fields (left empty), or `None` when it has no operation.
    fn header_of(v: &Value) -> Option<Self> {
        let s = |k: &str| v.get(k).and_then(Value::as_str).unwrap_or("").to_string();
        let operation = s("operation");
        if operation.is_empty() {
            return None;
        }
        Some(Self {
            manager: s("manager"),
            operation,
            api_version: s("apiVersion"),
            time: s("time"),
            subresource: s("subresource"),
            fields: FieldSet::default(),
        })
    }

    /// Whether this is the entry of the same manager, operation, version and subresource.
    pub fn same_slot(&self, other: &ManagedEntry) -> bool {
        self.manager == other.manager
            && self.operation == other.operation
            && self.subresource == other.subresource
            && (self.operation == "Apply" || self.api_version == other.api_version)
    }
}

/// Reads `metadata.managedFields`.
pub fn read(obj: &Value) -> Vec<ManagedEntry> {
    stored(obj).iter().filter_map(ManagedEntry::from_json).collect()
}

/// `metadata.managedFields` as stored (empty when absent or not a list).
fn stored(obj: &Value) -> &[Value] {
    obj.pointer("/metadata/managedFields")
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

/// Writes `metadata.managedFields` (dropping entries that own nothing).
pub fn write(obj: &mut Value, entries: &[ManagedEntry]) {
    let list = entries
        .iter()
        .filter(|e| !e.fields.is_empty())
        .map(ManagedEntry::to_json)
        .collect();
    write_raw(obj, list);
}

/// Writes `metadata.managedFields` as given, removing it when `list` is empty.
fn write_raw(obj: &mut Value, list: Vec<Value>) {
    let meta = crate::meta::metadata_mut(obj);
    if list.is_empty() {
        meta.remove("managedFields");
    } else {
        meta.insert("managedFields".into(), Value::Array(list));
    }
}

/// The paths (`in_scope`) a write from `old` to `new` changed (set anew, or a leaf's value changed; list
/// items only count when new) and removed. Subtrees equal on both sides are skipped without listing
/// their fields: a kubelet's status update leaves the spec and metadata as they were, and walking them
/// on every write was most of a simulated API server's time under pod churn.
fn changes(
    old: Option<&Value>,
    new: &Value,
    schema: &KindSchema<'_>,
    in_scope: &dyn Fn(&FieldPath) -> bool,
) -> (BTreeSet<FieldPath>, BTreeSet<FieldPath>) {
    let mut changes = Changes {
        schema,
        in_scope,
        changed: BTreeSet::new(),
        removed: BTreeSet::new(),
    };
    match old {
        Some(old) => changes.diff(old, new, &mut Vec::new(), &mut Vec::new()),
        None => changes.changed = changes.listed(new, &mut Vec::new(), &mut Vec::new()),
    }
    (changes.changed, changes.removed)
}

struct Changes<'s, 'k> {
    schema: &'s KindSchema<'k>,
    in_scope: &'s dyn Fn(&FieldPath) -> bool,
    changed: BTreeSet<FieldPath>,
    removed: BTreeSet<FieldPath>,
}

impl Changes<'_, '_> {
    /// Compares the subtrees `old` and `new` at `path` (`names`: its field names, for the schema).
    fn diff<'v>(&mut self, old: &'v Value, new: &'v Value, path: &mut FieldPath, names: &mut Vec<&'v str>) {
        if old == new {
            // The same fields, with the same values.
            return;
        }
        match (old, new) {
            // The fields of a map are the union of its members' (as `walk` lists them).
            (Value::Object(o), Value::Object(n))
                if !o.is_empty() && !n.is_empty() && !self.schema.map_is_atomic(names) =>
            {
                for (k, nv) in n {
                    path.push(PathElement::Field(k.clone()));
                    if !ignored(path) {
                        names.push(k.as_str());
                        match o.get(k) {
                            Some(ov) => self.diff(ov, nv, path, names),
                            None => {
                                let added = self.listed(nv, path, names);
                                self.changed.extend(added);
                            }
                        }
                        names.pop();
                    }
                    path.pop();
                }
                for (k, ov) in o.iter().filter(|(k, _)| !n.contains_key(*k)) {
                    path.push(PathElement::Field(k.clone()));
                    if !ignored(path) {
                        names.push(k.as_str());
                        let gone = self.listed(ov, path, names);
                        self.removed.extend(gone);
                        names.pop();
                    }
                    path.pop();
                }
            }
            _ => self.compare_whole(old, new, path, names),
        }
    }

    /// Lists every field of both subtrees and compares them (lists, leaves, atomic maps).
    fn compare_whole<'v>(&mut self, old: &'v Value, new: &'v Value, path: &mut FieldPath, names: &mut Vec<&'v str>) {
        let base = path.len();
        let old_set = self.listed(old, path, names);
        let new_set = self.listed(new, path, names);
        for p in &new_set {
            let leaf = matches!(p.last(), Some(PathElement::Field(_) | PathElement::Index(_)));
            if !old_set.contains(p) || (leaf && value_at(new, &p[base..]) != value_at(old, &p[base..])) {
                self.changed.insert(p.clone());
            }
        }
        self.removed.extend(old_set.difference(&new_set).cloned());
    }

    /// The fields (`in_scope`) of the subtree `value` at `path`, as `walk` lists them.
    fn listed<'v>(&self, value: &'v Value, path: &mut FieldPath, names: &mut Vec<&'v str>) -> BTreeSet<FieldPath> {
        let mut fields = BTreeSet::new();
        walk(value, self.schema, false, path, names, &mut fields);
        fields.retain(|p| (self.in_scope)(p));
        fields
    }
}

/// Records a non-apply write by `manager`: it takes over every field it changed, and fields that
/// disappeared leave every manager. Only paths `in_scope` are tracked for this write.
///
/// Entries that own none of the changed or removed fields are carried over as stored, without being
/// parsed, and the entries a write does touch are edited as FieldsV1 trees, never parsed into paths: a
/// pod's or an application's status writes touch a few fields of one or two managers, and parsing and
/// rewriting the entries on every write was a large share of a simulated API server's time under churn.
#[allow(clippy::too_many_arguments)]
pub fn record_update(
    old: Option<&Value>,
    new: &mut Value,
    schema: &KindSchema<'_>,
    manager: &str,
    api_version: &str,
    subresource: &str,
    now: &str,
    in_scope: &dyn Fn(&FieldPath) -> bool,
) {
    let stored = old.map_or(&[][..], stored);
    let (changed, removed) = changes(old, new, schema, in_scope);
    if changed.is_empty() && removed.is_empty() {
        if old.is_some() {
            write_raw(new, stored.iter().filter(|e| holds_an_entry(e)).cloned().collect());
        }
        return;
    }
    let changed = FieldSet { paths: changed }.to_fields_v1_map();
    let removed = FieldSet { paths: removed }.to_fields_v1_map();
    let mine = ManagedEntry {
        manager: manager.to_string(),
        operation: "Update".into(),
        api_version: api_version.to_string(),
        time: now.to_string(),
        subresource: subresource.to_string(),
        fields: FieldSet::default(),
    };
    let mut found_mine = false;
    let mut list = Vec::with_capacity(stored.len() + 1);
    for raw in stored {
        let Some(mut entry) = ManagedEntry::header_of(raw) else {
            continue;
        };
        let is_mine = !found_mine && entry.same_slot(&mine);
        let fields = raw.get("fieldsV1");
        let touched = fields.is_some_and(|f| owns_any_of(f, &changed) || owns_any_of(f, &removed));
        if !is_mine && !touched {
            if owns_something(raw) {
                list.push(raw.clone());
            }
            continue;
        }
        let mut fields = match fields {
            Some(Value::Object(fields)) => fields.clone(),
            _ => Map::new(),
        };
        subtract(&mut fields, &changed);
        subtract(&mut fields, &removed);
        if is_mine {
            found_mine = true;
            add(&mut fields, &changed);
            entry.time = now.to_string();
        }
        if has_member(&fields) {
            list.push(entry.to_json_with(Value::Object(fields)));
        }
    }
    if !found_mine && has_member(&changed) {
        list.push(mine.to_json_with(Value::Object(changed)));
    }
    write_raw(new, list);
}

/// Takes the members of the FieldsV1 tree `minus` out of the FieldsV1 tree `node` (canonical, as
/// [`FieldSet::to_fields_v1`] writes it), keeping it canonical.
fn subtract(node: &mut Map<String, Value>, minus: &Map<String, Value>) {
    for (key, gone) in minus.iter().filter(|(key, _)| *key != ".") {
        let Some((member, mut children)) = take_node(node, key) else {
            continue;
        };
        if let Value::Object(gone) = gone {
            subtract(&mut children, gone);
        }
        put_node(node, key, member && !is_member(gone), children);
    }
}

/// Adds the members of the FieldsV1 tree `plus` to the FieldsV1 tree `node`, keeping it canonical.
fn add(node: &mut Map<String, Value>, plus: &Map<String, Value>) {
    for (key, added) in plus.iter().filter(|(key, _)| *key != ".") {
        let (member, mut children) = take_node(node, key).unwrap_or_default();
        if let Value::Object(added) = added {
            add(&mut children, added);
        }
        put_node(node, key, member || is_member(added), children);
    }
}

/// Takes node `key` out of `node`: whether it is a member, and its children without `.` (none for a leaf
/// written as a non-object, which is a member).
fn take_node(node: &mut Map<String, Value>, key: &str) -> Option<(bool, Map<String, Value>)> {
    let taken = node.remove(key)?;
    let member = is_member(&taken);
    let mut children = match taken {
        Value::Object(children) => children,
        _ => Map::new(),
    };
    children.remove(".");
    Some((member, children))
}

/// Puts node `key` back into `node` as canonical FieldsV1: a member with children is marked `.`, one
/// without is `{}`, and a node that is neither a member nor a parent of one stays out.
fn put_node(node: &mut Map<String, Value>, key: &str, member: bool, mut children: Map<String, Value>) {
    if member && !children.is_empty() {
        children.insert(".".into(), json!({}));
    }
    if member || !children.is_empty() {
        node.insert(key.to_string(), Value::Object(children));
    }
}

/// Whether a stored entry is one `read` would return and `write` would keep: it has an operation and
/// owns something.
fn holds_an_entry(raw: &Value) -> bool {
    raw.get("operation")
        .and_then(Value::as_str)
        .is_some_and(|o| !o.is_empty())
        && owns_something(raw)
}

/// Whether a stored entry's FieldsV1 names at least one field.
fn owns_something(raw: &Value) -> bool {
    matches!(raw.get("fieldsV1"), Some(Value::Object(m)) if has_member(m))
}

/// Whether `parse_node` would find any member below `node`, without building the paths.
fn has_member(node: &Map<String, Value>) -> bool {
    node.iter().any(|(key, child)| {
        key != "."
            && parse_element(key).is_some()
            && match child {
                Value::Object(c) if !c.is_empty() => c.contains_key(".") || has_member(c),
                _ => true,
            }
    })
}

/// Whether the FieldsV1 tree `fields` has a member that the FieldsV1 tree `touched` has.
fn owns_any_of(fields: &Value, touched: &Map<String, Value>) -> bool {
    matches!(fields, Value::Object(fields) if owns_any(fields, touched))
}

fn owns_any(fields: &Map<String, Value>, touched: &Map<String, Value>) -> bool {
    touched.iter().filter(|(key, _)| *key != ".").any(|(key, t)| {
        fields.get(key).is_some_and(|f| {
            (is_member(f) && is_member(t)) || matches!((f, t), (Value::Object(f), Value::Object(t)) if owns_any(f, t))
        })
    })
}

/// Whether a FieldsV1 node stands for a member itself (a leaf, or a parent marked with `.`), as
/// `parse_node` reads it.
fn is_member(node: &Value) -> bool {
    match node {
        Value::Object(m) => is_member_map(m),
        _ => true,
    }
}

fn is_member_map(node: &Map<String, Value>) -> bool {
    node.is_empty() || node.contains_key(".")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod_schema() -> KindSchema<'static> {
        KindSchema::new("", "Pod", None)
    }

    #[test]
    fn fields_v1_round_trip() {
        let obj = json!({ "apiVersion": "v1", "metadata": { "name": "p", "labels": { "a": "1" }, "finalizers": ["x"] },
                          "spec": { "containers": [{ "name": "c", "image": "i" }] } });
        let set = FieldSet::of(&obj, &pod_schema(), false);
        let v1 = set.to_fields_v1();
        assert_eq!(v1["f:metadata"]["f:labels"]["f:a"], json!({}));
        assert_eq!(v1["f:metadata"]["f:finalizers"]["v:\"x\""], json!({}));
        assert_eq!(v1["f:spec"]["f:containers"]["k:{\"name\":\"c\"}"]["."], json!({}));
        assert!(v1.get("f:apiVersion").is_none());
        assert!(v1["f:metadata"].get("f:name").is_none());
        assert_eq!(FieldSet::from_fields_v1(&v1), set);
    }

    /// The changes as they were computed before `changes` skipped equal subtrees: every field of both
    /// sides listed and compared.
    fn changes_by_listing_everything(
        old: &Value,
        new: &Value,
        schema: &KindSchema<'_>,
        in_scope: &dyn Fn(&FieldPath) -> bool,
    ) -> (BTreeSet<FieldPath>, BTreeSet<FieldPath>) {
        let scoped = |v: &Value| FieldSet {
            paths: FieldSet::of(v, schema, false)
                .paths
                .into_iter()
                .filter(|p| in_scope(p))
                .collect(),
        };
        let (new_set, old_set) = (scoped(new), scoped(old));
        let changed = new_set
            .paths
            .iter()
            .filter(|p| {
                !old_set.paths.contains(*p)
                    || (matches!(p.last(), Some(PathElement::Field(_) | PathElement::Index(_)))
                        && value_at(new, p) != value_at(old, p))
            })
            .cloned()
            .collect();
        (changed, old_set.difference(&new_set).paths)
    }

    /// A deterministic stream of choices (xorshift), so a failure replays.
    struct Choices(u64);

    impl Choices {
        fn below(&mut self, n: usize) -> usize {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            (self.0 % n.max(1) as u64) as usize
        }
    }

    /// Changes one random place of `v`: a leaf's value, a field added or removed, a list item added,
    /// removed or re-keyed, a map emptied.
    fn mutate(v: &mut Value, choices: &mut Choices, depth: usize) {
        let pick = choices.below(10);
        match v {
            Value::Object(m) if !m.is_empty() && depth < 6 && pick < 7 => {
                let keys: Vec<String> = m.keys().cloned().collect();
                let k = &keys[choices.below(keys.len())];
                if let Some(child) = m.get_mut(k) {
                    mutate(child, choices, depth + 1);
                }
            }
            Value::Object(m) => match pick {
                7 if !m.is_empty() => {
                    let keys: Vec<String> = m.keys().cloned().collect();
                    m.remove(&keys[choices.below(keys.len())]);
                }
                8 => {
                    m.insert(format!("added{}", choices.below(3)), json!(choices.below(3)));
                }
                _ => m.clear(),
            },
            Value::Array(items) if !items.is_empty() && depth < 6 && pick < 6 => {
                let i = choices.below(items.len());
                mutate(&mut items[i], choices, depth + 1);
            }
            Value::Array(items) => match pick {
                6 | 7 if !items.is_empty() => {
                    items.remove(choices.below(items.len()));
                }
                _ => {
                    let copy = items.first().cloned().unwrap_or(json!("x"));
                    items.push(copy);
                }
            },
            leaf => *leaf = json!(format!("v{}", choices.below(4))),
        }
    }

    #[test]
    fn skipping_equal_subtrees_finds_the_same_changes_as_listing_every_field() {
        let schema = pod_schema();
        let pod = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": { "name": "p", "namespace": "default", "resourceVersion": "7",
                          "labels": { "spark-role": "executor", "a": "1" }, "finalizers": ["x", "y"],
                          "ownerReferences": [{ "apiVersion": "v1", "kind": "Pod", "name": "d", "uid": "u" }],
                          "managedFields": [{ "manager": "m" }] },
            "spec": { "nodeName": "n1", "nodeSelector": { "disk": "ssd" },
                      "containers": [{ "name": "c", "image": "i", "args": ["a", "b"],
                                       "ports": [{ "containerPort": 80, "protocol": "TCP" }],
                                       "env": [{ "name": "E", "value": "1" }], "resources": {} }],
                      "tolerations": [{ "key": "k", "operator": "Exists" }] },
            "status": { "phase": "Running",
                        "conditions": [{ "type": "Ready", "status": "True" }, { "type": "PodScheduled", "status": "True" }],
                        "containerStatuses": [{ "name": "c", "ready": true, "state": { "running": { "startedAt": "t" } } }],
                        "podIPs": [{ "ip": "127.0.0.2" }] }
        });
        let scopes: [&dyn Fn(&FieldPath) -> bool; 2] = [&|_| true, &|p: &FieldPath| {
            p.first() == Some(&PathElement::Field("status".into()))
        }];
        let mut choices = Choices(0x9e37_79b9_7f4a_7c15);
        let mut differing = 0;
        for round in 0..2000 {
            let mut old = pod.clone();
            for _ in 0..choices.below(3) {
                mutate(&mut old, &mut choices, 0);
            }
            let mut new = old.clone();
            for _ in 0..=choices.below(3) {
                mutate(&mut new, &mut choices, 0);
            }
            for in_scope in scopes {
                let expected = changes_by_listing_everything(&old, &new, &schema, in_scope);
                let found = changes(Some(&old), &new, &schema, in_scope);
                assert_eq!(found, expected, "round {round}: {old} -> {new}");
                differing += usize::from(!expected.0.is_empty() || !expected.1.is_empty());
            }
        }
        assert!(differing > 2000, "most rounds change something: {differing}");
        let created = changes(None, &pod, &schema, &|_| true).0;
        assert_eq!(created, FieldSet::of(&pod, &schema, false).paths);
    }

    /// `record_update` as it was before it carried untouched entries over unparsed and edited the
    /// touched ones as FieldsV1 trees: every entry parsed into paths, changed and written again.
    #[allow(clippy::too_many_arguments)]
    fn record_update_by_parsing_every_entry(
        old: Option<&Value>,
        new: &mut Value,
        schema: &KindSchema<'_>,
        manager: &str,
        api_version: &str,
        subresource: &str,
        now: &str,
        in_scope: &dyn Fn(&FieldPath) -> bool,
    ) {
        let mut entries = old.map(read).unwrap_or_default();
        let (changed, removed) = changes(old, new, schema, in_scope);
        if changed.is_empty() && removed.is_empty() {
            if old.is_some() {
                write(new, &entries);
            }
            return;
        }
        let (changed, removed) = (FieldSet { paths: changed }, FieldSet { paths: removed });
        for e in entries.iter_mut() {
            e.fields = e.fields.difference(&changed).difference(&removed);
        }
        let mine = ManagedEntry {
            manager: manager.to_string(),
            operation: "Update".into(),
            api_version: api_version.to_string(),
            time: now.to_string(),
            subresource: subresource.to_string(),
            fields: FieldSet::default(),
        };
        match entries.iter_mut().find(|e| e.same_slot(&mine)) {
            Some(e) => {
                e.fields = e.fields.union(&changed);
                e.time = now.to_string();
            }
            None => entries.push(ManagedEntry {
                fields: changed,
                ..mine
            }),
        }
        write(new, &entries);
    }

    #[test]
    fn carrying_untouched_entries_over_records_what_parsing_every_entry_records() {
        let schema = pod_schema();
        let pod = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": { "name": "p", "namespace": "default", "labels": { "spark-role": "executor", "a": "1" },
                          "annotations": { "x": "1" }, "finalizers": ["x", "y"] },
            "spec": { "nodeName": "n1", "nodeSelector": { "disk": "ssd" },
                      "containers": [{ "name": "c", "image": "i", "args": ["a", "b"],
                                       "env": [{ "name": "E", "value": "1" }], "resources": {} }] },
            "status": { "phase": "Pending", "conditions": [{ "type": "Ready", "status": "False" }],
                        "containerStatuses": [{ "name": "c", "ready": false, "state": { "waiting": {} } }] }
        });
        // Three managers, one of them writing the status subresource, another at two versions.
        let writers = [
            ("kubelet", "v1", "status"),
            ("operator", "v1", ""),
            ("kubectl", "v1", ""),
            ("kubectl", "v2", ""),
        ];
        let status_only = |p: &FieldPath| p.first() == Some(&PathElement::Field("status".into()));
        let mut choices = Choices(0x2545_f491_4f6c_dd1d);
        let (mut carried, mut dropped, mut rewritten) = (0, 0, 0);
        for history in 0..200 {
            let mut current = pod.clone();
            record_update(None, &mut current, &schema, "creator", "v1", "", "t0", &|_| true);
            for step in 0..12 {
                let (manager, version, subresource) = writers[choices.below(writers.len())];
                let mut next = current.clone();
                for _ in 0..=choices.below(2) {
                    mutate(&mut next, &mut choices, 0);
                }
                next["metadata"]["managedFields"] = current["metadata"]["managedFields"].clone();
                let scope: &dyn Fn(&FieldPath) -> bool = if subresource.is_empty() {
                    &|_| true
                } else {
                    &status_only
                };
                let now = format!("t{}", step + 1);
                let mut expected = next.clone();
                record_update_by_parsing_every_entry(
                    Some(&current),
                    &mut expected,
                    &schema,
                    manager,
                    version,
                    subresource,
                    &now,
                    scope,
                );
                let mut found = next;
                record_update(
                    Some(&current),
                    &mut found,
                    &schema,
                    manager,
                    version,
                    subresource,
                    &now,
                    scope,
                );
                assert_eq!(found, expected, "history {history}, step {step}: {current}");
                let before = read(&current).len();
                let after = read(&found);
                dropped += before.saturating_sub(after.len());
                carried += current["metadata"]["managedFields"].as_array().map_or(0, |a| {
                    a.iter()
                        .filter(|e| {
                            found["metadata"]["managedFields"]
                                .as_array()
                                .is_some_and(|f| f.contains(e))
                        })
                        .count()
                });
                rewritten += after.len();
                current = found;
            }
        }
        // The histories exercise all three paths: entries carried as they were, rewritten, and emptied.
        assert!(
            carried > 500 && dropped > 50 && rewritten > carried,
            "{carried} carried, {dropped} dropped, {rewritten} kept"
        );
    }

    #[test]
    fn updates_transfer_ownership() {
        let s = pod_schema();
        let mut a = json!({ "data": { "x": "1", "y": "1" } });
        record_update(None, &mut a, &s, "first", "v1", "", "t", &|_| true);
        let mut b = json!({ "data": { "x": "2", "y": "1" } });
        b["metadata"] = a["metadata"].clone();
        record_update(Some(&a), &mut b, &s, "second", "v1", "", "t", &|_| true);
        let entries = read(&b);
        assert_eq!(entries.len(), 2);
        let x = vec![PathElement::Field("data".into()), PathElement::Field("x".into())];
        assert!(entries[1].fields.paths.contains(&x));
        assert!(!entries[0].fields.paths.contains(&x));
        assert_eq!(path_string(&x), ".data.x");
    }
}
