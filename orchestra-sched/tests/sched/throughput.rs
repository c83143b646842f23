//! A quick SchedulingBasic-shaped throughput check on MemStore (ignored by
//! default; the real benchmark is `benches/benches/scheduler.rs`).

use std::time::Instant;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, PostParams};
use orchestra_sched::config::SchedulerConfiguration;
use orchestra_sched::testing::{NodeBuilder, PodBuilder};

use super::support::*;

async fn create<T>(api: &Api<T>, objs: Vec<T>)
where
    T: Clone + serde::Serialize + serde::de::DeserializeOwned + std::fmt::Debug + kube::Resource,
{
    futures::stream::iter(objs)
        .map(|o| {
            let api = api.clone();
            async move {
                let mut o = o;
                o.meta_mut().uid = None;
                api.create(&PostParams::default(), &o).await.unwrap();
            }
        })
        .buffer_unordered(64)
        .collect::<Vec<_>>()
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore]
async fn scheduling_basic_throughput() {
    let nodes: usize = std::env::var("NODES").ok().and_then(|v| v.parse().ok()).unwrap_or(5000);
    let pods: usize = std::env::var("PODS").ok().and_then(|v| v.parse().ok()).unwrap_or(10_000);
    let (_cluster, client) = cluster().await;
    let napi: Api<Node> = Api::all(client.clone());
    create(&napi, (0..nodes).map(|i| NodeBuilder::new(&format!("node-{i}")).cpu("4").memory("32Gi").build()).collect())
        .await;
    let _s = start(&client, SchedulerConfiguration::default());
    let papi: Api<Pod> = Api::namespaced(client.clone(), "default");
    let start = Instant::now();
    create(&papi, (0..pods).map(|i| PodBuilder::new(&format!("p{i}")).cpu("100m").memory("500Mi").build()).collect())
        .await;
    let created = start.elapsed();
    loop {
        let list = papi.list(&Default::default()).await.unwrap();
        let bound = list.items.iter().filter(|p| node_of(p).is_some()).count();
        if bound == pods {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let t = start.elapsed().as_secs_f64();
    println!(
        "sched quick nodes={nodes} pods={pods} created_in={:.2}s pods_per_s={:.0}",
        created.as_secs_f64(),
        pods as f64 / t
    );
}
