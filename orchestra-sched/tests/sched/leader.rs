//! Two scheduler instances with Lease-based leader election.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::Api;
use orchestra_sched::config::LeaderElectionConfig;
use orchestra_sched::config::SchedulerConfiguration;
use orchestra_sched::scheduler::SchedulerBuilder;
use orchestra_sched::testing::{NodeBuilder, PodBuilder};

use super::support::*;

fn config() -> SchedulerConfiguration {
    SchedulerConfiguration::default().with_leader_election(LeaderElectionConfig {
        leader_elect: true,
        lease_duration_seconds: 2,
        renew_deadline_seconds: 1,
        retry_period_seconds: 1,
        ..Default::default()
    })
}

async fn holder(client: &kube::Client) -> Option<String> {
    let api: Api<Lease> = Api::namespaced(client.clone(), "kube-system");
    api.get_opt("kube-scheduler").await.ok().flatten().and_then(|l| l.spec?.holder_identity)
}

/// Waits up to `within` for `who` to hold the lease; whether it does.
async fn holds(client: &kube::Client, who: &str, within: Duration) -> bool {
    let start = std::time::Instant::now();
    while holder(client).await.as_deref() != Some(who) {
        if start.elapsed() > within {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    true
}

#[tokio::test]
async fn second_instance_takes_over_when_the_leader_stops() {
    let (_cluster, client) = cluster().await;
    create_nodes(&client, vec![NodeBuilder::new("n").cpu("4").memory("8Gi").build()]).await;
    let a = SchedulerBuilder::new(client.clone()).config(config()).identity("a").build().unwrap();
    let a = tokio::spawn(async move { a.run().await });
    assert!(holds(&client, "a", Duration::from_secs(5)).await);
    let b = SchedulerBuilder::new(client.clone()).config(config()).identity("b").build().unwrap();
    let b = tokio::spawn(async move { b.run().await });
    create_pod(&client, PodBuilder::new("first").cpu("100m").build()).await;
    wait_pod(&client, "default", "first", |p| node_of(p).is_some()).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(holder(&client).await.as_deref(), Some("a"), "b must not steal a renewed lease");
    a.abort();
    assert!(holds(&client, "b", Duration::from_secs(10)).await, "b takes the lease after it expires");
    create_pod(&client, PodBuilder::new("second").cpu("100m").build()).await;
    wait_pod(&client, "default", "second", |p| node_of(p).is_some()).await;
    b.abort();
}

#[tokio::test]
async fn a_stopped_leader_releases_the_lease_at_once() {
    let (_cluster, client) = cluster().await;
    create_nodes(&client, vec![NodeBuilder::new("n").cpu("4").memory("8Gi").build()]).await;
    // A lease that would take 30 s to expire: only a release hands it over sooner.
    let config = || {
        let mut c = config();
        c.leader_election.lease_duration_seconds = 30;
        c.leader_election.renew_deadline_seconds = 20;
        c
    };
    let a = SchedulerBuilder::new(client.clone()).config(config()).identity("a").build().unwrap();
    let (stop_a, stopped) = tokio::sync::oneshot::channel::<()>();
    let a = tokio::spawn(async move {
        a.run_until(async move {
            let _ = stopped.await;
        })
        .await
    });
    assert!(holds(&client, "a", Duration::from_secs(5)).await);
    let b = SchedulerBuilder::new(client.clone()).config(config()).identity("b").build().unwrap();
    let b = tokio::spawn(async move { b.run().await });
    stop_a.send(()).unwrap();
    assert!(a.await.unwrap().is_ok(), "a stopped run ends without error");
    assert!(
        holds(&client, "b", Duration::from_secs(10)).await,
        "b takes the released lease well before it would expire"
    );
    create_pod(&client, PodBuilder::new("after").cpu("100m").build()).await;
    wait_pod(&client, "default", "after", |p| node_of(p).is_some()).await;
    b.abort();
}

#[tokio::test]
async fn a_second_scheduler_serves_other_profiles_behind_its_own_lease() {
    let (_cluster, client) = cluster().await;
    create_nodes(&client, vec![NodeBuilder::new("n").cpu("4").memory("8Gi").build()]).await;
    // The default scheduler, elected on `kube-scheduler`.
    let first = SchedulerBuilder::new(client.clone()).config(config()).identity("first").build().unwrap();
    let first = tokio::spawn(async move { first.run().await });
    // A second one for `batch-scheduler` only, elected on its own lease, as
    // a second kube-scheduler with other profiles runs.
    let mut second_config =
        config().with_profiles(vec![orchestra_sched::config::ProfileConfig::named("batch-scheduler")]);
    second_config.leader_election.resource_name = "batch-scheduler".into();
    create_pod(&client, PodBuilder::new("web").cpu("100m").build()).await;
    create_pod(&client, PodBuilder::new("job").scheduler("batch-scheduler").cpu("100m").build()).await;
    wait_pod(&client, "default", "web", |p| node_of(p).is_some()).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(client.clone(), "default");
    assert!(node_of(&pods.get("job").await.unwrap()).is_none(), "no running scheduler serves batch-scheduler yet");
    let second = SchedulerBuilder::new(client.clone()).config(second_config).identity("second").build().unwrap();
    let second = tokio::spawn(async move { second.run().await });
    wait_pod(&client, "default", "job", |p| node_of(p).is_some()).await;
    // Each leads its own lease.
    assert!(holds(&client, "first", Duration::from_secs(5)).await);
    let batch: Api<Lease> = Api::namespaced(client.clone(), "kube-system");
    let holder = batch.get("batch-scheduler").await.unwrap().spec.and_then(|s| s.holder_identity);
    assert_eq!(holder.as_deref(), Some("second"));
    first.abort();
    second.abort();
}
