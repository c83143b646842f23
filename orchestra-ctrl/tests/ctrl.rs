//! orchestra-ctrl's integration tests: the controllers against an in-process
//! API server, with a fake node agent marking pods Running and Ready.

#[path = "ctrl/support.rs"]
mod support;

#[path = "ctrl/deployment.rs"]
mod deployment;

#[path = "ctrl/runtime.rs"]
mod runtime;

#[path = "ctrl/deletion.rs"]
mod deletion;

#[path = "ctrl/kubectl.rs"]
mod kubectl;

#[path = "ctrl/nodes.rs"]
mod nodes;

#[path = "ctrl/manager.rs"]
mod manager;

#[path = "ctrl/throughput.rs"]
mod throughput;

#[path = "ctrl/tokens.rs"]
mod tokens;

#[path = "ctrl/lifecycle.rs"]
mod lifecycle;

#[path = "ctrl/ipam.rs"]
mod ipam;

#[path = "ctrl/informer.rs"]
mod informer;

#[path = "ctrl/gc_sync.rs"]
mod gc_sync;

#[path = "ctrl/quota.rs"]
mod quota;

#[path = "ctrl/credentials.rs"]
mod credentials;
