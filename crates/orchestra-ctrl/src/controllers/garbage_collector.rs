//! The garbage collector: deletes objects whose owners are all gone
//! (background propagation), deletes the dependents of owners deleted with
//! `propagationPolicy=Foreground` before removing their `foregroundDeletion`
//! finalizer (only dependents with `blockOwnerDeletion` hold the owner), and
//! for `Orphan` removes the owner's references from its dependents before
//! removing the `orphan` finalizer.
//!
//! It builds the ownerReferences graph from a scan of every listable,
//! deletable resource (found by discovery) each `interval`.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::time::Duration;

use kube::api::{DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use kube::{Api, Client};

use super::discovery::{Deletable, deletable};
use crate::Error;

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
        match (&self.object.metadata.namespace, self.resource.namespaced) {
            (Some(ns), true) => Api::namespaced_with(client.clone(), ns, &self.resource.resource),
            _ => Api::all_with(client.clone(), &self.resource.resource),
        }
    }
    fn name(&self) -> String {
        self.object.metadata.name.clone().unwrap_or_default()
    }
    fn has_finalizer(&self, f: &str) -> bool {
        self.object
            .metadata
            .finalizers
            .iter()
            .flatten()
            .any(|x| x == f)
    }
    fn deleting(&self) -> bool {
        self.object.metadata.deletion_timestamp.is_some()
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

/// Decides a pass over `nodes` (keyed by UID).
pub fn plan(nodes: &HashMap<String, Node>) -> Plan {
    let mut plan = Plan::default();
    let mut dependents: HashMap<String, Vec<&Node>> = HashMap::new();
    for node in nodes.values() {
        for r in node.object.metadata.owner_references.iter().flatten() {
            dependents.entry(r.uid.clone()).or_default().push(node);
        }
    }
    for node in nodes.values() {
        let refs = node.object.metadata.owner_references.clone().unwrap_or_default();
        if !refs.is_empty() && !node.deleting() && refs.iter().all(|r| !nodes.contains_key(&r.uid)) {
            plan.delete_background.push(node.uid());
        }
    }
    for owner in nodes.values().filter(|n| n.deleting()) {
        let deps = dependents.get(&owner.uid()).cloned().unwrap_or_default();
        if owner.has_finalizer(ORPHAN) {
            for d in &deps {
                plan.orphan.push((d.uid(), owner.uid()));
            }
            if deps.is_empty() {
                plan.finalize.push((owner.uid(), ORPHAN.into()));
            }
        } else if owner.has_finalizer(FOREGROUND) {
            let blocking: Vec<&&Node> = deps
                .iter()
                .filter(|d| {
                    d.object
                        .metadata
                        .owner_references
                        .iter()
                        .flatten()
                        .any(|r| r.uid == owner.uid() && r.block_owner_deletion == Some(true))
                })
                .collect();
            for d in &deps {
                if !d.deleting() {
                    plan.delete_foreground.push(d.uid());
                }
            }
            if blocking.is_empty() {
                plan.finalize.push((owner.uid(), FOREGROUND.into()));
            }
        }
    }
    plan.delete_foreground.sort();
    plan.delete_foreground.dedup();
    plan.delete_background.retain(|u| !plan.delete_foreground.contains(u));
    plan
}

/// Lists every object of every deletable resource into a graph.
pub async fn scan(client: &Client, resources: &[Deletable]) -> Result<HashMap<String, Node>, Error> {
    let mut nodes = HashMap::new();
    for r in resources {
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &r.resource);
        let list = match api.list(&ListParams::default()).await {
            Ok(l) => l,
            Err(kube::Error::Api(_)) => continue,
            Err(e) => return Err(e.into()),
        };
        for object in list.items {
            let node = Node {
                object,
                resource: r.clone(),
            };
            nodes.insert(node.uid(), node);
        }
    }
    Ok(nodes)
}

fn ok_if_gone<T>(r: Result<T, kube::Error>) -> Result<(), Error> {
    match r {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Carries out `plan`.
pub async fn apply(client: &Client, nodes: &HashMap<String, Node>, plan: &Plan) -> Result<(), Error> {
    for uid in &plan.delete_background {
        let n = &nodes[uid];
        let mut dp = DeleteParams::background();
        dp.preconditions = Some(kube::api::Preconditions {
            uid: Some(uid.clone()),
            resource_version: None,
        });
        ok_if_gone(n.api(client).delete(&n.name(), &dp).await)?;
    }
    for uid in &plan.delete_foreground {
        let n = &nodes[uid];
        ok_if_gone(n.api(client).delete(&n.name(), &DeleteParams::foreground()).await)?;
    }
    let mut released: HashSet<String> = HashSet::new();
    for (dep, owner) in &plan.orphan {
        let n = &nodes[dep];
        if !released.insert(format!("{dep}/{owner}")) {
            continue;
        }
        let refs: Vec<_> = n
            .object
            .metadata
            .owner_references
            .iter()
            .flatten()
            .filter(|r| &r.uid != owner)
            .cloned()
            .collect();
        let patch = serde_json::json!({"metadata": {"ownerReferences": refs, "uid": dep}});
        ok_if_gone(n.api(client).patch(&n.name(), &PatchParams::default(), &Patch::Merge(&patch)).await)?;
    }
    for (uid, finalizer) in &plan.finalize {
        let n = &nodes[uid];
        let finalizers: Vec<String> = n
            .object
            .metadata
            .finalizers
            .iter()
            .flatten()
            .filter(|f| *f != finalizer)
            .cloned()
            .collect();
        let patch = serde_json::json!({"metadata": {"finalizers": finalizers, "resourceVersion": n.object.metadata.resource_version}});
        ok_if_gone(n.api(client).patch(&n.name(), &PatchParams::default(), &Patch::Merge(&patch)).await)?;
    }
    Ok(())
}

/// Runs the garbage collector, one pass each `interval`, until `shutdown`.
pub async fn run(client: Client, interval: Duration, shutdown: impl Future<Output = ()> + Send) {
    let mut shutdown = std::pin::pin!(shutdown);
    let mut resources = Vec::new();
    let mut passes = 0u64;
    loop {
        if passes % 20 == 0 || resources.is_empty() {
            match deletable(&client).await {
                Ok(r) => resources = r,
                Err(e) => tracing::warn!(error = %e, "discovery failed"),
            }
        }
        passes += 1;
        match scan(&client, &resources).await {
            Ok(nodes) => {
                let p = plan(&nodes);
                if let Err(e) = apply(&client, &nodes, &p).await {
                    tracing::debug!(error = %e, "garbage collection pass failed");
                }
            }
            Err(e) => tracing::debug!(error = %e, "scan failed"),
        }
        tokio::select! {
            _ = &mut shutdown => return,
            _ = tokio::time::sleep(interval) => {}
        }
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
}
