//! Automatic compaction and TTL settings, on both backends.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use orchestra_store::KeyRange;
use orchestra_store::{CompactionPolicy, Error, MemStore, RangeRequest, RocksOptions, RocksStore, Store, StoreOptions};

async fn backends(options: StoreOptions) -> (Vec<Arc<dyn Store>>, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let rocks = RocksStore::open_with(RocksOptions::new(dir.path()).store_options(options.clone())).await.unwrap();
    (vec![Arc::new(MemStore::with_options(options)), Arc::new(rocks)], dir)
}

async fn wait_for_compaction(store: &dyn Store, at_least: i64) -> i64 {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let status = store.status().await.unwrap();
        if status.compact_revision >= at_least {
            return status.compact_revision;
        }
        assert!(Instant::now() < deadline, "no compaction to {at_least} (status {status:?})");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn time_window_compaction_keeps_the_window() {
    let window = Duration::from_millis(300);
    let (stores, _dir) = backends(StoreOptions::default().compaction(Some(CompactionPolicy::window(window)))).await;
    for store in stores {
        let mut revisions = Vec::new();
        for i in 0..10 {
            revisions.push(store.put("/w/k", Bytes::from(format!("{i}")), None).await.unwrap().mod_revision);
        }
        let written_at = Instant::now();
        // Nothing younger than the window is compacted...
        assert_eq!(store.status().await.unwrap().compact_revision, 0);
        // ...but within two windows, the revisions written before are.
        let compacted = wait_for_compaction(store.as_ref(), revisions[9]).await;
        assert!(written_at.elapsed() >= window, "compacted after {:?}", written_at.elapsed());
        assert!(matches!(
            store.range(RangeRequest::new(KeyRange::key("/w/k")).at_revision(compacted - 1)).await,
            Err(Error::Compacted { .. })
        ));
        let at = store.range(RangeRequest::new(KeyRange::key("/w/k")).at_revision(compacted)).await.unwrap();
        assert_eq!(at.kvs[0].value, "9");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revision_cap_bounds_history() {
    let policy = CompactionPolicy::window(Duration::from_secs(3600)).with_max_revisions(50);
    let (stores, _dir) = backends(StoreOptions::default().compaction(Some(policy))).await;
    for store in stores {
        for i in 0..200 {
            store.put(&format!("/r/{}", i % 7), Bytes::from(format!("{i}")), None).await.unwrap();
        }
        let compacted = wait_for_compaction(store.as_ref(), 151).await;
        assert!(compacted <= 200);
        // The current state is untouched by compaction.
        let all = store.range(RangeRequest::new(KeyRange::prefix("/r/"))).await.unwrap();
        assert_eq!(all.count, 7);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn engine_flush_writes_tables_and_settles() {
    let dir = tempfile::tempdir().unwrap();
    let tables = || {
        std::fs::read_dir(dir.path())
            .unwrap()
            .filter(|e| e.as_ref().unwrap().path().extension().is_some_and(|x| x == "sst"))
            .count()
    };
    let store = RocksStore::open(dir.path()).await.unwrap();
    for i in 0..500 {
        store.create(&format!("/registry/flush/k{i:04}"), Bytes::from(vec![b'x'; 200]), None).await.unwrap();
    }
    let before = tables();
    store.flush().await.unwrap();
    assert!(tables() > before, "a flush writes table files ({before} before, {} after)", tables());
    let deadline = Instant::now() + Duration::from_secs(10);
    while store.background_busy().unwrap() {
        assert!(Instant::now() < deadline, "the engine stays busy after a flush of 500 keys");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Flushed data reads back, and survives a reopen.
    let all = store.range(RangeRequest::new(KeyRange::prefix("/registry/flush/"))).await.unwrap();
    assert_eq!(all.kvs.len(), 500);
    drop(store);
    let store = RocksStore::open(dir.path()).await.unwrap();
    let again = store.range(RangeRequest::new(KeyRange::prefix("/registry/flush/"))).await.unwrap();
    assert_eq!(again.kvs, all.kvs);
}
