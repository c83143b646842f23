//! Integration tests of the `orchestra` binary (the reference assembly).

#[path = "examples/apiserver.rs"]
mod apiserver;
