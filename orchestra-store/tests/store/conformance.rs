//! The conformance suite and the model test, on both backends.

#[cfg(feature = "rocksdb")]
use orchestra_store::testing::RocksStoreBuilder;
use orchestra_store::testing::{MemStoreBuilder, Suite, model_test};

/// Random sequences per backend in the model tests.
const MODEL_CASES: u32 = 32;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mem_conformance() {
    Suite::test_all(&MemStoreBuilder::new()).await;
}

#[cfg(feature = "rocksdb")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rocks_conformance() {
    Suite::test_all(&RocksStoreBuilder::new()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mem_model() {
    // The model test runs a runtime of its own, off this one's workers.
    tokio::task::block_in_place(|| model_test(&MemStoreBuilder::new(), MODEL_CASES));
}

#[cfg(feature = "rocksdb")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rocks_model() {
    tokio::task::block_in_place(|| model_test(&RocksStoreBuilder::new(), MODEL_CASES));
}
