//! Check 4: range reads — key ranges, limits, pagination at a revision, reads
//! at past revisions, and the revisions that cannot be read.

use std::sync::Arc;

use super::{Suite, expect_fresh, kv, ok, revision};
use crate::error::Error;
use crate::kv::{KeyRange, KeyValue};
use crate::store::{RangeRequest, RangeResponse, Store};
use crate::txn::{Op, Txn};

/// The keys of the range checks, in key order (`/r/a0` sorts after every
/// `/r/a/...` key: `'0' > '/'`), written one per revision in this order.
const KEYS: [&str; 7] = ["/r/a/1", "/r/a/2", "/r/a/3", "/r/a0", "/r/b/1", "/r/b/2", "/r/c"];

/// Writes [`KEYS`] at revisions 1 to 7 and returns the key-values.
async fn write_keys(store: &dyn Store) -> Vec<KeyValue> {
    let mut kvs = Vec::new();
    for key in KEYS {
        kvs.push(ok(store.put(key, format!("{key}=1").into(), None).await, "put"));
    }
    kvs
}

/// The keys of a response.
fn keys(response: &RangeResponse) -> Vec<&str> {
    response.kvs.iter().map(|kv| kv.key.as_str()).collect()
}

impl Suite {
    /// Single keys, prefixes (which hold only the keys under them), half-open
    /// intervals, open-ended ranges, empty ranges; `limit` with `more` and
    /// `count`.
    pub async fn ranges(store: &Arc<dyn Store>) {
        expect_fresh(&**store).await;
        let s = &**store;
        let kvs = write_keys(s).await;
        assert_eq!(kvs[3], kv("/r/a0", "/r/a0=1", 4, 4, 1));

        let cases: Vec<(KeyRange, Vec<&str>)> = vec![
            (KeyRange::key("/r/a/2"), vec!["/r/a/2"]),
            (KeyRange::key("/r/a"), vec![]),
            (KeyRange::prefix("/r/a/"), vec!["/r/a/1", "/r/a/2", "/r/a/3"]),
            (KeyRange::prefix("/r/a"), vec!["/r/a/1", "/r/a/2", "/r/a/3", "/r/a0"]),
            (KeyRange::prefix("/r/"), KEYS.to_vec()),
            (KeyRange::prefix("/r/d/"), vec![]),
            (KeyRange::prefix("/"), KEYS.to_vec()),
            (KeyRange::between("/r/a/2", "/r/b/2"), vec!["/r/a/2", "/r/a/3", "/r/a0", "/r/b/1"]),
            (KeyRange::between("/r/a/1x", "/r/a0"), vec!["/r/a/2", "/r/a/3"]),
            (KeyRange::between("/r/c", "/r/a"), vec![]),
            (KeyRange::between("/r/c", "/r/c"), vec![]),
            (KeyRange::from("/r/b/"), vec!["/r/b/1", "/r/b/2", "/r/c"]),
            (KeyRange::from("/r/d"), vec![]),
            (KeyRange::all(), KEYS.to_vec()),
        ];
        for (range, expected) in cases {
            let response = ok(s.range(RangeRequest::new(range.clone())).await, &format!("range {range:?}"));
            assert_eq!(keys(&response), expected, "keys of {range:?}");
            assert_eq!(
                (response.count, response.more, response.revision),
                (expected.len(), false, 7),
                "count, more and revision of {range:?}"
            );
            let want: Vec<_> = kvs.iter().filter(|kv| expected.contains(&kv.key.as_str())).cloned().collect();
            assert_eq!(response.kvs, want, "key-values of {range:?}");
        }

        for (limit, more) in [(1, true), (3, true), (6, true), (7, false), (100, false)] {
            let request = RangeRequest::new(KeyRange::prefix("/r/")).with_limit(limit);
            let response = ok(s.range(request).await, &format!("range /r/ with limit {limit}"));
            let shown = limit.min(KEYS.len());
            assert_eq!(response.kvs, kvs[..shown], "range /r/ with limit {limit}");
            assert_eq!((response.count, response.more), (KEYS.len(), more), "count and more with limit {limit}");
        }
        let request = RangeRequest::new(KeyRange::key("/r/c")).with_limit(1);
        let response = ok(s.range(request).await, "one key with limit 1");
        assert_eq!((response.kvs.len(), response.count, response.more), (1, 1, false));
    }

    /// Walks a range page by page with [`RangeRequest::next_page`] while other
    /// writes land between the pages: the pages together are the snapshot of
    /// the first page's revision. Reads at past revisions see old values and
    /// keys deleted since; reads past the current revision fail with
    /// [`Error::FutureRevision`], reads before the compaction revision with
    /// [`Error::Compacted`].
    pub async fn pagination_and_past_revisions(store: &Arc<dyn Store>) {
        expect_fresh(&**store).await;
        let s = &**store;
        let snapshot = write_keys(s).await;

        // Page through /r/ two keys at a time, changing the range in between.
        let changes = [
            Txn::new().and_then([Op::put("/r/a/25", "new")]),
            Txn::new().and_then([Op::delete("/r/b/1"), Op::put("/r/c", "/r/c=2")]),
            Txn::new().and_then([Op::put("/r/zz", "new"), Op::delete("/r/a/1")]),
        ];
        let first = RangeRequest::new(KeyRange::prefix("/r/")).with_limit(2);
        let mut request = Some(first.clone());
        let mut pages = Vec::new();
        let mut changes = changes.into_iter();
        while let Some(page_request) = request {
            let page = ok(s.range(page_request.clone()).await, &format!("page {}", pages.len() + 1));
            assert_eq!(page.revision, 7, "every page is read at the first page's revision");
            request = page_request.next_page(&page);
            if let Some(change) = changes.next() {
                ok(s.txn(change).await, "a write between pages");
            }
            pages.push(page);
        }
        let paged: Vec<KeyValue> = pages.iter().flat_map(|p| p.kvs.clone()).collect();
        assert_eq!(paged, snapshot, "the pages together are the snapshot at the first page's revision");
        assert_eq!(pages.len(), 4, "7 keys in pages of 2");
        assert!(pages[..3].iter().all(|p| p.more) && !pages[3].more, "`more` is set on every page but the last");
        assert_eq!(pages[0].count, 7);
        assert_eq!(revision(s).await, 10);

        // The current state and the past ones.
        let now = ok(s.range(RangeRequest::new(KeyRange::prefix("/r/"))).await, "range /r/ now");
        assert_eq!(keys(&now), ["/r/a/2", "/r/a/25", "/r/a/3", "/r/a0", "/r/b/2", "/r/c", "/r/zz"]);
        assert_eq!(now.kvs[5], kv("/r/c", "/r/c=2", 7, 9, 2));
        let at = |revision| RangeRequest::new(KeyRange::prefix("/r/")).at_revision(revision);
        let old = ok(s.range(at(7)).await, "range /r/ at revision 7");
        assert_eq!((old.kvs.as_slice(), old.count, old.more, old.revision), (snapshot.as_slice(), 7, false, 7));
        let old = ok(s.range(at(8)).await, "range /r/ at revision 8");
        assert_eq!(keys(&old), ["/r/a/1", "/r/a/2", "/r/a/25", "/r/a/3", "/r/a0", "/r/b/1", "/r/b/2", "/r/c"]);
        assert_eq!(old.kvs[2], kv("/r/a/25", "new", 8, 8, 1));
        assert_eq!(old.kvs[7], snapshot[6], "/r/c at revision 8 is its first version");
        let old = ok(s.range(at(9)).await, "range /r/ at revision 9");
        assert_eq!(keys(&old), ["/r/a/1", "/r/a/2", "/r/a/25", "/r/a/3", "/r/a0", "/r/b/2", "/r/c"]);
        assert_eq!(old.kvs[6], kv("/r/c", "/r/c=2", 7, 9, 2));
        let old = ok(s.range(at(3)).await, "range /r/ at revision 3");
        assert_eq!(old.kvs, snapshot[..3], "before /r/a0 and later keys were written");
        let old = ok(s.range(at(8).with_limit(3)).await, "range /r/ at revision 8 with limit 3");
        assert_eq!((keys(&old), old.count, old.more), (vec!["/r/a/1", "/r/a/2", "/r/a/25"], 8, true));
        let gone = ok(s.range(RangeRequest::new(KeyRange::key("/r/b/1")).at_revision(8)).await, "/r/b/1 at 8");
        assert_eq!(gone.kvs, [snapshot[4].clone()], "a deleted key is still there at an earlier revision");
        let gone = ok(s.range(RangeRequest::new(KeyRange::key("/r/b/1")).at_revision(9)).await, "/r/b/1 at 9");
        assert_eq!((gone.kvs.len(), gone.count), (0, 0), "a key is gone at the revision that deleted it");
        let explicit = ok(s.range(at(10)).await, "range /r/ at revision 10, the current one");
        assert_eq!(explicit, now, "reading at the current revision by number");

        // Revisions that cannot be read.
        assert_eq!(s.range(at(11)).await, Err(Error::FutureRevision { requested: 11, current: 10 }), "a future read");
        ok(s.compact(5).await, "compact to 5");
        assert_eq!(s.range(at(4)).await, Err(Error::Compacted { requested: 4, compacted: 5 }), "a compacted read");
        assert_eq!(s.range(at(1)).await, Err(Error::Compacted { requested: 1, compacted: 5 }), "a compacted read");
        let kept = ok(s.range(at(5)).await, "range /r/ at the compaction revision");
        assert_eq!(kept.kvs, snapshot[..5]);
        let kept = ok(s.range(at(8).with_limit(2)).await, "range /r/ at 8 after the compaction");
        assert_eq!((keys(&kept), kept.count, kept.more), (vec!["/r/a/1", "/r/a/2"], 8, true));
        // A paginated read whose revision is compacted between pages fails.
        let page = ok(s.range(at(6).with_limit(2)).await, "first page at revision 6");
        ok(s.compact(7).await, "compact to 7");
        let next = at(6).with_limit(2).next_page(&page).expect("more pages");
        assert_eq!(
            s.range(next).await,
            Err(Error::Compacted { requested: 6, compacted: 7 }),
            "a page after compaction"
        );
    }
}
