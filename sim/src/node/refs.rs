//! The ConfigMaps and Secrets a pod needs before the kubelet can start it, with the kubelet's
//! messages: a missing volume source keeps the pod in ContainerCreating (FailedMount), a missing
//! env source fails the container with CreateContainerConfigError.

use serde_json::Value;

use crate::registry::ResourceKey;
use crate::store::Store;

fn get(store: &Store, resource: &str, ns: &str, name: &str) -> Option<std::sync::Arc<Value>> {
    store.get_stored(
        &ResourceKey {
            group: String::new(),
            resource: resource.into(),
        },
        ns,
        name,
    )
}

fn has_key(obj: &Value, key: &str) -> bool {
    ["data", "binaryData", "stringData"]
        .iter()
        .any(|f| obj.get(*f).and_then(|d| d.get(key)).is_some())
}

fn optional(v: &Value) -> bool {
    v.get("optional").and_then(Value::as_bool).unwrap_or(false)
}

/// The kubelet's `MountVolume.SetUp failed ...` message for the first volume that cannot be
/// set up, or None when every ConfigMap and Secret volume is there.
pub(crate) fn missing_volume(store: &Store, pod: &Value) -> Option<String> {
    let ns = crate::meta::namespace(pod);
    for vol in pod
        .pointer("/spec/volumes")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let vname = vol.get("name").and_then(Value::as_str).unwrap_or("");
        let mut sources: Vec<(&str, &Value)> = Vec::new();
        if let Some(cm) = vol.get("configMap") {
            sources.push(("configmap", cm));
        }
        if let Some(s) = vol.get("secret") {
            sources.push(("secret", s));
        }
        for p in vol
            .pointer("/projected/sources")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if let Some(cm) = p.get("configMap") {
                sources.push(("configmap", cm));
            }
            if let Some(s) = p.get("secret") {
                sources.push(("secret", s));
            }
        }
        for (kind, src) in sources {
            let name = src
                .get("name")
                .or_else(|| src.get("secretName"))
                .and_then(Value::as_str)
                .unwrap_or("");
            let resource = if kind == "configmap" { "configmaps" } else { "secrets" };
            let Some(obj) = get(store, resource, ns, name) else {
                if optional(src) {
                    continue;
                }
                return Some(format!(
                    "MountVolume.SetUp failed for volume {vname:?} : {kind} {name:?} not found"
                ));
            };
            for item in src.get("items").and_then(Value::as_array).into_iter().flatten() {
                let key = item.get("key").and_then(Value::as_str).unwrap_or("");
                if !has_key(&obj, key) && !optional(src) {
                    return Some(format!(
                        "MountVolume.SetUp failed for volume {vname:?} : {kind} references non-existent config key: {key}"
                    ));
                }
            }
        }
    }
    None
}

/// The CreateContainerConfigError message for the container's first unusable env source.
pub(crate) fn missing_env(store: &Store, pod: &Value, container: &Value) -> Option<String> {
    let ns = crate::meta::namespace(pod);
    for env in container.get("env").and_then(Value::as_array).into_iter().flatten() {
        for (field, resource, kind) in [
            ("configMapKeyRef", "configmaps", "ConfigMap"),
            ("secretKeyRef", "secrets", "Secret"),
        ] {
            let Some(r) = env.pointer(&format!("/valueFrom/{field}")) else {
                continue;
            };
            let name = r.get("name").and_then(Value::as_str).unwrap_or("");
            let key = r.get("key").and_then(Value::as_str).unwrap_or("");
            match get(store, resource, ns, name) {
                None if !optional(r) => return Some(format!("{} {name:?} not found", kind.to_lowercase())),
                Some(obj) if !has_key(&obj, key) && !optional(r) => {
                    return Some(format!("couldn't find key {key} in {kind} {ns}/{name}"));
                }
                _ => {}
            }
        }
    }
    for from in container.get("envFrom").and_then(Value::as_array).into_iter().flatten() {
        for (field, resource, kind) in [
            ("configMapRef", "configmaps", "configmap"),
            ("secretRef", "secrets", "secret"),
        ] {
            let Some(r) = from.get(field) else { continue };
            let name = r.get("name").and_then(Value::as_str).unwrap_or("");
            if get(store, resource, ns, name).is_none() && !optional(r) {
                return Some(format!("{kind} {name:?} not found"));
            }
        }
    }
    None
}
