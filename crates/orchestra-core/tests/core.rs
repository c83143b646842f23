//! orchestra-core's integration tests: real clients against the API server.

#[path = "core/support.rs"]
mod support;

#[path = "core/kube_rs.rs"]
mod kube_rs;

#[path = "core/kubectl.rs"]
mod kubectl;

#[path = "core/http.rs"]
mod http;

#[path = "core/auth.rs"]
mod auth;

#[path = "core/crd.rs"]
mod crd;

#[path = "core/eviction.rs"]
mod eviction;
