//! `kubectl describe pod` shows the scheduler's condition and events.

use std::process::Command;

use orchestra_sched::SchedulerConfiguration;
use orchestra_sched::testing::{NodeBuilder, PodBuilder};

use super::support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn describe_shows_failed_scheduling() {
    let (server, client) = server().await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let router = server.router();
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
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
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("kubeconfig"),
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: http://{address}\nusers:\n- name: u\n  user: {{}}\ncontexts:\n- name: ctx\n  context:\n    cluster: c\n    user: u\n    namespace: default\ncurrent-context: ctx\n"
        ),
    )
    .unwrap();
    let dir = dir.path().to_owned();
    let out = tokio::task::spawn_blocking(move || {
        Command::new("kubectl")
            .arg(format!("--kubeconfig={}", dir.join("kubeconfig").display()))
            .arg(format!("--cache-dir={}", dir.join("cache").display()))
            .args(["describe", "pod", "big"])
            .output()
            .expect("kubectl is installed")
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("PodScheduled   False"), "{stdout}");
    assert!(stdout.contains("FailedScheduling"), "{stdout}");
    assert!(stdout.contains("default-scheduler"), "{stdout}");
    assert!(stdout.contains("0/1 nodes are available: 1 Insufficient cpu."), "{stdout}");
}
