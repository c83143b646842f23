//! The Namespace controller: when a namespace is deleted (Terminating, with
//! the `kubernetes` finalizer in `spec.finalizers`), delete every namespaced
//! object inside through the API — objects with finalizers are waited for —
//! then remove the `kubernetes` finalizer with `PUT namespaces/<n>/finalize`,
//! after which the API server removes the namespace. Meanwhile the
//! namespace's status conditions tell what is left, as upstream's
//! (`NamespaceContentRemaining`, `NamespaceFinalizersRemaining`, ...).

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Namespace, NamespaceCondition};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};

use super::discovery::deletable;
use crate::controller::Controller;
use crate::informer::SharedInformerFactory;
use crate::{Action, Error};

/// Name of the controller.
pub const NAME: &str = "namespace-controller";
/// The finalizer this controller owns.
pub const FINALIZER: &str = "kubernetes";

/// What the Namespace reconciler works with.
pub struct Context {
    /// Client for reads and writes.
    pub client: Client,
    /// How often a namespace still holding objects is looked at again.
    pub recheck: Duration,
}

/// What one pass over a namespace being deleted left in it.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Remaining {
    /// Objects still there (being deleted) per resource, as
    /// `plural.group` (`pods.`, `widgets.example.com`).
    pub resources: BTreeMap<String, usize>,
    /// How many of them each finalizer holds.
    pub finalizers: BTreeMap<String, usize>,
    /// Deletes that failed.
    pub failures: Vec<String>,
}

impl Remaining {
    /// Whether nothing is left and nothing failed.
    pub fn is_empty(&self) -> bool {
        self.resources.is_empty() && self.failures.is_empty()
    }
}

/// Deletes every object in the namespace and reports what is still there
/// (objects waiting for their finalizers or graceful termination).
pub async fn sweep(client: &Client, namespace: &str) -> Result<Remaining, Error> {
    let mut remaining = Remaining::default();
    for r in deletable(client).await?.into_iter().filter(|r| r.namespaced) {
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &r.resource);
        let list = match api.list(&ListParams::default()).await {
            Ok(l) => l,
            Err(kube::Error::Api(s)) if s.code == 404 || s.code == 405 => continue,
            Err(e) => return Err(e.into()),
        };
        let resource = format!("{}.{}", r.resource.plural, r.resource.group);
        for object in list.items {
            let left = if object.metadata.deletion_timestamp.is_some() {
                Some(object)
            } else {
                let name = object.metadata.name.clone().unwrap_or_default();
                match api.delete(&name, &DeleteParams::background()).await {
                    // Deletion under way (finalizers, graceful termination).
                    Ok(either) => either.left().filter(|o| o.metadata.deletion_timestamp.is_some()),
                    Err(kube::Error::Api(s)) if s.code == 404 => None,
                    Err(kube::Error::Api(s)) if s.code == 409 => Some(object),
                    Err(e) => {
                        remaining.failures.push(format!("{resource} \"{name}\": {e}"));
                        Some(object)
                    }
                }
            };
            if let Some(object) = left {
                *remaining.resources.entry(resource.clone()).or_default() += 1;
                for f in object.metadata.finalizers.iter().flatten() {
                    *remaining.finalizers.entry(f.clone()).or_default() += 1;
                }
            }
        }
    }
    Ok(remaining)
}

/// Deletes what is left in the namespace; `true` once it is empty.
pub async fn empty(client: &Client, namespace: &str) -> Result<bool, Error> {
    Ok(sweep(client, namespace).await?.is_empty())
}

/// The deletion conditions upstream's namespace controller reports, for
/// what a pass left.
pub fn conditions(remaining: &Remaining) -> Vec<(&'static str, bool, &'static str, String)> {
    let counted = |m: &BTreeMap<String, usize>, f: &dyn Fn(&str, usize) -> String| {
        m.iter().map(|(k, n)| f(k, *n)).collect::<Vec<_>>().join(", ")
    };
    let mut out = vec![
        (
            "NamespaceDeletionDiscoveryFailure",
            false,
            "ResourcesDiscovered",
            "All resources successfully discovered".to_string(),
        ),
        (
            "NamespaceDeletionGroupVersionParsingFailure",
            false,
            "ParsedGroupVersions",
            "All legacy kube types successfully parsed".to_string(),
        ),
    ];
    out.push(if remaining.failures.is_empty() {
        (
            "NamespaceDeletionContentFailure",
            false,
            "ContentDeleted",
            "All content successfully deleted, may be waiting on finalization".into(),
        )
    } else {
        (
            "NamespaceDeletionContentFailure",
            true,
            "ContentDeletionFailed",
            format!(
                "Failed to delete all resource types, {} remaining: {}",
                remaining.failures.len(),
                remaining.failures.join(", ")
            ),
        )
    });
    out.push(if remaining.resources.is_empty() {
        ("NamespaceContentRemaining", false, "ContentRemoved", "All content successfully removed".into())
    } else {
        let what = counted(&remaining.resources, &|r, n| format!("{r} has {n} resource instances"));
        ("NamespaceContentRemaining", true, "SomeResourcesRemain", format!("Some resources are remaining: {what}"))
    });
    out.push(if remaining.finalizers.is_empty() {
        (
            "NamespaceFinalizersRemaining",
            false,
            "ContentHasNoFinalizers",
            "All content-preserving finalizers finished".into(),
        )
    } else {
        let what = counted(&remaining.finalizers, &|f, n| format!("{f} in {n} resource instances"));
        (
            "NamespaceFinalizersRemaining",
            true,
            "SomeFinalizersRemain",
            format!("Some content in the namespace has finalizers remaining: {what}"),
        )
    });
    out
}

/// Writes the deletion conditions into the namespace's status (only when
/// they changed; a condition's transition time moves with its status).
async fn report(client: &Client, ns: &Namespace, remaining: &Remaining) -> Result<(), Error> {
    let old = ns.status.as_ref().and_then(|s| s.conditions.clone()).unwrap_or_default();
    let now = Time(k8s_openapi::jiff::Timestamp::now());
    let mut changed = false;
    let mut next: Vec<NamespaceCondition> = old
        .iter()
        .filter(|c| !c.type_.starts_with("NamespaceDeletion") && !c.type_.ends_with("Remaining"))
        .cloned()
        .collect();
    for (type_, status, reason, message) in conditions(remaining) {
        let status = if status { "True" } else { "False" };
        let previous = old.iter().find(|c| c.type_ == type_);
        let same = previous.is_some_and(|c| {
            c.status == status && c.reason.as_deref() == Some(reason) && c.message.as_deref() == Some(&message)
        });
        changed |= !same;
        let transition = previous.filter(|c| c.status == status).and_then(|c| c.last_transition_time.clone());
        next.push(NamespaceCondition {
            type_: type_.into(),
            status: status.into(),
            reason: Some(reason.into()),
            message: Some(message),
            last_transition_time: Some(transition.unwrap_or_else(|| now.clone())),
        });
    }
    if !changed {
        return Ok(());
    }
    let api: Api<Namespace> = Api::all(client.clone());
    let name = ns.metadata.name.clone().unwrap_or_default();
    let patch = serde_json::json!({"status": {"conditions": next}});
    match api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch)).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// One reconcile of a Namespace.
pub async fn reconcile(ns: Arc<Namespace>, ctx: Arc<Context>) -> Result<Action, Error> {
    if ns.metadata.deletion_timestamp.is_none() {
        return Ok(Action::await_change());
    }
    let finalizers = ns.spec.as_ref().and_then(|s| s.finalizers.clone()).unwrap_or_default();
    if !finalizers.iter().any(|f| f == FINALIZER) {
        return Ok(Action::await_change());
    }
    let name = ns.metadata.name.clone().unwrap_or_default();
    let remaining = sweep(&ctx.client, &name).await?;
    report(&ctx.client, &ns, &remaining).await?;
    if !remaining.is_empty() {
        return Ok(Action::requeue(ctx.recheck));
    }
    let api: Api<Namespace> = Api::all(ctx.client.clone());
    let mut finalized = (*ns).clone();
    finalized.spec.get_or_insert_with(Default::default).finalizers =
        Some(finalizers.into_iter().filter(|f| f != FINALIZER).collect());
    match api.replace_subresource("finalize", &name, &PostParams::default(), &finalized).await {
        Ok(_) => Ok(Action::await_change()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(Action::await_change()),
        Err(e) => Err(e.into()),
    }
}

/// Runs the Namespace controller until `shutdown`.
pub async fn run(factory: SharedInformerFactory, workers: usize, shutdown: impl Future<Output = ()> + Send) {
    let ctx = Arc::new(Context { client: factory.client().clone(), recheck: Duration::from_millis(500) });
    Controller::<Namespace>::for_(&factory).name(NAME).concurrency(workers).run(reconcile, ctx, shutdown).await;
}

#[cfg(test)]
mod tests {
    //! One reconcile against a [`FakeCluster`](crate::testing::FakeCluster).

    use super::*;
    use crate::testing::FakeCluster;
    use k8s_openapi::api::core::v1::{ConfigMap, Pod};
    use serde_json::json;

    const GONE: &str = "1970-01-01T00:00:01Z";

    fn namespace(terminating: bool, finalizers: &[&str]) -> Namespace {
        let mut ns = json!({
            "metadata": {"name": "team"},
            "spec": {"finalizers": finalizers},
            "status": {"phase": if terminating { "Terminating" } else { "Active" }},
        });
        if terminating {
            ns["metadata"]["deletionTimestamp"] = json!(GONE);
        }
        serde_json::from_value(ns).unwrap()
    }

    fn config_map(name: &str, finalizer: bool) -> ConfigMap {
        let mut cm = json!({"metadata": {"name": name, "namespace": "team"}});
        if finalizer {
            cm["metadata"]["finalizers"] = json!(["test/keep"]);
            cm["metadata"]["deletionTimestamp"] = json!(GONE);
        }
        serde_json::from_value(cm).unwrap()
    }

    fn pod(name: &str) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "team"},
            "spec": {"containers": [{"name": "c", "image": "i"}]},
        }))
        .unwrap()
    }

    /// A pod bound to a node: deleted gracefully, it stays a while.
    fn running_pod(name: &str) -> Pod {
        let mut pod = pod(name);
        pod.spec.as_mut().unwrap().node_name = Some("node-1".into());
        pod
    }

    /// `(type, status, message)` of the namespace's conditions.
    fn conditions_of(ns: &Namespace) -> Vec<(String, String, String)> {
        ns.status
            .iter()
            .flat_map(|s| s.conditions.iter().flatten())
            .map(|c| (c.type_.clone(), c.status.clone(), c.message.clone().unwrap_or_default()))
            .collect()
    }

    struct Row {
        name: &'static str,
        namespace: Namespace,
        config_maps: Vec<ConfigMap>,
        pods: Vec<Pod>,
        /// Writes, sorted.
        writes: &'static [&'static str],
        /// Whether the reconcile asks to look again.
        requeue: bool,
        /// Whether the namespace is still there afterwards.
        remains: bool,
        /// Messages of the conditions that are `True` afterwards.
        conditions: &'static [&'static str],
    }

    #[tokio::test]
    async fn table() {
        let rows = [
            Row {
                name: "an active namespace is left alone",
                namespace: namespace(false, &[FINALIZER]),
                config_maps: vec![config_map("cfg", false)],
                pods: vec![],
                writes: &[],
                requeue: false,
                remains: true,
                conditions: &[],
            },
            Row {
                name: "what goes at once goes, then the namespace is finalized",
                namespace: namespace(true, &[FINALIZER]),
                config_maps: vec![config_map("cfg", false)],
                pods: vec![pod("p")],
                writes: &[
                    "delete configmaps team/cfg",
                    "delete pods team/p",
                    "patch namespaces/status team",
                    "update namespaces/finalize team",
                ],
                requeue: false,
                remains: false,
                conditions: &[],
            },
            Row {
                name: "pods terminating gracefully are waited for",
                namespace: namespace(true, &[FINALIZER]),
                config_maps: vec![config_map("cfg", false)],
                pods: vec![running_pod("p"), running_pod("q")],
                writes: &[
                    "delete configmaps team/cfg",
                    "delete pods team/p",
                    "delete pods team/q",
                    "patch namespaces/status team",
                ],
                requeue: true,
                remains: true,
                conditions: &["Some resources are remaining: pods. has 2 resource instances"],
            },
            Row {
                name: "objects already being deleted are waited for",
                namespace: namespace(true, &[FINALIZER]),
                config_maps: vec![config_map("held", true)],
                pods: vec![],
                writes: &["patch namespaces/status team"],
                requeue: true,
                remains: true,
                conditions: &[
                    "Some resources are remaining: configmaps. has 1 resource instances",
                    "Some content in the namespace has finalizers remaining: test/keep in 1 resource instances",
                ],
            },
            Row {
                name: "an empty deleted namespace is finalized and goes",
                namespace: namespace(true, &[FINALIZER]),
                config_maps: vec![],
                pods: vec![],
                writes: &["patch namespaces/status team", "update namespaces/finalize team"],
                requeue: false,
                remains: false,
                conditions: &[],
            },
            Row {
                name: "another finalizer's namespace keeps it",
                namespace: namespace(true, &[FINALIZER, "example.com/other"]),
                config_maps: vec![],
                pods: vec![],
                writes: &["patch namespaces/status team", "update namespaces/finalize team"],
                requeue: false,
                remains: true,
                conditions: &[],
            },
            Row {
                name: "without our finalizer there is nothing to do",
                namespace: namespace(true, &["example.com/other"]),
                config_maps: vec![config_map("cfg", false)],
                pods: vec![],
                writes: &[],
                requeue: false,
                remains: true,
                conditions: &[],
            },
        ];
        for row in rows {
            let fake = FakeCluster::builder()
                .object(&row.namespace)
                .objects(&row.config_maps)
                .objects(&row.pods)
                .build()
                .await;
            let ctx = Arc::new(Context { client: fake.client(), recheck: Duration::from_secs(7) });
            let ns: Namespace = fake.get_cluster("team").await.unwrap();
            let action = reconcile(Arc::new(ns), ctx).await.expect("reconciles");
            let mut writes = fake.writes();
            writes.sort();
            assert_eq!(writes, row.writes, "{}", row.name);
            let expected = if row.requeue { Action::requeue(Duration::from_secs(7)) } else { Action::await_change() };
            assert_eq!(action, expected, "{}", row.name);
            let after = fake.get_cluster::<Namespace>("team").await;
            assert_eq!(after.is_some(), row.remains, "{}: {after:?}", row.name);
            if let Some(after) = &after
                && row.writes.iter().any(|w| w.contains("finalize"))
            {
                assert_eq!(after.spec.clone().unwrap().finalizers.unwrap(), ["example.com/other"], "{}", row.name);
            }
            if let Some(after) = &after
                && row.writes.iter().any(|w| w.contains("namespaces/status"))
            {
                let conditions = conditions_of(after);
                assert_eq!(conditions.len(), 5, "{}: {conditions:?}", row.name);
                let true_ones: Vec<&str> = conditions.iter().filter(|c| c.1 == "True").map(|c| c.2.as_str()).collect();
                assert_eq!(true_ones, row.conditions, "{}", row.name);
            }
        }
        // The deletes were real: only the object with a finalizer remains.
        let fake = FakeCluster::builder()
            .object(&namespace(true, &[FINALIZER]))
            .objects(&[config_map("cfg", false), config_map("held", true)])
            .build()
            .await;
        let ctx = Arc::new(Context { client: fake.client(), recheck: Duration::from_secs(7) });
        reconcile(Arc::new(fake.get_cluster("team").await.unwrap()), ctx).await.unwrap();
        let left: Vec<String> =
            fake.list::<ConfigMap>("team").await.into_iter().filter_map(|c| c.metadata.name).collect();
        assert_eq!(left, ["held"]);
        // Nothing changed since: the next pass writes no status.
        fake.clear_actions();
        let ctx = Arc::new(Context { client: fake.client(), recheck: Duration::from_secs(7) });
        reconcile(Arc::new(fake.get_cluster("team").await.unwrap()), ctx).await.unwrap();
        assert_eq!(fake.writes(), Vec::<String>::new());
    }
}
