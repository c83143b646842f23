//! The built-in controllers, one module each, with their tests beside them.
//!
//! | module | controller |
//! |---|---|
//! | [`replicaset`] | ReplicaSet and ReplicationController |
//! | [`deployment`] | Deployment (rolling update, Recreate, rollback, rollout status) |
//! | [`garbage_collector`] | ownerReferences: background, foreground, orphan |
//! | [`namespace`] | empties deleted namespaces, then finalizes them |
//! | [`serviceaccount`] | a `default` ServiceAccount per namespace |
//! | [`node_lifecycle`] | node health, taints, taint-based eviction |
//! | [`endpoints`] | Endpoints and EndpointSlices of Services |
//! | [`node_ipam`] | `spec.podCIDR` of Nodes |

pub mod deployment;
pub mod discovery;
pub mod endpoints;
pub mod garbage_collector;
pub mod namespace;
pub mod node_ipam;
pub mod node_lifecycle;
pub mod replicaset;
pub mod serviceaccount;
pub mod util;
