//! Service account tokens as bearer credentials: the [`TokenSigner`] (from
//! [`crate::tokens`]) issues them, the [`ServiceAccountAuthenticator`]
//! accepts them.
//!
//! - Bound tokens: signature, issuer, audience, time window, and the service
//!   account (and the bound object) still existing with the UIDs in the
//!   token.
//! - Legacy tokens (in Secrets of type `kubernetes.io/service-account-token`):
//!   signature, the Secret still holding this very token, and the service
//!   account still existing with its UID; neither being deleted.
//!
//! The user is `system:serviceaccount:<namespace>:<name>` in the groups
//! `system:serviceaccounts` and `system:serviceaccounts:<namespace>`.

use std::sync::Arc;

use async_trait::async_trait;
use base64::Engine as _;
use http::request::Parts;
use orchestra_store::Store;
use serde_json::Value;

use super::{AuthError, Authenticator, UserInfo};
use crate::tokens::now_secs;
pub use crate::tokens::{
    BoundObject, Claims, DEFAULT_ISSUER, KeyError, KubernetesClaims, LEGACY_ISSUER, LegacyClaims, ObjectRef,
    TokenError, TokenSigner, VerifiedToken,
};

impl From<TokenError> for AuthError {
    fn from(e: TokenError) -> AuthError {
        AuthError(e.0)
    }
}

/// Accepts the tokens of a [`TokenSigner`] whose service account (and bound
/// object) still exist.
pub struct ServiceAccountAuthenticator {
    signer: Arc<TokenSigner>,
    store: Arc<dyn Store>,
    audiences: Vec<String>,
}

impl ServiceAccountAuthenticator {
    /// Verifies with `signer`'s key, looks objects up in `store` and accepts
    /// tokens for any of `audiences` (the API server's own: the issuer).
    pub fn new(signer: Arc<TokenSigner>, store: Arc<dyn Store>, audiences: Vec<String>) -> ServiceAccountAuthenticator {
        ServiceAccountAuthenticator { signer, store, audiences }
    }

    /// The stored object `plural` `namespace/name`, if it exists.
    async fn object(&self, plural: &str, namespace: &str, name: &str) -> Result<Option<Value>, AuthError> {
        let key = format!("/registry/{plural}/{namespace}/{name}");
        let kv = self.store.get(&key).await.map_err(|e| AuthError(format!("cannot check the token's objects: {e}")))?;
        Ok(kv.and_then(|kv| serde_json::from_slice::<Value>(&kv.value).ok()))
    }

    /// Checks that `object` exists with its UID and, for legacy tokens
    /// (`live`), is not being deleted; returns it.
    async fn check_exists(
        &self,
        plural: &str,
        namespace: &str,
        object: &ObjectRef,
        live: bool,
    ) -> Result<Value, AuthError> {
        let found = self.object(plural, namespace, &object.name).await?;
        match found {
            Some(v) if v.pointer("/metadata/uid").and_then(Value::as_str) != Some(&object.uid) => {
                Err(AuthError(format!("{plural} {namespace}/{} has been deleted and created again", object.name)))
            }
            Some(v) if live && v.pointer("/metadata/deletionTimestamp").is_some() => {
                Err(AuthError(format!("{plural} {namespace}/{} is being deleted", object.name)))
            }
            Some(v) => Ok(v),
            None => Err(AuthError(format!("{plural} {namespace}/{} has been deleted", object.name))),
        }
    }

    /// The user of a legacy token: its Secret must still hold this token.
    async fn legacy_user(&self, token: &str, claims: &LegacyClaims) -> Result<UserInfo, AuthError> {
        let ns = &claims.namespace;
        let Some(secret) = self.object("secrets", ns, &claims.secret_name).await? else {
            return Err(AuthError(format!("secrets {ns}/{} has been deleted", claims.secret_name)));
        };
        if secret.pointer("/metadata/deletionTimestamp").is_some() {
            return Err(AuthError(format!("secrets {ns}/{} is being deleted", claims.secret_name)));
        }
        let held = secret
            .pointer("/data/token")
            .and_then(Value::as_str)
            .and_then(|t| base64::engine::general_purpose::STANDARD.decode(t).ok());
        if held.as_deref() != Some(token.as_bytes()) {
            return Err(AuthError(format!("token does not match secrets {ns}/{}", claims.secret_name)));
        }
        let account = ObjectRef { name: claims.service_account_name.clone(), uid: claims.service_account_uid.clone() };
        self.check_exists("serviceaccounts", ns, &account, true).await?;
        let mut user = service_account_user(ns, &account);
        user.extra.insert("authentication.kubernetes.io/legacy-token".into(), vec![claims.secret_name.clone()]);
        Ok(user)
    }
}

fn service_account_user(namespace: &str, account: &ObjectRef) -> UserInfo {
    let mut user = UserInfo::new(
        format!("system:serviceaccount:{namespace}:{}", account.name),
        &["system:serviceaccounts", &format!("system:serviceaccounts:{namespace}")],
    );
    user.uid = account.uid.clone();
    user
}

#[async_trait]
impl Authenticator for ServiceAccountAuthenticator {
    async fn authenticate(&self, request: &Parts) -> Result<Option<UserInfo>, AuthError> {
        let Some(token) = crate::auth::authn::bearer_token(request) else {
            return Ok(None);
        };
        let claims = match self.signer.verify(token)? {
            None => return Ok(None),
            Some(VerifiedToken::Legacy(claims)) => return self.legacy_user(token, &claims).await.map(Some),
            Some(VerifiedToken::Bound(claims)) => claims,
        };
        if claims.iss != self.signer.issuer() {
            return Err(AuthError("token issuer is not this cluster".into()));
        }
        if !claims.aud.iter().any(|a| self.audiences.contains(a)) {
            return Err(AuthError("token audiences are not this API server's".into()));
        }
        let now = now_secs();
        if now >= claims.exp || now < claims.nbf {
            return Err(AuthError("token has expired".into()));
        }
        let k = &claims.kubernetes;
        self.check_exists("serviceaccounts", &k.namespace, &k.serviceaccount, false).await?;
        if let Some(pod) = &k.pod {
            self.check_exists("pods", &k.namespace, pod, false).await?;
        }
        if let Some(secret) = &k.secret {
            self.check_exists("secrets", &k.namespace, secret, false).await?;
        }
        let mut user = service_account_user(&k.namespace, &k.serviceaccount);
        if let Some(pod) = &k.pod {
            user.extra.insert("authentication.kubernetes.io/pod-name".into(), vec![pod.name.clone()]);
            user.extra.insert("authentication.kubernetes.io/pod-uid".into(), vec![pod.uid.clone()]);
        }
        Ok(Some(user))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use orchestra_store::MemStore;

    fn parts(token: &str) -> Parts {
        http::Request::get("/api").header("authorization", format!("Bearer {token}")).body(()).unwrap().into_parts().0
    }

    async fn store_with_sa(uid: &str) -> Arc<dyn Store> {
        let store: Arc<dyn Store> = Arc::new(MemStore::new());
        let sa = serde_json::json!({"metadata": {"name": "robot", "namespace": "ci", "uid": uid}});
        store.put("/registry/serviceaccounts/ci/robot", serde_json::to_vec(&sa).unwrap().into(), None).await.unwrap();
        store
    }

    #[tokio::test]
    async fn tokens_authenticate_their_service_account_while_it_exists() {
        let signer = Arc::new(TokenSigner::generate(DEFAULT_ISSUER).unwrap());
        let store = store_with_sa("u-1").await;
        let authn = ServiceAccountAuthenticator::new(signer.clone(), store.clone(), vec![DEFAULT_ISSUER.into()]);
        let token = signer.sign(&signer.claims("ci", "robot", "u-1", vec![DEFAULT_ISSUER.into()], 3600, None));
        let user = authn.authenticate(&parts(&token)).await.unwrap().unwrap();
        assert_eq!(user.name, "system:serviceaccount:ci:robot");
        assert_eq!(user.groups, ["system:serviceaccounts", "system:serviceaccounts:ci"]);
        assert_eq!(user.uid, "u-1");

        // Another audience, expired, altered, or from another key.
        let other_audience = signer.sign(&signer.claims("ci", "robot", "u-1", vec!["vault".into()], 3600, None));
        assert!(authn.authenticate(&parts(&other_audience)).await.is_err());
        let expired = signer.sign(&signer.claims("ci", "robot", "u-1", vec![DEFAULT_ISSUER.into()], -1, None));
        assert!(authn.authenticate(&parts(&expired)).await.unwrap_err().0.contains("expired"));
        let mut altered = token.clone();
        altered.replace_range(altered.len() - 4.., "AAAA");
        assert!(authn.authenticate(&parts(&altered)).await.is_err());
        let stranger = TokenSigner::generate(DEFAULT_ISSUER).unwrap();
        let foreign = stranger.sign(&stranger.claims("ci", "robot", "u-1", vec![DEFAULT_ISSUER.into()], 3600, None));
        assert_eq!(authn.authenticate(&parts(&foreign)).await.unwrap(), None, "not ours: another authenticator's");
        assert_eq!(authn.authenticate(&parts("static-token")).await.unwrap(), None);

        // Bound to a pod that is gone; then the account itself is recreated.
        let pod = BoundObject { kind: "Pod".into(), name: "web".into(), uid: "p-1".into() };
        let bound = signer.sign(&signer.claims("ci", "robot", "u-1", vec![DEFAULT_ISSUER.into()], 3600, Some(&pod)));
        assert!(authn.authenticate(&parts(&bound)).await.unwrap_err().0.contains("pods ci/web has been deleted"));
        let sa = serde_json::json!({"metadata": {"name": "robot", "namespace": "ci", "uid": "u-2"}});
        store.put("/registry/serviceaccounts/ci/robot", serde_json::to_vec(&sa).unwrap().into(), None).await.unwrap();
        assert!(authn.authenticate(&parts(&token)).await.unwrap_err().0.contains("created again"));
    }

    #[tokio::test]
    async fn legacy_tokens_authenticate_while_their_secret_holds_them() {
        let signer = Arc::new(TokenSigner::generate(DEFAULT_ISSUER).unwrap());
        let store = store_with_sa("u-1").await;
        let authn = ServiceAccountAuthenticator::new(signer.clone(), store.clone(), vec![DEFAULT_ISSUER.into()]);
        let token = signer.sign(&signer.legacy_claims("ci", "robot", "u-1", "robot-token"));
        let put_secret = |token: &str| {
            let secret = serde_json::json!({
                "metadata": {"name": "robot-token", "namespace": "ci", "uid": "s-1"},
                "type": "kubernetes.io/service-account-token",
                "data": {"token": base64::engine::general_purpose::STANDARD.encode(token)},
            });
            let store = store.clone();
            async move {
                store
                    .put("/registry/secrets/ci/robot-token", serde_json::to_vec(&secret).unwrap().into(), None)
                    .await
                    .unwrap();
            }
        };
        // No Secret yet; then the Secret holding it.
        assert!(
            authn.authenticate(&parts(&token)).await.unwrap_err().0.contains("secrets ci/robot-token has been deleted")
        );
        put_secret(&token).await;
        let user = authn.authenticate(&parts(&token)).await.unwrap().unwrap();
        assert_eq!((user.name.as_str(), user.uid.as_str()), ("system:serviceaccount:ci:robot", "u-1"));
        assert_eq!(user.groups, ["system:serviceaccounts", "system:serviceaccounts:ci"]);
        // No expiry or audience: legacy tokens have none.
        // The Secret now holds another token: this one is refused.
        put_secret("another").await;
        assert!(authn.authenticate(&parts(&token)).await.unwrap_err().0.contains("does not match"));
        put_secret(&token).await;
        // The account recreated under another UID.
        let sa = serde_json::json!({"metadata": {"name": "robot", "namespace": "ci", "uid": "u-2"}});
        store.put("/registry/serviceaccounts/ci/robot", serde_json::to_vec(&sa).unwrap().into(), None).await.unwrap();
        assert!(authn.authenticate(&parts(&token)).await.unwrap_err().0.contains("created again"));
    }
}

#[cfg(test)]
mod properties;
