//! Integration tests of orchestra-node, grouped by area.

#[path = "node/process.rs"]
mod process;
