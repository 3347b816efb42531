//! What the certificate tests share: a simulated cluster with a webhook configuration installed as the
//! chart would, a tiny HTTPS server on a replica's acceptor, and a client that trusts exactly the
//! `caBundle` the API server would use.

// Test code: a panic is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used, dead_code)]

use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt as _;
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, PostParams};
use kube::runtime::{WatchStreamExt as _, watcher};
use rustls_pki_types::{CertificateDer, ServerName};
use spark_operator_webhook::certs::{ConfigurationRef, Kind, authority, bundle, pem};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpListener;
use tokio_rustls::{TlsAcceptor, TlsConnector};

pub const NAMESPACE: &str = "default";
pub const CONFIGURATION: &str = "spark-operator-webhook";
pub const SERVICE_DNS: &str = "spark-operator-webhook.default.svc";
/// The installer's webhooks, by name.
pub const WEBHOOKS: [&str; 2] = [
    "validate-sparkapplication.sparkoperator.k8s.io",
    "validate-scheduledsparkapplication.sparkoperator.k8s.io",
];

pub fn configurations() -> Vec<ConfigurationRef> {
    vec![ConfigurationRef {
        kind: Kind::Validating,
        name: CONFIGURATION.into(),
    }]
}

pub async fn start_sim(dir: &std::path::Path) -> kube_sim::Sim {
    kube_sim::Sim::start(kube_sim::SimConfig::new(dir)).await.unwrap()
}

/// The ValidatingWebhookConfiguration as an installer (the chart) creates it: everything but
/// `caBundle`. Its rules name a resource the sim does not serve, so the sim never calls it.
pub async fn install_configuration(client: &kube::Client) {
    let webhooks: Vec<serde_json::Value> = WEBHOOKS
        .iter()
        .map(|name| {
            serde_json::json!({
                "name": name,
                "admissionReviewVersions": ["v1"],
                "sideEffects": "None",
                "failurePolicy": "Fail",
                "timeoutSeconds": 7,
                "clientConfig": { "service": { "name": "spark-operator-webhook", "namespace": NAMESPACE, "path": "/validate", "port": 443 } },
                "rules": [{ "apiGroups": ["sparkoperator.k8s.io"], "apiVersions": ["v1beta2"], "operations": ["CREATE", "UPDATE"], "resources": ["sparkapplications"] }],
            })
        })
        .collect();
    let configuration: ValidatingWebhookConfiguration = serde_json::from_value(serde_json::json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": { "name": CONFIGURATION },
        "webhooks": webhooks,
    }))
    .unwrap();
    Api::<ValidatingWebhookConfiguration>::all(client.clone())
        .create(
            &PostParams {
                field_manager: Some("installer".into()),
                ..PostParams::default()
            },
            &configuration,
        )
        .await
        .unwrap();
}

/// The installer's fields are untouched: both webhooks, `failurePolicy: Fail`, the timeout and rules.
pub async fn assert_installer_fields_intact(client: &kube::Client) {
    let configuration = Api::<ValidatingWebhookConfiguration>::all(client.clone())
        .get(CONFIGURATION)
        .await
        .unwrap();
    let webhooks = configuration.webhooks.unwrap_or_default();
    let names: Vec<&str> = webhooks.iter().map(|w| w.name.as_str()).collect();
    assert_eq!(names, WEBHOOKS, "the webhooks of the configuration");
    for webhook in &webhooks {
        assert_eq!(webhook.failure_policy.as_deref(), Some("Fail"), "{}", webhook.name);
        assert_eq!(webhook.timeout_seconds, Some(7), "{}", webhook.name);
        assert_eq!(webhook.rules.as_ref().map(Vec::len), Some(1), "{}", webhook.name);
        assert!(webhook.client_config.service.is_some(), "{}", webhook.name);
    }
}

/// The CAs the API server would trust for the webhooks: every webhook's `caBundle`, which must agree.
pub async fn ca_bundle(client: &kube::Client) -> Vec<CertificateDer<'static>> {
    let target = &configurations()[0];
    let per_webhook = bundle::trusted(client, target).await.unwrap().unwrap_or_default();
    let first = per_webhook.first().cloned().unwrap_or_default();
    if per_webhook.iter().any(|b| *b != first) {
        return Vec::new();
    }
    first
}

/// The CA ConfigMap the agents read (`spark-operator-ca`, key `ca.crt`), parsed; empty if absent.
pub async fn ca_config_map(client: &kube::Client) -> Vec<CertificateDer<'static>> {
    let map = Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(client.clone(), NAMESPACE)
        .get_opt(CA_CONFIG_MAP)
        .await
        .unwrap();
    let text = map
        .and_then(|m| m.data)
        .and_then(|mut d| d.remove(bundle::CA_CONFIG_MAP_KEY))
        .unwrap_or_default();
    spark_operator_webhook::certs::pem::certificates(text.as_bytes()).unwrap_or_default()
}

/// The name the tests give the CA ConfigMap.
pub const CA_CONFIG_MAP: &str = "spark-operator-ca";

/// The CA Secret's parsed state, if it exists.
pub async fn ca_state(client: &kube::Client) -> Option<authority::CaState> {
    Api::<Secret>::namespaced(client.clone(), NAMESPACE)
        .get_opt(spark_operator_webhook::certs::DEFAULT_SECRET_NAME)
        .await
        .unwrap()
        .map(|s| authority::CaState::read(&s))
}

/// Every distinct `ca.crt` and `ca-bundle.crt` the CA Secret ever held, recorded by a watch from the
/// start (the sim keeps every change in its watch history).
#[derive(Clone, Default)]
pub struct SecretHistory {
    pub current_cas: Arc<Mutex<Vec<Vec<u8>>>>,
    pub bundles: Arc<Mutex<Vec<Vec<Vec<u8>>>>>,
    pub versions: Arc<Mutex<u64>>,
}

impl SecretHistory {
    /// Starts recording; returns once the watch has listed.
    pub async fn record(client: &kube::Client) -> (SecretHistory, tokio::task::JoinHandle<()>) {
        let history = SecretHistory::default();
        let (listed_tx, listed) = tokio::sync::oneshot::channel();
        let api = Api::<Secret>::namespaced(client.clone(), NAMESPACE);
        let config = watcher::Config::default().fields(&format!(
            "metadata.name={}",
            spark_operator_webhook::certs::DEFAULT_SECRET_NAME
        ));
        let task = tokio::spawn({
            let history = history.clone();
            async move {
                let mut listed_tx = Some(listed_tx);
                let mut events = std::pin::pin!(watcher::watcher(api, config).default_backoff());
                while let Some(event) = events.next().await {
                    match event {
                        Ok(watcher::Event::InitDone) => {
                            if let Some(tx) = listed_tx.take() {
                                let _ = tx.send(());
                            }
                        }
                        Ok(watcher::Event::Apply(secret) | watcher::Event::InitApply(secret)) => history.add(&secret),
                        _ => {}
                    }
                }
            }
        });
        listed.await.unwrap();
        (history, task)
    }

    fn add(&self, secret: &Secret) {
        *self.versions.lock().unwrap() += 1;
        let data = secret.data.clone().unwrap_or_default();
        if let Some(ca) = data.get(authority::CA_CERT) {
            let mut cas = self.current_cas.lock().unwrap();
            if !cas.contains(&ca.0) {
                cas.push(ca.0.clone());
            }
        }
        if let Some(b) = data.get(authority::BUNDLE) {
            let certs: Vec<Vec<u8>> = pem::certificates(&b.0)
                .unwrap_or_default()
                .iter()
                .map(|c| c.as_ref().to_vec())
                .collect();
            let mut bundles = self.bundles.lock().unwrap();
            if bundles.last() != Some(&certs) {
                bundles.push(certs);
            }
        }
    }

    pub fn distinct_cas(&self) -> usize {
        self.current_cas.lock().unwrap().len()
    }
}

/// A tiny HTTPS server on `acceptor`, served as the webhook serves (the runtime's server helper):
/// answers every request with `200 ok` and closes. Handshake failures are counted by the clients, not
/// here.
pub async fn serve_https(listener: TcpListener, acceptor: TlsAcceptor) {
    use spark_operator_runtime::server::{Limits, Listener, Protocol, Server};
    let server = Server {
        listener: Listener::from_tcp(listener, "test HTTPS").unwrap(),
        tls: Some(acceptor),
        protocol: Protocol::Http1,
        limits: Limits {
            max_connections: 1024,
            header_read_timeout: Duration::from_secs(10),
            handshake_timeout: Duration::from_secs(10),
            drain: Duration::from_secs(1),
            nodelay: false,
        },
        shutdown: spark_operator_runtime::shutdown::Shutdown::never(),
    };
    let service = hyper::service::service_fn(|_| async {
        let mut response = hyper::Response::new(http_body_util::Full::new(bytes::Bytes::from_static(b"ok")));
        // The clients read to the end.
        response.headers_mut().insert(
            hyper::header::CONNECTION,
            hyper::header::HeaderValue::from_static("close"),
        );
        Ok::<_, std::convert::Infallible>(response)
    });
    server.serve(service).await;
}

/// One admission-like exchange: connect, handshake trusting exactly `roots` and checking the
/// certificate is for `name`, a trivial request, a 200. The error says what failed.
pub async fn exchange(
    address: SocketAddr,
    name: ServerName<'static>,
    roots: &[CertificateDer<'static>],
) -> Result<CertificateDer<'static>, String> {
    let mut store = rustls::RootCertStore::empty();
    for root in roots {
        store.add(root.clone()).map_err(|e| format!("root: {e}"))?;
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(store)
        .with_no_client_auth();
    let connector = TlsConnector::from(Arc::new(config));
    let work = async {
        let stream = tokio::net::TcpStream::connect(address)
            .await
            .map_err(|e| format!("connect: {e}"))?;
        let mut tls = connector
            .connect(name, stream)
            .await
            .map_err(|e| format!("handshake: {e}"))?;
        let served = tls
            .get_ref()
            .1
            .peer_certificates()
            .and_then(|c| c.first().cloned())
            .ok_or("no certificate")?;
        tls.write_all(b"POST /validate HTTP/1.1\r\nHost: webhook\r\nContent-Length: 0\r\n\r\n")
            .await
            .map_err(|e| format!("write: {e}"))?;
        let mut response = Vec::new();
        let _ = tls.read_to_end(&mut response).await;
        if !response.starts_with(b"HTTP/1.1 200") {
            return Err(format!("response: {:?}", String::from_utf8_lossy(&response)));
        }
        Ok(served)
    };
    tokio::time::timeout(Duration::from_secs(10), work)
        .await
        .map_err(|_| "timed out".to_string())?
}

pub fn ip_name(ip: IpAddr) -> ServerName<'static> {
    ServerName::IpAddress(ip.into())
}

/// Which CA (by position in `cas`) issued `leaf`: the first one a client trusting it alone accepts
/// the certificate for `ip` with.
pub fn issuer_of(leaf: &CertificateDer<'static>, cas: &[CertificateDer<'static>], ip: IpAddr) -> Option<usize> {
    use rustls::client::danger::ServerCertVerifier as _;
    cas.iter().position(|ca| {
        let mut store = rustls::RootCertStore::empty();
        store.add(ca.clone()).unwrap();
        let verifier = rustls::client::WebPkiServerVerifier::builder_with_provider(
            Arc::new(store),
            Arc::new(rustls::crypto::ring::default_provider()),
        )
        .build()
        .unwrap();
        verifier
            .verify_server_cert(leaf, &[], &ip_name(ip), &[], rustls_pki_types::UnixTime::now())
            .is_ok()
    })
}

/// Polls `check` every 100 ms until it returns Some, or gives up after `limit` (bounded waits only).
pub async fn poll<T, F, Fut>(limit: Duration, mut check: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        if let Some(value) = check().await {
            return Some(value);
        }
        if tokio::time::Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
