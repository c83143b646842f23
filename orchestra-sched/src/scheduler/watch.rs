//! The scheduler's side of the shared informers: nodes and pods (into the
//! cache and the queue), and the objects plugins read (the listers read the
//! informers' caches), each change turned into the cluster events that move
//! pods back to the active queue.

use std::future::Future;
use std::sync::{Arc, Weak};
use std::time::Duration;

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::{Namespace, Node, PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::StorageClass;
use orchestra_ctrl::informer::{Event, Informer, Kind};
use tokio::sync::watch as tokio_watch;

use super::{Scheduler, Shared};
use crate::framework::{ClusterEvent, EventResource, action};
use crate::node_info::{PodInfo, pod_uid};

/// Whether `pod` has finished (Succeeded or Failed): it holds no room on its
/// node and is not scheduled again.
fn terminal(pod: &Pod) -> bool {
    matches!(pod.status.as_ref().and_then(|s| s.phase.as_deref()), Some("Succeeded") | Some("Failed"))
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
    /// Subscribes to the informers (nodes, pods, claims, volumes, classes,
    /// namespaces; the budgets' informer is read by the listers only), once
    /// per scheduler; the future resolves once they listed and what they
    /// listed is in the cache, the queue and the listers.
    pub(super) fn start_watches(&self) -> impl Future<Output = ()> + use<> {
        let mut synced = self.shared.synced.get_or_init(|| self.subscribe()).clone();
        async move {
            let _ = synced.wait_for(|v| *v).await;
        }
    }

    /// Starts one task per informer feeding this scheduler (each ends with
    /// the scheduler); the receiver turns true once the first lists are in.
    fn subscribe(&self) -> tokio_watch::Receiver<bool> {
        let informers = &self.shared.informers;
        let nodes = self.follow(informers.informer::<Node>(), Scheduler::on_node_event);
        let pods = self.follow(informers.informer::<Pod>(), Scheduler::on_pod_event);
        let others: Vec<BoxFuture<'static, ()>> = vec![
            self.follow(informers.informer::<PersistentVolumeClaim>(), |s, e| {
                s.object_event(EventResource::PersistentVolumeClaim, &e)
            }),
            self.follow(informers.informer::<PersistentVolume>(), |s, e| {
                s.object_event(EventResource::PersistentVolume, &e)
            }),
            self.follow(informers.informer::<StorageClass>(), |s, e| s.object_event(EventResource::StorageClass, &e)),
            self.follow(informers.informer::<Namespace>(), Scheduler::on_namespace_event),
            {
                // No plugin registers for budget events: the lister is enough.
                let budgets = self.shared.handle.listers.pdbs.informer().clone();
                Box::pin(async move { budgets.wait_synced().await })
            },
        ];
        let (tx, rx) = tokio_watch::channel(false);
        tokio::spawn(async move {
            nodes.await;
            pods.await;
            // The other kinds are waited for a while only: a scheduler not
            // allowed to list them still schedules pods that do not need them.
            let others = futures::future::join_all(others);
            if tokio::time::timeout(Duration::from_secs(10), others).await.is_err() {
                tracing::warn!(
                    "scheduler: volume, budget or namespace watches not synced after 10 s; scheduling anyway"
                );
            }
            let _ = tx.send(true);
        });
        rx
    }

    /// Hands every object `informer` lists, then every change, to `handle`,
    /// for as long as the scheduler lives. The future resolves once the
    /// first list has been handled.
    fn follow<K: Kind>(&self, informer: Arc<Informer<K>>, handle: fn(&Scheduler, Event<K>)) -> BoxFuture<'static, ()> {
        let (tx, mut rx) = tokio_watch::channel(false);
        let shared: Weak<Shared> = Arc::downgrade(&self.shared);
        let alive = move || shared.upgrade().map(|shared| Scheduler { shared });
        tokio::spawn(async move {
            let (listed, mut changes) = informer.subscribe_synced().await;
            drop(informer);
            {
                let Some(s) = alive() else { return };
                for new in listed {
                    handle(&s, Event::Apply { old: None, new });
                }
            }
            let _ = tx.send(true);
            while let Some(event) = changes.recv().await {
                let Some(s) = alive() else { return };
                handle(&s, event);
            }
        });
        Box::pin(async move {
            let _ = rx.wait_for(|v| *v).await;
        })
    }

    /// Queues a cluster event for an added or updated object (the listers
    /// read the informer, which has it already); a deletion is no event.
    fn object_event<K>(&self, resource: EventResource, event: &Event<K>) {
        if let Event::Apply { old, .. } = event {
            let a = if old.is_some() { action::UPDATE_OTHER } else { action::ADD };
            self.shared.queue.on_event(ClusterEvent::new(resource, a));
        }
    }

    /// A namespace's labels into the handle's map (for namespace
    /// selectors), and an event when they appear or change.
    fn on_namespace_event(&self, event: Event<Namespace>) {
        match event {
            Event::Apply { new, .. } => {
                let name = new.metadata.name.clone().unwrap_or_default();
                let labels = new.metadata.labels.clone().unwrap_or_default();
                let old = self.shared.handle.namespaces.write().insert(name, labels.clone());
                match old {
                    None => self.shared.queue.on_event(ClusterEvent::new(EventResource::Namespace, action::ADD)),
                    Some(old) if old != labels => self
                        .shared
                        .queue
                        .on_event(ClusterEvent::new(EventResource::Namespace, action::UPDATE_NAMESPACE_LABEL)),
                    Some(_) => {}
                }
            }
            Event::Delete(old) => {
                self.shared.handle.namespaces.write().remove(old.metadata.name.as_deref().unwrap_or_default());
            }
        }
    }

    /// A node added or changed: into the cache, and its event (what changed
    /// since the version the informer had) to the queue; a node deleted: out
    /// of the cache.
    fn on_node_event(&self, event: Event<Node>) {
        match event {
            Event::Apply { old, new } => {
                let flags = node_event(old.as_deref(), &new);
                self.shared.cache.upsert_node(new);
                if flags != 0 {
                    self.shared.queue.on_event(ClusterEvent::new(EventResource::Node, flags));
                }
            }
            Event::Delete(old) => {
                self.shared.cache.remove_node(old.metadata.name.as_deref().unwrap_or_default());
                self.shared.queue.on_event(ClusterEvent::new(EventResource::Node, action::DELETE));
            }
        }
    }

    /// A pod added, changed or deleted.
    fn on_pod_event(&self, event: Event<Pod>) {
        match event {
            Event::Apply { new, .. } => self.on_pod(new),
            Event::Delete(old) => self.on_pod_gone(pod_uid(&old)),
        }
    }

    /// A pod added or changed: a bound pod goes into the cache, an unbound
    /// one of a profile here into the queue (gated when a scheduling gate or
    /// a PreEnqueue plugin holds it back), a finished one out of both.
    fn on_pod(&self, pod: Arc<Pod>) {
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
                self.shared.cache.add_pod(Arc::new(PodInfo::new(pod)), &node);
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
                let info = Arc::new(PodInfo::new(pod));
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
