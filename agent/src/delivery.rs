//! The report stream to the operator: one bidirectional `TerminationReports.Report` stream over TLS
//! (trusting only `--ca-bundle`, ALPN `h2`, the server name from `--report-address`), authenticated with
//! the projected ServiceAccount token as `authorization: Bearer` metadata.
//!
//! Every pending spool record is sent, oldest first, with at most `max_in_flight` unanswered. OK and
//! DISCARD remove a record from the spool (DISCARD counted, its reason logged); RETRY sends it again after
//! a backoff that doubles per record. A stream that fails is opened again after a backoff (reading the CA
//! bundle and the token again: both rotate), and everything still pending is sent again: the receiver
//! identifies reports by container id, so a duplicate is harmless.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt as _;
use http::Uri;
use hyper_util::rt::TokioIo;
use rustls::RootCertStore;
use rustls_pki_types::pem::PemObject as _;
use rustls_pki_types::{CertificateDer, ServerName};
use spark_operator_proto::agent::v1::termination_reports_client::TerminationReportsClient;
use spark_operator_proto::agent::v1::{ReportAck, ReportRequest, TerminationReport, Verdict};
use spark_operator_proto::prost::Message as _;
use spark_operator_proto::tonic::metadata::MetadataValue;
use spark_operator_proto::tonic::transport::{Channel, Endpoint};
use spark_operator_proto::tonic::{self, Request, Status};
use spark_operator_runtime::error_chain::ErrorChain;
use spark_operator_runtime::shutdown::Shutdown;
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_rustls::TlsConnector;
use tokio_stream::wrappers::ReceiverStream;
use tower::service_fn;

use crate::metrics::AgentMetrics;
use crate::spool::{self, SharedSpool};

/// A failed step of delivering reports; the stream is opened again after a backoff.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot read the CA bundle {}", path.display())]
    ReadCaBundle {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("the CA bundle {} is not PEM certificates", path.display())]
    ParseCaBundle {
        path: PathBuf,
        #[source]
        source: rustls_pki_types::pem::Error,
    },
    #[error("the CA bundle {} holds a certificate that cannot be trusted", path.display())]
    TrustCa {
        path: PathBuf,
        #[source]
        source: rustls::Error,
    },
    #[error("the CA bundle {} holds no certificate", path.display())]
    EmptyCaBundle { path: PathBuf },
    #[error("cannot set up TLS")]
    Tls(#[source] rustls::Error),
    #[error("{address} has no host name the receiver's certificate could be checked against")]
    ServerName { address: Uri },
    #[error("cannot read the ServiceAccount token {}", path.display())]
    ReadToken {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("the ServiceAccount token {} is empty or not a valid header value", path.display())]
    InvalidToken { path: PathBuf },
    #[error("cannot connect to the report receiver {address}")]
    Connect {
        address: Uri,
        #[source]
        source: tonic::transport::Error,
    },
    #[error("the report receiver refused the report stream")]
    Open(#[source] Status),
    #[error("the report stream failed")]
    Stream(#[source] Status),
    #[error("the report receiver closed the report stream")]
    StreamEnded,
    #[error("cannot read the spool")]
    Spool(#[source] spool::Error),
}

/// Where and how reports are delivered.
#[derive(Clone, Debug)]
pub struct DeliveryConfig {
    pub address: Uri,
    pub ca_bundle: PathBuf,
    pub token_file: PathBuf,
    /// Reports sent and not yet answered, at most.
    pub max_in_flight: usize,
    /// The first wait before a report answered RETRY is sent again; doubles per RETRY up to the max.
    pub retry_backoff: Duration,
    pub retry_backoff_max: Duration,
    /// The first wait before a failed stream is opened again; doubles up to the max.
    pub reconnect_backoff: Duration,
    pub reconnect_backoff_max: Duration,
}

impl DeliveryConfig {
    pub fn new(address: Uri, ca_bundle: PathBuf, token_file: PathBuf) -> Self {
        Self {
            address,
            ca_bundle,
            token_file,
            max_in_flight: 64,
            retry_backoff: Duration::from_secs(1),
            retry_backoff_max: Duration::from_secs(60),
            reconnect_backoff: Duration::from_millis(500),
            reconnect_backoff_max: Duration::from_secs(30),
        }
    }
}

/// The TLS client configuration: only the bundle's CAs are trusted; HTTP/2 is negotiated by ALPN.
pub fn tls_config(ca_bundle: &Path) -> Result<rustls::ClientConfig, Error> {
    let pem = std::fs::read(ca_bundle).map_err(|source| Error::ReadCaBundle {
        path: ca_bundle.to_path_buf(),
        source,
    })?;
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(&pem) {
        let cert = cert.map_err(|source| Error::ParseCaBundle {
            path: ca_bundle.to_path_buf(),
            source,
        })?;
        roots.add(cert).map_err(|source| Error::TrustCa {
            path: ca_bundle.to_path_buf(),
            source,
        })?;
    }
    if roots.is_empty() {
        return Err(Error::EmptyCaBundle {
            path: ca_bundle.to_path_buf(),
        });
    }
    let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .map_err(Error::Tls)?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(config)
}

/// The token as a header value, read now (kubelet rotates the projected token).
pub fn bearer(token_file: &Path) -> Result<MetadataValue<tonic::metadata::Ascii>, Error> {
    let token = std::fs::read_to_string(token_file).map_err(|source| Error::ReadToken {
        path: token_file.to_path_buf(),
        source,
    })?;
    let token = token.trim();
    if token.is_empty() {
        return Err(Error::InvalidToken {
            path: token_file.to_path_buf(),
        });
    }
    MetadataValue::try_from(format!("Bearer {token}")).map_err(|_| Error::InvalidToken {
        path: token_file.to_path_buf(),
    })
}

/// Opens a channel to the receiver over TLS, checking its certificate against `ca_bundle` and the
/// address's host name.
pub async fn connect(config: &DeliveryConfig) -> Result<TerminationReportsClient<Channel>, Error> {
    let tls = TlsConnector::from(Arc::new(tls_config(&config.ca_bundle)?));
    let address = config.address.clone();
    let server_error = || Error::ServerName {
        address: address.clone(),
    };
    let host = address.host().ok_or_else(server_error)?;
    // An IPv6 literal comes bracketed in a URL, bare in a certificate's SAN.
    let bare_host = host.trim_start_matches('[').trim_end_matches(']').to_owned();
    let server_name = ServerName::try_from(bare_host.clone()).map_err(|_| server_error())?;
    let port = address.port_u16().unwrap_or(443);
    let authority = address
        .authority()
        .map(|a| a.as_str().to_owned())
        .ok_or_else(server_error)?;
    // tonic is given a plain URI (its own TLS is not used; the connector below does TLS) and the https
    // origin the requests carry.
    let endpoint = Endpoint::from_shared(format!("http://{authority}"))
        .map_err(|source| Error::Connect {
            address: address.clone(),
            source,
        })?
        .origin(address.clone())
        .connect_timeout(Duration::from_secs(10))
        .http2_keep_alive_interval(Duration::from_secs(30))
        .keep_alive_timeout(Duration::from_secs(10))
        .keep_alive_while_idle(true);
    let connector = service_fn(move |_: Uri| {
        let tls = tls.clone();
        let server_name = server_name.clone();
        let host = bare_host.clone();
        async move {
            let tcp = TcpStream::connect((host.as_str(), port)).await?;
            tcp.set_nodelay(true)?;
            let stream = tls.connect(server_name, tcp).await?;
            Ok::<_, io::Error>(TokioIo::new(stream))
        }
    });
    let channel = endpoint
        .connect_with_connector(connector)
        .await
        .map_err(|source| Error::Connect { address, source })?;
    Ok(TerminationReportsClient::new(channel))
}

/// Delivers the spool's reports until `shutdown` fires.
pub async fn deliver(config: DeliveryConfig, spool: SharedSpool, metrics: Arc<AgentMetrics>, shutdown: Shutdown) {
    let mut delivery = Delivery {
        config,
        spool,
        metrics,
        in_flight: HashSet::new(),
        retry_at: HashMap::new(),
        retries: HashMap::new(),
    };
    let mut backoff = delivery.config.reconnect_backoff;
    let mut failures = 0u32;
    loop {
        let result = tokio::select! {
            result = delivery.session(&shutdown, &mut failures) => result,
            () = shutdown.fired() => Ok(()),
        };
        delivery.metrics.stream_connected.set(0);
        match result {
            Ok(()) => return,
            Err(error) => {
                if failures == 0 {
                    // The stream was up: start the backoff over.
                    backoff = delivery.config.reconnect_backoff;
                }
                failures += 1;
                tracing::warn!(
                    address = %delivery.config.address,
                    error = %ErrorChain(&error),
                    attempt = failures,
                    retry_in = ?backoff,
                    "reports cannot be delivered now; reconnecting"
                );
            }
        }
        tokio::select! {
            () = tokio::time::sleep(backoff) => {}
            () = shutdown.fired() => return,
        }
        backoff = (backoff * 2).min(delivery.config.reconnect_backoff_max);
    }
}

struct Delivery {
    config: DeliveryConfig,
    spool: SharedSpool,
    metrics: Arc<AgentMetrics>,
    /// Sent on this stream, not answered yet.
    in_flight: HashSet<u64>,
    /// Answered RETRY: not before then.
    retry_at: HashMap<u64, Instant>,
    /// RETRY answers per record, for its backoff.
    retries: HashMap<u64, u32>,
}

impl Delivery {
    /// One stream, until it fails (Err) or shutdown (Ok, from the caller's select).
    async fn session(&mut self, shutdown: &Shutdown, failures: &mut u32) -> Result<(), Error> {
        let mut client = connect(&self.config).await?;
        let (tx, rx) = mpsc::channel::<ReportRequest>(self.config.max_in_flight.max(1));
        let mut request = Request::new(ReceiverStream::new(rx));
        request
            .metadata_mut()
            .insert("authorization", bearer(&self.config.token_file)?);
        let mut acks = client.report(request).await.map_err(Error::Open)?.into_inner();
        self.metrics.stream_connected.set(1);
        if *failures > 0 {
            tracing::info!(address = %self.config.address, "the report stream is open again");
        }
        *failures = 0;
        // Everything pending goes again on a new stream, at once.
        self.in_flight.clear();
        self.retry_at.clear();
        let spool = self.spool.clone();
        loop {
            self.send_pending(&tx).await?;
            let next_retry = self.retry_at.values().min().copied();
            tokio::select! {
                ack = acks.message() => match ack {
                    Ok(Some(ack)) => {
                        // The answers already here go to the spool together (one ack file write): the
                        // receiver answers the reports of one status write at once.
                        let mut answers = vec![ack];
                        let mut ended = None;
                        while ended.is_none() && answers.len() < self.config.max_in_flight {
                            match acks.message().now_or_never() {
                                Some(Ok(Some(ack))) => answers.push(ack),
                                Some(Ok(None)) => ended = Some(Error::StreamEnded),
                                Some(Err(status)) => ended = Some(Error::Stream(status)),
                                None => break,
                            }
                        }
                        self.answered(answers).await;
                        if let Some(error) = ended {
                            return Err(error);
                        }
                    }
                    Ok(None) => return Err(Error::StreamEnded),
                    Err(status) => return Err(Error::Stream(status)),
                },
                () = spool.appended() => {}
                () = sleep_until_opt(next_retry) => {}
                () = shutdown.fired() => return Ok(()),
            }
        }
    }

    /// Sends the pending records that are neither in flight nor waiting out a RETRY, oldest first, up
    /// to the in-flight bound.
    async fn send_pending(&mut self, tx: &mpsc::Sender<ReportRequest>) -> Result<(), Error> {
        if self.in_flight.len() >= self.config.max_in_flight {
            return Ok(());
        }
        let pending: BTreeSet<u64> = self.spool.pending().await.map_err(Error::Spool)?.into_iter().collect();
        // Records dropped by the spool's bounds are forgotten here too.
        self.retries.retain(|seq, _| pending.contains(seq));
        self.retry_at.retain(|seq, _| pending.contains(seq));
        let now = Instant::now();
        for seq in pending {
            if self.in_flight.len() >= self.config.max_in_flight {
                break;
            }
            if self.in_flight.contains(&seq) || self.retry_at.get(&seq).is_some_and(|at| *at > now) {
                continue;
            }
            self.retry_at.remove(&seq);
            let Some(payload) = self.spool.read(seq).await.map_err(Error::Spool)? else {
                continue;
            };
            let report = match TerminationReport::decode(payload.as_slice()) {
                Ok(report) => report,
                Err(error) => {
                    // Intact on disk (its checksum held) yet not a report: nothing can ever record it.
                    tracing::error!(seq, %error, "a spooled record is not a TerminationReport; dropping it");
                    self.metrics.spool_corrupt_records.inc();
                    self.ack_in_spool(seq).await;
                    continue;
                }
            };
            if tx
                .send(ReportRequest {
                    sequence: seq,
                    report: Some(report),
                })
                .await
                .is_err()
            {
                return Err(Error::StreamEnded);
            }
            self.in_flight.insert(seq);
            self.metrics.reports_sent.inc();
        }
        Ok(())
    }

    /// Takes the receiver's answers; the records answered OK or DISCARD leave the spool together.
    async fn answered(&mut self, answers: Vec<ReportAck>) {
        let done: Vec<u64> = answers.into_iter().filter_map(|ack| self.answer(ack)).collect();
        if done.is_empty() {
            return;
        }
        if let Err(error) = self.spool.ack_all(done).await {
            // In memory they are acknowledged; after a restart they may be sent once more, which is harmless.
            tracing::warn!(error = %ErrorChain(&error), "cannot record acknowledgements in the spool");
        }
    }

    /// One answer: the sequence to remove from the spool (OK, DISCARD), or None (RETRY, scheduled).
    fn answer(&mut self, ack: ReportAck) -> Option<u64> {
        let seq = ack.sequence;
        let was_in_flight = self.in_flight.remove(&seq);
        match Verdict::try_from(ack.verdict) {
            Ok(Verdict::Ok) => {
                self.metrics.acks_ok.inc();
                tracing::debug!(seq, "report recorded");
                self.retries.remove(&seq);
                Some(seq)
            }
            Ok(Verdict::Discard) => {
                self.metrics.acks_discard.inc();
                tracing::warn!(seq, reason = %ack.reason, "the operator discarded a report; it will not be sent again");
                self.retries.remove(&seq);
                Some(seq)
            }
            verdict => {
                self.metrics.acks_retry.inc();
                if verdict != Ok(Verdict::Retry) {
                    // Never lose a report to a receiver's bug: an answer we do not know is a RETRY.
                    tracing::warn!(
                        seq,
                        verdict = ack.verdict,
                        "unknown verdict from the operator; sending the report again later"
                    );
                }
                if !was_in_flight {
                    return None;
                }
                let attempts = self.retries.entry(seq).or_insert(0);
                *attempts += 1;
                let wait = self
                    .config
                    .retry_backoff
                    .saturating_mul(1u32 << (*attempts - 1).min(16))
                    .min(self.config.retry_backoff_max);
                tracing::info!(seq, reason = %ack.reason, attempt = *attempts, retry_in = ?wait, "the operator asked to send a report again later");
                self.retry_at.insert(seq, Instant::now() + wait);
                None
            }
        }
    }

    async fn ack_in_spool(&self, seq: u64) {
        if let Err(error) = self.spool.ack(seq).await {
            // In memory it is acknowledged; after a restart it may be sent once more, which is harmless.
            tracing::warn!(seq, error = %ErrorChain(&error), "cannot record an acknowledgement in the spool");
        }
    }
}

async fn sleep_until_opt(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
