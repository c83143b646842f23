//! orchestra-core's integration tests: real clients against the API server.

#[path = "core/kube_rs.rs"]
mod kube_rs;

#[path = "core/kubectl.rs"]
mod kubectl;

#[path = "core/http.rs"]
mod http;

#[path = "core/auth.rs"]
mod auth;

#[path = "core/admission.rs"]
mod admission;

#[path = "core/rbac.rs"]
mod rbac;

#[path = "core/openapi.rs"]
mod openapi;
#[path = "core/patch.rs"]
mod patch;
#[path = "core/protobuf.rs"]
mod protobuf;
#[path = "core/table.rs"]
mod table;

#[path = "core/python.rs"]
mod python;

#[path = "core/crd.rs"]
mod crd;

#[path = "core/eviction.rs"]
mod eviction;

#[path = "core/tls.rs"]
mod tls;

#[path = "core/overload.rs"]
mod overload;

#[path = "core/accept.rs"]
mod accept;

#[path = "core/quota.rs"]
mod quota;

#[path = "core/external_auth.rs"]
mod external_auth;

#[path = "core/webhooks.rs"]
mod webhooks;
