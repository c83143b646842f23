//! Integration tests of the `orchestra` binary (the reference assembly).

#[path = "examples/apiserver.rs"]
mod apiserver;
#[path = "examples/custom_scheduler.rs"]
mod custom_scheduler;
#[path = "examples/roles.rs"]
mod roles;
#[path = "examples/store_backend.rs"]
mod store_backend;
#[path = "examples/support.rs"]
mod support;
#[path = "examples/up.rs"]
mod up;
