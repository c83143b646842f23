//! IPv4 networks in CIDR notation: nodes' pod CIDRs, the Service range.

use std::net::Ipv4Addr;
use std::str::FromStr;

/// An IPv4 network in CIDR notation.
///
/// ```
/// use orchestra_core::api::net::Ipv4Cidr;
///
/// let cidr: Ipv4Cidr = "127.96.0.0/12".parse().unwrap();
/// assert!(cidr.contains("127.100.1.2".parse().unwrap()));
/// assert!(!cidr.contains("127.112.0.1".parse().unwrap()));
/// assert_eq!("10.1.2.3/16".parse::<Ipv4Cidr>().unwrap().to_string(), "10.1.0.0/16");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ipv4Cidr {
    network: Ipv4Addr,
    prefix: u8,
}

/// A CIDR that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid CIDR {0:?}: expected an IPv4 network such as 10.244.1.0/24")]
pub struct InvalidCidr(pub String);

impl Ipv4Cidr {
    /// The network `address/prefix`; host bits of `address` are cleared.
    pub fn new(address: Ipv4Addr, prefix: u8) -> Result<Self, InvalidCidr> {
        if prefix > 32 {
            return Err(InvalidCidr(format!("{address}/{prefix}")));
        }
        let network = Ipv4Addr::from(u32::from(address) & Self::mask(prefix));
        Ok(Self { network, prefix })
    }

    fn mask(prefix: u8) -> u32 {
        if prefix == 0 { 0 } else { u32::MAX << (32 - prefix) }
    }

    /// The network address.
    pub fn network(&self) -> Ipv4Addr {
        self.network
    }

    /// The prefix length.
    pub fn prefix(&self) -> u8 {
        self.prefix
    }

    /// Number of addresses in the network, network and broadcast included.
    pub fn size(&self) -> u64 {
        1u64 << (32 - u32::from(self.prefix))
    }

    /// Whether `address` lies in the network.
    pub fn contains(&self, address: Ipv4Addr) -> bool {
        u32::from(address) & Self::mask(self.prefix) == u32::from(self.network)
    }

    /// The `index`-th address of the network (0 = the network address).
    pub fn nth(&self, index: u64) -> Option<Ipv4Addr> {
        (index < self.size()).then(|| Ipv4Addr::from(u32::from(self.network) + index as u32))
    }
}

impl FromStr for Ipv4Cidr {
    type Err = InvalidCidr;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let invalid = || InvalidCidr(text.to_owned());
        let (address, prefix) = text.split_once('/').ok_or_else(invalid)?;
        let address: Ipv4Addr = address.parse().map_err(|_| invalid())?;
        let prefix: u8 = prefix.parse().map_err(|_| invalid())?;
        Self::new(address, prefix).map_err(|_| invalid())
    }
}

impl std::fmt::Display for Ipv4Cidr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.network, self.prefix)
    }
}
