//! Where a sim's Services, nodes and pods live on the loopback network: one `127.B.0.0/16`
//! block per sim instance (Services `127.B.0.0/18`, nodes `127.B.64.0/18`, pods
//! `127.B.128.0/17`), or the ranges given in [`NetworkConfig`]. A block is claimed by binding the
//! cluster DNS server's sockets on it: a sim in this or another process that holds the block
//! makes the bind fail with EADDRINUSE, and the next block is tried.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};

use super::{Ipv4Cidr, NetworkConfig, NetworkError};

/// The DNS port (resolv.conf cannot name another).
pub const DNS_PORT: u16 = 53;
/// Where the DNS server answers when the process may not bind port 53 (not root, no
/// CAP_NET_BIND_SERVICE): reachable by direct queries, not through resolv.conf.
pub const DNS_FALLBACK_PORT: u16 = 10053;
/// The kubelet's HTTPS port (`daemonEndpoints.kubeletEndpoint.Port`).
pub const KUBELET_PORT: u16 = 10250;
/// The prefix of each node's pod range (kube-controller-manager's `--node-cidr-mask-size`).
pub const NODE_CIDR_MASK_SIZE: u8 = 24;

/// The address plan of one sim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Addresses {
    /// kube-apiserver's `--service-cluster-ip-range`.
    pub service_range: Ipv4Cidr,
    /// kube-controller-manager's `--cluster-cidr`; node `i` gets its `i`-th /24.
    pub pod_range: Ipv4Cidr,
    /// Node `i` (1-based, in registration order) has the range's `i`-th address.
    pub node_range: Ipv4Cidr,
    /// `cluster.local` unless configured.
    pub cluster_domain: String,
    /// The DNS server's port: [`DNS_PORT`], or [`DNS_FALLBACK_PORT`] for an unprivileged process.
    pub dns_port: u16,
}

impl Addresses {
    /// The `kubernetes` Service's cluster IP: the range's first address.
    pub fn kubernetes_service_ip(&self) -> Ipv4Addr {
        self.service_range.nth(1).unwrap_or(Ipv4Addr::UNSPECIFIED)
    }

    /// The `kube-system/kube-dns` Service's cluster IP and the DNS server's address: the range's
    /// 10th address.
    pub fn dns_ip(&self) -> Ipv4Addr {
        self.service_range.nth(10).unwrap_or(Ipv4Addr::UNSPECIFIED)
    }

    /// Where the DNS server answers (UDP and TCP).
    pub fn dns_addr(&self) -> SocketAddr {
        SocketAddr::V4(SocketAddrV4::new(self.dns_ip(), self.dns_port))
    }

    /// The InternalIP of the node with this index (1-based); None past the range's end.
    pub fn node_ip(&self, index: u16) -> Option<Ipv4Addr> {
        let ip = self.node_range.nth(u64::from(index))?;
        (u64::from(index) < self.node_range.size() - 1).then_some(ip)
    }

    /// The pod CIDR (`spec.podCIDR`) of the node with this index (1-based).
    pub fn node_pod_cidr(&self, index: u16) -> Option<Ipv4Cidr> {
        self.pod_range
            .subnet(NODE_CIDR_MASK_SIZE, u64::from(index).checked_sub(1)?)
    }
}

/// The defaults derived from block `b`.
fn block(b: u8, config: &NetworkConfig) -> Addresses {
    let cidr = |third: u8, prefix: u8| Ipv4Cidr::new(Ipv4Addr::new(127, b, third, 0), prefix);
    Addresses {
        service_range: config.service_cluster_ip_range.unwrap_or(cidr(0, 18)),
        node_range: config.node_ip_range.unwrap_or(cidr(64, 18)),
        pod_range: config.cluster_cidr.unwrap_or(cidr(128, 17)),
        cluster_domain: config.cluster_domain.clone(),
        dns_port: DNS_PORT,
    }
}

/// Checks that a plan fits on the loopback network without overlaps.
fn validate(a: &Addresses) -> Result<(), NetworkError> {
    let loopback = Ipv4Cidr::new(Ipv4Addr::new(127, 0, 0, 0), 8);
    let api = Ipv4Addr::new(127, 0, 0, 1);
    let named = [
        ("--service-cluster-ip-range", a.service_range),
        ("--node-ip-range", a.node_range),
        ("--cluster-cidr", a.pod_range),
    ];
    for (flag, range) in named {
        if !loopback.contains(range.base()) || range.prefix() < 8 {
            return Err(NetworkError::Range {
                flag,
                range,
                reason: "must be inside 127.0.0.0/8 (the sim uses loopback addresses only)".into(),
            });
        }
        if range.contains(api) {
            return Err(NetworkError::Range {
                flag,
                range,
                reason: "must not contain 127.0.0.1, the API server's address".into(),
            });
        }
    }
    for (i, (flag, range)) in named.iter().enumerate() {
        for (other_flag, other) in &named[i + 1..] {
            if range.overlaps(other) {
                return Err(NetworkError::Range {
                    flag,
                    range: *range,
                    reason: format!("overlaps {other_flag} {other}"),
                });
            }
        }
    }
    if a.service_range.size() < 16 {
        return Err(NetworkError::Range {
            flag: "--service-cluster-ip-range",
            range: a.service_range,
            reason: "needs at least 16 addresses (the kube-dns Service has the 10th)".into(),
        });
    }
    if a.pod_range.prefix() > NODE_CIDR_MASK_SIZE {
        return Err(NetworkError::Range {
            flag: "--cluster-cidr",
            range: a.pod_range,
            reason: format!("is smaller than one node's /{NODE_CIDR_MASK_SIZE}"),
        });
    }
    if a.cluster_domain.is_empty() || a.cluster_domain.split('.').any(|l| l.is_empty() || l.len() > 63) {
        return Err(NetworkError::Domain(a.cluster_domain.clone()));
    }
    Ok(())
}

/// The DNS server's sockets, bound: holding them is what claims the block.
pub(crate) struct DnsSockets {
    pub udp: tokio::net::UdpSocket,
    pub tcp: tokio::net::TcpListener,
}

/// Picks the address plan and binds the DNS server on it. With no Service range configured,
/// blocks `127.1` .. `127.254` are tried from a random one on until one is free; a configured
/// Service range must be free (its second octet names the block of the other defaults).
pub(crate) async fn claim(config: &NetworkConfig) -> Result<(Addresses, DnsSockets), NetworkError> {
    if let Some(range) = config.service_cluster_ip_range {
        let plan = block(range.base().octets()[1], config);
        validate(&plan)?;
        let sockets = bind_dns(plan.dns_addr())
            .await
            .map_err(|source| NetworkError::BindDns {
                addr: plan.dns_addr(),
                source,
            })?;
        return Ok((plan, sockets));
    }
    let start = uuid::Uuid::new_v4().as_bytes()[0];
    let mut last_err = None;
    for i in 0..254u16 {
        let b = ((u16::from(start) + i) % 254 + 1) as u8;
        let mut plan = block(b, config);
        validate(&plan)?;
        match bind_dns_for(&mut plan).await {
            Ok(sockets) => return Ok((plan, sockets)),
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => last_err = Some(e),
            Err(source) => {
                return Err(NetworkError::BindDns {
                    addr: plan.dns_addr(),
                    source,
                });
            }
        }
    }
    Err(NetworkError::NoFreeBlock(
        last_err.map(|e| e.to_string()).unwrap_or_default(),
    ))
}

/// Binds the DNS server on `plan`'s address, port 53, or the fallback port when the process may
/// not bind privileged ports (then `plan.dns_port` says so).
async fn bind_dns_for(plan: &mut Addresses) -> std::io::Result<DnsSockets> {
    match bind_dns(plan.dns_addr()).await {
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
            plan.dns_port = DNS_FALLBACK_PORT;
            let sockets = bind_dns(plan.dns_addr()).await?;
            tracing::warn!(
                addr = %plan.dns_addr(),
                "binding port 53 needs root or CAP_NET_BIND_SERVICE: the cluster DNS answers on this port instead, which resolv.conf cannot name"
            );
            Ok(sockets)
        }
        other => other,
    }
}

async fn bind_dns(addr: SocketAddr) -> std::io::Result<DnsSockets> {
    let udp = tokio::net::UdpSocket::bind(addr).await?;
    let tcp = tokio::net::TcpListener::bind(addr).await?;
    Ok(DnsSockets { udp, tcp })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn block_defaults() {
        let a = block(7, &NetworkConfig::default());
        validate(&a).unwrap();
        assert_eq!(a.service_range.to_string(), "127.7.0.0/18");
        assert_eq!(a.kubernetes_service_ip(), Ipv4Addr::new(127, 7, 0, 1));
        assert_eq!(a.dns_addr().to_string(), "127.7.0.10:53");
        assert_eq!(a.node_ip(1), Some(Ipv4Addr::new(127, 7, 64, 1)));
        assert_eq!(a.node_pod_cidr(1).unwrap().to_string(), "127.7.128.0/24");
        assert_eq!(a.node_pod_cidr(2).unwrap().to_string(), "127.7.129.0/24");
        assert_eq!(a.node_pod_cidr(129), None);
        assert_eq!(a.node_pod_cidr(0), None);
    }

    #[test]
    fn bad_plans_are_refused() {
        let c = NetworkConfig {
            cluster_cidr: Some("127.7.0.0/16".parse().unwrap()),
            ..NetworkConfig::default()
        };
        assert!(validate(&block(7, &c)).unwrap_err().to_string().contains("overlaps"));
        let c = NetworkConfig {
            node_ip_range: Some("10.0.0.0/16".parse().unwrap()),
            ..NetworkConfig::default()
        };
        assert!(validate(&block(7, &c)).unwrap_err().to_string().contains("127.0.0.0/8"));
        let c = NetworkConfig {
            node_ip_range: Some("127.0.0.0/16".parse().unwrap()),
            ..NetworkConfig::default()
        };
        assert!(validate(&block(7, &c)).unwrap_err().to_string().contains("127.0.0.1"));
    }
}
