//! # orchestra-node
//!
//! The node side of Orchestra: what the kubelet and the container runtime do.
//!
//! - [`runtime`]: the CRI-shaped [`RuntimeBackend`] trait and its types, and
//!   [`SimRuntime`], a simulated backend (containers without processes).
//! - [`network`]: the pod network's address management (pod CIDR → pod IPs).
//! - [`agent`]: the node agent ([`NodeAgent`], configured by [`NodeConfig`]):
//!   registration, lease, pod workers, probes, volumes, static pods.
//!
//! The process backend, the service proxy and DNS are tracked by issue 6.

pub mod agent;
pub mod network;
pub mod runtime;

pub use agent::{AgentHandle, NodeAgent, NodeConfig};
pub use runtime::RuntimeBackend;
pub use runtime::sim::{SimBehavior, SimConfig, SimRuntime};
