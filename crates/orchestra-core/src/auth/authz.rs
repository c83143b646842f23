//! Authorization: may this user do this.

use std::sync::Arc;

use async_trait::async_trait;

use super::UserInfo;

/// What a request does (upstream `authorizer.Attributes`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Attributes {
    /// The user.
    pub user: UserInfo,
    /// `get`, `list`, `watch`, `create`, `update`, `patch`, `delete`,
    /// `deletecollection`; for non-resource requests the HTTP verb in lower case.
    pub verb: String,
    /// True for requests about API resources, false for e.g. `/version`.
    pub resource_request: bool,
    /// API group of the resource.
    pub api_group: String,
    /// Plural resource name.
    pub resource: String,
    /// Subresource, if any.
    pub subresource: String,
    /// Namespace, if any.
    pub namespace: String,
    /// Object name, if any.
    pub name: String,
    /// The request path.
    pub path: String,
}

/// An authorizer's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// The request may proceed.
    Allow,
    /// The request is refused (403), with a reason.
    Deny(String),
    /// This authorizer does not decide; the next one is asked.
    NoOpinion,
}

/// Decides whether a request may proceed.
#[async_trait]
pub trait Authorizer: Send + Sync {
    /// Decides on one request.
    async fn authorize(&self, attributes: &Attributes) -> Decision;
}

/// Asks authorizers in order: the first Allow or Deny wins; if all have no
/// opinion the request is denied.
#[derive(Clone, Default)]
pub struct AuthorizerChain {
    authorizers: Vec<Arc<dyn Authorizer>>,
}

impl AuthorizerChain {
    /// An empty chain (denies everything).
    pub fn new() -> AuthorizerChain {
        AuthorizerChain::default()
    }

    /// Adds an authorizer at the end.
    pub fn with(mut self, authorizer: impl Authorizer + 'static) -> AuthorizerChain {
        self.authorizers.push(Arc::new(authorizer));
        self
    }

    /// The chain's decision: never `NoOpinion`.
    pub async fn authorize(&self, attributes: &Attributes) -> Decision {
        for authorizer in &self.authorizers {
            match authorizer.authorize(attributes).await {
                Decision::NoOpinion => continue,
                decision => return decision,
            }
        }
        Decision::Deny("no authorizer allowed the request".into())
    }
}

/// Allows everything (upstream `--authorization-mode=AlwaysAllow`).
#[derive(Debug, Clone, Copy, Default)]
pub struct AllowAll;

#[async_trait]
impl Authorizer for AllowAll {
    async fn authorize(&self, _: &Attributes) -> Decision {
        Decision::Allow
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct OnlyGroup(&'static str);

    #[async_trait]
    impl Authorizer for OnlyGroup {
        async fn authorize(&self, attributes: &Attributes) -> Decision {
            if attributes.user.groups.iter().any(|g| g == self.0) {
                Decision::Allow
            } else {
                Decision::NoOpinion
            }
        }
    }

    struct DenySecrets;

    #[async_trait]
    impl Authorizer for DenySecrets {
        async fn authorize(&self, attributes: &Attributes) -> Decision {
            if attributes.resource == "secrets" {
                Decision::Deny("no secrets".into())
            } else {
                Decision::NoOpinion
            }
        }
    }

    #[tokio::test]
    async fn first_decision_wins_and_silence_denies() {
        let chain = AuthorizerChain::new()
            .with(DenySecrets)
            .with(OnlyGroup("system:masters"));
        let admin = UserInfo::new("admin", &["system:masters"]);
        let pods = Attributes {
            user: admin.clone(),
            verb: "get".into(),
            resource: "pods".into(),
            ..Default::default()
        };
        assert_eq!(chain.authorize(&pods).await, Decision::Allow);
        let secrets = Attributes {
            resource: "secrets".into(),
            ..pods.clone()
        };
        assert_eq!(
            chain.authorize(&secrets).await,
            Decision::Deny("no secrets".into())
        );
        let nobody = Attributes {
            user: UserInfo::anonymous(),
            ..pods
        };
        assert!(matches!(chain.authorize(&nobody).await, Decision::Deny(_)));
        assert_eq!(
            AuthorizerChain::new()
                .with(AllowAll)
                .authorize(&nobody)
                .await,
            Decision::Allow
        );
    }
}
