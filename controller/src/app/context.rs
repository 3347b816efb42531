//! What every reconcile shares: the client, the settings, events, metrics, the pod cache and the executor
//! trackers. Cheap to clone (everything behind `Arc`s or handles).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::pod::SparkPod;
use kube::runtime::reflector::{ObjectRef, Store};

use crate::scope::NamespaceFilter;

use crate::app::executors::{Executors, Limits};
use crate::config::ControllerArgs;
use crate::config::Timing;
use crate::metrics::Metrics;
use crate::status::events::Events;
use crate::submission::SubmissionOptions;

/// Settings of the reconciler, resolved from the flags.
#[derive(Clone, Debug)]
pub(crate) struct Settings {
    pub timing: Timing,
    pub limits: Limits,
    pub status_byte_budget: usize,
    pub resync: Duration,
    pub submission: SubmissionOptions,
    /// `spark.master` of submitted applications: `k8s://<API server URL>`.
    pub spark_master_url: String,
    /// `SPARK_USER` of drivers without a proxy user.
    pub spark_user: String,
    /// Which batch schedulers applications may name.
    pub batch: crate::batch::BatchSettings,
}

impl Settings {
    pub(crate) fn from_args(args: &ControllerArgs, spark_master_url: String) -> Self {
        Self {
            timing: args.timing(),
            limits: Limits {
                max_tracked: args.max_tracked_executors,
                max_failures: args.max_executor_failures,
            },
            status_byte_budget: args.status_byte_budget,
            resync: Duration::from_secs(args.resync_period.max(1)),
            submission: args.submission_options(),
            spark_master_url,
            spark_user: args.spark_user.clone(),
            batch: args.batch_settings(),
        }
    }
}

/// The reconciler's context.
#[derive(Clone)]
pub(crate) struct Ctx {
    pub client: kube::Client,
    pub settings: Arc<Settings>,
    pub events: Events,
    pub metrics: Arc<Metrics>,
    pub executors: Arc<Mutex<Executors>>,
    /// Driver and executor pods (the launched-by label), from the pod watch.
    pub pods: Store<SparkPod>,
    pub namespaces: NamespaceFilter,
    /// When the pod watch first saw each driver's exit (`namespace/pod`), for the termination → status
    /// latency metric.
    pub driver_exits: Arc<Mutex<HashMap<String, Instant>>>,
    /// Applications that cannot be read or whose reconcile panicked (see `poison`).
    pub quarantine: Arc<Mutex<Quarantine>>,
}

impl Ctx {
    /// The cached pod, if any.
    pub(crate) fn cached_pod(&self, namespace: &str, name: &str) -> Option<Arc<SparkPod>> {
        self.pods.get(&ObjectRef::new(name).within(namespace))
    }
}

/// Whether a cache has had its first list, waiting up to `limit` (forever without one). Polled, not
/// awaited once: the store's readiness wakes only its last waiter (the controller's runner), so
/// another waiter could wait for a wake-up that never comes.
pub(crate) async fn listed<K>(store: &Store<K>, limit: Option<Duration>) -> bool
where
    K: kube::Resource + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    let deadline = limit.map(|limit| Instant::now() + limit);
    while tokio::time::timeout(Duration::from_millis(50), store.wait_until_ready())
        .await
        .is_err()
    {
        if deadline.is_some_and(|deadline| Instant::now() >= deadline) {
            return false;
        }
    }
    true
}

/// What the controller remembers of bad applications, by uid.
#[derive(Debug, Default)]
pub(crate) struct Quarantine {
    /// The generation last marked unreadable.
    pub(super) unreadable: HashMap<String, i64>,
    /// Consecutive panics.
    pub(super) panics: HashMap<String, u32>,
}
