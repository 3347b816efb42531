//! The ConfigMaps and Secrets a pod needs before the kubelet can start it, with the kubelet's
//! messages: a missing volume source keeps the pod in ContainerCreating (FailedMount), a missing
//! env source fails the container with CreateContainerConfigError. Also the contents of those
//! objects as the kubelet reads them, and the kubelet's wording, shared with `pod_view`.

use base64::Engine as _;
use serde_json::Value;

use crate::registry::ResourceKey;
use crate::store::Store;

/// A ConfigMap or a Secret, by what refers to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Source {
    ConfigMap,
    Secret,
}

impl Source {
    fn resource(self) -> &'static str {
        match self {
            Source::ConfigMap => "configmaps",
            Source::Secret => "secrets",
        }
    }

    /// The kubelet's object managers name them in lower case: `configmap "x" not found`.
    fn lower(self) -> &'static str {
        match self {
            Source::ConfigMap => "configmap",
            Source::Secret => "secret",
        }
    }

    fn kind(self) -> &'static str {
        match self {
            Source::ConfigMap => "ConfigMap",
            Source::Secret => "Secret",
        }
    }

    pub fn get(self, store: &Store, ns: &str, name: &str) -> Option<std::sync::Arc<Value>> {
        get(store, self.resource(), ns, name)
    }

    /// `configmap "x" not found`
    pub fn not_found(self, name: &str) -> String {
        format!("{} {name:?} not found", self.lower())
    }

    /// What a volume's `items` entry naming an absent key fails with.
    pub fn missing_volume_key(self, key: &str) -> String {
        match self {
            Source::ConfigMap => format!("configmap references non-existent config key: {key}"),
            Source::Secret => format!("references non-existent secret key: {key}"),
        }
    }

    /// What an env `configMapKeyRef`/`secretKeyRef` naming an absent key fails with.
    pub fn missing_env_key(self, ns: &str, name: &str, key: &str) -> String {
        format!("couldn't find key {key} in {} {ns}/{name}", self.kind())
    }

    /// Every key with its bytes (`data` and `binaryData` of ConfigMaps; Secrets' base64 `data`
    /// and a `stringData` that was not folded yet). Undecodable values are skipped.
    pub fn contents(self, obj: &Value) -> std::collections::BTreeMap<String, Vec<u8>> {
        let mut out = std::collections::BTreeMap::new();
        let b64 = base64::engine::general_purpose::STANDARD;
        let fields: &[(&str, bool)] = match self {
            Source::ConfigMap => &[("data", false), ("binaryData", true)],
            Source::Secret => &[("stringData", false), ("data", true)],
        };
        for (field, encoded) in fields {
            for (k, v) in obj.get(*field).and_then(Value::as_object).into_iter().flatten() {
                let Some(v) = v.as_str() else { continue };
                let bytes = if *encoded {
                    match b64.decode(v) {
                        Ok(b) => b,
                        Err(_) => continue,
                    }
                } else {
                    v.as_bytes().to_vec()
                };
                out.insert(k.clone(), bytes);
            }
        }
        out
    }

    /// Only the `data` keys: what `envFrom` takes from a ConfigMap (not `binaryData`).
    pub fn env_contents(self, obj: &Value) -> std::collections::BTreeMap<String, Vec<u8>> {
        let mut all = self.contents(obj);
        if self == Source::ConfigMap {
            all.retain(|k, _| obj.pointer("/data").and_then(|d| d.get(k)).is_some());
        }
        all
    }
}

/// The kubelet's FailedMount wording for a volume that cannot be set up.
pub(crate) fn volume_setup_failed(volume: &str, reason: &str) -> String {
    format!("MountVolume.SetUp failed for volume {volume:?} : {reason}")
}

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
            let source = if kind == "configmap" {
                Source::ConfigMap
            } else {
                Source::Secret
            };
            let Some(obj) = source.get(store, ns, name) else {
                if optional(src) {
                    continue;
                }
                return Some(volume_setup_failed(vname, &source.not_found(name)));
            };
            for item in src.get("items").and_then(Value::as_array).into_iter().flatten() {
                let key = item.get("key").and_then(Value::as_str).unwrap_or("");
                if !has_key(&obj, key) && !optional(src) {
                    return Some(volume_setup_failed(vname, &source.missing_volume_key(key)));
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
