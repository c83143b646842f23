//! The `runtime_backend` example: its runtime passes the conformance suite
//! and runs a pod in a control plane.

#[allow(dead_code)] // its `main` is the example's entry point, not called here
#[path = "../../examples/runtime_backend.rs"]
mod program;

use orchestra::testing::node::Suite;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mem_runtime_passes_the_conformance_suite() {
    let logs = tempfile::tempdir().unwrap();
    Suite::test_all(&program::MemRuntimeBuilder(logs.path().to_owned())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_runs_on_a_mem_runtime_node() {
    let (phase, ip) = program::run().await.expect("the example runs");
    assert_eq!(phase, "Running");
    // An address of the node's pod CIDR (the controllers' default cluster CIDR).
    assert!(ip.starts_with("10.244."), "{ip}");
}
