//! The kubelet's volume plugins for what a process pod can use: ConfigMap, Secret, projected
//! (ServiceAccount token, ConfigMap, Secret, downward API), downward API, emptyDir and hostPath,
//! materialized under `<node>/var/lib/kubelet/pods/<uid>/volumes/<plugin>/<name>`.

use std::collections::BTreeMap;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

use serde_json::Value;

use super::atomic_writer::{self, FileProjection, Payload};
use super::{ViewError, ViewInput, downward, files_err};
use crate::node::refs::{self, Source};
use crate::service_account_tokens::{DEFAULT_EXPIRATION_SECONDS, ObjectRef, TokenRequest};

/// `defaultMode` of ConfigMap, Secret, projected and downward API volumes when unset (0644).
const DEFAULT_MODE: u32 = 0o644;

/// A volume ready to be mounted.
#[derive(Debug, Clone)]
pub(super) struct Volume {
    pub path: PathBuf,
    /// ConfigMap, Secret, projected and downward API volumes are always mounted read-only (the
    /// kubelet's `mustMountRO`, since Kubernetes 1.10).
    pub read_only: bool,
}

/// Sets up every volume of the pod, as the kubelet's volume manager does before any container
/// starts; returns them by name.
pub(super) fn materialize(input: &ViewInput<'_>, pod_dir: &Path) -> Result<BTreeMap<String, Volume>, ViewError> {
    let mut out = BTreeMap::new();
    for vol in input
        .pod
        .pointer("/spec/volumes")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let name = vol.get("name").and_then(Value::as_str).unwrap_or("");
        let volume = materialize_one(input, pod_dir, name, vol).map_err(|e| e.in_volume(name))?;
        out.insert(name.to_string(), volume);
    }
    Ok(out)
}

/// A volume's failure before the volume name is put in front.
pub(super) enum VolError {
    Config(String),
    Files(ViewError),
}

impl VolError {
    fn in_volume(self, volume: &str) -> ViewError {
        match self {
            VolError::Config(reason) => ViewError::Config(refs::volume_setup_failed(volume, &reason)),
            VolError::Files(e) => e,
        }
    }
}

impl From<ViewError> for VolError {
    fn from(e: ViewError) -> Self {
        VolError::Files(e)
    }
}

fn plugin_dir(pod_dir: &Path, plugin: &str, name: &str) -> PathBuf {
    pod_dir
        .join("volumes")
        .join(format!("kubernetes.io~{plugin}"))
        .join(name)
}

/// The emptyDir the kubelet wraps every API-data volume in: a directory with mode 0777.
fn setup_dir(path: &Path) -> Result<(), ViewError> {
    std::fs::create_dir_all(path).map_err(files_err(path))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o777)).map_err(files_err(path))
}

fn materialize_one(input: &ViewInput<'_>, pod_dir: &Path, name: &str, vol: &Value) -> Result<Volume, VolError> {
    let api_data = |plugin: &str, mut payload: Payload| -> Result<Volume, VolError> {
        let path = plugin_dir(pod_dir, plugin, name);
        if fs_group_of(input.pod).is_some() {
            // What `fs_group` would make of the modes, so an unchanged payload compares equal.
            for file in payload.values_mut() {
                file.mode |= RO_MASK;
            }
        }
        setup_dir(&path)?;
        atomic_writer::write(&path, &payload).map_err(|e| match e {
            atomic_writer::WriteError::InvalidPath { .. } => VolError::Config(e.to_string()),
            atomic_writer::WriteError::Io { path, source } => VolError::Files(ViewError::Files { path, source }),
        })?;
        fs_group(input.pod, &path, true)?;
        Ok(Volume { path, read_only: true })
    };
    if let Some(src) = vol.get("configMap") {
        let mode = mode_of(src.get("defaultMode")).unwrap_or(DEFAULT_MODE);
        let payload = key_payload(input, Source::ConfigMap, src, "name", mode)?;
        return api_data("configmap", payload);
    }
    if let Some(src) = vol.get("secret") {
        let mode = mode_of(src.get("defaultMode")).unwrap_or(DEFAULT_MODE);
        let payload = key_payload(input, Source::Secret, src, "secretName", mode)?;
        return api_data("secret", payload);
    }
    if let Some(src) = vol.get("downwardAPI") {
        let mode = mode_of(src.get("defaultMode")).unwrap_or(DEFAULT_MODE);
        let payload = downward_payload(input, src, mode)?;
        return api_data("downward-api", payload);
    }
    if let Some(src) = vol.get("projected") {
        let payload = projected_payload(input, src, &plugin_dir(pod_dir, "projected", name))?;
        return api_data("projected", payload);
    }
    if vol.get("emptyDir").is_some() {
        // `medium: Memory` would be a tmpfs; a plain directory holds the same files.
        let path = plugin_dir(pod_dir, "empty-dir", name);
        if !path.is_dir() {
            setup_dir(&path)?;
        }
        fs_group(input.pod, &path, false)?;
        return Ok(Volume { path, read_only: false });
    }
    if let Some(src) = vol.get("hostPath") {
        return host_path(input.node_root, src).map(|path| Volume { path, read_only: false });
    }
    let kind = vol
        .as_object()
        .and_then(|o| o.keys().find(|k| *k != "name").cloned())
        .unwrap_or_else(|| "<none>".into());
    Err(VolError::Config(format!(
        "volume type {kind} is not supported by kube-sim's process runtime (configMap, secret, projected, downwardAPI, emptyDir and hostPath are)"
    )))
}

/// A mode field (`defaultMode`, `mode`), kept to the permission bits.
fn mode_of(v: Option<&Value>) -> Option<u32> {
    v.and_then(Value::as_u64).map(|m| (m as u32) & 0o7777)
}

fn optional(src: &Value) -> bool {
    src.get("optional").and_then(Value::as_bool).unwrap_or(false)
}

/// The files of a ConfigMap or Secret source: every key, or the `items` (key → path, mode).
fn key_payload(
    input: &ViewInput<'_>,
    source: Source,
    src: &Value,
    name_field: &str,
    default_mode: u32,
) -> Result<Payload, VolError> {
    let ns = crate::meta::namespace(input.pod);
    let name = src.get(name_field).and_then(Value::as_str).unwrap_or("");
    let mut payload = Payload::new();
    let Some(obj) = source.get(input.store, ns, name) else {
        if optional(src) {
            return Ok(payload);
        }
        return Err(VolError::Config(source.not_found(name)));
    };
    let contents = source.contents(&obj);
    let items = src.get("items").and_then(Value::as_array);
    match items {
        Some(items) if !items.is_empty() => {
            for item in items {
                let key = item.get("key").and_then(Value::as_str).unwrap_or("");
                let path = item.get("path").and_then(Value::as_str).unwrap_or(key);
                let Some(data) = contents.get(key) else {
                    if optional(src) {
                        continue;
                    }
                    return Err(VolError::Config(source.missing_volume_key(key)));
                };
                payload.insert(
                    path.to_string(),
                    FileProjection {
                        data: data.clone(),
                        mode: mode_of(item.get("mode")).unwrap_or(default_mode),
                        fs_user: None,
                    },
                );
            }
        }
        _ => {
            for (key, data) in contents {
                payload.insert(
                    key,
                    FileProjection {
                        data,
                        mode: default_mode,
                        fs_user: None,
                    },
                );
            }
        }
    }
    Ok(payload)
}

/// The files of a downward API volume or projected source.
fn downward_payload(input: &ViewInput<'_>, src: &Value, default_mode: u32) -> Result<Payload, VolError> {
    let mut payload = Payload::new();
    for item in src.get("items").and_then(Value::as_array).into_iter().flatten() {
        let path = item.get("path").and_then(Value::as_str).unwrap_or("");
        let value = if let Some(f) = item.get("fieldRef") {
            let field = f.get("fieldPath").and_then(Value::as_str).unwrap_or("");
            downward::volume_field(input.pod, field).map_err(VolError::Config)?
        } else if let Some(r) = item.get("resourceFieldRef") {
            let container = r.get("containerName").and_then(Value::as_str).unwrap_or("");
            downward::resource_field(input, Some(container), r).map_err(VolError::Config)?
        } else {
            String::new()
        };
        payload.insert(
            path.to_string(),
            FileProjection {
                data: value.into_bytes(),
                mode: mode_of(item.get("mode")).unwrap_or(default_mode),
                fs_user: None,
            },
        );
    }
    Ok(payload)
}

fn projected_payload(input: &ViewInput<'_>, src: &Value, dir: &Path) -> Result<Payload, VolError> {
    let default_mode = mode_of(src.get("defaultMode")).unwrap_or(DEFAULT_MODE);
    let mut payload = Payload::new();
    for source in src.get("sources").and_then(Value::as_array).into_iter().flatten() {
        if let Some(s) = source.get("configMap") {
            payload.extend(key_payload(input, Source::ConfigMap, s, "name", default_mode)?);
        } else if let Some(s) = source.get("secret") {
            payload.extend(key_payload(input, Source::Secret, s, "name", default_mode)?);
        } else if let Some(s) = source.get("downwardAPI") {
            payload.extend(downward_payload(input, s, default_mode)?);
        } else if let Some(s) = source.get("serviceAccountToken") {
            let (path, file) = token_file(input, s, default_mode, dir)?;
            payload.insert(path, file);
        } else if source.get("clusterTrustBundle").is_some() {
            return Err(VolError::Config(
                "clusterTrustBundle projections are not supported by kube-sim".into(),
            ));
        }
    }
    Ok(payload)
}

/// A `serviceAccountToken` source: the kubelet asks TokenRequest for a token bound to the pod
/// (and its node). Owned by the pod's single `runAsUser` with mode 0600 when there is one, as
/// the kubelet writes it so that a non-root container can read its own token.
fn token_file(
    input: &ViewInput<'_>,
    src: &Value,
    default_mode: u32,
    dir: &Path,
) -> Result<(String, FileProjection), VolError> {
    let pod = input.pod;
    let ns = crate::meta::namespace(pod);
    let sa_name = pod
        .pointer("/spec/serviceAccountName")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .unwrap_or("default");
    let sa = input
        .store
        .get_stored(
            &crate::registry::ResourceKey {
                group: String::new(),
                resource: "serviceaccounts".into(),
            },
            ns,
            sa_name,
        )
        .ok_or_else(|| VolError::Config(format!("failed to fetch token: serviceaccounts {sa_name:?} not found")))?;
    let node_uid = input
        .store
        .get_stored(
            &crate::registry::ResourceKey {
                group: String::new(),
                resource: "nodes".into(),
            },
            "",
            input.node_name,
        )
        .map(|n| crate::meta::uid(&n).to_string());
    let request = TokenRequest {
        namespace: ns.to_string(),
        service_account: ObjectRef::new(sa_name, crate::meta::uid(&sa)),
        pod: Some(ObjectRef::new(crate::meta::name(pod), crate::meta::uid(pod))),
        node: node_uid.map(|uid| ObjectRef::new(input.node_name, uid)),
        audiences: src
            .get("audience")
            .and_then(Value::as_str)
            .filter(|a| !a.is_empty())
            .map(|a| vec![a.to_string()])
            .unwrap_or_default(),
        expiration_seconds: src
            .get("expirationSeconds")
            .and_then(Value::as_i64)
            .unwrap_or(DEFAULT_EXPIRATION_SECONDS),
    };
    let path = src.get("path").and_then(Value::as_str).unwrap_or("token").to_string();
    let now = jiff::Timestamp::now().as_second();
    let current = std::fs::read_to_string(dir.join("..data").join(&path)).ok();
    let token = match current.filter(|t| still_fresh(input.tokens, t, &request, now)) {
        Some(t) => t,
        None => input.tokens.mint(&request, now),
    };
    let fs_user = fs_user(pod);
    let fs_group_set = fs_group_of(pod).is_some();
    let mode = if fs_user.is_some() || fs_group_set {
        0o600
    } else {
        default_mode
    };
    Ok((
        path,
        FileProjection {
            data: token.into_bytes(),
            mode,
            fs_user,
        },
    ))
}

/// The kubelet's token manager keeps a token until 80 % of its requested lifetime (at most
/// 24 hours) has passed; until then the volume keeps the same token.
fn still_fresh(
    tokens: &crate::service_account_tokens::TokenSigner,
    token: &str,
    request: &TokenRequest,
    now: i64,
) -> bool {
    let Ok(claims) = tokens.verify_signature(token) else {
        return false;
    };
    let k = &claims.kubernetes;
    let audiences = if request.audiences.is_empty() {
        vec![crate::service_account_tokens::ISSUER.to_string()]
    } else {
        request.audiences.clone()
    };
    let ttl = k.warnafter.unwrap_or(claims.exp) - claims.iat;
    k.serviceaccount == request.service_account
        && k.pod == request.pod
        && claims.aud == audiences
        && ttl == request.expiration_seconds
        && now < claims.iat + ttl * 8 / 10
        && now < claims.iat + 24 * 3600
}

/// The kubelet's `FsUserFrom`: the `runAsUser` every container runs as, if they all agree.
fn fs_user(pod: &Value) -> Option<u32> {
    let pod_user = pod.pointer("/spec/securityContext/runAsUser").and_then(Value::as_u64);
    let mut user: Option<u64> = None;
    for list in ["initContainers", "containers", "ephemeralContainers"] {
        for c in pod
            .pointer(&format!("/spec/{list}"))
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let u = c
                .pointer("/securityContext/runAsUser")
                .and_then(Value::as_u64)
                .or(pod_user)?;
            match user {
                Some(prev) if prev != u => return None,
                _ => user = Some(u),
            }
        }
    }
    user.and_then(|u| u32::try_from(u).ok())
}

/// `SetVolumeOwnership`'s masks: read-only volumes get user and group read, writable ones
/// read and write; directories also search and setgid.
const RO_MASK: u32 = 0o440;
const RW_MASK: u32 = 0o660;

fn fs_group_of(pod: &Value) -> Option<u32> {
    pod.pointer("/spec/securityContext/fsGroup")
        .and_then(Value::as_u64)
        .and_then(|g| u32::try_from(g).ok())
}

/// `fsGroup`: the volume's files belong to that group with the masks above, directories
/// setgid, as the kubelet's `SetVolumeOwnership`.
fn fs_group(pod: &Value, dir: &Path, read_only: bool) -> Result<(), ViewError> {
    let Some(gid) = fs_group_of(pod) else {
        return Ok(());
    };
    let mask = if read_only { RO_MASK } else { RW_MASK };
    let mut stack = vec![dir.to_path_buf()];
    while let Some(path) = stack.pop() {
        let meta = std::fs::symlink_metadata(&path).map_err(files_err(&path))?;
        if meta.file_type().is_symlink() {
            continue;
        }
        std::os::unix::fs::lchown(&path, None, Some(gid)).map_err(files_err(&path))?;
        let mut mode = meta.permissions().mode() & 0o7777;
        if meta.is_dir() {
            mode |= 0o2000 | 0o110 | mask;
            for entry in std::fs::read_dir(&path).map_err(files_err(&path))?.flatten() {
                stack.push(entry.path());
            }
        } else {
            mode |= mask;
        }
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).map_err(files_err(&path))?;
    }
    Ok(())
}

/// A hostPath on the simulated node: `/var/log/pods` is `<node_root>/var/log/pods`. Checked or
/// created by its `type`, as the kubelet's hostPath type checker.
fn host_path(node_root: &Path, src: &Value) -> Result<PathBuf, VolError> {
    let path = src.get("path").and_then(Value::as_str).unwrap_or("");
    let mut on_node = node_root.to_path_buf();
    for c in Path::new(path).components() {
        match c {
            Component::Normal(part) => on_node.push(part),
            Component::ParentDir => {
                // Never above the node's root, whatever the path says.
                let left_root = on_node == node_root || !on_node.pop();
                if left_root {
                    return Err(VolError::Config(format!("hostPath {path:?} leaves the node's root")));
                }
            }
            _ => {}
        }
    }
    let failed = |what: &str| VolError::Config(format!("hostPath type check failed: {path} is not {what}"));
    let meta = std::fs::metadata(&on_node);
    match src.get("type").and_then(Value::as_str).unwrap_or("") {
        "DirectoryOrCreate" => {
            if meta.is_err() {
                std::fs::create_dir_all(&on_node).map_err(files_err(&on_node))?;
                std::fs::set_permissions(&on_node, std::fs::Permissions::from_mode(0o755))
                    .map_err(files_err(&on_node))?;
            } else if !meta.as_ref().is_ok_and(|m| m.is_dir()) {
                return Err(failed("a directory"));
            }
        }
        "Directory" => {
            if !meta.as_ref().is_ok_and(|m| m.is_dir()) {
                return Err(failed("a directory"));
            }
        }
        "FileOrCreate" => {
            if meta.is_err() {
                if let Some(parent) = on_node.parent() {
                    std::fs::create_dir_all(parent).map_err(files_err(parent))?;
                }
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&on_node)
                    .map_err(files_err(&on_node))?;
                std::fs::set_permissions(&on_node, std::fs::Permissions::from_mode(0o644))
                    .map_err(files_err(&on_node))?;
            } else if !meta.as_ref().is_ok_and(|m| m.is_file()) {
                return Err(failed("a file"));
            }
        }
        "File" => {
            if !meta.as_ref().is_ok_and(|m| m.is_file()) {
                return Err(failed("a file"));
            }
        }
        "Socket" => {
            if !meta.as_ref().is_ok_and(|m| m.file_type().is_socket()) {
                return Err(failed("a socket file"));
            }
        }
        "CharDevice" => {
            if !meta.as_ref().is_ok_and(|m| m.file_type().is_char_device()) {
                return Err(failed("a character device"));
            }
        }
        "BlockDevice" => {
            if !meta.as_ref().is_ok_and(|m| m.file_type().is_block_device()) {
                return Err(failed("a block device"));
            }
        }
        "" => {
            // No check; containerd creates a missing source as a directory.
            if meta.is_err() {
                std::fs::create_dir_all(&on_node).map_err(files_err(&on_node))?;
            }
        }
        other => return Err(VolError::Config(format!("hostPath type {other:?} is not supported"))),
    }
    Ok(on_node)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::service_account_tokens::TokenSigner;

    #[test]
    fn tokens_are_renewed_at_eighty_percent_of_their_lifetime() {
        let signer = TokenSigner::new();
        let req = |exp| TokenRequest {
            namespace: "ns".into(),
            service_account: ObjectRef::new("sa", "u1"),
            pod: Some(ObjectRef::new("p", "u2")),
            node: None,
            audiences: vec![],
            expiration_seconds: exp,
        };
        let now = 100_000;
        assert!(still_fresh(&signer, &signer.mint(&req(600), now - 479), &req(600), now));
        assert!(!still_fresh(
            &signer,
            &signer.mint(&req(600), now - 480),
            &req(600),
            now
        ));
        // The extended admission default renews by its requested 3607 s, not the year.
        assert!(still_fresh(
            &signer,
            &signer.mint(&req(3607), now - 2800),
            &req(3607),
            now
        ));
        assert!(!still_fresh(
            &signer,
            &signer.mint(&req(3607), now - 2900),
            &req(3607),
            now
        ));
        // Another request (expiration, pod) or another signer: a new token.
        assert!(!still_fresh(&signer, &signer.mint(&req(600), now), &req(700), now));
        let mut other_pod = req(600);
        other_pod.pod = Some(ObjectRef::new("p", "u3"));
        assert!(!still_fresh(&signer, &signer.mint(&req(600), now), &other_pod, now));
        assert!(!still_fresh(
            &TokenSigner::new(),
            &signer.mint(&req(600), now),
            &req(600),
            now
        ));
    }
}
