//! Authorization decided by a remote service (kube-apiserver's
//! `--authorization-mode=Webhook` with `--authorization-webhook-config-file`
//! and the `--authorization-webhook-cache-*-ttl` flags).
//!
//! Each request is posted as an `authorization.k8s.io/v1`
//! SubjectAccessReview with the user and the resource or non-resource
//! attributes. `status.allowed` allows, `status.denied` denies with
//! `status.reason`, neither leaves the decision to the next authorizer.
//! Answers are cached by the review's SHA-256: allowed ones for five
//! minutes, the others for thirty seconds. A service that cannot be asked
//! has no opinion (never an allow); the failure is logged and not cached.

use std::time::Duration;

use async_trait::async_trait;
use serde_json::{Value, json};

use super::https::HttpsClient;
use super::webhook::{AnswerCache, ReviewVersion, WebhookConfig, WebhookConfigError};
use super::{Attributes, Authorizer, Decision};

/// Upstream's `--authorization-webhook-cache-authorized-ttl` default.
pub const DEFAULT_AUTHORIZED_TTL: Duration = Duration::from_secs(300);
/// Upstream's `--authorization-webhook-cache-unauthorized-ttl` default.
pub const DEFAULT_UNAUTHORIZED_TTL: Duration = Duration::from_secs(30);

/// Decides with SubjectAccessReviews posted to a webhook.
///
/// [`ApiServerBuilder::webhook_authorizer`](crate::server::ApiServerBuilder::webhook_authorizer)
/// puts it where `--authorization-mode` names `Webhook`:
///
/// ```no_run
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// use std::sync::Arc;
/// use orchestra_core::auth::{AuthorizationMode, WebhookAuthorizer, WebhookConfig};
/// use orchestra_core::server::ApiServer;
/// use orchestra_store::MemStore;
///
/// let config = WebhookConfig::from_kubeconfig_file("/etc/orchestra/authz-webhook.kubeconfig")?;
/// let modes = AuthorizationMode::parse_list("Node,Webhook,RBAC")?;
/// let server = ApiServer::builder(Arc::new(MemStore::new()))
///     .webhook_authorizer(WebhookAuthorizer::new(config)?)
///     .authorization_modes(&modes)
///     .build()
///     .await?;
/// # let _ = server;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct WebhookAuthorizer {
    inner: std::sync::Arc<Inner>,
}

struct Inner {
    config: WebhookConfig,
    client: HttpsClient,
    version: ReviewVersion,
    authorized_ttl: Duration,
    unauthorized_ttl: Duration,
    cache: AnswerCache<Decision>,
}

impl std::fmt::Debug for WebhookAuthorizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebhookAuthorizer")
            .field("server", &self.inner.config.server)
            .field("authorized_ttl", &self.inner.authorized_ttl)
            .field("unauthorized_ttl", &self.inner.unauthorized_ttl)
            .finish_non_exhaustive()
    }
}

impl WebhookAuthorizer {
    /// Posts reviews to the service `config` names, with upstream's cache
    /// TTLs.
    pub fn new(config: WebhookConfig) -> Result<WebhookAuthorizer, WebhookConfigError> {
        let client = config.client()?;
        Ok(WebhookAuthorizer {
            inner: std::sync::Arc::new(Inner {
                config,
                client,
                version: ReviewVersion::V1,
                authorized_ttl: DEFAULT_AUTHORIZED_TTL,
                unauthorized_ttl: DEFAULT_UNAUTHORIZED_TTL,
                cache: AnswerCache::default(),
            }),
        })
    }

    /// How long allowed and other answers are kept (zero: not at all).
    pub fn cache_ttls(self, authorized: Duration, unauthorized: Duration) -> WebhookAuthorizer {
        self.with(|inner| Inner { authorized_ttl: authorized, unauthorized_ttl: unauthorized, ..inner })
    }

    /// The version of the SubjectAccessReviews sent and expected back
    /// ([`ReviewVersion::V1`] unless set).
    pub fn version(self, version: ReviewVersion) -> WebhookAuthorizer {
        self.with(|inner| Inner { version, ..inner })
    }

    /// The authorizer with `change` made to its settings (and an empty
    /// cache if it was shared).
    fn with(self, change: impl FnOnce(Inner) -> Inner) -> WebhookAuthorizer {
        let inner = std::sync::Arc::try_unwrap(self.inner).unwrap_or_else(|shared| Inner {
            config: shared.config.clone(),
            client: shared.client.clone(),
            version: shared.version,
            authorized_ttl: shared.authorized_ttl,
            unauthorized_ttl: shared.unauthorized_ttl,
            cache: AnswerCache::default(),
        });
        WebhookAuthorizer { inner: std::sync::Arc::new(change(inner)) }
    }
}

/// The SubjectAccessReview of a request.
pub(crate) fn review_of(attributes: &Attributes, version: ReviewVersion) -> Value {
    let user = &attributes.user;
    let groups = match version {
        ReviewVersion::V1 => "groups",
        ReviewVersion::V1Beta1 => "group",
    };
    let mut spec = json!({"user": user.name});
    spec[groups] = json!(user.groups);
    if !user.uid.is_empty() {
        spec["uid"] = user.uid.clone().into();
    }
    if !user.extra.is_empty() {
        spec["extra"] = json!(user.extra);
    }
    if attributes.resource_request {
        let mut resource = serde_json::Map::new();
        for (field, value) in [
            ("namespace", &attributes.namespace),
            ("verb", &attributes.verb),
            ("group", &attributes.api_group),
            ("resource", &attributes.resource),
            ("subresource", &attributes.subresource),
            ("name", &attributes.name),
        ] {
            if !value.is_empty() || field == "group" {
                resource.insert(field.into(), value.clone().into());
            }
        }
        spec["resourceAttributes"] = resource.into();
    } else {
        spec["nonResourceAttributes"] = json!({"path": attributes.path, "verb": attributes.verb});
    }
    json!({
        "apiVersion": version.api_version("authorization.k8s.io"),
        "kind": "SubjectAccessReview",
        "metadata": {"creationTimestamp": null},
        "spec": spec,
        "status": {"allowed": false},
    })
}

#[async_trait]
impl Authorizer for WebhookAuthorizer {
    async fn authorize(&self, attributes: &Attributes) -> Decision {
        let inner = &self.inner;
        let review = review_of(attributes, inner.version);
        let key = AnswerCache::<Decision>::key(review.to_string().as_bytes());
        if let Some(decision) = inner.cache.get(&key) {
            return decision;
        }
        let answer = match inner.config.post(&inner.client, &review).await {
            Ok(answer) => answer,
            Err(error) => {
                tracing::error!(%error, "failed to make webhook authorizer request");
                return Decision::no_opinion();
            }
        };
        let status = answer.get("status").cloned().unwrap_or(Value::Null);
        if let Some(error) = status.get("evaluationError").and_then(Value::as_str).filter(|e| !e.is_empty()) {
            tracing::warn!(%error, "webhook authorizer evaluation error");
        }
        let flag = |name: &str| status.get(name).and_then(Value::as_bool) == Some(true);
        let reason = status.get("reason").and_then(Value::as_str).unwrap_or_default().to_owned();
        let (decision, ttl) = if flag("allowed") {
            (Decision::Allow, inner.authorized_ttl)
        } else if flag("denied") {
            (Decision::Deny(reason), inner.unauthorized_ttl)
        } else {
            (Decision::NoOpinion(reason), inner.unauthorized_ttl)
        };
        inner.cache.put(key, decision.clone(), ttl);
        decision
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;

    use super::*;
    use crate::auth::UserInfo;
    use crate::auth::webhook::tests::TestWebhook;

    /// The service of the tests: alice may list pods, bob is denied
    /// everything, `/healthz` is open, `broken` makes it fail, the rest
    /// gets no opinion.
    fn answer(review: &Value) -> (u16, Value) {
        let spec = &review["spec"];
        let status = match (spec["user"].as_str(), &spec["resourceAttributes"], &spec["nonResourceAttributes"]) {
            (Some("broken"), _, _) => return (503, json!({})),
            (Some("bob"), _, _) => json!({"allowed": false, "denied": true, "reason": "bob is banned"}),
            (Some("alice"), resource, _) if resource["verb"] == "list" && resource["resource"] == "pods" => {
                json!({"allowed": true})
            }
            (_, _, non_resource) if non_resource["path"] == "/healthz" => json!({"allowed": true}),
            _ => json!({"allowed": false, "reason": "no rule"}),
        };
        (200, json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "status": status}))
    }

    fn attributes(user: &str, verb: &str, resource: &str) -> Attributes {
        Attributes {
            user: UserInfo::new(user, &["system:authenticated"]),
            verb: verb.into(),
            resource_request: !resource.starts_with('/'),
            resource: if resource.starts_with('/') { String::new() } else { resource.into() },
            namespace: if resource.starts_with('/') { String::new() } else { "default".into() },
            path: if resource.starts_with('/') {
                resource.into()
            } else {
                format!("/api/v1/namespaces/default/{resource}")
            },
            ..Default::default()
        }
    }

    #[tokio::test]
    async fn reviews_decide_and_are_cached() {
        let webhook = TestWebhook::start(answer).await;
        let authorizer = WebhookAuthorizer::new(webhook.config.clone()).unwrap();
        // (user, verb, resource or path, decision, requests seen afterwards)
        let cases = [
            ("alice", "list", "pods", Decision::Allow, 1),
            ("alice", "list", "pods", Decision::Allow, 1),
            ("alice", "delete", "pods", Decision::NoOpinion("no rule".into()), 2),
            ("alice", "delete", "pods", Decision::NoOpinion("no rule".into()), 2),
            ("bob", "list", "pods", Decision::Deny("bob is banned".into()), 3),
            ("carol", "get", "/healthz", Decision::Allow, 4),
            ("broken", "get", "pods", Decision::no_opinion(), 7),
            ("broken", "get", "pods", Decision::no_opinion(), 10),
        ];
        for (user, verb, resource, decision, calls) in cases {
            assert_eq!(
                authorizer.authorize(&attributes(user, verb, resource)).await,
                decision,
                "{user} {verb} {resource}"
            );
            assert_eq!(webhook.calls.load(Ordering::SeqCst), calls, "{user} {verb} {resource}");
        }
        let sent = webhook.last.lock().unwrap().clone();
        assert_eq!(sent["kind"], "SubjectAccessReview");
        assert_eq!(
            sent["spec"]["resourceAttributes"],
            json!({"namespace": "default", "verb": "get", "group": "", "resource": "pods"})
        );

        let uncached =
            WebhookAuthorizer::new(webhook.config.clone()).unwrap().cache_ttls(Duration::ZERO, Duration::ZERO);
        let before = webhook.calls.load(Ordering::SeqCst);
        for _ in 0..2 {
            assert_eq!(uncached.authorize(&attributes("alice", "list", "pods")).await, Decision::Allow);
        }
        assert_eq!(webhook.calls.load(Ordering::SeqCst), before + 2);
    }

    #[test]
    fn reviews_carry_the_request() {
        let mut user = UserInfo::new("alice", &["dev"]);
        user.uid = "7".into();
        user.extra.insert("scopes".into(), vec!["read".into()]);
        let resource = Attributes {
            user: user.clone(),
            verb: "get".into(),
            resource_request: true,
            api_group: "apps".into(),
            resource: "deployments".into(),
            subresource: "scale".into(),
            namespace: "ns".into(),
            name: "web".into(),
            path: "/apis/apps/v1/namespaces/ns/deployments/web/scale".into(),
        };
        let non_resource = Attributes { user, verb: "get".into(), path: "/version".into(), ..Default::default() };
        let cases = [
            (
                resource,
                json!({"user": "alice", "uid": "7", "groups": ["dev"], "extra": {"scopes": ["read"]}, "resourceAttributes": {
                    "namespace": "ns", "verb": "get", "group": "apps", "resource": "deployments", "subresource": "scale", "name": "web"}}),
            ),
            (
                non_resource,
                json!({"user": "alice", "uid": "7", "groups": ["dev"], "extra": {"scopes": ["read"]},
                    "nonResourceAttributes": {"path": "/version", "verb": "get"}}),
            ),
        ];
        for (attributes, spec) in cases {
            let review = review_of(&attributes, ReviewVersion::V1);
            assert_eq!(review["apiVersion"], "authorization.k8s.io/v1");
            assert_eq!(review["spec"], spec);
            // v1beta1 calls the groups `group`.
            let mut beta = spec.clone();
            let groups = beta.as_object_mut().unwrap().remove("groups").unwrap();
            beta["group"] = groups;
            let review = review_of(&attributes, ReviewVersion::V1Beta1);
            assert_eq!(review["apiVersion"], "authorization.k8s.io/v1beta1");
            assert_eq!(review["spec"], beta);
        }
    }
}
