//! The ReplicaSet controller: keeps `spec.replicas` active pods matching the
//! selector, adopts matching orphans and releases non-matching pods through
//! ownerReferences, deletes the least useful pods first, reports status, and
//! keeps expectations so a slow watch never makes it create or delete twice.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::{ReplicaSet, ReplicaSetSpec, ReplicaSetStatus};
use k8s_openapi::api::core::v1::{ObjectReference, Pod};
use k8s_openapi::api::core::v1::{ReplicationController, ReplicationControllerStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, OwnerReference};
use kube::api::{DeleteParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use parking_lot::Mutex;

use super::util::{
    can_adopt, controller_of, ignore_not_found, is_active, is_available, is_ready, owner_reference, workload_selects,
};
use crate::controller::Controller;
use crate::events::{EventType, Recorder};
use crate::informer::{Event, Informer, Kind, ObjectKey, SharedInformerFactory};
use crate::workqueue::{RateLimit, WorkQueue};
use crate::{Action, Error};

/// Name of the controller.
pub const NAME: &str = "replicaset-controller";
/// Name of the ReplicationController controller (same logic).
pub const RC_NAME: &str = "replicationcontroller-controller";

/// Most pods created or deleted in one reconcile (upstream's burstReplicas).
pub const BURST_REPLICAS: usize = 500;

const EXPECTATIONS_TTL: Duration = Duration::from_secs(300);

/// Creations and deletions a controller waits to observe, per owner
/// (upstream's UIDTrackingControllerExpectations): creations are counted,
/// deletions are tracked by pod key, so each expected deletion is lowered
/// once however often it is reported (a terminating update, then the
/// delete event, or a delete answered 404 and then the watch's event).
#[derive(Default)]
pub struct Expectations {
    pending: Mutex<HashMap<ObjectKey, Pending>>,
}

/// What one owner waits for.
struct Pending {
    /// Creations not observed yet.
    adds: i64,
    /// Keys of the pods whose deletion is not observed yet.
    dels: HashSet<ObjectKey>,
    /// When these expectations were set.
    at: Instant,
}

impl Expectations {
    /// Expect `adds` creations for `key` (and no deletions).
    pub fn expect_creations(&self, key: &ObjectKey, adds: i64) {
        self.set(key, adds, HashSet::new());
    }

    /// Expect the deletion of the pods keyed `pods` for `key` (and no
    /// creations).
    pub fn expect_deletions(&self, key: &ObjectKey, pods: impl IntoIterator<Item = ObjectKey>) {
        self.set(key, 0, pods.into_iter().collect());
    }

    fn set(&self, key: &ObjectKey, adds: i64, dels: HashSet<ObjectKey>) {
        self.pending.lock().insert(key.clone(), Pending { adds, dels, at: Instant::now() });
    }

    /// One expected creation was observed (or will never happen).
    pub fn creation_observed(&self, key: &ObjectKey) {
        if let Some(e) = self.pending.lock().get_mut(key) {
            e.adds -= 1;
        }
    }

    /// The deletion of the pod keyed `pod` was observed (or will never
    /// happen). Lowers the expectations only if that deletion is awaited,
    /// and only the first time.
    pub fn deletion_observed(&self, key: &ObjectKey, pod: &ObjectKey) {
        if let Some(e) = self.pending.lock().get_mut(key) {
            e.dels.remove(pod);
        }
    }

    /// Whether nothing is pending for `key` (or what is pending has expired).
    pub fn satisfied(&self, key: &ObjectKey) -> bool {
        match self.pending.lock().get(key) {
            None => true,
            Some(e) => (e.adds <= 0 && e.dels.is_empty()) || e.at.elapsed() > EXPECTATIONS_TTL,
        }
    }

    /// Forgets `key`: its owner was deleted, and one created under the same
    /// name must not wait for what it waited for (upstream's
    /// `DeleteExpectations`).
    pub fn remove(&self, key: &ObjectKey) {
        self.pending.lock().remove(key);
    }
}

/// What the ReplicaSet reconciler works with.
pub struct Context {
    /// Client for writes.
    pub client: Client,
    /// The shared pod cache.
    pub pods: Arc<Informer<Pod>>,
    /// Pending creations and deletions.
    pub expectations: Expectations,
    /// Records SuccessfulCreate / FailedCreate / SuccessfulDelete /
    /// FailedDelete events on the owner, as upstream's controller does (`kubectl describe rs`).
    pub recorder: Recorder,
}

impl Context {
    /// Records an event about the owner `owner` (in `namespace`) without
    /// waiting for it, as upstream's broadcaster does.
    fn record(
        &self,
        namespace: Option<&str>,
        owner: &OwnerReference,
        type_: EventType,
        reason: &'static str,
        action: &'static str,
        note: String,
    ) {
        let regarding = ObjectReference {
            api_version: Some(owner.api_version.clone()),
            kind: Some(owner.kind.clone()),
            namespace: namespace.map(str::to_owned),
            name: Some(owner.name.clone()),
            uid: Some(owner.uid.clone()),
            ..Default::default()
        };
        let recorder = self.recorder.clone();
        tokio::spawn(async move {
            if let Err(e) = recorder.publish(regarding, type_, reason, action, &note).await {
                tracing::debug!(error = %e, "event not recorded");
            }
        });
    }
}

/// Deletion preference: lower sorts first (deleted first). Unassigned before
/// assigned, pending before running, not ready before ready, newer before older.
fn deletion_rank(pod: &Pod) -> (u8, u8, u8, std::cmp::Reverse<String>) {
    let assigned = pod.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some_and(|n| !n.is_empty());
    let phase = match pod.status.as_ref().and_then(|s| s.phase.as_deref()) {
        Some("Pending") | None => 0,
        Some("Unknown") => 1,
        _ => 2,
    };
    let created = pod.metadata.creation_timestamp.as_ref().map(|t| t.0.to_string()).unwrap_or_default();
    (u8::from(assigned), phase, u8::from(is_ready(pod)), std::cmp::Reverse(created))
}

/// Picks the `count` pods to delete, most expendable first.
pub fn pods_to_delete(mut pods: Vec<Arc<Pod>>, count: usize) -> Vec<Arc<Pod>> {
    pods.sort_by_key(|p| deletion_rank(p));
    pods.truncate(count);
    pods
}

/// A new pod for `rs` from its template, controlled by `owner`.
pub fn pod_from_template(rs: &ReplicaSet, owner: OwnerReference) -> Pod {
    let template = rs.spec.as_ref().and_then(|s| s.template.clone()).unwrap_or_default();
    let meta = template.metadata.unwrap_or_default();
    Pod {
        metadata: ObjectMeta {
            generate_name: Some(format!("{}-", rs.metadata.name.clone().unwrap_or_default())),
            namespace: rs.metadata.namespace.clone(),
            labels: meta.labels,
            annotations: meta.annotations,
            finalizers: meta.finalizers,
            owner_references: Some(vec![owner]),
            ..Default::default()
        },
        spec: template.spec,
        status: None,
    }
}

/// The status `rs` should report given its active owned pods.
pub fn compute_status(rs: &ReplicaSet, owned: &[Arc<Pod>]) -> ReplicaSetStatus {
    let spec = rs.spec.clone().unwrap_or_default();
    let template_labels =
        spec.template.as_ref().and_then(|t| t.metadata.as_ref()).and_then(|m| m.labels.clone()).unwrap_or_default();
    let min_ready = spec.min_ready_seconds.unwrap_or(0);
    let fully = owned
        .iter()
        .filter(|p| {
            let l = p.metadata.labels.clone().unwrap_or_default();
            template_labels.iter().all(|(k, v)| l.get(k) == Some(v))
        })
        .count() as i32;
    ReplicaSetStatus {
        replicas: owned.len() as i32,
        fully_labeled_replicas: Some(fully),
        ready_replicas: Some(owned.iter().filter(|p| is_ready(p)).count() as i32),
        available_replicas: Some(owned.iter().filter(|p| is_available(p, min_ready)).count() as i32),
        observed_generation: rs.metadata.generation,
        conditions: rs.status.as_ref().and_then(|s| s.conditions.clone()),
        terminating_replicas: None,
    }
}

/// The pods that may concern an owner: those it owns (owner index) and those
/// carrying one of its selector's labels (label index), without scanning the
/// namespace unless the selector has no `matchLabels`.
fn candidates(pods: &Informer<Pod>, namespace: &str, uid: &str, selector: &LabelSelector) -> Vec<Arc<Pod>> {
    let Some((k, v)) = selector.match_labels.as_ref().and_then(|m| m.iter().next()) else {
        return pods.by_namespace(namespace);
    };
    let mut out = pods.by_owner(uid);
    let mut seen: std::collections::HashSet<String> = out.iter().filter_map(|p| p.metadata.uid.clone()).collect();
    for pod in pods.by_label(k, v) {
        if pod.metadata.namespace.as_deref() == Some(namespace)
            && seen.insert(pod.metadata.uid.clone().unwrap_or_default())
        {
            out.push(pod);
        }
    }
    out
}

/// One reconcile of a ReplicaSet.
pub async fn reconcile(rs: Arc<ReplicaSet>, ctx: Arc<Context>) -> Result<Action, Error> {
    let (active, terminating) = sync(&rs, owner_reference(rs.as_ref()), &ctx).await?;
    let key = ObjectKey::of(rs.as_ref());
    let namespace = key.namespace.clone().unwrap_or_default();
    let spec = rs.spec.clone().unwrap_or_default();
    let mut status = compute_status(&rs, &active);
    // Pods being deleted that still run: a Recreate Deployment waits for them.
    status.terminating_replicas = (terminating > 0).then_some(terminating);
    if rs.status.as_ref() != Some(&status) {
        let api: Api<ReplicaSet> = Api::namespaced(ctx.client.clone(), &namespace);
        let patch = serde_json::json!({"status": status});
        ignore_not_found(api.patch_status(&key.name, &PatchParams::default(), &Patch::Merge(&patch)).await)?;
    }
    let min_ready = spec.min_ready_seconds.unwrap_or(0);
    if min_ready > 0 && status.ready_replicas != status.available_replicas {
        return Ok(Action::requeue(Duration::from_secs(min_ready as u64)));
    }
    Ok(Action::await_change())
}

/// A ReplicationController seen as the ReplicaSet it is equivalent to
/// (map selector → matchLabels, defaulting to the template's labels).
pub fn as_replica_set(rc: &ReplicationController) -> ReplicaSet {
    let spec = rc.spec.clone().unwrap_or_default();
    let template_labels = spec.template.as_ref().and_then(|t| t.metadata.as_ref()).and_then(|m| m.labels.clone());
    ReplicaSet {
        metadata: rc.metadata.clone(),
        spec: Some(ReplicaSetSpec {
            replicas: spec.replicas,
            min_ready_seconds: spec.min_ready_seconds,
            selector: LabelSelector {
                match_labels: spec.selector.clone().filter(|s| !s.is_empty()).or(template_labels),
                match_expressions: None,
            },
            template: spec.template,
        }),
        status: None,
    }
}

/// One reconcile of a ReplicationController.
pub async fn reconcile_rc(rc: Arc<ReplicationController>, ctx: Arc<Context>) -> Result<Action, Error> {
    let view = as_replica_set(&rc);
    let (active, _) = sync(&view, owner_reference(rc.as_ref()), &ctx).await?;
    let s = compute_status(&view, &active);
    let status = ReplicationControllerStatus {
        replicas: s.replicas,
        fully_labeled_replicas: s.fully_labeled_replicas,
        ready_replicas: s.ready_replicas,
        available_replicas: s.available_replicas,
        observed_generation: s.observed_generation,
        conditions: rc.status.as_ref().and_then(|s| s.conditions.clone()),
    };
    if rc.status.as_ref() != Some(&status) {
        let key = ObjectKey::of(rc.as_ref());
        let api: Api<ReplicationController> =
            Api::namespaced(ctx.client.clone(), key.namespace.as_deref().unwrap_or_default());
        let patch = serde_json::json!({"status": status});
        ignore_not_found(api.patch_status(&key.name, &PatchParams::default(), &Patch::Merge(&patch)).await)?;
    }
    Ok(Action::await_change())
}

/// Claims pods for `rs` (controlled through `owner`), creates or deletes
/// pods toward `spec.replicas`, and returns the active owned pods and how
/// many owned pods are being deleted but not terminated yet.
async fn sync(rs: &ReplicaSet, owner: OwnerReference, ctx: &Context) -> Result<(Vec<Arc<Pod>>, i32), Error> {
    let key = ObjectKey::of(rs);
    let namespace = key.namespace.clone().unwrap_or_default();
    let pods_api: Api<Pod> = Api::namespaced(ctx.client.clone(), &namespace);
    let uid = rs.metadata.uid.clone().unwrap_or_default();
    let spec = rs.spec.clone().unwrap_or_default();
    let deleting = rs.metadata.deletion_timestamp.is_some();
    // Expectations first, the cache second (upstream's order): the observer
    // lowers them only after the informer has cached the pod, so once they
    // are satisfied every pod they waited for is in the cache read below.
    // Read after the cache, they could be met by pods that read missed
    // (the claim below may even await the API server in between), and the
    // missing pods would be created again.
    let needs_sync = ctx.expectations.satisfied(&key);

    // Claim: keep owned matching pods, release owned non-matching, adopt orphans.
    let mut owned = Vec::new();
    let mut adoptable = None;
    for pod in candidates(&ctx.pods, &namespace, &uid, &spec.selector) {
        let matches = workload_selects(&spec.selector, pod.metadata.labels.as_ref());
        match controller_of(pod.as_ref()) {
            Some(r) if r.uid == uid => {
                if matches {
                    owned.push(pod);
                } else if !deleting {
                    let refs: Vec<_> =
                        pod.metadata.owner_references.iter().flatten().filter(|r| r.uid != uid).cloned().collect();
                    let patch = serde_json::json!({"metadata": {"ownerReferences": refs, "uid": pod.metadata.uid}});
                    let name = pod.metadata.name.clone().unwrap_or_default();
                    ignore_not_found(pods_api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch)).await)?;
                }
            }
            None if matches && !deleting && pod.metadata.deletion_timestamp.is_none() => {
                if adoptable.is_none() {
                    adoptable = Some(can_adopt(&ctx.client, &namespace, &owner).await?);
                }
                if adoptable == Some(false) {
                    continue;
                }
                let mut refs = pod.metadata.owner_references.clone().unwrap_or_default();
                refs.push(owner.clone());
                let patch = serde_json::json!({"metadata": {"ownerReferences": refs, "uid": pod.metadata.uid}});
                let name = pod.metadata.name.clone().unwrap_or_default();
                if ignore_not_found(pods_api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch)).await)?
                    .is_some()
                {
                    owned.push(pod);
                }
            }
            _ => {}
        }
    }
    let terminating = owned
        .iter()
        .filter(|p| {
            p.metadata.deletion_timestamp.is_some()
                && !matches!(p.status.as_ref().and_then(|s| s.phase.as_deref()), Some("Succeeded" | "Failed"))
        })
        .count() as i32;
    let active: Vec<Arc<Pod>> = owned.into_iter().filter(|p| is_active(p)).collect();

    if needs_sync && !deleting {
        let want = spec.replicas.unwrap_or(1).max(0) as usize;
        if active.len() < want {
            let missing = (want - active.len()).min(BURST_REPLICAS);
            ctx.expectations.expect_creations(&key, missing as i64);
            let pod = pod_from_template(rs, owner.clone());
            // Slow start: batches of 1, 2, 4, ... stop at the first failure.
            let mut created = 0;
            let mut batch = 1;
            let mut failure = None;
            while created < missing && failure.is_none() {
                let n = batch.min(missing - created);
                let results = futures::future::join_all((0..n).map(|_| {
                    let api = pods_api.clone();
                    let pod = pod.clone();
                    async move { api.create(&PostParams::default(), &pod).await }
                }))
                .await;
                let namespace = rs.metadata.namespace.as_deref();
                for r in results {
                    match r {
                        Ok(pod) => {
                            created += 1;
                            let name = pod.metadata.name.unwrap_or_default();
                            ctx.record(
                                namespace,
                                &owner,
                                EventType::Normal,
                                "SuccessfulCreate",
                                "Create",
                                format!("Created pod: {name}"),
                            );
                        }
                        Err(e) => {
                            // Lowered below with the skipped ones (`created..missing`).
                            ctx.record(
                                namespace,
                                &owner,
                                EventType::Warning,
                                "FailedCreate",
                                "Create",
                                format!("Error creating: {e}"),
                            );
                            failure = Some(e);
                        }
                    }
                }
                batch *= 2;
            }
            for _ in created..missing {
                ctx.expectations.creation_observed(&key);
            }
            if let Some(e) = failure {
                return Err(e.into());
            }
        } else if active.len() > want {
            let extra = (active.len() - want).min(BURST_REPLICAS);
            let victims = pods_to_delete(active.clone(), extra);
            ctx.expectations.expect_deletions(&key, victims.iter().map(|p| ObjectKey::of(p.as_ref())));
            let results = futures::future::join_all(victims.iter().map(|p| {
                let name = p.metadata.name.clone().unwrap_or_default();
                let api = pods_api.clone();
                async move { api.delete(&name, &DeleteParams::default()).await }
            }))
            .await;
            // Every delete was sent: account for each answer before failing
            // (upstream waits for all of them too), or the deletions whose
            // answers were not looked at would stay expected until the
            // expectations expire.
            let namespace = rs.metadata.namespace.as_deref();
            let mut failure = None;
            for (r, victim) in results.into_iter().zip(&victims) {
                let name = victim.metadata.name.as_deref().unwrap_or_default();
                match r {
                    Ok(_) => ctx.record(
                        namespace,
                        &owner,
                        EventType::Normal,
                        "SuccessfulDelete",
                        "Delete",
                        format!("Deleted pod: {name}"),
                    ),
                    Err(e) => {
                        // The watch will not report this deletion (a 404: it
                        // is gone already, and a report of it no longer
                        // counts), or not now: stop awaiting it.
                        ctx.expectations.deletion_observed(&key, &ObjectKey::of(victim.as_ref()));
                        if !matches!(&e, kube::Error::Api(s) if s.code == 404) {
                            ctx.record(
                                namespace,
                                &owner,
                                EventType::Warning,
                                "FailedDelete",
                                "Delete",
                                format!("Error deleting: {e}"),
                            );
                            failure.get_or_insert(e);
                        }
                    }
                }
            }
            if let Some(e) = failure {
                return Err(e.into());
            }
        }
    }

    Ok((active, terminating))
}

/// Runs the ReplicaSet controller on `factory`'s informers until `shutdown`.
pub async fn run(factory: SharedInformerFactory, workers: usize, shutdown: impl Future<Output = ()> + Send) {
    let queue = WorkQueue::new(RateLimit::default());
    run_with_queue(factory, workers, queue, shutdown).await
}

/// Wakes owners of kind `K` on pod changes, lowering their expectations,
/// and forgets the expectations of deleted owners.
fn observe<K: Kind>(
    pods: &Informer<Pod>,
    owners: Arc<Informer<K>>,
    ctx: Arc<Context>,
    queue: Arc<WorkQueue<ObjectKey>>,
) -> tokio::task::JoinHandle<()> {
    let mut rx = pods.subscribe();
    let mut owner_rx = owners.subscribe();
    tokio::spawn(async move {
        let pod_changes = async {
            while let Some(event) = rx.recv().await {
                pod_changed(&event, &owners, &ctx, &queue);
            }
        };
        let owner_changes = async {
            while let Some(event) = owner_rx.recv().await {
                owner_changed(&event, &ctx, &queue);
            }
        };
        tokio::join!(pod_changes, owner_changes);
    })
}

/// Lowers the expectations of the controller (of kind `K`) of the pod
/// `event` is about and wakes it; wakes every owner in the namespace of an
/// orphan.
fn pod_changed<K: Kind>(event: &Event<Pod>, owners: &Informer<K>, ctx: &Context, queue: &WorkQueue<ObjectKey>) {
    let (pod, created, deleted) = match event {
        Event::Apply { old: None, new } => (new.clone(), true, false),
        Event::Apply { old: Some(old), new } => {
            (new.clone(), false, old.metadata.deletion_timestamp.is_none() && new.metadata.deletion_timestamp.is_some())
        }
        // Also when its terminating update was seen: a deletion is lowered
        // once however often it is reported.
        Event::Delete(old) => (old.clone(), false, true),
    };
    let Some(owner) = crate::controller::controller_owner_key::<K>(pod.as_ref()) else {
        if controller_of(pod.as_ref()).is_none()
            && let Some(ns) = &pod.metadata.namespace
        {
            // An orphan may be adopted by any owner in its namespace.
            for o in owners.by_namespace(ns) {
                queue.add(ObjectKey::of(o.as_ref()));
            }
        }
        return;
    };
    if created {
        ctx.expectations.creation_observed(&owner);
    }
    if deleted {
        ctx.expectations.deletion_observed(&owner, &ObjectKey::of(pod.as_ref()));
    }
    queue.add(owner);
}

/// Forgets the expectations of a deleted owner (upstream's `deleteRS`), also
/// when the delete was missed and the cache went straight to an owner of the
/// same name with another uid, then wakes the key: what is under that name
/// now starts from no expectations.
fn owner_changed<K: Kind>(event: &Event<K>, ctx: &Context, queue: &WorkQueue<ObjectKey>) {
    let gone = match event {
        Event::Delete(old) => old,
        Event::Apply { old: Some(old), new } if old.meta().uid != new.meta().uid => old,
        Event::Apply { .. } => return,
    };
    let key = ObjectKey::of(gone.as_ref());
    ctx.expectations.remove(&key);
    queue.add(key);
}

/// [`run`] with a queue the caller keeps (to read its metrics).
pub async fn run_with_queue(
    factory: SharedInformerFactory,
    workers: usize,
    queue: Arc<WorkQueue<ObjectKey>>,
    shutdown: impl Future<Output = ()> + Send,
) {
    let pods = factory.informer::<Pod>();
    let ctx = Arc::new(Context {
        client: factory.client().clone(),
        pods: pods.clone(),
        expectations: Expectations::default(),
        recorder: Recorder::new(factory.client().clone(), NAME, NAME),
    });
    let controller = Controller::<ReplicaSet>::for_(&factory).with_queue(queue.clone()).name(NAME).concurrency(workers);
    let observer = observe(&pods, controller.informer(), ctx.clone(), queue);
    controller.run(reconcile, ctx, shutdown).await;
    observer.abort();
}

/// Runs the ReplicationController controller until `shutdown`.
pub async fn run_replication_controllers(
    factory: SharedInformerFactory,
    workers: usize,
    shutdown: impl Future<Output = ()> + Send,
) {
    let pods = factory.informer::<Pod>();
    let ctx = Arc::new(Context {
        client: factory.client().clone(),
        pods: pods.clone(),
        expectations: Expectations::default(),
        recorder: Recorder::new(factory.client().clone(), RC_NAME, RC_NAME),
    });
    let queue = WorkQueue::new(RateLimit::default());
    let controller = Controller::<ReplicationController>::for_(&factory)
        .with_queue(queue.clone())
        .name(RC_NAME)
        .concurrency(workers);
    let observer = observe(&pods, controller.informer(), ctx.clone(), queue);
    controller.run(reconcile_rc, ctx, shutdown).await;
    observer.abort();
}
#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{PodCondition, PodSpec, PodStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    /// A test pod builder: `make_pod("p").node("n").phase("Running").ready().build()`.
    struct PodBuilder(Pod);

    fn make_pod(name: &str) -> PodBuilder {
        PodBuilder(Pod {
            metadata: ObjectMeta { name: Some(name.into()), namespace: Some("default".into()), ..Default::default() },
            spec: Some(PodSpec::default()),
            status: Some(PodStatus::default()),
        })
    }

    impl PodBuilder {
        fn node(mut self, n: &str) -> Self {
            self.0.spec.as_mut().unwrap().node_name = Some(n.into());
            self
        }
        fn phase(mut self, p: &str) -> Self {
            self.0.status.as_mut().unwrap().phase = Some(p.into());
            self
        }
        fn ready(mut self) -> Self {
            self.0.status.as_mut().unwrap().conditions =
                Some(vec![PodCondition { type_: "Ready".into(), status: "True".into(), ..Default::default() }]);
            self
        }
        fn created(mut self, secs: i64) -> Self {
            self.0.metadata.creation_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::from_second(secs).unwrap()));
            self
        }
        fn build(self) -> Arc<Pod> {
            Arc::new(self.0)
        }
    }

    #[test]
    fn deletion_preference() {
        // (pods, how many to delete) -> the ones deleted, in order.
        type Row = (Vec<Arc<Pod>>, usize, Vec<&'static str>);
        let table: Vec<Row> = vec![
            (
                vec![make_pod("running").node("n").phase("Running").ready().build(), make_pod("unscheduled").build()],
                1,
                vec!["unscheduled"],
            ),
            (
                vec![
                    make_pod("ready").node("n").phase("Running").ready().build(),
                    make_pod("not-ready").node("n").phase("Running").build(),
                ],
                1,
                vec!["not-ready"],
            ),
            (
                vec![
                    make_pod("old").node("n").phase("Running").ready().created(100).build(),
                    make_pod("new").node("n").phase("Running").ready().created(200).build(),
                ],
                1,
                vec!["new"],
            ),
            (
                vec![
                    make_pod("running").node("n").phase("Running").build(),
                    make_pod("pending").node("n").phase("Pending").build(),
                    make_pod("unscheduled").build(),
                ],
                2,
                vec!["unscheduled", "pending"],
            ),
        ];
        for (pods, count, expected) in table {
            let got: Vec<String> =
                pods_to_delete(pods, count).iter().map(|p| p.metadata.name.clone().unwrap()).collect();
            assert_eq!(got, expected);
        }
    }

    #[test]
    fn expectations_wait_for_observations() {
        let e = Expectations::default();
        let k = ObjectKey::new("default", "rs");
        assert!(e.satisfied(&k));
        e.expect_creations(&k, 2);
        assert!(!e.satisfied(&k));
        e.creation_observed(&k);
        assert!(!e.satisfied(&k));
        e.creation_observed(&k);
        assert!(e.satisfied(&k));
    }

    mod reconcile {
        //! One reconcile against a [`FakeCluster`]: objects in, requests
        //! and objects out.

        use super::super::*;
        use crate::testing::FakeCluster;
        use serde_json::json;

        const RS_UID: &str = "rs-uid";

        fn replica_set(replicas: i32) -> ReplicaSet {
            serde_json::from_value(json!({
                "metadata": {"name": "web", "namespace": "default", "uid": RS_UID, "generation": 4},
                "spec": {
                    "replicas": replicas,
                    "selector": {"matchLabels": {"app": "web"}},
                    "template": {
                        "metadata": {"labels": {"app": "web"}},
                        "spec": {"containers": [{"name": "c", "image": "nginx"}]},
                    },
                },
            }))
            .unwrap()
        }

        /// What a row's pod looks like.
        #[derive(Clone, Copy)]
        enum State {
            /// Not bound to a node.
            Unscheduled,
            /// Running, not ready.
            NotReady,
            /// Running and ready.
            Ready,
        }

        /// Whose the pod is.
        #[derive(Clone, Copy)]
        enum Owner {
            /// Controlled by the ReplicaSet.
            Ours,
            /// Controlled by nobody.
            Orphan,
            /// Controlled by another ReplicaSet.
            Theirs,
        }

        fn pod(name: &str, app: &str, owner: Owner, state: State, created: i64) -> Pod {
            let mut pod = json!({
                "metadata": {
                    "name": name, "namespace": "default", "uid": format!("uid-{name}"),
                    "labels": {"app": app},
                    "creationTimestamp": k8s_openapi::jiff::Timestamp::from_second(created).unwrap().to_string(),
                },
                "spec": {"containers": [{"name": "c", "image": "nginx"}]},
                "status": {"phase": "Pending"},
            });
            let controller = match owner {
                Owner::Ours => Some(("web", RS_UID)),
                Owner::Theirs => Some(("other", "other-uid")),
                Owner::Orphan => None,
            };
            if let Some((name, uid)) = controller {
                pod["metadata"]["ownerReferences"] = json!([{
                    "apiVersion": "apps/v1", "kind": "ReplicaSet", "name": name, "uid": uid,
                    "controller": true, "blockOwnerDeletion": true,
                }]);
            }
            if !matches!(state, State::Unscheduled) {
                pod["spec"]["nodeName"] = json!("node-1");
                pod["status"] = json!({
                    "phase": "Running",
                    "conditions": [{"type": "Ready", "status": if matches!(state, State::Ready) { "True" } else { "False" }}],
                });
            }
            serde_json::from_value(pod).unwrap()
        }

        async fn context(fake: &FakeCluster) -> Arc<Context> {
            context_with(fake, fake.client(), fake.informer::<Pod>().await)
        }

        /// A context writing through `client` and reading pods from `pods`.
        fn context_with(fake: &FakeCluster, client: Client, pods: Arc<Informer<Pod>>) -> Arc<Context> {
            Arc::new(Context {
                client,
                pods,
                expectations: Expectations::default(),
                recorder: Recorder::new(fake.client(), NAME, NAME),
            })
        }

        async fn reconcile_web(fake: &FakeCluster, ctx: &Arc<Context>) {
            let rs: ReplicaSet = fake.get("default", "web").await.expect("the ReplicaSet exists");
            reconcile(Arc::new(rs), ctx.clone()).await.expect("reconciles");
        }

        fn controller_uid(pod: &Pod) -> Option<String> {
            controller_of(pod).map(|r| r.uid.clone())
        }

        struct Row {
            name: &'static str,
            replicas: i32,
            pods: Vec<Pod>,
            /// Writes, sorted (creations and deletions run concurrently).
            writes: &'static [&'static str],
            /// Pods left (not being deleted) and their controller, sorted by name.
            pods_after: &'static [(&'static str, Option<&'static str>)],
            /// Events on the ReplicaSet, sorted.
            events: &'static [&'static str],
        }

        #[tokio::test]
        async fn table() {
            use Owner::*;
            use State::*;
            let rows = [
                Row {
                    name: "creates the missing pods",
                    replicas: 3,
                    pods: vec![pod("a", "web", Ours, Ready, 100)],
                    writes: &[
                        "create pods default/web-",
                        "create pods default/web-",
                        "patch replicasets/status default/web",
                    ],
                    pods_after: &[("a", Some(RS_UID))],
                    events: &[],
                },
                Row {
                    name: "deletes an unscheduled pod first",
                    replicas: 2,
                    pods: vec![
                        pod("a", "web", Ours, Ready, 100),
                        pod("b", "web", Ours, Unscheduled, 50),
                        pod("c", "web", Ours, NotReady, 100),
                    ],
                    writes: &["delete pods default/b", "patch replicasets/status default/web"],
                    pods_after: &[("a", Some(RS_UID)), ("c", Some(RS_UID))],
                    events: &["Normal SuccessfulDelete Deleted pod: b"],
                },
                Row {
                    name: "then not-ready pods, then the newest",
                    replicas: 1,
                    pods: vec![
                        pod("old", "web", Ours, Ready, 100),
                        pod("new", "web", Ours, Ready, 200),
                        pod("not-ready", "web", Ours, NotReady, 50),
                    ],
                    writes: &[
                        "delete pods default/new",
                        "delete pods default/not-ready",
                        "patch replicasets/status default/web",
                    ],
                    pods_after: &[("old", Some(RS_UID))],
                    events: &[
                        "Normal SuccessfulDelete Deleted pod: new",
                        "Normal SuccessfulDelete Deleted pod: not-ready",
                    ],
                },
                Row {
                    name: "adopts a matching orphan instead of creating",
                    replicas: 2,
                    pods: vec![
                        pod("a", "web", Ours, Ready, 100),
                        pod("orphan", "web", Orphan, Ready, 100),
                        pod("other", "db", Orphan, Ready, 100),
                    ],
                    writes: &["patch pods default/orphan", "patch replicasets/status default/web"],
                    pods_after: &[("a", Some(RS_UID)), ("orphan", Some(RS_UID)), ("other", None)],
                    events: &[],
                },
                Row {
                    name: "releases an owned pod that stopped matching and replaces it",
                    replicas: 1,
                    pods: vec![pod("relabelled", "db", Ours, Ready, 100)],
                    writes: &[
                        "create pods default/web-",
                        "patch pods default/relabelled",
                        "patch replicasets/status default/web",
                    ],
                    pods_after: &[("relabelled", None)],
                    events: &[],
                },
                Row {
                    name: "another controller's pod is neither adopted nor counted",
                    replicas: 1,
                    pods: vec![pod("theirs", "web", Theirs, Ready, 100)],
                    writes: &["create pods default/web-", "patch replicasets/status default/web"],
                    pods_after: &[("theirs", Some("other-uid"))],
                    events: &[],
                },
                Row {
                    name: "scaled to zero: every pod goes",
                    replicas: 0,
                    pods: vec![pod("a", "web", Ours, Ready, 100), pod("b", "web", Ours, Unscheduled, 100)],
                    writes: &["delete pods default/a", "delete pods default/b", "patch replicasets/status default/web"],
                    pods_after: &[],
                    events: &["Normal SuccessfulDelete Deleted pod: a", "Normal SuccessfulDelete Deleted pod: b"],
                },
                Row {
                    name: "in sync: writes nothing but status",
                    replicas: 2,
                    pods: vec![pod("a", "web", Ours, Ready, 100), pod("b", "web", Ours, NotReady, 100)],
                    writes: &["patch replicasets/status default/web"],
                    pods_after: &[("a", Some(RS_UID)), ("b", Some(RS_UID))],
                    events: &[],
                },
            ];
            for row in rows {
                let fake = FakeCluster::builder().object(&replica_set(row.replicas)).objects(&row.pods).build().await;
                let ctx = context(&fake).await;
                reconcile_web(&fake, &ctx).await;
                let mut writes = fake.writes();
                writes.sort();
                assert_eq!(writes, row.writes, "{}", row.name);
                let after: Vec<(String, Option<String>)> = fake
                    .list::<Pod>("default")
                    .await
                    .iter()
                    .filter(|p| p.metadata.generate_name.is_none() && p.metadata.deletion_timestamp.is_none())
                    .map(|p| (p.metadata.name.clone().unwrap(), controller_uid(p)))
                    .collect();
                let expected: Vec<(String, Option<String>)> =
                    row.pods_after.iter().map(|(n, o)| (n.to_string(), o.map(str::to_owned))).collect();
                assert_eq!(after, expected, "{}", row.name);
                let created = fake
                    .list::<Pod>("default")
                    .await
                    .into_iter()
                    .filter(|p| p.metadata.generate_name.is_some())
                    .collect::<Vec<_>>();
                let creations = row.writes.iter().filter(|w| w.starts_with("create")).count();
                assert_eq!(created.len(), creations, "{}", row.name);
                for p in &created {
                    // From the template, controlled by the ReplicaSet.
                    assert_eq!(controller_uid(p).as_deref(), Some(RS_UID), "{}", row.name);
                    assert_eq!(p.metadata.labels.as_ref().unwrap()["app"], "web", "{}", row.name);
                }
                let mut expected_events: Vec<String> = row.events.iter().map(|e| e.to_string()).collect();
                expected_events.extend(
                    created.iter().map(|p| {
                        format!("Normal SuccessfulCreate Created pod: {}", p.metadata.name.as_deref().unwrap())
                    }),
                );
                expected_events.sort();
                assert_eq!(fake.events("default", expected_events.len()).await, expected_events, "{}", row.name);
            }
        }

        #[tokio::test]
        async fn status_reports_the_owned_pods() {
            let pods = [
                pod("ready", "web", Owner::Ours, State::Ready, 100),
                pod("not-ready", "web", Owner::Ours, State::NotReady, 100),
                pod("unscheduled", "web", Owner::Ours, State::Unscheduled, 100),
            ];
            let fake = FakeCluster::builder().object(&replica_set(3)).objects(&pods).build().await;
            let ctx = context(&fake).await;
            reconcile_web(&fake, &ctx).await;
            assert_eq!(fake.writes(), ["patch replicasets/status default/web"]);
            let status = fake.get::<ReplicaSet>("default", "web").await.unwrap().status.unwrap();
            assert_eq!(status.replicas, 3);
            assert_eq!(status.fully_labeled_replicas, Some(3));
            assert_eq!(status.ready_replicas, Some(1));
            assert_eq!(status.available_replicas, Some(1));
            assert_eq!(status.observed_generation, Some(4));
            // Nothing changed: no second status write.
            fake.sync::<ReplicaSet>().await;
            fake.clear_actions();
            reconcile_web(&fake, &ctx).await;
            assert_eq!(fake.writes(), Vec::<String>::new());
        }

        #[tokio::test]
        async fn pods_come_from_the_template() {
            let mut rs = replica_set(1);
            let meta = rs.spec.as_mut().unwrap().template.as_mut().unwrap().metadata.as_mut().unwrap();
            meta.annotations = Some([("note".to_string(), "x".to_string())].into());
            meta.finalizers = Some(vec!["example.com/keep".into()]);
            let fake = FakeCluster::builder().object(&rs).build().await;
            let ctx = context(&fake).await;
            reconcile_web(&fake, &ctx).await;
            let created = fake.actions().into_iter().find(|a| a.is("create", "pods")).expect("a pod was created");
            let pod: Pod = created.object().unwrap();
            assert_eq!(pod.metadata.generate_name.as_deref(), Some("web-"));
            assert_eq!(pod.metadata.annotations.unwrap()["note"], "x");
            assert_eq!(pod.metadata.finalizers.unwrap(), ["example.com/keep"]);
            assert_eq!(pod.spec.unwrap().containers[0].image.as_deref(), Some("nginx"));
            let owner = &pod.metadata.owner_references.unwrap()[0];
            assert_eq!((owner.kind.as_str(), owner.uid.as_str(), owner.controller), ("ReplicaSet", RS_UID, Some(true)));
        }

        #[tokio::test]
        async fn replication_controllers_work_the_same() {
            let rc: ReplicationController = serde_json::from_value(json!({
                "metadata": {"name": "legacy", "namespace": "default", "uid": "rc-uid"},
                "spec": {
                    "replicas": 2,
                    "selector": {"app": "legacy"},
                    "template": {
                        "metadata": {"labels": {"app": "legacy"}},
                        "spec": {"containers": [{"name": "c", "image": "nginx"}]},
                    },
                },
            }))
            .unwrap();
            let mut orphan = pod("orphan", "legacy", Owner::Orphan, State::Ready, 100);
            orphan.metadata.name = Some("orphan".into());
            let fake = FakeCluster::builder().object(&rc).object(&orphan).build().await;
            let ctx = context(&fake).await;
            let rc: ReplicationController = fake.get("default", "legacy").await.unwrap();
            reconcile_rc(Arc::new(rc), ctx).await.unwrap();
            let mut writes = fake.writes();
            writes.sort();
            assert_eq!(
                writes,
                [
                    "create pods default/legacy-",
                    "patch pods default/orphan",
                    "patch replicationcontrollers/status default/legacy"
                ]
            );
            let adopted: Pod = fake.get("default", "orphan").await.unwrap();
            let owner = controller_of(&adopted).unwrap();
            assert_eq!((owner.kind.as_str(), owner.uid.as_str()), ("ReplicationController", "rc-uid"));
            let status = fake.get::<ReplicationController>("default", "legacy").await.unwrap().status.unwrap();
            assert_eq!((status.replicas, status.ready_replicas), (1, Some(1)));
        }

        /// The ReplicaSet's cached copy may not show its deletion yet (an
        /// orphaning delete, whose collector just released the pods): it
        /// reads itself from the API server before adopting, and adopts
        /// nothing when it is going away.
        #[tokio::test]
        async fn a_deleting_owner_adopts_nothing_even_when_its_cache_is_stale() {
            let mut stored = replica_set(2);
            stored.metadata.deletion_timestamp =
                Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(k8s_openapi::jiff::Timestamp::now()));
            stored.metadata.finalizers = Some(vec!["orphan".into()]);
            let orphan = pod("orphan", "web", Owner::Orphan, State::Ready, 100);
            let fake = FakeCluster::builder().object(&stored).object(&orphan).build().await;
            let ctx = context(&fake).await;
            let mut stale: ReplicaSet = fake.get("default", "web").await.unwrap();
            stale.metadata.deletion_timestamp = None;
            reconcile(Arc::new(stale.clone()), ctx.clone()).await.unwrap();
            assert!(!fake.writes().iter().any(|w| w == "patch pods default/orphan"), "{:?}", fake.writes());
            assert_eq!(controller_uid(&fake.get::<Pod>("default", "orphan").await.unwrap()), None);
            // The same owner, not being deleted, adopts it.
            let fake = FakeCluster::builder().object(&replica_set(2)).object(&orphan).build().await;
            let ctx = context(&fake).await;
            reconcile_web(&fake, &ctx).await;
            assert_eq!(controller_uid(&fake.get::<Pod>("default", "orphan").await.unwrap()).as_deref(), Some(RS_UID));
        }

        #[tokio::test]
        async fn status_counts_terminating_pods_apart() {
            let mut going = pod("going", "web", Owner::Ours, State::Ready, 100);
            going.metadata.deletion_timestamp =
                Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(k8s_openapi::jiff::Timestamp::now()));
            going.metadata.finalizers = Some(vec!["test/keep".into()]);
            let mut failed = pod("failed", "web", Owner::Ours, State::NotReady, 100);
            failed.metadata.deletion_timestamp = going.metadata.deletion_timestamp.clone();
            failed.metadata.finalizers = going.metadata.finalizers.clone();
            failed.status.as_mut().unwrap().phase = Some("Failed".into());
            let pods = [pod("a", "web", Owner::Ours, State::Ready, 100), going, failed];
            let fake = FakeCluster::builder().object(&replica_set(1)).objects(&pods).build().await;
            let ctx = context(&fake).await;
            reconcile_web(&fake, &ctx).await;
            // One active pod as wanted: no create for the one going away.
            assert_eq!(fake.writes(), ["patch replicasets/status default/web"]);
            let status = fake.get::<ReplicaSet>("default", "web").await.unwrap().status.unwrap();
            assert_eq!((status.replicas, status.terminating_replicas), (1, Some(1)));
        }

        type BoxError = Box<dyn std::error::Error + Send + Sync>;

        /// A client sending through `fake.client()` (so requests are
        /// recorded) that first runs `hook` on each request: the hook may
        /// change the world mid-reconcile, or fail the request.
        fn hooked_client(
            fake: &FakeCluster,
            hook: impl Fn(&http::Request<kube::client::Body>) -> Result<(), BoxError> + Send + Sync + 'static,
        ) -> Client {
            let inner = fake.client();
            let hook = Arc::new(hook);
            let service = tower::service_fn(move |request: http::Request<kube::client::Body>| {
                let inner = inner.clone();
                let hooked = hook(&request);
                async move {
                    hooked?;
                    inner.send(request).await.map_err(BoxError::from)
                }
            });
            Client::new(service, "default")
        }

        /// The pods of an earlier scale-up reach the cache (and, after it,
        /// lower the expectations) while a reconcile is between reading the
        /// cache and checking the expectations, here while it adopts an
        /// orphan. The reconcile must not create those pods again.
        #[tokio::test]
        async fn pods_cached_after_the_read_are_not_created_again() {
            use Owner::*;
            use State::*;
            let earlier = [pod("p1", "web", Ours, Ready, 100), pod("p2", "web", Ours, Ready, 100)];
            let orphan = pod("orphan", "web", Orphan, Ready, 100);
            let fake = FakeCluster::builder().object(&replica_set(3)).objects(&earlier).object(&orphan).build().await;
            let stored = |name: &str| {
                let api: Api<Pod> = Api::namespaced(fake.unrecorded(), "default");
                let name = name.to_owned();
                async move { api.get(&name).await.unwrap() }
            };
            let (p1, p2, orphan) = (stored("p1").await, stored("p2").await, stored("orphan").await);
            // The cache holds the orphan only: p1 and p2, created by the
            // previous reconcile, are not observed yet.
            let pods = Informer::<Pod>::new();
            pods.replace(vec![orphan], String::new());
            let key = ObjectKey::new("default", "web");
            let ctx_slot: Arc<Mutex<Option<Arc<Context>>>> = Arc::default();
            let client = {
                let (pods, ctx_slot, key) = (pods.clone(), ctx_slot.clone(), key.clone());
                let earlier = Mutex::new(Some(vec![p1, p2]));
                hooked_client(&fake, move |request| {
                    // `can_adopt` reads the ReplicaSet: meanwhile the watch
                    // delivers p1 and p2, and the observer lowers the
                    // expectations after the cache has them.
                    if request.method() == http::Method::GET
                        && request.uri().path().ends_with("/replicasets/web")
                        && let Some(earlier) = earlier.lock().take()
                    {
                        let ctx = ctx_slot.lock().clone().unwrap();
                        for p in earlier {
                            pods.apply(p);
                            ctx.expectations.creation_observed(&key);
                        }
                    }
                    Ok(())
                })
            };
            let ctx = context_with(&fake, client, pods.clone());
            *ctx_slot.lock() = Some(ctx.clone());
            ctx.expectations.expect_creations(&key, 2);
            reconcile_web(&fake, &ctx).await;
            assert!(fake.writes().iter().any(|w| w == "patch pods default/orphan"), "{:?}", fake.writes());
            let creates = fake.writes().iter().filter(|w| w.starts_with("create pods")).count();
            assert_eq!(creates, 0, "p1, p2 and the adopted orphan make 3: {:?}", fake.writes());
            // The next reconcile sees all three and has nothing to create.
            assert!(ctx.expectations.satisfied(&key));
            fake.clear_actions();
            reconcile_web(&fake, &ctx).await;
            assert!(!fake.writes().iter().any(|w| w.starts_with("create")), "{:?}", fake.writes());
        }

        /// A failed create lowers the expectations once, not twice: the
        /// pods that were created are still awaited.
        #[tokio::test]
        async fn a_failed_create_is_unexpected_once() {
            let fake = FakeCluster::builder().object(&replica_set(3)).build().await;
            let posts = std::sync::atomic::AtomicUsize::new(0);
            let client = hooked_client(&fake, move |request| {
                if request.method() == http::Method::POST
                    && request.uri().path().ends_with("/pods")
                    && posts.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 1
                {
                    return Err("injected failure".into());
                }
                Ok(())
            });
            let ctx = context_with(&fake, client, fake.informer::<Pod>().await);
            let rs: ReplicaSet = fake.get("default", "web").await.unwrap();
            assert!(reconcile(Arc::new(rs), ctx.clone()).await.is_err());
            // Batches of 1 then 2, the second of which failed once: 2 created.
            let created = fake.list::<Pod>("default").await.len();
            assert_eq!(created, 2);
            let key = ObjectKey::new("default", "web");
            ctx.expectations.creation_observed(&key);
            assert!(!ctx.expectations.satisfied(&key), "one created pod is still unobserved");
            ctx.expectations.creation_observed(&key);
            assert!(ctx.expectations.satisfied(&key));
        }

        /// A victim someone else deleted first answers 404: its deletion is
        /// unexpected then, and the watch's report of it (once or twice)
        /// lowers nothing more, so the other victim's is still awaited.
        #[tokio::test]
        async fn a_victim_already_gone_is_unexpected_once() {
            use Owner::*;
            use State::*;
            let (a, b, c) = (
                pod("a", "web", Ours, Ready, 100),
                pod("b", "web", Ours, Unscheduled, 100),
                pod("c", "web", Ours, NotReady, 100),
            );
            // b is still cached, but gone from the API server.
            let fake = FakeCluster::builder().object(&replica_set(1)).object(&a).object(&c).build().await;
            let pods = Informer::<Pod>::new();
            pods.replace(vec![a, b.clone(), c.clone()], String::new());
            let ctx = context_with(&fake, fake.client(), pods);
            reconcile_web(&fake, &ctx).await;
            let mut writes = fake.writes();
            writes.sort();
            assert_eq!(
                writes,
                ["delete pods default/b", "delete pods default/c", "patch replicasets/status default/web"]
            );
            let key = ObjectKey::new("default", "web");
            assert!(!ctx.expectations.satisfied(&key), "c's deletion is awaited");
            // The watch reports b's deletion, as a terminating update and
            // then as a delete.
            let (owners, queue) = (Informer::<ReplicaSet>::new(), WorkQueue::new(RateLimit::default()));
            let mut terminating = b.clone();
            terminating.metadata.deletion_timestamp =
                Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(k8s_openapi::jiff::Timestamp::now()));
            pod_changed(
                &Event::Apply { old: Some(Arc::new(b.clone())), new: Arc::new(terminating) },
                &owners,
                &ctx,
                &queue,
            );
            pod_changed(&Event::Delete(Arc::new(b)), &owners, &ctx, &queue);
            assert!(!ctx.expectations.satisfied(&key), "c's deletion is still awaited");
            pod_changed(&Event::Delete(Arc::new(c)), &owners, &ctx, &queue);
            assert!(ctx.expectations.satisfied(&key));
        }

        /// Failed deletes are unexpected (the watch will not report them)
        /// and reported as FailedDelete events; the answers after the first
        /// failure are still looked at, and the reconcile fails, to be
        /// retried.
        #[tokio::test]
        async fn failed_deletes_are_unexpected_and_reported() {
            use Owner::*;
            use State::*;
            // Deleted in this order: x and y fail, z goes.
            let pods = [
                pod("x", "web", Ours, Unscheduled, 100),
                pod("y", "web", Ours, NotReady, 100),
                pod("z", "web", Ours, Ready, 100),
            ];
            let fake = FakeCluster::builder().object(&replica_set(0)).objects(&pods).build().await;
            let client = hooked_client(&fake, |request| {
                if request.method() == http::Method::DELETE && !request.uri().path().ends_with("/pods/z") {
                    return Err("injected failure".into());
                }
                Ok(())
            });
            let ctx = context_with(&fake, client, fake.informer::<Pod>().await);
            let rs: ReplicaSet = fake.get("default", "web").await.unwrap();
            assert!(reconcile(Arc::new(rs), ctx.clone()).await.is_err());
            let left: Vec<String> = fake
                .list::<Pod>("default")
                .await
                .iter()
                .filter(|p| p.metadata.deletion_timestamp.is_none())
                .map(|p| p.metadata.name.clone().unwrap())
                .collect();
            assert_eq!(left, ["x", "y"]);
            // The two failures, with the same note, make one Event's series.
            let events = fake.events("default", 2).await;
            assert_eq!(events.len(), 2, "{events:?}");
            assert_eq!(events[0], "Normal SuccessfulDelete Deleted pod: z");
            assert!(events[1].starts_with("Warning FailedDelete Error deleting: "), "{events:?}");
            // Only z's deletion is awaited.
            let key = ObjectKey::new("default", "web");
            assert!(!ctx.expectations.satisfied(&key));
            pod_changed(
                &Event::Delete(Arc::new(pods[2].clone())),
                &Informer::<ReplicaSet>::new(),
                &ctx,
                &WorkQueue::new(RateLimit::default()),
            );
            assert!(ctx.expectations.satisfied(&key), "x and y are not awaited");
        }

        /// The next key the observer wakes.
        async fn woken(queue: &WorkQueue<ObjectKey>) -> ObjectKey {
            let key = tokio::time::timeout(Duration::from_secs(5), queue.get())
                .await
                .expect("the observer wakes a key")
                .expect("the queue runs");
            queue.done(&key);
            key
        }

        /// A ReplicaSet deleted while it awaited pods leaves no expectations
        /// behind: one created under the same name (its delete seen, or
        /// missed and the cache going straight to the new uid) creates its
        /// pods at once.
        #[tokio::test]
        async fn a_deleted_replica_set_leaves_no_expectations() {
            let fake = FakeCluster::builder().object(&replica_set(2)).build().await;
            let ctx = context(&fake).await;
            let mut old = replica_set(2);
            old.metadata.uid = Some("old-uid".into());
            let owners = Informer::<ReplicaSet>::new();
            owners.apply(old.clone());
            let queue = WorkQueue::new(RateLimit::default());
            let observer = observe(&Informer::<Pod>::new(), owners.clone(), ctx.clone(), queue.clone());
            let key = ObjectKey::new("default", "web");
            // The old ReplicaSet created two pods and was deleted before
            // they were observed.
            ctx.expectations.expect_creations(&key, 2);
            owners.delete(old.clone());
            assert_eq!(woken(&queue).await, key);
            assert!(ctx.expectations.satisfied(&key));
            reconcile_web(&fake, &ctx).await;
            let creates = fake.writes().iter().filter(|w| w.starts_with("create pods")).count();
            assert_eq!(creates, 2, "{:?}", fake.writes());
            // The delete missed: the cache goes from the old uid to the new.
            owners.apply(old);
            ctx.expectations.expect_creations(&key, 2);
            owners.apply(replica_set(2));
            assert_eq!(woken(&queue).await, key);
            assert!(ctx.expectations.satisfied(&key));
            observer.abort();
        }

        #[tokio::test]
        async fn expectations_prevent_a_second_create() {
            let fake = FakeCluster::builder().object(&replica_set(2)).build().await;
            let ctx = context(&fake).await;
            reconcile_web(&fake, &ctx).await;
            assert_eq!(fake.writes().iter().filter(|w| w.starts_with("create pods")).count(), 2);
            // The cache has not shown the new pods to anyone yet: a second
            // reconcile must not create them again.
            fake.clear_actions();
            reconcile_web(&fake, &ctx).await;
            assert!(!fake.writes().iter().any(|w| w.starts_with("create")), "{:?}", fake.writes());
            // Once both creations are observed and cached, still nothing to do.
            let key = ObjectKey::new("default", "web");
            ctx.expectations.creation_observed(&key);
            assert!(!ctx.expectations.satisfied(&key));
            ctx.expectations.creation_observed(&key);
            fake.sync::<Pod>().await;
            fake.clear_actions();
            reconcile_web(&fake, &ctx).await;
            assert!(!fake.writes().iter().any(|w| w.starts_with("create")), "{:?}", fake.writes());
            assert_eq!(fake.list::<Pod>("default").await.len(), 2);
        }
    }

    #[test]
    fn status_counts() {
        let rs =
            ReplicaSet { metadata: ObjectMeta { generation: Some(3), ..Default::default() }, ..Default::default() };
        let pods = vec![
            make_pod("a").node("n").phase("Running").ready().build(),
            make_pod("b").node("n").phase("Running").build(),
        ];
        let s = compute_status(&rs, &pods);
        assert_eq!(s.replicas, 2);
        assert_eq!(s.ready_replicas, Some(1));
        assert_eq!(s.available_replicas, Some(1));
        assert_eq!(s.observed_generation, Some(3));
    }
}
