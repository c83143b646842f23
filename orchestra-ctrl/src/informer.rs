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
//!
//! Besides one typed informer per kind, the factory hands out metadata
//! informers ([`SharedInformerFactory::metadata_informer`]): the
//! `PartialObjectMetadata` of every object of a resource found at run time
//! (what the garbage collector watches), one per group, version and
//! resource, each stopped on its own when the resource goes away. Both
//! kinds share the same cache and reflector.

use std::any::{Any, TypeId};
use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use kube::api::{DynamicObject, ListParams, WatchEvent, WatchParams};
use kube::core::PartialObjectMeta;
use kube::discovery::ApiResource;
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

/// The bound an object needs to be cached by an informer, whatever its
/// dynamic type: a typed [`Kind`], or the [`MetadataObject`] of a resource
/// known only at run time.
///
/// Code over informers of any object, typed or metadata-only:
///
/// ```
/// use k8s_openapi::api::core::v1::ConfigMap;
/// use kube::Resource;
/// use kube::api::ObjectMeta;
/// use orchestra_ctrl::informer::{Informable, Informer, MetadataObject};
///
/// /// The sorted names of what `informer` holds.
/// fn names<K: Informable>(informer: &Informer<K>) -> Vec<String> {
///     let mut names: Vec<String> = informer.list().iter().filter_map(|o| o.meta().name.clone()).collect();
///     names.sort();
///     names
/// }
///
/// let typed = Informer::<ConfigMap>::new();
/// for name in ["b", "a"] {
///     let meta = ObjectMeta { name: Some(name.into()), namespace: Some("default".into()), ..Default::default() };
///     typed.apply(ConfigMap { metadata: meta, ..Default::default() });
/// }
/// assert_eq!(names(&typed), ["a", "b"]);
/// let untyped = Informer::<MetadataObject>::named("Widget");
/// assert!(names(&untyped).is_empty());
/// ```
pub trait Informable: Resource + Clone + DeserializeOwned + fmt::Debug + Send + Sync + 'static {}
impl<K> Informable for K where K: Resource + Clone + DeserializeOwned + fmt::Debug + Send + Sync + 'static {}

/// The bound a kind needs to be informed on: an [`Informable`] type whose
/// resource is known at compile time.
///
/// A helper for any kind, namespaced or cluster-scoped, run here against an
/// in-process API server:
///
/// ```
/// use k8s_openapi::api::core::v1::{Namespace, Pod};
/// use orchestra::testing::TestCluster;
/// use orchestra_ctrl::informer::SharedInformerFactory;
/// use orchestra_ctrl::informer::{Kind, ScopeAll};
///
/// /// How many objects of `K` the cluster holds, once the informer has synced.
/// async fn count<K: Kind>(factory: &SharedInformerFactory) -> usize
/// where
///     K::Scope: ScopeAll,
/// {
///     let informer = factory.informer::<K>();
///     informer.wait_synced().await;
///     informer.len()
/// }
///
/// # tokio::runtime::Runtime::new().unwrap().block_on(async {
/// let cluster = TestCluster::start().await;
/// let factory = SharedInformerFactory::new(cluster.client());
/// assert!(count::<Namespace>(&factory).await > 0, "the system namespaces");
/// assert_eq!(count::<Pod>(&factory).await, 0);
/// # });
/// ```
pub trait Kind: Informable + Resource<DynamicType = ()> {}
impl<K> Kind for K where K: Informable + Resource<DynamicType = ()> {}

/// What a metadata informer caches: the metadata of one object of any
/// resource (`PartialObjectMetadata`).
pub type MetadataObject = PartialObjectMeta<DynamicObject>;

struct State<K> {
    objects: HashMap<ObjectKey, Arc<K>>,
    indexes: HashMap<String, HashMap<String, HashSet<ObjectKey>>>,
    indexers: Vec<(String, IndexFn<K>)>,
    resource_version: String,
}

impl<K: Informable> State<K> {
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
    /// The kind (or resource) named in logs.
    kind: String,
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
        Self::named(K::kind(&()))
    }
}

impl<K: Informable> Informer<K> {
    /// Like [`Informer::new`], for objects whose kind is known at run time
    /// only ([`MetadataObject`]): `kind` names the informer in logs.
    pub fn named(kind: impl Into<String>) -> Arc<Self> {
        let by_namespace: IndexFn<K> = Arc::new(|o: &K| vec![o.meta().namespace.clone().unwrap_or_default()]);
        let by_owner: IndexFn<K> =
            Arc::new(|o: &K| o.meta().owner_references.iter().flatten().map(|r| r.uid.clone()).collect());
        let by_label: IndexFn<K> =
            Arc::new(|o: &K| o.meta().labels.iter().flatten().map(|(k, v)| format!("{k}={v}")).collect());
        Arc::new(Self {
            kind: kind.into(),
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

    /// Waits until the first list has been applied, then subscribes: returns
    /// every cached object at that moment and the receiver of every change
    /// made after it, in order. A consumer that has handled the objects
    /// knows it has seen the whole first list (what [`Informer::subscribe`]
    /// cannot tell: its cached objects and its changes come on one channel).
    pub async fn subscribe_synced(&self) -> (Vec<Arc<K>>, mpsc::UnboundedReceiver<Event<K>>) {
        self.wait_synced().await;
        let (tx, rx) = mpsc::unbounded_channel();
        let mut subscribers = self.subscribers.lock();
        let objects = self.list();
        subscribers.push(tx);
        (objects, rx)
    }

    /// Ends every subscription: each receiver returns `None` once it has
    /// handed out the events already sent.
    fn close_subscriptions(&self) {
        self.subscribers.lock().clear();
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
    /// An `Api<`[`MetadataObject`]`>` lists and watches metadata only.
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
                    tracing::warn!(kind = %self.kind, error = %e, "list failed");
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
                        tracing::warn!(kind = %self.kind, error = %e, "watch failed");
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
                            tracing::warn!(kind = %self.kind, status = ?s, "watch error");
                            break;
                        }
                        Err(e) => {
                            tracing::debug!(kind = %self.kind, error = %e, "watch stream error");
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

async fn list_all<K: Informable>(api: &Api<K>, selectors: &Selectors) -> Result<(Vec<K>, String), kube::Error> {
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

/// The identity of a metadata informer: group, version and plural.
type ResourceKey = (String, String, String);

fn resource_key(resource: &ApiResource) -> ResourceKey {
    (resource.group.clone(), resource.version.clone(), resource.plural.clone())
}

/// A metadata informer and the task of its reflector.
struct MetadataInformer {
    informer: Arc<Informer<MetadataObject>>,
    task: tokio::task::JoinHandle<()>,
}

/// One informer per kind, and one metadata informer per resource, for a
/// whole process.
///
/// ```no_run
/// # async fn example(client: kube::Client) {
/// use k8s_openapi::api::core::v1::{ConfigMap, Pod};
/// use kube::discovery::ApiResource;
/// use orchestra_ctrl::informer::SharedInformerFactory;
///
/// let factory = SharedInformerFactory::new(client);
/// // Typed: every pod, cached once for every user of `factory`.
/// let pods = factory.informer::<Pod>();
/// pods.wait_synced().await;
/// // Metadata only, for a resource found at run time.
/// let config_maps = ApiResource::erase::<ConfigMap>(&());
/// let metadata = factory.metadata_informer(&config_maps);
/// let (listed, _changes) = metadata.subscribe_synced().await;
/// println!("{} pods, {} config maps", pods.len(), listed.len());
/// // Discovery no longer lists the resource: stop its informer.
/// factory.stop_metadata_informer(&config_maps);
/// # }
/// ```
#[derive(Clone)]
pub struct SharedInformerFactory {
    /// What controllers built on the factory write with.
    client: Client,
    /// What the informers list and watch with.
    informer_client: Client,
    informers: Arc<Mutex<HashMap<TypeId, Arc<dyn Any + Send + Sync>>>>,
    metadata: Arc<Mutex<HashMap<ResourceKey, MetadataInformer>>>,
    tasks: Arc<Mutex<Vec<tokio::task::JoinHandle<()>>>>,
}

impl SharedInformerFactory {
    /// A factory whose informers list and watch through `client`.
    pub fn new(client: Client) -> Self {
        Self {
            informer_client: client.clone(),
            client,
            informers: Arc::default(),
            metadata: Arc::default(),
            tasks: Arc::default(),
        }
    }

    /// The client controllers built on this factory write with.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The same informers, with `client` for what the controllers write
    /// (e.g. a [`Fence::client`](crate::leader::Fence::client), or a
    /// controller's own identity). Informers, started now or later, keep
    /// listing and watching through the factory's first client, as
    /// kube-controller-manager's shared informers read with its own
    /// identity while each controller writes with its service account.
    pub fn with_client(&self, client: Client) -> Self {
        Self {
            client,
            informer_client: self.informer_client.clone(),
            informers: self.informers.clone(),
            metadata: self.metadata.clone(),
            tasks: self.tasks.clone(),
        }
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
        let api = K::Scope::api_all::<K>(self.informer_client.clone());
        self.tasks.lock().push(tokio::spawn(informer.clone().run(api)));
        informer
    }

    /// The metadata informer of `resource` across all namespaces (only the
    /// `PartialObjectMetadata` of its objects is listed, watched and
    /// cached), started on first request; objects pass
    /// [`strip_managed_fields`].
    pub fn metadata_informer(&self, resource: &ApiResource) -> Arc<Informer<MetadataObject>> {
        self.metadata_informer_with(resource, Some(Arc::new(strip_managed_fields::<MetadataObject>)))
    }

    /// Like [`metadata_informer`](Self::metadata_informer), with `transform`
    /// in place of the default if this call starts the informer (set before
    /// its first list, so that no object is cached untransformed). A running
    /// informer keeps its transform: every user of a shared informer sees
    /// the same objects.
    pub fn metadata_informer_with(
        &self,
        resource: &ApiResource,
        transform: Option<TransformFn<MetadataObject>>,
    ) -> Arc<Informer<MetadataObject>> {
        let mut informers = self.metadata.lock();
        let key = resource_key(resource);
        if let Some(running) = informers.get(&key) {
            return running.informer.clone();
        }
        let informer = Informer::named(format!("{} ({})", resource.kind, resource.api_version));
        informer.set_transform(transform);
        let api: Api<MetadataObject> = Api::all_with(self.informer_client.clone(), resource);
        let task = tokio::spawn(informer.clone().run(api));
        informers.insert(key, MetadataInformer { informer: informer.clone(), task });
        informer
    }

    /// Stops the metadata informer of `resource` (discovery no longer lists
    /// it): its reflector ends and so does every subscription to it; a later
    /// request starts a new one. Whether one was running.
    pub fn stop_metadata_informer(&self, resource: &ApiResource) -> bool {
        let Some(stopped) = self.metadata.lock().remove(&resource_key(resource)) else {
            return false;
        };
        stopped.task.abort();
        stopped.informer.close_subscriptions();
        true
    }

    /// Stops every reflector.
    pub fn shutdown(&self) {
        for task in self.tasks.lock().drain(..) {
            task.abort();
        }
        for (_, stopped) in self.metadata.lock().drain() {
            stopped.task.abort();
            stopped.informer.close_subscriptions();
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
///
/// ```
/// use k8s_openapi::api::core::v1::{Node, Pod};
/// use kube::Api;
/// use kube::api::ListParams;
/// use orchestra::testing::TestCluster;
/// use orchestra_ctrl::informer::{Kind, ScopeAll};
///
/// /// The all-namespaces `Api` of `K`, whatever its scope.
/// fn everywhere<K: Kind>(client: kube::Client) -> Api<K>
/// where
///     K::Scope: ScopeAll,
/// {
///     K::Scope::api_all(client)
/// }
///
/// # tokio::runtime::Runtime::new().unwrap().block_on(async {
/// let cluster = TestCluster::start().await;
/// let nodes: Api<Node> = everywhere(cluster.client());
/// let pods: Api<Pod> = everywhere(cluster.client());
/// assert!(nodes.list(&ListParams::default()).await.unwrap().items.is_empty());
/// assert!(pods.list(&ListParams::default()).await.unwrap().items.is_empty());
/// # });
/// ```
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

    /// An API server on a MemStore, and a client to it.
    async fn server() -> (orchestra_core::server::ApiServer, Client) {
        let server = orchestra_core::server::ApiServer::builder(Arc::new(orchestra_store::MemStore::new()))
            .build()
            .await
            .unwrap();
        let client = orchestra_core::client::in_process(&server, "default");
        (server, client)
    }

    #[tokio::test]
    async fn selected_informer_sees_only_matching_objects() {
        use kube::api::PostParams;
        let (_server, client) = server().await;
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

    fn metadata(name: &str, rv: &str, owner: &str) -> MetadataObject {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ManagedFieldsEntry, OwnerReference};
        PartialObjectMeta {
            types: None,
            metadata: ObjectMeta {
                namespace: Some("a".into()),
                name: Some(name.into()),
                resource_version: Some(rv.into()),
                labels: Some([("app".to_owned(), "x".to_owned())].into()),
                owner_references: Some(vec![OwnerReference { uid: owner.into(), ..Default::default() }]),
                managed_fields: Some(vec![ManagedFieldsEntry {
                    manager: Some("kubectl".into()),
                    ..Default::default()
                }]),
                ..Default::default()
            },
            _phantom: std::marker::PhantomData,
        }
    }

    /// One line per event: `add a`, `update a` (with the version replaced),
    /// `delete a`.
    fn describe(event: Event<MetadataObject>) -> String {
        match event {
            Event::Apply { old: None, new } => format!("add {}", name_of(new.as_ref())),
            Event::Apply { old: Some(old), new } => {
                format!("update {} from {}", name_of(new.as_ref()), old.metadata.resource_version.clone().unwrap())
            }
            Event::Delete(old) => format!("delete {}", name_of(old.as_ref())),
        }
    }

    #[test]
    fn metadata_informer_follows_applies_deletes_and_relists() {
        enum Op {
            Apply(MetadataObject),
            Delete(MetadataObject),
            Replace(Vec<MetadataObject>, &'static str),
        }
        /// The cached names, the resourceVersion and the events after a step.
        type After = (&'static [&'static str], &'static str, &'static [&'static str]);
        let table: Vec<(&str, Op, After)> = vec![
            ("created", Op::Apply(metadata("x", "1", "o1")), (&["x"], "1", &["add x"])),
            ("changed", Op::Apply(metadata("x", "2", "o2")), (&["x"], "2", &["update x from 1"])),
            ("another", Op::Apply(metadata("y", "3", "o1")), (&["x", "y"], "3", &["add y"])),
            ("deleted", Op::Delete(metadata("x", "4", "o2")), (&["y"], "4", &["delete x"])),
            (
                "relisted: unchanged skipped, new added",
                Op::Replace(vec![metadata("y", "3", "o1"), metadata("z", "5", "o1")], "6"),
                (&["y", "z"], "6", &["add z"]),
            ),
            ("relisted without y", Op::Replace(vec![metadata("z", "5", "o1")], "7"), (&["z"], "7", &["delete y"])),
            ("deleted while not cached", Op::Delete(metadata("w", "8", "o1")), (&["z"], "8", &["delete w"])),
        ];
        let informer = Informer::<MetadataObject>::named("ConfigMap (v1)");
        let mut rx = informer.subscribe();
        for (step, op, (cached, version, events)) in table {
            match op {
                Op::Apply(o) => informer.apply(o),
                Op::Delete(o) => informer.delete(o),
                Op::Replace(items, rv) => informer.replace(items, rv.into()),
            }
            let mut names: Vec<_> = informer.list().iter().map(|o| name_of(o.as_ref())).collect();
            names.sort();
            assert_eq!(names, cached, "{step}: cache");
            assert_eq!(informer.resource_version(), version, "{step}: resourceVersion");
            let seen: Vec<String> = std::iter::from_fn(|| rx.try_recv().ok()).map(describe).collect();
            assert_eq!(seen, events, "{step}: events");
            for o in informer.list() {
                assert_eq!(o.metadata.managed_fields, None, "{step}: managedFields are dropped");
                assert!(o.metadata.labels.is_some(), "{step}: labels are kept");
            }
        }
        // The owner index follows the changes: x moved from o1 to o2, then went.
        assert_eq!(informer.by_owner("o1").len(), 1);
        assert!(informer.by_owner("o2").is_empty());
        assert!(informer.has_synced());
    }

    #[tokio::test]
    async fn subscribe_synced_returns_the_first_list_then_changes() {
        let informer = Informer::<MetadataObject>::named("ConfigMap (v1)");
        informer.apply(metadata("early", "1", "o"));
        let subscribed = {
            let informer = informer.clone();
            tokio::spawn(async move { informer.subscribe_synced().await })
        };
        tokio::task::yield_now().await;
        assert!(!subscribed.is_finished(), "nothing is listed yet");
        informer.replace(vec![metadata("a", "2", "o"), metadata("b", "3", "o")], "3".into());
        let (listed, mut changes) = subscribed.await.unwrap();
        let mut names: Vec<_> = listed.iter().map(|o| name_of(o.as_ref())).collect();
        names.sort();
        assert_eq!(names, ["a", "b"]);
        assert!(changes.try_recv().is_err(), "the listed objects are not sent again");
        informer.delete(metadata("a", "4", "o"));
        assert_eq!(changes.try_recv().map(describe).ok().as_deref(), Some("delete a"));
    }

    #[tokio::test]
    async fn metadata_informers_are_shared_per_resource_and_stopped_one_by_one() {
        use k8s_openapi::api::core::v1::{ConfigMap, Secret};
        use kube::api::PostParams;
        let (_server, client) = server().await;
        let labelled = |name: &str| ObjectMeta {
            name: Some(name.into()),
            labels: Some([("app".to_owned(), "x".to_owned())].into()),
            ..Default::default()
        };
        let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
        let secrets: Api<Secret> = Api::namespaced(client.clone(), "default");
        config_maps
            .create(&PostParams::default(), &ConfigMap { metadata: labelled("cm"), ..Default::default() })
            .await
            .unwrap();
        secrets
            .create(&PostParams::default(), &Secret { metadata: labelled("s"), ..Default::default() })
            .await
            .unwrap();

        let factory = SharedInformerFactory::new(client);
        let (cm_resource, secret_resource) = (ApiResource::erase::<ConfigMap>(&()), ApiResource::erase::<Secret>(&()));
        let cm = factory.metadata_informer(&cm_resource);
        assert!(Arc::ptr_eq(&cm, &factory.metadata_informer(&cm_resource)), "one informer per resource");
        let unlabel: TransformFn<MetadataObject> = Arc::new(|o: &mut MetadataObject| o.metadata.labels = None);
        let secret = factory.metadata_informer_with(&secret_resource, Some(unlabel));

        // (informer, the object it lists, whether its labels are cached)
        let (cm_listed, mut cm_changes) = cm.subscribe_synced().await;
        let (secret_listed, mut secret_changes) = secret.subscribe_synced().await;
        for (what, listed, name, labelled) in
            [("configmaps", &cm_listed, "cm", true), ("secrets", &secret_listed, "s", false)]
        {
            let o =
                listed.iter().find(|o| name_of(o.as_ref()) == name).unwrap_or_else(|| panic!("{what}: {name} listed"));
            assert!(o.metadata.uid.is_some(), "{what}: metadata is listed");
            assert_eq!(o.metadata.labels.is_some(), labelled, "{what}: transform");
        }

        // Stopping the secrets' informer ends its subscription only.
        assert!(factory.stop_metadata_informer(&secret_resource));
        assert!(!factory.stop_metadata_informer(&secret_resource), "already stopped");
        assert!(tokio::time::timeout(Duration::from_secs(5), secret_changes.recv()).await.unwrap().is_none());
        config_maps
            .create(&PostParams::default(), &ConfigMap { metadata: labelled("cm2"), ..Default::default() })
            .await
            .unwrap();
        let event = tokio::time::timeout(Duration::from_secs(5), cm_changes.recv()).await.unwrap().unwrap();
        assert_eq!(describe(event), "add cm2");

        // A later request starts a new informer.
        let again = factory.metadata_informer(&secret_resource);
        assert!(!Arc::ptr_eq(&again, &secret));
        again.wait_synced().await;
        assert!(again.get(&ObjectKey::new("default", "s")).is_some_and(|o| o.metadata.labels.is_some()));
        factory.shutdown();
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
