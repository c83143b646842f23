//! Service links: the variables of the API server's service and of the
//! services of a pod's namespace (`KUBERNETES_SERVICE_HOST`...), from a
//! short-lived cache of each namespace's services.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Service;
use kube::api::{Api, ListParams};
use tokio::time::Instant;

use super::{Shared, env};

/// The services of a namespace and when they were listed.
pub(super) type CachedServices = (Instant, Arc<Vec<Service>>);

/// How long the services of a namespace are reused for service links.
const SERVICE_CACHE_TTL: Duration = Duration::from_secs(10);

impl Shared {
    async fn services_of(&self, namespace: &str) -> Arc<Vec<Service>> {
        if let Some((at, list)) = self.services.lock().get(namespace)
            && at.elapsed() < SERVICE_CACHE_TTL
        {
            return list.clone();
        }
        let api: Api<Service> = Api::namespaced(self.client.clone(), namespace);
        let list = Arc::new(api.list(&ListParams::default()).await.map(|l| l.items).unwrap_or_default());
        self.services.lock().insert(namespace.to_owned(), (Instant::now(), list.clone()));
        list
    }

    /// Service link variables for a container in `namespace`: the API
    /// server's (`KUBERNETES_SERVICE_HOST`...) always, the namespace's when
    /// `all`.
    pub(crate) async fn service_env(&self, namespace: &str, all: bool) -> Vec<(String, String)> {
        let mut services: Vec<Service> = Vec::new();
        if all {
            services.extend(self.services_of(namespace).await.iter().cloned());
        }
        if !all || namespace != "default" {
            let master = self.services_of("default").await;
            services.extend(master.iter().filter(|s| s.metadata.name.as_deref() == Some("kubernetes")).cloned());
        }
        env::service_env(&services)
    }
}
