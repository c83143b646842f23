//! The ClusterRole aggregation controller: a ClusterRole with an
//! `aggregationRule` holds the rules of every ClusterRole its selectors
//! match (upstream's `clusterrole-aggregation` controller). `admin`, `edit`
//! and `view` aggregate the roles labelled
//! `rbac.authorization.k8s.io/aggregate-to-<name>: "true"`, so that a
//! custom resource's roles labelled so extend them.

use std::future::Future;
use std::sync::Arc;

use k8s_openapi::api::rbac::v1::{ClusterRole, PolicyRule};
use kube::api::PostParams;
use kube::{Api, Client};
use orchestra_core::api::selector_matches;

use crate::controller::Controller;
use crate::informer::{Informer, ObjectKey, SharedInformerFactory};
use crate::{Action, Error};

/// Name of the controller.
pub const NAME: &str = "clusterrole-aggregation-controller";

/// What the reconciler works with.
pub struct Context {
    /// Client for writes.
    pub client: Client,
    /// The shared ClusterRole cache.
    pub roles: Arc<Informer<ClusterRole>>,
}

/// The rules `role` aggregates: those of every other ClusterRole one of its
/// selectors matches, by role name, each distinct rule once; `None` if it
/// has no aggregation rule.
pub fn aggregated_rules(role: &ClusterRole, all: &[Arc<ClusterRole>]) -> Option<Vec<PolicyRule>> {
    let selectors = role.aggregation_rule.as_ref()?.cluster_role_selectors.as_deref().unwrap_or_default();
    let mut sources: Vec<&ClusterRole> = all
        .iter()
        .map(|other| &**other)
        .filter(|other| other.metadata.name != role.metadata.name)
        .filter(|other| selectors.iter().any(|s| selector_matches(s, other.metadata.labels.as_ref())))
        .collect();
    sources.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    let mut rules: Vec<PolicyRule> = Vec::new();
    for rule in sources.into_iter().flat_map(|source| source.rules.iter().flatten()) {
        if !rules.contains(rule) {
            rules.push(rule.clone());
        }
    }
    Some(rules)
}

/// Writes the aggregated rules of an aggregating role when they differ from
/// its own.
pub async fn reconcile(role: Arc<ClusterRole>, ctx: Arc<Context>) -> Result<Action, Error> {
    let Some(rules) = aggregated_rules(&role, &ctx.roles.list()) else { return Ok(Action::await_change()) };
    if role.rules.as_deref().unwrap_or_default() == rules.as_slice() {
        return Ok(Action::await_change());
    }
    let mut updated = role.as_ref().clone();
    updated.rules = Some(rules);
    let api: Api<ClusterRole> = Api::all(ctx.client.clone());
    let name = role.metadata.name.clone().unwrap_or_default();
    match api.replace(&name, &PostParams::default(), &updated).await {
        Ok(_) => Ok(Action::await_change()),
        // Changed or deleted since it was read: the watch brings it back.
        Err(kube::Error::Api(s)) if s.code == 409 || s.code == 404 => Ok(Action::await_change()),
        Err(e) => Err(e.into()),
    }
}

/// Runs the controller until `shutdown`.
pub async fn run(factory: SharedInformerFactory, shutdown: impl Future<Output = ()> + Send) {
    let roles = factory.informer::<ClusterRole>();
    let ctx = Arc::new(Context { client: factory.client().clone(), roles: roles.clone() });
    Controller::<ClusterRole>::for_(&factory)
        // Any role may be one an aggregating role selects.
        .watches::<ClusterRole>(move |_| {
            roles.list().iter().filter(|r| r.aggregation_rule.is_some()).map(|r| ObjectKey::of(&**r)).collect()
        })
        .name(NAME)
        .concurrency(1)
        .run(reconcile, ctx, shutdown)
        .await;
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::testing::FakeCluster;

    fn role(value: serde_json::Value) -> Arc<ClusterRole> {
        Arc::new(serde_json::from_value(value).unwrap())
    }

    fn rule(verb: &str, resource: &str) -> serde_json::Value {
        json!({"verbs": [verb], "apiGroups": [""], "resources": [resource]})
    }

    fn aggregating(name: &str, label: &str) -> Arc<ClusterRole> {
        role(json!({
            "metadata": {"name": name, "resourceVersion": "1"},
            "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {label: "true"}}]},
        }))
    }

    #[test]
    fn rules_are_gathered_by_name_once_each() {
        let view = aggregating("view", "to-view");
        let all = vec![
            view.clone(),
            role(json!({"metadata": {"name": "z", "labels": {"to-view": "true"}}, "rules": [rule("get", "pods")]})),
            role(json!({"metadata": {"name": "a", "labels": {"to-view": "true"}}, "rules": [
                rule("list", "pods"), rule("get", "pods"),
            ]})),
            role(json!({"metadata": {"name": "other"}, "rules": [rule("delete", "pods")]})),
        ];
        let rules = aggregated_rules(&view, &all).unwrap();
        let verbs: Vec<&str> = rules.iter().map(|r| r.verbs[0].as_str()).collect();
        assert_eq!(verbs, ["list", "get"]);
        assert_eq!(aggregated_rules(&all[3], &all), None, "no aggregation rule");
    }

    #[tokio::test]
    async fn writes_only_what_changed() {
        let crd_view = role(json!({"metadata": {"name": "crd-view", "labels": {"to-view": "true"}}, "rules": [
            rule("get", "widgets"),
        ]}));
        let fake = FakeCluster::builder().object(&*aggregating("view", "to-view")).object(&*crd_view).build().await;
        let ctx = Arc::new(Context { client: fake.client(), roles: fake.informer::<ClusterRole>().await });
        let view: ClusterRole = fake.get_cluster("view").await.unwrap();
        reconcile(Arc::new(view), ctx.clone()).await.expect("reconciles");
        assert_eq!(fake.writes(), ["update clusterroles view"]);
        let view: ClusterRole = fake.get_cluster("view").await.unwrap();
        assert_eq!(serde_json::to_value(&view.rules).unwrap(), json!([rule("get", "widgets")]));

        fake.clear_actions();
        reconcile(Arc::new(view), ctx).await.expect("reconciles");
        assert_eq!(fake.writes(), Vec::<String>::new(), "nothing to change");
    }
}
