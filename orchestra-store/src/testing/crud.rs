//! Checks 1 and 2: single-key writes, revisions, and optimistic concurrency.

use std::sync::Arc;

use super::{Suite, expect_fresh, kv, ok, revision};
use crate::error::Error;
use crate::kv::KeyRange;
use crate::store::{RangeRequest, Store, StoreStatus};
use crate::txn::{Compare, Op, OpResponse, Txn};

impl Suite {
    /// Create, get, update, put and delete; every key's create revision, mod
    /// revision and version; the global revision moving by exactly one per
    /// writing transaction and not at all for reads, failed transactions and
    /// transactions that change nothing; [`Store::status`].
    pub async fn crud_and_revisions(store: &Arc<dyn Store>) {
        expect_fresh(&**store).await;
        let s = &**store;
        assert_eq!(ok(s.get("/crud/a").await, "get of a missing key"), None);

        let a1 = ok(s.create("/crud/a", "one".into(), None).await, "create /crud/a");
        assert_eq!(a1, kv("/crud/a", "one", 1, 1, 1), "create returns the new key-value");
        assert_eq!(ok(s.get("/crud/a").await, "get /crud/a"), Some(a1.clone()));
        assert_eq!(revision(s).await, 1, "the first write has revision 1");

        let a2 = ok(s.update("/crud/a", "two".into(), 1, None).await, "update /crud/a at its mod revision");
        assert_eq!(a2, kv("/crud/a", "two", 1, 2, 2), "an update keeps the create revision, bumps the version");
        let a3 = ok(s.put("/crud/a", "three".into(), None).await, "put over /crud/a");
        assert_eq!(a3, kv("/crud/a", "three", 1, 3, 3));
        let b = ok(s.create("/crud/b", "b".into(), None).await, "create /crud/b");
        assert_eq!(b, kv("/crud/b", "b", 4, 4, 1));

        let deleted = ok(s.delete("/crud/a", Some(3)).await, "delete /crud/a at its mod revision");
        assert_eq!(deleted, a3, "delete returns the deleted key-value");
        assert_eq!(ok(s.get("/crud/a").await, "get of a deleted key"), None);
        assert_eq!(revision(s).await, 5, "a delete takes a revision");

        let again = ok(s.create("/crud/a", "again".into(), None).await, "create /crud/a again");
        assert_eq!(
            again,
            kv("/crud/a", "again", 6, 6, 1),
            "a re-created key starts over: new create revision, version 1"
        );

        assert_eq!(ok(s.delete("/crud/b", None).await, "unguarded delete of /crud/b"), b);
        assert_eq!(revision(s).await, 7);
        assert_eq!(
            s.delete("/crud/b", None).await,
            Err(Error::NotFound { key: "/crud/b".into() }),
            "deleting a missing key"
        );
        assert_eq!(revision(s).await, 7, "deleting a missing key takes no revision");

        let z = ok(s.put("/crud/z", "z".into(), None).await, "put /crud/z");
        let z_again = ok(s.put("/crud/z", "z".into(), None).await, "put the same value again");
        assert_eq!((z.mod_revision, z_again.mod_revision, z_again.version), (8, 9, 2), "rewriting a value is a write");

        // A transaction that writes takes one revision, whatever it writes.
        let three = Txn::new().and_then([Op::put("/crud/x", "x"), Op::put("/crud/y", "y"), Op::delete("/crud/z")]);
        let response = ok(s.txn(three).await, "a transaction writing three keys");
        assert!(response.succeeded);
        assert_eq!(response.revision, 10, "a writing transaction takes exactly one revision");
        assert_eq!(
            response.responses,
            vec![
                OpResponse::Put { kv: kv("/crud/x", "x", 10, 10, 1), prev_kv: None },
                OpResponse::Put { kv: kv("/crud/y", "y", 10, 10, 1), prev_kv: None },
                OpResponse::Delete { prev_kv: Some(z_again) },
            ]
        );
        assert_eq!(revision(s).await, 10);

        // Reads, failed transactions and no-op deletes take no revision.
        let read = ok(s.txn(Txn::new().and_then([Op::get("/crud/x")])).await, "a read-only transaction");
        assert_eq!(read.revision, 10, "a read-only transaction reports the current revision");
        assert_eq!(read.responses, vec![OpResponse::Get { kv: Some(kv("/crud/x", "x", 10, 10, 1)) }]);
        let noop = ok(s.txn(Txn::new().and_then([Op::delete("/crud/nothing")])).await, "deleting nothing");
        assert_eq!((noop.succeeded, noop.revision), (true, 10), "a transaction that changes nothing takes no revision");
        assert_eq!(noop.responses, vec![OpResponse::Delete { prev_kv: None }]);
        let failed = Txn::new()
            .when([Compare::absent("/crud/x")])
            .and_then([Op::put("/crud/q", "q")])
            .or_else([Op::get("/crud/q")]);
        let failed = ok(s.txn(failed).await, "a transaction whose compare fails");
        assert_eq!((failed.succeeded, failed.revision), (false, 10));
        assert_eq!(failed.responses, vec![OpResponse::Get { kv: None }]);
        assert_eq!(revision(s).await, 10, "reads, failed and no-op transactions take no revision");

        let all = ok(s.range(RangeRequest::new(KeyRange::prefix("/crud/"))).await, "range over /crud/");
        assert_eq!(
            all.kvs,
            vec![kv("/crud/a", "again", 6, 6, 1), kv("/crud/x", "x", 10, 10, 1), kv("/crud/y", "y", 10, 10, 1)]
        );
        assert_eq!((all.count, all.more, all.revision), (3, false, 10));
        assert_eq!(ok(s.status().await, "status"), StoreStatus { revision: 10, compact_revision: 0 });
    }

    /// Guarded writes: a stale expected revision fails with
    /// [`Error::Conflict`] carrying the actual revision, a missing key with
    /// [`Error::NotFound`], a create over an existing key with
    /// [`Error::AlreadyExists`], and none of them takes a revision. Then many
    /// tasks increment one counter with read-update-retry loops: exactly every
    /// increment lands.
    pub async fn optimistic_concurrency(store: &Arc<dyn Store>) {
        expect_fresh(&**store).await;
        let s = &**store;
        ok(s.create("/occ/k", "0".into(), None).await, "create /occ/k");
        ok(s.update("/occ/k", "1".into(), 1, None).await, "update /occ/k");

        let conflict = Error::Conflict { key: "/occ/k".into(), expected: 1, actual: 2 };
        assert_eq!(s.update("/occ/k", "x".into(), 1, None).await, Err(conflict.clone()), "update at a stale revision");
        assert_eq!(s.delete("/occ/k", Some(1)).await, Err(conflict), "delete at a stale revision");
        assert_eq!(
            s.update("/occ/k", "x".into(), 3, None).await,
            Err(Error::Conflict { key: "/occ/k".into(), expected: 3, actual: 2 }),
            "update at a future revision"
        );
        let missing = Error::NotFound { key: "/occ/missing".into() };
        assert_eq!(
            s.update("/occ/missing", "x".into(), 1, None).await,
            Err(missing.clone()),
            "update of a missing key"
        );
        assert_eq!(s.delete("/occ/missing", Some(1)).await, Err(missing), "guarded delete of a missing key");
        assert_eq!(
            s.create("/occ/k", "x".into(), None).await,
            Err(Error::AlreadyExists { key: "/occ/k".into() }),
            "create over an existing key"
        );
        assert_eq!(revision(s).await, 2, "refused writes take no revision");
        assert_eq!(ok(s.get("/occ/k").await, "get /occ/k"), Some(kv("/occ/k", "1", 1, 2, 2)));

        // Delete and re-create: the old mod revision no longer matches.
        ok(s.create("/occ/r", "r".into(), None).await, "create /occ/r");
        ok(s.delete("/occ/r", Some(3)).await, "delete /occ/r");
        ok(s.create("/occ/r", "r".into(), None).await, "re-create /occ/r");
        assert_eq!(
            s.update("/occ/r", "x".into(), 3, None).await,
            Err(Error::Conflict { key: "/occ/r".into(), expected: 3, actual: 5 }),
            "update at the revision of an earlier incarnation of the key"
        );

        const TASKS: usize = 8;
        const INCREMENTS: usize = 25;
        ok(s.create("/occ/counter", "0".into(), None).await, "create /occ/counter");
        let start = revision(s).await;
        let tasks: Vec<_> = (0..TASKS)
            .map(|_| {
                let store = store.clone();
                tokio::spawn(async move {
                    let mut conflicts = 0;
                    for _ in 0..INCREMENTS {
                        loop {
                            let current =
                                ok(store.get("/occ/counter").await, "read the counter").expect("counter exists");
                            let n: usize = std::str::from_utf8(&current.value).unwrap().parse().unwrap();
                            let next = (n + 1).to_string().into();
                            match store.update("/occ/counter", next, current.mod_revision, None).await {
                                Ok(_) => break,
                                Err(Error::Conflict { .. }) => conflicts += 1,
                                Err(e) => panic!("incrementing the counter: unexpected error {e}"),
                            }
                        }
                    }
                    conflicts
                })
            })
            .collect();
        for task in tasks {
            task.await.expect("an incrementing task panicked");
        }
        let total = TASKS * INCREMENTS;
        let counter = ok(s.get("/occ/counter").await, "read the counter").expect("counter exists");
        assert_eq!(counter.value, total.to_string(), "concurrent read-update-retry loops lost or repeated increments");
        assert_eq!(counter.version, total as i64 + 1);
        assert_eq!(revision(s).await, start + total as i64, "only the successful updates took revisions");
        assert_eq!(counter.mod_revision, start + total as i64);
    }
}
