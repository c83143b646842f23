//! Lifecycle hooks: `postStart` after a container started, `preStop`
//! before it is stopped (exec, httpGet or sleep, within a time budget).

use std::net::IpAddr;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, LifecycleHandler, Pod};
use orchestra_ctrl::events::EventType;

use super::PodWorker;
use crate::agent::probes;

impl PodWorker {
    /// Runs a lifecycle hook (exec, httpGet, sleep) within `budget`.
    pub(super) async fn run_hook(
        &self,
        hook: &LifecycleHandler,
        spec: &Container,
        id: &String,
        pod_ip: Option<IpAddr>,
        budget: Duration,
    ) -> Result<(), String> {
        let runtime = self.shared.runtime.clone();
        let run = async {
            if let Some(exec) = &hook.exec {
                let command = exec.command.clone().unwrap_or_default();
                match runtime.exec_sync(id, &command, budget).await {
                    Ok(r) if r.exit_code == 0 => Ok(()),
                    Ok(r) => Err(format!(
                        "Exec lifecycle hook ({command:?}) for Container {:?} failed - error: command exited with {}, message: {:?}",
                        spec.name,
                        r.exit_code,
                        String::from_utf8_lossy(&r.stdout).to_string() + &String::from_utf8_lossy(&r.stderr)
                    )),
                    Err(e) => Err(e.to_string()),
                }
            } else if let Some(http) = &hook.http_get {
                let ip = http.host.as_deref().and_then(|h| h.parse().ok()).or(pod_ip);
                match (ip, probes::resolve_port(&http.port, spec)) {
                    (Some(ip), Some(port)) => match probes::http_get(ip, port, http, budget).await {
                        Ok(code) if (200..400).contains(&code) => Ok(()),
                        Ok(code) => Err(format!(
                            "HTTP lifecycle hook ({:?}) for Container {:?} failed - status {code}",
                            http.path, spec.name
                        )),
                        Err(e) => Err(e.to_string()),
                    },
                    _ => Err("no address for the hook".into()),
                }
            } else if let Some(sleep) = &hook.sleep {
                tokio::time::sleep(Duration::from_secs(sleep.seconds.max(0) as u64)).await;
                Ok(())
            } else {
                Ok(())
            }
        };
        match tokio::time::timeout(budget, run).await {
            Ok(r) => r,
            Err(_) => Err(format!("lifecycle hook for Container {:?} timed out", spec.name)),
        }
    }

    pub(super) async fn run_pre_stop(
        &self,
        pod: &Pod,
        spec: &Container,
        id: &String,
        pod_ip: Option<IpAddr>,
        budget: Duration,
    ) {
        let Some(hook) = spec.lifecycle.as_ref().and_then(|l| l.pre_stop.as_ref()) else { return };
        if let Err(cause) = self.run_hook(hook, spec, id, pod_ip, budget).await {
            self.event(
                pod,
                Some(&spec.name),
                EventType::Warning,
                "FailedPreStopHook",
                format!("PreStopHook failed: {cause}"),
            );
        }
    }
}
