//! A SparkApplication as the watch delivers it: decoded, or unreadable. The CRD accepts more than the
//! Rust types can hold (objects stored before the CRD was tightened; embedded core/v1 objects kept as
//! `x-kubernetes-preserve-unknown-fields`), and one such object must never fail the whole list: with a
//! plain `Api<SparkApplication>` the watch's list fails, and after a restart nothing in any namespace is
//! reconciled. Like kube's `DeserializeGuard`, but the unreadable case keeps the field that failed, so
//! the application can be told which one.

use std::borrow::Cow;
use std::sync::Arc;

use crate::application::SparkApplication;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use serde::{Deserialize, Deserializer};
use serde_json::Value;

/// An application the controller cannot decode, with what it could read.
#[derive(Clone, Debug)]
pub struct UnreadableApp {
    pub metadata: ObjectMeta,
    /// The field that failed and why (`spec.driver.cores: invalid value ...`); never the value itself,
    /// which may hold a credential.
    pub reason: String,
}

/// One watched application.
#[derive(Clone, Debug)]
pub enum WatchedApp {
    Readable(Arc<SparkApplication>),
    Unreadable(Box<UnreadableApp>),
}

impl WatchedApp {
    /// The application, when it decoded.
    pub fn readable(&self) -> Option<&SparkApplication> {
        match self {
            Self::Readable(app) => Some(app),
            Self::Unreadable(_) => None,
        }
    }

    /// Decodes a raw object; a failure names the field (found with the structural walk `validate` uses,
    /// run only on this rare path).
    pub fn decode(value: Value) -> Self {
        match serde_path_to_error::deserialize::<_, SparkApplication>(&value) {
            Ok(app) => Self::Readable(Arc::new(app)),
            Err(first) => {
                let metadata = value
                    .get("metadata")
                    .cloned()
                    .and_then(|m| serde_json::from_value::<ObjectMeta>(m).ok())
                    .unwrap_or_default();
                let reason = match crate::manifest::decode_spark_application(&value) {
                    Err(errors) if !errors.is_empty() => errors
                        .iter()
                        .take(5)
                        .map(ToString::to_string)
                        .collect::<Vec<_>>()
                        .join("; "),
                    _ => format!("{}: {}", first.path(), redact(&first.inner().to_string())),
                };
                Self::Unreadable(Box::new(UnreadableApp { metadata, reason }))
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

impl<'de> Deserialize<'de> for WatchedApp {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Value::deserialize(deserializer).map(Self::decode)
    }
}

impl Resource for WatchedApp {
    type DynamicType = ();
    type Scope = <SparkApplication as Resource>::Scope;

    fn kind(dt: &()) -> Cow<'_, str> {
        SparkApplication::kind(dt)
    }

    fn group(dt: &()) -> Cow<'_, str> {
        SparkApplication::group(dt)
    }

    fn version(dt: &()) -> Cow<'_, str> {
        SparkApplication::version(dt)
    }

    fn plural(dt: &()) -> Cow<'_, str> {
        SparkApplication::plural(dt)
    }

    fn meta(&self) -> &ObjectMeta {
        match self {
            Self::Readable(app) => &app.metadata,
            Self::Unreadable(unreadable) => &unreadable.metadata,
        }
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        match self {
            Self::Readable(app) => &mut Arc::make_mut(app).metadata,
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
}
