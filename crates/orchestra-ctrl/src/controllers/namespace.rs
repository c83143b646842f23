//! The Namespace controller: when a namespace is deleted (Terminating, with
//! the `kubernetes` finalizer in `spec.finalizers`), delete every namespaced
//! object inside through the API — objects with finalizers are waited for —
//! then remove the `kubernetes` finalizer with `PUT namespaces/<n>/finalize`,
//! after which the API server removes the namespace.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{DeleteParams, DynamicObject, ListParams, PostParams};
use kube::{Api, Client};

use super::discovery::deletable;
use crate::informer::SharedInformerFactory;
use crate::{Action, Controller, Error};

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

/// Deletes what is left in the namespace; `true` once it is empty.
pub async fn empty(client: &Client, namespace: &str) -> Result<bool, Error> {
    let mut remaining = 0;
    for r in deletable(client).await?.into_iter().filter(|r| r.namespaced) {
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &r.resource);
        let list = match api.list(&ListParams::default()).await {
            Ok(l) => l,
            Err(kube::Error::Api(s)) if s.code == 404 || s.code == 405 => continue,
            Err(e) => return Err(e.into()),
        };
        for object in list.items {
            remaining += 1;
            if object.metadata.deletion_timestamp.is_some() {
                continue;
            }
            let name = object.metadata.name.clone().unwrap_or_default();
            match api.delete(&name, &DeleteParams::background()).await {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {}
                Err(e) => return Err(e.into()),
            }
        }
    }
    Ok(remaining == 0)
}

/// One reconcile of a Namespace.
pub async fn reconcile(ns: Arc<Namespace>, ctx: Arc<Context>) -> Result<Action, Error> {
    if ns.metadata.deletion_timestamp.is_none() {
        return Ok(Action::await_change());
    }
    let finalizers = ns
        .spec
        .as_ref()
        .and_then(|s| s.finalizers.clone())
        .unwrap_or_default();
    if !finalizers.iter().any(|f| f == FINALIZER) {
        return Ok(Action::await_change());
    }
    let name = ns.metadata.name.clone().unwrap_or_default();
    if !empty(&ctx.client, &name).await? {
        return Ok(Action::requeue(ctx.recheck));
    }
    let api: Api<Namespace> = Api::all(ctx.client.clone());
    let mut finalized = (*ns).clone();
    finalized.spec.get_or_insert_with(Default::default).finalizers =
        Some(finalizers.into_iter().filter(|f| f != FINALIZER).collect());
    match api
        .replace_subresource("finalize", &name, &PostParams::default(), &finalized)
        .await
    {
        Ok(_) => Ok(Action::await_change()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(Action::await_change()),
        Err(e) => Err(e.into()),
    }
}

/// Runs the Namespace controller until `shutdown`.
pub async fn run(factory: SharedInformerFactory, workers: usize, shutdown: impl Future<Output = ()> + Send) {
    let ctx = Arc::new(Context {
        client: factory.client().clone(),
        recheck: Duration::from_millis(500),
    });
    Controller::<Namespace>::for_(&factory)
        .name(NAME)
        .concurrency(workers)
        .run(reconcile, ctx, shutdown)
        .await;
}
