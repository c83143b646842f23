//! The node loop: registration (retried while the API is unreachable), the
//! node status (posted when it changes and at least every
//! `node_status_report_frequency`), the Lease renewed, and the Node's
//! `spec.podCIDR` passed to the runtime; one task per agent.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, NodeStatus};
use kube::api::{Api, Patch, PatchParams, PostParams};
use orchestra_ctrl::events::EventType;
use tokio::time::Instant;

use super::{Jitter, Shared, lease, node_status, status};

/// Registration, node status and lease, in one task per agent.
pub(super) async fn node_loop(shared: Arc<Shared>) {
    let config = &shared.config;
    let nodes: Api<Node> = Api::all(shared.client.clone());
    let mut lease = lease::LeaseKeeper::new(shared.client.clone(), &config.node_name, config.lease_duration_seconds);
    let mut jitter = Jitter::new(&config.node_name);
    let mut register_delay = Duration::from_millis(100).max(config.api_retry / 2);
    let mut last_posted: Option<NodeStatus> = None;
    let mut last_post_at = Instant::now();
    let mut runtime_version: Option<String> = None;
    let mut next_status = Instant::now();
    let mut next_lease = Instant::now();
    loop {
        if !*shared.registered.borrow() {
            match register(&shared, &nodes).await {
                Ok(node) => {
                    let uid = node.metadata.uid.clone();
                    shared.node.lock().uid = uid;
                    adopt_pod_cidr(&shared, &node).await;
                    shared.registered.send_replace(true);
                    next_status = Instant::now();
                    next_lease = Instant::now();
                }
                Err(e) => {
                    tracing::debug!(node = %config.node_name, error = %e, "registration failed; retrying");
                    tokio::time::sleep(jitter.spread(register_delay)).await;
                    register_delay = (register_delay * 2).min(Duration::from_secs(7));
                    continue;
                }
            }
        }
        tokio::time::sleep_until(next_status.min(next_lease)).await;
        let now = Instant::now();
        if now >= next_status {
            next_status = now + jitter.spread(config.node_status_update_frequency);
            if runtime_version.is_none() {
                runtime_version = shared.runtime.version().await.ok().map(|v| v.container_runtime_version());
            }
            let capacity = node_status::capacity(config);
            let allocatable = capacity.saturating_sub(&config.reserved);
            shared.node.lock().allocatable = allocatable;
            let pressure = if config.read_host_pressure {
                node_status::host_pressure(&config.root_dir)
            } else {
                Default::default()
            };
            let network_ready = shared.node.lock().pod_cidr.is_some();
            let observation = node_status::NodeObservation {
                capacity,
                allocatable,
                pressure,
                network_ready,
                runtime_version: runtime_version.clone().unwrap_or_default(),
                images: shared.runtime.list_images().await.unwrap_or_default(),
            };
            let status = node_status::node_status(config, &observation, last_posted.as_ref(), &status::now());
            let due = last_posted.as_ref().is_none_or(|old| node_status::changed(old, &status))
                || now.duration_since(last_post_at) >= config.node_status_report_frequency;
            if due {
                let patch = serde_json::json!({ "status": status });
                match nodes.patch_status(&config.node_name, &PatchParams::default(), &Patch::Merge(&patch)).await {
                    Ok(node) => {
                        shared.stats.node_status_posts.fetch_add(1, Ordering::Relaxed);
                        let was_ready = last_posted.as_ref().is_some_and(is_ready);
                        if is_ready(&status) != was_ready {
                            let (reason, word) = if is_ready(&status) {
                                ("NodeReady", "NodeReady")
                            } else {
                                ("NodeNotReady", "NodeNotReady")
                            };
                            shared.node_event(
                                EventType::Normal,
                                reason,
                                format!("Node {} status is now: {word}", config.node_name),
                            );
                        }
                        last_posted = Some(status);
                        last_post_at = now;
                        shared.node.lock().uid = node.metadata.uid.clone();
                        if adopt_pod_cidr(&shared, &node).await {
                            next_status = Instant::now();
                        }
                    }
                    Err(kube::Error::Api(s)) if s.code == 404 => {
                        // Someone deleted the Node: register again.
                        shared.registered.send_replace(false);
                        last_posted = None;
                        continue;
                    }
                    Err(e) => {
                        tracing::debug!(node = %config.node_name, error = %e, "node status update failed");
                        next_status = Instant::now() + config.api_retry;
                    }
                }
            } else if !network_ready
                && let Ok(node) = nodes.get(&config.node_name).await
                && adopt_pod_cidr(&shared, &node).await
            {
                next_status = Instant::now();
            }
        }
        if now >= next_lease {
            let uid = shared.node.lock().uid.clone();
            match lease.renew(uid.as_deref()).await {
                Ok(()) => {
                    shared.stats.lease_renewals.fetch_add(1, Ordering::Relaxed);
                    next_lease = now + jitter.spread(config.lease_renew_interval);
                }
                Err(e) => {
                    tracing::debug!(node = %config.node_name, error = %e, "lease renewal failed");
                    shared.stats.lease_failures.fetch_add(1, Ordering::Relaxed);
                    next_lease = now + config.api_retry.min(config.lease_renew_interval);
                }
            }
        }
    }
}

fn is_ready(status: &NodeStatus) -> bool {
    status.conditions.iter().flatten().any(|c| c.type_ == "Ready" && c.status == "True")
}

/// Takes `spec.podCIDR` of the Node if it changed; returns whether it did.
async fn adopt_pod_cidr(shared: &Shared, node: &Node) -> bool {
    let Some(cidr) = node.spec.as_ref().and_then(|s| s.pod_cidr.clone()).filter(|c| !c.is_empty()) else {
        return false;
    };
    if shared.node.lock().pod_cidr.as_deref() == Some(cidr.as_str()) {
        return false;
    }
    match shared.runtime.update_runtime_config(&cidr).await {
        Ok(()) => {
            shared.node.lock().pod_cidr = Some(cidr);
            shared.network_ready.send_replace(true);
            true
        }
        Err(e) => {
            tracing::warn!(node = %shared.config.node_name, error = %e, "the runtime refused the pod CIDR");
            false
        }
    }
}

async fn register(shared: &Shared, nodes: &Api<Node>) -> Result<Node, kube::Error> {
    let config = &shared.config;
    let node = node_status::initial_node(config);
    match nodes.create(&PostParams::default(), &node).await {
        Ok(created) => {
            let note = format!("Node {} status is now: NodeHasSufficientMemory", config.node_name);
            shared.node_event(EventType::Normal, "NodeHasSufficientMemory", note);
            let note = format!("Node {} status is now: NodeHasNoDiskPressure", config.node_name);
            shared.node_event(EventType::Normal, "NodeHasNoDiskPressure", note);
            let note = format!("Node {} status is now: NodeHasSufficientPID", config.node_name);
            shared.node_event(EventType::Normal, "NodeHasSufficientPID", note);
            let note = format!("Node {} event: Registered Node {} in Controller", config.node_name, config.node_name);
            shared.node_event(EventType::Normal, "RegisteredNode", note);
            Ok(created)
        }
        Err(kube::Error::Api(s)) if s.code == 409 => {
            // Already registered (an agent restart): make sure our labels are there.
            let patch = serde_json::json!({ "metadata": { "labels": node_status::node_labels(config) } });
            nodes.patch(&config.node_name, &PatchParams::default(), &Patch::Merge(&patch)).await
        }
        Err(e) => Err(e),
    }
}
