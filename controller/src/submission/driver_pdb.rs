//! The driver's PodDisruptionBudget (Kubeflow's `driver_pdb.go`): with the operator's `--enable-driver-pdb`
//! and `spec.driverPodDisruptionBudget: true`, a PodDisruptionBudget named after the driver pod, `minAvailable:
//! 1` over the application's driver, so `kubectl drain` and other evictions wait instead of killing it.
//!
//! Owned by the SparkApplication (its controller reference). Applied at every submission, before the driver
//! pod; with the gate on and the spec not asking for one, any left from an earlier run is deleted (Kubeflow's
//! `ensureDriverPDB`). It is deleted again when the application ends, and before a driver is deleted for a
//! rerun, suspension or spec change (Kubeflow's `cleanUpOnTermination` and `deleteSparkResources`). With the
//! gate off nothing is made or deleted, as in Kubeflow.

use std::collections::BTreeMap;

use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use spark_operator_api::SparkApplication;
use spark_operator_api::labels::{
    LABEL_APP_NAME, LABEL_LAUNCHED_BY_SPARK_OPERATOR, LABEL_SPARK_ROLE, LABEL_VALUE_TRUE,
};
use spark_operator_api::naming::driver_pod_name;

use super::application_owner;

/// What a submission does about the driver's PodDisruptionBudget.
#[derive(Clone, Debug, PartialEq)]
pub enum DriverPdb {
    /// The operator's gate is off: nothing.
    Unmanaged,
    /// Apply this one.
    Apply(Box<PodDisruptionBudget>),
    /// The spec asks for none: delete the one of that name, if any.
    Delete { name: String },
}

/// The PodDisruptionBudget's name: the driver pod's (`util.GetDriverPodName`).
pub fn name(app: &SparkApplication) -> String {
    driver_pod_name(
        app.metadata.name.as_deref().unwrap_or_default(),
        app.spec.driver.pod_name.as_deref(),
        &app.spec.spark_conf,
    )
}

/// Whether the application asks for one (`spec.driverPodDisruptionBudget: true`).
pub fn requested(app: &SparkApplication) -> bool {
    app.spec.driver_pod_disruption_budget == Some(true)
}

/// What to do for a submission of `app`, with the operator's gate `enabled`.
pub fn plan(app: &SparkApplication, enabled: bool) -> DriverPdb {
    match (enabled, requested(app)) {
        (false, _) => DriverPdb::Unmanaged,
        (true, true) => DriverPdb::Apply(Box::new(build(app))),
        (true, false) => DriverPdb::Delete { name: name(app) },
    }
}

/// Kubeflow's `createDriverPDBObject`, with the controller reference `ensureDriverPDB` sets.
pub fn build(app: &SparkApplication) -> PodDisruptionBudget {
    let app_name = app.metadata.name.clone().unwrap_or_default();
    PodDisruptionBudget {
        metadata: ObjectMeta {
            name: Some(name(app)),
            namespace: app.metadata.namespace.clone(),
            labels: Some(BTreeMap::from([
                (LABEL_LAUNCHED_BY_SPARK_OPERATOR.to_owned(), LABEL_VALUE_TRUE.to_owned()),
                (LABEL_APP_NAME.to_owned(), app_name.clone()),
            ])),
            owner_references: application_owner(app).map(|o| vec![o]),
            ..Default::default()
        },
        spec: Some(PodDisruptionBudgetSpec {
            min_available: Some(IntOrString::Int(1)),
            selector: Some(LabelSelector {
                match_labels: Some(BTreeMap::from([
                    (LABEL_APP_NAME.to_owned(), app_name),
                    (LABEL_SPARK_ROLE.to_owned(), "driver".to_owned()),
                ])),
                match_expressions: None,
            }),
            ..Default::default()
        }),
        status: None,
    }
}

/// The PodDisruptionBudget to delete now that `app` has ended (Kubeflow's `cleanUpOnTermination`), if the
/// operator manages them and the application asked for one: it protects nothing any more, and left in
/// place it would stand in the way of draining the node of the finished driver's pod.
pub fn to_delete_at_end(app: &SparkApplication, enabled: bool) -> Option<String> {
    (enabled && requested(app) && app.state().is_terminal()).then(|| name(app))
}
