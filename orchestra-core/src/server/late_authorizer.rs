//! The [`Authorizer`] a server gives its admission plugins: its own
//! authorizer chain, known once the server is built.

use std::sync::{Arc, OnceLock};

use async_trait::async_trait;

use crate::auth::{Attributes, Authorizer, AuthorizerChain, Decision, Rules, UserInfo};

/// Decides with the chain the server is built with; made by the builder
/// before that chain is final, filled by [`build`](super::ApiServerBuilder::build).
#[derive(Clone, Default)]
pub(crate) struct ServerAuthorizer {
    pub chain: Arc<OnceLock<AuthorizerChain>>,
}

#[async_trait]
impl Authorizer for ServerAuthorizer {
    async fn authorize(&self, attributes: &Attributes) -> Decision {
        match self.chain.get() {
            Some(chain) => chain.authorize(attributes).await,
            None => Decision::Deny("the API server is not running".into()),
        }
    }

    async fn rules_for(&self, user: &UserInfo, namespace: &str) -> Option<Rules> {
        let (rules, incomplete) = self.chain.get()?.rules_for(user, namespace).await;
        (!incomplete).then_some(rules)
    }
}
