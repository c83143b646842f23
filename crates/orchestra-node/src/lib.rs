//! # orchestra-node
//!
//! The node side of Orchestra: what the kubelet and the container runtime do.
//!
//! - [`runtime`]: the CRI-shaped [`RuntimeBackend`] trait and its types.
//! - [`network`]: the pod network's address management (pod CIDR → pod IPs).
//! - [`server`]: the node's HTTPS endpoint (container logs, exec) that the
//!   API server proxies to.
//!
//! The node agent, the process and simulated backends, the service proxy
//! and DNS are tracked by issue 6.

pub mod network;
pub mod runtime;
pub mod server;

pub use runtime::RuntimeBackend;
