//! One way to find the cluster and build clients of it.

use std::path::Path;

use http::{HeaderValue, header};
use kube::client::ClientBuilder;

use crate::fence::FenceLayer;
use crate::lease::LeadershipWatch;

/// Why no client could be built.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("could not read the kubeconfig {path}")]
    Kubeconfig {
        path: String,
        #[source]
        source: kube::config::KubeconfigError,
    },
    #[error("could not find the cluster (KUBECONFIG, ~/.kube/config or the pod's service account)")]
    Infer(#[source] kube::config::InferConfigError),
    #[error("could not build the Kubernetes client")]
    Client(#[source] kube::Error),
}

/// The client configuration from `kubeconfig` if given, else inferred as kubectl does (KUBECONFIG,
/// `~/.kube/config`), else the pod's ServiceAccount.
pub async fn config_from(kubeconfig: Option<&Path>) -> Result<kube::Config, Error> {
    match kubeconfig {
        Some(path) => {
            let failed = |source| Error::Kubeconfig {
                path: path.display().to_string(),
                source,
            };
            let kubeconfig = kube::config::Kubeconfig::read_from(path).map_err(failed)?;
            kube::Config::from_custom_kubeconfig(kubeconfig, &kube::config::KubeConfigOptions::default())
                .await
                .map_err(failed)
        }
        None => kube::Config::infer().await.map_err(Error::Infer),
    }
}

/// Names this replica in every request's User-Agent, so the API server's audit log (and the
/// simulator's) can tell replicas apart.
pub fn identify(mut config: kube::Config, identity: &str) -> kube::Config {
    let agent = format!("spark-operator/{} ({identity})", env!("CARGO_PKG_VERSION"));
    if let Ok(value) = HeaderValue::from_str(&agent) {
        config.headers.retain(|(name, _)| name != header::USER_AGENT);
        config.headers.push((header::USER_AGENT, value));
    }
    config
}

/// A client for serving and reading: never fenced.
pub fn client(config: kube::Config) -> Result<kube::Client, Error> {
    kube::Client::try_from(config).map_err(Error::Client)
}

/// A client whose writes leave the process only while `leadership` holds (see [`crate::fence`]).
/// kube's retry layer is left out: a retried write could otherwise be sent after the validity ended.
pub fn fenced(mut config: kube::Config, leadership: LeadershipWatch) -> Result<kube::Client, Error> {
    config.default_retry = false;
    let builder = ClientBuilder::try_from(config).map_err(Error::Client)?;
    Ok(builder.with_layer(&FenceLayer::new(leadership)).build())
}
