//! Service validation as kube-apiserver 1.37 runs it (`validateService`, `validateServicePort`,
//! `ValidateServiceClusterIPsRelatedFields`, the traffic policy checks and, on update,
//! `validateUpgradeDowngradeClusterIPs`), on the defaulted object with its cluster IP allocated,
//! as the registry validates it. Names are checked in `object_meta` (DNS-1123 labels since
//! RelaxedServiceNameValidation).
//!
//! Not checked: `loadBalancerClass`, `healthCheckNodePort` being required (the sim allocates no
//! node ports), the topology annotations, IP families on update, dual-stack cluster IPs.

use std::collections::HashSet;
use std::net::IpAddr;

use serde_json::{Value, json};

use super::dns1123_label_errors;
use super::dns1123_subdomain_errors;
use super::fields::{array_at, duplicate, port_num, port_num_or_name, required_because, set_at, str_at};
use super::{labels, qualified_name_errors};
use crate::status::FieldCause;

const TYPES: &[&str] = &["ClusterIP", "ExternalName", "LoadBalancer", "NodePort"];
const SESSION_AFFINITIES: &[&str] = &["ClientIP", "None"];
const PROTOCOLS: &[&str] = &["SCTP", "TCP", "UDP"];
const TRAFFIC_POLICIES: &[&str] = &["Cluster", "Local"];
/// PreferSameTrafficDistribution is GA (locked on) since 1.35: all three values.
const TRAFFIC_DISTRIBUTIONS: &[&str] = &["PreferClose", "PreferSameZone", "PreferSameNode"];
const IP_FAMILIES: &[&str] = &["IPv4", "IPv6"];
const IP_FAMILY_POLICIES: &[&str] = &["PreferDualStack", "RequireDualStack", "SingleStack"];
/// `MaxClientIPServiceAffinitySeconds`: a day.
const MAX_AFFINITY_SECONDS: i64 = 86400;

/// `ValidateServiceCreate` (`old` is `None`) or `ValidateServiceUpdate`, without the metadata.
pub(super) fn service(obj: &Value, old: Option<&Value>, causes: &mut Vec<FieldCause>) {
    if let Some(old) = old {
        upgrade_downgrade_cluster_ips(old, obj, causes);
    }
    let spec = obj.get("spec");
    let ty = str_at(spec, "/type");
    let cluster_ips = array_at(spec, "/clusterIPs");
    let headless = cluster_ips.first().and_then(Value::as_str) == Some("None");
    let ports = array_at(spec, "/ports");

    if ports.is_empty() && !headless && ty != "ExternalName" {
        causes.push(FieldCause::required("spec.ports"));
    }
    match ty {
        "LoadBalancer" | "NodePort" if headless => causes.push(FieldCause::invalid(
            "spec.clusterIPs[0]",
            &json!("None"),
            format!("may not be set to 'None' for {ty} services"),
        )),
        "ExternalName" => {
            if !cluster_ips.is_empty() {
                causes.push(FieldCause::forbidden(
                    "spec.clusterIPs",
                    "may not be set for ExternalName services",
                ));
            }
            if !array_at(spec, "/ipFamilies").is_empty() {
                causes.push(FieldCause::forbidden(
                    "spec.ipFamilies",
                    "may not be set for ExternalName services",
                ));
            }
            if set_at(spec, "/ipFamilyPolicy").is_some() {
                causes.push(FieldCause::forbidden(
                    "spec.ipFamilyPolicy",
                    "may not be set for ExternalName services",
                ));
            }
            // A trailing dot marks the name as fully qualified.
            let cname = str_at(spec, "/externalName");
            let cname = cname.strip_suffix('.').unwrap_or(cname);
            if cname.is_empty() {
                causes.push(FieldCause::required("spec.externalName"));
            } else {
                for msg in dns1123_subdomain_errors(cname) {
                    causes.push(FieldCause::invalid("spec.externalName", &json!(cname), msg));
                }
            }
        }
        _ => {}
    }

    let mut names = HashSet::new();
    for (i, p) in ports.iter().enumerate() {
        port(&format!("spec.ports[{i}]"), p, ports.len() > 1, &mut names, causes);
    }

    labels(spec.and_then(|s| s.get("selector")), "spec.selector", causes);

    match set_at(spec, "/sessionAffinity") {
        None => causes.push(FieldCause::required("spec.sessionAffinity")),
        Some(v) if v.as_str() == Some("") => causes.push(FieldCause::required("spec.sessionAffinity")),
        Some(v) if !v.as_str().is_some_and(|s| SESSION_AFFINITIES.contains(&s)) => {
            causes.push(FieldCause::not_supported("spec.sessionAffinity", v, SESSION_AFFINITIES));
        }
        Some(_) => {}
    }
    match str_at(spec, "/sessionAffinity") {
        "ClientIP" => client_ip_affinity(spec, causes),
        "None" if set_at(spec, "/sessionAffinityConfig").is_some() => causes.push(FieldCause::forbidden(
            "spec.sessionAffinityConfig",
            "must not be set when session affinity is None",
        )),
        _ => {}
    }

    cluster_ips_related(spec, ty, headless, causes);

    for (i, ip) in array_at(spec, "/externalIPs").iter().enumerate() {
        endpoint_ip(&format!("spec.externalIPs[{i}]"), ip, causes);
    }

    match set_at(spec, "/type") {
        None => causes.push(FieldCause::required("spec.type")),
        Some(v) if v.as_str() == Some("") => causes.push(FieldCause::required("spec.type")),
        Some(v) if !v.as_str().is_some_and(|s| TYPES.contains(&s)) => {
            causes.push(FieldCause::not_supported("spec.type", v, TYPES));
        }
        Some(_) => {}
    }

    if ty == "ClusterIP" {
        for (i, p) in ports.iter().enumerate() {
            if node_port(p) != 0 {
                causes.push(FieldCause::forbidden(
                    format!("spec.ports[{i}].nodePort"),
                    "may not be used when `type` is 'ClusterIP'",
                ));
            }
        }
    }
    let mut node_ports = HashSet::new();
    for (i, p) in ports.iter().enumerate() {
        let np = node_port(p);
        if np != 0 && !node_ports.insert((str_at(Some(p), "/protocol").to_string(), np)) {
            causes.push(duplicate(format!("spec.ports[{i}].nodePort"), &json!(np)));
        }
    }
    let mut seen = HashSet::new();
    for (i, p) in ports.iter().enumerate() {
        let protocol = str_at(Some(p), "/protocol");
        let number = p.get("port").and_then(Value::as_i64).unwrap_or(0);
        if !seen.insert((protocol.to_string(), number)) {
            causes.push(duplicate(
                format!("spec.ports[{i}]"),
                &json!({ "Name": "", "Protocol": protocol, "AppProtocol": null, "Port": number, "TargetPort": 0, "NodePort": 0 }),
            ));
        }
    }

    let ranges = array_at(spec, "/loadBalancerSourceRanges");
    if !ranges.is_empty() {
        // The path is spelt so by kube-apiserver.
        if ty != "LoadBalancer" {
            causes.push(FieldCause::forbidden(
                "spec.LoadBalancerSourceRanges",
                "may only be used when `type` is 'LoadBalancer'",
            ));
        }
        for (i, r) in ranges.iter().enumerate() {
            let value = r.as_str().unwrap_or_default().trim();
            if !is_cidr(value) {
                causes.push(FieldCause::invalid(
                    format!("spec.LoadBalancerSourceRanges[{i}]"),
                    &json!(value),
                    "must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)",
                ));
            }
        }
    }

    if set_at(spec, "/allocateLoadBalancerNodePorts").is_some() && ty != "LoadBalancer" {
        causes.push(FieldCause::forbidden(
            "spec.allocateLoadBalancerNodePorts",
            "may only be used when `type` is 'LoadBalancer'",
        ));
    }
    if ty == "LoadBalancer" && set_at(spec, "/allocateLoadBalancerNodePorts").is_none() {
        // The path is spelt so by kube-apiserver.
        causes.push(FieldCause::required("allocateLoadBalancerNodePorts"));
    }

    external_traffic_policy(spec, ty, causes);

    match set_at(spec, "/internalTrafficPolicy") {
        None if matches!(ty, "NodePort" | "LoadBalancer" | "ClusterIP") => {
            causes.push(FieldCause::required("spec.internalTrafficPolicy"));
        }
        Some(v) if !v.as_str().is_some_and(|s| TRAFFIC_POLICIES.contains(&s)) => {
            causes.push(FieldCause::not_supported(
                "spec.internalTrafficPolicy",
                v,
                TRAFFIC_POLICIES,
            ));
        }
        _ => {}
    }
    if let Some(v) = set_at(spec, "/trafficDistribution")
        && !v.as_str().is_some_and(|s| TRAFFIC_DISTRIBUTIONS.contains(&s))
    {
        causes.push(FieldCause::not_supported(
            "spec.trafficDistribution",
            v,
            TRAFFIC_DISTRIBUTIONS,
        ));
    }
}

fn node_port(p: &Value) -> i64 {
    p.get("nodePort").and_then(Value::as_i64).unwrap_or(0)
}

/// `validateServicePort`.
fn port<'a>(at: &str, p: &'a Value, require_name: bool, names: &mut HashSet<&'a str>, causes: &mut Vec<FieldCause>) {
    let name = p.get("name").and_then(Value::as_str).unwrap_or("");
    if require_name && name.is_empty() {
        causes.push(FieldCause::required(format!("{at}.name")));
    } else if !name.is_empty() {
        for msg in dns1123_label_errors(name) {
            causes.push(FieldCause::invalid(format!("{at}.name"), &json!(name), msg));
        }
        if !names.insert(name) {
            causes.push(duplicate(format!("{at}.name"), &json!(name)));
        }
    }
    port_num(&format!("{at}.port"), p.get("port"), causes);
    match set_at(Some(p), "/protocol") {
        None => causes.push(FieldCause::required(format!("{at}.protocol"))),
        Some(v) if v.as_str() == Some("") => causes.push(FieldCause::required(format!("{at}.protocol"))),
        Some(v) if !v.as_str().is_some_and(|s| PROTOCOLS.contains(&s)) => {
            causes.push(FieldCause::not_supported(format!("{at}.protocol"), v, PROTOCOLS));
        }
        Some(_) => {}
    }
    port_num_or_name(&format!("{at}.targetPort"), p.get("targetPort"), causes);
    if let Some(app) = set_at(Some(p), "/appProtocol") {
        let app = app.as_str().unwrap_or_default();
        for msg in qualified_name_errors(app) {
            causes.push(FieldCause::invalid(format!("{at}.appProtocol"), &json!(app), msg));
        }
    }
}

/// `validateClientIPAffinityConfig` (the defaulter has filled in a missing timeout).
fn client_ip_affinity(spec: Option<&Value>, causes: &mut Vec<FieldCause>) {
    const WHEN: &str = "when session affinity type is ClientIP";
    let path = "spec.sessionAffinityConfig";
    if set_at(spec, "/sessionAffinityConfig").is_none() {
        causes.push(required_because(path, WHEN));
    } else if set_at(spec, "/sessionAffinityConfig/clientIP").is_none() {
        causes.push(required_because(format!("{path}.clientIP"), WHEN));
    } else {
        match set_at(spec, "/sessionAffinityConfig/clientIP/timeoutSeconds") {
            None => causes.push(required_because(format!("{path}.clientIP.timeoutSeconds"), WHEN)),
            Some(v) if !v.as_i64().is_some_and(|n| n > 0 && n <= MAX_AFFINITY_SECONDS) => {
                causes.push(FieldCause::invalid(
                    format!("{path}.clientIP.timeoutSeconds"),
                    v,
                    format!("must be greater than 0 and less than {MAX_AFFINITY_SECONDS}"),
                ));
            }
            Some(_) => {}
        }
    }
}

/// The parts of `ValidateServiceClusterIPsRelatedFields` the sim's single-stack allocation can
/// meet: `clusterIP` and `clusterIPs` in step, families and policy values, at most two IPs.
fn cluster_ips_related(spec: Option<&Value>, ty: &str, headless: bool, causes: &mut Vec<FieldCause>) {
    if ty == "ExternalName" {
        return;
    }
    let cluster_ip = str_at(spec, "/clusterIP");
    let cluster_ips = array_at(spec, "/clusterIPs");
    let list = Value::Array(cluster_ips.to_vec());
    if !cluster_ip.is_empty() {
        if cluster_ips.is_empty() {
            causes.push(FieldCause::required("spec.clusterIPs"));
        } else if cluster_ips[0].as_str() != Some(cluster_ip) {
            causes.push(FieldCause::invalid(
                "spec.clusterIPs",
                &list,
                "first value must match `clusterIP`",
            ));
        }
    } else if !cluster_ips.is_empty() {
        causes.push(FieldCause::invalid(
            "spec.clusterIPs",
            &list,
            "must be empty when `clusterIP` is not specified",
        ));
    }
    let mut seen = HashSet::new();
    for (i, f) in array_at(spec, "/ipFamilies").iter().enumerate() {
        let at = format!("spec.ipFamilies[{i}]");
        if !f.as_str().is_some_and(|s| IP_FAMILIES.contains(&s)) {
            causes.push(FieldCause::not_supported(&at, f, IP_FAMILIES));
        }
        if !seen.insert(f.to_string()) {
            causes.push(duplicate(at, f));
        }
    }
    if let Some(p) = set_at(spec, "/ipFamilyPolicy")
        && !p.as_str().is_some_and(|s| IP_FAMILY_POLICIES.contains(&s))
    {
        causes.push(FieldCause::not_supported("spec.ipFamilyPolicy", p, IP_FAMILY_POLICIES));
    }
    if headless && cluster_ips.len() > 1 {
        causes.push(FieldCause::invalid(
            "spec.clusterIPs",
            &list,
            "'None' must be the first and only value",
        ));
    }
    if cluster_ips.len() > 2 {
        causes.push(FieldCause::invalid(
            "spec.clusterIPs",
            &list,
            "may only hold up to 2 values",
        ));
    }
}

/// `validateServiceExternalTrafficPolicy` (the policy is defaulted for externally accessible
/// Services; a needed `healthCheckNodePort` would be allocated, so only a set one is checked).
fn external_traffic_policy(spec: Option<&Value>, ty: &str, causes: &mut Vec<FieldCause>) {
    let externally_accessible =
        matches!(ty, "LoadBalancer" | "NodePort") || (ty == "ClusterIP" && !array_at(spec, "/externalIPs").is_empty());
    let policy = set_at(spec, "/externalTrafficPolicy").filter(|v| v.as_str() != Some(""));
    match policy {
        Some(v) if !externally_accessible => causes.push(FieldCause::invalid(
            "spec.externalTrafficPolicy",
            v,
            "may only be set for externally-accessible services",
        )),
        None if externally_accessible => causes.push(FieldCause::required("spec.externalTrafficPolicy")),
        Some(v) if !v.as_str().is_some_and(|s| TRAFFIC_POLICIES.contains(&s)) => {
            causes.push(FieldCause::not_supported(
                "spec.externalTrafficPolicy",
                v,
                TRAFFIC_POLICIES,
            ));
        }
        _ => {}
    }
    let needs_health_check = ty == "LoadBalancer" && str_at(spec, "/externalTrafficPolicy") == "Local";
    if let Some(hc) = set_at(spec, "/healthCheckNodePort").filter(|v| v.as_i64() != Some(0)) {
        if !needs_health_check {
            causes.push(FieldCause::invalid(
                "spec.healthCheckNodePort",
                hc,
                "may only be set when `type` is 'LoadBalancer' and `externalTrafficPolicy` is 'Local'",
            ));
        } else {
            port_num("spec.healthCheckNodePort", Some(hc), causes);
        }
    }
}

/// `ValidateEndpointIP` after `IsValidIPForLegacyField`, for `externalIPs`.
fn endpoint_ip(field: &str, ip: &Value, causes: &mut Vec<FieldCause>) {
    let s = ip.as_str().unwrap_or_default();
    let Ok(addr) = s.parse::<IpAddr>() else {
        causes.push(FieldCause::invalid(
            field,
            &json!(s),
            "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)",
        ));
        return;
    };
    let (link_local, link_local_multicast) = match addr {
        IpAddr::V4(a) => (a.is_link_local(), a.octets()[..3] == [224, 0, 0]),
        IpAddr::V6(a) => {
            let seg = a.segments()[0];
            (seg & 0xffc0 == 0xfe80, seg & 0xff0f == 0xff02)
        }
    };
    if addr.is_unspecified() {
        causes.push(FieldCause::invalid(
            field,
            &json!(s),
            format!("may not be unspecified ({s})"),
        ));
    }
    if addr.is_loopback() {
        causes.push(FieldCause::invalid(
            field,
            &json!(s),
            "may not be in the loopback range (127.0.0.0/8, ::1/128)",
        ));
    }
    if link_local {
        causes.push(FieldCause::invalid(
            field,
            &json!(s),
            "may not be in the link-local range (169.254.0.0/16, fe80::/10)",
        ));
    }
    if link_local_multicast {
        causes.push(FieldCause::invalid(
            field,
            &json!(s),
            "may not be in the link-local multicast range (224.0.0.0/24, ff02::/10)",
        ));
    }
}

/// An address and a prefix length that fits it.
fn is_cidr(s: &str) -> bool {
    let Some((ip, bits)) = s.split_once('/') else {
        return false;
    };
    let (Ok(ip), Ok(bits)) = (ip.parse::<IpAddr>(), bits.parse::<u8>()) else {
        return false;
    };
    bits <= if ip.is_ipv4() { 32 } else { 128 }
}

/// `validateUpgradeDowngradeClusterIPs`: a cluster IP, once set, stays (a secondary one may
/// come or go).
fn upgrade_downgrade_cluster_ips(old: &Value, new: &Value, causes: &mut Vec<FieldCause>) {
    let (o, n) = (old.get("spec"), new.get("spec"));
    if str_at(o, "/type") == "ExternalName" || str_at(n, "/type") == "ExternalName" {
        return;
    }
    let (old_ips, new_ips) = (array_at(o, "/clusterIPs"), array_at(n, "/clusterIPs"));
    let headless = |ips: &[Value]| ips.first().and_then(Value::as_str) == Some("None");
    if headless(old_ips) && headless(new_ips) {
        return;
    }
    let list = Value::Array(new_ips.to_vec());
    let changed = "may not change once set";
    if old_ips.len() == new_ips.len() {
        for (i, ip) in old_ips.iter().enumerate() {
            if Some(ip) != new_ips.get(i) {
                causes.push(FieldCause::invalid(format!("spec.clusterIPs[{i}]"), &list, changed));
            }
        }
    } else if old_ips.len() > new_ips.len() {
        if new_ips.is_empty() {
            causes.push(FieldCause::invalid(
                "spec.clusterIPs[0]",
                &list,
                "primary clusterIP can not be unset",
            ));
        } else if new_ips[0] != old_ips[0] {
            causes.push(FieldCause::invalid("spec.clusterIPs[0]", &list, changed));
        }
        if new_ips.len() == 1 && str_at(n, "/ipFamilyPolicy") != "SingleStack" {
            causes.push(FieldCause::invalid(
                "spec.ipFamilyPolicy",
                set_at(n, "/ipFamilyPolicy").unwrap_or(&Value::Null),
                "must be set to 'SingleStack' when releasing the secondary clusterIP",
            ));
        }
    } else if !old_ips.is_empty() && new_ips[0] != old_ips[0] {
        causes.push(FieldCause::invalid("spec.clusterIPs[0]", &list, changed));
    }
}
