//! Role-based access control (upstream `--authorization-mode=RBAC`): Roles,
//! ClusterRoles, RoleBindings and ClusterRoleBindings decide what users may
//! do.
//!
//! - [`RbacAuthorizer`] allows what a rule of a role bound to the user (by
//!   name, group or service account) allows, and otherwise has no opinion:
//!   RBAC never denies. A RoleBinding grants in its own namespace only, to a
//!   Role of that namespace or a ClusterRole; a ClusterRoleBinding grants its
//!   ClusterRole everywhere, namespaced resources of every namespace included.
//!   A binding to a role that does not exist grants nothing.
//! - It decides from an [`RbacCache`] the API server keeps from a watch of its
//!   store; [`ApiServerBuilder::rbac_authorizer`](crate::server::ApiServerBuilder::rbac_authorizer)
//!   makes one.
//! - [`RbacEscalation`] keeps users from granting, through roles and
//!   bindings they write, permissions they do not hold.
//! - [`bootstrap`] holds upstream's default ClusterRoles and
//!   ClusterRoleBindings, which [`ApiServerBuilder::rbac_bootstrap`](crate::server::ApiServerBuilder::rbac_bootstrap)
//!   creates and reconciles when the server starts.

pub mod bootstrap;
mod cache;
mod escalation;
pub(crate) mod rules;

use std::collections::HashSet;
use std::sync::Arc;

use async_trait::async_trait;
use orchestra_store::Store;

use cache::Kind;
pub use cache::RbacCache;
pub use escalation::RbacEscalation;

use super::{Attributes, Authorizer, Decision, Rules, UserInfo};
use crate::api::{ApiError, Registry};

/// The API group of RBAC's kinds.
pub const GROUP: &str = "rbac.authorization.k8s.io";

/// Authorizes requests with the roles and bindings of an [`RbacCache`].
///
/// An API server makes one from its store with
/// [`rbac_authorizer`](crate::server::ApiServerBuilder::rbac_authorizer), to
/// put in its authorizer chain; [`rbac`](crate::server::ApiServerBuilder::rbac)
/// does that and creates the default roles:
///
/// ```
/// # async fn demo() -> Result<(), orchestra_core::api::ApiError> {
/// use std::sync::Arc;
/// use orchestra_core::auth::{AuthorizerChain, PublicInfoViewer, UserInfo};
/// use orchestra_core::server::ApiServer;
/// use orchestra_store::MemStore;
///
/// let builder = ApiServer::builder(Arc::new(MemStore::new()));
/// let rbac = builder.rbac_authorizer();
/// let server = builder
///     .authorizer(AuthorizerChain::new().with(PublicInfoViewer).with(rbac.clone()))
///     .rbac_bootstrap(true)
///     .build()
///     .await?;
/// // The default binding `cluster-admin` grants group system:masters everything.
/// let admin = UserInfo::new("orchestra-admin", &["system:masters"]);
/// let rules = rbac.rules(&admin, "default");
/// assert!(rules.resource_rules.iter().any(|r| r.verbs == ["*"]));
/// # let _ = server;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Default)]
pub struct RbacAuthorizer {
    cache: Arc<RbacCache>,
}

impl RbacAuthorizer {
    /// An authorizer deciding from `cache`.
    pub fn new(cache: Arc<RbacCache>) -> RbacAuthorizer {
        RbacAuthorizer { cache }
    }

    /// The cache it decides from.
    pub fn cache(&self) -> &Arc<RbacCache> {
        &self.cache
    }

    /// Whether a rule bound to the request's user allows it.
    pub fn allows(&self, attributes: &Attributes) -> bool {
        self.cache.visit(&attributes.user, &attributes.namespace, |grant| {
            let allowed = grant.rules.iter().any(|rule| rules::rule_allows(rule, attributes));
            if allowed {
                let binding = grant.binding;
                tracing::trace!(namespace = %binding.namespace, binding = %binding.name, role = %binding.role_ref.name, "RBAC allows");
            }
            allowed
        })
    }

    /// The rules `user` holds in `namespace` (`""`: those of its
    /// ClusterRoleBindings alone), in a rules review's shape: each bound
    /// role's rules once, the ClusterRoleBindings' first.
    pub fn rules(&self, user: &UserInfo, namespace: &str) -> Rules {
        let mut rules = Rules::default();
        let mut seen = HashSet::new();
        self.cache.visit(user, namespace, |grant| {
            if seen.insert(std::ptr::from_ref(grant.binding)) {
                for rule in grant.rules {
                    rules::push_review_rule(&mut rules, rule);
                }
            }
            false
        });
        rules
    }
}

#[async_trait]
impl Authorizer for RbacAuthorizer {
    async fn authorize(&self, attributes: &Attributes) -> Decision {
        if self.allows(attributes) { Decision::Allow } else { Decision::no_opinion() }
    }

    async fn rules_for(&self, user: &UserInfo, namespace: &str) -> Option<Rules> {
        Some(self.rules(user, namespace))
    }
}

/// The store prefix of each RBAC kind `registry` serves.
fn prefixes(registry: &Registry) -> Vec<(Kind, String)> {
    let plural = |kind| match kind {
        Kind::Role => "roles",
        Kind::ClusterRole => "clusterroles",
        Kind::RoleBinding => "rolebindings",
        Kind::ClusterRoleBinding => "clusterrolebindings",
    };
    Kind::ALL
        .into_iter()
        .filter_map(|kind| registry.get(GROUP, "v1", plural(kind)).map(|info| (kind, info.storage_prefix())))
        .collect()
}

/// Fills `cache` from `store` and keeps it current from a watch, for as long
/// as the cache lives.
pub(crate) async fn start(cache: &Arc<RbacCache>, store: &Arc<dyn Store>, registry: &Registry) -> Result<(), ApiError> {
    for (_, prefix) in prefixes(registry) {
        crate::server::follow(cache, store, prefix, "RBAC").await.map_err(ApiError::internal)?;
    }
    Ok(())
}

#[cfg(test)]
mod properties;

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::rules::tests::request;
    use super::*;

    fn put(cache: &RbacCache, kind: Kind, key: &str, value: serde_json::Value) {
        cache.put(kind, key, &serde_json::to_vec(&value).unwrap());
    }

    fn authorizer() -> RbacAuthorizer {
        let cache = RbacCache::default();
        let read = json!([{"verbs": ["get", "list", "watch"], "apiGroups": [""], "resources": ["pods"]}]);
        let nodes = json!([
            {"verbs": ["get"], "apiGroups": [""], "resources": ["nodes"]},
            {"verbs": ["get"], "nonResourceURLs": ["/healthz", "/readyz/*"]},
        ]);
        put(&cache, Kind::ClusterRole, "/cr/read", json!({"metadata": {"name": "read"}, "rules": read}));
        put(&cache, Kind::ClusterRole, "/cr/nodes", json!({"metadata": {"name": "nodes"}, "rules": nodes}));
        let binding = |namespace: Option<&str>, name: &str, role: &str, subject: serde_json::Value| {
            json!({
                "metadata": {"name": name, "namespace": namespace},
                "roleRef": {"apiGroup": GROUP, "kind": "ClusterRole", "name": role},
                "subjects": [subject],
            })
        };
        let alice = json!({"kind": "User", "name": "alice"});
        put(&cache, Kind::RoleBinding, "/rb/a/read", binding(Some("a"), "read", "read", alice.clone()));
        put(&cache, Kind::RoleBinding, "/rb/a/gone", binding(Some("a"), "gone", "gone", alice.clone()));
        put(
            &cache,
            Kind::ClusterRoleBinding,
            "/crb/nodes",
            binding(None, "nodes", "nodes", json!({"kind": "Group", "name": "ops"})),
        );
        RbacAuthorizer::new(Arc::new(cache))
    }

    #[tokio::test]
    async fn bindings_allow_in_their_scope_and_have_no_opinion_otherwise() {
        let rbac = authorizer();
        let alice = UserInfo::new("alice", &["system:authenticated"]);
        let bob = UserInfo::new("bob", &["ops"]);
        let on = |user: &UserInfo, namespace: &str, mut attributes: Attributes| {
            attributes.user = user.clone();
            attributes.namespace = namespace.into();
            attributes
        };
        let healthz = Attributes { verb: "get".into(), path: "/healthz".into(), ..Default::default() };
        let readyz = Attributes { path: "/readyz/etcd".into(), ..healthz.clone() };
        let cases = [
            (on(&alice, "a", request("list", "", "pods", "")), true),
            (on(&alice, "a", request("get", "", "pods", "p")), true),
            (on(&alice, "b", request("list", "", "pods", "")), false),
            (on(&alice, "", request("list", "", "pods", "")), false),
            (on(&alice, "a", request("create", "", "pods", "")), false),
            (on(&alice, "a", request("get", "", "pods/log", "p")), false),
            (on(&alice, "a", request("get", "apps", "pods", "p")), false),
            (on(&alice, "", healthz.clone()), false),
            // A ClusterRoleBinding grants cluster-scoped and namespaced
            // resources alike, and paths.
            (on(&bob, "", request("get", "", "nodes", "n")), true),
            (on(&bob, "x", request("get", "", "nodes", "n")), true),
            (on(&bob, "", healthz), true),
            (on(&bob, "", readyz), true),
            (on(&bob, "a", request("list", "", "pods", "")), false),
        ];
        for (attributes, allowed) in cases {
            let expected = if allowed { Decision::Allow } else { Decision::no_opinion() };
            assert_eq!(rbac.authorize(&attributes).await, expected, "{attributes:?}");
        }
    }

    #[tokio::test]
    async fn rules_are_those_of_the_bound_roles() {
        let rbac = authorizer();
        let alice = UserInfo::new("alice", &["ops"]);
        let rules = rbac.rules_for(&alice, "a").await.unwrap();
        let resources: Vec<_> = rules.resource_rules.iter().map(|r| r.resources.clone().unwrap()).collect();
        assert_eq!(resources, [vec!["nodes".to_owned()], vec!["pods".to_owned()]], "cluster-wide first");
        assert_eq!(rules.non_resource_rules.len(), 1);
        let elsewhere = rbac.rules_for(&alice, "b").await.unwrap();
        assert_eq!(elsewhere.resource_rules.len(), 1);
        let nobody = rbac.rules_for(&UserInfo::anonymous(), "a").await.unwrap();
        assert_eq!(nobody, Rules::default());
    }
}
