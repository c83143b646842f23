//! The root CA certificate publisher: a ConfigMap `kube-root-ca.crt` in
//! every namespace holding the cluster CA under `ca.crt`, recreated when
//! deleted and restored when edited, so that pods can verify the API
//! server (their token volume projects it at `ca.crt`).

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, Client};

use crate::controller::Controller;
use crate::informer::{Informer, ObjectKey, SharedInformerFactory};
use crate::{Action, Error};

/// Name of the controller.
pub const NAME: &str = "root-ca-cert-publisher";
/// The ConfigMap every namespace gets.
pub const CONFIG_MAP: &str = "kube-root-ca.crt";
/// The key holding the CA bundle (PEM).
pub const KEY: &str = "ca.crt";
/// The annotation describing the ConfigMap.
pub const DESCRIPTION_ANNOTATION: &str = "kubernetes.io/description";
/// Upstream's description of the ConfigMap.
pub const DESCRIPTION: &str = "Contains a CA bundle that can be used to verify the kube-apiserver when using \
     internal endpoints such as the internal service IP or kubernetes.default.svc. No other usage is guaranteed \
     across distributions of Kubernetes clusters.";

/// What the reconciler works with.
pub struct Context {
    /// Client for writes.
    pub client: Client,
    /// The shared ConfigMap cache.
    pub config_maps: Arc<Informer<ConfigMap>>,
    /// The cluster CA bundle, PEM.
    pub root_ca: String,
}

/// What a namespace's ConfigMap needs.
///
/// ```
/// use k8s_openapi::api::core::v1::Namespace;
/// use orchestra_ctrl::controllers::root_ca_publisher::{KEY, Plan, plan};
///
/// let team: Namespace = serde_json::from_value(serde_json::json!({"metadata": {"name": "team"}})).unwrap();
/// let Plan::Create(config_map) = plan(&team, None, "PEM") else { panic!("a missing ConfigMap is created") };
/// assert_eq!(config_map.data.as_ref().unwrap()[KEY], "PEM");
/// assert_eq!(plan(&team, Some(&config_map), "PEM"), Plan::Nothing);
/// assert!(matches!(plan(&team, Some(&config_map), "ROTATED"), Plan::Update(_)));
/// ```
#[derive(Debug, Clone, PartialEq)]
pub enum Plan {
    /// It is as it should be (or the namespace is going away).
    Nothing,
    /// It is missing.
    Create(ConfigMap),
    /// Its data or description differ: replace them, keeping the rest.
    Update(ConfigMap),
}

/// What namespace `namespace` (terminating or not) needs, given its
/// current `kube-root-ca.crt`.
pub fn plan(namespace: &Namespace, existing: Option<&ConfigMap>, root_ca: &str) -> Plan {
    let name = namespace.metadata.name.clone().unwrap_or_default();
    let terminating = namespace.metadata.deletion_timestamp.is_some()
        || namespace.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Terminating");
    let data = BTreeMap::from([(KEY.to_owned(), root_ca.to_owned())]);
    let Some(existing) = existing else {
        if terminating {
            return Plan::Nothing;
        }
        return Plan::Create(ConfigMap {
            metadata: ObjectMeta {
                name: Some(CONFIG_MAP.into()),
                namespace: Some(name),
                annotations: Some(BTreeMap::from([(DESCRIPTION_ANNOTATION.to_owned(), DESCRIPTION.to_owned())])),
                ..Default::default()
            },
            data: Some(data),
            ..Default::default()
        });
    };
    let described = existing.metadata.annotations.as_ref().and_then(|a| a.get(DESCRIPTION_ANNOTATION))
        == Some(&DESCRIPTION.to_owned());
    if existing.data.as_ref() == Some(&data) && existing.binary_data.is_none() && described {
        return Plan::Nothing;
    }
    let mut restored = existing.clone();
    restored.data = Some(data);
    restored.binary_data = None;
    restored.metadata.annotations.get_or_insert_default().insert(DESCRIPTION_ANNOTATION.into(), DESCRIPTION.into());
    Plan::Update(restored)
}

/// Brings one namespace's `kube-root-ca.crt` in line with the CA.
pub async fn reconcile(namespace: Arc<Namespace>, ctx: Arc<Context>) -> Result<Action, Error> {
    let name = namespace.metadata.name.clone().unwrap_or_default();
    let existing = ctx.config_maps.get(&ObjectKey::new(&name, CONFIG_MAP));
    let api: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), &name);
    let written = match plan(&namespace, existing.as_deref(), &ctx.root_ca) {
        Plan::Nothing => return Ok(Action::await_change()),
        Plan::Create(config_map) => api.create(&PostParams::default(), &config_map).await,
        // A replace at the cached resourceVersion: a conflict means a newer
        // version is on its way, which is reconciled in turn.
        Plan::Update(config_map) => api.replace(CONFIG_MAP, &PostParams::default(), &config_map).await,
    };
    match written {
        Ok(_) => Ok(Action::await_change()),
        // Exists already (a stale cache), changed meanwhile, or the
        // namespace is gone or going away: the watch brings what follows.
        Err(kube::Error::Api(s)) if matches!(s.code, 403 | 404 | 409) => Ok(Action::await_change()),
        Err(e) => Err(e.into()),
    }
}

/// Runs the controller with the CA bundle `root_ca` until `shutdown`.
pub async fn run(factory: SharedInformerFactory, root_ca: String, shutdown: impl Future<Output = ()> + Send) {
    let ctx =
        Arc::new(Context { client: factory.client().clone(), config_maps: factory.informer::<ConfigMap>(), root_ca });
    Controller::<Namespace>::for_(&factory)
        .watches::<ConfigMap>(|config_map| {
            (config_map.metadata.name.as_deref() == Some(CONFIG_MAP))
                .then(|| ObjectKey::cluster(config_map.metadata.namespace.clone().unwrap_or_default()))
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
    //! Plans, and reconciles against a [`FakeCluster`](crate::testing::FakeCluster).

    use super::*;
    use crate::testing::FakeCluster;
    use serde_json::{Value, json};

    const CA: &str = "-----BEGIN CERTIFICATE-----\nCA\n-----END CERTIFICATE-----\n";

    fn namespace(phase: &str) -> Namespace {
        let mut ns =
            json!({"metadata": {"name": "team"}, "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": phase}});
        if phase == "Terminating" {
            ns["metadata"]["deletionTimestamp"] = json!("1970-01-01T00:00:01Z");
        }
        serde_json::from_value(ns).unwrap()
    }

    fn config_map(data: Value, annotations: Value) -> ConfigMap {
        serde_json::from_value(json!({
            "metadata": {"name": CONFIG_MAP, "namespace": "team", "annotations": annotations, "labels": {"keep": "me"}},
            "data": data,
        }))
        .unwrap()
    }

    fn published() -> ConfigMap {
        config_map(json!({KEY: CA}), json!({DESCRIPTION_ANNOTATION: DESCRIPTION}))
    }

    #[tokio::test]
    async fn table() {
        let tampered = config_map(json!({KEY: "forged", "extra": "x"}), json!({"other": "y"}));
        let mut restored = tampered.clone();
        restored.data = Some(BTreeMap::from([(KEY.into(), CA.into())]));
        restored.metadata.annotations.as_mut().unwrap().insert(DESCRIPTION_ANNOTATION.into(), DESCRIPTION.into());
        let undescribed = config_map(json!({KEY: CA}), json!({}));
        /// (case, namespace, ConfigMap before, writes, ConfigMap after)
        type Row = (&'static str, Namespace, Option<ConfigMap>, &'static [&'static str], Option<ConfigMap>);
        #[rustfmt::skip]
        let rows: [Row; 5] = [
            ("created in a new namespace", namespace("Active"), None,
             &["create configmaps team/kube-root-ca.crt"], Some(published())),
            ("as it should be: nothing to do", namespace("Active"), Some(published()), &[], Some(published())),
            ("edited data is restored, other fields kept", namespace("Active"), Some(tampered),
             &["update configmaps team/kube-root-ca.crt"], Some(restored)),
            ("a lost description is restored", namespace("Active"), Some(undescribed),
             &["update configmaps team/kube-root-ca.crt"], Some(published())),
            ("a terminating namespace gets none", namespace("Terminating"), None, &[], None),
        ];
        for (name, ns, existing, writes, expected) in rows {
            let fake = FakeCluster::builder().object(&ns).objects(existing.as_slice()).build().await;
            let ctx = Arc::new(Context {
                client: fake.client(),
                config_maps: fake.informer::<ConfigMap>().await,
                root_ca: CA.into(),
            });
            let ns: Namespace = fake.get_cluster("team").await.unwrap();
            let action = reconcile(Arc::new(ns), ctx).await.expect("reconciles");
            assert_eq!(action, Action::await_change(), "{name}");
            assert_eq!(fake.writes(), writes, "{name}");
            let stored = fake.get::<ConfigMap>("team", CONFIG_MAP).await;
            let shape =
                |cm: &Option<ConfigMap>| cm.as_ref().map(|cm| (cm.data.clone(), cm.metadata.annotations.clone()));
            assert_eq!(shape(&stored), shape(&expected), "{name}");
            // Labels (and the rest) of an edited ConfigMap are kept.
            let labels = |cm: Option<ConfigMap>| cm.and_then(|cm| cm.metadata.labels);
            assert_eq!(labels(stored), labels(existing), "{name}");
        }
    }

    #[tokio::test]
    async fn a_stale_cache_is_no_error() {
        // The ConfigMap exists, but the cache (empty here) has not shown it
        // yet: the create's 409 Conflict is no error.
        let fake = FakeCluster::builder().object(&namespace("Active")).object(&published()).build().await;
        let ctx = Arc::new(Context { client: fake.client(), config_maps: Informer::new(), root_ca: CA.into() });
        let ns = Arc::new(fake.get_cluster::<Namespace>("team").await.unwrap());
        assert_eq!(reconcile(ns, ctx).await.expect("reconciles"), Action::await_change());
        assert_eq!(fake.writes(), ["create configmaps team/kube-root-ca.crt"]);
    }

    #[tokio::test]
    async fn a_deleted_config_map_comes_back() {
        use std::time::Duration;
        let fake = FakeCluster::new().await;
        let (stop, mut stopped) = tokio::sync::watch::channel(false);
        let running = tokio::spawn(run(fake.factory().clone(), CA.into(), async move {
            let _ = stopped.wait_for(|s| *s).await;
        }));
        let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": "team"}})).unwrap();
        Api::<Namespace>::all(fake.unrecorded()).create(&Default::default(), &ns).await.unwrap();
        let published = || async { fake.get::<ConfigMap>("team", CONFIG_MAP).await.and_then(|cm| cm.data) };
        crate::testing::eventually(Duration::from_secs(5), "kube-root-ca.crt in team", || async {
            published().await.is_some_and(|data| data[KEY] == CA)
        })
        .await;
        let api = Api::<ConfigMap>::namespaced(fake.unrecorded(), "team");
        let first = api.get(CONFIG_MAP).await.unwrap().metadata.uid;
        api.delete(CONFIG_MAP, &Default::default()).await.unwrap();
        crate::testing::eventually(Duration::from_secs(5), "kube-root-ca.crt back in team", || async {
            let again = fake.get::<ConfigMap>("team", CONFIG_MAP).await;
            again.is_some_and(|cm| cm.metadata.uid != first && cm.data.is_some_and(|data| data[KEY] == CA))
        })
        .await;
        let _ = stop.send(true);
        tokio::time::timeout(Duration::from_secs(5), running).await.expect("the controller stops").unwrap();
    }
}
