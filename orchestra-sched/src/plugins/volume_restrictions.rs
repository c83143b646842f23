//! VolumeRestrictions: a `ReadWriteOncePod` claim may be used by one pod in
//! the whole cluster; a GCE PD, AWS EBS, iSCSI or RBD disk may be mounted by
//! several pods on a node only when all mount it read-only (EBS: never).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Pod, Volume};

use crate::framework::*;
use crate::listers::Listers;
use crate::node_info::{NodeInfo, PodInfo};
use crate::plugins::helpers::{claim_access_modes, pod_claims};
use crate::registry::{NoArgs, PluginError, PluginSet};
use crate::snapshot::Snapshot;

/// The plugin's name.
pub const NAME: &str = "VolumeRestrictions";
/// Upstream's reason for a disk mounted read-write by another pod.
pub const ERR_REASON_DISK_CONFLICT: &str = "node(s) had no available disk";
/// Upstream's reason for a ReadWriteOncePod claim in use.
pub const ERR_REASON_RWOP_CONFLICT: &str =
    "node has pod using PersistentVolumeClaim with the same name and ReadWriteOncePod access mode";

/// The plugin.
pub struct VolumeRestrictions {
    listers: Arc<Listers>,
}

impl Plugin for VolumeRestrictions {
    fn name(&self) -> &'static str {
        NAME
    }
    fn events_to_register(&self) -> Vec<ClusterEvent> {
        vec![
            ClusterEvent::new(EventResource::AssignedPod, action::DELETE),
            ClusterEvent::new(EventResource::Node, action::ADD | action::UPDATE_NODE_TAINT),
            ClusterEvent::new(EventResource::PersistentVolumeClaim, action::ADD | action::UPDATE),
        ]
    }
}

struct State {
    /// Keys (`namespace/name`) of the pod's ReadWriteOncePod claims.
    rwop: HashSet<String>,
    /// Pods using one of them, per node of the snapshot.
    users_per_node: HashMap<String, usize>,
    /// Pods using one of them in the snapshot.
    users: usize,
    /// Whether the pod mounts disks that may conflict.
    disks: bool,
}

fn is_disk(v: &Volume) -> bool {
    v.gce_persistent_disk.is_some() || v.aws_elastic_block_store.is_some() || v.iscsi.is_some() || v.rbd.is_some()
}

/// Whether volume `v` conflicts with a volume of `existing` (upstream's `isVolumeConflict`).
fn disk_conflict(v: &Volume, existing: &Pod) -> bool {
    let ro = |b: Option<bool>| b.unwrap_or(false);
    existing.spec.as_ref().and_then(|s| s.volumes.as_ref()).into_iter().flatten().any(|e| {
        if let (Some(a), Some(b)) = (&v.gce_persistent_disk, &e.gce_persistent_disk)
            && a.pd_name == b.pd_name
            && !(ro(a.read_only) && ro(b.read_only))
        {
            return true;
        }
        if let (Some(a), Some(b)) = (&v.aws_elastic_block_store, &e.aws_elastic_block_store)
            && a.volume_id == b.volume_id
        {
            return true;
        }
        if let (Some(a), Some(b)) = (&v.iscsi, &e.iscsi)
            && a.iqn == b.iqn
            && !(ro(a.read_only) && ro(b.read_only))
        {
            return true;
        }
        if let (Some(a), Some(b)) = (&v.rbd, &e.rbd) {
            let pool = |p: &Option<String>| p.clone().unwrap_or_else(|| "rbd".into());
            if a.monitors.iter().any(|m| b.monitors.contains(m))
                && pool(&a.pool) == pool(&b.pool)
                && a.image == b.image
                && !(ro(a.read_only) && ro(b.read_only))
            {
                return true;
            }
        }
        false
    })
}

/// How many pods on `node` (other than `uid`) use a claim in `claims`.
fn users_on(node: &NodeInfo, claims: &HashSet<String>, uid: &str) -> usize {
    node.pods
        .iter()
        .filter(|p| p.uid() != uid)
        .filter(|p| pod_claims(&p.pod).iter().any(|(_, c, _)| claims.contains(&format!("{}/{c}", p.namespace()))))
        .count()
}

impl VolumeRestrictions {
    /// A plugin reading `listers`.
    pub fn new(listers: Arc<Listers>) -> VolumeRestrictions {
        VolumeRestrictions { listers }
    }
}

impl PreFilter for VolumeRestrictions {
    fn pre_filter(&self, state: &mut CycleState, pod: &PodInfo, snapshot: &Snapshot) -> (PreFilterResult, Status) {
        let disks = pod.pod.spec.as_ref().and_then(|s| s.volumes.as_ref()).into_iter().flatten().any(is_disk);
        let mut rwop = HashSet::new();
        for (_, claim, _) in pod_claims(&pod.pod) {
            let Some(pvc) = self.listers.pvcs.get_namespaced(pod.namespace(), &claim) else {
                return (None, Status::unresolvable(format!("persistentvolumeclaim {claim:?} not found")));
            };
            if claim_access_modes(&pvc).iter().any(|m| m == "ReadWriteOncePod") {
                rwop.insert(format!("{}/{claim}", pod.namespace()));
            }
        }
        let mut users_per_node = HashMap::new();
        let mut users = 0;
        if !rwop.is_empty() {
            for node in snapshot.nodes.iter() {
                let n = users_on(node, &rwop, pod.uid());
                if n > 0 {
                    users_per_node.insert(node.name().to_owned(), n);
                    users += n;
                }
            }
        }
        if !disks && users == 0 {
            return (None, Status::skip());
        }
        state.write(NAME, State { rwop, users_per_node, users, disks });
        (None, Status::success())
    }
}

impl Filter for VolumeRestrictions {
    fn filter(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        let Some(st) = state.read::<State>(NAME) else { return Status::success() };
        if st.disks {
            let volumes = pod.pod.spec.as_ref().and_then(|s| s.volumes.as_ref()).into_iter().flatten();
            for v in volumes.filter(|v| is_disk(v)) {
                if node.pods.iter().any(|p| disk_conflict(v, &p.pod)) {
                    return Status::unschedulable(ERR_REASON_DISK_CONFLICT);
                }
            }
        }
        if st.users > 0 {
            // The snapshot's count with this node's pods as they are now (a
            // preemption trial may have removed some).
            let here = st.users_per_node.get(node.name()).copied().unwrap_or(0);
            let users = st.users - here + users_on(node, &st.rwop, pod.uid());
            if users > 0 {
                return Status::unschedulable(ERR_REASON_RWOP_CONFLICT);
            }
        }
        Status::success()
    }
}

/// The plugin's arguments: it has no options.
pub type Args = NoArgs;

/// Builds the plugin, as registered under [`NAME`].
pub fn new(_: Args, handle: &Handle) -> Result<PluginSet, PluginError> {
    let p = Arc::new(VolumeRestrictions::new(handle.listers.clone()));
    Ok(PluginSet::new(&p).pre_filter(&p).filter(&p))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{NodeBuilder, PodBuilder, PvcBuilder, node_info, pod_info};
    use k8s_openapi::api::core::v1::{GCEPersistentDiskVolumeSource, PersistentVolumeClaim};

    fn gce(pd: &str, read_only: bool) -> impl FnOnce(&mut Pod) {
        let pd = pd.to_owned();
        move |p: &mut Pod| {
            p.spec.as_mut().unwrap().volumes.get_or_insert_with(Vec::new).push(Volume {
                name: "disk".into(),
                gce_persistent_disk: Some(GCEPersistentDiskVolumeSource {
                    pd_name: pd,
                    read_only: Some(read_only),
                    ..Default::default()
                }),
                ..Default::default()
            })
        }
    }

    #[test]
    fn table() {
        let rwop = || vec![PvcBuilder::new("data").access_modes(&["ReadWriteOncePod"]).build()];
        let rwo = || vec![PvcBuilder::new("data").build()];
        let user = |node: &str| PodBuilder::new(&format!("user-{node}")).pvc("data").node(node).build();
        type Case = (&'static str, Vec<PersistentVolumeClaim>, PodBuilder, Vec<Pod>, Vec<Pod>, [Code; 2], &'static str);
        let un = Code::Unschedulable;
        let ok = Code::Success;
        let cases: Vec<Case> = vec![
            ("no volumes", vec![], PodBuilder::new("p"), vec![], vec![], [Code::Skip, Code::Skip], ""),
            (
                "missing claim",
                vec![],
                PodBuilder::new("p").pvc("data"),
                vec![],
                vec![],
                [Code::UnschedulableAndUnresolvable; 2],
                "persistentvolumeclaim \"data\" not found",
            ),
            ("rwop unused", rwop(), PodBuilder::new("p").pvc("data"), vec![], vec![], [Code::Skip, Code::Skip], ""),
            (
                "rwop used on a",
                rwop(),
                PodBuilder::new("p").pvc("data"),
                vec![user("a")],
                vec![],
                [un, un],
                ERR_REASON_RWOP_CONFLICT,
            ),
            (
                "rwop used in another namespace",
                rwop(),
                PodBuilder::new("p").pvc("data"),
                vec![user("a").clone()]
                    .into_iter()
                    .map(|mut p| {
                        p.metadata.namespace = Some("other".into());
                        p
                    })
                    .collect(),
                vec![],
                [Code::Skip, Code::Skip],
                "",
            ),
            (
                "rwo used on a",
                rwo(),
                PodBuilder::new("p").pvc("data"),
                vec![user("a")],
                vec![],
                [Code::Skip, Code::Skip],
                "",
            ),
            (
                "gce disk read-write on a",
                vec![],
                PodBuilder::new("p").with(gce("pd1", false)),
                vec![PodBuilder::new("x").with(gce("pd1", true)).build()],
                vec![],
                [un, ok],
                ERR_REASON_DISK_CONFLICT,
            ),
            (
                "gce disk read-only everywhere",
                vec![],
                PodBuilder::new("p").with(gce("pd1", true)),
                vec![PodBuilder::new("x").with(gce("pd1", true)).build()],
                vec![],
                [ok, ok],
                "",
            ),
            (
                "other gce disk",
                vec![],
                PodBuilder::new("p").with(gce("pd2", false)),
                vec![PodBuilder::new("x").with(gce("pd1", false)).build()],
                vec![],
                [ok, ok],
                "",
            ),
        ];
        for (name, pvcs, pod, pods_a, pods_b, want, reason) in cases {
            let l = Listers::new();
            for c in pvcs {
                l.pvcs.insert(c);
            }
            let p = VolumeRestrictions::new(Arc::new(l));
            let snapshot = Snapshot::from_nodes(vec![
                node_info(NodeBuilder::new("a").build(), pods_a),
                node_info(NodeBuilder::new("b").build(), pods_b),
            ]);
            let pod = pod_info(pod.build());
            let mut state = CycleState::new();
            let (_, s) = p.pre_filter(&mut state, &pod, &snapshot);
            let got: Vec<Status> = if s.is_success() {
                snapshot.nodes.iter().map(|n| p.filter(&state, &pod, n)).collect()
            } else {
                vec![s.clone(), s]
            };
            assert_eq!(got.iter().map(|s| s.code).collect::<Vec<_>>(), want, "{name}");
            let first_reason = got.iter().find(|s| !s.reasons.is_empty()).map(|s| s.message()).unwrap_or_default();
            assert_eq!(first_reason, reason, "{name}");
        }
    }

    #[test]
    fn preemption_trial_without_the_user_fits() {
        let l = Listers::new();
        l.pvcs.insert(PvcBuilder::new("data").access_modes(&["ReadWriteOncePod"]).build());
        let p = VolumeRestrictions::new(Arc::new(l));
        let snapshot = Snapshot::from_nodes(vec![
            node_info(NodeBuilder::new("a").build(), vec![PodBuilder::new("user").pvc("data").node("a").build()]),
            node_info(NodeBuilder::new("b").build(), vec![]),
        ]);
        let pod = pod_info(PodBuilder::new("p").pvc("data").build());
        let mut state = CycleState::new();
        assert!(p.pre_filter(&mut state, &pod, &snapshot).1.is_success());
        let mut trial_a = (*snapshot.nodes[0]).clone();
        trial_a.remove_pod("uid-user");
        assert!(p.filter(&state, &pod, &trial_a).is_success(), "the user evicted from a");
        let trial_b = (*snapshot.nodes[1]).clone();
        assert_eq!(p.filter(&state, &pod, &trial_b).code, Code::Unschedulable, "evicting on b does not help");
    }
}
