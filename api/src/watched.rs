//! A watched custom object as the watch delivers it: decoded, or unreadable. The CRDs accept more than
//! the Rust types can hold (objects stored before a CRD was tightened; embedded core/v1 objects kept as
//! `x-kubernetes-preserve-unknown-fields`), and one such object must never fail the whole list: with a
//! plain `Api<SparkApplication>` the watch's list fails, and after a restart nothing in any namespace is
//! reconciled. Like kube's `DeserializeGuard`, but the unreadable case keeps the field that failed, so
//! the object can be told which one.

use std::borrow::Cow;
use std::sync::Arc;

use crate::application::SparkApplication;
use crate::scheduled::ScheduledSparkApplication;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer};
use serde_json::Value;

/// An object the controller cannot decode, with what it could read.
#[derive(Clone, Debug)]
pub struct Unreadable {
    pub metadata: ObjectMeta,
    /// The field that failed and why (`spec.driver.cores: invalid value ...`); never the value itself,
    /// which may hold a credential.
    pub reason: String,
}

/// One watched object.
#[derive(Clone, Debug)]
pub enum Watched<K> {
    Readable(Arc<K>),
    Unreadable(Box<Unreadable>),
}

/// A watched SparkApplication.
pub type WatchedApp = Watched<SparkApplication>;
/// A watched ScheduledSparkApplication.
pub type WatchedSchedule = Watched<ScheduledSparkApplication>;

/// A kind that can be watched leniently: how to name the fields of an object that does not decode.
pub trait Guarded: Resource<DynamicType = ()> + DeserializeOwned + Clone {
    /// The fields that fail to decode, one line each (the structural walk `validate` uses).
    fn field_errors(value: &Value) -> Vec<String>;
}

impl Guarded for SparkApplication {
    fn field_errors(value: &Value) -> Vec<String> {
        lines(crate::manifest::decode_spark_application(value))
    }
}

impl Guarded for ScheduledSparkApplication {
    fn field_errors(value: &Value) -> Vec<String> {
        lines(crate::manifest::decode_scheduled_spark_application(value))
    }
}

/// A decoding's field errors, one line each; none when it decoded.
fn lines<T>(decoded: Result<T, Vec<crate::field::FieldError>>) -> Vec<String> {
    decoded
        .err()
        .unwrap_or_default()
        .iter()
        .map(ToString::to_string)
        .collect()
}

impl<K: Guarded> Watched<K> {
    /// The object, when it decoded.
    pub fn readable(&self) -> Option<&K> {
        match self {
            Self::Readable(object) => Some(object),
            Self::Unreadable(_) => None,
        }
    }

    /// Decodes a raw object; a failure names the field (found with the structural walk, run only on this
    /// rare path).
    pub fn decode(value: Value) -> Self {
        // Nearly every object decodes: first without tracking the path, which only a failure needs (the
        // tracking wraps every field, and was a large share of decoding each watch event).
        if let Ok(object) = K::deserialize(&value) {
            return Self::Readable(Arc::new(object));
        }
        match serde_path_to_error::deserialize::<_, K>(&value) {
            Ok(object) => Self::Readable(Arc::new(object)),
            Err(first) => {
                let metadata = value
                    .get("metadata")
                    .cloned()
                    .and_then(|m| serde_json::from_value::<ObjectMeta>(m).ok())
                    .unwrap_or_default();
                let errors = K::field_errors(&value);
                let reason = if errors.is_empty() {
                    format!("{}: {}", first.path(), redact(&first.inner().to_string()))
                } else {
                    errors.into_iter().take(5).collect::<Vec<_>>().join("; ")
                };
                Self::Unreadable(Box::new(Unreadable { metadata, reason }))
            }
        }
    }
}

/// serde's messages quote the offending value (`invalid value: string "hunter2"`); keep the kind of
/// problem, drop what was written.
fn redact(message: &str) -> String {
    match message.split_once(": ") {
        Some((kind, _)) if message.starts_with("invalid") => kind.to_owned(),
        _ => message.to_owned(),
    }
}

impl<'de, K: Guarded> Deserialize<'de> for Watched<K> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Value::deserialize(deserializer).map(Self::decode)
    }
}

impl<K: Guarded> Resource for Watched<K> {
    type DynamicType = ();
    type Scope = K::Scope;

    fn kind(dt: &()) -> Cow<'_, str> {
        K::kind(dt)
    }

    fn group(dt: &()) -> Cow<'_, str> {
        K::group(dt)
    }

    fn version(dt: &()) -> Cow<'_, str> {
        K::version(dt)
    }

    fn plural(dt: &()) -> Cow<'_, str> {
        K::plural(dt)
    }

    fn meta(&self) -> &ObjectMeta {
        match self {
            Self::Readable(object) => object.meta(),
            Self::Unreadable(unreadable) => &unreadable.metadata,
        }
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        match self {
            Self::Readable(object) => Arc::make_mut(object).meta_mut(),
            Self::Unreadable(unreadable) => &mut unreadable.metadata,
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn app(driver: Value) -> Value {
        json!({
            "apiVersion": "sparkoperator.k8s.io/v1beta2",
            "kind": "SparkApplication",
            "metadata": { "name": "pi", "namespace": "default", "uid": "u1" },
            "spec": {
                "type": "Scala", "mode": "cluster", "sparkVersion": "4.0.0",
                "sparkConf": { "spark.hadoop.fs.s3a.secret.key": "hunter2" },
                "driver": driver, "executor": {}
            }
        })
    }

    #[test]
    fn a_readable_application_decodes() {
        let watched: WatchedApp = serde_json::from_value(app(json!({"cores": 1}))).unwrap();
        assert_eq!(
            watched.readable().and_then(|a| a.metadata.name.clone()).as_deref(),
            Some("pi")
        );
    }

    #[test]
    fn an_unreadable_one_keeps_its_metadata_and_names_the_field_without_its_value() {
        let mut embedded = app(json!({"cores": 1}));
        embedded["spec"]["volumes"] = json!([{"name": "v", "emptyDir": 5}]);
        let cases = [
            (app(json!({"cores": 3_000_000_000_i64})), "spec.driver.cores"),
            (embedded, "spec.volumes"),
        ];
        for (object, field) in cases {
            let watched: WatchedApp = serde_json::from_value(object.clone()).unwrap();
            let WatchedApp::Unreadable(unreadable) = &watched else {
                panic!("{object} decoded")
            };
            assert_eq!(watched.meta().uid.as_deref(), Some("u1"));
            assert!(unreadable.reason.contains(field), "{}", unreadable.reason);
            assert!(!unreadable.reason.contains("hunter2"), "{}", unreadable.reason);
        }
        // A list with one unreadable object still decodes as a whole.
        let list: Vec<WatchedApp> =
            serde_json::from_value(json!([app(json!({"cores": 1})), app(json!({"cores": "x"}))])).unwrap();
        assert_eq!(list.iter().filter(|w| w.readable().is_some()).count(), 1);
    }

    #[test]
    fn an_unreadable_schedule_names_its_field() {
        let schedule = json!({
            "apiVersion": "sparkoperator.k8s.io/v1beta2",
            "kind": "ScheduledSparkApplication",
            "metadata": { "name": "nightly", "namespace": "default", "uid": "u2" },
            "spec": {
                "schedule": "@every 1m",
                "successfulRunHistoryLimit": "many",
                "template": { "type": "Scala", "sparkVersion": "4.0.0", "driver": {}, "executor": {} }
            }
        });
        let watched: WatchedSchedule = serde_json::from_value(schedule).unwrap();
        let Watched::Unreadable(unreadable) = &watched else {
            panic!("decoded")
        };
        assert_eq!(watched.meta().name.as_deref(), Some("nightly"));
        assert!(
            unreadable.reason.contains("spec.successfulRunHistoryLimit"),
            "{}",
            unreadable.reason
        );
    }
}
