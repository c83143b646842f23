//! `orchestra store-demo`: the durable store, end to end.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::StreamExt;
use orchestra_store::{EventKind, KeyRange, RangeRequest, RocksOptions, RocksStore, Store, StoreOptions, WatchRequest};

/// Options of `orchestra store-demo`.
#[derive(clap::Args)]
pub struct Args {
    /// Keep the store in this directory (default: a temporary one, removed at the end).
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// How many pods to write.
    #[arg(long, default_value_t = 200)]
    pods: usize,
}

/// Runs the demo.
pub async fn run(args: Args) -> Result<(), Box<dyn std::error::Error>> {
    let temp = tempfile::tempdir()?;
    let dir = args.data_dir.unwrap_or_else(|| temp.path().join("store"));
    let options =
        || RocksOptions::new(&dir).store_options(StoreOptions::default().expiry_interval(Duration::from_millis(100)));
    println!("orchestra store-demo: the durable store alone, without the API server above it.");
    println!("data directory: {}", dir.display());

    let store = RocksStore::open_with(options()).await?;
    let start = store.status().await?;
    println!("opened at revision {}", start.revision);

    // A watch on every pod, started before the writes.
    let mut watch = store.watch(WatchRequest::new(KeyRange::prefix("/registry/pods/"))).await?;

    let began = Instant::now();
    let writes = (0..args.pods).map(|i| {
        let store = store.clone();
        async move {
            let key = format!("/registry/pods/default/demo-{i:04}");
            store.put(&key, Bytes::from(format!("{{\"name\":\"demo-{i:04}\",\"phase\":\"Pending\"}}")), None).await
        }
    });
    let written = futures::future::try_join_all(writes).await?;
    println!(
        "wrote {} pods concurrently in {:?} (each acknowledged after an fsync'd commit)",
        written.len(),
        began.elapsed()
    );

    // Optimistic concurrency: a stale revision is refused.
    let first = &written[0];
    let updated =
        store.update(&first.key, Bytes::from_static(b"{\"phase\":\"Running\"}"), first.mod_revision, None).await?;
    match store.update(&first.key, Bytes::from_static(b"{}"), first.mod_revision, None).await {
        Err(e) => println!("stale update refused as expected: {e}"),
        Ok(_) => return Err("a stale update was accepted".into()),
    }
    store.delete(&written[1].key, Some(written[1].mod_revision)).await?;

    let mut seen = 0;
    let mut deletes = 0;
    while seen < args.pods + 2 {
        let response = tokio::time::timeout(Duration::from_secs(10), watch.next()).await?.ok_or("watch ended")??;
        for event in &response.events {
            seen += 1;
            deletes += (event.kind == EventKind::Delete) as usize;
        }
    }
    println!("the watch delivered {seen} events in revision order ({deletes} delete)");

    // A paginated list at one revision, while writes go on.
    let mut page = RangeRequest::new(KeyRange::prefix("/registry/pods/")).with_limit(50);
    let mut listed = 0;
    let mut pages = 0;
    loop {
        let response = store.range(page.clone()).await?;
        store.put("/registry/pods/default/late-writer", Bytes::from(format!("{pages}")), None).await?;
        listed += response.kvs.len();
        pages += 1;
        match page.next_page(&response) {
            Some(next) => page = next,
            None => {
                println!("listed {listed} pods in {pages} pages, all at revision {}", response.revision);
                break;
            }
        }
    }

    // TTL: an event that expires.
    store.put("/registry/events/default/demo.1", Bytes::from_static(b"{}"), Some(Duration::from_millis(300))).await?;
    let expiry = Instant::now();
    while store.get("/registry/events/default/demo.1").await?.is_some() {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    println!("a key written with a 300ms TTL expired after {:?}", expiry.elapsed());

    let before = store.status().await?;
    store.compact(updated.mod_revision).await?;
    println!("compacted history before revision {}", updated.mod_revision);
    drop(watch);
    drop(store);

    // Restart: everything acknowledged is there, the revision continues.
    let store = RocksStore::open_with(options()).await?;
    let after = store.status().await?;
    let pods = store.range(RangeRequest::new(KeyRange::prefix("/registry/pods/"))).await?;
    println!(
        "restarted: revision {} (was {}), compaction revision {}, {} pods",
        after.revision, before.revision, after.compact_revision, pods.count
    );
    if after.revision != before.revision || pods.count != args.pods {
        return Err("the restart lost writes".into());
    }
    println!("store-demo: done");
    Ok(())
}
