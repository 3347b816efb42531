//! Field-by-field comparison of two normalized objects. Lists are compared item by item, except env
//! lists, which are compared as sets keyed by variable name (Spark writes some of them in hash order),
//! and volumes and volume mounts, keyed by name and mount path as Kubernetes keys them (their order
//! means nothing, and an added volume must show as that one volume, not as every later index).
//! A `spark.properties` payload is compared entry by entry, and the executor pod template (YAML in a
//! ConfigMap) by its parsed content.

use std::collections::BTreeSet;
use std::fmt;

use serde_json::Value;

/// One field that differs: present on one side only, or with different values.
#[derive(Clone, Debug, PartialEq)]
pub struct Diff {
    pub path: String,
    pub ours: Option<Value>,
    pub theirs: Option<Value>,
}

impl fmt::Display for Diff {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let show = |v: &Option<Value>| v.as_ref().map_or_else(|| "(absent)".to_owned(), |v| v.to_string());
        write!(
            f,
            "{}: ours {} / Spark's {}",
            self.path,
            show(&self.ours),
            show(&self.theirs)
        )
    }
}

/// `a.b`, or `a[b]` when the key is not a plain word (label keys, property names).
fn child(path: &str, key: &str) -> String {
    let plain = key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    match (path.is_empty(), plain) {
        (true, true) => key.to_owned(),
        (false, true) => format!("{path}.{key}"),
        (_, false) => format!("{path}[{key}]"),
    }
}

pub fn diff(ours: &Value, theirs: &Value) -> Vec<Diff> {
    let mut out = Vec::new();
    diff_at("", Some(ours), Some(theirs), &mut out);
    out
}

fn diff_at(path: &str, ours: Option<&Value>, theirs: Option<&Value>, out: &mut Vec<Diff>) {
    match (ours, theirs) {
        (Some(Value::Object(a)), Some(Value::Object(b))) => {
            let keys: BTreeSet<&String> = a.keys().chain(b.keys()).collect();
            for key in keys {
                let at = child(path, key);
                match (key.as_str(), a.get(key), b.get(key)) {
                    ("spark.properties", Some(Value::String(x)), Some(Value::String(y))) => {
                        diff_properties(&at, x, y, out)
                    }
                    ("podspec-configmap-key", Some(Value::String(x)), Some(Value::String(y))) => {
                        diff_yaml(&at, x, y, out)
                    }
                    ("env", Some(Value::Array(x)), Some(Value::Array(y))) => diff_env(&at, x, y, out),
                    ("volumes", Some(Value::Array(x)), Some(Value::Array(y))) => diff_keyed(&at, "name", x, y, out),
                    ("volumeMounts", Some(Value::Array(x)), Some(Value::Array(y))) => {
                        diff_keyed(&at, "mountPath", x, y, out)
                    }
                    (_, x, y) => diff_at(&at, x, y, out),
                }
            }
        }
        (Some(Value::Array(a)), Some(Value::Array(b))) => {
            for index in 0..a.len().max(b.len()) {
                diff_at(&format!("{path}[{index}]"), a.get(index), b.get(index), out);
            }
        }
        (a, b) if a == b => {}
        (a, b) => out.push(Diff {
            path: path.to_owned(),
            ours: a.cloned(),
            theirs: b.cloned(),
        }),
    }
}

fn diff_env(path: &str, ours: &[Value], theirs: &[Value], out: &mut Vec<Diff>) {
    let name = |v: &Value| v.get("name").and_then(Value::as_str).unwrap_or_default().to_owned();
    let names: BTreeSet<String> = ours.iter().chain(theirs).map(name).collect();
    for env in names {
        let find = |list: &[Value]| list.iter().find(|v| name(v) == env).cloned();
        let count = |list: &[Value]| list.iter().filter(|v| name(v) == env).count();
        if count(ours) > 1 {
            out.push(Diff {
                path: format!("{path}[{env}]"),
                ours: Some(Value::String(format!("{} times", count(ours)))),
                theirs: Some(Value::String(format!("{} times", count(theirs)))),
            });
        }
        diff_at(
            &format!("{path}[{env}]"),
            find(ours).as_ref(),
            find(theirs).as_ref(),
            out,
        );
    }
}

/// Lists whose items Kubernetes keys by `key`: compared item by item under that key, so an item only
/// one side has is one difference at `path[<key>]`; a key twice on our side is a difference too.
fn diff_keyed(path: &str, key: &str, ours: &[Value], theirs: &[Value], out: &mut Vec<Diff>) {
    let id = |v: &Value| v.get(key).and_then(Value::as_str).unwrap_or_default().to_owned();
    let ids: BTreeSet<String> = ours.iter().chain(theirs).map(id).collect();
    for item in ids {
        let find = |list: &[Value]| list.iter().find(|v| id(v) == item).cloned();
        let count = |list: &[Value]| list.iter().filter(|v| id(v) == item).count();
        if count(ours) > 1 || count(theirs) > 1 {
            out.push(Diff {
                path: format!("{path}[{item}]"),
                ours: Some(Value::String(format!("{} times", count(ours)))),
                theirs: Some(Value::String(format!("{} times", count(theirs)))),
            });
        }
        diff_at(
            &format!("{path}[{item}]"),
            find(ours).as_ref(),
            find(theirs).as_ref(),
            out,
        );
    }
}

/// Each `key=value` line of a properties file, and its comment lines as `#1`, `#2`, ...
fn properties(text: &str) -> serde_json::Map<String, Value> {
    let mut map = serde_json::Map::new();
    let mut comments = 0;
    for line in text.lines().filter(|l| !l.is_empty()) {
        if line.starts_with('#') {
            comments += 1;
            map.insert(format!("#{comments}"), Value::String(line.to_owned()));
        } else {
            let (key, value) = line.split_once('=').unwrap_or((line, ""));
            map.insert(key.to_owned(), Value::String(value.to_owned()));
        }
    }
    map
}

fn diff_properties(path: &str, ours: &str, theirs: &str, out: &mut Vec<Diff>) {
    let (a, b) = (properties(ours), properties(theirs));
    diff_at(path, Some(&Value::Object(a)), Some(&Value::Object(b)), out);
}

fn diff_yaml(path: &str, ours: &str, theirs: &str, out: &mut Vec<Diff>) {
    let parse = |text: &str| serde_yaml::from_str::<Value>(text).unwrap_or_else(|e| panic!("{path}: not YAML: {e}"));
    diff_at(path, Some(&parse(ours)), Some(&parse(theirs)), out);
}

#[test]
fn diffs_name_the_field_and_treat_env_as_a_set() {
    let ours =
        serde_json::json!({"metadata": {"labels": {"a/b": "1"}}, "env": [{"name": "X", "value": "1"}, {"name": "Y"}]});
    let theirs =
        serde_json::json!({"metadata": {"labels": {"a/b": "2"}}, "env": [{"name": "Y"}, {"name": "X", "value": "1"}]});
    let diffs = diff(&ours, &theirs);
    assert_eq!(diffs.len(), 1, "{diffs:?}");
    assert_eq!(diffs[0].path, "metadata.labels[a/b]");
    let extra = serde_json::json!({"data": {"spark.properties": "#c\nspark.x=1\nspark.y=2\n"}});
    let fewer = serde_json::json!({"data": {"spark.properties": "#c\nspark.x=1\n"}});
    let diffs = diff(&extra, &fewer);
    assert_eq!(
        diffs.iter().map(|d| d.path.as_str()).collect::<Vec<_>>(),
        ["data[spark.properties][spark.y]"]
    );
    let more = serde_json::json!({"volumes": [{"name": "new"}, {"name": "a", "emptyDir": {}}],
        "volumeMounts": [{"name": "a", "mountPath": "/a"}, {"name": "new", "mountPath": "/new"}]});
    let less = serde_json::json!({"volumes": [{"name": "a", "emptyDir": {}}],
        "volumeMounts": [{"name": "a", "mountPath": "/a"}]});
    let diffs = diff(&more, &less);
    assert_eq!(
        diffs.iter().map(|d| d.path.as_str()).collect::<Vec<_>>(),
        ["volumeMounts[/new]", "volumes[new]"]
    );
}
