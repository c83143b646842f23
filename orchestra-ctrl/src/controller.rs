//! The `Controller` builder: a work queue fed by the shared informers of the
//! primary kind (`for_`), of owned kinds (`owns`) and of related kinds
//! (`watches` with a mapper), drained by a number of workers running a
//! [`Reconciler`]. A failed key goes to the controller's [`ErrorPolicy`]
//! ([`Backoff`] unless [`Controller::error_policy`] sets another); a deleted
//! object of the primary kind goes to [`Reconciler::on_delete`].

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

use kube::Resource;

use crate::informer::{Event, Informer, Kind, ObjectKey, ScopeAll, SharedInformerFactory};
use crate::reconciler::{Action, Backoff, ErrorPolicy, Reconciler};
use crate::workqueue::{RateLimit, WorkQueue};

type Feeder = Box<dyn FnOnce(Arc<WorkQueue<ObjectKey>>) -> tokio::task::JoinHandle<()> + Send>;

/// Builds and runs a controller for kind `K`: a work queue fed by the
/// informers of `K` and of the kinds it owns or watches, drained by workers
/// calling a [`Reconciler`]; failures go to the error policy `P`.
///
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
///
/// use k8s_openapi::api::core::v1::{ConfigMap, Secret};
/// use orchestra_ctrl::Action;
/// use orchestra_ctrl::controller::Controller;
/// use orchestra_ctrl::informer::{ObjectKey, SharedInformerFactory};
///
/// #[derive(Debug, thiserror::Error)]
/// #[error("not ready yet")]
/// struct NotReady;
///
/// async fn reconcile(cm: Arc<ConfigMap>, _: Arc<()>) -> Result<Action, NotReady> {
///     if cm.data.is_none() {
///         return Err(NotReady);
///     }
///     Ok(Action::await_change())
/// }
///
/// # async fn demo(factory: SharedInformerFactory, shutdown: impl std::future::Future<Output = ()> + Send) {
/// Controller::<ConfigMap>::for_(&factory)
///     // A Secret of the same name wakes its ConfigMap.
///     .watches::<Secret>(|s| vec![ObjectKey::of(s)])
///     .error_policy(|_: Arc<ConfigMap>, _: &NotReady, _: Arc<()>| Action::requeue(Duration::from_secs(1)))
///     .concurrency(2)
///     .run(reconcile, Arc::new(()), shutdown)
///     .await;
/// # }
/// ```
pub struct Controller<K, P = Backoff> {
    factory: SharedInformerFactory,
    informer: Arc<Informer<K>>,
    feeders: Vec<Feeder>,
    /// Last versions of deleted objects of `K`, until a worker hands them
    /// to [`Reconciler::on_delete`].
    tombstones: Tombstones<K>,
    concurrency: usize,
    limit: RateLimit,
    queue: Option<Arc<WorkQueue<ObjectKey>>>,
    name: String,
    /// Waits for the owned and watched kinds' informers to list.
    synced: Vec<SyncWait>,
    error_policy: P,
}

type Tombstones<K> = Arc<parking_lot::Mutex<HashMap<ObjectKey, Arc<K>>>>;

/// A future that completes once one informer has listed.
type SyncWait = Box<dyn FnOnce() -> std::pin::Pin<Box<dyn Future<Output = ()> + Send>> + Send>;

fn sync_wait<T: Kind>(informer: Arc<Informer<T>>) -> SyncWait {
    Box::new(move || Box::pin(async move { informer.wait_synced().await }))
}

fn feed<T: Kind>(informer: Arc<Informer<T>>, map: impl Fn(&T) -> Vec<ObjectKey> + Send + Sync + 'static) -> Feeder {
    Box::new(move |queue: Arc<WorkQueue<ObjectKey>>| {
        let mut rx = informer.subscribe();
        tokio::spawn(async move {
            while let Some(event) = rx.recv().await {
                let mut keys = Vec::new();
                match event {
                    Event::Apply { old, new } => {
                        if let Some(old) = old {
                            keys.extend(map(&old));
                        }
                        keys.extend(map(&new));
                    }
                    Event::Delete(old) => keys.extend(map(&old)),
                }
                for key in keys {
                    queue.add(key);
                }
            }
        })
    })
}

/// Feeds the keys of changed objects of the primary kind, keeping the last
/// version of deleted ones for [`Reconciler::on_delete`] (before the key is
/// queued, so the worker taking the key finds it).
fn feed_primary<K: Kind>(informer: Arc<Informer<K>>, tombstones: Tombstones<K>) -> Feeder {
    Box::new(move |queue: Arc<WorkQueue<ObjectKey>>| {
        let mut rx = informer.subscribe();
        tokio::spawn(async move {
            while let Some(event) = rx.recv().await {
                let (key, gone) = match event {
                    // The cache went from one object to another of the same
                    // name (a delete and create it did not see): the first
                    // one is gone.
                    Event::Apply { old: Some(old), new } if old.meta().uid != new.meta().uid => {
                        (ObjectKey::of(new.as_ref()), Some(old))
                    }
                    Event::Apply { new, .. } => (ObjectKey::of(new.as_ref()), None),
                    Event::Delete(old) => (ObjectKey::of(old.as_ref()), Some(old)),
                };
                if let Some(gone) = gone {
                    tombstones.lock().insert(key.clone(), gone);
                }
                queue.add(key);
            }
        })
    })
}

/// The key of the controller owner of `object` if it is of kind `K`.
pub fn controller_owner_key<K: Resource<DynamicType = ()>>(object: &impl Resource) -> Option<ObjectKey> {
    let kind = K::kind(&());
    object
        .meta()
        .owner_references
        .iter()
        .flatten()
        .find(|r| r.controller == Some(true) && r.kind == kind)
        .map(|r| ObjectKey { namespace: object.meta().namespace.clone(), name: r.name.clone() })
}

impl<K: Kind> Controller<K>
where
    K::Scope: ScopeAll,
{
    /// A controller reconciling every object of `K` seen by `factory`, with
    /// the [`Backoff`] error policy.
    pub fn for_(factory: &SharedInformerFactory) -> Self {
        let informer = factory.informer::<K>();
        let tombstones = Tombstones::default();
        let feeders = vec![feed_primary(informer.clone(), tombstones.clone())];
        Self {
            factory: factory.clone(),
            informer,
            feeders,
            tombstones,
            concurrency: 4,
            limit: RateLimit::default(),
            queue: None,
            name: K::kind(&()).to_lowercase(),
            synced: Vec::new(),
            error_policy: Backoff,
        }
    }
}

impl<K: Kind, P> Controller<K, P>
where
    K::Scope: ScopeAll,
{
    /// Decides with `policy` what happens to a key whose reconcile failed
    /// (instead of [`Backoff`]): a function `Fn(Arc<K>, &E, Arc<C>) ->
    /// Action` of the reconciler's error `E` and context `C`, or any
    /// [`ErrorPolicy`].
    pub fn error_policy<Q>(self, policy: Q) -> Controller<K, Q> {
        Controller {
            factory: self.factory,
            informer: self.informer,
            feeders: self.feeders,
            tombstones: self.tombstones,
            concurrency: self.concurrency,
            limit: self.limit,
            queue: self.queue,
            name: self.name,
            synced: self.synced,
            error_policy: policy,
        }
    }

    /// Also reconciles the controller owner (of kind `K`) of each changed `C`.
    pub fn owns<C: Kind>(mut self) -> Self
    where
        C::Scope: ScopeAll,
    {
        let informer = self.factory.informer::<C>();
        self.synced.push(sync_wait(informer.clone()));
        self.feeders.push(feed(informer, |c: &C| controller_owner_key::<K>(c).into_iter().collect()));
        self
    }

    /// Also reconciles the keys `mapper` returns for each changed `W`.
    pub fn watches<W: Kind>(mut self, mapper: impl Fn(&W) -> Vec<ObjectKey> + Send + Sync + 'static) -> Self
    where
        W::Scope: ScopeAll,
    {
        let informer = self.factory.informer::<W>();
        self.synced.push(sync_wait(informer.clone()));
        self.feeders.push(feed(informer, mapper));
        self
    }

    /// Number of workers (keys reconciled at once; default 4).
    pub fn concurrency(mut self, workers: usize) -> Self {
        self.concurrency = workers.max(1);
        self
    }

    /// Backoff and global rate limit of failed keys.
    pub fn rate_limit(mut self, limit: RateLimit) -> Self {
        self.limit = limit;
        self
    }

    /// Name used in logs and metrics.
    pub fn name(mut self, name: &str) -> Self {
        self.name = name.into();
        self
    }

    /// Uses `queue` (e.g. one whose metrics the caller reads) instead of a new one.
    pub fn with_queue(mut self, queue: Arc<WorkQueue<ObjectKey>>) -> Self {
        self.queue = Some(queue);
        self
    }

    /// The queue, created now if needed (to read its metrics, or to add keys
    /// from outside).
    pub fn queue(&mut self) -> Arc<WorkQueue<ObjectKey>> {
        let limit = self.limit.clone();
        self.queue.get_or_insert_with(|| WorkQueue::new(limit)).clone()
    }

    /// The primary kind's informer.
    pub fn informer(&self) -> Arc<Informer<K>> {
        self.informer.clone()
    }

    /// Runs until `shutdown` completes, then lets in-flight reconciles finish.
    /// Workers start once every informer the controller reads (its kind's,
    /// the owned and the watched ones) has listed: a ReplicaSet controller
    /// that saw its ReplicaSets but not yet their pods would create them
    /// again.
    pub async fn run<C, R>(mut self, reconciler: R, ctx: Arc<C>, shutdown: impl Future<Output = ()> + Send)
    where
        C: Send + Sync + 'static,
        R: Reconciler<K, C>,
        P: ErrorPolicy<K, R::Error, C>,
    {
        let queue = self.queue();
        let feeders: Vec<_> = self.feeders.drain(..).map(|f| f(queue.clone())).collect();
        let (synced_tx, synced_rx) = tokio::sync::watch::channel(false);
        let waits: Vec<_> = self.synced.drain(..).map(|wait| wait()).collect();
        let primary = self.informer.clone();
        let gate = tokio::spawn(async move {
            primary.wait_synced().await;
            futures::future::join_all(waits).await;
            let _ = synced_tx.send(true);
        });
        let worker = Arc::new(Worker {
            queue: queue.clone(),
            informer: self.informer.clone(),
            tombstones: self.tombstones.clone(),
            reconciler,
            error_policy: self.error_policy,
            ctx,
            name: self.name.clone(),
        });
        let mut workers = Vec::new();
        for _ in 0..self.concurrency {
            let mut synced = synced_rx.clone();
            let worker = worker.clone();
            workers.push(tokio::spawn(async move {
                // Ends early (Err) if the gate is dropped at shutdown.
                let _ = synced.wait_for(|s| *s).await;
                while let Some(key) = worker.queue.get().await {
                    worker.process(&key).await;
                    worker.queue.done(&key);
                }
            }));
        }
        shutdown.await;
        queue.shut_down();
        gate.abort();
        for f in feeders {
            f.abort();
        }
        for w in workers {
            // Workers stop after their current key: a graceful shutdown.
            let _ = w.await;
        }
    }
}

/// What the workers of a running controller share.
struct Worker<K, C, R, P> {
    queue: Arc<WorkQueue<ObjectKey>>,
    informer: Arc<Informer<K>>,
    tombstones: Tombstones<K>,
    reconciler: R,
    error_policy: P,
    ctx: Arc<C>,
    name: String,
}

impl<K: Kind, C, R, P> Worker<K, C, R, P>
where
    C: Send + Sync + 'static,
    R: Reconciler<K, C>,
    P: ErrorPolicy<K, R::Error, C>,
{
    /// Handles one key: a deletion first, if one was seen, then the cached
    /// object, if there is one.
    async fn process(&self, key: &ObjectKey) {
        let gone = self.tombstones.lock().remove(key);
        if let Some(gone) = gone {
            let started = Instant::now();
            let result = self.reconciler.on_delete(gone.clone(), self.ctx.clone()).await;
            tracing::trace!(controller = %self.name, %key, elapsed = ?started.elapsed(), "deletion handled");
            if let Err(error) = result {
                let action = self.failed(key, gone.clone(), &error);
                if action != Some(Action::AwaitChange) {
                    // Retried: unless a later deletion replaced it meanwhile.
                    self.tombstones.lock().entry(key.clone()).or_insert(gone);
                }
                self.requeue(key, action);
                return;
            }
        }
        let Some(object) = self.informer.get(key) else {
            self.queue.forget(key);
            return;
        };
        let started = Instant::now();
        let result = self.reconciler.reconcile(object.clone(), self.ctx.clone()).await;
        tracing::trace!(controller = %self.name, %key, elapsed = ?started.elapsed(), "reconciled");
        let action = match result {
            Ok(action) => Some(action),
            Err(error) => self.failed(key, object, &error),
        };
        self.requeue(key, action);
    }

    /// The error policy's action for a failure.
    fn failed(&self, key: &ObjectKey, object: Arc<K>, error: &R::Error) -> Option<Action> {
        tracing::debug!(controller = %self.name, %key, %error, "reconcile failed");
        self.error_policy.on_error(object, error, self.ctx.clone())
    }

    /// Queues `key` again as `action` says; `None` with per-key backoff.
    fn requeue(&self, key: &ObjectKey, action: Option<Action>) {
        match action {
            None => self.queue.add_rate_limited(key.clone()),
            Some(Action::AwaitChange) => self.queue.forget(key),
            Some(Action::RequeueAfter(delay)) => {
                self.queue.forget(key);
                self.queue.add_after(key.clone(), delay);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::{Api, DeleteParams, ObjectMeta, PostParams};
    use parking_lot::Mutex;

    use super::*;
    use crate::testing::{FakeCluster, eventually};

    /// The user's own error: which object failed.
    #[derive(Debug, thiserror::Error)]
    #[error("{0} failed")]
    struct Failed(String);

    fn name(cm: &ConfigMap) -> String {
        cm.metadata.name.clone().unwrap_or_default()
    }

    /// What a test's reconciler and error policy saw.
    #[derive(Default)]
    struct Seen {
        /// When each reconcile started.
        reconciles: Mutex<Vec<Instant>>,
        /// The errors the policy was given, as displayed.
        errors: Mutex<Vec<String>>,
        /// The objects `on_delete` was given.
        deleted: Mutex<Vec<String>>,
    }

    /// Fails every reconcile with the object's name; records deletions.
    struct Failing;

    impl Reconciler<ConfigMap, Seen> for Failing {
        type Error = Failed;

        async fn reconcile(&self, cm: Arc<ConfigMap>, seen: Arc<Seen>) -> Result<Action, Failed> {
            seen.reconciles.lock().push(Instant::now());
            Err(Failed(name(&cm)))
        }

        async fn on_delete(&self, cm: Arc<ConfigMap>, seen: Arc<Seen>) -> Result<(), Failed> {
            seen.deleted.lock().push(name(&cm));
            Ok(())
        }
    }

    async fn create(fake: &FakeCluster, name: &str) {
        let cm =
            ConfigMap { metadata: ObjectMeta { name: Some(name.into()), ..Default::default() }, ..Default::default() };
        Api::<ConfigMap>::namespaced(fake.unrecorded(), "default").create(&PostParams::default(), &cm).await.unwrap();
    }

    /// Runs `controller` with [`Failing`] on one new ConfigMap for `window`,
    /// then deletes it and waits for `on_delete`.
    async fn run_failing<P: ErrorPolicy<ConfigMap, Failed, Seen>>(
        fake: &FakeCluster,
        controller: Controller<ConfigMap, P>,
        object: &str,
        window: Duration,
    ) -> Arc<Seen> {
        let seen = Arc::new(Seen::default());
        let (stop, mut stopped) = tokio::sync::watch::channel(false);
        let running = tokio::spawn(controller.run(Failing, seen.clone(), async move {
            let _ = stopped.wait_for(|s| *s).await;
        }));
        create(fake, object).await;
        eventually(Duration::from_secs(5), "a first reconcile", || async { !seen.reconciles.lock().is_empty() }).await;
        tokio::time::sleep(window).await;
        Api::<ConfigMap>::namespaced(fake.unrecorded(), "default")
            .delete(object, &DeleteParams::default())
            .await
            .unwrap();
        eventually(Duration::from_secs(5), "on_delete", || async { !seen.deleted.lock().is_empty() }).await;
        let _ = stop.send(true);
        running.await.unwrap();
        seen
    }

    #[tokio::test]
    async fn the_error_policy_gets_the_users_error_and_its_action_is_honoured() {
        let fake = FakeCluster::new().await;
        let window = Duration::from_millis(600);
        let requeue = Duration::from_millis(200);
        // (object, policy's action (`None`: the default backoff), reconciles in the window)
        let cases: [(&str, Option<Action>, std::ops::RangeInclusive<usize>); 3] = [
            ("await", Some(Action::AwaitChange), 1..=1),
            ("requeue", Some(Action::requeue(requeue)), 2..=4),
            // 5 ms doubling: a few tries within the window.
            ("backoff", None, 5..=usize::MAX),
        ];
        for (object, action, expected) in cases {
            let policy_errors: Arc<Mutex<Vec<String>>> = Arc::default();
            let errors = policy_errors.clone();
            let controller = Controller::<ConfigMap>::for_(fake.factory()).concurrency(1);
            let seen = match action {
                Some(action) => {
                    let controller = controller.error_policy(move |cm: Arc<ConfigMap>, e: &Failed, seen: Arc<Seen>| {
                        assert_eq!(e.0, name(&cm), "the policy gets the failed object");
                        seen.errors.lock().push(e.to_string());
                        errors.lock().push(e.to_string());
                        action
                    });
                    run_failing(&fake, controller, object, window).await
                }
                None => run_failing(&fake, controller, object, window).await,
            };
            let reconciles = seen.reconciles.lock().clone();
            assert!(expected.contains(&reconciles.len()), "{object}: {} reconciles", reconciles.len());
            if action.is_some() {
                assert_eq!(*seen.errors.lock(), vec![format!("{object} failed"); reconciles.len()], "{object}");
            }
            if let Some(Action::RequeueAfter(delay)) = action {
                assert!(reconciles.windows(2).all(|w| w[1] - w[0] >= delay), "{object}: {reconciles:?}");
            }
            assert_eq!(*seen.deleted.lock(), [object], "{object}");
        }
    }

    #[tokio::test]
    async fn on_delete_is_retried_through_the_error_policy() {
        /// Fails the first `on_delete`, then records it.
        struct FlakyDelete(Mutex<usize>);

        impl Reconciler<ConfigMap, Seen> for FlakyDelete {
            type Error = Failed;

            async fn reconcile(&self, _: Arc<ConfigMap>, _: Arc<Seen>) -> Result<Action, Failed> {
                Ok(Action::AwaitChange)
            }

            async fn on_delete(&self, cm: Arc<ConfigMap>, seen: Arc<Seen>) -> Result<(), Failed> {
                let mut tries = self.0.lock();
                *tries += 1;
                if *tries == 1 {
                    return Err(Failed(name(&cm)));
                }
                seen.deleted.lock().push(name(&cm));
                Ok(())
            }
        }

        let fake = FakeCluster::new().await;
        let seen = Arc::new(Seen::default());
        let controller = Controller::<ConfigMap>::for_(fake.factory()).error_policy(
            |_: Arc<ConfigMap>, e: &Failed, seen: Arc<Seen>| {
                seen.errors.lock().push(e.to_string());
                Action::requeue(Duration::from_millis(10))
            },
        );
        let (stop, mut stopped) = tokio::sync::watch::channel(false);
        let running = tokio::spawn(controller.run(FlakyDelete(Mutex::new(0)), seen.clone(), async move {
            let _ = stopped.wait_for(|s| *s).await;
        }));
        create(&fake, "gone").await;
        fake.sync::<ConfigMap>().await;
        Api::<ConfigMap>::namespaced(fake.unrecorded(), "default")
            .delete("gone", &DeleteParams::default())
            .await
            .unwrap();
        eventually(Duration::from_secs(5), "a second on_delete", || async { !seen.deleted.lock().is_empty() }).await;
        assert_eq!(*seen.errors.lock(), ["gone failed"]);
        assert_eq!(*seen.deleted.lock(), ["gone"]);
        let _ = stop.send(true);
        running.await.unwrap();
    }
}
