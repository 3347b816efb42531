//! IPv4 CIDR ranges (`127.1.0.0/18`): parsing as the Kubernetes flags take them, membership and
//! the n-th address.

use std::fmt;
use std::net::Ipv4Addr;
use std::str::FromStr;

/// An IPv4 network: a base address with the host bits zero and a prefix length.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ipv4Cidr {
    base: Ipv4Addr,
    prefix: u8,
}

/// Why a CIDR string was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CidrError {
    #[error("invalid CIDR address: {0}")]
    Syntax(String),
    #[error("{0} is not an IPv4 network address (host bits set; did you mean {1}?)")]
    HostBits(String, Ipv4Cidr),
}

impl Ipv4Cidr {
    /// `base/prefix`; host bits of `base` are cleared.
    pub fn new(base: Ipv4Addr, prefix: u8) -> Self {
        let prefix = prefix.min(32);
        Self {
            base: Ipv4Addr::from(u32::from(base) & mask(prefix)),
            prefix,
        }
    }

    pub fn base(&self) -> Ipv4Addr {
        self.base
    }

    pub fn prefix(&self) -> u8 {
        self.prefix
    }

    /// How many addresses the range spans (network and broadcast included).
    pub fn size(&self) -> u64 {
        1u64 << (32 - u32::from(self.prefix))
    }

    pub fn contains(&self, ip: Ipv4Addr) -> bool {
        u32::from(ip) & mask(self.prefix) == u32::from(self.base)
    }

    /// Whether the two ranges share an address.
    pub fn overlaps(&self, other: &Ipv4Cidr) -> bool {
        self.contains(other.base) || other.contains(self.base)
    }

    /// The address `n` after the base (`nth(1)` is the first host address); None past the end.
    pub fn nth(&self, n: u64) -> Option<Ipv4Addr> {
        (n < self.size()).then(|| Ipv4Addr::from(u32::from(self.base).wrapping_add(n as u32)))
    }

    /// The offset of `ip` from the base, if it is in the range.
    pub fn offset_of(&self, ip: Ipv4Addr) -> Option<u64> {
        self.contains(ip)
            .then(|| u64::from(u32::from(ip).wrapping_sub(u32::from(self.base))))
    }

    /// The `index`-th sub-range of prefix `prefix` (e.g. a node's /24 of the cluster CIDR).
    pub fn subnet(&self, prefix: u8, index: u64) -> Option<Ipv4Cidr> {
        if prefix < self.prefix || prefix > 32 {
            return None;
        }
        let count = 1u64 << (prefix - self.prefix);
        if index >= count {
            return None;
        }
        let step = 1u64 << (32 - u32::from(prefix));
        Some(Ipv4Cidr::new(
            Ipv4Addr::from(u32::from(self.base).wrapping_add((index * step) as u32)),
            prefix,
        ))
    }
}

fn mask(prefix: u8) -> u32 {
    if prefix == 0 {
        0
    } else {
        u32::MAX << (32 - u32::from(prefix))
    }
}

impl fmt::Display for Ipv4Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.base, self.prefix)
    }
}

impl FromStr for Ipv4Cidr {
    type Err = CidrError;

    /// As Go's `net.ParseCIDR` plus the flags' check that the address is the network's.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let syntax = || CidrError::Syntax(s.to_string());
        let (ip, prefix) = s.trim().split_once('/').ok_or_else(syntax)?;
        let ip: Ipv4Addr = ip.parse().map_err(|_| syntax())?;
        let prefix: u8 = prefix.parse().map_err(|_| syntax())?;
        if prefix > 32 {
            return Err(syntax());
        }
        let cidr = Ipv4Cidr::new(ip, prefix);
        if cidr.base != ip {
            return Err(CidrError::HostBits(s.to_string(), cidr));
        }
        Ok(cidr)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn parse_and_arithmetic() {
        let c: Ipv4Cidr = "127.7.128.0/17".parse().unwrap();
        assert_eq!(c.to_string(), "127.7.128.0/17");
        assert_eq!(c.size(), 32768);
        assert_eq!(c.nth(1), Some(Ipv4Addr::new(127, 7, 128, 1)));
        assert_eq!(c.subnet(24, 1).unwrap().to_string(), "127.7.129.0/24");
        assert_eq!(c.subnet(24, 128), None);
        assert!(c.contains(Ipv4Addr::new(127, 7, 255, 255)));
        assert!(!c.contains(Ipv4Addr::new(127, 7, 127, 255)));
        assert_eq!(c.offset_of(Ipv4Addr::new(127, 7, 129, 3)), Some(259));
        assert!(matches!(
            "127.7.1.0/16".parse::<Ipv4Cidr>(),
            Err(CidrError::HostBits(..))
        ));
        assert!("127.7.0.0".parse::<Ipv4Cidr>().is_err());
        assert!("127.7.0.0/33".parse::<Ipv4Cidr>().is_err());
        let s: Ipv4Cidr = "127.7.0.0/18".parse().unwrap();
        assert!(!s.overlaps(&c));
        assert!(s.overlaps(&"127.7.0.0/16".parse().unwrap()));
    }
}
