//! The node lease: a `coordination.k8s.io/v1` Lease in `kube-node-lease`
//! named after the node, renewed every few seconds, so the node lifecycle
//! controller sees the agent alive without full status writes.

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, OwnerReference};
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};

/// Namespace of node leases.
pub const NODE_LEASE_NAMESPACE: &str = "kube-node-lease";

/// Keeps one node's Lease renewed.
pub struct LeaseKeeper {
    api: Api<Lease>,
    node_name: String,
    duration_seconds: i32,
    cached: Option<Lease>,
}

impl LeaseKeeper {
    /// A keeper of the Lease of `node_name`.
    pub fn new(client: Client, node_name: &str, duration_seconds: i32) -> Self {
        Self {
            api: Api::namespaced(client, NODE_LEASE_NAMESPACE),
            node_name: node_name.into(),
            duration_seconds,
            cached: None,
        }
    }

    fn fill(&self, lease: &mut Lease, node_uid: Option<&str>) {
        let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
        spec.holder_identity = Some(self.node_name.clone());
        spec.lease_duration_seconds = Some(self.duration_seconds);
        spec.renew_time = Some(MicroTime(Timestamp::now()));
        if let Some(uid) = node_uid {
            let owners = lease.metadata.owner_references.get_or_insert_with(Vec::new);
            if !owners.iter().any(|o| o.uid == uid) {
                owners.retain(|o| o.kind != "Node");
                owners.push(OwnerReference {
                    api_version: "v1".into(),
                    kind: "Node".into(),
                    name: self.node_name.clone(),
                    uid: uid.into(),
                    controller: None,
                    block_owner_deletion: None,
                });
            }
        }
    }

    /// Renews (or creates) the Lease; `node_uid` adds the owner reference.
    pub async fn renew(&mut self, node_uid: Option<&str>) -> Result<(), kube::Error> {
        if let Some(mut lease) = self.cached.take() {
            let owned =
                node_uid.is_none_or(|uid| lease.metadata.owner_references.iter().flatten().any(|o| o.uid == uid));
            self.fill(&mut lease, node_uid);
            let result = if owned {
                // The usual renewal: only renewTime moves, a small merge patch.
                let patch = serde_json::json!({ "spec": {
                    "renewTime": lease.spec.as_ref().and_then(|s| s.renew_time.clone()),
                    "holderIdentity": self.node_name,
                    "leaseDurationSeconds": self.duration_seconds,
                }});
                self.api.patch(&self.node_name, &PatchParams::default(), &Patch::Merge(&patch)).await
            } else {
                self.api.replace(&self.node_name, &PostParams::default(), &lease).await
            };
            match result {
                Ok(updated) => {
                    self.cached = Some(updated);
                    return Ok(());
                }
                Err(kube::Error::Api(s)) if s.code == 409 || s.code == 404 => {}
                Err(e) => return Err(e),
            }
        }
        match self.api.get_opt(&self.node_name).await? {
            Some(mut lease) => {
                self.fill(&mut lease, node_uid);
                self.cached = Some(self.api.replace(&self.node_name, &PostParams::default(), &lease).await?);
            }
            None => {
                let mut lease = Lease {
                    metadata: ObjectMeta {
                        name: Some(self.node_name.clone()),
                        namespace: Some(NODE_LEASE_NAMESPACE.into()),
                        ..Default::default()
                    },
                    spec: None,
                };
                self.fill(&mut lease, node_uid);
                self.cached = Some(self.api.create(&PostParams::default(), &lease).await?);
            }
        }
        Ok(())
    }

    /// The last Lease written.
    pub fn current(&self) -> Option<&Lease> {
        self.cached.as_ref()
    }
}
