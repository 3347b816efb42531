//! `meta.k8s.io/v1` Table output (what `kubectl get` asks for): the built-in printers' columns
//! for the common kinds, `additionalPrinterColumns` for custom resources, and the default
//! NAME / CREATED AT table for the rest.

use serde_json::{Value, json};

use crate::meta;
use crate::registry::{PrinterColumn, ResourceInfo};

/// What `includeObject` asks rows to carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IncludeObject {
    None,
    Metadata,
    Object,
}

impl IncludeObject {
    pub fn parse(s: Option<&str>) -> Self {
        match s {
            Some("None") => Self::None,
            Some("Object") => Self::Object,
            _ => Self::Metadata,
        }
    }
}

fn col(name: &str, type_: &str, format: &str, priority: i64, description: &str) -> Value {
    json!({ "name": name, "type": type_, "format": format, "description": description, "priority": priority })
}

const NAME_DESC: &str = "Name must be unique within a namespace. Is required when creating resources, although some resources may allow a client to request the generation of an appropriate name automatically. Name is primarily intended for creation idempotence and configuration definition. Cannot be updated. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names";
const AGE_DESC: &str = "CreationTimestamp is a timestamp representing the server time when this object was created. It is not guaranteed to be set in happens-before order across separate operations. Clients may not set this value. It is represented in RFC3339 form and is in UTC.\n\nPopulated by the system. Read-only. Null for lists. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata";

/// The columns of a resource's table.
pub fn columns(info: &ResourceInfo, version: &str) -> Vec<Value> {
    let name = || col("Name", "string", "name", 0, NAME_DESC);
    let age = || col("Age", "string", "", 0, AGE_DESC);
    if let Some(crd) = &info.crd {
        let mut cols = vec![name()];
        for c in crd_columns(crd.printer_columns.get(version)) {
            cols.push(col(&c.name, &c.type_, &c.format, c.priority, &c.description));
        }
        return cols;
    }
    let s = |n: &str| col(n, "string", "", 0, "");
    let wide = |n: &str| col(n, "string", "", 1, "");
    match (info.group.as_str(), info.resource.as_str()) {
        ("", "pods") => vec![
            name(),
            s("Ready"),
            s("Status"),
            col("Restarts", "string", "", 0, ""),
            age(),
            wide("IP"),
            wide("Node"),
            wide("Nominated Node"),
            wide("Readiness Gates"),
        ],
        ("", "namespaces") => vec![name(), s("Status"), age()],
        ("", "services") => vec![
            name(),
            s("Type"),
            s("Cluster-IP"),
            s("External-IP"),
            s("Port(s)"),
            age(),
            wide("Selector"),
        ],
        ("", "configmaps") => vec![name(), col("Data", "integer", "", 0, ""), age()],
        ("", "secrets") => vec![name(), s("Type"), col("Data", "integer", "", 0, ""), age()],
        ("", "serviceaccounts") => vec![name(), col("Secrets", "integer", "", 0, ""), age()],
        ("", "nodes") => vec![
            name(),
            s("Status"),
            s("Roles"),
            age(),
            s("Version"),
            wide("Internal-IP"),
            wide("External-IP"),
        ],
        ("", "events") | ("events.k8s.io", "events") => {
            vec![s("Last Seen"), s("Type"), s("Reason"), s("Object"), s("Message")]
        }
        ("apps", "deployments") => vec![
            name(),
            s("Ready"),
            col("Up-to-date", "integer", "", 0, ""),
            col("Available", "integer", "", 0, ""),
            age(),
            wide("Containers"),
            wide("Images"),
            wide("Selector"),
        ],
        ("apps", "daemonsets") => vec![
            name(),
            col("Desired", "integer", "", 0, ""),
            col("Current", "integer", "", 0, ""),
            col("Ready", "integer", "", 0, ""),
            col("Up-to-date", "integer", "", 0, ""),
            col("Available", "integer", "", 0, ""),
            s("Node Selector"),
            age(),
        ],
        ("coordination.k8s.io", "leases") => vec![name(), s("Holder"), age()],
        ("apps", "replicasets") => vec![
            name(),
            col("Desired", "integer", "", 0, ""),
            col("Current", "integer", "", 0, ""),
            col("Ready", "integer", "", 0, ""),
            age(),
        ],
        ("apps", "statefulsets") => vec![name(), s("Ready"), age()],
        ("batch", "jobs") => vec![name(), s("Status"), s("Completions"), s("Duration"), age()],
        ("batch", "cronjobs") => {
            vec![
                name(),
                s("Schedule"),
                s("Timezone"),
                s("Suspend"),
                col("Active", "integer", "", 0, ""),
                s("Last Schedule"),
                age(),
            ]
        }
        ("policy", "poddisruptionbudgets") => {
            vec![
                name(),
                s("Min Available"),
                s("Max Unavailable"),
                col("Allowed Disruptions", "integer", "", 0, ""),
                age(),
            ]
        }
        ("networking.k8s.io", "networkpolicies") => vec![name(), s("Pod-Selector"), age()],
        ("", "endpoints") => vec![name(), s("Endpoints"), age()],
        ("rbac.authorization.k8s.io", "rolebindings" | "clusterrolebindings") => vec![name(), s("Role"), age()],
        ("scheduling.k8s.io", "priorityclasses") => {
            vec![
                name(),
                col("Value", "integer", "", 0, ""),
                s("Global-Default"),
                age(),
                s("PreemptionPolicy"),
            ]
        }
        _ => vec![name(), col("Created At", "date", "", 0, AGE_DESC)],
    }
}

fn crd_columns(cols: Option<&Vec<PrinterColumn>>) -> Vec<PrinterColumn> {
    match cols {
        Some(c) if !c.is_empty() => c.clone(),
        // A CRD without printer columns shows its age, as the apiextensions table convertor does.
        _ => vec![PrinterColumn {
            name: "Age".into(),
            type_: "date".into(),
            format: String::new(),
            description: String::new(),
            priority: 0,
            json_path: ".metadata.creationTimestamp".into(),
        }],
    }
}

/// The cells of one object's row.
pub fn cells(info: &ResourceInfo, version: &str, obj: &Value) -> Vec<Value> {
    let name = json!(meta::name(obj));
    let age = json!(meta::age(meta::str_field(obj, "creationTimestamp")));
    let str_at = |p: &str| obj.pointer(p).and_then(Value::as_str).unwrap_or("").to_string();
    let count = |p: &str| {
        obj.pointer(p)
            .and_then(|v| v.as_object().map(|m| m.len()).or(v.as_array().map(Vec::len)))
            .unwrap_or(0)
    };
    let int = |p: &str| obj.pointer(p).and_then(Value::as_i64).unwrap_or(0);
    if let Some(crd) = &info.crd {
        let mut cells = vec![name];
        for c in crd_columns(crd.printer_columns.get(version)) {
            cells.push(crd_cell(&c, obj));
        }
        return cells;
    }
    match (info.group.as_str(), info.resource.as_str()) {
        ("", "pods") => {
            let statuses = obj
                .pointer("/status/containerStatuses")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            let total = obj
                .pointer("/spec/containers")
                .and_then(Value::as_array)
                .map_or(0, Vec::len);
            let ready = statuses
                .iter()
                .filter(|s| s.get("ready").and_then(Value::as_bool) == Some(true))
                .count();
            let restarts: i64 = statuses
                .iter()
                .filter_map(|s| s.get("restartCount").and_then(Value::as_i64))
                .sum();
            let ip = str_at("/status/podIP");
            let node = str_at("/spec/nodeName");
            let nominated = str_at("/status/nominatedNodeName");
            let or_none = |s: String| if s.is_empty() { "<none>".to_string() } else { s };
            vec![
                name,
                json!(format!("{ready}/{total}")),
                json!(pod_status(obj)),
                json!(restarts.to_string()),
                age,
                json!(or_none(ip)),
                json!(or_none(node)),
                json!(or_none(nominated)),
                json!("<none>"),
            ]
        }
        ("", "namespaces") => vec![name, json!(str_at("/status/phase")), age],
        ("", "services") => {
            let ports: Vec<String> = obj
                .pointer("/spec/ports")
                .and_then(Value::as_array)
                .map(|ps| {
                    ps.iter()
                        .map(|p| {
                            let port = p.get("port").and_then(Value::as_i64).unwrap_or(0);
                            let proto = p.get("protocol").and_then(Value::as_str).unwrap_or("TCP");
                            match p.get("nodePort").and_then(Value::as_i64) {
                                Some(np) => format!("{port}:{np}/{proto}"),
                                None => format!("{port}/{proto}"),
                            }
                        })
                        .collect()
                })
                .unwrap_or_default();
            let ports = if ports.is_empty() {
                "<none>".to_string()
            } else {
                ports.join(",")
            };
            let selector = obj
                .pointer("/spec/selector")
                .and_then(Value::as_object)
                .map(|m| {
                    m.iter()
                        .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or("")))
                        .collect::<Vec<_>>()
                        .join(",")
                })
                .filter(|s| !s.is_empty())
                .unwrap_or_else(|| "<none>".into());
            let external = obj
                .pointer("/spec/externalIPs")
                .and_then(Value::as_array)
                .map(|a| a.iter().filter_map(Value::as_str).collect::<Vec<_>>().join(","))
                .filter(|s| !s.is_empty())
                .unwrap_or_else(|| "<none>".into());
            vec![
                name,
                json!(str_at("/spec/type")),
                json!(str_at("/spec/clusterIP")),
                json!(external),
                json!(ports),
                age,
                json!(selector),
            ]
        }
        ("", "configmaps") => vec![name, json!(count("/data") + count("/binaryData")), age],
        ("", "secrets") => vec![name, json!(str_at("/type")), json!(count("/data")), age],
        ("", "serviceaccounts") => vec![name, json!(count("/secrets")), age],
        ("", "nodes") => {
            let ready = obj
                .pointer("/status/conditions")
                .and_then(Value::as_array)
                .and_then(|cs| {
                    cs.iter()
                        .find(|c| c.get("type").and_then(Value::as_str) == Some("Ready"))
                })
                .and_then(|c| c.get("status").and_then(Value::as_str));
            let mut status = match ready {
                Some("True") => "Ready".to_string(),
                _ => "NotReady".to_string(),
            };
            if obj.pointer("/spec/unschedulable").and_then(Value::as_bool) == Some(true) {
                status.push_str(",SchedulingDisabled");
            }
            let roles: Vec<String> = obj
                .pointer("/metadata/labels")
                .and_then(Value::as_object)
                .map(|l| {
                    l.keys()
                        .filter_map(|k| k.strip_prefix("node-role.kubernetes.io/"))
                        .map(str::to_string)
                        .collect()
                })
                .unwrap_or_default();
            let roles = if roles.is_empty() {
                "<none>".to_string()
            } else {
                roles.join(",")
            };
            let addr = |t: &str| {
                obj.pointer("/status/addresses")
                    .and_then(Value::as_array)
                    .and_then(|a| a.iter().find(|x| x.get("type").and_then(Value::as_str) == Some(t)))
                    .and_then(|x| x.get("address").and_then(Value::as_str))
                    .unwrap_or("<none>")
                    .to_string()
            };
            vec![
                name,
                json!(status),
                json!(roles),
                age,
                json!(str_at("/status/nodeInfo/kubeletVersion")),
                json!(addr("InternalIP")),
                json!(addr("ExternalIP")),
            ]
        }
        ("", "events") | ("events.k8s.io", "events") => {
            let core = info.group.is_empty();
            let regarding = if core { "/involvedObject" } else { "/regarding" };
            let last = [
                "/lastTimestamp",
                "/deprecatedLastTimestamp",
                "/eventTime",
                "/series/lastObservedTime",
                "/metadata/creationTimestamp",
            ]
            .iter()
            .find_map(|p| obj.pointer(p).and_then(Value::as_str).filter(|s| !s.is_empty()))
            .map(meta::age)
            .unwrap_or_else(|| "<unknown>".into());
            let object = format!(
                "{}/{}",
                str_at(&format!("{regarding}/kind")).to_lowercase(),
                str_at(&format!("{regarding}/name"))
            );
            let message = if core { str_at("/message") } else { str_at("/note") };
            vec![
                json!(last),
                json!(str_at("/type")),
                json!(str_at("/reason")),
                json!(object),
                json!(message),
            ]
        }
        ("apps", "deployments") => {
            let containers = obj
                .pointer("/spec/template/spec/containers")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            let names: Vec<&str> = containers
                .iter()
                .filter_map(|c| c.get("name").and_then(Value::as_str))
                .collect();
            let images: Vec<&str> = containers
                .iter()
                .filter_map(|c| c.get("image").and_then(Value::as_str))
                .collect();
            vec![
                name,
                json!(format!("{}/{}", int("/status/readyReplicas"), int("/spec/replicas"))),
                json!(int("/status/updatedReplicas")),
                json!(int("/status/availableReplicas")),
                age,
                json!(names.join(",")),
                json!(images.join(",")),
                json!(selector_string(obj.pointer("/spec/selector"))),
            ]
        }
        ("apps", "daemonsets") => {
            let selector = obj
                .pointer("/spec/template/spec/nodeSelector")
                .and_then(Value::as_object)
                .map(|m| {
                    m.iter()
                        .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or("")))
                        .collect::<Vec<_>>()
                        .join(",")
                })
                .filter(|s| !s.is_empty())
                .unwrap_or_else(|| "<none>".into());
            vec![
                name,
                json!(int("/status/desiredNumberScheduled")),
                json!(int("/status/currentNumberScheduled")),
                json!(int("/status/numberReady")),
                json!(int("/status/updatedNumberScheduled")),
                json!(int("/status/numberAvailable")),
                json!(selector),
                age,
            ]
        }
        ("coordination.k8s.io", "leases") => vec![name, json!(str_at("/spec/holderIdentity")), age],
        ("apps", "replicasets") => vec![
            name,
            json!(int("/spec/replicas")),
            json!(int("/status/replicas")),
            json!(int("/status/readyReplicas")),
            age,
        ],
        ("apps", "statefulsets") => {
            vec![
                name,
                json!(format!("{}/{}", int("/status/readyReplicas"), int("/spec/replicas"))),
                age,
            ]
        }
        ("batch", "jobs") => {
            let completions = match obj.pointer("/spec/completions").and_then(Value::as_i64) {
                Some(c) => format!("{}/{c}", int("/status/succeeded")),
                None => format!(
                    "{}/1 of {}",
                    int("/status/succeeded"),
                    obj.pointer("/spec/parallelism").and_then(Value::as_i64).unwrap_or(1)
                ),
            };
            let duration = match (
                meta::parse_time(&str_at("/status/startTime")),
                meta::parse_time(&str_at("/status/completionTime")).unwrap_or_else(jiff::Timestamp::now),
            ) {
                (Some(start), end) => meta::human_duration(std::time::Duration::from_secs(
                    end.duration_since(start).as_secs().max(0) as u64,
                )),
                (None, _) => String::new(),
            };
            vec![name, json!(job_status(obj)), json!(completions), json!(duration), age]
        }
        ("batch", "cronjobs") => {
            let last = str_at("/status/lastScheduleTime");
            let last = if last.is_empty() {
                "<none>".to_string()
            } else {
                meta::age(&last)
            };
            let tz = str_at("/spec/timeZone");
            vec![
                name,
                json!(str_at("/spec/schedule")),
                json!(if tz.is_empty() { "<none>".to_string() } else { tz }),
                json!(if obj.pointer("/spec/suspend").and_then(Value::as_bool) == Some(true) {
                    "True"
                } else {
                    "False"
                }),
                json!(count("/status/active")),
                json!(last),
                age,
            ]
        }
        ("policy", "poddisruptionbudgets") => {
            let show = |p: &str| {
                obj.pointer(p)
                    .map(|v| v.as_str().map(str::to_string).unwrap_or_else(|| v.to_string()))
                    .unwrap_or_else(|| "N/A".into())
            };
            vec![
                name,
                json!(show("/spec/minAvailable")),
                json!(show("/spec/maxUnavailable")),
                json!(int("/status/disruptionsAllowed")),
                age,
            ]
        }
        ("networking.k8s.io", "networkpolicies") => {
            let sel = selector_string(obj.pointer("/spec/podSelector"));
            vec![
                name,
                json!(if sel == "<none>" { "<none>".to_string() } else { sel }),
                age,
            ]
        }
        ("", "endpoints") => {
            let mut eps = Vec::new();
            for subset in obj.get("subsets").and_then(Value::as_array).into_iter().flatten() {
                let ports: Vec<i64> = subset
                    .get("ports")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter_map(|p| p.get("port").and_then(Value::as_i64))
                    .collect();
                for a in subset.get("addresses").and_then(Value::as_array).into_iter().flatten() {
                    let ip = a.get("ip").and_then(Value::as_str).unwrap_or("");
                    if ports.is_empty() {
                        eps.push(ip.to_string());
                    }
                    eps.extend(ports.iter().map(|p| format!("{ip}:{p}")));
                }
            }
            vec![
                name,
                json!(if eps.is_empty() {
                    "<none>".to_string()
                } else {
                    eps.join(",")
                }),
                age,
            ]
        }
        ("rbac.authorization.k8s.io", "rolebindings" | "clusterrolebindings") => {
            vec![
                name,
                json!(format!("{}/{}", str_at("/roleRef/kind"), str_at("/roleRef/name"))),
                age,
            ]
        }
        ("scheduling.k8s.io", "priorityclasses") => vec![
            name,
            json!(int("/value")),
            json!(obj.get("globalDefault").and_then(Value::as_bool).unwrap_or(false)),
            age,
            json!(str_at("/preemptionPolicy")),
        ],
        _ => vec![name, json!(meta::str_field(obj, "creationTimestamp"))],
    }
}

/// The STATUS column of `kubectl get jobs`: the last true terminal condition, else Running.
fn job_status(job: &Value) -> &'static str {
    let conditions = job
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let has = |t: &str| conditions.iter().any(|c| c["type"] == t && c["status"] == "True");
    if has("Complete") {
        "Complete"
    } else if has("Failed") {
        "Failed"
    } else if has("FailureTarget") {
        "FailureTarget"
    } else if has("SuccessCriteriaMet") {
        "SuccessCriteriaMet"
    } else if has("Suspended") {
        "Suspended"
    } else {
        "Running"
    }
}

fn selector_string(sel: Option<&Value>) -> String {
    let Some(labels) = sel.and_then(|s| s.get("matchLabels")).and_then(Value::as_object) else {
        return "<none>".into();
    };
    labels
        .iter()
        .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or("")))
        .collect::<Vec<_>>()
        .join(",")
}

/// The STATUS column of `kubectl get pods` (printPod in the apiserver's printers).
fn pod_status(pod: &Value) -> String {
    let mut reason = pod
        .pointer("/status/reason")
        .and_then(Value::as_str)
        .or_else(|| pod.pointer("/status/phase").and_then(Value::as_str))
        .unwrap_or("Unknown")
        .to_string();
    if let Some(statuses) = pod.pointer("/status/containerStatuses").and_then(Value::as_array) {
        for s in statuses.iter().rev() {
            if let Some(r) = s
                .pointer("/state/waiting/reason")
                .and_then(Value::as_str)
                .filter(|r| !r.is_empty())
            {
                reason = r.to_string();
            } else if let Some(r) = s
                .pointer("/state/terminated/reason")
                .and_then(Value::as_str)
                .filter(|r| !r.is_empty())
            {
                reason = r.to_string();
            } else if let Some(code) = s.pointer("/state/terminated/exitCode").and_then(Value::as_i64) {
                reason = match s
                    .pointer("/state/terminated/signal")
                    .and_then(Value::as_i64)
                    .filter(|s| *s != 0)
                {
                    Some(sig) => format!("Signal:{sig}"),
                    None => format!("ExitCode:{code}"),
                };
            }
        }
    }
    if meta::is_deleting(pod) {
        reason = if pod.pointer("/status/reason").and_then(Value::as_str) == Some("NodeLost") {
            "Unknown".into()
        } else {
            "Terminating".into()
        };
    }
    reason
}

fn crd_cell(c: &PrinterColumn, obj: &Value) -> Value {
    let Some(value) = json_path(obj, &c.json_path) else {
        return Value::Null;
    };
    match c.type_.as_str() {
        "integer" => value
            .as_i64()
            .or_else(|| value.as_f64().map(|f| f as i64))
            .map_or(Value::Null, |i| json!(i)),
        "number" => value.as_f64().map_or(Value::Null, |f| json!(f)),
        "boolean" => value.as_bool().map_or(Value::Null, |b| json!(b)),
        "date" => value.as_str().map_or(Value::Null, |s| match meta::parse_time(s) {
            Some(_) => json!(meta::age(s)),
            None => json!("<invalid>"),
        }),
        // Strings print as `fmt` prints the JSON value.
        _ => match value {
            Value::String(s) => json!(s),
            other => json!(other.to_string()),
        },
    }
}

/// The simple JSONPath subset printer columns use: `.a.b`, `.a[0].b`, `.a[?(@.k=="v")].b`.
pub fn json_path<'v>(obj: &'v Value, path: &str) -> Option<&'v Value> {
    let path = path
        .trim()
        .trim_start_matches('{')
        .trim_end_matches('}')
        .trim_start_matches('$');
    let mut cur = obj;
    let mut rest = path;
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix('.') {
            let end = r.find(['.', '[']).unwrap_or(r.len());
            let field = &r[..end];
            if !field.is_empty() {
                cur = cur.get(field)?;
            }
            rest = &r[end..];
        } else if let Some(r) = rest.strip_prefix('[') {
            let end = r.find(']')?;
            let inner = &r[..end];
            rest = &r[end + 1..];
            if let Some(filter) = inner.strip_prefix("?(@.").and_then(|f| f.strip_suffix(')')) {
                let (key, want) = filter.split_once("==")?;
                let want = want.trim().trim_matches(|c| c == '"' || c == '\'');
                cur = cur.as_array()?.iter().find(|item| {
                    item.get(key.trim()).is_some_and(|v| match v {
                        Value::String(s) => s == want,
                        other => serde_json::from_str::<Value>(want).ok().as_ref() == Some(other),
                    })
                })?;
            } else {
                let idx: usize = inner.trim().parse().ok()?;
                cur = cur.get(idx)?;
            }
        } else {
            return None;
        }
    }
    Some(cur)
}

/// A Table of objects.
pub fn table(
    info: &ResourceInfo,
    version: &str,
    objects: &[Value],
    include: IncludeObject,
    list_meta: Value,
    with_columns: bool,
) -> Value {
    let rows: Vec<Value> = objects
        .iter()
        .map(|o| {
            let mut row = json!({ "cells": cells(info, version, o) });
            match include {
                IncludeObject::None => {}
                IncludeObject::Metadata => {
                    row["object"] = json!({
                        "kind": "PartialObjectMetadata",
                        "apiVersion": "meta.k8s.io/v1",
                        "metadata": o.get("metadata").cloned().unwrap_or(json!({})),
                    });
                }
                IncludeObject::Object => row["object"] = o.clone(),
            }
            row
        })
        .collect();
    let mut t = json!({ "kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": list_meta, "rows": rows });
    if with_columns {
        t["columnDefinitions"] = json!(columns(info, version));
    } else {
        t["columnDefinitions"] = Value::Null;
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::{Gvr, Registry};

    #[test]
    fn json_paths() {
        let o = json!({ "status": { "conditions": [{ "type": "A", "status": "False" }, { "type": "Ready", "status": "True" }] }, "spec": { "l": [1, 2] } });
        assert_eq!(
            json_path(&o, ".status.conditions[?(@.type==\"Ready\")].status"),
            Some(&json!("True"))
        );
        assert_eq!(json_path(&o, ".spec.l[1]"), Some(&json!(2)));
        assert_eq!(json_path(&o, ".spec.missing"), None);
    }

    #[test]
    fn every_builtin_table_has_a_cell_per_column() {
        let reg = Registry::builtin();
        let obj = json!({ "metadata": { "name": "x", "creationTimestamp": "2024-01-01T00:00:00Z" } });
        for info in reg.all() {
            assert_eq!(
                columns(&info, "v1").len(),
                cells(&info, "v1", &obj).len(),
                "{}",
                info.resource
            );
        }
        let job = reg.lookup(&Gvr::new("batch", "v1", "jobs")).unwrap();
        let done = json!({ "metadata": { "name": "j" }, "spec": { "completions": 1 },
            "status": { "succeeded": 1, "conditions": [{ "type": "Complete", "status": "True" }] } });
        let c = cells(&job, "v1", &done);
        assert_eq!((c[1].clone(), c[2].clone()), (json!("Complete"), json!("1/1")));
    }

    #[test]
    fn pod_rows() {
        let reg = Registry::builtin();
        let info = reg.lookup(&Gvr::new("", "v1", "pods")).unwrap();
        let pod = json!({ "metadata": { "name": "p" }, "spec": { "containers": [{}, {}] },
            "status": { "phase": "Running", "containerStatuses": [{ "ready": true, "restartCount": 2 }, { "ready": false, "restartCount": 1, "state": { "waiting": { "reason": "CrashLoopBackOff" } } }] } });
        let c = cells(&info, "v1", &pod);
        assert_eq!(c[0], "p");
        assert_eq!(c[1], "1/2");
        assert_eq!(c[2], "CrashLoopBackOff");
        assert_eq!(c[3], "3");
        assert_eq!(columns(&info, "v1").len(), c.len());
    }
}
