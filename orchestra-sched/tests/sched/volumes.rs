//! VolumeBinding, VolumeZone and VolumeRestrictions against the API server:
//! claims bound through the API, provisioning asked for and waited on,
//! pods requeued when claims and volumes arrive.

use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use orchestra_sched::config::SchedulerConfiguration;
use orchestra_sched::plugins::{volume_binding, volume_restrictions, volume_zone};
use orchestra_sched::testing::{NodeBuilder, PodBuilder, PvBuilder, PvcBuilder, storage_class};

use super::support::*;

async fn create_pvc(client: &kube::Client, mut pvc: PersistentVolumeClaim) {
    pvc.metadata.uid = None;
    Api::<PersistentVolumeClaim>::namespaced(client.clone(), "default")
        .create(&PostParams::default(), &pvc)
        .await
        .expect("claim created");
}

async fn create_pv(client: &kube::Client, pv: PersistentVolume) {
    Api::<PersistentVolume>::all(client.clone()).create(&PostParams::default(), &pv).await.expect("volume created");
}

async fn create_class(client: &kube::Client, sc: StorageClass) {
    Api::<StorageClass>::all(client.clone()).create(&PostParams::default(), &sc).await.expect("class created");
}

fn zone_nodes() -> Vec<k8s_openapi::api::core::v1::Node> {
    ["a", "b"]
        .iter()
        .map(|z| {
            NodeBuilder::new(&format!("node-{z}"))
                .cpu("4")
                .memory("8Gi")
                .label("topology.kubernetes.io/zone", z)
                .build()
        })
        .collect()
}

/// The PodScheduled=False message once it contains `part`.
async fn unschedulable_message(client: &kube::Client, name: &str, part: &str) -> String {
    let p = wait_pod(client, "default", name, |p| {
        p.status.as_ref().and_then(|s| s.conditions.as_ref()).is_some_and(|c| {
            c.iter().any(|c| {
                c.type_ == "PodScheduled"
                    && c.status == "False"
                    && c.message.as_deref().is_some_and(|m| m.contains(part))
            })
        })
    })
    .await;
    let c = p.status.unwrap().conditions.unwrap();
    c.into_iter().find(|c| c.type_ == "PodScheduled").unwrap().message.unwrap()
}

#[tokio::test]
async fn missing_claim_then_local_volume_binds_on_its_node() {
    let (_cluster, client) = cluster().await;
    create_nodes(&client, zone_nodes()).await;
    let _s = start(&client, SchedulerConfiguration::default());
    create_pod(&client, PodBuilder::new("db").cpu("100m").pvc("data").build()).await;
    let msg = unschedulable_message(&client, "db", "not found").await;
    assert!(msg.starts_with("0/2 nodes are available: persistentvolumeclaim \"data\" not found."), "{msg}");
    // A local volume on node-b and a WaitForFirstConsumer claim: the claim's
    // arrival requeues the pod, which goes where the volume is.
    create_class(&client, storage_class("local", "WaitForFirstConsumer", volume_binding::NO_PROVISIONER)).await;
    create_pv(
        &client,
        PvBuilder::new("small-a")
            .class("local")
            .capacity("1Gi")
            .node_affinity("kubernetes.io/hostname", &["node-a"])
            .build(),
    )
    .await;
    create_pv(
        &client,
        PvBuilder::new("big-b")
            .class("local")
            .capacity("10Gi")
            .node_affinity("kubernetes.io/hostname", &["node-b"])
            .build(),
    )
    .await;
    create_pvc(&client, PvcBuilder::new("data").class("local").storage("5Gi").build()).await;
    let p = wait_pod(&client, "default", "db", |p| node_of(p).is_some()).await;
    assert_eq!(node_of(&p), Some("node-b"));
    let pvc = Api::<PersistentVolumeClaim>::namespaced(client.clone(), "default").get("data").await.unwrap();
    assert_eq!(pvc.spec.unwrap().volume_name.as_deref(), Some("big-b"));
    assert_eq!(
        pvc.metadata.annotations.unwrap().get(volume_binding::ANN_BIND_COMPLETED).map(String::as_str),
        Some("yes")
    );
    let pv = Api::<PersistentVolume>::all(client.clone()).get("big-b").await.unwrap();
    let claim_ref = pv.spec.unwrap().claim_ref.unwrap();
    assert_eq!((claim_ref.namespace.as_deref(), claim_ref.name.as_deref()), (Some("default"), Some("data")));
    // A second pod on the same (now bound) claim follows the volume.
    create_pod(&client, PodBuilder::new("db2").cpu("100m").pvc("data").build()).await;
    let p = wait_pod(&client, "default", "db2", |p| node_of(p).is_some()).await;
    assert_eq!(node_of(&p), Some("node-b"));
}

#[tokio::test]
async fn dynamic_provisioning_selects_the_node_and_waits_for_the_volume() {
    let (_cluster, client) = cluster().await;
    create_nodes(&client, zone_nodes()).await;
    create_class(&client, storage_class("dyn", "WaitForFirstConsumer", "example.com/dyn")).await;
    // A fake external provisioner: on a claim with a selected node, creates
    // a volume on that node and binds the claim to it.
    let provisioner = {
        let client = client.clone();
        tokio::spawn(async move {
            let api: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), "default");
            let mut events = watcher(api.clone(), watcher::Config::default()).boxed();
            while let Some(Ok(ev)) = events.next().await {
                let (watcher::Event::Apply(pvc) | watcher::Event::InitApply(pvc)) = ev else { continue };
                let Some(node) =
                    pvc.metadata.annotations.as_ref().and_then(|a| a.get(volume_binding::ANN_SELECTED_NODE)).cloned()
                else {
                    continue;
                };
                if pvc.spec.as_ref().and_then(|s| s.volume_name.as_ref()).is_some() {
                    continue;
                }
                let name = format!("pvc-{}", pvc.metadata.name.clone().unwrap());
                tokio::time::sleep(Duration::from_millis(300)).await;
                let pv = PvBuilder::new(&name)
                    .class("dyn")
                    .node_affinity("kubernetes.io/hostname", &[&node])
                    .claim(pvc.metadata.name.as_deref().unwrap())
                    .build();
                let _ = Api::<PersistentVolume>::all(client.clone()).create(&PostParams::default(), &pv).await;
                let patch = serde_json::json!({"spec": {"volumeName": name}});
                api.patch(pvc.metadata.name.as_deref().unwrap(), &PatchParams::default(), &Patch::Merge(patch))
                    .await
                    .unwrap();
            }
        })
    };
    let _s = start(&client, SchedulerConfiguration::default());
    create_pvc(&client, PvcBuilder::new("scratch").class("dyn").build()).await;
    create_pod(
        &client,
        PodBuilder::new("job").cpu("100m").node_selector("topology.kubernetes.io/zone", "a").pvc("scratch").build(),
    )
    .await;
    let p = wait_pod(&client, "default", "job", |p| node_of(p).is_some()).await;
    assert_eq!(node_of(&p), Some("node-a"));
    let pvc = Api::<PersistentVolumeClaim>::namespaced(client.clone(), "default").get("scratch").await.unwrap();
    assert_eq!(
        pvc.metadata.annotations.unwrap().get(volume_binding::ANN_SELECTED_NODE).map(String::as_str),
        Some("node-a")
    );
    assert_eq!(pvc.spec.unwrap().volume_name.as_deref(), Some("pvc-scratch"), "bound before the pod was");
    provisioner.abort();
}

#[tokio::test]
async fn immediate_zone_and_read_write_once_pod() {
    let (_cluster, client) = cluster().await;
    create_nodes(&client, zone_nodes()).await;
    create_class(&client, storage_class("now", "Immediate", "example.com/now")).await;
    let _s = start(&client, SchedulerConfiguration::default());
    // An unbound Immediate claim.
    create_pvc(&client, PvcBuilder::new("later").class("now").build()).await;
    create_pod(&client, PodBuilder::new("waits").pvc("later").build()).await;
    let msg = unschedulable_message(&client, "waits", volume_binding::ERR_UNBOUND_IMMEDIATE).await;
    assert!(msg.starts_with(&format!("0/2 nodes are available: {}.", volume_binding::ERR_UNBOUND_IMMEDIATE)), "{msg}");
    // A claim bound to a volume in zone b: VolumeZone sends the pod there,
    // even when it prefers zone a.
    create_pv(&client, PvBuilder::new("zonal").label("topology.kubernetes.io/zone", "b").claim("zonal").build()).await;
    create_pvc(&client, PvcBuilder::new("zonal").volume("zonal").build()).await;
    create_pod(
        &client,
        PodBuilder::new("z")
            .preferred_node_affinity(100, "topology.kubernetes.io/zone", "In", &["a"])
            .pvc("zonal")
            .build(),
    )
    .await;
    let p = wait_pod(&client, "default", "z", |p| node_of(p).is_some()).await;
    assert_eq!(node_of(&p), Some("node-b"));
    // Required in zone a: VolumeZone rejects node-a.
    create_pod(&client, PodBuilder::new("z-a").node_selector("topology.kubernetes.io/zone", "a").pvc("zonal").build())
        .await;
    let msg = unschedulable_message(&client, "z-a", volume_zone::ERR_REASON_CONFLICT).await;
    assert!(msg.starts_with("0/2 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, 1 node(s) had no available volume zone."), "{msg}");
    // A ReadWriteOncePod claim: one user at a time in the whole cluster.
    create_pv(&client, PvBuilder::new("solo").access_modes(&["ReadWriteOncePod"]).claim("solo").build()).await;
    create_pvc(&client, PvcBuilder::new("solo").volume("solo").access_modes(&["ReadWriteOncePod"]).build()).await;
    create_pod(&client, PodBuilder::new("first").pvc("solo").build()).await;
    wait_pod(&client, "default", "first", |p| node_of(p).is_some()).await;
    create_pod(&client, PodBuilder::new("second").pvc("solo").build()).await;
    let msg = unschedulable_message(&client, "second", volume_restrictions::ERR_REASON_RWOP_CONFLICT).await;
    assert!(
        msg.starts_with(&format!("0/2 nodes are available: 2 {}.", volume_restrictions::ERR_REASON_RWOP_CONFLICT)),
        "{msg}"
    );
    // Once "first" is gone, "second" is requeued and scheduled.
    Api::<Pod>::namespaced(client.clone(), "default")
        .delete("first", &kube::api::DeleteParams::default().grace_period(0))
        .await
        .unwrap();
    wait_pod(&client, "default", "second", |p| node_of(p).is_some()).await;
}
