//! The ServiceAccount controller: a `default` ServiceAccount in every active
//! namespace, recreated if deleted. (Token Secrets are the
//! [`serviceaccount_token`](super::serviceaccount_token) controller's.)

use std::future::Future;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, Client};

use crate::controller::Controller;
use crate::informer::{Informer, ObjectKey, SharedInformerFactory};
use crate::{Action, Error};

/// Name of the controller.
pub const NAME: &str = "serviceaccount-controller";
/// The ServiceAccount every namespace gets.
pub const DEFAULT: &str = "default";

/// What the reconciler works with.
pub struct Context {
    /// Client for writes.
    pub client: Client,
    /// The shared ServiceAccount cache.
    pub accounts: Arc<Informer<ServiceAccount>>,
}

/// Ensures `default` exists in an active namespace.
pub async fn reconcile(ns: Arc<Namespace>, ctx: Arc<Context>) -> Result<Action, Error> {
    let name = ns.metadata.name.clone().unwrap_or_default();
    let terminating = ns.metadata.deletion_timestamp.is_some()
        || ns.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Terminating");
    if terminating || ctx.accounts.get(&ObjectKey::new(&name, DEFAULT)).is_some() {
        return Ok(Action::await_change());
    }
    let api: Api<ServiceAccount> = Api::namespaced(ctx.client.clone(), &name);
    let sa = ServiceAccount {
        metadata: ObjectMeta { name: Some(DEFAULT.into()), namespace: Some(name.clone()), ..Default::default() },
        ..Default::default()
    };
    match api.create(&PostParams::default(), &sa).await {
        Ok(_) => Ok(Action::await_change()),
        // Exists already, or the namespace is going away.
        Err(kube::Error::Api(s)) if s.code == 409 || s.code == 403 || s.code == 404 => Ok(Action::await_change()),
        Err(e) => Err(e.into()),
    }
}

/// Runs the controller until `shutdown`.
pub async fn run(factory: SharedInformerFactory, shutdown: impl Future<Output = ()> + Send) {
    let ctx = Arc::new(Context { client: factory.client().clone(), accounts: factory.informer::<ServiceAccount>() });
    Controller::<Namespace>::for_(&factory)
        .watches::<ServiceAccount>(|sa| {
            (sa.metadata.name.as_deref() == Some(DEFAULT))
                .then(|| ObjectKey::cluster(sa.metadata.namespace.clone().unwrap_or_default()))
                .into_iter()
                .collect()
        })
        .name(NAME)
        .concurrency(2)
        .run(reconcile, ctx, shutdown)
        .await;
}

#[cfg(test)]
mod tests {
    //! One reconcile against a [`FakeCluster`](crate::testing::FakeCluster).

    use super::*;
    use crate::testing::FakeCluster;
    use serde_json::json;

    fn namespace(phase: &str) -> Namespace {
        let mut ns =
            json!({"metadata": {"name": "team"}, "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": phase}});
        if phase == "Terminating" {
            ns["metadata"]["deletionTimestamp"] = json!("1970-01-01T00:00:01Z");
        }
        serde_json::from_value(ns).unwrap()
    }

    fn account(name: &str) -> ServiceAccount {
        serde_json::from_value(json!({"metadata": {"name": name, "namespace": "team"}})).unwrap()
    }

    #[tokio::test]
    async fn table() {
        let rows: [(&str, Namespace, Vec<ServiceAccount>, &[&str]); 4] = [
            (
                "creates default in a new namespace",
                namespace("Active"),
                vec![],
                &["create serviceaccounts team/default"],
            ),
            (
                "other accounts do not count",
                namespace("Active"),
                vec![account("builder")],
                &["create serviceaccounts team/default"],
            ),
            ("default exists: nothing to do", namespace("Active"), vec![account(DEFAULT)], &[]),
            ("a terminating namespace gets none", namespace("Terminating"), vec![], &[]),
        ];
        for (name, ns, accounts, writes) in rows {
            let fake = FakeCluster::builder().object(&ns).objects(&accounts).build().await;
            let ctx = Arc::new(Context { client: fake.client(), accounts: fake.informer::<ServiceAccount>().await });
            let ns: Namespace = fake.get_cluster("team").await.unwrap();
            let action = reconcile(Arc::new(ns), ctx).await.expect("reconciles");
            assert_eq!(action, Action::await_change(), "{name}");
            assert_eq!(fake.writes(), writes, "{name}");
            let exists = fake.get::<ServiceAccount>("team", DEFAULT).await.is_some();
            assert_eq!(
                exists,
                !writes.is_empty() || accounts.iter().any(|a| a.metadata.name.as_deref() == Some(DEFAULT)),
                "{name}"
            );
        }
    }

    #[tokio::test]
    async fn a_stale_cache_is_no_error() {
        // `default` exists, but the cache (empty here) has not shown it
        // yet: the create's 409 Conflict is no error.
        let fake = FakeCluster::builder().object(&namespace("Active")).object(&account(DEFAULT)).build().await;
        let ctx = Arc::new(Context { client: fake.client(), accounts: Informer::new() });
        let ns = Arc::new(fake.get_cluster::<Namespace>("team").await.unwrap());
        assert_eq!(reconcile(ns, ctx).await.expect("reconciles"), Action::await_change());
        assert_eq!(fake.writes(), ["create serviceaccounts team/default"]);
    }
}
