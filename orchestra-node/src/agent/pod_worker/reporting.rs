//! The pod's status: what the runtime shows of its containers, built into
//! a `PodStatus` and written when it differs from what was last written.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;

use k8s_openapi::api::core::v1::{Container, Pod, PodStatus};
use kube::api::{Api, Patch, PatchParams};
use tokio::time::Instant;

use super::{Instances, PodWorker, pod_key};
use crate::agent::status::{self, ContainerView, PodObservation};
use crate::runtime::{ContainerState, SandboxState};

impl PodWorker {
    /// What the runtime shows of the pod, as container statuses.
    pub(super) async fn observe(&mut self, pod: &Pod) -> PodObservation {
        let spec = pod.spec.clone().unwrap_or_default();
        let sandboxes = self.sandboxes().await;
        let sandbox = sandboxes.iter().rev().find(|s| s.state == SandboxState::Ready);
        let containers = self.containers().await;
        // Probe state belongs to one instance: forget it once the instance stops running.
        let running_names: Vec<&String> = containers
            .iter()
            .filter(|(_, l)| l.first().is_some_and(|c| c.state == ContainerState::Running))
            .map(|(n, _)| n)
            .collect();
        self.probes.retain(|name, _| running_names.contains(&name));
        let init: Vec<_> = spec
            .init_containers
            .iter()
            .flatten()
            .map(|c| self.view(c, &containers, "PodInitializing"))
            .map(|(c, v)| status::container_status(c, &v))
            .collect();
        let default_app = if status::initialized(pod, &init) { "ContainerCreating" } else { "PodInitializing" };
        let app: Vec<_> = spec
            .containers
            .iter()
            .map(|c| self.view(c, &containers, default_app))
            .map(|(c, v)| status::container_status(c, &v))
            .collect();
        let running = app.iter().any(|s| s.state.as_ref().is_some_and(|st| st.running.is_some()));
        self.input.running.store(running, Ordering::Relaxed);
        let pod_ip = match sandbox {
            Some(_) if spec.host_network == Some(true) => Some(self.shared.config.node_ip),
            Some(s) => s.ip,
            None => None,
        };
        PodObservation {
            sandbox_ready: sandbox.is_some(),
            pod_ip: pod_ip.map(|ip| ip.to_string()),
            host_ip: self.shared.config.node_ip.to_string(),
            init,
            app,
            terminating: false,
            forced: self.forced.clone(),
        }
    }

    fn view<'a>(
        &self,
        spec: &'a Container,
        containers: &BTreeMap<String, Instances>,
        default: &'static str,
    ) -> (&'a Container, ContainerView) {
        let list = containers.get(&spec.name);
        let current = list.and_then(|l| l.first()).cloned();
        let previous = list.and_then(|l| l.get(1)).cloned();
        let probes = self.probes.get(&spec.name);
        let started = probes.and_then(|p| p.startup.as_ref()).is_none_or(|s| s.passing);
        let ready = started
            && probes.and_then(|p| p.readiness.as_ref()).is_none_or(|s| s.passing)
            && (spec.readiness_probe.is_none() || probes.is_some());
        let started = started && (spec.startup_probe.is_none() || probes.is_some());
        let mut waiting = self.waiting.get(&spec.name).cloned();
        if current.as_ref().is_some_and(|c| c.state == ContainerState::Running) {
            waiting = None;
        }
        (spec, ContainerView { current, previous, waiting, default_waiting: default, ready, started })
    }

    /// Computes the status (from `observed`; without, the last computed one,
    /// with a forced phase applied) and writes it if it differs from what was
    /// last written. Returns the status now in effect.
    pub(super) async fn write_status(&mut self, pod: &Pod, observed: Option<PodObservation>) -> PodStatus {
        let mut base = pod.clone();
        if self.desired.is_some() {
            base.status = self.desired.clone();
        }
        let status = match observed {
            Some(obs) => status::pod_status(&base, obs, &status::now()),
            None => {
                let mut s = base.status.clone().unwrap_or_default();
                if let Some((phase, reason, message)) = &self.forced {
                    let now = status::now();
                    s.phase = Some(phase.clone());
                    s.reason = Some(reason.clone());
                    s.message = Some(message.clone());
                    for c in s.conditions.iter_mut().flatten() {
                        if c.type_ == "Ready" || c.type_ == "ContainersReady" {
                            if c.status != "False" {
                                c.last_transition_time = Some(now.clone());
                            }
                            c.status = "False".into();
                        }
                    }
                    if s.start_time.is_none() {
                        s.start_time = Some(now);
                    }
                    s.host_ip = Some(self.shared.config.node_ip.to_string());
                    s.qos_class = Some(crate::agent::resources::qos_class(pod).into());
                }
                s
            }
        };
        self.desired = Some(status.clone());
        if self.written.as_ref() == Some(&status) {
            return status;
        }
        let (namespace, name) = pod_key(pod);
        let api: Api<Pod> = Api::namespaced(self.shared.client.clone(), &namespace);
        let patch = serde_json::json!({ "status": status });
        match api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch)).await {
            Ok(_) => {
                self.shared.stats.status_writes.fetch_add(1, Ordering::Relaxed);
                self.written = Some(status.clone());
            }
            Err(e) => {
                tracing::debug!(pod = %name, error = %e, "status write failed");
                self.wake_at(Instant::now() + self.shared.config.api_retry);
            }
        }
        status
    }
}
