//! The cluster DNS server on the `kube-dns` Service's address, port 53, UDP and TCP (see
//! `records.rs` for what it answers and `wire.rs` for the format).

mod records;
pub mod wire;

use std::sync::Arc;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;
use tokio::sync::watch;

pub use records::TTL;

use super::Addresses;
use super::addresses::DnsSockets;
use crate::store::Store;

/// A UDP answer larger than this is truncated (no EDNS0 support).
const UDP_MAX: usize = 512;
/// An idle TCP connection is closed after this long.
const TCP_IDLE: std::time::Duration = std::time::Duration::from_secs(10);

/// Answers one message (a query in wire format); None for something not worth an answer.
pub fn answer(store: &Store, domain: &str, msg: &[u8], max: usize) -> Option<Vec<u8>> {
    let query = match wire::parse_query(msg) {
        Ok(q) => q,
        Err(e) => {
            let flags = msg.get(2..4).map(|f| u16::from_be_bytes([f[0], f[1]])).unwrap_or(0);
            // A response or an unreadable header gets nothing; a bad question a FORMERR.
            return e
                .id
                .filter(|_| flags & 0x8000 == 0)
                .map(|id| wire::error_response(id, flags, wire::FORMERR));
        }
    };
    if !query.is_standard() || !query.is_internet() {
        return Some(wire::error_response(query.id, query.flags, wire::NOTIMP));
    }
    let result = records::resolve(store, domain, &query.name, query.qtype);
    Some(wire::build_response(&query, &result, max))
}

pub(crate) async fn serve(store: Store, addresses: Addresses, sockets: DnsSockets, mut stop: watch::Receiver<bool>) {
    let DnsSockets { udp, tcp } = sockets;
    let udp = Arc::new(udp);
    let domain: Arc<str> = Arc::from(addresses.cluster_domain.to_ascii_lowercase());
    let mut buf = vec![0u8; 4096];
    loop {
        tokio::select! {
            _ = stop.changed() => return,
            received = udp.recv_from(&mut buf) => match received {
                Ok((n, peer)) => {
                    if let Some(reply) = answer(&store, &domain, &buf[..n], UDP_MAX)
                        && let Err(e) = udp.send_to(&reply, peer).await
                    {
                        tracing::debug!(%peer, error = %e, "sending a DNS answer");
                    }
                }
                Err(e) => tracing::debug!(error = %e, "receiving a DNS query"),
            },
            accepted = tcp.accept() => match accepted {
                Ok((conn, _)) => {
                    let (store, domain, stop) = (store.clone(), domain.clone(), stop.clone());
                    tokio::spawn(async move {
                        let mut stop = stop;
                        tokio::select! {
                            _ = serve_tcp(conn, &store, &domain) => {}
                            _ = stop.wait_for(|s| *s) => {}
                        }
                    });
                }
                Err(e) => tracing::debug!(error = %e, "accepting a DNS connection"),
            },
        }
    }
}

/// DNS over TCP: two-byte length-prefixed messages until the client closes or idles.
async fn serve_tcp(mut conn: TcpStream, store: &Store, domain: &str) {
    loop {
        let mut len = [0u8; 2];
        match tokio::time::timeout(TCP_IDLE, conn.read_exact(&mut len)).await {
            Ok(Ok(_)) => {}
            _ => return,
        }
        let mut msg = vec![0u8; usize::from(u16::from_be_bytes(len))];
        if conn.read_exact(&mut msg).await.is_err() {
            return;
        }
        let Some(reply) = answer(store, domain, &msg, usize::from(u16::MAX)) else {
            return;
        };
        let mut framed = (reply.len() as u16).to_be_bytes().to_vec();
        framed.extend_from_slice(&reply);
        if conn.write_all(&framed).await.is_err() {
            return;
        }
    }
}
