//! The `Reconciler` extension point: compare desired with current state for
//! one object and act through the API.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use crate::Error;

/// What to do with a key after a successful reconcile.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Reconcile again after this delay even if nothing changes.
    RequeueAfter(Duration),
    /// Wait for the next change to the object or to what it watches.
    AwaitChange,
}

impl Action {
    /// Reconcile again after `delay`.
    pub fn requeue(delay: Duration) -> Self {
        Action::RequeueAfter(delay)
    }

    /// Wait for a change.
    pub fn await_change() -> Self {
        Action::AwaitChange
    }
}

/// Reconciles objects of kind `K` with a shared context `C`.
///
/// Contract: `reconcile` is called with the latest cached version of an
/// object, never for the same object on two workers at once; it must be
/// idempotent (it is called again after any change, failure or requeue). An
/// `Err` requeues the key with per-key exponential backoff.
#[async_trait]
pub trait Reconciler<K, C>: Send + Sync + 'static {
    /// Brings the world closer to what `object` asks for.
    async fn reconcile(&self, object: Arc<K>, ctx: Arc<C>) -> Result<Action, Error>;
}

#[async_trait]
impl<K, C, F, Fut> Reconciler<K, C> for F
where
    K: Send + Sync + 'static,
    C: Send + Sync + 'static,
    F: Fn(Arc<K>, Arc<C>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Action, Error>> + Send + 'static,
{
    async fn reconcile(&self, object: Arc<K>, ctx: Arc<C>) -> Result<Action, Error> {
        (self)(object, ctx).await
    }
}
