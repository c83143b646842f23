//! The `Controller` builder: a work queue fed by the shared informers of the
//! primary kind (`for_`), of owned kinds (`owns`) and of related kinds
//! (`watches` with a mapper), drained by a number of workers running a
//! [`Reconciler`].

use std::future::Future;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Instant;

use kube::Resource;

use crate::informer::{Event, Informer, Kind, ObjectKey, ScopeAll, SharedInformerFactory};
use crate::reconciler::{Action, Reconciler};
use crate::workqueue::{RateLimit, WorkQueue};

type Feeder = Box<dyn FnOnce(Arc<WorkQueue<ObjectKey>>) -> tokio::task::JoinHandle<()> + Send>;

/// Builds and runs a controller for kind `K`.
pub struct Controller<K> {
    factory: SharedInformerFactory,
    informer: Arc<Informer<K>>,
    feeders: Vec<Feeder>,
    concurrency: usize,
    limit: RateLimit,
    queue: Option<Arc<WorkQueue<ObjectKey>>>,
    name: String,
    /// Waits for the owned and watched kinds' informers to list.
    synced: Vec<SyncWait>,
    _kind: PhantomData<fn() -> K>,
}

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
    /// A controller reconciling every object of `K` seen by `factory`.
    pub fn for_(factory: &SharedInformerFactory) -> Self {
        let informer = factory.informer::<K>();
        let feeders = vec![feed(informer.clone(), |o: &K| vec![ObjectKey::of(o)])];
        Self {
            factory: factory.clone(),
            informer,
            feeders,
            concurrency: 4,
            limit: RateLimit::default(),
            queue: None,
            name: K::kind(&()).to_lowercase(),
            synced: Vec::new(),
            _kind: PhantomData,
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
    pub async fn run<C: Send + Sync + 'static>(
        mut self,
        reconciler: impl Reconciler<K, C>,
        ctx: Arc<C>,
        shutdown: impl Future<Output = ()> + Send,
    ) {
        let queue = self.queue();
        let feeders: Vec<_> = self.feeders.drain(..).map(|f| f(queue.clone())).collect();
        let reconciler = Arc::new(reconciler);
        let (synced_tx, synced_rx) = tokio::sync::watch::channel(false);
        let waits: Vec<_> = self.synced.drain(..).map(|wait| wait()).collect();
        let primary = self.informer.clone();
        let gate = tokio::spawn(async move {
            primary.wait_synced().await;
            futures::future::join_all(waits).await;
            let _ = synced_tx.send(true);
        });
        let mut workers = Vec::new();
        for _ in 0..self.concurrency {
            let mut synced = synced_rx.clone();
            let queue = queue.clone();
            let informer = self.informer.clone();
            let reconciler = reconciler.clone();
            let ctx = ctx.clone();
            let name = self.name.clone();
            workers.push(tokio::spawn(async move {
                // Ends early (Err) if the gate is dropped at shutdown.
                let _ = synced.wait_for(|s| *s).await;
                while let Some(key) = queue.get().await {
                    let Some(object) = informer.get(&key) else {
                        queue.forget(&key);
                        queue.done(&key);
                        continue;
                    };
                    let started = Instant::now();
                    let result = reconciler.reconcile(object, ctx.clone()).await;
                    tracing::trace!(controller = %name, %key, elapsed = ?started.elapsed(), "reconciled");
                    match result {
                        Ok(Action::AwaitChange) => queue.forget(&key),
                        Ok(Action::RequeueAfter(d)) => {
                            queue.forget(&key);
                            queue.add_after(key.clone(), d);
                        }
                        Err(e) => {
                            tracing::debug!(controller = %name, %key, error = %e, "reconcile failed");
                            queue.add_rate_limited(key.clone());
                        }
                    }
                    queue.done(&key);
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
