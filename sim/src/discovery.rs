//! API discovery: `/version`, `/api`, `/apis`, `/apis/<group>`, the per-version resource lists,
//! and the aggregated form (`apidiscovery.k8s.io/v2` APIGroupDiscoveryList) kubectl 1.32 asks
//! for first.

use serde_json::{Value, json};

use crate::registry::{Registry, ResourceInfo, api_version};

/// The Kubernetes version the sim reports.
pub const GIT_VERSION: &str = "v1.33.1";

pub fn version() -> Value {
    json!({
        "major": "1",
        "minor": "33",
        "gitVersion": GIT_VERSION,
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "2025-05-15T00:00:00Z",
        "goVersion": "go1.24.2",
        "compiler": "gc",
        "platform": "linux/amd64"
    })
}

/// The media type of aggregated discovery responses.
pub const AGGREGATED_V2: &str = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";
pub const AGGREGATED_V2BETA1: &str = "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList";

/// Which aggregated discovery version an Accept header asks for first, if any.
pub fn wants_aggregated(accept: &str) -> Option<&'static str> {
    for part in accept.split(',') {
        let p: String = part.chars().filter(|c| !c.is_whitespace()).collect();
        if p.contains("as=APIGroupDiscoveryList") && p.contains("g=apidiscovery.k8s.io") {
            if p.contains("v=v2beta1") {
                return Some("v2beta1");
            }
            if p.contains("v=v2") {
                return Some("v2");
            }
        }
    }
    None
}

pub fn core_versions(server_address: &str) -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{ "clientCIDR": "0.0.0.0/0", "serverAddress": server_address }]
    })
}

fn group_entry(group: &str, versions: &[String]) -> Value {
    let vs: Vec<Value> = versions
        .iter()
        .map(|v| json!({ "groupVersion": api_version(group, v), "version": v }))
        .collect();
    let preferred = vs.first().cloned().unwrap_or(Value::Null);
    json!({ "name": group, "versions": vs, "preferredVersion": preferred })
}

pub fn groups(reg: &Registry) -> Value {
    let groups: Vec<Value> = reg
        .groups()
        .iter()
        .filter(|(g, _)| !g.is_empty())
        .map(|(g, vs)| group_entry(g, vs))
        .collect();
    json!({ "kind": "APIGroupList", "apiVersion": "v1", "groups": groups })
}

pub fn group(reg: &Registry, name: &str) -> Option<Value> {
    let (g, vs) = reg.groups().into_iter().find(|(g, _)| g == name && !g.is_empty())?;
    let mut v = group_entry(&g, &vs);
    v["kind"] = json!("APIGroup");
    v["apiVersion"] = json!("v1");
    Some(v)
}

/// Whether a resource has the API server's `proxy` subresource (pods, services, nodes).
pub fn has_proxy_subresource(group: &str, resource: &str) -> bool {
    group.is_empty() && matches!(resource, "pods" | "services" | "nodes")
}

/// (subresource, kind group, kind version, kind, verbs)
fn subresource_details(info: &ResourceInfo, sub: &str) -> (String, String, String, Vec<&'static str>) {
    let own = || (info.group.clone(), String::new(), info.kind.clone());
    let (g, v, k) = match sub {
        // Connect subresources answer with their options kind in the resource's own group.
        "proxy" => (info.group.clone(), String::new(), format!("{}ProxyOptions", info.kind)),
        "scale" => ("autoscaling".to_string(), "v1".to_string(), "Scale".to_string()),
        "binding" => (String::new(), "v1".into(), "Binding".into()),
        "eviction" => ("policy".into(), "v1".into(), "Eviction".into()),
        "token" => ("authentication.k8s.io".into(), "v1".into(), "TokenRequest".into()),
        _ => own(),
    };
    let verbs = match sub {
        "status" | "scale" | "ephemeralcontainers" => vec!["get", "patch", "update"],
        "log" => vec!["get"],
        "binding" | "eviction" | "token" => vec!["create"],
        "finalize" => vec!["update"],
        // The proxied methods as discovery names them (HEAD and OPTIONS have no verb of their own).
        "proxy" => vec!["create", "delete", "get", "patch", "update"],
        _ => vec!["get"],
    };
    (g, v, k, verbs)
}

fn subresources(info: &ResourceInfo) -> Vec<String> {
    let mut subs = Vec::new();
    if info.status_subresource {
        subs.push("status".to_string());
    }
    subs.extend(info.extra_subresources.iter().cloned());
    if has_proxy_subresource(&info.group, &info.resource) {
        subs.push("proxy".to_string());
    }
    subs
}

/// `APIResourceList` of one group/version.
pub fn resource_list(reg: &Registry, group: &str, version: &str) -> Option<Value> {
    let infos = reg.in_group_version(group, version);
    if infos.is_empty() {
        return None;
    }
    let mut resources = Vec::new();
    for info in &infos {
        let mut r = json!({
            "name": info.resource,
            "singularName": info.singular,
            "namespaced": info.namespaced,
            "kind": info.kind,
            "verbs": info.verbs(),
        });
        if !info.short_names.is_empty() {
            r["shortNames"] = json!(info.short_names);
        }
        if !info.categories.is_empty() {
            r["categories"] = json!(info.categories);
        }
        resources.push(r);
        for sub in subresources(info) {
            let (g, v, k, verbs) = subresource_details(info, &sub);
            let mut s = json!({ "name": format!("{}/{sub}", info.resource), "singularName": "", "namespaced": info.namespaced, "kind": k, "verbs": verbs });
            if !v.is_empty() {
                s["group"] = json!(g);
                s["version"] = json!(v);
            }
            resources.push(s);
        }
    }
    Some(
        json!({ "kind": "APIResourceList", "apiVersion": "v1", "groupVersion": api_version(group, version), "resources": resources }),
    )
}

fn resource_discovery(info: &ResourceInfo, version: &str) -> Value {
    let mut r = json!({
        "resource": info.resource,
        "responseKind": { "group": info.group, "version": version, "kind": info.kind },
        "scope": if info.namespaced { "Namespaced" } else { "Cluster" },
        "singularResource": info.singular,
        "verbs": info.verbs(),
    });
    if !info.short_names.is_empty() {
        r["shortNames"] = json!(info.short_names);
    }
    if !info.categories.is_empty() {
        r["categories"] = json!(info.categories);
    }
    let subs: Vec<Value> = subresources(info)
        .iter()
        .map(|sub| {
            let (g, v, k, verbs) = subresource_details(info, sub);
            let v = if v.is_empty() { version.to_string() } else { v };
            json!({ "subresource": sub, "responseKind": { "group": g, "version": v, "kind": k }, "verbs": verbs })
        })
        .collect();
    if !subs.is_empty() {
        r["subresources"] = json!(subs);
    }
    r
}

/// The aggregated discovery document for `/api` (core = true) or `/apis`.
pub fn aggregated(reg: &Registry, core: bool, api_version_str: &str) -> Value {
    let mut items = Vec::new();
    for (group, versions) in reg.groups() {
        if group.is_empty() != core {
            continue;
        }
        let vs: Vec<Value> = versions
            .iter()
            .map(|v| {
                let resources: Vec<Value> = reg
                    .in_group_version(&group, v)
                    .iter()
                    .map(|i| resource_discovery(i, v))
                    .collect();
                json!({ "version": v, "resources": resources, "freshness": "Current" })
            })
            .collect();
        let metadata = if group.is_empty() {
            json!({ "creationTimestamp": null })
        } else {
            json!({ "name": group, "creationTimestamp": null })
        };
        items.push(json!({ "metadata": metadata, "versions": vs }));
    }
    json!({
        "kind": "APIGroupDiscoveryList",
        "apiVersion": format!("apidiscovery.k8s.io/{api_version_str}"),
        "metadata": {},
        "items": items
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn discovery_documents() {
        let reg = Registry::builtin();
        let core = resource_list(&reg, "", "v1").unwrap();
        let names: Vec<&str> = core["resources"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["name"].as_str().unwrap())
            .collect();
        assert!(names.contains(&"pods") && names.contains(&"pods/status") && names.contains(&"namespaces/finalize"));
        for proxied in ["pods/proxy", "services/proxy", "nodes/proxy"] {
            assert!(names.contains(&proxied), "{proxied} in {names:?}");
        }
        let pod_proxy = core["resources"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["name"] == "pods/proxy")
            .unwrap();
        assert_eq!(pod_proxy["kind"], "PodProxyOptions");
        assert_eq!(
            pod_proxy["verbs"],
            json!(["create", "delete", "get", "patch", "update"])
        );
        assert!(pod_proxy.get("version").is_none());
        assert!(!names.contains(&"configmaps/proxy"));
        let core_agg = aggregated(&reg, true, "v2");
        let pods = core_agg["items"][0]["versions"][0]["resources"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["resource"] == "pods")
            .unwrap();
        let proxy = pods["subresources"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["subresource"] == "proxy")
            .unwrap();
        assert_eq!(proxy["responseKind"]["kind"], "PodProxyOptions");
        assert_eq!(proxy["verbs"], json!(["create", "delete", "get", "patch", "update"]));
        let groups = groups(&reg);
        assert!(groups["groups"].as_array().unwrap().iter().any(|g| g["name"] == "apps"));
        let agg = aggregated(&reg, false, "v2");
        assert!(
            agg["items"]
                .as_array()
                .unwrap()
                .iter()
                .any(|g| g["metadata"]["name"] == "coordination.k8s.io")
        );
        assert_eq!(
            wants_aggregated("application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json"),
            Some("v2")
        );
        assert_eq!(wants_aggregated("application/json"), None);
    }
}
