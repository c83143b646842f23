//! What the scheduler knows about a pod and a node: precomputed requests,
//! pods on the node, used host ports and images.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, Pod};

use crate::resource::{Resource, pod_requests};

/// A host port in use: (host IP, protocol, port).
pub type HostPort = (String, String, i32);

/// A pod with the facts the scheduler needs, computed once.
#[derive(Debug, Clone)]
pub struct PodInfo {
    /// The pod.
    pub pod: Arc<Pod>,
    /// Its effective requests.
    pub requests: Resource,
    /// Its requests with scoring defaults for missing cpu/memory.
    pub non_zero_requests: Resource,
    /// Host ports it asks for.
    pub host_ports: Vec<HostPort>,
    /// Whether it has (anti-)affinity terms.
    pub has_affinity: bool,
    /// Whether it has required anti-affinity terms.
    pub has_required_anti_affinity: bool,
}

impl PodInfo {
    /// Computes the facts for `pod`.
    pub fn new(pod: Arc<Pod>) -> PodInfo {
        let requests = pod_requests(&pod, false);
        let non_zero_requests = pod_requests(&pod, true);
        let mut host_ports = Vec::new();
        let mut has_affinity = false;
        let mut has_required_anti_affinity = false;
        if let Some(spec) = pod.spec.as_ref() {
            for c in &spec.containers {
                for p in c.ports.iter().flatten() {
                    if let Some(hp) = p.host_port.filter(|p| *p > 0) {
                        let ip = p.host_ip.clone().filter(|s| !s.is_empty()).unwrap_or_else(|| "0.0.0.0".into());
                        let proto = p.protocol.clone().unwrap_or_else(|| "TCP".into());
                        host_ports.push((ip, proto, hp));
                    }
                }
            }
            if let Some(a) = spec.affinity.as_ref() {
                has_affinity = a.pod_affinity.is_some() || a.pod_anti_affinity.is_some();
                has_required_anti_affinity = a
                    .pod_anti_affinity
                    .as_ref()
                    .and_then(|a| a.required_during_scheduling_ignored_during_execution.as_ref())
                    .is_some_and(|t| !t.is_empty());
            }
        }
        PodInfo { pod, requests, non_zero_requests, host_ports, has_affinity, has_required_anti_affinity }
    }
    /// namespace/name.
    pub fn key(&self) -> String {
        pod_key(&self.pod)
    }
    /// The pod's namespace.
    pub fn namespace(&self) -> &str {
        self.pod.metadata.namespace.as_deref().unwrap_or("default")
    }
    /// The pod's UID (its name when it has none).
    pub fn uid(&self) -> &str {
        pod_uid(&self.pod)
    }
    /// True if `other` (a later version of the same pod) counts on a node
    /// exactly as this one does: requests, host ports, labels and affinity.
    pub fn same_placement(&self, other: &PodInfo) -> bool {
        fn affinity(p: &PodInfo) -> Option<&k8s_openapi::api::core::v1::Affinity> {
            p.pod.spec.as_ref().and_then(|s| s.affinity.as_ref())
        }
        self.requests == other.requests
            && self.non_zero_requests == other.non_zero_requests
            && self.host_ports == other.host_ports
            && self.pod.metadata.labels == other.pod.metadata.labels
            && self.namespace() == other.namespace()
            && affinity(self) == affinity(other)
    }
}

/// namespace/name of a pod.
pub fn pod_key(pod: &Pod) -> String {
    format!("{}/{}", pod.metadata.namespace.as_deref().unwrap_or("default"), pod.metadata.name.as_deref().unwrap_or(""))
}

/// The UID of a pod (its namespace/name when it has none).
pub fn pod_uid(pod: &Pod) -> &str {
    pod.metadata.uid.as_deref().or(pod.metadata.name.as_deref()).unwrap_or("")
}

/// A container image present on a node.
#[derive(Debug, Clone, Default)]
pub struct ImageState {
    /// Size in bytes.
    pub size: i64,
    /// How many nodes have it (filled by the snapshot).
    pub num_nodes: usize,
}

/// A node with its pods and the resources they request.
#[derive(Debug, Clone)]
pub struct NodeInfo {
    /// The node.
    pub node: Arc<Node>,
    /// Its name, shared with the node scores of every cycle.
    pub shared_name: Arc<str>,
    /// `spec.unschedulable` (kept here, beside the counts filters read, so
    /// that filtering a node seldom reaches into the node object).
    pub unschedulable: bool,
    /// `spec.taints`.
    pub taints: Vec<k8s_openapi::api::core::v1::Taint>,
    /// Its pods (bound and assumed).
    pub pods: Vec<Arc<PodInfo>>,
    /// Pods with (anti-)affinity.
    pub pods_with_affinity: Vec<Arc<PodInfo>>,
    /// Pods with required anti-affinity.
    pub pods_with_required_anti_affinity: Vec<Arc<PodInfo>>,
    /// Allocatable resources.
    pub allocatable: Resource,
    /// Sum of the pods' requests.
    pub requested: Resource,
    /// Sum of the pods' requests with scoring defaults.
    pub non_zero_requested: Resource,
    /// Host ports in use.
    pub used_ports: HashSet<HostPort>,
    /// Images by every name they are known by.
    pub images: HashMap<String, ImageState>,
    /// Incremented on every change.
    pub generation: u64,
}

impl NodeInfo {
    /// A node info for `node` with no pods.
    pub fn new(node: Arc<Node>) -> NodeInfo {
        let mut info = NodeInfo {
            node: node.clone(),
            shared_name: Arc::from(""),
            unschedulable: false,
            taints: Vec::new(),
            pods: Vec::new(),
            pods_with_affinity: Vec::new(),
            pods_with_required_anti_affinity: Vec::new(),
            allocatable: Resource::default(),
            requested: Resource::default(),
            non_zero_requested: Resource::default(),
            used_ports: HashSet::new(),
            images: HashMap::new(),
            generation: 0,
        };
        info.set_node(node);
        info
    }
    /// Replaces the node object (keeps the pods).
    pub fn set_node(&mut self, node: Arc<Node>) {
        let status = node.status.as_ref();
        self.allocatable = Resource::from_map(status.and_then(|s| s.allocatable.as_ref()));
        self.images.clear();
        for image in status.and_then(|s| s.images.as_ref()).into_iter().flatten() {
            for name in image.names.iter().flatten() {
                self.images.insert(name.clone(), ImageState { size: image.size_bytes.unwrap_or(0), num_nodes: 1 });
            }
        }
        let spec = node.spec.as_ref();
        self.unschedulable = spec.and_then(|s| s.unschedulable).unwrap_or(false);
        self.taints = spec.and_then(|s| s.taints.clone()).unwrap_or_default();
        if self.shared_name.as_ref() != node.metadata.name.as_deref().unwrap_or("") {
            self.shared_name = Arc::from(node.metadata.name.as_deref().unwrap_or(""));
        }
        self.node = node;
        self.generation += 1;
    }
    /// The node's name.
    pub fn name(&self) -> &str {
        &self.shared_name
    }
    /// The node's labels.
    pub fn labels(&self) -> Option<&std::collections::BTreeMap<String, String>> {
        self.node.metadata.labels.as_ref()
    }
    /// The value of label `key` on the node.
    pub fn label(&self, key: &str) -> Option<&str> {
        self.labels().and_then(|l| l.get(key)).map(String::as_str)
    }
    /// Adds a pod.
    pub fn add_pod(&mut self, pod: Arc<PodInfo>) {
        self.requested.add(&pod.requests);
        self.non_zero_requested.add(&pod.non_zero_requests);
        for p in &pod.host_ports {
            self.used_ports.insert(p.clone());
        }
        if pod.has_affinity {
            self.pods_with_affinity.push(pod.clone());
        }
        if pod.has_required_anti_affinity {
            self.pods_with_required_anti_affinity.push(pod.clone());
        }
        self.pods.push(pod);
        self.generation += 1;
    }
    /// Removes the pod with `uid`; returns whether it was there.
    pub fn remove_pod(&mut self, uid: &str) -> bool {
        let Some(i) = self.pods.iter().position(|p| p.uid() == uid) else { return false };
        let pod = self.pods.swap_remove(i);
        self.requested.sub(&pod.requests);
        self.non_zero_requested.sub(&pod.non_zero_requests);
        for p in &pod.host_ports {
            self.used_ports.remove(p);
        }
        self.pods_with_affinity.retain(|p| p.uid() != uid);
        self.pods_with_required_anti_affinity.retain(|p| p.uid() != uid);
        self.generation += 1;
        true
    }
    /// Whether a host port conflicts with one in use (0.0.0.0 conflicts with every IP).
    pub fn port_conflicts(&self, port: &HostPort) -> bool {
        let (ip, proto, n) = port;
        if ip == "0.0.0.0" {
            self.used_ports.iter().any(|(_, p, m)| p == proto && m == n)
        } else {
            self.used_ports.contains(port) || self.used_ports.contains(&("0.0.0.0".to_owned(), proto.clone(), *n))
        }
    }
}
