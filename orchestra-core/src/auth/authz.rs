//! Authorization: may this user do this.

use std::sync::Arc;

use async_trait::async_trait;
use k8s_openapi::api::authorization::v1::{NonResourceRule, ResourceRule};

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
    /// This authorizer does not decide; the next one is asked. The reason,
    /// possibly empty, says why it did not allow (upstream's Node authorizer
    /// says `no relationship found between node "n1" and this object`); the
    /// chain joins the reasons of its silent authorizers into the 403's.
    NoOpinion(String),
}

impl Decision {
    /// No opinion, and no reason to give.
    pub fn no_opinion() -> Decision {
        Decision::NoOpinion(String::new())
    }

    /// True for [`Decision::NoOpinion`], whatever its reason.
    pub fn is_no_opinion(&self) -> bool {
        matches!(self, Decision::NoOpinion(_))
    }
}

/// What a user may do, as far as one authorizer can tell (upstream
/// `authorizer.RuleResolver`); answers `SelfSubjectRulesReview`s
/// (`kubectl auth can-i --list`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Rules {
    /// Rules about API resources.
    pub resource_rules: Vec<ResourceRule>,
    /// Rules about non-resource paths such as `/healthz`.
    pub non_resource_rules: Vec<NonResourceRule>,
}

impl Rules {
    /// Every verb on every resource and path (`*` rules).
    pub fn everything() -> Rules {
        let all = || Some(vec!["*".to_owned()]);
        Rules {
            resource_rules: vec![ResourceRule {
                verbs: vec!["*".into()],
                api_groups: all(),
                resources: all(),
                resource_names: None,
            }],
            non_resource_rules: vec![NonResourceRule { verbs: vec!["*".into()], non_resource_urls: all() }],
        }
    }
}

/// Decides whether a request may proceed.
///
/// Authorizers run in an [`AuthorizerChain`], which an
/// [`ApiServerBuilder`](crate::server::ApiServerBuilder::authorizer) takes:
///
/// ```
/// use async_trait::async_trait;
/// use orchestra_core::auth::{Attributes, Authorizer, AuthorizerChain, Decision, UserInfo};
///
/// /// Lets everyone read, and nobody write.
/// struct ReadOnly;
///
/// #[async_trait]
/// impl Authorizer for ReadOnly {
///     async fn authorize(&self, attributes: &Attributes) -> Decision {
///         match attributes.verb.as_str() {
///             "get" | "list" | "watch" => Decision::Allow,
///             _ => Decision::NoOpinion("read-only".into()),
///         }
///     }
/// }
///
/// # futures::executor::block_on(async {
/// let chain = AuthorizerChain::new().with(ReadOnly);
/// let list = Attributes { user: UserInfo::anonymous(), verb: "list".into(), ..Default::default() };
/// let delete = Attributes { verb: "delete".into(), ..list.clone() };
/// assert_eq!(chain.authorize(&list).await, Decision::Allow);
/// // Nobody allowed it: a denial with the silent authorizers' reasons.
/// assert_eq!(chain.authorize(&delete).await, Decision::Deny("read-only".into()));
/// # });
/// ```
#[async_trait]
pub trait Authorizer: Send + Sync {
    /// Decides on one request.
    async fn authorize(&self, attributes: &Attributes) -> Decision;

    /// The rules `user` is allowed in `namespace` (`""`: cluster-wide), or
    /// `None` if this authorizer cannot list them (the default), which makes
    /// a rules review `incomplete`.
    async fn rules_for(&self, user: &UserInfo, namespace: &str) -> Option<Rules> {
        let _ = (user, namespace);
        None
    }
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

    /// Adds every authorizer of `other` at the end, in its order.
    pub fn then(mut self, other: AuthorizerChain) -> AuthorizerChain {
        self.authorizers.extend(other.authorizers);
        self
    }

    /// The chain's decision: never `NoOpinion`. Silence is a denial with
    /// the silent authorizers' reasons (none: the 403 gives no reason), as
    /// upstream's union authorizer.
    pub async fn authorize(&self, attributes: &Attributes) -> Decision {
        match self.decide(attributes).await {
            Decision::NoOpinion(reason) => Decision::Deny(reason),
            decision => decision,
        }
    }

    /// The first Allow or Deny, or `NoOpinion` if no authorizer decided
    /// (access reviews tell an explicit denial from silence), with the
    /// non-empty reasons of the authorizers asked, one per line.
    pub async fn decide(&self, attributes: &Attributes) -> Decision {
        let mut reasons = Vec::new();
        for authorizer in &self.authorizers {
            match authorizer.authorize(attributes).await {
                Decision::NoOpinion(reason) => {
                    if !reason.is_empty() {
                        reasons.push(reason);
                    }
                }
                decision => return decision,
            }
        }
        Decision::NoOpinion(reasons.join("\n"))
    }

    /// The union of the authorizers' rules for `user` in `namespace`, and
    /// whether it is incomplete (some authorizer could not list its rules).
    pub async fn rules_for(&self, user: &UserInfo, namespace: &str) -> (Rules, bool) {
        let mut rules = Rules::default();
        let mut incomplete = false;
        for authorizer in &self.authorizers {
            match authorizer.rules_for(user, namespace).await {
                Some(more) => {
                    rules.resource_rules.extend(more.resource_rules);
                    rules.non_resource_rules.extend(more.non_resource_rules);
                }
                None => incomplete = true,
            }
        }
        (rules, incomplete)
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

    async fn rules_for(&self, _: &UserInfo, _: &str) -> Option<Rules> {
        Some(Rules::everything())
    }
}

/// Denies everything (upstream `--authorization-mode=AlwaysDeny`).
#[derive(Debug, Clone, Copy, Default)]
pub struct DenyAll;

#[async_trait]
impl Authorizer for DenyAll {
    async fn authorize(&self, _: &Attributes) -> Decision {
        Decision::Deny(String::new())
    }

    async fn rules_for(&self, _: &UserInfo, _: &str) -> Option<Rules> {
        Some(Rules::default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct OnlyGroup(&'static str);

    #[async_trait]
    impl Authorizer for OnlyGroup {
        async fn authorize(&self, attributes: &Attributes) -> Decision {
            match attributes.user.groups.iter().any(|g| g == self.0) {
                true => Decision::Allow,
                false => Decision::NoOpinion(format!("not in {}", self.0)),
            }
        }
    }

    struct DenySecrets;

    #[async_trait]
    impl Authorizer for DenySecrets {
        async fn authorize(&self, attributes: &Attributes) -> Decision {
            if attributes.resource == "secrets" { Decision::Deny("no secrets".into()) } else { Decision::no_opinion() }
        }
    }

    #[tokio::test]
    async fn first_decision_wins_and_silence_denies() {
        let chain = AuthorizerChain::new().with(DenySecrets).with(OnlyGroup("system:masters"));
        let admin = UserInfo::new("admin", &["system:masters"]);
        let pods =
            Attributes { user: admin.clone(), verb: "get".into(), resource: "pods".into(), ..Default::default() };
        assert_eq!(chain.authorize(&pods).await, Decision::Allow);
        let secrets = Attributes { resource: "secrets".into(), ..pods.clone() };
        assert_eq!(chain.authorize(&secrets).await, Decision::Deny("no secrets".into()));
        let nobody = Attributes { user: UserInfo::anonymous(), ..pods };
        assert_eq!(chain.authorize(&nobody).await, Decision::Deny("not in system:masters".into()));
        let two = AuthorizerChain::new().with(OnlyGroup("a")).with(DenySecrets).with(OnlyGroup("b"));
        assert_eq!(two.decide(&nobody).await, Decision::NoOpinion("not in a\nnot in b".into()));
        assert_eq!(AuthorizerChain::new().with(AllowAll).authorize(&nobody).await, Decision::Allow);
    }

    #[tokio::test]
    async fn silence_and_rules() {
        let chain = AuthorizerChain::new().with(DenySecrets);
        let pods = Attributes { resource: "pods".into(), ..Default::default() };
        assert_eq!(chain.decide(&pods).await, Decision::no_opinion());
        assert_eq!(chain.authorize(&pods).await, Decision::Deny(String::new()));
        let user = UserInfo::anonymous();
        let (rules, incomplete) = chain.rules_for(&user, "default").await;
        assert!(incomplete);
        assert_eq!(rules, Rules::default());
        let (rules, incomplete) = chain.with(AllowAll).rules_for(&user, "").await;
        assert!(incomplete, "DenySecrets cannot list its rules");
        assert_eq!(rules, Rules::everything());
        let (_, incomplete) = AuthorizerChain::new().with(AllowAll).rules_for(&user, "").await;
        assert!(!incomplete);
    }
}
