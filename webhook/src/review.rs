//! One AdmissionReview (`admission.k8s.io/v1`) answered: pure, so the server and tests share it.

use serde_json::{Value, json};
use spark_operator_api::manifest::check_manifest;
use spark_operator_api::validation::ValidationContext;

/// Why a body is not an AdmissionReview we can answer (the server answers 400 with this).
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum ReviewError {
    #[error("the body is not JSON")]
    NotJson,
    #[error("the body is not an admission.k8s.io/v1 AdmissionReview with a request.uid")]
    NotAReview,
}

/// Answers a validating review: allowed when the object has no errors, else denied with every error
/// (`path: message`, as `spark-operator validate` prints them). Objects of other kinds are allowed.
pub fn validate(body: &[u8]) -> Result<Value, ReviewError> {
    let review: Value = serde_json::from_slice(body).map_err(|_| ReviewError::NotJson)?;
    let request = review.get("request").ok_or(ReviewError::NotAReview)?;
    let uid = request
        .get("uid")
        .and_then(Value::as_str)
        .ok_or(ReviewError::NotAReview)?;
    let namespace = request.get("namespace").and_then(Value::as_str);
    let Some(object) = request.get("object").filter(|o| !o.is_null()) else {
        // DELETE carries no object: nothing to check.
        return Ok(answer(uid, true, None, &[]));
    };
    let context = ValidationContext { namespace };
    let check = match check_manifest(object, &context) {
        Ok(Some(check)) => check,
        Ok(None) => return Ok(answer(uid, true, None, &[])),
        Err(error) => return Ok(answer(uid, false, Some(error.to_string()), &[])),
    };
    let warnings: Vec<String> = check
        .report
        .warnings
        .iter()
        .map(ToString::to_string)
        .chain(
            check
                .unknown_fields
                .iter()
                .map(|u| format!("{}: {}", u.path, u.message())),
        )
        .collect();
    if check.report.errors.is_empty() {
        return Ok(answer(uid, true, None, &warnings));
    }
    let errors: Vec<String> = check.report.errors.iter().map(ToString::to_string).collect();
    let name = check.name.as_deref().unwrap_or("");
    let message = format!(
        "{kind}.sparkoperator.k8s.io {name:?} is invalid: {errors}",
        kind = check.kind.as_str(),
        errors = errors.join("; ")
    );
    Ok(answer(uid, false, Some(message), &warnings))
}

fn answer(uid: &str, allowed: bool, message: Option<String>, warnings: &[String]) -> Value {
    let mut response = json!({ "uid": uid, "allowed": allowed });
    if let Some(message) = message {
        response["status"] = json!({
            "status": "Failure",
            "code": 422,
            "reason": "Invalid",
            "message": message,
        });
    }
    if !warnings.is_empty() {
        response["warnings"] = json!(warnings);
    }
    json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "response": response,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn review(object: Value) -> Vec<u8> {
        serde_json::to_vec(&json!({
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": { "uid": "u-1", "namespace": "default", "operation": "CREATE", "object": object },
        }))
        .unwrap()
    }

    fn app(memory: &str) -> Value {
        json!({
            "apiVersion": "sparkoperator.k8s.io/v1beta2",
            "kind": "SparkApplication",
            "metadata": { "name": "pi", "namespace": "default" },
            "spec": {
                "type": "Scala", "mode": "cluster", "sparkVersion": "4.0.0", "image": "spark:4.0.0",
                "mainClass": "org.apache.spark.examples.SparkPi",
                "mainApplicationFile": "local:///opt/spark/examples/jars/spark-examples.jar",
                "driver": { "cores": 1, "memory": memory },
                "executor": { "cores": 1, "instances": 1, "memory": "512m" }
            }
        })
    }

    #[test]
    fn a_valid_application_is_allowed_and_an_invalid_one_denied_with_its_field() {
        let allowed = validate(&review(app("512m"))).unwrap();
        assert_eq!(allowed["response"]["uid"], "u-1");
        assert_eq!(allowed["response"]["allowed"], true, "{allowed}");
        let denied = validate(&review(app("lots"))).unwrap();
        assert_eq!(denied["response"]["allowed"], false, "{denied}");
        let message = denied["response"]["status"]["message"].as_str().unwrap();
        assert!(message.contains("spec.driver.memory"), "{message}");
    }

    #[test]
    fn garbage_is_refused_with_a_reason() {
        assert_eq!(validate(b"{").unwrap_err(), ReviewError::NotJson);
        assert_eq!(validate(b"{\"request\":{}}").unwrap_err(), ReviewError::NotAReview);
        let other = validate(&review(json!({"apiVersion": "v1", "kind": "ConfigMap"}))).unwrap();
        assert_eq!(other["response"]["allowed"], true);
    }
}
