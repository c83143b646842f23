//! Check 7: many writers and watchers at once.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use super::{PATIENCE, Recorder, Suite, assert_events, count_events, expect_fresh, ok, revision};
use crate::kv::{Event, KeyRange};
use crate::store::{RangeRequest, Store};
use crate::watch::WatchRequest;
use tokio::task::JoinHandle;

impl Suite {
    /// 16 writers make 200 writes each while 8 watchers follow: 4 started
    /// before the first write, 4 started from revision 1 once the writes are
    /// under way (history first, then live). Every watcher sees every change
    /// exactly once, in revision order, with its previous value, and the
    /// final state is the last write of every key.
    pub async fn concurrent_writers_and_watchers(store: &Arc<dyn Store>) {
        const WRITERS: usize = 16;
        const WRITES: usize = 200;
        const WATCHERS: usize = 8;
        const TOTAL: usize = WRITERS * WRITES;
        expect_fresh(&**store).await;
        let range = KeyRange::prefix("/load/");

        let mut watchers = Vec::new();
        for n in 0..WATCHERS / 2 {
            watchers.push(spawn_watcher(&**store, WatchRequest::new(range.clone()), n, TOTAL).await);
        }
        let writers: Vec<_> = (0..WRITERS)
            .map(|w| {
                let mut writes = Recorder::new(store);
                tokio::spawn(async move {
                    for i in 0..WRITES {
                        writes.put(&format!("/load/w{w:02}/k{}", i % 10), &format!("{w}-{i}")).await;
                    }
                    writes.events
                })
            })
            .collect();
        let under_way = tokio::time::Instant::now() + PATIENCE;
        while revision(&**store).await < (TOTAL / 4) as i64 {
            assert!(tokio::time::Instant::now() < under_way, "{TOTAL} writes are slow to start");
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        for n in WATCHERS / 2..WATCHERS {
            let request = WatchRequest::new(range.clone()).from_revision(1);
            watchers.push(spawn_watcher(&**store, request, n, TOTAL).await);
        }

        let mut expected = Vec::new();
        for writer in writers {
            expected.extend(writer.await.expect("a writer panicked"));
        }
        expected.sort_by_key(Event::revision);
        let revisions: Vec<_> = expected.iter().map(Event::revision).collect();
        assert_eq!(revisions, (1..=TOTAL as i64).collect::<Vec<_>>(), "every write takes the next revision");
        for (n, watcher) in watchers.into_iter().enumerate() {
            let events = watcher.await.expect("a watcher panicked");
            assert_events(&events, &expected, &format!("watcher {n} of {WATCHERS}"));
        }

        let mut last = BTreeMap::new();
        for event in &expected {
            last.insert(event.kv.key.clone(), event.kv.clone());
        }
        let state = ok(store.range(RangeRequest::new(range)).await, "range /load/");
        assert_eq!(state.kvs, last.into_values().collect::<Vec<_>>(), "the final state is every key's last write");
        assert_eq!(state.revision, TOTAL as i64);
    }
}

/// Starts watcher `n`, which collects `count` events on a task of its own.
async fn spawn_watcher(store: &dyn Store, request: WatchRequest, n: usize, count: usize) -> JoinHandle<Vec<Event>> {
    let mut stream = ok(store.watch(request).await, &format!("start watcher {n}"));
    tokio::spawn(async move { count_events(&mut stream, count, &format!("watcher {n}")).await })
}
