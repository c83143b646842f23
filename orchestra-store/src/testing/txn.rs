//! Check 3: transactions — compares, branches, reads of a transaction's own
//! writes, and the limits that refuse a transaction before it writes anything.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use super::{Suite, expect_fresh, kv, ok, revision};
use crate::error::Error;
use crate::kv::KeyRange;
use crate::limits::{MAX_TTL, MAX_TXN_OPS, MAX_VALUE_BYTES};
use crate::store::{RangeRequest, Store};
use crate::txn::{Compare, CompareOp, Op, OpResponse, Txn};

impl Suite {
    /// Every compare target with every operator, on present and absent keys;
    /// several compares (all must hold); the success and failure branches;
    /// reads inside a transaction seeing its earlier writes; writes in the
    /// failure branch.
    pub async fn transactions(store: &Arc<dyn Store>) {
        use CompareOp::{Equal as Eq, Greater as Gt, Less as Lt, NotEqual as Ne};
        expect_fresh(&**store).await;
        let s = &**store;
        ok(s.put("/t/a", "a1".into(), None).await, "put /t/a");
        let a = ok(s.put("/t/a", "a2".into(), None).await, "put /t/a again");
        let b = ok(s.put("/t/b", "b1".into(), None).await, "put /t/b");
        // Now /t/a: create 1, mod 2, version 2, value "a2"; /t/none is absent.
        assert_eq!(a, kv("/t/a", "a2", 1, 2, 2));

        let table: Vec<(Compare, bool)> = vec![
            (Compare::mod_revision("/t/a", Eq, 2), true),
            (Compare::mod_revision("/t/a", Eq, 1), false),
            (Compare::mod_revision("/t/a", Ne, 1), true),
            (Compare::mod_revision("/t/a", Ne, 2), false),
            (Compare::mod_revision("/t/a", Lt, 3), true),
            (Compare::mod_revision("/t/a", Lt, 2), false),
            (Compare::mod_revision("/t/a", Gt, 1), true),
            (Compare::mod_revision("/t/a", Gt, 2), false),
            (Compare::create_revision("/t/a", Eq, 1), true),
            (Compare::create_revision("/t/a", Ne, 1), false),
            (Compare::create_revision("/t/a", Lt, 1), false),
            (Compare::create_revision("/t/a", Gt, 0), true),
            (Compare::version("/t/a", Eq, 2), true),
            (Compare::version("/t/a", Ne, 3), true),
            (Compare::version("/t/a", Lt, 2), false),
            (Compare::version("/t/a", Gt, 1), true),
            (Compare::value("/t/a", Eq, "a2"), true),
            (Compare::value("/t/a", Eq, "a1"), false),
            (Compare::value("/t/a", Ne, "a2"), false),
            (Compare::value("/t/a", Lt, "a3"), true),
            (Compare::value("/t/a", Lt, "a2"), false),
            (Compare::value("/t/a", Gt, "a1"), true),
            (Compare::value("/t/a", Gt, "b"), false),
            // Absent keys: revisions and version compare as 0 ...
            (Compare::absent("/t/none"), true),
            (Compare::absent("/t/a"), false),
            (Compare::mod_revision("/t/none", Lt, 1), true),
            (Compare::create_revision("/t/none", Eq, 0), true),
            (Compare::version("/t/none", Eq, 0), true),
            (Compare::version("/t/none", Gt, 0), false),
            // ... and a compare on the value of an absent key is false.
            (Compare::value("/t/none", Eq, ""), false),
            (Compare::value("/t/none", Ne, "x"), false),
            (Compare::value("/t/none", Gt, ""), false),
        ];
        for (compare, holds) in table {
            let txn = Txn::new().when([compare.clone()]).and_then([Op::get("/t/a")]).or_else([Op::get("/t/b")]);
            let response = ok(s.txn(txn).await, &format!("transaction comparing {compare:?}"));
            assert_eq!(response.succeeded, holds, "{compare:?} against /t/a = {a:?}");
            let read = if holds { a.clone() } else { b.clone() };
            assert_eq!(response.responses, vec![OpResponse::Get { kv: Some(read) }], "the branch of {compare:?}");
            assert_eq!(response.revision, 3, "a read-only transaction takes no revision");
        }

        // Every compare must hold.
        let all_hold =
            [Compare::mod_revision("/t/a", Eq, 2), Compare::value("/t/b", Eq, "b1"), Compare::absent("/t/none")];
        let response = ok(s.txn(Txn::new().when(all_hold.clone())).await, "three compares that hold");
        assert!(response.succeeded && response.responses.is_empty());
        let one_fails = [all_hold[0].clone(), Compare::version("/t/b", Eq, 2), all_hold[2].clone()];
        let response = ok(s.txn(Txn::new().when(one_fails)).await, "three compares, the second false");
        assert!(!response.succeeded, "a transaction with one false compare takes the failure branch");

        // A writing success branch; reads see the transaction's earlier writes.
        let txn = Txn::new().when([Compare::mod_revision("/t/a", Eq, 2)]).and_then([
            Op::get("/t/a"),
            Op::put("/t/a", "a3"),
            Op::get("/t/a"),
            Op::delete("/t/b"),
            Op::get("/t/b"),
            Op::put("/t/c", "c1"),
            Op::get("/t/c"),
            Op::delete("/t/none"),
        ]);
        let response = ok(s.txn(txn).await, "a transaction reading its own writes");
        let a3 = kv("/t/a", "a3", 1, 4, 3);
        let c1 = kv("/t/c", "c1", 4, 4, 1);
        assert!(response.succeeded);
        assert_eq!(response.revision, 4);
        assert_eq!(
            response.responses,
            vec![
                OpResponse::Get { kv: Some(a.clone()) },
                OpResponse::Put { kv: a3.clone(), prev_kv: Some(a.clone()) },
                OpResponse::Get { kv: Some(a3.clone()) },
                OpResponse::Delete { prev_kv: Some(b.clone()) },
                OpResponse::Get { kv: None },
                OpResponse::Put { kv: c1.clone(), prev_kv: None },
                OpResponse::Get { kv: Some(c1.clone()) },
                OpResponse::Delete { prev_kv: None },
            ],
            "responses of a transaction reading its own writes"
        );
        let state = ok(s.range(RangeRequest::new(KeyRange::prefix("/t/"))).await, "range /t/");
        assert_eq!(state.kvs, vec![a3.clone(), c1.clone()], "state after the transaction");

        // A writing failure branch.
        let txn = Txn::new()
            .when([Compare::value("/t/a", Eq, "a2")])
            .and_then([Op::put("/t/s", "s")])
            .or_else([Op::put("/t/f", "f"), Op::get("/t/s")]);
        let response = ok(s.txn(txn).await, "a transaction writing in its failure branch");
        assert_eq!((response.succeeded, response.revision), (false, 5));
        assert_eq!(
            response.responses,
            vec![OpResponse::Put { kv: kv("/t/f", "f", 5, 5, 1), prev_kv: None }, OpResponse::Get { kv: None }]
        );
        assert_eq!(ok(s.get("/t/s").await, "get /t/s"), None, "the success branch did not run");
        assert_eq!(revision(s).await, 5);
    }

    /// Transactions over the limits — a key written twice, 129 operations, an
    /// invalid key, a value of 1.5 MiB + 1 byte, a zero or too long TTL — are
    /// refused with the matching error, and nothing of them is written: the
    /// revision stays and their other keys stay absent. The limits themselves
    /// (128 operations, a 1.5 MiB value) are accepted.
    pub async fn refused_transactions(store: &Arc<dyn Store>) {
        expect_fresh(&**store).await;
        let s = &**store;
        ok(s.put("/lim/existing", "e".into(), None).await, "put /lim/existing");
        let ok_put = || Op::put("/lim/first", "written only if the transaction is accepted");
        let too_big = Bytes::from(vec![b'x'; MAX_VALUE_BYTES + 1]);

        let refused: Vec<(&str, Txn, Error)> = vec![
            (
                "a key written twice",
                Txn::new().and_then([ok_put(), Op::put("/lim/dup", "1"), Op::delete("/lim/dup")]),
                Error::DuplicateKey { key: "/lim/dup".into() },
            ),
            (
                "a key written twice in the failure branch",
                Txn::new().or_else([Op::put("/lim/dup", "1"), ok_put(), Op::put("/lim/dup", "2")]),
                Error::DuplicateKey { key: "/lim/dup".into() },
            ),
            (
                "129 writes",
                Txn::new().and_then((0..=MAX_TXN_OPS).map(|i| Op::put(format!("/lim/many/{i:03}"), "v"))),
                Error::TooManyOperations { ops: MAX_TXN_OPS + 1, limit: MAX_TXN_OPS },
            ),
            (
                "100 compares and 29 operations",
                Txn::new()
                    .when((0..100).map(|i| Compare::absent(format!("/lim/c/{i:03}"))))
                    .and_then((0..29).map(|i| Op::put(format!("/lim/many/{i:03}"), "v"))),
                Error::TooManyOperations { ops: MAX_TXN_OPS + 1, limit: MAX_TXN_OPS },
            ),
            (
                "a key without a leading slash",
                Txn::new().and_then([ok_put(), Op::put("lim/relative", "v")]),
                Error::InvalidKey { key: "lim/relative".into(), reason: "key must start with '/'" },
            ),
            (
                "an empty key",
                Txn::new().and_then([ok_put(), Op::delete("")]),
                Error::InvalidKey { key: String::new(), reason: "key is empty" },
            ),
            (
                "a key with a NUL byte",
                Txn::new().and_then([ok_put(), Op::put("/lim/a\0b", "v")]),
                Error::InvalidKey { key: "/lim/a\0b".into(), reason: "key contains a control character" },
            ),
            (
                "an invalid key in a compare",
                Txn::new().when([Compare::absent("nope")]).and_then([ok_put()]),
                Error::InvalidKey { key: "nope".into(), reason: "key must start with '/'" },
            ),
            (
                "a value of 1.5 MiB + 1 byte",
                Txn::new().and_then([ok_put(), Op::put("/lim/big", too_big.clone())]),
                Error::ValueTooLarge { key: "/lim/big".into(), size: MAX_VALUE_BYTES + 1, limit: MAX_VALUE_BYTES },
            ),
            (
                "a zero TTL",
                Txn::new().and_then([ok_put(), Op::put_with_ttl("/lim/ttl", "v", Duration::ZERO)]),
                Error::InvalidTtl { key: "/lim/ttl".into(), reason: "TTL must be at least 1ms" },
            ),
            (
                "a TTL over ten years",
                Txn::new().and_then([ok_put(), Op::put_with_ttl("/lim/ttl", "v", MAX_TTL + Duration::from_secs(1))]),
                Error::InvalidTtl { key: "/lim/ttl".into(), reason: "TTL is longer than ten years" },
            ),
        ];
        for (what, txn, error) in refused {
            match s.txn(txn).await {
                Err(e) if same_error(&e, &error) => {}
                other => panic!("a transaction with {what}: expected Err({error:?}), got {other:?}"),
            }
            assert_eq!(revision(s).await, 1, "a refused transaction with {what} took a revision");
            let written = ok(s.range(RangeRequest::new(KeyRange::prefix("/lim/"))).await, "range /lim/");
            assert_eq!(
                written.kvs.iter().map(|kv| kv.key.as_str()).collect::<Vec<_>>(),
                ["/lim/existing"],
                "a refused transaction with {what} wrote something"
            );
        }
        assert_eq!(
            s.put("/lim/big", too_big, None).await,
            Err(Error::ValueTooLarge { key: "/lim/big".into(), size: MAX_VALUE_BYTES + 1, limit: MAX_VALUE_BYTES }),
            "put of a value over the limit"
        );

        // The limits themselves are fine.
        let most = Txn::new().and_then((0..MAX_TXN_OPS).map(|i| Op::put(format!("/lim/many/{i:03}"), "v")));
        let response = ok(s.txn(most).await, "a transaction of exactly 128 writes");
        assert_eq!(response.revision, 2, "128 writes in one transaction take one revision");
        let many = ok(s.range(RangeRequest::new(KeyRange::prefix("/lim/many/"))).await, "range /lim/many/");
        assert_eq!(many.count, MAX_TXN_OPS);
        assert!(many.kvs.iter().all(|kv| kv.mod_revision == 2 && kv.version == 1));
        let largest = Bytes::from(vec![b'y'; MAX_VALUE_BYTES]);
        ok(s.put("/lim/big", largest.clone(), None).await, "put of a value of exactly 1.5 MiB");
        let read = ok(s.get("/lim/big").await, "get /lim/big").expect("/lim/big was written");
        assert!(read.value == largest, "a 1.5 MiB value did not read back intact");
        assert_eq!(revision(s).await, 3);
    }
}

/// Errors are equal, except that the wording of an invalid key's or TTL's
/// reason is the backend's own.
fn same_error(got: &Error, want: &Error) -> bool {
    match (got, want) {
        (Error::InvalidKey { key, .. }, Error::InvalidKey { key: want, .. }) => key == want,
        (Error::InvalidTtl { key, .. }, Error::InvalidTtl { key: want, .. }) => key == want,
        _ => got == want,
    }
}
