//! Three webhook replica **processes** started at once on an empty CA Secret, with every Secret write
//! delayed 300 ms by the simulated API server (so all three find it absent and race): exactly one CA
//! must ever be stored, and every replica must serve a certificate the webhook configuration's
//! `caBundle` trusts. 10 rounds, 50 with `SPARK_E2E_FULL=1`.
//!
//! The same test run against the naive implementation (Kubeflow's: each replica makes a CA at start,
//! overwrites the Secret and serves its own certificate) must fail; it does, and that is checked too.
//!
//! The replicas are this test binary run again with `SPARK_WEBHOOK_CERT_REPLICA` set (so no binary is
//! added to the package); hence `harness = false` and a `main` of its own.

// Test code: a panic is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use kube_sim::faults::{FaultAction, FaultRule};
use spark_operator_webhook::certs::{CertConfig, CertManager, Managed, Subject};
use support::*;
use tokio::io::{AsyncBufReadExt as _, AsyncReadExt as _, BufReader};
use tokio::net::TcpListener;

const REPLICA: &str = "SPARK_WEBHOOK_CERT_REPLICA";
const REPLICA_KUBECONFIG: &str = "SPARK_WEBHOOK_CERT_KUBECONFIG";
const REPLICA_NAIVE: &str = "SPARK_WEBHOOK_CERT_NAIVE";
const ADDRESSES: [&str; 3] = ["127.0.0.2", "127.0.0.3", "127.0.0.4"];
/// How long replicas get to start (bounded waits, not timing assertions).
const LIMIT: Duration = Duration::from_secs(30);
/// How long every replica gets to be trusted by the caBundle once all have a certificate.
const TRUST_LIMIT: Duration = Duration::from_secs(15);

fn main() {
    if let Ok(ip) = std::env::var(REPLICA) {
        replica(&ip);
        return;
    }
    let args: Vec<String> = std::env::args().skip(1).collect();
    let tests: [(&str, fn()); 2] = [
        ("one_ca_for_three_replica_processes", one_ca_for_three_replica_processes),
        (
            "naive_create_or_overwrite_fails_the_same_test",
            naive_create_or_overwrite_fails_the_same_test,
        ),
    ];
    if args.iter().any(|a| a == "--list") {
        for (name, _) in tests {
            println!("{name}: test");
        }
        return;
    }
    let filters: Vec<&String> = args.iter().filter(|a| !a.starts_with('-')).collect();
    let mut failed = 0;
    for (name, test) in tests {
        if !filters.is_empty() && !filters.iter().any(|f| name.contains(f.as_str())) {
            continue;
        }
        println!("test {name} ...");
        match std::panic::catch_unwind(test) {
            Ok(()) => println!("test {name} ... ok"),
            Err(_) => {
                println!("test {name} ... FAILED");
                failed += 1;
            }
        }
    }
    if failed > 0 {
        std::process::exit(1);
    }
}

fn tokio() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// One replica: the certificate machinery and a tiny HTTPS server on its address; says `LISTEN <port>`
/// and then `LOADED` on stdout, and exits when its stdin closes (the test is done with it).
fn replica(ip: &str) {
    spark_operator_runtime::logging::init();
    tokio().block_on(async {
        let ip: IpAddr = ip.parse().unwrap();
        let kubeconfig = PathBuf::from(std::env::var(REPLICA_KUBECONFIG).unwrap());
        let config = spark_operator_runtime::client::config_from(Some(&kubeconfig))
            .await
            .unwrap();
        let config = spark_operator_runtime::client::identify(config, &format!("replica-{ip}"));
        let client = spark_operator_runtime::client::client(config).unwrap();
        let mut managed = Managed::new(
            NAMESPACE,
            Subject {
                dns_names: vec![SERVICE_DNS.into()],
                ip_addresses: vec![ip],
            },
        );
        managed.configurations = configurations();
        managed.naive_overwrite = std::env::var(REPLICA_NAIVE).is_ok_and(|v| v == "1");
        let manager = CertManager::start(CertConfig::Managed(managed), client).unwrap();
        let listener = TcpListener::bind((ip, 0)).await.unwrap();
        println!("LISTEN {}", listener.local_addr().unwrap().port());
        tokio::spawn(serve_https(listener, manager.acceptor()));
        manager.wait_loaded().await;
        println!("LOADED");
        let mut byte = [0u8; 1];
        let _ = tokio::io::stdin().read(&mut byte).await;
    });
}

/// A replica process as the test sees it.
struct Process {
    ip: IpAddr,
    child: tokio::process::Child,
    lines: tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
    log: PathBuf,
}

impl Process {
    fn spawn(ip: &str, kubeconfig: &Path, naive: bool, dir: &Path) -> Process {
        let log = dir.join(format!("replica-{ip}.log"));
        let mut child = tokio::process::Command::new(std::env::current_exe().unwrap())
            .env(REPLICA, ip)
            .env(REPLICA_KUBECONFIG, kubeconfig)
            .env(REPLICA_NAIVE, if naive { "1" } else { "0" })
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log).unwrap())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let lines = BufReader::new(child.stdout.take().unwrap()).lines();
        Process {
            ip: ip.parse().unwrap(),
            child,
            lines,
            log,
        }
    }

    /// The next line starting with `word`, within the limit.
    async fn expect(&mut self, word: &str) -> Result<String, String> {
        let read = async {
            while let Ok(Some(line)) = self.lines.next_line().await {
                if let Some(rest) = line.strip_prefix(word) {
                    return Ok(rest.trim().to_owned());
                }
            }
            Err(format!("replica {} ended before {word}", self.ip))
        };
        tokio::time::timeout(LIMIT, read)
            .await
            .map_err(|_| format!("replica {} did not say {word}", self.ip))?
    }

    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(15)..].join("\n")
    }
}

/// What a round saw of the race: Secret creates answered 201 and 409 (AlreadyExists).
#[derive(Debug, Default)]
struct Race {
    created: usize,
    lost: usize,
}

/// One round on a fresh cluster; Err says how the round failed.
async fn round(naive: bool) -> Result<Race, String> {
    let dir = tempfile::tempdir().unwrap();
    let sim = start_sim(dir.path()).await;
    let client = sim.client().await.unwrap();
    install_configuration(&client).await;
    for verb in ["create", "update"] {
        sim.faults().add(FaultRule {
            verb: Some(verb.into()),
            resource: Some("secrets".into()),
            user_agent: None,
            action: FaultAction::Delay(Duration::from_millis(300)),
            times: None,
        });
    }
    sim.audit().enable();
    let (history, recorder) = SecretHistory::record(&client).await;

    let mut processes: Vec<Process> = ADDRESSES
        .iter()
        .map(|ip| Process::spawn(ip, sim.kubeconfig_path(), naive, dir.path()))
        .collect();
    let result = async {
        let mut addresses = Vec::new();
        for process in &mut processes {
            let port: u16 = process.expect("LISTEN").await?.parse().map_err(|e| format!("{e}"))?;
            addresses.push((process.ip, SocketAddr::new(process.ip, port)));
        }
        for process in &mut processes {
            process.expect("LOADED").await?;
        }
        // Every replica serves a certificate that the caBundle the API server uses trusts.
        let last = std::sync::Mutex::new(String::new());
        let served = poll(TRUST_LIMIT, || {
            let (client, addresses, last) = (&client, &addresses, &last);
            async move {
                let roots = ca_bundle(client).await;
                let mut failures = Vec::new();
                for (ip, address) in addresses {
                    if let Err(error) = exchange(*address, ip_name(*ip), &roots).await {
                        failures.push(format!("{ip}: {error}"));
                    }
                }
                *last.lock().unwrap() = format!("{} CA(s) in caBundle; {}", roots.len(), failures.join("; "));
                failures.is_empty().then_some(roots)
            }
        })
        .await;
        let cas = history.distinct_cas();
        let mut problems = Vec::new();
        if cas != 1 {
            problems.push(format!("{cas} different CAs were stored in the Secret"));
        }
        match served {
            None => problems.push(format!(
                "not every replica serves a trusted certificate: {}",
                last.lock().unwrap()
            )),
            Some(roots) if roots.len() != 1 => problems.push(format!("caBundle holds {} CAs", roots.len())),
            Some(_) => {}
        }
        let creates: Vec<u16> = sim
            .audit()
            .events()
            .iter()
            .filter(|e| e.resource == "secrets" && e.verb == "create")
            .map(|e| e.code)
            .collect();
        let race = Race {
            created: creates.iter().filter(|c| **c == 201).count(),
            lost: creates.iter().filter(|c| **c == 409).count(),
        };
        if problems.is_empty() {
            Ok(race)
        } else {
            Err(problems.join("; "))
        }
    }
    .await;
    if result.is_err() && std::env::var("SPARK_WEBHOOK_CERT_LOGS").is_ok() {
        for process in &processes {
            eprintln!("--- replica {} ---\n{}", process.ip, process.log_tail());
        }
    }
    for process in &mut processes {
        let _ = process.child.kill().await;
    }
    recorder.abort();
    sim.shutdown().await;
    result
}

fn rounds() -> usize {
    if std::env::var("SPARK_E2E_FULL").is_ok_and(|v| v == "1") {
        50
    } else {
        10
    }
}

fn one_ca_for_three_replica_processes() {
    tokio().block_on(async {
        let rounds = rounds();
        let mut lost = 0;
        for n in 0..rounds {
            match round(false).await {
                Ok(race) => {
                    assert_eq!(race.created, 1, "round {n}: Secret creates that succeeded");
                    lost += race.lost;
                }
                Err(problem) => panic!("round {n}: {problem}"),
            }
        }
        // The delayed writes must make the replicas race, or the test shows nothing.
        assert!(lost > 0, "no replica ever lost the create race in {rounds} rounds");
        println!("{rounds} rounds: one CA each, every replica trusted; {lost} creates lost to another replica");
    });
}

fn naive_create_or_overwrite_fails_the_same_test() {
    tokio().block_on(async {
        for n in 0..2 {
            match round(true).await {
                Ok(_) => panic!("round {n}: the naive implementation passed; the test cannot tell"),
                Err(problem) => println!("naive round {n} failed as it must: {problem}"),
            }
        }
    });
}
