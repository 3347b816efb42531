//! What every reconcile shares: the client, the settings, events, metrics, the pod cache and the executor
//! trackers. Cheap to clone (everything behind `Arc`s or handles).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Namespace;

use crate::pod::SparkPod;
use kube::runtime::reflector::{ObjectRef, Store};

use crate::app::events::Events;
use crate::app::executors::{Executors, Limits};
use crate::app::poison::Quarantine;
use crate::app::state::Timing;
use crate::config::ControllerArgs;
use crate::metrics::Metrics;
use crate::submission::SubmissionOptions;

/// Settings of the reconciler, resolved from the flags.
#[derive(Clone, Debug)]
pub struct Settings {
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
    pub fn from_args(args: &ControllerArgs, spark_master_url: String) -> Self {
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

/// Which namespaces are reconciled: all the watch returns, or those a label selector picks.
#[derive(Clone)]
pub enum NamespaceFilter {
    /// The watches are already scoped (all namespaces, or one controller per listed namespace).
    Watched,
    /// Namespaces matching the selector, as cached.
    Selected(Store<Namespace>),
}

impl NamespaceFilter {
    pub fn allows(&self, namespace: &str) -> bool {
        match self {
            Self::Watched => true,
            Self::Selected(store) => store.get(&ObjectRef::new(namespace)).is_some(),
        }
    }
}

/// The reconciler's context.
#[derive(Clone)]
pub struct Ctx {
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
    pub fn cached_pod(&self, namespace: &str, name: &str) -> Option<Arc<SparkPod>> {
        self.pods.get(&ObjectRef::new(name).within(namespace))
    }
}
