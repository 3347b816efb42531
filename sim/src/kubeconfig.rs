//! The kubeconfig clients use to reach the sim: the CA as `certificate-authority-data`, an admin
//! user with a client certificate (the default context) and one with a bearer token.

use std::path::Path;

use base64::Engine as _;
use serde_json::json;

/// Why the kubeconfig could not be written.
#[derive(Debug, thiserror::Error)]
pub enum KubeconfigError {
    #[error("serializing the kubeconfig")]
    Serialize(#[from] serde_yaml::Error),
    #[error("writing the kubeconfig to {path}")]
    Write { path: String, source: std::io::Error },
}

/// What goes into the kubeconfig.
pub struct KubeconfigContents<'a> {
    pub server: &'a str,
    pub ca_pem: &'a str,
    pub client_cert_pem: &'a str,
    pub client_key_pem: &'a str,
    pub token: &'a str,
}

/// The name of the cluster and of the default context.
pub const CONTEXT: &str = "kube-sim";
/// The context that authenticates with the bearer token.
pub const TOKEN_CONTEXT: &str = "kube-sim-token";

/// Renders the kubeconfig YAML.
pub fn render(c: &KubeconfigContents<'_>) -> Result<String, KubeconfigError> {
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    let doc = json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{ "name": CONTEXT, "cluster": { "server": c.server, "certificate-authority-data": b64(c.ca_pem) } }],
        "users": [
            { "name": "kube-sim-admin", "user": {
                "client-certificate-data": b64(c.client_cert_pem),
                "client-key-data": b64(c.client_key_pem) } },
            { "name": "kube-sim-token", "user": { "token": c.token } }
        ],
        "contexts": [
            { "name": CONTEXT, "context": { "cluster": CONTEXT, "user": "kube-sim-admin", "namespace": "default" } },
            { "name": TOKEN_CONTEXT, "context": { "cluster": CONTEXT, "user": "kube-sim-token", "namespace": "default" } }
        ],
        "current-context": CONTEXT,
        "preferences": {}
    });
    Ok(serde_yaml::to_string(&doc)?)
}

/// Writes the kubeconfig atomically (a reader never sees half a file).
pub fn write(path: &Path, c: &KubeconfigContents<'_>) -> Result<(), KubeconfigError> {
    let text = render(c)?;
    let werr = |source| KubeconfigError::Write {
        path: path.display().to_string(),
        source,
    };
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(werr)?;
    }
    let tmp = path.with_extension("tmp-kube-sim");
    std::fs::write(&tmp, text).map_err(werr)?;
    std::fs::rename(&tmp, path).map_err(werr)
}
