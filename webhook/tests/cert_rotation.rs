//! The shared CA over time, with replicas in one process (each with its own client and tasks, as
//! separate pods would have):
//!
//! - a forced rotation under continuous admission-like TLS exchanges, with replicas restarted in the
//!   middle of it: the CA changes, both CAs are in `caBundle` during the window, exchanges are served
//!   under each CA, the old CA leaves at the end, and no exchange fails;
//! - serving certificates renewed at two thirds of their life, without a restart;
//! - externally supplied certificate files, swapped the way a Secret volume swaps them;
//! - the `caBundle` apply leaves the installer's fields alone.

// Test code: a panic is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rustls_pki_types::CertificateDer;
use spark_operator_webhook::certs::{CaConfigMap, CertConfig, CertManager, Managed, Subject, Timing, external};
use support::*;
use tokio::net::TcpListener;

const LIMIT: Duration = Duration::from_secs(60);
const EXCHANGES: usize = 1000;

/// One replica: its certificates and its tiny HTTPS server on a fixed address.
struct Replica {
    manager: CertManager,
    server: tokio::task::JoinHandle<()>,
    address: SocketAddr,
}

impl Replica {
    async fn start(client: kube::Client, ip: IpAddr, port: u16, timing: &Timing) -> Replica {
        let mut managed = Managed::new(
            NAMESPACE,
            Subject {
                dns_names: vec![SERVICE_DNS.into()],
                ip_addresses: vec![ip],
            },
        );
        managed.configurations = configurations();
        managed.ca_config_map = Some(CaConfigMap {
            namespace: NAMESPACE.into(),
            name: CA_CONFIG_MAP.into(),
        });
        managed.timing = timing.clone();
        let manager = CertManager::start(CertConfig::Managed(managed), client).unwrap();
        let listener = TcpListener::bind((ip, port)).await.unwrap();
        let address = listener.local_addr().unwrap();
        let server = tokio::spawn(serve_https(listener, manager.acceptor()));
        Replica {
            manager,
            server,
            address,
        }
    }

    /// Stops it as a killed pod stops: tasks and server gone, nothing handed over.
    fn stop(self) -> SocketAddr {
        self.server.abort();
        drop(self.manager);
        self.address
    }
}

async fn client_for(sim: &kube_sim::Sim, name: &str) -> kube::Client {
    let config = spark_operator_runtime::client::config_from(Some(sim.kubeconfig_path()))
        .await
        .unwrap();
    spark_operator_runtime::client::client(spark_operator_runtime::client::identify(config, name)).unwrap()
}

/// What the exchanges saw.
#[derive(Default)]
struct Seen {
    ok: AtomicUsize,
    failures: Mutex<Vec<String>>,
    /// Exchanges served under the old CA and under the new one.
    under_old: AtomicUsize,
    under_new: AtomicUsize,
    /// Exchanges made while caBundle held both CAs.
    with_both: AtomicUsize,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forced_rotation_under_continuous_exchanges_with_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let sim = start_sim(dir.path()).await;
    let client = sim.client().await.unwrap();
    install_configuration(&client).await;
    let timing = Timing {
        propagation: Duration::from_secs(2),
        retire_grace: Duration::from_secs(4),
        check_every: Duration::from_secs(1),
        ..Timing::default()
    };
    let ips: Vec<IpAddr> = ["127.0.0.2", "127.0.0.3", "127.0.0.4"]
        .iter()
        .map(|ip| ip.parse().unwrap())
        .collect();
    let mut replicas = Vec::new();
    for (n, ip) in ips.iter().enumerate() {
        replicas.push(Some(
            Replica::start(client_for(&sim, &format!("replica-{n}")).await, *ip, 0, &timing).await,
        ));
    }
    let addresses: Vec<SocketAddr> = replicas.iter().map(|r| r.as_ref().unwrap().address).collect();
    for replica in replicas.iter().flatten() {
        tokio::time::timeout(LIMIT, replica.manager.wait_loaded())
            .await
            .unwrap();
    }
    let old = poll(LIMIT, || async {
        let roots = ca_bundle(&client).await;
        (roots.len() == 1).then(|| roots[0].clone())
    })
    .await
    .expect("the first CA reaches caBundle");
    // The agents' CA ConfigMap follows the same bundle.
    poll(LIMIT, || async {
        (ca_config_map(&client).await == [old.clone()]).then_some(())
    })
    .await
    .expect("the first CA reaches the CA ConfigMap");

    // Admission-like exchanges, four at a time, to whichever replicas are up (a Service sends nothing
    // to a pod that is not ready), each trusting caBundle as an API server sees it: from a cache that
    // lags the stored configuration (here refreshed every 500 ms), which is why the switch waits.
    let view: Arc<Mutex<Vec<CertificateDer<'static>>>> = Arc::new(Mutex::new(vec![old.clone()]));
    let refresher = tokio::spawn({
        let (client, view) = (client.clone(), view.clone());
        async move {
            loop {
                tokio::time::sleep(Duration::from_millis(500)).await;
                let bundle = ca_bundle(&client).await;
                *view.lock().unwrap() = bundle;
            }
        }
    });
    let up: Arc<Vec<AtomicBool>> = Arc::new(ips.iter().map(|_| AtomicBool::new(true)).collect());
    let seen = Arc::new(Seen::default());
    let new_ca: Arc<Mutex<Option<CertificateDer<'static>>>> = Arc::default();
    let done = Arc::new(AtomicBool::new(false));
    let mut workers = Vec::new();
    for worker in 0..4 {
        let (view, up, seen, new_ca, done, old, addresses) = (
            view.clone(),
            up.clone(),
            seen.clone(),
            new_ca.clone(),
            done.clone(),
            old.clone(),
            addresses.clone(),
        );
        workers.push(tokio::spawn(async move {
            let mut n = worker;
            while !done.load(Ordering::Relaxed) {
                n += 1;
                let target = n % addresses.len();
                if !up[target].load(Ordering::Relaxed) {
                    continue;
                }
                let roots = view.lock().unwrap().clone();
                let address = addresses[target];
                match exchange(address, ip_name(address.ip()), &roots).await {
                    Ok(served) => {
                        seen.ok.fetch_add(1, Ordering::Relaxed);
                        if roots.len() == 2 {
                            seen.with_both.fetch_add(1, Ordering::Relaxed);
                        }
                        if issuer_of(&served, std::slice::from_ref(&old), address.ip()).is_some() {
                            seen.under_old.fetch_add(1, Ordering::Relaxed);
                        } else if let Some(new) = new_ca.lock().unwrap().clone()
                            && issuer_of(&served, &[new], address.ip()).is_some()
                        {
                            seen.under_new.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    Err(error) => {
                        // A replica stopped between the check and the connection is not a TLS failure.
                        if up[target].load(Ordering::Relaxed) {
                            seen.failures.lock().unwrap().push(format!("{address}: {error}"));
                        }
                    }
                }
            }
        }));
    }
    // Some exchanges under the old CA first.
    poll(LIMIT, || async {
        (seen.under_old.load(Ordering::Relaxed) >= 100).then_some(())
    })
    .await
    .unwrap();

    assert!(
        replicas[0].as_ref().unwrap().manager.rotate_now().await.unwrap(),
        "a rotation starts"
    );
    let staged = ca_state(&client).await.unwrap();
    let next = staged.next.unwrap().unwrap().cert;
    assert_ne!(next, old, "a new CA");
    *new_ca.lock().unwrap() = Some(next.clone());

    // Phase 1: restart replica 0 (the one that forced the rotation) while the successor is only staged.
    up[0].store(false, Ordering::Relaxed);
    let address = replicas[0].take().unwrap().stop();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let restarted = Replica::start(
        client_for(&sim, "replica-0b").await,
        address.ip(),
        address.port(),
        &timing,
    )
    .await;
    tokio::time::timeout(LIMIT, restarted.manager.wait_loaded())
        .await
        .unwrap();
    replicas[0] = Some(restarted);
    up[0].store(true, Ordering::Relaxed);

    // Phase 2: the switch; then restart replica 1 while the old CA is still in the bundle.
    poll(LIMIT, || async {
        let state = ca_state(&client).await?;
        (state.current.ok()?.cert == next).then_some(())
    })
    .await
    .expect("the replicas switch to the new CA");
    up[1].store(false, Ordering::Relaxed);
    let address = replicas[1].take().unwrap().stop();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let restarted = Replica::start(
        client_for(&sim, "replica-1b").await,
        address.ip(),
        address.port(),
        &timing,
    )
    .await;
    tokio::time::timeout(LIMIT, restarted.manager.wait_loaded())
        .await
        .unwrap();
    replicas[1] = Some(restarted);
    up[1].store(true, Ordering::Relaxed);

    // Phase 3: the old CA leaves the Secret's bundle and caBundle.
    poll(LIMIT, || async {
        let state = ca_state(&client).await?;
        let bundle = ca_bundle(&client).await;
        let agents = ca_config_map(&client).await;
        (state.bundle == [next.clone()] && bundle == [next.clone()] && agents == [next.clone()]).then_some(())
    })
    .await
    .expect("the old CA leaves the bundle and the CA ConfigMap");
    // Enough exchanges in all, and some of them under the new CA alone.
    let before = seen.under_new.load(Ordering::Relaxed);
    poll(LIMIT, || async {
        (seen.ok.load(Ordering::Relaxed) + seen.failures.lock().unwrap().len() >= EXCHANGES
            && seen.under_new.load(Ordering::Relaxed) > before + 20)
            .then_some(())
    })
    .await
    .expect("exchanges continue");
    done.store(true, Ordering::Relaxed);
    for worker in workers {
        worker.await.unwrap();
    }
    refresher.abort();

    let failures = seen.failures.lock().unwrap().clone();
    let ok = seen.ok.load(Ordering::Relaxed);
    println!(
        "{ok} exchanges, {} failed; {} under the old CA, {} under the new, {} while caBundle held both",
        failures.len(),
        seen.under_old.load(Ordering::Relaxed),
        seen.under_new.load(Ordering::Relaxed),
        seen.with_both.load(Ordering::Relaxed),
    );
    assert!(failures.is_empty(), "TLS failures: {failures:?}");
    assert!(ok >= EXCHANGES);
    assert!(seen.under_old.load(Ordering::Relaxed) > 0);
    assert!(seen.under_new.load(Ordering::Relaxed) > 0);
    assert!(
        seen.with_both.load(Ordering::Relaxed) > 0,
        "caBundle held both CAs during the window"
    );
    // Every replica, restarted or not, serves from the new CA, trusted by caBundle alone.
    for address in &addresses {
        let served = exchange(*address, ip_name(address.ip()), std::slice::from_ref(&next))
            .await
            .unwrap();
        assert_eq!(issuer_of(&served, std::slice::from_ref(&next), address.ip()), Some(0));
    }
    // The replica never restarted saw one rotation and renewed its certificate for it.
    let metrics = replicas[2].as_ref().unwrap().manager.metrics();
    assert_eq!(metrics.ca_rotations.get(), 1);
    assert!(metrics.leaf_renewals.get() >= 1);
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serving_certificates_renew_without_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let sim = start_sim(dir.path()).await;
    let client = sim.client().await.unwrap();
    install_configuration(&client).await;
    let timing = Timing {
        leaf_lifetime: Duration::from_secs(3),
        check_every: Duration::from_secs(1),
        ..Timing::default()
    };
    let ip: IpAddr = "127.0.0.2".parse().unwrap();
    let replica = Replica::start(client.clone(), ip, 0, &timing).await;
    tokio::time::timeout(LIMIT, replica.manager.wait_loaded())
        .await
        .unwrap();
    let roots = poll(LIMIT, || async {
        let roots = ca_bundle(&client).await;
        (!roots.is_empty()).then_some(roots)
    })
    .await
    .unwrap();
    let first = exchange(replica.address, ip_name(ip), &roots).await.unwrap();
    let renewed = poll(LIMIT, || async {
        let served = exchange(replica.address, ip_name(ip), &roots).await.ok()?;
        (served != first).then_some(served)
    })
    .await
    .expect("a renewed certificate is served");
    assert_eq!(issuer_of(&renewed, &roots, ip), Some(0), "from the same CA");
    assert!(replica.manager.metrics().leaf_renewals.get() >= 1);
    assert_eq!(replica.manager.metrics().ca_rotations.get(), 0);
    sim.shutdown().await;
}

/// A self-signed certificate for `ip` as PEM (certificate, key).
fn self_signed(ip: IpAddr) -> (String, String) {
    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
    let mut params = rcgen::CertificateParams::default();
    params.subject_alt_names = vec![rcgen::SanType::IpAddress(ip)];
    let cert = params.self_signed(&key).unwrap();
    (cert.pem(), key.serialize_pem())
}

/// Writes a Secret volume's layout: the files in a fresh directory, `..data` pointing at it, and
/// `tls.crt`/`tls.key` as symlinks through `..data` (what the kubelet does, atomically).
fn write_volume(dir: &std::path::Path, generation: u32, cert: &str, key: &str) {
    let data = dir.join(format!("..{generation}"));
    std::fs::create_dir(&data).unwrap();
    std::fs::write(data.join("tls.crt"), cert).unwrap();
    std::fs::write(data.join("tls.key"), key).unwrap();
    let link = dir.join("..data_tmp");
    std::os::unix::fs::symlink(format!("..{generation}"), &link).unwrap();
    std::fs::rename(&link, dir.join("..data")).unwrap();
    for name in ["tls.crt", "tls.key"] {
        let path = dir.join(name);
        if std::fs::symlink_metadata(&path).is_err() {
            std::os::unix::fs::symlink(format!("..data/{name}"), &path).unwrap();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn external_certificates_reload_when_the_volume_swaps() {
    let dir = tempfile::tempdir().unwrap();
    let sim = start_sim(&dir.path().join("sim")).await;
    let client = sim.client().await.unwrap();
    install_configuration(&client).await;
    let volume = dir.path().join("volume");
    std::fs::create_dir(&volume).unwrap();
    let ip: IpAddr = "127.0.0.3".parse().unwrap();
    let (cert1, key1) = self_signed(ip);
    write_volume(&volume, 1, &cert1, &key1);
    let files = external::Files {
        cert: volume.join("tls.crt"),
        key: volume.join("tls.key"),
        poll: Duration::from_millis(100),
    };
    let manager = CertManager::start(CertConfig::External(files), client.clone()).unwrap();
    let listener = TcpListener::bind((ip, 0)).await.unwrap();
    let address = listener.local_addr().unwrap();
    let server = tokio::spawn(serve_https(listener, manager.acceptor()));
    tokio::time::timeout(LIMIT, manager.wait_loaded()).await.unwrap();
    let first = pem_certificate(&cert1);
    exchange(address, ip_name(ip), std::slice::from_ref(&first))
        .await
        .unwrap();

    let (cert2, key2) = self_signed(ip);
    write_volume(&volume, 2, &cert2, &key2);
    let second = pem_certificate(&cert2);
    poll(LIMIT, || async {
        exchange(address, ip_name(ip), std::slice::from_ref(&second)).await.ok()
    })
    .await
    .expect("the swapped certificate is served");
    assert!(
        exchange(address, ip_name(ip), std::slice::from_ref(&first))
            .await
            .is_err()
    );
    assert_eq!(manager.metrics().leaf_renewals.get(), 1);
    // The webhook does not manage caBundle when certificates come from outside.
    assert!(ca_bundle(&client).await.is_empty());
    assert!(matches!(
        manager.rotate_now().await,
        Err(spark_operator_webhook::certs::Error::NotManaged)
    ));
    server.abort();
    sim.shutdown().await;
}

fn pem_certificate(pem: &str) -> CertificateDer<'static> {
    spark_operator_webhook::certs::pem::certificates(pem.as_bytes())
        .unwrap()
        .remove(0)
}

/// `caBundle` is applied as `webhooks[name].clientConfig.caBundle` only; the installer's webhooks, rules
/// and `failurePolicy` must survive it: API servers merge `webhooks` by `name` (`listType=map`), and so
/// does kube-sim (`sim/src/list_types.rs`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ca_bundle_apply_leaves_the_installers_fields() {
    let dir = tempfile::tempdir().unwrap();
    let sim = start_sim(dir.path()).await;
    let client = sim.client().await.unwrap();
    install_configuration(&client).await;
    let replica = Replica::start(client.clone(), "127.0.0.2".parse().unwrap(), 0, &Timing::default()).await;
    tokio::time::timeout(LIMIT, replica.manager.wait_loaded())
        .await
        .unwrap();
    poll(LIMIT, || async { (!ca_bundle(&client).await.is_empty()).then_some(()) })
        .await
        .unwrap();
    assert_installer_fields_intact(&client).await;
    sim.shutdown().await;
}

/// A configuration installed after the replica started gets its `caBundle` from the watch event, not
/// from the periodic check (set to an hour here, so only the event can fill it): until then the API
/// server could not call the webhook and would fail every admission closed (issue 30, fault 6).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_configuration_created_later_gets_its_ca_bundle_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let sim = start_sim(dir.path()).await;
    let client = sim.client().await.unwrap();
    let timing = Timing {
        check_every: Duration::from_secs(3600),
        ..Timing::default()
    };
    let replica = Replica::start(client.clone(), "127.0.0.2".parse().unwrap(), 0, &timing).await;
    tokio::time::timeout(LIMIT, replica.manager.wait_loaded())
        .await
        .unwrap();
    // Let the replica settle into its long wait before the configuration appears.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(ca_bundle(&client).await.is_empty(), "no configuration yet");
    install_configuration(&client).await;
    let filled = poll(Duration::from_secs(20), || async {
        (!ca_bundle(&client).await.is_empty()).then_some(())
    })
    .await;
    assert!(
        filled.is_some(),
        "caBundle not filled within 20 s of the configuration's creation"
    );
    assert_installer_fields_intact(&client).await;
    sim.shutdown().await;
}
