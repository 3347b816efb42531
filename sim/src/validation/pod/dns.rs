//! `dnsPolicy` (`validateDNSPolicy`) and `dnsConfig` (`validatePodDNSConfig`): `None` needs a
//! config with at least one nameserver; at most 3 nameservers, each an IP address (strictly
//! parsed: StrictIPCIDRValidation is on in 1.37), at most 32 search domains of at most 2048
//! characters in all, each a DNS subdomain (underscores allowed), options named.

use std::net::IpAddr;

use serde_json::Value;

use super::{array_of, check_enum, required, set, str_of};
use crate::status::FieldCause;

const DNS_POLICIES: &[&str] = &["ClusterFirstWithHostNet", "ClusterFirst", "Default", "None"];
const IP_MSG: &str = "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)";

pub(super) fn dns_policy(path: &str, spec: &Value, causes: &mut Vec<FieldCause>) {
    check_enum(
        format!("{path}.dnsPolicy"),
        set(spec, "dnsPolicy"),
        DNS_POLICIES,
        causes,
    );
}

/// `ValidateDNS1123SubdomainWithUnderScore`: a subdomain whose labels may hold `_`.
fn subdomain_with_underscore_ok(s: &str) -> bool {
    s.len() <= 253
        && !s.is_empty()
        && s.split('.').all(|label| {
            let b = label.strip_prefix('_').unwrap_or(label).as_bytes();
            let alnum = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit();
            !b.is_empty()
                && alnum(&b[0])
                && alnum(&b[b.len() - 1])
                && b.iter().all(|c| alnum(c) || matches!(c, b'-' | b'_'))
        })
}

pub(super) fn dns_config(path: &str, spec: &Value, causes: &mut Vec<FieldCause>) {
    let at = format!("{path}.dnsConfig");
    let config = set(spec, "dnsConfig");
    if str_of(spec, "dnsPolicy") == "None" {
        let Some(config) = config else {
            causes.push(required(&at, "must provide `dnsConfig` when `dnsPolicy` is None"));
            return;
        };
        if array_of(Some(config), "nameservers").is_empty() {
            causes.push(required(
                format!("{at}.nameservers"),
                "must provide at least one DNS nameserver when `dnsPolicy` is None",
            ));
            return;
        }
    }
    let Some(config) = config else { return };
    let nameservers = array_of(Some(config), "nameservers");
    if nameservers.len() > 3 {
        causes.push(FieldCause::invalid(
            format!("{at}.nameservers"),
            &Value::Array(nameservers.to_vec()),
            "must not have more than 3 nameservers",
        ));
    }
    for (i, ns) in nameservers.iter().enumerate() {
        let field = format!("{at}.nameservers[{i}]");
        match ns.as_str().unwrap_or_default().parse::<IpAddr>() {
            Err(_) => causes.push(FieldCause::invalid(field, ns, IP_MSG)),
            Ok(IpAddr::V6(v6)) if v6.to_ipv4_mapped().is_some() => {
                causes.push(FieldCause::invalid(
                    field,
                    ns,
                    "must not be an IPv4-mapped IPv6 address",
                ));
            }
            Ok(_) => {}
        }
    }
    let searches = array_of(Some(config), "searches");
    if searches.len() > 32 {
        causes.push(FieldCause::invalid(
            format!("{at}.searches"),
            &Value::Array(searches.to_vec()),
            "must not have more than 32 search paths",
        ));
    }
    let joined: Vec<&str> = searches.iter().map(|s| s.as_str().unwrap_or_default()).collect();
    if joined.join(" ").len() > 2048 {
        causes.push(FieldCause::invalid(
            format!("{at}.searches"),
            &Value::Array(searches.to_vec()),
            "must not have more than 2048 characters (including spaces) in the search list",
        ));
    }
    for (i, search) in joined.iter().enumerate() {
        if *search == "." {
            continue;
        }
        let trimmed = search.strip_suffix('.').unwrap_or(search);
        if !subdomain_with_underscore_ok(trimmed) {
            causes.push(FieldCause::invalid(
                format!("{at}.searches[{i}]"),
                &Value::String(trimmed.into()),
                "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '_?[a-z0-9]([-_a-z0-9]*[a-z0-9])?(\\._?[a-z0-9]([-_a-z0-9]*[a-z0-9])?)*')",
            ));
        }
    }
    for (i, option) in array_of(Some(config), "options").iter().enumerate() {
        if str_of(option, "name").is_empty() {
            causes.push(required(format!("{at}.options[{i}]"), "must not be empty"));
        }
    }
}
