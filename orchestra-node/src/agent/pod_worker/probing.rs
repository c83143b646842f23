//! Probes driven for a running container: startup, then liveness and
//! readiness, each when due; a container failing its liveness or startup
//! probe is stopped to be restarted.

use std::net::IpAddr;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, Pod};
use orchestra_ctrl::events::EventType;
use tokio::time::Instant;

use super::{ContainerProbes, PodWorker, system_to_instant};
use crate::agent::probes::{self, ProbeResult, ProbeState, ProbeType, Transition};
use crate::runtime::ContainerStatus;

impl PodWorker {
    /// Runs the due probes of a running container; returns whether it has
    /// started (startup probe passed or none).
    pub(super) async fn run_probes(
        &mut self,
        pod: &Pod,
        spec: &Container,
        c: &ContainerStatus,
        pod_ip: Option<IpAddr>,
    ) -> bool {
        let started_at = c.started_at.map(system_to_instant).unwrap_or_else(Instant::now);
        let entry = self.probes.entry(spec.name.clone());
        let probes = match entry {
            std::collections::hash_map::Entry::Occupied(o) => o.into_mut(),
            std::collections::hash_map::Entry::Vacant(v) => v.insert(ContainerProbes {
                startup: spec.startup_probe.as_ref().map(|p| ProbeState::new(ProbeType::Startup, p, started_at)),
                liveness: spec.liveness_probe.as_ref().map(|p| ProbeState::new(ProbeType::Liveness, p, started_at)),
                readiness: spec.readiness_probe.as_ref().map(|p| ProbeState::new(ProbeType::Readiness, p, started_at)),
            }),
        };
        let now = Instant::now();
        let mut due: Vec<ProbeType> = Vec::new();
        let started = probes.startup.as_ref().is_none_or(|s| s.passing);
        if !started {
            if probes.startup.as_ref().is_some_and(|s| s.next_run <= now) {
                due.push(ProbeType::Startup);
            }
        } else {
            if probes.liveness.as_ref().is_some_and(|s| s.next_run <= now) {
                due.push(ProbeType::Liveness);
            }
            if probes.readiness.as_ref().is_some_and(|s| s.next_run <= now) {
                due.push(ProbeType::Readiness);
            }
        }
        let runtime = self.shared.runtime.clone();
        let results = futures::future::join_all(due.iter().map(|kind| {
            let probe = match kind {
                ProbeType::Startup => spec.startup_probe.as_ref(),
                ProbeType::Liveness => spec.liveness_probe.as_ref(),
                ProbeType::Readiness => spec.readiness_probe.as_ref(),
            }
            .expect("due probes exist");
            let runtime = runtime.clone();
            async move { probes::run_probe(probe, spec, &c.id, pod_ip, runtime.as_ref()).await }
        }))
        .await;
        tracing::debug!(pod = %self.uid, container = %spec.name, ?due, ?results, "probes ran");
        let mut kill: Option<(ProbeType, String)> = None;
        let mut events = Vec::new();
        let now = Instant::now();
        let probes = self.probes.get_mut(&spec.name).expect("inserted above");
        for (kind, result) in due.into_iter().zip(results) {
            let state = match kind {
                ProbeType::Startup => probes.startup.as_mut(),
                ProbeType::Liveness => probes.liveness.as_mut(),
                ProbeType::Readiness => probes.readiness.as_mut(),
            }
            .expect("due probes exist");
            let failed_cause = match &result {
                ProbeResult::Failure(cause) => Some(cause.clone()),
                ProbeResult::Success => None,
            };
            let transition = state.record(result, now);
            if let Some(cause) = failed_cause {
                events.push((kind, cause.clone()));
            }
            if let Transition::BecameFailure(cause) = transition
                && kind != ProbeType::Readiness
            {
                kill = Some((kind, cause));
            }
        }
        let next = [probes.startup.as_ref(), probes.liveness.as_ref(), probes.readiness.as_ref()]
            .into_iter()
            .flatten()
            .filter(|s| s.kind != ProbeType::Startup || !s.passing)
            .map(|s| s.next_run)
            .min();
        let started = probes.startup.as_ref().is_none_or(|s| s.passing);
        if let Some(next) = next {
            self.wake_at(next);
        }
        for (kind, cause) in events {
            self.event(
                pod,
                Some(&spec.name),
                EventType::Warning,
                "Unhealthy",
                format!("{} probe failed: {cause}", kind.as_str()),
            );
        }
        if let Some((kind, _)) = kill {
            let what = if kind == ProbeType::Liveness { "liveness" } else { "startup" };
            self.event(
                pod,
                Some(&spec.name),
                EventType::Normal,
                "Killing",
                format!("Container {} failed {what} probe, will be restarted", spec.name),
            );
            let grace = Duration::from_secs(
                spec.liveness_probe
                    .as_ref()
                    .and_then(|p| p.termination_grace_period_seconds)
                    .or_else(|| pod.spec.as_ref().and_then(|s| s.termination_grace_period_seconds))
                    .unwrap_or(30)
                    .max(0) as u64,
            );
            self.run_pre_stop(pod, spec, &c.id, pod_ip, grace).await;
            let _ = self.shared.runtime.stop_container(&c.id, grace).await;
            self.probes.remove(&spec.name);
            self.wake_at(Instant::now());
            return false;
        }
        started
    }
}
