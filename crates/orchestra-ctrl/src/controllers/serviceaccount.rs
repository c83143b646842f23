//! The ServiceAccount controller: a `default` ServiceAccount in every active
//! namespace, recreated if deleted. (Token Secrets are the
//! [`serviceaccount_token`](super::serviceaccount_token) controller's.)

use std::future::Future;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, Client};

use crate::informer::{Informer, ObjectKey, SharedInformerFactory};
use crate::{Action, Controller, Error};

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
        metadata: ObjectMeta {
            name: Some(DEFAULT.into()),
            namespace: Some(name.clone()),
            ..Default::default()
        },
        ..Default::default()
    };
    match api.create(&PostParams::default(), &sa).await {
        Ok(_) => Ok(Action::await_change()),
        // Exists already, or the namespace is going away.
        Err(kube::Error::Api(s)) if s.code == 409 || s.code == 403 || s.code == 404 => {
            Ok(Action::await_change())
        }
        Err(e) => Err(e.into()),
    }
}

/// Runs the controller until `shutdown`.
pub async fn run(factory: SharedInformerFactory, shutdown: impl Future<Output = ()> + Send) {
    let ctx = Arc::new(Context {
        client: factory.client().clone(),
        accounts: factory.informer::<ServiceAccount>(),
    });
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
