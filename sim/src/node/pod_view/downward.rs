//! The downward API: pod fields (`fieldRef`) and container resources (`resourceFieldRef`) as
//! the kubelet renders them into env values and downward API files.

use serde_json::Value;

use super::ViewInput;
use crate::node::quantity;

/// `labels['k']` → ("labels", "k"), as `SplitMaybeSubscriptedPath`.
fn split_subscript(path: &str) -> Option<(&str, &str)> {
    let inner = path.strip_suffix("']")?;
    let (head, key) = inner.split_once("['")?;
    (!head.is_empty()).then_some((head, key))
}

fn string_map(pod: &Value, field: &str) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = pod
        .pointer(&format!("/metadata/{field}"))
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
        .collect();
    out.sort();
    out
}

/// Go's `%q` of a string: what `fieldpath.FormatMap` quotes values with.
fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\u{b}' => out.push_str("\\v"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => out.push_str(&format!("\\x{:02x}", c as u32)),
            c if c.is_control() => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// `k="v"` lines, sorted by key (`fieldpath.FormatMap`).
fn format_map(entries: &[(String, String)]) -> String {
    entries
        .iter()
        .map(|(k, v)| format!("{k}={}", go_quote(v)))
        .collect::<Vec<_>>()
        .join("\n")
}

/// A metadata field (`fieldpath.ExtractFieldPathAsString`): what downward API volumes offer.
pub(super) fn volume_field(pod: &Value, path: &str) -> Result<String, String> {
    if let Some((head, key)) = split_subscript(path) {
        return match head {
            "metadata.labels" | "metadata.annotations" => {
                let field = &head["metadata.".len()..];
                Ok(pod
                    .pointer(&format!("/metadata/{field}"))
                    .and_then(|m| m.get(key))
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string())
            }
            _ => Err(format!("fieldPath {path:?} does not support subscript")),
        };
    }
    match path {
        "metadata.annotations" => Ok(format_map(&string_map(pod, "annotations"))),
        "metadata.labels" => Ok(format_map(&string_map(pod, "labels"))),
        "metadata.name" => Ok(crate::meta::name(pod).to_string()),
        "metadata.namespace" => Ok(crate::meta::namespace(pod).to_string()),
        "metadata.uid" => Ok(crate::meta::uid(pod).to_string()),
        _ => Err(format!("unsupported fieldPath: {path}")),
    }
}

/// An env `fieldRef` (`podFieldSelectorRuntimeValue`): the node and IP fields, then metadata.
pub(super) fn env_field(input: &ViewInput<'_>, path: &str) -> Result<String, String> {
    let pod = input.pod;
    match path {
        "spec.nodeName" => Ok(pod
            .pointer("/spec/nodeName")
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty())
            .unwrap_or(input.node_name)
            .to_string()),
        "spec.serviceAccountName" => Ok(pod
            .pointer("/spec/serviceAccountName")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()),
        // One address each in the sim: the lists are that address.
        "status.hostIP" | "status.hostIPs" => Ok(input.host_ip.to_string()),
        "status.podIP" | "status.podIPs" => Ok(input.pod_ip.to_string()),
        _ => volume_field(pod, path),
    }
}

/// The container a `resourceFieldRef` names (`containerName`, else the current one).
fn find_container<'a>(input: &'a ViewInput<'_>, name: Option<&str>) -> Result<&'a Value, String> {
    let Some(name) = name.filter(|n| !n.is_empty()) else {
        return Ok(input.container);
    };
    ["containers", "initContainers"]
        .iter()
        .flat_map(|l| {
            input
                .pod
                .pointer(&format!("/spec/{l}"))
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
        })
        .find(|c| c.get("name").and_then(Value::as_str) == Some(name))
        .ok_or_else(|| format!("container {name:?} not found in pod {}", crate::meta::name(input.pod)))
}

/// The node's allocatable `resource`, what the kubelet puts in unset limits for the downward API.
fn allocatable(input: &ViewInput<'_>, resource: &str) -> Option<String> {
    let node = input.store.get_stored(
        &crate::registry::ResourceKey {
            group: String::new(),
            resource: "nodes".into(),
        },
        "",
        input.node_name,
    )?;
    node.pointer("/status/allocatable")
        .and_then(|a| a.get(resource))
        .and_then(Value::as_str)
        .map(str::to_string)
}

/// A `resourceFieldRef` (`ExtractContainerResourceValue`): the quantity divided by `divisor`
/// (default 1), rounded up. Unset limits are the node's allocatable; unset requests are the
/// explicit limit (the API's defaulting), else 0.
pub(super) fn resource_field(input: &ViewInput<'_>, container: Option<&str>, r: &Value) -> Result<String, String> {
    let container = find_container(input, container)?;
    let selector = r.get("resource").and_then(Value::as_str).unwrap_or("");
    let unsupported = || format!("unsupported container resource : {selector}");
    let (kind, resource) = selector.split_once('.').ok_or_else(unsupported)?;
    if !matches!(resource, "cpu" | "memory" | "ephemeral-storage") && !resource.starts_with("hugepages-") {
        return Err(unsupported());
    }
    let field = |k: &str| {
        container
            .pointer(&format!("/resources/{k}"))
            .and_then(|m| m.get(resource))
            .and_then(|v| match v {
                Value::String(s) => Some(s.clone()),
                Value::Number(n) => Some(n.to_string()),
                _ => None,
            })
    };
    let quantity = match kind {
        "limits" => field("limits").or_else(|| {
            // Hugepages have no allocatable default.
            (!resource.starts_with("hugepages-"))
                .then(|| allocatable(input, resource))
                .flatten()
        }),
        "requests" => field("requests").or_else(|| field("limits")),
        _ => return Err(unsupported()),
    }
    .unwrap_or_else(|| "0".into());
    let divisor = match r.get("divisor") {
        Some(Value::String(s)) if !s.is_empty() => s.clone(),
        Some(Value::Number(n)) => n.to_string(),
        _ => "1".into(),
    };
    let bad = |q: &str| format!("invalid quantity {q:?} for resource {selector}");
    let value = if resource == "cpu" {
        let v = quantity::parse_milli(&quantity).ok_or_else(|| bad(&quantity))?;
        let d = quantity::parse_milli(&divisor).ok_or_else(|| bad(&divisor))?;
        ceil_div(v, d).ok_or_else(|| bad(&divisor))?
    } else {
        let v = quantity::parse_units(&quantity).ok_or_else(|| bad(&quantity))?;
        let d = quantity::parse_units(&divisor).ok_or_else(|| bad(&divisor))?;
        ceil_div(v, d).ok_or_else(|| bad(&divisor))?
    };
    Ok(value.to_string())
}

fn ceil_div(v: i128, d: i128) -> Option<i128> {
    if d <= 0 {
        return None;
    }
    Some(if v >= 0 { (v + d - 1) / d } else { v / d })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quotes_like_go() {
        assert_eq!(go_quote("a\"b\\c\nd\té"), "\"a\\\"b\\\\c\\nd\\té\"");
        assert_eq!(go_quote("\u{1}"), "\"\\x01\"");
    }

    #[test]
    fn subscripts() {
        assert_eq!(
            split_subscript("metadata.labels['a.b/c']"),
            Some(("metadata.labels", "a.b/c"))
        );
        assert_eq!(split_subscript("['x']"), None);
        assert_eq!(split_subscript("metadata.name"), None);
    }
}
