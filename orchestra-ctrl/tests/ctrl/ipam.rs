//! Node IPAM: allocations survive a restart, a deleted node's block is
//! reused, and a full range is reported without handing a block out twice.

use std::collections::HashSet;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::events::v1::Event;
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use orchestra::testing::TestCluster;
use orchestra_ctrl::controllers::node_ipam::{self, CIDR_NOT_AVAILABLE};
use orchestra_ctrl::informer::SharedInformerFactory;
use tokio::sync::watch;

use super::support::eventually;

async fn create_node(client: &Client, name: &str, pod_cidr: Option<&str>) {
    let nodes: Api<Node> = Api::all(client.clone());
    let node: Node = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name},
        "spec": {"podCIDR": pod_cidr, "podCIDRs": pod_cidr.map(|c| vec![c])},
    }))
    .unwrap();
    nodes.create(&PostParams::default(), &node).await.unwrap();
}

/// Every node's name and pod CIDR.
async fn cidrs(client: &Client) -> Vec<(String, Option<String>)> {
    let nodes: Api<Node> = Api::all(client.clone());
    let mut out: Vec<_> = nodes
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|n| (n.metadata.name.unwrap(), n.spec.and_then(|s| s.pod_cidr)))
        .collect();
    out.sort();
    out
}

/// Whether every node has a pod CIDR and no two share one.
fn all_distinct(cidrs: &[(String, Option<String>)]) -> bool {
    let set: HashSet<&String> = cidrs.iter().filter_map(|(_, c)| c.as_ref()).collect();
    set.len() == cidrs.len()
}

/// Runs the IPAM controller on its own informers until the returned sender
/// says stop (or is dropped).
fn start(client: &Client, cluster: &'static str, mask: u8) -> (watch::Sender<bool>, tokio::task::JoinHandle<()>) {
    let (stop, mut rx) = watch::channel(false);
    let factory = SharedInformerFactory::new(client.clone());
    let task = tokio::spawn(async move {
        let stopped = async move {
            let _ = rx.wait_for(|s| *s).await;
        };
        node_ipam::run(factory.clone(), cluster, mask, stopped).await.unwrap();
        factory.shutdown();
    });
    (stop, task)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_restarted_allocator_never_hands_out_a_block_twice() {
    let cluster = TestCluster::start().await;
    let client = cluster.client();
    // A node that came with a pod CIDR of its own (kubelet --pod-cidr).
    create_node(&client, "preset", Some("10.244.1.0/24")).await;
    let (stop, task) = start(&client, "10.244.0.0/16", 24);
    create_node(&client, "a", None).await;
    create_node(&client, "b", None).await;
    eventually(Duration::from_secs(30), "a and b allocated", || async { all_distinct(&cidrs(&client).await) }).await;
    let before = cidrs(&client).await;
    assert!(!before.iter().any(|(n, c)| n != "preset" && c.as_deref() == Some("10.244.1.0/24")), "{before:?}");

    let _ = stop.send(true);
    task.await.unwrap();
    create_node(&client, "c", None).await;
    create_node(&client, "d", None).await;
    let (stop, task) = start(&client, "10.244.0.0/16", 24);
    eventually(Duration::from_secs(30), "c and d allocated, all distinct", || async {
        all_distinct(&cidrs(&client).await)
    })
    .await;
    let after = cidrs(&client).await;
    assert_eq!(after.len(), 5);
    for (name, cidr) in &before {
        assert!(after.contains(&(name.clone(), cidr.clone())), "{name} kept its block: {after:?}");
    }
    let _ = stop.send(true);
    task.await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_full_range_is_reported_and_a_deleted_nodes_block_is_reused() {
    let cluster = TestCluster::start().await;
    let client = cluster.client();
    // Two blocks only.
    let (stop, task) = start(&client, "10.0.0.0/24", 25);
    create_node(&client, "n1", None).await;
    create_node(&client, "n2", None).await;
    eventually(Duration::from_secs(30), "n1 and n2 allocated", || async { all_distinct(&cidrs(&client).await) }).await;
    create_node(&client, "n3", None).await;
    let events: Api<Event> = Api::namespaced(client.clone(), "default");
    eventually(Duration::from_secs(30), "a CIDRNotAvailable event for n3", || async {
        events.list(&ListParams::default()).await.unwrap().items.iter().any(|e| {
            e.reason.as_deref() == Some(CIDR_NOT_AVAILABLE)
                && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("n3")
                && e.note.as_deref().is_some_and(|n| n.contains("10.0.0.0/24"))
        })
    })
    .await;
    let full = cidrs(&client).await;
    assert_eq!(full[2], ("n3".to_string(), None), "nothing handed out twice: {full:?}");
    assert_ne!(full[0].1, full[1].1);
    let freed = full[0].1.clone().unwrap();

    let nodes: Api<Node> = Api::all(client.clone());
    nodes.delete("n1", &DeleteParams::default()).await.unwrap();
    eventually(Duration::from_secs(30), "n3 gets n1's block", || async {
        cidrs(&client).await.iter().any(|(n, c)| n == "n3" && c.as_deref() == Some(freed.as_str()))
    })
    .await;
    let _ = stop.send(true);
    task.await.unwrap();
}
