//! The test cluster: an in-process API server and node agents on simulated runtimes.

#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::{Api, PostParams};
use orchestra::testing::TestCluster;
use orchestra_node::agent::{AgentHandle, NodeAgent, NodeConfig};
use orchestra_node::runtime::sim::{SimConfig, SimRuntime};
use tokio::sync::oneshot;

/// A test cluster (the API server alone) and an administrator's client of it.
pub struct Cluster {
    /// A client (namespace `default`).
    pub client: Client,
    /// The cluster; it stops when dropped.
    pub inner: TestCluster,
}

/// A fresh cluster.
pub async fn cluster() -> Cluster {
    let inner = TestCluster::start().await;
    Cluster { client: inner.client(), inner }
}

/// A running agent; stopped (containers left running) when dropped.
pub struct TestNode {
    /// The agent's handle.
    pub handle: AgentHandle,
    /// Its runtime.
    pub runtime: SimRuntime,
    /// Its state directory.
    pub root: Arc<tempfile::TempDir>,
    stop: Option<oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl TestNode {
    /// Stops the agent and waits for it (its containers keep running).
    pub async fn stop(mut self) -> (SimRuntime, Arc<tempfile::TempDir>) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
        (self.runtime.clone(), self.root.clone())
    }
}

impl Drop for TestNode {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

/// The test defaults: fast timings, fixed capacity (4 CPUs, 8 GiB), pod CIDR
/// `10.<n>.0.0/24`-style from `cidr`.
pub fn config(name: &str, root: &std::path::Path, cidr: Option<&str>) -> NodeConfig {
    let mut c = NodeConfig::new(name).root_dir(root).fixed_capacity(4000, 8 << 30).fast();
    c.pod_cidr = cidr.map(str::to_owned);
    c
}

/// Starts an agent with `config` on `runtime`.
pub fn start_with(client: &Client, config: NodeConfig, runtime: SimRuntime, root: Arc<tempfile::TempDir>) -> TestNode {
    start_shared(client, config, runtime, root, None)
}

/// Starts an agent with `config` on `runtime`, fed by `pods` if given.
pub fn start_shared(
    client: &Client,
    config: NodeConfig,
    runtime: SimRuntime,
    root: Arc<tempfile::TempDir>,
    pods: Option<orchestra_node::agent::SharedPods>,
) -> TestNode {
    let mut builder = NodeAgent::builder(client.clone(), Arc::new(runtime.clone()), config);
    if let Some(pods) = pods {
        builder = builder.shared_pods(pods);
    }
    let agent = builder.build();
    let handle = agent.handle();
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        agent
            .run(async {
                let _ = stopped.await;
            })
            .await
            .expect("agent runs");
    });
    TestNode { handle, runtime, root, stop: Some(stop), task: Some(task) }
}

/// Starts an agent named `name` with the test defaults, tweaked by `tweak`.
pub fn start(cluster: &Cluster, name: &str, cidr: &str, tweak: impl FnOnce(&mut NodeConfig)) -> TestNode {
    let root = Arc::new(tempfile::tempdir().expect("tempdir"));
    let mut c = config(name, root.path(), Some(cidr));
    tweak(&mut c);
    start_with(&cluster.client, c, SimRuntime::new(SimConfig::default()), root)
}

/// Polls `check` every 25 ms until it holds or `timeout` passes.
pub async fn eventually<F, Fut>(timeout: Duration, what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if check().await {
            return;
        }
        assert!(tokio::time::Instant::now() < deadline, "timed out: {what}");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// Waits until pod `ns/name` satisfies `pred`, returning it.
pub async fn wait_pod(client: &Client, ns: &str, name: &str, what: &str, pred: impl Fn(&Pod) -> bool) -> Pod {
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let pod = api.get_opt(name).await.expect("get pod");
        if let Some(pod) = pod {
            if pred(&pod) {
                return pod;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "timed out waiting for {name}: {what}; last: {:#?}",
                pod.status
            );
        } else {
            assert!(tokio::time::Instant::now() < deadline, "timed out waiting for {name}: {what}; the pod is gone");
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// Creates a pod from JSON in namespace `default`.
pub async fn create_pod(client: &Client, pod: serde_json::Value) -> Pod {
    let pod: Pod = serde_json::from_value(pod).expect("a pod");
    let ns = pod.metadata.namespace.clone().unwrap_or_else(|| "default".into());
    Api::<Pod>::namespaced(client.clone(), &ns).create(&PostParams::default(), &pod).await.expect("create pod")
}

/// A pod bound to `node` with one container per `(name, env)` entry.
pub fn pod_json(name: &str, node: &str, containers: &[(&str, &[(&str, &str)])]) -> serde_json::Value {
    let containers: Vec<serde_json::Value> = containers
        .iter()
        .map(|(c, env)| {
            let env: Vec<serde_json::Value> =
                env.iter().map(|(k, v)| serde_json::json!({"name": k, "value": v})).collect();
            serde_json::json!({"name": c, "image": "busybox:1.36", "env": env})
        })
        .collect();
    serde_json::json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"nodeName": node, "containers": containers, "terminationGracePeriodSeconds": 5},
    })
}

/// The phase of a pod.
pub fn phase(pod: &Pod) -> &str {
    pod.status.as_ref().and_then(|s| s.phase.as_deref()).unwrap_or("")
}

/// The status of condition `type_`.
pub fn condition<'a>(pod: &'a Pod, type_: &str) -> Option<&'a str> {
    pod.status.as_ref()?.conditions.as_ref()?.iter().find(|c| c.type_ == type_).map(|c| c.status.as_str())
}

/// The status of container `name`.
pub fn container<'a>(pod: &'a Pod, name: &str) -> Option<&'a k8s_openapi::api::core::v1::ContainerStatus> {
    let s = pod.status.as_ref()?;
    s.container_statuses.iter().flatten().chain(s.init_container_statuses.iter().flatten()).find(|c| c.name == name)
}

/// The waiting reason of container `name`.
pub fn waiting_reason<'a>(pod: &'a Pod, name: &str) -> Option<&'a str> {
    container(pod, name)?.state.as_ref()?.waiting.as_ref()?.reason.as_deref()
}
