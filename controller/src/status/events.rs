//! Kubernetes Events for every state transition of an application and every noticed condition change
//! (`kubectl describe sparkapp` lists them), through kube-runtime's `Recorder` (events.k8s.io/v1, repeated events aggregated as a series).
//!
//! A failed Event is logged, never fatal: the status is the record, Events are the narrative.

use k8s_openapi::api::core::v1::ObjectReference;
use kube::Resource;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use spark_operator_api::SparkApplication;
use spark_operator_runtime::error_chain::kube_error;

use spark_operator_api::state::ApplicationStateType;

use crate::status::text::truncate_utf8;

/// A state transition, which becomes an Event and a log line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Transition {
    pub from: ApplicationStateType,
    pub to: ApplicationStateType,
    pub reason: &'static str,
    pub message: String,
    pub warning: bool,
}

/// Something worth an Event that is not a state transition: a condition that changed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Notice {
    pub reason: &'static str,
    pub message: String,
    pub warning: bool,
}

/// Events' notes are limited to 1 kB by the API.
const MAX_NOTE_BYTES: usize = 1000;

/// Publishes the application's Events.
#[derive(Clone)]
pub(crate) struct Events {
    recorder: Recorder,
}

impl Events {
    pub(crate) fn new(client: kube::Client, controller: &str, instance: &str) -> Self {
        let reporter = Reporter {
            controller: controller.to_owned(),
            instance: Some(instance.to_owned()),
        };
        Self {
            recorder: Recorder::new(client, reporter),
        }
    }

    /// A Warning about an object the controller could not handle (an unreadable application, a reconcile
    /// that panicked), addressed by its reference alone: such an object may not even decode.
    pub(crate) async fn warning(&self, reference: &ObjectReference, reason: &str, note: &str) {
        self.publish(reference, true, reason, note, "Reconcile").await;
    }

    /// One Event per transition: reason as Kubeflow names it, the note saying what happened.
    pub(crate) async fn transition(&self, app: &SparkApplication, transition: &Transition) {
        let note = format!("{} → {}: {}", show(transition.from), transition.to, transition.message);
        let action = action(transition.to);
        self.publish(
            &app.object_ref(&()),
            transition.warning,
            transition.reason,
            &note,
            action,
        )
        .await;
    }

    /// One Event per noticed condition change (waiting for capacity, starved executors).
    pub(crate) async fn notice(&self, app: &SparkApplication, notice: &Notice) {
        self.publish(
            &app.object_ref(&()),
            notice.warning,
            notice.reason,
            &notice.message,
            "ObserveDriver",
        )
        .await;
    }

    /// Publishes one Event about `reference`, its note cut to the API's limit; a failure is logged.
    pub(crate) async fn publish(
        &self,
        reference: &ObjectReference,
        warning: bool,
        reason: &str,
        note: &str,
        action: &str,
    ) {
        let event = Event {
            type_: if warning { EventType::Warning } else { EventType::Normal },
            reason: reason.to_owned(),
            note: Some(truncate_utf8(note, MAX_NOTE_BYTES)),
            action: action.to_owned(),
            secondary: None,
        };
        if let Err(error) = self.recorder.publish(&event, reference).await {
            tracing::warn!(
                object = reference.name.as_deref().unwrap_or_default(),
                reason,
                error = %kube_error(&error),
                "could not publish an event"
            );
        }
    }
}

fn show(state: spark_operator_api::ApplicationStateType) -> &'static str {
    if state.is_new() { "NEW" } else { state.as_str() }
}

/// The Event's action: what the controller did or observed.
fn action(to: spark_operator_api::ApplicationStateType) -> &'static str {
    use spark_operator_api::ApplicationStateType as S;
    match to {
        S::New | S::Submitted | S::SubmissionFailed | S::Resuming | S::PendingRerun => "Submit",
        S::Running | S::Unknown | S::Succeeding | S::Failing => "ObserveDriver",
        S::Completed | S::Failed => "Finish",
        S::Invalidating => "Invalidate",
        S::Suspending | S::Suspended => "Suspend",
    }
}
