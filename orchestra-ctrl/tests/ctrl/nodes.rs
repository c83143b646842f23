//! Nodes: lease loss → taints → eviction → replacement elsewhere; IPAM;
//! default ServiceAccounts; Endpoints and EndpointSlices.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Endpoints, Namespace, Node, Pod, Service, ServiceAccount};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::Client;
use kube::api::{Api, ListParams, ObjectMeta, Patch, PatchParams, PostParams};
use orchestra_ctrl::controllers::node_lifecycle::{self, NodeLifecycle, UNREACHABLE};
use orchestra_ctrl::informer::SharedInformerFactory;
use tokio::sync::watch;

use super::support::{self, eventually};

async fn create_node(client: &Client, name: &str) {
    let nodes: Api<Node> = Api::all(client.clone());
    nodes
        .create(
            &PostParams::default(),
            &Node {
                metadata: ObjectMeta {
                    name: Some(name.into()),
                    labels: Some([("topology.kubernetes.io/zone".to_string(), "z1".to_string())].into()),
                    ..Default::default()
                },
                ..Default::default()
            },
        )
        .await
        .unwrap();
}

/// Renews `node`'s lease and Ready heartbeat every 100 ms while `alive`.
async fn heartbeat(client: Client, node: String, alive: Arc<AtomicBool>) {
    let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-node-lease");
    let nodes: Api<Node> = Api::all(client.clone());
    loop {
        if alive.load(Ordering::SeqCst) {
            let now = k8s_openapi::jiff::Timestamp::now().to_string();
            let lease = serde_json::json!({
                "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": node, "namespace": "kube-node-lease"},
                "spec": {"holderIdentity": node, "leaseDurationSeconds": 1, "renewTime": now}
            });
            let _ = leases.patch(&node, &PatchParams::apply("test-kubelet").force(), &Patch::Apply(&lease)).await;
            let status = serde_json::json!({"status": {"conditions": [
                {"type": "Ready", "status": "True", "reason": "KubeletReady",
                 "lastHeartbeatTime": now, "lastTransitionTime": now}
            ]}});
            let _ = nodes.patch_status(&node, &PatchParams::default(), &Patch::Merge(&status)).await;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Binds unbound pods to an untainted node (a stand-in for the scheduler),
/// looking every 50 ms.
async fn fake_scheduler(client: Client) {
    let factory = SharedInformerFactory::new(client.clone());
    let nodes = factory.informer::<Node>();
    let pods = factory.informer::<Pod>();
    let mut turn = 0usize;
    loop {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let mut candidates: Vec<String> = nodes
            .list()
            .iter()
            .filter(|n| n.spec.as_ref().and_then(|s| s.taints.as_ref()).is_none_or(|t| t.is_empty()))
            .filter_map(|n| n.metadata.name.clone())
            .collect();
        candidates.sort();
        if candidates.is_empty() {
            continue;
        }
        for pod in pods.list() {
            if pod.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some()
                || pod.metadata.deletion_timestamp.is_some()
            {
                continue;
            }
            turn += 1;
            let target = &candidates[turn % candidates.len()];
            let api: Api<Pod> = Api::namespaced(client.clone(), pod.metadata.namespace.as_deref().unwrap());
            let binding = serde_json::json!({
                "apiVersion": "v1", "kind": "Binding",
                "metadata": {"name": pod.metadata.name},
                "target": {"kind": "Node", "name": target}
            });
            let _: Result<serde_json::Value, _> = api
                .create_subresource("binding", pod.metadata.name.as_deref().unwrap(), &PostParams::default(), &binding)
                .await;
        }
    }
}

fn stopped(rx: &watch::Receiver<bool>) -> impl std::future::Future<Output = ()> + Send + 'static {
    let mut rx = rx.clone();
    async move {
        let _ = rx.wait_for(|s| *s).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn lost_node_lease_evicts_pods_and_they_come_back_elsewhere() {
    let cluster = support::cluster(Duration::from_millis(10)).await;
    let client = cluster.client.clone();
    create_node(&client, "n1").await;
    create_node(&client, "n2").await;
    let alive1 = Arc::new(AtomicBool::new(true));
    let alive2 = Arc::new(AtomicBool::new(true));
    let mut tasks = vec![
        tokio::spawn(heartbeat(client.clone(), "n1".into(), alive1.clone())),
        tokio::spawn(heartbeat(client.clone(), "n2".into(), alive2.clone())),
        tokio::spawn(fake_scheduler(client.clone())),
    ];
    let (stop, rx) = watch::channel(false);
    let factory = SharedInformerFactory::new(client.clone());
    let lifecycle = NodeLifecycle::new(
        &factory,
        node_lifecycle::Config::default()
            .with_monitor_period(Duration::from_millis(100))
            .with_grace_period(Duration::from_secs(2))
            .with_zone_qps(100.0)
            .with_default_toleration_seconds(1),
    );
    tasks.push(tokio::spawn(lifecycle.run(stopped(&rx))));

    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "default");
    let d: Deployment = serde_json::from_value(serde_json::json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"replicas": 4, "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}},
                              "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}
    }))
    .unwrap();
    deployments.create(&PostParams::default(), &d).await.unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let placement = || async {
        let items = pods.list(&ListParams::default()).await.unwrap().items;
        items
            .into_iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .filter_map(|p| p.spec.and_then(|s| s.node_name))
            .collect::<Vec<_>>()
    };
    eventually(Duration::from_secs(10), "4 pods on both nodes", || async {
        let nodes = placement().await;
        nodes.len() == 4 && nodes.iter().collect::<HashSet<_>>().len() == 2
    })
    .await;

    let lost = Instant::now();
    alive1.store(false, Ordering::SeqCst);
    let nodes: Api<Node> = Api::all(client.clone());
    eventually(Duration::from_secs(10), "n1 tainted and Unknown", || async {
        let n = nodes.get("n1").await.unwrap();
        let taints = n.spec.unwrap_or_default().taints.unwrap_or_default();
        let ready =
            n.status.unwrap_or_default().conditions.unwrap_or_default().into_iter().find(|c| c.type_ == "Ready");
        ready.is_some_and(|r| r.status == "Unknown")
            && taints.iter().any(|t| t.key == UNREACHABLE && t.effect == "NoExecute")
            && taints.iter().any(|t| t.key == UNREACHABLE && t.effect == "NoSchedule")
    })
    .await;
    eventually(Duration::from_secs(15), "all 4 running on n2", || async {
        let nodes = placement().await;
        nodes.len() == 4 && nodes.iter().all(|n| n == "n2")
    })
    .await;
    let moved = lost.elapsed();
    println!("pods moved off a silent node in {moved:?} (grace 2 s, toleration 1 s)");
    // Timestamps in `Time` fields are whole seconds: allow for the truncation.
    assert!(moved >= Duration::from_millis(1500), "not before the grace period");

    alive1.store(true, Ordering::SeqCst);
    eventually(Duration::from_secs(10), "taints removed on return", || async {
        nodes.get("n1").await.unwrap().spec.unwrap_or_default().taints.unwrap_or_default().is_empty()
    })
    .await;
    let _ = stop.send(true);
    for t in tasks {
        t.abort();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn ipam_service_accounts_and_endpoints() {
    let cluster = support::cluster(Duration::from_millis(10)).await;
    let client = cluster.client.clone();
    let (stop, rx) = watch::channel(false);
    let factory = SharedInformerFactory::new(client.clone());
    let tasks = vec![
        tokio::spawn({
            let factory = factory.clone();
            let stop = stopped(&rx);
            async move { orchestra_ctrl::controllers::node_ipam::run(factory, "10.244.0.0/16", 24, stop).await.unwrap() }
        }),
        tokio::spawn(orchestra_ctrl::controllers::serviceaccount::run(factory.clone(), stopped(&rx))),
        tokio::spawn(orchestra_ctrl::controllers::endpoints::run(factory.clone(), 2, stopped(&rx))),
    ];

    for n in ["a", "b", "c"] {
        create_node(&client, n).await;
    }
    let nodes: Api<Node> = Api::all(client.clone());
    eventually(Duration::from_secs(5), "distinct pod CIDRs", || async {
        let cidrs: HashSet<String> = nodes
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .filter_map(|n| n.spec.and_then(|s| s.pod_cidr))
            .collect();
        cidrs.len() == 3 && cidrs.iter().all(|c| c.starts_with("10.244.") && c.ends_with("/24"))
    })
    .await;

    let namespaces: Api<Namespace> = Api::all(client.clone());
    namespaces
        .create(
            &PostParams::default(),
            &Namespace {
                metadata: ObjectMeta { name: Some("team".into()), ..Default::default() },
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), "team");
    eventually(Duration::from_secs(5), "default service account", || async {
        accounts.get_opt("default").await.unwrap().is_some()
    })
    .await;

    let services: Api<Service> = Api::namespaced(client.clone(), "default");
    let svc: Service = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": 8080}]}
    }))
    .unwrap();
    services.create(&PostParams::default(), &svc).await.unwrap();
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "default");
    let d: Deployment = serde_json::from_value(serde_json::json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}},
                              "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}
    }))
    .unwrap();
    deployments.create(&PostParams::default(), &d).await.unwrap();
    let endpoints: Api<Endpoints> = Api::namespaced(client.clone(), "default");
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), "default");
    let ready_count = || async {
        endpoints
            .get_opt("web")
            .await
            .unwrap()
            .and_then(|e| e.subsets)
            .map(|s| s.iter().map(|s| s.addresses.as_ref().map_or(0, Vec::len)).sum::<usize>())
            .unwrap_or(0)
    };
    eventually(Duration::from_secs(10), "3 ready endpoints", || async { ready_count().await == 3 }).await;
    eventually(Duration::from_secs(5), "3 endpoints in slices", || async {
        let list = slices.list(&ListParams::default().labels("kubernetes.io/service-name=web")).await.unwrap().items;
        list.iter().map(|s| s.endpoints.len()).sum::<usize>() == 3
    })
    .await;

    // A pod change shows within a second.
    deployments
        .patch("web", &PatchParams::default(), &Patch::Merge(serde_json::json!({"spec": {"replicas": 1}})))
        .await
        .unwrap();
    let changed = Instant::now();
    eventually(Duration::from_secs(5), "1 endpoint", || async { ready_count().await == 1 }).await;
    let latency = changed.elapsed();
    println!("endpoints followed a scale-down in {latency:?}");
    assert!(latency < Duration::from_secs(1), "{latency:?}");
    let _ = stop.send(true);
    for t in tasks {
        t.abort();
    }
}
