//! The dispatcher: the node's pods from the API, its static pods, the
//! runtime's events and housekeeping, fed to one pod worker per pod UID;
//! and the sweep of sandboxes no pod owns.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use k8s_openapi::api::core::v1::Pod;
use orchestra_ctrl::informer::{Event, ObjectKey};
use tokio::sync::{broadcast, mpsc};

use super::mirror_pods::reconcile_mirrors;
use super::pod_source::PodView;
use super::pod_worker::{PodWorker, WorkerInput};
use super::static_pods::{self, StaticPod};
use super::{AgentError, LABEL_NODE_NAME, Resources, Shared, WorkerEntry, resources, volumes};
use crate::runtime::{ContainerEvent, LABEL_POD_UID, SandboxFilter};

pub(super) struct Dispatcher {
    pub(super) shared: Arc<Shared>,
    pub(super) pods: PodView,
    pub(super) static_pods: HashMap<String, StaticPod>,
    pub(super) static_seen: bool,
    pub(super) mirror_busy: Arc<AtomicBool>,
    /// The orphan sweep in progress, if any (one at a time).
    pub(super) housekeeping: Option<tokio::task::JoinHandle<()>>,
}

fn significant_change(old: &Pod, new: &Pod) -> bool {
    old.metadata.deletion_timestamp != new.metadata.deletion_timestamp
        || old.metadata.deletion_grace_period_seconds != new.metadata.deletion_grace_period_seconds
        || old.spec != new.spec
        || old.metadata.labels != new.metadata.labels
        || old.metadata.annotations != new.metadata.annotations
}

impl Dispatcher {
    pub(super) async fn run(
        &mut self,
        shutdown: impl Future<Output = ()> + Send,
        mut pod_events: mpsc::UnboundedReceiver<Event<Pod>>,
        mut static_rx: mpsc::UnboundedReceiver<Vec<StaticPod>>,
        mut done_rx: mpsc::UnboundedReceiver<String>,
    ) -> Result<(), AgentError> {
        let mut runtime_events = self.shared.runtime.events();
        let mut network = self.shared.network_ready.subscribe();
        let mut housekeeping = tokio::time::interval(self.shared.config.housekeeping_interval);
        housekeeping.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut shutdown = std::pin::pin!(shutdown);
        loop {
            tokio::select! {
                _ = &mut shutdown => return Ok(()),
                Some(event) = pod_events.recv() => self.on_pod_event(event),
                Some(pods) = static_rx.recv() => self.on_static_pods(pods),
                Some(uid) = done_rx.recv() => self.on_done(&uid),
                event = runtime_events.recv() => match event {
                    Ok(ContainerEvent::Exited { sandbox_id, .. }) => {
                        let uid = self.shared.sandboxes.lock().get(&sandbox_id).cloned();
                        if let Some(uid) = uid
                            && let Some(entry) = self.shared.workers.lock().get(&uid)
                        {
                            entry.input.kick();
                        }
                    }
                    Ok(_) => {}
                    Err(broadcast::error::RecvError::Lagged(_)) => self.shared.kick_all(),
                    Err(broadcast::error::RecvError::Closed) => runtime_events = self.shared.runtime.events(),
                },
                Ok(()) = network.changed() => self.shared.kick_all(),
                _ = housekeeping.tick() => self.housekeeping(),
            }
        }
    }

    fn used_resources(&self) -> Resources {
        let mut used = Resources::default();
        for entry in self.shared.workers.lock().values() {
            if !entry.input.terminal.load(Ordering::Relaxed) {
                resources::accumulate(&mut used, &entry.requests);
            }
        }
        used
    }

    fn start_worker(&self, pod: Arc<Pod>, is_static: bool) {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        if uid.is_empty() || self.shared.workers.lock().contains_key(&uid) {
            return;
        }
        let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
        let terminal = matches!(phase, Some("Succeeded" | "Failed"));
        let requests = resources::pod_requests(&pod);
        let mut rejection = None;
        if !terminal
            && pod.metadata.deletion_timestamp.is_none()
            && let Err(r) = resources::admit(&requests, &self.used_resources(), &self.shared.allocatable())
        {
            rejection = Some((r.reason, r.message));
        }
        let rejected = rejection.is_some();
        let input = WorkerInput::new(pod, rejection);
        if terminal || rejected {
            input.terminal.store(true, Ordering::Relaxed);
        }
        let worker = PodWorker::new(self.shared.clone(), input.clone(), uid.clone(), is_static);
        let task = tokio::spawn(worker.run());
        self.shared.workers.lock().insert(uid, WorkerEntry { input, requests, is_static, task });
    }

    fn on_pod_event(&mut self, event: Event<Pod>) {
        match event {
            Event::Apply { old, new } => {
                if static_pods::is_mirror(&new) {
                    self.on_mirror(&new, old.as_deref());
                    return;
                }
                let uid = new.metadata.uid.clone().unwrap_or_default();
                let existing = self.shared.workers.lock().get(&uid).map(|e| e.input.clone());
                match existing {
                    Some(input) => {
                        let wake = old.as_deref().is_none_or(|o| significant_change(o, &new)) || {
                            let current = input.pod();
                            significant_change(&current, &new)
                        };
                        input.update(new, wake);
                    }
                    None => self.start_worker(new, false),
                }
            }
            Event::Delete(pod) => {
                if static_pods::is_mirror(&pod) {
                    self.reconcile_mirrors();
                    return;
                }
                let uid = pod.metadata.uid.clone().unwrap_or_default();
                if let Some(entry) = self.shared.workers.lock().get(&uid) {
                    entry.input.remove();
                }
            }
        }
    }

    fn on_mirror(&mut self, mirror: &Pod, old: Option<&Pod>) {
        let hash = static_pods::mirror_hash(mirror).unwrap_or_default().to_owned();
        let recreated = old.is_none_or(|o| o.metadata.uid != mirror.metadata.uid);
        if recreated && let Some(entry) = self.shared.workers.lock().get(&hash) {
            entry.input.reset_status();
        }
        let stale = !self.static_pods.contains_key(&hash) || mirror.metadata.deletion_timestamp.is_some();
        if stale && self.static_seen {
            self.reconcile_mirrors();
        }
    }

    fn on_static_pods(&mut self, pods: Vec<StaticPod>) {
        self.static_seen = true;
        let wanted: HashMap<String, StaticPod> = pods.into_iter().map(|p| (p.uid().to_owned(), p)).collect();
        for uid in self.static_pods.keys() {
            if !wanted.contains_key(uid)
                && let Some(entry) = self.shared.workers.lock().get(uid)
            {
                entry.input.remove();
            }
        }
        for (uid, p) in &wanted {
            if !self.shared.workers.lock().contains_key(uid) {
                self.start_worker(Arc::new(p.pod.clone()), true);
            }
        }
        self.static_pods = wanted;
        self.reconcile_mirrors();
    }

    fn on_done(&mut self, uid: &str) {
        let entry = self.shared.workers.lock().remove(uid);
        let Some(entry) = entry else { return };
        let pod = entry.input.pod();
        self.shared.sandboxes.lock().retain(|_, u| u != uid);
        // The same UID still wanted (a static manifest put back): start over.
        if entry.is_static {
            if let Some(p) = self.static_pods.get(uid) {
                self.start_worker(Arc::new(p.pod.clone()), true);
            }
        } else if let Some(current) = self.pods.get(&ObjectKey::of(pod.as_ref()))
            && current.metadata.uid.as_deref() == Some(uid)
            && !entry.input.is_removed()
            && current.metadata.deletion_timestamp.is_none()
        {
            self.start_worker(current, false);
        }
    }

    /// Creates missing mirror pods, replaces stale ones, deletes orphans.
    fn reconcile_mirrors(&self) {
        if self.mirror_busy.swap(true, Ordering::AcqRel) {
            return;
        }
        let busy = self.mirror_busy.clone();
        let shared = self.shared.clone();
        let informer = self.pods.clone();
        let statics: Vec<Pod> = self.static_pods.values().map(|p| p.pod.clone()).collect();
        let static_seen = self.static_seen;
        tokio::spawn(async move {
            reconcile_mirrors(&shared, &informer, &statics, static_seen).await;
            busy.store(false, Ordering::Release);
        });
    }

    fn housekeeping(&mut self) {
        if self.static_seen && self.pods.has_synced() {
            if self.shared.config.static_pod_path.is_some() || !self.static_pods.is_empty() {
                self.reconcile_mirrors();
            }
            if self.housekeeping.as_ref().is_none_or(|sweep| sweep.is_finished()) {
                let shared = self.shared.clone();
                self.housekeeping = Some(tokio::spawn(async move { remove_orphans(&shared).await }));
            }
        }
    }
}

/// Stops and removes this node's sandboxes that belong to no known pod.
async fn remove_orphans(shared: &Shared) {
    let filter = SandboxFilter {
        labels: [(LABEL_NODE_NAME.to_string(), shared.config.node_name.clone())].into(),
        ..Default::default()
    };
    let Ok(sandboxes) = shared.runtime.list_pod_sandboxes(&filter).await else { return };
    let known: HashSet<String> = shared.workers.lock().keys().cloned().collect();
    for s in sandboxes {
        let Some(uid) = s.labels.get(LABEL_POD_UID) else { continue };
        if known.contains(uid) {
            continue;
        }
        tracing::info!(sandbox = %s.id, pod = %uid, "removing an orphaned sandbox");
        let _ = shared.runtime.stop_pod_sandbox(&s.id).await;
        let _ = shared.runtime.remove_pod_sandbox(&s.id).await;
        let _ = volumes::cleanup(&shared.config.root_dir, uid);
    }
}
