//! Fencing: a [`Store`] whose writes land only while a guard key says the
//! writer may write — e.g. only while a leader-election Lease still names
//! the writer's term. Each write transaction is checked against the guard's
//! current value and then made conditional on the guard's mod revision, so
//! no write can land after the guard has changed, however late it arrives
//! (the fencing token of Kleppmann's "How to do distributed locking").

use std::sync::Arc;

use async_trait::async_trait;

use crate::{
    Compare, CompareOp, Error, KeyValue, Op, RangeRequest, RangeResponse, Result, Revision, Store, StoreStatus, Txn,
    TxnResponse, WatchRequest, WatchStream,
};

/// Decides from the guard key (`None`: absent) whether writes may land;
/// `Err` says why not.
pub type FenceCheck = dyn Fn(Option<&KeyValue>) -> std::result::Result<(), String> + Send + Sync;

/// How often a write is retried when the guard changes under it but still
/// allows the write (a Lease renewed by its holder).
const ATTEMPTS: usize = 5;

/// A [`Store`] whose writes are fenced by a guard key; reads, watches and
/// read-only transactions pass through unchanged.
///
/// A refused write fails with [`Error::Fenced`]. Transactions whose failure
/// branch writes are refused with [`Error::Fenced`] too: a failing guard
/// would run that branch.
pub struct FencedStore {
    inner: Arc<dyn Store>,
    guard: String,
    check: Arc<FenceCheck>,
}

impl FencedStore {
    /// Fences `inner`'s writes by the key `guard`, allowed while `check`
    /// accepts its value.
    pub fn new(inner: Arc<dyn Store>, guard: impl Into<String>, check: Arc<FenceCheck>) -> FencedStore {
        FencedStore { inner, guard: guard.into(), check }
    }

    fn refused(&self, reason: String) -> Error {
        Error::Fenced { guard: self.guard.clone(), reason }
    }
}

impl std::fmt::Debug for FencedStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FencedStore").field("guard", &self.guard).finish_non_exhaustive()
    }
}

#[async_trait]
impl Store for FencedStore {
    async fn range(&self, request: RangeRequest) -> Result<RangeResponse> {
        self.inner.range(request).await
    }

    async fn txn(&self, txn: Txn) -> Result<TxnResponse> {
        if txn.is_read_only() {
            return self.inner.txn(txn).await;
        }
        if txn.failure.iter().any(|op| !matches!(op, Op::Get { .. })) {
            return Err(self.refused("a fenced transaction cannot write in its failure branch".into()));
        }
        for _ in 0..ATTEMPTS {
            let guard = self.inner.get(&self.guard).await?;
            (self.check)(guard.as_ref()).map_err(|reason| self.refused(reason))?;
            let seen: Option<Revision> = guard.as_ref().map(|kv| kv.mod_revision);
            let mut fenced = txn.clone();
            fenced.compares.push(match seen {
                Some(revision) => Compare::mod_revision(self.guard.clone(), CompareOp::Equal, revision),
                None => Compare::absent(self.guard.clone()),
            });
            let response = self.inner.txn(fenced).await?;
            if response.succeeded {
                return Ok(response);
            }
            // The caller's own compares failed, or the guard moved: only
            // in the second case is the guard checked again.
            let now = self.inner.get(&self.guard).await?;
            if now.as_ref().map(|kv| kv.mod_revision) == seen {
                return Ok(response);
            }
        }
        Err(Error::Unavailable(format!("the fence's guard key {:?} keeps changing", self.guard)))
    }

    async fn watch(&self, request: WatchRequest) -> Result<WatchStream> {
        self.inner.watch(request).await
    }

    async fn compact(&self, revision: Revision) -> Result<()> {
        self.inner.compact(revision).await
    }

    async fn status(&self) -> Result<StoreStatus> {
        self.inner.status().await
    }

    async fn stale(&self, key: &str, revision: Revision) -> Result<bool> {
        self.inner.stale(key, revision).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MemStore;

    fn fenced(inner: &Arc<MemStore>, holder: &'static str) -> FencedStore {
        let inner: Arc<dyn Store> = inner.clone();
        FencedStore::new(
            inner,
            "/lease",
            Arc::new(move |kv: Option<&KeyValue>| match kv {
                Some(kv) if kv.value.starts_with(holder.as_bytes()) => Ok(()),
                Some(kv) => Err(format!("held by {}", String::from_utf8_lossy(&kv.value))),
                None => Err("no lease".into()),
            }),
        )
    }

    #[tokio::test]
    async fn writes_land_only_while_the_guard_allows() {
        let inner = Arc::new(MemStore::new());
        let a = fenced(&inner, "a");
        assert!(matches!(a.put("/x", "1".into(), None).await, Err(Error::Fenced { .. })));
        inner.put("/lease", "a:1".into(), None).await.unwrap();
        a.put("/x", "1".into(), None).await.unwrap();
        // Renewed by its holder: still allowed.
        inner.put("/lease", "a:1 renewed".into(), None).await.unwrap();
        let x = a.create("/y", "2".into(), None).await.unwrap();
        // The caller's own guard still decides: a create of an existing key.
        assert!(matches!(a.create("/y", "3".into(), None).await, Err(Error::AlreadyExists { .. })));
        // Taken over: the old holder's writes are refused, reads still work.
        inner.put("/lease", "b:2".into(), None).await.unwrap();
        match a.update("/y", "4".into(), x.mod_revision, None).await {
            Err(Error::Fenced { guard, reason }) => {
                assert_eq!((guard.as_str(), reason.as_str()), ("/lease", "held by b:2"))
            }
            other => panic!("expected a fenced write, got {other:?}"),
        }
        assert!(matches!(a.delete("/y", None).await, Err(Error::Fenced { .. })));
        assert_eq!(a.get("/y").await.unwrap().unwrap().value, "2");
        fenced(&inner, "b").update("/y", "4".into(), x.mod_revision, None).await.unwrap();
    }

    #[tokio::test]
    async fn a_write_racing_a_takeover_does_not_land() {
        // The check passes, then the guard changes before the write: the
        // guard's compare makes the transaction fail, and the re-check
        // refuses it.
        let inner = Arc::new(MemStore::new());
        inner.put("/lease", "a:1".into(), None).await.unwrap();
        let racing = {
            let inner2 = inner.clone();
            let calls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
            let store: Arc<dyn Store> = inner.clone();
            FencedStore::new(
                store,
                "/lease",
                Arc::new(move |kv: Option<&KeyValue>| {
                    let holder_a = kv.is_some_and(|kv| kv.value.starts_with(b"a"));
                    if calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0 {
                        // Another candidate takes the lease right after this check.
                        let inner2 = inner2.clone();
                        std::thread::spawn(move || {
                            futures::executor::block_on(inner2.put("/lease", "b:2".into(), None)).unwrap();
                        })
                        .join()
                        .unwrap();
                    }
                    if holder_a { Ok(()) } else { Err("taken".into()) }
                }),
            )
        };
        assert!(matches!(racing.put("/x", "late".into(), None).await, Err(Error::Fenced { .. })));
        assert!(inner.get("/x").await.unwrap().is_none(), "the late write landed");
    }
}
