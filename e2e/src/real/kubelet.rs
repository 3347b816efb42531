//! A kubelet stand-in for the real control plane: something that makes pods "run" on a real API server,
//! as kube-sim's nodes do for the operator's tests on the simulator.
//!
//! Towards the API server it behaves as a kubelet: it authenticates as `system:node:<name>` (a client
//! certificate signed by the cluster CA, so the Node authorizer and NodeRestriction apply to it exactly
//! as to a kubelet), registers its Node (labels, capacity, Ready, addresses, nodeInfo), keeps its Lease in
//! `kube-node-lease` renewed, watches the pods bound to it and reports their lifecycle through
//! `pods/status` (Pending, Running, then Succeeded or Failed), and finalizes deletions (stops the pod, then
//! deletes it with grace period 0 and a UID precondition). What a container does comes from the same
//! annotations as the simulator's scripts (`sim.spark-operator.dev/run-time`, `exit-code`, ...; see
//! `sim/README.md`); a `spark-role=driver` pod acts as Spark's driver towards the API server: it reads its
//! `spark.properties` from the mounted ConfigMap and creates, then deletes, its executor pods as its own
//! ServiceAccount (a token from the TokenRequest API, bound to the pod).
//!
//! What it is not: there are no containers, processes, images, volumes, probes, logs, exec or port
//! forwarding (nothing listens on a kubelet port), and a container that exits is not restarted whatever
//! the pod's `restartPolicy`. It gives way to kube-sim's nodes once those can join a real API server.
//!
//! Dropping a [`Kubelet`] stops it (heartbeats, the pod watch, every pod's task) and deletes its Node (as the
//! admin, `kubectl delete node`), so that no Ready-looking node without a kubelet is left for the scheduler
//! to bind a later scenario's pods to; a stopped kubelet's Node would stay until the node lifecycle
//! controller's grace period ran out.

use std::collections::{HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use futures::StreamExt;
use jiff::Timestamp;
use k8s_openapi::api::authentication::v1::{BoundObjectReference, TokenRequest, TokenRequestSpec};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod, Secret, ServiceAccount};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, OwnerReference};
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams, Preconditions,
};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use kube_sim::node::script::{self, Program, RunTime, Script};
use kube_sim::node::spark_conf::{SparkConf, parse_properties, properties_path};
use kube_sim::node::spark_executor::{self, ExecutorInput};
use serde_json::{Value, json};
use tokio::sync::watch;
use tokio::task::JoinSet;
use tracing::{debug, info, warn};

use super::control_plane::{ControlPlane, client_from};

/// The kubelet version the Node reports (the control plane's).
pub const KUBELET_VERSION: &str = "v1.37.2";
/// As the kubelet: the Lease lasts 40 s (`nodeLeaseDurationSeconds`) and is renewed every quarter of it.
const LEASE_DURATION_SECONDS: i32 = 40;
const LEASE_RENEW: Duration = Duration::from_secs(10);
/// As the kubelet's `nodeStatusReportFrequency` (5 min): the status is re-posted this often even unchanged;
/// between, the Lease alone tells the node lifecycle controller the node is alive.
const STATUS_REPORT_EVERY: u32 = 30;
const LEASE_NAMESPACE: &str = "kube-node-lease";
const NOT_READY_TAINT: &str = "node.kubernetes.io/not-ready";
/// The host's address, which is the node's (and host-network pods') address.
const HOST_IP: &str = "127.0.0.1";
/// Pod addresses when the controller manager gave the node no `spec.podCIDR`: the last /24 of the cluster's
/// pod range (`up.sh`'s CLUSTER_CIDR 198.18.0.0/17, never routed), which it hands out last.
const FALLBACK_POD_CIDR: &str = "198.18.127.0/24";
/// The fake Spark driver's job length when the script does not say (as the simulator's).
const DRIVER_RUN_TIME: Duration = Duration::from_secs(1);
/// How long Setup waits for the Node to become Ready and untainted.
const READY_LIMIT: Duration = Duration::from_secs(120);

/// What node to be.
#[derive(Clone, Debug)]
pub struct KubeletOptions {
    /// The Node's name; the client certificate is for `system:node:<name>`.
    pub name: String,
    /// Capacity (and allocatable) CPU, memory and pods, as quantities.
    pub cpu: String,
    pub memory: String,
    pub pods: u32,
}

impl Default for KubeletOptions {
    fn default() -> Self {
        KubeletOptions {
            name: "standin-node".into(),
            cpu: "32".into(),
            memory: "128Gi".into(),
            pods: 110,
        }
    }
}

/// A running stand-in node; stops when dropped.
pub struct Kubelet {
    name: String,
    client: kube::Client,
    /// The heartbeat and the pod watch (which owns every pod's task): dropping the set aborts them all.
    _tasks: JoinSet<()>,
    /// `kubectl delete node <name>` as the admin, run when dropped.
    delete_node: Option<std::process::Command>,
}

impl Drop for Kubelet {
    fn drop(&mut self) {
        self._tasks.abort_all();
        if let Some(mut delete) = self.delete_node.take() {
            let _ = delete
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .status();
        }
    }
}

impl std::fmt::Debug for Kubelet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Kubelet")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// What the node's tasks share.
struct Shared {
    name: String,
    /// As `system:node:<name>`: every write of the node.
    node: kube::Client,
    /// As the admin: only the TokenRequests for drivers' ServiceAccounts (see [`service_account_token`]).
    admin: kube::Client,
    server: String,
    ca: PathBuf,
    ips: Mutex<IpPool>,
}

impl Kubelet {
    /// Registers the node and starts it; returns once the Node is Ready and the controller manager has
    /// removed its `node.kubernetes.io/not-ready` taint (so the scheduler binds pods to it). Panics when the
    /// node cannot be set up (a failure of the test's setup).
    pub async fn start(control_plane: &ControlPlane, options: KubeletOptions) -> Kubelet {
        let dir = control_plane.data_dir().join(format!("kubelet-{}", options.name));
        let kubeconfig = node_credentials(control_plane, &options.name, &dir);
        let client = client_from(&kubeconfig).await;
        let shared = Arc::new(Shared {
            name: options.name.clone(),
            node: client.clone(),
            admin: control_plane.admin().await,
            server: control_plane.server(),
            ca: control_plane.pki().join("ca.crt"),
            ips: Mutex::new(IpPool::default()),
        });
        let node = register(&shared, &options).await;
        let node_uid = node.metadata.uid.clone().unwrap_or_default();
        if let Err(error) = post_node_status(&shared, &options).await {
            panic!(
                "the stand-in {} could not report its node status: {error}",
                options.name
            );
        }
        if let Err(error) = renew_lease(&shared, &node_uid).await {
            panic!("the stand-in {} could not create its Lease: {error}", options.name);
        }
        let mut tasks = JoinSet::new();
        tasks.spawn(heartbeat(shared.clone(), options.clone(), node_uid));
        tasks.spawn(watch_pods(shared.clone()));
        wait_ready(&shared).await;
        info!(node = %options.name, "kubelet stand-in ready");
        let mut delete_node = control_plane.kubectl();
        delete_node.args(["delete", "node", &options.name, "--ignore-not-found", "--wait=false"]);
        Kubelet {
            name: options.name,
            client,
            _tasks: tasks,
            delete_node: Some(delete_node),
        }
    }

    /// The Node's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// A client as this node (`system:node:<name>`).
    pub fn client(&self) -> &kube::Client {
        &self.client
    }
}

// ---- identity ---------------------------------------------------------------------------------------

/// A client certificate for `system:node:<name>` (group `system:nodes`) signed by the cluster CA, made
/// with openssl as `up.sh` makes its certificates; returns a kubeconfig that uses it.
fn node_credentials(control_plane: &ControlPlane, name: &str, dir: &Path) -> PathBuf {
    std::fs::create_dir_all(dir).expect("the stand-in's directory");
    let pki = control_plane.pki();
    let (key, csr, ext, crt) = (
        dir.join("node.key"),
        dir.join("node.csr"),
        dir.join("node.ext"),
        dir.join("node.crt"),
    );
    openssl(&[
        "genpkey",
        "-algorithm",
        "EC",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-out",
        &path(&key),
    ]);
    let subject = format!("/O=system:nodes/CN=system:node:{name}");
    openssl(&[
        "req",
        "-new",
        "-key",
        &path(&key),
        "-subj",
        &subject,
        "-out",
        &path(&csr),
    ]);
    std::fs::write(
        &ext,
        "basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=clientAuth\nauthorityKeyIdentifier=keyid\n",
    )
    .expect("the certificate's extensions");
    let serial = format!("0x{:032x}", unique());
    openssl(&[
        "x509",
        "-req",
        "-in",
        &path(&csr),
        "-CA",
        &path(&pki.join("ca.crt")),
        "-CAkey",
        &path(&pki.join("ca.key")),
        "-set_serial",
        &serial,
        "-days",
        "365",
        "-extfile",
        &path(&ext),
        "-out",
        &path(&crt),
    ]);
    let kubeconfig = dir.join("kubeconfig");
    let user = format!("system:node:{name}");
    let text = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n  - name: real-k8s\n    cluster:\n      server: {server}\n      certificate-authority: {ca}\nusers:\n  - name: {user}\n    user:\n      client-certificate: {crt}\n      client-key: {key}\ncontexts:\n  - name: {user}@real-k8s\n    context:\n      cluster: real-k8s\n      user: {user}\ncurrent-context: {user}@real-k8s\n",
        server = control_plane.server(),
        ca = path(&pki.join("ca.crt")),
        crt = path(&crt),
        key = path(&key),
    );
    std::fs::write(&kubeconfig, text).expect("the stand-in's kubeconfig");
    kubeconfig
}

fn openssl(args: &[&str]) {
    let output = Command::new("openssl").args(args).output().expect("openssl runs");
    assert!(
        output.status.success(),
        "openssl {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&output.stderr)
    );
}

fn path(p: &Path) -> String {
    p.display().to_string()
}

fn unique() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default()
}

/// A client as `system:serviceaccount:<namespace>:<service_account>`, with a token from the TokenRequest
/// API (requested by the admin), bound to `bound_pod` (name, UID) when given, as the token projected into
/// a pod is: the API server then adds the pod's name and UID to the user's extra fields.
pub async fn service_account_client(
    control_plane: &ControlPlane,
    namespace: &str,
    service_account: &str,
    bound_pod: Option<(&str, &str)>,
) -> Result<kube::Client, String> {
    let admin = control_plane.admin().await;
    let token = service_account_token(&admin, namespace, service_account, bound_pod).await?;
    token_client(&control_plane.server(), &control_plane.pki().join("ca.crt"), &token).await
}

/// A TokenRequest for a ServiceAccount, by `admin`, bound to a pod when given (one hour, the API server's
/// audiences).
async fn service_account_token(
    admin: &kube::Client,
    namespace: &str,
    service_account: &str,
    bound_pod: Option<(&str, &str)>,
) -> Result<String, String> {
    let request = TokenRequest {
        spec: TokenRequestSpec {
            audiences: Vec::new(),
            expiration_seconds: Some(3600),
            bound_object_ref: bound_pod.map(|(name, uid)| BoundObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Pod".into()),
                name: Some(name.into()),
                uid: Some(uid.into()),
            }),
        },
        ..TokenRequest::default()
    };
    let accounts: Api<ServiceAccount> = Api::namespaced(admin.clone(), namespace);
    let answer = accounts
        .create_token_request(service_account, &PostParams::default(), &request)
        .await
        .map_err(|e| format!("a token for {namespace}/{service_account}: {e}"))?;
    answer
        .status
        .map(|s| s.token)
        .filter(|t| !t.is_empty())
        .ok_or_else(|| format!("the TokenRequest for {namespace}/{service_account} returned no token"))
}

/// A client that authenticates with a bearer token.
async fn token_client(server: &str, ca: &Path, token: &str) -> Result<kube::Client, String> {
    let kubeconfig = json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{ "name": "real-k8s", "cluster": { "server": server, "certificate-authority": path(ca) } }],
        "users": [{ "name": "token", "user": { "token": token } }],
        "contexts": [{ "name": "token", "context": { "cluster": "real-k8s", "user": "token" } }],
        "current-context": "token",
    });
    let kubeconfig: kube::config::Kubeconfig =
        serde_json::from_value(kubeconfig).map_err(|e| format!("a token kubeconfig: {e}"))?;
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &kube::config::KubeConfigOptions::default())
        .await
        .map_err(|e| format!("a token client's configuration: {e}"))?;
    kube::Client::try_from(config).map_err(|e| format!("a token client: {e}"))
}

// ---- the Node and its Lease -------------------------------------------------------------------------

/// Creates the Node as the kubelet registers it: with the well-known labels a node may set on itself and
/// the `not-ready` taint, which the controller manager removes once the node reports Ready (so that no pod
/// is scheduled before). An existing Node of that name is taken over, as a restarted kubelet does.
async fn register(shared: &Shared, options: &KubeletOptions) -> Node {
    let nodes: Api<Node> = Api::all(shared.node.clone());
    let node: Node = serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": options.name,
            "labels": {
                "kubernetes.io/hostname": options.name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
            },
        },
        "spec": { "taints": [{ "key": NOT_READY_TAINT, "effect": "NoSchedule" }] },
    }))
    .expect("a Node");
    match nodes.create(&PostParams::default(), &node).await {
        Ok(node) => {
            info!(node = %options.name, "registered the Node");
            node
        }
        Err(kube::Error::Api(status)) if status.code == 409 => {
            info!(node = %options.name, "the Node exists; taking it over");
            nodes.get(&options.name).await.expect("the existing Node")
        }
        Err(error) => panic!("the stand-in could not register its Node {}: {error}", options.name),
    }
}

/// The node's status (through `nodes/status`, a strategic merge patch as the kubelet sends).
async fn post_node_status(shared: &Shared, options: &KubeletOptions) -> Result<(), kube::Error> {
    let now = Timestamp::now().to_string();
    let condition = |kind: &str, status: &str, reason: &str, message: &str| {
        json!({
            "type": kind,
            "status": status,
            "reason": reason,
            "message": message,
            "lastHeartbeatTime": now,
            "lastTransitionTime": now,
        })
    };
    let resources = json!({ "cpu": options.cpu, "memory": options.memory, "pods": options.pods.to_string() });
    let boot = format!("{:032x}", hash(&(&options.name, "boot")));
    let patch = json!({
        "status": {
            "capacity": resources,
            "allocatable": resources,
            "conditions": [
                condition("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
                condition("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
                condition("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
                condition("Ready", "True", "KubeletReady", "kubelet stand-in is posting ready status"),
            ],
            "addresses": [
                { "type": "InternalIP", "address": HOST_IP },
                { "type": "Hostname", "address": options.name },
            ],
            "nodeInfo": {
                "machineID": boot,
                "systemUUID": boot,
                "bootID": boot,
                "kernelVersion": "standin",
                "osImage": "kubelet stand-in (spark-operator e2e)",
                "containerRuntimeVersion": "standin://0.1.0",
                "kubeletVersion": KUBELET_VERSION,
                "kubeProxyVersion": "",
                "operatingSystem": "linux",
                "architecture": "amd64",
            },
        }
    });
    let nodes: Api<Node> = Api::all(shared.node.clone());
    nodes
        .patch_status(&options.name, &PatchParams::default(), &Patch::Strategic(patch))
        .await?;
    debug!(node = %options.name, "posted the node status");
    Ok(())
}

/// Renews (or creates) the node's Lease as the kubelet does: holder the node, 40 s, owned by the Node (so
/// it goes with it). Returns the renew time written.
async fn renew_lease(shared: &Shared, node_uid: &str) -> Result<Timestamp, kube::Error> {
    let leases: Api<Lease> = Api::namespaced(shared.node.clone(), LEASE_NAMESPACE);
    let owner = OwnerReference {
        api_version: "v1".into(),
        kind: "Node".into(),
        name: shared.name.clone(),
        uid: node_uid.into(),
        ..OwnerReference::default()
    };
    let mut attempt = 0;
    loop {
        attempt += 1;
        let now = Timestamp::now();
        let spec = LeaseSpec {
            holder_identity: Some(shared.name.clone()),
            lease_duration_seconds: Some(LEASE_DURATION_SECONDS),
            renew_time: Some(MicroTime(now)),
            ..LeaseSpec::default()
        };
        let written = match leases.get_opt(&shared.name).await? {
            None => {
                let lease = Lease {
                    metadata: ObjectMeta {
                        name: Some(shared.name.clone()),
                        namespace: Some(LEASE_NAMESPACE.into()),
                        owner_references: Some(vec![owner.clone()]),
                        ..ObjectMeta::default()
                    },
                    spec: Some(spec),
                };
                leases.create(&PostParams::default(), &lease).await.map(|_| ())
            }
            Some(mut lease) => {
                let current = lease.spec.get_or_insert_default();
                current.holder_identity = spec.holder_identity;
                current.lease_duration_seconds = spec.lease_duration_seconds;
                current.renew_time = spec.renew_time;
                if node_uid.is_empty() || lease.metadata.owner_references.is_none() {
                    lease.metadata.owner_references = Some(vec![owner.clone()]);
                }
                leases
                    .replace(&shared.name, &PostParams::default(), &lease)
                    .await
                    .map(|_| ())
            }
        };
        match written {
            Ok(()) => return Ok(now),
            // Someone else wrote it meanwhile (or created it): read it again, as the kubelet does.
            Err(kube::Error::Api(status)) if status.code == 409 && attempt < 5 => continue,
            Err(error) => return Err(error),
        }
    }
}

/// Renews the Lease every 10 s and re-posts the node status every 5 min, until aborted.
async fn heartbeat(shared: Arc<Shared>, options: KubeletOptions, node_uid: String) {
    let mut ticks = 0u32;
    loop {
        tokio::time::sleep(LEASE_RENEW).await;
        ticks = ticks.wrapping_add(1);
        match renew_lease(&shared, &node_uid).await {
            Ok(at) => debug!(node = %shared.name, renew_time = %at, "renewed the Lease"),
            Err(error) => warn!(node = %shared.name, %error, "could not renew the Lease"),
        }
        if ticks.is_multiple_of(STATUS_REPORT_EVERY)
            && let Err(error) = post_node_status(&shared, &options).await
        {
            warn!(node = %shared.name, %error, "could not post the node status");
        }
    }
}

/// Waits until the Node is Ready and no longer has the not-ready taint.
async fn wait_ready(shared: &Shared) {
    let nodes: Api<Node> = Api::all(shared.node.clone());
    let last = crate::poll(READY_LIMIT, || async {
        let node = match nodes.get(&shared.name).await {
            Ok(node) => node,
            Err(error) => return crate::Poll::Pending(format!("{error}")),
        };
        let ready = node
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
        let tainted = node
            .spec
            .as_ref()
            .and_then(|s| s.taints.as_ref())
            .is_some_and(|ts| ts.iter().any(|t| t.key == NOT_READY_TAINT));
        if ready && !tainted {
            crate::Poll::Done(())
        } else {
            crate::Poll::Pending(format!("ready: {ready}, not-ready taint: {tainted}"))
        }
    })
    .await;
    if let Err(last) = last {
        panic!(
            "the stand-in node {} did not become Ready and untainted within {READY_LIMIT:?}: {last}",
            shared.name
        );
    }
}

// ---- pod addresses ----------------------------------------------------------------------------------

/// The pod addresses of the node: from its `spec.podCIDR` once the controller manager allocated one.
#[derive(Default)]
struct IpPool {
    cidr: Option<(u32, u32)>,
    used: HashSet<u32>,
}

impl IpPool {
    /// The first free address of the range (skipping the network address and the gateway's, `.1`).
    fn allocate(&mut self, cidr: &str) -> Result<Ipv4Addr, String> {
        if self.cidr.is_none() {
            self.cidr = Some(parse_cidr(cidr).ok_or_else(|| format!("not an IPv4 CIDR: {cidr}"))?);
        }
        let (base, size) = self.cidr.unwrap_or_default();
        let free = (2..size.saturating_sub(1))
            .map(|offset| base + offset)
            .find(|ip| !self.used.contains(ip))
            .ok_or_else(|| format!("no free pod address left in {cidr}"))?;
        self.used.insert(free);
        Ok(Ipv4Addr::from(free))
    }

    fn release(&mut self, ip: Ipv4Addr) {
        self.used.remove(&u32::from(ip));
    }
}

/// `a.b.c.d/len` as (first address, number of addresses); None for what is not IPv4 or is too small.
fn parse_cidr(cidr: &str) -> Option<(u32, u32)> {
    let (ip, len) = cidr.split_once('/')?;
    let ip: Ipv4Addr = ip.parse().ok()?;
    let len: u32 = len.parse().ok()?;
    if !(8..=30).contains(&len) {
        return None;
    }
    let size = 1u32 << (32 - len);
    Some((u32::from(ip) & !(size - 1), size))
}

// ---- the pods ---------------------------------------------------------------------------------------

fn pod_resource() -> ApiResource {
    ApiResource::erase::<Pod>(&())
}

/// Watches the pods bound to the node and gives each its own task, which gets every newer version of
/// its pod. Pods are handled as JSON (`DynamicObject`) so that status writes keep every field, also those
/// newer than this crate's Kubernetes types.
async fn watch_pods(shared: Arc<Shared>) {
    let api: Api<DynamicObject> = Api::all_with(shared.node.clone(), &pod_resource());
    let config = watcher::Config::default().fields(&format!("spec.nodeName={}", shared.name));
    let mut events = watcher::watcher(api, config).default_backoff().boxed();
    let mut workers: HashMap<String, watch::Sender<Value>> = HashMap::new();
    let mut tasks = JoinSet::new();
    let mut listed: HashSet<String> = HashSet::new();
    while let Some(event) = events.next().await {
        match event {
            Err(error) => warn!(node = %shared.name, %error, "watching the node's pods (retrying)"),
            Ok(Event::Init) => listed.clear(),
            Ok(Event::InitApply(pod)) => {
                listed.insert(pod.metadata.uid.clone().unwrap_or_default());
                deliver(&shared, &mut workers, &mut tasks, &pod);
            }
            Ok(Event::Apply(pod)) => deliver(&shared, &mut workers, &mut tasks, &pod),
            // A relist: pods that are gone meanwhile lose their task (dropping its sender ends it).
            Ok(Event::InitDone) => workers.retain(|uid, _| listed.contains(uid)),
            Ok(Event::Delete(pod)) => {
                workers.remove(pod.metadata.uid.as_deref().unwrap_or_default());
            }
        }
        while let Some(done) = tasks.try_join_next() {
            if let Err(error) = done
                && error.is_panic()
            {
                warn!(node = %shared.name, %error, "a pod's task panicked");
            }
        }
    }
}

/// Hands the newest version of a pod to its task, starting one for a pod new to the node.
fn deliver(
    shared: &Arc<Shared>,
    workers: &mut HashMap<String, watch::Sender<Value>>,
    tasks: &mut JoinSet<()>,
    pod: &DynamicObject,
) {
    let Some(uid) = pod.metadata.uid.clone() else { return };
    let value = match serde_json::to_value(pod) {
        Ok(value) => value,
        Err(error) => {
            warn!(%error, "a pod that does not serialize");
            return;
        }
    };
    if let Some(sender) = workers.get(&uid) {
        sender.send_replace(value);
        return;
    }
    let (sender, receiver) = watch::channel(value);
    workers.insert(uid, sender);
    tasks.spawn(pod_worker(shared.clone(), receiver));
}

fn is_deleting(pod: &Value) -> bool {
    pod.pointer("/metadata/deletionTimestamp").is_some_and(|t| !t.is_null())
}

fn phase(pod: &Value) -> &str {
    pod.pointer("/status/phase").and_then(Value::as_str).unwrap_or("")
}

fn resource_version(pod: &Value) -> &str {
    pod.pointer("/metadata/resourceVersion")
        .and_then(Value::as_str)
        .unwrap_or_default()
}

fn is_terminal(pod: &Value) -> bool {
    matches!(phase(pod), "Succeeded" | "Failed")
}

/// Waits for the pod's deletionTimestamp: true then, false when the pod is gone.
async fn deletion(updates: &mut watch::Receiver<Value>) -> bool {
    loop {
        if is_deleting(&updates.borrow_and_update()) {
            return true;
        }
        if updates.changed().await.is_err() {
            return false;
        }
    }
}

/// One pod on the node, from its binding to its deletion.
async fn pod_worker(shared: Arc<Shared>, mut updates: watch::Receiver<Value>) {
    let pod = updates.borrow_and_update().clone();
    let run = PodRun::new(shared, &pod, updates.clone());
    info!(pod = %run.key(), "pod bound to the node");
    if !is_deleting(&pod) && !is_terminal(&pod) {
        tokio::select! {
            () = run.lifecycle(&pod) => {}
            deleting = deletion(&mut updates) => {
                if !deleting {
                    run.release_ip();
                    return;
                }
                run.stop().await;
            }
        }
    }
    if deletion(&mut updates).await {
        run.finalize().await;
    }
    run.release_ip();
}

/// A container's state as reported.
#[derive(Clone, Debug)]
enum State {
    Waiting {
        reason: String,
        message: Option<String>,
    },
    Running {
        started: Timestamp,
    },
    Terminated {
        exit_code: i32,
        reason: String,
        message: Option<String>,
        started: Timestamp,
        finished: Timestamp,
    },
}

#[derive(Clone, Debug)]
struct ContainerRun {
    name: String,
    image: String,
    id: String,
    /// A sidecar (an init container with `restartPolicy: Always`): runs alongside the main containers.
    sidecar: bool,
    /// Its exit code on SIGTERM (the script's `sigterm-exit-code`, 143 by default).
    sigterm_exit_code: i32,
    state: State,
}

impl ContainerRun {
    fn terminate(&mut self, exit_code: i32, reason: &str, message: Option<String>) {
        let now = Timestamp::now();
        let started = match &self.state {
            State::Running { started } => *started,
            State::Terminated { .. } => return,
            State::Waiting { .. } => now,
        };
        self.state = State::Terminated {
            exit_code,
            reason: reason.into(),
            message,
            started,
            finished: now,
        };
    }

    fn status(&self) -> Value {
        let (state, ready, started, created) = match &self.state {
            State::Waiting { reason, message } => (
                json!({ "waiting": { "reason": reason, "message": message } }),
                false,
                false,
                false,
            ),
            State::Running { started } => (
                json!({ "running": { "startedAt": started.to_string() } }),
                true,
                true,
                true,
            ),
            State::Terminated {
                exit_code,
                reason,
                message,
                started,
                finished,
            } => (
                json!({ "terminated": {
                    "exitCode": exit_code,
                    "reason": reason,
                    "message": message,
                    "startedAt": started.to_string(),
                    "finishedAt": finished.to_string(),
                    "containerID": self.id,
                } }),
                false,
                false,
                true,
            ),
        };
        let mut status = json!({
            "name": self.name,
            "image": self.image,
            "imageID": "",
            "ready": ready,
            "started": started,
            "restartCount": 0,
            "state": strip_nulls(state),
            "lastState": {},
        });
        if created {
            status["imageID"] = json!(image_id(&self.image));
            status["containerID"] = json!(self.id);
        }
        status
    }
}

/// An image's digest reference, made up but stable (there are no images).
fn image_id(image: &str) -> String {
    let repository = image.split('@').next().unwrap_or(image);
    let repository = match repository.rsplit_once(':') {
        Some((name, tag)) if !tag.contains('/') => name,
        _ => repository,
    };
    let digest: String = (0..4).map(|i| format!("{:016x}", hash(&(image, i)))).collect();
    format!("{repository}@sha256:{digest}")
}

fn hash(value: &impl Hash) -> u64 {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    value.hash(&mut hasher);
    hasher.finish()
}

fn strip_nulls(mut value: Value) -> Value {
    if let Value::Object(map) = &mut value {
        map.retain(|_, v| !v.is_null());
        for v in map.values_mut() {
            *v = strip_nulls(std::mem::take(v));
        }
    }
    value
}

/// What the node reports about a pod.
struct PodState {
    phase: &'static str,
    start_time: Option<Timestamp>,
    ip: Option<Ipv4Addr>,
    /// Whether the address came from the pool (host-network pods use the host's).
    pooled: bool,
    /// The pod's sandbox exists (PodReadyToStartContainers).
    sandbox: bool,
    init: Vec<ContainerRun>,
    main: Vec<ContainerRun>,
}

/// The executors a driver made, to delete as its ServiceAccount.
struct DriverExecutors {
    client: kube::Client,
    namespace: String,
    names: Vec<String>,
}

struct PodRun {
    shared: Arc<Shared>,
    api: Api<DynamicObject>,
    namespace: String,
    name: String,
    uid: String,
    state: Mutex<PodState>,
    driver: Mutex<Option<DriverExecutors>>,
    /// The newest version of the pod, from the node's watch: what status writes start from.
    updates: watch::Receiver<Value>,
}

fn containers(pod: &Value, key: &str) -> Vec<Value> {
    pod.pointer(&format!("/spec/{key}"))
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

fn container_run(pod: &Value, container: &Value, index: usize, waiting: &str) -> ContainerRun {
    let name = container
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let uid = pod.pointer("/metadata/uid").and_then(Value::as_str).unwrap_or_default();
    ContainerRun {
        id: format!(
            "standin://{:016x}{:016x}",
            hash(&(uid, &name, index)),
            hash(&(&name, uid))
        ),
        image: container
            .get("image")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned(),
        sidecar: container.get("restartPolicy").and_then(Value::as_str) == Some("Always"),
        sigterm_exit_code: 143,
        state: State::Waiting {
            reason: waiting.into(),
            message: None,
        },
        name,
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl PodRun {
    fn new(shared: Arc<Shared>, pod: &Value, updates: watch::Receiver<Value>) -> PodRun {
        let text = |pointer: &str| {
            pod.pointer(pointer)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned()
        };
        let namespace = text("/metadata/namespace");
        let init = containers(pod, "initContainers")
            .iter()
            .enumerate()
            .map(|(i, c)| container_run(pod, c, i, "PodInitializing"))
            .collect();
        let main = containers(pod, "containers")
            .iter()
            .enumerate()
            .map(|(i, c)| container_run(pod, c, 1000 + i, "ContainerCreating"))
            .collect();
        PodRun {
            api: Api::namespaced_with(shared.node.clone(), &namespace, &pod_resource()),
            shared,
            namespace,
            name: text("/metadata/name"),
            uid: text("/metadata/uid"),
            state: Mutex::new(PodState {
                phase: "Pending",
                start_time: None,
                ip: None,
                pooled: false,
                sandbox: false,
                init,
                main,
            }),
            driver: Mutex::new(None),
            updates,
        }
    }

    fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// Runs the pod: Pending, the sandbox and its address, the init containers, Running, each container
    /// for its scripted time, then Succeeded or Failed. Never returns for a pod whose containers run
    /// forever or cannot start (only its deletion ends it then).
    async fn lifecycle(&self, pod: &Value) {
        let already_running = phase(pod) == "Running";
        let specs = containers(pod, "containers");
        let scripts: Vec<Result<Script, script::ScriptError>> =
            specs.iter().map(|c| script::resolve(pod, c, &[])).collect();
        {
            let mut state = lock(&self.state);
            state.start_time = Some(Timestamp::now());
            for (container, script) in state.main.iter_mut().zip(&scripts) {
                if let Ok(script) = script {
                    container.sigterm_exit_code = script.sigterm_exit_code;
                }
            }
        }
        if !already_running {
            // The first status a kubelet reports: the pod is on the host, its containers being created.
            self.write_status().await;
        }
        // A script that cannot be used: the container cannot be configured, and the pod stays Pending as
        // with a kubelet's CreateContainerConfigError.
        let bad: Vec<(usize, String)> = scripts
            .iter()
            .enumerate()
            .filter_map(|(i, s)| s.as_ref().err().map(|e| (i, e.to_string())))
            .collect();
        if !bad.is_empty() {
            {
                let mut state = lock(&self.state);
                for (i, message) in bad {
                    if let Some(container) = state.main.get_mut(i) {
                        warn!(pod = %self.key(), container = %container.name, %message, "the container's script is invalid");
                        container.state = State::Waiting {
                            reason: "CreateContainerConfigError".into(),
                            message: Some(message),
                        };
                    }
                }
            }
            self.write_status().await;
            return std::future::pending().await;
        }
        // The volumes: a kubelet starts no container until every ConfigMap and Secret volume that is not
        // optional can be mounted, retrying meanwhile (the pod stays ContainerCreating). spark-submit creates
        // the driver pod before the ConfigMaps it mounts, and after a failover the new leader creates them.
        self.wait_for_volumes(pod).await;
        // The sandbox: its address.
        let host_network = pod.pointer("/spec/hostNetwork").and_then(Value::as_bool) == Some(true);
        let ip = if host_network {
            Ok(HOST_IP.parse().expect("the host's address"))
        } else {
            self.allocate_ip().await
        };
        let ip = match ip {
            Ok(ip) => ip,
            Err(message) => {
                warn!(pod = %self.key(), %message, "no address for the pod's sandbox");
                return std::future::pending().await;
            }
        };
        {
            let mut state = lock(&self.state);
            state.ip = Some(ip);
            state.pooled = !host_network;
            state.sandbox = true;
            let now = Timestamp::now();
            // Init containers complete (exit 0) before the main containers start; sidecars keep running.
            for container in &mut state.init {
                if container.sidecar {
                    container.state = State::Running { started: now };
                } else {
                    container.state = State::Terminated {
                        exit_code: 0,
                        reason: "Completed".into(),
                        message: None,
                        started: now,
                        finished: now,
                    };
                }
            }
            for container in &mut state.main {
                container.state = State::Running { started: now };
            }
            state.phase = "Running";
        }
        info!(pod = %self.key(), %ip, "pod running");
        self.write_status().await;
        let runs = specs
            .iter()
            .zip(scripts.iter().flatten())
            .enumerate()
            .map(|(i, (container, script))| async move {
                let (exit_code, message) = if script.program == Program::SparkDriver {
                    self.spark_driver(pod, container, script).await
                } else {
                    match script.run_time {
                        Some(RunTime::For(time)) => tokio::time::sleep(time).await,
                        // Scripts and executors run until stopped unless scripted otherwise.
                        None | Some(RunTime::Forever) => std::future::pending::<()>().await,
                    }
                    (script.exit_code(0), script.termination_message.clone())
                };
                let reason = match (exit_code, script.oom_kill) {
                    (_, true) => "OOMKilled",
                    (0, false) => "Completed",
                    _ => "Error",
                };
                let exit_code = if script.oom_kill { 137 } else { exit_code };
                {
                    let mut state = lock(&self.state);
                    if let Some(run) = state.main.get_mut(i) {
                        info!(pod = %self.key(), container = %run.name, exit_code, "container exited");
                        run.terminate(exit_code, reason, message);
                    }
                }
                self.write_status().await;
            });
        futures::future::join_all(runs).await;
        self.end(None).await;
    }

    /// The pod is over: its sidecars are stopped, its phase follows from its containers' exit codes
    /// (restartPolicy is not honoured: nothing restarts), its sandbox and address are released.
    async fn end(&self, sigterm: Option<()>) {
        {
            let mut guard = lock(&self.state);
            let state = &mut *guard;
            for container in state.init.iter_mut().chain(state.main.iter_mut()) {
                if matches!(container.state, State::Running { .. }) && (sigterm.is_some() || container.sidecar) {
                    let code = container.sigterm_exit_code;
                    container.terminate(code, if code == 0 { "Completed" } else { "Error" }, None);
                }
            }
            let succeeded = state
                .main
                .iter()
                .all(|c| matches!(c.state, State::Terminated { exit_code: 0, .. }));
            state.phase = if succeeded { "Succeeded" } else { "Failed" };
            state.sandbox = false;
            info!(pod = %self.key(), phase = state.phase, "pod finished");
        }
        self.write_status().await;
        self.release_ip();
    }

    /// The pod is being deleted: its running containers get SIGTERM (a driver deletes its executors first,
    /// as Spark's shutdown hook does), and the pod ends.
    async fn stop(&self) {
        info!(pod = %self.key(), "stopping the pod (deletion requested)");
        self.delete_executors().await;
        self.end(Some(())).await;
    }

    /// Deletes the pod for good, as the kubelet finalizes a graceful deletion once the pod is stopped:
    /// grace period 0, and a UID precondition so that a new pod of the same name is not hit.
    async fn finalize(&self) {
        let params = DeleteParams {
            grace_period_seconds: Some(0),
            preconditions: Some(Preconditions {
                uid: Some(self.uid.clone()),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        for attempt in 1..=10u32 {
            match self.api.delete(&self.name, &params).await {
                Ok(_) => {
                    info!(pod = %self.key(), "deleted the pod (finalized)");
                    return;
                }
                // Gone, or another pod of that name: nothing left to do.
                Err(kube::Error::Api(status)) if status.code == 404 || status.code == 409 => return,
                Err(error) => {
                    warn!(pod = %self.key(), %error, attempt, "could not delete the pod");
                    tokio::time::sleep(Duration::from_millis(200 * u64::from(attempt))).await;
                }
            }
        }
    }

    fn release_ip(&self) {
        let mut state = lock(&self.state);
        if state.pooled
            && let Some(ip) = state.ip
        {
            lock(&self.shared.ips).release(ip);
            state.pooled = false;
        }
    }

    /// An address from the node's pod CIDR (read from the Node, where the controller manager puts it).
    async fn allocate_ip(&self) -> Result<Ipv4Addr, String> {
        let nodes: Api<Node> = Api::all(self.shared.node.clone());
        let cidr = match nodes.get(&self.shared.name).await {
            Ok(node) => node.spec.and_then(|s| s.pod_cidr),
            Err(error) => {
                warn!(node = %self.shared.name, %error, "reading the node's podCIDR; using the fallback range");
                None
            }
        };
        let cidr = cidr.unwrap_or_else(|| FALLBACK_POD_CIDR.to_owned());
        lock(&self.shared.ips).allocate(&cidr)
    }

    /// Writes the pod's status through `pods/status`: the newest version of the pod with what the node owns
    /// set, replaced; again on a conflict (someone else wrote the pod meanwhile).
    ///
    /// The pod comes from the node's watch, not from a GET: the Node authorizer lets a node read a pod by
    /// name only once its graph has the pod's binding, which it learns from its own informer, so a GET
    /// right after the watch delivered the binding can be refused (the real server did, in this test).
    async fn write_status(&self) {
        let mut fresh: Option<Value> = None;
        for attempt in 1..=20u32 {
            let mut pod = fresh.take().unwrap_or_else(|| self.updates.borrow().clone());
            if pod.pointer("/metadata/uid").and_then(Value::as_str) != Some(self.uid.as_str()) {
                return;
            }
            let seen = resource_version(&pod).to_owned();
            self.set_status(&mut pod);
            let updated: DynamicObject = match serde_json::from_value(pod) {
                Ok(pod) => pod,
                Err(error) => {
                    warn!(pod = %self.key(), %error, "a status that does not deserialize");
                    return;
                }
            };
            match self
                .api
                .replace_status(&self.name, &PostParams::default(), &updated)
                .await
            {
                Ok(_) => return,
                Err(kube::Error::Api(status)) if status.code == 409 => {
                    debug!(pod = %self.key(), "status conflict; again from the newer pod");
                    fresh = self.newer_than(&seen).await;
                }
                Err(kube::Error::Api(status)) if status.code == 404 => return,
                Err(error) => {
                    warn!(pod = %self.key(), %error, attempt, "writing the pod's status");
                    tokio::time::sleep(Duration::from_millis(100 * u64::from(attempt))).await;
                }
            }
        }
        warn!(pod = %self.key(), "gave up writing the pod's status");
    }

    /// A version of the pod newer than `seen`: from the watch if it comes soon, else read.
    async fn newer_than(&self, seen: &str) -> Option<Value> {
        let mut updates = self.updates.clone();
        let from_watch = async {
            loop {
                {
                    let pod = updates.borrow_and_update();
                    if resource_version(&pod) != seen {
                        return pod.clone();
                    }
                }
                if updates.changed().await.is_err() {
                    return std::future::pending().await;
                }
            }
        };
        if let Ok(pod) = tokio::time::timeout(Duration::from_secs(2), from_watch).await {
            return Some(pod);
        }
        match self.api.get_opt(&self.name).await {
            Ok(pod) => pod.and_then(|p| serde_json::to_value(p).ok()),
            Err(error) => {
                warn!(pod = %self.key(), %error, "reading the pod for its status");
                None
            }
        }
    }

    /// Puts the node's view into `pod.status`, keeping what others own (other conditions, the scheduler's
    /// PodScheduled, nominatedNodeName, qosClass, ...) and the transition times of unchanged conditions.
    fn set_status(&self, pod: &mut Value) {
        let state = lock(&self.state);
        let now = Timestamp::now().to_string();
        if !pod["status"].is_object() {
            pod["status"] = json!({});
        }
        let status = &mut pod["status"];
        let terminal = matches!(state.phase, "Succeeded" | "Failed");
        let initialized = state
            .init
            .iter()
            .all(|c| c.sidecar || matches!(c.state, State::Terminated { exit_code: 0, .. }));
        let ready = !terminal && state.main.iter().all(|c| matches!(c.state, State::Running { .. }));
        let not_ready_reason = if terminal { "PodCompleted" } else { "ContainersNotReady" };
        let mut ours = vec![
            ("PodReadyToStartContainers", state.sandbox, ""),
            (
                "Initialized",
                initialized,
                if terminal {
                    "PodCompleted"
                } else {
                    "ContainersNotInitialized"
                },
            ),
            ("ContainersReady", ready, not_ready_reason),
            ("Ready", ready, not_ready_reason),
        ];
        let existing: Vec<Value> = status["conditions"].as_array().cloned().unwrap_or_default();
        if !existing.iter().any(|c| c["type"] == "PodScheduled") {
            ours.insert(0, ("PodScheduled", true, ""));
        }
        let mut conditions: Vec<Value> = existing
            .iter()
            .filter(|c| !ours.iter().any(|(kind, _, _)| c["type"] == *kind))
            .cloned()
            .collect();
        for (kind, true_, reason) in ours {
            let value = if true_ { "True" } else { "False" };
            let since = existing
                .iter()
                .find(|c| c["type"] == kind && c["status"] == value)
                .and_then(|c| c.get("lastTransitionTime").cloned())
                .unwrap_or_else(|| json!(now));
            let mut condition =
                json!({ "type": kind, "status": value, "lastProbeTime": null, "lastTransitionTime": since });
            if !true_ && !reason.is_empty() {
                condition["reason"] = json!(reason);
                if kind != "Initialized" {
                    let waiting: Vec<&str> = state
                        .main
                        .iter()
                        .filter(|c| !matches!(c.state, State::Running { .. }))
                        .map(|c| c.name.as_str())
                        .collect();
                    if !terminal && !waiting.is_empty() {
                        condition["message"] =
                            json!(format!("containers with unready status: [{}]", waiting.join(" ")));
                    }
                }
            }
            conditions.push(condition);
        }
        status["conditions"] = Value::Array(conditions);
        status["phase"] = json!(state.phase);
        status["hostIP"] = json!(HOST_IP);
        status["hostIPs"] = json!([{ "ip": HOST_IP }]);
        if let Some(ip) = state.ip {
            status["podIP"] = json!(ip.to_string());
            status["podIPs"] = json!([{ "ip": ip.to_string() }]);
        }
        if let Some(start) = state.start_time
            && status.get("startTime").is_none_or(Value::is_null)
        {
            status["startTime"] = json!(start.to_string());
        }
        if !state.init.is_empty() {
            status["initContainerStatuses"] = Value::Array(state.init.iter().map(ContainerRun::status).collect());
        }
        status["containerStatuses"] = Value::Array(state.main.iter().map(ContainerRun::status).collect());
    }

    /// Waits until every non-optional ConfigMap and Secret volume of the pod exists (read as the node, which
    /// the Node authorizer allows for what its pods reference), as the kubelet's volume manager retries a
    /// mount; only the pod's deletion (which ends this task) stops the wait.
    async fn wait_for_volumes(&self, pod: &Value) {
        let maps: Api<ConfigMap> = Api::namespaced(self.shared.node.clone(), &self.namespace);
        let secrets: Api<Secret> = Api::namespaced(self.shared.node.clone(), &self.namespace);
        let volumes = pod
            .pointer("/spec/volumes")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        for volume in volumes {
            let (secret, source) = match (volume.get("configMap"), volume.get("secret")) {
                (Some(source), _) => (false, source),
                (None, Some(source)) => (true, source),
                (None, None) => continue,
            };
            if source.get("optional").and_then(Value::as_bool) == Some(true) {
                continue;
            }
            let key = if secret { "secretName" } else { "name" };
            let Some(name) = source.get(key).and_then(Value::as_str) else {
                continue;
            };
            let mut delay = Duration::from_millis(100);
            loop {
                let found = if secret {
                    secrets.get_metadata_opt(name).await.map(|s| s.is_some())
                } else {
                    maps.get_metadata_opt(name).await.map(|m| m.is_some())
                };
                match found {
                    Ok(true) => break,
                    Ok(false) => info!(pod = %self.key(), volume = name, "waiting for a volume's source to exist"),
                    Err(error) => warn!(pod = %self.key(), volume = name, %error, "reading a volume's source"),
                }
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(2));
            }
        }
    }

    // ---- the driver -----------------------------------------------------------------------------

    /// A Spark driver towards the API server: starts its executors, works for its run time, deletes its
    /// executors and exits with the scripted code. Errors are reported as Spark's driver would exit: code
    /// 1 with the message.
    async fn spark_driver(&self, pod: &Value, container: &Value, script: &Script) -> (i32, Option<String>) {
        if let Err(message) = self.start_executors(pod, container).await {
            warn!(pod = %self.key(), %message, "the driver failed to start");
            self.delete_executors().await;
            return (1, Some(message));
        }
        match script.run_time.unwrap_or(RunTime::For(DRIVER_RUN_TIME)) {
            RunTime::For(time) => tokio::time::sleep(time).await,
            RunTime::Forever => std::future::pending::<()>().await,
        }
        info!(pod = %self.key(), "the driver's job is done; deleting its executors");
        self.delete_executors().await;
        (script.exit_code(0), script.termination_message.clone())
    }

    /// What Spark's driver does when its SparkContext starts on Kubernetes: reads `spark.properties`, reads
    /// its own pod, creates the executor ConfigMap and `spark.executor.instances` executor pods (all as
    /// its ServiceAccount), and waits until they run.
    async fn start_executors(&self, pod: &Value, container: &Value) -> Result<(), String> {
        let path = properties_path(container);
        let text = self.read_mounted_file(pod, container, &path).await.ok_or_else(|| {
            format!("java.lang.IllegalArgumentException: requirement failed: Properties file {path} does not exist")
        })?;
        let mut conf = SparkConf(parse_properties(&text));
        let namespace = conf.get_or("spark.kubernetes.namespace", &self.namespace).to_owned();
        let pod_name = conf.get_or("spark.kubernetes.driver.pod.name", &self.name).to_owned();
        // Spark's client authenticates with the token projected into its pod: the pod's ServiceAccount.
        let account = pod
            .pointer("/spec/serviceAccountName")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .unwrap_or("default");
        let token = service_account_token(
            &self.shared.admin,
            &self.namespace,
            account,
            Some((&self.name, &self.uid)),
        )
        .await?;
        let client = token_client(&self.shared.server, &self.shared.ca, &token).await?;
        let pods: Api<DynamicObject> = Api::namespaced_with(client.clone(), &namespace, &pod_resource());
        // Spark's first call: the driver reads its own pod (ExecutorPodsAllocator).
        let driver_pod = pods
            .get(&pod_name)
            .await
            .map_err(|e| format!("ERROR SparkContext: Error initializing SparkContext: GET pods/{pod_name}: {e}"))?;
        let driver_pod = serde_json::to_value(&driver_pod).map_err(|e| e.to_string())?;
        conf.bind_to_pod_ip(&driver_pod);
        let app_id = conf
            .get("spark.app.id")
            .map(str::to_owned)
            .unwrap_or_else(|| format!("spark-{:016x}", hash(&(&self.uid, "app"))));
        let app_name = conf.get_or("spark.app.name", "spark").to_owned();
        let instances = conf
            .int_or("spark.executor.instances", 2)
            .map_err(|e| format!("java.lang.IllegalArgumentException: {e}"))?
            .max(0);
        let template = match conf.get("spark.kubernetes.executor.podTemplateFile") {
            None => None,
            Some(file) => {
                let file = file.strip_prefix("file://").unwrap_or(file).to_owned();
                let text = self.read_mounted_file(pod, container, &file).await;
                match text.as_deref().map(serde_yaml::from_str::<Value>) {
                    Some(Ok(template)) if template.is_object() => Some(template),
                    _ => return Err("org.apache.spark.SparkException: Could not load pod from template file.".into()),
                }
            }
        };
        let prefix = conf
            .get("spark.kubernetes.executor.podNamePrefix")
            .map(str::to_owned)
            .unwrap_or_else(|| spark_executor::resource_name_prefix(&app_name));
        let config_map = format!("spark-exec-{}-conf-map", spark_executor::unique_id());
        let spark_user = container
            .get("env")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .find(|e| e["name"] == "SPARK_USER")
            .and_then(|e| e["value"].as_str())
            .unwrap_or("root")
            .to_owned();
        // KubernetesClusterSchedulerBackend: the executors' ConfigMap first; Spark's start fails without it.
        let maps: Api<ConfigMap> = Api::namespaced(client.clone(), &namespace);
        let map = spark_executor::executor_config_map(&config_map, &namespace, &app_id, &driver_pod);
        let map: ConfigMap = serde_json::from_value(map).map_err(|e| e.to_string())?;
        maps.create(&PostParams::default(), &map).await.map_err(|e| {
            format!("ERROR SparkContext: Error initializing SparkContext: POST configmaps {config_map}: {e}")
        })?;
        *lock(&self.driver) = Some(DriverExecutors {
            client: client.clone(),
            namespace: namespace.clone(),
            names: Vec::new(),
        });
        for exec_id in 1..=instances.unsigned_abs() {
            let executor = spark_executor::executor_pod(&ExecutorInput {
                conf: &conf,
                app_id: &app_id,
                exec_id,
                driver_pod: &driver_pod,
                name_prefix: &prefix,
                config_map: &config_map,
                spark_user: &spark_user,
                template: template.as_ref(),
            });
            let executor = match executor
                .and_then(|e| serde_json::from_value::<DynamicObject>(e).map_err(|e| e.to_string()))
            {
                Ok(executor) => executor,
                Err(message) => {
                    warn!(pod = %self.key(), %message, "ExecutorPodsAllocator: Exception when requesting new executors");
                    continue;
                }
            };
            match pods.create(&PostParams::default(), &executor).await {
                Ok(created) => {
                    let name = created.metadata.name.unwrap_or_default();
                    info!(pod = %self.key(), executor = %name, "the driver created an executor");
                    if let Some(driver) = lock(&self.driver).as_mut() {
                        driver.names.push(name);
                    }
                }
                Err(error) => {
                    warn!(pod = %self.key(), %error, "ExecutorPodsAllocator: Exception when requesting new executors");
                }
            }
        }
        // The job starts once the executors run (as Spark's, it waits for them however long it takes).
        let selector = format!("spark-app-selector={app_id},spark-role=executor");
        loop {
            let names: Vec<String> = lock(&self.driver).as_ref().map(|d| d.names.clone()).unwrap_or_default();
            match pods.list(&ListParams::default().labels(&selector)).await {
                Ok(list) => {
                    let started = names.iter().all(|name| {
                        list.items
                            .iter()
                            .find(|p| p.metadata.name.as_deref() == Some(name.as_str()))
                            .is_none_or(|p| p.data.pointer("/status/phase").and_then(Value::as_str) != Some("Pending"))
                    });
                    if started {
                        info!(pod = %self.key(), executors = names.len(), "the driver's executors run");
                        return Ok(());
                    }
                }
                Err(error) => warn!(pod = %self.key(), %error, "the driver listing its executors"),
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// Deletes the driver's executors, as its ServiceAccount (`spark.kubernetes.executor.deleteOnTermination`).
    async fn delete_executors(&self) {
        let Some(driver) = lock(&self.driver).take() else {
            return;
        };
        let pods: Api<DynamicObject> = Api::namespaced_with(driver.client, &driver.namespace, &pod_resource());
        for name in driver.names {
            match pods.delete(&name, &DeleteParams::default()).await {
                Ok(_) => info!(pod = %self.key(), executor = %name, "the driver deleted an executor"),
                Err(kube::Error::Api(status)) if status.code == 404 => {}
                Err(error) => {
                    warn!(pod = %self.key(), executor = %name, %error, "the driver could not delete an executor")
                }
            }
        }
    }

    /// The content of `path` in `container`: the ConfigMap volume mounted at the longest prefix of the path,
    /// the key the file comes from (its `items`, else the file's name), read as the node (which the Node
    /// authorizer allows for ConfigMaps its pods reference), as the kubelet reads it to mount it.
    async fn read_mounted_file(&self, pod: &Value, container: &Value, path: &str) -> Option<String> {
        let (mount, file) = container
            .get("volumeMounts")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|m| {
                let at = m.get("mountPath").and_then(Value::as_str)?.trim_end_matches('/');
                let rest = path.strip_prefix(at)?.strip_prefix('/')?;
                Some((m, at.len(), rest.to_owned()))
            })
            .max_by_key(|(_, len, _)| *len)
            .map(|(m, _, rest)| (m, rest))?;
        let volume = mount.get("name").and_then(Value::as_str).unwrap_or_default();
        let source = pod
            .pointer("/spec/volumes")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .find(|v| v["name"] == volume)
            .and_then(|v| v.get("configMap"))?;
        let key = match source.get("items").and_then(Value::as_array).filter(|i| !i.is_empty()) {
            Some(items) => items.iter().find(|i| i["path"] == file.as_str())?["key"]
                .as_str()?
                .to_owned(),
            None => file,
        };
        let name = source.get("name").and_then(Value::as_str)?;
        let maps: Api<ConfigMap> = Api::namespaced(self.shared.node.clone(), &self.namespace);
        // Again on errors but NotFound, as the kubelet's volume manager retries a mount (the Node
        // authorizer may not have seen the pod's reference to the ConfigMap yet).
        for attempt in 1..=10u32 {
            match maps.get_opt(name).await {
                Ok(map) => return map.and_then(|m| m.data).and_then(|mut d| d.remove(&key)),
                Err(error) => {
                    warn!(pod = %self.key(), configmap = name, %error, attempt, "reading a mounted ConfigMap");
                    tokio::time::sleep(Duration::from_millis(100 * u64::from(attempt))).await;
                }
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pod_addresses_come_from_the_cidr() {
        let mut pool = IpPool::default();
        assert_eq!(pool.allocate("198.18.3.0/24").unwrap(), Ipv4Addr::new(198, 18, 3, 2));
        assert_eq!(pool.allocate("198.18.3.0/24").unwrap(), Ipv4Addr::new(198, 18, 3, 3));
        pool.release(Ipv4Addr::new(198, 18, 3, 2));
        assert_eq!(pool.allocate("198.18.3.0/24").unwrap(), Ipv4Addr::new(198, 18, 3, 2));
        assert!(IpPool::default().allocate("fd00::/64").is_err());
        let mut small = IpPool::default();
        assert!(small.allocate("198.18.4.0/30").is_ok());
        assert!(small.allocate("198.18.4.0/30").is_err());
    }

    #[test]
    fn properties_file_from_args_or_conf_dir() {
        let by_args = json!({ "args": ["driver", "--properties-file", "/x/spark.properties"] });
        assert_eq!(properties_path(&by_args), "/x/spark.properties");
        let by_env = json!({ "env": [{ "name": "SPARK_CONF_DIR", "value": "/etc/spark" }] });
        assert_eq!(properties_path(&by_env), "/etc/spark/spark.properties");
    }

    #[test]
    fn image_ids_are_digests() {
        let id = image_id("docker.io/apache/spark:4.0.4");
        assert!(id.starts_with("docker.io/apache/spark@sha256:"), "{id}");
        assert_eq!(id.len(), "docker.io/apache/spark@sha256:".len() + 64);
    }
}
