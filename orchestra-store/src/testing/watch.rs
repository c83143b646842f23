//! Check 6: watches — order, filters, delete events, history and resumption,
//! progress notifications, slow consumers.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;

use super::{Recorder, Suite, assert_events, assert_quiet, events_until, expect_fresh, ok, put_event, revision};
use crate::error::Error;
use crate::kv::{Event, EventKind, KeyRange, KeyValue};
use crate::store::Store;
use crate::txn::{Op, Txn};
use crate::watch::{WatchRequest, WatchResponse, WatchStream};

impl Suite {
    /// 2000 writes (puts and deletes) to 20 keys by 4 concurrent writers
    /// under a watch: the watch delivers every change exactly once, in
    /// revision order, with the right previous values.
    pub async fn watch_order(store: &Arc<dyn Store>) {
        const WRITERS: usize = 4;
        const WRITES: usize = 500;
        expect_fresh(&**store).await;
        let mut watch = ok(store.watch(WatchRequest::new(KeyRange::prefix("/order/"))).await, "watch /order/");
        let total = (WRITERS * WRITES) as i64;
        let watcher = tokio::spawn(async move { events_until(&mut watch, total, "watch of 2000 writes").await });

        let writers: Vec<_> = (0..WRITERS)
            .map(|w| {
                let mut writes = Recorder::new(store);
                tokio::spawn(async move {
                    for i in 0..WRITES {
                        let key = format!("/order/w{w}/k{}", i % 5);
                        // Every tenth write deletes the key written five writes before.
                        if i % 10 == 9 {
                            writes.delete(&key).await;
                        } else {
                            writes.put(&key, &format!("{w}-{i}")).await;
                        }
                    }
                    writes.events
                })
            })
            .collect();
        let mut expected = Vec::new();
        for writer in writers {
            expected.extend(writer.await.expect("a writer panicked"));
        }
        expected.sort_by_key(Event::revision);
        let revisions: Vec<_> = expected.iter().map(Event::revision).collect();
        assert_eq!(revisions, (1..=total).collect::<Vec<_>>(), "every write takes the next revision");

        let events = watcher.await.expect("the watcher panicked");
        assert_events(&events, &expected, "a watch of 2000 writes");
    }

    /// Watches of a single key, a prefix (which excludes keys that merely
    /// start with the same characters), an interval, an open-ended range and
    /// everything each deliver exactly the changes of their keys, including
    /// their share of a transaction that writes several keys.
    pub async fn watch_filters(store: &Arc<dyn Store>) {
        expect_fresh(&**store).await;
        let s = &**store;
        let ranges = [
            KeyRange::key("/pw/a"),
            KeyRange::prefix("/pw/a/"),
            KeyRange::between("/pw/a/2", "/pw/b/1"),
            KeyRange::from("/pw/b/"),
            KeyRange::prefix("/pw/"),
            KeyRange::all(),
        ];
        let mut watches = Vec::new();
        for range in &ranges {
            watches.push(ok(s.watch(WatchRequest::new(range.clone())).await, &format!("watch {range:?}")));
        }
        let mut writes = Recorder::new(store);
        writes.put("/pw/a/1", "1").await; // 1
        writes.put("/pw/a", "1").await; // 2
        writes.put("/pw/ab", "1").await; // 3
        writes.put("/pw/b/1", "1").await; // 4
        writes.put("/pw/a/2/x", "1").await; // 5
        writes.txn(vec![Op::put("/pw/a/1", "2"), Op::put("/pw/b/1", "2"), Op::delete("/pw/ab")]).await; // 6
        writes.delete("/pw/a").await; // 7
        writes.put("/other/x", "1").await; // 8
        writes.put("/pw/z", "1").await; // 9

        // (revision, key) of the changes each watch must see, in order.
        let expected: [&[(i64, &str)]; 6] = [
            &[(2, "/pw/a"), (7, "/pw/a")],
            &[(1, "/pw/a/1"), (5, "/pw/a/2/x"), (6, "/pw/a/1")],
            &[(3, "/pw/ab"), (5, "/pw/a/2/x"), (6, "/pw/ab")],
            &[(4, "/pw/b/1"), (6, "/pw/b/1"), (9, "/pw/z")],
            &[
                (1, "/pw/a/1"),
                (2, "/pw/a"),
                (3, "/pw/ab"),
                (4, "/pw/b/1"),
                (5, "/pw/a/2/x"),
                (6, "/pw/a/1"),
                (6, "/pw/b/1"),
                (6, "/pw/ab"),
                (7, "/pw/a"),
                (9, "/pw/z"),
            ],
            &[
                (1, "/pw/a/1"),
                (2, "/pw/a"),
                (3, "/pw/ab"),
                (4, "/pw/b/1"),
                (5, "/pw/a/2/x"),
                (6, "/pw/a/1"),
                (6, "/pw/b/1"),
                (6, "/pw/ab"),
                (7, "/pw/a"),
                (8, "/other/x"),
                (9, "/pw/z"),
            ],
        ];
        for ((range, mut watch), expected) in ranges.iter().zip(watches).zip(expected) {
            let expected: Vec<Event> = expected
                .iter()
                .map(|&(rev, key)| {
                    let found = writes.events.iter().find(|e| e.revision() == rev && e.kv.key == key);
                    found.expect("the expectations name recorded changes").clone()
                })
                .collect();
            assert_eq!(expected, writes.events_in(range), "the test's own expectations for {range:?}");
            let last = expected.last().map_or(0, Event::revision);
            let what = format!("watch of {range:?}");
            assert_events(&events_until(&mut watch, last, &what).await, &expected, &what);
            assert_quiet(&mut watch, &what).await;
        }
    }

    /// Delete events, live and replayed from history: the key with an empty
    /// value, version and create revision 0, the delete's revision as mod
    /// revision, and the deleted key-value as `prev_kv`; one event per key a
    /// transaction deleted, none for keys that were already absent.
    pub async fn watch_delete_events(store: &Arc<dyn Store>) {
        expect_fresh(&**store).await;
        let s = &**store;
        let mut live = ok(s.watch(WatchRequest::new(KeyRange::prefix("/wd/"))).await, "watch /wd/");
        let a1 = ok(s.create("/wd/a", "1".into(), None).await, "create /wd/a");
        let a2 = ok(s.update("/wd/a", "2".into(), 1, None).await, "update /wd/a");
        assert_eq!(ok(s.delete("/wd/a", Some(2)).await, "delete /wd/a"), a2);
        let b = ok(s.put("/wd/b", "b".into(), None).await, "put /wd/b");
        let c = ok(s.put("/wd/c", "c".into(), None).await, "put /wd/c");
        let txn = Txn::new().and_then([Op::delete("/wd/b"), Op::delete("/wd/none"), Op::delete("/wd/c")]);
        assert_eq!(ok(s.txn(txn).await, "delete two keys").revision, 6);

        let deleted = |prev: &KeyValue, revision| Event {
            kind: EventKind::Delete,
            kv: KeyValue {
                key: prev.key.clone(),
                value: Default::default(),
                create_revision: 0,
                mod_revision: revision,
                version: 0,
                expires_at_ms: None,
            },
            prev_kv: Some(prev.clone()),
        };
        let expected = [
            put_event(a1.clone(), None),
            put_event(a2.clone(), Some(a1)),
            deleted(&a2, 3),
            put_event(b.clone(), None),
            put_event(c.clone(), None),
            deleted(&b, 6),
            deleted(&c, 6),
        ];
        assert_events(&events_until(&mut live, 6, "live delete events").await, &expected, "live delete events");
        let mut replay =
            ok(s.watch(WatchRequest::new(KeyRange::prefix("/wd/")).from_revision(1)).await, "watch from 1");
        assert_events(
            &events_until(&mut replay, 6, "replayed delete events").await,
            &expected,
            "replayed delete events",
        );
    }

    /// A watch from a past revision replays the history from there and then
    /// follows live writes; a watch resumed at the last reported revision + 1
    /// delivers exactly the changes made since, including those made while no
    /// watch was open; a watch from the next revision starts with the next write.
    pub async fn watch_history_and_resume(store: &Arc<dyn Store>) {
        expect_fresh(&**store).await;
        let mut writes = Recorder::new(store);
        for i in 1..=40 {
            writes.put(&format!("/h/k{}", i % 4), &format!("v{i}")).await;
        }
        let range = KeyRange::prefix("/h/");
        let mut watch = ok(store.watch(WatchRequest::new(range.clone()).from_revision(11)).await, "watch from 11");
        let events = events_until(&mut watch, 40, "watch from revision 11").await;
        assert_events(&events, &writes.events[10..40], "history from revision 11");
        for i in 41..=50 {
            writes.put(&format!("/h/k{}", i % 4), &format!("v{i}")).await;
        }
        let events = events_until(&mut watch, 50, "the same watch, now live").await;
        assert_events(&events, &writes.events[40..50], "live changes after the history");
        drop(watch);

        // Resume a watch from where it stopped.
        let mut watch = ok(store.watch(WatchRequest::new(range.clone())).await, "watch from now");
        let mut reported = 50;
        while reported < 55 {
            writes.put(&format!("/h/k{}", reported % 4), "live").await;
            let response = next(&mut watch, "a live watch").await;
            assert_eq!(response.events.first().map(Event::revision), Some(reported + 1), "the next change");
            reported = response.revision;
        }
        drop(watch);
        for i in 0..10 {
            writes.put(&format!("/h/k{}", i % 4), "while no watch was open").await;
        }
        let request = WatchRequest::new(range.clone()).from_revision(reported + 1);
        let mut watch = ok(store.watch(request).await, "resume the watch");
        let end = revision(&**store).await;
        let rest = &writes.events[reported as usize..];
        assert_events(&events_until(&mut watch, end, "resumed watch").await, rest, "resumed watch");
        assert_quiet(&mut watch, "resumed watch").await;

        // A watch from the next revision waits for it.
        let next = end + 1;
        let mut watch =
            ok(store.watch(WatchRequest::new(range).from_revision(next)).await, "watch from the next revision");
        assert_quiet(&mut watch, "watch from the next revision").await;
        writes.put("/h/k0", "next").await;
        let events = events_until(&mut watch, next, "watch from the next revision").await;
        assert_events(&events, &writes.events[(next - 1) as usize..], "watch from the next revision");
    }

    /// With `progress_notify` of 100 ms and nothing to deliver, a watch sends
    /// responses without events at the current revision, also after writes
    /// outside its range; changes in its range still arrive as events.
    pub async fn watch_progress(store: &Arc<dyn Store>) {
        expect_fresh(&**store).await;
        let s = &**store;
        ok(s.put("/other/a", "a".into(), None).await, "put /other/a");
        let request = WatchRequest::new(KeyRange::prefix("/p/")).with_progress_notify(Duration::from_millis(100));
        let mut watch = ok(s.watch(request).await, "watch with progress notifications");
        let progress = next(&mut watch, "first progress notification").await;
        assert!(progress.is_progress_notify(), "no writes, yet the watch sent {progress:?}");
        assert_eq!(progress.revision, 1, "a progress notification carries the current revision");

        ok(s.put("/other/b", "b".into(), None).await, "put /other/b");
        let progress = next(&mut watch, "progress after a write outside the range").await;
        assert_eq!((progress.revision, progress.events.len()), (2, 0), "progress after a write outside the range");

        let kv = ok(s.put("/p/x", "x".into(), None).await, "put /p/x");
        let response = next(&mut watch, "a change in the range").await;
        assert_eq!(response.events, [put_event(kv, None)], "a change in the range");
        assert_eq!(response.revision, 3);
        let progress = next(&mut watch, "progress after the change").await;
        assert_eq!((progress.revision, progress.events.len()), (3, 0), "progress after the change");
    }

    /// A watch whose consumer does not read while 3 writers make 3150 writes
    /// (over 1024 commit groups, more than a store buffers for watches)
    /// delivers every change exactly once, in order, when it reads again, then
    /// follows live writes.
    pub async fn watch_slow_consumer(store: &Arc<dyn Store>) {
        const WRITERS: usize = 3;
        const WRITES: usize = 1050;
        expect_fresh(&**store).await;
        let mut watch = ok(store.watch(WatchRequest::new(KeyRange::prefix("/slow/"))).await, "watch /slow/");
        let writers: Vec<_> = (0..WRITERS)
            .map(|w| {
                let mut writes = Recorder::new(store);
                tokio::spawn(async move {
                    for i in 0..WRITES {
                        writes.put(&format!("/slow/w{w}/k{}", i % 5), &i.to_string()).await;
                    }
                    writes.events
                })
            })
            .collect();
        let mut expected = Vec::new();
        for writer in writers {
            expected.extend(writer.await.expect("a writer panicked"));
        }
        expected.sort_by_key(Event::revision);
        let total = (WRITERS * WRITES) as i64;
        assert_eq!(revision(&**store).await, total);

        let events = events_until(&mut watch, total, "a watch read after 3150 writes").await;
        assert_events(&events, &expected, "a watch read after 3150 writes");
        let mut writes = Recorder::new(store);
        writes.current = expected.iter().map(|e| (e.kv.key.clone(), e.kv.clone())).collect();
        let kv = writes.put("/slow/w0/k0", "live").await;
        let events = events_until(&mut watch, total + 1, "the slow watch, live again").await;
        assert_events(&events, &writes.events, "the slow watch, live again");
        assert_eq!(kv.mod_revision, total + 1);
    }

    /// Starting a watch before the compaction revision fails at once with
    /// [`Error::Compacted`]; at the compaction revision it replays from there.
    pub async fn watch_before_compaction_fails(store: &Arc<dyn Store>) {
        expect_fresh(&**store).await;
        let mut writes = Recorder::new(store);
        for i in 1..=5 {
            writes.put(&format!("/wc/k{}", i % 2), &i.to_string()).await;
        }
        ok(store.compact(3).await, "compact to 3");
        let range = KeyRange::prefix("/wc/");
        for start in [1, 2] {
            let request = WatchRequest::new(range.clone()).from_revision(start);
            assert_eq!(
                store.watch(request).await.err(),
                Some(Error::Compacted { requested: start, compacted: 3 }),
                "a watch from revision {start}, compacted at 3"
            );
        }
        let mut watch = ok(store.watch(WatchRequest::new(range).from_revision(3)).await, "watch from 3");
        let events = events_until(&mut watch, 5, "watch from the compaction revision").await;
        assert_events(&events, &writes.events[2..], "watch from the compaction revision");
    }
}

/// The watch's next response, which must come within 2 s.
async fn next(watch: &mut WatchStream, what: &str) -> WatchResponse {
    let response = tokio::time::timeout(Duration::from_secs(2), watch.next()).await;
    let response = response.unwrap_or_else(|_| panic!("{what}: nothing within 2s"));
    ok(response.unwrap_or_else(|| panic!("{what}: the watch ended")), what)
}
