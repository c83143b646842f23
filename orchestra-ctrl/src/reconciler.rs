//! The `Reconciler` extension point: compare desired with current state for
//! one object and act through the API; and the [`ErrorPolicy`] deciding what
//! happens to an object whose reconcile failed.
//!
//! Deletions reach a reconciler through [`Reconciler::on_delete`], a hook
//! with a default that does nothing, rather than through a separate handler:
//! the hook is called by the same workers, through the same queue, so it
//! never runs at the same time as a reconcile of the same object, it shares
//! the reconciler's state and error type, and its failures go through the
//! same error policy. It is best-effort: an object deleted while no
//! controller watched is not reported. Cleanup that must happen before an
//! object is gone belongs in a finalizer ([`crate::finalizer::finalizer()`]).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

/// What to do with an object's key after a reconcile, or after a failed one
/// (see [`ErrorPolicy`]).
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
/// `Err` goes to the controller's [`ErrorPolicy`] (by default the key is
/// requeued with per-key exponential backoff).
///
/// A function or closure `Fn(Arc<K>, Arc<C>) -> impl Future<Output =
/// Result<Action, E>>` is a reconciler with `Error = E`; a type of its own
/// can also act on deletions:
///
/// ```
/// use std::sync::Arc;
///
/// use k8s_openapi::api::core::v1::ConfigMap;
/// use orchestra_ctrl::{Action, Reconciler};
///
/// #[derive(Debug, thiserror::Error)]
/// #[error("{0} has no data")]
/// struct Empty(String);
///
/// /// Counts the keys of the ConfigMaps it sees, forgets deleted ones.
/// #[derive(Default)]
/// struct Keys(parking_lot::Mutex<std::collections::HashMap<String, usize>>);
///
/// impl Reconciler<ConfigMap, ()> for Keys {
///     type Error = Empty;
///
///     async fn reconcile(&self, cm: Arc<ConfigMap>, _: Arc<()>) -> Result<Action, Empty> {
///         let name = cm.metadata.name.clone().unwrap_or_default();
///         let keys = cm.data.as_ref().map(|d| d.len()).ok_or_else(|| Empty(name.clone()))?;
///         self.0.lock().insert(name, keys);
///         Ok(Action::await_change())
///     }
///
///     async fn on_delete(&self, cm: Arc<ConfigMap>, _: Arc<()>) -> Result<(), Empty> {
///         self.0.lock().remove(cm.metadata.name.as_deref().unwrap_or_default());
///         Ok(())
///     }
/// }
///
/// // A closure: its error type is the one its future returns.
/// let _closure = |_: Arc<ConfigMap>, _: Arc<()>| async { Ok::<_, Empty>(Action::await_change()) };
/// ```
pub trait Reconciler<K, C>: Send + Sync + 'static {
    /// What a failed reconcile reports; the controller's [`ErrorPolicy`]
    /// gets it.
    type Error: std::error::Error + Send + Sync + 'static;

    /// Brings the world closer to what `object` asks for.
    fn reconcile(&self, object: Arc<K>, ctx: Arc<C>) -> impl Future<Output = Result<Action, Self::Error>> + Send;

    /// Called once `object` (its last cached version) was deleted, before
    /// any reconcile of an object of the same name created since. An `Err`
    /// goes to the [`ErrorPolicy`] like a failed reconcile, and the hook is
    /// called again when the key is retried. Does nothing by default.
    fn on_delete(&self, object: Arc<K>, ctx: Arc<C>) -> impl Future<Output = Result<(), Self::Error>> + Send {
        let _ = (object, ctx);
        std::future::ready(Ok(()))
    }
}

impl<K, C, F, Fut, E> Reconciler<K, C> for F
where
    F: Fn(Arc<K>, Arc<C>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Action, E>> + Send,
    E: std::error::Error + Send + Sync + 'static,
{
    type Error = E;

    fn reconcile(&self, object: Arc<K>, ctx: Arc<C>) -> impl Future<Output = Result<Action, E>> + Send {
        (self)(object, ctx)
    }
}

/// Decides what happens to an object whose reconcile (or
/// [`on_delete`](Reconciler::on_delete)) failed with an error `E`.
///
/// A function or closure `Fn(Arc<K>, &E, Arc<C>) -> Action` is a policy
/// whose action is always honoured; [`Backoff`], the default, leaves the
/// delay to the work queue's per-key exponential backoff. A type of its own
/// can do either, per error:
///
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
///
/// use k8s_openapi::api::core::v1::ConfigMap;
/// use orchestra_ctrl::{Action, ErrorPolicy};
/// use orchestra_ctrl::controller::Controller;
/// use orchestra_ctrl::informer::SharedInformerFactory;
///
/// #[derive(Debug, thiserror::Error)]
/// enum Error {
///     #[error("invalid: {0}")]
///     Invalid(String),
///     #[error(transparent)]
///     Api(#[from] kube::Error),
/// }
///
/// /// An invalid object waits for a change; anything else backs off.
/// struct GiveUpOnInvalid;
///
/// impl ErrorPolicy<ConfigMap, Error, ()> for GiveUpOnInvalid {
///     fn on_error(&self, _: Arc<ConfigMap>, error: &Error, _: Arc<()>) -> Option<Action> {
///         matches!(error, Error::Invalid(_)).then(Action::await_change)
///     }
/// }
///
/// # fn build(factory: SharedInformerFactory) {
/// let with_type = Controller::<ConfigMap>::for_(&factory).error_policy(GiveUpOnInvalid);
/// let with_closure = Controller::<ConfigMap>::for_(&factory)
///     .error_policy(|_: Arc<ConfigMap>, _: &Error, _: Arc<()>| Action::requeue(Duration::from_secs(5)));
/// # }
/// ```
pub trait ErrorPolicy<K, E, C>: Send + Sync + 'static {
    /// What to do with `object` after `error`: `Some` action, or `None` to
    /// requeue it with the work queue's per-key exponential backoff.
    fn on_error(&self, object: Arc<K>, error: &E, ctx: Arc<C>) -> Option<Action>;
}

impl<K, E, C, F> ErrorPolicy<K, E, C> for F
where
    F: Fn(Arc<K>, &E, Arc<C>) -> Action + Send + Sync + 'static,
{
    fn on_error(&self, object: Arc<K>, error: &E, ctx: Arc<C>) -> Option<Action> {
        Some((self)(object, error, ctx))
    }
}

/// The default [`ErrorPolicy`]: a failed key is requeued with the work
/// queue's per-key exponential backoff (see
/// [`RateLimit`](crate::workqueue::RateLimit)), reset by its next success.
#[derive(Clone, Copy, Debug, Default)]
pub struct Backoff;

impl<K, E, C> ErrorPolicy<K, E, C> for Backoff {
    fn on_error(&self, _: Arc<K>, _: &E, _: Arc<C>) -> Option<Action> {
        None
    }
}
