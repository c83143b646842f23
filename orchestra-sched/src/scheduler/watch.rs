//! The scheduler's watches: nodes and pods (into the cache and the queue),
//! and the objects plugins read (into the listers), each turned into the
//! cluster events that move pods back to the active queue.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, Node, PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::Api;
use kube::runtime::{WatchStreamExt, watcher};
use orchestra_ctrl::informer::strip_managed_fields;
use tokio::sync::watch as tokio_watch;

use super::Scheduler;
use crate::framework::{ClusterEvent, EventResource, action};
use crate::listers::object_key;
use crate::node_info::{PodInfo, pod_uid};

/// Whether `pod` has finished (Succeeded or Failed): it holds no room on its
/// node and is not scheduled again.
fn terminal(pod: &Pod) -> bool {
    matches!(pod.status.as_ref().and_then(|s| s.phase.as_deref()), Some("Succeeded") | Some("Failed"))
}

/// A watch of every `K` for the scheduler's caches. Like kube-scheduler's
/// informers, the objects come without managedFields: nothing here reads
/// them, and they are most of a decoded object.
fn cached<K>(api: Api<K>) -> futures::stream::BoxStream<'static, watcher::Result<watcher::Event<K>>>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    watcher(api, watcher::Config::default()).modify(strip_managed_fields).boxed()
}

/// The [`action`] flags of a node's change from `old` (None: added) to
/// `new`; 0 when nothing a plugin registers for changed.
fn node_event(old: Option<&Node>, new: &Node) -> u32 {
    let Some(old) = old else { return action::ADD };
    let mut a = 0;
    let st = |n: &Node| n.status.clone().unwrap_or_default();
    let (so, sn) = (st(old), st(new));
    if so.allocatable != sn.allocatable {
        a |= action::UPDATE_NODE_ALLOCATABLE;
    }
    if old.metadata.labels != new.metadata.labels {
        a |= action::UPDATE_NODE_LABEL;
    }
    let sp = |n: &Node| n.spec.clone().unwrap_or_default();
    let (po, pn) = (sp(old), sp(new));
    if po.taints != pn.taints || po.unschedulable != pn.unschedulable {
        a |= action::UPDATE_NODE_TAINT;
    }
    if so.conditions.as_ref().map(|c| c.iter().map(|c| (&c.type_, &c.status)).collect::<Vec<_>>())
        != sn.conditions.as_ref().map(|c| c.iter().map(|c| (&c.type_, &c.status)).collect::<Vec<_>>())
    {
        a |= action::UPDATE_NODE_CONDITION;
    }
    a
}

impl Scheduler {
    /// Starts the watches (nodes, pods, claims, volumes, classes, budgets,
    /// namespaces); the future resolves once they listed.
    pub(super) fn start_watches(&self) -> impl std::future::Future<Output = ()> + use<> {
        let (node_tx, mut node_rx) = tokio_watch::channel(false);
        let (pod_tx, mut pod_rx) = tokio_watch::channel(false);
        let s = self.clone();
        tokio::spawn(async move {
            let api: Api<Node> = Api::all(s.shared.client.clone());
            let mut known: HashMap<String, Arc<Node>> = HashMap::new();
            let mut seen: HashSet<String> = HashSet::new();
            let mut stream = cached(api);
            while let Some(ev) = stream.next().await {
                match ev {
                    Ok(watcher::Event::Init) => seen.clear(),
                    Ok(watcher::Event::InitApply(n)) => {
                        seen.insert(n.metadata.name.clone().unwrap_or_default());
                        s.on_node(&mut known, n);
                    }
                    Ok(watcher::Event::InitDone) => {
                        let gone: Vec<String> = known.keys().filter(|k| !seen.contains(*k)).cloned().collect();
                        for name in gone {
                            known.remove(&name);
                            s.shared.cache.remove_node(&name);
                        }
                        let _ = node_tx.send(true);
                    }
                    Ok(watcher::Event::Apply(n)) => s.on_node(&mut known, n),
                    Ok(watcher::Event::Delete(n)) => {
                        let name = n.metadata.name.clone().unwrap_or_default();
                        known.remove(&name);
                        s.shared.cache.remove_node(&name);
                        s.shared.queue.on_event(ClusterEvent::new(EventResource::Node, action::DELETE));
                    }
                    Err(e) => {
                        tracing::debug!("node watch: {e}");
                        tokio::time::sleep(Duration::from_millis(200)).await;
                    }
                }
            }
        });
        let s = self.clone();
        tokio::spawn(async move {
            let api: Api<Pod> = Api::all(s.shared.client.clone());
            let mut seen: HashSet<String> = HashSet::new();
            let mut known: HashSet<String> = HashSet::new();
            let mut stream = cached(api);
            while let Some(ev) = stream.next().await {
                match ev {
                    Ok(watcher::Event::Init) => seen.clear(),
                    Ok(watcher::Event::InitApply(p)) => {
                        seen.insert(pod_uid(&p).to_owned());
                        known.insert(pod_uid(&p).to_owned());
                        s.on_pod(p);
                    }
                    Ok(watcher::Event::InitDone) => {
                        let gone: Vec<String> = known.iter().filter(|k| !seen.contains(*k)).cloned().collect();
                        for uid in gone {
                            known.remove(&uid);
                            s.on_pod_gone(&uid);
                        }
                        let _ = pod_tx.send(true);
                    }
                    Ok(watcher::Event::Apply(p)) => {
                        known.insert(pod_uid(&p).to_owned());
                        s.on_pod(p);
                    }
                    Ok(watcher::Event::Delete(p)) => {
                        let uid = pod_uid(&p).to_owned();
                        known.remove(&uid);
                        s.on_pod_gone(&uid);
                    }
                    Err(e) => {
                        tracing::debug!("pod watch: {e}");
                        tokio::time::sleep(Duration::from_millis(200)).await;
                    }
                }
            }
        });
        let mut others = [
            self.spawn_watch::<PersistentVolumeClaim>(
                |s, pvc| {
                    let old = s.shared.handle.listers.pvcs.insert(pvc);
                    s.object_event(EventResource::PersistentVolumeClaim, old.is_some());
                },
                |s, key| {
                    s.shared.handle.listers.pvcs.remove(key);
                },
            ),
            self.spawn_watch::<PersistentVolume>(
                |s, pv| {
                    let old = s.shared.handle.listers.pvs.insert(pv);
                    s.object_event(EventResource::PersistentVolume, old.is_some());
                },
                |s, key| {
                    s.shared.handle.listers.pvs.remove(key);
                },
            ),
            self.spawn_watch::<StorageClass>(
                |s, sc| {
                    let old = s.shared.handle.listers.storage_classes.insert(sc);
                    s.object_event(EventResource::StorageClass, old.is_some());
                },
                |s, key| {
                    s.shared.handle.listers.storage_classes.remove(key);
                },
            ),
            self.spawn_watch::<PodDisruptionBudget>(
                |s, pdb| {
                    s.shared.handle.listers.pdbs.insert(pdb);
                },
                |s, key| {
                    s.shared.handle.listers.pdbs.remove(key);
                },
            ),
            self.spawn_watch::<Namespace>(
                |s, ns| {
                    let name = ns.metadata.name.clone().unwrap_or_default();
                    let labels = ns.metadata.labels.clone().unwrap_or_default();
                    let old = s.shared.handle.namespaces.write().insert(name, labels.clone());
                    match old {
                        None => s.shared.queue.on_event(ClusterEvent::new(EventResource::Namespace, action::ADD)),
                        Some(old) if old != labels => s
                            .shared
                            .queue
                            .on_event(ClusterEvent::new(EventResource::Namespace, action::UPDATE_NAMESPACE_LABEL)),
                        Some(_) => {}
                    }
                },
                |s, key| {
                    s.shared.handle.namespaces.write().remove(key);
                },
            ),
        ];
        async move {
            let _ = node_rx.wait_for(|v| *v).await;
            let _ = pod_rx.wait_for(|v| *v).await;
            // The other kinds are waited for a while only: a scheduler not
            // allowed to list them still schedules pods that do not need them.
            let others = futures::future::join_all(others.iter_mut().map(|rx| async move {
                let _ = rx.wait_for(|v| *v).await.map(|_| ());
            }));
            if tokio::time::timeout(Duration::from_secs(10), others).await.is_err() {
                tracing::warn!(
                    "scheduler: volume, budget or namespace watches not synced after 10 s; scheduling anyway"
                );
            }
        }
    }

    /// Queues a cluster event for an added or updated object.
    fn object_event(&self, resource: EventResource, existed: bool) {
        let a = if existed { action::UPDATE_OTHER } else { action::ADD };
        self.shared.queue.on_event(ClusterEvent::new(resource, a));
    }

    /// Watches every `K`: `apply` on each added or changed object, `delete`
    /// with its key (`namespace/name` or `name`) on each removed one
    /// (relists included). The receiver turns true once the first list is in.
    fn spawn_watch<K>(&self, apply: fn(&Scheduler, K), delete: fn(&Scheduler, &str)) -> tokio_watch::Receiver<bool>
    where
        K: kube::Resource<DynamicType = ()>
            + Clone
            + serde::de::DeserializeOwned
            + std::fmt::Debug
            + Send
            + Sync
            + 'static,
    {
        let (tx, rx) = tokio_watch::channel(false);
        let s = self.clone();
        tokio::spawn(async move {
            let api: Api<K> = Api::all(s.shared.client.clone());
            let mut known: HashSet<String> = HashSet::new();
            let mut seen: HashSet<String> = HashSet::new();
            let mut stream = cached(api);
            while let Some(ev) = stream.next().await {
                match ev {
                    Ok(watcher::Event::Init) => seen.clear(),
                    Ok(watcher::Event::InitApply(o)) => {
                        let key = object_key(&o);
                        seen.insert(key.clone());
                        known.insert(key);
                        apply(&s, o);
                    }
                    Ok(watcher::Event::InitDone) => {
                        let gone: Vec<String> = known.iter().filter(|k| !seen.contains(*k)).cloned().collect();
                        for key in gone {
                            known.remove(&key);
                            delete(&s, &key);
                        }
                        let _ = tx.send(true);
                    }
                    Ok(watcher::Event::Apply(o)) => {
                        known.insert(object_key(&o));
                        apply(&s, o);
                    }
                    Ok(watcher::Event::Delete(o)) => {
                        let key = object_key(&o);
                        known.remove(&key);
                        delete(&s, &key);
                    }
                    Err(e) => {
                        tracing::debug!("{} watch: {e}", K::kind(&()));
                        tokio::time::sleep(Duration::from_millis(200)).await;
                    }
                }
            }
        });
        rx
    }

    /// A node added or changed: into the cache (`known` holds the last
    /// version seen, to tell what changed), and its event to the queue.
    fn on_node(&self, known: &mut HashMap<String, Arc<Node>>, node: Node) {
        let name = node.metadata.name.clone().unwrap_or_default();
        let flags = node_event(known.get(&name).map(|n| n.as_ref()), &node);
        let node = Arc::new(node);
        known.insert(name, node.clone());
        self.shared.cache.upsert_node(node);
        if flags != 0 {
            self.shared.queue.on_event(ClusterEvent::new(EventResource::Node, flags));
        }
    }

    /// A pod added or changed: a bound pod goes into the cache, an unbound
    /// one of a profile here into the queue (gated when a scheduling gate or
    /// a PreEnqueue plugin holds it back), a finished one out of both.
    fn on_pod(&self, pod: Pod) {
        let uid = pod_uid(&pod).to_owned();
        if terminal(&pod) {
            self.on_pod_gone(&uid);
            return;
        }
        let node = pod.spec.as_ref().and_then(|s| s.node_name.clone()).filter(|n| !n.is_empty());
        match node {
            Some(node) => {
                self.shared.queue.delete(&uid);
                let before = self.shared.cache.pod(&uid);
                let labels_changed = before.as_ref().is_some_and(|b| b.pod.metadata.labels != pod.metadata.labels);
                let first = before.is_none();
                self.shared.cache.add_pod(Arc::new(PodInfo::new(Arc::new(pod))), &node);
                if first {
                    self.shared.queue.on_event(ClusterEvent::new(EventResource::AssignedPod, action::ADD));
                } else if labels_changed {
                    self.shared.queue.on_event(ClusterEvent::new(EventResource::AssignedPod, action::UPDATE_POD_LABEL));
                }
            }
            None => {
                if pod.metadata.deletion_timestamp.is_some() {
                    return;
                }
                let Some(profile) = self.profile_for(&pod) else { return };
                if self.shared.cache.is_placed(&uid) {
                    return; // assumed, binding in flight
                }
                let gated = pod.spec.as_ref().and_then(|s| s.scheduling_gates.as_ref()).is_some_and(|g| !g.is_empty())
                    || profile.pre_enqueue.iter().any(|p| !p.pre_enqueue(&pod).is_success());
                let info = Arc::new(PodInfo::new(Arc::new(pod)));
                // A nomination made before a restart (or by another replica)
                // keeps its room.
                if let Some(node) = info.pod.status.as_ref().and_then(|s| s.nominated_node_name.as_deref())
                    && self.shared.cache.nominated_node(&uid).as_deref() != Some(node)
                {
                    self.shared.cache.nominate(info.clone(), node);
                }
                self.shared.queue.add(info, gated);
            }
        }
    }

    /// A pod deleted or finished: out of the queue and the cache; the room
    /// it held on its node may let other pods in.
    fn on_pod_gone(&self, uid: &str) {
        self.shared.queue.delete(uid);
        self.shared.cache.clear_nomination(uid);
        if let Some(node) = self.shared.cache.pod_node(uid) {
            self.shared.cache.remove_pod(uid);
            // Pods nominated to the node were waiting for this, once no
            // victim of theirs is left terminating there.
            for nominee in self.shared.cache.unblocked_nominees(&node) {
                self.shared.queue.activate(&nominee);
            }
            self.shared.queue.on_event(ClusterEvent::new(EventResource::AssignedPod, action::DELETE));
        }
    }
}
