//! Where a proxy request goes: kube-apiserver's `ResourceLocation` for pods
//! (`pkg/registry/core/pod/strategy.go`), services (`pkg/registry/core/service/storage/storage.go`)
//! and nodes (`pkg/registry/core/node/strategy.go` with the kubelet connection info), with their
//! error texts.

use std::net::IpAddr;

use serde_json::Value;

use crate::registry::Gvr;
use crate::status::ApiError;
use crate::store::Store;

/// The kubelet's port when a node reports none (`--kubelet-port`'s default).
pub const DEFAULT_KUBELET_PORT: u16 = 10250;

/// Which address type of a node is dialed first: kubeadm's `--kubelet-preferred-address-types`
/// (the apiserver's own default starts with Hostname, which only resolves on real networks).
const PREFERRED_ADDRESS_TYPES: [&str; 3] = ["InternalIP", "ExternalIP", "Hostname"];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheme {
    Http,
    Https,
}

impl Scheme {
    fn parse(s: &str) -> Self {
        if s == "https" { Self::Https } else { Self::Http }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Http => "http",
            Self::Https => "https",
        }
    }

    fn default_port(self) -> &'static str {
        match self {
            Self::Http => "80",
            Self::Https => "443",
        }
    }
}

/// One upstream: scheme and host as Go's `url.URL` holds them (`ip`, `ip:port`, `[v6]:port`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Location {
    pub scheme: Scheme,
    /// Host and optional port, as in a URL.
    pub host: String,
    /// Host name or IP without brackets, for dialing and TLS.
    pub hostname: String,
    /// The port to dial: the URL's, else the scheme's default (Go's `canonicalAddr`).
    pub port: String,
}

impl Location {
    fn new(scheme: Scheme, hostname: &str, port: &str) -> Self {
        let bracketed = if hostname.contains(':') {
            format!("[{hostname}]")
        } else {
            hostname.to_string()
        };
        let host = if port.is_empty() {
            bracketed
        } else {
            format!("{bracketed}:{port}")
        };
        Self {
            scheme,
            host,
            hostname: hostname.to_string(),
            port: if port.is_empty() {
                scheme.default_port().to_string()
            } else {
                port.to_string()
            },
        }
    }

    /// `host:port` to dial, as Go prints it in `dial tcp <addr>: ...`.
    pub fn dial_addr(&self) -> String {
        if self.hostname.contains(':') {
            format!("[{}]:{}", self.hostname, self.port)
        } else {
            format!("{}:{}", self.hostname, self.port)
        }
    }
}

/// `utilnet.SplitSchemeNamePort`: `name`, `name:port` or `scheme:name:port`, with the scheme
/// `http`, `https` or empty and a non-empty name. The port may be a name.
pub fn split_scheme_name_port(id: &str) -> Option<(&str, &str, &str)> {
    let parts: Vec<&str> = id.split(':').collect();
    let (scheme, name, port) = match parts.as_slice() {
        [name] => ("", *name, ""),
        [name, port] => ("", *name, *port),
        [scheme, name, port] => (*scheme, *name, *port),
        _ => return None,
    };
    (!name.is_empty() && matches!(scheme, "" | "http" | "https")).then_some((scheme, name, port))
}

fn core(resource: &str) -> Gvr {
    Gvr::new("", "v1", resource)
}

/// The pod's IPs as the apiserver's internal type holds them: `status.podIPs`, else `status.podIP`.
fn pod_ips(pod: &Value) -> Vec<String> {
    let listed: Vec<String> = pod
        .pointer("/status/podIPs")
        .and_then(Value::as_array)
        .map(|ips| {
            ips.iter()
                .filter_map(|ip| ip.get("ip").and_then(Value::as_str))
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default();
    if !listed.is_empty() {
        return listed;
    }
    pod.pointer("/status/podIP")
        .and_then(Value::as_str)
        .filter(|ip| !ip.is_empty())
        .map(|ip| vec![ip.to_string()])
        .unwrap_or_default()
}

/// Whether the apiserver would proxy to this pod IP. kube-apiserver requires a global unicast
/// address; the sim's pods live on loopback addresses, so loopback is allowed as well (the one
/// deliberate difference). Unspecified, multicast, link-local and broadcast stay refused.
fn proxyable(ip: &str) -> bool {
    match ip.parse::<IpAddr>() {
        Ok(IpAddr::V4(v4)) => !(v4.is_unspecified() || v4.is_multicast() || v4.is_link_local() || v4.is_broadcast()),
        Ok(IpAddr::V6(v6)) => {
            let link_local = (v6.segments()[0] & 0xffc0) == 0xfe80;
            !(v6.is_unspecified() || v6.is_multicast() || link_local)
        }
        Err(_) => false,
    }
}

/// `pods/{id}/proxy`: the pod's IP at the given port, else its first declared container port,
/// else no port at all (the scheme's default).
pub fn pod(store: &Store, namespace: &str, id: &str) -> Result<Location, ApiError> {
    let Some((scheme, name, port)) = split_scheme_name_port(id) else {
        return Err(ApiError::BadRequest(format!("invalid pod request {id:?}")));
    };
    let pod = store.get(&core("pods"), namespace, name)?;
    let mut port = port.to_string();
    if port.is_empty() {
        let containers = pod.pointer("/spec/containers").and_then(Value::as_array);
        for c in containers.into_iter().flatten() {
            if let Some(first) = c.get("ports").and_then(Value::as_array).and_then(|p| p.first()) {
                port = first
                    .get("containerPort")
                    .and_then(Value::as_i64)
                    .unwrap_or(0)
                    .to_string();
                break;
            }
        }
    }
    let ip = pod_ips(&pod).into_iter().next().unwrap_or_default();
    if !proxyable(&ip) {
        return Err(ApiError::BadRequest("address not allowed".into()));
    }
    Ok(Location::new(Scheme::parse(scheme), &ip, &port))
}

/// A number in `0..n` that differs from call to call: the apiserver picks endpoints at random.
fn random_below(n: usize) -> usize {
    if n == 0 {
        return 0;
    }
    (uuid::Uuid::new_v4().as_u128() % n as u128) as usize
}

/// `isValidAddress`: the address must point at a pod of this namespace that has this IP.
fn valid_address(store: &Store, namespace: &str, addr: &Value) -> bool {
    let Some(target) = addr.get("targetRef") else {
        return false;
    };
    if target.get("namespace").and_then(Value::as_str).unwrap_or("") != namespace {
        return false;
    }
    let name = target.get("name").and_then(Value::as_str).unwrap_or("");
    let Ok(pod) = store.get(&core("pods"), namespace, name) else {
        return false;
    };
    let ip = addr.get("ip").and_then(Value::as_str).unwrap_or("");
    pod_ips(&pod).iter().any(|p| p == ip)
}

/// `services/{id}/proxy`: a ready address of the Service's Endpoints for the port (by name; a
/// port number is first turned into the name of the Service port with that number).
pub fn service(store: &Store, namespace: &str, id: &str) -> Result<Location, ApiError> {
    let Some((scheme, name, port)) = split_scheme_name_port(id) else {
        return Err(ApiError::BadRequest(format!("invalid service request {id:?}")));
    };
    let mut port_name = port.to_string();
    if let Ok(number) = port.parse::<i64>() {
        let svc = store.get(&core("services"), namespace, name)?;
        let ports = svc.pointer("/spec/ports").and_then(Value::as_array);
        let found = ports
            .into_iter()
            .flatten()
            .find(|p| p.get("port").and_then(Value::as_i64) == Some(number));
        match found {
            Some(p) => port_name = p.get("name").and_then(Value::as_str).unwrap_or("").to_string(),
            None => {
                return Err(ApiError::ServiceUnavailable(format!(
                    "no service port {number} found for service {name:?}"
                )));
            }
        }
    }
    let endpoints = store.get(&core("endpoints"), namespace, name)?;
    let subsets: Vec<Value> = endpoints
        .get("subsets")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if subsets.is_empty() {
        return Err(ApiError::ServiceUnavailable(format!(
            "no endpoints available for service {name:?}"
        )));
    }
    let start = random_below(subsets.len());
    for i in 0..subsets.len() {
        let subset = &subsets[(start + i) % subsets.len()];
        let addresses: Vec<Value> = subset
            .get("addresses")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        if addresses.is_empty() {
            continue;
        }
        let ports = subset.get("ports").and_then(Value::as_array);
        for p in ports.into_iter().flatten() {
            if p.get("name").and_then(Value::as_str).unwrap_or("") != port_name {
                continue;
            }
            let number = p.get("port").and_then(Value::as_i64).unwrap_or(0).to_string();
            let first = random_below(addresses.len());
            for j in 0..addresses.len() {
                let addr = &addresses[(first + j) % addresses.len()];
                if valid_address(store, namespace, addr) {
                    let ip = addr.get("ip").and_then(Value::as_str).unwrap_or("");
                    return Ok(Location::new(Scheme::parse(scheme), ip, &number));
                }
            }
            tracing::debug!(service = name, "no valid address in an Endpoints subset; skipping it");
        }
    }
    Err(ApiError::ServiceUnavailable(format!(
        "no endpoints available for service {id:?}"
    )))
}

/// `GetPreferredNodeAddress`, with its error as Go prints `[]NodeAddress` (`[{InternalIP 1.2.3.4}]`).
fn preferred_address(node: &Value) -> Result<String, ApiError> {
    let addresses: Vec<(String, String)> = node
        .pointer("/status/addresses")
        .and_then(Value::as_array)
        .map(|list| {
            list.iter()
                .map(|a| {
                    let field = |k: &str| a.get(k).and_then(Value::as_str).unwrap_or("").to_string();
                    (field("type"), field("address"))
                })
                .collect()
        })
        .unwrap_or_default();
    for wanted in PREFERRED_ADDRESS_TYPES {
        if let Some((_, address)) = addresses.iter().find(|(t, _)| t == wanted) {
            return Ok(address.clone());
        }
        if wanted == "Hostname" {
            let label = node
                .pointer("/metadata/labels/kubernetes.io~1hostname")
                .and_then(Value::as_str)
                .filter(|h| !h.is_empty());
            if let Some(hostname) = label {
                return Ok(hostname.to_string());
            }
        }
    }
    let known: Vec<String> = addresses.iter().map(|(t, a)| format!("{{{t} {a}}}")).collect();
    // Not a Status error in the apiserver either: it answers 500 without a reason.
    Err(ApiError::Custom {
        code: 500,
        reason: String::new(),
        message: format!("no preferred addresses found; known addresses: [{}]", known.join(" ")),
        details: None,
    })
}

/// `nodes/{id}/proxy`: the node's preferred address; the kubelet's port (over HTTPS, the
/// kubelet's scheme) unless another port is asked for (then the requested scheme, default http).
pub fn node(store: &Store, id: &str) -> Result<Location, ApiError> {
    let Some((scheme, name, port)) = split_scheme_name_port(id) else {
        return Err(ApiError::BadRequest(format!("invalid node request {id:?}")));
    };
    let node = store.get(&core("nodes"), "", name)?;
    let host = preferred_address(&node)?;
    let kubelet_port = node
        .pointer("/status/daemonEndpoints/kubeletEndpoint/Port")
        .and_then(Value::as_i64)
        .filter(|p| *p > 0)
        .unwrap_or(i64::from(DEFAULT_KUBELET_PORT))
        .to_string();
    if port.is_empty() || port == kubelet_port {
        return Ok(Location::new(Scheme::Https, &host, &kubelet_port));
    }
    Ok(Location::new(Scheme::parse(scheme), &host, port))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_with_scheme_and_port() {
        assert_eq!(split_scheme_name_port("p"), Some(("", "p", "")));
        assert_eq!(split_scheme_name_port("p:8080"), Some(("", "p", "8080")));
        assert_eq!(split_scheme_name_port("https:p:443"), Some(("https", "p", "443")));
        assert_eq!(split_scheme_name_port("https:p:"), Some(("https", "p", "")));
        assert_eq!(split_scheme_name_port("ftp:p:21"), None);
        assert_eq!(split_scheme_name_port(":80"), None);
        assert_eq!(split_scheme_name_port("a:b:c:d"), None);
    }

    #[test]
    fn locations_print_as_go_urls() {
        let l = Location::new(Scheme::Http, "127.1.2.3", "");
        assert_eq!(
            (l.host.as_str(), l.dial_addr()),
            ("127.1.2.3", "127.1.2.3:80".to_string())
        );
        let l = Location::new(Scheme::Https, "::1", "8443");
        assert_eq!(
            (l.host.as_str(), l.dial_addr()),
            ("[::1]:8443", "[::1]:8443".to_string())
        );
    }

    #[test]
    fn proxyable_addresses() {
        assert!(proxyable("127.0.5.6"));
        assert!(proxyable("10.1.2.3"));
        assert!(!proxyable(""));
        assert!(!proxyable("0.0.0.0"));
        assert!(!proxyable("169.254.1.1"));
        assert!(!proxyable("224.0.0.1"));
        assert!(!proxyable("fe80::1"));
    }

    #[test]
    fn preferred_node_address() {
        let node = serde_json::json!({ "status": { "addresses": [
            { "type": "Hostname", "address": "n1" }, { "type": "InternalIP", "address": "127.0.9.1" }
        ] } });
        assert_eq!(preferred_address(&node).ok().as_deref(), Some("127.0.9.1"));
        let none = serde_json::json!({ "status": { "addresses": [{ "type": "InternalDNS", "address": "n1.local" }] } });
        let err = preferred_address(&none).err().map(|e| (e.code(), e.to_string()));
        assert_eq!(
            err,
            Some((
                500,
                "no preferred addresses found; known addresses: [{InternalDNS n1.local}]".to_string()
            ))
        );
    }
}
