//! The scheduler's filter plugins, in the default profile's order, with their exact reasons:
//! NodeUnschedulable, TaintToleration, NodeAffinity (nodeSelector and required node affinity)
//! and NodeResourcesFit; and the `FitError` message built from them.

use std::collections::BTreeMap;

use serde_json::Value;

use super::quantity::{parse_milli, parse_units};

/// What a pod asks for (cpu in millicores, the rest in units) or a node offers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Resources {
    pub cpu: i128,
    pub memory: i128,
    pub pods: i128,
    /// Extended resources (`nvidia.com/gpu`, ...), in units.
    pub other: BTreeMap<String, i128>,
}

impl Resources {
    pub fn add(&mut self, o: &Resources) {
        self.cpu += o.cpu;
        self.memory += o.memory;
        self.pods += o.pods;
        for (k, v) in &o.other {
            *self.other.entry(k.clone()).or_default() += v;
        }
    }

    pub fn sub(&mut self, o: &Resources) {
        self.cpu -= o.cpu;
        self.memory -= o.memory;
        self.pods -= o.pods;
        for (k, v) in &o.other {
            *self.other.entry(k.clone()).or_default() -= v;
        }
    }

    fn max(&mut self, o: &Resources) {
        self.cpu = self.cpu.max(o.cpu);
        self.memory = self.memory.max(o.memory);
        for (k, v) in &o.other {
            let e = self.other.entry(k.clone()).or_default();
            *e = (*e).max(*v);
        }
    }

    /// A node's `status.allocatable`.
    pub fn from_allocatable(node: &Value) -> Self {
        let mut r = Resources::default();
        for (k, v) in node
            .pointer("/status/allocatable")
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
        {
            let Some(s) = v.as_str() else { continue };
            match k.as_str() {
                "cpu" => r.cpu = parse_milli(s).unwrap_or(0),
                "memory" => r.memory = parse_units(s).unwrap_or(0),
                "pods" => r.pods = parse_units(s).unwrap_or(0),
                "ephemeral-storage" => {}
                other if other.starts_with("hugepages-") => {}
                other => {
                    r.other.insert(other.to_string(), parse_units(s).unwrap_or(0));
                }
            }
        }
        r
    }
}

/// One container's requests; a limit without a request counts as the request, as the
/// apiserver's defaulting makes it.
fn container_requests(c: &Value) -> Resources {
    let mut r = Resources::default();
    let requests = c.pointer("/resources/requests").and_then(Value::as_object);
    let limits = c.pointer("/resources/limits").and_then(Value::as_object);
    let mut names: Vec<&String> = requests.into_iter().flatten().map(|(k, _)| k).collect();
    names.extend(limits.into_iter().flatten().map(|(k, _)| k));
    for name in names {
        let v = requests
            .and_then(|m| m.get(name))
            .or_else(|| limits.and_then(|m| m.get(name)));
        let Some(s) = v.and_then(Value::as_str) else { continue };
        match name.as_str() {
            "cpu" => r.cpu = parse_milli(s).unwrap_or(0),
            "memory" => r.memory = parse_units(s).unwrap_or(0),
            "ephemeral-storage" => {}
            other if other.starts_with("hugepages-") => {}
            other => {
                r.other.insert(other.to_string(), parse_units(s).unwrap_or(0));
            }
        }
    }
    r
}

/// The pod's effective requests: containers (and sidecars) summed, at least the largest
/// regular init container, plus the pod overhead; one pod slot. `nonzero` applies the
/// scheduler's scoring defaults (100m CPU, 200Mi) to containers that request nothing.
pub(crate) fn pod_requests(pod: &Value, nonzero: bool) -> Resources {
    let list = |f: &str| {
        pod.pointer(&format!("/spec/{f}"))
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
    };
    let with_defaults = |mut r: Resources| {
        if nonzero {
            if r.cpu == 0 {
                r.cpu = 100;
            }
            if r.memory == 0 {
                r.memory = 200 * 1024 * 1024;
            }
        }
        r
    };
    let mut sum = Resources::default();
    for c in list("containers") {
        sum.add(&with_defaults(container_requests(&c)));
    }
    let mut init_max = Resources::default();
    for c in list("initContainers") {
        let r = with_defaults(container_requests(&c));
        if c.get("restartPolicy").and_then(Value::as_str) == Some("Always") {
            sum.add(&r);
        } else {
            init_max.max(&r);
        }
    }
    sum.max(&init_max);
    if let Some(overhead) = pod.pointer("/spec/overhead") {
        sum.add(&container_requests(
            &serde_json::json!({ "resources": { "requests": overhead } }),
        ));
    }
    sum.pods = 1;
    sum
}

/// Why a node does not fit, and whether preemption could help.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Misfit {
    pub reasons: Vec<String>,
    /// Resources: evicting lower-priority pods could make room. Everything else: it cannot.
    pub resolvable: bool,
}

fn tolerates(tolerations: &[Value], key: &str, value: &str, effect: &str) -> bool {
    tolerations.iter().any(|t| {
        let t_effect = t.get("effect").and_then(Value::as_str).unwrap_or("");
        let t_key = t.get("key").and_then(Value::as_str).unwrap_or("");
        if !t_effect.is_empty() && t_effect != effect {
            return false;
        }
        match t.get("operator").and_then(Value::as_str).unwrap_or("Equal") {
            "Exists" => t_key.is_empty() || t_key == key,
            _ => t_key == key && t.get("value").and_then(Value::as_str).unwrap_or("") == value,
        }
    })
}

/// The first NoSchedule/NoExecute taint of `node` the pod does not tolerate.
pub(crate) fn untolerated_taint(pod: &Value, node: &Value, effects: &[&str]) -> Option<(String, String, String)> {
    let tolerations = pod
        .pointer("/spec/tolerations")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    node.pointer("/spec/taints")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .find_map(|t| {
            let key = t.get("key").and_then(Value::as_str).unwrap_or("");
            let value = t.get("value").and_then(Value::as_str).unwrap_or("");
            let effect = t.get("effect").and_then(Value::as_str).unwrap_or("");
            (effects.contains(&effect) && !tolerates(&tolerations, key, value, effect))
                .then(|| (key.to_string(), value.to_string(), effect.to_string()))
        })
}

/// The pod's toleration of a taint, if any (for NoExecute eviction timing).
pub(crate) fn toleration_for<'a>(pod: &'a Value, key: &str, effect: &str) -> Option<&'a Value> {
    pod.pointer("/spec/tolerations")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .find(|t| tolerates(std::slice::from_ref(*t), key, "", effect))
}

fn expression_matches(expr: &Value, value: Option<&str>) -> bool {
    let values: Vec<&str> = expr
        .get("values")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    match expr.get("operator").and_then(Value::as_str).unwrap_or("") {
        "In" => value.is_some_and(|v| values.contains(&v)),
        "NotIn" => value.is_none_or(|v| !values.contains(&v)),
        "Exists" => value.is_some(),
        "DoesNotExist" => value.is_none(),
        op @ ("Gt" | "Lt") => {
            let (Some(v), Some(bound)) = (
                value.and_then(|v| v.parse::<i64>().ok()),
                values.first().and_then(|b| b.parse::<i64>().ok()),
            ) else {
                return false;
            };
            if op == "Gt" { v > bound } else { v < bound }
        }
        _ => false,
    }
}

fn term_matches(term: &Value, node: &Value) -> bool {
    let exprs = term.get("matchExpressions").and_then(Value::as_array);
    let fields = term.get("matchFields").and_then(Value::as_array);
    if exprs.is_none_or(|e| e.is_empty()) && fields.is_none_or(|f| f.is_empty()) {
        return false;
    }
    let labels = node.pointer("/metadata/labels");
    exprs.into_iter().flatten().all(|e| {
        let key = e.get("key").and_then(Value::as_str).unwrap_or("");
        expression_matches(e, labels.and_then(|l| l.get(key)).and_then(Value::as_str))
    }) && fields.into_iter().flatten().all(|e| {
        let key = e.get("key").and_then(Value::as_str).unwrap_or("");
        let v = if key == "metadata.name" {
            Some(crate::meta::name(node))
        } else {
            None
        };
        expression_matches(e, v)
    })
}

/// nodeSelector and requiredDuringSchedulingIgnoredDuringExecution.
pub(crate) fn affinity_matches(pod: &Value, node: &Value) -> bool {
    let labels = node.pointer("/metadata/labels");
    let selector_ok = pod
        .pointer("/spec/nodeSelector")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .all(|(k, v)| labels.and_then(|l| l.get(k)) == Some(v));
    if !selector_ok {
        return false;
    }
    match pod.pointer("/spec/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution/nodeSelectorTerms") {
        Some(Value::Array(terms)) => terms.iter().any(|t| term_matches(t, node)),
        _ => true,
    }
}

/// Runs the filters on one node; None when the pod fits.
pub(crate) fn filter(pod: &Value, node: &Value, request: &Resources, free: &Resources) -> Option<Misfit> {
    let unresolvable = |r: String| {
        Some(Misfit {
            reasons: vec![r],
            resolvable: false,
        })
    };
    let tolerations = pod
        .pointer("/spec/tolerations")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if node.pointer("/spec/unschedulable").and_then(Value::as_bool) == Some(true)
        && !tolerates(&tolerations, "node.kubernetes.io/unschedulable", "", "NoSchedule")
    {
        return unresolvable("node(s) were unschedulable".into());
    }
    if let Some((key, value, _)) = untolerated_taint(pod, node, &["NoSchedule", "NoExecute"]) {
        return unresolvable(format!("node(s) had untolerated taint {{{key}: {value}}}"));
    }
    if !affinity_matches(pod, node) {
        return unresolvable("node(s) didn't match Pod's node affinity/selector".into());
    }
    let mut reasons = Vec::new();
    if request.pods > free.pods {
        reasons.push("Too many pods".to_string());
    }
    if request.cpu > 0 && request.cpu > free.cpu {
        reasons.push("Insufficient cpu".to_string());
    }
    if request.memory > 0 && request.memory > free.memory {
        reasons.push("Insufficient memory".to_string());
    }
    for (name, want) in &request.other {
        if *want > 0 && *want > free.other.get(name).copied().unwrap_or(0) {
            reasons.push(format!("Insufficient {name}"));
        }
    }
    (!reasons.is_empty()).then_some(Misfit {
        reasons,
        resolvable: true,
    })
}

/// `FitError.Error()` plus the DefaultPreemption post-filter message, as 1.33 writes them:
/// `0/3 nodes are available: 1 Insufficient cpu, 2 node(s) had untolerated taint {k: v}.
/// preemption: 0/3 nodes are available: 1 No preemption victims found for incoming pod, 2
/// Preemption is not helpful for scheduling.`
pub(crate) fn fit_error(total: usize, misfits: &[Misfit]) -> String {
    let histogram = |items: Vec<String>| {
        let mut counts: BTreeMap<String, usize> = BTreeMap::new();
        for i in items {
            *counts.entry(i).or_default() += 1;
        }
        let mut out: Vec<String> = counts.into_iter().map(|(r, n)| format!("{n} {r}")).collect();
        out.sort();
        out.join(", ")
    };
    let reasons = histogram(misfits.iter().flat_map(|m| m.reasons.clone()).collect());
    let preemption = histogram(
        misfits
            .iter()
            .map(|m| {
                if m.resolvable {
                    "No preemption victims found for incoming pod"
                } else {
                    "Preemption is not helpful for scheduling"
                }
                .to_string()
            })
            .collect(),
    );
    format!("0/{total} nodes are available: {reasons}. preemption: 0/{total} nodes are available: {preemption}.")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn taints_tolerations_and_affinity() {
        let node = json!({ "metadata": { "name": "n1", "labels": { "zone": "a", "size": "8" } },
                           "spec": { "taints": [{ "key": "dedicated", "value": "spark", "effect": "NoSchedule" }] } });
        let plain = json!({ "spec": {} });
        assert_eq!(
            untolerated_taint(&plain, &node, &["NoSchedule"]).map(|t| t.0),
            Some("dedicated".into())
        );
        let tolerant = json!({ "spec": { "tolerations": [{ "key": "dedicated", "operator": "Equal", "value": "spark", "effect": "NoSchedule" }] } });
        assert!(untolerated_taint(&tolerant, &node, &["NoSchedule"]).is_none());
        let all = json!({ "spec": { "tolerations": [{ "operator": "Exists" }] } });
        assert!(untolerated_taint(&all, &node, &["NoSchedule"]).is_none());
        let aff = |op: &str, values: Value| {
            json!({ "spec": { "affinity": { "nodeAffinity": { "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{ "matchExpressions": [{ "key": "size", "operator": op, "values": values }] }] } } } } })
        };
        assert!(affinity_matches(&aff("In", json!(["8"])), &node));
        assert!(!affinity_matches(&aff("NotIn", json!(["8"])), &node));
        assert!(affinity_matches(&aff("Gt", json!(["4"])), &node));
        assert!(!affinity_matches(
            &json!({ "spec": { "nodeSelector": { "zone": "b" } } }),
            &node
        ));
    }

    #[test]
    fn requests_and_messages() {
        let pod = json!({ "spec": {
            "containers": [{ "resources": { "requests": { "cpu": "500m", "memory": "1Gi" } } }, { "resources": { "limits": { "cpu": "1" } } }],
            "initContainers": [{ "resources": { "requests": { "cpu": "4" } } }]
        } });
        let r = pod_requests(&pod, false);
        assert_eq!((r.cpu, r.memory, r.pods), (4000, 1 << 30, 1));
        let misfits = vec![
            Misfit {
                reasons: vec!["Insufficient cpu".into()],
                resolvable: true,
            },
            Misfit {
                reasons: vec!["node(s) had untolerated taint {dedicated: spark}".into()],
                resolvable: false,
            },
            Misfit {
                reasons: vec!["node(s) had untolerated taint {dedicated: spark}".into()],
                resolvable: false,
            },
        ];
        assert_eq!(
            fit_error(3, &misfits),
            "0/3 nodes are available: 1 Insufficient cpu, 2 node(s) had untolerated taint {dedicated: spark}. preemption: 0/3 nodes are available: 1 No preemption victims found for incoming pod, 2 Preemption is not helpful for scheduling."
        );
    }
}
