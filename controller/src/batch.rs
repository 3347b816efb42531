//! Which batch scheduler an application gets, given the operator's configuration (Kubeflow's
//! `--enable-batch-scheduler`, `--kube-scheduler-names`, `--default-batch-scheduler`). Pure.
//!
//! Kubeflow lets an application name a scheduler the operator is not configured for and then its
//! driver waits, Pending forever, for a scheduler that does not exist; here that application fails at
//! once, with the flag that would enable it. A PodGroup CRD that is not installed is found when the
//! PodGroup is created (the API server has no such resource), and fails the submission with its name.

use std::borrow::Cow;

use spark_operator_api::SparkApplication;
use spark_operator_api::batch_scheduler::{VOLCANO, YUNIKORN, named_batch_scheduler};

/// The operator's batch-scheduler configuration.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BatchSettings {
    /// `--enable-batch-scheduler`.
    pub enabled: bool,
    /// `--kube-scheduler-names`: kube-schedulers running the coscheduling plugin.
    pub kube_scheduler_names: Vec<String>,
    /// `--default-batch-scheduler`: for applications that name none.
    pub default: Option<String>,
}

/// Why an application's batch scheduler cannot be used.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BatchSchedulerError {
    #[error(
        "spec.batchScheduler: batch scheduling is not enabled in this operator, so no scheduler named {name:?} would \
         ever place the pods: enable it (--enable-batch-scheduler, Helm value controller.batchScheduler.enable) or \
         remove spec.batchScheduler"
    )]
    NotEnabled { name: String },
    #[error(
        "spec.batchScheduler: {name:?} is not a batch scheduler this operator is configured for (supported: {supported}): \
         name one of them, or add it to --kube-scheduler-names (Helm value controller.batchScheduler.kubeSchedulerNames)"
    )]
    Unknown { name: String, supported: String },
}

impl BatchSettings {
    /// The scheduler an application gets: its own `spec.batchScheduler`, else the default when batch
    /// scheduling is enabled; None when neither.
    pub fn effective<'a>(&'a self, app: &'a SparkApplication) -> Option<&'a str> {
        named_batch_scheduler(app).or_else(|| {
            self.enabled
                .then_some(self.default.as_deref())
                .flatten()
                .filter(|d| !d.is_empty())
        })
    }

    /// Checks the scheduler an application gets.
    pub fn check(&self, app: &SparkApplication) -> Result<Option<String>, BatchSchedulerError> {
        let Some(name) = self.effective(app) else {
            return Ok(None);
        };
        if !self.enabled {
            return Err(BatchSchedulerError::NotEnabled { name: name.to_owned() });
        }
        if name == VOLCANO || name == YUNIKORN || self.kube_scheduler_names.iter().any(|n| n == name) {
            return Ok(Some(name.to_owned()));
        }
        let mut supported = vec![VOLCANO.to_owned(), YUNIKORN.to_owned()];
        supported.extend(self.kube_scheduler_names.iter().cloned());
        Err(BatchSchedulerError::Unknown {
            name: name.to_owned(),
            supported: supported.join(", "),
        })
    }

    /// The application as it is submitted: with the scheduler it gets written into `spec.batchScheduler`,
    /// so the driver pod and the executor template carry its marks (Kubeflow does the same to its copy).
    /// Borrowed when there is nothing to write.
    pub fn applied<'a>(&self, app: &'a SparkApplication) -> Cow<'a, SparkApplication> {
        match self.effective(app) {
            Some(default) if named_batch_scheduler(app).is_none() => {
                let mut app = app.clone();
                app.spec.batch_scheduler = Some(default.to_owned());
                Cow::Owned(app)
            }
            _ => Cow::Borrowed(app),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn app(scheduler: Option<&str>) -> SparkApplication {
        let mut app: SparkApplication = serde_json::from_value(serde_json::json!({
            "apiVersion": "sparkoperator.k8s.io/v1beta2", "kind": "SparkApplication",
            "metadata": {"name": "pi", "namespace": "default"},
            "spec": {"type": "Scala", "sparkVersion": "4.0.0", "driver": {}, "executor": {}}
        }))
        .expect("an application");
        app.spec.batch_scheduler = scheduler.map(str::to_owned);
        app
    }

    #[test]
    fn a_scheduler_the_operator_is_not_configured_for_fails_with_the_flag_that_enables_it() {
        let off = BatchSettings::default();
        assert_eq!(off.check(&app(None)), Ok(None));
        let error = off.check(&app(Some("volcano"))).unwrap_err().to_string();
        assert!(error.contains("--enable-batch-scheduler"), "{error}");
        assert!(error.starts_with("spec.batchScheduler: "), "{error}");

        let on = BatchSettings {
            enabled: true,
            kube_scheduler_names: vec!["scheduler-plugins-scheduler".into()],
            default: None,
        };
        assert_eq!(on.check(&app(Some("volcano"))), Ok(Some("volcano".into())));
        assert_eq!(on.check(&app(Some("yunikorn"))), Ok(Some("yunikorn".into())));
        assert_eq!(
            on.check(&app(Some("scheduler-plugins-scheduler"))),
            Ok(Some("scheduler-plugins-scheduler".into()))
        );
        let error = on.check(&app(Some("kueue"))).unwrap_err().to_string();
        assert!(
            error.contains("\"kueue\"") && error.contains("volcano, yunikorn, scheduler-plugins-scheduler"),
            "{error}"
        );
    }

    #[test]
    fn the_default_applies_to_applications_that_name_none() {
        let settings = BatchSettings {
            enabled: true,
            kube_scheduler_names: vec![],
            default: Some("volcano".into()),
        };
        assert_eq!(settings.check(&app(None)), Ok(Some("volcano".into())));
        assert_eq!(
            settings.applied(&app(None)).spec.batch_scheduler.as_deref(),
            Some("volcano")
        );
        assert_eq!(
            settings.applied(&app(Some("yunikorn"))).spec.batch_scheduler.as_deref(),
            Some("yunikorn")
        );
        // A default with batch scheduling off is ignored, as Kubeflow ignores it.
        let off = BatchSettings {
            enabled: false,
            ..settings
        };
        assert_eq!(off.check(&app(None)), Ok(None));
    }
}
