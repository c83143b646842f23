//! The resources a cluster-wide controller (garbage collector, namespace
//! deleter) must visit, found through API discovery.

use kube::Client;
use kube::discovery::{ApiCapabilities, ApiResource, Discovery, Scope, verbs};

/// A listable, deletable resource.
#[derive(Clone, Debug)]
pub struct Deletable {
    /// Group, version, kind and plural.
    pub resource: ApiResource,
    /// Whether it lives in namespaces.
    pub namespaced: bool,
    /// Whether it can be watched.
    pub watchable: bool,
}

/// Every resource that supports list and delete (subresources excluded).
pub async fn deletable(client: &Client) -> Result<Vec<Deletable>, kube::Error> {
    let discovery = Discovery::new(client.clone()).run().await?;
    let mut out = Vec::new();
    for group in discovery.groups() {
        for (resource, caps) in group.recommended_resources() {
            if usable(&caps) && !resource.plural.contains('/') {
                out.push(Deletable {
                    namespaced: caps.scope == Scope::Namespaced,
                    watchable: caps.supports_operation(verbs::WATCH),
                    resource,
                });
            }
        }
    }
    Ok(out)
}

fn usable(caps: &ApiCapabilities) -> bool {
    caps.supports_operation(verbs::LIST) && caps.supports_operation(verbs::DELETE)
}
