//! The built-in controllers, one module each.

pub mod deployment;
pub mod replicaset;
pub mod util;
pub mod discovery;
pub mod garbage_collector;
pub mod namespace;
pub mod node_ipam;
pub mod serviceaccount;
pub mod endpoints;
pub mod node_lifecycle;
