//! # Orchestra
//!
//! An SDK for building Kubernetes-like orchestrators. This crate is the one
//! dependency a user adds: it re-exports the five crates behind features
//! and assembles them into a whole control plane with one builder.
//!
//! | module | crate | feature | holds |
//! |---|---|---|---|
//! | [`store`] | `orchestra-store` | `store` (`rocks` for RocksDB) | the `Store` trait, `MemStore`, `RocksStore` |
//! | [`core`] | `orchestra-core` | always (`server` for the API server) | API machinery, the API server, authn/authz/admission, clients |
//! | [`ctrl`] | `orchestra-ctrl` | `ctrl` | informers, work queue, `Reconciler`, `Controller`, the built-in controllers |
//! | [`sched`] | `orchestra-sched` | `sched` | the scheduling framework, its plugins, the `Scheduler` |
//! | [`node`] | `orchestra-node` | `node` | the node agent, `RuntimeBackend` and its runtimes |
//! | [`ControlPlane`](control_plane::ControlPlane) | this crate | `server` | store, API server, scheduler, controllers and nodes started in one call |
//! | [`testing`] | this crate | `testing` | [`TestCluster`](testing::TestCluster), the crates' fakes and conformance suites |
//!
//! The architecture (which crate may depend on which, the one rule that only
//! the API server touches the store, where each extension point lives) is in
//! the repository's `ARCHITECTURE.md`.
//!
//! ```no_run
//! use orchestra::prelude::*;
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! // An in-process control plane on a MemStore with the default scheduler,
//! // the built-in controllers and two simulated nodes.
//! let cluster = ControlPlane::builder().nodes(2, NodeRuntime::simulated()).start().await?;
//! let pods: Api<Pod> = Api::default_namespaced(cluster.client());
//! println!("{} pods", pods.list(&Default::default()).await?.items.len());
//! cluster.shutdown().await?;
//! # Ok(()) }
//! ```

pub use orchestra_core as core;
#[cfg(feature = "ctrl")]
pub use orchestra_ctrl as ctrl;
#[cfg(feature = "node")]
pub use orchestra_node as node;
#[cfg(feature = "sched")]
pub use orchestra_sched as sched;
#[cfg(feature = "store")]
pub use orchestra_store as store;

/// The Kubernetes types and client the crates speak (`k8s-openapi` with
/// the `v1_33` API, `kube`), re-exported so that a user's versions match.
pub use k8s_openapi;
pub use kube;

#[cfg(feature = "server")]
pub mod control_plane;

#[cfg(feature = "testing")]
pub mod testing;

pub mod prelude;
