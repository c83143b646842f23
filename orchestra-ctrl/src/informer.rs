//! Shared informers: one list+watch per resource kind per process, a cache
//! of `Arc<K>` shared by every controller, indexers queried without copying.
//!
//! A [`SharedInformerFactory`] hands out one [`Informer`] per kind. The first
//! request starts its reflector (list, then watch from the list's
//! resourceVersion with bookmarks; a 410 Gone relists, a closed watch resumes
//! from the last resourceVersion seen). A subscriber that arrives late is first
//! served the cached objects, then the live events, in order.
//!
//! Every object passes a transform before it is cached (client-go's
//! `SetTransform`); the default, [`strip_managed_fields`], drops
//! `metadata.managedFields`. [`Informer::set_transform`] replaces it.

use std::any::{Any, TypeId};
use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use kube::api::{ListParams, WatchEvent, WatchParams};
use kube::{Api, Client, Resource};
use parking_lot::{Mutex, RwLock};
use serde::de::DeserializeOwned;
use tokio::sync::{mpsc, watch};

/// Index of objects by namespace (cluster-scoped objects under `""`).
pub const BY_NAMESPACE: &str = "namespace";
/// Index of objects by the UID of each of their owners.
pub const BY_OWNER: &str = "owner";
/// Index of objects by each of their labels, as `key=value`.
pub const BY_LABEL: &str = "label";
/// Index of pods by `spec.nodeName` (registered with [`pod_node_name`]).
pub const BY_NODE_NAME: &str = "nodeName";

/// The namespace and name of an object: the key of caches and work queues.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectKey {
    /// Namespace, `None` for cluster-scoped objects.
    pub namespace: Option<String>,
    /// Name.
    pub name: String,
}

impl ObjectKey {
    /// The key of a namespaced object.
    pub fn new(namespace: impl Into<String>, name: impl Into<String>) -> Self {
        Self { namespace: Some(namespace.into()), name: name.into() }
    }

    /// The key of a cluster-scoped object.
    pub fn cluster(name: impl Into<String>) -> Self {
        Self { namespace: None, name: name.into() }
    }

    /// The key of `object`.
    pub fn of<K: Resource>(object: &K) -> Self {
        Self { namespace: object.meta().namespace.clone(), name: object.meta().name.clone().unwrap_or_default() }
    }
}

impl fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.namespace {
            Some(ns) => write!(f, "{ns}/{}", self.name),
            None => f.write_str(&self.name),
        }
    }
}

/// A change seen by a subscriber.
#[derive(Debug)]
pub enum Event<K> {
    /// The object was created or changed (`old` is the cached previous version).
    Apply {
        /// The version replaced, if the object was cached.
        old: Option<Arc<K>>,
        /// The new version.
        new: Arc<K>,
    },
    /// The object was deleted (its last known version).
    Delete(Arc<K>),
}

impl<K> Clone for Event<K> {
    fn clone(&self) -> Self {
        match self {
            Event::Apply { old, new } => Event::Apply { old: old.clone(), new: new.clone() },
            Event::Delete(o) => Event::Delete(o.clone()),
        }
    }
}

/// A function computing the index values of an object.
pub type IndexFn<K> = Arc<dyn Fn(&K) -> Vec<String> + Send + Sync>;

/// A change an informer makes to every object before caching it and
/// handing it to subscribers (client-go's `TransformFunc`).
pub type TransformFn<K> = Arc<dyn Fn(&mut K) + Send + Sync>;

/// The transform every informer starts with: drops `metadata.managedFields`,
/// which controllers do not read and which, decoded, is most of a cached
/// object's memory (a pod that three managers wrote carries a field tree per
/// manager). kube-controller-manager and kube-scheduler trim their informers
/// the same way.
pub fn strip_managed_fields<K: Resource>(object: &mut K) {
    object.meta_mut().managed_fields = None;
}

/// The bound a kind needs to be informed on.
pub trait Kind: Resource<DynamicType = ()> + Clone + DeserializeOwned + fmt::Debug + Send + Sync + 'static {}
impl<K> Kind for K where K: Resource<DynamicType = ()> + Clone + DeserializeOwned + fmt::Debug + Send + Sync + 'static {}

struct State<K> {
    objects: HashMap<ObjectKey, Arc<K>>,
    indexes: HashMap<String, HashMap<String, HashSet<ObjectKey>>>,
    indexers: Vec<(String, IndexFn<K>)>,
    resource_version: String,
}

impl<K: Kind> State<K> {
    fn index(&mut self, key: &ObjectKey, object: &K, insert: bool) {
        for (name, f) in &self.indexers {
            let index = self.indexes.entry(name.clone()).or_default();
            for value in f(object) {
                if insert {
                    index.entry(value).or_default().insert(key.clone());
                } else if let Some(set) = index.get_mut(&value) {
                    set.remove(key);
                    if set.is_empty() {
                        index.remove(&value);
                    }
                }
            }
        }
    }

    fn put(&mut self, object: Arc<K>) -> Option<Arc<K>> {
        let key = ObjectKey::of(object.as_ref());
        let old = self.objects.insert(key.clone(), object.clone());
        if let Some(old) = &old {
            self.index(&key, old, false);
        }
        self.index(&key, &object, true);
        old
    }

    fn remove(&mut self, key: &ObjectKey) -> Option<Arc<K>> {
        let old = self.objects.remove(key)?;
        self.index(key, &old, false);
        Some(old)
    }
}

/// Cache and statistics of one kind, shared by all its subscribers.
pub struct Informer<K> {
    state: RwLock<State<K>>,
    subscribers: Mutex<Vec<mpsc::UnboundedSender<Event<K>>>>,
    synced: watch::Sender<bool>,
    stats: Mutex<InformerStats>,
    transform: RwLock<Option<TransformFn<K>>>,
}

/// Counters of an informer.
#[derive(Clone, Debug, Default)]
pub struct InformerStats {
    /// Full lists made (the first one and each relist).
    pub lists: u64,
    /// Watch requests made.
    pub watches: u64,
    /// Events applied to the cache.
    pub events: u64,
    /// Bookmarks received.
    pub bookmarks: u64,
    /// Relists caused by 410 Gone.
    pub gone: u64,
}

impl<K: Kind> Informer<K> {
    /// An empty informer with the namespace, owner and label indexers. It is
    /// fed by [`Informer::run`] or, in tests, by [`Informer::apply`].
    pub fn new() -> Arc<Self> {
        let by_namespace: IndexFn<K> = Arc::new(|o: &K| vec![o.meta().namespace.clone().unwrap_or_default()]);
        let by_owner: IndexFn<K> =
            Arc::new(|o: &K| o.meta().owner_references.iter().flatten().map(|r| r.uid.clone()).collect());
        let by_label: IndexFn<K> =
            Arc::new(|o: &K| o.meta().labels.iter().flatten().map(|(k, v)| format!("{k}={v}")).collect());
        Arc::new(Self {
            state: RwLock::new(State {
                objects: HashMap::new(),
                indexes: HashMap::new(),
                indexers: vec![
                    (BY_NAMESPACE.into(), by_namespace),
                    (BY_OWNER.into(), by_owner),
                    (BY_LABEL.into(), by_label),
                ],
                resource_version: String::new(),
            }),
            subscribers: Mutex::new(Vec::new()),
            synced: watch::channel(false).0,
            stats: Mutex::new(InformerStats::default()),
            transform: RwLock::new(Some(Arc::new(strip_managed_fields::<K>))),
        })
    }

    /// Sets the transform applied to every object from now on (`None`: keep
    /// objects as the API server sends them). Informers start with
    /// [`strip_managed_fields`]; set `None` before the first list to cache
    /// `metadata.managedFields` too.
    pub fn set_transform(&self, transform: Option<TransformFn<K>>) {
        *self.transform.write() = transform;
    }

    fn transformed(&self, mut object: K) -> K {
        if let Some(transform) = self.transform.read().as_ref() {
            transform(&mut object);
        }
        object
    }

    /// Adds (or replaces) an indexer; the cached objects are indexed at once.
    pub fn add_indexer(&self, name: &str, f: IndexFn<K>) {
        let mut state = self.state.write();
        state.indexers.retain(|(n, _)| n != name);
        state.indexes.remove(name);
        let mut index: HashMap<String, HashSet<ObjectKey>> = HashMap::new();
        for (key, object) in &state.objects {
            for value in f(object) {
                index.entry(value).or_default().insert(key.clone());
            }
        }
        state.indexes.insert(name.into(), index);
        state.indexers.push((name.into(), f));
    }

    /// The cached object under `key`.
    pub fn get(&self, key: &ObjectKey) -> Option<Arc<K>> {
        self.state.read().objects.get(key).cloned()
    }

    /// Every cached object.
    pub fn list(&self) -> Vec<Arc<K>> {
        self.state.read().objects.values().cloned().collect()
    }

    /// Number of cached objects.
    pub fn len(&self) -> usize {
        self.state.read().objects.len()
    }

    /// Whether the cache is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The objects whose indexer `index` yields `value`.
    pub fn by_index(&self, index: &str, value: &str) -> Vec<Arc<K>> {
        let state = self.state.read();
        state
            .indexes
            .get(index)
            .and_then(|i| i.get(value))
            .map(|keys| keys.iter().filter_map(|k| state.objects.get(k).cloned()).collect())
            .unwrap_or_default()
    }

    /// The objects of `namespace`.
    pub fn by_namespace(&self, namespace: &str) -> Vec<Arc<K>> {
        self.by_index(BY_NAMESPACE, namespace)
    }

    /// The objects with an owner reference to `uid`.
    pub fn by_owner(&self, uid: &str) -> Vec<Arc<K>> {
        self.by_index(BY_OWNER, uid)
    }

    /// The objects labelled `key=value`.
    pub fn by_label(&self, key: &str, value: &str) -> Vec<Arc<K>> {
        self.by_index(BY_LABEL, &format!("{key}={value}"))
    }

    /// The resourceVersion the cache reflects.
    pub fn resource_version(&self) -> String {
        self.state.read().resource_version.clone()
    }

    /// A copy of the counters.
    pub fn stats(&self) -> InformerStats {
        self.stats.lock().clone()
    }

    /// Whether the first list has been applied.
    pub fn has_synced(&self) -> bool {
        *self.synced.borrow()
    }

    /// Waits until the first list has been applied.
    pub async fn wait_synced(&self) {
        let mut rx = self.synced.subscribe();
        let _ = rx.wait_for(|s| *s).await;
    }

    /// A stream of changes: first an `Apply` for every cached object, then
    /// every change, in order.
    pub fn subscribe(&self) -> mpsc::UnboundedReceiver<Event<K>> {
        let (tx, rx) = mpsc::unbounded_channel();
        let mut subscribers = self.subscribers.lock();
        for object in self.state.read().objects.values() {
            let _ = tx.send(Event::Apply { old: None, new: object.clone() });
        }
        subscribers.push(tx);
        rx
    }

    fn dispatch(subscribers: &mut Vec<mpsc::UnboundedSender<Event<K>>>, event: Event<K>) {
        subscribers.retain(|s| s.send(event.clone()).is_ok());
    }

    /// Applies a created or changed object to the cache and tells subscribers.
    pub fn apply(&self, object: K) {
        let object = Arc::new(self.transformed(object));
        let mut subscribers = self.subscribers.lock();
        let old = {
            let mut state = self.state.write();
            if let Some(rv) = object.meta().resource_version.clone() {
                state.resource_version = rv;
            }
            state.put(object.clone())
        };
        self.stats.lock().events += 1;
        Self::dispatch(&mut subscribers, Event::Apply { old, new: object });
    }

    /// Removes a deleted object from the cache and tells subscribers.
    pub fn delete(&self, object: K) {
        let object = self.transformed(object);
        let key = ObjectKey::of(&object);
        let mut subscribers = self.subscribers.lock();
        let old = {
            let mut state = self.state.write();
            if let Some(rv) = object.meta().resource_version.clone() {
                state.resource_version = rv;
            }
            state.remove(&key)
        };
        self.stats.lock().events += 1;
        Self::dispatch(&mut subscribers, Event::Delete(old.unwrap_or_else(|| Arc::new(object))));
    }

    /// Replaces the whole cache with a list result, telling subscribers of
    /// what was added, changed and deleted meanwhile.
    pub fn replace(&self, objects: Vec<K>, resource_version: String) {
        let mut subscribers = self.subscribers.lock();
        let mut events = Vec::new();
        {
            let mut state = self.state.write();
            let mut seen = HashSet::new();
            for object in objects {
                let object = self.transformed(object);
                let key = ObjectKey::of(&object);
                seen.insert(key.clone());
                let unchanged = state.objects.get(&key).is_some_and(|o| {
                    o.meta().resource_version.is_some() && o.meta().resource_version == object.meta().resource_version
                });
                if unchanged {
                    continue;
                }
                let new = Arc::new(object);
                let old = state.put(new.clone());
                events.push(Event::Apply { old, new });
            }
            let gone: Vec<ObjectKey> = state.objects.keys().filter(|k| !seen.contains(*k)).cloned().collect();
            for key in gone {
                if let Some(old) = state.remove(&key) {
                    events.push(Event::Delete(old));
                }
            }
            state.resource_version = resource_version;
        }
        for event in events {
            Self::dispatch(&mut subscribers, event);
        }
        self.stats.lock().lists += 1;
        self.synced.send_replace(true);
    }

    /// Lists and watches `api` into this informer until the task is dropped.
    pub async fn run(self: Arc<Self>, api: Api<K>) {
        self.run_selected(api, Selectors::default()).await
    }

    /// Like [`Informer::run`], but lists and watches only the objects
    /// matching `selectors` (a node agent watching `spec.nodeName=<node>`).
    pub async fn run_selected(self: Arc<Self>, api: Api<K>, selectors: Selectors) {
        let mut delay = Duration::from_millis(100);
        'relist: loop {
            let (items, mut rv) = match list_all(&api, &selectors).await {
                Ok(r) => r,
                Err(e) => {
                    tracing::warn!(kind = %K::kind(&()), error = %e, "list failed");
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(Duration::from_secs(10));
                    continue;
                }
            };
            self.replace(items, rv.clone());
            loop {
                self.stats.lock().watches += 1;
                let mut params = WatchParams::default().timeout(290);
                if let Some(fields) = &selectors.fields {
                    params = params.fields(fields);
                }
                if let Some(labels) = &selectors.labels {
                    params = params.labels(labels);
                }
                let stream = match api.watch(&params, &rv).await {
                    Ok(s) => s,
                    Err(kube::Error::Api(s)) if s.code == 410 => {
                        self.stats.lock().gone += 1;
                        continue 'relist;
                    }
                    Err(e) => {
                        tracing::warn!(kind = %K::kind(&()), error = %e, "watch failed");
                        tokio::time::sleep(delay).await;
                        delay = (delay * 2).min(Duration::from_secs(10));
                        continue;
                    }
                };
                delay = Duration::from_millis(100);
                let mut stream = std::pin::pin!(stream);
                while let Some(event) = stream.next().await {
                    match event {
                        Ok(WatchEvent::Added(o)) | Ok(WatchEvent::Modified(o)) => {
                            if let Some(v) = o.meta().resource_version.clone() {
                                rv = v;
                            }
                            self.apply(o);
                        }
                        Ok(WatchEvent::Deleted(o)) => {
                            if let Some(v) = o.meta().resource_version.clone() {
                                rv = v;
                            }
                            self.delete(o);
                        }
                        Ok(WatchEvent::Bookmark(b)) => {
                            rv = b.metadata.resource_version;
                            self.stats.lock().bookmarks += 1;
                            self.state.write().resource_version = rv.clone();
                        }
                        Ok(WatchEvent::Error(s)) if s.code == 410 => {
                            self.stats.lock().gone += 1;
                            continue 'relist;
                        }
                        Ok(WatchEvent::Error(s)) => {
                            tracing::warn!(kind = %K::kind(&()), status = ?s, "watch error");
                            break;
                        }
                        Err(e) => {
                            tracing::debug!(kind = %K::kind(&()), error = %e, "watch stream error");
                            break;
                        }
                    }
                }
            }
        }
    }
}

/// Field and label selectors restricting what an informer lists and watches.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Selectors {
    /// A field selector, e.g. `spec.nodeName=node-1`.
    pub fields: Option<String>,
    /// A label selector, e.g. `app=web`.
    pub labels: Option<String>,
}

impl Selectors {
    /// Only objects matching the field selector `fields`.
    pub fn fields(fields: impl Into<String>) -> Self {
        Self { fields: Some(fields.into()), labels: None }
    }
}

async fn list_all<K: Kind>(api: &Api<K>, selectors: &Selectors) -> Result<(Vec<K>, String), kube::Error> {
    let base = || {
        let mut params = ListParams::default().limit(500);
        if let Some(fields) = &selectors.fields {
            params = params.fields(fields);
        }
        if let Some(labels) = &selectors.labels {
            params = params.labels(labels);
        }
        params
    };
    let mut items = Vec::new();
    let mut params = base();
    loop {
        let list = api.list(&params).await?;
        let rv = list.metadata.resource_version.clone().unwrap_or_default();
        items.extend(list.items);
        match list.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => params = base().continue_token(&token),
            None => return Ok((items, rv)),
        }
    }
}

/// The indexer of pods by node name (see [`BY_NODE_NAME`]).
pub fn pod_node_name() -> IndexFn<k8s_openapi::api::core::v1::Pod> {
    Arc::new(|p: &k8s_openapi::api::core::v1::Pod| {
        p.spec.as_ref().and_then(|s| s.node_name.clone()).filter(|n| !n.is_empty()).into_iter().collect()
    })
}

/// One informer per kind for a whole process.
#[derive(Clone)]
pub struct SharedInformerFactory {
    client: Client,
    informers: Arc<Mutex<HashMap<TypeId, Arc<dyn Any + Send + Sync>>>>,
    tasks: Arc<Mutex<Vec<tokio::task::JoinHandle<()>>>>,
}

impl SharedInformerFactory {
    /// A factory whose informers list and watch through `client`.
    pub fn new(client: Client) -> Self {
        Self { client, informers: Arc::default(), tasks: Arc::default() }
    }

    /// The client informers (and controllers built on this factory) use.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The same informers, with `client` for what the controllers write
    /// (e.g. a [`Fence::client`](crate::leader::Fence::client)). Informers
    /// started later list and watch through it too.
    pub fn with_client(&self, client: Client) -> Self {
        Self { client, informers: self.informers.clone(), tasks: self.tasks.clone() }
    }

    /// The informer of `K` across all namespaces, started on first request.
    pub fn informer<K: Kind>(&self) -> Arc<Informer<K>>
    where
        K::Scope: ScopeAll,
    {
        let mut informers = self.informers.lock();
        if let Some(i) = informers.get(&TypeId::of::<K>()) {
            return i.clone().downcast::<Informer<K>>().expect("typed by TypeId");
        }
        let informer = Informer::<K>::new();
        informers.insert(TypeId::of::<K>(), informer.clone());
        let api = K::Scope::api_all::<K>(self.client.clone());
        self.tasks.lock().push(tokio::spawn(informer.clone().run(api)));
        informer
    }

    /// Stops every reflector.
    pub fn shutdown(&self) {
        for task in self.tasks.lock().drain(..) {
            task.abort();
        }
    }
}

impl Drop for SharedInformerFactory {
    fn drop(&mut self) {
        if Arc::strong_count(&self.tasks) == 1 {
            self.shutdown();
        }
    }
}

/// How to build the all-namespaces `Api` of a kind of some scope.
pub trait ScopeAll {
    /// `Api::all` for namespaced and cluster-scoped kinds alike.
    fn api_all<K: Kind<Scope = Self>>(client: Client) -> Api<K>
    where
        Self: Sized;
}

impl ScopeAll for k8s_openapi::NamespaceResourceScope {
    fn api_all<K: Kind<Scope = Self>>(client: Client) -> Api<K> {
        Api::all(client)
    }
}

impl ScopeAll for k8s_openapi::ClusterResourceScope {
    fn api_all<K: Kind<Scope = Self>>(client: Client) -> Api<K> {
        Api::all(client)
    }
}

/// The name of `object` (empty if unnamed).
pub fn name_of<K: Resource>(object: &K) -> String {
    object.meta().name.clone().unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Pod;
    use kube::api::ObjectMeta;

    fn pod(ns: &str, name: &str, labels: &[(&str, &str)], rv: &str) -> Pod {
        Pod {
            metadata: ObjectMeta {
                namespace: Some(ns.into()),
                name: Some(name.into()),
                resource_version: Some(rv.into()),
                labels: Some(labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    #[test]
    fn indexes_follow_changes() {
        let informer = Informer::<Pod>::new();
        informer.apply(pod("a", "p1", &[("app", "x")], "1"));
        informer.apply(pod("b", "p2", &[("app", "x")], "2"));
        assert_eq!(informer.by_namespace("a").len(), 1);
        assert_eq!(informer.by_label("app", "x").len(), 2);
        informer.apply(pod("b", "p2", &[("app", "y")], "3"));
        assert_eq!(informer.by_label("app", "x").len(), 1);
        assert_eq!(informer.by_label("app", "y").len(), 1);
        informer.delete(pod("a", "p1", &[], "4"));
        assert!(informer.by_namespace("a").is_empty());
        assert_eq!(informer.resource_version(), "4");
    }

    #[test]
    fn managed_fields_are_dropped_unless_the_transform_is_replaced() {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry;
        let with_fields = |name: &str, rv: &str| {
            let mut p = pod("a", name, &[("app", "x")], rv);
            p.metadata.managed_fields =
                Some(vec![ManagedFieldsEntry { manager: Some("kubectl".into()), ..Default::default() }]);
            p
        };
        let informer = Informer::<Pod>::new();
        let mut rx = informer.subscribe();
        informer.apply(with_fields("p1", "1"));
        informer.replace(vec![with_fields("p1", "2"), with_fields("p2", "2")], "2".into());
        for p in informer.list() {
            assert_eq!(p.metadata.managed_fields, None, "{:?}", p.metadata.name);
            assert_eq!(p.metadata.labels.as_ref().unwrap()["app"], "x");
        }
        while let Ok(Event::Apply { new, .. }) = rx.try_recv() {
            assert_eq!(new.metadata.managed_fields, None);
        }
        informer.set_transform(None);
        informer.apply(with_fields("p3", "3"));
        let kept = informer.get(&ObjectKey::new("a", "p3")).unwrap();
        assert_eq!(kept.metadata.managed_fields.as_ref().map(Vec::len), Some(1));
        // A transform of one's own runs instead.
        informer.set_transform(Some(Arc::new(|p: &mut Pod| p.metadata.labels = None)));
        informer.apply(with_fields("p4", "4"));
        let p4 = informer.get(&ObjectKey::new("a", "p4")).unwrap();
        assert!(p4.metadata.labels.is_none() && p4.metadata.managed_fields.is_some());
    }

    #[test]
    fn late_subscribers_get_the_cache_then_changes() {
        let informer = Informer::<Pod>::new();
        informer.apply(pod("a", "p1", &[], "1"));
        let mut rx = informer.subscribe();
        informer.apply(pod("a", "p2", &[], "2"));
        let mut names = Vec::new();
        while let Ok(Event::Apply { new, .. }) = rx.try_recv() {
            names.push(name_of(new.as_ref()));
        }
        assert_eq!(names, ["p1", "p2"]);
    }

    #[test]
    fn replace_reports_deletions_and_skips_unchanged() {
        let informer = Informer::<Pod>::new();
        informer.apply(pod("a", "p1", &[], "1"));
        informer.apply(pod("a", "p2", &[], "2"));
        let mut rx = informer.subscribe();
        while rx.try_recv().is_ok() {}
        informer.replace(vec![pod("a", "p1", &[], "1")], "9".into());
        match rx.try_recv() {
            Ok(Event::Delete(p)) => assert_eq!(name_of(p.as_ref()), "p2"),
            other => panic!("{other:?}"),
        }
        assert!(rx.try_recv().is_err());
        assert!(informer.has_synced());
    }

    #[tokio::test]
    async fn selected_informer_sees_only_matching_objects() {
        use kube::api::PostParams;
        let server = orchestra_core::server::ApiServer::builder(Arc::new(orchestra_store::MemStore::new()))
            .build()
            .await
            .unwrap();
        let client = orchestra_core::client::in_process(&server, "default");
        let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
        let bound = |name: &str, node: &str| {
            let mut p = pod("default", name, &[], "");
            p.metadata.resource_version = None;
            p.spec = Some(k8s_openapi::api::core::v1::PodSpec {
                node_name: Some(node.into()),
                containers: vec![k8s_openapi::api::core::v1::Container {
                    name: "c".into(),
                    image: Some("busybox".into()),
                    ..Default::default()
                }],
                ..Default::default()
            });
            p
        };
        pods.create(&PostParams::default(), &bound("a", "n1")).await.unwrap();
        pods.create(&PostParams::default(), &bound("b", "n2")).await.unwrap();
        let informer = Informer::<Pod>::new();
        let task = tokio::spawn(informer.clone().run_selected(Api::all(client), Selectors::fields("spec.nodeName=n1")));
        informer.wait_synced().await;
        assert_eq!(informer.len(), 1);
        pods.create(&PostParams::default(), &bound("c", "n1")).await.unwrap();
        pods.create(&PostParams::default(), &bound("d", "n2")).await.unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while informer.len() < 2 {
            assert!(std::time::Instant::now() < deadline);
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        let mut names: Vec<_> = informer.list().iter().map(|p| name_of(p.as_ref())).collect();
        names.sort();
        assert_eq!(names, ["a", "c"]);
        task.abort();
    }

    #[test]
    fn custom_indexer_applies_to_cached_objects() {
        let informer = Informer::<Pod>::new();
        let mut p = pod("a", "p1", &[], "1");
        p.spec = Some(k8s_openapi::api::core::v1::PodSpec { node_name: Some("n1".into()), ..Default::default() });
        informer.apply(p);
        informer.add_indexer(BY_NODE_NAME, pod_node_name());
        assert_eq!(informer.by_index(BY_NODE_NAME, "n1").len(), 1);
    }
}
