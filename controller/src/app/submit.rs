//! Executing a claimed submission, exactly once: build the objects with the pure builders
//! ([`crate::submission`]), create the driver pod, then the objects it owns.
//!
//! The submission id is already in the status when this runs (see [`crate::app::state`]). Everything random
//! about the objects (Spark's ids, hence the ConfigMap and Service names) is derived from that id and the
//! recorded submission time, so running the same submission again, after a crash or on a new leader,
//! builds the very same objects: an existing driver pod carrying our submission id is adopted and its
//! missing objects created, never a second driver.

use k8s_openapi::api::core::v1::{ConfigMap, Pod, Service};
use k8s_openapi::api::networking::v1::{Ingress, NetworkPolicy};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::Resource;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use serde::Serialize;
use serde::de::DeserializeOwned;
use spark_operator_api::SparkApplication;
use spark_operator_api::defaults::apply_defaults;
use spark_operator_runtime::error_chain::{ErrorChain, kube_error};

use crate::app::context::Settings;
use crate::app::state::SubmitOutcome;
use crate::status::write::FIELD_MANAGER;
use crate::submission::driver_pdb::DriverPdb;
use crate::submission::pod_group::PodGroup;
use crate::submission::web_ui::WebUiStatus;
use crate::submission::{
    ExistingDriverPod, Submission, SubmissionError, SubmissionIds, SubmissionInput, build_submission,
    classify_existing_driver_pod,
};

/// What became of a submission.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Submitted {
    /// Done, one way or the other; with what `status.driverInfo` records of the UI Service and Ingress
    /// (empty unless the submission went through and the operator makes them).
    Done(SubmitOutcome, WebUiStatus),
    /// A driver pod of an earlier run of this application is still there; it was asked to go.
    WaitForOldDriver { pod: String },
}

impl Submitted {
    /// A submission that failed for good, with the message the status shows.
    fn failed(message: String) -> Self {
        Self::Done(SubmitOutcome::Failed { message }, WebUiStatus::default())
    }
}

/// A transient failure: the reconcile is retried and the same submission resumed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Error {
    #[error("creating {kind} {namespace}/{name}")]
    Create {
        kind: &'static str,
        namespace: String,
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("reading the existing driver pod {namespace}/{name}")]
    ReadDriver {
        namespace: String,
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("deleting {kind} {namespace}/{name}")]
    Delete {
        kind: &'static str,
        namespace: String,
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("deleting the old driver pod {namespace}/{name}")]
    DeleteOldDriver {
        namespace: String,
        name: String,
        #[source]
        source: kube::Error,
    },
}

/// Spark's random ids for a submission, derived from its id and time so a resumed submission builds
/// the same objects.
pub(crate) fn submission_ids(submission_id: &str, submit_time: jiff::Timestamp) -> SubmissionIds {
    let digest = |salt: &str| md5::compute(format!("{submission_id}/{salt}")).0;
    let unique = digest("unique");
    let part = |i: usize| [unique[3 * i], unique[3 * i + 1], unique[3 * i + 2]];
    let millis = u64::try_from(submit_time.as_millisecond()).unwrap_or_default();
    SubmissionIds::from_random(digest("app"), digest("local-dir"), [part(0), part(1), part(2)], millis)
}

/// API errors that retrying the same request cannot fix.
fn permanent(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(s) if matches!(s.code, 400 | 403 | 404 | 422))
}

fn already_exists(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(s) if s.code == 409)
}

/// The objects [`submit`] creates for `input`, exactly as created: the builders' output for the
/// application with defaults applied (the webhook may not have run). The only thing added later is the
/// created driver pod's uid, as owner of the others ([`Submission::set_driver_owner`]). Pure, so the
/// oracle test checks this very function.
pub fn objects(input: &SubmissionInput<'_>) -> Result<Submission, SubmissionError> {
    let mut app = input.app.clone();
    apply_defaults(&mut app.spec);
    build_submission(&SubmissionInput {
        app: &app,
        ..input.clone()
    })
}

/// Creates (or adopts) the objects of `submission_id`, recorded in `app`'s status at `submit_time`.
pub(crate) async fn submit(
    client: &kube::Client,
    settings: &Settings,
    app: &SparkApplication,
    submission_id: &str,
    submit_time: jiff::Timestamp,
) -> Result<Submitted, Error> {
    let namespace = app.metadata.namespace.clone().unwrap_or_default();
    let ids = submission_ids(submission_id, submit_time);
    // The batch scheduler the application gets (its own, or the operator's default) is part of its spec
    // for this submission, so the driver pod and the executor template carry its marks.
    let applied = settings.batch.applied(app);
    let app: &SparkApplication = &applied;
    let input = SubmissionInput {
        app,
        submission_id,
        ids: &ids,
        submit_time,
        spark_master_url: &settings.spark_master_url,
        spark_user: &settings.spark_user,
        options: &settings.submission,
    };
    let mut objects = match objects(&input) {
        Ok(objects) => objects,
        Err(error) => {
            // Shown to users in status: the whole chain, the decoration's field and fix included.
            return Ok(Submitted::failed(ErrorChain(&error).to_string()));
        }
    };

    // The application's own objects first, so the driver's mounts resolve at once (and its UI Service,
    // Ingress and PodDisruptionBudget are there when it starts).
    let web_ui = match application_objects(client, &namespace, &objects).await {
        Ok(web_ui) => web_ui,
        Err(Error::Create { source, kind, name, .. }) if permanent(&source) => {
            let message = format!(
                "the API server refused the application's {kind} {name}: {}",
                kube_error(&source)
            );
            return Ok(Submitted::failed(message));
        }
        Err(error) => return Err(error),
    };

    // The gang scheduler's PodGroup before the driver, as Kubeflow: the driver's pod names it.
    if let Some(group) = &objects.pod_group
        && let Some(message) = create_pod_group(client, &namespace, group).await?
    {
        return Ok(Submitted::failed(message));
    }

    let pods: Api<Pod> = Api::namespaced(client.clone(), &namespace);
    let pod_name = objects.driver_pod.metadata.name.clone().unwrap_or_default();
    let (uid, outcome) = match pods.create(&PostParams::default(), &objects.driver_pod).await {
        Ok(created) => (created.metadata.uid.unwrap_or_default(), SubmitOutcome::Created),
        Err(error) if already_exists(&error) => {
            let existing = pods.get_opt(&pod_name).await.map_err(|source| Error::ReadDriver {
                namespace: namespace.clone(),
                name: pod_name.clone(),
                source,
            })?;
            let Some(existing) = existing else {
                // Deleted in between: the next reconcile creates it.
                return Ok(Submitted::WaitForOldDriver { pod: pod_name });
            };
            match classify_existing_driver_pod(&existing, app, submission_id) {
                ExistingDriverPod::ThisSubmission => {
                    (existing.metadata.uid.unwrap_or_default(), SubmitOutcome::Adopted)
                }
                ExistingDriverPod::EarlierSubmission { .. } => {
                    if existing.metadata.deletion_timestamp.is_none() {
                        delete_pod(&pods, &pod_name, &namespace).await?;
                    }
                    return Ok(Submitted::WaitForOldDriver { pod: pod_name });
                }
                ExistingDriverPod::Unrelated => {
                    let message = format!(
                        "a pod named {pod_name} already exists and was not created for this application: delete \
                         it, or name the driver differently with spec.driver.podName"
                    );
                    return Ok(Submitted::failed(message));
                }
            }
        }
        Err(error) if permanent(&error) => {
            let message = format!(
                "the API server refused the driver pod {pod_name}: {}",
                kube_error(&error)
            );
            return Ok(Submitted::failed(message));
        }
        Err(source) => {
            return Err(Error::Create {
                kind: "Pod",
                namespace,
                name: pod_name,
                source,
            });
        }
    };

    objects.set_driver_owner(&uid);
    let created = async {
        create(client, &namespace, &objects.service).await?;
        if let Some(policy) = &objects.network_policy {
            create::<NetworkPolicy>(client, &namespace, policy).await?;
        }
        if let Some(template) = &objects.executor_pod_template {
            create::<ConfigMap>(client, &namespace, template).await?;
        }
        create::<ConfigMap>(client, &namespace, &objects.config_map).await
    }
    .await;
    match created {
        Ok(()) => Ok(Submitted::Done(outcome, web_ui)),
        Err(Error::Create { source, kind, name, .. }) if permanent(&source) => {
            // As spark-submit: without its objects the driver cannot run; take it back and fail.
            delete_pod(&pods, &pod_name, &namespace).await?;
            let message = format!(
                "the API server refused the driver's {kind} {name}: {}",
                kube_error(&source)
            );
            Ok(Submitted::failed(message))
        }
        Err(error) => Err(error),
    }
}

/// Applies the objects the application owns (the Prometheus ConfigMap, the driver PodDisruptionBudget,
/// the UI and `driverIngressOptions` Services and Ingresses), or deletes a PodDisruptionBudget the spec
/// no longer asks for; returns what the status records of the UI.
async fn application_objects(
    client: &kube::Client,
    namespace: &str,
    objects: &Submission,
) -> Result<WebUiStatus, Error> {
    if let Some(config_map) = &objects.prometheus_config_map {
        apply(client, namespace, config_map).await?;
    }
    match &objects.driver_pdb {
        DriverPdb::Unmanaged => {}
        DriverPdb::Apply(pdb) => {
            apply::<PodDisruptionBudget>(client, namespace, pdb).await?;
        }
        DriverPdb::Delete { name } => delete_driver_pdb(client, namespace, name).await?,
    }
    let access = &objects.driver_access;
    let mut web_ui = WebUiStatus::default();
    for (index, exposure) in access.ui.iter().chain(&access.driver_ingresses).enumerate() {
        let stored = apply::<Service>(client, namespace, &exposure.service).await?;
        if let Some(ingress) = &exposure.ingress {
            apply::<Ingress>(client, namespace, ingress).await?;
        }
        if index == 0 && access.ui.is_some() {
            web_ui = WebUiStatus::of(exposure, &stored);
        }
    }
    Ok(web_ui)
}

/// Deletes the driver PodDisruptionBudget `name`, if there is one.
pub(crate) async fn delete_driver_pdb(client: &kube::Client, namespace: &str, name: &str) -> Result<(), Error> {
    let api: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), namespace);
    delete_if_present(&api, "PodDisruptionBudget", namespace, name).await
}

/// Deletes an object; one already gone is fine.
async fn delete_if_present<K>(api: &Api<K>, kind: &'static str, namespace: &str, name: &str) -> Result<(), Error>
where
    K: Clone + DeserializeOwned + std::fmt::Debug,
{
    match api.delete(name, &DeleteParams::background()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(source) => Err(Error::Delete {
            kind,
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            source,
        }),
    }
}

/// Creates the PodGroup (one left from an earlier run of the application is reused); the failure to
/// show when the API server has no such resource (the scheduler's CRD is not installed) or refuses it.
async fn create_pod_group(client: &kube::Client, namespace: &str, group: &PodGroup) -> Result<Option<String>, Error> {
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &group.resource);
    let name = group.object.metadata.name.clone().unwrap_or_default();
    match api.create(&PostParams::default(), &group.object).await {
        Ok(_) => Ok(None),
        Err(error) if already_exists(&error) => Ok(None),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(Some(format!(
            "spec.batchScheduler: the PodGroup {name} cannot be created because this cluster has no {plural}.{group_name} \
             resource ({api_version}): install the scheduler's CRDs, or remove spec.batchScheduler",
            plural = group.resource.plural,
            group_name = group.resource.group,
            api_version = group.resource.api_version,
        ))),
        Err(error) if permanent(&error) => Ok(Some(format!(
            "the API server refused the PodGroup {name}: {}",
            kube_error(&error)
        ))),
        Err(source) => Err(Error::Create {
            kind: "PodGroup",
            namespace: namespace.to_owned(),
            name,
            source,
        }),
    }
}

/// Deletes the application's PodGroup once it has ended (Kubeflow's batch-scheduler `Cleanup`); gone
/// already is fine. Its ownerReference removes it with the application in any case.
pub(crate) async fn delete_pod_group(
    client: &kube::Client,
    namespace: &str,
    resource: &kube::api::ApiResource,
    name: &str,
) -> Result<(), Error> {
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, resource);
    delete_if_present(&api, "PodGroup", namespace, name).await
}

async fn delete_pod(pods: &Api<Pod>, name: &str, namespace: &str) -> Result<(), Error> {
    match pods.delete(name, &DeleteParams::background()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(source) => Err(Error::DeleteOldDriver {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            source,
        }),
    }
}

/// A namespaced k8s-openapi object the submission writes.
trait Namespaced:
    Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
    + k8s_openapi::Resource
    + Clone
    + DeserializeOwned
    + Serialize
    + std::fmt::Debug
{
}

impl<K> Namespaced for K where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + k8s_openapi::Resource
        + Clone
        + DeserializeOwned
        + Serialize
        + std::fmt::Debug
{
}

/// Creates an object; one that already exists (a resumed submission) is fine.
async fn create<K: Namespaced>(client: &kube::Client, namespace: &str, object: &K) -> Result<(), Error> {
    let api: Api<K> = Api::namespaced(client.clone(), namespace);
    match api.create(&PostParams::default(), object).await {
        Ok(_) => Ok(()),
        Err(error) if already_exists(&error) => Ok(()),
        Err(source) => Err(Error::Create {
            kind: <K as k8s_openapi::Resource>::KIND,
            namespace: namespace.to_owned(),
            name: object.meta().name.clone().unwrap_or_default(),
            source,
        }),
    }
}

/// Creates or updates an object the application owns (server-side apply, our field manager): the
/// same content for a resumed submission, the new content after a spec change. Returns it as stored.
async fn apply<K: Namespaced>(client: &kube::Client, namespace: &str, object: &K) -> Result<K, Error> {
    let api: Api<K> = Api::namespaced(client.clone(), namespace);
    let name = object.meta().name.clone().unwrap_or_default();
    // k8s-openapi types serialize their apiVersion and kind, which server-side apply needs.
    match api
        .patch(&name, &PatchParams::apply(FIELD_MANAGER).force(), &Patch::Apply(object))
        .await
    {
        Ok(stored) => Ok(stored),
        Err(source) => Err(Error::Create {
            kind: <K as k8s_openapi::Resource>::KIND,
            namespace: namespace.to_owned(),
            name,
            source,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_a_function_of_the_submission() {
        let t = jiff::Timestamp::from_second(1_700_000_000).unwrap();
        assert_eq!(submission_ids("a", t), submission_ids("a", t));
        assert_ne!(
            submission_ids("a", t).config_map_id,
            submission_ids("b", t).config_map_id
        );
        assert!(submission_ids("a", t).app_id.starts_with("spark-"));
    }
}
