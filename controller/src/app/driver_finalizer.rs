//! The driver-protection finalizer (`sparkoperator.k8s.io/driver-protection`).
//!
//! Driver pods are created with it, so a driver deleted the instant it finishes (terminated-pod GC, a
//! node drain, a cleanup job) stays readable until its exit is in the SparkApplication status. It is
//! released:
//! - once the status persists the driver's termination for the pod's submission, or the application no
//!   longer waits for that driver (another submission, suspended, invalidated, rerun);
//! - when the pod's application is gone (or is being deleted), so no pod is ever stranded;
//! - by `spark-operator cleanup`, which releases every pod's finalizer (uninstall, Helm pre-delete hook).

use crate::pod::SparkPod;
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::json;
use spark_operator_api::SparkApplication;
use spark_operator_api::labels::{FINALIZER_DRIVER_PROTECTION, LABEL_LAUNCHED_BY_SPARK_OPERATOR, LABEL_VALUE_TRUE};

use crate::app::observe::DriverPod;

/// Whether the finalizer must stay on a driver pod, given the application's *persisted* status.
pub(crate) fn keep(pod: &DriverPod, app: Option<&SparkApplication>) -> bool {
    let Some(app) = app else { return false };
    if app.metadata.deletion_timestamp.is_some() {
        return false;
    }
    if pod.app_name.as_deref() != app.metadata.name.as_deref() {
        return false;
    }
    let Some(status) = app.status.as_ref() else {
        return false;
    };
    let current =
        pod.submission_id.as_deref() == Some(status.submission_id.as_str()) && !status.submission_id.is_empty();
    current && status.application_state.state.expects_driver() && status.driver_termination.is_none()
}

/// Why releasing finalizers failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("releasing the driver-protection finalizer of pod {namespace}/{name}")]
    Release {
        namespace: String,
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("releasing the driver-protection finalizer of pod {namespace}/{name}: the pod kept changing")]
    KeptChanging { namespace: String, name: String },
    #[error("listing the operator's pods")]
    List(#[source] kube::Error),
}

/// Removes our finalizer from a pod, leaving any other finalizer; conditional on the pod's
/// resourceVersion, retried on conflict. A pod already gone is fine.
pub(crate) async fn release(client: &kube::Client, pod: &SparkPod) -> Result<bool, Error> {
    let namespace = pod.metadata.namespace.clone().unwrap_or_default();
    let name = pod.metadata.name.clone().unwrap_or_default();
    let api: Api<SparkPod> = Api::namespaced(client.clone(), &namespace);
    let failed = |source| Error::Release {
        namespace: namespace.clone(),
        name: name.clone(),
        source,
    };
    let mut current = pod.clone();
    for _ in 0..5 {
        let finalizers = current.metadata.finalizers.clone().unwrap_or_default();
        if !finalizers.iter().any(|f| f == FINALIZER_DRIVER_PROTECTION) {
            return Ok(false);
        }
        let others: Vec<_> = finalizers
            .into_iter()
            .filter(|f| f != FINALIZER_DRIVER_PROTECTION)
            .collect();
        let patch = json!({"metadata": {
            "finalizers": others,
            "resourceVersion": current.metadata.resource_version,
        }});
        match api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch)).await {
            Ok(_) => {
                tracing::debug!(namespace, pod = name, "driver-protection finalizer released");
                return Ok(true);
            }
            Err(kube::Error::Api(status)) if status.code == 404 => return Ok(false),
            Err(kube::Error::Api(status)) if status.code == 409 => match api.get_opt(&name).await {
                Ok(Some(fresh)) => current = fresh,
                Ok(None) => return Ok(false),
                Err(source) => return Err(failed(source)),
            },
            Err(source) => return Err(failed(source)),
        }
    }
    Err(Error::KeptChanging { namespace, name })
}

/// Releases the finalizer of every operator pod in the namespaces given (all when empty): what an
/// uninstall needs so that no pod is left undeletable. Returns how many pods were released.
pub async fn cleanup(client: &kube::Client, namespaces: &[String]) -> Result<usize, Error> {
    let selector = format!("{LABEL_LAUNCHED_BY_SPARK_OPERATOR}={LABEL_VALUE_TRUE}");
    let apis: Vec<Api<SparkPod>> = if namespaces.is_empty() {
        vec![Api::all(client.clone())]
    } else {
        namespaces
            .iter()
            .map(|ns| Api::namespaced(client.clone(), ns))
            .collect()
    };
    let mut released = 0;
    for api in apis {
        let mut params = ListParams::default().labels(&selector).limit(500);
        loop {
            let page = api.list(&params).await.map_err(Error::List)?;
            for pod in &page.items {
                if release(client, pod).await? {
                    released += 1;
                }
            }
            match page.metadata.continue_.filter(|c| !c.is_empty()) {
                Some(token) => params = params.continue_token(&token),
                None => break,
            }
        }
    }
    Ok(released)
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use spark_operator_api::state::DriverState;

    use super::*;

    fn app(state: &str, termination: bool) -> SparkApplication {
        let mut status = json!({"applicationState": {"state": state}, "submissionID": "s1"});
        if termination {
            status["driverTermination"] = json!({"podName": "pi-driver", "exitCode": 0});
        }
        serde_json::from_value(json!({
            "apiVersion": "sparkoperator.k8s.io/v1beta2", "kind": "SparkApplication",
            "metadata": {"name": "pi", "namespace": "ns"},
            "spec": {"type": "Scala", "sparkVersion": "4.0.4", "driver": {}, "executor": {}},
            "status": status
        }))
        .unwrap()
    }

    fn pod(submission: &str) -> DriverPod {
        DriverPod {
            name: "pi-driver".into(),
            submission_id: Some(submission.into()),
            app_name: Some("pi".into()),
            ours: true,
            state: DriverState::Completed,
            has_finalizer: true,
            ..DriverPod::default()
        }
    }

    #[test]
    fn kept_until_the_termination_is_persisted() {
        assert!(keep(&pod("s1"), Some(&app("RUNNING", false))));
        assert!(keep(&pod("s1"), Some(&app("SUBMITTED", false))));
        assert!(!keep(&pod("s1"), Some(&app("RUNNING", true))), "recorded: released");
        assert!(!keep(&pod("s1"), Some(&app("COMPLETED", true))));
    }

    #[test]
    fn released_when_nobody_waits_for_that_driver() {
        assert!(!keep(&pod("s1"), None), "the application is gone");
        assert!(
            !keep(&pod("old"), Some(&app("RUNNING", false))),
            "another submission's pod"
        );
        assert!(!keep(&pod("s1"), Some(&app("SUSPENDING", false))));
        assert!(!keep(&pod("s1"), Some(&app("INVALIDATING", false))));
        assert!(!keep(&pod("s1"), Some(&app("PENDING_RERUN", false))));
        let mut deleting = app("RUNNING", false);
        deleting.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            jiff::Timestamp::UNIX_EPOCH,
        ));
        assert!(!keep(&pod("s1"), Some(&deleting)), "the application is being deleted");
    }
}
