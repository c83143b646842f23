//! Controller throughput: the Deployment and ReplicaSet controllers of
//! orchestra-ctrl against an in-process API server on a `MemStore`.
//!
//! `cargo bench -p orchestra-benches --bench controllers [-- --quick]`
//!
//! Creates D Deployments of R replicas (default 1000 × 10) and measures the
//! time from the first create to every ReplicaSet reporting `status.replicas
//! == R` (so D × R pods created through the API). Prints the work queue and
//! informer statistics, the process RSS and its growth per cached object
//! (an upper bound: it includes the API server's store), then
//! `ctrl deployments=D pods=P seconds=S objects_per_s=X rss_mb=M`.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PostParams};
use orchestra_benches::args::Args;
use orchestra_benches::sys::rss_mb;
use orchestra_core::server::ApiServer;
use orchestra_ctrl::informer::SharedInformerFactory;
use orchestra_ctrl::workqueue::{RateLimit, WorkQueue};
use orchestra_store::MemStore;
use prometheus_client::encoding::text::encode;
use prometheus_client::registry::Registry;

const USAGE: &str = "\
usage: cargo bench -p orchestra-benches --bench controllers [-- OPTIONS]

  --quick              100 Deployments × 10 replicas
  --deployments N      Deployments (default 1000)
  --replicas N         replicas each (default 10)
  --workers N          workers per controller (default 16)
  --creators N         concurrent creating clients (default 32)
  --timeout SECONDS    give up after (default 600)";

fn deployment(i: usize, replicas: i32) -> Deployment {
    let name = format!("d{i}");
    serde_json::from_value(serde_json::json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "c", "image": "nginx:1.27"}]}
            }
        }
    }))
    .expect("valid deployment")
}

async fn run(args: Args) -> Result<(), String> {
    let quick = args.flag("quick");
    let deployments: usize = args.get("deployments", if quick { 100 } else { 1000 })?;
    let replicas: i32 = args.get("replicas", 10)?;
    let workers: usize = args.get("workers", 16)?;
    let creators: usize = args.get("creators", 32)?;
    let timeout: u64 = args.get("timeout", 600)?;
    args.finish()?;

    let rss_start = rss_mb();
    let server = ApiServer::new(Arc::new(MemStore::new())).await.map_err(|e| format!("server: {e}"))?;
    let client = orchestra_core::client::in_process(&server, "default");
    let factory = SharedInformerFactory::new(client.clone());
    let rs_queue = WorkQueue::new(RateLimit::default());
    let d_queue = WorkQueue::new(RateLimit::default());
    let mut registry = Registry::default();
    rs_queue.metrics().register(&mut registry, "replicaset");
    d_queue.metrics().register(&mut registry, "deployment");
    let (stop, rx) = tokio::sync::watch::channel(false);
    let stopped = |rx: &tokio::sync::watch::Receiver<bool>| {
        let mut rx = rx.clone();
        async move {
            let _ = rx.wait_for(|s| *s).await;
        }
    };
    let rs_task = tokio::spawn(orchestra_ctrl::controllers::replicaset::run_with_queue(
        factory.clone(),
        workers,
        rs_queue.clone(),
        stopped(&rx),
    ));
    let d_task = tokio::spawn(orchestra_ctrl::controllers::deployment::run_with_queue(
        factory.clone(),
        workers,
        d_queue.clone(),
        stopped(&rx),
    ));
    let sets = factory.informer::<ReplicaSet>();
    let pods = factory.informer::<Pod>();
    let deploys = factory.informer::<Deployment>();
    sets.wait_synced().await;
    pods.wait_synced().await;
    deploys.wait_synced().await;

    println!(
        "# ctrl: {deployments} deployments x {replicas} replicas, {workers} workers per controller, {} CPUs",
        orchestra_benches::sys::nproc()
    );
    let started = Instant::now();
    let api: Api<Deployment> = Api::namespaced(client.clone(), "default");
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut handles = Vec::new();
    for _ in 0..creators {
        let (api, next) = (api.clone(), next.clone());
        handles.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if i >= deployments {
                    break;
                }
                api.create(&PostParams::default(), &deployment(i, replicas)).await.expect("create deployment");
            }
        }));
    }
    for h in handles {
        h.await.map_err(|e| e.to_string())?;
    }
    let created = started.elapsed();
    let deadline = started + Duration::from_secs(timeout);
    loop {
        let done = sets.list().iter().filter(|rs| rs.status.as_ref().is_some_and(|s| s.replicas == replicas)).count();
        if done >= deployments {
            break;
        }
        if Instant::now() > deadline {
            return Err(format!("timed out: {done}/{deployments} ReplicaSets ready"));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let seconds = started.elapsed().as_secs_f64();
    let pod_count = pods.len();
    let objects = pod_count + sets.len() + deploys.len();
    let rss_end = rss_mb();
    println!("# deployments created in {:.2}s", created.as_secs_f64());
    for (kind, stats, len) in [
        ("pods", pods.stats(), pods.len()),
        ("replicasets", sets.stats(), sets.len()),
        ("deployments", deploys.stats(), deploys.len()),
    ] {
        println!(
            "# informer {kind}: cached={len} lists={} watches={} events={} bookmarks={} gone={}",
            stats.lists, stats.watches, stats.events, stats.bookmarks, stats.gone
        );
    }
    for (name, q) in [("replicaset", &rs_queue), ("deployment", &d_queue)] {
        let m = q.metrics();
        println!("# queue {name}: adds={} retries={} depth={}", m.adds.get(), m.retries.get(), m.depth.get());
    }
    let mut text = String::new();
    encode(&mut text, &registry).map_err(|e| e.to_string())?;
    for line in text.lines().filter(|l| l.contains("_sum") || l.contains("_count")) {
        println!("#   {line}");
    }
    println!(
        "# rss start={rss_start:.1}MB end={rss_end:.1}MB; growth per cached object (server store included) = {:.2} KB",
        (rss_end - rss_start) * 1024.0 / objects.max(1) as f64
    );
    println!(
        "ctrl deployments={deployments} pods={pod_count} seconds={seconds:.2} objects_per_s={:.0} rss_mb={rss_end:.0}",
        objects as f64 / seconds
    );
    let _ = stop.send(true);
    let _ = tokio::time::timeout(Duration::from_secs(10), async {
        let _ = rs_task.await;
        let _ = d_task.await;
    })
    .await;
    Ok(())
}

fn main() -> ExitCode {
    let args = match orchestra_benches::harness::parse_args(&["quick", "help"], USAGE) {
        Ok(args) => args,
        Err(code) => return code,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    match runtime.block_on(run(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ctrl: {e}");
            ExitCode::FAILURE
        }
    }
}
