//! Manifests read into a `serde_json::Value`, refusing a key set twice in one mapping.
//!
//! `serde_json::Value`'s own `Deserialize` keeps the last of duplicated keys (its map insert replaces the
//! first), so `validate` used to check a manifest whose `memory:` was set twice with only the second value
//! and say nothing. kubectl does the same silently (sigs.k8s.io/yaml's `YAMLToJSON` runs go-yaml's
//! non-strict `Unmarshal`), while the API server refuses such a YAML body under strict field validation
//! (go-yaml's `UnmarshalStrict`: `yaml: unmarshal errors: line 5: key "name" already set in map`). The YAML
//! specification forbids duplicated keys, and one of the two values is certainly not what the author meant:
//! refused here, in every mapping of every document, whatever its kind.

use std::cell::RefCell;
use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};
use spark_operator_api::field::FieldPath;

/// A key found twice in one mapping, with the path of its second occurrence.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Duplicate {
    pub key: String,
    pub path: FieldPath,
}

/// Deserializes one value like `serde_json::Value` does, except that a duplicated key fails it. The
/// failure is raised while the second key is read, so the deserializer's error carries that key's line;
/// what was duplicated is left in `found`.
pub fn deserialize<'de, D: Deserializer<'de>>(
    deserializer: D,
    found: &RefCell<Option<Duplicate>>,
) -> Result<Value, D::Error> {
    ValueSeed { at: At::Root, found }.deserialize(deserializer)
}

/// Where the value being read sits, as a chain to the root (paths are only rendered for a duplicate).
#[derive(Clone, Copy)]
enum At<'a> {
    Root,
    Key(&'a At<'a>, &'a str),
    Index(&'a At<'a>, usize),
}

impl At<'_> {
    fn path(&self) -> FieldPath {
        match self {
            Self::Root => FieldPath::root(),
            Self::Index(parent, index) => parent.path().index(*index),
            // Without a schema a field cannot be told from a map key: keys that could not be field names
            // (`spark.master`, `app.kubernetes.io/name`) get brackets, as map keys do in field paths.
            Self::Key(parent, key)
                if !key.is_empty()
                    && key
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '$')) =>
            {
                parent.path().child(key)
            }
            Self::Key(parent, key) => parent.path().key(key),
        }
    }
}

#[derive(Clone, Copy)]
struct ValueSeed<'a> {
    at: At<'a>,
    found: &'a RefCell<Option<Duplicate>>,
}

impl<'de> DeserializeSeed<'de> for ValueSeed<'_> {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

// What `serde_json::Value`'s visitor does, but for maps.
impl<'de> Visitor<'de> for ValueSeed<'_> {
    type Value = Value;

    fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
        formatter.write_str("any valid JSON value")
    }

    fn visit_bool<E>(self, value: bool) -> Result<Value, E> {
        Ok(Value::Bool(value))
    }

    fn visit_i64<E>(self, value: i64) -> Result<Value, E> {
        Ok(Value::Number(value.into()))
    }

    fn visit_i128<E: de::Error>(self, value: i128) -> Result<Value, E> {
        de::Deserialize::deserialize(de::value::I128Deserializer::new(value)).map(Value::Number)
    }

    fn visit_u64<E>(self, value: u64) -> Result<Value, E> {
        Ok(Value::Number(value.into()))
    }

    fn visit_u128<E: de::Error>(self, value: u128) -> Result<Value, E> {
        de::Deserialize::deserialize(de::value::U128Deserializer::new(value)).map(Value::Number)
    }

    fn visit_f64<E>(self, value: f64) -> Result<Value, E> {
        Ok(Number::from_f64(value).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E>(self, value: &str) -> Result<Value, E> {
        Ok(Value::String(value.to_owned()))
    }

    fn visit_string<E>(self, value: String) -> Result<Value, E> {
        Ok(Value::String(value))
    }

    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        self.deserialize(deserializer)
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut items: A) -> Result<Value, A::Error> {
        let mut values = Vec::new();
        while let Some(value) = items.next_element_seed(ValueSeed {
            at: At::Index(&self.at, values.len()),
            found: self.found,
        })? {
            values.push(value);
        }
        Ok(Value::Array(values))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut entries: A) -> Result<Value, A::Error> {
        let mut values = Map::new();
        loop {
            let key = entries.next_key_seed(KeySeed {
                seen: &values,
                at: self.at,
                found: self.found,
            })?;
            let Some(key) = key else { break };
            let value = entries.next_value_seed(ValueSeed {
                at: At::Key(&self.at, &key),
                found: self.found,
            })?;
            values.insert(key, value);
        }
        Ok(Value::Object(values))
    }
}

/// Reads a key of the mapping at `at` and fails on one `seen` already holds.
struct KeySeed<'a> {
    seen: &'a Map<String, Value>,
    at: At<'a>,
    found: &'a RefCell<Option<Duplicate>>,
}

impl<'de> DeserializeSeed<'de> for KeySeed<'_> {
    type Value = String;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<String, D::Error> {
        // As `serde_json::Value` reads keys.
        deserializer.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for KeySeed<'_> {
    type Value = String;

    fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
        formatter.write_str("a string key")
    }

    fn visit_str<E: de::Error>(self, key: &str) -> Result<String, E> {
        if !self.seen.contains_key(key) {
            return Ok(key.to_owned());
        }
        let duplicate = Duplicate {
            key: key.to_owned(),
            path: At::Key(&self.at, key).path(),
        };
        let message = format!("key {key:?} already set in map at {}", duplicate.path);
        *self.found.borrow_mut() = Some(duplicate);
        Err(E::custom(message))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn yaml(text: &str) -> (Result<Value, serde_yaml::Error>, Option<Duplicate>) {
        let found = RefCell::new(None);
        let value = deserialize(serde_yaml::Deserializer::from_str(text), &found);
        (value, found.into_inner())
    }

    fn duplicate(key: &str, path: &str) -> Option<Duplicate> {
        Some(Duplicate {
            key: key.to_owned(),
            path: FieldPath::new(path),
        })
    }

    #[test]
    fn values_are_read_as_serde_json_reads_them() {
        let text = "a: 1\nb: -2\nc: 1.5\nd: .nan\ne: [x, ~, true]\nf: {g: 18446744073709551615}\n'1': h\n";
        let (value, found) = yaml(text);
        let plain: Value = serde_yaml::from_str(text).unwrap();
        assert_eq!(value.unwrap(), plain);
        assert_eq!(found, None);
        let json_text =
            r#"{"a": [1, -2, 1.5e3, "x", null, {"b": false}], "c": 340282366920938463463374607431768211455}"#;
        let mut json_de = serde_json::Deserializer::from_str(json_text);
        let found = RefCell::new(None);
        let value = deserialize(&mut json_de, &found);
        assert_eq!(value.unwrap(), serde_json::from_str::<Value>(json_text).unwrap());
    }

    #[test]
    fn a_key_set_twice_fails_at_its_second_line_with_its_path() {
        let (value, found) = yaml("a: 1\nb:\n  c: 2\n  d:\n  - e: 3\n    e: 4\n");
        let error = value.unwrap_err();
        assert_eq!(error.location().map(|l| l.line()), Some(6), "{error}");
        assert_eq!(found, duplicate("e", "b.d[0].e"));
        assert!(error.to_string().contains("key \"e\" already set in map"), "{error}");
        // At the top, with a whole mapping as the second value.
        let (value, found) = yaml("labels:\n  a: b\nlabels:\n  c: d\n");
        assert_eq!(value.unwrap_err().location().map(|l| l.line()), Some(3));
        assert_eq!(found, duplicate("labels", "labels"));
        // Keys that are not field names are rendered as map keys.
        let (_, found) = yaml("sparkConf:\n  spark.master: a\n  spark.master: b\n");
        assert_eq!(found, duplicate("spark.master", "sparkConf[spark.master]"));
    }

    #[test]
    fn the_same_key_in_different_mappings_is_fine() {
        let (value, found) = yaml("a: {name: x}\nb: {name: x}\nc:\n- name: 1\n- name: 2\n");
        assert_eq!(
            value.unwrap(),
            json!({"a": {"name": "x"}, "b": {"name": "x"}, "c": [{"name": 1}, {"name": 2}]})
        );
        assert_eq!(found, None);
    }

    #[test]
    fn json_objects_are_checked_too() {
        let text = "{\"a\": 1,\n \"b\": {\"c\": 1,\n \"c\": 2}}";
        let mut json_de = serde_json::Deserializer::from_str(text);
        let found = RefCell::new(None);
        let error = deserialize(&mut json_de, &found).unwrap_err();
        assert_eq!(error.line(), 3, "{error}");
        assert_eq!(found.into_inner(), duplicate("c", "b.c"));
    }
}
