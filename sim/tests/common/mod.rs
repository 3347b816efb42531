//! Shared helpers for the sim's integration tests.
#![allow(dead_code)]
#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic in a test is a failed assertion

use std::time::Duration;

use kube_sim::{Sim, SimConfig};

/// A sim in a temporary directory; keep the TempDir alive as long as the sim.
pub async fn start_sim(tune: impl FnOnce(&mut SimConfig)) -> (Sim, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = SimConfig::new(dir.path().join("data"));
    tune(&mut config);
    let sim = Sim::start(config).await.expect("sim starts");
    (sim, dir)
}

/// A rustls client that trusts the sim's CA.
pub fn tls_client(sim: &Sim) -> tokio_rustls::TlsConnector {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(sim.pki().ca_cert_der.clone()).unwrap();
    let config =
        rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
    tokio_rustls::TlsConnector::from(std::sync::Arc::new(config))
}

/// Waits for a future but fails the test instead of hanging forever.
pub async fn within<T>(what: &str, fut: impl std::future::Future<Output = T>) -> T {
    match tokio::time::timeout(Duration::from_secs(20), fut).await {
        Ok(v) => v,
        Err(_) => panic!("timed out waiting for {what}"),
    }
}

/// One HTTPS GET with the kubeconfig's token, straight over hyper: no client-side retries (kube-rs
/// retries 429/503 by itself), so tests see exactly what the server answered.
pub async fn raw_get(sim: &Sim, path: &str) -> (u16, serde_json::Value) {
    use http_body_util::BodyExt;
    let tcp = tokio::net::TcpStream::connect(sim.addr()).await.unwrap();
    let name = rustls_pki_types::ServerName::try_from("localhost").unwrap();
    let tls = tls_client(sim).connect(name, tcp).await.unwrap();
    let (mut sender, conn) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tls))
        .await
        .unwrap();
    tokio::spawn(conn);
    let req = http::Request::get(path)
        .header("host", "localhost")
        .header("authorization", format!("Bearer {}", sim.token()))
        .body(http_body_util::Empty::<bytes::Bytes>::new())
        .unwrap();
    let resp = sender.send_request(req).await.unwrap();
    let code = resp.status().as_u16();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    (code, serde_json::from_slice(&body).unwrap_or(serde_json::Value::Null))
}
