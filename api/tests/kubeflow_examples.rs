//! Every Kubeflow example manifest deserializes unchanged, validates without errors, and round-trips.

// Test helpers may unwrap: a panic is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::Value;
use spark_operator_api::manifest::{DecodedObject, ObjectKind, check_manifest, identify, unknown_fields};
use spark_operator_api::validation::ValidationContext;
use spark_operator_api::{ScheduledSparkApplication, SparkApplication};

fn fixtures_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/kubeflow-examples")
}

/// Kubeflow's Prometheus example is a template: `image: {IMAGE_REGISTRY}/{IMAGE_REPOSITORY}/...` is not
/// valid YAML (kubectl cannot parse it either) until the placeholders are substituted, as Kubeflow's own
/// tooling does before applying it.
fn substitute_placeholders(text: &str) -> String {
    text.replace("{IMAGE_REGISTRY}", "registry.example.com")
        .replace("{IMAGE_REPOSITORY}", "spark")
}

/// Every document of every fixture, with its file name.
fn documents() -> Vec<(String, Value)> {
    let mut files: Vec<_> = std::fs::read_dir(fixtures_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    assert_eq!(
        files.len(),
        10,
        "the Kubeflow examples are missing from {}",
        fixtures_dir().display()
    );
    let mut documents = Vec::new();
    for file in files {
        let text = substitute_placeholders(&std::fs::read_to_string(&file).unwrap());
        let name = file.file_name().unwrap().to_string_lossy().into_owned();
        for document in serde_yaml::Deserializer::from_str(&text) {
            let value = Value::deserialize(document).unwrap();
            if !value.is_null() {
                documents.push((name.clone(), value));
            }
        }
    }
    documents
}

fn ours() -> Vec<(String, ObjectKind, Value)> {
    documents()
        .into_iter()
        .filter_map(|(file, value)| identify(&value).unwrap().map(|kind| (file, kind, value)))
        .collect()
}

/// JSON equality, except that a number may come back as the same number in a string: Kubernetes
/// quantities (`cpu: 1`) are strings once decoded.
fn assert_same_json(original: &Value, written: &Value, path: &str) {
    match (original, written) {
        (Value::Object(a), Value::Object(b)) => {
            let keys_a: Vec<_> = a.keys().collect();
            let keys_b: Vec<_> = b.keys().collect();
            assert_eq!(keys_a, keys_b, "fields differ at {path}");
            for (key, value) in a {
                assert_same_json(value, &b[key], &format!("{path}.{key}"));
            }
        }
        (Value::Array(a), Value::Array(b)) => {
            assert_eq!(a.len(), b.len(), "lengths differ at {path}");
            for (index, (x, y)) in a.iter().zip(b).enumerate() {
                assert_same_json(x, y, &format!("{path}[{index}]"));
            }
        }
        (Value::Number(n), Value::String(s)) => assert_eq!(&n.to_string(), s, "at {path}"),
        _ => assert_eq!(original, written, "at {path}"),
    }
}

fn remove_dotted(value: &mut Value, path: &str) {
    assert!(!path.contains('['), "only plain paths are expected here: {path}");
    let (parent, field) = path.rsplit_once('.').unwrap();
    let mut node = value;
    for part in parent.split('.') {
        node = node.get_mut(part).unwrap();
    }
    node.as_object_mut().unwrap().remove(field).unwrap();
}

#[test]
fn all_ten_objects_are_found() {
    let kinds: Vec<_> = ours().into_iter().map(|(_, kind, _)| kind).collect();
    assert_eq!(kinds.iter().filter(|k| **k == ObjectKind::SparkApplication).count(), 9);
    assert_eq!(
        kinds
            .iter()
            .filter(|k| **k == ObjectKind::ScheduledSparkApplication)
            .count(),
        1
    );
}

#[test]
fn every_example_deserializes_and_round_trips() {
    for (file, kind, value) in ours() {
        let written = match kind {
            ObjectKind::SparkApplication => {
                let app: SparkApplication =
                    serde_json::from_value(value.clone()).unwrap_or_else(|e| panic!("{file}: {e}"));
                let written = serde_json::to_value(&app).unwrap();
                let again: SparkApplication = serde_json::from_value(written.clone()).unwrap();
                assert_eq!(again, app, "{file}");
                written
            }
            ObjectKind::ScheduledSparkApplication => {
                let app: ScheduledSparkApplication =
                    serde_json::from_value(value.clone()).unwrap_or_else(|e| panic!("{file}: {e}"));
                let written = serde_json::to_value(&app).unwrap();
                let again: ScheduledSparkApplication = serde_json::from_value(written.clone()).unwrap();
                assert_eq!(again, app, "{file}");
                written
            }
        };
        // Nothing is lost or added on the way, except the fields Kubernetes does not know, which are
        // reported as unknown (see below): what is written back is what was read.
        let mut known = value.clone();
        for unknown in unknown_fields(&value).unwrap() {
            remove_dotted(&mut known, unknown.path.as_str());
        }
        assert_same_json(&known, &written, &file);
    }
}

#[test]
fn every_example_validates_without_errors() {
    for (file, _, value) in ours() {
        let check = check_manifest(&value, &ValidationContext::default()).unwrap().unwrap();
        assert!(check.report.errors.is_empty(), "{file}: {:#?}", check.report.errors);
        assert!(check.report.warnings.is_empty(), "{file}: {:#?}", check.report.warnings);
        assert!(check.object.is_some(), "{file}");
    }
}

#[test]
fn the_multi_field_examples_keep_their_fields() {
    let find = |name: &str| {
        ours()
            .into_iter()
            .find(|(file, _, _)| file == name)
            .map(|(_, _, value)| value)
            .unwrap()
    };
    let prometheus: SparkApplication = serde_json::from_value(find("spark-pi-prometheus.yaml")).unwrap();
    let monitoring = prometheus.spec.monitoring.unwrap();
    assert!(monitoring.expose_driver_metrics && monitoring.expose_executor_metrics);
    let exporter = monitoring.prometheus.unwrap();
    assert_eq!(
        exporter.jmx_exporter_jar,
        "/prometheus/jmx_prometheus_javaagent-0.11.0.jar"
    );
    assert_eq!(exporter.port, Some(8090));

    let volcano: SparkApplication = serde_json::from_value(find("spark-pi-volcano.yaml")).unwrap();
    assert_eq!(volcano.spec.batch_scheduler.as_deref(), Some("volcano"));

    let dynamic: SparkApplication = serde_json::from_value(find("spark-pi-dynamic-allocation.yaml")).unwrap();
    let allocation = dynamic.spec.dynamic_allocation.unwrap();
    assert!(allocation.enabled);
    assert_eq!(
        (
            allocation.initial_executors,
            allocation.min_executors,
            allocation.max_executors
        ),
        (Some(2), Some(1), Some(5))
    );

    let templated: SparkApplication = serde_json::from_value(find("spark-pi-pod-template.yaml")).unwrap();
    let driver_pod = templated.spec.driver.pod.template.unwrap().spec.unwrap();
    assert_eq!(driver_pod.containers[0].name, "spark-kubernetes-driver");
    assert_eq!(driver_pod.containers[0].env.as_ref().unwrap().len(), 3);
    let executor_pod = templated.spec.executor.pod.template.unwrap().spec.unwrap();
    assert_eq!(executor_pod.volumes.unwrap()[0].name, "spark-local-dir-1");

    let scheduled: ScheduledSparkApplication = serde_json::from_value(find("spark-pi-scheduled.yaml")).unwrap();
    assert_eq!(scheduled.spec.schedule, "@every 3m");
    assert_eq!(scheduled.spec.template.driver.pod.memory.as_deref(), Some("512m"));

    let security = serde_json::from_value::<SparkApplication>(find("spark-pi.yaml"))
        .unwrap()
        .spec
        .driver
        .pod
        .security_context
        .unwrap();
    assert_eq!(security.run_as_user, Some(185));
    assert_eq!(security.capabilities.unwrap().drop, Some(vec!["ALL".to_owned()]));
}

#[test]
fn only_the_misplaced_template_security_context_is_unknown() {
    // Kubeflow's pod-template example puts container-level securityContext fields (capabilities,
    // allowPrivilegeEscalation) into the pod-level securityContext, where Kubernetes ignores them.
    let mut found = Vec::new();
    for (file, _, value) in ours() {
        for unknown in unknown_fields(&value).unwrap() {
            assert!(unknown.in_embedded_object, "{file}: {}", unknown.path);
            found.push(format!("{file}: {}", unknown.path));
        }
    }
    found.sort();
    let expected: Vec<String> = ["driver", "executor"]
        .iter()
        .flat_map(|role| {
            ["allowPrivilegeEscalation", "capabilities"]
                .map(|field| format!("spark-pi-pod-template.yaml: spec.{role}.template.spec.securityContext.{field}"))
        })
        .collect();
    assert_eq!(found, expected);
}

#[test]
fn decoded_objects_are_handed_out() {
    for (file, kind, value) in ours() {
        let check = check_manifest(&value, &ValidationContext::default()).unwrap().unwrap();
        let matches = matches!(
            (kind, check.object),
            (ObjectKind::SparkApplication, Some(DecodedObject::SparkApplication(_)))
                | (
                    ObjectKind::ScheduledSparkApplication,
                    Some(DecodedObject::ScheduledSparkApplication(_))
                )
        );
        assert!(matches, "{file}");
        assert_eq!(check.namespace.as_deref(), Some("default"), "{file}");
    }
}

#[test]
fn the_prometheus_example_is_a_template_until_substituted() {
    let raw = std::fs::read_to_string(fixtures_dir().join("spark-pi-prometheus.yaml")).unwrap();
    let parsed: Result<Vec<Value>, _> = serde_yaml::Deserializer::from_str(&raw)
        .map(Value::deserialize)
        .collect();
    assert!(parsed.is_err(), "the raw example is not YAML");
    let substituted = substitute_placeholders(&raw);
    let parsed: Vec<Value> = serde_yaml::Deserializer::from_str(&substituted)
        .map(Value::deserialize)
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(
        parsed[0]["spec"]["image"],
        "registry.example.com/spark/docker.io/apache/spark:4.0.4-gcs-prometheus"
    );
}
