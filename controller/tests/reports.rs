//! The report receiver end to end, against the simulated cluster: a real TLS listener with a test CA
//! (ALPN h2), a tonic client that trusts it, agents' tokens minted by TokenRequest and checked by
//! TokenReview, and the SparkApplication's status read back from the API server after each ack.

// Test code: a panic is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;

use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube_sim::faults::{FaultAction, FaultRule};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
use serde_json::json;
use spark_operator_api::state::TerminationObserver;
use spark_operator_api::{SparkApplication, labels};
use spark_operator_controller::reports::{self, ReceiverArgs, ServiceAccount as AgentAccount};
use spark_operator_proto::agent::v1::termination_reports_client::TerminationReportsClient;
use spark_operator_proto::agent::v1::{ReportAck, ReportRequest, Role, TerminationReport, Verdict};
use spark_operator_proto::tonic::transport::{Channel, Endpoint};
use spark_operator_proto::tonic::{Code, Request, Status};
use spark_operator_runtime::args::Listen;
use spark_operator_runtime::shutdown::Shutdown;
use spark_operator_runtime::{Runtime, RuntimeSettings};

const NAMESPACE: &str = "default";
const APP: &str = "pi";
const SUBMISSION: &str = "sub-1";
const AGENT_NAMESPACE: &str = "spark-operator";
const AGENT: &str = "spark-operator-agent";
const AUDIENCE: &str = "spark-operator";
/// The receiver's replica, as its requests' User-Agent names it: faults aimed at it spare the test's
/// own client.
const IDENTITY: &str = "receiver-under-test";

/// A CA and a serving certificate for `localhost` and 127.0.0.1 signed by it.
struct TestPki {
    ca: CertificateDer<'static>,
    acceptor: tokio_rustls::TlsAcceptor,
}

fn pki() -> TestPki {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, SanType};
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::default();
    ca_params.distinguished_name.push(DnType::CommonName, "reports test CA");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca_params, ca_key);
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(vec!["localhost".to_owned()]).unwrap();
    params
        .subject_alt_names
        .push(SanType::IpAddress(IpAddr::V4(Ipv4Addr::LOCALHOST)));
    let leaf = params.signed_by(&key, &issuer).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![leaf.der().clone()],
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
        )
        .unwrap();
    config.alpn_protocols = vec![b"h2".to_vec()];
    TestPki {
        ca: ca.der().clone(),
        acceptor: tokio_rustls::TlsAcceptor::from(Arc::new(config)),
    }
}

/// A gRPC client over TLS that trusts only the test CA and offers ALPN h2, as the agent connects.
async fn connect(address: SocketAddr, ca: &CertificateDer<'static>) -> TerminationReportsClient<Channel> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(ca.clone()).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"h2".to_vec()];
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let channel = Endpoint::from_static("http://localhost")
        .connect_with_connector(tower::service_fn(move |_| {
            let connector = connector.clone();
            async move {
                let tcp = tokio::net::TcpStream::connect(address).await?;
                let name = ServerName::try_from("localhost").map_err(std::io::Error::other)?;
                let tls = connector.connect(name, tcp).await?;
                assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"h2"[..]), "h2 negotiated");
                Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(tls))
            }
        }))
        .await
        .expect("the receiver accepts a TLS connection trusting the test CA");
    TerminationReportsClient::new(channel)
}

/// Sends `reports` on one stream with `token` and returns their acks (in the order of their sequence).
async fn send(
    client: &mut TerminationReportsClient<Channel>,
    token: Option<&str>,
    reports: Vec<ReportRequest>,
) -> Result<Vec<ReportAck>, Status> {
    let expected = reports.len();
    let mut request = Request::new(futures::stream::iter(reports));
    if let Some(token) = token {
        request
            .metadata_mut()
            .insert("authorization", format!("Bearer {token}").parse().unwrap());
    }
    let mut acks = client.report(request).await?.into_inner();
    let mut answered = Vec::new();
    while let Some(ack) = acks.message().await? {
        answered.push(ack);
    }
    assert_eq!(answered.len(), expected, "one ack per report: {answered:?}");
    answered.sort_by_key(|a| a.sequence);
    Ok(answered)
}

fn report(role: Role, container_id: &str) -> TerminationReport {
    let driver = role == Role::Driver;
    TerminationReport {
        namespace: NAMESPACE.into(),
        app_name: APP.into(),
        submission_id: SUBMISSION.into(),
        spark_app_id: "spark-1".into(),
        pod_name: if driver { "pi-driver" } else { "pi-exec-1" }.into(),
        pod_uid: "uid-1".into(),
        role: role as i32,
        executor_id: (!driver).then_some(1),
        container_name: if driver {
            "spark-kubernetes-driver"
        } else {
            "spark-kubernetes-executor"
        }
        .into(),
        container_id: container_id.into(),
        attempt: 0,
        exit_code: if driver { 0 } else { 137 },
        reason: if driver { "Completed" } else { "OOMKilled" }.into(),
        message: String::new(),
        termination_message: String::new(),
        started_at: 1_700_000_000_000_000_000,
        finished_at: 1_700_000_100_000_000_000,
        node_name: "node-1".into(),
        log_tail: "the last line\n".into(),
    }
}

fn request(sequence: u64, report: TerminationReport) -> ReportRequest {
    ReportRequest {
        sequence,
        report: Some(report),
    }
}

/// A token for a ServiceAccount, as the kubelet projects one into the agent's pod.
async fn token(client: &kube::Client, namespace: &str, name: &str, audience: &str) -> String {
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), namespace);
    let request = TokenRequest {
        spec: TokenRequestSpec {
            audiences: vec![audience.to_owned()],
            expiration_seconds: Some(3600),
            ..TokenRequestSpec::default()
        },
        ..TokenRequest::default()
    };
    accounts
        .create_token_request(name, &PostParams::default(), &request)
        .await
        .expect("a token for the ServiceAccount")
        .status
        .expect("the token request's status")
        .token
}

async fn status_of(apps: &Api<SparkApplication>) -> serde_json::Value {
    let app = apps.get(APP).await.unwrap();
    serde_json::to_value(app.status.unwrap_or_default()).unwrap()
}

/// A simulated cluster with the agents' ServiceAccount and the application `pi` RUNNING its submission
/// `sub-1`, a receiver serving on a real TLS listener in its own runtime, a client connected to it, and
/// an agent's token.
struct Setup {
    _dir: tempfile::TempDir,
    cluster: spark_operator_dev::Cluster,
    admin: kube::Client,
    apps: Api<SparkApplication>,
    runtime: Runtime,
    serving: reports::Serving,
    client: TerminationReportsClient<Channel>,
    agent: String,
}

async fn setup() -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let options = spark_operator_dev::ClusterOptions {
        nodes: 0,
        ..spark_operator_dev::ClusterOptions::default()
    };
    let cluster = spark_operator_dev::Cluster::start(dir.path(), &options).await.unwrap();
    let admin = cluster.client.clone();

    // The agent's ServiceAccount, and the application with a current submission.
    let namespaces: Api<Namespace> = Api::all(admin.clone());
    namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": AGENT_NAMESPACE}})).unwrap(),
        )
        .await
        .unwrap();
    let accounts: Api<ServiceAccount> = Api::namespaced(admin.clone(), AGENT_NAMESPACE);
    accounts
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": AGENT}})).unwrap(),
        )
        .await
        .unwrap();
    let apps: Api<SparkApplication> = Api::namespaced(admin.clone(), NAMESPACE);
    let app: SparkApplication = serde_json::from_value(json!({
        "apiVersion": "sparkoperator.k8s.io/v1beta2",
        "kind": "SparkApplication",
        "metadata": {"name": APP, "namespace": NAMESPACE},
        "spec": {"type": "Scala", "sparkVersion": "4.0.4", "mainApplicationFile": "local:///pi.jar",
                 "mainClass": "org.apache.spark.examples.SparkPi", "driver": {}, "executor": {}}
    }))
    .unwrap();
    apps.create(&PostParams::default(), &app).await.unwrap();
    apps.patch_status(
        APP,
        &PatchParams::default(),
        &Patch::Merge(
            json!({"status": {"submissionID": SUBMISSION, "applicationState": {"state": "RUNNING"},
                                        "driverInfo": {"podName": "pi-driver"}}}),
        ),
    )
    .await
    .unwrap();

    // The receiver, in its own runtime, as a replica of the operator runs it.
    let config = spark_operator_runtime::client::config_from(Some(cluster.sim.kubeconfig_path()))
        .await
        .unwrap();
    let settings = RuntimeSettings {
        identity: IDENTITY.to_owned(),
        election: None,
        metrics: Listen::Off,
    };
    let runtime = Runtime::start(config, settings, Shutdown::never()).await.unwrap();
    let args = ReceiverArgs {
        reports_address: Listen::On("127.0.0.1:0".parse().unwrap()),
        agent_service_accounts: vec![AgentAccount {
            namespace: AGENT_NAMESPACE.into(),
            name: AGENT.into(),
        }],
        agent_token_audience: AUDIENCE.into(),
        reports_service_name: "spark-operator-reports".into(),
        status_byte_budget: 256 * 1024,
    };
    let pki = pki();
    let serving = reports::start(args, pki.acceptor.clone(), &runtime)
        .await
        .unwrap()
        .expect("listening");
    assert!(
        !runtime.readiness().not_ready().contains(&"reports".to_owned()),
        "ready once listening"
    );
    let client = connect(serving.address, &pki.ca).await;
    let agent = token(&admin, AGENT_NAMESPACE, AGENT, AUDIENCE).await;
    Setup {
        _dir: dir,
        cluster,
        admin,
        apps,
        runtime,
        serving,
        client,
        agent,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reports_are_recorded_before_they_are_acknowledged() {
    let Setup {
        _dir,
        cluster,
        admin,
        apps,
        runtime,
        serving,
        mut client,
        agent,
    } = setup().await;

    // The driver pod of the submission, controlled by the application: still Pending (no node will ever
    // run it), so it shows no end of its own.
    let app_uid = apps.get(APP).await.unwrap().metadata.uid.unwrap();
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(admin.clone(), NAMESPACE);
    let pod = serde_json::from_value(json!({
        "metadata": {
            "name": "pi-driver",
            "labels": {
                labels::LABEL_APP_NAME: APP,
                labels::LABEL_SUBMISSION_ID: SUBMISSION,
                labels::LABEL_LAUNCHED_BY_SPARK_OPERATOR: labels::LABEL_VALUE_TRUE,
                labels::LABEL_SPARK_ROLE: "driver",
            },
            "ownerReferences": [{"apiVersion": "sparkoperator.k8s.io/v1beta2", "kind": "SparkApplication",
                                 "name": APP, "uid": app_uid, "controller": true}],
        },
        "spec": {"containers": [{"name": "spark-kubernetes-driver", "image": "spark:4.0.0"}]},
    }))
    .unwrap();
    let driver_uid = pods
        .create(&PostParams::default(), &pod)
        .await
        .unwrap()
        .metadata
        .uid
        .unwrap();
    let driver_report = || {
        let mut r = report(Role::Driver, "c-driver");
        r.pod_uid = driver_uid.clone();
        r
    };

    // A report of another pod by that name (its uid): DISCARD, nothing recorded.
    let acks = send(
        &mut client,
        Some(&agent),
        vec![request(1, report(Role::Driver, "c-driver"))],
    )
    .await
    .unwrap();
    assert_eq!(acks[0].verdict(), Verdict::Discard, "{acks:?}");
    assert!(acks[0].reason.contains("pod_uid"), "{}", acks[0].reason);
    assert!(status_of(&apps).await.get("driverTermination").is_none());

    // The driver's report: OK, and the driver's end is in the status, as the agent saw it.
    let acks = send(&mut client, Some(&agent), vec![request(1, driver_report())])
        .await
        .unwrap();
    assert_eq!((acks[0].sequence, acks[0].verdict()), (1, Verdict::Ok), "{acks:?}");
    let status = status_of(&apps).await;
    let driver = &status["driverTermination"];
    assert_eq!(driver["observedBy"], TerminationObserver::Agent.as_str(), "{status}");
    assert_eq!(driver["containerID"], "c-driver");
    assert_eq!(driver["exitCode"], 0);
    assert_eq!(driver["logTail"], "the last line\n");
    let version = apps.get(APP).await.unwrap().metadata.resource_version;

    // The same report again (an agent that restarted before it saw the ack): OK, nothing written.
    let acks = send(&mut client, Some(&agent), vec![request(2, driver_report())])
        .await
        .unwrap();
    assert_eq!(acks[0].verdict(), Verdict::Ok, "{acks:?}");
    assert_eq!(
        apps.get(APP).await.unwrap().metadata.resource_version,
        version,
        "no write"
    );
    assert_eq!(status_of(&apps).await, status);

    // An executor report: waiting in uncountedExecutorTerminations for the leader to count it.
    let acks = send(
        &mut client,
        Some(&agent),
        vec![request(3, report(Role::Executor, "c-exec-1"))],
    )
    .await
    .unwrap();
    assert_eq!(acks[0].verdict(), Verdict::Ok, "{acks:?}");
    let status = status_of(&apps).await;
    let uncounted = status["uncountedExecutorTerminations"].as_array().unwrap();
    assert_eq!(uncounted.len(), 1, "{status}");
    assert_eq!(uncounted[0]["containerID"], "c-exec-1");
    assert_eq!(uncounted[0]["executorId"], 1);
    assert_eq!(uncounted[0]["exitCode"], 137);
    assert_eq!(uncounted[0]["reason"], "OOMKilled");

    // While the API server fails the receiver's status writes: RETRY, and the status as it was. An
    // implementation that answered before its write (or whatever the write did) would say OK here with
    // nothing recorded, and the agent would delete the report from its spool: a lost termination.
    cluster.sim.faults().add(FaultRule {
        verb: Some("patch".into()),
        resource: Some("sparkapplications.sparkoperator.k8s.io".into()),
        user_agent: Some(IDENTITY.into()),
        action: FaultAction::Fail {
            code: 500,
            reason: "InternalError".into(),
            message: "etcd is having a bad day".into(),
        },
        times: None,
    });
    let second = || {
        let mut r = report(Role::Executor, "c-exec-2");
        r.pod_name = "pi-exec-2".into();
        r.executor_id = Some(2);
        r
    };
    let acks = send(&mut client, Some(&agent), vec![request(4, second())])
        .await
        .unwrap();
    assert_eq!(acks[0].verdict(), Verdict::Retry, "{acks:?}");
    assert!(
        acks[0].reason.contains("etcd is having a bad day"),
        "{}",
        acks[0].reason
    );
    assert_eq!(status_of(&apps).await, status, "nothing recorded");
    cluster.sim.faults().clear();
    let acks = send(&mut client, Some(&agent), vec![request(4, second())])
        .await
        .unwrap();
    assert_eq!(acks[0].verdict(), Verdict::Ok, "{acks:?}");
    let status = status_of(&apps).await;
    let ids: Vec<&str> = status["uncountedExecutorTerminations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["containerID"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["c-exec-1", "c-exec-2"]);

    // A malformed report: DISCARD, naming the field; other reports of the stream are still answered.
    let mut nameless = report(Role::Executor, "c-exec-3");
    nameless.pod_name = String::new();
    let mut sidecar = report(Role::Driver, "c-sidecar");
    sidecar.container_name = "istio-proxy".into();
    let acks = send(
        &mut client,
        Some(&agent),
        vec![
            request(5, nameless),
            request(6, sidecar),
            ReportRequest {
                sequence: 7,
                report: None,
            },
            request(8, report(Role::Executor, "c-exec-1")),
        ],
    )
    .await
    .unwrap();
    let verdicts: Vec<(u64, Verdict)> = acks.iter().map(|a| (a.sequence, a.verdict())).collect();
    assert_eq!(
        verdicts,
        [
            (5, Verdict::Discard),
            (6, Verdict::Discard),
            (7, Verdict::Discard),
            (8, Verdict::Ok)
        ],
        "{acks:?}"
    );
    assert!(acks[0].reason.contains("pod_name"), "{}", acks[0].reason);
    assert!(acks[1].reason.contains("container_name"), "{}", acks[1].reason);
    assert!(acks[2].reason.contains("report is missing"), "{}", acks[2].reason);
    assert_eq!(status_of(&apps).await, status, "nothing recorded");

    // Another submission's report, and an application that does not exist: DISCARD with why.
    let mut old = report(Role::Executor, "c-old");
    old.submission_id = "sub-0".into();
    let mut gone = report(Role::Executor, "c-gone");
    gone.app_name = "no-such-app".into();
    let acks = send(&mut client, Some(&agent), vec![request(9, old), request(10, gone)])
        .await
        .unwrap();
    assert_eq!(acks[0].verdict(), Verdict::Discard, "{acks:?}");
    assert!(acks[0].reason.contains("superseded"), "{}", acks[0].reason);
    assert_eq!(acks[1].verdict(), Verdict::Discard, "{acks:?}");
    assert!(acks[1].reason.contains("application gone"), "{}", acks[1].reason);

    // Only the agents' ServiceAccount may report: another ServiceAccount's token (for the right
    // audience) is refused, and so is the agent's own token for another audience, or none at all.
    let refused = [
        (
            Some(token(&admin, NAMESPACE, "spark-operator-spark", AUDIENCE).await),
            Code::PermissionDenied,
            "may not send",
        ),
        (
            Some(
                token(
                    &admin,
                    AGENT_NAMESPACE,
                    AGENT,
                    "https://kubernetes.default.svc.cluster.local",
                )
                .await,
            ),
            Code::Unauthenticated,
            "",
        ),
        (Some("not-a-token".to_owned()), Code::Unauthenticated, ""),
        (None, Code::Unauthenticated, "no bearer token"),
    ];
    for (token, code, words) in refused {
        let mut driver = report(Role::Driver, "c-driver");
        driver.exit_code = 1;
        let error = send(&mut client, token.as_deref(), vec![request(11, driver)])
            .await
            .unwrap_err();
        assert_eq!(error.code(), code, "{error:?}");
        assert!(error.message().contains(words), "{}", error.message());
    }
    assert_eq!(status_of(&apps).await, status, "nothing recorded from refused streams");

    let metrics = runtime.metrics().render();
    assert!(
        metrics.contains("spark_operator_reports{verdict=\"ok\"} 5\n"),
        "{metrics}"
    );
    assert!(
        metrics.contains("spark_operator_reports{verdict=\"retry\"} 1\n"),
        "{metrics}"
    );
    assert!(
        metrics.contains("spark_operator_reports{verdict=\"discard\"} 6\n"),
        "{metrics}"
    );
    assert!(
        metrics.contains("spark_operator_report_streams_refused 4\n"),
        "{metrics}"
    );
    assert!(
        metrics.contains("spark_operator_termination_to_status_seconds_count 3\n"),
        "one per write: {metrics}"
    );

    // The leader then does the rest: the run finishes from the agent's record although its driver pod
    // shows nothing (before the record counted, a pending pod kept the run SUBMITTED), and the executor
    // reports move into the counts, with their log tails, and out of the uncounted list, in one write.
    #[derive(clap::Parser)]
    struct Flags {
        #[command(flatten)]
        controller: spark_operator_controller::ControllerArgs,
    }
    let flags = <Flags as clap::Parser>::try_parse_from(["controller"]).unwrap();
    let controller = tokio::spawn(async move {
        let result = spark_operator_controller::run(flags.controller, &runtime).await;
        (runtime, result)
    });
    let mut last = serde_json::Value::Null;
    for _ in 0..300 {
        last = status_of(&apps).await;
        if last["applicationState"]["state"] == "COMPLETED" && last.get("uncountedExecutorTerminations").is_none() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(last["applicationState"]["state"], "COMPLETED", "{last:#}");
    assert!(last.get("uncountedExecutorTerminations").is_none(), "{last:#}");
    assert_eq!(last["executorCounts"]["failed"], 2, "{last:#}");
    let failures: Vec<(&str, &str)> = last["recentExecutorFailures"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| (f["containerID"].as_str().unwrap(), f["logTail"].as_str().unwrap()))
        .collect();
    assert_eq!(
        failures,
        [("c-exec-1", "the last line\n"), ("c-exec-2", "the last line\n")],
        "{last:#}"
    );
    assert_eq!(last["driverTermination"]["observedBy"], "Agent");
    controller.abort();
    drop(serving);
}

/// An executor's report of `container_id` in submission `submission`.
fn executor_report(container_id: &str, executor_id: i64, submission: &str) -> TerminationReport {
    let mut r = report(Role::Executor, container_id);
    r.pod_name = format!("pi-exec-{executor_id}");
    r.executor_id = Some(executor_id);
    r.submission_id = submission.into();
    r
}

fn uncounted_ids(status: &serde_json::Value) -> Vec<String> {
    status["uncountedExecutorTerminations"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|r| r["containerID"].as_str().unwrap().to_owned())
        .collect()
}

/// Sends one report on its own stream and returns its ack.
async fn send_one(
    client: &mut TerminationReportsClient<Channel>,
    agent: &str,
    sequence: u64,
    report: TerminationReport,
) -> ReportAck {
    let mut acks = send(client, Some(agent), vec![request(sequence, report)])
        .await
        .unwrap();
    acks.remove(0)
}

/// A merge patch of the application's status, as another writer (the leader) makes one.
async fn patch_status(apps: &Api<SparkApplication>, patch: serde_json::Value) {
    apps.patch_status(APP, &PatchParams::default(), &Patch::Merge(patch))
        .await
        .unwrap();
}

/// The receiver starts a write from the copy its last write returned, without reading the application
/// again. Someone else's write since makes that copy stale: its write must fail on the resourceVersion
/// (and start over on a fresh read), and no answer may be decided on it without a write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_copy_of_the_application_never_decides_or_overwrites() {
    let Setup {
        _dir,
        cluster: _cluster,
        admin: _admin,
        apps,
        runtime,
        serving,
        mut client,
        agent,
    } = setup().await;
    let conflicts = |runtime: &Runtime| {
        let metrics = runtime.metrics().render();
        metrics
            .lines()
            .find_map(|l| l.strip_prefix("spark_operator_report_write_conflicts "))
            .map(|v| v.parse::<u64>().unwrap())
            .unwrap_or_else(|| panic!("no conflict count: {metrics}"))
    };

    // Recorded by a write: the receiver keeps the application as that write returned it.
    let ack = send_one(&mut client, &agent, 1, executor_report("c-1", 1, SUBMISSION)).await;
    assert_eq!(ack.verdict(), Verdict::Ok, "{ack:?}");
    assert_eq!(uncounted_ids(&status_of(&apps).await), ["c-1"]);
    assert_eq!(conflicts(&runtime), 0);

    // The leader counts c-1 behind the receiver's back. A write from the stale copy would put c-1 back
    // into the uncounted list beside c-2 (a merge patch replaces the list whole), and the leader would
    // count it twice: it must conflict and be redone on a fresh read.
    patch_status(
        &apps,
        json!({"status": {"uncountedExecutorTerminations": null, "executorCounts": {"failed": 1}}}),
    )
    .await;
    let ack = send_one(&mut client, &agent, 2, executor_report("c-2", 2, SUBMISSION)).await;
    assert_eq!(ack.verdict(), Verdict::Ok, "{ack:?}");
    let status = status_of(&apps).await;
    assert_eq!(uncounted_ids(&status), ["c-2"], "{status:#}");
    assert_eq!(status["executorCounts"]["failed"], 1, "{status:#}");
    assert_eq!(
        conflicts(&runtime),
        1,
        "the write started from the copy, not from a read"
    );

    // A new run starts (the leader resubmits): on the stale copy, a report of the new submission looks
    // superseded, an answer that needs no write. Discarding it there would lose it: it is decided on a
    // fresh read instead, and recorded.
    patch_status(
        &apps,
        json!({"status": {"submissionID": "sub-2", "uncountedExecutorTerminations": null}}),
    )
    .await;
    let ack = send_one(&mut client, &agent, 3, executor_report("c-3", 1, "sub-2")).await;
    assert_eq!((ack.verdict(), ack.reason.as_str()), (Verdict::Ok, ""), "{ack:?}");
    assert_eq!(uncounted_ids(&status_of(&apps).await), ["c-3"]);

    // And a report the fresh application really has no place for is still refused.
    let ack = send_one(&mut client, &agent, 4, executor_report("c-4", 2, SUBMISSION)).await;
    assert_eq!(ack.verdict(), Verdict::Discard, "{ack:?}");
    assert!(ack.reason.contains("superseded"), "{}", ack.reason);
    drop(serving);
}
