//! The gRPC service the agents stream their reports to, on every replica (leader or not: it writes
//! through the runtime's unfenced client, and its writes are conditional, so replicas never overwrite
//! each other or the leader).
//!
//! One report: validate ([`apply::validate`]) → GET the application (or start from the copy this
//! replica's last write of it returned, [`super::last_written`]) → [`apply::apply`] → write the status as
//! a JSON merge patch carrying the `resourceVersion` read (a 409 re-reads and re-applies, a few times) →
//! only then answer OK. An answer that needs no write (a replay, a refusal) is given from a fresh read
//! only. Reports of one application that arrive while its status is being
//! written wait and go out together in the next write (a group commit), so the write rate stays far
//! below the report rate. Nothing is acknowledged before the write that records it: an agent
//! deletes a report from its spool on OK, so an early OK followed by a failed write would lose it.
//!
//! TLS is terminated with the acceptor the caller gives (the operator's serving certificate) and HTTP/2
//! served by the runtime's server helper ([`spark_operator_runtime::server`]) with [`LIMITS`]: handshakes
//! run concurrently, each bounded in time, a connection must send its first request in time, and
//! connections are bounded in number; tonic's generated service answers the requests.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use futures::{Stream, StreamExt};
use hyper_util::service::TowerToHyperService;
use jiff::Timestamp;
use kube::api::Api;
use spark_operator_api::SparkApplication;
use spark_operator_proto::agent::v1::termination_reports_server::{TerminationReports, TerminationReportsServer};
use spark_operator_proto::agent::v1::{ReportAck, ReportRequest, Verdict};
use spark_operator_proto::tonic::{self, Request, Response, Status, Streaming};
use spark_operator_runtime::Runtime;
use spark_operator_runtime::args::Listen;
use spark_operator_runtime::error_chain::{ErrorChain, kube_error};
use spark_operator_runtime::server::{Http2, Limits, Listener, Protocol, Server};
use tokio_rustls::TlsAcceptor;

use super::ReceiverArgs;
use super::apply::{self, Applied, Report, Whose};
use super::auth::Authenticator;
use super::group_commit::GroupCommit;
use super::last_written::LastWritten;
use crate::metrics::ReportMetrics;
use crate::pod::SparkPod;
use crate::status::write as status;

/// Status writes tried per report when the application keeps changing under it (then RETRY).
const WRITE_ATTEMPTS: usize = 5;
/// Reports of one stream worked on at once (reports of one application wait for one write together).
const IN_FLIGHT_PER_STREAM: usize = 64;
/// Agent connections at once (one per node and replica is the normal case).
const MAX_CONNECTIONS: usize = 4096;
/// A TLS handshake that takes longer than this is dropped, so it holds no connection slot.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Time from a connection's handshake to its first request (an agent opens its stream at once).
const FIRST_REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// How long streams in flight may go on after shutdown (agents keep their streams open for good): past
/// it, what is still in flight is answered by nobody, and its agent sends it again (nothing was
/// acknowledged before its write).
const DRAIN: Duration = Duration::from_secs(10);
/// The receiver's limits, served by [`spark_operator_runtime::server`].
const LIMITS: Limits = Limits {
    max_connections: MAX_CONNECTIONS,
    header_read_timeout: FIRST_REQUEST_TIMEOUT,
    handshake_timeout: HANDSHAKE_TIMEOUT,
    drain: DRAIN,
    // Acks are small writes (as are the reports; the agent sets this too): Nagle's algorithm would hold
    // one back while the one before is unacknowledged.
    nodelay: true,
};
const HTTP2: Http2 = Http2 {
    // A node that vanished leaves its stream open: keepalives find it.
    keepalive_interval: Some(Duration::from_secs(30)),
    keepalive_timeout: Duration::from_secs(10),
    // An agent needs one stream; a few more cover a reconnect racing the old stream's end.
    max_concurrent_streams: Some(8),
};
/// Largest request accepted (a report is a few KiB: its texts are bounded by the agent).
const MAX_MESSAGE_BYTES: usize = 1024 * 1024;

/// Why the receiver could not serve.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(
        "the receiver's TLS configuration does not offer ALPN `h2`: gRPC clients refuse a server without it; \
         add b\"h2\" to the ServerConfig's alpn_protocols"
    )]
    NoH2,
    /// "listening on {address} for termination reports".
    #[error(transparent)]
    Bind(spark_operator_runtime::server::Error),
    #[error("the receiver's task on {address} ended abnormally")]
    Task {
        address: SocketAddr,
        #[source]
        source: tokio::task::JoinError,
    },
}

/// A receiver started by [`start`]: where it listens, until the runtime shuts down (or this is dropped).
#[derive(Debug)]
pub struct Serving {
    /// The bound address (the port chosen when asked for port 0).
    pub address: SocketAddr,
    task: Option<tokio::task::JoinHandle<Result<(), Error>>>,
}

impl Serving {
    /// Waits until the receiver stops (the runtime's shutdown, then a bounded drain).
    pub async fn wait(mut self) -> Result<(), Error> {
        let Some(task) = self.task.take() else {
            return Ok(());
        };
        task.await.map_err(|source| Error::Task {
            address: self.address,
            source,
        })?
    }
}

impl Drop for Serving {
    fn drop(&mut self) {
        if let Some(task) = &self.task {
            task.abort();
        }
    }
}

/// Serves the agents' reports on `args.reports_address` over `tls` until the runtime shuts down; at once
/// `Ok` when the address is `off`. Runs on every replica.
pub async fn serve(args: ReceiverArgs, tls: TlsAcceptor, runtime: &Runtime) -> Result<(), Error> {
    match start(args, tls, runtime).await? {
        Some(serving) => serving.wait().await,
        None => Ok(()),
    }
}

/// Binds and starts serving in the background, handing back the bound address (None when `off`). The
/// readiness check `reports` is set once listening.
pub async fn start(args: ReceiverArgs, tls: TlsAcceptor, runtime: &Runtime) -> Result<Option<Serving>, Error> {
    start_with(args, tls, runtime, LIMITS).await
}

/// [`start`] with `limits` (tests: small ones).
async fn start_with(
    args: ReceiverArgs,
    tls: TlsAcceptor,
    runtime: &Runtime,
    limits: Limits,
) -> Result<Option<Serving>, Error> {
    let Listen::On(address) = args.reports_address else {
        tracing::info!("not receiving termination reports (--reports-address off)");
        return Ok(None);
    };
    if !tls.config().alpn_protocols.iter().any(|p| p == b"h2") {
        return Err(Error::NoH2);
    }
    let ready = runtime.readiness().register("reports");
    let listener = Listener::bind(address, "termination reports")
        .await
        .map_err(Error::Bind)?;
    let bound = listener.address();
    let metrics = Arc::new(ReportMetrics::default());
    runtime.metrics().register(metrics.clone());
    let receiver = Receiver(Arc::new(Inner {
        client: runtime.client(),
        auth: Authenticator::new(
            runtime.client(),
            &args.agent_token_audience,
            &args.agent_service_accounts,
        ),
        budget: args.status_byte_budget,
        metrics,
        queues: Mutex::new(HashMap::new()),
        written: Mutex::new(LastWritten::default()),
    }));
    let shutdown = runtime.shutdown().clone();
    tracing::info!(
        %bound,
        audience = args.agent_token_audience,
        agents = ?args.agent_service_accounts.iter().map(ToString::to_string).collect::<Vec<_>>(),
        "receiving termination reports"
    );
    ready.set(true);
    let server = Server {
        listener,
        tls: Some(tls),
        protocol: Protocol::Http2(HTTP2),
        limits,
        shutdown,
    };
    let service = TerminationReportsServer::new(receiver).max_decoding_message_size(MAX_MESSAGE_BYTES);
    let task = tokio::spawn(async move {
        server.serve(TowerToHyperService::new(service)).await;
        ready.set(false);
        Ok(())
    });
    Ok(Some(Serving {
        address: bound,
        task: Some(task),
    }))
}

/// The remote address of a report connection (in each request's extensions, put there by the server
/// helper).
pub(crate) use spark_operator_runtime::server::Peer;

/// The service.
#[derive(Clone)]
struct Receiver(Arc<Inner>);

struct Inner {
    client: kube::Client,
    auth: Authenticator,
    budget: usize,
    metrics: Arc<ReportMetrics>,
    /// One queue per application: this replica writes an application's status one write at a time, each
    /// write recording every report that waited for it (a group commit), instead of one write per report
    /// conflicting with the next (other replicas and the leader still can: writes are conditional).
    queues: Mutex<HashMap<(String, String), Weak<AppQueue>>>,
    /// What this replica's last status writes returned, so the next write of the same application
    /// needs no read first.
    written: Mutex<LastWritten>,
}

/// The reports waiting for one application's next status write, and the turn to write it.
type AppQueue = GroupCommit<Report, Outcome>;

/// How recording one report went.
#[derive(Clone)]
enum Outcome {
    Recorded,
    Already(String),
    Discard(String),
    Retry(String),
}

#[tonic::async_trait]
impl TerminationReports for Receiver {
    type ReportStream = Pin<Box<dyn Stream<Item = Result<ReportAck, Status>> + Send>>;

    async fn report(&self, request: Request<Streaming<ReportRequest>>) -> Result<Response<Self::ReportStream>, Status> {
        let peer = request
            .extensions()
            .get::<Peer>()
            .map(|p| p.0.to_string())
            .unwrap_or_default();
        let agent = match self.0.auth.authenticate(request.metadata()).await {
            Ok(agent) => agent,
            Err(error) => {
                self.0.metrics.refused_streams.inc();
                tracing::warn!(peer, error = %ErrorChain(&error), "refused a report stream");
                return Err(error.status());
            }
        };
        tracing::debug!(peer, agent, "report stream opened");
        let inner = self.0.clone();
        let acks = request
            .into_inner()
            // A broken stream ends here; the agent reconnects and sends again what has no ack.
            .take_while(|request| futures::future::ready(request.is_ok()))
            .filter_map(|request| futures::future::ready(request.ok()))
            .map(move |request| {
                let inner = inner.clone();
                async move { inner.answer(request).await }
            })
            .buffer_unordered(IN_FLIGHT_PER_STREAM)
            .map(Ok);
        Ok(Response::new(Box::pin(acks)))
    }
}

impl Inner {
    async fn answer(&self, request: ReportRequest) -> ReportAck {
        let (report, outcome) = match apply::validate(request.report.as_ref()) {
            Ok(report) => {
                let outcome = self.record(&report).await;
                (Some(report), outcome)
            }
            Err(reason) => (None, Outcome::Discard(format!("malformed report: {reason}"))),
        };
        let (verdict, label, reason) = match outcome {
            Outcome::Recorded => (Verdict::Ok, "ok", String::new()),
            Outcome::Already(reason) => (Verdict::Ok, "ok", reason),
            Outcome::Discard(reason) => (Verdict::Discard, "discard", reason),
            Outcome::Retry(reason) => (Verdict::Retry, "retry", reason),
        };
        self.metrics.verdict(label);
        // Names and ids only: a report's message and log tail are the application's output.
        let (namespace, app, pod, container) = report.as_ref().map_or(("", "", "", ""), |r| {
            (
                r.namespace.as_str(),
                r.app.as_str(),
                r.record.pod_name.as_str(),
                r.container_id.as_str(),
            )
        });
        if verdict == Verdict::Ok {
            tracing::debug!(
                namespace,
                app,
                pod,
                container,
                verdict = label,
                reason,
                "termination report"
            );
        } else {
            tracing::info!(
                namespace,
                app,
                pod,
                container,
                verdict = label,
                reason,
                "termination report"
            );
        }
        ReportAck {
            sequence: request.sequence,
            verdict: verdict as i32,
            reason,
        }
    }

    /// Records a report in its application's status; the outcome is known only after the write. Reports
    /// of one application go out together ([`GroupCommit`]), so at a high rate of ends one write records
    /// many.
    async fn record(&self, report: &Report) -> Outcome {
        self.queue(&report.namespace, &report.app)
            .submit(report.clone(), |reports| async move { self.record_all(&reports).await })
            .await
            .unwrap_or_else(|| Outcome::Retry("the write recording this report was cancelled".into()))
    }

    /// Records `reports` of one application in one status write (read or take the last written copy,
    /// apply each, write conditionally; a conflict starts over on a fresh read): one outcome per report,
    /// in order.
    async fn record_all(&self, reports: &[Report]) -> Vec<Outcome> {
        let Some(first) = reports.first() else {
            return Vec::new();
        };
        let (namespace, app_name) = (first.namespace.as_str(), first.app.as_str());
        let api: Api<SparkApplication> = Api::namespaced(self.client.clone(), namespace);
        let name = format!("{namespace}/{app_name}");
        let all = |outcome: Outcome| reports.iter().map(|_| outcome.clone()).collect::<Vec<_>>();
        // The copy this replica's last write of the application returned, if it still has one: the first
        // pass starts from it (a pass of its own, so a stale copy costs no attempt).
        let mut remembered = self.lock_written().take(namespace, app_name);
        for _ in 0..WRITE_ATTEMPTS + usize::from(remembered.is_some()) {
            let (app, fresh) = match remembered.take() {
                Some(app) => (app, false),
                None => match self.read(&api, app_name, &name).await {
                    Ok(app) => (app, true),
                    Err(outcome) => return all(outcome),
                },
            };
            // An answer given without a write stands on a fresh read only: a remembered copy may be stale
            // (a new submission, a deletion since), and only a write's resourceVersion would have said so.
            if app.metadata.deletion_timestamp.is_some() {
                if !fresh {
                    continue;
                }
                return all(Outcome::Discard(format!("application gone: {name} is being deleted")));
            }
            let stored = app.status.as_ref();
            let mut wanted = stored.cloned().unwrap_or_default();
            // None: changed the status, recorded once the write succeeds.
            let mut decided: Vec<Option<Outcome>> = Vec::with_capacity(reports.len());
            for report in reports {
                if report.whose == Whose::Driver
                    && let Some(refusal) = self.not_the_driver(report, &app).await
                {
                    decided.push(Some(refusal));
                    continue;
                }
                decided.push(match apply::apply(&mut wanted, report, self.budget) {
                    Applied::Changed => None,
                    Applied::Duplicate(reason) => Some(Outcome::Already(reason)),
                    Applied::Discard(reason) => Some(Outcome::Discard(reason)),
                    Applied::Full(reason) => Some(Outcome::Retry(reason)),
                });
            }
            if decided.iter().all(Option::is_some) {
                if !fresh {
                    continue;
                }
                return decided.into_iter().flatten().collect();
            }
            let version = app.metadata.resource_version.clone().unwrap_or_default();
            match status::write(&api, app_name, stored, &wanted, &version).await {
                Ok(written) => {
                    self.lock_written().put(namespace, app_name, written);
                    for (report, _) in reports.iter().zip(&decided).filter(|(_, d)| d.is_none()) {
                        self.recorded(report);
                    }
                    return decided.into_iter().map(|d| d.unwrap_or(Outcome::Recorded)).collect();
                }
                // Someone else wrote the application since it was read: apply again on a fresh read.
                Err(status::Error::Conflict { .. }) => self.metrics.conflicts.inc(),
                Err(error) => {
                    let reason = ErrorChain(&error).to_string();
                    return decided
                        .into_iter()
                        .map(|d| d.unwrap_or_else(|| Outcome::Retry(reason.clone())))
                        .collect();
                }
            }
        }
        all(Outcome::Retry(format!(
            "the application {name} kept changing while the report was recorded ({WRITE_ATTEMPTS} conflicts)"
        )))
    }

    /// Reads the application; the outcome for every report waiting when it cannot be read.
    async fn read(&self, api: &Api<SparkApplication>, app_name: &str, name: &str) -> Result<SparkApplication, Outcome> {
        api.get(app_name).await.map_err(|error| match error {
            // Only the application itself not found is "gone": a 404 for the whole resource (the CRD
            // being reinstalled) must not make agents drop what they hold.
            kube::Error::Api(status)
                if status.code == 404 && status.details.as_ref().is_some_and(|d| d.name == app_name) =>
            {
                Outcome::Discard(format!("application gone: {name} does not exist"))
            }
            error => Outcome::Retry(format!("reading the application {name}: {}", kube_error(&error))),
        })
    }

    fn lock_written(&self) -> std::sync::MutexGuard<'_, LastWritten> {
        self.written.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The metric and the log line of a report a status write recorded.
    fn recorded(&self, report: &Report) {
        if let Some(finished) = report.finished_at {
            let seconds = Timestamp::now().duration_since(finished).as_secs_f64();
            self.metrics.termination_to_status.observe(seconds.max(0.0));
        }
        // A driver's end is one line per run; executors' ends, at dynamic-allocation churn, are for
        // debugging only (their counts are in the status).
        if report.whose == Whose::Driver {
            tracing::info!(
                namespace = report.namespace,
                app = report.app,
                pod = report.record.pod_name,
                container = report.container_id,
                exit_code = report.record.exit_code,
                "recorded a driver's end reported by a node agent"
            );
        } else {
            tracing::debug!(
                namespace = report.namespace,
                app = report.app,
                pod = report.record.pod_name,
                container = report.container_id,
                exit_code = report.record.exit_code,
                "recorded an executor's end reported by a node agent"
            );
        }
    }

    /// A driver's end decides the run, so a report of one is checked against the pod while it exists:
    /// the same pod (uid), controlled by the application, as the pod watch trusts drivers. A pod already
    /// gone cannot be checked (that race is what the agent is for): its name, submission and container
    /// still had to match.
    async fn not_the_driver(&self, report: &Report, app: &SparkApplication) -> Option<Outcome> {
        let pods: Api<SparkPod> = Api::namespaced(self.client.clone(), &report.namespace);
        let pod = match pods.get_opt(&report.record.pod_name).await {
            Ok(Some(pod)) => pod,
            Ok(None) => return None,
            Err(error) => {
                return Some(Outcome::Retry(format!(
                    "reading the driver pod {}/{}: {}",
                    report.namespace,
                    report.record.pod_name,
                    kube_error(&error)
                )));
            }
        };
        let uid = pod.metadata.uid.as_deref().unwrap_or_default();
        if !report.pod_uid.is_empty() && uid != report.pod_uid {
            return Some(Outcome::Discard(format!(
                "pod_uid {} is not the driver pod's ({uid}): the report is of another pod of that name",
                report.pod_uid
            )));
        }
        let app_uid = app.metadata.uid.as_deref().unwrap_or_default();
        (!pod.is_driver_of(app_uid)).then(|| {
            Outcome::Discard(format!(
                "pod {} is not the application's driver (no controlling ownerReference to it)",
                report.record.pod_name
            ))
        })
    }

    /// The queue of an application (made on first use; forgotten once no report waits in it).
    fn queue(&self, namespace: &str, app: &str) -> Arc<AppQueue> {
        let mut queues = self.queues.lock().unwrap_or_else(PoisonError::into_inner);
        if queues.len() > 1024 {
            queues.retain(|_, queue| queue.strong_count() > 0);
        }
        let key = (namespace.to_owned(), app.to_owned());
        match queues.get(&key).and_then(Weak::upgrade) {
            Some(queue) => queue,
            None => {
                let queue = Arc::new(AppQueue::default());
                queues.insert(key, Arc::downgrade(&queue));
                queue
            }
        }
    }
}

#[cfg(test)]
mod tests;
