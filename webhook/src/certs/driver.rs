//! The tasks behind [`super::CertManager`]:
//!
//! - a watch of the CA Secret (one object, by field selector), publishing what it last saw;
//! - the serving certificate, re-signed when the Secret's current CA changes or two thirds of its
//!   life have passed, and swapped into the resolver (no restart, no file);
//! - the authority loop: read the Secret, keep `caBundle` in step with it, and write the next step of
//!   [`authority::decide`], always conditionally. It runs on every replica: the Secret, not a leader,
//!   serialises them, and a replica that loses a write simply reads again.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt as _;
use jiff::Timestamp;
use k8s_openapi::api::admissionregistration::v1::{MutatingWebhookConfiguration, ValidatingWebhookConfiguration};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, PostParams};
use kube::runtime::WatchStreamExt as _;
use kube::runtime::watcher::{self, Event};
use spark_operator_runtime::error_chain::ErrorChain;
use spark_operator_runtime::task::AbortOnDrop;
use tokio::sync::{Notify, watch};

use super::authority::{self, CaState, Contents, Step};
use super::leaf::{self, Leaf};
use super::metrics::CertMetrics;
use super::resolver::CertResolver;
use super::{Managed, bundle, external, pem};

/// Why one round of the authority failed (it is retried with backoff).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("reading the CA Secret {namespace}/{name}")]
    ReadSecret {
        namespace: String,
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("creating the CA Secret {namespace}/{name}")]
    CreateSecret {
        namespace: String,
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("writing step {step} to the CA Secret {namespace}/{name}")]
    UpdateSecret {
        step: &'static str,
        namespace: String,
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("making a CA")]
    Ca(#[source] authority::Error),
    #[error("keeping caBundle")]
    Bundle(#[source] bundle::Error),
    #[error("the CA Secret {namespace}/{name} has no usable CA to rotate from yet")]
    NothingToRotate { namespace: String, name: String },
    #[error("another replica kept writing the CA Secret; gave up after {attempts} attempts")]
    Contended { attempts: u32 },
}

/// What a round leads to.
enum Round {
    /// Something was written (or lost to another replica): look again at once.
    Again,
    /// Nothing to do before this instant.
    Until(Timestamp),
}

fn step_name(step: &Step) -> &'static str {
    match step {
        Step::Create => "create",
        Step::Replace => "replace-unusable-ca",
        Step::Stage => "stage-next-ca",
        Step::DropNext => "drop-unusable-next-ca",
        Step::Switch => "switch-to-next-ca",
        Step::Prune => "prune-bundle",
        Step::Wait { .. } => "wait",
    }
}

fn is_conflict(error: &kube::Error) -> bool {
    // 409 is both AlreadyExists (create) and Conflict (stale resourceVersion): another replica wrote.
    matches!(error, kube::Error::Api(status) if status.code == 409)
}

/// How long from now until `at` (zero if past).
fn until(at: Timestamp) -> Duration {
    let left = at.as_millisecond() - Timestamp::now().as_millisecond();
    Duration::from_millis(u64::try_from(left).unwrap_or(0))
}

/// One replica's side of the shared CA.
pub struct Authority {
    client: kube::Client,
    secrets: Api<Secret>,
    config: Managed,
    metrics: Arc<CertMetrics>,
    wake: Notify,
}

impl Authority {
    pub(crate) fn new(client: kube::Client, config: Managed, metrics: Arc<CertMetrics>) -> Self {
        Self {
            secrets: Api::namespaced(client.clone(), &config.namespace),
            client,
            config,
            metrics,
            wake: Notify::new(),
        }
    }

    fn read_failed(&self, source: kube::Error) -> Error {
        Error::ReadSecret {
            namespace: self.config.namespace.clone(),
            name: self.config.secret_name.clone(),
            source,
        }
    }

    /// Writes `contents` over `secret` (None: creates it), conditionally. Ok(false) when another replica
    /// wrote first.
    async fn write(&self, step: &Step, secret: Option<Secret>, contents: &Contents) -> Result<bool, Error> {
        let (namespace, name) = (&self.config.namespace, &self.config.secret_name);
        let result = match secret {
            None => {
                let mut fresh = Secret {
                    metadata: ObjectMeta {
                        name: Some(name.clone()),
                        namespace: Some(namespace.clone()),
                        ..ObjectMeta::default()
                    },
                    ..Secret::default()
                };
                contents.write_into(&mut fresh);
                self.secrets
                    .create(&PostParams::default(), &fresh)
                    .await
                    .map_err(|source| Error::CreateSecret {
                        namespace: namespace.clone(),
                        name: name.clone(),
                        source,
                    })
            }
            Some(mut secret) => {
                // The resourceVersion read stays in the object: the update is refused (409) if anyone
                // wrote since.
                secret.metadata.managed_fields = None;
                contents.write_into(&mut secret);
                self.secrets
                    .replace(name, &PostParams::default(), &secret)
                    .await
                    .map_err(|source| Error::UpdateSecret {
                        step: step_name(step),
                        namespace: namespace.clone(),
                        name: name.clone(),
                        source,
                    })
            }
        };
        match result {
            Ok(_) => Ok(true),
            Err(Error::CreateSecret { source, .. } | Error::UpdateSecret { source, .. }) if is_conflict(&source) => {
                self.metrics.secret_conflicts.inc();
                tracing::debug!(
                    step = step_name(step),
                    "another replica wrote the CA Secret first; reading it again"
                );
                Ok(false)
            }
            Err(error) => Err(error),
        }
    }

    /// Reads the Secret, brings `caBundle` in step with it and writes the next step.
    async fn round(&self) -> Result<Round, Error> {
        let secret = self
            .secrets
            .get_opt(&self.config.secret_name)
            .await
            .map_err(|e| self.read_failed(e))?;
        let now = Timestamp::now();
        let state = secret.as_ref().map(CaState::read);
        let mut confirmed = false;
        let mut bundle_error = None;
        if let Some(state) = &state
            && state.current.is_ok()
        {
            let trusted = state.trusted(now);
            match bundle::sync(&self.client, &self.config.configurations, &trusted).await {
                Ok(synced) => {
                    self.metrics.bundle_applies.add(synced.applied);
                    confirmed = synced.confirmed;
                }
                Err(error) => bundle_error = Some(error),
            }
            if let Some(target) = &self.config.ca_config_map {
                match bundle::sync_config_map(&self.client, target, &trusted).await {
                    Ok(synced) => {
                        self.metrics.bundle_applies.add(synced.applied);
                        confirmed &= synced.confirmed;
                    }
                    Err(error) => bundle_error = Some(error),
                }
            }
        }
        let step = authority::decide(state.as_ref(), now, &self.config.timing, confirmed);
        let contents = authority::contents_after(&step, state.as_ref(), now, &self.config.timing).map_err(Error::Ca)?;
        let Some((contents, generated)) = contents else {
            if let Some(error) = bundle_error {
                return Err(Error::Bundle(error));
            }
            let Step::Wait { until } = step else {
                return Ok(Round::Again);
            };
            return Ok(Round::Until(until));
        };
        if self.write(&step, secret, &contents).await? {
            if generated {
                self.metrics.ca_generated.inc();
            }
            tracing::info!(
                step = step_name(&step),
                current = contents.current.as_ref().map(|c| c.facts.serial.as_str()),
                next = contents.next.as_ref().map(|c| c.facts.serial.as_str()),
                trusted = contents.bundle.len(),
                "wrote the CA Secret"
            );
        }
        Ok(Round::Again)
    }

    async fn run(self: Arc<Self>, mut observed: watch::Receiver<Option<Option<Secret>>>) {
        let mut backoff = Duration::from_millis(250);
        loop {
            let wait = match self.round().await {
                Ok(Round::Again) => {
                    backoff = Duration::from_millis(250);
                    continue;
                }
                Ok(Round::Until(at)) => {
                    backoff = Duration::from_millis(250);
                    until(at).min(self.config.timing.check_every)
                }
                Err(error) => {
                    tracing::warn!(error = %ErrorChain(&error), retry_in = ?backoff, "the webhook CA could not be kept");
                    let wait = backoff;
                    backoff = (backoff * 2).min(Duration::from_secs(30));
                    wait
                }
            };
            tokio::select! {
                changed = observed.changed() => if changed.is_err() { return },
                _ = tokio::time::sleep(wait) => {}
                _ = self.wake.notified() => {}
            }
        }
    }

    /// Stages a successor CA now (see [`super::CertManager::rotate_now`]).
    pub async fn rotate_now(&self) -> Result<bool, Error> {
        const ATTEMPTS: u32 = 20;
        for _ in 0..ATTEMPTS {
            let secret = self
                .secrets
                .get_opt(&self.config.secret_name)
                .await
                .map_err(|e| self.read_failed(e))?;
            let now = Timestamp::now();
            let state = secret.as_ref().map(CaState::read);
            match &state {
                Some(state) if state.current.is_ok() => {
                    if state.next.is_some() {
                        return Ok(false);
                    }
                }
                _ => {
                    return Err(Error::NothingToRotate {
                        namespace: self.config.namespace.clone(),
                        name: self.config.secret_name.clone(),
                    });
                }
            }
            let Some((contents, _)) =
                authority::contents_after(&Step::Stage, state.as_ref(), now, &self.config.timing).map_err(Error::Ca)?
            else {
                continue;
            };
            if self.write(&Step::Stage, secret, &contents).await? {
                self.metrics.ca_generated.inc();
                tracing::info!(
                    next = contents.next.as_ref().map(|c| c.facts.serial.as_str()),
                    "CA rotation forced"
                );
                self.wake.notify_waiters();
                return Ok(true);
            }
        }
        Err(Error::Contended { attempts: ATTEMPTS })
    }

    /// Kubeflow's way, for the test that shows it fails: a CA of its own, written over whatever is
    /// there, its own certificate served, the Secret never read again.
    #[cfg(feature = "test-hooks")]
    async fn run_naive(self: Arc<Self>, resolver: Arc<CertResolver>, loaded: watch::Sender<bool>) {
        loop {
            match self.naive_once(&resolver).await {
                Ok(()) => {
                    loaded.send_replace(true);
                    self.metrics.set_loaded();
                    return;
                }
                Err(error) => tracing::warn!(error = %ErrorChain(&error), "naive CA setup failed"),
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    #[cfg(feature = "test-hooks")]
    async fn naive_once(&self, resolver: &CertResolver) -> Result<(), Error> {
        let now = Timestamp::now();
        let ca = authority::Ca::generate(now, self.config.timing.ca_lifetime).map_err(Error::Ca)?;
        let contents = Contents {
            bundle: vec![ca.cert.clone()],
            current: Some(ca.clone()),
            ..Contents::default()
        };
        let existing = self
            .secrets
            .get_opt(&self.config.secret_name)
            .await
            .map_err(|e| self.read_failed(e))?;
        let created = existing.is_none() && self.write(&Step::Create, None, &contents).await?;
        if !created {
            // Overwrite: no resourceVersion, so the update is unconditional.
            let mut secret = self
                .secrets
                .get(&self.config.secret_name)
                .await
                .map_err(|e| self.read_failed(e))?;
            secret.metadata.resource_version = None;
            self.write(&Step::Replace, Some(secret), &contents).await?;
        }
        self.metrics.ca_generated.inc();
        if let Ok(leaf) = leaf::sign(&ca, &self.config.subject, now, self.config.timing.leaf_lifetime) {
            resolver.set(leaf.key);
        }
        bundle::sync(
            &self.client,
            &self.config.configurations,
            std::slice::from_ref(&ca.cert),
        )
        .await
        .map_err(Error::Bundle)?;
        Ok(())
    }
}

/// Publishes the CA Secret as the watch last saw it: None until the first list, then Some(None) while
/// it does not exist.
async fn watch_secret(secrets: Api<Secret>, name: String, observed: watch::Sender<Option<Option<Secret>>>) {
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let mut events = std::pin::pin!(watcher::watcher(secrets, config).default_backoff());
    let mut listing: Option<Option<Secret>> = None;
    while let Some(event) = events.next().await {
        match event {
            Ok(Event::Init) => listing = Some(None),
            Ok(Event::InitApply(secret)) => listing = Some(Some(secret)),
            Ok(Event::InitDone) => {
                observed.send_replace(Some(listing.take().flatten()));
            }
            Ok(Event::Apply(secret)) => {
                observed.send_replace(Some(Some(secret)));
            }
            Ok(Event::Delete(_)) => {
                observed.send_replace(Some(None));
            }
            Err(error) => tracing::warn!(error = %ErrorChain(&error), "watching the webhook CA Secret"),
        }
    }
}

/// Wakes the authority whenever one of the configurations it keeps appears or changes, so a configuration
/// created after the operator started (an install that applies the chart's configurations last, a
/// reinstall) gets its `caBundle` at once instead of at the next periodic check: until then the API
/// server cannot call the webhook, and fails every admission closed. Our own apply comes back as an event
/// too; its round finds nothing to change. Without `list`/`watch` on the configurations (an older chart's
/// RBAC) the watch only logs, and the periodic check remains.
async fn watch_configuration<K>(configurations: Api<K>, name: String, authority: Arc<Authority>)
where
    K: kube::Resource + Clone + std::fmt::Debug + k8s_openapi::serde::de::DeserializeOwned + Send + Sync + 'static,
{
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let mut events = std::pin::pin!(watcher::watcher(configurations, config).default_backoff());
    while let Some(event) = events.next().await {
        match event {
            Ok(Event::Apply(_) | Event::InitApply(_)) => authority.wake.notify_one(),
            Ok(_) => {}
            Err(error) => {
                tracing::debug!(configuration = name, error = %ErrorChain(&error), "watching a webhook configuration")
            }
        }
    }
}

/// Keeps the resolver serving a certificate from the Secret's current CA.
async fn serve_leaf(
    authority: Arc<Authority>,
    mut observed: watch::Receiver<Option<Option<Secret>>>,
    resolver: Arc<CertResolver>,
    loaded: watch::Sender<bool>,
) {
    let config = &authority.config;
    let metrics = &authority.metrics;
    let mut leaf: Option<Leaf> = None;
    loop {
        let seen = observed.borrow_and_update().clone();
        let now = Timestamp::now();
        let mut wake = pem::shift(now, pem::millis(config.timing.check_every));
        if let Some(Some(secret)) = seen {
            match CaState::read(&secret).current {
                Ok(ca) if ca.facts.not_after > now => {
                    let due = leaf.as_ref().is_none_or(|l| l.issuer != ca.cert || now >= l.renew_at);
                    if due {
                        match leaf::sign(&ca, &config.subject, now, config.timing.leaf_lifetime) {
                            Ok(new) => {
                                if let Some(old) = &leaf {
                                    metrics.leaf_renewals.inc();
                                    if old.issuer != new.issuer {
                                        metrics.ca_rotations.inc();
                                    }
                                }
                                resolver.set(new.key.clone());
                                metrics.ca_expiry.set(ca.facts.not_after.as_second());
                                metrics.leaf_expiry.set(new.not_after.as_second());
                                metrics.set_loaded();
                                loaded.send_replace(true);
                                tracing::info!(ca = %ca.facts.serial, not_after = %new.not_after, "serving a new certificate");
                                leaf = Some(new);
                            }
                            Err(error) => {
                                tracing::warn!(error = %ErrorChain(&error), "signing the serving certificate");
                                wake = wake.min(pem::shift(now, 1000));
                            }
                        }
                    }
                }
                Ok(_) => tracing::debug!("the CA in the Secret expired; waiting for its replacement"),
                Err(error) => tracing::debug!(error = %ErrorChain(&error), "no usable CA in the Secret yet"),
            }
        }
        if let Some(leaf) = &leaf {
            wake = wake.min(leaf.renew_at);
        }
        tokio::select! {
            changed = observed.changed() => if changed.is_err() { return },
            _ = tokio::time::sleep(until(wake)) => {}
        }
    }
}

pub(crate) fn spawn_managed(
    authority: Arc<Authority>,
    resolver: Arc<CertResolver>,
    loaded: watch::Sender<bool>,
) -> Vec<AbortOnDrop> {
    #[cfg(feature = "test-hooks")]
    if authority.config.naive_overwrite {
        return vec![AbortOnDrop(tokio::spawn(authority.run_naive(resolver, loaded)))];
    }
    let (observed_tx, observed) = watch::channel(None);
    let mut tasks = vec![
        AbortOnDrop(tokio::spawn(watch_secret(
            authority.secrets.clone(),
            authority.config.secret_name.clone(),
            observed_tx,
        ))),
        AbortOnDrop(tokio::spawn(serve_leaf(
            authority.clone(),
            observed.clone(),
            resolver,
            loaded,
        ))),
    ];
    for target in &authority.config.configurations {
        let client = authority.client.clone();
        let name = target.name.clone();
        tasks.push(AbortOnDrop(match target.kind {
            bundle::Kind::Mutating => tokio::spawn(watch_configuration::<MutatingWebhookConfiguration>(
                Api::all(client),
                name,
                authority.clone(),
            )),
            bundle::Kind::Validating => tokio::spawn(watch_configuration::<ValidatingWebhookConfiguration>(
                Api::all(client),
                name,
                authority.clone(),
            )),
        }));
    }
    tasks.push(AbortOnDrop(tokio::spawn(authority.run(observed))));
    tasks
}

/// Serves the files, reading them again every poll interval.
pub(crate) fn spawn_external(
    files: external::Files,
    resolver: Arc<CertResolver>,
    metrics: Arc<CertMetrics>,
    loaded: watch::Sender<bool>,
) -> AbortOnDrop {
    AbortOnDrop(tokio::spawn(async move {
        let mut last: Option<(Vec<u8>, Vec<u8>)> = None;
        loop {
            match external::snapshot(&files) {
                Ok(bytes) if last.as_ref() != Some(&bytes) => match external::load(&files, &bytes.0, &bytes.1) {
                    Ok(key) => {
                        if last.is_some() {
                            metrics.leaf_renewals.inc();
                        }
                        if let Some(facts) = key.cert.first().and_then(|c| pem::facts(c).ok()) {
                            metrics.leaf_expiry.set(facts.not_after.as_second());
                        }
                        resolver.set(Arc::new(key));
                        metrics.set_loaded();
                        loaded.send_replace(true);
                        tracing::info!(cert = %files.cert.display(), "serving the supplied certificate");
                        last = Some(bytes);
                    }
                    // Mid-update (certificate swapped, key not yet) or broken: keep serving the previous
                    // pair and look again.
                    Err(error) => {
                        tracing::warn!(error = %ErrorChain(&error), "the supplied certificate cannot be served")
                    }
                },
                Ok(_) => {}
                Err(error) => tracing::warn!(error = %ErrorChain(&error), "reading the supplied certificate"),
            }
            tokio::time::sleep(files.poll).await;
        }
    }))
}
