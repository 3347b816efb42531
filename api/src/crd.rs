//! The CustomResourceDefinitions of both kinds, and the full schemas validation checks manifests against.
//!
//! The CRDs keep embedded core/v1 objects as `x-kubernetes-preserve-unknown-fields` (see
//! [`crate::embedded`]) so each stays far under the 256 KiB a plain `kubectl apply` can carry.

use std::sync::OnceLock;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;
use schemars::JsonSchema;
use schemars::generate::SchemaSettings;
use serde_json::Value;

use crate::application::SparkApplication;
use crate::scheduled::ScheduledSparkApplication;

/// The SparkApplication CRD.
pub fn spark_application_crd() -> CustomResourceDefinition {
    // Generating it builds every embedded core/v1 schema only to drop it: do it once.
    static CRD: OnceLock<CustomResourceDefinition> = OnceLock::new();
    CRD.get_or_init(|| tidy(SparkApplication::crd())).clone()
}

/// The ScheduledSparkApplication CRD.
pub fn scheduled_spark_application_crd() -> CustomResourceDefinition {
    static CRD: OnceLock<CustomResourceDefinition> = OnceLock::new();
    CRD.get_or_init(|| tidy(ScheduledSparkApplication::crd())).clone()
}

/// Removes what the derived schema has but the CRD must not: `null` among enum values (from optional
/// enums), and `default`s (from `#[serde(default)]`), which would make the API server fill in fields;
/// defaulting is the webhook's job, so that what users apply is what they get back.
fn tidy(mut crd: CustomResourceDefinition) -> CustomResourceDefinition {
    for version in &mut crd.spec.versions {
        let Some(schema) = version.schema.as_mut().and_then(|s| s.open_api_v3_schema.as_mut()) else {
            continue;
        };
        let Ok(mut value) = serde_json::to_value(&*schema) else {
            continue;
        };
        strip(&mut value);
        if let Ok(tidied) = serde_json::from_value(value) {
            *schema = tidied;
        }
    }
    crd
}

fn strip(schema: &mut Value) {
    let Some(node) = schema.as_object_mut() else { return };
    node.remove("default");
    // The API server does not enforce `format: int32`: without explicit bounds it stores 3000000000,
    // which the controller then cannot decode.
    if node.get("type").and_then(Value::as_str) == Some("integer")
        && node.get("format").and_then(Value::as_str) == Some("int32")
    {
        node.entry("minimum").or_insert(Value::from(crate::bounds::MIN_INT32));
        node.entry("maximum").or_insert(Value::from(crate::bounds::MAX_INT32));
    }
    if let Some(Value::Array(values)) = node.get_mut("enum") {
        values.retain(|v| !v.is_null());
    }
    if let Some(Value::Object(properties)) = node.get_mut("properties") {
        properties.values_mut().for_each(strip);
    }
    for key in ["items", "additionalProperties"] {
        if let Some(child) = node.get_mut(key) {
            strip(child);
        }
    }
    for key in ["allOf", "anyOf", "oneOf"] {
        if let Some(Value::Array(branches)) = node.get_mut(key) {
            branches.iter_mut().for_each(strip);
        }
    }
}

/// Both CRDs, SparkApplication first.
pub fn all_crds() -> Vec<CustomResourceDefinition> {
    vec![spark_application_crd(), scheduled_spark_application_crd()]
}

/// The schema of `T` with every embedded core/v1 object's full schema inlined (under the key
/// [`crate::embedded`] uses), generated the way kube generates CRD schemas.
pub(crate) fn full_schema<T: JsonSchema>() -> Value {
    let generator = SchemaSettings::openapi3()
        .with(|s| {
            s.inline_subschemas = true;
            s.meta_schema = None;
        })
        .into_generator();
    generator.into_root_schema_for::<T>().to_value()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::JSONSchemaProps;

    const MAX_CRD_BYTES: usize = 256 * 1024;

    fn schema_of(crd: &CustomResourceDefinition) -> &JSONSchemaProps {
        crd.spec.versions[0]
            .schema
            .as_ref()
            .and_then(|s| s.open_api_v3_schema.as_ref())
            .unwrap()
    }

    /// Checks the apiserver's structural-schema rules: every node has a type unless it is int-or-string or
    /// preserves unknown fields; no references; no `properties` next to `additionalProperties`.
    fn assert_structural(value: &Value, path: &str, problems: &mut Vec<String>) {
        let Some(node) = value.as_object() else { return };
        let preserve = node.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true));
        let int_or_string = node.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true));
        if !node.contains_key("type") && !preserve && !int_or_string {
            problems.push(format!("{path}: no type"));
        }
        if node.contains_key("$ref") {
            problems.push(format!("{path}: $ref"));
        }
        if node.contains_key("properties") && node.contains_key("additionalProperties") {
            problems.push(format!("{path}: properties and additionalProperties"));
        }
        if node.contains_key("properties") && node.get("type") != Some(&Value::from("object")) {
            problems.push(format!("{path}: properties without type object"));
        }
        for (name, child) in node.get("properties").and_then(Value::as_object).into_iter().flatten() {
            assert_structural(child, &format!("{path}.{name}"), problems);
        }
        if let Some(items) = node.get("items") {
            assert_structural(items, &format!("{path}[]"), problems);
        }
        if let Some(additional) = node.get("additionalProperties").filter(|a| a.is_object()) {
            assert_structural(additional, &format!("{path}{{}}"), problems);
        }
        for key in ["anyOf", "oneOf", "allOf"] {
            if node.contains_key(key) {
                problems.push(format!("{path}: {key}"));
            }
        }
    }

    #[test]
    fn each_crd_fits_a_plain_kubectl_apply() {
        for crd in all_crds() {
            let bytes = serde_json::to_vec(&crd).unwrap().len();
            assert!(bytes < MAX_CRD_BYTES, "{}: {bytes} bytes", crd.spec.names.kind);
        }
    }

    #[test]
    fn schemas_are_structural() {
        for crd in all_crds() {
            let schema = serde_json::to_value(schema_of(&crd)).unwrap();
            let mut problems = Vec::new();
            assert_structural(&schema, &crd.spec.names.kind, &mut problems);
            assert!(problems.is_empty(), "{problems:#?}");
        }
    }

    #[test]
    fn embedded_objects_are_preserved_not_inlined() {
        let crd = serde_json::to_value(spark_application_crd()).unwrap();
        let spec = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"];
        let affinity = &spec["driver"]["properties"]["affinity"];
        assert_eq!(affinity["type"], "object");
        assert_eq!(affinity["x-kubernetes-preserve-unknown-fields"], true);
        assert!(affinity.get("properties").is_none());
        assert_eq!(spec["volumes"]["items"]["x-kubernetes-preserve-unknown-fields"], true);
        assert!(!crd.to_string().contains("x-spark-operator"));
    }

    #[test]
    fn names_scope_and_subresources_match_kubeflow() {
        let app = spark_application_crd();
        assert_eq!(
            app.metadata.name.as_deref(),
            Some("sparkapplications.sparkoperator.k8s.io")
        );
        assert_eq!(app.spec.scope, "Namespaced");
        assert_eq!(app.spec.names.short_names, Some(vec!["sparkapp".to_owned()]));
        let scheduled = scheduled_spark_application_crd();
        assert_eq!(
            scheduled.metadata.name.as_deref(),
            Some("scheduledsparkapplications.sparkoperator.k8s.io")
        );
        assert_eq!(
            scheduled.spec.names.short_names,
            Some(vec!["scheduledsparkapp".to_owned()])
        );
        for crd in [app, scheduled] {
            let annotations = crd.metadata.annotations.clone().unwrap_or_default();
            assert_eq!(
                annotations
                    .get(crate::labels::ANNOTATION_API_APPROVED)
                    .map(String::as_str),
                Some(crate::labels::API_APPROVED_URL)
            );
            let version = &crd.spec.versions[0];
            assert_eq!(version.name, "v1beta2");
            assert!(version.served && version.storage);
            assert!(version.subresources.as_ref().and_then(|s| s.status.as_ref()).is_some());
        }
    }

    #[test]
    fn printer_columns_show_state_attempts_start_finish_age() {
        let crd = spark_application_crd();
        let columns = crd.spec.versions[0]
            .additional_printer_columns
            .clone()
            .unwrap_or_default();
        let got: Vec<_> = columns
            .iter()
            .map(|c| (c.name.as_str(), c.json_path.as_str()))
            .collect();
        assert_eq!(
            got,
            [
                ("Status", ".status.applicationState.state"),
                ("Attempts", ".status.executionAttempts"),
                ("Start", ".status.lastSubmissionAttemptTime"),
                ("Finish", ".status.terminationTime"),
                ("Age", ".metadata.creationTimestamp"),
            ]
        );
    }

    #[test]
    fn status_times_are_nullable_because_kubeflow_writes_null() {
        let crd = serde_json::to_value(spark_application_crd()).unwrap();
        let status = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"];
        assert_eq!(status["lastSubmissionAttemptTime"]["nullable"], true);
        assert_eq!(status["terminationTime"]["nullable"], true);
    }

    #[test]
    fn no_defaults_and_no_null_enum_values() {
        for crd in all_crds() {
            let text = serde_json::to_string(&crd).unwrap();
            assert!(!text.contains("\"default\""), "{}", crd.spec.names.kind);
        }
        let schema = serde_json::to_value(schema_of(&spark_application_crd())).unwrap();
        let mode = &schema["properties"]["spec"]["properties"]["mode"];
        assert_eq!(mode["enum"], serde_json::json!(["cluster", "client"]));
    }

    /// Checks `value` against a CRD's own schema, as the API server would: structural errors, and the
    /// fields it would prune.
    fn check_against_crd(crd: &CustomResourceDefinition, part: &str, value: &Value) -> crate::structural::Findings {
        let schema = serde_json::to_value(schema_of(crd)).unwrap();
        let mut findings = crate::structural::Findings::default();
        crate::structural::check(
            value,
            &schema["properties"][part],
            &crate::field::FieldPath::new(part),
            &mut findings,
        );
        findings
    }

    #[test]
    fn the_crds_accept_every_kubeflow_example_without_pruning() {
        use serde::Deserialize;
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/kubeflow-examples");
        let mut checked = 0;
        for entry in std::fs::read_dir(dir).unwrap() {
            // The Prometheus example is a template; see tests/kubeflow_examples.rs.
            let text = std::fs::read_to_string(entry.unwrap().path())
                .unwrap()
                .replace("{IMAGE_REGISTRY}/{IMAGE_REPOSITORY}/", "");
            for document in serde_yaml::Deserializer::from_str(&text) {
                let value = Value::deserialize(document).unwrap();
                let crd = match value["kind"].as_str() {
                    Some("SparkApplication") => spark_application_crd(),
                    Some("ScheduledSparkApplication") => scheduled_spark_application_crd(),
                    _ => continue,
                };
                let findings = check_against_crd(&crd, "spec", &value["spec"]);
                assert!(findings.errors.is_empty(), "{:?}", findings.errors);
                assert!(findings.unknown.is_empty(), "would be pruned: {:?}", findings.unknown);
                checked += 1;
            }
        }
        assert_eq!(checked, 10);
    }

    #[test]
    fn the_crd_accepts_a_status_written_by_kubeflow() {
        let status = serde_json::json!({
            "applicationState": {"state": "RUNNING", "errorMessage": ""},
            "driverInfo": {"podName": "spark-pi-driver", "webUIPort": 4040, "webUIServiceName": "spark-pi-ui-svc"},
            "executionAttempts": 1,
            "executorState": {"spark-pi-1-exec-1": "RUNNING"},
            "lastSubmissionAttemptTime": "2024-06-01T10:00:00Z",
            "terminationTime": null,
            "sparkApplicationId": "spark-123",
            "submissionAttempts": 1,
            "submissionID": "6a0b6f0c-7a52-4b44-8d5c-0f55d7a4f1c2"
        });
        let findings = check_against_crd(&spark_application_crd(), "status", &status);
        assert!(findings.errors.is_empty(), "{:?}", findings.errors);
        assert!(findings.unknown.is_empty(), "would be pruned: {:?}", findings.unknown);
    }

    #[test]
    fn full_schema_carries_embedded_schemas() {
        let schema = full_schema::<SparkApplication>();
        let affinity = &schema["properties"]["spec"]["properties"]["driver"]["properties"]["affinity"];
        let full = &affinity[crate::embedded::FULL_SCHEMA_KEY];
        assert!(full["properties"]["nodeAffinity"].is_object(), "{affinity}");
    }
}
