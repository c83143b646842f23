//! Fakes for controller unit tests (feature `testing`; always on for this
//! crate's own tests).
//!
//! [`FakeCluster`] plays the part of client-go's fake clientset: objects
//! seeded as given (uid, creation time and status included), a client whose
//! every request is recorded as an [`ApiAction`], and shared informers that
//! read through a second, unrecorded client, so that
//! [`actions`](FakeCluster::actions) holds what the controller under test
//! did and nothing its caches did. Behind the client runs the real
//! in-process API server on a [`MemStore`], so
//! writes are validated, `generateName` is honoured and a reconcile's
//! results can be read back.
//!
//! ```no_run
//! # async fn demo(rs: k8s_openapi::api::apps::v1::ReplicaSet) {
//! use orchestra_ctrl::testing::FakeCluster;
//! let fake = FakeCluster::builder().object(&rs).build().await;
//! // ... run one reconcile with `fake.client()` and `fake.informer::<Pod>().await` ...
//! assert_eq!(fake.writes(), ["create pods default/web-", "patch replicasets/status default/web"]);
//! # }
//! ```

use std::collections::BTreeSet;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use kube::api::{Api, ListParams};
use kube::{Client, Resource};
use orchestra_core::api::{Registry, ResourceInfo};
use orchestra_core::server::{ApiServer, SYSTEM_NAMESPACES};
use orchestra_store::MemStore;
use parking_lot::Mutex;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::informer::{Informer, Kind, ScopeAll, SharedInformerFactory};

/// One request the recording client sent, as client-go's fake clientset
/// records an `Action`.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiAction {
    /// `get`, `list`, `watch`, `create`, `update`, `patch`, `delete` or
    /// `deletecollection` (from the method, the name and `?watch`).
    pub verb: String,
    /// API group (`""` for the core group).
    pub group: String,
    /// API version.
    pub version: String,
    /// Plural resource name, e.g. `pods`; empty for discovery requests.
    pub resource: String,
    /// Namespace of the request, if namespaced.
    pub namespace: Option<String>,
    /// Object name from the path (`None` for collection requests).
    pub name: Option<String>,
    /// Subresource, e.g. `status`, `finalize`.
    pub subresource: Option<String>,
    /// The whole request path.
    pub path: String,
    /// The query string, if any.
    pub query: Option<String>,
    /// The JSON body, if the request had one.
    pub body: Option<Value>,
}

impl ApiAction {
    /// Whether this is `verb` on `resource` (a subresource written
    /// `resource/sub`, e.g. `replicasets/status`).
    pub fn is(&self, verb: &str, resource: &str) -> bool {
        self.verb == verb && self.resource_path() == resource
    }

    /// Whether the verb only reads (`get`, `list`, `watch`).
    pub fn is_read(&self) -> bool {
        matches!(self.verb.as_str(), "get" | "list" | "watch")
    }

    /// `resource` or `resource/subresource`.
    pub fn resource_path(&self) -> String {
        match &self.subresource {
            Some(sub) => format!("{}/{sub}", self.resource),
            None => self.resource.clone(),
        }
    }

    /// The name the request is about: the one in the path, else the
    /// body's `metadata.name`, else its `metadata.generateName`.
    pub fn object_name(&self) -> Option<String> {
        self.name.clone().or_else(|| {
            let meta = self.body.as_ref()?.get("metadata")?;
            meta.get("name").or_else(|| meta.get("generateName")).and_then(Value::as_str).map(str::to_owned)
        })
    }

    /// The body deserialised as `K`.
    pub fn object<K: DeserializeOwned>(&self) -> Option<K> {
        serde_json::from_value(self.body.clone()?).ok()
    }
}

/// `verb resource[/sub] [namespace/]name`, e.g.
/// `create pods default/web-` (a `generateName`) or
/// `patch replicasets/status default/web`.
impl fmt::Display for ApiAction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {} ", self.verb, self.resource_path())?;
        if let Some(ns) = &self.namespace {
            write!(f, "{ns}/")?;
        }
        write!(f, "{}", self.object_name().unwrap_or_default())
    }
}

/// Parses a request into an [`ApiAction`] (without the body).
fn parse(method: &http::Method, uri: &http::Uri) -> ApiAction {
    let path = uri.path().to_owned();
    let query = uri.query().map(str::to_owned);
    let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let (group, version, rest) = match segments.as_slice() {
        ["api", version, rest @ ..] => (String::new(), version.to_string(), rest),
        ["apis", group, version, rest @ ..] => (group.to_string(), version.to_string(), rest),
        _ => (String::new(), String::new(), &segments[..0]),
    };
    let (namespace, rest) = match rest {
        // `namespaces/<n>/finalize|status` is a subresource of a Namespace.
        ["namespaces", _, "finalize" | "status"] => (None, rest),
        ["namespaces", ns, rest @ ..] if !rest.is_empty() => (Some(ns.to_string()), rest),
        _ => (None, rest),
    };
    let resource = rest.first().map(|s| s.to_string()).unwrap_or_default();
    let name = rest.get(1).map(|s| s.to_string());
    let subresource = rest.get(2).map(|s| s.to_string());
    let watch = query.as_deref().is_some_and(|q| q.split('&').any(|kv| kv == "watch=true" || kv == "watch=1"));
    let verb = match *method {
        http::Method::GET if watch => "watch",
        http::Method::GET if name.is_some() => "get",
        http::Method::GET => "list",
        http::Method::POST => "create",
        http::Method::PUT => "update",
        http::Method::PATCH => "patch",
        http::Method::DELETE if name.is_some() => "delete",
        http::Method::DELETE => "deletecollection",
        _ => "other",
    };
    ApiAction { verb: verb.into(), group, version, resource, namespace, name, subresource, path, query, body: None }
}

type Log = Arc<Mutex<Vec<ApiAction>>>;

/// A tower service recording every request before passing it on.
#[derive(Clone)]
struct Recording<S> {
    inner: S,
    log: Log,
    /// Requests sent and not answered yet.
    in_flight: Arc<AtomicUsize>,
}

/// Counts a request as answered when dropped (answered or abandoned).
struct Answered(Arc<AtomicUsize>);

impl Drop for Answered {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl<S> tower::Service<http::Request<kube::client::Body>> for Recording<S>
where
    S: tower::Service<http::Request<kube::client::Body>> + Clone + Send + 'static,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<kube::client::Body>) -> Self::Future {
        // The request is logged here, in the order the client sent it; its
        // body is filled in once read.
        let index = {
            let mut log = self.log.lock();
            log.push(parse(request.method(), request.uri()));
            log.len() - 1
        };
        let log = self.log.clone();
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        let answered = Answered(self.in_flight.clone());
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        Box::pin(async move {
            let _answered = answered;
            let (parts, body) = request.into_parts();
            // A body kube-client sends is whole in memory: reading it cannot fail.
            let bytes = body.collect_bytes().await.unwrap_or_default();
            if !bytes.is_empty()
                && let Ok(value) = serde_json::from_slice::<Value>(&bytes)
                && let Some(action) = log.lock().get_mut(index)
            {
                action.body = Some(value);
            }
            inner.call(http::Request::from_parts(parts, kube::client::Body::from(bytes))).await
        })
    }
}

/// Objects to seed a [`FakeCluster`] with, and kinds of the caller's to
/// serve beside the built-in ones.
///
/// ```
/// use k8s_openapi::api::core::v1::ConfigMap;
/// use kube::api::{Api, ObjectMeta, PostParams};
/// use orchestra_ctrl::testing::FakeCluster;
///
/// # tokio::runtime::Runtime::new().unwrap().block_on(async {
/// let seeded = ConfigMap {
///     metadata: ObjectMeta { name: Some("settings".into()), namespace: Some("team-a".into()), ..Default::default() },
///     data: Some([("mode".to_owned(), "fast".to_owned())].into()),
///     ..Default::default()
/// };
/// let fake = FakeCluster::builder().object(&seeded).build().await;
/// let got: ConfigMap = fake.get("team-a", "settings").await.unwrap();
/// assert_eq!(got.metadata.uid.as_deref(), Some("uid-settings"));
///
/// // What the code under test does through `fake.client()` is recorded.
/// let meta = ObjectMeta { name: Some("copy".into()), ..Default::default() };
/// let copy = ConfigMap { metadata: meta, data: got.data, ..Default::default() };
/// Api::<ConfigMap>::namespaced(fake.client(), "team-a").create(&PostParams::default(), &copy).await.unwrap();
/// assert_eq!(fake.writes(), ["create configmaps team-a/copy"]);
/// # });
/// ```
#[derive(Default)]
pub struct FakeClusterBuilder {
    objects: Vec<Value>,
    kinds: Vec<ResourceInfo>,
}

impl FakeClusterBuilder {
    /// Serves (and lets [`object`](Self::object) seed) a kind of the
    /// caller's, as [`ApiServerBuilder::register`](orchestra_core::server::ApiServerBuilder::register)
    /// does: the test of a controller of a Rust-typed kind.
    pub fn resource(mut self, kind: ResourceInfo) -> Self {
        self.kinds.push(kind);
        self
    }

    /// Seeds `object` as it is: its uid, creation time, status and owner
    /// references are kept (a missing uid becomes `uid-<name>`, a missing
    /// creation time now).
    pub fn object<K: Resource<DynamicType = ()> + Serialize>(mut self, object: &K) -> Self {
        self.objects.push(to_value(object));
        self
    }

    /// Seeds every object of `objects`.
    pub fn objects<'a, K: Resource<DynamicType = ()> + Serialize + 'a>(
        mut self,
        objects: impl IntoIterator<Item = &'a K>,
    ) -> Self {
        self.objects.extend(objects.into_iter().map(to_value));
        self
    }

    /// Starts the API server, seeds the objects (and any namespace they are
    /// in that was not seeded too) and returns the cluster.
    pub async fn build(self) -> FakeCluster {
        let mut registry = Registry::builtin();
        let mut server = ApiServer::builder(Arc::new(MemStore::new()))
            .authorization_modes(&[orchestra_core::auth::AuthorizationMode::AlwaysAllow]);
        for kind in self.kinds {
            registry.register(kind.clone());
            server = server.register(kind);
        }
        let server = server.build().await.expect("the fake API server starts");
        let log: Log = Arc::default();
        let in_flight: Arc<AtomicUsize> = Arc::default();
        // The controller under test acts as the server's loopback identity,
        // which may do anything: a fake tests what controllers do, not what
        // they are allowed.
        let inner = tower::Layer::layer(
            &orchestra_core::auth::IdentityLayer(orchestra_core::client::loopback_user()),
            server.router(),
        );
        let client = Client::new(Recording { inner, log: log.clone(), in_flight: in_flight.clone() }, "default");
        let unrecorded = orchestra_core::client::in_process(&server, "default");
        let factory = SharedInformerFactory::new(unrecorded.clone());
        let fake = FakeCluster { server, registry, client, unrecorded, factory, log, in_flight };
        let mut namespaces = BTreeSet::new();
        let mut seeded = BTreeSet::new();
        for object in &self.objects {
            if let Some(ns) = object.pointer("/metadata/namespace").and_then(Value::as_str) {
                namespaces.insert(ns.to_owned());
            }
            if object["kind"] == "Namespace"
                && let Some(name) = object.pointer("/metadata/name").and_then(Value::as_str)
            {
                seeded.insert(name.to_owned());
            }
        }
        for ns in namespaces.difference(&seeded) {
            if !SYSTEM_NAMESPACES.contains(&ns.as_str()) {
                fake.seed(namespace(ns)).await;
            }
        }
        for object in self.objects {
            fake.seed(object).await;
        }
        fake
    }
}

fn to_value<K: Resource<DynamicType = ()> + Serialize>(object: &K) -> Value {
    let mut value = serde_json::to_value(object).expect("objects serialize");
    value["apiVersion"] = K::api_version(&()).into_owned().into();
    value["kind"] = K::kind(&()).into_owned().into();
    value
}

fn namespace(name: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": name, "labels": {"kubernetes.io/metadata.name": name}},
        "spec": {"finalizers": ["kubernetes"]},
        "status": {"phase": "Active"},
    })
}

/// An in-process API server seeded with objects, a recording client over it
/// and shared informers for the controller under test.
pub struct FakeCluster {
    server: ApiServer,
    registry: Registry,
    client: Client,
    unrecorded: Client,
    factory: SharedInformerFactory,
    log: Log,
    in_flight: Arc<AtomicUsize>,
}

impl FakeCluster {
    /// Objects to start with.
    pub fn builder() -> FakeClusterBuilder {
        FakeClusterBuilder::default()
    }

    /// A cluster holding only the system namespaces.
    pub async fn new() -> FakeCluster {
        FakeClusterBuilder::default().build().await
    }

    /// The recording client: give it to the controller under test.
    pub fn client(&self) -> Client {
        self.client.clone()
    }

    /// A client whose requests are not recorded, for the test's own reads
    /// and writes.
    pub fn unrecorded(&self) -> Client {
        self.unrecorded.clone()
    }

    /// The API server.
    pub fn server(&self) -> &ApiServer {
        &self.server
    }

    /// Shared informers reading through the unrecorded client.
    pub fn factory(&self) -> &SharedInformerFactory {
        &self.factory
    }

    /// The shared informer of `K`, once it has listed.
    pub async fn informer<K: Kind>(&self) -> Arc<Informer<K>>
    where
        K::Scope: ScopeAll,
    {
        let informer = self.factory.informer::<K>();
        tokio::time::timeout(Duration::from_secs(10), informer.wait_synced()).await.expect("the informer syncs");
        informer
    }

    /// Waits until the informer of `K` holds every object of `K` the API
    /// server holds, at the same resource versions: after a reconcile's
    /// writes, before the next reconcile reads the cache.
    pub async fn sync<K: Kind + Serialize>(&self)
    where
        K::Scope: ScopeAll,
    {
        let informer = self.informer::<K>().await;
        let api: Api<K> = K::Scope::api_all::<K>(self.unrecorded.clone());
        let versions = |objects: Vec<&K>| {
            let mut v: Vec<(String, String)> = objects
                .into_iter()
                .map(|o| {
                    (o.meta().uid.clone().unwrap_or_default(), o.meta().resource_version.clone().unwrap_or_default())
                })
                .collect();
            v.sort();
            v
        };
        let listed = api.list(&ListParams::default()).await.expect("lists");
        let want = versions(listed.items.iter().collect());
        eventually(Duration::from_secs(10), "the informer catches up", || {
            let cached = informer.list();
            let ok = versions(cached.iter().map(|o| o.as_ref()).collect()) == want;
            async move { ok }
        })
        .await;
    }

    /// Every request the recording client sent, in order.
    pub fn actions(&self) -> Vec<ApiAction> {
        self.log.lock().clone()
    }

    /// Forgets the recorded requests.
    pub fn clear_actions(&self) {
        self.log.lock().clear();
    }

    /// The recorded writes but events (which recorders send from tasks of
    /// their own, in no fixed order), each as its [`Display`](ApiAction)
    /// form: `create pods default/web-`.
    pub fn writes(&self) -> Vec<String> {
        self.log.lock().iter().filter(|a| !a.is_read() && a.resource != "events").map(ToString::to_string).collect()
    }

    /// Lets tasks the code under test spawned (event recorders) send their
    /// requests, then waits until every request of the recording client is
    /// answered.
    pub async fn settle(&self) {
        let in_flight = self.in_flight.clone();
        eventually(Duration::from_secs(5), "the recording client's requests", || {
            let in_flight = in_flight.clone();
            async move {
                // Requests pass through the client's buffer task before
                // they are counted: give it and the spawned tasks turns.
                for _ in 0..20 {
                    tokio::task::yield_now().await;
                }
                in_flight.load(Ordering::SeqCst) == 0
            }
        })
        .await;
    }

    /// Waits until `count` events were recorded in `namespace` (and, after
    /// [`settle`](Self::settle), for any more on their way) and returns them
    /// as `Type Reason Note` strings, sorted.
    pub async fn events(&self, namespace: &str, count: usize) -> Vec<String> {
        self.settle().await;
        let api: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(self.unrecorded.clone(), namespace);
        let found: Arc<Mutex<Vec<String>>> = Arc::default();
        eventually(Duration::from_secs(5), &format!("{count} events in {namespace}"), || {
            let api = api.clone();
            let found = found.clone();
            async move {
                let list = api.list(&ListParams::default()).await.expect("lists events");
                let notes: Vec<String> = list
                    .items
                    .iter()
                    .map(|e| {
                        format!(
                            "{} {} {}",
                            e.type_.as_deref().unwrap_or_default(),
                            e.reason.as_deref().unwrap_or_default(),
                            e.note.as_deref().unwrap_or_default()
                        )
                    })
                    .collect();
                let enough = notes.len() >= count;
                *found.lock() = notes;
                enough
            }
        })
        .await;
        let mut found = found.lock().clone();
        found.sort();
        found
    }

    /// Reads a namespaced object back (through the unrecorded client);
    /// `None` if absent.
    pub async fn get<K>(&self, namespace: &str, name: &str) -> Option<K>
    where
        K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
            + Clone
            + DeserializeOwned
            + fmt::Debug,
    {
        let api: Api<K> = Api::namespaced(self.unrecorded.clone(), namespace);
        api.get_opt(name).await.expect("reads the object")
    }

    /// Reads a cluster-scoped object back; `None` if absent.
    pub async fn get_cluster<K>(&self, name: &str) -> Option<K>
    where
        K: Resource<DynamicType = (), Scope = k8s_openapi::ClusterResourceScope>
            + Clone
            + DeserializeOwned
            + fmt::Debug,
    {
        let api: Api<K> = Api::all(self.unrecorded.clone());
        api.get_opt(name).await.expect("reads the object")
    }

    /// Every object of `K` in `namespace`, sorted by name.
    pub async fn list<K>(&self, namespace: &str) -> Vec<K>
    where
        K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
            + Clone
            + DeserializeOwned
            + fmt::Debug,
    {
        let api: Api<K> = Api::namespaced(self.unrecorded.clone(), namespace);
        let mut items = api.list(&ListParams::default()).await.expect("lists").items;
        items.sort_by_key(|o| o.meta().name.clone());
        items
    }

    /// Seeds (or overwrites) `object` as it is, as [`FakeClusterBuilder::object`] does.
    pub async fn add<K: Resource<DynamicType = ()> + Serialize>(&self, object: &K) {
        self.seed(to_value(object)).await;
    }

    /// Writes `object` straight into the store, in its stored form.
    async fn seed(&self, mut object: Value) {
        let api_version = object["apiVersion"].as_str().unwrap_or_default().to_owned();
        let (group, version) = api_version.split_once('/').unwrap_or(("", &api_version));
        let kind = object["kind"].as_str().unwrap_or_default().to_owned();
        let info = self
            .registry
            .by_kind(group, version, &kind)
            .unwrap_or_else(|| panic!("{api_version} {kind} is neither built in nor registered with `resource`"));
        let meta = object.get_mut("metadata").and_then(Value::as_object_mut).expect("seeded objects have metadata");
        let name = meta.get("name").and_then(Value::as_str).expect("seeded objects have a name").to_owned();
        let namespace = meta.get("namespace").and_then(Value::as_str).map(str::to_owned);
        meta.entry("uid").or_insert_with(|| format!("uid-{name}").into());
        meta.entry("creationTimestamp").or_insert_with(|| k8s_openapi::jiff::Timestamp::now().to_string().into());
        meta.entry("generation").or_insert(1.into());
        meta.remove("resourceVersion");
        let key = info.storage_key(namespace.as_deref().filter(|_| info.namespaced), &name);
        let stored = info.to_storage(object);
        let bytes = serde_json::to_vec(&stored).expect("JSON values serialize");
        let store = self.server.store();
        if kind == "Namespace"
            && store.get(&key).await.expect("store reads").is_some()
            && stored.pointer("/metadata/deletionTimestamp").is_none()
        {
            // A system namespace, already there.
            return;
        }
        store.put(&key, bytes.into(), None).await.expect("store writes");
    }
}

/// Polls `check` every 10 ms until it holds; panics naming `what` after
/// `timeout`.
pub async fn eventually<F, Fut>(timeout: Duration, what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if check().await {
            return;
        }
        assert!(tokio::time::Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{ConfigMap, Pod};
    use kube::api::{ObjectMeta, Patch, PatchParams, PostParams};

    #[test]
    fn parses_paths_like_client_go() {
        let table = [
            ("GET", "/api/v1/namespaces/default/pods/p", "get pods default/p"),
            ("GET", "/api/v1/pods?watch=true&resourceVersion=1", "watch pods "),
            ("GET", "/api/v1/namespaces/default/pods", "list pods default/"),
            ("PATCH", "/apis/apps/v1/namespaces/ns/replicasets/rs/status", "patch replicasets/status ns/rs"),
            ("PUT", "/api/v1/namespaces/gone/finalize", "update namespaces/finalize gone"),
            ("DELETE", "/api/v1/nodes/n1", "delete nodes n1"),
            ("DELETE", "/api/v1/namespaces/default/pods", "deletecollection pods default/"),
            ("GET", "/api/v1/namespaces/kube-system", "get namespaces kube-system"),
        ];
        for (method, uri, expected) in table {
            let action = parse(&method.parse().unwrap(), &uri.parse().unwrap());
            assert_eq!(action.to_string(), expected, "{method} {uri}");
        }
        let a = parse(&http::Method::PATCH, &"/apis/apps/v1/namespaces/ns/replicasets/rs/status".parse().unwrap());
        assert_eq!((a.group.as_str(), a.version.as_str()), ("apps", "v1"));
        assert!(a.is("patch", "replicasets/status"));
    }

    #[tokio::test]
    async fn records_requests_and_seeds_objects_as_given() {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "team", "uid": "u-1",
                         "creationTimestamp": "2020-01-01T00:00:00Z"},
            "spec": {"containers": [{"name": "c", "image": "i"}]},
            "status": {"phase": "Running"},
        }))
        .unwrap();
        let fake = FakeCluster::builder().object(&pod).build().await;
        // Seeded as given, in a namespace made for it.
        let got: Pod = fake.get("team", "p").await.unwrap();
        assert_eq!(got.metadata.uid.as_deref(), Some("u-1"));
        assert_eq!(got.status.unwrap().phase.as_deref(), Some("Running"));
        assert_eq!(got.metadata.creation_timestamp.unwrap().0.to_string(), "2020-01-01T00:00:00Z");
        assert!(fake.get_cluster::<k8s_openapi::api::core::v1::Namespace>("team").await.is_some());
        // The informer sees it; its requests are not recorded.
        let pods = fake.informer::<Pod>().await;
        assert_eq!(pods.len(), 1);
        assert!(fake.actions().is_empty());

        let api: Api<ConfigMap> = Api::namespaced(fake.client(), "team");
        let cm = ConfigMap {
            metadata: ObjectMeta { generate_name: Some("cm-".into()), ..Default::default() },
            data: Some([("k".to_string(), "v".to_string())].into()),
            ..Default::default()
        };
        let created = api.create(&PostParams::default(), &cm).await.unwrap();
        let name = created.metadata.name.unwrap();
        api.patch(&name, &PatchParams::default(), &Patch::Merge(json!({"data": {"k": "w"}}))).await.unwrap();
        api.get(&name).await.unwrap();
        let actions = fake.actions();
        let summary: Vec<String> = actions.iter().map(ToString::to_string).collect();
        assert_eq!(
            summary,
            [
                "create configmaps team/cm-".to_string(),
                format!("patch configmaps team/{name}"),
                format!("get configmaps team/{name}")
            ]
        );
        assert_eq!(actions[0].object::<ConfigMap>().unwrap().data.unwrap()["k"], "v");
        assert_eq!(actions[1].body.as_ref().unwrap()["data"]["k"], "w");
        assert_eq!(fake.writes(), ["create configmaps team/cm-".to_string(), format!("patch configmaps team/{name}")]);
        fake.clear_actions();
        assert!(fake.actions().is_empty());
    }

    #[tokio::test]
    async fn settle_waits_for_spawned_requests() {
        let fake = FakeCluster::new().await;
        let api: Api<ConfigMap> = Api::namespaced(fake.client(), "default");
        for i in 0..3 {
            let api = api.clone();
            tokio::spawn(async move {
                let cm = ConfigMap {
                    metadata: ObjectMeta { name: Some(format!("cm-{i}")), ..Default::default() },
                    ..Default::default()
                };
                api.create(&PostParams::default(), &cm).await.unwrap();
            });
        }
        fake.settle().await;
        assert_eq!(fake.writes().len(), 3);
        assert_eq!(fake.list::<ConfigMap>("default").await.len(), 3);
    }
}
