//! Loopback networking of a sim (issue 11): every address lives in 127.0.0.0/8, which Linux
//! routes on `lo` without setup.
//!
//! - `addresses.rs`: the per-instance address plan (Service, node and pod ranges) and how a
//!   block is claimed;
//! - `cidr.rs`: IPv4 ranges;
//! - `system_services.rs`: the `kubernetes` and `kube-dns` Services and their Endpoints;
//! - `endpoints.rs`: the endpoints controller (kube-controller-manager's);
//! - `proxy.rs`: a userspace Service proxy (kube-proxy's old userspace mode) on every
//!   `clusterIP:port`;
//! - `dns/`: the cluster DNS server (the Kubernetes DNS specification, as CoreDNS serves it).
//!
//! Cluster IP allocation is in [`crate::defaults::allocate_service_ip`]; the kubelet's HTTPS
//! server on each node's address is `node/kubelet_server.rs`.

mod addresses;
mod cidr;
pub mod dns;
pub(crate) mod endpoints;
mod proxy;
mod system_services;

use std::net::{Ipv4Addr, SocketAddr};

use tokio::sync::watch;
use tokio::task::JoinHandle;

pub use addresses::{Addresses, DNS_FALLBACK_PORT, DNS_PORT, KUBELET_PORT, NODE_CIDR_MASK_SIZE};
pub use cidr::{CidrError, Ipv4Cidr};
pub(crate) use system_services::publish as publish_system_services;

use crate::store::Store;

/// The network part of [`crate::SimConfig`]: the ranges (None = from the sim's own
/// `127.B.0.0/16` block) and the cluster domain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NetworkConfig {
    /// kube-apiserver's `--service-cluster-ip-range`; default `127.B.0.0/18`.
    pub service_cluster_ip_range: Option<Ipv4Cidr>,
    /// kube-controller-manager's `--cluster-cidr` (per-node /24s); default `127.B.128.0/17`.
    pub cluster_cidr: Option<Ipv4Cidr>,
    /// Node InternalIPs; default `127.B.64.0/18`.
    pub node_ip_range: Option<Ipv4Cidr>,
    /// The kubelet's `clusterDomain`; `cluster.local`.
    pub cluster_domain: String,
}

impl Default for NetworkConfig {
    fn default() -> Self {
        Self {
            service_cluster_ip_range: None,
            cluster_cidr: None,
            node_ip_range: None,
            cluster_domain: "cluster.local".into(),
        }
    }
}

/// Why the network could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum NetworkError {
    #[error("invalid {flag} {range}: {reason}")]
    Range {
        flag: &'static str,
        range: Ipv4Cidr,
        reason: String,
    },
    #[error("invalid cluster domain {0:?}")]
    Domain(String),
    #[error("binding the cluster DNS server on {addr} (UDP and TCP)")]
    BindDns { addr: SocketAddr, source: std::io::Error },
    #[error("creating the initial {what}")]
    Publish {
        what: String,
        source: Box<crate::status::ApiError>,
    },
    #[error("every 127.B.0.0/16 block (B = 1..254) is held by another sim: {0}")]
    NoFreeBlock(String),
}

/// The running network of a sim: its address plan and the endpoints controller, Service proxy
/// and DNS server. Stops with [`Network::shutdown`] or when dropped.
pub struct Network {
    addresses: Addresses,
    stop: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
}

impl std::fmt::Debug for Network {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Network")
            .field("addresses", &self.addresses)
            .finish_non_exhaustive()
    }
}

/// A claimed address plan whose DNS sockets are bound but not yet served.
pub(crate) struct Claimed {
    pub addresses: Addresses,
    dns: addresses::DnsSockets,
}

/// Picks and claims the sim's addresses (see `addresses.rs`).
pub(crate) async fn claim(config: &NetworkConfig) -> Result<Claimed, NetworkError> {
    let (addresses, dns) = addresses::claim(config).await?;
    Ok(Claimed { addresses, dns })
}

impl Network {
    /// Starts the endpoints controller, the Service proxy (with the listeners of the Services
    /// already there open when it returns) and the DNS server.
    pub(crate) async fn start(store: &Store, claimed: Claimed) -> Network {
        let Claimed { addresses, dns } = claimed;
        let (stop, _) = watch::channel(false);
        let kube_dns = std::net::SocketAddr::new(addresses.dns_ip().into(), DNS_PORT);
        let proxy = proxy::start(store.clone(), kube_dns, stop.subscribe()).await;
        let tasks = vec![
            tokio::spawn(endpoints::run(store.clone(), stop.subscribe())),
            tokio::spawn(proxy),
            tokio::spawn(dns::serve(store.clone(), addresses.clone(), dns, stop.subscribe())),
        ];
        Network { addresses, stop, tasks }
    }

    pub fn addresses(&self) -> &Addresses {
        &self.addresses
    }

    /// The `kubernetes` Service's cluster IP.
    pub fn kubernetes_service_ip(&self) -> Ipv4Addr {
        self.addresses.kubernetes_service_ip()
    }

    /// Where the cluster DNS answers: the `kube-dns` Service's cluster IP, port 53 (10053 when
    /// the process may not bind port 53).
    pub fn dns_addr(&self) -> SocketAddr {
        self.addresses.dns_addr()
    }

    pub fn cluster_domain(&self) -> &str {
        &self.addresses.cluster_domain
    }

    /// Turns true when the network stops (shutdown or drop): other servers on the sim's block
    /// (the kubelets') close with it, so a dropped sim frees its whole block.
    pub fn stopped(&self) -> watch::Receiver<bool> {
        self.stop.subscribe()
    }

    /// A configuration naming exactly this plan's ranges.
    pub fn config(&self) -> NetworkConfig {
        NetworkConfig {
            service_cluster_ip_range: Some(self.addresses.service_range),
            cluster_cidr: Some(self.addresses.pod_range),
            node_ip_range: Some(self.addresses.node_range),
            cluster_domain: self.addresses.cluster_domain.clone(),
        }
    }

    /// Stops everything and waits until every listener is closed.
    pub async fn shutdown(&mut self) {
        self.stop.send_replace(true);
        // They end by themselves on the stop signal (the proxy closes its listeners first); one
        // shared deadline, then they are cut.
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(2);
        for t in std::mem::take(&mut self.tasks) {
            let abort = t.abort_handle();
            if tokio::time::timeout_at(deadline, t).await.is_err() {
                abort.abort();
            }
        }
    }
}

impl Drop for Network {
    fn drop(&mut self) {
        self.stop.send_replace(true);
        for t in &self.tasks {
            t.abort();
        }
    }
}
