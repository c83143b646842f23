//! `kubectl describe pod` shows the scheduler's condition and events.

use orchestra_sched::config::SchedulerConfiguration;
use orchestra_sched::testing::{NodeBuilder, PodBuilder};

use super::support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn describe_shows_failed_scheduling() {
    let (cluster, client) = cluster().await;
    create_nodes(&client, vec![NodeBuilder::new("small").cpu("1").memory("1Gi").build()]).await;
    let _s = start(&client, SchedulerConfiguration::default());
    create_pod(&client, PodBuilder::new("big").cpu("2").build()).await;
    wait_pod(&client, "default", "big", |p| {
        p.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| c.iter().any(|c| c.type_ == "PodScheduled"))
    })
    .await;
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let kubectl = cluster.kubectl().await.clone();
    let out = tokio::task::spawn_blocking(move || kubectl.run(&["describe", "pod", "big"])).await.unwrap();
    assert!(out.success, "{}", out.stderr);
    let stdout = out.stdout;
    assert!(stdout.contains("PodScheduled   False"), "{stdout}");
    assert!(stdout.contains("FailedScheduling"), "{stdout}");
    assert!(stdout.contains("default-scheduler"), "{stdout}");
    assert!(stdout.contains("0/1 nodes are available: 1 Insufficient cpu."), "{stdout}");
}
