//! The Node authorizer (upstream `--authorization-mode=Node`): what a node
//! agent may do, decided from the pods bound to it.
//!
//! A node agent authenticates as `system:node:<name>` in group
//! `system:nodes`. It may read only the Secrets, ConfigMaps,
//! PersistentVolumeClaims, PersistentVolumes and VolumeAttachments that the
//! pods bound to it use, request tokens only for their service accounts, and
//! touch only its own Lease and CSINode. Anything else it may do is the
//! `system:node` ClusterRole's rules, which this authorizer applies itself
//! (upstream binds that role to nobody). Which objects a node may write —
//! its own Node, its pods' status, its mirror pods — is the
//! NodeRestriction admission plugin's part.

mod graph;

use std::sync::{Arc, OnceLock};

use async_trait::async_trait;
use k8s_openapi::api::rbac::v1::PolicyRule;
use orchestra_store::Store;
use serde_json::Value;

use self::graph::{Refers, bound_pod};
pub use graph::NodeGraph;

use super::rbac::rules::{push_review_rule, rule_allows};
use super::{Attributes, Authorizer, Decision, Rules, UserInfo};

/// The group every node agent is in.
pub const NODES_GROUP: &str = "system:nodes";

/// The prefix of a node agent's user name, followed by the node's name.
pub const NODE_USER_PREFIX: &str = "system:node:";

/// The node `user` is the agent of: its name after `system:node:`, if it
/// is in group `system:nodes`.
pub fn node_of(user: &UserInfo) -> Option<&str> {
    let name = user.name.strip_prefix(NODE_USER_PREFIX)?;
    (!name.is_empty() && user.groups.iter().any(|g| g == NODES_GROUP)).then_some(name)
}

/// The kinds of objects (plural names) a pod refers to: service accounts,
/// secrets, config maps and claims, in that order, each once; what
/// NodeRestriction refuses in a mirror pod.
pub(crate) fn referenced_kinds(pod: &Value) -> Vec<&'static str> {
    let references = graph::references(pod);
    let order = [
        (Refers::ServiceAccount, "serviceaccounts"),
        (Refers::Secret, "secrets"),
        (Refers::ConfigMap, "configmaps"),
        (Refers::PersistentVolumeClaim, "persistentvolumeclaims"),
    ];
    order.into_iter().filter(|(kind, _)| references.iter().any(|(k, _)| k == kind)).map(|(_, plural)| plural).collect()
}

/// Where the authorizer reads the store when its graph has not seen a
/// relation (yet): the objects' store prefixes.
#[derive(Clone)]
pub(crate) struct Lookup {
    pub store: Arc<dyn Store>,
    pub pods: String,
    pub volumes: String,
    pub attachments: String,
}

/// Authorizes node agents (`system:node:<name>` in `system:nodes`); has no
/// opinion about anyone else.
///
/// It decides from a [`NodeGraph`] the API server keeps from a watch of
/// pods, PersistentVolumeClaims and VolumeAttachments; a relation the graph
/// does not hold (a pod bound a moment ago) is looked up in the store
/// before the request is refused. [`ApiServerBuilder::node_authorizer`]
/// makes one:
///
/// [`ApiServerBuilder::node_authorizer`]: crate::server::ApiServerBuilder::node_authorizer
///
/// ```
/// # async fn demo() -> Result<(), orchestra_core::api::ApiError> {
/// use std::sync::Arc;
/// use orchestra_core::auth::{Attributes, Authorizer, AuthorizerChain, Decision, UserInfo};
/// use orchestra_core::server::ApiServer;
/// use orchestra_store::MemStore;
///
/// let builder = ApiServer::builder(Arc::new(MemStore::new()));
/// let node = builder.node_authorizer();
/// let rbac = builder.rbac_authorizer();
/// let server = builder
///     .authorizer(AuthorizerChain::new().with(node.clone()).with(rbac))
///     .rbac_bootstrap(true)
///     .build()
///     .await?;
/// let agent = UserInfo::new("system:node:n1", &["system:nodes"]);
/// let secret = Attributes {
///     user: agent,
///     verb: "get".into(),
///     resource_request: true,
///     resource: "secrets".into(),
///     namespace: "default".into(),
///     name: "db-password".into(),
///     ..Default::default()
/// };
/// // No pod on n1 uses the secret.
/// let reason = "no relationship found between node \"n1\" and this object";
/// assert_eq!(node.authorize(&secret).await, Decision::NoOpinion(reason.into()));
/// # let _ = server;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct NodeAuthorizer {
    graph: Arc<NodeGraph>,
    lookup: Option<Lookup>,
}

impl std::fmt::Debug for NodeAuthorizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeAuthorizer").field("graph", &self.graph).finish_non_exhaustive()
    }
}

/// The rules of upstream's `system:node` ClusterRole.
fn node_rules() -> &'static [PolicyRule] {
    static RULES: OnceLock<Vec<PolicyRule>> = OnceLock::new();
    RULES.get_or_init(|| {
        super::rbac::bootstrap::cluster_roles()
            .into_iter()
            .find(|role| role.metadata.name.as_deref() == Some("system:node"))
            .and_then(|role| role.rules)
            .unwrap_or_default()
    })
}

/// A request about one object the graph relates to nodes.
enum Related<'a> {
    Namespaced(Refers, &'a str, &'a str),
    Volume(&'a str),
    Attachment(&'a str),
}

impl NodeAuthorizer {
    /// An authorizer deciding from `graph` alone (no store to fall back
    /// on): for tests and embedders that keep the graph themselves.
    pub fn new(graph: Arc<NodeGraph>) -> NodeAuthorizer {
        NodeAuthorizer { graph, lookup: None }
    }

    pub(crate) fn with_lookup(graph: Arc<NodeGraph>, lookup: Lookup) -> NodeAuthorizer {
        NodeAuthorizer { graph, lookup: Some(lookup) }
    }

    /// The graph it decides from.
    pub fn graph(&self) -> &Arc<NodeGraph> {
        &self.graph
    }

    /// The decision for a node agent of `node`, with upstream's reasons
    /// when it is not an Allow.
    async fn decide(&self, node: &str, a: &Attributes) -> Decision {
        let verb = a.verb.as_str();
        let object = |kind| Related::Namespaced(kind, &a.namespace, &a.name);
        let related = match (a.api_group.as_str(), a.resource.as_str()) {
            // Single-object reads only: a list or watch names its object
            // with a `metadata.name` field selector.
            ("", resource @ ("secrets" | "configmaps")) => {
                if !matches!(verb, "get" | "list" | "watch") {
                    return refuse("can only read resources of this type");
                }
                if !a.subresource.is_empty() {
                    return refuse("cannot read subresource");
                }
                if a.namespace.is_empty() {
                    return refuse("can only read namespaced object of this type");
                }
                object(if resource == "secrets" { Refers::Secret } else { Refers::ConfigMap })
            }
            ("", "persistentvolumeclaims") if a.subresource == "status" => {
                if !matches!(verb, "get" | "update" | "patch") {
                    return refuse("can only get/update/patch this type");
                }
                object(Refers::PersistentVolumeClaim)
            }
            ("", "persistentvolumeclaims") => match single_get(a) {
                Some(reason) => return refuse(reason),
                None => object(Refers::PersistentVolumeClaim),
            },
            ("", "persistentvolumes") => match single_get(a) {
                Some(reason) => return refuse(reason),
                None => Related::Volume(&a.name),
            },
            ("storage.k8s.io", "volumeattachments") => match single_get(a) {
                Some(reason) => return refuse(reason),
                None => Related::Attachment(&a.name),
            },
            ("", "serviceaccounts") if a.subresource == "token" => {
                if verb != "create" || a.name.is_empty() {
                    return refuse("can only create tokens for individual service accounts");
                }
                object(Refers::ServiceAccount)
            }
            ("coordination.k8s.io", "leases") if a.subresource.is_empty() => {
                if !OWN_OBJECT_VERBS.contains(&verb) {
                    return refuse("can only get, create, update, patch, or delete a node lease");
                }
                if a.namespace != "kube-node-lease" {
                    return refuse("can only access leases in the \"kube-node-lease\" system namespace");
                }
                if verb != "create" && a.name != node {
                    return refuse("can only access node lease with the same name as the requesting node");
                }
                return Decision::Allow;
            }
            ("storage.k8s.io", "csinodes") => {
                if !OWN_OBJECT_VERBS.contains(&verb) {
                    return refuse("can only get, create, update, patch, or delete a CSINode");
                }
                if !a.subresource.is_empty() {
                    return refuse("cannot authorize CSINode subresources");
                }
                if verb != "create" && a.name != node {
                    return refuse("can only access CSINode with the same name as the requesting node");
                }
                return Decision::Allow;
            }
            ("coordination.k8s.io", "leases") => return Decision::no_opinion(),
            _ => {
                return match node_rules().iter().any(|rule| rule_allows(rule, a)) {
                    true => Decision::Allow,
                    false => Decision::no_opinion(),
                };
            }
        };
        let unnamed = match related {
            Related::Namespaced(_, _, name) | Related::Volume(name) | Related::Attachment(name) => name.is_empty(),
        };
        if unnamed {
            return refuse("No Object name found");
        }
        match self.in_graph(node, &related) || self.in_store(node, &related).await {
            true => Decision::Allow,
            false => Decision::NoOpinion(format!("no relationship found between node {node:?} and this object")),
        }
    }

    fn in_graph(&self, node: &str, related: &Related<'_>) -> bool {
        match *related {
            Related::Namespaced(kind, namespace, name) => self.graph.refers(node, kind, namespace, name),
            Related::Volume(volume) => self.graph.uses_volume(node, volume),
            Related::Attachment(name) => self.graph.attachment_on(node, name),
        }
    }

    /// The relation read from the store itself, for what the graph's watch
    /// may not have delivered yet.
    async fn in_store(&self, node: &str, related: &Related<'_>) -> bool {
        let Some(lookup) = &self.lookup else { return false };
        let result = match *related {
            Related::Namespaced(kind, namespace, name) => lookup.pods_refer(node, kind, namespace, name).await,
            Related::Volume(volume) => lookup.volume_used(node, volume).await,
            Related::Attachment(name) => lookup.attachment_on(node, name).await,
        };
        result.unwrap_or_else(|error| {
            tracing::warn!(%error, node, "the Node authorizer could not read the store");
            false
        })
    }
}

impl Lookup {
    async fn object(&self, key: &str) -> Result<Option<Value>, orchestra_store::Error> {
        Ok(self.store.get(key).await?.and_then(|kv| serde_json::from_slice(&kv.value).ok()))
    }

    async fn pods_refer(
        &self,
        node: &str,
        kind: Refers,
        namespace: &str,
        name: &str,
    ) -> Result<bool, orchestra_store::Error> {
        let mut found = false;
        let prefix = format!("{}{namespace}/", self.pods);
        crate::server::list_prefix(&*self.store, &prefix, |kv| {
            if found {
                return;
            }
            let Ok(pod) = serde_json::from_slice::<Value>(&kv.value) else { return };
            found = bound_pod(&pod)
                .is_some_and(|pod| pod.node == node && pod.references.iter().any(|(k, n)| *k == kind && n == name));
        })
        .await?;
        Ok(found)
    }

    async fn volume_used(&self, node: &str, volume: &str) -> Result<bool, orchestra_store::Error> {
        let Some(pv) = self.object(&format!("{}{volume}", self.volumes)).await? else { return Ok(false) };
        let claim = &pv["spec"]["claimRef"];
        match (claim["namespace"].as_str(), claim["name"].as_str()) {
            (Some(namespace), Some(name)) => {
                self.pods_refer(node, Refers::PersistentVolumeClaim, namespace, name).await
            }
            _ => Ok(false),
        }
    }

    async fn attachment_on(&self, node: &str, name: &str) -> Result<bool, orchestra_store::Error> {
        let attachment = self.object(&format!("{}{name}", self.attachments)).await?;
        Ok(attachment.is_some_and(|a| a["spec"]["nodeName"].as_str() == Some(node)))
    }
}

/// The verbs a node may use on its own Lease and CSINode: a create's name
/// is in the body (NodeRestriction checks it), the others' must be the
/// node's.
const OWN_OBJECT_VERBS: [&str; 5] = ["get", "create", "update", "patch", "delete"];

fn refuse(reason: &str) -> Decision {
    Decision::NoOpinion(reason.to_owned())
}

/// Why a request is not a get of one object (upstream's `authorizeGet`),
/// if it is not.
fn single_get(a: &Attributes) -> Option<&'static str> {
    if a.verb != "get" {
        Some("can only get individual resources of this type")
    } else if !a.subresource.is_empty() {
        Some("cannot get subresource")
    } else {
        None
    }
}

#[async_trait]
impl Authorizer for NodeAuthorizer {
    async fn authorize(&self, attributes: &Attributes) -> Decision {
        let user = &attributes.user;
        match node_of(user) {
            Some(node) if attributes.resource_request => self.decide(node, attributes).await,
            Some(_) => Decision::no_opinion(),
            // Upstream's: in the nodes group, named with the node prefix and
            // nothing after it.
            None if user.name == NODE_USER_PREFIX && user.groups.iter().any(|g| g == NODES_GROUP) => {
                Decision::NoOpinion(format!("unknown node for user {:?}", user.name))
            }
            None => Decision::no_opinion(),
        }
    }

    /// A node agent's rules are the `system:node` role's (what depends on
    /// its pods cannot be listed); nobody else has any here.
    async fn rules_for(&self, user: &UserInfo, _namespace: &str) -> Option<Rules> {
        let mut rules = Rules::default();
        if node_of(user).is_some() {
            node_rules().iter().for_each(|rule| push_review_rule(&mut rules, rule));
        }
        Some(rules)
    }
}

#[cfg(test)]
mod tests;
