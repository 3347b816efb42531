//! The Services every cluster has: `default/kubernetes` (the API server, at the Service range's
//! first address, with the Endpoints kube-apiserver's reconciler keeps) and `kube-system/kube-dns`
//! (the cluster DNS, at the range's 10th address, as kubeadm's CoreDNS Service).

use std::net::SocketAddr;

use serde_json::{Value, json};

use super::{Addresses, DNS_PORT, NetworkError};
use crate::registry::Gvr;
use crate::store::{Store, WriteOptions};

/// Creates both Services and their Endpoints; `api` is the API server's listening address.
pub(crate) async fn publish(store: &Store, addresses: &Addresses, api: SocketAddr) -> Result<(), NetworkError> {
    let opts = WriteOptions {
        field_manager: Some("kube-apiserver".into()),
        ..Default::default()
    };
    let services = Gvr::new("", "v1", "services");
    let endpoints = Gvr::new("", "v1", "endpoints");
    let kubernetes = json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": { "name": "kubernetes", "labels": { "component": "apiserver", "provider": "kubernetes" } },
        "spec": {
            "clusterIP": addresses.kubernetes_service_ip().to_string(),
            // kube-apiserver points the Service at its own secure port.
            "ports": [{ "name": "https", "port": 443, "protocol": "TCP", "targetPort": api.port() }],
        }
    });
    let kubernetes_endpoints = json!({
        "apiVersion": "v1", "kind": "Endpoints",
        "metadata": { "name": "kubernetes", "labels": { "endpointslice.kubernetes.io/skip-mirror": "true" } },
        "subsets": [{
            "addresses": [{ "ip": api.ip().to_string() }],
            "ports": [{ "name": "https", "port": api.port(), "protocol": "TCP" }],
        }]
    });
    let dns_ip = addresses.dns_ip().to_string();
    // kubeadm's CoreDNS Service, without the selector: the DNS server is part of the sim, not a
    // pod, so its Endpoints are published here (the endpoints controller leaves Services without
    // a selector alone) and name the DNS server's own address.
    let kube_dns = json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {
            "name": "kube-dns",
            "labels": { "k8s-app": "kube-dns", "kubernetes.io/cluster-service": "true", "kubernetes.io/name": "CoreDNS" },
        },
        "spec": {
            "clusterIP": dns_ip,
            "ports": [
                { "name": "dns", "port": DNS_PORT, "protocol": "UDP", "targetPort": addresses.dns_port },
                { "name": "dns-tcp", "port": DNS_PORT, "protocol": "TCP", "targetPort": addresses.dns_port },
            ],
        }
    });
    let kube_dns_endpoints = json!({
        "apiVersion": "v1", "kind": "Endpoints",
        "metadata": { "name": "kube-dns", "labels": { "k8s-app": "kube-dns", "kubernetes.io/cluster-service": "true", "kubernetes.io/name": "CoreDNS" } },
        "subsets": [{
            "addresses": [{ "ip": dns_ip }],
            "ports": [
                { "name": "dns", "port": addresses.dns_port, "protocol": "UDP" },
                { "name": "dns-tcp", "port": addresses.dns_port, "protocol": "TCP" },
            ],
        }]
    });
    let objects: [(&Gvr, &str, Value); 4] = [
        (&services, "default", kubernetes),
        (&endpoints, "default", kubernetes_endpoints),
        (&services, "kube-system", kube_dns),
        (&endpoints, "kube-system", kube_dns_endpoints),
    ];
    for (gvr, namespace, object) in objects {
        let what = format!("{} {namespace}/{}", gvr.resource, crate::meta::name(&object));
        store
            .create(gvr, namespace, object, &opts)
            .await
            .map_err(|source| NetworkError::Publish {
                what,
                source: Box::new(source),
            })?;
    }
    Ok(())
}
