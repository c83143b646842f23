//! Bearer tokens checked by a remote service (kube-apiserver's
//! `--authentication-token-webhook-config-file` and
//! `--authentication-token-webhook-cache-ttl`).
//!
//! Each token is posted as an `authentication.k8s.io/v1` (or `v1beta1`)
//! TokenReview, with the API server's audiences; the service answers with
//! `status.authenticated`, the user (name, UID, groups, extra) and the
//! audiences the token is for. Answers, positive and negative, are cached by the
//! token's SHA-256 for the cache TTL (default two minutes). A token the
//! service does not authenticate is left to the next authenticator (and
//! refused with 401 if none recognises it); a service that cannot be reached
//! or answers with an error fails the request with 401, as upstream, and
//! such failures are not cached.

use std::collections::BTreeMap;
use std::time::Duration;

use async_trait::async_trait;
use http::request::Parts;
use serde_json::{Value, json};

use super::https::HttpsClient;
use super::webhook::{AnswerCache, ReviewVersion, WebhookConfig, WebhookConfigError};
use super::{AuthError, Authenticator, UserInfo};

/// Upstream's `--authentication-token-webhook-cache-ttl` default.
pub const DEFAULT_TOKEN_CACHE_TTL: Duration = Duration::from_secs(120);

/// Authenticates bearer tokens with TokenReviews posted to a webhook.
///
/// ```no_run
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// use std::sync::Arc;
/// use std::time::Duration;
/// use orchestra_core::auth::{AuthenticatorChain, ExtensionAuthenticator, WebhookConfig, WebhookTokenAuthenticator};
/// use orchestra_core::server::ApiServer;
/// use orchestra_store::MemStore;
///
/// let config = WebhookConfig::from_kubeconfig_file("/etc/orchestra/authn-webhook.kubeconfig")?;
/// let webhook = WebhookTokenAuthenticator::new(config)?.cache_ttl(Duration::from_secs(30));
/// let chain = AuthenticatorChain::new().with(ExtensionAuthenticator).with(webhook);
/// let server = ApiServer::builder(Arc::new(MemStore::new())).authenticator(chain).build().await?;
/// # let _ = server;
/// # Ok(()) }
/// ```
pub struct WebhookTokenAuthenticator {
    config: WebhookConfig,
    client: HttpsClient,
    version: ReviewVersion,
    /// The API server's audiences, sent in every review; an answer naming
    /// audiences must name one of them.
    audiences: Vec<String>,
    ttl: Duration,
    /// `Some(user)` for authenticated tokens, `None` for the others.
    cache: AnswerCache<Option<UserInfo>>,
}

impl std::fmt::Debug for WebhookTokenAuthenticator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebhookTokenAuthenticator")
            .field("server", &self.config.server)
            .field("ttl", &self.ttl)
            .finish_non_exhaustive()
    }
}

impl WebhookTokenAuthenticator {
    /// Posts reviews to the service `config` names, caching answers for
    /// [`DEFAULT_TOKEN_CACHE_TTL`].
    pub fn new(config: WebhookConfig) -> Result<WebhookTokenAuthenticator, WebhookConfigError> {
        let client = config.client()?;
        Ok(WebhookTokenAuthenticator {
            config,
            client,
            version: ReviewVersion::V1,
            audiences: Vec::new(),
            ttl: DEFAULT_TOKEN_CACHE_TTL,
            cache: AnswerCache::default(),
        })
    }

    /// The version of the TokenReviews sent and expected back
    /// ([`ReviewVersion::V1`] unless set).
    pub fn version(mut self, version: ReviewVersion) -> WebhookTokenAuthenticator {
        self.version = version;
        self
    }

    /// The audiences tokens must be for (kube-apiserver's `--api-audiences`,
    /// by default its service account issuer): sent as the reviews'
    /// `spec.audiences`. A review that answers with `status.audiences`
    /// none of which is one of them does not authenticate the token; one
    /// that answers with none is taken to have checked them, as upstream.
    pub fn audiences<S: Into<String>>(mut self, audiences: impl IntoIterator<Item = S>) -> WebhookTokenAuthenticator {
        self.audiences = audiences.into_iter().map(Into::into).collect();
        self
    }

    /// How long answers are kept (zero: not at all).
    pub fn cache_ttl(mut self, ttl: Duration) -> WebhookTokenAuthenticator {
        self.ttl = ttl;
        self
    }

    /// The user of `token`: `Ok(None)` if the service does not authenticate
    /// it, `Err` if the service says why or cannot be asked.
    pub async fn review(&self, token: &str) -> Result<Option<UserInfo>, AuthError> {
        let key = AnswerCache::<Option<UserInfo>>::key(token.as_bytes());
        if let Some(answer) = self.cache.get(&key) {
            return Ok(answer);
        }
        let mut review = json!({
            "apiVersion": self.version.api_version("authentication.k8s.io"),
            "kind": "TokenReview",
            "metadata": {"creationTimestamp": null},
            "spec": {"token": token},
        });
        if !self.audiences.is_empty() {
            review["spec"]["audiences"] = json!(self.audiences);
        }
        let answer = self.config.post(&self.client, &review).await.map_err(|e| {
            tracing::warn!(error = %e, "token webhook failed");
            AuthError(format!("token webhook: {e}"))
        })?;
        let status = answer.get("status").cloned().unwrap_or(Value::Null);
        if status.get("authenticated").and_then(Value::as_bool) != Some(true) {
            if let Some(error) = status.get("error").and_then(Value::as_str).filter(|e| !e.is_empty()) {
                return Err(AuthError(error.to_owned()));
            }
            self.cache.put(key, None, self.ttl);
            return Ok(None);
        }
        let answered: Vec<&str> = status
            .get("audiences")
            .and_then(Value::as_array)
            .map(|list| list.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        if !self.audiences.is_empty()
            && !answered.is_empty()
            && !answered.iter().any(|a| self.audiences.iter().any(|ours| ours == a))
        {
            self.cache.put(key, None, self.ttl);
            return Ok(None);
        }
        let user = user_of(status.get("user").unwrap_or(&Value::Null))?;
        self.cache.put(key, Some(user.clone()), self.ttl);
        Ok(Some(user))
    }
}

/// The `UserInfo` of a TokenReview's `status.user`.
fn user_of(user: &Value) -> Result<UserInfo, AuthError> {
    let text = |name: &str| user.get(name).and_then(Value::as_str).unwrap_or_default().to_owned();
    let strings = |value: &Value| -> Vec<String> {
        value
            .as_array()
            .map(|list| list.iter().filter_map(Value::as_str).map(String::from).collect())
            .unwrap_or_default()
    };
    let name = text("username");
    if name.is_empty() {
        return Err(AuthError("token webhook: an authenticated review has no user name".into()));
    }
    let extra: BTreeMap<String, Vec<String>> = user
        .get("extra")
        .and_then(Value::as_object)
        .map(|extra| extra.iter().map(|(k, v)| (k.clone(), strings(v))).collect())
        .unwrap_or_default();
    Ok(UserInfo { name, uid: text("uid"), groups: strings(user.get("groups").unwrap_or(&Value::Null)), extra })
}

#[async_trait]
impl Authenticator for WebhookTokenAuthenticator {
    async fn authenticate(&self, request: &Parts) -> Result<Option<UserInfo>, AuthError> {
        let Some(token) = crate::auth::authn::bearer_token(request) else {
            return Ok(None);
        };
        if token.is_empty() {
            return Ok(None);
        }
        self.review(token).await
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;

    use super::*;
    use crate::auth::webhook::tests::TestWebhook;

    fn request(token: &str) -> Parts {
        http::Request::get("/api").header("authorization", format!("Bearer {token}")).body(()).unwrap().into_parts().0
    }

    /// The service of the tests: `good` is alice, `erroring` carries an
    /// error, `broken` makes it fail, anything else is not authenticated.
    fn answer(review: &Value) -> (u16, Value) {
        let status = match review["spec"]["token"].as_str() {
            Some("good") => json!({"authenticated": true, "user": {
                "username": "alice", "uid": "42", "groups": ["dev", "ops"], "extra": {"scopes": ["read"]}}}),
            Some("nameless") => json!({"authenticated": true, "user": {}}),
            Some("erroring") => json!({"authenticated": false, "error": "token revoked"}),
            Some("broken") => return (500, json!({"message": "down"})),
            Some("elsewhere") => json!({"authenticated": true, "audiences": ["vault"], "user": {"username": "bob"}}),
            Some("for-us") => json!({"authenticated": true, "audiences": ["vault", "https://orchestra.test"],
                "user": {"username": "carol"}}),
            _ => json!({"authenticated": false}),
        };
        (200, json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "status": status}))
    }

    #[derive(Debug)]
    enum Outcome {
        User,
        Ignored,
        Refused(&'static str),
    }

    #[tokio::test]
    async fn reviews_are_honoured_and_cached() {
        let webhook = TestWebhook::start(answer).await;
        let authenticator = WebhookTokenAuthenticator::new(webhook.config.clone()).unwrap();
        // (token, outcome, requests the service has seen afterwards)
        let cases = [
            ("good", Outcome::User, 1),
            ("good", Outcome::User, 1),
            ("unknown", Outcome::Ignored, 2),
            ("unknown", Outcome::Ignored, 2),
            ("erroring", Outcome::Refused("token revoked"), 3),
            ("erroring", Outcome::Refused("token revoked"), 4),
            ("nameless", Outcome::Refused("no user name"), 5),
            ("broken", Outcome::Refused("500"), 8),
        ];
        for (token, expected, calls) in cases {
            let outcome = authenticator.authenticate(&request(token)).await;
            match (&expected, outcome) {
                (Outcome::User, Ok(Some(user))) => {
                    let extra = BTreeMap::from([("scopes".to_owned(), vec!["read".to_owned()])]);
                    let want = UserInfo {
                        name: "alice".into(),
                        uid: "42".into(),
                        groups: vec!["dev".into(), "ops".into()],
                        extra,
                    };
                    assert_eq!(user, want);
                }
                (Outcome::Ignored, Ok(None)) => {}
                (Outcome::Refused(message), Err(error)) => assert!(error.0.contains(message), "{token}: {error}"),
                (expected, got) => panic!("{token}: expected {expected:?}, got {got:?}"),
            }
            assert_eq!(webhook.calls.load(Ordering::SeqCst), calls, "{token}");
        }
        let sent = webhook.last.lock().unwrap().clone();
        assert_eq!(sent["apiVersion"], "authentication.k8s.io/v1");
        assert_eq!(sent["kind"], "TokenReview");

        // Without a cache every request asks; with no bearer token nothing is asked.
        let uncached = WebhookTokenAuthenticator::new(webhook.config.clone()).unwrap().cache_ttl(Duration::ZERO);
        let before = webhook.calls.load(Ordering::SeqCst);
        for _ in 0..2 {
            assert!(uncached.authenticate(&request("good")).await.unwrap().is_some());
        }
        assert_eq!(webhook.calls.load(Ordering::SeqCst), before + 2);
        let anonymous = http::Request::get("/api").body(()).unwrap().into_parts().0;
        assert_eq!(uncached.authenticate(&anonymous).await, Ok(None));
    }

    /// With audiences: sent in the review; an answer naming only others
    /// does not authenticate; one naming none or ours does. The version
    /// names the review's apiVersion.
    #[tokio::test]
    async fn audiences_and_versions() {
        let webhook = TestWebhook::start(answer).await;
        let authenticator = WebhookTokenAuthenticator::new(webhook.config.clone())
            .unwrap()
            .audiences(["https://orchestra.test"])
            .version(ReviewVersion::V1Beta1);
        for (token, user) in [("good", Some("alice")), ("elsewhere", None), ("for-us", Some("carol"))] {
            let outcome = authenticator.authenticate(&request(token)).await.unwrap();
            assert_eq!(outcome.map(|u| u.name), user.map(str::to_owned), "{token}");
            let sent = webhook.last.lock().unwrap().clone();
            assert_eq!(sent["apiVersion"], "authentication.k8s.io/v1beta1");
            assert_eq!(sent["spec"]["audiences"], json!(["https://orchestra.test"]));
        }
        let unchecked = WebhookTokenAuthenticator::new(webhook.config.clone()).unwrap();
        assert!(unchecked.authenticate(&request("elsewhere")).await.unwrap().is_some());
        assert!(webhook.last.lock().unwrap()["spec"].get("audiences").is_none());
    }

    #[tokio::test]
    async fn an_unreachable_service_refuses() {
        let webhook = TestWebhook::start(answer).await;
        let mut config = webhook.config.clone();
        let port = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap().local_addr().unwrap().port();
        config.server = format!("https://127.0.0.1:{port}/review");
        let authenticator = WebhookTokenAuthenticator::new(config).unwrap();
        let error = authenticator.authenticate(&request("good")).await.unwrap_err();
        assert!(error.0.contains("dial"), "{error}");
    }
}
