//! Mutation of Spark pods (the webhook's objectSelector picks pods labelled
//! `sparkoperator.k8s.io/launched-by-spark-operator=true`): the application's pod-level settings, through
//! the same pure decoration the controller applies to drivers, as a JSONPatch. A pod gets all of its
//! application's settings or is refused: there is no half-configured pod.
//!
//! Refused: a pod whose application is gone or being deleted, a pod of a submission that is not the
//! application's current one (a stale driver's executors), a pod the settings cannot be applied to (with
//! the field). Pure: the server finds the application ([`crate::apps`]) and calls [`decide`].

use k8s_openapi::api::core::v1::Pod;
use serde_json::Value;
use spark_operator_api::SparkApplication;
use spark_operator_api::decoration::decorate_pod;
use spark_operator_api::defaults::apply_defaults;
use spark_operator_api::labels::{LABEL_APP_NAME, LABEL_SPARK_ROLE, LABEL_SUBMISSION_ID, SparkRole};
use spark_operator_runtime::error_chain::ErrorChain;

use crate::review::Answer;

/// What the server found of a pod's application.
#[derive(Clone, Copy, Debug)]
pub enum AppView<'a> {
    Found(&'a SparkApplication),
    /// No such application in the pod's namespace.
    Gone,
    /// The application exists but cannot be decoded; the reason names the field.
    Unreadable(&'a str),
}

/// The pod's claims, from its labels.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SparkPodClaims {
    pub name: String,
    pub app: String,
    pub role: SparkRole,
    pub submission_id: Option<String>,
}

fn label<'a>(pod: &'a Value, key: &str) -> Option<&'a str> {
    pod.pointer("/metadata/labels")
        .and_then(|l| l.get(key))
        .and_then(Value::as_str)
}

/// Which application a pod says it belongs to, and as what; None for pods that are not Spark's.
pub fn claims(pod: &Value) -> Option<SparkPodClaims> {
    let role = SparkRole::parse(label(pod, LABEL_SPARK_ROLE)?)?;
    let name = pod
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .or_else(|| pod.pointer("/metadata/generateName").and_then(Value::as_str))
        .unwrap_or_default()
        .to_owned();
    Some(SparkPodClaims {
        name,
        app: label(pod, LABEL_APP_NAME)?.to_owned(),
        role,
        submission_id: label(pod, LABEL_SUBMISSION_ID).map(str::to_owned),
    })
}

/// Whether `app` is the pod's application as it stands: not being deleted, and running the pod's
/// submission. A cache that says otherwise is confirmed with a live read before a pod is refused.
pub fn is_current(app: &SparkApplication, claims: &SparkPodClaims) -> bool {
    let submission = app
        .status
        .as_ref()
        .map(|s| s.submission_id.as_str())
        .unwrap_or_default();
    app.metadata.deletion_timestamp.is_none()
        && claims
            .submission_id
            .as_deref()
            .is_none_or(|claimed| claimed == submission)
}

/// The answer for a Spark pod being created in `namespace`.
pub fn decide(pod: &Value, namespace: &str, claims: &SparkPodClaims, app: AppView<'_>) -> Answer {
    let subject = format!("pods {:?} is forbidden", claims.name);
    let application = format!("SparkApplication {namespace}/{}", claims.app);
    let app = match app {
        AppView::Gone => {
            return Answer::deny(
                403,
                "Forbidden",
                "application-gone",
                format!(
                    "{subject}: its {application} does not exist (deleted?); a Spark pod is created only with all of its application's settings"
                ),
            );
        }
        AppView::Unreadable(reason) => {
            return Answer::deny(
                403,
                "Forbidden",
                "application-unreadable",
                format!("{subject}: its {application} cannot be read ({reason}); fix the application"),
            );
        }
        AppView::Found(app) => app,
    };
    if app.metadata.deletion_timestamp.is_some() {
        return Answer::deny(
            403,
            "Forbidden",
            "application-deleted",
            format!("{subject}: its {application} is being deleted"),
        );
    }
    let current = app
        .status
        .as_ref()
        .map(|s| s.submission_id.as_str())
        .unwrap_or_default();
    if let Some(claimed) = claims.submission_id.as_deref()
        && claimed != current
    {
        return Answer::deny(
            403,
            "Forbidden",
            "stale-submission",
            format!(
                "{subject}: it belongs to submission {claimed} of {application}, whose current submission is {}",
                if current.is_empty() { "none" } else { current }
            ),
        );
    }
    let typed: Pod = match serde_json::from_value(pod.clone()) {
        Ok(typed) => typed,
        Err(error) => {
            return Answer::deny(
                400,
                "BadRequest",
                "undecodable-pod",
                format!("{subject}: the pod cannot be decoded: {error}"),
            );
        }
    };
    // The controller decorates drivers with the defaulted application; the same here, so a driver the
    // controller built gets an empty patch.
    let mut defaulted = app.clone();
    apply_defaults(&mut defaulted.spec);
    let decorated = match decorate_pod(&typed, &defaulted, claims.role) {
        Ok(decorated) => decorated,
        Err(error) => {
            return Answer::deny(
                422,
                "Invalid",
                "decoration",
                format!(
                    "{subject}: {application}'s settings cannot be applied: {}",
                    ErrorChain(&error)
                ),
            );
        }
    };
    let (Ok(before), Ok(after)) = (serde_json::to_value(&typed), serde_json::to_value(&decorated)) else {
        return Answer::deny(
            500,
            "InternalError",
            "internal",
            format!("{subject}: the decorated pod could not be encoded"),
        );
    };
    let patch = json_patch::diff(&before, &after);
    let mut answer = Answer::allow();
    answer.patch = serde_json::to_value(&patch)
        .ok()
        .and_then(|v| v.as_array().cloned())
        .unwrap_or_default();
    answer
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn app(submission: &str) -> SparkApplication {
        serde_json::from_value(json!({
            "apiVersion": "sparkoperator.k8s.io/v1beta2", "kind": "SparkApplication",
            "metadata": {"name": "pi", "namespace": "jobs", "uid": "a-1"},
            "spec": {
                "type": "Scala", "sparkVersion": "4.0.4", "image": "spark:4.0.4",
                "mainApplicationFile": "local:///x.jar",
                "driver": {"cores": 1, "memory": "512m"},
                "executor": {"instances": 1, "cores": 1, "memory": "512m",
                    "env": [{"name": "TEAM", "value": "data"}],
                    "nodeSelector": {"disk": "ssd"},
                    "tolerations": [{"key": "spark", "operator": "Exists"}]}
            },
            "status": {"submissionID": submission}
        }))
        .unwrap()
    }

    fn executor(submission: &str) -> Value {
        json!({
            "metadata": {"name": "pi-exec-1", "namespace": "jobs", "labels": {
                "spark-role": "executor", "sparkoperator.k8s.io/app-name": "pi",
                "sparkoperator.k8s.io/submission-id": submission,
                "sparkoperator.k8s.io/launched-by-spark-operator": "true"}},
            "spec": {"containers": [{"name": "spark-kubernetes-executor", "image": "spark:4.0.4"}]}
        })
    }

    fn apply(pod: &Value, patch: &[Value]) -> Value {
        let patch: json_patch::Patch = serde_json::from_value(Value::Array(patch.to_vec())).unwrap();
        let mut pod = pod.clone();
        json_patch::patch(&mut pod, &patch).unwrap();
        pod
    }

    #[test]
    fn an_executor_gets_every_setting_and_the_patch_is_idempotent() {
        let pod = executor("s-1");
        let claims = claims(&pod).unwrap();
        let app = app("s-1");
        let answer = decide(&pod, "jobs", &claims, AppView::Found(&app));
        assert!(answer.allowed(), "{answer:?}");
        let patched = apply(&pod, &answer.patch);
        assert_eq!(patched["spec"]["nodeSelector"]["disk"], "ssd");
        assert_eq!(patched["spec"]["tolerations"][0]["key"], "spark");
        assert!(
            patched["spec"]["containers"][0]["env"].to_string().contains("TEAM"),
            "{patched}"
        );
        let again = decide(&patched, "jobs", &claims, AppView::Found(&app));
        assert!(again.patch.is_empty(), "{:?}", again.patch);
    }

    #[test]
    fn pods_of_gone_deleted_or_stale_applications_are_refused() {
        let pod = executor("s-1");
        let claims = claims(&pod).unwrap();
        let gone = decide(&pod, "jobs", &claims, AppView::Gone).denial.unwrap();
        assert!(
            gone.message.contains("SparkApplication jobs/pi does not exist"),
            "{}",
            gone.message
        );
        let mut deleting = app("s-1");
        deleting.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            jiff::Timestamp::UNIX_EPOCH,
        ));
        assert_eq!(
            decide(&pod, "jobs", &claims, AppView::Found(&deleting))
                .denial
                .unwrap()
                .cause,
            "application-deleted"
        );
        let stale = decide(&pod, "jobs", &claims, AppView::Found(&app("s-2")))
            .denial
            .unwrap();
        assert_eq!(stale.cause, "stale-submission");
        assert!(!is_current(&app("s-2"), &claims) && is_current(&app("s-1"), &claims));
    }

    #[test]
    fn pods_that_are_not_sparks_have_no_claims() {
        assert!(claims(&json!({"metadata": {"labels": {"app": "x"}}})).is_none());
        assert!(claims(&json!({"metadata": {"labels": {"spark-role": "driver"}}})).is_none());
    }
}
