//! # orchestra-ctrl
//!
//! The controller runtime and the built-in controllers of Orchestra's
//! controller manager. Controllers observe through watches, compare desired
//! with current state, and act only through the API server.
//!
//! Where this crate sits among Orchestra's crates, and the rule that only
//! the API server touches the store: the repository's
//! [ARCHITECTURE.md](https://github.com/orchestra-rs/orchestra/blob/main/ARCHITECTURE.md).
//!
//! - [`informer`]: shared informers (one list+watch per kind per process,
//!   `Arc` caches with indexers, relist on 410 Gone, bookmarks).
//! - [`workqueue`]: de-duplicating queue with per-key backoff, a global rate
//!   limit, delayed requeue and Prometheus metrics.
//! - [`Reconciler`]: the extension point (with its own error
//!   type and a hook for deletions), [`Action`] and the [`ErrorPolicy`].
//! - [`controller`]: the [`Controller`](controller::Controller) builder (`for_`, `owns`, `watches`,
//!   `error_policy`).
//! - [`finalizer`](mod@finalizer): [`finalizer()`](finalizer::finalizer), cleanup before an object is gone.
//! - [`leader`]: leader election on Leases with a fencing token.
//! - [`manager`]: several controllers behind one election.
//! - [`events`]: an `events.k8s.io/v1` recorder aggregating repeats.
//! - [`controllers`]: ReplicaSet, Deployment, ..., and [`BUILTIN`](controllers::BUILTIN),
//!   their table of descriptors.
//! - `testing` (feature `testing`): `FakeCluster`, the API server and
//!   recording client controllers' unit tests run against.

pub mod controller;
pub mod controllers;
pub mod credentials;
pub mod events;
pub mod finalizer;
pub mod informer;
pub mod leader;
pub mod manager;
mod reconciler;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
pub mod workqueue;

pub use reconciler::{Action, Backoff, ErrorPolicy, Reconciler};

/// Faults of the built-in controllers' reconciles (normal outcomes are
/// [`Action`]s); a reconciler of one's own has its own error type.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A request to the API server failed.
    #[error("api: {0}")]
    Kube(#[from] kube::Error),
    /// An object could not be (de)serialised.
    #[error("json: {0}")]
    Json(#[from] serde_json::Error),
    /// The leadership term this write belonged to is over.
    #[error("not the leader any more")]
    Fenced,
    /// Anything else.
    #[error("{0}")]
    Other(String),
}
