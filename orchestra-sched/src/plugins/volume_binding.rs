//! VolumeBinding: a pod's PersistentVolumeClaims must exist; bound claims'
//! volumes must admit the node (`spec.nodeAffinity`); unbound claims of an
//! `Immediate` class reject the pod; unbound claims of a
//! `WaitForFirstConsumer` class need, on the node, an available matching
//! volume (class, access modes, volume mode, capacity, selector, node
//! affinity) or a class that provisions dynamically. Reserve assumes the
//! chosen volumes; PreBind binds them through the API (the volume's
//! `claimRef`, the claim's `volumeName`) or asks for provisioning (the
//! claim's `volume.kubernetes.io/selected-node`) and waits until the claim is
//! bound, as upstream's VolumeBinding does.
//!
//! Orchestra has no PersistentVolume controller, so PreBind completes a
//! static binding itself (both objects, `bind-completed`, phases `Bound`),
//! and a claim counts as bound as soon as `spec.volumeName` is set.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use kube::api::{Api, Patch, PatchParams};
use orchestra_core::api::{quantity, selector_matches};
use parking_lot::Mutex;

use crate::framework::*;
use crate::listers::{Listers, object_key};
use crate::node_info::{NodeInfo, PodInfo};
use crate::plugins::helpers::{
    claim_access_modes, claim_class, pod_claims, topology_terms_match, volume_class, volume_node_affinity_matches,
};
use crate::registry::{PluginError, PluginSet};
use crate::snapshot::Snapshot;

/// The plugin's name.
pub const NAME: &str = "VolumeBinding";
/// Upstream's reason: a bound volume's node affinity excludes the node.
pub const ERR_NODE_CONFLICT: &str = "node(s) had volume node affinity conflict";
/// Upstream's reason: no volume to bind and no provisioning on the node.
pub const ERR_BIND_CONFLICT: &str = "node(s) didn't find available persistent volumes to bind";
/// Upstream's reason: a claim is bound to a volume that does not exist.
pub const ERR_PV_NOT_EXIST: &str = "node(s) unavailable due to one or more pvc(s) bound to non-existent pv(s)";
/// Upstream's reason: an `Immediate` claim is not bound yet.
pub const ERR_UNBOUND_IMMEDIATE: &str = "pod has unbound immediate PersistentVolumeClaims";
/// The claim annotation naming the node to provision on.
pub const ANN_SELECTED_NODE: &str = "volume.kubernetes.io/selected-node";
/// The claim annotation saying its binding is complete.
pub const ANN_BIND_COMPLETED: &str = "pv.kubernetes.io/bind-completed";
/// The annotation saying a controller (not a user) made the binding.
pub const ANN_BOUND_BY_CONTROLLER: &str = "pv.kubernetes.io/bound-by-controller";
/// A provisioner that does not provision.
pub const NO_PROVISIONER: &str = "kubernetes.io/no-provisioner";
/// How long PreBind waits for provisioning by default (upstream's `bindTimeoutSeconds`).
pub const DEFAULT_BIND_TIMEOUT_SECONDS: u64 = 600;

/// The plugin.
pub struct VolumeBinding {
    listers: Arc<Listers>,
    client: Option<kube::Client>,
    /// How long PreBind waits for a provisioned claim to be bound.
    pub bind_timeout: Duration,
    /// Volumes assumed bound at Reserve (volume name → claim key) until the
    /// watch shows the binding.
    assumed_pvs: Mutex<HashMap<String, String>>,
    /// Claims assumed to be provisioned (claim key → node) until the watch
    /// shows the annotation.
    assumed_provisions: Mutex<HashMap<String, String>>,
}

impl Plugin for VolumeBinding {
    fn name(&self) -> &'static str {
        NAME
    }
    fn events_to_register(&self) -> Vec<ClusterEvent> {
        vec![
            ClusterEvent::new(EventResource::PersistentVolumeClaim, action::ADD | action::UPDATE),
            ClusterEvent::new(EventResource::PersistentVolume, action::ADD | action::UPDATE),
            ClusterEvent::new(EventResource::StorageClass, action::ADD | action::UPDATE),
            ClusterEvent::new(EventResource::Node, action::ADD | action::UPDATE_NODE_LABEL | action::UPDATE_NODE_TAINT),
        ]
    }
}

/// What a pod's volumes need on one node.
#[derive(Debug, Clone, Default)]
pub struct PodVolumes {
    /// Volumes to bind to claims.
    pub bindings: Vec<(Arc<PersistentVolume>, Arc<PersistentVolumeClaim>)>,
    /// Claims to provision on the node.
    pub provisions: Vec<Arc<PersistentVolumeClaim>>,
}

impl PodVolumes {
    fn is_empty(&self) -> bool {
        self.bindings.is_empty() && self.provisions.is_empty()
    }
}

/// A volume that may bind a delayed claim, with the claim key it is
/// (assumed) bound to, if any.
type Candidate = (Arc<PersistentVolume>, Option<String>);

struct State {
    /// Bound claims with their volume (None: the volume does not exist).
    bound: Vec<(Arc<PersistentVolumeClaim>, Option<Arc<PersistentVolume>>)>,
    /// Unbound claims of WaitForFirstConsumer classes, with the node already
    /// selected for provisioning if any; smallest request first.
    delayed: Vec<(Arc<PersistentVolumeClaim>, Option<String>)>,
    /// Candidate volumes per class for the delayed claims, with the claim key
    /// each is (assumed) bound to.
    volumes: HashMap<String, Vec<Candidate>>,
    /// The decision per node, for Reserve and PreBind.
    by_node: Mutex<HashMap<String, PodVolumes>>,
}

fn claim_request(pvc: &PersistentVolumeClaim) -> i64 {
    pvc.spec
        .as_ref()
        .and_then(|s| s.resources.as_ref())
        .and_then(|r| r.requests.as_ref())
        .and_then(|r| r.get("storage"))
        .map_or(0, quantity::value)
}

fn volume_capacity(pv: &PersistentVolume) -> i64 {
    pv.spec.as_ref().and_then(|s| s.capacity.as_ref()).and_then(|c| c.get("storage")).map_or(0, quantity::value)
}

fn claim_ref_key(pv: &PersistentVolume) -> Option<(String, Option<String>)> {
    let r = pv.spec.as_ref()?.claim_ref.as_ref()?;
    Some((
        format!("{}/{}", r.namespace.as_deref().unwrap_or(""), r.name.as_deref().unwrap_or("")),
        r.uid.clone().filter(|u| !u.is_empty()),
    ))
}

/// Whether `pv` may be bound to `pvc` on `node`, upstream's `FindMatchingVolume`
/// conditions for one volume (capacity, volume mode, deletion, phase,
/// selector, class, node affinity, access modes). `bound_to` is the claim the
/// volume is (assumed) bound to.
pub fn volume_matches(
    pv: &PersistentVolume,
    bound_to: Option<&str>,
    pvc: &PersistentVolumeClaim,
    node: &k8s_openapi::api::core::v1::Node,
) -> bool {
    let key = object_key(pvc);
    if bound_to.is_some_and(|b| b != key) {
        return false;
    }
    if volume_capacity(pv) < claim_request(pvc) || pv.metadata.deletion_timestamp.is_some() {
        return false;
    }
    let mode = |m: Option<&String>| m.map_or("Filesystem", |m| m.as_str()).to_owned();
    if mode(pvc.spec.as_ref().and_then(|s| s.volume_mode.as_ref()))
        != mode(pv.spec.as_ref().and_then(|s| s.volume_mode.as_ref()))
    {
        return false;
    }
    let affinity_ok = volume_node_affinity_matches(pv, node);
    if bound_to == Some(key.as_str()) {
        return affinity_ok;
    }
    // Without a PV controller a new volume stays Pending (or has no phase);
    // those count as available too.
    let phase = pv.status.as_ref().and_then(|s| s.phase.as_deref()).unwrap_or("Pending");
    if !matches!(phase, "Available" | "Pending") {
        return false;
    }
    if let Some(sel) = pvc.spec.as_ref().and_then(|s| s.selector.as_ref())
        && !selector_matches(sel, pv.metadata.labels.as_ref())
    {
        return false;
    }
    if volume_class(pv) != claim_class(pvc) || !affinity_ok {
        return false;
    }
    let pv_modes = pv.spec.as_ref().and_then(|s| s.access_modes.as_deref()).unwrap_or_default();
    claim_access_modes(pvc).iter().all(|m| pv_modes.contains(m))
}

impl VolumeBinding {
    /// A plugin reading `listers` and binding through `client`.
    pub fn new(listers: Arc<Listers>, client: Option<kube::Client>) -> VolumeBinding {
        VolumeBinding {
            listers,
            client,
            bind_timeout: Duration::from_secs(DEFAULT_BIND_TIMEOUT_SECONDS),
            assumed_pvs: Mutex::new(HashMap::new()),
            assumed_provisions: Mutex::new(HashMap::new()),
        }
    }

    /// Drops assumptions the watches have caught up with.
    fn prune_assumed(&self) {
        self.assumed_pvs.lock().retain(|pv, claim| {
            self.listers.pvs.get(pv).is_none_or(|pv| claim_ref_key(&pv).is_none_or(|(k, _)| k != *claim))
        });
        self.assumed_provisions.lock().retain(|claim, _| {
            self.listers.pvcs.get(claim).is_some_and(|c| {
                c.metadata.annotations.as_ref().is_none_or(|a| !a.contains_key(ANN_SELECTED_NODE))
                    && c.spec.as_ref().and_then(|s| s.volume_name.as_deref()).unwrap_or("").is_empty()
            })
        });
    }

    /// Whether the claims' binding is delayed until a pod uses them.
    fn delayed(&self, pvc: &PersistentVolumeClaim) -> bool {
        let class = claim_class(pvc);
        !class.is_empty()
            && self
                .listers
                .storage_classes
                .get(class)
                .is_some_and(|c| c.volume_binding_mode.as_deref() == Some("WaitForFirstConsumer"))
    }

    /// What binding `pod`'s delayed claims on `node` takes; None: impossible.
    fn find_pod_volumes(&self, st: &State, node: &k8s_openapi::api::core::v1::Node) -> Option<PodVolumes> {
        let name = node.metadata.name.as_deref().unwrap_or("");
        let mut out = PodVolumes::default();
        let mut chosen: Vec<&str> = Vec::new();
        let mut to_provision = Vec::new();
        for (pvc, selected) in &st.delayed {
            if let Some(sel) = selected {
                if sel != name {
                    return None;
                }
                to_provision.push(pvc.clone());
                continue;
            }
            // The smallest matching volume not chosen for another claim.
            let key = object_key(pvc.as_ref());
            let mut best: Option<&Arc<PersistentVolume>> = None;
            for (pv, bound_to) in st.volumes.get(claim_class(pvc)).into_iter().flatten() {
                let pv_name = pv.metadata.name.as_deref().unwrap_or("");
                if chosen.contains(&pv_name) || !volume_matches(pv, bound_to.as_deref(), pvc, node) {
                    continue;
                }
                if bound_to.as_deref() == Some(key.as_str()) {
                    best = Some(pv);
                    break;
                }
                if best.is_none_or(|b| volume_capacity(b) > volume_capacity(pv)) {
                    best = Some(pv);
                }
            }
            match best {
                Some(pv) => {
                    chosen.push(pv.metadata.name.as_deref().unwrap_or(""));
                    out.bindings.push((pv.clone(), pvc.clone()));
                }
                None => to_provision.push(pvc.clone()),
            }
        }
        for pvc in to_provision {
            let class = self.listers.storage_classes.get(claim_class(&pvc))?;
            if class.provisioner.is_empty() || class.provisioner == NO_PROVISIONER {
                return None;
            }
            if !topology_terms_match(
                class.allowed_topologies.as_deref().unwrap_or_default(),
                node.metadata.labels.as_ref(),
            ) {
                return None;
            }
            out.provisions.push(pvc);
        }
        Some(out)
    }

    async fn bind(&self, client: &kube::Client, vols: &PodVolumes, node: &str) -> Result<(), String> {
        let pp = PatchParams::default();
        for (pv, pvc) in &vols.bindings {
            let pv_name = pv.metadata.name.clone().unwrap_or_default();
            let ns = pvc.metadata.namespace.clone().unwrap_or_else(|| "default".into());
            let claim = pvc.metadata.name.clone().unwrap_or_default();
            let pvs: Api<PersistentVolume> = Api::all(client.clone());
            let patch = serde_json::json!({
                "metadata": {"annotations": {ANN_BOUND_BY_CONTROLLER: "yes"}},
                "spec": {"claimRef": {
                    "kind": "PersistentVolumeClaim", "apiVersion": "v1", "namespace": ns, "name": claim,
                    "uid": pvc.metadata.uid, "resourceVersion": pvc.metadata.resource_version,
                }},
            });
            pvs.patch(&pv_name, &pp, &Patch::Merge(patch))
                .await
                .map_err(|e| format!("binding volume {pv_name}: {e}"))?;
            let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &ns);
            let patch = serde_json::json!({
                "metadata": {"annotations": {ANN_BIND_COMPLETED: "yes", ANN_BOUND_BY_CONTROLLER: "yes"}},
                "spec": {"volumeName": pv_name},
            });
            pvcs.patch(&claim, &pp, &Patch::Merge(patch))
                .await
                .map_err(|e| format!("binding claim {ns}/{claim}: {e}"))?;
            // Phases, as a PV controller would set them (best effort).
            let _ =
                pvs.patch_status(&pv_name, &pp, &Patch::Merge(serde_json::json!({"status": {"phase": "Bound"}}))).await;
            let spec = pv.spec.clone().unwrap_or_default();
            let status = serde_json::json!({"status": {"phase": "Bound", "accessModes": spec.access_modes, "capacity": spec.capacity}});
            let _ = pvcs.patch_status(&claim, &pp, &Patch::Merge(status)).await;
        }
        for pvc in &vols.provisions {
            let ns = pvc.metadata.namespace.clone().unwrap_or_else(|| "default".into());
            let claim = pvc.metadata.name.clone().unwrap_or_default();
            let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &ns);
            let patch = serde_json::json!({"metadata": {"annotations": {ANN_SELECTED_NODE: node}}});
            pvcs.patch(&claim, &pp, &Patch::Merge(patch))
                .await
                .map_err(|e| format!("selecting node for claim {ns}/{claim}: {e}"))?;
        }
        // Wait until every provisioned claim is bound to a volume.
        let deadline = tokio::time::Instant::now() + self.bind_timeout;
        for pvc in &vols.provisions {
            let key = object_key(pvc.as_ref());
            loop {
                let bound = self
                    .listers
                    .pvcs
                    .get(&key)
                    .and_then(|c| c.spec.as_ref()?.volume_name.clone())
                    .is_some_and(|v| !v.is_empty());
                if bound {
                    break;
                }
                if tokio::time::Instant::now() >= deadline {
                    return Err(format!("binding volumes: timed out waiting for claim {key} to be provisioned"));
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        Ok(())
    }
}

impl PreFilter for VolumeBinding {
    fn pre_filter(&self, state: &mut CycleState, pod: &PodInfo, _: &Snapshot) -> (PreFilterResult, Status) {
        let claims = pod_claims(&pod.pod);
        if claims.is_empty() {
            return (None, Status::skip());
        }
        self.prune_assumed();
        let ns = pod.namespace();
        let mut bound = Vec::new();
        let mut delayed = Vec::new();
        let mut immediate = false;
        for (_, claim, ephemeral) in &claims {
            let Some(pvc) = self.listers.pvcs.get_namespaced(ns, claim) else {
                return (None, Status::unresolvable(format!("persistentvolumeclaim {claim:?} not found")));
            };
            if *ephemeral
                && !pvc
                    .metadata
                    .owner_references
                    .iter()
                    .flatten()
                    .any(|o| Some(&o.uid) == pod.pod.metadata.uid.as_ref())
            {
                return (
                    None,
                    Status::unresolvable(format!(
                        "PVC {ns}/{claim} was not created for pod {} (pod is not owner)",
                        pod.key()
                    )),
                );
            }
            if pvc.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Lost") {
                let pv = pvc.spec.as_ref().and_then(|s| s.volume_name.clone()).unwrap_or_default();
                return (
                    None,
                    Status::unresolvable(format!(
                        "persistentvolumeclaim {claim:?} bound to non-existent persistentvolume {pv:?}"
                    )),
                );
            }
            if pvc.metadata.deletion_timestamp.is_some() {
                return (None, Status::unresolvable(format!("persistentvolumeclaim {claim:?} is being deleted")));
            }
            let volume = pvc.spec.as_ref().and_then(|s| s.volume_name.clone()).unwrap_or_default();
            if !volume.is_empty() {
                let pv = self.listers.pvs.get(&volume);
                bound.push((pvc, pv));
            } else if self.delayed(&pvc) {
                let key = object_key(pvc.as_ref());
                let selected = pvc
                    .metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get(ANN_SELECTED_NODE).cloned())
                    .or_else(|| self.assumed_provisions.lock().get(&key).cloned());
                delayed.push((pvc, selected));
            } else {
                immediate = true;
            }
        }
        if immediate {
            return (None, Status::unresolvable(ERR_UNBOUND_IMMEDIATE));
        }
        delayed.sort_by_key(|(c, _)| claim_request(c));
        let mut volumes: HashMap<String, Vec<Candidate>> = HashMap::new();
        if !delayed.is_empty() {
            let assumed = self.assumed_pvs.lock().clone();
            for pv in self.listers.pvs.list() {
                let class = volume_class(&pv);
                if !delayed.iter().any(|(c, _)| claim_class(c) == class) {
                    continue;
                }
                let bound_to = assumed
                    .get(pv.metadata.name.as_deref().unwrap_or(""))
                    .cloned()
                    .or_else(|| claim_ref_key(&pv).map(|(k, _)| k));
                volumes.entry(class.to_owned()).or_default().push((pv, bound_to));
            }
        }
        state.write(NAME, State { bound, delayed, volumes, by_node: Mutex::new(HashMap::new()) });
        (None, Status::success())
    }
}

impl Filter for VolumeBinding {
    fn filter(&self, state: &CycleState, _: &PodInfo, node: &NodeInfo) -> Status {
        let Some(st) = state.read::<State>(NAME) else { return Status::success() };
        let mut reasons = Vec::new();
        let mut pv_missing = false;
        let mut conflict = false;
        for (_, pv) in &st.bound {
            match pv {
                None => pv_missing = true,
                Some(pv) => conflict |= !volume_node_affinity_matches(pv, &node.node),
            }
        }
        if conflict {
            reasons.push(ERR_NODE_CONFLICT);
        }
        if pv_missing {
            reasons.push(ERR_PV_NOT_EXIST);
        }
        if reasons.is_empty() && !st.delayed.is_empty() {
            match self.find_pod_volumes(st, &node.node) {
                Some(v) => {
                    st.by_node.lock().insert(node.name().to_owned(), v);
                }
                None => reasons.push(ERR_BIND_CONFLICT),
            }
        }
        if reasons.is_empty() {
            return Status::success();
        }
        let mut s = Status::unresolvable(reasons[0]);
        for r in &reasons[1..] {
            s = s.with_reason(*r);
        }
        s
    }
}

impl Reserve for VolumeBinding {
    fn reserve(&self, state: &CycleState, _: &PodInfo, node: &str) -> Status {
        let Some(st) = state.read::<State>(NAME) else { return Status::success() };
        let Some(vols) = st.by_node.lock().get(node).cloned() else { return Status::success() };
        let mut assumed = self.assumed_pvs.lock();
        for (pv, pvc) in &vols.bindings {
            let name = pv.metadata.name.clone().unwrap_or_default();
            let key = object_key(pvc.as_ref());
            if assumed.get(&name).is_some_and(|k| *k != key) {
                return Status::unschedulable(ERR_BIND_CONFLICT);
            }
        }
        for (pv, pvc) in &vols.bindings {
            assumed.insert(pv.metadata.name.clone().unwrap_or_default(), object_key(pvc.as_ref()));
        }
        let mut provisions = self.assumed_provisions.lock();
        for pvc in &vols.provisions {
            provisions.insert(object_key(pvc.as_ref()), node.to_owned());
        }
        Status::success()
    }
    fn unreserve(&self, state: &CycleState, _: &PodInfo, node: &str) {
        let Some(st) = state.read::<State>(NAME) else { return };
        let Some(vols) = st.by_node.lock().get(node).cloned() else { return };
        let mut assumed = self.assumed_pvs.lock();
        for (pv, pvc) in &vols.bindings {
            let name = pv.metadata.name.clone().unwrap_or_default();
            if assumed.get(&name).is_some_and(|k| *k == object_key(pvc.as_ref())) {
                assumed.remove(&name);
            }
        }
        let mut provisions = self.assumed_provisions.lock();
        for pvc in &vols.provisions {
            provisions.remove(&object_key(pvc.as_ref()));
        }
    }
}

#[async_trait::async_trait]
impl PreBind for VolumeBinding {
    async fn pre_bind(&self, state: &CycleState, _: &PodInfo, node: &str) -> Status {
        let Some(st) = state.read::<State>(NAME) else { return Status::success() };
        let vols = st.by_node.lock().get(node).cloned().unwrap_or_default();
        if vols.is_empty() {
            return Status::success();
        }
        let Some(client) = &self.client else { return Status::error("binding volumes: no API client") };
        match self.bind(client, &vols, node).await {
            Ok(()) => Status::success(),
            Err(e) => Status::error(e),
        }
    }
}

/// The plugin's arguments (upstream's `VolumeBindingArgs`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(default, rename_all = "camelCase")]
#[non_exhaustive]
pub struct Args {
    /// How long PreBind waits for a claim to be bound (default
    /// [`DEFAULT_BIND_TIMEOUT_SECONDS`]).
    pub bind_timeout_seconds: u64,
}

impl Default for Args {
    fn default() -> Self {
        Args { bind_timeout_seconds: DEFAULT_BIND_TIMEOUT_SECONDS }
    }
}

impl Args {
    /// Sets [`bind_timeout_seconds`](Self::bind_timeout_seconds).
    pub fn with_bind_timeout_seconds(mut self, seconds: u64) -> Args {
        self.bind_timeout_seconds = seconds;
        self
    }
}

/// Builds the plugin, as registered under [`NAME`].
pub fn new(args: Args, handle: &Handle) -> Result<PluginSet, PluginError> {
    let mut p = VolumeBinding::new(handle.listers.clone(), handle.client.clone());
    p.bind_timeout = Duration::from_secs(args.bind_timeout_seconds);
    let p = Arc::new(p);
    Ok(PluginSet::new(&p).pre_filter(&p).filter(&p).reserve(&p).pre_bind(&p))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{NodeBuilder, PodBuilder, PvBuilder, PvcBuilder, node_info, pod_info, storage_class};

    fn listers(pvcs: Vec<PersistentVolumeClaim>, pvs: Vec<PersistentVolume>) -> Arc<Listers> {
        let l = Listers::new();
        l.storage_classes.insert(storage_class("fast", "Immediate", "example.com/fast"));
        l.storage_classes.insert(storage_class("local", "WaitForFirstConsumer", NO_PROVISIONER));
        l.storage_classes.insert(storage_class("dyn", "WaitForFirstConsumer", "example.com/dyn"));
        for c in pvcs {
            l.pvcs.insert(c);
        }
        for v in pvs {
            l.pvs.insert(v);
        }
        Arc::new(l)
    }

    fn nodes() -> Vec<NodeInfo> {
        vec![
            node_info(NodeBuilder::new("a").label("zone", "a").build(), vec![]),
            node_info(NodeBuilder::new("b").label("zone", "b").build(), vec![]),
        ]
    }

    /// Runs PreFilter then Filter on nodes a and b: the PreFilter status, or
    /// the per-node statuses.
    fn run(plugin: &VolumeBinding, pod: PodBuilder) -> (CycleState, Result<Vec<Status>, Status>) {
        let snapshot = Snapshot::from_nodes(nodes());
        let pod = pod_info(pod.build());
        let mut state = CycleState::new();
        let (_, s) = plugin.pre_filter(&mut state, &pod, &snapshot);
        if s.is_skip() {
            return (state, Ok(vec![Status::success(); 2]));
        }
        if !s.is_success() {
            return (state, Err(s));
        }
        let r = snapshot.nodes.iter().map(|n| plugin.filter(&state, &pod, n)).collect();
        (state, Ok(r))
    }

    #[test]
    fn filter_table() {
        let ok = || Status::success();
        let un = |r: &str| Status::unresolvable(r);
        type Case = (&'static str, Vec<PersistentVolumeClaim>, Vec<PersistentVolume>, Result<Vec<Status>, Status>);
        let cases: Vec<Case> = vec![
            ("missing claim", vec![], vec![], Err(un("persistentvolumeclaim \"data\" not found"))),
            (
                "bound, no affinity",
                vec![PvcBuilder::new("data").volume("pv1").build()],
                vec![PvBuilder::new("pv1").claim("data").build()],
                Ok(vec![ok(), ok()]),
            ),
            (
                "bound, affinity to zone a",
                vec![PvcBuilder::new("data").volume("pv1").build()],
                vec![PvBuilder::new("pv1").claim("data").node_affinity("zone", &["a"]).build()],
                Ok(vec![ok(), un(ERR_NODE_CONFLICT)]),
            ),
            (
                "bound to a missing volume",
                vec![PvcBuilder::new("data").volume("gone").build()],
                vec![],
                Ok(vec![un(ERR_PV_NOT_EXIST), un(ERR_PV_NOT_EXIST)]),
            ),
            (
                "unbound immediate",
                vec![PvcBuilder::new("data").class("fast").build()],
                vec![],
                Err(un(ERR_UNBOUND_IMMEDIATE)),
            ),
            ("unbound, no class", vec![PvcBuilder::new("data").build()], vec![], Err(un(ERR_UNBOUND_IMMEDIATE))),
            (
                "delayed, local volume in zone b",
                vec![PvcBuilder::new("data").class("local").build()],
                vec![PvBuilder::new("pv1").class("local").node_affinity("zone", &["b"]).build()],
                Ok(vec![un(ERR_BIND_CONFLICT), ok()]),
            ),
            (
                "delayed, volume too small",
                vec![PvcBuilder::new("data").class("local").storage("5Gi").build()],
                vec![PvBuilder::new("pv1").class("local").build()],
                Ok(vec![un(ERR_BIND_CONFLICT), un(ERR_BIND_CONFLICT)]),
            ),
            (
                "delayed, access modes differ",
                vec![PvcBuilder::new("data").class("local").access_modes(&["ReadWriteMany"]).build()],
                vec![PvBuilder::new("pv1").class("local").build()],
                Ok(vec![un(ERR_BIND_CONFLICT), un(ERR_BIND_CONFLICT)]),
            ),
            (
                "delayed, selector does not match",
                vec![PvcBuilder::new("data").class("local").selector(&[("tier", "gold")]).build()],
                vec![PvBuilder::new("pv1").class("local").label("tier", "silver").build()],
                Ok(vec![un(ERR_BIND_CONFLICT), un(ERR_BIND_CONFLICT)]),
            ),
            (
                "delayed, other class",
                vec![PvcBuilder::new("data").class("local").build()],
                vec![PvBuilder::new("pv1").class("dyn").build()],
                Ok(vec![un(ERR_BIND_CONFLICT), un(ERR_BIND_CONFLICT)]),
            ),
            (
                "delayed, volume bound elsewhere",
                vec![PvcBuilder::new("data").class("local").build()],
                vec![PvBuilder::new("pv1").class("local").claim("other").phase("Bound").build()],
                Ok(vec![un(ERR_BIND_CONFLICT), un(ERR_BIND_CONFLICT)]),
            ),
            (
                "delayed, dynamic provisioning",
                vec![PvcBuilder::new("data").class("dyn").build()],
                vec![],
                Ok(vec![ok(), ok()]),
            ),
            (
                "delayed, provisioning already on b",
                vec![PvcBuilder::new("data").class("dyn").annotation(ANN_SELECTED_NODE, "b").build()],
                vec![],
                Ok(vec![un(ERR_BIND_CONFLICT), ok()]),
            ),
        ];
        for (name, pvcs, pvs, want) in cases {
            let plugin = VolumeBinding::new(listers(pvcs, pvs), None);
            let (_, got) = run(&plugin, PodBuilder::new("p").pvc("data"));
            assert_eq!(got, want, "{name}");
        }
        // No claims: Skip.
        let plugin = VolumeBinding::new(listers(vec![], vec![]), None);
        let mut state = CycleState::new();
        let (_, s) = plugin.pre_filter(&mut state, &pod_info(PodBuilder::new("p").build()), &Snapshot::default());
        assert!(s.is_skip());
    }

    #[test]
    fn picks_smallest_volume_and_reserve_hides_it() {
        let plugin = VolumeBinding::new(
            listers(
                vec![PvcBuilder::new("data").class("local").build(), PvcBuilder::new("data2").class("local").build()],
                vec![
                    PvBuilder::new("big").class("local").capacity("10Gi").build(),
                    PvBuilder::new("small").class("local").capacity("2Gi").build(),
                ],
            ),
            None,
        );
        let (state, got) = run(&plugin, PodBuilder::new("p").pvc("data"));
        assert!(got.unwrap().iter().all(Status::is_success));
        let st = state.read::<State>(NAME).unwrap();
        let chosen: Vec<String> =
            st.by_node.lock()["a"].bindings.iter().map(|(pv, _)| pv.metadata.name.clone().unwrap()).collect();
        assert_eq!(chosen, ["small"]);
        let pod = pod_info(PodBuilder::new("p").pvc("data").build());
        assert!(plugin.reserve(&state, &pod, "a").is_success());
        // Another pod's claim no longer sees "small"; after unreserve it does.
        let (state2, _) = run(&plugin, PodBuilder::new("q").pvc("data2"));
        let st2 = state2.read::<State>(NAME).unwrap();
        assert_eq!(st2.by_node.lock()["a"].bindings[0].0.metadata.name.as_deref(), Some("big"));
        plugin.unreserve(&state, &pod, "a");
        let (state3, _) = run(&plugin, PodBuilder::new("q").pvc("data2"));
        let st3 = state3.read::<State>(NAME).unwrap();
        assert_eq!(st3.by_node.lock()["a"].bindings[0].0.metadata.name.as_deref(), Some("small"));
    }
}
