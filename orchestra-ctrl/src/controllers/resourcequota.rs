//! The ResourceQuota controller: keeps every quota's `status.hard` equal to
//! its `spec.hard` and its `status.used` equal to what the objects of its
//! namespace use, measured by the evaluators the ResourceQuota admission
//! plugin charges with ([`orchestra_core::api::quota`]).
//!
//! Admission charges a quota as objects are created; this controller gives
//! back what objects stop using. Like upstream's, it recomputes a quota
//! when the quota is created or its `spec.hard` changes (not when only its
//! status does: those are admission's charges), when an object a quota
//! counts is deleted or stops using something (a pod terminates, a
//! service changes type, a claim's size changes), and every
//! [`RESYNC`] for every quota, which also corrects charges of writes that
//! failed after admission. Pods, services and claims are read from the
//! shared typed informers; other counted kinds (`count/<resource>.<group>`,
//! custom resources too) from metadata informers started when a quota
//! first counts them.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod, ResourceQuota, ResourceQuotaStatus, Service};
use k8s_openapi::jiff::Timestamp;
use kube::api::PostParams;
use kube::discovery::{ApiResource, Scope};
use kube::{Api, Client};
use orchestra_core::api::quota::{self as usage, Counted, Evaluator, ResourceList};

use crate::Error;
use crate::informer::{Event, Informer, Kind, MetadataObject, ObjectKey, ScopeAll, SharedInformerFactory};
use crate::workqueue::{RateLimit, WorkQueue};

/// Name of the controller.
pub const NAME: &str = "resourcequota-controller";
/// How often every quota is recomputed (upstream's
/// `--resource-quota-sync-period`).
pub const RESYNC: Duration = Duration::from_secs(5 * 60);
/// How long a reconcile waits for a newly started informer to list.
const SYNC_TIMEOUT: Duration = Duration::from_secs(30);

/// What the reconciler works with.
pub struct Context {
    /// Client for writes.
    pub client: Client,
    /// The shared informers, for the kinds counted by name only.
    pub factory: SharedInformerFactory,
    /// Shared ResourceQuota cache.
    pub quotas: Arc<Informer<ResourceQuota>>,
    /// Shared pod cache.
    pub pods: Arc<Informer<Pod>>,
    /// Shared service cache.
    pub services: Arc<Informer<Service>>,
    /// Shared claim cache.
    pub claims: Arc<Informer<PersistentVolumeClaim>>,
    /// The keys of quotas to recompute.
    pub queue: Arc<WorkQueue<ObjectKey>>,
    /// The metadata informers of the resources counted by name only.
    counted: tokio::sync::Mutex<CountedInformers>,
    /// The tasks giving back what their deleted objects used.
    feeders: parking_lot::Mutex<Vec<tokio::task::JoinHandle<()>>>,
}

/// Metadata informers by (group, plural).
type CountedInformers = HashMap<(String, String), Arc<Informer<MetadataObject>>>;

impl Context {
    /// The context of a controller on `factory`'s informers, queueing
    /// quota keys on `queue`.
    pub fn new(factory: &SharedInformerFactory, queue: Arc<WorkQueue<ObjectKey>>) -> Context {
        Context {
            client: factory.client().clone(),
            factory: factory.clone(),
            quotas: factory.informer::<ResourceQuota>(),
            pods: factory.informer::<Pod>(),
            services: factory.informer::<Service>(),
            claims: factory.informer::<PersistentVolumeClaim>(),
            queue,
            counted: Default::default(),
            feeders: Default::default(),
        }
    }

    /// Queues the quotas of `namespace` that count objects of `resource`
    /// (group, plural).
    pub fn enqueue_counting(&self, namespace: &str, resource: &(String, String)) {
        for quota in self.quotas.by_namespace(namespace) {
            let hard = quota.spec.as_ref().and_then(|s| s.hard.as_ref());
            if hard
                .into_iter()
                .flat_map(BTreeMap::keys)
                .any(|name| usage::counted_resource(name).as_ref() == Some(resource))
            {
                self.queue.add(ObjectKey::of(quota.as_ref()));
            }
        }
    }

    /// The listed metadata informer of a resource counted by name only,
    /// started (and watched for deletions) on first use; `None` if the
    /// cluster serves no such namespaced resource.
    async fn counted_objects(
        self: &Arc<Self>,
        group: &str,
        plural: &str,
    ) -> Result<Option<Arc<Informer<MetadataObject>>>, Error> {
        let key = (group.to_owned(), plural.to_owned());
        let mut counted = self.counted.lock().await;
        let informer = match counted.get(&key) {
            Some(informer) => informer.clone(),
            None => {
                let Some(resource) = discover(&self.client, group, plural).await? else { return Ok(None) };
                let informer = self.factory.metadata_informer(&resource);
                let ctx = Arc::downgrade(self);
                let mut events = informer.subscribe();
                let resource = key.clone();
                self.feeders.lock().push(tokio::spawn(async move {
                    while let Some(event) = events.recv().await {
                        let (Event::Delete(gone), Some(ctx)) = (event, ctx.upgrade()) else { continue };
                        ctx.enqueue_counting(gone.metadata.namespace.as_deref().unwrap_or_default(), &resource);
                    }
                }));
                counted.insert(key, informer.clone());
                informer
            }
        };
        drop(counted);
        tokio::time::timeout(SYNC_TIMEOUT, informer.wait_synced())
            .await
            .map_err(|_| Error::Other(format!("the informer of {plural}.{group} has not listed")))?;
        Ok(Some(informer))
    }
}

/// The namespaced resource `group`/`plural` the cluster serves, by discovery.
async fn discover(client: &Client, group: &str, plural: &str) -> Result<Option<ApiResource>, Error> {
    let served = match kube::discovery::group(client, group).await {
        Ok(served) => served,
        Err(kube::Error::Discovery(_)) => return Ok(None),
        Err(error) => return Err(error.into()),
    };
    Ok(served
        .recommended_resources()
        .into_iter()
        .find(|(resource, caps)| resource.plural == plural && caps.scope == Scope::Namespaced)
        .map(|(resource, _)| resource))
}

/// Whether two resource lists hold the same resources in the same amounts.
fn same(a: &ResourceList, b: &ResourceList) -> bool {
    a.len() == b.len() && a.iter().all(|(name, amount)| b.get(name).is_some_and(|o| o.quantity == amount.quantity))
}

/// What the objects of `quota`'s namespace use of the resources of its
/// `spec.hard`. A resource no evaluator measures keeps the usage last
/// recorded, as upstream keeps it.
pub async fn usage(quota: &ResourceQuota, ctx: &Arc<Context>, now: Timestamp) -> Result<ResourceList, Error> {
    let namespace = quota.metadata.namespace.as_deref().unwrap_or_default();
    let hard = quota.spec.as_ref().and_then(|s| s.hard.clone()).unwrap_or_default();
    let mut used = usage::resource_list(quota.status.as_ref().and_then(|s| s.used.as_ref()));
    let counted: BTreeSet<(String, String)> = hard.keys().filter_map(|name| usage::counted_resource(name)).collect();
    for (group, plural) in counted {
        let Some(evaluator) = Evaluator::of(&group, &plural) else { continue };
        let measured = match evaluator {
            Evaluator::Pods => {
                let pods = ctx.pods.by_namespace(namespace);
                evaluator.usage_of(quota, pods.iter().map(|p| Counted::Pod(p)), now)
            }
            Evaluator::Services => {
                let services = ctx.services.by_namespace(namespace);
                evaluator.usage_of(quota, services.iter().map(|s| Counted::Service(s)), now)
            }
            Evaluator::PersistentVolumeClaims => {
                let claims = ctx.claims.by_namespace(namespace);
                evaluator.usage_of(quota, claims.iter().map(|c| Counted::Claim(c)), now)
            }
            Evaluator::Objects { .. } => {
                let Some(objects) = ctx.counted_objects(&group, &plural).await? else { continue };
                let count = objects.by_namespace(namespace).len();
                evaluator.usage_of(quota, std::iter::repeat_n(Counted::Other, count), now)
            }
        };
        used.extend(measured.map_err(|e| Error::Other(e.to_string()))?);
    }
    Ok(usage::mask(&used, hard.keys().map(String::as_str)))
}

/// Recomputes one quota and writes its status if it changed (upstream's
/// `syncResourceQuota`). The write carries the quota's resource version: if
/// admission charged it meanwhile, the write conflicts and the quota is
/// recomputed.
pub async fn reconcile(quota: Arc<ResourceQuota>, ctx: Arc<Context>) -> Result<(), Error> {
    let used = usage(&quota, &ctx, Timestamp::now()).await?;
    let hard = quota.spec.as_ref().and_then(|s| s.hard.clone()).unwrap_or_default();
    let status = quota.status.as_ref();
    let recorded_hard = status.and_then(|s| s.hard.as_ref());
    let recorded_used = status.and_then(|s| s.used.as_ref());
    let dirty = recorded_hard.is_none()
        || recorded_used.is_none()
        || !same(&usage::resource_list(recorded_hard), &usage::resource_list(Some(&hard)))
        || !same(&usage::resource_list(recorded_used), &used);
    if !dirty {
        return Ok(());
    }
    let mut updated = quota.as_ref().clone();
    updated.status = Some(ResourceQuotaStatus { hard: Some(hard), used: Some(usage::to_quantities(&used)) });
    let namespace = quota.metadata.namespace.as_deref().unwrap_or_default();
    let api: Api<ResourceQuota> = Api::namespaced(ctx.client.clone(), namespace);
    let name = quota.metadata.name.as_deref().unwrap_or_default();
    match api.replace_status(name, &PostParams::default(), &updated).await {
        Ok(_) => Ok(()),
        // Deleted meanwhile: nothing to keep.
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Queues, for each change of an object of kind `K`, the quotas of its
/// namespace counting `K` if the change gives back usage: a deletion, or an
/// update for which `released(old, new)` holds.
fn feed_releases<K: Kind>(
    informer: &Arc<Informer<K>>,
    ctx: &Arc<Context>,
    resource: (&str, &str),
    released: fn(&K, &K) -> bool,
) -> tokio::task::JoinHandle<()>
where
    K::Scope: ScopeAll,
{
    let mut events = informer.subscribe();
    let ctx = ctx.clone();
    let resource = (resource.0.to_owned(), resource.1.to_owned());
    tokio::spawn(async move {
        while let Some(event) = events.recv().await {
            let object = match event {
                Event::Delete(gone) => gone,
                Event::Apply { old: Some(old), new } if released(&old, &new) => new,
                Event::Apply { .. } => continue,
            };
            ctx.enqueue_counting(object.meta().namespace.as_deref().unwrap_or_default(), &resource);
        }
    })
}

/// Whether a pod stopped being charged for compute resources.
fn pod_released(old: &Pod, new: &Pod) -> bool {
    let now = Timestamp::now();
    usage::pod_is_charged(old, now) && !usage::pod_is_charged(new, now)
}

/// Whether a service's usage changed (its type, its ports).
fn service_released(old: &Service, new: &Service) -> bool {
    let now = Timestamp::now();
    let measure = |service| Evaluator::Services.usage(&Counted::Service(service), now);
    !same(&measure(old), &measure(new))
}

/// Whether a claim's usage changed (its size, its allocation).
fn claim_released(old: &PersistentVolumeClaim, new: &PersistentVolumeClaim) -> bool {
    let now = Timestamp::now();
    let measure = |claim| Evaluator::PersistentVolumeClaims.usage(&Counted::Claim(claim), now);
    !same(&measure(old), &measure(new))
}

/// Runs the controller until `shutdown`, recomputing every quota each
/// [`RESYNC`].
pub async fn run(factory: SharedInformerFactory, workers: usize, shutdown: impl Future<Output = ()> + Send) {
    run_with(factory, workers, RESYNC, shutdown).await
}

/// [`run`] with another full resync period.
pub async fn run_with(
    factory: SharedInformerFactory,
    workers: usize,
    resync: Duration,
    shutdown: impl Future<Output = ()> + Send,
) {
    let queue = WorkQueue::new(RateLimit::default());
    let ctx = Arc::new(Context::new(&factory, queue.clone()));
    tokio::pin!(shutdown);
    let mut tasks = vec![
        feed_releases(&ctx.pods, &ctx, ("", "pods"), pod_released),
        feed_releases(&ctx.services, &ctx, ("", "services"), service_released),
        feed_releases(&ctx.claims, &ctx, ("", "persistentvolumeclaims"), claim_released),
    ];
    let quotas = ctx.quotas.clone();
    // Workers start once the counted kinds have listed: usage computed from
    // an empty cache would give back what is in use.
    let synced = async {
        let listed = quotas.subscribe_synced().await;
        futures::future::join3(ctx.pods.wait_synced(), ctx.services.wait_synced(), ctx.claims.wait_synced()).await;
        listed
    };
    let (listed, mut changes) = tokio::select! {
        listed = synced => listed,
        () = &mut shutdown => {
            tasks.iter().for_each(tokio::task::JoinHandle::abort);
            return;
        }
    };
    for quota in listed {
        queue.add(ObjectKey::of(quota.as_ref()));
    }
    // New quotas and changed limits; status changes are admission's charges.
    let fed = queue.clone();
    tasks.push(tokio::spawn(async move {
        while let Some(event) = changes.recv().await {
            if let Event::Apply { old, new } = event {
                let hard = |q: &ResourceQuota| q.spec.as_ref().and_then(|s| s.hard.clone());
                if old.is_none_or(|old| hard(&old) != hard(&new)) {
                    fed.add(ObjectKey::of(new.as_ref()));
                }
            }
        }
    }));
    let (every, all) = (queue.clone(), quotas.clone());
    tasks.push(tokio::spawn(async move {
        let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + resync, resync);
        loop {
            ticks.tick().await;
            for quota in all.list() {
                every.add(ObjectKey::of(quota.as_ref()));
            }
        }
    }));
    let mut running = Vec::new();
    for _ in 0..workers.max(1) {
        let ctx = ctx.clone();
        running.push(tokio::spawn(async move {
            while let Some(key) = ctx.queue.get().await {
                let found = ctx.quotas.get(&key);
                let result = match found {
                    Some(quota) => reconcile(quota, ctx.clone()).await,
                    None => Ok(()),
                };
                match result {
                    Ok(()) => ctx.queue.forget(&key),
                    Err(error) => {
                        tracing::debug!(controller = NAME, %key, %error, "quota not synced; retrying");
                        ctx.queue.add_rate_limited(key.clone());
                    }
                }
                ctx.queue.done(&key);
            }
        }));
    }
    shutdown.await;
    queue.shut_down();
    tasks.iter().for_each(tokio::task::JoinHandle::abort);
    ctx.feeders.lock().iter().for_each(tokio::task::JoinHandle::abort);
    for worker in running {
        let _ = worker.await;
    }
}

#[cfg(test)]
mod tests {
    //! Reconciles against a [`FakeCluster`](crate::testing::FakeCluster),
    //! then the running controller.

    use k8s_openapi::api::apps::v1::Deployment;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::DeleteParams;
    use serde_json::{Value, json};

    use super::*;
    use crate::testing::{FakeCluster, eventually};

    fn quota(hard: Value, scopes: Value) -> ResourceQuota {
        serde_json::from_value(
            json!({"metadata": {"name": "q", "namespace": "team"}, "spec": {"hard": hard, "scopes": scopes}}),
        )
        .unwrap()
    }

    fn pod(name: &str, cpu: &str, phase: &str) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "team"},
            "spec": {"containers": [{"name": "app", "image": "busybox", "resources": {"requests": {"cpu": cpu}}}]},
            "status": {"phase": phase},
        }))
        .unwrap()
    }

    fn named<K: serde::de::DeserializeOwned>(name: &str, spec: Value) -> K {
        serde_json::from_value(json!({"metadata": {"name": name, "namespace": "team"}, "spec": spec})).unwrap()
    }

    async fn status(fake: &FakeCluster) -> Value {
        let quota = fake.get::<ResourceQuota>("team", "q").await.unwrap();
        serde_json::to_value(quota.status).unwrap()
    }

    #[tokio::test]
    async fn table() {
        let hard = json!({
            "pods": "10", "requests.cpu": "2", "services": "5", "services.loadbalancers": "1",
            "configmaps": "3", "count/deployments.apps": "2", "count/widgets.example.com": "1",
        });
        let seeded = || {
            FakeCluster::builder()
                .objects(&[pod("a", "500m", "Running"), pod("b", "250m", "Pending"), pod("done", "1", "Succeeded")])
                .object(&named::<Service>("svc", json!({"type": "LoadBalancer", "ports": [{"port": 80}]})))
                .objects(&[named::<ConfigMap>("one", Value::Null), named::<ConfigMap>("two", Value::Null)])
                .object(&named::<Deployment>("web", json!({"selector": {}, "template": {}})))
        };
        let all_used = json!({
            "pods": "2", "requests.cpu": "750m", "services": "1", "services.loadbalancers": "1",
            "configmaps": "2", "count/deployments.apps": "1",
        });
        // (name, quota, status.used after one reconcile); a resource the
        // cluster does not serve has no usage.
        let rows: [(&str, ResourceQuota, Value); 3] = [
            ("every kind counted", quota(hard.clone(), Value::Null), all_used),
            (
                "scoped: only pods in scope, other kinds none",
                quota(json!({"pods": "10", "configmaps": "3"}), json!(["NotBestEffort"])),
                json!({"pods": "2", "configmaps": "0"}),
            ),
            (
                "usage of a name nothing measures is kept",
                {
                    let mut q = quota(json!({"pods": "10", "count/events": "5"}), Value::Null);
                    q.status =
                        Some(serde_json::from_value(json!({"used": {"count/events": "4", "gone": "1"}})).unwrap());
                    q
                },
                json!({"pods": "2", "count/events": "4"}),
            ),
        ];
        for (name, quota, used) in rows {
            let fake = seeded().object(&quota).build().await;
            fake.sync::<Pod>().await;
            fake.sync::<Service>().await;
            fake.sync::<PersistentVolumeClaim>().await;
            let mut ctx = Context::new(fake.factory(), WorkQueue::new(RateLimit::default()));
            ctx.client = fake.client();
            let ctx = Arc::new(ctx);
            let stored = Arc::new(fake.get::<ResourceQuota>("team", "q").await.unwrap());
            reconcile(stored, ctx.clone()).await.expect("reconciles");
            assert_eq!(fake.writes(), ["update resourcequotas/status team/q"], "{name}");
            let hard = serde_json::to_value(&quota.spec.as_ref().unwrap().hard).unwrap();
            assert_eq!(status(&fake).await, json!({"hard": hard, "used": used}), "{name}");
            // Up to date: nothing to write.
            fake.clear_actions();
            let stored = Arc::new(fake.get::<ResourceQuota>("team", "q").await.unwrap());
            reconcile(stored, ctx).await.expect("reconciles");
            assert!(fake.writes().is_empty(), "{name}: {:?}", fake.writes());
        }
    }

    #[tokio::test]
    async fn a_stale_quota_conflicts_and_is_retried() {
        let fake = FakeCluster::builder().object(&quota(json!({"pods": "1"}), Value::Null)).build().await;
        let ctx = Arc::new(Context::new(fake.factory(), WorkQueue::new(RateLimit::default())));
        let stale = Arc::new(fake.get::<ResourceQuota>("team", "q").await.unwrap());
        reconcile(stale.clone(), ctx.clone()).await.expect("reconciles");
        let error = reconcile(stale, ctx).await.unwrap_err();
        assert!(matches!(&error, Error::Kube(kube::Error::Api(s)) if s.code == 409), "{error}");
    }

    #[tokio::test]
    async fn the_running_controller_gives_back_what_objects_stop_using() {
        let fake = FakeCluster::builder()
            .objects(&[pod("a", "500m", "Running"), pod("b", "500m", "Running")])
            .objects(&[named::<ConfigMap>("one", Value::Null), named::<ConfigMap>("two", Value::Null)])
            .object(&quota(json!({"pods": "5", "requests.cpu": "2", "configmaps": "5"}), Value::Null))
            .build()
            .await;
        let (stop, mut stopped) = tokio::sync::watch::channel(false);
        let shutdown = async move {
            let _ = stopped.wait_for(|s| *s).await;
        };
        // A resync longer than the test: only events drive it.
        let running = tokio::spawn(run_with(fake.factory().clone(), 2, Duration::from_secs(3600), shutdown));
        let used = |expected: Value| {
            let fake = &fake;
            async move {
                eventually(Duration::from_secs(10), &format!("status.used {expected}"), || {
                    let expected = expected.clone();
                    async move { status(fake).await.get("used") == Some(&expected) }
                })
                .await;
            }
        };
        used(json!({"pods": "2", "requests.cpu": "1", "configmaps": "2"})).await;
        let client = fake.unrecorded();
        Api::<Pod>::namespaced(client.clone(), "team").delete("a", &DeleteParams::default()).await.unwrap();
        used(json!({"pods": "1", "requests.cpu": "500m", "configmaps": "2"})).await;
        let mut b = fake.get::<Pod>("team", "b").await.unwrap();
        b.status.as_mut().unwrap().phase = Some("Succeeded".into());
        Api::<Pod>::namespaced(client.clone(), "team").replace_status("b", &PostParams::default(), &b).await.unwrap();
        used(json!({"pods": "0", "requests.cpu": "0", "configmaps": "2"})).await;
        Api::<ConfigMap>::namespaced(client.clone(), "team").delete("one", &DeleteParams::default()).await.unwrap();
        used(json!({"pods": "0", "requests.cpu": "0", "configmaps": "1"})).await;
        // A new limit is taken up at once.
        let mut q = fake.get::<ResourceQuota>("team", "q").await.unwrap();
        let services = k8s_openapi::apimachinery::pkg::api::resource::Quantity("3".into());
        q.spec.as_mut().unwrap().hard.as_mut().unwrap().insert("services".into(), services);
        Api::<ResourceQuota>::namespaced(client, "team").replace("q", &PostParams::default(), &q).await.unwrap();
        used(json!({"pods": "0", "requests.cpu": "0", "configmaps": "1", "services": "0"})).await;
        let _ = stop.send(true);
        tokio::time::timeout(Duration::from_secs(5), running).await.expect("the controller stops").unwrap();
    }
}
