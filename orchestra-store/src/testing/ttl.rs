//! Check 5: keys written with a time to live.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use super::{Suite, events_until, expect_fresh, kv, ok, put_event, revision};
use crate::kv::{Event, KeyRange, KeyValue};
use crate::store::{RangeRequest, Store};
use crate::watch::WatchRequest;

const SHORT: Duration = Duration::from_millis(300);
const LONGER: Duration = Duration::from_secs(2);

fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).expect("the clock is after 1970").as_millis() as i64
}

/// Polls until `key` is gone, panicking if it is still there at `deadline`.
async fn wait_until_gone(store: &dyn Store, key: &str, deadline: Instant, what: &str) {
    while ok(store.get(key).await, "get").is_some() {
        assert!(Instant::now() < deadline, "{what}: {key} is still there");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

impl Suite {
    /// A key written with a 300 ms TTL carries its deadline and is deleted
    /// (a delete event with the previous value, one revision) within 2 s.
    /// Rewriting a TTL key without a TTL makes it permanent; rewriting it with
    /// a longer TTL moves its deadline.
    pub async fn ttl(store: &Arc<dyn Store>) {
        expect_fresh(&**store).await;
        let s = &**store;
        let start = Instant::now();
        let before = now_ms();
        let a = ok(s.put("/ttl/a", "a".into(), Some(SHORT)).await, "put /ttl/a with a 300ms TTL");
        let after = now_ms();
        let deadline = a.expires_at_ms.expect("a key written with a TTL has a deadline");
        assert!(
            (before + 300..=after + 300).contains(&deadline),
            "/ttl/a written between {before} and {after} ms with a 300 ms TTL expires at {deadline}"
        );
        assert_eq!(KeyValue { expires_at_ms: None, ..a.clone() }, kv("/ttl/a", "a", 1, 1, 1));

        let b1 = ok(s.put("/ttl/b", "b".into(), Some(SHORT)).await, "put /ttl/b with a 300ms TTL");
        let b2 = ok(s.put("/ttl/b", "b".into(), None).await, "rewrite /ttl/b without a TTL");
        assert_eq!(b2, kv("/ttl/b", "b", 2, 3, 2), "a rewrite without a TTL has no deadline");
        let c1 = ok(s.put("/ttl/c", "c".into(), Some(SHORT)).await, "put /ttl/c with a 300ms TTL");
        let c2 = ok(s.put("/ttl/c", "c".into(), Some(LONGER)).await, "rewrite /ttl/c with a 2s TTL");
        assert!(c2.expires_at_ms > c1.expires_at_ms, "a longer TTL moves the deadline");
        let mut watch = ok(s.watch(WatchRequest::new(KeyRange::prefix("/ttl/")).from_revision(1)).await, "watch /ttl/");
        assert_eq!(ok(s.get("/ttl/a").await, "get /ttl/a right away"), Some(a.clone()));

        wait_until_gone(s, "/ttl/a", start + Duration::from_secs(2), "a key with a 300ms TTL after 2s").await;
        let expected = vec![
            put_event(a.clone(), None),
            put_event(b1.clone(), None),
            put_event(b2.clone(), Some(b1)),
            put_event(c1.clone(), None),
            put_event(c2.clone(), Some(c1)),
            Event::deleted(a.clone(), 6),
        ];
        super::assert_events(&events_until(&mut watch, 6, "watch of TTL keys").await, &expected, "TTL events");
        let past = RangeRequest::new(KeyRange::key("/ttl/a")).at_revision(5);
        assert_eq!(ok(s.range(past).await, "/ttl/a before it expired").kvs, [a], "an expiry is an ordinary delete");

        // Well past the first deadlines, before the longer one.
        tokio::time::sleep((start + Duration::from_millis(1000)).saturating_duration_since(Instant::now())).await;
        assert_eq!(ok(s.get("/ttl/b").await, "get /ttl/b"), Some(b2.clone()), "rewritten without a TTL: permanent");
        assert_eq!(ok(s.get("/ttl/c").await, "get /ttl/c"), Some(c2.clone()), "rewritten with a longer TTL");
        assert_eq!(revision(s).await, 6, "stale deadlines delete nothing");

        wait_until_gone(s, "/ttl/c", start + Duration::from_secs(5), "a key with a 2s TTL after 5s").await;
        let expected = [Event::deleted(c2, 7)];
        super::assert_events(&events_until(&mut watch, 7, "watch of TTL keys").await, &expected, "TTL events");
        assert_eq!(ok(s.get("/ttl/b").await, "get /ttl/b"), Some(b2), "a permanent key stays");
        assert_eq!(revision(s).await, 7);
    }
}
