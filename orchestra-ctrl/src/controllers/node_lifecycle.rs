//! The node lifecycle controller: watches node Leases (namespace
//! `kube-node-lease`) and `Ready` conditions. A node silent for longer than
//! the grace period gets `Ready=Unknown` (reason `NodeStatusUnknown`) and the
//! `node.kubernetes.io/unreachable` taints; a node reporting `Ready=False`
//! gets the `not-ready` taints (NoSchedule and NoExecute). The taints go when
//! the node is Ready again.
//!
//! NoExecute taints are rate-limited per zone, as upstream's
//! `zoneNoExecuteTainter` queues are: each zone's state is computed on every
//! pass from its nodes' health — `Normal`, `PartialDisruption` (more than 2
//! nodes not ready and at least [`Config::unhealthy_zone_threshold`] of them)
//! or `FullDisruption` (no node ready) — and NoExecute taints are added at
//! [`Config::zone_qps`] nodes per second in a normal or fully disrupted zone,
//! at [`Config::secondary_zone_qps`] in a partially disrupted zone larger
//! than [`Config::large_cluster_size_threshold`] nodes and not at all in a
//! smaller one. When every zone is fully disrupted the controller assumes
//! it, not the nodes, has lost the network: it adds no NoExecute taints and
//! removes those it added, so nothing is evicted.
//!
//! Pods on a NoExecute-tainted node that do not tolerate the taint are evicted
//! (deleted) once they have been on the tainted node for their
//! `tolerationSeconds` ([`DEFAULT_TOLERATION_SECONDS`] for pods without a
//! matching toleration, as the DefaultTolerationSeconds admission plugin
//! would add); like upstream's taint manager, the time is counted from when
//! this controller first saw the pod under the taint, on its own clock (a
//! taint's `timeAdded` only has whole seconds). Pods tolerating the taint
//! without `tolerationSeconds` stay.

use std::collections::{HashMap, HashSet};
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

/// Settings; the defaults are upstream's (`kube-controller-manager` flags
/// named beside each field).
///
/// Built from [`Default`] and the `with_*` setters, so that a new setting is
/// not a breaking change:
///
/// ```
/// use std::time::Duration;
/// use orchestra_ctrl::controllers::node_lifecycle::Config;
///
/// let config = Config::default()
///     .with_monitor_period(Duration::from_millis(100))
///     .with_grace_period(Duration::from_secs(1))
///     .with_zone_qps(100.0);
/// assert_eq!(config.grace_period, Duration::from_secs(1));
/// ```
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Config {
    /// How often every node is checked (`--node-monitor-period`, 5 s).
    pub monitor_period: Duration,
    /// Silence after which a node's status is unknown
    /// (`--node-monitor-grace-period`, 40 s).
    pub grace_period: Duration,
    /// Nodes per second per zone that may get NoExecute taints in a healthy
    /// zone (`--node-eviction-rate`, 0.1).
    pub zone_qps: f64,
    /// The same in a partially disrupted zone of more than
    /// `large_cluster_size_threshold` nodes (`--secondary-node-eviction-rate`,
    /// 0.01); a smaller partially disrupted zone gets none.
    pub secondary_zone_qps: f64,
    /// Share of not-ready nodes (when more than 2) that makes a zone
    /// partially disrupted (`--unhealthy-zone-threshold`, 0.55).
    pub unhealthy_zone_threshold: f64,
    /// Zones of at most this many nodes stop NoExecute tainting altogether
    /// when partially disrupted (`--large-cluster-size-threshold`, 50).
    pub large_cluster_size_threshold: usize,
    /// Toleration seconds assumed for pods without a matching toleration.
    pub default_toleration_seconds: i64,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            monitor_period: Duration::from_secs(5),
            grace_period: Duration::from_secs(40),
            zone_qps: 0.1,
            secondary_zone_qps: 0.01,
            unhealthy_zone_threshold: 0.55,
            large_cluster_size_threshold: 50,
            default_toleration_seconds: DEFAULT_TOLERATION_SECONDS,
        }
    }
}

/// A zone's state, from its nodes' health (upstream's `ComputeZoneState`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ZoneState {
    /// Few nodes not ready.
    Normal,
    /// More than 2 nodes and at least the unhealthy threshold not ready.
    PartialDisruption,
    /// No node ready.
    FullDisruption,
}

/// The state of a zone with `ready` and `not_ready` nodes.
pub fn zone_state(ready: usize, not_ready: usize, unhealthy_threshold: f64) -> ZoneState {
    if ready == 0 && not_ready > 0 {
        ZoneState::FullDisruption
    } else if not_ready > 2 && not_ready as f64 / (ready + not_ready) as f64 >= unhealthy_threshold {
        ZoneState::PartialDisruption
    } else {
        ZoneState::Normal
    }
}

impl Config {
    /// Sets [`monitor_period`](Self::monitor_period).
    pub fn with_monitor_period(mut self, period: Duration) -> Self {
        self.monitor_period = period;
        self
    }

    /// Sets [`grace_period`](Self::grace_period).
    pub fn with_grace_period(mut self, period: Duration) -> Self {
        self.grace_period = period;
        self
    }

    /// Sets [`zone_qps`](Self::zone_qps).
    pub fn with_zone_qps(mut self, qps: f64) -> Self {
        self.zone_qps = qps;
        self
    }

    /// Sets [`secondary_zone_qps`](Self::secondary_zone_qps).
    pub fn with_secondary_zone_qps(mut self, qps: f64) -> Self {
        self.secondary_zone_qps = qps;
        self
    }

    /// Sets [`unhealthy_zone_threshold`](Self::unhealthy_zone_threshold).
    pub fn with_unhealthy_zone_threshold(mut self, threshold: f64) -> Self {
        self.unhealthy_zone_threshold = threshold;
        self
    }

    /// Sets [`large_cluster_size_threshold`](Self::large_cluster_size_threshold).
    pub fn with_large_cluster_size_threshold(mut self, nodes: usize) -> Self {
        self.large_cluster_size_threshold = nodes;
        self
    }

    /// Sets [`default_toleration_seconds`](Self::default_toleration_seconds).
    pub fn with_default_toleration_seconds(mut self, seconds: i64) -> Self {
        self.default_toleration_seconds = seconds;
        self
    }

    /// NoExecute taints per second in a zone of `size` nodes in `state`
    /// (upstream's `setLimiterInZone`: `HealthyQPSFunc` for normal and fully
    /// disrupted zones, `ReducedQPSFunc` for partially disrupted ones).
    pub fn zone_rate(&self, state: ZoneState, size: usize) -> f64 {
        match state {
            ZoneState::Normal | ZoneState::FullDisruption => self.zone_qps,
            ZoneState::PartialDisruption if size > self.large_cluster_size_threshold => self.secondary_zone_qps,
            ZoneState::PartialDisruption => 0.0,
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
    let lease_time = lease.and_then(|l| l.spec.as_ref()).and_then(|s| s.renew_time.as_ref()).map(|t| t.0);
    let heartbeat = ready_condition(node).and_then(|c| c.last_heartbeat_time.as_ref()).map(|t| t.0);
    let last = match (lease_time, heartbeat) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    }
    .or_else(|| node.metadata.creation_timestamp.as_ref().map(|t| t.0))?;
    Some(now.duration_since(last).as_secs_f64())
}

fn ready_condition(node: &Node) -> Option<&NodeCondition> {
    node.status.as_ref().and_then(|s| s.conditions.as_ref()).into_iter().flatten().find(|c| c.type_ == "Ready")
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

/// A zone's NoExecute tainting limiter: a token bucket of burst 1.
struct Bucket {
    tokens: f64,
    at: Instant,
    qps: f64,
}

impl Bucket {
    /// Takes a token at rate `qps` (a rate of 0 never gives one, as
    /// upstream's never-limiter).
    fn take(&mut self, qps: f64, now: Instant) -> bool {
        self.tokens = (self.tokens + now.duration_since(self.at).as_secs_f64() * self.qps).min(1.0);
        self.at = now;
        self.qps = qps;
        if qps > 0.0 && self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// The controller's state.
pub struct NodeLifecycle {
    client: Client,
    nodes: Arc<Informer<Node>>,
    leases: Arc<Informer<Lease>>,
    pods: Arc<Informer<Pod>>,
    config: Config,
    zones: Mutex<HashMap<String, Bucket>>,
    /// Each zone's state at the last pass.
    zone_states: Mutex<HashMap<String, ZoneState>>,
    /// When each pod (by UID) was first seen on a node with NoExecute taints.
    tainted_since: Mutex<HashMap<String, Instant>>,
}

fn zone_of(node: &Node) -> String {
    node.metadata.labels.as_ref().and_then(|l| l.get(ZONE)).cloned().unwrap_or_default()
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
            zone_states: Mutex::default(),
            tainted_since: Mutex::default(),
        }
    }

    /// Waits until the node, lease and pod caches have listed.
    pub async fn wait_synced(&self) {
        self.nodes.wait_synced().await;
        self.leases.wait_synced().await;
        self.pods.wait_synced().await;
    }

    /// The state of `zone` (the `topology.kubernetes.io/zone` label, `""`
    /// without one) at the last pass.
    pub fn zone_state(&self, zone: &str) -> Option<ZoneState> {
        self.zone_states.lock().get(zone).copied()
    }

    fn take_zone_token(&self, zone: &str, qps: f64) -> bool {
        let now = Instant::now();
        let mut zones = self.zones.lock();
        let b = zones.entry(zone.into()).or_insert(Bucket { tokens: 1.0, at: now, qps });
        b.take(qps, now)
    }

    /// One pass over every node.
    pub async fn monitor(&self) -> Result<(), Error> {
        let now = Timestamp::now();
        let api: Api<Node> = Api::all(self.client.clone());
        let nodes: Vec<(Arc<Node>, Health)> = self
            .nodes
            .list()
            .into_iter()
            .map(|node| {
                let name = node.metadata.name.clone().unwrap_or_default();
                let lease = self.leases.get(&ObjectKey::new(LEASE_NAMESPACE, &name));
                let health = health(&node, lease.as_deref(), self.config.grace_period, now);
                (node, health)
            })
            .collect();
        // Zone states first: they decide how fast NoExecute taints may come.
        let mut counts: HashMap<String, (usize, usize)> = HashMap::new();
        for (node, health) in &nodes {
            let (ready, not_ready) = counts.entry(zone_of(node)).or_default();
            if *health == Health::Ready && ready_condition(node).is_some_and(|c| c.status == "True") {
                *ready += 1;
            } else {
                *not_ready += 1;
            }
        }
        let states: HashMap<String, (ZoneState, usize)> = counts
            .into_iter()
            .map(|(zone, (ready, not_ready))| {
                (zone, (zone_state(ready, not_ready, self.config.unhealthy_zone_threshold), ready + not_ready))
            })
            .collect();
        let all_down = !states.is_empty() && states.values().all(|(s, _)| *s == ZoneState::FullDisruption);
        {
            let mut known = self.zone_states.lock();
            let was_all_down = !known.is_empty() && known.values().all(|s| *s == ZoneState::FullDisruption);
            if all_down && !was_all_down {
                tracing::warn!(
                    "every zone is fully disrupted: no NoExecute taints, no evictions until a node is Ready"
                );
            }
            for (zone, (state, _)) in &states {
                if known.get(zone) != Some(state) {
                    tracing::info!(zone = %zone, ?state, "zone state changed");
                }
            }
            *known = states.iter().map(|(z, (s, _))| (z.clone(), *s)).collect();
        }
        let mut on_tainted: HashSet<String> = HashSet::new();
        for (node, health) in nodes {
            let name = node.metadata.name.clone().unwrap_or_default();
            if health == Health::Unknown && ready_condition(&node).is_none_or(|c| c.status != "Unknown") {
                let mut conditions = node.status.as_ref().and_then(|s| s.conditions.clone()).unwrap_or_default();
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
                let zone = zone_of(&node);
                let (state, size) = states.get(&zone).copied().unwrap_or((ZoneState::Normal, 1));
                let rate = self.config.zone_rate(state, size);
                for effect in ["NoSchedule", "NoExecute"] {
                    let existing = taints.iter().find(|t| t.key == key && t.effect == effect);
                    // Not-ready turned unreachable or back: the NoExecute
                    // taint is swapped, not queued again (upstream's
                    // SwapNodeControllerTaint).
                    let swap =
                        effect == "NoExecute" && taints.iter().any(|t| ours(t) && t.key != key && t.effect == effect);
                    let fresh =
                        || Taint { key: key.into(), effect: effect.into(), value: None, time_added: Some(Time(now)) };
                    match existing {
                        // Every zone down: the controller's network, not the
                        // nodes', is the likelier fault; evict nothing.
                        _ if effect == "NoExecute" && all_down => {}
                        Some(t) => next.push(t.clone()),
                        None if effect == "NoSchedule" || swap || self.take_zone_token(&zone, rate) => {
                            next.push(fresh())
                        }
                        None => {}
                    }
                }
            }
            if next != taints {
                let patch = serde_json::json!({"spec": {"taints": next}});
                api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch)).await?;
            }
            self.evict(&name, &next, &mut on_tainted).await?;
        }
        // Pods no longer on a NoExecute-tainted node start from zero next time.
        self.tainted_since.lock().retain(|uid, _| on_tainted.contains(uid));
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
            let api: Api<Pod> =
                Api::namespaced(self.client.clone(), pod.metadata.namespace.as_deref().unwrap_or_default());
            let patch = serde_json::json!({"status": {"conditions": conditions}});
            let _ = api
                .patch_status(
                    pod.metadata.name.as_deref().unwrap_or_default(),
                    &PatchParams::default(),
                    &Patch::Merge(&patch),
                )
                .await;
        }
        Ok(())
    }

    /// Evicts the pods of `node` whose toleration of its NoExecute `taints`
    /// has run out, counting from when each was first seen under them;
    /// adds the UIDs of the pods still counting to `counting`.
    async fn evict(&self, node: &str, taints: &[Taint], counting: &mut HashSet<String>) -> Result<(), Error> {
        let no_execute: Vec<&Taint> = taints.iter().filter(|t| t.effect == "NoExecute").collect();
        if no_execute.is_empty() {
            return Ok(());
        }
        for pod in self.pods.by_index(BY_NODE_NAME, node) {
            if pod.metadata.deletion_timestamp.is_some() {
                continue;
            }
            // The shortest toleration of the taints; None: tolerates all forever.
            let Some(seconds) = no_execute
                .iter()
                .filter_map(|t| toleration_seconds(&pod, t, self.config.default_toleration_seconds))
                .min()
            else {
                continue;
            };
            let uid = pod.metadata.uid.clone().unwrap_or_default();
            counting.insert(uid.clone());
            let since = *self.tainted_since.lock().entry(uid).or_insert_with(Instant::now);
            if since.elapsed() < Duration::from_secs(seconds.max(0) as u64) {
                continue;
            }
            let api: Api<Pod> =
                Api::namespaced(self.client.clone(), pod.metadata.namespace.as_deref().unwrap_or_default());
            tracing::info!(pod = ?pod.metadata.name, node, "evicting for NoExecute taint");
            match api.delete(pod.metadata.name.as_deref().unwrap_or_default(), &DeleteParams::default()).await {
                Ok(_) | Err(kube::Error::Api(_)) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    /// Monitors every `monitor_period` until `shutdown`.
    pub async fn run(self, shutdown: impl Future<Output = ()> + Send) {
        let mut shutdown = std::pin::pin!(shutdown);
        self.wait_synced().await;
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
        let taint = Taint { key: UNREACHABLE.into(), effect: "NoExecute".into(), value: None, time_added: None };
        let with = |t: Vec<Toleration>| Pod {
            spec: Some(PodSpec { tolerations: Some(t), ..Default::default() }),
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
            (with(vec![Toleration { operator: Some("Exists".into()), ..Default::default() }]), None),
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

    #[test]
    fn zone_states_and_rates_follow_upstream() {
        let table = [
            // (ready, not ready, state)
            (3, 0, ZoneState::Normal),
            (1, 1, ZoneState::Normal),
            // Two not ready never make a partial disruption, whatever the share.
            (0, 2, ZoneState::FullDisruption),
            (1, 2, ZoneState::Normal),
            (1, 3, ZoneState::PartialDisruption),
            (3, 3, ZoneState::Normal),
            (2, 3, ZoneState::PartialDisruption),
            (0, 1, ZoneState::FullDisruption),
            (0, 0, ZoneState::Normal),
        ];
        for (ready, not_ready, expected) in table {
            assert_eq!(zone_state(ready, not_ready, 0.55), expected, "{ready} ready, {not_ready} not");
        }
        let config = Config::default();
        assert_eq!(config.zone_rate(ZoneState::Normal, 3), 0.1);
        assert_eq!(config.zone_rate(ZoneState::FullDisruption, 3), 0.1);
        assert_eq!(config.zone_rate(ZoneState::PartialDisruption, 50), 0.0);
        assert_eq!(config.zone_rate(ZoneState::PartialDisruption, 51), 0.01);
    }

    #[test]
    fn a_zone_bucket_gives_one_token_then_refills_and_never_at_rate_zero() {
        let start = Instant::now();
        let mut b = Bucket { tokens: 1.0, at: start, qps: 10.0 };
        assert!(b.take(10.0, start));
        assert!(!b.take(10.0, start + Duration::from_millis(50)));
        assert!(b.take(10.0, start + Duration::from_millis(101)));
        // A full bucket swapped to rate 0 gives nothing.
        let mut full = Bucket { tokens: 1.0, at: start, qps: 0.1 };
        assert!(!full.take(0.0, start + Duration::from_secs(100)));
    }
}
