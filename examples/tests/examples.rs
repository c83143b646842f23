//! Integration tests of the `orchestra` binary (the reference assembly).

#[path = "examples/admission_and_authz.rs"]
mod admission_and_authz;
#[path = "examples/admission_webhooks.rs"]
mod admission_webhooks;
#[path = "examples/apiserver.rs"]
mod apiserver;
#[path = "examples/audit.rs"]
mod audit;
#[path = "examples/custom_controller.rs"]
mod custom_controller;
#[path = "examples/custom_kind.rs"]
mod custom_kind;
#[path = "examples/custom_scheduler.rs"]
mod custom_scheduler;
#[path = "examples/embed_in_axum.rs"]
mod embed_in_axum;
#[path = "examples/encryption.rs"]
mod encryption;
#[path = "examples/pod_isolation.rs"]
mod pod_isolation;
#[path = "examples/roles.rs"]
mod roles;
#[path = "examples/runtime_backend.rs"]
mod runtime_backend;
#[path = "examples/service_accounts.rs"]
mod service_accounts;
#[path = "examples/services.rs"]
mod services;
#[path = "examples/store_backend.rs"]
mod store_backend;
#[path = "examples/support.rs"]
mod support;
#[path = "examples/tls_bootstrap.rs"]
mod tls_bootstrap;
#[path = "examples/up.rs"]
mod up;
