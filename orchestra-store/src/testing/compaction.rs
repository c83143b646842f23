//! Check 8: compaction.

use std::sync::Arc;

use super::{Recorder, Suite, assert_events, events_until, expect_fresh, kv, ok};
use crate::error::Error;
use crate::kv::KeyRange;
use crate::store::{RangeRequest, Store, StoreStatus};
use crate::watch::WatchRequest;

impl Suite {
    /// After `compact(R)`: reads before R fail with [`Error::Compacted`],
    /// reads at R and later see the right values (keys deleted before R stay
    /// deleted); a watch from R delivers the changes at R and after with their
    /// previous values, one from before R fails; compacting to R or earlier
    /// again does nothing, past the current revision fails with
    /// [`Error::FutureRevision`]; compacting to the current revision keeps it
    /// readable and watchable.
    pub async fn compaction(store: &Arc<dyn Store>) {
        expect_fresh(&**store).await;
        let s = &**store;
        let mut writes = Recorder::new(store);
        writes.put("/cp/k1", "1").await; // 1
        writes.put("/cp/k2", "1").await; // 2
        writes.put("/cp/k1", "2").await; // 3
        writes.delete("/cp/k2").await; // 4
        writes.put("/cp/k3", "1").await; // 5
        writes.put("/cp/k1", "3").await; // 6

        ok(s.compact(4).await, "compact to 4");
        assert_eq!(ok(s.status().await, "status"), StoreStatus { revision: 6, compact_revision: 4 });
        let at = |revision| RangeRequest::new(KeyRange::prefix("/cp/")).at_revision(revision);
        assert_eq!(s.range(at(3)).await, Err(Error::Compacted { requested: 3, compacted: 4 }), "a read at 3");
        assert_eq!(s.range(at(1)).await, Err(Error::Compacted { requested: 1, compacted: 4 }), "a read at 1");
        let k1_2 = kv("/cp/k1", "2", 1, 3, 2);
        let k1_3 = kv("/cp/k1", "3", 1, 6, 3);
        let k3 = kv("/cp/k3", "1", 5, 5, 1);
        assert_eq!(
            ok(s.range(at(4)).await, "read at 4").kvs,
            vec![k1_2.clone()],
            "the state at the compaction revision"
        );
        assert_eq!(ok(s.range(at(5)).await, "read at 5").kvs, [k1_2.clone(), k3.clone()]);
        assert_eq!(ok(s.range(at(6)).await, "read at 6").kvs, [k1_3.clone(), k3.clone()]);
        let k2 = RangeRequest::new(KeyRange::key("/cp/k2")).at_revision(4);
        assert_eq!(ok(s.range(k2).await, "/cp/k2 at 4").count, 0, "a key deleted at the compaction revision");

        // Compacting again to an old revision does nothing; to the future fails.
        ok(s.compact(2).await, "compact to 2 after 4");
        ok(s.compact(4).await, "compact to 4 again");
        assert_eq!(s.compact(7).await, Err(Error::FutureRevision { requested: 7, current: 6 }), "compact to 7 at 6");
        assert_eq!(ok(s.status().await, "status"), StoreStatus { revision: 6, compact_revision: 4 });

        // Watches from the compaction revision, not before.
        let range = KeyRange::prefix("/cp/");
        assert_eq!(
            s.watch(WatchRequest::new(range.clone()).from_revision(3)).await.err(),
            Some(Error::Compacted { requested: 3, compacted: 4 }),
            "a watch from 3, compacted at 4"
        );
        let mut watch = ok(s.watch(WatchRequest::new(range.clone()).from_revision(4)).await, "watch from 4");
        let events = events_until(&mut watch, 6, "watch from the compaction revision").await;
        assert_events(&events, &writes.events[3..], "watch from the compaction revision");
        writes.put("/cp/k1", "4").await; // 7
        let events = events_until(&mut watch, 7, "watch from the compaction revision, live").await;
        assert_events(&events, &writes.events[6..], "watch from the compaction revision, live");

        // Compact everything but the current revision.
        ok(s.compact(7).await, "compact to the current revision");
        assert_eq!(s.range(at(6)).await, Err(Error::Compacted { requested: 6, compacted: 7 }), "a read at 6");
        let k1_4 = kv("/cp/k1", "4", 1, 7, 4);
        assert_eq!(ok(s.range(at(7)).await, "read at 7").kvs, [k1_4.clone(), k3.clone()]);
        let mut watch = ok(s.watch(WatchRequest::new(range.clone()).from_revision(7)).await, "watch from 7");
        let events = events_until(&mut watch, 7, "watch from the current revision, compacted").await;
        assert_events(&events, &writes.events[6..], "watch from 7 after compacting to 7");
        assert_eq!(events[0].prev_kv, Some(k1_3), "the previous value of the first change after a compaction");

        let k2 = writes.put("/cp/k2", "again").await; // 8
        assert_eq!(k2, kv("/cp/k2", "again", 8, 8, 1), "a key deleted before the compaction starts over");
        assert_eq!(ok(s.status().await, "status"), StoreStatus { revision: 8, compact_revision: 7 });
    }
}
