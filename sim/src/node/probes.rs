//! The kubelet's prober for process containers: `startupProbe`, `livenessProbe` and
//! `readinessProbe` with `httpGet`, `tcpSocket` or `exec`, their timings and thresholds. One task
//! per running container; it tells the pod worker each failure (for the `Unhealthy` event) and
//! each change of a probe's result once its threshold is reached.
//!
//! As the kubelet: liveness and readiness are not probed before the startup probe succeeded; a
//! readiness probe starts out failed, the others succeeded; after `initialDelaySeconds` each
//! probe runs every `periodSeconds` (the first one at once, without the kubelet's random jitter).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use super::pod_view::View;
use super::pod_worker::WorkerMsg;

/// Which probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ProbeKind {
    Startup,
    Liveness,
    Readiness,
}

impl ProbeKind {
    /// As the kubelet's events name it (`Liveness probe failed: ...`).
    pub fn title(self) -> &'static str {
        match self {
            ProbeKind::Startup => "Startup",
            ProbeKind::Liveness => "Liveness",
            ProbeKind::Readiness => "Readiness",
        }
    }

    pub fn lower(self) -> &'static str {
        match self {
            ProbeKind::Startup => "startup",
            ProbeKind::Liveness => "liveness",
            ProbeKind::Readiness => "readiness",
        }
    }

    pub fn field(self) -> &'static str {
        match self {
            ProbeKind::Startup => "startupProbe",
            ProbeKind::Liveness => "livenessProbe",
            ProbeKind::Readiness => "readinessProbe",
        }
    }
}

/// What the prober tells the pod worker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ProbeEvent {
    /// One probe run failed (the kubelet records `Unhealthy` for each).
    Failed { kind: ProbeKind, output: String },
    /// The probe's result changed (its success or failure threshold was reached).
    Result { kind: ProbeKind, success: bool },
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Handler {
    Http {
        https: bool,
        host: String,
        port: u16,
        path: String,
        headers: Vec<(String, String)>,
    },
    Tcp {
        host: String,
        port: u16,
    },
    Exec {
        command: Vec<String>,
    },
    /// A handler the sim does not run (gRPC, or a port name the container does not have): it
    /// fails with this message.
    Invalid(String),
}

/// One configured probe.
#[derive(Debug, Clone)]
pub(crate) struct Probe {
    pub kind: ProbeKind,
    handler: Handler,
    initial_delay: Duration,
    period: Duration,
    timeout: Duration,
    success_threshold: u32,
    failure_threshold: u32,
}

impl Probe {
    /// The container's probe of this kind, defaulted as the API server defaults it.
    pub fn parse(container: &Value, kind: ProbeKind, pod_ip: &str) -> Option<Probe> {
        let p = container.get(kind.field())?;
        let int = |f: &str, d: i64| p.get(f).and_then(Value::as_i64).unwrap_or(d).max(0) as u64;
        let handler = if let Some(h) = p.get("httpGet") {
            match port_of(container, h.get("port")) {
                Ok(port) => Handler::Http {
                    https: h.get("scheme").and_then(Value::as_str) == Some("HTTPS"),
                    host: h
                        .get("host")
                        .and_then(Value::as_str)
                        .filter(|s| !s.is_empty())
                        .unwrap_or(pod_ip)
                        .to_string(),
                    port,
                    path: h.get("path").and_then(Value::as_str).unwrap_or("/").to_string(),
                    headers: h
                        .get("httpHeaders")
                        .and_then(Value::as_array)
                        .into_iter()
                        .flatten()
                        .filter_map(|x| {
                            Some((
                                x.get("name")?.as_str()?.to_string(),
                                x.get("value").and_then(Value::as_str).unwrap_or("").to_string(),
                            ))
                        })
                        .collect(),
                },
                Err(e) => Handler::Invalid(e),
            }
        } else if let Some(t) = p.get("tcpSocket") {
            match port_of(container, t.get("port")) {
                Ok(port) => Handler::Tcp {
                    host: t
                        .get("host")
                        .and_then(Value::as_str)
                        .filter(|s| !s.is_empty())
                        .unwrap_or(pod_ip)
                        .to_string(),
                    port,
                },
                Err(e) => Handler::Invalid(e),
            }
        } else if let Some(e) = p.get("exec") {
            Handler::Exec {
                command: e
                    .get("command")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter_map(|s| s.as_str().map(str::to_string))
                    .collect(),
            }
        } else if p.get("grpc").is_some() {
            Handler::Invalid("gRPC probes are not simulated".into())
        } else {
            Handler::Invalid("missing probe handler".into())
        };
        // Liveness and startup probes must have successThreshold 1 (validation enforces it).
        let success_threshold = match kind {
            ProbeKind::Readiness => int("successThreshold", 1).max(1) as u32,
            _ => 1,
        };
        Some(Probe {
            kind,
            handler,
            initial_delay: Duration::from_secs(int("initialDelaySeconds", 0)),
            period: Duration::from_secs(int("periodSeconds", 10).max(1)),
            timeout: Duration::from_secs(int("timeoutSeconds", 1).max(1)),
            success_threshold,
            failure_threshold: int("failureThreshold", 3).max(1) as u32,
        })
    }
}

/// A probe port: a number, or the name of one of the container's ports.
fn port_of(container: &Value, port: Option<&Value>) -> Result<u16, String> {
    match port {
        Some(Value::Number(n)) => n
            .as_u64()
            .and_then(|n| u16::try_from(n).ok())
            .filter(|n| *n > 0)
            .ok_or_else(|| format!("invalid port number: {n}")),
        Some(Value::String(s)) => {
            if let Ok(n) = s.parse::<u16>() {
                return Ok(n);
            }
            container
                .get("ports")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .find(|p| p.get("name").and_then(Value::as_str) == Some(s))
                .and_then(|p| p.get("containerPort").and_then(Value::as_u64))
                .and_then(|n| u16::try_from(n).ok())
                .ok_or_else(|| {
                    format!(
                        "couldn't find port: {s} in {}",
                        container.get("name").unwrap_or(&Value::Null)
                    )
                })
        }
        _ => Err("missing port".into()),
    }
}

/// What an exec probe needs: the container's view and where its PID is recorded.
#[derive(Clone)]
pub(crate) struct ExecTarget {
    pub view: Arc<View>,
    pub scratch: PathBuf,
}

/// Runs the container's probes until the task is aborted (the container stopped).
pub(crate) async fn run(
    probes: Vec<Probe>,
    target: ExecTarget,
    tx: mpsc::UnboundedSender<WorkerMsg>,
    idx: usize,
    attempt: u32,
) {
    let has_startup = probes.iter().any(|p| p.kind == ProbeKind::Startup);
    let (started_tx, started_rx) = watch::channel(!has_startup);
    let started_tx = Arc::new(started_tx);
    let begun = Instant::now();
    let workers = probes.into_iter().map(|p| {
        let (tx, target, started_tx, mut started_rx) =
            (tx.clone(), target.clone(), started_tx.clone(), started_rx.clone());
        async move {
            if p.kind != ProbeKind::Startup && started_rx.wait_for(|s| *s).await.is_err() {
                return;
            }
            tokio::time::sleep_until(begun + p.initial_delay).await;
            let initial = p.kind != ProbeKind::Readiness;
            let (mut last, mut run) = (initial, 0u32);
            let mut reported = initial;
            let mut ticker = tokio::time::interval(p.period);
            ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                ticker.tick().await;
                let outcome = probe_once(&p, &target).await;
                let success = outcome.is_ok();
                if let Err(output) = outcome {
                    let _ = tx.send(WorkerMsg::Probe {
                        idx,
                        attempt,
                        event: ProbeEvent::Failed { kind: p.kind, output },
                    });
                }
                run = if success == last { run + 1 } else { 1 };
                last = success;
                let threshold = if success {
                    p.success_threshold
                } else {
                    p.failure_threshold
                };
                if run >= threshold && success != reported {
                    reported = success;
                    let _ = tx.send(WorkerMsg::Probe {
                        idx,
                        attempt,
                        event: ProbeEvent::Result { kind: p.kind, success },
                    });
                }
                if p.kind == ProbeKind::Startup && reported && run >= threshold {
                    // A startup probe stops once it succeeded.
                    started_tx.send_replace(true);
                    return;
                }
                if p.kind != ProbeKind::Readiness && !success && run >= threshold {
                    // The container is being killed; the next run gets a new prober.
                    return;
                }
            }
        }
    });
    futures::future::join_all(workers).await;
}

async fn probe_once(p: &Probe, target: &ExecTarget) -> Result<(), String> {
    match &p.handler {
        Handler::Invalid(msg) => Err(msg.clone()),
        Handler::Tcp { host, port } => {
            let addr = format!("{host}:{port}");
            match tokio::time::timeout(p.timeout, TcpStream::connect(&addr)).await {
                Ok(Ok(_)) => Ok(()),
                Ok(Err(e)) => Err(format!("dial tcp {addr}: connect: {}", io_text(&e))),
                Err(_) => Err(format!("dial tcp {addr}: i/o timeout")),
            }
        }
        Handler::Http {
            https,
            host,
            port,
            path,
            headers,
        } => {
            let scheme = if *https { "https" } else { "http" };
            let url = format!("{scheme}://{}{path}", host_port(host, *port));
            match tokio::time::timeout(p.timeout, http_get(*https, host, *port, path, headers)).await {
                Ok(Ok(code)) if (200..400).contains(&code) => Ok(()),
                Ok(Ok(code)) => Err(format!("HTTP probe failed with statuscode: {code}")),
                Ok(Err(e)) => Err(format!("Get {url:?}: {e}")),
                Err(_) => Err(format!(
                    "Get {url:?}: context deadline exceeded (Client.Timeout exceeded while awaiting headers)"
                )),
            }
        }
        Handler::Exec { command } => {
            let Some(pid) = super::sandbox::host_pid(&target.scratch) else {
                return Err("container is not running".into());
            };
            match super::sandbox::exec_in(pid, &target.view, command, p.timeout).await {
                Ok(Some((0, _))) => Ok(()),
                Ok(Some((_, output))) => Err(output.trim_end().to_string()),
                Ok(None) => Err(format!("command {:?} timed out", command.join(" "))),
                Err(e) => Err(format!("failed to exec in container: {e}")),
            }
        }
    }
}

fn host_port(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

fn io_text(e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::ConnectionRefused => "connection refused".into(),
        _ => e.to_string(),
    }
}

/// One `GET` as the kubelet sends it; the response's status code.
async fn http_get(https: bool, host: &str, port: u16, path: &str, headers: &[(String, String)]) -> Result<u16, String> {
    let addr = host_port(host, port);
    let tcp = TcpStream::connect(&addr)
        .await
        .map_err(|e| format!("dial tcp {addr}: connect: {}", io_text(&e)))?;
    let mut req = format!("GET {path} HTTP/1.1\r\n");
    let has = |n: &str| headers.iter().any(|(k, _)| k.eq_ignore_ascii_case(n));
    if !has("Host") {
        req.push_str(&format!("Host: {addr}\r\n"));
    }
    if !has("User-Agent") {
        req.push_str("User-Agent: kube-probe/1.33\r\n");
    }
    if !has("Accept") {
        req.push_str("Accept: */*\r\n");
    }
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("Connection: close\r\n\r\n");
    let head = if https {
        // As the kubelet's prober: the certificate is not verified.
        let config = crate::tls::skip_verify_client_config()?;
        let name = rustls_pki_types::ServerName::try_from(host.to_string()).map_err(|e| e.to_string())?;
        let mut tls = tokio_rustls::TlsConnector::from(config)
            .connect(name, tcp)
            .await
            .map_err(|e| e.to_string())?;
        exchange(&mut tls, &req).await?
    } else {
        let mut tcp = tcp;
        exchange(&mut tcp, &req).await?
    };
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse::<u16>().ok())
        .ok_or_else(|| format!("malformed HTTP response {head:?}"))?;
    Ok(status)
}

/// Sends the request and reads the status line.
async fn exchange<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin>(
    s: &mut S,
    req: &str,
) -> Result<String, String> {
    s.write_all(req.as_bytes()).await.map_err(|e| e.to_string())?;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 1024];
    while !buf.contains(&b'\n') && buf.len() < 8192 {
        let n = s.read(&mut chunk).await.map_err(|e| e.to_string())?;
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let text = String::from_utf8_lossy(&buf);
    Ok(text.lines().next().unwrap_or("").to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn probes_are_defaulted_and_ports_resolved_by_name() {
        let c = json!({
            "name": "web",
            "ports": [{ "name": "http", "containerPort": 8080 }],
            "readinessProbe": { "httpGet": { "port": "http", "path": "/ready" }, "successThreshold": 2 },
            "livenessProbe": { "tcpSocket": { "port": "nope" } },
        });
        let r = Probe::parse(&c, ProbeKind::Readiness, "127.1.0.5").unwrap();
        assert_eq!(
            r.handler,
            Handler::Http {
                https: false,
                host: "127.1.0.5".into(),
                port: 8080,
                path: "/ready".into(),
                headers: vec![]
            }
        );
        assert_eq!(
            (r.period, r.timeout, r.success_threshold, r.failure_threshold),
            (Duration::from_secs(10), Duration::from_secs(1), 2, 3)
        );
        let l = Probe::parse(&c, ProbeKind::Liveness, "127.1.0.5").unwrap();
        assert_eq!(
            l.handler,
            Handler::Invalid("couldn't find port: nope in \"web\"".into())
        );
        assert!(Probe::parse(&c, ProbeKind::Startup, "127.1.0.5").is_none());
    }
}
