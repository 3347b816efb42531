//! A userspace Service proxy, as kube-proxy's old `userspace` mode: for every Service with a
//! cluster IP and TCP ports it listens on `clusterIP:port` itself (the address is on `lo`), and
//! each accepted connection goes to one of the port's ready endpoints, round robin, with the
//! bytes copied both ways. A connection to a port without a ready endpoint is closed at once
//! (a real kube-proxy rejects it with ICMP). UDP ports are not proxied; `kube-dns`' TCP port is
//! the DNS server's own socket. Listeners follow the Services and Endpoints in the store.

use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use serde_json::Value;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::meta;
use crate::registry::ResourceKey;
use crate::status::ApiError;
use crate::store::{Change, ChangeKind, Store};

/// How long a connection to one endpoint may take before the next one is tried.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

type Svc = (String, String);
/// Ready TCP endpoints of each Service, by port name.
type Backends = Arc<Mutex<HashMap<Svc, HashMap<String, Vec<SocketAddr>>>>>;

struct Listener {
    service: Svc,
    /// The Service port's name (endpoint ports are matched by it); changes in place.
    port_name: Arc<RwLock<String>>,
    task: JoinHandle<()>,
}

impl Drop for Listener {
    /// A proxy that is dropped (the sim dropped without `shutdown`) closes its sockets too.
    fn drop(&mut self) {
        self.task.abort();
    }
}

struct Proxy {
    /// `kube-dns`' `clusterIP:53`: the DNS server's own (TCP is not proxied there).
    dns_addr: SocketAddr,
    backends: Backends,
    listeners: HashMap<SocketAddr, Listener>,
    stop: watch::Receiver<bool>,
}

/// Opens the listeners of the Services in the store now, then follows changes in the returned
/// future (so the `kubernetes` Service answers as soon as the sim has started).
pub(crate) async fn start(
    store: Store,
    dns_addr: SocketAddr,
    stop: watch::Receiver<bool>,
) -> impl std::future::Future<Output = ()> + Send + 'static {
    let mut p = Proxy {
        dns_addr,
        backends: Arc::default(),
        listeners: HashMap::new(),
        stop: stop.clone(),
    };
    let rv = p.resync(&store).await;
    async move {
        let mut stop = stop;
        let mut feed = store.changes(rv);
        loop {
            tokio::select! {
                biased;
                _ = stop.changed() => break,
                change = feed.next() => match change {
                    Ok(change) => p.observe(&change).await,
                    Err(ApiError::Expired(_)) => feed = store.changes(p.resync(&store).await),
                    Err(_) => break,
                },
            }
        }
        // Close every listener before returning, so a finished shutdown leaves none behind.
        for (_, mut l) in p.listeners.drain() {
            l.task.abort();
            let _ = (&mut l.task).await;
        }
    }
}

fn is(key: &ResourceKey, resource: &str) -> bool {
    key.group.is_empty() && key.resource == resource
}

impl Proxy {
    async fn resync(&mut self, store: &Store) -> u64 {
        let (rv, objects) = store.snapshot();
        let mut services = HashSet::new();
        self.backends.lock().unwrap_or_else(|e| e.into_inner()).clear();
        for (key, obj) in &objects {
            if is(key, "endpoints") {
                self.set_endpoints(obj, false);
            }
        }
        for (key, obj) in &objects {
            if is(key, "services") {
                services.insert((meta::namespace(obj).to_string(), meta::name(obj).to_string()));
                self.set_service(obj, false).await;
            }
        }
        let stale: Vec<SocketAddr> = self
            .listeners
            .iter()
            .filter(|(_, l)| !services.contains(&l.service))
            .map(|(a, _)| *a)
            .collect();
        for addr in stale {
            self.close(addr).await;
        }
        rv
    }

    async fn observe(&mut self, change: &Change) {
        let deleted = change.kind == ChangeKind::Deleted;
        if is(&change.resource, "services") {
            self.set_service(&change.object, deleted).await;
        } else if is(&change.resource, "endpoints") {
            self.set_endpoints(&change.object, deleted);
        }
    }

    fn set_endpoints(&self, ep: &Value, deleted: bool) {
        let svc = (meta::namespace(ep).to_string(), meta::name(ep).to_string());
        let mut ports: HashMap<String, Vec<SocketAddr>> = HashMap::new();
        if !deleted {
            for subset in ep.get("subsets").and_then(Value::as_array).into_iter().flatten() {
                let ips: Vec<IpAddr> = subset
                    .get("addresses")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter_map(|a| a.get("ip").and_then(Value::as_str)?.parse().ok())
                    .collect();
                for port in subset.get("ports").and_then(Value::as_array).into_iter().flatten() {
                    if port.get("protocol").and_then(Value::as_str).unwrap_or("TCP") != "TCP" {
                        continue;
                    }
                    let Some(number) = port
                        .get("port")
                        .and_then(Value::as_u64)
                        .and_then(|n| u16::try_from(n).ok())
                    else {
                        continue;
                    };
                    let name = port.get("name").and_then(Value::as_str).unwrap_or("").to_string();
                    ports
                        .entry(name)
                        .or_default()
                        .extend(ips.iter().map(|ip| SocketAddr::new(*ip, number)));
                }
            }
        }
        let mut backends = self.backends.lock().unwrap_or_else(|e| e.into_inner());
        if ports.is_empty() {
            backends.remove(&svc);
        } else {
            backends.insert(svc, ports);
        }
    }

    /// Opens and closes this Service's listeners to match its cluster IP and TCP ports.
    async fn set_service(&mut self, svc: &Value, deleted: bool) {
        let key = (meta::namespace(svc).to_string(), meta::name(svc).to_string());
        let mut wanted: HashMap<SocketAddr, String> = HashMap::new();
        let ip = svc
            .pointer("/spec/clusterIP")
            .and_then(Value::as_str)
            .and_then(|s| s.parse::<Ipv4Addr>().ok());
        if let (false, Some(ip)) = (deleted, ip) {
            for port in svc
                .pointer("/spec/ports")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                if port.get("protocol").and_then(Value::as_str).unwrap_or("TCP") != "TCP" {
                    continue;
                }
                let Some(number) = port
                    .get("port")
                    .and_then(Value::as_u64)
                    .and_then(|n| u16::try_from(n).ok())
                else {
                    continue;
                };
                let addr = SocketAddr::new(IpAddr::V4(ip), number);
                if addr == self.dns_addr {
                    continue;
                }
                wanted.insert(addr, port.get("name").and_then(Value::as_str).unwrap_or("").to_string());
            }
        }
        let gone: Vec<SocketAddr> = self
            .listeners
            .iter()
            .filter(|(a, l)| l.service == key && !wanted.contains_key(a))
            .map(|(a, _)| *a)
            .collect();
        for addr in gone {
            self.close(addr).await;
        }
        for (addr, port_name) in wanted {
            if let Some(l) = self.listeners.get(&addr) {
                if l.service == key {
                    *l.port_name.write().unwrap_or_else(|e| e.into_inner()) = port_name;
                    continue;
                }
                // The address moved to another Service (the old one is about to go).
                self.close(addr).await;
            }
            match TcpListener::bind(addr).await {
                Ok(listener) => {
                    let port_name = Arc::new(RwLock::new(port_name));
                    let task = tokio::spawn(serve(
                        listener,
                        key.clone(),
                        port_name.clone(),
                        self.backends.clone(),
                        self.stop.clone(),
                    ));
                    self.listeners.insert(
                        addr,
                        Listener {
                            service: key.clone(),
                            port_name,
                            task,
                        },
                    );
                }
                Err(e) => {
                    tracing::warn!(service = %format!("{}/{}", key.0, key.1), %addr, error = %e, "cannot proxy the Service port");
                }
            }
        }
    }

    async fn close(&mut self, addr: SocketAddr) {
        if let Some(mut l) = self.listeners.remove(&addr) {
            l.task.abort();
            let _ = (&mut l.task).await;
        }
    }
}

/// Accepts on one `clusterIP:port` and hands each connection to an endpoint.
async fn serve(
    listener: TcpListener,
    service: Svc,
    port_name: Arc<RwLock<String>>,
    backends: Backends,
    stop: watch::Receiver<bool>,
) {
    let next = Arc::new(AtomicUsize::new(0));
    let mut stopped = stop.clone();
    loop {
        let accepted = tokio::select! {
            _ = stopped.wait_for(|s| *s) => return,
            accepted = listener.accept() => accepted,
        };
        let (client, _) = match accepted {
            Ok(c) => c,
            Err(e) => {
                tracing::debug!(error = %e, "accepting a Service connection");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let name = port_name.read().unwrap_or_else(|e| e.into_inner()).clone();
        let targets: Vec<SocketAddr> = backends
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&service)
            .and_then(|ports| ports.get(&name))
            .cloned()
            .unwrap_or_default();
        if targets.is_empty() {
            // No ready endpoint: close at once.
            drop(client);
            continue;
        }
        let first = next.fetch_add(1, Ordering::Relaxed);
        let mut stop = stop.clone();
        tokio::spawn(async move {
            tokio::select! {
                () = relay(client, &targets, first) => {}
                _ = stop.wait_for(|s| *s) => {}
            }
        });
    }
}

/// Connects to the first endpoint (round robin from `first`) that answers and copies bytes both
/// ways until either side closes.
async fn relay(mut client: TcpStream, targets: &[SocketAddr], first: usize) {
    for i in 0..targets.len() {
        let target = targets[(first + i) % targets.len()];
        match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(target)).await {
            Ok(Ok(mut upstream)) => {
                let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
                return;
            }
            Ok(Err(e)) => tracing::debug!(%target, error = %e, "Service endpoint refused the connection"),
            Err(_) => tracing::debug!(%target, "Service endpoint did not answer"),
        }
    }
}
