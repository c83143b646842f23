//! # orchestra-core
//!
//! Orchestra's API machinery:
//!
//! Where this crate sits among Orchestra's crates, and the rule that only
//! the API server touches the store: the repository's
//! [ARCHITECTURE.md](https://github.com/orchestra-rs/orchestra/blob/main/ARCHITECTURE.md).
//!
//! * [`api`] — the types-only layer: resource descriptions and the registry
//!   of served kinds, Kubernetes `Status` errors, label and field selectors,
//!   object-meta helpers and validation, OpenAPI v3 documents and the schema
//!   walker ([`api::openapi`], [`api::schema`]), strategic merge patch and
//!   server-side apply ([`api::patch`], [`api::apply`]), Table printing
//!   ([`api::table`]), CustomResourceDefinition handling ([`api::crd`]) and
//!   PodDisruptionBudget arithmetic ([`api::pdb`]).
//! * [`server`] (feature `server`) — a Kubernetes-compatible API server as a
//!   `tower::Service` over an `orchestra_store::Store`: discovery, OpenAPI,
//!   CRUD, patch and apply, watch, Table output, protobuf request bodies,
//!   access reviews, custom resources served from their CRDs, the `binding`,
//!   `eviction`, `scale`, `finalize` and `serviceaccounts/token`
//!   subresources, `pods/log` and `pods/exec` (WebSocket) proxied to node
//!   agents, writes fenced by a leader's Lease ([`server::fence`]), health
//!   checks and `/metrics`. `events.k8s.io/v1` Events share the storage of
//!   `core/v1` Events ([`api::conversion`]).
//! * [`tls`] (feature `tls`, part of `server`) — the HTTPS listener
//!   ([`tls::serve`]) and the cluster's certificates ([`tls::pki`]).
//! * [`auth`] (feature `server`) — the `Authenticator`, `Authorizer` and
//!   `AdmissionPlugin` traits, their chains and simple built-ins, RBAC
//!   ([`auth::rbac`], opt-in) and service account tokens
//!   ([`auth::service_account`]).
//! * [`audit`] (feature `server`) — audit policy, events and the log-file
//!   backend the API server records every request to.
//! * [`encryption`] (feature `server`) — encryption at rest: upstream's
//!   `EncryptionConfiguration` and a `Store` decorator applying it.
//! * [`client`] (feature `client`) — `kube::Client` constructors, in process
//!   or from a kubeconfig.
//!
//! Objects are Kubernetes JSON; built-in kinds are those of `k8s-openapi`
//! (`v1_33`).

pub mod api;
#[cfg(feature = "server")]
pub mod audit;
#[cfg(feature = "server")]
pub mod auth;
#[cfg(feature = "client")]
pub mod client;
#[cfg(feature = "server")]
pub mod encryption;
#[cfg(test)]
pub(crate) mod properties;
#[cfg(feature = "server")]
pub mod server;
#[cfg(feature = "tls")]
pub mod tls;
#[cfg(feature = "tokens")]
pub mod tokens;
