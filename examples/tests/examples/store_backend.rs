//! The `store_backend` example: its store passes the conformance suite and
//! the model test, and its program reads and watches what it wrote.

#[allow(dead_code)] // its `main` is the example's entry point, not called here
#[path = "../../examples/store_backend.rs"]
mod program;

use orchestra_store::testing::{Suite, model_test};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn map_store_passes_the_conformance_suite() {
    Suite::test_all(&program::MapStoreBuilder).await;
}

#[test]
fn map_store_agrees_with_the_model() {
    model_test(&program::MapStoreBuilder, 32);
}

#[tokio::test]
async fn the_program_reads_and_watches_its_writes() {
    let lines = program::run().await.expect("the example runs");
    assert_eq!(
        lines,
        [
            r#"read at 4: /pods/web = b"v2""#,
            r#"read at 1: /pods/web = b"v1""#,
            "watch: Put /pods/web at 1",
            "watch: Put /pods/web at 2",
            "watch: Put /pods/db at 3",
            "watch: Delete /pods/db at 4",
        ]
    );
}
