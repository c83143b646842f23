//! The pod network's address management: each node owns a pod CIDR
//! (`spec.podCIDR`, given by the NodeIPAM controller) and hands every pod
//! sandbox one address from it, as a CNI host-local IPAM plugin does.
//!
//! The reference assembly gives nodes CIDRs inside `127.0.0.0/8`, so on Linux
//! every pod address is bindable on the loopback interface with no setup:
//! pods on one host get distinct IPs and may all listen on the same port.

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr};

use orchestra_core::api::net::Ipv4Cidr;
use parking_lot::Mutex;

/// Why an address could not be allocated.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IpamError {
    /// No pod CIDR configured yet (the node has no `spec.podCIDR`).
    #[error("no pod CIDR configured for this node yet")]
    NoRange,
    /// Every address of the range is in use.
    #[error("pod CIDR {0} has no free address")]
    Exhausted(Ipv4Cidr),
}

/// Host-local address management over one pod CIDR. The network address,
/// the first host address (the gateway, by CNI convention) and the broadcast
/// address are never handed out. Addresses are given round-robin, so a
/// released address is reused as late as possible (a client still talking to
/// a deleted pod does not reach its successor).
#[derive(Debug, Default)]
pub struct Ipam {
    state: Mutex<IpamState>,
}

#[derive(Debug, Default)]
struct IpamState {
    range: Option<Ipv4Cidr>,
    used: BTreeSet<Ipv4Addr>,
    next: u64,
}

impl Ipam {
    /// An allocator with no range yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// An allocator over `range`.
    pub fn with_range(range: Ipv4Cidr) -> Self {
        let ipam = Self::new();
        ipam.set_range(range);
        ipam
    }

    /// Sets (or changes) the range. Addresses already handed out stay
    /// reserved until released, even outside the new range.
    pub fn set_range(&self, range: Ipv4Cidr) {
        let mut state = self.state.lock();
        if state.range != Some(range) {
            state.range = Some(range);
            state.next = 0;
        }
    }

    /// The current range.
    pub fn range(&self) -> Option<Ipv4Cidr> {
        self.state.lock().range
    }

    /// Hands out a free address.
    pub fn allocate(&self) -> Result<IpAddr, IpamError> {
        let mut state = self.state.lock();
        let range = state.range.ok_or(IpamError::NoRange)?;
        // Usable host addresses: [2, size - 2] (a /31 or /32 has none).
        let first = 2u64;
        let last = range.size().saturating_sub(2);
        if last < first {
            return Err(IpamError::Exhausted(range));
        }
        let count = last - first + 1;
        for step in 0..count {
            let index = first + (state.next + step) % count;
            let address = range.nth(index).expect("index within range");
            if !state.used.contains(&address) {
                state.used.insert(address);
                state.next = (state.next + step + 1) % count;
                return Ok(IpAddr::V4(address));
            }
        }
        Err(IpamError::Exhausted(range))
    }

    /// Marks an address as used (a sandbox found running after a restart).
    pub fn reserve(&self, address: IpAddr) {
        if let IpAddr::V4(address) = address {
            self.state.lock().used.insert(address);
        }
    }

    /// Returns an address to the pool. Releasing a free address is a no-op.
    pub fn release(&self, address: IpAddr) {
        if let IpAddr::V4(address) = address {
            self.state.lock().used.remove(&address);
        }
    }

    /// Number of addresses in use.
    pub fn in_use(&self) -> usize {
        self.state.lock().used.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cidrs_parse_and_normalise() {
        let cidr: Ipv4Cidr = "127.64.3.77/24".parse().unwrap();
        assert_eq!(cidr.to_string(), "127.64.3.0/24");
        assert_eq!(cidr.size(), 256);
        assert!(cidr.contains("127.64.3.255".parse().unwrap()));
        assert!(!cidr.contains("127.64.4.0".parse().unwrap()));
        for bad in ["", "10.0.0.0", "10.0.0.0/33", "10.0.0/8", "fd00::/64", "10.0.0.0/x"] {
            assert!(bad.parse::<Ipv4Cidr>().is_err(), "{bad}");
        }
    }

    #[test]
    fn allocation_skips_reserved_addresses_and_exhausts() {
        let ipam = Ipam::with_range("10.1.0.0/29".parse().unwrap());
        let got: Vec<String> = (0..5).map(|_| ipam.allocate().unwrap().to_string()).collect();
        assert_eq!(got, ["10.1.0.2", "10.1.0.3", "10.1.0.4", "10.1.0.5", "10.1.0.6"]);
        assert_eq!(ipam.allocate(), Err(IpamError::Exhausted("10.1.0.0/29".parse().unwrap())));
        ipam.release("10.1.0.4".parse().unwrap());
        assert_eq!(ipam.allocate().unwrap().to_string(), "10.1.0.4");
        assert_eq!(ipam.in_use(), 5);
    }

    #[test]
    fn released_addresses_are_reused_last() {
        let ipam = Ipam::with_range("10.1.0.0/28".parse().unwrap());
        let first = ipam.allocate().unwrap();
        ipam.release(first);
        assert_ne!(ipam.allocate().unwrap(), first);
    }

    #[test]
    fn no_range_no_address() {
        let ipam = Ipam::new();
        assert_eq!(ipam.allocate(), Err(IpamError::NoRange));
        ipam.reserve("10.1.0.9".parse().unwrap());
        ipam.set_range("10.1.0.8/29".parse().unwrap());
        assert_eq!(ipam.allocate().unwrap().to_string(), "10.1.0.10");
    }
}
