//! The pod's name files: hostname and domain (`GeneratePodHostNameAndDomain`), the kubelet's
//! managed `/etc/hosts`, and `/etc/resolv.conf` as the kubelet's DNS configurer decides it and
//! containerd writes it.

use serde_json::Value;

use super::ViewError;
use crate::registry::ResourceKey;
use crate::store::Store;

pub(super) const CLUSTER_DOMAIN: &str = "cluster.local";
/// The host's resolver configuration (the kubelet's `--resolv-conf` default).
const HOST_RESOLV_CONF: &str = "/etc/resolv.conf";
const HOST_HOSTS: &str = "/etc/hosts";
/// glibc's limits, which the kubelet enforces (`MaxDNSNameservers`, `MaxDNSSearchPaths`,
/// `MaxDNSSearchListChars`).
const MAX_NAMESERVERS: usize = 3;
const MAX_SEARCH_PATHS: usize = 32;
const MAX_SEARCH_CHARS: usize = 2048;
/// Linux's limit on a hostname (`setHostnameAsFQDN`).
const MAX_FQDN: usize = 64;

fn is_dns1123_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

pub(super) fn host_network(pod: &Value) -> bool {
    pod.pointer("/spec/hostNetwork")
        .and_then(Value::as_bool)
        .unwrap_or(false)
}

/// The pod's hostname (`spec.hostname` or its name, cut to 63 characters) and domain
/// (`<subdomain>.<ns>.svc.cluster.local` when `spec.subdomain` is set).
pub(super) fn hostname_and_domain(pod: &Value) -> Result<(String, Option<String>), ViewError> {
    let name = crate::meta::name(pod);
    let mut hostname = name.to_string();
    if let Some(h) = pod
        .pointer("/spec/hostname")
        .and_then(Value::as_str)
        .filter(|h| !h.is_empty())
    {
        if !is_dns1123_label(h) {
            return Err(ViewError::Config(format!(
                "pod Hostname {h:?} is not a valid DNS label: a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character"
            )));
        }
        hostname = h.to_string();
    }
    if hostname.len() > 63 {
        // `truncatePodHostnameIfNeeded`: cut, then no trailing '-' or '.'.
        let mut cut = hostname.chars().take(63).collect::<String>();
        while cut.ends_with(['-', '.']) {
            cut.pop();
        }
        hostname = cut;
    }
    let domain = match pod
        .pointer("/spec/subdomain")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
    {
        Some(sub) => {
            if !is_dns1123_label(sub) {
                return Err(ViewError::Config(format!(
                    "pod Subdomain {sub:?} is not a valid DNS label: a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character"
                )));
            }
            Some(format!("{sub}.{}.svc.{CLUSTER_DOMAIN}", crate::meta::namespace(pod)))
        }
        None => None,
    };
    Ok((hostname, domain))
}

/// The hostname the container's UTS namespace gets: the FQDN with `setHostnameAsFQDN`.
pub(super) fn uts_hostname(pod: &Value, hostname: &str, domain: Option<&str>) -> Result<String, ViewError> {
    let as_fqdn = pod
        .pointer("/spec/setHostnameAsFQDN")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    match domain {
        Some(d) if as_fqdn => {
            let fqdn = format!("{hostname}.{d}");
            if fqdn.len() > MAX_FQDN {
                return Err(ViewError::Config(format!(
                    "failed to construct FQDN from pod hostname and cluster domain, FQDN {fqdn} is too long ({MAX_FQDN} characters is the max, {} characters requested)",
                    fqdn.len()
                )));
            }
            Ok(fqdn)
        }
        _ => Ok(hostname.to_string()),
    }
}

fn host_aliases(pod: &Value) -> String {
    let aliases: Vec<&Value> = pod
        .pointer("/spec/hostAliases")
        .and_then(Value::as_array)
        .map(|a| a.iter().collect())
        .unwrap_or_default();
    if aliases.is_empty() {
        return String::new();
    }
    let mut out = String::from("\n# Entries added by HostAliases.\n");
    for a in aliases {
        let ip = a.get("ip").and_then(Value::as_str).unwrap_or("");
        let names: Vec<&str> = a
            .get("hostnames")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        out.push_str(&format!("{ip}\t{}\n", names.join("\t")));
    }
    out
}

/// The kubelet's managed hosts file (`managedHostsFileContent`); for host-network pods the
/// host's own `/etc/hosts` with the aliases (`nodeHostsFileContent`).
pub(super) fn hosts_file(pod: &Value, pod_ip: &str, hostname: &str, domain: Option<&str>) -> String {
    if host_network(pod) {
        let mut content = std::fs::read_to_string(HOST_HOSTS).unwrap_or_default();
        content.push_str(&host_aliases(pod));
        return content;
    }
    let mut out = String::from(
        "# Kubernetes-managed hosts file.\n\
         127.0.0.1\tlocalhost\n\
         ::1\tlocalhost ip6-localhost ip6-loopback\n\
         fe00::0\tip6-localnet\n\
         fe00::0\tip6-mcastprefix\n\
         fe00::1\tip6-allnodes\n\
         fe00::2\tip6-allrouters\n",
    );
    match domain {
        Some(d) => out.push_str(&format!("{pod_ip}\t{hostname}.{d}\t{hostname}\n")),
        None => out.push_str(&format!("{pod_ip}\t{hostname}\n")),
    }
    out.push_str(&host_aliases(pod));
    out
}

/// A resolver configuration: what the kubelet hands the runtime.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(super) struct DnsConfig {
    pub servers: Vec<String>,
    pub searches: Vec<String>,
    pub options: Vec<String>,
}

impl DnsConfig {
    /// containerd's rendering of it.
    pub fn render(&self) -> String {
        let mut out = String::new();
        if !self.searches.is_empty() {
            out.push_str(&format!("search {}\n", self.searches.join(" ")));
        }
        for s in &self.servers {
            out.push_str(&format!("nameserver {s}\n"));
        }
        if !self.options.is_empty() {
            out.push_str(&format!("options {}\n", self.options.join(" ")));
        }
        out
    }
}

/// The kubelet's `parseResolvConf`.
pub(super) fn parse_resolv_conf(content: &str) -> DnsConfig {
    let mut c = DnsConfig::default();
    for line in content.lines() {
        let line = line.split(['#', ';']).next().unwrap_or("");
        let fields: Vec<&str> = line.split_whitespace().collect();
        match fields.first().copied() {
            Some("nameserver") if fields.len() > 1 => c.servers.push(fields[1].to_string()),
            Some("search") => {
                c.searches = fields[1..]
                    .iter()
                    .filter(|s| **s != ".")
                    .map(|s| s.trim_end_matches('.').to_string())
                    .collect();
            }
            Some("options") => c.options = fields[1..].iter().map(|s| s.to_string()).collect(),
            _ => {}
        }
    }
    c
}

fn host_dns() -> DnsConfig {
    parse_resolv_conf(&std::fs::read_to_string(HOST_RESOLV_CONF).unwrap_or_default())
}

/// The clusterIP of `kube-system/kube-dns`, the sim's cluster DNS (the kubelet's `--cluster-dns`).
fn cluster_dns(store: &Store) -> Option<String> {
    let svc = store.get_stored(
        &ResourceKey {
            group: String::new(),
            resource: "services".into(),
        },
        "kube-system",
        "kube-dns",
    )?;
    svc.pointer("/spec/clusterIP")
        .and_then(Value::as_str)
        .filter(|ip| !ip.is_empty() && *ip != "None")
        .map(str::to_string)
}

fn dedup(v: Vec<String>) -> Vec<String> {
    let mut out: Vec<String> = Vec::with_capacity(v.len());
    for s in v {
        if !out.contains(&s) {
            out.push(s);
        }
    }
    out
}

/// The kubelet's `GetPodDNS`: by `dnsPolicy` (ClusterFirst by default; host networking turns it
/// into Default unless ClusterFirstWithHostNet), then `dnsConfig` merged in, then glibc's limits.
pub(super) fn pod_dns(store: &Store, pod: &Value) -> DnsConfig {
    let ns = crate::meta::namespace(pod);
    let policy = pod
        .pointer("/spec/dnsPolicy")
        .and_then(Value::as_str)
        .unwrap_or("ClusterFirst");
    let cluster = match policy {
        "None" => None,
        "ClusterFirstWithHostNet" => Some(true),
        "Default" => Some(false),
        _ => Some(!host_network(pod)),
    };
    let mut c = match cluster {
        None => DnsConfig::default(),
        Some(false) => host_dns(),
        Some(true) => {
            let host = host_dns();
            let mut searches = vec![
                format!("{ns}.svc.{CLUSTER_DOMAIN}"),
                format!("svc.{CLUSTER_DOMAIN}"),
                CLUSTER_DOMAIN.to_string(),
            ];
            searches.extend(host.searches);
            DnsConfig {
                // Without a kube-dns Service the sim has no cluster DNS; a real kubelet would
                // fall back to the host's resolver, which the loopback-only sim must not use.
                servers: cluster_dns(store).into_iter().collect(),
                searches: dedup(searches),
                options: vec!["ndots:5".into()],
            }
        }
    };
    if let Some(extra) = pod.pointer("/spec/dnsConfig") {
        let strings = |f: &str| -> Vec<String> {
            extra
                .get(f)
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        };
        c.servers.extend(strings("nameservers"));
        c.servers = dedup(std::mem::take(&mut c.servers));
        c.searches.extend(strings("searches"));
        c.searches = dedup(std::mem::take(&mut c.searches));
        // `mergeDNSOptions`: by name, the pod's value wins.
        let mut options: Vec<(String, Option<String>)> = c
            .options
            .iter()
            .map(|o| match o.split_once(':') {
                Some((n, v)) => (n.to_string(), Some(v.to_string())),
                None => (o.clone(), None),
            })
            .collect();
        for o in extra.get("options").and_then(Value::as_array).into_iter().flatten() {
            let Some(name) = o.get("name").and_then(Value::as_str) else {
                continue;
            };
            let value = o.get("value").and_then(Value::as_str).map(str::to_string);
            match options.iter_mut().find(|(n, _)| n == name) {
                Some(entry) => entry.1 = value,
                None => options.push((name.to_string(), value)),
            }
        }
        c.options = options
            .into_iter()
            .map(|(n, v)| match v.filter(|v| !v.is_empty()) {
                Some(v) => format!("{n}:{v}"),
                None => n,
            })
            .collect();
    }
    c.servers.truncate(MAX_NAMESERVERS);
    c.searches.truncate(MAX_SEARCH_PATHS);
    while c.searches.join(" ").len() > MAX_SEARCH_CHARS {
        c.searches.pop();
    }
    c
}
