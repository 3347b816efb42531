//! Validation of SparkApplications and ScheduledSparkApplications on create and update: every error of
//! `api::manifest::check_manifest` (the checks `spark-operator validate` runs) and of the ownerReference
//! check in one denial, each with its field path; warnings for deprecated and unknown fields.
//!
//! Pure, in two steps around the owner lookups the server makes: [`check`] then [`verdict`].

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use spark_operator_api::field::FieldError;
use spark_operator_api::manifest::check_manifest;
use spark_operator_api::ownership::{
    OwnerLookup, OwnerLookupOutcome, owner_lookups, owner_reference_errors, owner_reference_warnings,
};
use spark_operator_api::validation::ValidationContext;

use crate::review::{Answer, Request};

/// What the pure part found.
#[derive(Clone, Debug, Default)]
pub struct Checked {
    /// `SparkApplication.sparkoperator.k8s.io "name"`, as kube-apiserver names an object in errors.
    subject: String,
    errors: Vec<FieldError>,
    warnings: Vec<String>,
    /// Owners to look up in the object's namespace before deciding.
    pub lookups: Vec<OwnerLookup>,
    /// Not one of our kinds, or nothing to check (DELETE).
    pass: bool,
}

/// Checks the object of a request; the owners still have to be looked up.
pub fn check(request: &Request) -> Checked {
    let Some(object) = &request.object else {
        return Checked {
            pass: true,
            ..Checked::default()
        };
    };
    let context = ValidationContext {
        namespace: request.namespace.as_deref(),
    };
    let object = &as_written(object);
    let check = match check_manifest(object, &context) {
        Ok(Some(check)) => check,
        Ok(None) => {
            return Checked {
                pass: true,
                ..Checked::default()
            };
        }
        Err(error) => {
            return Checked {
                subject: format!("{}.sparkoperator.k8s.io", request.kind),
                errors: vec![FieldError::new(
                    spark_operator_api::FieldPath::root(),
                    error.to_string(),
                )],
                ..Checked::default()
            };
        }
    };
    let metadata: ObjectMeta = object
        .get("metadata")
        .cloned()
        .and_then(|m| serde_json::from_value(m).ok())
        .unwrap_or_default();
    let warnings = check
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
    Checked {
        subject: format!(
            "{}.sparkoperator.k8s.io {:?}",
            check.kind.as_str(),
            check.name.as_deref().unwrap_or_default()
        ),
        errors: check.report.errors,
        warnings,
        lookups: owner_lookups(&metadata, request.namespace.as_deref()),
        pass: false,
    }
}

/// The object without what the API server itself puts into every object it sends (on create and update
/// alike): `metadata.managedFields` (its field-ownership records, whose `fieldsV1` keys are no fields of
/// ours) and `status` (the stored one, on update; a status sent on create is dropped by the API server
/// before admission). Neither is the user's doing, so neither may be warned about as if it were: only
/// `spark-operator validate -f`, which reads the user's file, warns about a status written there.
fn as_written(object: &serde_json::Value) -> std::borrow::Cow<'_, serde_json::Value> {
    let server_set = object.get("status").is_some() || object.pointer("/metadata/managedFields").is_some();
    if !server_set {
        return std::borrow::Cow::Borrowed(object);
    }
    let mut object = object.clone();
    if let Some(fields) = object.as_object_mut() {
        fields.remove("status");
    }
    if let Some(metadata) = object.get_mut("metadata").and_then(serde_json::Value::as_object_mut) {
        metadata.remove("managedFields");
    }
    std::borrow::Cow::Owned(object)
}

/// The answer, given what looking up each owner found.
pub fn verdict(checked: Checked, outcomes: &[(OwnerLookup, OwnerLookupOutcome)]) -> Answer {
    if checked.pass {
        return Answer::allow();
    }
    let mut errors = checked.errors;
    errors.extend(owner_reference_errors(outcomes));
    let mut warnings = checked.warnings;
    warnings.extend(owner_reference_warnings(outcomes));
    let mut answer = if errors.is_empty() {
        Answer::allow()
    } else {
        let listed: Vec<String> = errors.iter().map(ToString::to_string).collect();
        let cause = if errors
            .iter()
            .any(|e| e.path.as_str().starts_with("metadata.ownerReferences"))
        {
            "owner-reference"
        } else {
            "invalid-spec"
        };
        Answer::deny(
            422,
            "Invalid",
            cause,
            format!("{} is invalid: {}", checked.subject, listed.join("; ")),
        )
    };
    answer.warnings = warnings;
    answer
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    fn request(object: Value) -> Request {
        Request {
            uid: "u".into(),
            kind: "SparkApplication".into(),
            operation: "CREATE".into(),
            namespace: Some("jobs".into()),
            object: Some(object),
            username: "alice".into(),
            dry_run: false,
        }
    }

    fn app(memory: &str, owners: Value) -> Value {
        json!({
            "apiVersion": "sparkoperator.k8s.io/v1beta2",
            "kind": "SparkApplication",
            "metadata": { "name": "pi", "namespace": "jobs", "ownerReferences": owners },
            "spec": {
                "type": "Scala", "mode": "cluster", "sparkVersion": "4.0.0", "image": "spark:4.0.0",
                "mainClass": "org.apache.spark.examples.SparkPi",
                "mainApplicationFile": "local:///opt/spark/examples/jars/spark-examples.jar",
                "driver": { "cores": 1, "memory": memory },
                "executor": { "cores": 1, "instances": 1, "memory": "512m" }
            }
        })
    }

    fn owner() -> Value {
        json!([{ "apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow", "name": "wf", "uid": "w-1" }])
    }

    #[test]
    fn spec_errors_and_a_missing_owner_are_one_denial_with_their_paths() {
        let checked = check(&request(app("lots", owner())));
        assert_eq!(checked.lookups.len(), 1);
        let outcomes = vec![(checked.lookups[0].clone(), OwnerLookupOutcome::NotFound)];
        let answer = verdict(checked, &outcomes);
        let denial = answer.denial.unwrap();
        assert_eq!(denial.code, 422);
        assert!(
            denial
                .message
                .starts_with(r#"SparkApplication.sparkoperator.k8s.io "pi" is invalid: "#),
            "{}",
            denial.message
        );
        assert!(denial.message.contains("spec.driver.memory"), "{}", denial.message);
        assert!(
            denial.message.contains("metadata.ownerReferences[0]"),
            "{}",
            denial.message
        );
        assert!(denial.message.contains("garbage-collects"), "{}", denial.message);
    }

    #[test]
    fn a_same_namespace_owner_is_admitted_and_an_unserved_kind_warned_about() {
        let checked = check(&request(app("512m", owner())));
        let found = vec![(
            checked.lookups[0].clone(),
            OwnerLookupOutcome::Found { uid: "w-1".into() },
        )];
        assert!(verdict(checked.clone(), &found).allowed());
        let unknown = vec![(checked.lookups[0].clone(), OwnerLookupOutcome::UnknownKind)];
        let answer = verdict(checked, &unknown);
        assert!(answer.allowed());
        assert!(
            answer.warnings.iter().any(|w| w.contains("does not serve")),
            "{:?}",
            answer.warnings
        );
    }

    /// What kube-apiserver sends on every write: the object with its managedFields, and on update the
    /// stored status. Neither is the user's doing, so neither is warned about (issue 30, faults 3 and 4);
    /// what the user wrote still is.
    #[test]
    fn fields_the_api_server_sets_are_not_warned_about() {
        let mut object = app("512m", json!([]));
        object["metadata"]["managedFields"] = json!([{
            "manager": "kubectl-client-side-apply", "operation": "Update",
            "apiVersion": "sparkoperator.k8s.io/v1beta2", "time": "2026-11-29T00:00:00Z",
            "fieldsType": "FieldsV1", "fieldsV1": { "f:spec": { "f:image": {} } }
        }]);
        object["metadata"]["resourceVersion"] = json!("42");
        object["metadata"]["uid"] = json!("a-1");
        object["metadata"]["generation"] = json!(2);
        object["metadata"]["creationTimestamp"] = json!("2026-11-29T00:00:00Z");
        object["status"] = json!({ "applicationState": { "state": "RUNNING" }, "submissionID": "s-1" });
        for operation in ["CREATE", "UPDATE"] {
            let mut update = request(object.clone());
            update.operation = operation.into();
            let answer = verdict(check(&update), &[]);
            assert!(answer.allowed());
            assert!(answer.warnings.is_empty(), "{operation}: {:?}", answer.warnings);
        }
        // A misspelt field the user wrote is still one.
        object["spec"]["imagee"] = json!("typo");
        let answer = verdict(check(&request(object)), &[]);
        assert!(
            answer.warnings.iter().any(|w| w.starts_with("spec.imagee")),
            "{:?}",
            answer.warnings
        );
    }

    /// An owner of a kind the operator may not read is no reason to refuse (issue 30, fault 2): admitted,
    /// with a warning that says what could not be checked and what Kubernetes does if the owner is missing.
    #[test]
    fn an_owner_the_operator_may_not_read_is_admitted_with_a_warning() {
        let checked = check(&request(app("512m", owner())));
        let forbidden = vec![(
            checked.lookups[0].clone(),
            OwnerLookupOutcome::NotAllowed("workflows.argoproj.io \"wf\" is forbidden".into()),
        )];
        let answer = verdict(checked, &forbidden);
        assert!(answer.allowed(), "{:?}", answer.denial);
        let warning = answer
            .warnings
            .iter()
            .find(|w| w.starts_with("metadata.ownerReferences[0]"))
            .expect("a warning about the owner");
        assert!(warning.contains("could not check"), "{warning}");
        assert!(warning.contains("garbage-collects"), "{warning}");
        assert!(warning.contains("webhook.ownerResources"), "{warning}");
    }

    #[test]
    fn other_kinds_and_deletes_pass() {
        let mut delete = request(app("512m", json!([])));
        delete.object = None;
        assert!(verdict(check(&delete), &[]).allowed());
        let config_map = request(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}}));
        assert!(verdict(check(&config_map), &[]).allowed());
    }
}
