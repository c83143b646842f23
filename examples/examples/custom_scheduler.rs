//! A scheduler of your own, built from the orchestra-sched SDK: two plugins
//! written here — a Filter that keeps GPU pods on GPU nodes and a Score that
//! prefers nodes with a configurable label — registered next to the built-in
//! plugins and added to the default profile (`default-scheduler`), so every
//! pod that names no other scheduler is placed with them.
//!
//! The program starts an API server in process (on the in-memory store),
//! creates four nodes and a few pods through the API, runs the scheduler and
//! prints where each pod was bound:
//!
//! ```text
//! cargo run -p orchestra-examples --example custom_scheduler
//! ```

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, PostParams};
use orchestra_core::server::ApiServer;
use orchestra_sched::config::{ProfileConfig, SchedulerConfiguration};
use orchestra_sched::framework::{
    ClusterEvent, CycleState, EventResource, Filter, Handle, MAX_NODE_SCORE, Plugin, Score, Status, action,
};
use orchestra_sched::node_info::{NodeInfo, PodInfo};
use orchestra_sched::registry::{NoArgs, PluginError, PluginSet, Registry};
use orchestra_sched::scheduler::SchedulerBuilder;
use orchestra_store::MemStore;

/// The profile the plugins are added to: the default one.
pub const SCHEDULER_NAME: &str = "default-scheduler";
/// The pod label asking for a GPU node, and the node label offering one.
pub const GPU_LABEL: &str = "example.com/gpu";

/// Filter: a pod labelled `example.com/gpu=true` fits only nodes labelled
/// `example.com/gpu=true`; other pods fit anywhere.
pub struct GpuFilter;

impl GpuFilter {
    /// The plugin's registry name.
    pub const NAME: &'static str = "GpuFilter";
    /// Why a node was rejected (summed up in the pod's FailedScheduling event).
    pub const REASON: &'static str = "node(s) had no GPU";

    /// The factory: the plugin has no arguments, and is a Filter.
    pub fn factory(_: NoArgs, _: &Handle) -> Result<PluginSet, PluginError> {
        let p = Arc::new(GpuFilter);
        Ok(PluginSet::new(&p).filter(&p))
    }
}

impl Plugin for GpuFilter {
    fn name(&self) -> &'static str {
        Self::NAME
    }
    // A pod this plugin rejected may fit once a node is added or relabelled.
    fn events_to_register(&self) -> Vec<ClusterEvent> {
        vec![ClusterEvent::new(EventResource::Node, action::ADD | action::UPDATE_NODE_LABEL)]
    }
}

impl Filter for GpuFilter {
    fn filter(&self, _: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        let wants_gpu = pod.pod.metadata.labels.as_ref().and_then(|l| l.get(GPU_LABEL)).is_some_and(|v| v == "true");
        if wants_gpu && node.label(GPU_LABEL) != Some("true") {
            return Status::unresolvable(Self::REASON);
        }
        Status::success()
    }
}

/// Score: MAX_NODE_SCORE for nodes carrying the label `key=value`, 0 for
/// the others.
pub struct PreferLabel {
    key: String,
    value: String,
}

/// PreferLabel's arguments, decoded by the registry from the profile's
/// `pluginConfig`: `{"label": "example.com/tier=fast"}`.
#[derive(Debug, Default, serde::Deserialize)]
pub struct PreferLabelArgs {
    /// The label of the preferred nodes, `key=value`.
    pub label: String,
}

impl PreferLabel {
    /// The plugin's registry name.
    pub const NAME: &'static str = "PreferLabel";

    /// The factory: a Score plugin preferring `args.label`.
    pub fn factory(args: PreferLabelArgs, _: &Handle) -> Result<PluginSet, PluginError> {
        let (key, value) =
            args.label.split_once('=').ok_or_else(|| PluginError::invalid_argument("label", "must be key=value"))?;
        let p = Arc::new(PreferLabel { key: key.into(), value: value.into() });
        Ok(PluginSet::new(&p).score(&p))
    }
}

impl Plugin for PreferLabel {
    fn name(&self) -> &'static str {
        Self::NAME
    }
}

impl Score for PreferLabel {
    fn score(&self, _: &CycleState, _: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        Ok(if node.label(&self.key) == Some(self.value.as_str()) { MAX_NODE_SCORE } else { 0 })
    }
}

/// The built-in plugins plus the two above, each registered by name with
/// its factory.
pub fn registry() -> Registry {
    Registry::default().with(GpuFilter::NAME, GpuFilter::factory).with(PreferLabel::NAME, PreferLabel::factory)
}

/// The default profile (`default-scheduler`): its plugins plus GpuFilter,
/// and PreferLabel(`example.com/tier=fast`) weighing 10 (outweighing the
/// default scores, which prefer the least loaded node).
pub fn config() -> SchedulerConfiguration {
    let profile = ProfileConfig::named(SCHEDULER_NAME)
        .enable(GpuFilter::NAME, None)
        .enable(PreferLabel::NAME, Some(10))
        .args(PreferLabel::NAME, serde_json::json!({"label": "example.com/tier=fast"}));
    SchedulerConfiguration::default().with_profiles(vec![profile])
}

fn node(name: &str, labels: serde_json::Value) -> Node {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "labels": labels},
        "status": {"allocatable": {"cpu": "8", "memory": "16Gi", "pods": "110"}},
    }))
    .expect("a valid node")
}

fn pod(name: &str, labels: serde_json::Value) -> Pod {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "containers": [{"name": "main", "image": "busybox", "resources": {"requests": {"cpu": "500m", "memory": "256Mi"}}}],
        },
    }))
    .expect("a valid pod")
}

/// Runs the demo: an API server, the nodes, the pods, the custom scheduler;
/// returns `(pod, node)` once every pod is bound.
pub async fn run() -> Result<Vec<(String, String)>, Box<dyn std::error::Error>> {
    let server = ApiServer::new(Arc::new(MemStore::new())).await?;
    let client = orchestra_core::client::in_process(&server, "default");

    let nodes: Api<Node> = Api::all(client.clone());
    for n in [
        node("cpu-slow", serde_json::json!({})),
        node("cpu-fast", serde_json::json!({"example.com/tier": "fast"})),
        node("gpu-slow", serde_json::json!({GPU_LABEL: "true"})),
        node("gpu-fast", serde_json::json!({GPU_LABEL: "true", "example.com/tier": "fast"})),
    ] {
        nodes.create(&PostParams::default(), &n).await?;
    }

    let scheduler = SchedulerBuilder::new(client.clone()).registry(registry()).config(config()).build()?;
    let running = tokio::spawn(scheduler.run());

    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let names = ["train-0", "train-1", "web-0", "web-1"];
    for name in names {
        let labels =
            if name.starts_with("train") { serde_json::json!({GPU_LABEL: "true"}) } else { serde_json::json!({}) };
        pods.create(&PostParams::default(), &pod(name, labels)).await?;
    }

    let mut placed = Vec::new();
    for name in names {
        let mut node = None;
        for _ in 0..200 {
            node = pods.get(name).await?.spec.and_then(|s| s.node_name);
            if node.is_some() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        placed.push((name.to_owned(), node.ok_or(format!("{name} was not scheduled"))?));
    }
    running.abort();
    Ok(placed)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    for (pod, node) in run().await? {
        println!("{pod} -> {node}");
    }
    Ok(())
}
