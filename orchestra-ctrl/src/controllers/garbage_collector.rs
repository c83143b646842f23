//! The garbage collector: deletes objects whose owners are all gone
//! (background propagation), deletes the dependents of owners deleted with
//! `propagationPolicy=Foreground` before removing their `foregroundDeletion`
//! finalizer (only dependents with `blockOwnerDeletion` hold the owner), and
//! for `Orphan` removes the owner's references from its dependents before
//! removing the `orphan` finalizer.
//!
//! It keeps the ownerReferences graph from the shared factory's metadata
//! informers of every deletable resource (found by discovery, refreshed for
//! new kinds; the informer of a resource discovery no longer lists is
//! stopped), and looks again only at what an event can have changed: the
//! object itself, its owners and its dependents. Before deleting a dependent
//! whose owners it has not seen, it asks the API server for them (a
//! dependent's informer can deliver it before its owner's informer delivers
//! the owner). A full pass over the graph each `interval` catches anything
//! an event missed.

use std::collections::{HashMap, HashSet, VecDeque};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use kube::api::{DeleteParams, DynamicObject, Patch, PatchParams};
use kube::{Api, Client};
use tokio::sync::mpsc;

use super::discovery::{Deletable, deletable};
use crate::Error;
use crate::informer::{Event, MetadataObject, SharedInformerFactory, TransformFn};

/// Name of the controller.
pub const NAME: &str = "garbage-collector";
/// Finalizer of owners deleted in the foreground.
pub const FOREGROUND: &str = "foregroundDeletion";
/// Finalizer of owners whose dependents are orphaned.
pub const ORPHAN: &str = "orphan";

/// One object of the graph.
#[derive(Clone, Debug)]
pub struct Node {
    /// The object.
    pub object: DynamicObject,
    /// Its resource.
    pub resource: Deletable,
}

impl Node {
    fn uid(&self) -> String {
        self.object.metadata.uid.clone().unwrap_or_default()
    }
    fn api(&self, client: &Client) -> Api<DynamicObject> {
        api_in(client, &self.resource, self.object.metadata.namespace.as_deref())
    }
    fn name(&self) -> String {
        self.object.metadata.name.clone().unwrap_or_default()
    }
    fn has_finalizer(&self, f: &str) -> bool {
        self.object.metadata.finalizers.iter().flatten().any(|x| x == f)
    }
    fn deleting(&self) -> bool {
        self.object.metadata.deletion_timestamp.is_some()
    }
}

/// The API of `resource`'s objects in `namespace` (all of them for a
/// cluster-scoped resource, or with no namespace).
fn api_in(client: &Client, resource: &Deletable, namespace: Option<&str>) -> Api<DynamicObject> {
    match namespace {
        Some(ns) if resource.namespaced => Api::namespaced_with(client.clone(), ns, &resource.resource),
        _ => Api::all_with(client.clone(), &resource.resource),
    }
}

/// What one pass decided (for tests and logs).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Plan {
    /// Dependents to delete in the background (all owners gone).
    pub delete_background: Vec<String>,
    /// Dependents to delete in the foreground (owner deleted in foreground).
    pub delete_foreground: Vec<String>,
    /// Dependents to release from an orphaning owner: (dependent, owner uid).
    pub orphan: Vec<(String, String)>,
    /// Owners whose finalizer can go: (owner uid, finalizer).
    pub finalize: Vec<(String, String)>,
}

/// The ownerReferences graph: objects by UID and, for every UID that owns
/// something, its dependents.
#[derive(Debug, Default)]
pub struct Graph {
    nodes: HashMap<String, Node>,
    dependents: HashMap<String, HashSet<String>>,
}

impl Graph {
    /// A graph of `nodes`.
    pub fn of(nodes: impl IntoIterator<Item = Node>) -> Graph {
        let mut graph = Graph::default();
        for node in nodes {
            graph.upsert(node);
        }
        graph
    }

    /// Adds or replaces an object.
    pub fn upsert(&mut self, node: Node) {
        let uid = node.uid();
        self.unlink(&uid);
        for r in node.object.metadata.owner_references.iter().flatten() {
            self.dependents.entry(r.uid.clone()).or_default().insert(uid.clone());
        }
        self.nodes.insert(uid, node);
    }

    /// Removes an object (its dependents stay, now without that owner).
    pub fn remove(&mut self, uid: &str) -> Option<Node> {
        self.unlink(uid);
        self.nodes.remove(uid)
    }

    fn unlink(&mut self, uid: &str) {
        let Some(old) = self.nodes.get(uid) else { return };
        for r in old.object.metadata.owner_references.iter().flatten() {
            if let Some(deps) = self.dependents.get_mut(&r.uid) {
                deps.remove(uid);
                if deps.is_empty() {
                    self.dependents.remove(&r.uid);
                }
            }
        }
    }

    /// The object with `uid`.
    pub fn get(&self, uid: &str) -> Option<&Node> {
        self.nodes.get(uid)
    }

    /// Number of objects.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether the graph is empty.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// The UIDs an event on `node` concerns: itself, its owners and its
    /// dependents.
    pub fn related(&self, node: &Node) -> Vec<String> {
        let uid = node.uid();
        let mut out = vec![uid.clone()];
        out.extend(node.object.metadata.owner_references.iter().flatten().map(|r| r.uid.clone()));
        out.extend(self.dependents.get(&uid).into_iter().flatten().cloned());
        out
    }

    /// What `uid` needs, as a dependent (all its owners gone) and as an
    /// owner being deleted in the foreground or orphaning its dependents.
    pub fn decide(&self, uid: &str, plan: &mut Plan) {
        let Some(node) = self.nodes.get(uid) else { return };
        let refs = node.object.metadata.owner_references.as_deref().unwrap_or_default();
        if !refs.is_empty() && !node.deleting() && refs.iter().all(|r| !self.nodes.contains_key(&r.uid)) {
            plan.delete_background.push(uid.to_owned());
        }
        if !node.deleting() {
            return;
        }
        let deps: Vec<&Node> =
            self.dependents.get(uid).into_iter().flatten().filter_map(|d| self.nodes.get(d)).collect();
        if node.has_finalizer(ORPHAN) {
            plan.orphan.extend(deps.iter().map(|d| (d.uid(), uid.to_owned())));
            if deps.is_empty() {
                plan.finalize.push((uid.to_owned(), ORPHAN.into()));
            }
        } else if node.has_finalizer(FOREGROUND) {
            let blocks = |d: &&Node| {
                d.object
                    .metadata
                    .owner_references
                    .iter()
                    .flatten()
                    .any(|r| r.uid == uid && r.block_owner_deletion == Some(true))
            };
            plan.delete_foreground.extend(deps.iter().filter(|d| !d.deleting()).map(|d| d.uid()));
            if !deps.iter().any(blocks) {
                plan.finalize.push((uid.to_owned(), FOREGROUND.into()));
            }
        }
    }

    /// What every object needs.
    pub fn plan(&self) -> Plan {
        let mut plan = Plan::default();
        for uid in self.nodes.keys() {
            self.decide(uid, &mut plan);
        }
        plan.normalize();
        plan
    }
}

impl Plan {
    /// Sorted, without repeats; a dependent deleted in the foreground is not
    /// also deleted in the background.
    fn normalize(&mut self) {
        for list in [&mut self.delete_background, &mut self.delete_foreground] {
            list.sort();
            list.dedup();
        }
        self.orphan.sort();
        self.orphan.dedup();
        self.finalize.sort();
        self.finalize.dedup();
        let foreground = &self.delete_foreground;
        self.delete_background.retain(|u| !foreground.contains(u));
    }

    /// Whether there is nothing to do.
    pub fn is_empty(&self) -> bool {
        self.delete_background.is_empty()
            && self.delete_foreground.is_empty()
            && self.orphan.is_empty()
            && self.finalize.is_empty()
    }
}

/// Decides a pass over `nodes` (keyed by UID).
pub fn plan(nodes: &HashMap<String, Node>) -> Plan {
    Graph::of(nodes.values().cloned()).plan()
}

/// A write whose object is gone (404) or was replaced (409 on a UID
/// precondition) needs nothing more.
fn ok_if_gone<T>(r: Result<T, kube::Error>) -> Result<(), Error> {
    match r {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// The resources by group and kind, to look owners up.
pub type Kinds = HashMap<(String, String), Deletable>;

/// The kinds of `resources`.
pub fn kinds(resources: &[Deletable]) -> Kinds {
    resources.iter().map(|r| ((r.resource.group.clone(), r.resource.kind.clone()), r.clone())).collect()
}

/// Whether every owner of `node` is really gone, asked of the API server
/// since the graph may not have seen an owner yet: `Some(true)` gone,
/// `Some(false)` one exists, `None` cannot tell yet (an owner of a kind
/// discovery has not found, e.g. a custom resource just defined, or a
/// failed lookup) — upstream's GC likewise retries rather than deletes.
async fn owners_gone(client: &Client, kinds: &Kinds, node: &Node) -> Option<bool> {
    for r in node.object.metadata.owner_references.iter().flatten() {
        let group = r.api_version.rsplit_once('/').map(|(g, _)| g).unwrap_or("");
        let resource = kinds.get(&(group.to_owned(), r.kind.clone()))?;
        let api = api_in(client, resource, node.object.metadata.namespace.as_deref());
        match api.get_metadata_opt(&r.name).await {
            Ok(Some(owner)) if owner.metadata.uid.as_deref() == Some(r.uid.as_str()) => return Some(false),
            Ok(_) => {}
            Err(_) => return None,
        }
    }
    Some(true)
}

/// Whether the API server holds an object owned by `node` (with
/// `blocking`, one whose reference blocks the owner's deletion), which the
/// graph has none of: `Some(true)` one exists, `Some(false)` none, `None` a
/// list failed. The graph learns of each resource's objects from its own
/// informer, so under load an owner's deletion can arrive before its
/// dependents do. Removing the `orphan` finalizer then would leave them
/// owned by a deleted object, collected instead of released; removing
/// `foregroundDeletion` would delete the owner before a dependent created
/// a moment ago (a ReplicaSet controller replacing a pod the cascade
/// deleted, from a cache that has not seen the ReplicaSet's deletion yet).
/// A namespaced owner's dependents are in its namespace; a cluster-scoped
/// owner's anywhere.
async fn dependents_listed(client: &Client, kinds: &Kinds, node: &Node, blocking: bool) -> Option<bool> {
    let uid = node.uid();
    let namespace = node.object.metadata.namespace.as_deref().filter(|_| node.resource.namespaced);
    for resource in kinds.values() {
        if namespace.is_some() && !resource.namespaced {
            continue;
        }
        let api = api_in(client, resource, namespace);
        let listed = api.list_metadata(&kube::api::ListParams::default()).await.ok()?;
        let owned = |r: &k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference| {
            r.uid == uid && (!blocking || r.block_owner_deletion == Some(true))
        };
        if listed.items.iter().any(|o| o.metadata.owner_references.iter().flatten().any(owned)) {
            return Some(true);
        }
    }
    Some(false)
}

/// Carries out `plan` (decided on `graph`); returns the UIDs to try again
/// (a write or an owner lookup that failed), having done all the rest.
pub async fn apply(client: &Client, graph: &Graph, kinds: &Kinds, plan: &Plan) -> Vec<String> {
    let mut retry = Vec::new();
    let mut outcome = |uid: &str, r: Result<(), Error>| {
        if let Err(e) = r {
            tracing::debug!(%uid, error = %e, "garbage collection step failed");
            retry.push(uid.to_owned());
        }
    };
    for uid in &plan.delete_background {
        let Some(n) = graph.get(uid) else { continue };
        match owners_gone(client, kinds, n).await {
            Some(true) => {}
            Some(false) => continue,
            None => {
                outcome(uid, Err(Error::Other(format!("cannot check the owners of {}", n.name()))));
                continue;
            }
        }
        let mut dp = DeleteParams::background();
        dp.preconditions = Some(kube::api::Preconditions { uid: Some(uid.clone()), resource_version: None });
        outcome(uid, ok_if_gone(n.api(client).delete(&n.name(), &dp).await));
    }
    for uid in &plan.delete_foreground {
        let Some(n) = graph.get(uid) else { continue };
        outcome(uid, ok_if_gone(n.api(client).delete(&n.name(), &DeleteParams::foreground()).await));
    }
    for (dep, owner) in &plan.orphan {
        let Some(n) = graph.get(dep) else { continue };
        let refs: Vec<_> =
            n.object.metadata.owner_references.iter().flatten().filter(|r| &r.uid != owner).cloned().collect();
        let patch = serde_json::json!({"metadata": {"ownerReferences": refs, "uid": dep}});
        outcome(
            dep,
            ok_if_absent(n.api(client).patch(&n.name(), &PatchParams::default(), &Patch::Merge(&patch)).await),
        );
    }
    for (uid, finalizer) in &plan.finalize {
        let Some(n) = graph.get(uid) else { continue };
        // Dependents the graph has not seen yet are released (orphan) or
        // deleted (foreground) first: the retry decides again on the graph,
        // which will have them.
        if finalizer == ORPHAN || finalizer == FOREGROUND {
            match dependents_listed(client, kinds, n, finalizer == FOREGROUND).await {
                Some(false) => {}
                Some(true) => {
                    outcome(uid, Err(Error::Other(format!("{} has dependents the graph has not seen yet", n.name()))));
                    continue;
                }
                None => {
                    outcome(uid, Err(Error::Other(format!("cannot list the dependents of {}", n.name()))));
                    continue;
                }
            }
        }
        let finalizers: Vec<String> =
            n.object.metadata.finalizers.iter().flatten().filter(|f| *f != finalizer).cloned().collect();
        let patch = serde_json::json!({"metadata": {"finalizers": finalizers, "resourceVersion": n.object.metadata.resource_version}});
        outcome(
            uid,
            ok_if_absent(n.api(client).patch(&n.name(), &PatchParams::default(), &Patch::Merge(&patch)).await),
        );
    }
    retry
}

/// A patch whose object is gone needs nothing more; a conflict (the object
/// changed since the graph saw it) is retried on the newer version.
fn ok_if_absent<T>(r: Result<T, kube::Error>) -> Result<(), Error> {
    match r {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Resources the collector does not watch: events own nothing and nothing
/// owns them in a way that matters (upstream ignores them too).
fn ignored(r: &Deletable) -> bool {
    r.resource.plural == "events" && (r.resource.group.is_empty() || r.resource.group == "events.k8s.io")
}

/// The identity of a resource among the watched ones.
fn resource_key(r: &Deletable) -> String {
    format!("{}/{}/{}", r.resource.group, r.resource.version, r.resource.plural)
}

/// What the collector's informers cache of an object: the graph needs
/// identity, owners, finalizers and deletion state; what else an object's
/// metadata carries would be most of the graph's memory.
fn trim(object: &mut MetadataObject) {
    object.types = None;
    object.metadata.managed_fields = None;
    object.metadata.annotations = None;
    object.metadata.labels = None;
}

/// What the collector learns of one resource's objects.
#[derive(Debug)]
enum Update {
    /// An object listed, created or changed.
    Apply(Node),
    /// An object deleted.
    Delete(Node),
    /// Every object of the resource's first list has been sent.
    Synced,
}

/// The graph's node for `object` of `resource`.
fn node(resource: &Deletable, object: &MetadataObject) -> Node {
    let mut node = DynamicObject::new("", &resource.resource);
    node.metadata = object.metadata.clone();
    Node { object: node, resource: resource.clone() }
}

/// The update an informer's event on `resource` makes.
fn update(resource: &Deletable, event: Event<MetadataObject>) -> Update {
    match event {
        Event::Apply { new, .. } => Update::Apply(node(resource, &new)),
        Event::Delete(old) => Update::Delete(node(resource, &old)),
    }
}

/// A resource the collector follows: the task forwarding its informer's
/// events, and which of the resource's successive followers it is (events
/// still queued from a follower stopped since are dropped).
struct Followed {
    resource: Deletable,
    generation: u64,
    task: tokio::task::JoinHandle<()>,
}

/// A resource, and which of its followers an update comes from.
type Source = (String, u64);

/// Forwards the events of `resource`'s metadata informer (started on
/// `factory` if it is not running) into `tx`: what it has listed, then
/// [`Update::Synced`], then every change.
fn follow(
    factory: &SharedInformerFactory,
    resource: Deletable,
    generation: u64,
    tx: mpsc::Sender<(Source, Update)>,
) -> Followed {
    let trim: TransformFn<MetadataObject> = Arc::new(trim);
    let informer = factory.metadata_informer_with(&resource.resource, Some(trim));
    let source = (resource_key(&resource), generation);
    let followed = resource.clone();
    let task = tokio::spawn(async move {
        let (listed, mut changes) = informer.subscribe_synced().await;
        drop(informer);
        let listed = listed.iter().map(|object| Update::Apply(node(&resource, object)));
        for first in listed.chain([Update::Synced]) {
            if tx.send((source.clone(), first)).await.is_err() {
                return;
            }
        }
        while let Some(event) = changes.recv().await {
            if tx.send((source.clone(), update(&resource, event))).await.is_err() {
                return;
            }
        }
    });
    Followed { resource: followed, generation, task }
}

/// The collector's state between events.
#[derive(Default)]
struct Collector {
    graph: Graph,
    /// UIDs to look at again.
    pending: HashSet<String>,
    /// Resources listed at least once.
    synced: HashSet<String>,
}

impl Collector {
    fn touch(&mut self, uids: Vec<String>) {
        self.pending.extend(uids);
    }

    /// Whether every resource in `watched` (and at least one) has been
    /// listed: only then does an owner missing from the graph mean anything
    /// (upstream's GC likewise keeps its workers paused until every monitor
    /// has synced).
    fn synced<'a>(&self, watched: impl IntoIterator<Item = &'a String>) -> bool {
        let mut any = false;
        for key in watched {
            if !self.synced.contains(key) {
                return false;
            }
            any = true;
        }
        any
    }

    /// What the pending UIDs need, once every resource in `watched` has been
    /// listed; until then they stay pending and nothing is decided.
    fn next_plan<'a>(&mut self, watched: impl IntoIterator<Item = &'a String>) -> Option<Plan> {
        if self.pending.is_empty() || !self.synced(watched) {
            return None;
        }
        let mut plan = Plan::default();
        for uid in self.pending.drain() {
            self.graph.decide(&uid, &mut plan);
        }
        plan.normalize();
        Some(plan)
    }

    fn handle(&mut self, resource: &str, update: Update) {
        match update {
            Update::Apply(node) => {
                if let Some(old) = self.graph.get(&node.uid()) {
                    let related = self.graph.related(old);
                    self.touch(related);
                }
                let related = self.graph.related(&node);
                self.graph.upsert(node);
                self.touch(related);
            }
            Update::Delete(node) => {
                let related = self.graph.related(&node);
                self.graph.remove(&node.uid());
                self.touch(related);
            }
            Update::Synced => {
                self.synced.insert(resource.to_owned());
            }
        }
    }

    /// Forgets `resource` (discovery no longer lists it; its informer is
    /// stopped): its objects leave the graph, and what they concern is
    /// looked at again. Found again later, it is listed afresh.
    fn forget(&mut self, resource: &str) {
        self.synced.remove(resource);
        let gone: Vec<String> = self
            .graph
            .nodes
            .iter()
            .filter(|(_, n)| resource_key(&n.resource) == resource)
            .map(|(uid, _)| uid.clone())
            .collect();
        for uid in gone {
            if let Some(node) = self.graph.remove(&uid) {
                let related = self.graph.related(&node);
                self.touch(related);
            }
        }
    }
}

/// Runs the garbage collector until `shutdown` with metadata informers of
/// its own over `client` (see [`run_with`]).
pub async fn run(client: Client, interval: Duration, shutdown: impl Future<Output = ()> + Send) {
    run_with(SharedInformerFactory::new(client), interval, shutdown).await
}

/// Runs the garbage collector until `shutdown`, on `factory`'s metadata
/// informers (it writes through `factory`'s client): driven by their
/// events, with a full pass each `interval` and discovery refreshed every
/// 30 s.
pub async fn run_with(factory: SharedInformerFactory, interval: Duration, shutdown: impl Future<Output = ()> + Send) {
    let client = factory.client().clone();
    let mut shutdown = std::pin::pin!(shutdown);
    let (tx, mut rx) = mpsc::channel::<(Source, Update)>(4096);
    let mut followed: HashMap<String, Followed> = HashMap::new();
    let mut generation = 0;
    let mut kinds = Kinds::new();
    let mut collector = Collector::default();
    let mut discover = tokio::time::interval(Duration::from_secs(30));
    let mut resync = tokio::time::interval(interval);
    resync.tick().await;
    let mut backlog: VecDeque<(Source, Update)> = VecDeque::new();
    let mut retry: HashSet<String> = HashSet::new();
    let mut retry_tick = tokio::time::interval(Duration::from_secs(1));
    loop {
        tokio::select! {
            _ = &mut shutdown => break,
            _ = discover.tick() => match deletable(&client).await {
                Ok(found) => {
                    let found: Vec<Deletable> = found.into_iter().filter(|r| r.watchable && !ignored(r)).collect();
                    kinds = self::kinds(&found);
                    let keys: HashSet<String> = found.iter().map(resource_key).collect();
                    let gone: Vec<String> = followed.keys().filter(|key| !keys.contains(*key)).cloned().collect();
                    for key in gone {
                        let Some(stopped) = followed.remove(&key) else { continue };
                        stopped.task.abort();
                        factory.stop_metadata_informer(&stopped.resource.resource);
                        collector.forget(&key);
                    }
                    for r in found {
                        followed.entry(resource_key(&r)).or_insert_with(|| {
                            generation += 1;
                            follow(&factory, r, generation, tx.clone())
                        });
                    }
                }
                Err(e) => tracing::warn!(error = %e, "discovery failed"),
            },
            _ = resync.tick() => {
                let all: Vec<String> = collector.graph.nodes.keys().cloned().collect();
                collector.touch(all);
            }
            // What failed is tried again a second later.
            // (with what it concerns: a step decided for an owner, such as
            // releasing its dependents, is decided again from the owner).
            _ = retry_tick.tick(), if !retry.is_empty() => {
                for uid in retry.drain().collect::<Vec<_>>() {
                    if let Some(node) = collector.graph.get(&uid) {
                        let related = collector.graph.related(node);
                        collector.touch(related);
                    }
                }
            }
            Some(event) = rx.recv() => {
                backlog.push_back(event);
                while let Ok(more) = rx.try_recv() {
                    backlog.push_back(more);
                }
            }
        }
        while let Some(((resource, from), update)) = backlog.pop_front() {
            if followed.get(&resource).is_some_and(|f| f.generation == from) {
                collector.handle(&resource, update);
            }
        }
        // Act only on a complete graph: a dependent listed before its owner's
        // resource is listed would look orphaned.
        let Some(plan) = collector.next_plan(followed.keys()) else { continue };
        if !plan.is_empty() {
            retry.extend(apply(&client, &collector.graph, &kinds, &plan).await);
        }
    }
    for f in followed.values() {
        f.task.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};
    use kube::discovery::ApiResource;

    struct Obj(DynamicObject);

    fn obj(uid: &str) -> Obj {
        let mut o = DynamicObject::new(uid, &ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&()));
        o.metadata.uid = Some(uid.into());
        o.metadata.namespace = Some("default".into());
        Obj(o)
    }

    impl Obj {
        fn owned_by(mut self, uid: &str, block: bool) -> Self {
            self.0.metadata.owner_references.get_or_insert_with(Vec::new).push(OwnerReference {
                uid: uid.into(),
                name: uid.into(),
                kind: "ConfigMap".into(),
                api_version: "v1".into(),
                block_owner_deletion: Some(block),
                controller: Some(true),
            });
            self
        }
        fn deleting(mut self, finalizer: &str) -> Self {
            self.0.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::now()));
            self.0.metadata.finalizers = Some(vec![finalizer.into()]);
            self
        }
    }

    fn graph(objects: Vec<Obj>) -> HashMap<String, Node> {
        objects
            .into_iter()
            .map(|o| {
                let node = Node {
                    resource: Deletable {
                        resource: ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&()),
                        namespaced: true,
                        watchable: true,
                    },
                    object: o.0,
                };
                (node.uid(), node)
            })
            .collect()
    }

    #[test]
    fn plans() {
        let table: Vec<(&str, Vec<Obj>, Plan)> = vec![
            ("owner alive", vec![obj("o"), obj("d").owned_by("o", true)], Plan::default()),
            (
                "owner gone",
                vec![obj("d").owned_by("o", true)],
                Plan { delete_background: vec!["d".into()], ..Default::default() },
            ),
            (
                "one owner of two left",
                vec![obj("o2"), obj("d").owned_by("o", true).owned_by("o2", false)],
                Plan::default(),
            ),
            (
                "foreground waits for blocking dependents",
                vec![obj("o").deleting(FOREGROUND), obj("d").owned_by("o", true)],
                Plan { delete_foreground: vec!["d".into()], ..Default::default() },
            ),
            (
                "foreground ends without blocking dependents",
                vec![obj("o").deleting(FOREGROUND), obj("d").owned_by("o", false)],
                Plan {
                    delete_foreground: vec!["d".into()],
                    finalize: vec![("o".into(), FOREGROUND.into())],
                    ..Default::default()
                },
            ),
            (
                "orphan releases dependents first",
                vec![obj("o").deleting(ORPHAN), obj("d").owned_by("o", true)],
                Plan { orphan: vec![("d".into(), "o".into())], ..Default::default() },
            ),
            (
                "orphan finalized once released",
                vec![obj("o").deleting(ORPHAN)],
                Plan { finalize: vec![("o".into(), ORPHAN.into())], ..Default::default() },
            ),
        ];
        for (name, objects, expected) in table {
            assert_eq!(plan(&graph(objects)), expected, "{name}");
        }
    }

    fn node(o: Obj) -> Node {
        graph(vec![o]).into_values().next().unwrap()
    }

    #[test]
    fn the_graph_follows_owner_changes_and_removals() {
        let mut g = Graph::of([node(obj("o1")), node(obj("o2")), node(obj("d").owned_by("o1", true))]);
        assert_eq!(g.related(g.get("o1").unwrap()), ["o1", "d"]);
        // Re-parented: o1 no longer lists d, o2 does.
        g.upsert(node(obj("d").owned_by("o2", true)));
        assert_eq!(g.related(g.get("o1").unwrap()), ["o1"]);
        assert_eq!(g.related(g.get("d").unwrap()), ["d", "o2"]);
        // o2 goes: deciding on what its removal concerns finds d orphaned.
        let gone = g.remove("o2").unwrap();
        let mut plan = Plan::default();
        for uid in g.related(&gone) {
            g.decide(&uid, &mut plan);
        }
        plan.normalize();
        assert_eq!(plan, Plan { delete_background: vec!["d".into()], ..Default::default() });
        // Nothing else needs anything.
        let mut rest = Plan::default();
        g.decide("o1", &mut rest);
        assert!(rest.is_empty());
        assert_eq!(g.len(), 2);
    }

    /// What the informer caches of `o`, untrimmed (labels and all).
    fn metadata(o: Obj) -> MetadataObject {
        let mut object = o.0;
        object.metadata.labels = Some([("app".to_owned(), "x".to_owned())].into());
        MetadataObject { types: None, metadata: object.metadata, _phantom: std::marker::PhantomData }
    }

    #[test]
    fn the_informer_trims_and_a_relist_drops_what_it_no_longer_lists() {
        let resource = node(obj("x")).resource;
        let key = resource_key(&resource);
        let informer = crate::informer::Informer::<MetadataObject>::named("ConfigMap");
        informer.set_transform(Some(Arc::new(trim)));
        let mut changes = informer.subscribe();
        let mut c = Collector::default();
        let mut deliver = |c: &mut Collector| {
            while let Ok(event) = changes.try_recv() {
                c.handle(&key, update(&resource, event));
            }
        };
        informer.replace(vec![metadata(obj("o")), metadata(obj("d").owned_by("o", true))], "1".into());
        deliver(&mut c);
        c.handle(&key, Update::Synced);
        assert!(c.synced.contains(&key));
        assert_eq!(c.graph.len(), 2);
        assert!(c.graph.get("d").is_some_and(|d| d.object.metadata.labels.is_none()), "labels are not kept");
        c.pending.clear();
        // Relisted without the owner (deleted while the watch was down).
        informer.replace(vec![metadata(obj("d").owned_by("o", true))], "2".into());
        deliver(&mut c);
        assert!(c.graph.get("o").is_none());
        assert!(c.pending.contains("d"), "the dependent of the vanished owner is looked at again");
        // The resource goes from discovery: its objects leave the graph.
        c.pending.clear();
        c.forget(&key);
        assert!(c.graph.is_empty() && !c.synced.contains(&key));
        assert!(c.pending.contains("d"));
    }

    fn replica_set(uid: &str) -> Node {
        let resource = ApiResource::erase::<k8s_openapi::api::apps::v1::ReplicaSet>(&());
        let mut object = DynamicObject::new(uid, &resource);
        object.metadata.uid = Some(uid.into());
        object.metadata.namespace = Some("default".into());
        Node { object, resource: Deletable { resource, namespaced: true, watchable: true } }
    }

    #[test]
    fn nothing_is_decided_until_every_watched_resource_has_listed() {
        let mut c = Collector::default();
        let config_maps = resource_key(&node(obj("x")).resource);
        let replica_sets = resource_key(&replica_set("x").resource);
        let watched = [config_maps.clone(), replica_sets.clone()];
        // The dependents' resource lists first: "o" is not in the graph yet.
        c.handle(&config_maps, Update::Apply(node(obj("d").owned_by("o", true))));
        c.handle(&config_maps, Update::Apply(node(obj("lost").owned_by("gone", true))));
        c.handle(&config_maps, Update::Synced);
        assert!(c.synced([&config_maps]));
        assert_eq!(c.next_plan(&watched), None, "the owners' resource has not listed");
        assert!(c.pending.contains("d") && c.pending.contains("lost"), "kept for later");
        // The owners' resource lists: only the dependent of a missing owner goes.
        c.handle(&replica_sets, Update::Apply(replica_set("o")));
        c.handle(&replica_sets, Update::Synced);
        let plan = c.next_plan(&watched).expect("all listed");
        assert_eq!(plan, Plan { delete_background: vec!["lost".into()], ..Default::default() });
        assert!(c.pending.is_empty());
        // A resource found later (a new custom resource) holds decisions
        // until it has listed too.
        let crd = "example.com/v1/widgets".to_string();
        c.handle(&config_maps, Update::Apply(node(obj("lost2").owned_by("gone2", true))));
        let more = [config_maps.clone(), replica_sets.clone(), crd.clone()];
        assert_eq!(c.next_plan(&more), None);
        c.handle(&crd, Update::Synced);
        assert_eq!(c.next_plan(&more).map(|p| p.delete_background), Some(vec!["lost2".to_string()]));
        // Watching nothing is never synced.
        c.touch(vec!["d".into()]);
        assert_eq!(c.next_plan(std::iter::empty::<&String>()), None);
    }
}
