//! The built-in controllers, one module each.

pub mod deployment;
pub mod replicaset;
pub mod util;
