//! A container's environment as the kubelet's `makeEnvironmentVariables` builds it: service
//! links, then `envFrom`, then `env` (with `$(VAR)` expansion and `valueFrom`). Variables set by
//! `envFrom`/`env` win over service links of the same name.

use std::collections::BTreeMap;

use serde_json::Value;

use super::{ViewError, ViewInput, downward};
use crate::node::expand;
use crate::node::refs::Source;
use crate::registry::Gvr;
use crate::store::ListOptions;

/// The master service every pod gets links to, whatever `enableServiceLinks` says.
const MASTER_SERVICE: &str = "kubernetes";

/// An insertion-ordered map: a name set again keeps its first position and takes the new value.
#[derive(Default)]
struct OrderedEnv {
    entries: Vec<(String, String)>,
}

impl OrderedEnv {
    fn set(&mut self, name: String, value: String) {
        match self.entries.iter_mut().find(|(n, _)| *n == name) {
            Some(entry) => entry.1 = value,
            None => self.entries.push((name, value)),
        }
    }

    fn get(&self, name: &str) -> Option<&str> {
        self.entries.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }
}

/// The environment, service links first.
pub(super) fn environment(input: &ViewInput<'_>) -> Result<Vec<(String, String)>, ViewError> {
    let service_env = service_links(input);
    let ns = crate::meta::namespace(input.pod);
    let container = input.container;
    let mut env = OrderedEnv::default();

    for from in container.get("envFrom").and_then(Value::as_array).into_iter().flatten() {
        let prefix = from.get("prefix").and_then(Value::as_str).unwrap_or("");
        for (field, source) in [("configMapRef", Source::ConfigMap), ("secretRef", Source::Secret)] {
            let Some(r) = from.get(field) else { continue };
            let name = r.get("name").and_then(Value::as_str).unwrap_or("");
            let Some(obj) = source.get(input.store, ns, name) else {
                if optional(r) {
                    continue;
                }
                return Err(ViewError::Config(source.not_found(name)));
            };
            for (key, data) in source.env_contents(&obj) {
                let var = format!("{prefix}{key}");
                // The kubelet skips (with an event) keys that are not valid variable names.
                if !valid_env_name(&var) {
                    continue;
                }
                env.set(var, String::from_utf8_lossy(&data).into_owned());
            }
        }
    }

    for var in container.get("env").and_then(Value::as_array).into_iter().flatten() {
        let Some(name) = var.get("name").and_then(Value::as_str) else {
            continue;
        };
        let literal = var.get("value").and_then(Value::as_str).unwrap_or("");
        let value = if !literal.is_empty() {
            expand::expand(literal, |n| {
                env.get(n)
                    .or_else(|| service_env.iter().find(|(k, _)| k == n).map(|(_, v)| v.as_str()))
            })
        } else if let Some(from) = var.get("valueFrom") {
            match value_from(input, from)? {
                Some(v) => v,
                // An optional reference to something absent sets nothing.
                None => continue,
            }
        } else {
            String::new()
        };
        env.set(name.to_string(), value);
    }

    let mut out: Vec<(String, String)> = service_env.into_iter().filter(|(k, _)| env.get(k).is_none()).collect();
    out.extend(env.entries);
    Ok(out)
}

fn optional(r: &Value) -> bool {
    r.get("optional").and_then(Value::as_bool).unwrap_or(false)
}

/// The relaxed rule, on by default since 1.32: printable ASCII except `=`.
fn valid_env_name(name: &str) -> bool {
    !name.is_empty() && name.bytes().all(|b| (32..=126).contains(&b) && b != b'=')
}

fn value_from(input: &ViewInput<'_>, from: &Value) -> Result<Option<String>, ViewError> {
    if let Some(f) = from.get("fieldRef") {
        let path = f.get("fieldPath").and_then(Value::as_str).unwrap_or("");
        return downward::env_field(input, path).map(Some).map_err(ViewError::Config);
    }
    if let Some(r) = from.get("resourceFieldRef") {
        let container = r.get("containerName").and_then(Value::as_str);
        return downward::resource_field(input, container, r)
            .map(Some)
            .map_err(ViewError::Config);
    }
    let ns = crate::meta::namespace(input.pod);
    for (field, source) in [("configMapKeyRef", Source::ConfigMap), ("secretKeyRef", Source::Secret)] {
        let Some(r) = from.get(field) else { continue };
        let name = r.get("name").and_then(Value::as_str).unwrap_or("");
        let key = r.get("key").and_then(Value::as_str).unwrap_or("");
        let Some(obj) = source.get(input.store, ns, name) else {
            if optional(r) {
                return Ok(None);
            }
            return Err(ViewError::Config(source.not_found(name)));
        };
        return match source.contents(&obj).remove(key) {
            Some(data) => Ok(Some(String::from_utf8_lossy(&data).into_owned())),
            None if optional(r) => Ok(None),
            None => Err(ViewError::Config(source.missing_env_key(ns, name, key))),
        };
    }
    Ok(Some(String::new()))
}

/// Docker-link style variables for the Services the pod sees (`envvars.FromServices`): those of
/// its namespace with a cluster IP when `enableServiceLinks` is not false, and always the
/// `kubernetes` Service of `default`. Sorted by Service name (the kubelet's order is a map's).
fn service_links(input: &ViewInput<'_>) -> Vec<(String, String)> {
    let ns = crate::meta::namespace(input.pod);
    let links_on = input
        .pod
        .pointer("/spec/enableServiceLinks")
        .and_then(Value::as_bool)
        .unwrap_or(true);
    let list = |namespace: &str| -> Vec<Value> {
        input
            .store
            .list(
                &Gvr::new("", "v1", "services"),
                Some(namespace),
                &ListOptions::default(),
            )
            .ok()
            .and_then(|l| l.get("items").and_then(Value::as_array).cloned())
            .unwrap_or_default()
    };
    let mut services: BTreeMap<String, Value> = BTreeMap::new();
    if links_on {
        for s in list(ns) {
            services.insert(crate::meta::name(&s).to_string(), s);
        }
    }
    if !services.contains_key(MASTER_SERVICE)
        && let Some(master) = list("default")
            .into_iter()
            .find(|s| crate::meta::name(s) == MASTER_SERVICE)
    {
        services.insert(MASTER_SERVICE.into(), master);
    }
    let mut out = Vec::new();
    for (name, svc) in &services {
        out.extend(service_env(name, svc));
    }
    out
}

fn env_name(s: &str) -> String {
    s.replace('-', "_").to_uppercase()
}

/// One Service's variables, in `FromServices` order.
fn service_env(name: &str, svc: &Value) -> Vec<(String, String)> {
    let ip = svc.pointer("/spec/clusterIP").and_then(Value::as_str).unwrap_or("");
    let ports: Vec<&Value> = svc
        .pointer("/spec/ports")
        .and_then(Value::as_array)
        .map(|p| p.iter().collect())
        .unwrap_or_default();
    if ip.is_empty() || ip == "None" || ports.is_empty() {
        return Vec::new();
    }
    let prefix = env_name(name);
    let port_of = |p: &Value| p.get("port").and_then(Value::as_i64).unwrap_or(0);
    let mut out = vec![
        (format!("{prefix}_SERVICE_HOST"), ip.to_string()),
        (format!("{prefix}_SERVICE_PORT"), port_of(ports[0]).to_string()),
    ];
    for p in &ports {
        if let Some(pn) = p.get("name").and_then(Value::as_str).filter(|n| !n.is_empty()) {
            out.push((
                format!("{prefix}_SERVICE_PORT_{}", env_name(pn)),
                port_of(p).to_string(),
            ));
        }
    }
    // `net.JoinHostPort`: IPv6 addresses in brackets.
    let host = if ip.contains(':') {
        format!("[{ip}]")
    } else {
        ip.to_string()
    };
    for (i, p) in ports.iter().enumerate() {
        let protocol = p.get("protocol").and_then(Value::as_str).unwrap_or("TCP");
        let lower = protocol.to_lowercase();
        let port = port_of(p);
        let url = format!("{lower}://{host}:{port}");
        if i == 0 {
            out.push((format!("{prefix}_PORT"), url.clone()));
        }
        let pp = format!("{prefix}_PORT_{port}_{}", protocol.to_uppercase());
        out.push((pp.clone(), url));
        out.push((format!("{pp}_PROTO"), lower));
        out.push((format!("{pp}_PORT"), port.to_string()));
        out.push((format!("{pp}_ADDR"), ip.to_string()));
    }
    out
}
