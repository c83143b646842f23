//! Test builders: `PodBuilder::new("p").cpu("1").build()`,
//! `NodeBuilder::new("n").cpu("4").memory("8Gi").build()`.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Affinity, Container, ContainerPort, Node, NodeSelectorRequirement, NodeSelectorTerm, NodeSpec, NodeStatus, Pod,
    PodAffinityTerm, PodSpec, ResourceRequirements, Taint, Toleration, TopologySpreadConstraint,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};

/// Builds pods for tests.
///
/// ```
/// use orchestra_sched::testing::{PodBuilder, pod_info};
///
/// let pod = PodBuilder::new("web").namespace("shop").cpu("500m").memory("1Gi").label("app", "web").build();
/// assert_eq!(pod.metadata.namespace.as_deref(), Some("shop"));
/// let info = pod_info(pod);
/// assert_eq!(info.requests.milli_cpu, 500);
/// assert_eq!(info.requests.memory, 1 << 30);
/// ```
#[derive(Debug, Clone)]
pub struct PodBuilder {
    pod: Pod,
}

fn q(s: &str) -> Quantity {
    Quantity(s.to_owned())
}

impl PodBuilder {
    /// A pod named `name` in `default` with one container and no requests.
    pub fn new(name: &str) -> PodBuilder {
        PodBuilder {
            pod: Pod {
                metadata: ObjectMeta {
                    name: Some(name.to_owned()),
                    namespace: Some("default".to_owned()),
                    uid: Some(format!("uid-{name}")),
                    ..Default::default()
                },
                spec: Some(PodSpec {
                    containers: vec![Container { name: "c".into(), image: Some("pause".into()), ..Default::default() }],
                    ..Default::default()
                }),
                status: None,
            },
        }
    }
    fn spec(&mut self) -> &mut PodSpec {
        self.pod.spec.as_mut().expect("spec")
    }
    fn first_request(&mut self, name: &str, v: &str) {
        let c = &mut self.spec().containers[0];
        c.resources
            .get_or_insert_with(ResourceRequirements::default)
            .requests
            .get_or_insert_with(BTreeMap::new)
            .insert(name.to_owned(), q(v));
    }
    /// Sets the namespace.
    pub fn namespace(mut self, ns: &str) -> Self {
        self.pod.metadata.namespace = Some(ns.into());
        self
    }
    /// Sets the UID.
    pub fn uid(mut self, uid: &str) -> Self {
        self.pod.metadata.uid = Some(uid.into());
        self
    }
    /// Requests CPU on the first container.
    pub fn cpu(mut self, v: &str) -> Self {
        self.first_request("cpu", v);
        self
    }
    /// Requests memory on the first container.
    pub fn memory(mut self, v: &str) -> Self {
        self.first_request("memory", v);
        self
    }
    /// Requests any resource on the first container.
    pub fn request(mut self, name: &str, v: &str) -> Self {
        self.first_request(name, v);
        self
    }
    fn container(name: String, cpu: &str, restart: Option<&str>) -> Container {
        Container {
            name,
            resources: Some(ResourceRequirements {
                requests: Some([("cpu".to_owned(), q(cpu))].into()),
                ..Default::default()
            }),
            restart_policy: restart.map(Into::into),
            ..Default::default()
        }
    }
    /// Adds a container requesting `cpu` (the first call fills the default container).
    pub fn container_cpu(mut self, cpu: &str) -> Self {
        let n = self.spec().containers.len();
        let first_empty = n == 1 && self.spec().containers[0].resources.is_none();
        if first_empty {
            self.first_request("cpu", cpu);
        } else {
            self.spec().containers.push(Self::container(format!("c{n}"), cpu, None));
        }
        self
    }
    /// Adds an init container requesting `cpu`.
    pub fn init_cpu(mut self, cpu: &str) -> Self {
        let n = self.spec().init_containers.as_ref().map_or(0, Vec::len);
        self.spec().init_containers.get_or_insert_with(Vec::new).push(Self::container(format!("i{n}"), cpu, None));
        self
    }
    /// Adds a sidecar (restartable init container) requesting `cpu`.
    pub fn sidecar_cpu(mut self, cpu: &str) -> Self {
        let n = self.spec().init_containers.as_ref().map_or(0, Vec::len);
        self.spec().init_containers.get_or_insert_with(Vec::new).push(Self::container(
            format!("s{n}"),
            cpu,
            Some("Always"),
        ));
        self
    }
    /// Sets the CPU overhead.
    pub fn overhead_cpu(mut self, cpu: &str) -> Self {
        self.spec().overhead = Some([("cpu".to_owned(), q(cpu))].into());
        self
    }
    /// Adds a label.
    pub fn label(mut self, k: &str, v: &str) -> Self {
        self.pod.metadata.labels.get_or_insert_with(BTreeMap::new).insert(k.into(), v.into());
        self
    }
    /// Sets spec.nodeName.
    pub fn node(mut self, n: &str) -> Self {
        self.spec().node_name = Some(n.into());
        self
    }
    /// Sets spec.schedulerName.
    pub fn scheduler(mut self, n: &str) -> Self {
        self.spec().scheduler_name = Some(n.into());
        self
    }
    /// Sets `terminationGracePeriodSeconds` (0: deleted at once, even when bound).
    pub fn termination_grace(mut self, seconds: i64) -> Self {
        self.spec().termination_grace_period_seconds = Some(seconds);
        self
    }
    /// Sets the priority.
    pub fn priority(mut self, p: i32) -> Self {
        self.spec().priority = Some(p);
        self
    }
    /// Adds a nodeSelector entry.
    pub fn node_selector(mut self, k: &str, v: &str) -> Self {
        self.spec().node_selector.get_or_insert_with(BTreeMap::new).insert(k.into(), v.into());
        self
    }
    /// Asks for a host port (TCP, any IP).
    pub fn host_port(mut self, port: i32) -> Self {
        self.spec().containers[0].ports.get_or_insert_with(Vec::new).push(ContainerPort {
            container_port: port,
            host_port: Some(port),
            protocol: Some("TCP".into()),
            ..Default::default()
        });
        self
    }
    /// Adds a toleration.
    pub fn toleration(mut self, key: &str, op: &str, value: Option<&str>, effect: Option<&str>) -> Self {
        self.spec().tolerations.get_or_insert_with(Vec::new).push(Toleration {
            key: Some(key.into()),
            operator: Some(op.into()),
            value: value.map(Into::into),
            effect: effect.map(Into::into),
            ..Default::default()
        });
        self
    }
    fn affinity(&mut self) -> &mut Affinity {
        self.spec().affinity.get_or_insert_with(Affinity::default)
    }
    /// Adds a required node affinity term with one requirement.
    pub fn required_node_affinity(mut self, key: &str, op: &str, values: &[&str]) -> Self {
        let na = self.affinity().node_affinity.get_or_insert_with(Default::default);
        let sel = na.required_during_scheduling_ignored_during_execution.get_or_insert_with(Default::default);
        sel.node_selector_terms.push(NodeSelectorTerm {
            match_expressions: Some(vec![NodeSelectorRequirement {
                key: key.into(),
                operator: op.into(),
                values: Some(values.iter().map(|v| v.to_string()).collect()),
            }]),
            ..Default::default()
        });
        self
    }
    /// Adds a preferred node affinity term.
    pub fn preferred_node_affinity(mut self, weight: i32, key: &str, op: &str, values: &[&str]) -> Self {
        let na = self.affinity().node_affinity.get_or_insert_with(Default::default);
        na.preferred_during_scheduling_ignored_during_execution.get_or_insert_with(Vec::new).push(
            k8s_openapi::api::core::v1::PreferredSchedulingTerm {
                weight,
                preference: NodeSelectorTerm {
                    match_expressions: Some(vec![NodeSelectorRequirement {
                        key: key.into(),
                        operator: op.into(),
                        values: Some(values.iter().map(|v| v.to_string()).collect()),
                    }]),
                    ..Default::default()
                },
            },
        );
        self
    }
    fn term(labels: &[(&str, &str)], topology_key: &str) -> PodAffinityTerm {
        PodAffinityTerm {
            label_selector: Some(LabelSelector {
                match_labels: Some(labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()),
                ..Default::default()
            }),
            topology_key: topology_key.into(),
            ..Default::default()
        }
    }
    /// Adds a required pod affinity term.
    pub fn pod_affinity(mut self, labels: &[(&str, &str)], topology_key: &str) -> Self {
        let a = self.affinity().pod_affinity.get_or_insert_with(Default::default);
        a.required_during_scheduling_ignored_during_execution
            .get_or_insert_with(Vec::new)
            .push(Self::term(labels, topology_key));
        self
    }
    /// Adds a required pod anti-affinity term.
    pub fn pod_anti_affinity(mut self, labels: &[(&str, &str)], topology_key: &str) -> Self {
        let a = self.affinity().pod_anti_affinity.get_or_insert_with(Default::default);
        a.required_during_scheduling_ignored_during_execution
            .get_or_insert_with(Vec::new)
            .push(Self::term(labels, topology_key));
        self
    }
    /// Adds a preferred pod affinity (positive weight) or anti-affinity (negative) term.
    pub fn preferred_pod_affinity(mut self, weight: i32, labels: &[(&str, &str)], topology_key: &str) -> Self {
        let term = k8s_openapi::api::core::v1::WeightedPodAffinityTerm {
            weight: weight.abs(),
            pod_affinity_term: Self::term(labels, topology_key),
        };
        if weight >= 0 {
            let a = self.affinity().pod_affinity.get_or_insert_with(Default::default);
            a.preferred_during_scheduling_ignored_during_execution.get_or_insert_with(Vec::new).push(term);
        } else {
            let a = self.affinity().pod_anti_affinity.get_or_insert_with(Default::default);
            a.preferred_during_scheduling_ignored_during_execution.get_or_insert_with(Vec::new).push(term);
        }
        self
    }
    /// Adds a topology spread constraint over pods with `labels`.
    pub fn spread(mut self, max_skew: i32, topology_key: &str, when: &str, labels: &[(&str, &str)]) -> Self {
        self.spec().topology_spread_constraints.get_or_insert_with(Vec::new).push(TopologySpreadConstraint {
            max_skew,
            topology_key: topology_key.into(),
            when_unsatisfiable: when.into(),
            label_selector: Some(LabelSelector {
                match_labels: Some(labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()),
                ..Default::default()
            }),
            ..Default::default()
        });
        self
    }
    /// Mounts the PersistentVolumeClaim `claim` as a volume named after it.
    pub fn pvc(mut self, claim: &str) -> Self {
        self.spec().volumes.get_or_insert_with(Vec::new).push(k8s_openapi::api::core::v1::Volume {
            name: claim.into(),
            persistent_volume_claim: Some(k8s_openapi::api::core::v1::PersistentVolumeClaimVolumeSource {
                claim_name: claim.into(),
                read_only: None,
            }),
            ..Default::default()
        });
        self
    }
    /// Modifies the pod freely.
    pub fn with(mut self, f: impl FnOnce(&mut Pod)) -> Self {
        f(&mut self.pod);
        self
    }
    /// The pod.
    pub fn build(self) -> Pod {
        self.pod
    }
}

/// Builds nodes for tests (default allocatable: 110 pods).
///
/// ```
/// use orchestra_sched::testing::{NodeBuilder, PodBuilder, node_info};
///
/// let node = NodeBuilder::new("n1").cpu("4").memory("8Gi").taint("dedicated", "db", "NoSchedule").build();
/// let info = node_info(node, vec![PodBuilder::new("db").cpu("1").build()]);
/// assert_eq!(info.allocatable.milli_cpu, 4000);
/// assert_eq!(info.allocatable.allowed_pod_number, 110);
/// assert_eq!(info.requested.milli_cpu, 1000);
/// assert_eq!(info.taints.len(), 1);
/// ```
#[derive(Debug, Clone)]
pub struct NodeBuilder {
    node: Node,
}

impl NodeBuilder {
    /// A ready node named `name` with room for 110 pods.
    pub fn new(name: &str) -> NodeBuilder {
        let mut n = NodeBuilder {
            node: Node {
                metadata: ObjectMeta {
                    name: Some(name.into()),
                    labels: Some([("kubernetes.io/hostname".to_owned(), name.to_owned())].into()),
                    ..Default::default()
                },
                spec: Some(NodeSpec::default()),
                status: Some(NodeStatus::default()),
            },
        };
        n = n.allocatable("pods", "110");
        n
    }
    /// Sets an allocatable (and capacity) amount.
    pub fn allocatable(mut self, name: &str, v: &str) -> Self {
        let st = self.node.status.as_mut().expect("status");
        st.allocatable.get_or_insert_with(BTreeMap::new).insert(name.into(), q(v));
        st.capacity.get_or_insert_with(BTreeMap::new).insert(name.into(), q(v));
        self
    }
    /// Allocatable CPU.
    pub fn cpu(self, v: &str) -> Self {
        self.allocatable("cpu", v)
    }
    /// Allocatable memory.
    pub fn memory(self, v: &str) -> Self {
        self.allocatable("memory", v)
    }
    /// Allocatable pod count.
    pub fn pods(self, v: &str) -> Self {
        self.allocatable("pods", v)
    }
    /// Adds a label.
    pub fn label(mut self, k: &str, v: &str) -> Self {
        self.node.metadata.labels.get_or_insert_with(BTreeMap::new).insert(k.into(), v.into());
        self
    }
    /// Adds a taint.
    pub fn taint(mut self, key: &str, value: &str, effect: &str) -> Self {
        self.node.spec.as_mut().expect("spec").taints.get_or_insert_with(Vec::new).push(Taint {
            key: key.into(),
            value: Some(value.into()),
            effect: effect.into(),
            time_added: None,
        });
        self
    }
    /// Marks the node unschedulable (cordoned).
    pub fn unschedulable(mut self) -> Self {
        self.node.spec.as_mut().expect("spec").unschedulable = Some(true);
        self
    }
    /// Adds an image with `size` bytes.
    pub fn image(mut self, name: &str, size: i64) -> Self {
        self.node.status.as_mut().expect("status").images.get_or_insert_with(Vec::new).push(
            k8s_openapi::api::core::v1::ContainerImage { names: Some(vec![name.into()]), size_bytes: Some(size) },
        );
        self
    }
    /// The node.
    pub fn build(self) -> Node {
        self.node
    }
}

/// A node info for `node` holding `pods`.
pub fn node_info(node: Node, pods: Vec<Pod>) -> crate::node_info::NodeInfo {
    let mut info = crate::node_info::NodeInfo::new(std::sync::Arc::new(node));
    for p in pods {
        info.add_pod(std::sync::Arc::new(crate::node_info::PodInfo::new(std::sync::Arc::new(p))));
    }
    info
}

/// A pod info for `pod`.
pub fn pod_info(pod: Pod) -> crate::node_info::PodInfo {
    crate::node_info::PodInfo::new(std::sync::Arc::new(pod))
}

/// Builds PersistentVolumeClaims for tests (ReadWriteOnce, 1Gi, namespace `default`).
///
/// ```
/// use orchestra_sched::testing::PvcBuilder;
///
/// let claim = PvcBuilder::new("data").class("fast").storage("10Gi").access_modes(&["ReadWriteOncePod"]).build();
/// let spec = claim.spec.unwrap();
/// assert_eq!(spec.storage_class_name.as_deref(), Some("fast"));
/// assert_eq!(spec.resources.unwrap().requests.unwrap()["storage"].0, "10Gi");
/// assert_eq!(spec.volume_name, None);
/// ```
#[derive(Debug, Clone)]
pub struct PvcBuilder {
    pvc: k8s_openapi::api::core::v1::PersistentVolumeClaim,
}

impl PvcBuilder {
    /// An unbound claim `name` in `default` asking for 1Gi ReadWriteOnce.
    pub fn new(name: &str) -> PvcBuilder {
        PvcBuilder {
            pvc: k8s_openapi::api::core::v1::PersistentVolumeClaim {
                metadata: ObjectMeta {
                    name: Some(name.into()),
                    namespace: Some("default".into()),
                    uid: Some(format!("uid-pvc-{name}")),
                    ..Default::default()
                },
                spec: Some(k8s_openapi::api::core::v1::PersistentVolumeClaimSpec {
                    access_modes: Some(vec!["ReadWriteOnce".into()]),
                    resources: Some(k8s_openapi::api::core::v1::VolumeResourceRequirements {
                        requests: Some([("storage".to_owned(), q("1Gi"))].into()),
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
                status: None,
            },
        }
    }
    fn spec(&mut self) -> &mut k8s_openapi::api::core::v1::PersistentVolumeClaimSpec {
        self.pvc.spec.as_mut().expect("spec")
    }
    /// Sets the storage class.
    pub fn class(mut self, class: &str) -> Self {
        self.spec().storage_class_name = Some(class.into());
        self
    }
    /// Binds it to volume `pv` (`spec.volumeName`).
    pub fn volume(mut self, pv: &str) -> Self {
        self.spec().volume_name = Some(pv.into());
        self
    }
    /// Sets the access modes.
    pub fn access_modes(mut self, modes: &[&str]) -> Self {
        self.spec().access_modes = Some(modes.iter().map(|m| m.to_string()).collect());
        self
    }
    /// Requests `storage`.
    pub fn storage(mut self, storage: &str) -> Self {
        self.spec().resources = Some(k8s_openapi::api::core::v1::VolumeResourceRequirements {
            requests: Some([("storage".to_owned(), q(storage))].into()),
            ..Default::default()
        });
        self
    }
    /// Selects volumes with these labels.
    pub fn selector(mut self, labels: &[(&str, &str)]) -> Self {
        self.spec().selector = Some(LabelSelector {
            match_labels: Some(labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()),
            ..Default::default()
        });
        self
    }
    /// Adds an annotation.
    pub fn annotation(mut self, k: &str, v: &str) -> Self {
        self.pvc.metadata.annotations.get_or_insert_with(BTreeMap::new).insert(k.into(), v.into());
        self
    }
    /// The claim.
    pub fn build(self) -> k8s_openapi::api::core::v1::PersistentVolumeClaim {
        self.pvc
    }
}

/// Builds PersistentVolumes for tests (ReadWriteOnce, 1Gi, Available).
///
/// ```
/// use orchestra_sched::testing::PvBuilder;
///
/// let volume = PvBuilder::new("pv-1").class("fast").capacity("10Gi").node_affinity("zone", &["a"]).build();
/// assert_eq!(volume.spec.as_ref().unwrap().capacity.as_ref().unwrap()["storage"].0, "10Gi");
/// assert_eq!(volume.status.unwrap().phase.as_deref(), Some("Available"));
/// ```
#[derive(Debug, Clone)]
pub struct PvBuilder {
    pv: k8s_openapi::api::core::v1::PersistentVolume,
}

impl PvBuilder {
    /// An available 1Gi ReadWriteOnce volume `name` with no class.
    pub fn new(name: &str) -> PvBuilder {
        PvBuilder {
            pv: k8s_openapi::api::core::v1::PersistentVolume {
                metadata: ObjectMeta { name: Some(name.into()), ..Default::default() },
                spec: Some(k8s_openapi::api::core::v1::PersistentVolumeSpec {
                    access_modes: Some(vec!["ReadWriteOnce".into()]),
                    capacity: Some([("storage".to_owned(), q("1Gi"))].into()),
                    host_path: Some(k8s_openapi::api::core::v1::HostPathVolumeSource {
                        path: format!("/tmp/{name}"),
                        type_: None,
                    }),
                    ..Default::default()
                }),
                status: Some(k8s_openapi::api::core::v1::PersistentVolumeStatus {
                    phase: Some("Available".into()),
                    ..Default::default()
                }),
            },
        }
    }
    fn spec(&mut self) -> &mut k8s_openapi::api::core::v1::PersistentVolumeSpec {
        self.pv.spec.as_mut().expect("spec")
    }
    /// Sets the storage class.
    pub fn class(mut self, class: &str) -> Self {
        self.spec().storage_class_name = Some(class.into());
        self
    }
    /// Sets the capacity.
    pub fn capacity(mut self, storage: &str) -> Self {
        self.spec().capacity = Some([("storage".to_owned(), q(storage))].into());
        self
    }
    /// Sets the access modes.
    pub fn access_modes(mut self, modes: &[&str]) -> Self {
        self.spec().access_modes = Some(modes.iter().map(|m| m.to_string()).collect());
        self
    }
    /// Adds a label.
    pub fn label(mut self, k: &str, v: &str) -> Self {
        self.pv.metadata.labels.get_or_insert_with(BTreeMap::new).insert(k.into(), v.into());
        self
    }
    /// Requires nodes whose label `key` is one of `values`.
    pub fn node_affinity(mut self, key: &str, values: &[&str]) -> Self {
        self.spec().node_affinity = Some(k8s_openapi::api::core::v1::VolumeNodeAffinity {
            required: Some(k8s_openapi::api::core::v1::NodeSelector {
                node_selector_terms: vec![NodeSelectorTerm {
                    match_expressions: Some(vec![NodeSelectorRequirement {
                        key: key.into(),
                        operator: "In".into(),
                        values: Some(values.iter().map(|v| v.to_string()).collect()),
                    }]),
                    ..Default::default()
                }],
            }),
        });
        self
    }
    /// Binds it to claim `default/<claim>` (`spec.claimRef`).
    pub fn claim(mut self, claim: &str) -> Self {
        self.spec().claim_ref = Some(k8s_openapi::api::core::v1::ObjectReference {
            kind: Some("PersistentVolumeClaim".into()),
            namespace: Some("default".into()),
            name: Some(claim.into()),
            ..Default::default()
        });
        self
    }
    /// Sets `status.phase`.
    pub fn phase(mut self, phase: &str) -> Self {
        self.pv.status = Some(k8s_openapi::api::core::v1::PersistentVolumeStatus {
            phase: Some(phase.into()),
            ..Default::default()
        });
        self
    }
    /// The volume.
    pub fn build(self) -> k8s_openapi::api::core::v1::PersistentVolume {
        self.pv
    }
}

/// A StorageClass `name` with `binding_mode` (`Immediate` or
/// `WaitForFirstConsumer`) and `provisioner` (`kubernetes.io/no-provisioner`
/// for none).
pub fn storage_class(name: &str, binding_mode: &str, provisioner: &str) -> k8s_openapi::api::storage::v1::StorageClass {
    k8s_openapi::api::storage::v1::StorageClass {
        metadata: ObjectMeta { name: Some(name.into()), ..Default::default() },
        provisioner: provisioner.into(),
        volume_binding_mode: Some(binding_mode.into()),
        ..Default::default()
    }
}
