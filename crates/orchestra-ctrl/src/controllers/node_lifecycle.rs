//! The node lifecycle controller: watches node Leases (namespace
//! `kube-node-lease`) and `Ready` conditions. A node silent for longer than
//! the grace period gets `Ready=Unknown` (reason `NodeStatusUnknown`) and the
//! `node.kubernetes.io/unreachable` taints; a node reporting `Ready=False`
//! gets the `not-ready` taints (NoSchedule and NoExecute). NoExecute taints
//! are added at most `zone_qps` nodes per second per zone. Pods on a
//! NoExecute-tainted node that do not tolerate the taint are evicted (deleted)
//! after their `tolerationSeconds` ([`DEFAULT_TOLERATION_SECONDS`] for pods
//! without a matching toleration, as the DefaultTolerationSeconds admission
//! plugin would add). The taints go when the node is Ready again.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, NodeCondition, Pod, Taint, Toleration};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{DeleteParams, Patch, PatchParams};
use kube::{Api, Client};
use parking_lot::Mutex;

use crate::Error;
use crate::informer::{BY_NODE_NAME, Informer, ObjectKey, SharedInformerFactory, pod_node_name};

/// Name of the controller.
pub const NAME: &str = "node-lifecycle-controller";
/// Taint of nodes whose status is unknown.
pub const UNREACHABLE: &str = "node.kubernetes.io/unreachable";
/// Taint of nodes reporting not ready.
pub const NOT_READY: &str = "node.kubernetes.io/not-ready";
/// Namespace of node leases.
pub const LEASE_NAMESPACE: &str = "kube-node-lease";
/// Seconds a pod tolerates unreachable/not-ready without its own toleration.
pub const DEFAULT_TOLERATION_SECONDS: i64 = 300;
/// Zone label.
pub const ZONE: &str = "topology.kubernetes.io/zone";

/// Settings (upstream defaults: 5 s, 40 s, 0.1 nodes/s per zone).
#[derive(Clone, Debug)]
pub struct Config {
    /// How often every node is checked.
    pub monitor_period: Duration,
    /// Silence after which a node's status is unknown.
    pub grace_period: Duration,
    /// Nodes per second per zone that may get NoExecute taints.
    pub zone_qps: f64,
    /// Toleration seconds assumed for pods without a matching toleration.
    pub default_toleration_seconds: i64,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            monitor_period: Duration::from_secs(5),
            grace_period: Duration::from_secs(40),
            zone_qps: 0.1,
            default_toleration_seconds: DEFAULT_TOLERATION_SECONDS,
        }
    }
}

/// The node's health as seen now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Health {
    /// Heard from within the grace period and Ready.
    Ready,
    /// Heard from but Ready is False.
    NotReady,
    /// Silent for longer than the grace period.
    Unknown,
}

/// Seconds since the node was last heard of (lease renewal or Ready heartbeat).
pub fn silence(node: &Node, lease: Option<&Lease>, now: Timestamp) -> Option<f64> {
    let lease_time = lease
        .and_then(|l| l.spec.as_ref())
        .and_then(|s| s.renew_time.as_ref())
        .map(|t| t.0);
    let heartbeat = ready_condition(node)
        .and_then(|c| c.last_heartbeat_time.as_ref())
        .map(|t| t.0);
    let last = match (lease_time, heartbeat) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    }
    .or_else(|| node.metadata.creation_timestamp.as_ref().map(|t| t.0))?;
    Some(now.duration_since(last).as_secs_f64())
}

fn ready_condition(node: &Node) -> Option<&NodeCondition> {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .find(|c| c.type_ == "Ready")
}

/// Classifies a node.
pub fn health(node: &Node, lease: Option<&Lease>, grace: Duration, now: Timestamp) -> Health {
    if silence(node, lease, now).is_some_and(|s| s > grace.as_secs_f64()) {
        return Health::Unknown;
    }
    match ready_condition(node).map(|c| c.status.as_str()) {
        Some("True") => Health::Ready,
        // A node that has not reported yet is given the grace period.
        None => Health::Ready,
        Some("Unknown") => Health::Unknown,
        _ => Health::NotReady,
    }
}

/// The taints a node should carry for `health` (keys only; effects both).
pub fn wanted_taint(health: Health) -> Option<&'static str> {
    match health {
        Health::Ready => None,
        Health::NotReady => Some(NOT_READY),
        Health::Unknown => Some(UNREACHABLE),
    }
}

/// How long `pod` may stay on a node with `taint` (None: forever; Some(0): evict now).
pub fn toleration_seconds(pod: &Pod, taint: &Taint, default: i64) -> Option<i64> {
    let tolerations: Vec<&Toleration> = pod
        .spec
        .as_ref()
        .and_then(|s| s.tolerations.as_ref())
        .into_iter()
        .flatten()
        .filter(|t| {
            let key_ok = match t.operator.as_deref() {
                Some("Exists") => t.key.as_deref().is_none_or(|k| k.is_empty() || k == taint.key),
                _ => t.key.as_deref() == Some(taint.key.as_str()) && t.value == taint.value,
            };
            let effect_ok = t.effect.as_deref().is_none_or(|e| e.is_empty() || e == taint.effect);
            key_ok && effect_ok
        })
        .collect();
    if tolerations.is_empty() {
        return Some(default);
    }
    if tolerations.iter().any(|t| t.toleration_seconds.is_none()) {
        return None;
    }
    tolerations.iter().filter_map(|t| t.toleration_seconds).min().map(|s| s.max(0))
}

struct Bucket {
    tokens: f64,
    at: Instant,
}

/// The controller's state.
pub struct NodeLifecycle {
    client: Client,
    nodes: Arc<Informer<Node>>,
    leases: Arc<Informer<Lease>>,
    pods: Arc<Informer<Pod>>,
    config: Config,
    zones: Mutex<HashMap<String, Bucket>>,
}

impl NodeLifecycle {
    /// The controller on `factory`'s informers.
    pub fn new(factory: &SharedInformerFactory, config: Config) -> Self {
        let pods = factory.informer::<Pod>();
        pods.add_indexer(BY_NODE_NAME, pod_node_name());
        Self {
            client: factory.client().clone(),
            nodes: factory.informer::<Node>(),
            leases: factory.informer::<Lease>(),
            pods,
            config,
            zones: Mutex::default(),
        }
    }

    fn take_zone_token(&self, zone: &str) -> bool {
        let mut zones = self.zones.lock();
        let b = zones.entry(zone.into()).or_insert(Bucket {
            tokens: 1.0,
            at: Instant::now(),
        });
        let now = Instant::now();
        b.tokens = (b.tokens + now.duration_since(b.at).as_secs_f64() * self.config.zone_qps).min(1.0);
        b.at = now;
        if b.tokens >= 1.0 {
            b.tokens -= 1.0;
            true
        } else {
            false
        }
    }

    /// One pass over every node.
    pub async fn monitor(&self) -> Result<(), Error> {
        let now = Timestamp::now();
        let api: Api<Node> = Api::all(self.client.clone());
        for node in self.nodes.list() {
            let name = node.metadata.name.clone().unwrap_or_default();
            let lease = self.leases.get(&ObjectKey::new(LEASE_NAMESPACE, &name));
            let health = health(&node, lease.as_deref(), self.config.grace_period, now);
            if health == Health::Unknown
                && ready_condition(&node).is_none_or(|c| c.status != "Unknown")
            {
                let mut conditions = node
                    .status
                    .as_ref()
                    .and_then(|s| s.conditions.clone())
                    .unwrap_or_default();
                conditions.retain(|c| c.type_ != "Ready");
                conditions.push(NodeCondition {
                    type_: "Ready".into(),
                    status: "Unknown".into(),
                    reason: Some("NodeStatusUnknown".into()),
                    message: Some("Kubelet stopped posting node status.".into()),
                    last_transition_time: Some(Time(now)),
                    last_heartbeat_time: ready_condition(&node).and_then(|c| c.last_heartbeat_time.clone()),
                });
                let patch = serde_json::json!({"status": {"conditions": conditions}});
                api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch)).await?;
                self.mark_pods_not_ready(&name).await?;
            }
            let wanted = wanted_taint(health);
            let taints = node.spec.as_ref().and_then(|s| s.taints.clone()).unwrap_or_default();
            let ours = |t: &Taint| t.key == UNREACHABLE || t.key == NOT_READY;
            let mut next: Vec<Taint> = taints.iter().filter(|t| !ours(t)).cloned().collect();
            if let Some(key) = wanted {
                let zone = node
                    .metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get(ZONE))
                    .cloned()
                    .unwrap_or_default();
                for effect in ["NoSchedule", "NoExecute"] {
                    let existing = taints.iter().find(|t| t.key == key && t.effect == effect);
                    match existing {
                        Some(t) => next.push(t.clone()),
                        None if effect == "NoSchedule" || self.take_zone_token(&zone) => next.push(Taint {
                            key: key.into(),
                            effect: effect.into(),
                            value: None,
                            time_added: Some(Time(now)),
                        }),
                        None => {}
                    }
                }
            }
            if next != taints {
                let patch = serde_json::json!({"spec": {"taints": next}});
                api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch)).await?;
            }
            self.evict(&name, &next, now).await?;
        }
        Ok(())
    }

    async fn mark_pods_not_ready(&self, node: &str) -> Result<(), Error> {
        for pod in self.pods.by_index(BY_NODE_NAME, node) {
            let mut conditions = pod.status.as_ref().and_then(|s| s.conditions.clone()).unwrap_or_default();
            let Some(ready) = conditions.iter_mut().find(|c| c.type_ == "Ready") else {
                continue;
            };
            if ready.status == "False" {
                continue;
            }
            ready.status = "False".into();
            ready.last_transition_time = Some(Time(Timestamp::now()));
            let api: Api<Pod> = Api::namespaced(self.client.clone(), pod.metadata.namespace.as_deref().unwrap_or_default());
            let patch = serde_json::json!({"status": {"conditions": conditions}});
            let _ = api
                .patch_status(pod.metadata.name.as_deref().unwrap_or_default(), &PatchParams::default(), &Patch::Merge(&patch))
                .await;
        }
        Ok(())
    }

    async fn evict(&self, node: &str, taints: &[Taint], now: Timestamp) -> Result<(), Error> {
        let no_execute: Vec<&Taint> = taints.iter().filter(|t| t.effect == "NoExecute").collect();
        if no_execute.is_empty() {
            return Ok(());
        }
        for pod in self.pods.by_index(BY_NODE_NAME, node) {
            if pod.metadata.deletion_timestamp.is_some() {
                continue;
            }
            let due = no_execute.iter().any(|t| {
                let since = t
                    .time_added
                    .as_ref()
                    .map(|a| now.duration_since(a.0).as_secs_f64())
                    .unwrap_or(0.0);
                toleration_seconds(&pod, t, self.config.default_toleration_seconds)
                    .is_some_and(|s| since >= s as f64)
            });
            if due {
                let api: Api<Pod> = Api::namespaced(self.client.clone(), pod.metadata.namespace.as_deref().unwrap_or_default());
                tracing::info!(pod = ?pod.metadata.name, node, "evicting for NoExecute taint");
                match api.delete(pod.metadata.name.as_deref().unwrap_or_default(), &DeleteParams::default()).await {
                    Ok(_) | Err(kube::Error::Api(_)) => {}
                    Err(e) => return Err(e.into()),
                }
            }
        }
        Ok(())
    }

    /// Monitors every `monitor_period` until `shutdown`.
    pub async fn run(self, shutdown: impl Future<Output = ()> + Send) {
        let mut shutdown = std::pin::pin!(shutdown);
        self.nodes.wait_synced().await;
        self.leases.wait_synced().await;
        self.pods.wait_synced().await;
        loop {
            if let Err(e) = self.monitor().await {
                tracing::debug!(error = %e, "node monitor pass failed");
            }
            tokio::select! {
                _ = &mut shutdown => return,
                _ = tokio::time::sleep(self.config.monitor_period) => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{NodeStatus, PodSpec};

    fn node(ready: &str, heartbeat_ago: i64) -> Node {
        let now = Timestamp::now();
        Node {
            status: Some(NodeStatus {
                conditions: Some(vec![NodeCondition {
                    type_: "Ready".into(),
                    status: ready.into(),
                    last_heartbeat_time: Some(Time(now - k8s_openapi::jiff::SignedDuration::from_secs(heartbeat_ago))),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn health_table() {
        let grace = Duration::from_secs(40);
        let table = [
            (node("True", 1), Health::Ready),
            (node("True", 100), Health::Unknown),
            (node("False", 1), Health::NotReady),
            (node("Unknown", 1), Health::Unknown),
            (Node::default(), Health::Ready),
        ];
        for (n, expected) in table {
            assert_eq!(health(&n, None, grace, Timestamp::now()), expected);
        }
    }

    #[test]
    fn toleration_table() {
        let taint = Taint {
            key: UNREACHABLE.into(),
            effect: "NoExecute".into(),
            value: None,
            time_added: None,
        };
        let with = |t: Vec<Toleration>| Pod {
            spec: Some(PodSpec {
                tolerations: Some(t),
                ..Default::default()
            }),
            ..Default::default()
        };
        let table = [
            (with(vec![]), Some(300)),
            (
                with(vec![Toleration {
                    key: Some(UNREACHABLE.into()),
                    operator: Some("Exists".into()),
                    effect: Some("NoExecute".into()),
                    toleration_seconds: Some(5),
                    ..Default::default()
                }]),
                Some(5),
            ),
            (
                with(vec![Toleration {
                    operator: Some("Exists".into()),
                    ..Default::default()
                }]),
                None,
            ),
            (
                with(vec![Toleration {
                    key: Some("other".into()),
                    operator: Some("Exists".into()),
                    toleration_seconds: Some(1),
                    ..Default::default()
                }]),
                Some(300),
            ),
        ];
        for (pod, expected) in table {
            assert_eq!(toleration_seconds(&pod, &taint, 300), expected);
        }
    }
}
