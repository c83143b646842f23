//! InterPodAffinity's namespaceSelector: the scheduler watches Namespaces,
//! and a namespace gaining the selected labels requeues the pod.

use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use kube::api::{Api, Patch, PatchParams, PostParams};
use orchestra_sched::config::SchedulerConfiguration;
use orchestra_sched::plugins::inter_pod_affinity::ERR_AFFINITY;
use orchestra_sched::testing::{NodeBuilder, PodBuilder};

use super::support::*;

#[tokio::test]
async fn namespace_selector_follows_namespace_labels() {
    let (_cluster, client) = cluster().await;
    create_nodes(
        &client,
        vec![
            NodeBuilder::new("a").cpu("4").memory("8Gi").label("zone", "a").build(),
            NodeBuilder::new("b").cpu("4").memory("8Gi").label("zone", "b").build(),
        ],
    )
    .await;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let ns = Namespace {
        metadata: ObjectMeta {
            name: Some("shop".into()),
            labels: Some([("team".to_owned(), "red".to_owned())].into()),
            ..Default::default()
        },
        ..Default::default()
    };
    namespaces.create(&PostParams::default(), &ns).await.unwrap();
    create_pod(&client, PodBuilder::new("web").namespace("shop").label("app", "web").node("b").build()).await;
    let _s = start(&client, SchedulerConfiguration::default());
    // Affinity to app=web pods in namespaces labelled team=blue: none yet.
    let pod = PodBuilder::new("client").pod_affinity(&[("app", "web")], "zone").with(|p: &mut Pod| {
        let a = p.spec.as_mut().unwrap().affinity.as_mut().unwrap();
        let t =
            &mut a.pod_affinity.as_mut().unwrap().required_during_scheduling_ignored_during_execution.as_mut().unwrap()
                [0];
        t.namespace_selector = Some(LabelSelector {
            match_labels: Some([("team".to_owned(), "blue".to_owned())].into()),
            ..Default::default()
        });
    });
    create_pod(&client, pod.build()).await;
    let p = wait_pod(&client, "default", "client", |p| {
        p.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| c.iter().any(|c| c.type_ == "PodScheduled" && c.status == "False"))
    })
    .await;
    let msg =
        p.status.unwrap().conditions.unwrap().into_iter().find(|c| c.type_ == "PodScheduled").unwrap().message.unwrap();
    assert!(msg.starts_with(&format!("0/2 nodes are available: 2 {ERR_AFFINITY}.")), "{msg}");
    // The namespace joins team blue: the pod is requeued and joins web's zone.
    let patch = serde_json::json!({"metadata": {"labels": {"team": "blue"}}});
    namespaces.patch("shop", &PatchParams::default(), &Patch::Merge(patch)).await.unwrap();
    let p = wait_pod(&client, "default", "client", |p| node_of(p).is_some()).await;
    assert_eq!(node_of(&p), Some("b"));
}
