//! Running the simulated API server in-process: [`Sim::start`], [`Sim::client`],
//! [`Sim::kubeconfig_path`], [`Sim::shutdown`].

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;

use crate::faults::Faults;
use crate::kubeconfig::{self, KubeconfigContents};
use crate::registry::Gvr;
use crate::server::{self, AppState, ServeError, ServerHandle};
use crate::store::{Store, StoreConfig, WriteOptions};
use crate::tls::{Pki, TlsError};

/// How to start a sim.
#[derive(Debug, Clone)]
pub struct SimConfig {
    /// Where the sim keeps its files (the CA certificate, later node directories).
    pub data_dir: PathBuf,
    /// Where to write the kubeconfig; `<data_dir>/kubeconfig` when None.
    pub kubeconfig_path: Option<PathBuf>,
    /// The port on 127.0.0.1; 0 picks a free one.
    pub port: u16,
    pub store: StoreConfig,
    /// How often watches that allow bookmarks get one.
    pub bookmark_interval: Duration,
    /// Run the ownerReference garbage collector (see [`crate::gc`]).
    pub garbage_collector: bool,
    /// Call admission webhooks (see [`crate::admission::webhooks`]).
    pub admission_webhooks: bool,
    /// NamespaceLifecycle and ServiceAccount admission with their controllers (see
    /// [`crate::admission::builtin`]).
    pub builtin_admission: bool,
    /// Pod Security admission (see [`crate::admission::pod_security`]); on by default, as in
    /// kube-apiserver.
    pub pod_security_admission: bool,
    /// `OwnerReferencesPermissionEnforcement` (see [`crate::admission::owner_references`]); off by default,
    /// as in kube-apiserver (OpenShift turns it on).
    pub owner_references_permission_enforcement: bool,
    /// Publish the `kube-root-ca.crt` ConfigMap in every namespace, as real clusters do. Off by
    /// default: tests that count the objects of a namespace do not expect it yet.
    pub root_ca_configmap: bool,
    /// Deployment, ReplicaSet, DaemonSet, Job, TTL-after-finished and EndpointSlice controllers
    /// (see [`crate::controllers`]).
    pub workload_controllers: bool,
    /// Nodes, scheduler, kubelets and pod GC (see [`crate::node`]); none by default.
    pub nodes: crate::node::NodesConfig,
    /// Address ranges and cluster domain (see [`crate::network`]); by default a `127.B.0.0/16`
    /// block of its own.
    pub network: crate::network::NetworkConfig,
    /// How requests are authorized (kube-apiserver's `--authorization-mode`): RBAC by default,
    /// with the bootstrap policy; `system:masters` (the kubeconfig's users) is always allowed.
    pub authorization: crate::auth::AuthorizationMode,
}

impl SimConfig {
    pub fn new(data_dir: impl Into<PathBuf>) -> Self {
        Self {
            data_dir: data_dir.into(),
            kubeconfig_path: None,
            port: 0,
            store: StoreConfig::default(),
            bookmark_interval: Duration::from_secs(60),
            garbage_collector: true,
            admission_webhooks: true,
            builtin_admission: true,
            pod_security_admission: true,
            owner_references_permission_enforcement: false,
            root_ca_configmap: false,
            workload_controllers: true,
            nodes: crate::node::NodesConfig::default(),
            network: crate::network::NetworkConfig::default(),
            authorization: crate::auth::AuthorizationMode::default(),
        }
    }
}

/// Why the sim could not start or hand out a client.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    #[error("creating the data directory {path}")]
    DataDir { path: String, source: std::io::Error },
    #[error(transparent)]
    Tls(#[from] TlsError),
    #[error(transparent)]
    Serve(#[from] ServeError),
    #[error(transparent)]
    Kubeconfig(#[from] kubeconfig::KubeconfigError),
    #[error("creating the initial {what}")]
    Bootstrap {
        what: String,
        source: crate::status::ApiError,
    },
    #[error("reading the kubeconfig for a client: {0}")]
    ClientConfig(String),
    #[error("building a kube client")]
    Client(#[from] kube::Error),
    #[error(transparent)]
    Nodes(#[from] crate::node::NodeError),
    #[error(transparent)]
    Network(#[from] crate::network::NetworkError),
}

/// A running simulated cluster.
pub struct Sim {
    store: Store,
    faults: Arc<Faults>,
    audit: Arc<crate::audit::AuditLog>,
    server: ServerHandle,
    kubeconfig_path: PathBuf,
    pki: Pki,
    token: String,
    service_account_tokens: Arc<crate::service_account_tokens::TokenSigner>,
    /// The in-process control plane (GC, namespace and service-account controllers); dropped
    /// with the sim, which stops them.
    _controllers: Vec<crate::gc::BackgroundTask>,
    nodes: crate::node::NodeCluster,
    network: crate::network::Network,
}

impl Sim {
    /// Starts the API server; the kubeconfig is written once it accepts connections.
    pub async fn start(config: SimConfig) -> Result<Sim, SimError> {
        std::fs::create_dir_all(&config.data_dir).map_err(|source| SimError::DataDir {
            path: config.data_dir.display().to_string(),
            source,
        })?;
        // The addresses first: the API server's certificate names the `kubernetes` Service's IP.
        let claimed = crate::network::claim(&config.network).await?;
        let addresses = claimed.addresses.clone();
        let pki = Pki::generate_with_ips(&[addresses.kubernetes_service_ip().into()])?;
        let ca_path = config.data_dir.join("ca.crt");
        std::fs::write(&ca_path, &pki.ca_cert_pem).map_err(|source| SimError::DataDir {
            path: ca_path.display().to_string(),
            source,
        })?;
        let mut store_config = config.store.clone();
        store_config.service_cluster_ip_range = addresses.service_range;
        let store = Store::new(store_config);
        let admission = crate::admission::AdmissionConfig {
            builtin: config.builtin_admission,
            pod_security: config.pod_security_admission,
            webhooks: config.admission_webhooks,
            owner_references_permission_enforcement: config.owner_references_permission_enforcement,
            root_ca_pem: config.root_ca_configmap.then(|| pki.ca_cert_pem.clone()),
        };
        let mut controllers = crate::admission::install(&store, &admission);
        if config.garbage_collector {
            controllers.push(crate::gc::spawn(&store));
        }
        if config.workload_controllers {
            controllers.extend(crate::controllers::spawn(&store));
        }
        // Bound before the bootstrap objects: the `kubernetes` Service and Endpoints name its port.
        let listener = server::bind(config.port).await?;
        let addr = listener.local_addr().map_err(ServeError::LocalAddr)?;
        bootstrap(&store).await?;
        crate::auth::bootstrap::create(&store)
            .await
            .map_err(|source| SimError::Bootstrap {
                what: "RBAC bootstrap policy".into(),
                source,
            })?;
        crate::auth::aggregation::aggregate_all(&store).await;
        controllers.push(crate::auth::aggregation::spawn(&store));
        store.add_admission_plugin(Arc::new(crate::auth::escalation::EscalationCheck::new(store.clone())));
        store.set_authorization_mode(Some(config.authorization));
        let service_account_tokens = Arc::new(crate::service_account_tokens::TokenSigner::new());
        crate::network::publish_system_services(&store, &addresses, addr).await?;
        let network = crate::network::Network::start(&store, claimed).await;
        let nodes = crate::node::NodeCluster::start(
            store.clone(),
            config.data_dir.clone(),
            config.nodes.clone(),
            service_account_tokens.clone(),
            crate::node::NodeNetwork {
                addresses: addresses.clone(),
                pki: pki.clone(),
                stopped: network.stopped(),
            },
        )
        .await?;
        let faults = Arc::new(Faults::default());
        let audit = Arc::new(crate::audit::AuditLog::default());
        let token = uuid::Uuid::new_v4().simple().to_string();
        let state = Arc::new(AppState {
            store: store.clone(),
            faults: faults.clone(),
            audit: audit.clone(),
            token: token.clone(),
            service_account_tokens: service_account_tokens.clone(),
            server_address: addr.to_string(),
            bookmark_interval: config.bookmark_interval,
            data_dir: config.data_dir.clone(),
        });
        let server = server::spawn(listener, pki.server_config()?, state)?;
        let kubeconfig_path = config
            .kubeconfig_path
            .clone()
            .unwrap_or_else(|| config.data_dir.join("kubeconfig"));
        kubeconfig::write(
            &kubeconfig_path,
            &KubeconfigContents {
                server: &format!("https://{}", server.addr),
                ca_pem: &pki.ca_cert_pem,
                client_cert_pem: &pki.client_cert_pem,
                client_key_pem: &pki.client_key_pem,
                token: &token,
            },
        )?;
        tracing::info!(addr = %server.addr, kubeconfig = %kubeconfig_path.display(), "kube-sim is serving");
        Ok(Sim {
            store,
            faults,
            audit,
            server,
            kubeconfig_path,
            pki,
            token,
            service_account_tokens,
            _controllers: controllers,
            nodes,
            network,
        })
    }

    /// The object store behind the API (for in-process controllers and tests).
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// The nodes: stop/start them, find their CRI sockets and log directories.
    pub fn nodes(&self) -> &crate::node::NodeCluster {
        &self.nodes
    }

    /// The loopback network: address ranges, the `kubernetes` Service's IP, the DNS server's
    /// address and the cluster domain.
    pub fn network(&self) -> &crate::network::Network {
        &self.network
    }

    /// The audit log of API requests (off until enabled).
    pub fn audit(&self) -> &crate::audit::AuditLog {
        &self.audit
    }

    /// Fault injection for requests over HTTP.
    pub fn faults(&self) -> &Faults {
        &self.faults
    }

    /// Ends every open watch now (HTTP and in-process).
    pub fn cut_all_watches(&self) {
        self.store.cut_all_watches();
    }

    pub fn kubeconfig_path(&self) -> &Path {
        &self.kubeconfig_path
    }

    /// `https://127.0.0.1:<port>`
    pub fn url(&self) -> String {
        format!("https://{}", self.server.addr)
    }

    pub fn addr(&self) -> std::net::SocketAddr {
        self.server.addr
    }

    /// The cluster's CA and certificates.
    pub fn pki(&self) -> &Pki {
        &self.pki
    }

    /// The bearer token the kubeconfig's `kube-sim-token` user carries.
    pub fn token(&self) -> &str {
        &self.token
    }

    /// The signer of the ServiceAccount tokens kubelets put in pods and the API server accepts
    /// (mint one for a pod to act as its ServiceAccount).
    pub fn service_account_tokens(&self) -> &crate::service_account_tokens::TokenSigner {
        &self.service_account_tokens
    }

    /// A kube-rs client for the default (client certificate) context.
    pub async fn client(&self) -> Result<kube::Client, SimError> {
        self.client_for_context(kubeconfig::CONTEXT).await
    }

    /// A kube-rs client for a context of the kubeconfig (`kube-sim` or `kube-sim-token`).
    pub async fn client_for_context(&self, context: &str) -> Result<kube::Client, SimError> {
        let kc = kube::config::Kubeconfig::read_from(&self.kubeconfig_path)
            .map_err(|e| SimError::ClientConfig(e.to_string()))?;
        let opts = kube::config::KubeConfigOptions {
            context: Some(context.to_string()),
            ..Default::default()
        };
        let config = kube::Config::from_custom_kubeconfig(kc, &opts)
            .await
            .map_err(|e| SimError::ClientConfig(e.to_string()))?;
        Ok(kube::Client::try_from(config)?)
    }

    /// Stops serving: open watches end, connections close, the port is released.
    pub async fn shutdown(mut self) {
        self.nodes.shutdown().await;
        self.network.shutdown().await;
        self.store.cut_all_watches();
        self.server.shutdown().await;
    }
}

/// What every cluster has from the start: the system namespaces (the `kubernetes` and
/// `kube-dns` Services come with the network).
async fn bootstrap(store: &Store) -> Result<(), SimError> {
    let opts = WriteOptions {
        field_manager: Some("kube-apiserver".into()),
        ..Default::default()
    };
    let ns = Gvr::new("", "v1", "namespaces");
    for name in ["default", "kube-system", "kube-public", "kube-node-lease"] {
        store
            .create(
                &ns,
                "",
                json!({ "apiVersion": "v1", "kind": "Namespace", "metadata": { "name": name } }),
                &opts,
            )
            .await
            .map_err(|source| SimError::Bootstrap {
                what: format!("namespace {name}"),
                source,
            })?;
    }
    Ok(())
}
