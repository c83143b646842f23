//! Finalizers for reconcilers: cleanup that must run before an object is
//! gone, modelled on kube-runtime's `finalizer`.
//!
//! The API server keeps an object whose `metadata.finalizers` is not empty
//! after a delete, with a `deletionTimestamp`, until every finalizer was
//! removed. [`finalizer()`] adds the reconciler's finalizer to every object
//! it sees, hands the object to the reconciler as [`Event::Apply`] while it
//! lives and as [`Event::Cleanup`] once it is being deleted, and removes the
//! finalizer once the cleanup succeeded, letting the deletion complete.
//!
//! Finalizers are written with a JSON merge patch of `metadata.finalizers`
//! that carries the object's `resourceVersion`: the API server refuses it
//! with a conflict if the object changed since it was read, so a finalizer
//! another controller added or removed meanwhile is never overwritten. The
//! reconcile then fails ([`FinalizerError::AddFinalizer`] or
//! [`FinalizerError::RemoveFinalizer`]) and is retried on the newer version.

use std::fmt::Debug;
use std::future::Future;
use std::sync::Arc;

use kube::api::{Api, Patch, PatchParams};
use kube::{Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::reconciler::Action;

/// What [`finalizer()`] asks the reconciler to do with an object.
#[derive(Debug)]
pub enum Event<K> {
    /// The object lives (and carries the finalizer): reconcile it.
    Apply(Arc<K>),
    /// The object is being deleted: clean up what it stands for. The
    /// finalizer is removed once this returns `Ok`; it is called again
    /// until it does, so it must be idempotent.
    Cleanup(Arc<K>),
}

/// Why [`finalizer()`] failed: the reconciler's error `E`, or the API's.
#[derive(Debug, thiserror::Error)]
pub enum FinalizerError<E: std::error::Error + 'static> {
    /// [`Event::Apply`] failed.
    #[error("failed to apply object: {0}")]
    ApplyFailed(#[source] E),
    /// [`Event::Cleanup`] failed; the finalizer stays.
    #[error("failed to clean up object: {0}")]
    CleanupFailed(#[source] E),
    /// Adding the finalizer failed (a conflict if the object changed).
    #[error("failed to add finalizer: {0}")]
    AddFinalizer(#[source] kube::Error),
    /// Removing the finalizer failed (a conflict if the object changed).
    #[error("failed to remove finalizer: {0}")]
    RemoveFinalizer(#[source] kube::Error),
    /// The object has no name to patch it by.
    #[error("object has no name")]
    UnnamedObject,
    /// The finalizer's name is empty.
    #[error("a finalizer needs a name")]
    InvalidFinalizer,
}

/// Reconciles `object` behind the finalizer `name` (conventionally
/// `domain/purpose`), calling `reconcile` with an [`Event`]:
///
/// | object | what happens | returns |
/// |---|---|---|
/// | without the finalizer, not deleted | the finalizer is added | [`Action::AwaitChange`]: the change brings the object back |
/// | with it, not deleted | `reconcile(Event::Apply)` | its action |
/// | with it, deleted | `reconcile(Event::Cleanup)`, then the finalizer is removed | its action |
/// | without it, deleted | nothing (cleaned up already, or never set up) | [`Action::AwaitChange`] |
///
/// `api` is where `object` lives (its namespace, for a namespaced kind).
///
/// ```
/// use std::sync::Arc;
///
/// use k8s_openapi::api::core::v1::ConfigMap;
/// use kube::{Api, Client, ResourceExt};
/// use orchestra_ctrl::finalizer::{Event, FinalizerError, finalizer};
/// use orchestra_ctrl::Action;
///
/// #[derive(Debug, thiserror::Error)]
/// #[error("the backend refused: {0}")]
/// struct Backend(String);
///
/// async fn reconcile(cm: Arc<ConfigMap>, client: Arc<Client>) -> Result<Action, FinalizerError<Backend>> {
///     let api: Api<ConfigMap> = Api::namespaced((*client).clone(), &cm.namespace().unwrap_or_default());
///     finalizer(&api, "example.com/backend", cm, |event| async move {
///         match event {
///             Event::Apply(cm) => { /* create or update the backend's copy of `cm` */ }
///             Event::Cleanup(cm) => { /* delete the backend's copy of `cm` */ }
///         }
///         Ok::<_, Backend>(Action::await_change())
///     })
///     .await
/// }
/// ```
pub async fn finalizer<K, E, F, Fut>(
    api: &Api<K>,
    name: &str,
    object: Arc<K>,
    reconcile: F,
) -> Result<Action, FinalizerError<E>>
where
    K: Resource + Clone + DeserializeOwned + Serialize + Debug,
    E: std::error::Error + 'static,
    F: FnOnce(Event<K>) -> Fut,
    Fut: Future<Output = Result<Action, E>>,
{
    if name.is_empty() {
        return Err(FinalizerError::InvalidFinalizer);
    }
    let finalizers = object.finalizers();
    let present = finalizers.iter().any(|f| f == name);
    let deleted = object.meta().deletion_timestamp.is_some();
    match (present, deleted) {
        (true, false) => reconcile(Event::Apply(object)).await.map_err(FinalizerError::ApplyFailed),
        (true, true) => {
            let kept: Vec<&str> = finalizers.iter().map(String::as_str).filter(|f| *f != name).collect();
            let patch = finalizers_patch(object.as_ref(), &kept);
            let object_name = object.meta().name.clone().ok_or(FinalizerError::UnnamedObject)?;
            let action = reconcile(Event::Cleanup(object)).await.map_err(FinalizerError::CleanupFailed)?;
            api.patch::<serde_json::Value>(&object_name, &PatchParams::default(), &Patch::Merge(patch))
                .await
                .map_err(FinalizerError::RemoveFinalizer)?;
            Ok(action)
        }
        (false, false) => {
            let object_name = object.meta().name.as_deref().ok_or(FinalizerError::UnnamedObject)?;
            let mut all: Vec<&str> = finalizers.iter().map(String::as_str).collect();
            all.push(name);
            let patch = finalizers_patch(object.as_ref(), &all);
            api.patch::<serde_json::Value>(object_name, &PatchParams::default(), &Patch::Merge(patch))
                .await
                .map_err(FinalizerError::AddFinalizer)?;
            Ok(Action::await_change())
        }
        (false, true) => Ok(Action::await_change()),
    }
}

/// A merge patch setting `metadata.finalizers` to `finalizers`, pinned to
/// the resourceVersion `object` was read at (when it has one).
fn finalizers_patch<K: Resource>(object: &K, finalizers: &[&str]) -> serde_json::Value {
    let mut metadata = serde_json::json!({ "finalizers": finalizers });
    if let Some(version) = &object.meta().resource_version {
        metadata["resourceVersion"] = version.clone().into();
    }
    serde_json::json!({ "metadata": metadata })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::{DeleteParams, ObjectMeta, PostParams};

    use super::*;
    use crate::testing::FakeCluster;

    const OURS: &str = "example.com/cleanup";
    const OTHERS: &str = "other.io/keep";

    #[derive(Debug, PartialEq, Eq, thiserror::Error)]
    #[error("the backend is down")]
    struct Down;

    /// What the reconcile given to `finalizer` was called with.
    #[derive(Debug, PartialEq, Eq)]
    enum Called {
        Nothing,
        Apply,
        Cleanup,
    }

    /// How a call of `finalizer` ended.
    #[derive(Debug, PartialEq, Eq)]
    enum Outcome {
        Action(Action),
        ApplyFailed,
        CleanupFailed,
    }

    struct Case {
        what: &'static str,
        finalizers: &'static [&'static str],
        deleted: bool,
        reconcile: Result<Action, Down>,
        called: Called,
        outcome: Outcome,
        /// `metadata.finalizers` afterwards; `None`: the object is gone.
        after: Option<&'static [&'static str]>,
    }

    #[tokio::test]
    async fn finalizer_follows_the_object_through_its_life() {
        let requeue = Action::requeue(Duration::from_secs(30));
        let cases = [
            Case {
                what: "first reconcile: the finalizer is added, nothing else",
                finalizers: &[],
                deleted: false,
                reconcile: Ok(requeue),
                called: Called::Nothing,
                outcome: Outcome::Action(Action::AwaitChange),
                after: Some(&[OURS]),
            },
            Case {
                what: "added after the finalizers of others",
                finalizers: &[OTHERS],
                deleted: false,
                reconcile: Ok(requeue),
                called: Called::Nothing,
                outcome: Outcome::Action(Action::AwaitChange),
                after: Some(&[OTHERS, OURS]),
            },
            Case {
                what: "with the finalizer: apply, its action returned",
                finalizers: &[OURS],
                deleted: false,
                reconcile: Ok(requeue),
                called: Called::Apply,
                outcome: Outcome::Action(requeue),
                after: Some(&[OURS]),
            },
            Case {
                what: "a failed apply keeps the finalizer",
                finalizers: &[OURS],
                deleted: false,
                reconcile: Err(Down),
                called: Called::Apply,
                outcome: Outcome::ApplyFailed,
                after: Some(&[OURS]),
            },
            Case {
                what: "deleted: cleanup, then the finalizer is removed and the object goes",
                finalizers: &[OURS],
                deleted: true,
                reconcile: Ok(Action::AwaitChange),
                called: Called::Cleanup,
                outcome: Outcome::Action(Action::AwaitChange),
                after: None,
            },
            Case {
                what: "deleted: only our finalizer is removed",
                finalizers: &[OTHERS, OURS],
                deleted: true,
                reconcile: Ok(Action::AwaitChange),
                called: Called::Cleanup,
                outcome: Outcome::Action(Action::AwaitChange),
                after: Some(&[OTHERS]),
            },
            Case {
                what: "a failed cleanup keeps the finalizer (and the object)",
                finalizers: &[OURS],
                deleted: true,
                reconcile: Err(Down),
                called: Called::Cleanup,
                outcome: Outcome::CleanupFailed,
                after: Some(&[OURS]),
            },
            Case {
                what: "deleted without our finalizer: nothing to clean up",
                finalizers: &[OTHERS],
                deleted: true,
                reconcile: Ok(requeue),
                called: Called::Nothing,
                outcome: Outcome::Action(Action::AwaitChange),
                after: Some(&[OTHERS]),
            },
        ];
        let fake = FakeCluster::new().await;
        let api: Api<ConfigMap> = Api::namespaced(fake.client(), "default");
        for (i, case) in cases.into_iter().enumerate() {
            let name = format!("cm{i}");
            let cm = ConfigMap {
                metadata: ObjectMeta {
                    name: Some(name.clone()),
                    finalizers: Some(case.finalizers.iter().map(|f| f.to_string()).collect()),
                    ..Default::default()
                },
                ..Default::default()
            };
            let mut cm = api.create(&PostParams::default(), &cm).await.unwrap();
            if case.deleted {
                api.delete(&name, &DeleteParams::default()).await.unwrap();
                cm = api.get(&name).await.unwrap();
                assert!(cm.metadata.deletion_timestamp.is_some(), "{}", case.what);
            }
            let mut called = Called::Nothing;
            let result = finalizer(&api, OURS, Arc::new(cm), |event| {
                called = match event {
                    Event::Apply(_) => Called::Apply,
                    Event::Cleanup(_) => Called::Cleanup,
                };
                std::future::ready(case.reconcile)
            })
            .await;
            let outcome = match result {
                Ok(action) => Outcome::Action(action),
                Err(FinalizerError::ApplyFailed(Down)) => Outcome::ApplyFailed,
                Err(FinalizerError::CleanupFailed(Down)) => Outcome::CleanupFailed,
                Err(other) => panic!("{}: {other}", case.what),
            };
            assert_eq!((called, outcome), (case.called, case.outcome), "{}", case.what);
            let after =
                fake.get::<ConfigMap>("default", &name).await.map(|cm| cm.metadata.finalizers.unwrap_or_default());
            let expected = case.after.map(|f| f.iter().map(|f| f.to_string()).collect::<Vec<_>>());
            assert_eq!(after, expected, "{}", case.what);
        }
    }

    #[tokio::test]
    async fn a_stale_object_is_a_conflict_not_an_overwrite() {
        let fake = FakeCluster::new().await;
        let api: Api<ConfigMap> = Api::namespaced(fake.client(), "default");
        let cm =
            ConfigMap { metadata: ObjectMeta { name: Some("cm".into()), ..Default::default() }, ..Default::default() };
        let stale = api.create(&PostParams::default(), &cm).await.unwrap();
        // Another controller adds its finalizer meanwhile.
        let patch = serde_json::json!({"metadata": {"finalizers": [OTHERS]}});
        api.patch("cm", &PatchParams::default(), &Patch::Merge(patch)).await.unwrap();
        let result = finalizer(&api, OURS, Arc::new(stale), |_| std::future::ready(Ok::<_, Down>(Action::AwaitChange)));
        match result.await {
            Err(FinalizerError::AddFinalizer(kube::Error::Api(status))) => assert_eq!(status.code, 409, "{status:?}"),
            other => panic!("a stale write was not refused: {other:?}"),
        }
        let cm = fake.get::<ConfigMap>("default", "cm").await.unwrap();
        assert_eq!(cm.metadata.finalizers.as_deref(), Some(&[OTHERS.to_string()][..]));
        let unnamed = Arc::new(ConfigMap::default());
        let result = finalizer(&api, OURS, unnamed, |_| std::future::ready(Ok::<_, Down>(Action::AwaitChange)));
        assert!(matches!(result.await, Err(FinalizerError::UnnamedObject)));
        let result = finalizer(&api, "", Arc::new(cm), |_| std::future::ready(Ok::<_, Down>(Action::AwaitChange)));
        assert!(matches!(result.await, Err(FinalizerError::InvalidFinalizer)));
    }
}
