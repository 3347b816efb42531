//! The DNS wire format (RFC 1035) for what the cluster DNS needs: one question in, A, AAAA,
//! CNAME, SRV and SOA records out. Names in answers are written uncompressed.

use std::net::Ipv4Addr;

pub const TYPE_A: u16 = 1;
pub const TYPE_CNAME: u16 = 5;
pub const TYPE_SOA: u16 = 6;
pub const TYPE_AAAA: u16 = 28;
pub const TYPE_SRV: u16 = 33;
pub const TYPE_ANY: u16 = 255;
const CLASS_IN: u16 = 1;

pub const NOERROR: u8 = 0;
pub const FORMERR: u8 = 1;
pub const NXDOMAIN: u8 = 3;
pub const NOTIMP: u8 = 4;

/// A parsed query: its id, flags and (first) question.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Query {
    pub id: u16,
    pub flags: u16,
    /// Lowercase, without the trailing dot.
    pub name: String,
    /// As asked (case kept), echoed in the question section.
    pub raw_name: Vec<u8>,
    pub qtype: u16,
    pub qclass: u16,
}

/// Record data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RData {
    A(Ipv4Addr),
    Cname(String),
    Srv {
        priority: u16,
        weight: u16,
        port: u16,
        target: String,
    },
    Soa {
        mname: String,
        rname: String,
        serial: u32,
        minimum: u32,
    },
}

impl RData {
    fn rtype(&self) -> u16 {
        match self {
            RData::A(_) => TYPE_A,
            RData::Cname(_) => TYPE_CNAME,
            RData::Srv { .. } => TYPE_SRV,
            RData::Soa { .. } => TYPE_SOA,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub name: String,
    pub ttl: u32,
    pub data: RData,
}

/// What the resolver decided.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Answer {
    pub rcode: u8,
    pub answers: Vec<Record>,
    pub authority: Vec<Record>,
    pub additional: Vec<Record>,
}

/// Why a message was not a query we can answer; `id` is there when the header was readable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("bad DNS query: {reason}")]
pub struct ParseError {
    pub id: Option<u16>,
    pub reason: &'static str,
}

pub fn parse_query(msg: &[u8]) -> Result<Query, ParseError> {
    let err = |id, reason| ParseError { id, reason };
    if msg.len() < 12 {
        return Err(err(None, "shorter than a header"));
    }
    let id = u16::from_be_bytes([msg[0], msg[1]]);
    let flags = u16::from_be_bytes([msg[2], msg[3]]);
    if flags & 0x8000 != 0 {
        return Err(err(Some(id), "a response, not a query"));
    }
    let qdcount = u16::from_be_bytes([msg[4], msg[5]]);
    if qdcount != 1 {
        return Err(err(Some(id), "not exactly one question"));
    }
    let mut pos = 12;
    let mut labels: Vec<String> = Vec::new();
    loop {
        let len = usize::from(*msg.get(pos).ok_or(err(Some(id), "truncated name"))?);
        if len == 0 {
            pos += 1;
            break;
        }
        // Questions are not compressed in practice; pointers here are refused.
        if len > 63 {
            return Err(err(Some(id), "compressed or oversized label"));
        }
        let label = msg
            .get(pos + 1..pos + 1 + len)
            .ok_or(err(Some(id), "truncated label"))?;
        labels.push(String::from_utf8_lossy(label).to_ascii_lowercase());
        pos += 1 + len;
        if pos > 255 + 12 {
            return Err(err(Some(id), "name too long"));
        }
    }
    let raw_name = msg[12..pos].to_vec();
    let tail = msg.get(pos..pos + 4).ok_or(err(Some(id), "truncated question"))?;
    Ok(Query {
        id,
        flags,
        name: labels.join("."),
        raw_name,
        qtype: u16::from_be_bytes([tail[0], tail[1]]),
        qclass: u16::from_be_bytes([tail[2], tail[3]]),
    })
}

impl Query {
    pub fn is_internet(&self) -> bool {
        self.qclass == CLASS_IN || self.qclass == 255
    }

    /// Standard query (opcode 0)?
    pub fn is_standard(&self) -> bool {
        (self.flags >> 11) & 0xf == 0
    }
}

fn write_name(out: &mut Vec<u8>, name: &str) {
    for label in name.trim_end_matches('.').split('.').filter(|l| !l.is_empty()) {
        let bytes = label.as_bytes();
        let len = bytes.len().min(63);
        out.push(len as u8);
        out.extend_from_slice(&bytes[..len]);
    }
    out.push(0);
}

fn write_record(out: &mut Vec<u8>, r: &Record) {
    write_name(out, &r.name);
    out.extend_from_slice(&r.data.rtype().to_be_bytes());
    out.extend_from_slice(&CLASS_IN.to_be_bytes());
    out.extend_from_slice(&r.ttl.to_be_bytes());
    let mut data = Vec::new();
    match &r.data {
        RData::A(ip) => data.extend_from_slice(&ip.octets()),
        RData::Cname(target) => write_name(&mut data, target),
        RData::Srv {
            priority,
            weight,
            port,
            target,
        } => {
            data.extend_from_slice(&priority.to_be_bytes());
            data.extend_from_slice(&weight.to_be_bytes());
            data.extend_from_slice(&port.to_be_bytes());
            write_name(&mut data, target);
        }
        RData::Soa {
            mname,
            rname,
            serial,
            minimum,
        } => {
            write_name(&mut data, mname);
            write_name(&mut data, rname);
            // serial, refresh, retry, expire, minimum (CoreDNS' values).
            for v in [*serial, 7200, 1800, 86400, *minimum] {
                data.extend_from_slice(&v.to_be_bytes());
            }
        }
    }
    out.extend_from_slice(&(data.len() as u16).to_be_bytes());
    out.extend_from_slice(&data);
}

/// The response to `query`; over UDP (`max` 512) an answer that does not fit is sent empty with
/// TC set, so the client asks again over TCP.
pub fn build_response(query: &Query, answer: &Answer, max: usize) -> Vec<u8> {
    let full = encode(query, answer, false);
    if full.len() <= max {
        return full;
    }
    encode(
        query,
        &Answer {
            rcode: answer.rcode,
            ..Answer::default()
        },
        true,
    )
}

fn encode(query: &Query, answer: &Answer, truncated: bool) -> Vec<u8> {
    let mut out = Vec::with_capacity(512);
    out.extend_from_slice(&query.id.to_be_bytes());
    // QR, the query's opcode, AA, TC, the query's RD, RA, rcode.
    let mut flags: u16 = 0x8000 | (query.flags & 0x7800) | 0x0400 | (query.flags & 0x0100) | 0x0080;
    if truncated {
        flags |= 0x0200;
    }
    flags |= u16::from(answer.rcode & 0xf);
    out.extend_from_slice(&flags.to_be_bytes());
    for count in [1, answer.answers.len(), answer.authority.len(), answer.additional.len()] {
        out.extend_from_slice(&(count as u16).to_be_bytes());
    }
    out.extend_from_slice(&query.raw_name);
    out.extend_from_slice(&query.qtype.to_be_bytes());
    out.extend_from_slice(&query.qclass.to_be_bytes());
    for r in answer.answers.iter().chain(&answer.authority).chain(&answer.additional) {
        write_record(&mut out, r);
    }
    out
}

/// An error response for a message whose question could not be used (FORMERR/NOTIMP): just
/// the header.
pub fn error_response(id: u16, flags: u16, rcode: u8) -> Vec<u8> {
    let flags: u16 = 0x8000 | (flags & 0x7900) | 0x0080 | u16::from(rcode & 0xf);
    let mut out = id.to_be_bytes().to_vec();
    out.extend_from_slice(&flags.to_be_bytes());
    out.extend_from_slice(&[0; 8]);
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn query(name: &str, qtype: u16) -> Vec<u8> {
        let mut q = vec![0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0];
        write_name(&mut q, name);
        q.extend_from_slice(&qtype.to_be_bytes());
        q.extend_from_slice(&1u16.to_be_bytes());
        q
    }

    #[test]
    fn round_trip() {
        let q = parse_query(&query("Kubernetes.Default.svc.cluster.local.", TYPE_A)).unwrap();
        assert_eq!(q.name, "kubernetes.default.svc.cluster.local");
        assert_eq!((q.id, q.qtype), (0x1234, TYPE_A));
        let answer = Answer {
            rcode: NOERROR,
            answers: vec![Record {
                name: q.name.clone(),
                ttl: 5,
                data: RData::A(Ipv4Addr::new(127, 1, 0, 1)),
            }],
            ..Answer::default()
        };
        let r = build_response(&q, &answer, 512);
        assert_eq!(&r[..2], &[0x12, 0x34]);
        assert_eq!(r[2] & 0x80, 0x80, "QR");
        assert_eq!(r[3] & 0x0f, 0, "rcode");
        assert_eq!(&r[6..8], &[0, 1], "one answer");
        assert_eq!(&r[r.len() - 4..], &[127, 1, 0, 1]);
        // Too big for UDP: empty and truncated.
        let big = Answer {
            answers: vec![answer.answers[0].clone(); 40],
            ..Answer::default()
        };
        let t = build_response(&q, &big, 512);
        assert_eq!(t[2] & 0x02, 0x02, "TC");
        assert_eq!(&t[6..8], &[0, 0]);
    }

    #[test]
    fn garbage_is_refused_without_panicking() {
        assert!(parse_query(&[]).is_err());
        assert!(parse_query(&[0; 12]).is_err());
        let mut q = query("a.b", TYPE_A);
        q.truncate(16);
        assert_eq!(parse_query(&q).unwrap_err().id, Some(0x1234));
        let mut p = query("x", TYPE_A);
        p[12] = 0xc0;
        assert!(parse_query(&p).is_err());
    }
}
