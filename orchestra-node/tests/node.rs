//! Integration tests of orchestra-node, grouped by area: the process
//! backend (with the conformance suite), the node agent with the simulated
//! runtime against an in-process API server.

#[path = "node/support.rs"]
mod support;

#[path = "node/agent.rs"]
mod agent;
#[path = "node/process.rs"]
mod process;
#[path = "node/sim.rs"]
mod sim;
