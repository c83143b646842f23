//! # orchestra-node
//!
//! The node side of Orchestra: what the kubelet and the container runtime do.
//!
//! - [`runtime`]: the CRI-shaped [`RuntimeBackend`] trait and its types, the
//!   CRI log format ([`runtime::cri_log`]), the node's image catalog
//!   ([`runtime::images`]) and the process backend
//!   ([`runtime::process::ProcessRuntime`]: containers as host processes,
//!   with cgroup limits and volumes in private mount namespaces where the
//!   host allows).
//! - [`network`]: the pod network's address management (pod CIDR → pod IPs).
//! - [`server`]: the node's HTTPS endpoint (container logs, exec) that the
//!   API server proxies to.
//! - `testing` (feature `testing`): the conformance suite every
//!   [`RuntimeBackend`] runs.
//!
//! The node agent, the simulated backend, the service proxy and DNS are
//! tracked by issue 6.

pub mod network;
pub mod runtime;
pub mod server;
#[cfg(feature = "testing")]
pub mod testing;

pub use runtime::RuntimeBackend;
