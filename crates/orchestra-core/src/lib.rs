//! # orchestra-core
//!
//! Orchestra's API machinery:
//!
//! * [`api`] — the types-only layer: resource descriptions and the registry
//!   of served kinds, Kubernetes `Status` errors, label and field selectors,
//!   object-meta helpers and validation, CustomResourceDefinition handling
//!   ([`api::crd`]) and PodDisruptionBudget arithmetic ([`api::pdb`]).
//! * [`server`] (feature `server`) — a Kubernetes-compatible API server as a
//!   `tower::Service` over an `orchestra_store::Store`: discovery, CRUD,
//!   patch, watch, custom resources served from their CRDs, and the
//!   `binding`, `eviction`, `scale` and `finalize` subresources.
//! * [`auth`] (feature `server`) — the `Authenticator`, `Authorizer` and
//!   `AdmissionPlugin` traits, their chains and simple built-ins.
//! * [`client`] (feature `client`) — `kube::Client` constructors, in process
//!   or from a kubeconfig.
//!
//! Objects are Kubernetes JSON; built-in kinds are those of `k8s-openapi`
//! (`v1_33`).

pub mod api;
#[cfg(feature = "server")]
pub mod auth;
#[cfg(feature = "client")]
pub mod client;
#[cfg(feature = "server")]
pub mod server;
