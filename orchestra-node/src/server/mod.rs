//! The node agent's own HTTPS endpoint, as the kubelet's port 10250: the API
//! server proxies `kubectl logs` (`pods/<name>/log`) here.
//!
//! Every request must present a client certificate signed by the cluster CA
//! (the listener is built with [`orchestra_core::tls::ClientAuth::Required`]);
//! the certificate's subject is then authorized by a [`NodeAuthorizer`] —
//! by default [`DelegatingAuthorizer`], which asks the API server with a
//! SubjectAccessReview on `nodes/<subresource>`, as the kubelet's webhook
//! authorizer does.
//!
//! Routes (upstream's paths):
//! - `GET /healthz`
//! - `GET /containerLogs/{namespace}/{pod}/{container}` with [`logs::LogOptions`]
//! - `/exec/{namespace}/{pod}/{container}?command=...` ([`ExecOptions`]):
//!   a WebSocket upgrade (`kubectl exec`, through the API server) attaches
//!   the command's streams with the [`PROTOCOLS`]; a plain `POST` runs the
//!   command to completion (no terminal, no stdin) and answers
//!   `{"exitCode", "stdout", "stderr"}`.

mod exec;
pub mod logs;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use axum::extract::{Path, Query, Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use k8s_openapi::api::authorization::v1::{ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec};
use orchestra_core::api::escape::percent_decode;
use orchestra_core::tls::{CertificateSubject, PeerCertificates, certificate_subject};
use parking_lot::Mutex;

pub use exec::{ExecOptions, PROTOCOLS};

use crate::runtime::{
    ContainerFilter, ContainerState, ContainerStatus, LABEL_CONTAINER_NAME, LABEL_POD_NAME, LABEL_POD_NAMESPACE,
    RuntimeBackend,
};

/// Decides whether a client may use the node's endpoint.
///
/// The server asks once per request, with the subject of the client's
/// verified certificate; this server maps its paths to `nodes/proxy`, with
/// `get` for reads (container logs) and `create` for exec. An authorizer
/// that lets the `system:masters` group do anything and everyone else only
/// read:
///
/// ```
/// # async fn demo() {
/// use std::sync::Arc;
/// use async_trait::async_trait;
/// use orchestra_core::tls::CertificateSubject;
/// use orchestra_node::runtime::sim::SimRuntime;
/// use orchestra_node::server::{NodeAuthorizer, NodeServer};
///
/// struct ReadOnlyUnlessAdmin;
///
/// #[async_trait]
/// impl NodeAuthorizer for ReadOnlyUnlessAdmin {
///     async fn allowed(&self, user: &CertificateSubject, verb: &str, _subresource: &str) -> Result<bool, String> {
///         Ok(verb == "get" || user.organizations.iter().any(|o| o == "system:masters"))
///     }
/// }
///
/// let alice = CertificateSubject { common_name: "alice".into(), organizations: vec![] };
/// assert!(ReadOnlyUnlessAdmin.allowed(&alice, "get", "proxy").await.unwrap());
/// assert!(!ReadOnlyUnlessAdmin.allowed(&alice, "create", "proxy").await.unwrap());
///
/// let server = NodeServer::new(Arc::new(SimRuntime::default()), Arc::new(ReadOnlyUnlessAdmin));
/// let _routes: axum::Router = server.router();
/// # }
/// # tokio::runtime::Runtime::new().unwrap().block_on(demo());
/// ```
#[async_trait]
pub trait NodeAuthorizer: Send + Sync + 'static {
    /// Whether `user` may `verb` (`get`, `create`) the node's `subresource`
    /// (`proxy`, `log`, ...). `Err` when the decision could not be made.
    async fn allowed(&self, user: &CertificateSubject, verb: &str, subresource: &str) -> Result<bool, String>;
}

/// What a cached review decided on: user, groups, verb and subresource.
type ReviewKey = (String, Vec<String>, String, String);

/// Asks the API server (`SubjectAccessReview`) and caches each answer for a
/// while, as the kubelet's webhook authorizer does.
pub struct DelegatingAuthorizer {
    client: kube::Client,
    node_name: String,
    ttl: Duration,
    cache: Mutex<HashMap<ReviewKey, (bool, Instant)>>,
}

impl DelegatingAuthorizer {
    /// Authorizes against the API server `client` talks to, for node
    /// `node_name`; answers are cached for a minute.
    pub fn new(client: kube::Client, node_name: impl Into<String>) -> Self {
        Self { client, node_name: node_name.into(), ttl: Duration::from_secs(60), cache: Mutex::default() }
    }
}

#[async_trait]
impl NodeAuthorizer for DelegatingAuthorizer {
    async fn allowed(&self, user: &CertificateSubject, verb: &str, subresource: &str) -> Result<bool, String> {
        let key = (user.common_name.clone(), user.organizations.clone(), verb.to_owned(), subresource.to_owned());
        if let Some((answer, at)) = self.cache.lock().get(&key)
            && at.elapsed() < self.ttl
        {
            return Ok(*answer);
        }
        let review = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: Some(user.common_name.clone()),
                // As upstream's x509 authenticator does, a verified
                // certificate makes its holder `system:authenticated`.
                groups: Some(user.organizations.iter().cloned().chain(["system:authenticated".to_owned()]).collect()),
                resource_attributes: Some(ResourceAttributes {
                    verb: Some(verb.to_owned()),
                    resource: Some("nodes".into()),
                    subresource: Some(subresource.to_owned()),
                    name: Some(self.node_name.clone()),
                    ..Default::default()
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        let api: kube::Api<SubjectAccessReview> = kube::Api::all(self.client.clone());
        let answer = api
            .create(&Default::default(), &review)
            .await
            .map_err(|e| format!("SubjectAccessReview: {e}"))?
            .status
            .is_some_and(|s| s.allowed);
        self.cache.lock().insert(key, (answer, Instant::now()));
        Ok(answer)
    }
}

/// Lets every client with a verified certificate in (tests, or a node whose
/// API server is unreachable by design).
#[derive(Debug, Clone, Copy, Default)]
pub struct AllowVerifiedClients;

#[async_trait]
impl NodeAuthorizer for AllowVerifiedClients {
    async fn allowed(&self, _: &CertificateSubject, _: &str, _: &str) -> Result<bool, String> {
        Ok(true)
    }
}

/// The node's endpoint: serves what the runtime holds.
#[derive(Clone)]
pub struct NodeServer {
    inner: Arc<Inner>,
}

struct Inner {
    runtime: Arc<dyn RuntimeBackend>,
    authorizer: Arc<dyn NodeAuthorizer>,
}

impl NodeServer {
    /// A server over `runtime`, letting in what `authorizer` allows.
    pub fn new(runtime: Arc<dyn RuntimeBackend>, authorizer: Arc<dyn NodeAuthorizer>) -> Self {
        Self { inner: Arc::new(Inner { runtime, authorizer }) }
    }

    /// The routes, to serve with [`orchestra_core::tls::serve`].
    pub fn router(&self) -> axum::Router {
        axum::Router::new()
            .route("/healthz", get(|| async { "ok" }))
            .route("/containerLogs/{namespace}/{pod}/{container}", get(container_logs))
            .route("/exec/{namespace}/{pod}/{container}", get(exec::exec).post(exec::exec))
            .layer(axum::middleware::from_fn_with_state(self.inner.clone(), authorize))
            .with_state(self.inner.clone())
    }
}

/// A Kubernetes `Status` body.
fn status(code: StatusCode, reason: &str, message: impl Into<String>) -> Response {
    let body = serde_json::json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": message.into(), "reason": reason, "code": code.as_u16(),
    });
    (code, axum::Json(body)).into_response()
}

async fn authorize(State(inner): State<Arc<Inner>>, request: Request, next: Next) -> Response {
    let Some(PeerCertificates(chain)) = request.extensions().get::<PeerCertificates>() else {
        return status(StatusCode::UNAUTHORIZED, "Unauthorized", "a client certificate is required");
    };
    let user = match chain.first().map(certificate_subject) {
        Some(Ok(user)) => user,
        Some(Err(e)) => return status(StatusCode::UNAUTHORIZED, "Unauthorized", e.to_string()),
        None => return status(StatusCode::UNAUTHORIZED, "Unauthorized", "empty certificate chain"),
    };
    if request.uri().path() == "/healthz" {
        return next.run(request).await;
    }
    // Upstream's kubelet maps every path it has no finer subresource for
    // (logs of containers and exec among them) to nodes/proxy.
    // exec runs something whatever the method (a WebSocket upgrade is a
    // GET): it needs `create`, as upstream's API server asks for pods/exec.
    let verb = if request.method() == axum::http::Method::GET && !request.uri().path().starts_with("/exec/") {
        "get"
    } else {
        "create"
    };
    match inner.authorizer.allowed(&user, verb, "proxy").await {
        Ok(true) => next.run(request).await,
        Ok(false) => status(
            StatusCode::FORBIDDEN,
            "Forbidden",
            format!("user={} verb={verb} resource=nodes subresource=proxy is forbidden", user.common_name),
        ),
        Err(e) => status(StatusCode::INTERNAL_SERVER_ERROR, "InternalError", e),
    }
}

/// The containers the runtime holds for one pod's container, newest attempt
/// first.
async fn attempts(
    inner: &Inner,
    namespace: &str,
    pod: &str,
    container: &str,
) -> Result<Vec<ContainerStatus>, Response> {
    let labels = BTreeMap::from([
        (LABEL_POD_NAMESPACE.to_owned(), namespace.to_owned()),
        (LABEL_POD_NAME.to_owned(), pod.to_owned()),
        (LABEL_CONTAINER_NAME.to_owned(), container.to_owned()),
    ]);
    let mut found = inner
        .runtime
        .list_containers(&ContainerFilter { labels, ..Default::default() })
        .await
        .map_err(|e| status(StatusCode::INTERNAL_SERVER_ERROR, "InternalError", e.to_string()))?;
    found.sort_by_key(|c| std::cmp::Reverse((c.attempt, c.created_at)));
    Ok(found)
}

async fn container_logs(
    State(inner): State<Arc<Inner>>,
    Path((namespace, pod, container)): Path<(String, String, String)>,
    options: Result<Query<logs::LogOptions>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let options = match options {
        Ok(Query(options)) => options,
        Err(e) => return status(StatusCode::BAD_REQUEST, "BadRequest", e.body_text()),
    };
    if let Err(e) = options.validate() {
        return status(StatusCode::BAD_REQUEST, "BadRequest", e.to_string());
    }
    let found = match attempts(&inner, &namespace, &pod, &container).await {
        Ok(found) => found,
        Err(response) => return response,
    };
    let Some(current) = found.first() else {
        return status(
            StatusCode::NOT_FOUND,
            "NotFound",
            format!("container {container:?} in pod {pod:?} is not available"),
        );
    };
    let (path, watched) = if options.previous {
        let previous = current.attempt.checked_sub(1);
        let record = found.iter().find(|c| Some(c.attempt) == previous);
        // The previous instance's container may be gone; its log file stays
        // beside the current one's (`<container>/<attempt>.log`).
        let path = record.map(|c| c.log_path.clone()).or_else(|| {
            previous.and_then(|attempt| current.log_path.parent().map(|dir| dir.join(format!("{attempt}.log"))))
        });
        match path.filter(|p| p.exists()) {
            Some(path) => (path, None),
            None => {
                return status(
                    StatusCode::BAD_REQUEST,
                    "BadRequest",
                    format!("previous terminated container {container:?} in pod {pod:?} not found"),
                );
            }
        }
    } else {
        (current.log_path.clone(), Some(current.id.clone()))
    };
    let runtime = inner.runtime.clone();
    let still_running: logs::StillRunning = Box::new(move || {
        let runtime = runtime.clone();
        let watched = watched.clone();
        Box::pin(async move {
            match &watched {
                Some(id) => runtime.container_status(id).await.is_ok_and(|s| s.state == ContainerState::Running),
                None => false,
            }
        })
    });
    let body = axum::body::Body::from_stream(logs::stream(path, options, still_running));
    ([(axum::http::header::CONTENT_TYPE, "text/plain")], body).into_response()
}

fn url_pairs(query: &str) -> impl Iterator<Item = (String, String)> + '_ {
    query.split('&').filter(|p| !p.is_empty()).map(|pair| {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        (percent_decode(k), percent_decode(v))
    })
}
