//! The store crate's integration tests (one binary, one module per area).

#[path = "store/crash.rs"]
mod crash;

#[path = "store/conformance.rs"]
mod conformance;

#[path = "store/policy.rs"]
mod policy;
