//! The scheduling framework: one trait per extension point (each in a file
//! named after it, imported from here), status codes, the per-cycle state,
//! cluster events for queueing, and the handle plugins get at construction.

mod bind;
mod cycle_state;
mod filter;
mod permit;
mod post_bind;
mod post_filter;
mod pre_bind;
mod pre_enqueue;
mod pre_filter;
mod pre_score;
mod queue_sort;
mod reserve;
mod score;
mod status;

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::oneshot;

pub use bind::Bind;
pub use cycle_state::CycleState;
pub use filter::Filter;
pub use permit::Permit;
pub use post_bind::PostBind;
pub use post_filter::{PostFilter, PostFilterArgs};
pub use pre_bind::PreBind;
pub use pre_enqueue::PreEnqueue;
pub use pre_filter::{PreFilter, PreFilterResult};
pub use pre_score::PreScore;
pub use queue_sort::QueueSort;
pub use reserve::Reserve;
pub use score::{MAX_NODE_SCORE, NodeScore, Score, default_normalize};
pub use status::{Code, Status};

/// What every plugin is: a name, and the cluster events after which a pod it
/// rejected may fit (the queue moves such pods back to the active queue).
///
/// A plugin whose verdict only a node's labels (or a new node) can change
/// registers just those events, so that the queue retries the pods it
/// rejected only then:
///
/// ```
/// use orchestra_sched::framework::{ClusterEvent, EventResource, Plugin, action};
///
/// struct GpuNodes;
///
/// impl Plugin for GpuNodes {
///     fn name(&self) -> &'static str {
///         "GpuNodes"
///     }
///     fn events_to_register(&self) -> Vec<ClusterEvent> {
///         vec![ClusterEvent::new(EventResource::Node, action::ADD | action::UPDATE_NODE_LABEL)]
///     }
/// }
///
/// let interest = &GpuNodes.events_to_register()[0];
/// assert!(interest.matches(&ClusterEvent::new(EventResource::Node, action::UPDATE_NODE_LABEL)));
/// assert!(!interest.matches(&ClusterEvent::new(EventResource::AssignedPod, action::DELETE)));
/// ```
pub trait Plugin: Send + Sync {
    /// The plugin's registry name.
    fn name(&self) -> &'static str;
    /// Events that can make a pod this plugin rejected schedulable. The
    /// default (every event) is always correct, only slower.
    fn events_to_register(&self) -> Vec<ClusterEvent> {
        vec![ClusterEvent::new(EventResource::Wildcard, action::ALL)]
    }
}

/// The kind of object a cluster event is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventResource {
    /// A node.
    Node,
    /// A pod bound to a node.
    AssignedPod,
    /// A pod not yet bound.
    UnscheduledPod,
    /// A PersistentVolume.
    PersistentVolume,
    /// A Namespace (its labels, for namespace selectors).
    Namespace,
    /// A PersistentVolumeClaim.
    PersistentVolumeClaim,
    /// A StorageClass.
    StorageClass,
    /// Any object.
    Wildcard,
}

/// Cluster event actions, as bit flags.
pub mod action {
    /// Added.
    pub const ADD: u32 = 1;
    /// Deleted.
    pub const DELETE: u32 = 1 << 1;
    /// A node's allocatable changed.
    pub const UPDATE_NODE_ALLOCATABLE: u32 = 1 << 2;
    /// A node's labels changed.
    pub const UPDATE_NODE_LABEL: u32 = 1 << 3;
    /// A node's taints or unschedulable flag changed.
    pub const UPDATE_NODE_TAINT: u32 = 1 << 4;
    /// A node's conditions changed.
    pub const UPDATE_NODE_CONDITION: u32 = 1 << 5;
    /// A pod's labels changed.
    pub const UPDATE_POD_LABEL: u32 = 1 << 6;
    /// A pod's requests were scaled down.
    pub const UPDATE_POD_SCALE_DOWN: u32 = 1 << 7;
    /// Any other update.
    pub const UPDATE_OTHER: u32 = 1 << 8;
    /// A namespace's labels changed.
    pub const UPDATE_NAMESPACE_LABEL: u32 = 1 << 9;
    /// Every update.
    pub const UPDATE: u32 = UPDATE_NODE_ALLOCATABLE
        | UPDATE_NODE_LABEL
        | UPDATE_NODE_TAINT
        | UPDATE_NODE_CONDITION
        | UPDATE_POD_LABEL
        | UPDATE_POD_SCALE_DOWN
        | UPDATE_OTHER
        | UPDATE_NAMESPACE_LABEL;
    /// Everything.
    pub const ALL: u32 = ADD | DELETE | UPDATE;
}

/// A change in the cluster a plugin cares about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ClusterEvent {
    /// The object kind.
    pub resource: EventResource,
    /// What happened ([`action`] flags).
    pub action: u32,
}

impl ClusterEvent {
    /// An event.
    pub const fn new(resource: EventResource, action: u32) -> ClusterEvent {
        ClusterEvent { resource, action }
    }
    /// Whether this registered interest matches the event `other` that happened.
    pub fn matches(&self, other: &ClusterEvent) -> bool {
        (self.resource == EventResource::Wildcard || self.resource == other.resource) && self.action & other.action != 0
    }
}

/// A pod parked by a Permit plugin that returned Wait.
pub struct WaitingPod {
    pending: Vec<&'static str>,
    done: Option<oneshot::Sender<Status>>,
}

/// Pods waiting at Permit, by UID; plugins allow or reject them.
#[derive(Default)]
pub struct WaitingPods {
    pods: Mutex<HashMap<String, WaitingPod>>,
}

impl WaitingPods {
    /// Parks `uid`, waiting for every plugin in `pending`.
    pub fn add(&self, uid: &str, pending: Vec<&'static str>) -> oneshot::Receiver<Status> {
        let (tx, rx) = oneshot::channel();
        self.pods.lock().insert(uid.to_owned(), WaitingPod { pending, done: Some(tx) });
        rx
    }
    /// Plugin `plugin` allows `uid`; the pod goes on once every plugin allowed.
    pub fn allow(&self, uid: &str, plugin: &'static str) {
        let mut pods = self.pods.lock();
        if let Some(w) = pods.get_mut(uid) {
            w.pending.retain(|p| *p != plugin);
            if w.pending.is_empty() {
                if let Some(tx) = w.done.take() {
                    let _ = tx.send(Status::success());
                }
                pods.remove(uid);
            }
        }
    }
    /// Plugin `plugin` rejects `uid`.
    pub fn reject(&self, uid: &str, plugin: &'static str, message: &str) {
        if let Some(mut w) = self.pods.lock().remove(uid)
            && let Some(tx) = w.done.take()
        {
            let _ = tx.send(Status::unschedulable(message).with_plugin(plugin));
        }
    }
    /// UIDs of the waiting pods.
    pub fn uids(&self) -> Vec<String> {
        self.pods.lock().keys().cloned().collect()
    }
    /// Forgets `uid` (timed out); the plugins it was still waiting for.
    pub fn remove(&self, uid: &str) -> Vec<&'static str> {
        self.pods.lock().remove(uid).map(|w| w.pending).unwrap_or_default()
    }
}

/// What plugin factories get: the API client (absent when running the
/// algorithm alone), the waiting pods, the listers the scheduler keeps and
/// its metrics.
#[derive(Clone, Default)]
pub struct Handle {
    /// The client to the API server.
    pub client: Option<kube::Client>,
    /// Pods waiting at Permit.
    pub waiting_pods: Arc<WaitingPods>,
    /// Namespace labels (for namespace selectors), kept by the scheduler.
    pub namespaces: crate::listers::NamespaceLabels,
    /// PVCs, PVs, StorageClasses and PodDisruptionBudgets, kept by the scheduler.
    pub listers: Arc<crate::listers::Listers>,
    /// The scheduler's metrics (plugins such as DefaultPreemption count
    /// into them).
    pub metrics: Arc<crate::metrics::Metrics>,
}
