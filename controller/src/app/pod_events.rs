//! The pod watch's events as they stream by: executor transitions into the trackers (so none is missed
//! between two reconciles), driver exits' arrival times (for the termination → status metric), and, after
//! a relist, executors deleted unseen. Only pods of a trusted driver count ([`crate::pod::is_driver_of`]).

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use jiff::Timestamp;
use kube::Resource as _;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use spark_operator_api::labels::SparkRole;
use spark_operator_api::state::TerminationObserver;
use spark_operator_api::status::SparkApplicationStatus;
use spark_operator_api::watched::WatchedApp;

use crate::app::context::Ctx;
use crate::app::observe;
use crate::pod::{MAX_EXECUTOR_ID, SparkPod};

/// Follows the pod watch's events: executor transitions into the trackers, driver exits' arrival
/// times (for the termination → status metric), and, after a relist, executors deleted unseen.
#[derive(Clone)]
pub(crate) struct PodObserver {
    pub ctx: Arc<Ctx>,
    pub apps: Store<WatchedApp>,
    /// Executor events of a relist whose driver was not known yet: judged once the relist is complete
    /// (a list comes in no particular order).
    pub deferred: Arc<Mutex<Vec<Arc<SparkPod>>>>,
}

impl PodObserver {
    pub(crate) fn observe(&self, event: &watcher::Event<SparkPod>) {
        tracing::trace!(?event, "pod event");
        match event {
            watcher::Event::Apply(pod) => self.pod(pod, false, false),
            watcher::Event::InitApply(pod) => self.pod(pod, false, true),
            watcher::Event::Delete(pod) => self.pod(pod, true, false),
            watcher::Event::InitDone => {
                let deferred = std::mem::take(&mut *self.deferred.lock().unwrap_or_else(PoisonError::into_inner));
                for pod in deferred {
                    self.pod(&pod, false, false);
                }
                self.sweep()
            }
            watcher::Event::Init => {}
        }
    }

    fn pod(&self, pod: &SparkPod, deleted: bool, relisting: bool) {
        let namespace = pod.metadata.namespace.as_deref().unwrap_or_default();
        match observe::spark_role(pod) {
            Some(SparkRole::Driver) => {
                self.driver(pod, namespace);
                let name = pod.metadata.name.as_deref().unwrap_or_default();
                let exited = observe::driver_pod(pod, TerminationObserver::PodWatch)
                    .termination
                    .is_some();
                if !deleted
                    && exited
                    && let Ok(mut seen) = self.ctx.driver_exits.lock()
                {
                    if seen.len() > 100_000 {
                        seen.clear();
                    }
                    seen.entry(format!("{namespace}/{name}")).or_insert_with(Instant::now);
                }
            }
            Some(SparkRole::Executor) => self.executor(pod, namespace, deleted, relisting),
            _ => {}
        }
    }

    /// The application's uid, from the cache.
    fn app_uid(&self, namespace: &str, app: &str) -> Option<String> {
        self.apps
            .get(&ObjectRef::new(app).within(namespace))
            .and_then(|a| a.meta().uid.clone())
    }

    /// A driver pod is trusted when its application controls it ([`SparkPod::is_driver_of`]): then
    /// executors owned by it count.
    fn trusted_driver(&self, pod: &SparkPod, namespace: &str) -> Option<(String, String, String)> {
        let app = observe::app_name(pod)?;
        let submission = observe::submission_id(pod)?;
        let app_uid = self.app_uid(namespace, app)?;
        let uid = pod.metadata.uid.clone()?;
        pod.is_driver_of(&app_uid)
            .then(|| (app.to_owned(), submission.to_owned(), uid))
    }

    fn driver(&self, pod: &SparkPod, namespace: &str) {
        let Some((app, submission, uid)) = self.trusted_driver(pod, namespace) else {
            return;
        };
        let Ok(mut executors) = self.ctx.executors.lock() else {
            return;
        };
        let status = || self.status(namespace, &app);
        if let Some(tracker) = executors.tracker_for(namespace, &app, &submission, status) {
            tracker.driver_uid = Some(uid);
        }
    }

    fn status(&self, namespace: &str, app: &str) -> Option<SparkApplicationStatus> {
        self.apps
            .get(&ObjectRef::new(app).within(namespace))
            .and_then(|a| a.readable()?.status.clone())
    }

    /// Whether an executor pod is what it claims: an id Spark could have given, and owned by its
    /// submission's driver pod (known from the driver's events, or from the cache).
    fn trusted_executor(&self, pod: &SparkPod, namespace: &str, driver_uid: Option<&str>) -> Option<bool> {
        let id_ok = observe::executor_pod(pod)
            .and_then(|facts| facts.executor_id)
            .is_some_and(|id| (1..=MAX_EXECUTOR_ID).contains(&id));
        if !id_ok {
            return Some(false);
        }
        let owners: Vec<_> = pod.metadata.owner_references.iter().flatten().collect();
        if let Some(driver_uid) = driver_uid {
            return Some(owners.iter().any(|o| o.uid == driver_uid));
        }
        // Driver not seen yet: the cache decides, when it has the owner.
        let submission = observe::submission_id(pod);
        for owner in owners.iter().filter(|o| o.kind == "Pod") {
            let Some(driver) = self.ctx.cached_pod(namespace, &owner.name) else {
                continue;
            };
            let trusted = self.trusted_driver(&driver, namespace);
            if let Some((_, driver_submission, uid)) = trusted
                && uid == owner.uid
                && Some(driver_submission.as_str()) == submission
            {
                return Some(true);
            }
        }
        // Unknown for now (None) or never (false).
        None
    }

    fn executor(&self, pod: &SparkPod, namespace: &str, deleted: bool, relisting: bool) {
        let (Some(facts), Some(app)) = (observe::executor_pod(pod), observe::app_name(pod)) else {
            return;
        };
        let Some(submission) = facts.submission_id.clone() else {
            return;
        };
        let Ok(mut executors) = self.ctx.executors.lock() else {
            return;
        };
        let status = || self.status(namespace, app);
        let Some(tracker) = executors.tracker_for(namespace, app, &submission, status) else {
            return;
        };
        match self.trusted_executor(pod, namespace, tracker.driver_uid.as_deref()) {
            Some(true) => {}
            None if relisting => {
                self.deferred
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push(Arc::new(pod.clone()));
                return;
            }
            _ => {
                self.ctx.metrics.untrusted_pods.inc();
                tracing::debug!(
                    namespace,
                    pod = pod.metadata.name.as_deref().unwrap_or_default(),
                    "ignoring an executor pod not owned by its submission's driver"
                );
                return;
            }
        }
        if tracker.driver_uid.is_none() {
            tracker.driver_uid = pod
                .metadata
                .owner_references
                .iter()
                .flatten()
                .find(|o| o.kind == "Pod")
                .map(|o| o.uid.clone());
        }
        let before = tracker.counts().clone();
        let now = Timestamp::now();
        if deleted {
            tracker.observe_deletion(&facts, now, self.ctx.settings.limits);
        } else {
            tracker.observe(&facts, now, self.ctx.settings.limits);
        }
        let after = tracker.counts();
        let m = &self.ctx.metrics;
        m.executor_success_count
            .add(u64::try_from(after.completed.saturating_sub(before.completed)).unwrap_or(0));
        m.executor_failure_count
            .add(u64::try_from(after.failed.saturating_sub(before.failed)).unwrap_or(0));
    }

    fn sweep(&self) {
        let Ok(mut executors) = self.ctx.executors.lock() else {
            return;
        };
        let now = Timestamp::now();
        for (namespace, tracker) in executors.iter_mut() {
            let exists = |name: &str| self.ctx.cached_pod(namespace, name).is_some();
            tracker.sweep(exists, now, self.ctx.settings.limits);
        }
    }
}
