//! The node agent (`spark-operator agent`, one per node as a DaemonSet): it sees every Spark container
//! end first, on the node's container runtime, records the end durably, reports it to the operator, and
//! keeps the Spark containers' logs on the node after the pods are gone.
//!
//! - [`config`]: the agent's flags.
//! - [`cri`]: watching the runtime over CRI: events, relists, merge by container id, OOM settling, the
//!   polling fallback.
//! - [`identity`]: which containers are Spark's, and whose, from the labels kubelet copies onto the sandbox.
//! - [`cri_log`]: the CRI log format under `/var/log/pods`, read back into lines.
//! - [`report`]: a Spark container's end as a `TerminationReport` (pure, plus the file reads it needs).
//! - [`reported`]: the containers whose end was captured, so a restarted agent does not report them again.
//! - [`spool`]: reports on disk until acknowledged: checksummed, sequenced records, fsynced before a report
//!   counts as captured, bounded by bytes and age.
//! - [`delivery`]: the gRPC stream to the operator's report receiver (TLS, ServiceAccount token).
//! - [`logs`]: Spark logs copied from `/var/log/pods` into the agent's own store, bounded, and served.
//! - [`metrics`]: what the agent counts.
//!
//! [`run`] wires them: cri → ([`Capture`]: report → spool, and the log store's hooks) → delivery.

pub mod config;
pub mod cri;
pub mod cri_log;
pub mod delivery;
pub mod identity;
pub mod logs;
pub mod metrics;
pub mod report;
pub mod reported;
pub mod spool;

use std::sync::Arc;
use std::time::Duration;

use spark_operator_proto::prost::Message as _;
use spark_operator_runtime::Runtime;
use spark_operator_runtime::error_chain::ErrorChain;
use spark_operator_runtime::shutdown::Shutdown;
use tokio::sync::mpsc;

pub use config::AgentArgs;

use crate::cri::{ContainerEnd, Observation, WatchConfig};
use crate::delivery::DeliveryConfig;
use crate::logs::LogStore;
use crate::metrics::AgentMetrics;
use crate::report::TailLimits;
use crate::reported::{Reported, SharedReported};
use crate::spool::{SharedSpool, Spool};

/// Why the agent could not run.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot open the spool")]
    OpenSpool(#[source] spool::Error),
    #[error("a task opening the spool directory failed")]
    OpenTask(#[source] tokio::task::JoinError),
    #[error("cannot open the index of reported containers")]
    OpenReported(#[source] reported::Error),
    #[error("cannot open the log store")]
    OpenLogs(#[source] logs::Error),
    #[error("cannot serve the log store")]
    ServeLogs(#[source] logs::Error),
}

/// How often the spool's age bound is applied when nothing is appended.
const EXPIRE_PERIOD: Duration = Duration::from_secs(60);
/// Attempts to spool one report before it is given up (a full or failing disk).
const APPEND_ATTEMPTS: u32 = 5;

/// Turns the CRI watcher's observations into spooled reports and the log store's calls.
#[derive(Clone, Debug)]
pub struct Capture {
    pub node_name: String,
    pub tail: TailLimits,
    pub spool: SharedSpool,
    /// Where captured ends are recorded, so a restarted agent does not report them again.
    pub reported: Option<SharedReported>,
    pub logs: LogStore,
    pub metrics: Arc<AgentMetrics>,
}

impl Capture {
    /// Runs until the watcher closes its side: every end it reported before is spooled first.
    pub async fn run(self, mut observations: mpsc::UnboundedReceiver<Observation>) {
        while let Some(observation) = observations.recv().await {
            match observation {
                Observation::Started(source) => self.logs.container_started(source),
                Observation::Ended(end) => {
                    let container_id = end.container.container_id.clone();
                    let finished_at = end.status.finished_at;
                    self.capture(end).await;
                    self.logs.container_exited(&container_id, finished_at);
                }
            }
        }
    }

    /// Builds the report (reading the termination-log file and the log tail) and spools it.
    async fn capture(&self, end: ContainerEnd) {
        let node_name = self.node_name.clone();
        let tail = self.tail;
        let container = end.container.clone();
        let report = match tokio::task::spawn_blocking(move || report::build(&end, &node_name, tail)).await {
            Ok(report) => report,
            Err(error) => {
                self.metrics.reports_failed.inc();
                tracing::error!(%container, %error, "building a termination report failed; it is lost");
                return;
            }
        };
        let payload = report.encode_to_vec();
        let mut wait = Duration::from_millis(200);
        for attempt in 1..=APPEND_ATTEMPTS {
            match self.spool.append(payload.clone()).await {
                Ok(seq) => {
                    self.metrics.containers_ended.inc();
                    if let Some(reported) = &self.reported
                        && let Err(error) = reported.insert(container.container_id.clone()).await
                    {
                        // Only costs a duplicate report after a restart.
                        tracing::warn!(%container, error = %ErrorChain(&error), "cannot record a captured end in the index");
                    }
                    tracing::info!(
                        %container,
                        container_id = %container.container_id,
                        seq,
                        exit_code = report.exit_code,
                        reason = %report.reason,
                        "termination captured"
                    );
                    return;
                }
                Err(error) if attempt < APPEND_ATTEMPTS => {
                    tracing::warn!(%container, error = %ErrorChain(&error), attempt, "cannot spool a termination report; trying again");
                    tokio::time::sleep(wait).await;
                    wait *= 2;
                }
                Err(error) => {
                    self.metrics.reports_failed.inc();
                    tracing::error!(%container, error = %ErrorChain(&error), "cannot spool a termination report; it is lost");
                }
            }
        }
    }
}

/// Opens the spool in `args.spool_dir` (on a blocking thread: it scans every segment).
pub async fn open_spool(args: &AgentArgs, metrics: Arc<AgentMetrics>) -> Result<SharedSpool, Error> {
    let dir = args.spool_dir.clone();
    let limits = args.spool_limits();
    let (spool, recovered) = tokio::task::spawn_blocking(move || Spool::open(&dir, limits, metrics))
        .await
        .map_err(Error::OpenTask)?
        .map_err(Error::OpenSpool)?;
    tracing::info!(
        dir = %args.spool_dir.display(),
        pending = recovered.pending,
        corrupt = recovered.corrupt,
        segments_deleted = recovered.segments_deleted,
        "spool opened"
    );
    Ok(SharedSpool::new(spool))
}

/// Applies the spool's age bound periodically until shutdown.
async fn expire(spool: SharedSpool, shutdown: Shutdown) {
    loop {
        tokio::select! {
            () = tokio::time::sleep(EXPIRE_PERIOD) => {}
            () = shutdown.fired() => return,
        }
        if let Err(error) = spool.expire().await {
            tracing::warn!(error = %ErrorChain(&error), "cannot apply the spool's age bound");
        }
    }
}

/// Runs the agent until the runtime shuts down: the CRI watcher, the capture of ends into the spool (and
/// the log store's hooks), and the delivery stream. Readiness (`cri`) is true while the runtime's socket
/// answers; metrics are `spark_operator_agent_*`.
pub async fn run(args: AgentArgs, runtime: &Runtime) -> Result<(), Error> {
    let metrics = Arc::new(AgentMetrics::default());
    runtime.metrics().register(metrics.clone());
    let ready = runtime.readiness().register("cri");
    let spool = open_spool(&args, metrics.clone()).await?;
    let dir = args.spool_dir.clone();
    let reported = tokio::task::spawn_blocking(move || Reported::open(&dir))
        .await
        .map_err(Error::OpenTask)?
        .map_err(Error::OpenReported)?;
    let reported = SharedReported::new(reported);
    let shutdown = runtime.shutdown().clone();
    let store = {
        let (args, node) = (args.logs.clone(), args.node_name.clone());
        tokio::task::spawn_blocking(move || LogStore::open(&args, &node))
            .await
            .map_err(Error::OpenTask)?
            .map_err(Error::OpenLogs)?
    };
    runtime.metrics().register(store.metrics());
    let served = logs::serve(
        store.clone(),
        args.logs.log_address,
        runtime.client(),
        &args.node_name,
        shutdown.clone(),
    )
    .await
    .map_err(Error::ServeLogs)?;
    tracing::info!(address = %served.address, "serving the log store");
    let (observations, received) = mpsc::unbounded_channel();
    let watch = cri::watch(
        WatchConfig {
            socket: args.cri_socket.clone(),
            relist_period: args.relist_period,
            poll_period: WatchConfig::DEFAULT_POLL_PERIOD,
            oom_settle_delay: args.oom_settle_delay,
            host_root: args.host_root.clone(),
        },
        metrics.clone(),
        Some(ready),
        Some(reported.clone()),
        observations,
        shutdown.clone(),
    );
    let capture = Capture {
        node_name: args.node_name.clone(),
        tail: TailLimits {
            lines: args.log_tail_lines,
            bytes: usize::try_from(args.log_tail_bytes).unwrap_or(usize::MAX),
        },
        spool: spool.clone(),
        reported: Some(reported),
        logs: store.clone(),
        metrics: metrics.clone(),
    }
    .run(received);
    let delivery = delivery::deliver(
        DeliveryConfig::new(
            args.report_address.clone(),
            args.ca_bundle.clone(),
            args.token_file.clone(),
        ),
        spool.clone(),
        metrics.clone(),
        shutdown.clone(),
    );
    tracing::info!(
        node = %args.node_name,
        cri_socket = %args.cri_socket.display(),
        report_address = %args.report_address,
        "agent running"
    );
    tokio::join!(watch, capture, delivery, expire(spool, shutdown));
    // The log server stopped accepting with the rest; its reads in flight get their drain.
    served.stopped().await;
    // The followers stop and record where each copy stands, so a restarted agent resumes them.
    let _ = tokio::task::spawn_blocking(move || store.close()).await;
    Ok(())
}
