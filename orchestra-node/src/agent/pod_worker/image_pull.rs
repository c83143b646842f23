//! Image pulls: the pull policy, `ErrImagePull` and `ImagePullBackOff`
//! with back-off, and the events the kubelet records.

use k8s_openapi::api::core::v1::{Container, Pod};
use orchestra_ctrl::events::EventType;
use tokio::time::Instant;

use super::PodWorker;
use crate::agent::status::Waiting;
use crate::runtime::RuntimeError;

impl PodWorker {
    pub(super) async fn pull(&mut self, pod: &Pod, spec: &Container) -> Option<String> {
        let image = spec.image.clone().unwrap_or_default();
        let key = format!("image:{}", spec.name);
        let now = Instant::now();
        if let Some(at) = self.failed_at.get(&key)
            && let Some((left, _)) = self.image.remaining(&key, *at, now)
        {
            let message = format!("Back-off pulling image {image:?}");
            self.waiting.insert(spec.name.clone(), Waiting::new("ImagePullBackOff", message.clone()));
            self.event(pod, Some(&spec.name), EventType::Normal, "BackOff", message);
            self.wake_at(now + left);
            return None;
        }
        let policy = spec.image_pull_policy.clone().unwrap_or_else(|| {
            if image.ends_with(":latest") || !image.rsplit('/').next().unwrap_or_default().contains(':') {
                "Always".into()
            } else {
                "IfNotPresent".into()
            }
        });
        let present = self.shared.runtime.image_status(&image).await.ok().flatten();
        if policy != "Always"
            && let Some(found) = present
        {
            self.event(
                pod,
                Some(&spec.name),
                EventType::Normal,
                "Pulled",
                format!("Container image {image:?} already present on machine"),
            );
            return Some(found.id);
        }
        if policy == "Never" {
            let message = format!("Container image {image:?} is not present with pull policy of Never");
            self.waiting.insert(spec.name.clone(), Waiting::new("ErrImageNeverPull", message.clone()));
            self.event(pod, Some(&spec.name), EventType::Warning, "ErrImageNeverPull", message);
            return None;
        }
        self.event(pod, Some(&spec.name), EventType::Normal, "Pulling", format!("Pulling image {image:?}"));
        let started = Instant::now();
        match self.shared.runtime.pull_image(&image).await {
            Ok(id) => {
                self.image.reset(&key);
                self.failed_at.remove(&key);
                let took = started.elapsed();
                let size =
                    self.shared.runtime.image_status(&image).await.ok().flatten().map(|i| i.size_bytes).unwrap_or(0);
                self.event(
                    pod,
                    Some(&spec.name),
                    EventType::Normal,
                    "Pulled",
                    format!(
                        "Successfully pulled image {image:?} in {:.3}s ({:.3}s including waiting). Image size: {size} bytes.",
                        took.as_secs_f64(),
                        took.as_secs_f64()
                    ),
                );
                Some(id)
            }
            Err(e) => {
                let now = Instant::now();
                self.image.next(&key, now);
                self.failed_at.insert(key.clone(), now);
                let message = match &e {
                    RuntimeError::ImageNotFound { message, .. } => format!("Failed to pull image {image:?}: {message}"),
                    other => format!("Failed to pull image {image:?}: {other}"),
                };
                self.waiting.insert(spec.name.clone(), Waiting::new("ErrImagePull", message.clone()));
                self.event(pod, Some(&spec.name), EventType::Warning, "Failed", message);
                self.event(pod, Some(&spec.name), EventType::Warning, "Failed", "Error: ErrImagePull".into());
                // Show ErrImagePull for half the back-off, ImagePullBackOff after.
                let delay = self.image.delay(&key, now).unwrap_or_default();
                self.wake_at(now + delay / 2);
                None
            }
        }
    }
}
