//! # orchestra-node
//!
//! The node side of Orchestra: what the kubelet and the container runtime do.
//!
//! - [`runtime`]: the CRI-shaped [`RuntimeBackend`] trait and its types.
//! - [`network`]: the pod network's address management (pod CIDR → pod IPs).
//!
//! The node agent, the process and simulated backends, the service proxy
//! and DNS are tracked by issue 6.

pub mod network;
pub mod runtime;
#[cfg(feature = "testing")]
pub mod testing;

pub use runtime::RuntimeBackend;
