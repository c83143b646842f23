//! Where an agent learns about its pods: its own informer restricted to
//! `spec.nodeName=<node>` (the default, as the kubelet), or [`SharedPods`],
//! one informer of every pod shared by many agents in one process (simulated
//! clusters: one watch instead of one per node, as kwok does).

use std::collections::HashMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::Api;
use orchestra_ctrl::informer::{BY_NODE_NAME, Event, Informer, ObjectKey, Selectors, pod_node_name};
use parking_lot::Mutex;
use tokio::sync::mpsc;

type Routes = Arc<Mutex<HashMap<String, mpsc::UnboundedSender<Event<Pod>>>>>;

struct Inner {
    informer: Arc<Informer<Pod>>,
    routes: Routes,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// One informer of all bound pods, routing each pod's events to the agent
/// of its node. Cheap to clone; the watch stops when the last clone is dropped.
#[derive(Clone)]
pub struct SharedPods {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for SharedPods {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedPods").field("pods", &self.inner.informer.len()).finish()
    }
}

fn node_of(pod: &Pod) -> &str {
    pod.spec.as_ref().and_then(|s| s.node_name.as_deref()).unwrap_or_default()
}

impl SharedPods {
    /// Starts listing and watching every pod through `client`.
    pub fn start(client: Client) -> Self {
        let informer = Informer::<Pod>::new();
        informer.add_indexer(BY_NODE_NAME, pod_node_name());
        let routes: Routes = Arc::default();
        let mut events = informer.subscribe();
        let router_routes = routes.clone();
        let router = tokio::spawn(async move {
            while let Some(event) = events.recv().await {
                let node = match &event {
                    Event::Apply { new, .. } => node_of(new).to_owned(),
                    Event::Delete(pod) => node_of(pod).to_owned(),
                };
                if node.is_empty() {
                    continue;
                }
                let mut routes = router_routes.lock();
                if let Some(tx) = routes.get(&node)
                    && tx.send(event).is_err()
                {
                    routes.remove(&node);
                }
            }
        });
        // Only bound pods: the creations of pods still to be scheduled (a
        // third of the events of a busy cluster) are never sent.
        let bound = Selectors::fields("spec.nodeName!=");
        let watcher = tokio::spawn(informer.clone().run_selected(Api::all(client), bound));
        Self { inner: Arc::new(Inner { informer, routes, tasks: vec![router, watcher] }) }
    }

    /// Number of agents fed.
    pub fn subscribers(&self) -> usize {
        self.inner.routes.lock().len()
    }
}

/// The pods of one node, from either source.
#[derive(Clone)]
pub(crate) struct PodView {
    informer: Arc<Informer<Pod>>,
    node: String,
    shared: bool,
}

impl PodView {
    /// The agent's own informer (started by the caller with `run`).
    pub(crate) fn own(node: &str) -> (Self, Arc<Informer<Pod>>) {
        let informer = Informer::<Pod>::new();
        (Self { informer: informer.clone(), node: node.into(), shared: false }, informer)
    }

    /// The agent's own informer's list+watch, restricted to its node.
    pub(crate) async fn run_own(informer: Arc<Informer<Pod>>, client: Client, node: String) {
        let selectors = Selectors::fields(format!("spec.nodeName={node}"));
        informer.run_selected(Api::all(client), selectors).await
    }

    /// A node's view of shared pods.
    pub(crate) fn shared(pods: &SharedPods, node: &str) -> Self {
        Self { informer: pods.inner.informer.clone(), node: node.into(), shared: true }
    }

    /// The events of this node's pods: first the cached ones, then changes.
    pub(crate) fn subscribe(&self, pods: Option<&SharedPods>) -> mpsc::UnboundedReceiver<Event<Pod>> {
        match pods {
            Some(pods) => {
                let (tx, rx) = mpsc::unbounded_channel();
                let mut routes = pods.inner.routes.lock();
                for pod in self.informer.by_index(BY_NODE_NAME, &self.node) {
                    let _ = tx.send(Event::Apply { old: None, new: pod });
                }
                routes.insert(self.node.clone(), tx);
                rx
            }
            None => self.informer.subscribe(),
        }
    }

    pub(crate) fn get(&self, key: &ObjectKey) -> Option<Arc<Pod>> {
        self.informer.get(key).filter(|p| !self.shared || node_of(p) == self.node)
    }

    pub(crate) fn list(&self) -> Vec<Arc<Pod>> {
        if self.shared { self.informer.by_index(BY_NODE_NAME, &self.node) } else { self.informer.list() }
    }

    pub(crate) fn has_synced(&self) -> bool {
        self.informer.has_synced()
    }
}
