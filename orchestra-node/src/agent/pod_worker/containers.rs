//! The pod's containers: init containers in order, then app containers,
//! each created and started when missing and restarted as the restart
//! policy says, after its crash-loop back-off.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, Pod};
use orchestra_ctrl::events::EventType;
use tokio::time::Instant;

use super::{Instances, PodWorker, ms, pod_key, system_to_instant};
use crate::agent::resources::{int_value, milli_value};
use crate::agent::status::Waiting;
use crate::agent::{LABEL_NODE_NAME, env, security, volumes};
use crate::runtime::{
    ContainerConfig, ContainerResources, ContainerState, ContainerStatus, LABEL_CONTAINER_NAME, LABEL_POD_NAME,
    LABEL_POD_NAMESPACE, LABEL_POD_UID, PodSandboxStatus, RuntimeError,
};

impl PodWorker {
    pub(super) async fn sync_running(&mut self, pod: &Pod) -> Result<(), String> {
        let spec = pod.spec.clone().unwrap_or_default();
        let Some(sandbox) = self.ensure_sandbox(pod).await? else { return Ok(()) };
        let pod_ip = if spec.host_network == Some(true) { Some(self.shared.config.node_ip) } else { sandbox.ip };
        let policy = spec.restart_policy.clone().unwrap_or_else(|| "Always".into());
        let mut containers = self.containers().await;
        self.prune(&mut containers).await;

        // Init containers, in order.
        let mut initialized = true;
        for c in spec.init_containers.iter().flatten() {
            let sidecar = c.restart_policy.as_deref() == Some("Always");
            let latest = containers.get(&c.name).and_then(|l| l.first()).cloned();
            match latest {
                None => {
                    self.start(pod, c, self.first_attempt(&c.name), &sandbox, pod_ip).await;
                    initialized = false;
                    break;
                }
                Some(l) if l.state == ContainerState::Created => {
                    self.start_created(pod, c, &l).await;
                    initialized = false;
                    break;
                }
                Some(l) if l.state == ContainerState::Running => {
                    if sidecar {
                        let started = self.run_probes(pod, c, &l, pod_ip).await;
                        if started {
                            continue;
                        }
                    }
                    initialized = false;
                    break;
                }
                Some(l) => {
                    let code = l.exit_code.unwrap_or(0);
                    if code == 0 && !sidecar {
                        self.waiting.remove(&c.name);
                        continue;
                    }
                    if policy == "Never" && !sidecar {
                        initialized = false;
                        break;
                    }
                    self.restart(pod, c, &l, &sandbox, pod_ip).await;
                    initialized = false;
                    break;
                }
            }
        }
        if !initialized {
            return Ok(());
        }
        for c in &spec.containers {
            let latest = containers.get(&c.name).and_then(|l| l.first()).cloned();
            match latest {
                None => self.start(pod, c, self.first_attempt(&c.name), &sandbox, pod_ip).await,
                Some(l) if l.state == ContainerState::Created => self.start_created(pod, c, &l).await,
                Some(l) if l.state == ContainerState::Running => {
                    self.waiting.remove(&c.name);
                    self.run_probes(pod, c, &l, pod_ip).await;
                }
                Some(l) => {
                    let code = l.exit_code.unwrap_or(0);
                    let restart = match policy.as_str() {
                        "Never" => false,
                        "OnFailure" => code != 0,
                        _ => true,
                    };
                    if restart {
                        self.restart(pod, c, &l, &sandbox, pod_ip).await;
                    } else {
                        self.waiting.remove(&c.name);
                    }
                }
            }
        }
        Ok(())
    }

    /// The attempt of a container the runtime has no instance of: 0, or
    /// one past the restarts the API shows if it ran before (a runtime that
    /// lost its containers keeps counting, as the kubelet does).
    fn first_attempt(&self, name: &str) -> u32 {
        let status = self.desired.as_ref();
        let previous = status
            .iter()
            .flat_map(|s| s.container_statuses.iter().flatten().chain(s.init_container_statuses.iter().flatten()))
            .find(|c| c.name == name && c.container_id.is_some());
        previous.map(|c| c.restart_count.max(0) as u32 + 1).unwrap_or(0)
    }

    /// Keeps the two newest instances of each container.
    async fn prune(&self, containers: &mut BTreeMap<String, Instances>) {
        for list in containers.values_mut() {
            while list.len() > 2 {
                let old = list.pop().expect("len > 2");
                if old.state == ContainerState::Running {
                    let _ = self.shared.runtime.stop_container(&old.id, Duration::ZERO).await;
                }
                let _ = self.shared.runtime.remove_container(&old.id).await;
            }
        }
    }

    /// Records that `spec`'s container started: no longer waiting, and a
    /// `Started` event.
    fn started(&mut self, pod: &Pod, spec: &Container) {
        self.waiting.remove(&spec.name);
        self.event(pod, Some(&spec.name), EventType::Normal, "Started", format!("Started container {}", spec.name));
    }

    async fn start_created(&mut self, pod: &Pod, spec: &Container, c: &ContainerStatus) {
        match self.shared.runtime.start_container(&c.id).await {
            Ok(()) => {
                self.started(pod, spec);
                self.input.kick();
            }
            Err(e) => {
                self.event(pod, Some(&spec.name), EventType::Warning, "Failed", format!("Error: {e}"));
                let _ = self.shared.runtime.stop_container(&c.id, Duration::ZERO).await;
                self.input.kick();
            }
        }
    }

    /// An exited container the policy restarts: now, or after its back-off.
    async fn restart(
        &mut self,
        pod: &Pod,
        spec: &Container,
        last: &ContainerStatus,
        sandbox: &PodSandboxStatus,
        pod_ip: Option<IpAddr>,
    ) {
        let now = Instant::now();
        let finished = last.finished_at.map(system_to_instant).unwrap_or(now);
        if let Some((left, delay)) = self.crash.remaining(&spec.name, finished, now) {
            let (namespace, name) = pod_key(pod);
            let message = format!(
                "back-off {} restarting failed container={} pod={}_{}({})",
                ms(delay),
                spec.name,
                name,
                namespace,
                self.uid
            );
            self.waiting.insert(spec.name.clone(), Waiting::new("CrashLoopBackOff", message));
            let reported = self.backoff_reported.get(&spec.name).is_some_and(|at| *at >= finished);
            if !reported {
                self.backoff_reported.insert(spec.name.clone(), now);
                self.event(
                    pod,
                    Some(&spec.name),
                    EventType::Warning,
                    "BackOff",
                    format!(
                        "Back-off restarting failed container {} in pod {}_{}({})",
                        spec.name, name, namespace, self.uid
                    ),
                );
            }
            self.wake_at(now + left);
            return;
        }
        // A restart whose start stopped short of creating the container
        // (image pull, configuration) goes on under their own back-off.
        if self.restart_pending.insert(spec.name.clone()) {
            self.crash.next(&spec.name, now);
        }
        self.start(pod, spec, last.attempt + 1, sandbox, pod_ip).await;
    }

    fn config_error(&mut self, pod: &Pod, spec: &Container, reason: &str, message: String) {
        self.waiting.insert(spec.name.clone(), Waiting::new(reason, message.clone()));
        self.event(pod, Some(&spec.name), EventType::Warning, "Failed", format!("Error: {message}"));
        let key = format!("config:{}", spec.name);
        let now = Instant::now();
        self.retry.next(&key, now);
        let delay = self.retry.delay(&key, now).unwrap_or_default();
        self.wake_at(now + delay);
    }

    /// Pulls, creates and starts attempt `attempt` of a container.
    async fn start(
        &mut self,
        pod: &Pod,
        spec: &Container,
        attempt: u32,
        sandbox: &PodSandboxStatus,
        pod_ip: Option<IpAddr>,
    ) {
        let Some(_image_id) = self.pull(pod, spec).await else { return };
        let (namespace, _) = pod_key(pod);
        let objects = match self.fetch_objects(&namespace, &env::env_references(spec)).await {
            Ok(o) => o,
            Err(e) => {
                self.wake_at(Instant::now() + self.shared.config.api_retry);
                tracing::debug!(error = %e, "fetching ConfigMaps/Secrets failed");
                return;
            }
        };
        let mut ctx = self.env_context(pod_ip);
        if self.shared.config.service_links {
            let all = pod.spec.as_ref().and_then(|s| s.enable_service_links) != Some(false);
            ctx.services = self.shared.service_env(&namespace, all).await;
        }
        let envs = match env::container_env(pod, spec, &ctx, &objects) {
            Ok(e) => e,
            Err(e) => return self.config_error(pod, spec, "CreateContainerConfigError", e.to_string()),
        };
        let mounts = match self.volumes.as_ref().map(|v| volumes::container_mounts(pod, spec, v)) {
            Some(Ok(m)) => m,
            Some(Err(e)) => return self.config_error(pod, spec, "CreateContainerConfigError", e.to_string()),
            None => return,
        };
        let (command, args) = env::expand_command(spec, &envs);
        let resources = spec.resources.as_ref();
        let limit = |n: &str| resources.and_then(|r| r.limits.as_ref()).and_then(|m| m.get(n).cloned());
        let request = |n: &str| resources.and_then(|r| r.requests.as_ref()).and_then(|m| m.get(n).cloned());
        let (pod_ns, pod_name) = pod_key(pod);
        let config = ContainerConfig {
            name: spec.name.clone(),
            attempt,
            image: spec.image.clone().unwrap_or_default(),
            command,
            args,
            working_dir: spec.working_dir.clone().filter(|w| !w.is_empty()).map(PathBuf::from),
            envs,
            mounts,
            log_path: PathBuf::from(&spec.name).join(format!("{attempt}.log")),
            resources: ContainerResources {
                cpu_limit_millis: limit("cpu").map(|q| milli_value(&q)),
                cpu_request_millis: request("cpu").or_else(|| limit("cpu")).map(|q| milli_value(&q)),
                memory_limit_bytes: limit("memory").map(|q| int_value(&q)),
                pids_limit: self.shared.config.pod_pids_limit,
            },
            security: security::container_security(pod, spec),
            labels: [
                (LABEL_POD_NAME.to_string(), pod_name),
                (LABEL_POD_NAMESPACE.to_string(), pod_ns),
                (LABEL_POD_UID.to_string(), self.uid.clone()),
                (LABEL_CONTAINER_NAME.to_string(), spec.name.clone()),
                (LABEL_NODE_NAME.to_string(), self.shared.config.node_name.clone()),
            ]
            .into(),
        };
        let sandbox_config = self.sandbox_config(pod, sandbox.metadata.attempt);
        let id = match self.shared.runtime.create_container(&sandbox.id, &config, &sandbox_config).await {
            Ok(id) => id,
            Err(e @ RuntimeError::ConfigRefused(_)) => {
                return self.config_error(pod, spec, "CreateContainerConfigError", e.to_string());
            }
            Err(e) => return self.config_error(pod, spec, "CreateContainerError", e.to_string()),
        };
        self.retry.reset(&format!("config:{}", spec.name));
        self.restart_pending.remove(&spec.name);
        self.event(pod, Some(&spec.name), EventType::Normal, "Created", format!("Created container: {}", spec.name));
        match self.shared.runtime.start_container(&id).await {
            Ok(()) => {
                self.started(pod, spec);
                if let Some(hook) = spec.lifecycle.as_ref().and_then(|l| l.post_start.as_ref()) {
                    let grace = Self::grace(pod);
                    if let Err(cause) = self.run_hook(hook, spec, &id, pod_ip, grace).await {
                        self.event(
                            pod,
                            Some(&spec.name),
                            EventType::Warning,
                            "FailedPostStartHook",
                            format!("PostStartHook failed: {cause}"),
                        );
                        self.event(
                            pod,
                            Some(&spec.name),
                            EventType::Normal,
                            "Killing",
                            format!("FailedPostStartHook: stopping container {}", spec.name),
                        );
                        let _ = self.shared.runtime.stop_container(&id, grace).await;
                    }
                }
                // Sync again at once: the container is now Running, its
                // probes are due from its start (a runtime's Started event
                // may have been published before this pod knew the id).
                self.input.kick();
            }
            Err(e) => {
                self.waiting.remove(&spec.name);
                self.event(pod, Some(&spec.name), EventType::Warning, "Failed", format!("Error: {e}"));
                let _ = self.shared.runtime.stop_container(&id, Duration::ZERO).await;
            }
        }
    }
}
