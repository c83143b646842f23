//! The request pipeline: token authentication, authorization, admission,
//! and in-process identities.

use std::sync::Arc;

use async_trait::async_trait;
use axum::body::Body;
use axum::http::Request;
use http_body_util::BodyExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};
use orchestra_core::api::ApiError;
use orchestra_core::auth::admission::{AdmissionChain, AdmissionPlugin, AdmissionRequest, Operation};
use orchestra_core::auth::{
    Attributes, AuthenticatorChain, Authorizer, AuthorizerChain, Decision, ExtensionAuthenticator, IdentityLayer,
    TokenFile, UserInfo,
};
use orchestra_core::server::ApiServer;
use orchestra_store::MemStore;
use serde_json::{Value, json};
use tower::ServiceExt;

/// Admins may do anything; others may only read.
struct ReadOnlyUnlessAdmin;

#[async_trait]
impl Authorizer for ReadOnlyUnlessAdmin {
    async fn authorize(&self, attributes: &Attributes) -> Decision {
        if attributes.user.groups.iter().any(|g| g == "system:masters")
            || matches!(attributes.verb.as_str(), "get" | "list" | "watch")
            || !attributes.resource_request
        {
            Decision::Allow
        } else {
            Decision::no_opinion()
        }
    }
}

/// Annotates every created object with its creator, and refuses names starting with `forbidden-`.
struct StampCreator;

#[async_trait]
impl AdmissionPlugin for StampCreator {
    fn name(&self) -> &str {
        "StampCreator"
    }

    async fn mutate(&self, request: &mut AdmissionRequest<'_>) -> Result<(), ApiError> {
        if request.operation == Operation::Create
            && let Some(object) = request.object.as_mut()
        {
            object["metadata"]["annotations"]["created-by"] = request.user.name.clone().into();
        }
        Ok(())
    }

    async fn validate(&self, request: &AdmissionRequest<'_>) -> Result<(), ApiError> {
        if request.name.starts_with("forbidden-") {
            return Err(ApiError::forbidden(format!("StampCreator refuses {:?}", request.name)));
        }
        Ok(())
    }
}

async fn server() -> ApiServer {
    let tokens = TokenFile::parse("admin-token,admin,1,system:masters\nviewer-token,viewer,2,\n").unwrap();
    let builder = ApiServer::builder(Arc::new(MemStore::new()));
    let admission = AdmissionChain::new().with(builder.namespace_lifecycle()).with(StampCreator);
    builder
        .authenticator(AuthenticatorChain::new().with(ExtensionAuthenticator).with(tokens))
        .authorizer(AuthorizerChain::new().with(ReadOnlyUnlessAdmin))
        .admission(admission)
        .build()
        .await
        .unwrap()
}

async fn post_cm(server: &ApiServer, token: Option<&str>, name: &str) -> (u16, Value) {
    let mut request = Request::post("/api/v1/namespaces/default/configmaps").header("content-type", "application/json");
    if let Some(token) = token {
        request = request.header("authorization", format!("Bearer {token}"));
    }
    let body = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}}).to_string();
    let response = server.router().oneshot(request.body(Body::from(body)).unwrap()).await.unwrap();
    let status = response.status().as_u16();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    (status, serde_json::from_slice(&bytes).unwrap())
}

#[tokio::test]
async fn tokens_authorizers_and_admission() {
    let server = server().await;
    let (status, body) = post_cm(&server, None, "a").await;
    assert_eq!((status, body["reason"].as_str()), (401, Some("Unauthorized")));
    let (status, _) = post_cm(&server, Some("made-up"), "a").await;
    assert_eq!(status, 401, "an invalid token is never anonymous");
    let (status, body) = post_cm(&server, Some("viewer-token"), "a").await;
    assert_eq!(status, 403);
    assert_eq!(
        body["message"],
        "configmaps is forbidden: User \"viewer\" cannot create resource \"configmaps\" in API group \"\" in the namespace \"default\""
    );
    let (status, body) = post_cm(&server, Some("admin-token"), "a").await;
    assert_eq!(status, 201, "{body}");
    assert_eq!(body["metadata"]["annotations"]["created-by"], "admin");
    let (status, body) = post_cm(&server, Some("admin-token"), "forbidden-x").await;
    assert_eq!((status, body["reason"].as_str()), (403, Some("Forbidden")));
    // The refused write left nothing behind.
    let list = server
        .router()
        .oneshot(
            Request::get("/api/v1/namespaces/default/configmaps")
                .header("authorization", "Bearer viewer-token")
                .body(Body::empty())
                .unwrap(),
        )
        .await
        .unwrap();
    let bytes = list.into_body().collect().await.unwrap().to_bytes();
    let list: Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(list["items"].as_array().unwrap().len(), 1);
}

#[tokio::test]
async fn in_process_clients_carry_an_identity() {
    let server = server().await;
    let admin = tower::ServiceBuilder::new()
        .layer(IdentityLayer(UserInfo::new("system:kube-controller-manager", &["system:masters"])))
        .service(server.router());
    let client = kube::Client::new(admin, "default");
    let cms: Api<ConfigMap> = Api::default_namespaced(client);
    let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "from-inside"}})).unwrap();
    let created = cms.create(&PostParams::default(), &cm).await.unwrap();
    assert_eq!(created.metadata.annotations.unwrap()["created-by"], "system:kube-controller-manager");

    // Without an identity, the same in-process service is anonymous and refused.
    let anonymous: Api<ConfigMap> = Api::default_namespaced(kube::Client::new(server.router(), "default"));
    let err = anonymous.list(&Default::default()).await.unwrap_err();
    assert!(matches!(err, kube::Error::Api(s) if s.code == 401));
}
