//! The ResourceQuota controller in a cluster: `status.hard` and
//! `status.used` follow the objects of the namespace as workloads scale and
//! objects go away.

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, ResourceQuota};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use orchestra::testing::TestCluster;
use orchestra_ctrl::controllers::ControllerManagerConfig;
use serde_json::{Value, json};

use super::support::{eventually_explained, fake_node_agent};

async fn status_is(quotas: &Api<ResourceQuota>, expected: Value) {
    eventually_explained(Duration::from_secs(10), || {
        let expected = expected.clone();
        async move {
            let quota = quotas.get("q").await.map_err(|e| e.to_string())?;
            let status = serde_json::to_value(quota.status).unwrap();
            if status == expected { Ok(()) } else { Err(format!("status {status}, not {expected}")) }
        }
    })
    .await;
}

#[tokio::test]
async fn usage_follows_the_namespace() {
    let controllers = ControllerManagerConfig::default()
        .with_controllers(["resourcequota", "deployment", "replicaset"])
        .with_workers(2);
    let cluster = TestCluster::start_with(TestCluster::builder().controllers(controllers)).await;
    let client = cluster.client();
    let agent = tokio::spawn(fake_node_agent(client.clone(), Duration::from_millis(10)));
    let namespace: Namespace = serde_json::from_value(json!({"metadata": {"name": "quota"}})).unwrap();
    Api::<Namespace>::all(client.clone()).create(&PostParams::default(), &namespace).await.unwrap();
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), "quota");
    for name in ["one", "two"] {
        let config_map = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
        config_maps.create(&PostParams::default(), &config_map).await.unwrap();
    }
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "quota");
    let deployment = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "app", "image": "web", "resources": {"requests": {"cpu": "100m"}}}]},
            },
        },
    }))
    .unwrap();
    deployments.create(&PostParams::default(), &deployment).await.unwrap();
    // Without the admission plugin nothing charges a quota at creation: the
    // quota made after its objects counts them on its first sync.
    pods_are(&client, 2).await;
    let hard = json!({
        "pods": "10", "requests.cpu": "1", "configmaps": "5",
        "count/deployments.apps": "2", "count/replicasets.apps": "2",
    });
    let quotas: Api<ResourceQuota> = Api::namespaced(client.clone(), "quota");
    let quota = serde_json::from_value(json!({"metadata": {"name": "q"}, "spec": {"hard": hard}})).unwrap();
    quotas.create(&PostParams::default(), &quota).await.unwrap();
    let used = |pods: &str, cpu: &str, config_maps: &str| {
        json!({"hard": hard, "used": {
            "pods": pods, "requests.cpu": cpu, "configmaps": config_maps,
            "count/deployments.apps": "1", "count/replicasets.apps": "1",
        }})
    };
    status_is(&quotas, used("2", "200m", "2")).await;
    // Scaling down deletes pods: what they used is given back.
    let scale = json!({"spec": {"replicas": 0}});
    deployments.patch("web", &PatchParams::default(), &Patch::Merge(&scale)).await.unwrap();
    status_is(&quotas, used("0", "0", "2")).await;
    config_maps.delete("one", &DeleteParams::default()).await.unwrap();
    status_is(&quotas, used("0", "0", "1")).await;
    agent.abort();
}

/// Waits until namespace `quota` holds `count` pods.
async fn pods_are(client: &kube::Client, count: usize) {
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(client.clone(), "quota");
    eventually_explained(Duration::from_secs(10), || {
        let pods = pods.clone();
        async move {
            let listed = pods.list(&Default::default()).await.map_err(|e| e.to_string())?;
            if listed.items.len() == count { Ok(()) } else { Err(format!("{} pods", listed.items.len())) }
        }
    })
    .await;
}
