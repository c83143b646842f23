//! kube-rs, in process: typed and dynamic APIs, conflicts, watches.

use std::collections::BTreeMap;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use kube::core::{DynamicObject, GroupVersionKind};
use kube::discovery::ApiResource;
use orchestra::testing::TestCluster;
use serde_json::json;

fn pod(name: &str, app: &str) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": app}},
        "spec": {"containers": [{"name": "c", "image": "nginx"}]},
    }))
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typed_crud_and_errors() {
    let cluster = TestCluster::start().await;
    let client = cluster.client();
    let pods: Api<Pod> = Api::default_namespaced(client.clone());

    let created = pods.create(&PostParams::default(), &pod("web-0", "web")).await.unwrap();
    let meta = &created.metadata;
    assert!(meta.uid.is_some() && meta.creation_timestamp.is_some() && meta.resource_version.is_some());
    assert_eq!(meta.namespace.as_deref(), Some("default"));
    assert_eq!(created.status.unwrap().phase.as_deref(), Some("Pending"));
    pods.create(&PostParams::default(), &pod("db-0", "db")).await.unwrap();

    let err = pods.create(&PostParams::default(), &pod("web-0", "web")).await.unwrap_err();
    assert!(matches!(&err, kube::Error::Api(s) if s.code == 409 && s.reason == "AlreadyExists"), "{err:?}");
    let err = pods.get("nope").await.unwrap_err();
    assert!(matches!(&err, kube::Error::Api(s) if s.code == 404 && s.message == "pods \"nope\" not found"), "{err:?}");

    let listed = pods.list(&ListParams::default().labels("app=web")).await.unwrap();
    assert_eq!(listed.items.len(), 1);
    assert_eq!(listed.items[0].metadata.name.as_deref(), Some("web-0"));
    let all = pods.list(&ListParams::default()).await.unwrap();
    assert_eq!(all.items.len(), 2);

    // Update with the current resourceVersion works; with a stale one, 409.
    let mut current = pods.get("web-0").await.unwrap();
    let stale = current.clone();
    current.metadata.labels.get_or_insert_with(BTreeMap::new).insert("tier".into(), "front".into());
    let updated = pods.replace("web-0", &PostParams::default(), &current).await.unwrap();
    assert_ne!(updated.metadata.resource_version, stale.metadata.resource_version);
    let err = pods.replace("web-0", &PostParams::default(), &stale).await.unwrap_err();
    assert!(matches!(&err, kube::Error::Api(s) if s.code == 409 && s.reason == "Conflict"), "{err:?}");

    // Merge patch; status is ignored on the main resource.
    let patched = pods
        .patch(
            "web-0",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {"a": "b"}}, "status": {"phase": "Running"}})),
        )
        .await
        .unwrap();
    assert_eq!(patched.metadata.annotations.unwrap()["a"], "b");
    assert_eq!(patched.status.unwrap().phase.as_deref(), Some("Pending"));
    let status = pods
        .patch_status("web-0", &PatchParams::default(), &Patch::Merge(json!({"status": {"phase": "Running"}})))
        .await
        .unwrap();
    assert_eq!(status.status.unwrap().phase.as_deref(), Some("Running"));

    // Invalid objects: 422 with causes.
    let mut bad = pod("bad", "x");
    bad.spec.as_mut().unwrap().containers[0].image = None;
    let err = pods.create(&PostParams::default(), &bad).await.unwrap_err();
    match err {
        kube::Error::Api(s) => {
            assert_eq!((s.code, s.reason.as_str()), (422, "Invalid"));
            assert_eq!(s.message, "Pod \"bad\" is invalid: spec.containers[0].image: Required value");
        }
        other => panic!("{other:?}"),
    }
    let err = pods.create(&PostParams::default(), &pod("Bad_Name", "x")).await.unwrap_err();
    assert!(matches!(&err, kube::Error::Api(s) if s.code == 422), "{err:?}");

    // Writes into a missing namespace are refused.
    let elsewhere: Api<ConfigMap> = Api::namespaced(client.clone(), "missing");
    let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "c"}})).unwrap();
    let err = elsewhere.create(&PostParams::default(), &cm).await.unwrap_err();
    assert!(
        matches!(&err, kube::Error::Api(s) if s.code == 404 && s.message.contains("namespaces \"missing\"")),
        "{err:?}"
    );

    // Delete.
    pods.delete("db-0", &DeleteParams::default()).await.unwrap();
    assert!(pods.get_opt("db-0").await.unwrap().is_none());

    // System namespaces exist.
    let namespaces: Api<Namespace> = Api::all(client);
    let names: Vec<String> = namespaces
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|n| n.metadata.name)
        .collect();
    for ns in ["default", "kube-system", "kube-public", "kube-node-lease"] {
        assert!(names.contains(&ns.to_string()), "{names:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pagination_and_finalizers() {
    let cluster = TestCluster::start().await;
    let client = cluster.client();
    let cms: Api<ConfigMap> = Api::default_namespaced(client.clone());
    for i in 0..25 {
        let cm: ConfigMap =
            serde_json::from_value(json!({"metadata": {"name": format!("cm-{i:02}")}, "data": {"i": i.to_string()}}))
                .unwrap();
        cms.create(&PostParams::default(), &cm).await.unwrap();
    }
    let mut names = Vec::new();
    let mut params = ListParams::default().limit(10);
    let mut pages = 0;
    let mut first_rv = None;
    loop {
        let page = cms.list(&params).await.unwrap();
        pages += 1;
        first_rv.get_or_insert(page.metadata.resource_version.clone());
        names.extend(page.items.into_iter().filter_map(|c| c.metadata.name));
        // Writes between pages do not show up in later pages.
        let extra: ConfigMap = serde_json::from_value(json!({"metadata": {"name": format!("zz-{pages}")}})).unwrap();
        cms.create(&PostParams::default(), &extra).await.unwrap();
        match page.metadata.continue_ {
            Some(token) if !token.is_empty() => params = params.continue_token(&token),
            _ => break,
        }
    }
    assert_eq!(pages, 3);
    assert_eq!(names, (0..25).map(|i| format!("cm-{i:02}")).collect::<Vec<_>>());

    // A finalizer keeps the object, with a deletion timestamp, until removed.
    let cm: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "held", "finalizers": ["example.com/hold"]}})).unwrap();
    cms.create(&PostParams::default(), &cm).await.unwrap();
    cms.delete("held", &DeleteParams::default()).await.unwrap();
    let held = cms.get("held").await.unwrap();
    assert!(held.metadata.deletion_timestamp.is_some());
    cms.patch("held", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"finalizers": null}}))).await.unwrap();
    assert!(cms.get_opt("held").await.unwrap().is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_resume_and_dynamic_api() {
    let cluster = TestCluster::start().await;
    let client = cluster.client();
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    let first = pods.create(&PostParams::default(), &pod("a", "web")).await.unwrap();
    let rv = first.metadata.resource_version.clone().unwrap();

    let mut stream = pods.watch(&WatchParams::default(), &rv).await.unwrap().boxed();
    pods.create(&PostParams::default(), &pod("b", "web")).await.unwrap();
    pods.patch("a", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"labels": {"x": "y"}}}))).await.unwrap();
    pods.delete("b", &DeleteParams::default()).await.unwrap();
    let mut seen = Vec::new();
    while seen.len() < 3 {
        match stream.try_next().await.unwrap().unwrap() {
            WatchEvent::Added(p) => seen.push(format!("ADDED {}", p.metadata.name.unwrap())),
            WatchEvent::Modified(p) => seen.push(format!("MODIFIED {}", p.metadata.name.unwrap())),
            WatchEvent::Deleted(p) => seen.push(format!("DELETED {}", p.metadata.name.unwrap())),
            WatchEvent::Bookmark(_) => {}
            WatchEvent::Error(e) => panic!("{e:?}"),
        }
    }
    assert_eq!(seen, ["ADDED b", "MODIFIED a", "DELETED b"]);

    // A watch from "0" starts with the current state; label selectors filter.
    let mut initial = pods.watch(&WatchParams::default().labels("x=y"), "0").await.unwrap().boxed();
    match initial.try_next().await.unwrap().unwrap() {
        WatchEvent::Added(p) => assert_eq!(p.metadata.name.as_deref(), Some("a")),
        other => panic!("{other:?}"),
    }

    // Bookmarks arrive when asked for.
    let mut bookmarks = pods.watch(&WatchParams::default(), &rv).await.unwrap().boxed();
    let mut got_bookmark = false;
    for _ in 0..10 {
        if let WatchEvent::Bookmark(b) = bookmarks.try_next().await.unwrap().unwrap() {
            assert!(!b.metadata.resource_version.is_empty());
            got_bookmark = true;
            break;
        }
    }
    assert!(got_bookmark);

    // The dynamic API reaches the same objects.
    let resource = ApiResource::from_gvk(&GroupVersionKind::gvk("apps", "v1", "Deployment"));
    let dynamic: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &resource);
    let deployment = json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web"},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": "nginx"}]}}},
    });
    let object: DynamicObject = serde_json::from_value(deployment).unwrap();
    dynamic.create(&PostParams::default(), &object).await.unwrap();
    let typed: Api<Deployment> = Api::default_namespaced(client);
    let scale = typed.get_scale("web").await.unwrap();
    assert_eq!(scale.spec.unwrap().replicas, Some(2));
    typed.patch_scale("web", &PatchParams::default(), &Patch::Merge(json!({"spec": {"replicas": 5}}))).await.unwrap();
    let deployment = typed.get("web").await.unwrap();
    assert_eq!(deployment.spec.unwrap().replicas, Some(5));
    assert_eq!(deployment.metadata.generation, Some(2));
}
