//! Loopback networking: per-instance address ranges, cluster IP allocation, the `kubernetes`
//! and `kube-dns` Services, the endpoints controller, the userspace Service proxy, the cluster
//! DNS (also through glibc) and the kubelet's HTTPS server.
#![allow(clippy::expect_used, clippy::unwrap_used)]

mod common;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use kube_sim::node::NodesConfig;
use kube_sim::registry::Gvr;
use kube_sim::store::{DeleteOptions, Store, WriteOptions};
use kube_sim::{Sim, SimConfig};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UdpSocket};

use common::start_sim;

fn gvr(resource: &str) -> Gvr {
    Gvr::new("", "v1", resource)
}

async fn with_nodes(count: usize) -> (Sim, tempfile::TempDir) {
    start_sim(|c: &mut SimConfig| {
        c.root_ca_configmap = true;
        c.nodes = NodesConfig::with_nodes(count);
    })
    .await
}

/// Polls `f` every 20 ms for up to 20 s.
async fn until<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    for _ in 0..1000 {
        if let Some(v) = f() {
            return v;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("timed out waiting for {what}");
}

async fn create(store: &Store, resource: &str, ns: &str, obj: Value) -> Value {
    store
        .create(&gvr(resource), ns, obj, &WriteOptions::default())
        .await
        .unwrap_or_else(|e| panic!("creating a {resource}: {e}"))
        .object
}

fn service(name: &str, spec: Value) -> Value {
    json!({ "apiVersion": "v1", "kind": "Service", "metadata": { "name": name }, "spec": spec })
}

fn pod(name: &str, labels: Value, spec_extra: Value) -> Value {
    let mut spec = json!({ "containers": [{ "name": "main", "image": "busybox:1.36", "ports": [{ "name": "http", "containerPort": 8080 }] }] });
    if let (Value::Object(s), Value::Object(extra)) = (&mut spec, spec_extra) {
        s.extend(extra);
    }
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": { "name": name, "labels": labels, "annotations": { "sim.spark-operator.dev/log": format!("hello from {name}") } },
        "spec": spec,
    })
}

fn ready_ip(store: &Store, name: &str) -> Option<String> {
    let p = store.get(&gvr("pods"), "default", name).ok()?;
    let ready = p["status"]["conditions"]
        .as_array()?
        .iter()
        .any(|c| c["type"] == "Ready" && c["status"] == "True");
    ready.then(|| p["status"]["podIP"].as_str().map(str::to_string))?
}

/// GET over HTTPS to `addr`, verifying the certificate for the address itself.
async fn https_get(sim: &Sim, addr: SocketAddr, path: &str) -> (u16, String) {
    use http_body_util::BodyExt;
    let tcp = TcpStream::connect(addr).await.unwrap();
    let name = rustls_pki_types::ServerName::IpAddress(addr.ip().into());
    let tls = common::tls_client(sim)
        .connect(name, tcp)
        .await
        .expect("TLS handshake, certificate valid for the IP");
    let (mut sender, conn) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tls))
        .await
        .unwrap();
    tokio::spawn(conn);
    let req = http::Request::get(path)
        .header("host", addr.to_string())
        .header("authorization", format!("Bearer {}", sim.token()))
        .body(http_body_util::Empty::<bytes::Bytes>::new())
        .unwrap();
    let resp = sender.send_request(req).await.unwrap();
    let code = resp.status().as_u16();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    (code, String::from_utf8_lossy(&body).into_owned())
}

#[tokio::test]
async fn each_sim_has_its_own_loopback_ranges_and_system_services() {
    let (a, _da) = with_nodes(2).await;
    let (b, _db) = with_nodes(1).await;
    let (na, nb) = (a.network().addresses(), b.network().addresses());
    assert_ne!(na.service_range, nb.service_range);
    for n in [na, nb] {
        let [o1, o2, ..] = n.service_range.base().octets();
        assert_eq!(o1, 127);
        assert_ne!(o2, 0, "127.0.0.0/16 is the API server's and the tests'");
        assert_eq!(n.cluster_domain, "cluster.local");
    }
    assert_eq!(a.network().kubernetes_service_ip(), na.service_range.nth(1).unwrap());
    assert_eq!(
        a.network().dns_addr(),
        SocketAddr::new(na.service_range.nth(10).unwrap().into(), 53)
    );

    let store = a.store();
    let k = store.get(&gvr("services"), "default", "kubernetes").unwrap();
    assert_eq!(k["spec"]["clusterIP"], na.kubernetes_service_ip().to_string());
    assert_eq!(k["spec"]["ports"][0]["port"], 443);
    assert_eq!(k["spec"]["ports"][0]["targetPort"], a.addr().port());
    let ke = store.get(&gvr("endpoints"), "default", "kubernetes").unwrap();
    assert_eq!(ke["subsets"][0]["addresses"][0]["ip"], "127.0.0.1");
    assert_eq!(
        ke["subsets"][0]["ports"][0],
        json!({ "name": "https", "port": a.addr().port(), "protocol": "TCP" })
    );

    let dns = store.get(&gvr("services"), "kube-system", "kube-dns").unwrap();
    assert_eq!(dns["spec"]["clusterIP"], na.dns_ip().to_string());
    assert_eq!(dns["metadata"]["labels"]["k8s-app"], "kube-dns");
    let ports: Vec<(String, String)> = dns["spec"]["ports"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["name"].as_str().unwrap().into(),
                p["protocol"].as_str().unwrap().into(),
            )
        })
        .collect();
    assert_eq!(ports, [("dns".into(), "UDP".into()), ("dns-tcp".into(), "TCP".into())]);

    // Nodes: InternalIPs from the node range, /24s of the cluster CIDR, the kubelet port.
    for (i, name) in ["sim-node-1", "sim-node-2"].iter().enumerate() {
        let node = store.get(&gvr("nodes"), "", name).unwrap();
        let ip: Ipv4Addr = node["status"]["addresses"][0]["address"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap();
        assert_eq!(node["status"]["addresses"][0]["type"], "InternalIP");
        assert_eq!(Some(ip), na.node_ip(i as u16 + 1));
        assert!(na.node_range.contains(ip));
        assert_eq!(
            node["spec"]["podCIDR"],
            na.node_pod_cidr(i as u16 + 1).unwrap().to_string()
        );
        assert_eq!(node["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"], 10250);
    }

    // The API server's certificate names the kubernetes Service's IP (checked by the handshake).
    let (code, body) = https_get(&a, SocketAddr::new(na.kubernetes_service_ip().into(), 443), "/version").await;
    assert_eq!(code, 200, "{body}");
    assert!(body.contains("gitVersion"), "{body}");
    a.shutdown().await;
    b.shutdown().await;
}

#[tokio::test]
async fn configured_ranges_are_used() {
    // Ranges no default block of another sim binds on (their DNS is at 127.B.0.10, Service
    // listeners in 127.B.0.0/18, nodes in 127.B.64.0/18, pods from 127.B.128.0 up).
    let dir = tempfile::tempdir().unwrap();
    let mut config = SimConfig::new(dir.path().join("data"));
    let b = 200 + (std::process::id() % 50) as u8;
    config.network.service_cluster_ip_range = Some(format!("127.{b}.250.0/24").parse().unwrap());
    config.network.node_ip_range = Some(format!("127.{b}.251.0/24").parse().unwrap());
    config.network.cluster_cidr = Some(format!("127.{b}.240.0/21").parse().unwrap());
    config.network.cluster_domain = "sim.test".into();
    config.root_ca_configmap = true;
    config.nodes = NodesConfig::with_nodes(1);
    let sim = Sim::start(config).await.expect("sim starts");
    let n = sim.network();
    assert_eq!(n.kubernetes_service_ip().to_string(), format!("127.{b}.250.1"));
    assert_eq!(n.dns_addr().to_string(), format!("127.{b}.250.10:53"));
    assert_eq!(n.cluster_domain(), "sim.test");
    let node = sim.store().get(&gvr("nodes"), "", "sim-node-1").unwrap();
    assert_eq!(node["status"]["addresses"][0]["address"], format!("127.{b}.251.1"));
    assert_eq!(node["spec"]["podCIDR"], format!("127.{b}.240.0/24"));

    // A second sim on the same ranges cannot have them.
    let dir2 = tempfile::tempdir().unwrap();
    let mut clash = SimConfig::new(dir2.path().join("data"));
    clash.network = sim.network().config();
    let err = Sim::start(clash).await.err().expect("the DNS address is taken");
    assert!(
        kube_sim::error_chain::ErrorChain(&err).to_string().contains("in use"),
        "{}",
        kube_sim::error_chain::ErrorChain(&err)
    );
    sim.shutdown().await;
}

#[tokio::test]
async fn cluster_ips_are_allocated_from_the_service_range() {
    let (sim, _dir) = start_sim(|_| {}).await;
    let client = sim.client().await.unwrap();
    let range = sim.network().addresses().service_range;
    let api: kube::Api<k8s_openapi::api::core::v1::Service> = kube::Api::namespaced(client, "default");
    let svc = |name: &str, ip: Option<String>| {
        let mut spec = json!({ "ports": [{ "port": 80 }] });
        if let Some(ip) = ip {
            spec["clusterIP"] = json!(ip);
        }
        serde_json::from_value::<k8s_openapi::api::core::v1::Service>(service(name, spec)).unwrap()
    };
    let pp = kube::api::PostParams::default();

    let auto = api.create(&pp, &svc("auto", None)).await.unwrap();
    let auto_ip: Ipv4Addr = auto
        .spec
        .as_ref()
        .unwrap()
        .cluster_ip
        .as_deref()
        .unwrap()
        .parse()
        .unwrap();
    assert!(range.contains(auto_ip), "{auto_ip} in {range}");
    assert_eq!(auto.spec.as_ref().unwrap().cluster_ips, Some(vec![auto_ip.to_string()]));

    let wanted = range.nth(20).unwrap().to_string();
    let fixed = api.create(&pp, &svc("fixed", Some(wanted.clone()))).await.unwrap();
    assert_eq!(fixed.spec.unwrap().cluster_ip, Some(wanted.clone()));

    let message = |e: kube::Error| match e {
        kube::Error::Api(s) => (s.code, s.message),
        other => panic!("{other}"),
    };
    let taken = message(api.create(&pp, &svc("again", Some(wanted.clone()))).await.unwrap_err());
    assert_eq!(
        taken,
        (
            422,
            format!(
                "Service \"again\" is invalid: spec.clusterIPs: Invalid value: []string{{\"{wanted}\"}}: failed to allocate IP {wanted}: provided IP is already allocated"
            )
        )
    );
    let outside = message(
        api.create(&pp, &svc("outside", Some("10.96.0.50".into())))
            .await
            .unwrap_err(),
    );
    assert_eq!(
        outside,
        (
            422,
            format!(
                "Service \"outside\" is invalid: spec.clusterIPs: Invalid value: []string{{\"10.96.0.50\"}}: failed to allocate IP 10.96.0.50: the provided IP (10.96.0.50) is not in the valid range. The range of valid IPs is {range}"
            )
        )
    );
    let dns_taken = message(
        api.create(&pp, &svc("dns", Some(sim.network().addresses().dns_ip().to_string())))
            .await
            .unwrap_err(),
    );
    assert_eq!(dns_taken.0, 422);

    // A PUT that leaves the cluster IP out keeps it.
    let replaced = sim
        .store()
        .update(
            &gvr("services"),
            "default",
            "auto",
            service("auto", json!({ "ports": [{ "port": 81 }] })),
            None,
            &WriteOptions::default(),
        )
        .await
        .unwrap()
        .object;
    assert_eq!(replaced["spec"]["clusterIP"], auto_ip.to_string());
    assert_eq!(replaced["spec"]["ports"][0]["port"], 81);

    // Freed when the Service goes.
    api.delete("fixed", &Default::default()).await.unwrap();
    let reused = api.create(&pp, &svc("reused", Some(wanted.clone()))).await.unwrap();
    assert_eq!(reused.spec.unwrap().cluster_ip, Some(wanted));
    sim.shutdown().await;
}

#[tokio::test]
async fn the_endpoints_controller_follows_pods_and_services() {
    let (sim, _dir) = with_nodes(1).await;
    let store = sim.store().clone();
    let node_name = "sim-node-1";
    create(
        &store,
        "pods",
        "default",
        pod("web-1", json!({ "app": "web" }), json!({})),
    )
    .await;
    // No container port named http: left out of the named port's subset.
    let mut unnamed = pod("web-2", json!({ "app": "web" }), json!({}));
    unnamed["spec"]["containers"][0]["ports"] = json!([{ "containerPort": 9090 }]);
    create(&store, "pods", "default", unnamed).await;
    create(
        &store,
        "pods",
        "default",
        pod("other", json!({ "app": "other" }), json!({})),
    )
    .await;
    let ip1 = until("web-1 ready", || ready_ip(&store, "web-1")).await;
    let ip2 = until("web-2 ready", || ready_ip(&store, "web-2")).await;

    create(
        &store,
        "services",
        "default",
        service(
            "web",
            json!({ "selector": { "app": "web" }, "ports": [
                { "name": "http", "port": 80, "targetPort": "http" },
                { "name": "raw", "port": 90, "targetPort": 9090 },
            ] }),
        ),
    )
    .await;
    let ep = until("endpoints of web", || {
        let ep = store.get(&gvr("endpoints"), "default", "web").ok()?;
        (ep["subsets"].as_array()?.len() == 2).then_some(ep)
    })
    .await;
    let subsets = ep["subsets"].as_array().unwrap();
    let http = subsets
        .iter()
        .find(|s| s["ports"][0]["name"] == "http")
        .expect("http subset");
    assert_eq!(
        http["ports"],
        json!([{ "name": "http", "port": 8080, "protocol": "TCP" }])
    );
    assert_eq!(http["addresses"].as_array().unwrap().len(), 1, "{ep}");
    let a = &http["addresses"][0];
    assert_eq!(a["ip"], ip1.as_str());
    assert_eq!(a["nodeName"], node_name);
    assert_eq!(a["targetRef"]["kind"], "Pod");
    assert_eq!(a["targetRef"]["name"], "web-1");
    let raw = subsets
        .iter()
        .find(|s| s["ports"][0]["name"] == "raw")
        .expect("raw subset");
    let mut raw_ips: Vec<&str> = raw["addresses"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["ip"].as_str().unwrap())
        .collect();
    raw_ips.sort();
    let mut expected = vec![ip1.as_str(), ip2.as_str()];
    expected.sort();
    assert_eq!(raw_ips, expected);

    // A terminating pod leaves at once.
    store
        .delete(&gvr("pods"), "default", "web-2", &DeleteOptions::default())
        .await
        .unwrap();
    until("web-2 out of the endpoints", || {
        let ep = store.get(&gvr("endpoints"), "default", "web").ok()?;
        (!ep.to_string().contains(&format!("\"{ip2}\""))).then_some(())
    })
    .await;

    // Endpoints of a Service without a selector are never touched; deleting a Service deletes
    // its Endpoints (as the real controller does).
    create(
        &store,
        "services",
        "default",
        service("manual", json!({ "ports": [{ "port": 80 }] })),
    )
    .await;
    let manual = json!({ "apiVersion": "v1", "kind": "Endpoints", "metadata": { "name": "manual" },
        "subsets": [{ "addresses": [{ "ip": "127.0.0.2" }], "ports": [{ "port": 81 }] }] });
    create(&store, "endpoints", "default", manual).await;
    store
        .delete(&gvr("services"), "default", "web", &DeleteOptions::default())
        .await
        .unwrap();
    until("web's endpoints deleted", || {
        store.get(&gvr("endpoints"), "default", "web").is_err().then_some(())
    })
    .await;
    let m = store.get(&gvr("endpoints"), "default", "manual").unwrap();
    assert_eq!(m["subsets"][0]["addresses"][0]["ip"], "127.0.0.2");
    sim.shutdown().await;
}

/// A TCP server answering every connection with `id` then echoing.
async fn backend(addr: SocketAddr, id: &'static str) -> tokio::task::JoinHandle<()> {
    let l = TcpListener::bind(addr).await.expect("bind a backend");
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            tokio::spawn(async move {
                let _ = s.write_all(id.as_bytes()).await;
                let mut buf = [0u8; 64];
                while let Ok(n) = s.read(&mut buf).await {
                    if n == 0 || s.write_all(&buf[..n]).await.is_err() {
                        break;
                    }
                }
            });
        }
    })
}

/// Connects to `addr`, reads the greeting and one echo; None when the connection is refused or
/// closed without an answer.
async fn call(addr: SocketAddr) -> Option<String> {
    let mut s = TcpStream::connect(addr).await.ok()?;
    let mut greeting = [0u8; 2];
    s.read_exact(&mut greeting).await.ok()?;
    s.write_all(b"ping").await.ok()?;
    let mut echo = [0u8; 4];
    s.read_exact(&mut echo).await.ok()?;
    assert_eq!(&echo, b"ping");
    Some(String::from_utf8_lossy(&greeting).into_owned())
}

#[tokio::test]
async fn the_service_proxy_serves_cluster_ips() {
    let (sim, _dir) = start_sim(|_| {}).await;
    let store = sim.store().clone();
    let pods = sim.network().addresses().pod_range;
    // Two "pods" outside any node's /24 (the last ones of the range).
    let last = pods.subnet(24, pods.size() / 256 - 1).unwrap();
    let (b1, b2) = (
        SocketAddr::new(last.nth(10).unwrap().into(), 7000),
        SocketAddr::new(last.nth(11).unwrap().into(), 7000),
    );
    let t1 = backend(b1, "b1").await;
    let t2 = backend(b2, "b2").await;

    let svc = create(
        &store,
        "services",
        "default",
        service(
            "echo",
            json!({ "ports": [{ "name": "tcp", "port": 80, "targetPort": 7000 }] }),
        ),
    )
    .await;
    let ip: IpAddr = svc["spec"]["clusterIP"].as_str().unwrap().parse().unwrap();
    let front = SocketAddr::new(ip, 80);

    // No endpoints yet: the connection is closed at once.
    until("the listener", || std::net::TcpStream::connect(front).ok()).await;
    assert_eq!(call(front).await, None);

    let endpoints = json!({ "apiVersion": "v1", "kind": "Endpoints", "metadata": { "name": "echo" },
        "subsets": [{ "addresses": [{ "ip": b1.ip().to_string() }, { "ip": b2.ip().to_string() }], "ports": [{ "name": "tcp", "port": 7000 }] }] });
    create(&store, "endpoints", "default", endpoints).await;
    let mut seen = std::collections::BTreeSet::new();
    for _ in 0..200 {
        if let Some(id) = call(front).await {
            seen.insert(id);
        }
        if seen.len() == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        seen.into_iter().collect::<Vec<_>>(),
        ["b1", "b2"],
        "round robin over both endpoints"
    );

    // The listener goes with the Service.
    store
        .delete(&gvr("services"), "default", "echo", &DeleteOptions::default())
        .await
        .unwrap();
    until("the listener closed", || {
        std::net::TcpStream::connect(front).is_err().then_some(())
    })
    .await;
    t1.abort();
    t2.abort();
    sim.shutdown().await;
}

/// A DNS query over UDP; returns (rcode, A addresses, SRV (port, target)).
async fn dig(server: SocketAddr, name: &str, qtype: u16) -> (u8, Vec<Ipv4Addr>, Vec<(u16, String)>) {
    let mut q = vec![0xab, 0xcd, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0];
    for label in name.split('.') {
        q.push(label.len() as u8);
        q.extend_from_slice(label.as_bytes());
    }
    q.extend_from_slice(&[0, (qtype >> 8) as u8, qtype as u8, 0, 1]);
    let sock = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    sock.send_to(&q, server).await.unwrap();
    let mut buf = vec![0u8; 4096];
    let n = tokio::time::timeout(Duration::from_secs(5), sock.recv(&mut buf))
        .await
        .expect("a DNS answer")
        .unwrap();
    parse_answer(&buf[..n])
}

fn read_name(msg: &[u8], mut pos: usize) -> (String, usize) {
    let mut labels = Vec::new();
    let mut end = None;
    loop {
        let len = msg[pos] as usize;
        if len == 0 {
            pos += 1;
            break;
        }
        if len & 0xc0 == 0xc0 {
            end.get_or_insert(pos + 2);
            pos = ((len & 0x3f) << 8) | msg[pos + 1] as usize;
            continue;
        }
        labels.push(String::from_utf8_lossy(&msg[pos + 1..pos + 1 + len]).into_owned());
        pos += 1 + len;
    }
    (labels.join("."), end.unwrap_or(pos))
}

fn parse_answer(msg: &[u8]) -> (u8, Vec<Ipv4Addr>, Vec<(u16, String)>) {
    assert_eq!(&msg[..2], &[0xab, 0xcd]);
    let rcode = msg[3] & 0x0f;
    let ancount = u16::from_be_bytes([msg[6], msg[7]]);
    let (_, mut pos) = read_name(msg, 12);
    pos += 4;
    let (mut a, mut srv) = (Vec::new(), Vec::new());
    for _ in 0..ancount {
        let (_, p) = read_name(msg, pos);
        let rtype = u16::from_be_bytes([msg[p], msg[p + 1]]);
        let len = u16::from_be_bytes([msg[p + 8], msg[p + 9]]) as usize;
        let data = p + 10;
        match rtype {
            1 => a.push(Ipv4Addr::new(msg[data], msg[data + 1], msg[data + 2], msg[data + 3])),
            33 => srv.push((
                u16::from_be_bytes([msg[data + 4], msg[data + 5]]),
                read_name(msg, data + 6).0,
            )),
            _ => {}
        }
        pos = data + len;
    }
    (rcode, a, srv)
}

#[tokio::test]
async fn cluster_dns_answers_as_the_kubernetes_dns_spec() {
    let (sim, _dir) = with_nodes(1).await;
    let store = sim.store().clone();
    let dns = sim.network().dns_addr();
    let k_ip = sim.network().kubernetes_service_ip();
    let (rcode, a, _) = dig(dns, "kubernetes.default.svc.cluster.local", 1).await;
    assert_eq!((rcode, a), (0, vec![k_ip]));
    // Another type of an existing name: NOERROR, nothing.
    let (rcode, a, _) = dig(dns, "kubernetes.default.svc.cluster.local", 28).await;
    assert_eq!((rcode, a.len()), (0, 0));
    // Missing names in the domain and names outside it: NXDOMAIN.
    assert_eq!(dig(dns, "nope.default.svc.cluster.local", 1).await.0, 3);
    assert_eq!(dig(dns, "kubernetes.nons.svc.cluster.local", 1).await.0, 3);
    assert_eq!(dig(dns, "example.com", 1).await.0, 3);
    // SRV for a named port.
    let (rcode, _, srv) = dig(dns, "_https._tcp.kubernetes.default.svc.cluster.local", 33).await;
    assert_eq!(
        (rcode, srv),
        (0, vec![(443, "kubernetes.default.svc.cluster.local".to_string())])
    );
    // Pod records.
    let (rcode, a, _) = dig(dns, "127-1-2-3.default.pod.cluster.local", 1).await;
    assert_eq!((rcode, a), (0, vec![Ipv4Addr::new(127, 1, 2, 3)]));

    // A headless Service: its ready endpoints, by name and by hostname.
    let mut p = pod(
        "db-0",
        json!({ "app": "db" }),
        json!({ "hostname": "db-0", "subdomain": "db" }),
    );
    p["spec"]["containers"][0]["ports"] = json!([{ "name": "pg", "containerPort": 5432 }]);
    create(&store, "pods", "default", p).await;
    let ip: Ipv4Addr = until("db-0 ready", || ready_ip(&store, "db-0")).await.parse().unwrap();
    create(
        &store,
        "services",
        "default",
        service("db", json!({ "clusterIP": "None", "selector": { "app": "db" }, "ports": [{ "name": "pg", "port": 5432, "targetPort": "pg" }] })),
    )
    .await;
    until("the endpoints", || {
        let ep = store.get(&gvr("endpoints"), "default", "db").ok()?;
        ep["subsets"][0]["addresses"][0]["hostname"].as_str().map(|_| ())
    })
    .await;
    let (rcode, a, _) = dig(dns, "db.default.svc.cluster.local", 1).await;
    assert_eq!((rcode, a), (0, vec![ip]));
    let (rcode, a, _) = dig(dns, "db-0.db.default.svc.cluster.local", 1).await;
    assert_eq!((rcode, a), (0, vec![ip]));
    let (rcode, _, srv) = dig(dns, "_pg._tcp.db.default.svc.cluster.local", 33).await;
    assert_eq!(
        (rcode, srv),
        (0, vec![(5432, "db-0.db.default.svc.cluster.local".to_string())])
    );

    // Over TCP too.
    let mut q = vec![0xab, 0xcd, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0];
    for label in "kubernetes.default.svc.cluster.local".split('.') {
        q.push(label.len() as u8);
        q.extend_from_slice(label.as_bytes());
    }
    q.extend_from_slice(&[0, 0, 1, 0, 1]);
    let mut tcp = TcpStream::connect(dns).await.unwrap();
    tcp.write_all(&(q.len() as u16).to_be_bytes()).await.unwrap();
    tcp.write_all(&q).await.unwrap();
    let mut len = [0u8; 2];
    tcp.read_exact(&mut len).await.unwrap();
    let mut reply = vec![0u8; u16::from_be_bytes(len) as usize];
    tcp.read_exact(&mut reply).await.unwrap();
    assert_eq!(parse_answer(&reply), (0, vec![k_ip], vec![]));
    sim.shutdown().await;
}

/// `getent hosts <name>` with `resolv` as /etc/resolv.conf, in a private mount namespace.
fn getent(resolv: &std::path::Path, name: &str) -> Result<String, String> {
    let script = format!(
        "mount --bind {} /etc/resolv.conf && getent hosts {name}",
        resolv.display()
    );
    let out = std::process::Command::new("unshare")
        .args(["--mount", "--", "sh", "-c", &script])
        .output()
        .map_err(|e| e.to_string())?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!("{}: {}", out.status, String::from_utf8_lossy(&out.stderr)))
    }
}

#[tokio::test]
async fn glibc_resolves_through_the_cluster_dns() {
    let is_root = std::process::Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0");
    if !is_root {
        eprintln!("skipped: needs root for unshare --mount");
        return;
    }
    let (sim, dir) = start_sim(|_| {}).await;
    let dns_ip = sim.network().addresses().dns_ip();
    let k_ip = sim.network().kubernetes_service_ip().to_string();
    let plain = dir.path().join("resolv.conf");
    std::fs::write(&plain, format!("nameserver {dns_ip}\noptions attempts:1 timeout:2\n")).unwrap();
    let fqdn = tokio::task::spawn_blocking(move || getent(&plain, "kubernetes.default.svc.cluster.local"))
        .await
        .unwrap()
        .expect("getent resolves the FQDN");
    assert!(fqdn.starts_with(&format!("{k_ip} ")), "{fqdn}");

    let search = dir.path().join("resolv-search.conf");
    std::fs::write(
        &search,
        format!(
            "nameserver {dns_ip}\nsearch default.svc.cluster.local svc.cluster.local cluster.local\noptions ndots:5 attempts:1 timeout:2\n"
        ),
    )
    .unwrap();
    let search2 = search.clone();
    let short = tokio::task::spawn_blocking(move || getent(&search2, "kubernetes.default.svc"))
        .await
        .unwrap()
        .expect("getent resolves through the search list");
    assert!(short.starts_with(&format!("{k_ip} ")), "{short}");
    let also = tokio::task::spawn_blocking(move || getent(&search, "kubernetes"))
        .await
        .unwrap()
        .expect("the bare Service name resolves in its namespace");
    assert!(also.starts_with(&format!("{k_ip} ")), "{also}");
    let missing = tokio::task::spawn_blocking({
        let p = dir.path().join("resolv.conf");
        move || getent(&p, "nothing.default.svc.cluster.local")
    })
    .await
    .unwrap();
    assert!(missing.is_err(), "{missing:?}");
    sim.shutdown().await;
}

#[tokio::test]
async fn each_node_serves_the_kubelet_api() {
    let (sim, _dir) = with_nodes(2).await;
    let store = sim.store().clone();
    create(
        &store,
        "pods",
        "default",
        pod("talker", json!({}), json!({ "nodeName": "sim-node-2" })),
    )
    .await;
    until("talker ready", || ready_ip(&store, "talker")).await;
    let node2 = SocketAddr::new(sim.network().addresses().node_ip(2).unwrap().into(), 10250);
    let node1 = SocketAddr::new(sim.network().addresses().node_ip(1).unwrap().into(), 10250);

    assert_eq!(https_get(&sim, node2, "/healthz").await, (200, "ok".to_string()));
    let (code, body) = https_get(&sim, node2, "/pods").await;
    assert_eq!(code, 200);
    let list: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(list["kind"], "PodList");
    let names: Vec<&str> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["talker"]);
    let (_, body1) = https_get(&sim, node1, "/pods").await;
    let list1: Value = serde_json::from_str(&body1).unwrap();
    assert_eq!(list1["items"], json!([]));

    let mut text = String::new();
    for _ in 0..250 {
        let (code, body) = https_get(&sim, node2, "/containerLogs/default/talker/main").await;
        if code == 200 && body.contains("hello from talker") {
            text = body;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(text, "hello from talker\n");
    let (code, body) = https_get(&sim, node2, "/containerLogs/default/talker/nope").await;
    assert_eq!(
        (code, body.as_str()),
        (404, "container \"nope\" not found in pod \"talker\"\n")
    );
    let (code, _) = https_get(&sim, node1, "/containerLogs/default/talker/main").await;
    assert_eq!(code, 404, "the pod is not on node 1");

    // A stopped kubelet does not answer; started again, it does.
    sim.nodes().stop_node("sim-node-2").unwrap();
    let tcp = TcpStream::connect(node2).await.unwrap();
    let name = rustls_pki_types::ServerName::IpAddress(node2.ip().into());
    assert!(
        common::tls_client(&sim).connect(name, tcp).await.is_err(),
        "no TLS from a stopped kubelet"
    );
    sim.nodes().start_node("sim-node-2").unwrap();
    assert_eq!(https_get(&sim, node2, "/healthz").await, (200, "ok".to_string()));
    sim.shutdown().await;
}

#[tokio::test]
async fn shutdown_leaves_no_listener_behind() {
    let (sim, _dir) = with_nodes(1).await;
    let store = sim.store().clone();
    let svc = create(
        &store,
        "services",
        "default",
        service("held", json!({ "ports": [{ "port": 8080 }] })),
    )
    .await;
    let svc_addr = SocketAddr::new(svc["spec"]["clusterIP"].as_str().unwrap().parse().unwrap(), 8080);
    until("the proxy listener", || std::net::TcpStream::connect(svc_addr).ok()).await;
    let dns = sim.network().dns_addr();
    let kubelet = SocketAddr::new(sim.network().addresses().node_ip(1).unwrap().into(), 10250);
    let kubernetes = SocketAddr::new(sim.network().kubernetes_service_ip().into(), 443);
    sim.shutdown().await;
    for addr in [svc_addr, dns, kubelet, kubernetes] {
        TcpListener::bind(addr)
            .await
            .unwrap_or_else(|e| panic!("{addr} is still held after shutdown: {e}"));
    }
    UdpSocket::bind(dns).await.expect("the DNS UDP socket is closed");
}

#[tokio::test]
async fn a_dropped_sim_frees_its_addresses_too() {
    let (sim, _dir) = with_nodes(1).await;
    let svc = create(
        sim.store(),
        "services",
        "default",
        service("held", json!({ "ports": [{ "port": 8080 }] })),
    )
    .await;
    let svc_addr = SocketAddr::new(svc["spec"]["clusterIP"].as_str().unwrap().parse().unwrap(), 8080);
    until("the proxy listener", || std::net::TcpStream::connect(svc_addr).ok()).await;
    let dns = sim.network().dns_addr();
    let kubelet = SocketAddr::new(sim.network().addresses().node_ip(1).unwrap().into(), 10250);
    drop(sim);
    // Dropping stops the tasks asynchronously: wait (generously) for each socket to be free.
    for addr in [svc_addr, dns, kubelet] {
        let mut free = false;
        for _ in 0..500 {
            if TcpListener::bind(addr).await.is_ok() {
                free = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(free, "{addr} is still held after the sim was dropped");
    }
}
