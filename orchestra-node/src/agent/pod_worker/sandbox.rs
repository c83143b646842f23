//! The pod's sandbox and volumes: volumes set up (and refreshed on resync)
//! from the ConfigMaps and Secrets they name and the service account
//! tokens they project (refreshed when due), then a ready sandbox, created
//! again with back-off when it failed or died.

use std::collections::HashMap;
use std::net::IpAddr;

use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
use kube::api::Api;
use orchestra_ctrl::events::EventType;
use tokio::time::Instant;

use super::{PodWorker, pod_key};
use crate::agent::env::{self, EnvContext, Objects};
use crate::agent::{LABEL_NODE_NAME, volumes};
use crate::runtime::{
    LABEL_POD_NAME, LABEL_POD_NAMESPACE, LABEL_POD_UID, PodSandboxConfig, PodSandboxMetadata, PodSandboxStatus,
    SandboxState,
};

impl PodWorker {
    pub(super) async fn fetch_objects(&self, namespace: &str, refs: &[env::ObjectRef]) -> Result<Objects, kube::Error> {
        let mut objects = Objects::default();
        for (secret, name) in refs {
            if *secret {
                let api: Api<Secret> = Api::namespaced(self.shared.client.clone(), namespace);
                objects.secrets.insert(name.clone(), api.get_opt(name).await?);
            } else {
                let api: Api<ConfigMap> = Api::namespaced(self.shared.client.clone(), namespace);
                objects.config_maps.insert(name.clone(), api.get_opt(name).await?);
            }
        }
        Ok(objects)
    }

    pub(super) fn env_context(&self, pod_ip: Option<IpAddr>) -> EnvContext {
        EnvContext {
            node_name: self.shared.config.node_name.clone(),
            host_ips: vec![self.shared.config.node_ip.to_string()],
            pod_ips: pod_ip.map(|ip| vec![ip.to_string()]).unwrap_or_default(),
            allocatable: self.shared.allocatable(),
            services: Vec::new(),
        }
    }

    pub(super) fn sandbox_config(&self, pod: &Pod, attempt: u32) -> PodSandboxConfig {
        let (namespace, name) = pod_key(pod);
        let spec = pod.spec.clone().unwrap_or_default();
        let mut labels = pod.metadata.labels.clone().unwrap_or_default();
        labels.insert(LABEL_POD_NAME.into(), name.clone());
        labels.insert(LABEL_POD_NAMESPACE.into(), namespace.clone());
        labels.insert(LABEL_POD_UID.into(), self.uid.clone());
        labels.insert(LABEL_NODE_NAME.into(), self.shared.config.node_name.clone());
        PodSandboxConfig {
            metadata: PodSandboxMetadata {
                name: name.clone(),
                namespace: namespace.clone(),
                uid: self.uid.clone(),
                attempt,
            },
            hostname: spec.hostname.clone().unwrap_or_else(|| name.clone()),
            log_directory: self.shared.config.pod_log_dir.join(format!("{namespace}_{name}_{}", self.uid)),
            host_network: spec.host_network == Some(true),
            labels,
            annotations: pod.metadata.annotations.clone().unwrap_or_default(),
            // A RuntimeClass's handler is taken to be its name.
            runtime_handler: spec.runtime_class_name.clone().unwrap_or_default(),
        }
    }

    /// Volumes (first time and on resync), then a ready sandbox.
    pub(super) async fn ensure_sandbox(&mut self, pod: &Pod) -> Result<Option<PodSandboxStatus>, String> {
        let (namespace, _) = pod_key(pod);
        let tokens_due = self.tokens.next_refresh().is_some_and(|at| at <= std::time::SystemTime::now());
        let refresh = self.volumes.is_none()
            || tokens_due
            || (self.resync && self.volumes_refreshed.is_none_or(|t| t.elapsed() >= self.shared.config.sync_frequency));
        let sandboxes = self.sandboxes().await;
        let ready = sandboxes.iter().rev().find(|s| s.state == SandboxState::Ready).cloned();
        let objects = if refresh {
            match self.fetch_objects(&namespace, &volumes::volume_references(pod)).await {
                Ok(mut objects) => {
                    objects.tokens = self.tokens.tokens(&self.shared.client, pod).await;
                    Some(objects)
                }
                // The API is unreachable: keep the volumes as they are.
                Err(_) if self.volumes.is_some() => None,
                Err(e) => return Err(e.to_string()),
            }
        } else {
            None
        };
        if let Some(objects) = objects {
            let ctx = self.env_context(ready.as_ref().and_then(|s| s.ip));
            let root = self.shared.config.root_dir.clone();
            let has_volumes = pod.spec.as_ref().is_some_and(|s| s.volumes.as_ref().is_some_and(|v| !v.is_empty()));
            let result = if has_volumes {
                let pod_owned = pod.clone();
                tokio::task::spawn_blocking(move || volumes::setup_volumes(&root, &pod_owned, &objects, &ctx))
                    .await
                    .map_err(|e| e.to_string())?
            } else {
                Ok(HashMap::new())
            };
            match result {
                Ok(dirs) => {
                    self.volumes = Some(dirs);
                    self.volumes_refreshed = Some(Instant::now());
                    self.retry.reset("volumes");
                    // Tokens are written again before they expire.
                    if let Some(at) = self.tokens.next_refresh() {
                        let left = at.duration_since(std::time::SystemTime::now()).unwrap_or_default();
                        self.wake_at(Instant::now() + left);
                    }
                }
                Err(e) => {
                    self.event(pod, None, EventType::Warning, "FailedMount", e.to_string());
                    self.retry.next("volumes", Instant::now());
                    let delay = self.retry.delay("volumes", Instant::now()).unwrap_or_default();
                    self.wake_at(Instant::now() + delay);
                    if self.volumes.is_none() {
                        return Ok(None);
                    }
                }
            }
        }
        if let Some(s) = ready {
            self.shared.remember_sandbox(&s.id, &self.uid);
            return Ok(Some(s));
        }
        if let Some(at) = self.failed_at.get("sandbox")
            && let Some((left, _)) = self.retry.remaining("sandbox", *at, Instant::now())
        {
            self.wake_at(Instant::now() + left);
            return Ok(None);
        }
        // A dead sandbox: its containers go with it; start over.
        for s in &sandboxes {
            let _ = self.shared.runtime.remove_pod_sandbox(&s.id).await;
            self.shared.forget_sandbox(&s.id);
        }
        let config = self.sandbox_config(pod, sandboxes.len() as u32);
        match self.shared.runtime.run_pod_sandbox(&config).await {
            Ok(id) => {
                self.retry.reset("sandbox");
                self.failed_at.remove("sandbox");
                self.shared.remember_sandbox(&id, &self.uid);
                let status = self.shared.runtime.pod_sandbox_status(&id).await.map_err(|e| e.to_string())?;
                Ok(Some(status))
            }
            Err(e) => {
                self.event(
                    pod,
                    None,
                    EventType::Warning,
                    "FailedCreatePodSandBox",
                    format!("Failed to create pod sandbox: {e}"),
                );
                let now = Instant::now();
                self.retry.next("sandbox", now);
                self.failed_at.insert("sandbox".into(), now);
                let delay = self.retry.delay("sandbox", now).unwrap_or_default();
                self.wake_at(now + delay);
                Ok(None)
            }
        }
    }
}
