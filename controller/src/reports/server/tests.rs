//! The receiver's own limits, each shown by a client that would hold it without them: a real TLS listener
//! with ALPN h2, and an API server that accepts connections and never answers, so a stream's
//! authentication (a TokenReview) stays in flight.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic in a test is a failed assertion

use std::time::Instant;

use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
use spark_operator_proto::agent::v1::termination_reports_client::TerminationReportsClient;
use spark_operator_proto::tonic::transport::Endpoint;
use spark_operator_runtime::RuntimeSettings;
use spark_operator_runtime::shutdown::{Shutdown, Trigger};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

use super::*;
use crate::reports::ServiceAccount;

/// The receiver's limits, small enough for tests.
const SHORT: Limits = Limits {
    max_connections: 1,
    header_read_timeout: Duration::from_millis(300),
    handshake_timeout: Duration::from_millis(300),
    drain: Duration::from_millis(500),
    nodelay: true,
};
const PATIENCE: Duration = Duration::from_secs(3);

/// A receiver serving with `limits`, its runtime's shutdown trigger, and a client configuration that trusts it.
struct Receiving {
    serving: Serving,
    trigger: Trigger,
    connector: TlsConnector,
    _runtime: Runtime,
    /// The API server that never answers.
    _silent: std::net::TcpListener,
}

async fn start(limits: Limits) -> Receiving {
    // Connections to it complete (the kernel's backlog) and nothing is ever read or answered.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", silent.local_addr().unwrap());
    let config = kube::Config::new(url.parse().unwrap());
    let settings = RuntimeSettings {
        identity: "receiver-under-test".to_owned(),
        election: None,
        metrics: Listen::Off,
    };
    let (trigger, shutdown) = Shutdown::new();
    let runtime = Runtime::start(config, settings, shutdown).await.unwrap();

    let certified = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(certified.signing_key.serialize_der()));
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut server = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![certified.cert.der().clone()], key)
        .unwrap();
    server.alpn_protocols = vec![b"h2".to_vec()];
    let mut roots = rustls::RootCertStore::empty();
    roots.add(CertificateDer::from(certified.cert.der().to_vec())).unwrap();
    let mut client = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    client.alpn_protocols = vec![b"h2".to_vec()];

    let args = ReceiverArgs {
        reports_address: Listen::On("127.0.0.1:0".parse().unwrap()),
        agent_service_accounts: vec![ServiceAccount {
            namespace: "spark-operator".into(),
            name: "spark-operator-agent".into(),
        }],
        agent_token_audience: "spark-operator".into(),
        reports_service_name: "spark-operator-reports".into(),
        status_byte_budget: 256 * 1024,
    };
    let serving = start_with(args, TlsAcceptor::from(Arc::new(server)), &runtime, limits)
        .await
        .unwrap()
        .expect("listening");
    Receiving {
        serving,
        trigger,
        connector: TlsConnector::from(Arc::new(client)),
        _runtime: runtime,
        _silent: silent,
    }
}

async fn handshake(connector: TlsConnector, address: SocketAddr) -> std::io::Result<TlsStream<TcpStream>> {
    let tcp = TcpStream::connect(address).await?;
    let name = ServerName::try_from("localhost").map_err(std::io::Error::other)?;
    connector.connect(name, tcp).await
}

#[tokio::test]
async fn an_agent_beyond_the_connection_limit_waits_for_a_free_slot() {
    let limits = Limits {
        header_read_timeout: PATIENCE * 2,
        ..SHORT
    };
    let receiving = start(limits).await;
    let address = receiving.serving.address;
    let first = handshake(receiving.connector.clone(), address).await.unwrap();
    // Not accepted while the first holds the only slot: its handshake waits in the backlog.
    let second = tokio::spawn(handshake(receiving.connector.clone(), address));
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert!(!second.is_finished(), "served beyond the limit of one connection");
    drop(first);
    let second = tokio::time::timeout(PATIENCE, second).await;
    assert!(
        matches!(second, Ok(Ok(Ok(_)))),
        "served once the slot freed: {second:?}"
    );
}

/// The HTTP/2 client connection preface and an empty SETTINGS frame (RFC 9113 §3.4).
const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00";

#[tokio::test]
async fn a_connection_that_opens_no_stream_is_closed_after_the_first_request_timeout() {
    let receiving = start(SHORT).await;
    let mut tls = handshake(receiving.connector.clone(), receiving.serving.address)
        .await
        .unwrap();
    tls.write_all(H2_PREFACE).await.unwrap();
    let mut rest = Vec::new();
    // A close without TLS close_notify reads as an error: closed all the same.
    let closed = tokio::time::timeout(PATIENCE, tls.read_to_end(&mut rest)).await;
    assert!(
        closed.is_ok(),
        "an idle HTTP/2 connection was held open past the first-request timeout"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_in_flight_at_shutdown_is_cut_at_the_drain_bound() {
    let receiving = start(SHORT).await;
    let address = receiving.serving.address;
    let connector = receiving.connector.clone();
    let channel = Endpoint::from_static("http://localhost")
        .connect_with_connector(tower::service_fn(move |_| {
            let connector = connector.clone();
            async move { Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(handshake(connector, address).await?)) }
        }))
        .await
        .unwrap();
    let mut client = TerminationReportsClient::new(channel);
    let stream = tokio::spawn(async move {
        let mut request = Request::new(futures::stream::pending::<ReportRequest>());
        request
            .metadata_mut()
            .insert("authorization", "Bearer agent-token".parse().unwrap());
        client.report(request).await.map(|_| ())
    });
    // Longer than the first-request timeout: a connection with a stream is not dropped by it.
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert!(
        !stream.is_finished(),
        "the stream was answered or dropped before the shutdown"
    );
    let fired = Instant::now();
    receiving.trigger.fire();
    let stopped = tokio::time::timeout(PATIENCE, receiving.serving.wait()).await;
    assert!(matches!(stopped, Ok(Ok(()))), "the drain is unbounded: {stopped:?}");
    assert!(
        fired.elapsed() >= SHORT.drain,
        "cut before the drain: {:?}",
        fired.elapsed()
    );
    let answered = tokio::time::timeout(PATIENCE, stream).await.unwrap().unwrap();
    assert!(answered.is_err(), "the cut stream ended with an error");
}
