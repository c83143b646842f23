//! VolumeZone: the zone and region labels of the volumes a pod's claims are
//! bound to (`topology.kubernetes.io/zone`/`region` and the deprecated
//! `failure-domain.beta.kubernetes.io` ones) must match the node's.
//! Unbound claims of a `WaitForFirstConsumer` class are left to
//! VolumeBinding.

use std::collections::HashSet;
use std::sync::Arc;

use crate::framework::*;
use crate::listers::Listers;
use crate::node_info::{NodeInfo, PodInfo};
use crate::plugins::helpers::{claim_class, pod_claims};
use crate::registry::{NoArgs, PluginError, PluginSet};
use crate::snapshot::Snapshot;

/// The plugin's name.
pub const NAME: &str = "VolumeZone";
/// Upstream's reason.
pub const ERR_REASON_CONFLICT: &str = "node(s) had no available volume zone";
/// The topology labels compared, GA then deprecated beta.
pub const TOPOLOGY_LABELS: [&str; 4] = [
    "topology.kubernetes.io/zone",
    "topology.kubernetes.io/region",
    "failure-domain.beta.kubernetes.io/zone",
    "failure-domain.beta.kubernetes.io/region",
];

/// The plugin.
pub struct VolumeZone {
    listers: Arc<Listers>,
}

impl Plugin for VolumeZone {
    fn name(&self) -> &'static str {
        NAME
    }
    fn events_to_register(&self) -> Vec<ClusterEvent> {
        vec![
            ClusterEvent::new(EventResource::StorageClass, action::ADD),
            ClusterEvent::new(EventResource::Node, action::ADD | action::UPDATE_NODE_LABEL | action::UPDATE_NODE_TAINT),
            ClusterEvent::new(EventResource::PersistentVolumeClaim, action::ADD | action::UPDATE),
            ClusterEvent::new(EventResource::PersistentVolume, action::ADD | action::UPDATE),
        ]
    }
}

/// One topology constraint of a volume: a label and the values it allows.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Topology {
    key: &'static str,
    values: HashSet<String>,
}

struct State(Vec<Topology>);

/// The GA label for a deprecated beta one (and the label itself otherwise).
fn ga_label(key: &str) -> &str {
    match key {
        "failure-domain.beta.kubernetes.io/zone" => "topology.kubernetes.io/zone",
        "failure-domain.beta.kubernetes.io/region" => "topology.kubernetes.io/region",
        other => other,
    }
}

impl VolumeZone {
    /// A plugin reading `listers`.
    pub fn new(listers: Arc<Listers>) -> VolumeZone {
        VolumeZone { listers }
    }
}

impl PreFilter for VolumeZone {
    fn pre_filter(&self, state: &mut CycleState, pod: &PodInfo, _: &Snapshot) -> (PreFilterResult, Status) {
        let claims = pod_claims(&pod.pod);
        if claims.is_empty() {
            return (None, Status::skip());
        }
        let mut topologies = Vec::new();
        for (_, claim, _) in &claims {
            let Some(pvc) = self.listers.pvcs.get_namespaced(pod.namespace(), claim) else {
                return (None, Status::unresolvable(format!("persistentvolumeclaim {claim:?} not found")));
            };
            let volume = pvc.spec.as_ref().and_then(|s| s.volume_name.clone()).unwrap_or_default();
            if volume.is_empty() {
                let class = claim_class(&pvc);
                if class.is_empty() {
                    return (None, Status::unresolvable("PersistentVolumeClaim had no pv name and storageClass name"));
                }
                let Some(sc) = self.listers.storage_classes.get(class) else {
                    return (None, Status::unresolvable(format!("storageclass.storage.k8s.io {class:?} not found")));
                };
                if sc.volume_binding_mode.as_deref() == Some("WaitForFirstConsumer") {
                    continue; // VolumeBinding decides
                }
                return (None, Status::unresolvable("PersistentVolume had no name"));
            }
            let Some(pv) = self.listers.pvs.get(&volume) else {
                return (None, Status::unresolvable(format!("persistentvolume {volume:?} not found")));
            };
            for key in TOPOLOGY_LABELS {
                if let Some(v) = pv.metadata.labels.as_ref().and_then(|l| l.get(key)) {
                    // Several zones are joined by "__".
                    topologies.push(Topology { key, values: v.split("__").map(str::to_owned).collect() });
                }
            }
        }
        if topologies.is_empty() {
            return (None, Status::skip());
        }
        state.write(NAME, State(topologies));
        (None, Status::success())
    }
}

impl Filter for VolumeZone {
    fn filter(&self, state: &CycleState, _: &PodInfo, node: &NodeInfo) -> Status {
        let Some(State(topologies)) = state.read::<State>(NAME) else { return Status::success() };
        // A node with no topology labels has no zone constraint.
        if !TOPOLOGY_LABELS.iter().any(|k| node.label(k).is_some()) {
            return Status::success();
        }
        for t in topologies {
            let v = node.label(t.key).or_else(|| node.label(ga_label(t.key)));
            if !v.is_some_and(|v| t.values.contains(v)) {
                return Status::unresolvable(ERR_REASON_CONFLICT);
            }
        }
        Status::success()
    }
}

/// The plugin's arguments: it has no options.
pub type Args = NoArgs;

/// Builds the plugin, as registered under [`NAME`].
pub fn new(_: Args, handle: &Handle) -> Result<PluginSet, PluginError> {
    let p = Arc::new(VolumeZone::new(handle.listers.clone()));
    Ok(PluginSet::new(&p).pre_filter(&p).filter(&p))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{NodeBuilder, PodBuilder, PvBuilder, PvcBuilder, node_info, pod_info, storage_class};
    use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim};

    const ZONE: &str = "topology.kubernetes.io/zone";
    const REGION: &str = "topology.kubernetes.io/region";
    const BETA_ZONE: &str = "failure-domain.beta.kubernetes.io/zone";

    #[test]
    fn table() {
        let node = |labels: &[(&str, &str)]| -> Node {
            let mut b = NodeBuilder::new("n");
            for (k, v) in labels {
                b = b.label(k, v);
            }
            b.build()
        };
        let bound = || vec![PvcBuilder::new("data").volume("pv").build()];
        type Case = (&'static str, Vec<PersistentVolumeClaim>, Option<PersistentVolume>, Node, Code, &'static str);
        let cases: Vec<Case> = vec![
            (
                "missing claim",
                vec![],
                None,
                node(&[]),
                Code::UnschedulableAndUnresolvable,
                "persistentvolumeclaim \"data\" not found",
            ),
            (
                "missing volume",
                bound(),
                None,
                node(&[]),
                Code::UnschedulableAndUnresolvable,
                "persistentvolume \"pv\" not found",
            ),
            ("volume without zone", bound(), Some(PvBuilder::new("pv").build()), node(&[(ZONE, "a")]), Code::Skip, ""),
            (
                "same zone",
                bound(),
                Some(PvBuilder::new("pv").label(ZONE, "a").build()),
                node(&[(ZONE, "a")]),
                Code::Success,
                "",
            ),
            (
                "other zone",
                bound(),
                Some(PvBuilder::new("pv").label(ZONE, "a").build()),
                node(&[(ZONE, "b")]),
                Code::UnschedulableAndUnresolvable,
                ERR_REASON_CONFLICT,
            ),
            (
                "node without topology",
                bound(),
                Some(PvBuilder::new("pv").label(ZONE, "a").build()),
                node(&[]),
                Code::Success,
                "",
            ),
            (
                "one of several zones",
                bound(),
                Some(PvBuilder::new("pv").label(ZONE, "a__b").build()),
                node(&[(ZONE, "b")]),
                Code::Success,
                "",
            ),
            (
                "zone matches, region does not",
                bound(),
                Some(PvBuilder::new("pv").label(ZONE, "a").label(REGION, "r1").build()),
                node(&[(ZONE, "a"), (REGION, "r2")]),
                Code::UnschedulableAndUnresolvable,
                ERR_REASON_CONFLICT,
            ),
            (
                "beta volume label, GA node label",
                bound(),
                Some(PvBuilder::new("pv").label(BETA_ZONE, "a").build()),
                node(&[(ZONE, "a")]),
                Code::Success,
                "",
            ),
            (
                "beta volume label, other GA zone",
                bound(),
                Some(PvBuilder::new("pv").label(BETA_ZONE, "a").build()),
                node(&[(ZONE, "b")]),
                Code::UnschedulableAndUnresolvable,
                ERR_REASON_CONFLICT,
            ),
            (
                "unbound, delayed class",
                vec![PvcBuilder::new("data").class("wait").build()],
                None,
                node(&[(ZONE, "a")]),
                Code::Skip,
                "",
            ),
            (
                "unbound, immediate class",
                vec![PvcBuilder::new("data").class("now").build()],
                None,
                node(&[(ZONE, "a")]),
                Code::UnschedulableAndUnresolvable,
                "PersistentVolume had no name",
            ),
            (
                "unbound, no class",
                vec![PvcBuilder::new("data").build()],
                None,
                node(&[(ZONE, "a")]),
                Code::UnschedulableAndUnresolvable,
                "PersistentVolumeClaim had no pv name and storageClass name",
            ),
        ];
        for (name, pvcs, pv, node, want, reason) in cases {
            let l = Listers::new();
            l.storage_classes.insert(storage_class("wait", "WaitForFirstConsumer", "x"));
            l.storage_classes.insert(storage_class("now", "Immediate", "x"));
            for c in pvcs {
                l.pvcs.insert(c);
            }
            if let Some(pv) = pv {
                l.pvs.insert(pv);
            }
            let p = VolumeZone::new(Arc::new(l));
            let pod = pod_info(PodBuilder::new("p").pvc("data").build());
            let mut state = CycleState::new();
            let (_, mut s) = p.pre_filter(&mut state, &pod, &Snapshot::default());
            if s.is_success() {
                s = p.filter(&state, &pod, &node_info(node, vec![]));
            }
            assert_eq!(s.code, want, "{name}");
            assert_eq!(s.message(), reason, "{name}");
        }
    }
}
