//! Pods bound, unschedulable pods reported, profiles.

use k8s_openapi::api::core::v1::Event;
use kube::api::{Api, ListParams};
use orchestra_sched::config::{ProfileConfig, SchedulerConfiguration};
use orchestra_sched::testing::{NodeBuilder, PodBuilder};

use super::support::*;

#[tokio::test]
async fn pods_are_bound_and_spread() {
    let (_cluster, client) = cluster().await;
    create_nodes(&client, (0..3).map(|i| NodeBuilder::new(&format!("n{i}")).cpu("4").memory("8Gi").build()).collect())
        .await;
    let _s = start(&client, SchedulerConfiguration::default());
    for i in 0..6 {
        create_pod(&client, PodBuilder::new(&format!("p{i}")).cpu("1").memory("1Gi").build()).await;
    }
    let mut per_node = std::collections::HashMap::new();
    for i in 0..6 {
        let p = wait_pod(&client, "default", &format!("p{i}"), |p| node_of(p).is_some()).await;
        *per_node.entry(node_of(&p).unwrap().to_owned()).or_insert(0) += 1;
    }
    assert_eq!(per_node.values().copied().collect::<Vec<_>>(), [2, 2, 2], "{per_node:?}");
    // A Scheduled event for each.
    let events: Api<Event> = Api::namespaced(client.clone(), "default");
    for _ in 0..100 {
        let n = events
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .iter()
            .filter(|e| e.reason.as_deref() == Some("Scheduled"))
            .count();
        if n == 6 {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!("Scheduled events missing");
}

#[tokio::test]
async fn unschedulable_pod_gets_condition_and_event_then_fits_when_a_node_comes() {
    let (_cluster, client) = cluster().await;
    create_nodes(
        &client,
        vec![
            NodeBuilder::new("small").cpu("1").memory("1Gi").build(),
            NodeBuilder::new("gpu").cpu("8").memory("8Gi").taint("dedicated", "gpu", "NoSchedule").build(),
        ],
    )
    .await;
    let _s = start(&client, SchedulerConfiguration::default());
    create_pod(&client, PodBuilder::new("big").cpu("2").build()).await;
    let want = "0/2 nodes are available: 1 Insufficient cpu, 1 node(s) had untolerated taint {dedicated: gpu}. \
                preemption: 0/2 nodes are available: 1 No preemption victims found for incoming pod, \
                1 Preemption is not helpful for scheduling.";
    let p = wait_pod(&client, "default", "big", |p| {
        p.status.as_ref().and_then(|s| s.conditions.as_ref()).is_some_and(|c| {
            c.iter().any(|c| {
                c.type_ == "PodScheduled" && c.status == "False" && c.reason.as_deref() == Some("Unschedulable")
            })
        })
    })
    .await;
    let cond = p.status.unwrap().conditions.unwrap().into_iter().find(|c| c.type_ == "PodScheduled").unwrap();
    assert_eq!(cond.message.as_deref(), Some(want));
    let events: Api<Event> = Api::namespaced(client.clone(), "default");
    let lp = ListParams::default().fields("involvedObject.name=big,involvedObject.kind=Pod");
    let mut found = false;
    for _ in 0..100 {
        if events.list(&lp).await.unwrap().items.iter().any(|e| {
            e.reason.as_deref() == Some("FailedScheduling")
                && e.message.as_deref() == Some(want)
                && e.type_.as_deref() == Some("Warning")
        }) {
            found = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(found, "FailedScheduling event");
    // A big node arrives: the pod is moved back and bound.
    create_nodes(&client, vec![NodeBuilder::new("big").cpu("4").memory("4Gi").build()]).await;
    let p = wait_pod(&client, "default", "big", |p| node_of(p).is_some()).await;
    assert_eq!(node_of(&p), Some("big"));
}

#[tokio::test]
async fn two_profiles_and_foreign_scheduler_names() {
    let (_cluster, client) = cluster().await;
    create_nodes(
        &client,
        vec![
            NodeBuilder::new("a").cpu("4").memory("8Gi").build(),
            NodeBuilder::new("b").cpu("4").memory("8Gi").build(),
        ],
    )
    .await;
    let packing = ProfileConfig::named("bin-packing")
        .args("NodeResourcesFit", serde_json::json!({"scoringStrategy": {"type": "MostAllocated"}}))
        .disable("NodeResourcesBalancedAllocation");
    let config = SchedulerConfiguration::default().with_profiles(vec![ProfileConfig::default(), packing]);
    let _s = start(&client, config);
    for i in 0..4 {
        create_pod(
            &client,
            PodBuilder::new(&format!("pack{i}")).scheduler("bin-packing").cpu("500m").memory("256Mi").build(),
        )
        .await;
        wait_pod(&client, "default", &format!("pack{i}"), |p| node_of(p).is_some()).await;
    }
    let api: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(client.clone(), "default");
    let nodes: std::collections::HashSet<String> = api
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .filter_map(|p| node_of(p).map(String::from))
        .collect();
    assert_eq!(nodes.len(), 1, "MostAllocated packs onto one node: {nodes:?}");
    create_pod(&client, PodBuilder::new("other").scheduler("someone-else").build()).await;
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    assert!(node_of(&api.get("other").await.unwrap()).is_none());
}

#[tokio::test]
async fn preemption_deletes_victims_and_nominates_the_node() {
    let (_cluster, client) = cluster().await;
    create_nodes(&client, vec![NodeBuilder::new("n").cpu("2").memory("8Gi").build()]).await;
    let _s = start(&client, SchedulerConfiguration::default());
    create_pod(&client, PodBuilder::new("low").cpu("1500m").priority(1).build()).await;
    wait_pod(&client, "default", "low", |p| node_of(p).is_some()).await;
    create_pod(&client, PodBuilder::new("high").cpu("1").priority(100).build()).await;
    let api: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(client.clone(), "default");
    let mut nominated = false;
    for _ in 0..200 {
        let h = api.get("high").await.unwrap();
        if h.status.as_ref().and_then(|s| s.nominated_node_name.as_deref()) == Some("n") || node_of(&h) == Some("n") {
            nominated = true;
        }
        if node_of(&h) == Some("n") {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(nominated, "high is nominated to n");
    assert!(
        api.get_opt("low").await.unwrap().is_none_or(|p| p.metadata.deletion_timestamp.is_some()),
        "low was preempted"
    );
    // No kubelet here: finish the graceful deletion as a node agent would.
    let _ = api.delete("low", &kube::api::DeleteParams::default().grace_period(0)).await;
    let p = wait_pod(&client, "default", "high", |p| node_of(p).is_some()).await;
    assert_eq!(node_of(&p), Some("n"));
}
