//! DefaultPreemption with PodDisruptionBudgets: the scheduler watches
//! budgets and prefers victims whose eviction violates none.

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{Api, PostParams};
use orchestra_sched::SchedulerConfiguration;
use orchestra_sched::testing::{NodeBuilder, PodBuilder};

use super::support::*;

#[tokio::test]
async fn preemption_spares_pods_guarded_by_a_budget() {
    let (_server, client) = server().await;
    create_nodes(&client, vec![NodeBuilder::new("a").cpu("2").memory("8Gi").build(), NodeBuilder::new("b").cpu("2").memory("8Gi").build()]).await;
    // "db" on a has the lower priority, so without budgets it would be the
    // victim; a budget keeping one db pod available protects it (no pod is
    // Ready without a node agent, so the budget allows no disruption).
    let pdb = PodDisruptionBudget {
        metadata: ObjectMeta { name: Some("db".into()), namespace: Some("default".into()), ..Default::default() },
        spec: Some(PodDisruptionBudgetSpec {
            min_available: Some(IntOrString::Int(1)),
            selector: Some(LabelSelector { match_labels: Some([("app".to_owned(), "db".to_owned())].into()), ..Default::default() }),
            ..Default::default()
        }),
        status: None,
    };
    Api::<PodDisruptionBudget>::namespaced(client.clone(), "default").create(&PostParams::default(), &pdb).await.unwrap();
    create_pod(&client, PodBuilder::new("db").label("app", "db").cpu("1500m").priority(1).node("a").build()).await;
    create_pod(&client, PodBuilder::new("web").label("app", "web").cpu("1500m").priority(2).node("b").build()).await;
    let _s = start(&client, SchedulerConfiguration::default());
    create_pod(&client, PodBuilder::new("urgent").cpu("1").priority(100).build()).await;
    let p = wait_pod(&client, "default", "urgent", |p| p.status.as_ref().and_then(|s| s.nominated_node_name.as_deref()).is_some()).await;
    assert_eq!(p.status.unwrap().nominated_node_name.as_deref(), Some("b"));
    let api: Api<Pod> = Api::namespaced(client.clone(), "default");
    assert!(api.get_opt("web").await.unwrap().is_none_or(|p| p.metadata.deletion_timestamp.is_some()), "web was preempted");
    assert!(api.get("db").await.unwrap().metadata.deletion_timestamp.is_none(), "db is spared");
    let _ = api.delete("web", &kube::api::DeleteParams::default().grace_period(0)).await;
    let p = wait_pod(&client, "default", "urgent", |p| node_of(p).is_some()).await;
    assert_eq!(node_of(&p), Some("b"));
}
