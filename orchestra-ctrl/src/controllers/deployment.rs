//! The Deployment controller: one ReplicaSet per pod template (named and
//! labelled by `pod-template-hash`), rolling updates within
//! `maxSurge`/`maxUnavailable`, Recreate, `deployment.kubernetes.io/revision`
//! annotations, revision history limit, pause, progress deadline and the
//! `Available`/`Progressing` conditions `kubectl rollout status` reads.
//! ReplicaSets are claimed as upstream does (matching orphans adopted,
//! owned ones that stop matching released), and a Deployment scaled in the
//! middle of a rollout (or while paused) scales its active ReplicaSets in
//! proportion ([`proportional_sizes`]).
//! Rollback (`kubectl rollout undo`) copies an old ReplicaSet's template into
//! the Deployment on the client side; the matching ReplicaSet then becomes
//! the new one and gets the next revision.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{Deployment, DeploymentCondition, DeploymentStatus, ReplicaSet, ReplicaSetSpec};
use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::jiff::Timestamp;
use kube::api::{DeleteParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Api, Client};

use super::util::{can_adopt, controller_of, ignore_not_found, owner_reference, template_hash, workload_selects};
use crate::controller::Controller;
use crate::events::{EventType, Recorder, reference};
use crate::informer::{Informer, ObjectKey, SharedInformerFactory};
use crate::workqueue::{RateLimit, WorkQueue};
use crate::{Action, Error};

/// Name of the controller.
pub const NAME: &str = "deployment-controller";
/// Revision annotation on Deployments and ReplicaSets.
pub const REVISION: &str = "deployment.kubernetes.io/revision";
/// Label (and selector term) distinguishing a Deployment's ReplicaSets.
pub const POD_TEMPLATE_HASH: &str = "pod-template-hash";
/// Annotation with the Deployment's replicas on each ReplicaSet.
pub const DESIRED_REPLICAS: &str = "deployment.kubernetes.io/desired-replicas";
/// Annotation with replicas + maxSurge on each ReplicaSet.
pub const MAX_REPLICAS: &str = "deployment.kubernetes.io/max-replicas";
/// Annotation listing the revisions a ReplicaSet had before its current
/// one (comma-separated), kept when a rollback makes it the newest again.
pub const REVISION_HISTORY: &str = "deployment.kubernetes.io/revision-history";

/// Deployment annotations not copied onto its ReplicaSets (upstream's
/// `annotationsToSkip`).
const NOT_COPIED: [&str; 6] = [
    "kubectl.kubernetes.io/last-applied-configuration",
    REVISION,
    REVISION_HISTORY,
    DESIRED_REPLICAS,
    MAX_REPLICAS,
    "deprecated.deployment.rollback.to",
];

/// The Deployment's annotations its new ReplicaSet carries too, such as
/// `kubernetes.io/change-cause` (the CHANGE-CAUSE of `kubectl rollout
/// history`).
fn copied_annotations(d: &Deployment) -> BTreeMap<String, String> {
    d.metadata
        .annotations
        .iter()
        .flatten()
        .filter(|(k, _)| !NOT_COPIED.contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// What the Deployment reconciler works with.
pub struct Context {
    /// Client for writes.
    pub client: Client,
    /// The shared ReplicaSet cache.
    pub replica_sets: Arc<Informer<ReplicaSet>>,
    /// Records `ScalingReplicaSet` events on the Deployment whenever it
    /// scales one of its ReplicaSets, as upstream's controller does
    /// (`kubectl describe deployment`).
    pub recorder: Recorder,
}

/// Reason of the events recording that a Deployment scaled a ReplicaSet.
pub const SCALING_REPLICA_SET: &str = "ScalingReplicaSet";

/// Records (without waiting) that `d` scaled `rs` from `from` to `to`
/// replicas: "Scaled up replica set web-abc from 1 to 3".
fn record_scaling(ctx: &Context, d: &Deployment, rs: &str, from: i32, to: i32) {
    let direction = if to > from { "up" } else { "down" };
    let note = format!("Scaled {direction} replica set {rs} from {from} to {to}");
    let recorder = ctx.recorder.clone();
    let regarding = reference(d);
    tokio::spawn(async move {
        if let Err(e) = recorder.publish(regarding, EventType::Normal, SCALING_REPLICA_SET, "Scale", &note).await {
            tracing::debug!(error = %e, "event not recorded");
        }
    });
}

/// Resolves an IntOrString against `total` (percentages rounded up or down).
pub fn resolve(value: Option<&IntOrString>, total: i32, round_up: bool, default: &str) -> i32 {
    let v = value.cloned().unwrap_or_else(|| IntOrString::String(default.into()));
    match v {
        IntOrString::Int(i) => i,
        IntOrString::String(s) => {
            let pct: f64 = s.trim_end_matches('%').parse().unwrap_or(0.0);
            let x = pct * f64::from(total) / 100.0;
            if round_up { x.ceil() as i32 } else { x.floor() as i32 }
        }
    }
}

/// `(maxSurge, maxUnavailable)` for `replicas` (both 0 → unavailable 1).
pub fn surge_and_unavailable(d: &Deployment, replicas: i32) -> (i32, i32) {
    let ru = d.spec.as_ref().and_then(|s| s.strategy.as_ref()).and_then(|s| s.rolling_update.as_ref());
    let surge = resolve(ru.and_then(|r| r.max_surge.as_ref()), replicas, true, "25%");
    let mut unavailable = resolve(ru.and_then(|r| r.max_unavailable.as_ref()), replicas, false, "25%");
    if surge == 0 && unavailable == 0 {
        unavailable = 1;
    }
    (surge, unavailable.min(replicas))
}

fn revision(rs: &ReplicaSet) -> i64 {
    rs.metadata.annotations.as_ref().and_then(|a| a.get(REVISION)).and_then(|r| r.parse().ok()).unwrap_or(0)
}

fn spec_replicas(rs: &ReplicaSet) -> i32 {
    rs.spec.as_ref().and_then(|s| s.replicas).unwrap_or(0)
}

/// Available replicas, never more than the spec asks for: right after a
/// scale-down the cached status may still count the pods being removed.
fn available(rs: &ReplicaSet) -> i32 {
    rs.status.as_ref().and_then(|s| s.available_replicas).unwrap_or(0).min(spec_replicas(rs))
}

fn annotation(rs: &ReplicaSet, key: &str) -> Option<i32> {
    rs.metadata.annotations.as_ref().and_then(|a| a.get(key)).and_then(|v| v.parse().ok())
}

/// Older first: creation time, then name (upstream's `ReplicaSetsByCreationTimestamp`).
fn age_key(rs: &ReplicaSet) -> (Option<Timestamp>, String) {
    (rs.metadata.creation_timestamp.as_ref().map(|t| t.0), rs.metadata.name.clone().unwrap_or_default())
}

/// One active ReplicaSet as [`proportional_sizes`] sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScaledSet<K> {
    /// `spec.replicas`.
    pub replicas: i32,
    /// The `deployment.kubernetes.io/max-replicas` annotation: the
    /// Deployment's replicas + maxSurge when this set was last scaled.
    pub max_replicas: Option<i32>,
    /// Orders by age, older first.
    pub age: K,
}

/// Proportional scaling (upstream's `DeploymentController.scale` for a
/// rolling Deployment scaled in the middle of a rollout): `replicas +
/// surge` (0 when scaling to 0) is spread over the active ReplicaSets in
/// proportion to their share when the Deployment was last scaled. Sets of
/// equal size grow newest first and shrink oldest first; what rounding
/// leaves over goes to the largest. Returns the new sizes, in input order.
pub fn proportional_sizes<K: Ord>(replicas: i32, surge: i32, status_replicas: i32, sets: &[ScaledSet<K>]) -> Vec<i32> {
    let mut sizes: Vec<i32> = sets.iter().map(|s| s.replicas).collect();
    let allowed = if replicas > 0 { replicas + surge } else { 0 };
    let to_add = allowed - sizes.iter().sum::<i32>();
    if to_add == 0 || sets.is_empty() {
        return sizes;
    }
    let mut order: Vec<usize> = (0..sets.len()).collect();
    order.sort_by(|&a, &b| {
        let by_size = sets[b].replicas.cmp(&sets[a].replicas);
        let by_age = if to_add > 0 { sets[b].age.cmp(&sets[a].age) } else { sets[a].age.cmp(&sets[b].age) };
        by_size.then(by_age)
    });
    let mut added = 0;
    for &i in &order {
        let set = &sets[i];
        if set.replicas == 0 || added == to_add {
            continue;
        }
        let fraction = if replicas == 0 {
            -set.replicas
        } else {
            let annotated = set.max_replicas.unwrap_or(status_replicas);
            if annotated <= 0 {
                0
            } else {
                (f64::from(set.replicas) * f64::from(replicas + surge) / f64::from(annotated)).round() as i32
                    - set.replicas
            }
        };
        let room = to_add - added;
        let proportion = if to_add > 0 { fraction.min(room) } else { fraction.max(room) };
        sizes[i] += proportion;
        added += proportion;
    }
    let largest = order[0];
    sizes[largest] = (sizes[largest] + to_add - added).max(0);
    sizes
}

/// The template without the `pod-template-hash` label, for comparisons.
fn without_hash(template: &PodTemplateSpec) -> serde_json::Value {
    let mut t = template.clone();
    if let Some(labels) = t.metadata.as_mut().and_then(|m| m.labels.as_mut()) {
        labels.remove(POD_TEMPLATE_HASH);
        if labels.is_empty() {
            t.metadata.as_mut().unwrap().labels = None;
        }
    }
    serde_json::to_value(&t).unwrap_or_default()
}

/// New replicas of the new ReplicaSet in a rolling update (client-go's
/// `NewRSNewReplicas`).
pub fn new_rs_replicas(replicas: i32, surge: i32, all: i32, new: i32) -> i32 {
    if new >= replicas {
        return replicas;
    }
    let max_total = replicas + surge;
    if all >= max_total {
        return new;
    }
    new + (max_total - all).min(replicas - new)
}

/// How many old replicas may go now (client-go's `reconcileOldReplicaSets`):
/// `(unhealthy cleanup budget, then scale-down of available)`.
pub fn old_scale_down(
    replicas: i32,
    unavailable: i32,
    all_spec: i32,
    new_spec: i32,
    new_available: i32,
    total_available: i32,
) -> (i32, i32) {
    let min_available = replicas - unavailable;
    let new_unavailable = new_spec - new_available;
    let max_scaled_down = all_spec - min_available - new_unavailable;
    if max_scaled_down <= 0 {
        return (0, 0);
    }
    (max_scaled_down, (total_available - min_available).max(0))
}

fn condition(
    type_: &str,
    status: &str,
    reason: &str,
    message: String,
    old: Option<&DeploymentCondition>,
) -> DeploymentCondition {
    let now = Time(Timestamp::now());
    let same = old.is_some_and(|c| c.status == status && c.reason.as_deref() == Some(reason));
    let transition =
        old.filter(|c| c.status == status).and_then(|c| c.last_transition_time.clone()).unwrap_or_else(|| now.clone());
    DeploymentCondition {
        type_: type_.into(),
        status: status.into(),
        reason: Some(reason.into()),
        message: Some(message),
        last_update_time: if same { old.and_then(|c| c.last_update_time.clone()) } else { Some(now) },
        last_transition_time: Some(transition),
    }
}

/// What scaling a Deployment's ReplicaSets needs: where to write, what to
/// record the scaling on.
struct Scaler<'a> {
    api: &'a Api<ReplicaSet>,
    ctx: &'a Context,
    deployment: &'a Deployment,
}

impl Scaler<'_> {
    /// Sets `rs` to `replicas` (and its desired/max annotations to the
    /// Deployment's `d_replicas` and `d_replicas + surge`); records a
    /// `ScalingReplicaSet` event if its size changed.
    async fn scale(&self, rs: &ReplicaSet, replicas: i32, d_replicas: i32, surge: i32) -> Result<(), Error> {
        let from = spec_replicas(rs);
        if !scale(self.api, rs, replicas, d_replicas, surge).await? {
            return Ok(());
        }
        if from != replicas {
            record_scaling(self.ctx, self.deployment, rs.metadata.name.as_deref().unwrap_or_default(), from, replicas);
        }
        Ok(())
    }
}

/// Writes `rs`'s size and annotations; `false` if they were already so.
///
/// The patch pins `rs`'s resourceVersion, as upstream's update of the cached
/// object does: a size decided from a cache that has not yet seen the
/// ReplicaSet's last write (a scale racing a rollout's step) is refused
/// with 409 and decided again from the fresh object, instead of landing
/// and leaving a split no later sync corrects.
async fn scale(
    api: &Api<ReplicaSet>,
    rs: &ReplicaSet,
    replicas: i32,
    d_replicas: i32,
    surge: i32,
) -> Result<bool, Error> {
    if spec_replicas(rs) == replicas
        && annotation(rs, DESIRED_REPLICAS) == Some(d_replicas)
        && annotation(rs, MAX_REPLICAS) == Some(d_replicas + surge)
    {
        return Ok(false);
    }
    let annotations = serde_json::json!({
        DESIRED_REPLICAS: d_replicas.to_string(),
        MAX_REPLICAS: (d_replicas + surge).to_string(),
    });
    let mut patch = serde_json::json!({
        "metadata": {"annotations": annotations},
        "spec": {"replicas": replicas},
    });
    if let Some(version) = &rs.metadata.resource_version {
        patch["metadata"]["resourceVersion"] = version.as_str().into();
    }
    api.patch(rs.metadata.name.as_deref().unwrap_or_default(), &PatchParams::default(), &Patch::Merge(&patch)).await?;
    Ok(true)
}

/// Whether the Deployment was scaled since its active ReplicaSets were
/// (their `desired-replicas` annotation differs from `replicas`).
fn is_scaling_event(all: &[Arc<ReplicaSet>], replicas: i32) -> bool {
    all.iter()
        .filter(|rs| spec_replicas(rs) > 0)
        .any(|rs| annotation(rs, DESIRED_REPLICAS).is_some_and(|desired| desired != replicas))
}

/// Scales without rolling (upstream's `sync`: paused, or scaled): a lone
/// active ReplicaSet (or the newest) takes every replica; a saturated new
/// one lets the old ones go; otherwise a rolling Deployment scales every
/// active ReplicaSet in proportion.
async fn sync_scale(
    scaler: &Scaler<'_>,
    status_replicas: i32,
    new: Option<&Arc<ReplicaSet>>,
    old: &[Arc<ReplicaSet>],
    replicas: i32,
    surge: i32,
    rolling: bool,
) -> Result<(), Error> {
    let active: Vec<&Arc<ReplicaSet>> = new.into_iter().chain(old).filter(|rs| spec_replicas(rs) > 0).collect();
    let lone = match active.len() {
        0 => new.or_else(|| old.iter().max_by_key(|rs| age_key(rs))),
        1 => Some(active[0]),
        _ => None,
    };
    if let Some(rs) = lone {
        return scaler.scale(rs, replicas, replicas, surge).await;
    }
    if let Some(new) = new
        && spec_replicas(new) == replicas
        && annotation(new, DESIRED_REPLICAS) == Some(replicas)
        && available(new) == replicas
    {
        for rs in old.iter().filter(|rs| spec_replicas(rs) > 0) {
            scaler.scale(rs, 0, replicas, surge).await?;
        }
        return Ok(());
    }
    if rolling {
        let sets: Vec<ScaledSet<_>> = active
            .iter()
            .map(|rs| ScaledSet {
                replicas: spec_replicas(rs),
                max_replicas: annotation(rs, MAX_REPLICAS),
                age: age_key(rs),
            })
            .collect();
        for (rs, size) in active.iter().zip(proportional_sizes(replicas, surge, status_replicas, &sets)) {
            scaler.scale(rs, size, replicas, surge).await?;
        }
    }
    Ok(())
}

/// The Deployment's ReplicaSets, claimed as upstream's ControllerRefManager
/// does: owned ones that match the selector are kept, owned ones that no
/// longer match are released, matching orphans are adopted.
async fn claim_replica_sets(
    d: &Deployment,
    ctx: &Context,
    api: &Api<ReplicaSet>,
) -> Result<Vec<Arc<ReplicaSet>>, Error> {
    let uid = d.metadata.uid.clone().unwrap_or_default();
    let namespace = d.metadata.namespace.clone().unwrap_or_default();
    let Some(selector) = d.spec.as_ref().map(|s| &s.selector) else {
        return Ok(Vec::new());
    };
    let mut owned = Vec::new();
    let mut adoptable = None;
    for rs in ctx.replica_sets.by_namespace(&namespace) {
        let matches = workload_selects(selector, rs.metadata.labels.as_ref());
        let name = rs.metadata.name.clone().unwrap_or_default();
        match controller_of(rs.as_ref()) {
            Some(r) if r.uid == uid && matches => owned.push(rs),
            Some(r) if r.uid == uid => {
                let refs: Vec<_> =
                    rs.metadata.owner_references.iter().flatten().filter(|r| r.uid != uid).cloned().collect();
                let patch = serde_json::json!({"metadata": {"ownerReferences": refs, "uid": rs.metadata.uid}});
                ignore_not_found(api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch)).await)?;
            }
            None if matches && rs.metadata.deletion_timestamp.is_none() => {
                if adoptable.is_none() {
                    adoptable = Some(can_adopt(&ctx.client, &namespace, &owner_reference(d)).await?);
                }
                if adoptable == Some(false) {
                    continue;
                }
                let mut refs = rs.metadata.owner_references.clone().unwrap_or_default();
                refs.push(owner_reference(d));
                // The uid guards against adopting a namesake created since.
                let patch = serde_json::json!({"metadata": {"ownerReferences": refs, "uid": rs.metadata.uid}});
                if let Some(adopted) =
                    ignore_not_found(api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch)).await)?
                {
                    owned.push(Arc::new(adopted));
                }
            }
            _ => {}
        }
    }
    Ok(owned)
}

/// One reconcile of a Deployment.
pub async fn reconcile(d: Arc<Deployment>, ctx: Arc<Context>) -> Result<Action, Error> {
    if d.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let namespace = d.metadata.namespace.clone().unwrap_or_default();
    let name = d.metadata.name.clone().unwrap_or_default();
    let uid = d.metadata.uid.clone().unwrap_or_default();
    let spec = d.spec.clone().unwrap_or_default();
    let replicas = spec.replicas.unwrap_or(1);
    let paused = spec.paused.unwrap_or(false);
    let rs_api: Api<ReplicaSet> = Api::namespaced(ctx.client.clone(), &namespace);

    let mut all = claim_replica_sets(&d, &ctx, &rs_api).await?;
    all.sort_by_key(|rs| revision(rs));
    let template = spec.template.clone();
    let wanted = without_hash(&template);
    let collision = d.status.as_ref().and_then(|s| s.collision_count);
    let max_revision = all.iter().map(|rs| revision(rs)).max().unwrap_or(0);
    let (surge, unavailable) = surge_and_unavailable(&d, replicas);
    let recreate = spec.strategy.as_ref().and_then(|s| s.type_.as_deref()) == Some("Recreate");

    let mut new = all
        .iter()
        .find(|rs| rs.spec.as_ref().and_then(|s| s.template.as_ref()).map(without_hash) == Some(wanted.clone()))
        .cloned();
    let old: Vec<Arc<ReplicaSet>> =
        all.iter().filter(|rs| new.as_ref().is_none_or(|n| n.metadata.uid != rs.metadata.uid)).cloned().collect();
    let mut progress_reason = "ReplicaSetUpdated";

    if let Some(rs) = &new {
        // The existing new ReplicaSet follows the Deployment's annotations
        // and minReadySeconds (upstream's getNewReplicaSet), and, when an
        // old template came back (rollback), becomes the newest revision.
        let current = rs.metadata.annotations.clone().unwrap_or_default();
        let mut annotations: serde_json::Map<String, serde_json::Value> = copied_annotations(&d)
            .into_iter()
            .filter(|(k, v)| current.get(k) != Some(v))
            .map(|(k, v)| (k, v.into()))
            .collect();
        let old_revision = revision(rs);
        if !paused && (old_revision < max_revision || old_revision == 0) {
            annotations.insert(REVISION.into(), (max_revision + 1).to_string().into());
            if old_revision > 0 {
                let history = match current.get(REVISION_HISTORY).filter(|h| !h.is_empty()) {
                    Some(h) => format!("{h},{old_revision}"),
                    None => old_revision.to_string(),
                };
                annotations.insert(REVISION_HISTORY.into(), history.into());
            }
            progress_reason = "FoundNewReplicaSet";
        }
        let min_ready = rs.spec.as_ref().and_then(|s| s.min_ready_seconds);
        let mut patch = serde_json::json!({});
        if !annotations.is_empty() {
            patch["metadata"] = serde_json::json!({"annotations": annotations});
        }
        if min_ready.unwrap_or(0) != spec.min_ready_seconds.unwrap_or(0) {
            patch["spec"] = serde_json::json!({"minReadySeconds": spec.min_ready_seconds.unwrap_or(0)});
        }
        if patch != serde_json::json!({}) {
            let updated = rs_api
                .patch(rs.metadata.name.as_deref().unwrap_or_default(), &PatchParams::default(), &Patch::Merge(&patch))
                .await?;
            new = Some(Arc::new(updated));
        }
    }
    if !paused {
        match &new {
            Some(_) => {}
            None => {
                let hash = template_hash(&template, collision);
                let mut t = template.clone();
                t.metadata
                    .get_or_insert_with(Default::default)
                    .labels
                    .get_or_insert_with(Default::default)
                    .insert(POD_TEMPLATE_HASH.into(), hash.clone());
                let mut selector = spec.selector.clone();
                selector
                    .match_labels
                    .get_or_insert_with(Default::default)
                    .insert(POD_TEMPLATE_HASH.into(), hash.clone());
                let old_total: i32 = old.iter().map(|rs| spec_replicas(rs)).sum();
                let initial = if recreate { 0 } else { new_rs_replicas(replicas, surge, old_total, 0) };
                let mut annotations = copied_annotations(&d);
                annotations.extend([
                    (REVISION.to_string(), (max_revision + 1).to_string()),
                    (DESIRED_REPLICAS.to_string(), replicas.to_string()),
                    (MAX_REPLICAS.to_string(), (replicas + surge).to_string()),
                ]);
                let rs = ReplicaSet {
                    metadata: ObjectMeta {
                        name: Some(format!("{name}-{hash}")),
                        namespace: Some(namespace.clone()),
                        labels: t.metadata.as_ref().and_then(|m| m.labels.clone()),
                        annotations: Some(annotations),
                        owner_references: Some(vec![owner_reference(d.as_ref())]),
                        ..Default::default()
                    },
                    spec: Some(ReplicaSetSpec {
                        replicas: Some(initial),
                        min_ready_seconds: spec.min_ready_seconds,
                        selector,
                        template: Some(t),
                    }),
                    status: None,
                };
                match rs_api.create(&PostParams::default(), &rs).await {
                    Ok(created) => {
                        if initial > 0 {
                            record_scaling(&ctx, &d, created.metadata.name.as_deref().unwrap_or_default(), 0, initial);
                        }
                        new = Some(Arc::new(created));
                        progress_reason = "NewReplicaSetCreated";
                    }
                    Err(kube::Error::Api(s)) if s.code == 409 => {
                        // Ours, created by an earlier pass the cache has not shown yet?
                        let rs_name = rs.metadata.name.clone().unwrap_or_default();
                        if let Some(existing) = rs_api.get_opt(&rs_name).await?
                            && super::util::controller_of(&existing).is_some_and(|r| r.uid == uid)
                            && existing.spec.as_ref().and_then(|s| s.template.as_ref()).map(without_hash)
                                == Some(wanted.clone())
                        {
                            return Ok(Action::requeue(Duration::from_millis(50)));
                        }
                        // A ReplicaSet of that name with another template: bump collisionCount.
                        let dapi: Api<Deployment> = Api::namespaced(ctx.client.clone(), &namespace);
                        let patch = serde_json::json!({"status": {"collisionCount": collision.unwrap_or(0) + 1}});
                        dapi.patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch)).await?;
                        return Ok(Action::requeue(Duration::from_millis(10)));
                    }
                    Err(e) => return Err(e.into()),
                }
            }
        }
    }

    // The new ReplicaSet as just created or patched: the cache may not show it yet.
    if let Some(new_rs) = &new {
        all.retain(|rs| rs.metadata.uid != new_rs.metadata.uid);
        all.push(new_rs.clone());
    }
    let total_spec: i32 = all.iter().map(|rs| spec_replicas(rs)).sum();
    let scaler = Scaler { api: &rs_api, ctx: &ctx, deployment: &d };
    if paused || is_scaling_event(&all, replicas) {
        let status_replicas = d.status.as_ref().and_then(|s| s.replicas).unwrap_or(0);
        sync_scale(&scaler, status_replicas, new.as_ref(), &old, replicas, surge, !recreate).await?;
    } else if let Some(new_rs) = &new {
        if recreate {
            // Old pods still running, terminating ones included: the new
            // ReplicaSet starts only once they are all gone (upstream's
            // `oldPodsRunning`).
            let old_running: i32 = old
                .iter()
                .map(|rs| {
                    let status = rs.status.as_ref();
                    let running = status.map(|s| s.replicas).unwrap_or(0)
                        + status.and_then(|s| s.terminating_replicas).unwrap_or(0);
                    spec_replicas(rs).max(running)
                })
                .sum();
            for rs in old.iter().filter(|rs| spec_replicas(rs) > 0) {
                scaler.scale(rs, 0, replicas, surge).await?;
            }
            if old_running == 0 && spec_replicas(new_rs) != replicas {
                scaler.scale(new_rs, replicas, replicas, surge).await?;
            }
        } else {
            let new_spec = spec_replicas(new_rs);
            let target = new_rs_replicas(replicas, surge, total_spec.max(new_spec), new_spec);
            if target != new_spec {
                scaler.scale(new_rs, target, replicas, surge).await?;
            }
            let all_spec = total_spec - new_spec + target;
            let total_available: i32 = all.iter().map(|rs| available(rs)).sum();
            let (cleanup, down) =
                old_scale_down(replicas, unavailable, all_spec, target, available(new_rs), total_available);
            let mut old_sorted = old.clone();
            old_sorted.sort_by_key(|rs| revision(rs));
            let mut next: Vec<i32> = old_sorted.iter().map(|rs| spec_replicas(rs)).collect();
            if cleanup > 0 {
                // First the unhealthy old replicas, oldest first ...
                let mut cleaned = 0;
                for (i, rs) in old_sorted.iter().enumerate() {
                    let unhealthy = next[i] - available(rs);
                    if next[i] == 0 || unhealthy <= 0 {
                        continue;
                    }
                    let by = (cleanup - cleaned).min(unhealthy);
                    next[i] -= by;
                    cleaned += by;
                    if cleaned >= cleanup {
                        break;
                    }
                }
                // ... then available ones down to minAvailable.
                let mut downed = 0;
                for n in next.iter_mut() {
                    if downed >= down {
                        break;
                    }
                    let by = (*n).min(down - downed);
                    *n -= by;
                    downed += by;
                }
            }
            for (rs, n) in old_sorted.iter().zip(next) {
                if n != spec_replicas(rs) {
                    scaler.scale(rs, n, replicas, surge).await?;
                }
            }
        }
    }

    // Revision history limit: delete the oldest idle old ReplicaSets.
    let limit = spec.revision_history_limit.unwrap_or(10).max(0) as usize;
    let idle: Vec<&Arc<ReplicaSet>> =
        old.iter().filter(|rs| spec_replicas(rs) == 0 && rs.status.as_ref().is_none_or(|s| s.replicas == 0)).collect();
    if idle.len() > limit {
        for rs in &idle[..idle.len() - limit] {
            let _ = rs_api.delete(rs.metadata.name.as_deref().unwrap_or_default(), &DeleteParams::background()).await;
        }
    }

    // Status and conditions.
    let sum = |f: &dyn Fn(&ReplicaSet) -> i32| all.iter().map(|rs| f(rs)).sum::<i32>();
    let status_replicas = sum(&|rs| rs.status.as_ref().map(|s| s.replicas).unwrap_or(0));
    let ready = sum(&|rs| rs.status.as_ref().and_then(|s| s.ready_replicas).unwrap_or(0));
    let avail = sum(&|rs| available(rs));
    let new_current = new.as_ref().and_then(|n| all.iter().find(|rs| rs.metadata.uid == n.metadata.uid).cloned());
    let updated = new_current.as_ref().and_then(|rs| rs.status.as_ref()).map(|s| s.replicas).unwrap_or(0);
    let new_available = new_current.as_ref().map(|rs| available(rs)).unwrap_or(0);
    let old_conditions = d.status.as_ref().and_then(|s| s.conditions.clone()).unwrap_or_default();
    let find = |t: &str| old_conditions.iter().find(|c| c.type_ == t);
    let available_cond = if avail >= replicas - unavailable {
        condition(
            "Available",
            "True",
            "MinimumReplicasAvailable",
            "Deployment has minimum availability.".into(),
            find("Available"),
        )
    } else {
        condition(
            "Available",
            "False",
            "MinimumReplicasUnavailable",
            "Deployment does not have minimum availability.".into(),
            find("Available"),
        )
    };
    let new_name = new.as_ref().and_then(|n| n.metadata.name.clone()).unwrap_or_default();
    let complete = updated == replicas && status_replicas == replicas && new_available >= replicas && new.is_some();
    let old_progress = find("Progressing");
    let deadline = spec.progress_deadline_seconds.unwrap_or(600);
    let mut requeue = None;
    let progressing = if paused {
        condition("Progressing", "Unknown", "DeploymentPaused", "Deployment is paused".into(), old_progress)
    } else if complete {
        condition(
            "Progressing",
            "True",
            "NewReplicaSetAvailable",
            format!("ReplicaSet \"{new_name}\" has successfully progressed."),
            old_progress,
        )
    } else {
        let moved = d.status.as_ref().is_none_or(|s| {
            s.updated_replicas != Some(updated)
                || s.available_replicas != Some(avail)
                || s.replicas != Some(status_replicas)
                || s.observed_generation != d.metadata.generation
        }) || progress_reason != "ReplicaSetUpdated";
        let stale = old_progress
            .filter(|c| c.reason.as_deref() != Some("NewReplicaSetAvailable") && c.status == "True")
            .and_then(|c| c.last_update_time.as_ref())
            .map(|t| Timestamp::now().duration_since(t.0).as_secs());
        match stale {
            Some(age) if !moved && age >= i64::from(deadline) => condition(
                "Progressing",
                "False",
                "ProgressDeadlineExceeded",
                format!("ReplicaSet \"{new_name}\" has timed out progressing."),
                old_progress,
            ),
            _ if old_progress.is_some_and(|c| c.reason.as_deref() == Some("ProgressDeadlineExceeded")) && !moved => {
                old_progress.cloned().unwrap()
            }
            _ => {
                let mut c = condition(
                    "Progressing",
                    "True",
                    progress_reason,
                    format!("ReplicaSet \"{new_name}\" is progressing."),
                    None,
                );
                if !moved
                    && let Some(o) = old_progress
                        .filter(|c| c.status == "True" && c.reason.as_deref() != Some("NewReplicaSetAvailable"))
                {
                    c.last_update_time = o.last_update_time.clone();
                    c.last_transition_time = o.last_transition_time.clone();
                    c.reason = o.reason.clone();
                    c.message = o.message.clone();
                }
                requeue = Some(Duration::from_secs(u64::try_from(deadline).unwrap_or(600).max(1)));
                c
            }
        }
    };
    let status = DeploymentStatus {
        observed_generation: d.metadata.generation,
        replicas: Some(status_replicas),
        updated_replicas: Some(updated),
        ready_replicas: Some(ready),
        available_replicas: Some(avail),
        unavailable_replicas: Some((replicas - avail).max(0)),
        conditions: Some(vec![available_cond, progressing]),
        collision_count: collision,
        terminating_replicas: None,
    };
    let dapi: Api<Deployment> = Api::namespaced(ctx.client.clone(), &namespace);
    if d.status.as_ref() != Some(&status) {
        let patch = serde_json::json!({"status": status});
        dapi.patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch)).await?;
    }
    // The Deployment carries its newest revision like upstream.
    let rev = new.as_ref().map(|n| revision(n)).unwrap_or(0);
    let current_rev = d.metadata.annotations.as_ref().and_then(|a| a.get(REVISION)).cloned();
    if rev > 0 && current_rev != Some(rev.to_string()) {
        let patch = serde_json::json!({"metadata": {"annotations": {REVISION: rev.to_string()}}});
        dapi.patch(&name, &PatchParams::default(), &Patch::Merge(&patch)).await?;
    }
    Ok(match requeue {
        Some(d) => Action::requeue(d),
        None => Action::await_change(),
    })
}

/// Runs the Deployment controller on `factory`'s informers until `shutdown`.
pub async fn run(factory: SharedInformerFactory, workers: usize, shutdown: impl Future<Output = ()> + Send) {
    let queue = WorkQueue::new(RateLimit::default());
    run_with_queue(factory, workers, queue, shutdown).await
}

/// [`run`] with a queue the caller keeps (to read its metrics).
pub async fn run_with_queue(
    factory: SharedInformerFactory,
    workers: usize,
    queue: Arc<WorkQueue<ObjectKey>>,
    shutdown: impl Future<Output = ()> + Send,
) {
    let ctx = Arc::new(Context {
        client: factory.client().clone(),
        replica_sets: factory.informer::<ReplicaSet>(),
        recorder: Recorder::new(factory.client().clone(), NAME, NAME),
    });
    let deployments = factory.informer::<Deployment>();
    Controller::<Deployment>::for_(&factory)
        .with_queue(queue)
        .owns::<ReplicaSet>()
        // An orphan wakes the Deployments that could adopt it.
        .watches::<ReplicaSet>(move |rs| {
            if controller_of(rs).is_some() {
                return Vec::new();
            }
            let namespace = rs.metadata.namespace.clone().unwrap_or_default();
            deployments
                .by_namespace(&namespace)
                .iter()
                .filter(|d| d.spec.as_ref().is_some_and(|s| workload_selects(&s.selector, rs.metadata.labels.as_ref())))
                .map(|d| ObjectKey::of(d.as_ref()))
                .collect()
        })
        .name(NAME)
        .concurrency(workers)
        .run(reconcile, ctx, shutdown)
        .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sets(sizes: &[(i32, Option<i32>)]) -> Vec<ScaledSet<usize>> {
        sizes
            .iter()
            .enumerate()
            .map(|(age, &(replicas, max_replicas))| ScaledSet { replicas, max_replicas, age })
            .collect()
    }

    #[test]
    fn proportional_scaling_follows_upstream() {
        // 10 → 20 replicas in the middle of a rollout (maxSurge 3): old 8,
        // new 5, both last scaled when replicas + surge was 13.
        assert_eq!(proportional_sizes(20, 3, 10, &sets(&[(8, Some(13)), (5, Some(13))])), vec![14, 9]);
        // Scaling down, 10 → 5: the larger goes first, older first on ties.
        assert_eq!(proportional_sizes(5, 3, 10, &sets(&[(8, Some(13)), (5, Some(13))])), vec![5, 3]);
        assert_eq!(proportional_sizes(5, 0, 10, &sets(&[(5, Some(10)), (5, Some(10))])), vec![2, 3]);
        // Up on a tie: the newer gets the leftover.
        assert_eq!(proportional_sizes(11, 0, 10, &sets(&[(5, Some(10)), (5, Some(10))])), vec![5, 6]);
        // To zero: everything goes.
        assert_eq!(proportional_sizes(0, 3, 10, &sets(&[(8, Some(13)), (5, Some(13))])), vec![0, 0]);
        // Without the annotation, the Deployment's status replicas stand in;
        // the sum always lands on replicas + surge.
        let sizes = proportional_sizes(100, 25, 30, &sets(&[(20, None), (10, None), (7, Some(37))]));
        assert_eq!(sizes.iter().sum::<i32>(), 125, "{sizes:?}");
        // Nothing to do.
        assert_eq!(proportional_sizes(10, 3, 10, &sets(&[(8, Some(13)), (5, Some(13))])), vec![8, 5]);
    }

    mod reconcile {
        //! One reconcile against a [`FakeCluster`]: objects in, requests,
        //! events and objects out.

        use super::super::*;
        use crate::testing::FakeCluster;
        use serde_json::{Value, json};

        const D_UID: &str = "d-uid";

        fn template(image: &str) -> Value {
            json!({
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "c", "image": image}]},
            })
        }

        /// A Deployment of `replicas` running `image` (generation 2, observed).
        fn deployment(replicas: i32, image: &str) -> Value {
            json!({
                "metadata": {"name": "web", "namespace": "default", "uid": D_UID, "generation": 2},
                "spec": {
                    "replicas": replicas,
                    "selector": {"matchLabels": {"app": "web"}},
                    "template": template(image),
                },
            })
        }

        /// The name the controller gives the ReplicaSet of `image`.
        fn new_name(image: &str) -> String {
            let t: PodTemplateSpec = serde_json::from_value(template(image)).unwrap();
            format!("web-{}", template_hash(&t, None))
        }

        /// A ReplicaSet of the Deployment running `image`: `revision`,
        /// `spec.replicas`, and `(status.replicas, availableReplicas)`;
        /// last scaled when the Deployment had `desired` replicas.
        fn replica_set(image: &str, revision: i64, replicas: i32, status: (i32, i32), desired: i32) -> ReplicaSet {
            let name = format!("web-{image}");
            let mut t = template(image);
            t["metadata"]["labels"][POD_TEMPLATE_HASH] = json!(image);
            serde_json::from_value(json!({
                "metadata": {
                    "name": name, "namespace": "default", "uid": format!("uid-{name}"),
                    "labels": {"app": "web", POD_TEMPLATE_HASH: image},
                    "creationTimestamp": Timestamp::from_second(1_000 + revision).unwrap().to_string(),
                    "annotations": {REVISION: revision.to_string(), DESIRED_REPLICAS: desired.to_string(), MAX_REPLICAS: (desired + 1).to_string()},
                    "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "uid": D_UID, "controller": true, "blockOwnerDeletion": true}],
                },
                "spec": {
                    "replicas": replicas,
                    "selector": {"matchLabels": {"app": "web", POD_TEMPLATE_HASH: image}},
                    "template": t,
                },
                "status": {"replicas": status.0, "readyReplicas": status.1, "availableReplicas": status.1},
            }))
            .unwrap()
        }

        /// `rs` with `n` pods being deleted.
        fn terminating(mut rs: ReplicaSet, n: i32) -> ReplicaSet {
            rs.status.as_mut().unwrap().terminating_replicas = Some(n);
            rs
        }

        async fn reconcile_web(fake: &FakeCluster) -> Action {
            let ctx = Arc::new(Context {
                client: fake.client(),
                replica_sets: fake.informer::<ReplicaSet>().await,
                recorder: Recorder::new(fake.client(), NAME, NAME),
            });
            let d: Deployment = fake.get("default", "web").await.expect("the Deployment exists");
            reconcile(Arc::new(d), ctx).await.expect("reconciles")
        }

        /// `(name, spec.replicas, revision)` of every ReplicaSet, sorted by name.
        async fn replica_sets(fake: &FakeCluster) -> Vec<(String, i32, String)> {
            fake.list::<ReplicaSet>("default")
                .await
                .iter()
                .map(|rs| {
                    let revision =
                        rs.metadata.annotations.as_ref().and_then(|a| a.get(REVISION)).cloned().unwrap_or_default();
                    (rs.metadata.name.clone().unwrap(), spec_replicas(rs), revision)
                })
                .collect()
        }

        struct Row {
            name: &'static str,
            deployment: Value,
            replica_sets: Vec<ReplicaSet>,
            /// Writes but the Deployment's status, in order; `NEW` stands
            /// for the new ReplicaSet's name.
            writes: Vec<&'static str>,
            /// `(name, replicas, revision)` afterwards.
            after: Vec<(&'static str, i32, &'static str)>,
            /// The Deployment's `ScalingReplicaSet` notes.
            events: Vec<&'static str>,
        }

        /// `d` with `value` at JSON pointer `path` (whose parent exists).
        fn with(mut d: Value, path: &str, value: Value) -> Value {
            let (parent, key) = path.rsplit_once('/').unwrap();
            let key = key.replace("~1", "/").replace("~0", "~");
            d.pointer_mut(parent).unwrap_or_else(|| panic!("{path}"))[key] = value;
            d
        }

        fn recreate(d: Value) -> Value {
            with(d, "/spec/strategy", json!({"type": "Recreate"}))
        }

        fn annotated(d: Value, revision: &str) -> Value {
            with(d, "/metadata/annotations", json!({REVISION: revision}))
        }

        fn rows() -> Vec<Row> {
            vec![
                Row {
                    name: "first rollout: a new ReplicaSet of every replica, revision 1",
                    deployment: deployment(3, "v2"),
                    replica_sets: vec![],
                    writes: vec!["create replicasets default/NEW", "patch deployments default/web"],
                    after: vec![("NEW", 3, "1")],
                    events: vec!["Scaled up replica set NEW from 0 to 3"],
                },
                Row {
                    name: "new template: a new ReplicaSet within maxSurge, next revision",
                    deployment: annotated(deployment(3, "v2"), "1"),
                    replica_sets: vec![replica_set("v1", 1, 3, (3, 3), 3)],
                    writes: vec!["create replicasets default/NEW", "patch deployments default/web"],
                    after: vec![("NEW", 1, "2"), ("web-v1", 3, "1")],
                    events: vec!["Scaled up replica set NEW from 0 to 1"],
                },
                Row {
                    name: "rolling: the old ReplicaSet goes down as the new one becomes available",
                    deployment: annotated(deployment(3, "v2"), "2"),
                    replica_sets: vec![replica_set("v1", 1, 3, (3, 3), 3), replica_set("v2", 2, 1, (1, 1), 3)],
                    writes: vec!["patch replicasets default/web-v1"],
                    after: vec![("web-v1", 2, "1"), ("web-v2", 1, "2")],
                    events: vec!["Scaled down replica set web-v1 from 3 to 2"],
                },
                Row {
                    name: "Recreate: old scaled to 0, the new one created empty",
                    deployment: annotated(recreate(deployment(3, "v2")), "1"),
                    replica_sets: vec![replica_set("v1", 1, 3, (3, 3), 3)],
                    writes: vec![
                        "create replicasets default/NEW",
                        "patch replicasets default/web-v1",
                        "patch deployments default/web",
                    ],
                    after: vec![("NEW", 0, "2"), ("web-v1", 0, "1")],
                    events: vec!["Scaled down replica set web-v1 from 3 to 0"],
                },
                Row {
                    name: "Recreate: the new one waits while old pods remain",
                    deployment: annotated(recreate(deployment(3, "v2")), "2"),
                    replica_sets: vec![replica_set("v1", 1, 0, (2, 0), 3), replica_set("v2", 2, 0, (0, 0), 3)],
                    writes: vec![],
                    after: vec![("web-v1", 0, "1"), ("web-v2", 0, "2")],
                    events: vec![],
                },
                Row {
                    name: "Recreate: the new one waits while old pods terminate",
                    deployment: annotated(recreate(deployment(3, "v2")), "2"),
                    replica_sets: vec![
                        terminating(replica_set("v1", 1, 0, (0, 0), 3), 2),
                        replica_set("v2", 2, 0, (0, 0), 3),
                    ],
                    writes: vec![],
                    after: vec![("web-v1", 0, "1"), ("web-v2", 0, "2")],
                    events: vec![],
                },
                Row {
                    name: "Recreate: the new one scales up once old pods are gone",
                    deployment: annotated(recreate(deployment(3, "v2")), "2"),
                    replica_sets: vec![replica_set("v1", 1, 0, (0, 0), 3), replica_set("v2", 2, 0, (0, 0), 3)],
                    writes: vec!["patch replicasets default/web-v2"],
                    after: vec![("web-v1", 0, "1"), ("web-v2", 3, "2")],
                    events: vec!["Scaled up replica set web-v2 from 0 to 3"],
                },
                Row {
                    name: "paused: no rollout, but scaling",
                    deployment: annotated(with(deployment(5, "v2"), "/spec/paused", json!(true)), "1"),
                    replica_sets: vec![replica_set("v1", 1, 3, (3, 3), 3)],
                    writes: vec!["patch replicasets default/web-v1"],
                    after: vec![("web-v1", 5, "1")],
                    events: vec!["Scaled up replica set web-v1 from 3 to 5"],
                },
                Row {
                    name: "revisionHistoryLimit: the oldest idle ReplicaSets go",
                    deployment: annotated(with(deployment(2, "v4"), "/spec/revisionHistoryLimit", json!(1)), "4"),
                    replica_sets: vec![
                        replica_set("v1", 1, 0, (0, 0), 2),
                        replica_set("v2", 2, 0, (0, 0), 2),
                        replica_set("v3", 3, 0, (0, 0), 2),
                        replica_set("v4", 4, 2, (2, 2), 2),
                    ],
                    writes: vec!["delete replicasets default/web-v1", "delete replicasets default/web-v2"],
                    after: vec![("web-v3", 0, "3"), ("web-v4", 2, "4")],
                    events: vec![],
                },
                Row {
                    name: "rollback: the old template's ReplicaSet becomes the newest revision",
                    deployment: annotated(deployment(3, "v1"), "2"),
                    replica_sets: vec![replica_set("v1", 1, 0, (0, 0), 3), replica_set("v2", 2, 3, (3, 3), 3)],
                    writes: vec![
                        "patch replicasets default/web-v1",
                        "patch replicasets default/web-v1",
                        "patch deployments default/web",
                    ],
                    after: vec![("web-v1", 1, "3"), ("web-v2", 3, "2")],
                    events: vec!["Scaled up replica set web-v1 from 0 to 1"],
                },
            ]
        }

        #[tokio::test]
        async fn table() {
            for row in rows() {
                let d: Deployment = serde_json::from_value(row.deployment.clone()).unwrap();
                let image =
                    d.spec.as_ref().unwrap().template.spec.as_ref().unwrap().containers[0].image.clone().unwrap();
                let new = new_name(&image);
                let fake = FakeCluster::builder().object(&d).objects(&row.replica_sets).build().await;
                reconcile_web(&fake).await;
                let writes: Vec<String> =
                    fake.writes().into_iter().filter(|w| w != "patch deployments/status default/web").collect();
                let expected: Vec<String> = row.writes.iter().map(|w| w.replace("NEW", &new)).collect();
                assert_eq!(writes, expected, "{}", row.name);
                let expected: Vec<(String, i32, String)> =
                    row.after.iter().map(|(n, r, rev)| (n.replace("NEW", &new), *r, rev.to_string())).collect();
                let mut expected = expected;
                expected.sort();
                assert_eq!(replica_sets(&fake).await, expected, "{}", row.name);
                let expected: Vec<String> = row
                    .events
                    .iter()
                    .map(|e| format!("Normal {SCALING_REPLICA_SET} {}", e.replace("NEW", &new)))
                    .collect();
                assert_eq!(fake.events("default", expected.len()).await, expected, "{}", row.name);
                // The Deployment carries the newest revision.
                let d: Deployment = fake.get("default", "web").await.unwrap();
                let newest =
                    replica_sets(&fake).await.into_iter().map(|(_, _, r)| r.parse::<i64>().unwrap()).max().unwrap();
                assert_eq!(d.metadata.annotations.unwrap()[REVISION], newest.to_string(), "{}", row.name);
            }
        }

        #[tokio::test]
        async fn new_replica_set_is_labelled_and_annotated() {
            let d: Deployment = serde_json::from_value(deployment(3, "v2")).unwrap();
            let fake = FakeCluster::builder().object(&d).build().await;
            reconcile_web(&fake).await;
            let rs: ReplicaSet = fake.get("default", &new_name("v2")).await.unwrap();
            let hash = new_name("v2").trim_start_matches("web-").to_owned();
            assert_eq!(rs.metadata.labels.as_ref().unwrap()[POD_TEMPLATE_HASH], hash);
            assert_eq!(rs.spec.as_ref().unwrap().selector.match_labels.as_ref().unwrap()[POD_TEMPLATE_HASH], hash);
            let template_labels =
                rs.spec.as_ref().unwrap().template.as_ref().unwrap().metadata.as_ref().unwrap().labels.clone().unwrap();
            assert_eq!(template_labels[POD_TEMPLATE_HASH], hash);
            let annotations = rs.metadata.annotations.clone().unwrap();
            assert_eq!((annotations[DESIRED_REPLICAS].as_str(), annotations[MAX_REPLICAS].as_str()), ("3", "4"));
            assert_eq!(controller_of(&rs).map(|r| r.uid.as_str()), Some(D_UID));
            // Status: nothing available yet, progressing.
            let status = fake.get::<Deployment>("default", "web").await.unwrap().status.unwrap();
            let progressing = status.conditions.unwrap().into_iter().find(|c| c.type_ == "Progressing").unwrap();
            assert_eq!(
                (progressing.status.as_str(), progressing.reason.as_deref()),
                ("True", Some("NewReplicaSetCreated"))
            );
            assert_eq!(status.observed_generation, Some(2));
        }

        #[tokio::test]
        async fn a_name_taken_by_another_template_bumps_the_collision_count() {
            let d: Deployment = serde_json::from_value(deployment(3, "v2")).unwrap();
            // Someone else's ReplicaSet holds the name the template hashes to.
            let mut squatter = replica_set("x", 1, 0, (0, 0), 0);
            squatter.metadata.name = Some(new_name("v2"));
            squatter.metadata.owner_references = None;
            squatter.metadata.labels = Some([("app".to_string(), "other".to_string())].into());
            let fake = FakeCluster::builder().object(&d).object(&squatter).build().await;
            let action = reconcile_web(&fake).await;
            assert_eq!(action, Action::requeue(Duration::from_millis(10)));
            assert_eq!(
                fake.writes(),
                [
                    format!("create replicasets default/{}", new_name("v2")),
                    "patch deployments/status default/web".into()
                ]
            );
            let d: Deployment = fake.get("default", "web").await.unwrap();
            assert_eq!(d.status.as_ref().unwrap().collision_count, Some(1));
            // The next pass hashes with the count: a name of its own.
            fake.clear_actions();
            fake.sync::<ReplicaSet>().await;
            reconcile_web(&fake).await;
            let hash = template_hash(&d.spec.as_ref().unwrap().template, Some(1));
            assert_eq!(fake.writes()[0], format!("create replicasets default/web-{hash}"));
            let rs: ReplicaSet = fake.get("default", &format!("web-{hash}")).await.unwrap();
            assert_eq!(controller_of(&rs).map(|r| r.uid.as_str()), Some(D_UID));
            let squatter: ReplicaSet = fake.get("default", &new_name("v2")).await.unwrap();
            assert!(controller_of(&squatter).is_none());
        }

        #[tokio::test]
        async fn its_own_replica_set_missing_from_the_cache_is_waited_for() {
            // Created by an earlier pass; the cache (empty here) has not
            // shown it yet: no collision, no second ReplicaSet.
            let d: Deployment = serde_json::from_value(annotated(deployment(3, "v2"), "1")).unwrap();
            let mut ours = replica_set("v2", 1, 3, (0, 0), 3);
            ours.metadata.name = Some(new_name("v2"));
            let t: PodTemplateSpec = serde_json::from_value(template("v2")).unwrap();
            ours.spec.as_mut().unwrap().template = Some(t);
            let fake = FakeCluster::builder().object(&d).object(&ours).build().await;
            let ctx = Arc::new(Context {
                client: fake.client(),
                replica_sets: Informer::new(),
                recorder: Recorder::new(fake.client(), NAME, NAME),
            });
            let d = Arc::new(fake.get::<Deployment>("default", "web").await.unwrap());
            assert_eq!(reconcile(d, ctx).await.unwrap(), Action::requeue(Duration::from_millis(50)));
            assert_eq!(fake.writes(), [format!("create replicasets default/{}", new_name("v2"))]);
            let d: Deployment = fake.get("default", "web").await.unwrap();
            assert_eq!(d.status.and_then(|s| s.collision_count), None);
            assert_eq!(fake.list::<ReplicaSet>("default").await.len(), 1);
        }

        #[tokio::test]
        async fn replica_sets_carry_the_deployments_annotations() {
            const CAUSE: &str = "kubernetes.io/change-cause";
            const APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";
            let annotations = |rs: &ReplicaSet| rs.metadata.annotations.clone().unwrap_or_default();
            // Created with them (but kubectl's last-applied configuration).
            let d = with(deployment(3, "v2"), "/metadata/annotations", json!({CAUSE: "kubectl create", APPLIED: "{}"}));
            let fake = FakeCluster::builder().object(&serde_json::from_value::<Deployment>(d).unwrap()).build().await;
            reconcile_web(&fake).await;
            let rs: ReplicaSet = fake.get("default", &new_name("v2")).await.unwrap();
            assert_eq!(annotations(&rs).get(CAUSE).map(String::as_str), Some("kubectl create"));
            assert!(!annotations(&rs).contains_key(APPLIED));

            // An existing new ReplicaSet follows changes, and minReadySeconds.
            let d = with(
                annotated(deployment(3, "v2"), "2"),
                "/metadata/annotations/kubernetes.io~1change-cause",
                json!("scaled"),
            );
            let d = with(d, "/spec/minReadySeconds", json!(5));
            let sets = [replica_set("v1", 1, 0, (0, 0), 3), replica_set("v2", 2, 3, (3, 3), 3)];
            let fake = FakeCluster::builder()
                .object(&serde_json::from_value::<Deployment>(d).unwrap())
                .objects(&sets)
                .build()
                .await;
            reconcile_web(&fake).await;
            assert_eq!(fake.writes(), ["patch replicasets default/web-v2", "patch deployments/status default/web"]);
            let rs: ReplicaSet = fake.get("default", "web-v2").await.unwrap();
            assert_eq!(annotations(&rs)[CAUSE], "scaled");
            assert_eq!(annotations(&rs)[REVISION], "2");
            assert_eq!(rs.spec.unwrap().min_ready_seconds, Some(5));
            // The old one keeps its own.
            let old: ReplicaSet = fake.get("default", "web-v1").await.unwrap();
            assert!(!annotations(&old).contains_key(CAUSE));

            // A rollback records the revisions the ReplicaSet had.
            let mut v1 = replica_set("v1", 3, 0, (0, 0), 3);
            v1.metadata.annotations.as_mut().unwrap().insert(REVISION_HISTORY.into(), "1".into());
            let sets = [v1, replica_set("v2", 4, 3, (3, 3), 3)];
            let d: Deployment = serde_json::from_value(annotated(deployment(3, "v1"), "4")).unwrap();
            let fake = FakeCluster::builder().object(&d).objects(&sets).build().await;
            reconcile_web(&fake).await;
            let rs: ReplicaSet = fake.get("default", "web-v1").await.unwrap();
            assert_eq!(
                (annotations(&rs)[REVISION].as_str(), annotations(&rs)[REVISION_HISTORY].as_str()),
                ("5", "1,3")
            );
        }

        #[tokio::test]
        async fn paused_deployment_reports_paused() {
            let d: Deployment =
                serde_json::from_value(annotated(with(deployment(3, "v2"), "/spec/paused", json!(true)), "1")).unwrap();
            let fake = FakeCluster::builder().object(&d).object(&replica_set("v1", 1, 3, (3, 3), 3)).build().await;
            reconcile_web(&fake).await;
            assert_eq!(fake.writes(), ["patch deployments/status default/web"]);
            let status = fake.get::<Deployment>("default", "web").await.unwrap().status.unwrap();
            let progressing = status.conditions.unwrap().into_iter().find(|c| c.type_ == "Progressing").unwrap();
            assert_eq!(
                (progressing.status.as_str(), progressing.reason.as_deref()),
                ("Unknown", Some("DeploymentPaused"))
            );
            assert_eq!(status.updated_replicas, Some(0));
        }

        #[tokio::test]
        async fn progress_deadline_exceeded() {
            // A rollout stuck for an hour with a 10 s deadline: the new
            // ReplicaSet has 3 pods, one available; nothing moved since the
            // last status.
            let hour_ago =
                Timestamp::now().checked_sub(k8s_openapi::jiff::SignedDuration::from_secs(3600)).unwrap().to_string();
            let mut d = annotated(with(deployment(3, "v2"), "/spec/progressDeadlineSeconds", json!(10)), "1");
            d["status"] = json!({
                "observedGeneration": 2, "replicas": 3, "updatedReplicas": 3, "readyReplicas": 1,
                "availableReplicas": 1, "unavailableReplicas": 2,
                "conditions": [{"type": "Progressing", "status": "True", "reason": "ReplicaSetUpdated",
                                "message": "progressing", "lastUpdateTime": hour_ago, "lastTransitionTime": hour_ago}],
            });
            let d: Deployment = serde_json::from_value(d).unwrap();
            let mut rs = replica_set("v2", 1, 3, (3, 1), 3);
            rs.metadata.name = Some(new_name("v2"));
            let fake = FakeCluster::builder().object(&d).object(&rs).build().await;
            reconcile_web(&fake).await;
            let status = fake.get::<Deployment>("default", "web").await.unwrap().status.unwrap();
            let progressing = status.conditions.unwrap().into_iter().find(|c| c.type_ == "Progressing").unwrap();
            assert_eq!(
                (progressing.status.as_str(), progressing.reason.as_deref()),
                ("False", Some("ProgressDeadlineExceeded")),
                "{progressing:?}"
            );
            assert_eq!(
                progressing.message.as_deref(),
                Some(format!("ReplicaSet \"{}\" has timed out progressing.", new_name("v2")).as_str())
            );

            // Within the deadline the same state is still progressing.
            let mut d = d;
            let recent = Timestamp::now().to_string();
            let conditions = d.status.as_mut().unwrap().conditions.as_mut().unwrap();
            conditions[0].last_update_time = Some(Time(recent.parse().unwrap()));
            let fake = FakeCluster::builder().object(&d).object(&rs).build().await;
            let action = reconcile_web(&fake).await;
            let status = fake.get::<Deployment>("default", "web").await.unwrap().status.unwrap();
            let progressing = status.conditions.unwrap().into_iter().find(|c| c.type_ == "Progressing").unwrap();
            assert_eq!(
                (progressing.status.as_str(), progressing.reason.as_deref()),
                ("True", Some("ReplicaSetUpdated"))
            );
            // Looked at again by the deadline.
            assert_eq!(action, Action::requeue(Duration::from_secs(10)));
        }
    }

    #[test]
    fn resolve_percentages() {
        let table = [
            (Some(IntOrString::String("25%".into())), 10, true, 3),
            (Some(IntOrString::String("25%".into())), 10, false, 2),
            (Some(IntOrString::Int(4)), 10, false, 4),
            (None, 4, true, 1),
            (None, 3, false, 0),
        ];
        for (v, total, up, expected) in table {
            assert_eq!(resolve(v.as_ref(), total, up, "25%"), expected, "{v:?} {total}");
        }
    }

    #[test]
    fn new_replica_set_scaling() {
        // (replicas, surge, all, new) -> new replicas
        let table =
            [(3, 1, 3, 0, 1), (3, 1, 4, 1, 1), (3, 1, 3, 1, 2), (3, 0, 3, 0, 0), (3, 1, 0, 0, 3), (3, 1, 5, 5, 3)];
        for (replicas, surge, all, new, expected) in table {
            assert_eq!(new_rs_replicas(replicas, surge, all, new), expected);
        }
    }

    #[test]
    fn old_replica_sets_scale_down_within_availability() {
        // (replicas, maxUnavailable, all spec, new spec, new available, all available)
        // -> (budget, scale-down of available)
        let table = [
            // old 3 available, new 1 not yet available: one old may go.
            ((3, 1, 4, 1, 0, 3), (1, 1)),
            // new one available too: two may go, keeping 2 available.
            ((3, 1, 4, 1, 1, 4), (2, 2)),
            // nothing to spare at minimum availability.
            ((3, 1, 3, 1, 0, 2), (0, 0)),
            // maxUnavailable 0, surge pending: nothing goes.
            ((3, 0, 4, 1, 0, 3), (0, 0)),
        ];
        for ((r, u, all, new, new_avail, avail), expected) in table {
            assert_eq!(old_scale_down(r, u, all, new, new_avail, avail), expected);
        }
    }

    #[test]
    fn both_zero_means_one_unavailable() {
        let d = Deployment {
            spec: Some(k8s_openapi::api::apps::v1::DeploymentSpec {
                strategy: Some(k8s_openapi::api::apps::v1::DeploymentStrategy {
                    type_: Some("RollingUpdate".into()),
                    rolling_update: Some(k8s_openapi::api::apps::v1::RollingUpdateDeployment {
                        max_surge: Some(IntOrString::Int(0)),
                        max_unavailable: Some(IntOrString::Int(0)),
                    }),
                }),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(surge_and_unavailable(&d, 3), (0, 1));
    }
}
