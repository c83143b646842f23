//! # orchestra-node
//!
//! The node side of Orchestra: what the kubelet and the container runtime do.
//!
//! Where this crate sits among Orchestra's crates, and the rule that only
//! the API server touches the store: the repository's
//! [ARCHITECTURE.md](https://github.com/orchestra-rs/orchestra/blob/main/ARCHITECTURE.md).
//!
//! - [`runtime`]: the CRI-shaped [`RuntimeBackend`](runtime::RuntimeBackend) trait and its types, the
//!   CRI log format ([`runtime::cri_log`]), the node's image catalog
//!   ([`runtime::images`]) and the backends: [`runtime::process::ProcessRuntime`]
//!   (containers as host processes, with cgroup limits and volumes in private
//!   mount namespaces where the host allows), [`runtime::sim::SimRuntime`] (containers
//!   without processes, as kwok), [`runtime::embedded::EmbeddedRuntime`]
//!   (in-process components as containers) and [`runtime::mux::RuntimeMux`]
//!   (one backend per runtime handler).
//! - [`network`]: the pod network's address management (pod CIDR → pod IPs).
//! - [`agent`]: the node agent ([`agent::NodeAgent`], configured by [`agent::NodeConfig`]):
//!   registration, lease, pod workers, probes, volumes, static pods.
//! - [`server`]: the node's HTTPS endpoint (container logs, exec) that the
//!   API server proxies to.
//! - `testing` (feature `testing`): the conformance suite every
//!   [`RuntimeBackend`](runtime::RuntimeBackend) runs.
//!
//! The service proxy and cluster DNS are not written yet.

pub mod agent;
pub mod network;
pub mod runtime;
pub mod server;
#[cfg(feature = "testing")]
pub mod testing;
