//! orchestra-node's integration tests: the node agent with the simulated
//! runtime against an in-process API server.

#[path = "node/support.rs"]
mod support;

#[path = "node/agent.rs"]
mod agent;
