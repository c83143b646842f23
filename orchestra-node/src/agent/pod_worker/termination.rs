//! Termination: every container stopped gracefully (preStop hooks first,
//! within the pod's grace period), the sandbox and volumes removed, the
//! final status written and, for pods of the API, the final delete.

use std::sync::atomic::Ordering;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, Preconditions};
use orchestra_ctrl::events::EventType;
use tokio::time::Instant;

use super::{Flow, PodWorker, pod_key};
use crate::agent::volumes;
use crate::runtime::ContainerState;

impl PodWorker {
    pub(super) fn grace(pod: &Pod) -> Duration {
        let secs = pod
            .metadata
            .deletion_grace_period_seconds
            .or_else(|| pod.spec.as_ref().and_then(|s| s.termination_grace_period_seconds))
            .unwrap_or(30)
            .max(0);
        Duration::from_secs(secs as u64)
    }

    /// Stops every running container of the pod gracefully (preStop hooks
    /// first), at most `grace` (the pod's grace period when `None`).
    pub(super) async fn kill_all(&mut self, pod: &Pod, grace: Option<Duration>) {
        let grace = grace.unwrap_or_else(|| Self::grace(pod));
        let containers = self.containers().await;
        let pod_ip = self.sandboxes().await.iter().find_map(|s| s.ip);
        let spec = pod.spec.clone().unwrap_or_default();
        let mut stops = Vec::new();
        for (name, instances) in &containers {
            for c in instances.iter().filter(|c| matches!(c.state, ContainerState::Running | ContainerState::Created)) {
                let spec_c = spec
                    .containers
                    .iter()
                    .chain(spec.init_containers.iter().flatten())
                    .find(|s| &s.name == name)
                    .cloned();
                let id = c.id.clone();
                let name = name.clone();
                let this = &*self;
                stops.push(async move {
                    let started = Instant::now();
                    this.event(pod, Some(&name), EventType::Normal, "Killing", format!("Stopping container {name}"));
                    if let Some(spec_c) = &spec_c {
                        this.run_pre_stop(pod, spec_c, &id, pod_ip, grace).await;
                    }
                    let left = grace.saturating_sub(started.elapsed());
                    let _ = this.shared.runtime.stop_container(&id, left).await;
                });
            }
        }
        futures::future::join_all(stops).await;
    }

    /// Stops and removes the pod's sandboxes (and with them its containers)
    /// and volumes; the statuses stay in `desired`.
    pub(super) async fn cleanup_runtime(&mut self) {
        let sandboxes = self.sandboxes().await;
        if sandboxes.is_empty() && self.volumes.is_none() {
            return;
        }
        for s in sandboxes {
            let _ = self.shared.runtime.stop_pod_sandbox(&s.id).await;
            let _ = self.shared.runtime.remove_pod_sandbox(&s.id).await;
            self.shared.forget_sandbox(&s.id);
        }
        let _ = volumes::cleanup(&self.shared.config.root_dir, &self.uid);
        self.volumes = None;
        self.probes.clear();
    }

    pub(super) async fn terminate(&mut self, pod: &Pod, removed: bool) -> Flow {
        self.kill_all(pod, None).await;
        if !removed && !self.frozen {
            let mut observed = self.observe(pod).await;
            observed.terminating = !self.is_static;
            self.write_status(pod, Some(observed)).await;
        }
        self.cleanup_runtime().await;
        self.input.running.store(false, Ordering::Relaxed);
        self.input.terminal.store(true, Ordering::Relaxed);
        let (namespace, name) = pod_key(pod);
        let api: Api<Pod> = Api::namespaced(self.shared.client.clone(), &namespace);
        // Static pods: the dispatcher deletes mirror pods whose manifest is gone.
        if self.is_static || removed {
            return Flow::Done;
        }
        let params = DeleteParams {
            grace_period_seconds: Some(0),
            preconditions: Some(Preconditions { uid: Some(self.uid.clone()), resource_version: None }),
            ..Default::default()
        };
        match api.delete(&name, &params).await {
            Ok(_) => Flow::Done,
            Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => Flow::Done,
            Err(e) => {
                tracing::debug!(pod = %name, error = %e, "final delete failed; retrying");
                Flow::Wait(Some(Instant::now() + self.shared.config.api_retry))
            }
        }
    }
}
