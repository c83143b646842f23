//! Two coarse authorizers for assemblies without RBAC yet: public health and
//! version information, and "every authenticated user may do anything".

use async_trait::async_trait;

use super::{Attributes, Authorizer, Decision};

/// Non-resource paths anyone may read, anonymous users included (upstream's
/// `system:public-info-viewer` role).
pub const PUBLIC_PATHS: [&str; 5] = ["/healthz", "/livez", "/readyz", "/version", "/version/"];

/// Allows `get` of [`PUBLIC_PATHS`] (and their named checks such as
/// `/readyz/etcd`) to everyone; no opinion on anything else.
#[derive(Debug, Clone, Copy, Default)]
pub struct PublicInfoViewer;

#[async_trait]
impl Authorizer for PublicInfoViewer {
    async fn authorize(&self, attributes: &Attributes) -> Decision {
        let public = !attributes.resource_request
            && attributes.verb == "get"
            && PUBLIC_PATHS
                .iter()
                .any(|p| attributes.path == *p || (p.ends_with('z') && attributes.path.starts_with(&format!("{p}/"))));
        if public { Decision::Allow } else { Decision::no_opinion() }
    }
}

/// Allows every request of an authenticated user (group
/// `system:authenticated`); no opinion on anonymous ones.
#[derive(Debug, Clone, Copy, Default)]
pub struct AllowAuthenticated;

#[async_trait]
impl Authorizer for AllowAuthenticated {
    async fn authorize(&self, attributes: &Attributes) -> Decision {
        if attributes.user.groups.iter().any(|g| g == "system:authenticated") {
            Decision::Allow
        } else {
            Decision::no_opinion()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::{AuthorizerChain, UserInfo};

    fn request(user: UserInfo, verb: &str, path: &str, resource: bool) -> Attributes {
        Attributes { user, verb: verb.into(), path: path.into(), resource_request: resource, ..Default::default() }
    }

    #[tokio::test]
    async fn anonymous_users_only_read_public_paths() {
        let chain = AuthorizerChain::new().with(PublicInfoViewer).with(AllowAuthenticated);
        let anonymous = UserInfo::anonymous();
        let alice = UserInfo::new("alice", &["system:authenticated"]);
        let cases = [
            (anonymous.clone(), "get", "/readyz", false, true),
            (anonymous.clone(), "get", "/readyz/etcd", false, true),
            (anonymous.clone(), "get", "/version/", false, true),
            (anonymous.clone(), "get", "/metrics", false, false),
            (anonymous.clone(), "post", "/healthz", false, false),
            (anonymous.clone(), "list", "/api/v1/pods", true, false),
            (anonymous, "get", "/healthzx", false, false),
            (alice.clone(), "list", "/api/v1/pods", true, true),
            (alice, "get", "/metrics", false, true),
        ];
        for (user, verb, path, resource, allowed) in cases {
            let decision = chain.authorize(&request(user.clone(), verb, path, resource)).await;
            assert_eq!(decision == Decision::Allow, allowed, "{} {verb} {path}", user.name);
        }
    }
}
