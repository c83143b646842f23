//! The garbage collector with an owner kind whose list is slow: nothing is
//! deleted for an owner it has not listed yet.

use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Client;
use kube::api::{Api, PostParams};
use orchestra::testing::TestCluster;
use parking_lot::Mutex;
use tokio::sync::watch;
use tower::{Service, ServiceExt};

use super::support::eventually;

/// Holds every non-watch GET under `/replicasets` (lists and lookups) while
/// `hold` is true, and records each request as `METHOD path?query`.
#[derive(Clone)]
struct SlowOwners {
    router: axum::Router,
    hold: watch::Sender<bool>,
    requests: Arc<Mutex<Vec<String>>>,
}

impl Service<http::Request<kube::client::Body>> for SlowOwners {
    type Response = http::Response<Body>;
    type Error = std::convert::Infallible;
    type Future = futures::future::BoxFuture<'static, Result<Self::Response, Self::Error>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<kube::client::Body>) -> Self::Future {
        let this = self.clone();
        Box::pin(async move {
            let line = format!("{} {}", request.method(), request.uri());
            this.requests.lock().push(line.clone());
            let slow = request.method() == http::Method::GET
                && request.uri().path().contains("/replicasets")
                && !request.uri().query().unwrap_or("").contains("watch=true");
            if slow {
                let _ = this.hold.subscribe().wait_for(|h| !*h).await;
            }
            this.router.oneshot(request).await
        })
    }
}

fn owned_by(name: &str, owner: &ReplicaSet) -> ConfigMap {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "default", "ownerReferences": [{
            "apiVersion": "apps/v1", "kind": "ReplicaSet",
            "name": owner.metadata.name, "uid": owner.metadata.uid,
        }]},
    }))
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn dependents_of_owners_not_yet_listed_are_kept() {
    let cluster = TestCluster::start().await;
    let direct = cluster.client();
    let replica_sets: Api<ReplicaSet> = Api::namespaced(direct.clone(), "default");
    let rs: ReplicaSet = serde_json::from_value(serde_json::json!({
        "apiVersion": "apps/v1", "kind": "ReplicaSet",
        "metadata": {"name": "owner", "namespace": "default"},
        "spec": {"replicas": 0, "selector": {"matchLabels": {"app": "x"}},
                 "template": {"metadata": {"labels": {"app": "x"}},
                              "spec": {"containers": [{"name": "c", "image": "busybox"}]}}}
    }))
    .unwrap();
    let owner = replica_sets.create(&PostParams::default(), &rs).await.unwrap();
    let mut gone = owner.clone();
    gone.metadata.name = Some("gone".into());
    gone.metadata.uid = Some("00000000-0000-0000-0000-000000000000".into());
    let config_maps: Api<ConfigMap> = Api::namespaced(direct.clone(), "default");
    config_maps.create(&PostParams::default(), &owned_by("dependent", &owner)).await.unwrap();
    config_maps.create(&PostParams::default(), &owned_by("orphan", &gone)).await.unwrap();

    let gate = SlowOwners { router: cluster.admin_router(), hold: watch::channel(true).0, requests: Arc::default() };
    let requests = gate.requests.clone();
    let client = Client::new(gate.clone(), "default");
    let (stop, mut rx) = watch::channel(false);
    let gc = tokio::spawn(orchestra_ctrl::controllers::garbage_collector::run(
        client,
        Duration::from_secs(3600),
        async move {
            let _ = rx.wait_for(|s| *s).await;
        },
    ));
    // The collector has listed the dependents and watches them, while the
    // owners' list hangs.
    eventually(Duration::from_secs(10), "configmaps listed and watched", || async {
        let r = requests.lock();
        r.iter().any(|l| l.contains("/configmaps") && l.contains("watch=true"))
            && r.iter().any(|l| l.contains("/replicasets"))
    })
    .await;
    // Another look a while later: still nothing done to either dependent.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(config_maps.get_opt("dependent").await.unwrap().is_some());
    assert!(config_maps.get_opt("orphan").await.unwrap().is_some(), "nothing decided before every kind is listed");
    assert!(!requests.lock().iter().any(|l| l.starts_with("DELETE")), "{:?}", requests.lock());

    gate.hold.send_replace(false);
    eventually(Duration::from_secs(10), "the real orphan collected", || async {
        config_maps.get_opt("orphan").await.unwrap().is_none()
    })
    .await;
    assert!(config_maps.get_opt("dependent").await.unwrap().is_some(), "an owned dependent stays");
    let _ = stop.send(true);
    gc.abort();
}
