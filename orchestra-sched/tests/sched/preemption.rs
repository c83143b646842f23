//! DefaultPreemption with PodDisruptionBudgets: the scheduler watches
//! budgets and prefers victims whose eviction violates none.

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{Api, PostParams};
use orchestra_sched::config::SchedulerConfiguration;
use orchestra_sched::testing::{NodeBuilder, PodBuilder};

use super::support::*;

#[tokio::test]
async fn preemption_spares_pods_guarded_by_a_budget() {
    let (_cluster, client) = cluster().await;
    create_nodes(
        &client,
        vec![
            NodeBuilder::new("a").cpu("2").memory("8Gi").build(),
            NodeBuilder::new("b").cpu("2").memory("8Gi").build(),
        ],
    )
    .await;
    // "db" on a has the lower priority, so without budgets it would be the
    // victim; a budget keeping one db pod available protects it (no pod is
    // Ready without a node agent, so the budget allows no disruption).
    let pdb = PodDisruptionBudget {
        metadata: ObjectMeta { name: Some("db".into()), namespace: Some("default".into()), ..Default::default() },
        spec: Some(PodDisruptionBudgetSpec {
            min_available: Some(IntOrString::Int(1)),
            selector: Some(LabelSelector {
                match_labels: Some([("app".to_owned(), "db".to_owned())].into()),
                ..Default::default()
            }),
            ..Default::default()
        }),
        status: None,
    };
    Api::<PodDisruptionBudget>::namespaced(client.clone(), "default")
        .create(&PostParams::default(), &pdb)
        .await
        .unwrap();
    create_pod(&client, PodBuilder::new("db").label("app", "db").cpu("1500m").priority(1).node("a").build()).await;
    create_pod(&client, PodBuilder::new("web").label("app", "web").cpu("1500m").priority(2).node("b").build()).await;
    let _s = start(&client, SchedulerConfiguration::default());
    create_pod(&client, PodBuilder::new("urgent").cpu("1").priority(100).build()).await;
    let p = wait_pod(&client, "default", "urgent", |p| {
        p.status.as_ref().and_then(|s| s.nominated_node_name.as_deref()).is_some()
    })
    .await;
    assert_eq!(p.status.unwrap().nominated_node_name.as_deref(), Some("b"));
    let api: Api<Pod> = Api::namespaced(client.clone(), "default");
    assert!(
        api.get_opt("web").await.unwrap().is_none_or(|p| p.metadata.deletion_timestamp.is_some()),
        "web was preempted"
    );
    assert!(api.get("db").await.unwrap().metadata.deletion_timestamp.is_none(), "db is spared");
    let _ = api.delete("web", &kube::api::DeleteParams::default().grace_period(0)).await;
    let p = wait_pod(&client, "default", "urgent", |p| node_of(p).is_some()).await;
    assert_eq!(node_of(&p), Some("b"));
}

/// Several preemptors at once, with a stand-in node agent that finishes the
/// deletion of terminating pods: each preemptor empties one node and binds
/// there, and no node is emptied twice over (a preemptor whose victims are
/// still terminating waits for them; its room is not taken by the others).
#[tokio::test]
async fn concurrent_preemptors_each_take_one_node() {
    use futures::StreamExt;
    let (_cluster, client) = cluster().await;
    let nodes: Vec<_> = (0..4).map(|i| NodeBuilder::new(&format!("n{i}")).cpu("2").memory("8Gi").build()).collect();
    create_nodes(&client, nodes).await;
    for i in 0..4 {
        for j in 0..2 {
            create_pod(
                &client,
                PodBuilder::new(&format!("low-{i}-{j}"))
                    .label("tier", "low")
                    .cpu("900m")
                    .priority(1)
                    .node(&format!("n{i}"))
                    .build(),
            )
            .await;
        }
    }
    let api: Api<Pod> = Api::namespaced(client.clone(), "default");
    let agent = {
        let api = api.clone();
        tokio::spawn(async move {
            let mut events = kube::runtime::watcher(api.clone(), Default::default()).boxed();
            while let Some(event) = events.next().await {
                if let Ok(kube::runtime::watcher::Event::Apply(p)) = event
                    && p.metadata.deletion_timestamp.is_some()
                {
                    let name = p.metadata.name.unwrap_or_default();
                    let _ = api.delete(&name, &kube::api::DeleteParams::default().grace_period(0)).await;
                }
            }
        })
    };
    let _s = start(&client, SchedulerConfiguration::default());
    for i in 0..3 {
        create_pod(&client, PodBuilder::new(&format!("high-{i}")).cpu("1500m").priority(10).build()).await;
    }
    let mut placed = Vec::new();
    for i in 0..3 {
        let p = wait_pod(&client, "default", &format!("high-{i}"), |p| node_of(p).is_some()).await;
        placed.push(node_of(&p).unwrap().to_owned());
    }
    placed.sort();
    placed.dedup();
    assert_eq!(placed.len(), 3, "one preemptor per node: {placed:?}");
    let low = api.list(&kube::api::ListParams::default().labels("tier=low")).await.unwrap();
    let survivors: Vec<_> = low.items.iter().filter(|p| p.metadata.deletion_timestamp.is_none()).collect();
    assert_eq!(survivors.len(), 2, "only the victims of three nodes went");
    assert!(survivors.iter().all(|p| !placed.contains(&node_of(p).unwrap().to_owned())));
    agent.abort();
}
