//! The shared informer against an API server behind a gate that can hold
//! and cut watches: relist after 410 Gone (an ERROR event after compaction,
//! or the watch request answered 410), and resuming from bookmarks.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::Client;
use kube::api::{Api, DeleteParams, ObjectMeta, PostParams};
use orchestra::testing::TestCluster;
use orchestra_ctrl::informer::Informer;
use orchestra_ctrl::informer::{Event, name_of};
use orchestra_store::{MemStore, Store};
use parking_lot::Mutex;
use tokio::sync::{mpsc, watch};
use tower::{Service, ServiceExt};

use super::support;

/// What the gate does with watch requests.
struct GateState {
    /// While true, watch requests wait at the gate.
    hold: watch::Sender<bool>,
    /// Bumped to end every open watch stream.
    cut: watch::Sender<u64>,
    /// Answer the next watch request with an HTTP 410 Gone.
    gone_next: AtomicBool,
    /// The `resourceVersion` of each watch request, in arrival order.
    watch_rvs: Mutex<Vec<String>>,
}

/// A tower service in front of the API server's router.
#[derive(Clone)]
struct Gate {
    router: axum::Router,
    state: Arc<GateState>,
}

impl Gate {
    fn hold(&self, hold: bool) {
        self.state.hold.send_replace(hold);
    }
    fn cut(&self) {
        self.state.cut.send_modify(|n| *n += 1);
    }
    fn watch_rvs(&self) -> Vec<String> {
        self.state.watch_rvs.lock().clone()
    }
}

fn query_param(query: &str, name: &str) -> Option<String> {
    query.split('&').find_map(|kv| kv.strip_prefix(name)?.strip_prefix('=').map(str::to_owned))
}

impl Service<http::Request<kube::client::Body>> for Gate {
    type Response = http::Response<Body>;
    type Error = std::convert::Infallible;
    type Future = futures::future::BoxFuture<'static, Result<Self::Response, Self::Error>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<kube::client::Body>) -> Self::Future {
        let router = self.router.clone();
        let state = self.state.clone();
        Box::pin(async move {
            let query = request.uri().query().unwrap_or("").to_owned();
            if query_param(&query, "watch").as_deref() != Some("true") {
                return router.oneshot(request).await;
            }
            // Subscribed before the request is seen in `watch_rvs`: a cut
            // the test makes once it sees the request ends this stream.
            let mut cut = state.cut.subscribe();
            cut.borrow_and_update();
            state.watch_rvs.lock().push(query_param(&query, "resourceVersion").unwrap_or_default());
            let _ = state.hold.subscribe().wait_for(|h| !*h).await;
            if state.gone_next.swap(false, Ordering::SeqCst) {
                let status = serde_json::json!({
                    "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                    "message": "too old resource version", "reason": "Expired", "code": 410
                });
                return Ok(http::Response::builder()
                    .status(410)
                    .header("content-type", "application/json")
                    .body(Body::from(status.to_string()))
                    .unwrap());
            }
            let response = router.oneshot(request).await?;
            let (parts, body) = response.into_parts();
            let data = body.into_data_stream();
            let stream = futures::stream::unfold((data, cut), |(mut data, mut cut)| async move {
                tokio::select! {
                    item = data.next() => item.map(|i| (i, (data, cut))),
                    _ = cut.changed() => None,
                }
            });
            Ok(http::Response::from_parts(parts, Body::from_stream(stream)))
        })
    }
}

/// A MemStore, a test cluster (200 ms bookmarks) over it, and an
/// administrator's client through the gate.
async fn gated() -> (Arc<MemStore>, TestCluster, Gate, Client) {
    let store = Arc::new(MemStore::new());
    let cluster = TestCluster::start_with(TestCluster::builder().store(store.clone())).await;
    let gate = Gate {
        router: cluster.admin_router(),
        state: Arc::new(GateState {
            hold: watch::channel(false).0,
            cut: watch::channel(0).0,
            gone_next: AtomicBool::new(false),
            watch_rvs: Mutex::default(),
        }),
    };
    let client = Client::new(gate.clone(), "default");
    (store, cluster, gate, client)
}

async fn create(api: &Api<ConfigMap>, name: &str) {
    let cm = ConfigMap { metadata: ObjectMeta { name: Some(name.into()), ..Default::default() }, ..Default::default() };
    api.create(&PostParams::default(), &cm).await.unwrap();
}

fn names(informer: &Informer<ConfigMap>) -> BTreeSet<String> {
    informer.list().iter().map(|c| name_of(c.as_ref())).collect()
}

fn set(names: &[&str]) -> BTreeSet<String> {
    names.iter().map(|n| n.to_string()).collect()
}

/// Polls `check` every 10 ms for up to 5 s (times [`support::SLACK`]).
async fn until(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5) * support::SLACK;
    while !check() {
        assert!(tokio::time::Instant::now() < deadline, "timed out: {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Receives events from `rx` until `done` holds of what was received.
async fn events_until(
    rx: &mut mpsc::UnboundedReceiver<Event<ConfigMap>>,
    seen: &mut Vec<String>,
    done: impl Fn(&[String]) -> bool,
) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5) * support::SLACK;
    while !done(seen) {
        let event = tokio::time::timeout_at(deadline, rx.recv()).await.expect("events in time").expect("open");
        seen.push(match event {
            Event::Apply { new, .. } => format!("apply {}", name_of(new.as_ref())),
            Event::Delete(old) => format!("delete {}", name_of(old.as_ref())),
        });
    }
}

/// Starts an informer of the ConfigMaps of `default` and waits for its list,
/// returning it with a subscriber past the initial objects.
async fn informer(
    client: &Client,
) -> (Arc<Informer<ConfigMap>>, mpsc::UnboundedReceiver<Event<ConfigMap>>, tokio::task::JoinHandle<()>) {
    let informer = Informer::<ConfigMap>::new();
    let task = tokio::spawn(informer.clone().run(Api::namespaced(client.clone(), "default")));
    informer.wait_synced().await;
    let mut rx = informer.subscribe();
    while rx.try_recv().is_ok() {}
    (informer, rx, task)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_watch_error_410_after_compaction_relists_and_reports_what_went_meanwhile() {
    let (store, _cluster, gate, client) = gated().await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    for n in ["a", "b", "c"] {
        create(&api, n).await;
    }
    let (informer, mut rx, task) = informer(&client).await;
    assert_eq!(names(&informer), set(&["a", "b", "c"]));
    until("the first watch", || gate.watch_rvs().len() == 1).await;

    // The informer loses its watch and cannot come back for a while ...
    gate.hold(true);
    gate.cut();
    until("the informer tries to watch again", || gate.watch_rvs().len() == 2).await;
    // ... during which b goes, d comes, and the history is compacted away.
    api.delete("b", &DeleteParams::default()).await.unwrap();
    create(&api, "d").await;
    let revision = store.status().await.unwrap().revision;
    store.compact(revision).await.unwrap();
    gate.hold(false);

    let mut seen = Vec::new();
    events_until(&mut rx, &mut seen, |s| s.len() >= 2).await;
    seen.sort();
    assert_eq!(seen, ["apply d", "delete b"]);
    until("cache consistent", || names(&informer) == set(&["a", "c", "d"])).await;
    // The list is counted once it has been applied and told.
    until("the relist counted", || informer.stats().lists == 2).await;
    let stats = informer.stats();
    assert_eq!(stats.gone, 1, "{stats:?}");
    assert_eq!(stats.lists, 2, "relisted once: {stats:?}");
    // Watching again from the new list: later changes arrive.
    create(&api, "e").await;
    until("e arrives by watch", || names(&informer).contains("e")).await;
    task.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_watch_request_answered_410_relists() {
    let (_store, _cluster, gate, client) = gated().await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    for n in ["a", "b"] {
        create(&api, n).await;
    }
    let (informer, mut rx, task) = informer(&client).await;
    until("the first watch", || gate.watch_rvs().len() == 1).await;
    gate.hold(true);
    gate.cut();
    until("the informer tries to watch again", || gate.watch_rvs().len() == 2).await;
    api.delete("a", &DeleteParams::default()).await.unwrap();
    gate.state.gone_next.store(true, Ordering::SeqCst);
    gate.hold(false);

    let mut seen = Vec::new();
    events_until(&mut rx, &mut seen, |s| !s.is_empty()).await;
    assert_eq!(seen, ["delete a"]);
    assert_eq!(names(&informer), set(&["b"]));
    until("the relist counted", || informer.stats().lists >= 2).await;
    let stats = informer.stats();
    assert_eq!((stats.gone, stats.lists), (1, 2), "the 410 made it relist: {stats:?}");
    create(&api, "c").await;
    until("c arrives by watch", || names(&informer) == set(&["b", "c"])).await;
    task.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_reconnect_resumes_from_the_last_bookmark() {
    let (store, _cluster, gate, client) = gated().await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    create(&api, "a").await;
    let (informer, _rx, task) = informer(&client).await;
    let listed: i64 = informer.resource_version().parse().unwrap();
    // Writes the informer does not watch move the store's revision on.
    let secrets: Api<Secret> = Api::namespaced(client.clone(), "default");
    for i in 0..5 {
        let s =
            Secret { metadata: ObjectMeta { name: Some(format!("s{i}")), ..Default::default() }, ..Default::default() };
        secrets.create(&PostParams::default(), &s).await.unwrap();
    }
    let revision = store.status().await.unwrap().revision;
    assert!(revision > listed);
    until("a bookmark at the store's revision", || informer.resource_version().parse::<i64>().unwrap() >= revision)
        .await;
    assert!(informer.stats().bookmarks >= 1);

    gate.hold(true);
    gate.cut();
    until("the informer tries to watch again", || gate.watch_rvs().len() >= 2).await;
    let resumed: i64 = gate.watch_rvs().last().unwrap().parse().unwrap();
    assert!(resumed >= revision, "resumed from {resumed}, not the bookmark's {revision} (listed at {listed})");
    // History before the bookmark is gone: resuming from the list's version
    // would be answered 410 and cost a relist.
    store.compact(revision).await.unwrap();
    gate.hold(false);
    create(&api, "b").await;
    until("b arrives by watch", || names(&informer) == set(&["a", "b"])).await;
    let stats = informer.stats();
    assert_eq!((stats.gone, stats.lists), (0, 1), "no relist: {stats:?}");
    task.abort();
}
