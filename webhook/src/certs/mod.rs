//! The webhook's TLS certificates: one CA shared by every replica through one Secret, a serving
//! certificate per replica signed in memory, hot-swapped under the running server, and the webhook
//! configurations' `caBundle` kept as the union of the CAs still trusted. Or, as an option,
//! certificates supplied from outside (cert-manager) read from files.
//!
//! - [`authority`]: the CA Secret's contents and the decision of what to write next (pure), including
//!   the two-phase rotation.
//! - [`leaf`]: this replica's serving certificate.
//! - [`resolver`]: the rustls certificate resolver and the server configuration built on it.
//! - [`bundle`]: `caBundle` by server-side apply, read back.
//! - [`driver`]: the tasks: the Secret watch, the serving certificate, the authority loop.
//! - [`external`]: certificate and key files, polled.
//! - [`metrics`]: what is counted.
//!
//! [`CertManager::start`] runs it all; the HTTP server takes [`CertManager::acceptor`] and waits for
//! [`CertManager::loaded`] before it reports ready.

pub mod authority;
pub mod bundle;
pub mod driver;
pub mod external;
pub mod leaf;
pub mod metrics;
pub mod pem;
pub mod resolver;

use std::sync::Arc;

use rustls::ServerConfig;
use spark_operator_runtime::Runtime;
use spark_operator_runtime::task::AbortOnDrop;
use tokio::sync::watch;
use tokio_rustls::TlsAcceptor;

pub use authority::Timing;
pub use bundle::{CaConfigMap, ConfigurationRef, Kind};
pub use leaf::Subject;
pub use metrics::CertMetrics;
pub use resolver::CertResolver;

/// The CA Secret's name unless configured.
pub const DEFAULT_SECRET_NAME: &str = "spark-operator-webhook-ca";

/// Certificates made and shared by the webhook itself.
#[derive(Clone, Debug)]
pub struct Managed {
    /// Where the CA Secret is (the operator's namespace) and its name.
    pub namespace: String,
    pub secret_name: String,
    /// What the serving certificate is for.
    pub subject: Subject,
    /// The configurations whose `caBundle` the webhook keeps.
    pub configurations: Vec<ConfigurationRef>,
    /// The ConfigMap that publishes the trusted CAs to the node agents, if any.
    pub ca_config_map: Option<CaConfigMap>,
    pub timing: Timing,
    /// Test only: behave as Kubeflow's webhook does (generate a CA at start, overwrite the Secret
    /// unconditionally, serve a certificate from that CA and never follow the Secret), to show the
    /// shared-CA test fails without the conditional writes.
    #[cfg(feature = "test-hooks")]
    pub naive_overwrite: bool,
}

impl Managed {
    /// The defaults: the CA Secret [`DEFAULT_SECRET_NAME`] in `namespace`, no configurations.
    pub fn new(namespace: &str, subject: Subject) -> Self {
        Self {
            namespace: namespace.to_owned(),
            secret_name: DEFAULT_SECRET_NAME.to_owned(),
            subject,
            configurations: Vec::new(),
            ca_config_map: None,
            timing: Timing::default(),
            #[cfg(feature = "test-hooks")]
            naive_overwrite: false,
        }
    }
}

/// Where the serving certificate comes from.
#[derive(Clone, Debug)]
pub enum CertConfig {
    /// The shared CA in a Secret; the webhook keeps `caBundle`.
    Managed(Managed),
    /// Files from outside (cert-manager); `caBundle` is whoever supplies them's business
    /// (cert-manager's cainjector).
    External(external::Files),
}

/// Why the certificates could not be started or rotated.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Tls(#[from] resolver::Error),
    #[error("forcing a CA rotation")]
    Rotate(#[source] Box<driver::Error>),
    #[error("a CA rotation can only be forced when the webhook manages its certificates")]
    NotManaged,
}

/// The running certificate machinery of one replica. Dropping it stops its tasks (the server keeps the
/// certificate it has).
pub struct CertManager {
    resolver: Arc<CertResolver>,
    server_config: Arc<ServerConfig>,
    loaded: watch::Receiver<bool>,
    metrics: Arc<CertMetrics>,
    managed: Option<Arc<driver::Authority>>,
    _tasks: Vec<AbortOnDrop>,
}

impl std::fmt::Debug for CertManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CertManager")
            .field("loaded", &*self.loaded.borrow())
            .finish_non_exhaustive()
    }
}

impl CertManager {
    /// Starts the certificate tasks on the current tokio runtime. The server may start accepting at
    /// once: handshakes fail until [`Self::loaded`] turns true.
    pub fn start(config: CertConfig, client: kube::Client) -> Result<Self, Error> {
        let resolver = Arc::new(CertResolver::default());
        let server_config = resolver::server_config(resolver.clone(), vec![b"http/1.1".to_vec()])?;
        let metrics = Arc::new(CertMetrics::default());
        let (loaded_tx, loaded) = watch::channel(false);
        let (managed, tasks) = match config {
            CertConfig::Managed(managed) => {
                let authority = Arc::new(driver::Authority::new(client, managed, metrics.clone()));
                let tasks = driver::spawn_managed(authority.clone(), resolver.clone(), loaded_tx);
                (Some(authority), tasks)
            }
            CertConfig::External(files) => (
                None,
                vec![driver::spawn_external(
                    files,
                    resolver.clone(),
                    metrics.clone(),
                    loaded_tx,
                )],
            ),
        };
        Ok(Self {
            resolver,
            server_config,
            loaded,
            metrics,
            managed,
            _tasks: tasks,
        })
    }

    /// [`Self::start`] with the runtime's client, its metrics registered with the runtime, and a
    /// `webhook-certificate` readiness check that turns ready once a certificate is loaded.
    pub fn start_in(config: CertConfig, runtime: &Runtime) -> Result<Self, Error> {
        let mut manager = Self::start(config, runtime.client())?;
        runtime.metrics().register(manager.metrics.clone());
        let check = runtime.readiness().register("webhook-certificate");
        let mut loaded = manager.loaded.clone();
        manager._tasks.push(AbortOnDrop(tokio::spawn(async move {
            if loaded.wait_for(|loaded| *loaded).await.is_ok() {
                check.set(true);
            }
        })));
        Ok(manager)
    }

    /// The acceptor for the HTTPS server (ALPN `http/1.1`).
    pub fn acceptor(&self) -> TlsAcceptor {
        TlsAcceptor::from(self.server_config.clone())
    }

    pub fn server_config(&self) -> Arc<ServerConfig> {
        self.server_config.clone()
    }

    /// The resolver, to build another server configuration on (other ALPN protocols, say).
    pub fn resolver(&self) -> Arc<CertResolver> {
        self.resolver.clone()
    }

    /// True once a serving certificate is loaded; it stays true (later certificates replace it).
    pub fn loaded(&self) -> watch::Receiver<bool> {
        self.loaded.clone()
    }

    pub fn is_loaded(&self) -> bool {
        *self.loaded.borrow()
    }

    /// Resolves once a serving certificate is loaded.
    pub async fn wait_loaded(&self) {
        let mut loaded = self.loaded.clone();
        let _ = loaded.wait_for(|loaded| *loaded).await;
    }

    pub fn metrics(&self) -> Arc<CertMetrics> {
        self.metrics.clone()
    }

    /// Starts a CA rotation now, whatever the CA's age (tests, or an operator who suspects the CA key
    /// leaked): a successor is staged, and every replica carries the rotation on from the Secret.
    /// False when a rotation is already under way.
    pub async fn rotate_now(&self) -> Result<bool, Error> {
        let authority = self.managed.as_ref().ok_or(Error::NotManaged)?;
        authority.rotate_now().await.map_err(|e| Error::Rotate(Box::new(e)))
    }
}
