//! The scheduler's cache: node infos kept up to date from watches, pods
//! assumed on their node from Reserve until the binding is seen.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use k8s_openapi::api::core::v1::Node;
use parking_lot::Mutex;

use crate::node_info::{NodeInfo, PodInfo};
use crate::plugins::helpers::pod_priority;
use crate::snapshot::Snapshot;

#[derive(Debug, Clone)]
struct PodState {
    info: Arc<PodInfo>,
    node: String,
    assumed: bool,
}

#[derive(Default)]
struct Inner {
    /// The node infos; one that a snapshot still holds is copied on its
    /// next change.
    nodes: Vec<Arc<NodeInfo>>,
    index: Arc<HashMap<String, usize>>,
    /// Bumped by every change of a node info.
    generation: u64,
    /// The generation of each node's last change (parallel to `nodes`)...
    node_generation: Vec<u64>,
    /// ... and the nodes by that generation, so a snapshot catches up with
    /// the nodes changed since it was taken, and no others.
    changed: BTreeMap<u64, usize>,
    /// Bumped when nodes come or go (snapshots then copy the whole list).
    layout: u64,
    pods: HashMap<String, PodState>,
    /// Pods bound to nodes the cache has not seen yet.
    orphans: HashMap<String, Vec<Arc<PodInfo>>>,
    images: Arc<HashMap<String, usize>>,
    images_dirty: bool,
    /// Pods on known nodes with (anti-)affinity terms of any kind.
    pods_with_affinity: usize,
    /// Pods on known nodes with required anti-affinity terms.
    pods_with_required_anti_affinity: usize,
    /// Nominated pods by node, and the node of each nominated pod's UID.
    nominated: Arc<HashMap<String, Vec<Arc<PodInfo>>>>,
    nominated_node: HashMap<String, String>,
}

/// Node infos and pod placements, shared by the watch handlers, the
/// scheduling loop and the binding tasks.
#[derive(Default)]
pub struct Cache {
    inner: Mutex<Inner>,
}

impl Inner {
    fn clear_nomination(&mut self, uid: &str) {
        let Some(node) = self.nominated_node.remove(uid) else { return };
        let nominated = Arc::make_mut(&mut self.nominated);
        if let Some(pods) = nominated.get_mut(&node) {
            pods.retain(|p| p.uid() != uid);
            if pods.is_empty() {
                nominated.remove(&node);
            }
        }
    }
    fn node_mut(&mut self, name: &str) -> Option<&mut NodeInfo> {
        let i = *self.index.get(name)?;
        self.touch(i);
        Some(Arc::make_mut(&mut self.nodes[i]))
    }
    /// Records that node `i` changes now.
    fn touch(&mut self, i: usize) {
        self.generation += 1;
        self.changed.remove(&self.node_generation[i]);
        self.node_generation[i] = self.generation;
        self.changed.insert(self.generation, i);
    }
    /// Counts `pod` in (`sign` 1) or out (-1) of the affinity totals.
    fn count(&mut self, pod: &PodInfo, sign: isize) {
        let step = |total: &mut usize, on: bool| {
            if on {
                *total = total.saturating_add_signed(sign);
            }
        };
        step(&mut self.pods_with_affinity, pod.has_affinity);
        step(&mut self.pods_with_required_anti_affinity, pod.has_required_anti_affinity);
    }
    fn add_pod_to_node(&mut self, node: &str, info: Arc<PodInfo>) {
        match self.node_mut(node) {
            Some(n) => {
                n.add_pod(info.clone());
                self.count(&info, 1);
            }
            None => self.orphans.entry(node.to_owned()).or_default().push(info),
        }
    }
    fn remove_pod_from_node(&mut self, node: &str, uid: &str) {
        if let Some(n) = self.node_mut(node) {
            let pod = n.pods.iter().find(|p| p.uid() == uid).cloned();
            if n.remove_pod(uid)
                && let Some(pod) = pod
            {
                self.count(&pod, -1);
            }
        } else if let Some(o) = self.orphans.get_mut(node) {
            o.retain(|p| p.uid() != uid);
        }
    }
}

impl Cache {
    /// An empty cache.
    pub fn new() -> Cache {
        Cache::default()
    }

    /// Adds or updates a node.
    pub fn upsert_node(&self, node: Arc<Node>) {
        let mut inner = self.inner.lock();
        let name = node.metadata.name.clone().unwrap_or_default();
        inner.images_dirty = true;
        if let Some(n) = inner.node_mut(&name) {
            n.set_node(node);
            return;
        }
        let mut info = NodeInfo::new(node);
        for p in inner.orphans.remove(&name).unwrap_or_default() {
            inner.count(&p, 1);
            info.add_pod(p);
        }
        let i = inner.nodes.len();
        inner.nodes.push(Arc::new(info));
        inner.node_generation.push(0);
        inner.touch(i);
        inner.layout += 1;
        Arc::make_mut(&mut inner.index).insert(name, i);
    }

    /// Removes a node (its pods stay known, as orphans).
    pub fn remove_node(&self, name: &str) {
        let mut inner = self.inner.lock();
        let Some(i) = inner.index.get(name).copied() else { return };
        let info = inner.nodes.swap_remove(i);
        let generation = inner.node_generation.swap_remove(i);
        inner.changed.remove(&generation);
        if i < inner.nodes.len() {
            inner.touch(i);
        }
        inner.layout += 1;
        for p in &info.pods {
            inner.count(p, -1);
        }
        let index = Arc::make_mut(&mut inner.index);
        index.remove(name);
        if i < inner.nodes.len() {
            let moved = inner.nodes[i].name().to_owned();
            Arc::make_mut(&mut inner.index).insert(moved, i);
        }
        inner.orphans.insert(name.to_owned(), info.pods.clone());
        inner.images_dirty = true;
    }

    /// Records that `pod` runs on `node` (from the watch): confirms an
    /// assumed pod, moves a pod whose node changed.
    pub fn add_pod(&self, info: Arc<PodInfo>, node: &str) {
        let mut inner = self.inner.lock();
        let uid = info.uid().to_owned();
        inner.clear_nomination(&uid);
        if let Some(old) = inner.pods.get_mut(&uid) {
            if old.assumed && old.node == node && old.info.same_placement(&info) {
                // The binding of an assumed pod landed: the node already
                // counts it as the scheduler placed it.
                old.assumed = false;
                old.info = info;
                return;
            }
            let old_node = old.node.clone();
            inner.remove_pod_from_node(&old_node, &uid);
        }
        inner.add_pod_to_node(node, info.clone());
        inner.pods.insert(uid, PodState { info, node: node.to_owned(), assumed: false });
    }

    /// Forgets a pod (deleted or terminated).
    pub fn remove_pod(&self, uid: &str) {
        let mut inner = self.inner.lock();
        inner.clear_nomination(uid);
        if let Some(old) = inner.pods.remove(uid) {
            inner.remove_pod_from_node(&old.node, uid);
        }
    }

    /// Records that preemption made room for `pod` on `node`: until the pod
    /// is placed or gone, pods of no higher priority leave that room to it.
    pub fn nominate(&self, pod: Arc<PodInfo>, node: &str) {
        let mut inner = self.inner.lock();
        let uid = pod.uid().to_owned();
        inner.clear_nomination(&uid);
        Arc::make_mut(&mut inner.nominated).entry(node.to_owned()).or_default().push(pod);
        inner.nominated_node.insert(uid, node.to_owned());
    }

    /// Drops the nomination of `uid` (placed elsewhere, or gone).
    pub fn clear_nomination(&self, uid: &str) {
        self.inner.lock().clear_nomination(uid);
    }

    /// The pods nominated to `node` that nothing on it waits for any more:
    /// no pod of lower priority than theirs is terminating there.
    pub fn unblocked_nominees(&self, node: &str) -> Vec<String> {
        let inner = self.inner.lock();
        let Some(pods) = inner.nominated.get(node) else { return Vec::new() };
        let terminating: Vec<i32> = inner
            .index
            .get(node)
            .map(|i| {
                inner.nodes[*i]
                    .pods
                    .iter()
                    .filter(|p| p.pod.metadata.deletion_timestamp.is_some())
                    .map(|p| pod_priority(&p.pod))
                    .collect()
            })
            .unwrap_or_default();
        pods.iter()
            .filter(|p| {
                let priority = pod_priority(&p.pod);
                terminating.iter().all(|t| *t >= priority)
            })
            .map(|p| p.uid().to_owned())
            .collect()
    }

    /// The node `uid` is nominated to.
    pub fn nominated_node(&self, uid: &str) -> Option<String> {
        self.inner.lock().nominated_node.get(uid).cloned()
    }

    /// Places `pod` on `node` before its binding lands (ending its
    /// nomination, if any).
    pub fn assume(&self, info: Arc<PodInfo>, node: &str) {
        let mut inner = self.inner.lock();
        let uid = info.uid().to_owned();
        inner.clear_nomination(&uid);
        inner.add_pod_to_node(node, info.clone());
        inner.pods.insert(uid, PodState { info, node: node.to_owned(), assumed: true });
    }

    /// Undoes [`assume`](Self::assume) (binding failed) unless the watch
    /// confirmed the pod meanwhile.
    pub fn forget(&self, uid: &str) {
        let mut inner = self.inner.lock();
        if inner.pods.get(uid).is_some_and(|p| p.assumed) {
            let old = inner.pods.remove(uid).expect("present");
            inner.remove_pod_from_node(&old.node, uid);
        }
    }

    /// Whether `uid` is assumed or bound in the cache.
    pub fn is_placed(&self, uid: &str) -> bool {
        self.inner.lock().pods.contains_key(uid)
    }

    /// The node `uid` is placed on.
    pub fn pod_node(&self, uid: &str) -> Option<String> {
        self.inner.lock().pods.get(uid).map(|p| p.node.clone())
    }

    /// The pod with `uid`, if placed.
    pub fn pod(&self, uid: &str) -> Option<Arc<PodInfo>> {
        self.inner.lock().pods.get(uid).map(|p| p.info.clone())
    }

    /// Number of nodes.
    pub fn node_count(&self) -> usize {
        self.inner.lock().nodes.len()
    }

    /// Number of placed pods (assumed included).
    pub fn pod_count(&self) -> usize {
        self.inner.lock().pods.len()
    }

    /// The current nodes as a new snapshot (a copy of the node list; a
    /// scheduling loop keeps one snapshot and
    /// [updates](Self::update_snapshot) it instead).
    pub fn snapshot(&self) -> Snapshot {
        let mut snapshot = Snapshot::default();
        self.update_snapshot(&mut snapshot);
        snapshot
    }

    /// Brings `snapshot` up to date, copying only the node infos changed
    /// since it was last updated (upstream's `UpdateSnapshot`). Node infos
    /// are shared, not copied, and the list itself is copied only while a
    /// clone of `snapshot` is alive.
    pub fn update_snapshot(&self, snapshot: &mut Snapshot) {
        let mut inner = self.inner.lock();
        if inner.images_dirty {
            let mut images: HashMap<String, usize> = HashMap::new();
            for n in inner.nodes.iter() {
                for name in n.images.keys() {
                    *images.entry(name.clone()).or_default() += 1;
                }
            }
            inner.images = Arc::new(images);
            inner.images_dirty = false;
        }
        if snapshot.layout != Some(inner.layout) {
            snapshot.nodes = Arc::new(inner.nodes.clone());
            snapshot.layout = Some(inner.layout);
        } else if snapshot.generation < inner.generation {
            let nodes = Arc::make_mut(&mut snapshot.nodes);
            for (_, &i) in inner.changed.range(snapshot.generation + 1..) {
                nodes[i] = inner.nodes[i].clone();
            }
        }
        snapshot.generation = inner.generation;
        snapshot.index = inner.index.clone();
        snapshot.image_nodes = inner.images.clone();
        snapshot.pods_with_affinity = inner.pods_with_affinity;
        snapshot.pods_with_required_anti_affinity = inner.pods_with_required_anti_affinity;
        snapshot.nominated = inner.nominated.clone();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{NodeBuilder, PodBuilder};

    #[test]
    fn assume_forget_confirm() {
        let cache = Cache::new();
        cache.upsert_node(Arc::new(NodeBuilder::new("n1").cpu("4").build()));
        let pod = Arc::new(PodInfo::new(Arc::new(PodBuilder::new("p").uid("u1").cpu("1").build())));
        cache.assume(pod.clone(), "n1");
        let snap = cache.snapshot();
        assert_eq!(snap.get("n1").unwrap().requested.milli_cpu, 1000);
        cache.forget("u1");
        assert_eq!(cache.snapshot().get("n1").unwrap().requested.milli_cpu, 0);
        // the older snapshot is unchanged
        assert_eq!(snap.get("n1").unwrap().requested.milli_cpu, 1000);
        cache.assume(pod.clone(), "n1");
        cache.add_pod(pod, "n1");
        cache.forget("u1");
        assert_eq!(cache.snapshot().get("n1").unwrap().requested.milli_cpu, 1000);
        cache.remove_pod("u1");
        assert_eq!(cache.snapshot().get("n1").unwrap().pods.len(), 0);
    }

    #[test]
    fn affinity_totals_follow_pods_and_nodes() {
        let cache = Cache::new();
        cache.upsert_node(Arc::new(NodeBuilder::new("n1").cpu("4").build()));
        let anti = |uid: &str| {
            Arc::new(PodInfo::new(Arc::new(
                PodBuilder::new(uid).uid(uid).cpu("1").pod_anti_affinity(&[("app", "db")], "zone").build(),
            )))
        };
        cache.assume(anti("a"), "n1");
        let held = cache.snapshot();
        assert_eq!((held.pods_with_affinity, held.pods_with_required_anti_affinity), (1, 1));
        // The binding landing confirms the pod without counting it twice.
        cache.add_pod(anti("a"), "n1");
        let snap = cache.snapshot();
        assert_eq!((snap.pods_with_affinity, snap.pods_with_required_anti_affinity), (1, 1));
        assert_eq!(snap.get("n1").unwrap().requested.milli_cpu, 1000);
        assert_eq!(snap.get("n1").unwrap().pods.len(), 1);
        // A pod on a node not seen yet counts once its node arrives.
        cache.add_pod(anti("b"), "n2");
        assert_eq!(cache.snapshot().pods_with_affinity, 1);
        cache.upsert_node(Arc::new(NodeBuilder::new("n2").cpu("4").build()));
        assert_eq!(cache.snapshot().pods_with_affinity, 2);
        cache.remove_pod("a");
        assert_eq!(cache.snapshot().pods_with_required_anti_affinity, 1);
        cache.remove_node("n2");
        let snap = cache.snapshot();
        assert_eq!((snap.pods_with_affinity, snap.pods_with_required_anti_affinity), (0, 0));
        // Snapshots taken earlier keep what they saw.
        assert_eq!(held.nodes.len(), 1);
        assert_eq!(held.get("n1").unwrap().pods.len(), 1);
    }

    #[test]
    fn updated_snapshots_catch_up_with_changed_nodes_only() {
        let cache = Cache::new();
        for n in ["n1", "n2", "n3"] {
            cache.upsert_node(Arc::new(NodeBuilder::new(n).cpu("4").build()));
        }
        let pod = |uid: &str| Arc::new(PodInfo::new(Arc::new(PodBuilder::new(uid).uid(uid).cpu("1").build())));
        let mut snap = Snapshot::default();
        cache.update_snapshot(&mut snap);
        let before: Vec<Arc<NodeInfo>> = snap.nodes.iter().cloned().collect();
        cache.assume(pod("a"), "n2");
        let held = snap.clone();
        cache.update_snapshot(&mut snap);
        // n2 is the changed node's new info; the others are shared as they were.
        assert_eq!(snap.get("n2").unwrap().requested.milli_cpu, 1000);
        assert!(Arc::ptr_eq(snap.get("n1").unwrap(), &before[0]));
        assert!(Arc::ptr_eq(snap.get("n3").unwrap(), &before[2]));
        // A clone taken before the update still sees the old n2.
        assert_eq!(held.get("n2").unwrap().requested.milli_cpu, 0);
        drop(held);
        // Two changes of one node and one of another, then a node removed
        // (the layout changes and the snapshot copies the whole list).
        cache.assume(pod("b"), "n2");
        cache.assume(pod("c"), "n3");
        cache.update_snapshot(&mut snap);
        let cpu = |s: &Snapshot, n: &str| s.get(n).map(|n| n.requested.milli_cpu);
        assert_eq!((cpu(&snap, "n1"), cpu(&snap, "n2"), cpu(&snap, "n3")), (Some(0), Some(2000), Some(1000)));
        cache.remove_node("n1");
        cache.assume(pod("d"), "n3");
        cache.update_snapshot(&mut snap);
        assert_eq!(
            (snap.len(), cpu(&snap, "n1"), cpu(&snap, "n2"), cpu(&snap, "n3")),
            (2, None, Some(2000), Some(2000))
        );
        // Every update equals a fresh snapshot.
        let fresh = cache.snapshot();
        for n in fresh.nodes.iter() {
            assert!(Arc::ptr_eq(n, snap.get(n.name()).unwrap()));
        }
        // Nothing changed: nothing copied.
        let nodes = snap.nodes.clone();
        drop(fresh);
        cache.update_snapshot(&mut snap);
        assert!(Arc::ptr_eq(&nodes, &snap.nodes));
    }

    #[test]
    fn pods_before_their_node() {
        let cache = Cache::new();
        let pod = Arc::new(PodInfo::new(Arc::new(PodBuilder::new("p").uid("u1").cpu("1").build())));
        cache.add_pod(pod, "n1");
        cache.upsert_node(Arc::new(NodeBuilder::new("n1").cpu("4").build()));
        assert_eq!(cache.snapshot().get("n1").unwrap().requested.milli_cpu, 1000);
        cache.upsert_node(Arc::new(NodeBuilder::new("n2").cpu("4").build()));
        cache.remove_node("n1");
        assert_eq!(cache.snapshot().len(), 1);
        assert!(cache.snapshot().get("n2").is_some());
    }
}
