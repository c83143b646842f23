//! Helpers shared by the built-in controllers: label selectors, owner
//! references, pod readiness, template hashing.

use k8s_openapi::api::core::v1::{Pod, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, OwnerReference};
use kube::Resource;
use orchestra_core::api;
use std::collections::BTreeMap;

/// Whether a workload's `selector` selects `labels`: the shared rules of
/// [`orchestra_core::api::selector_matches`], except that an empty selector
/// selects nothing, as workload controllers read it (a controller never owns
/// every pod of its namespace).
pub fn workload_selects(selector: &LabelSelector, labels: Option<&BTreeMap<String, String>>) -> bool {
    !api::selector_is_empty(selector) && api::selector_matches(selector, labels)
}

/// A write's result, with "the object is gone" as `None`.
pub(crate) fn ignore_not_found<T>(r: Result<T, kube::Error>) -> Result<Option<T>, crate::Error> {
    match r {
        Ok(v) => Ok(Some(v)),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// Whether the controller `owner` (in `namespace`) may adopt orphans: read
/// from the API server, not a cache, it still exists under the same UID and
/// is not being deleted (upstream's `RecheckDeletionTimestamp`). Without
/// this, an owner whose cached copy does not show its deletion yet would
/// adopt again what the garbage collector has just orphaned. Controllers
/// ask once per sync, and only when there is an orphan to adopt. The owner's
/// resource is its kind in lower case plus `s` (replicasets, deployments,
/// replicationcontrollers): the workload kinds that adopt.
pub async fn can_adopt(client: &kube::Client, namespace: &str, owner: &OwnerReference) -> Result<bool, crate::Error> {
    let (group, version) = match owner.api_version.split_once('/') {
        Some((group, version)) => (group, version),
        None => ("", owner.api_version.as_str()),
    };
    let gvk = kube::api::GroupVersionKind::gvk(group, version, &owner.kind);
    let plural = format!("{}s", owner.kind.to_ascii_lowercase());
    let resource = kube::api::ApiResource::from_gvk_with_plural(&gvk, &plural);
    let api: kube::Api<kube::api::DynamicObject> = kube::Api::namespaced_with(client.clone(), namespace, &resource);
    Ok(ignore_not_found(api.get(&owner.name).await)?.is_some_and(|fresh| {
        fresh.metadata.uid.as_deref() == Some(owner.uid.as_str()) && fresh.metadata.deletion_timestamp.is_none()
    }))
}

/// The controller owner reference of `object`, if any.
pub fn controller_of(object: &impl Resource) -> Option<&OwnerReference> {
    object.meta().owner_references.iter().flatten().find(|r| r.controller == Some(true))
}

/// A controller owner reference to `owner` (with `blockOwnerDeletion`).
pub fn owner_reference<K: Resource<DynamicType = ()>>(owner: &K) -> OwnerReference {
    OwnerReference {
        api_version: K::api_version(&()).into_owned(),
        kind: K::kind(&()).into_owned(),
        name: owner.meta().name.clone().unwrap_or_default(),
        uid: owner.meta().uid.clone().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

/// Whether the pod is neither terminated nor being deleted.
pub fn is_active(pod: &Pod) -> bool {
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    pod.metadata.deletion_timestamp.is_none() && !matches!(phase, Some("Succeeded" | "Failed"))
}

/// Whether the pod's `Ready` condition is `True`.
pub fn is_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .any(|c| c.type_ == "Ready" && c.status == "True")
}

/// Whether the pod has been ready for at least `min_ready_seconds`.
pub fn is_available(pod: &Pod, min_ready_seconds: i32) -> bool {
    if !is_ready(pod) {
        return false;
    }
    if min_ready_seconds <= 0 {
        return true;
    }
    let since = pod
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .find(|c| c.type_ == "Ready")
        .and_then(|c| c.last_transition_time.as_ref())
        .map(|t| t.0);
    since.is_some_and(|t| {
        k8s_openapi::jiff::Timestamp::now().duration_since(t).as_secs() >= i64::from(min_ready_seconds)
    })
}

/// FNV-1a (32 bit).
pub fn fnv32a(bytes: &[u8]) -> u32 {
    let mut hash: u32 = 0x811c_9dc5;
    for b in bytes {
        hash ^= u32::from(*b);
        hash = hash.wrapping_mul(0x0100_0193);
    }
    hash
}

/// Kubernetes' `rand.SafeEncodeString` alphabet applied to a number's digits.
pub fn safe_encode(value: u32) -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    value.to_string().bytes().map(|d| ALPHABET[usize::from(d - b'0')] as char).collect()
}

/// The `pod-template-hash` of a template (and a collision count).
pub fn template_hash(template: &PodTemplateSpec, collision_count: Option<i32>) -> String {
    let mut bytes = serde_json::to_vec(template).unwrap_or_default();
    if let Some(c) = collision_count {
        bytes.extend_from_slice(&c.to_le_bytes());
    }
    safe_encode(fnv32a(&bytes))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn selectors() {
        let by_app = LabelSelector { match_labels: Some(labels(&[("app", "x")])), ..Default::default() };
        let in_tier = LabelSelector {
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: "tier".into(),
                operator: "In".into(),
                values: Some(vec!["a".into(), "b".into()]),
            }]),
            ..Default::default()
        };
        // (selector, labels, matches)
        type Case<'a> = (&'a LabelSelector, &'a [(&'a str, &'a str)], bool);
        let table: &[Case<'_>] = &[
            (&by_app, &[("app", "x")], true),
            (&by_app, &[("app", "x"), ("other", "1")], true),
            (&by_app, &[("app", "y")], false),
            (&by_app, &[], false),
            (&in_tier, &[("tier", "b")], true),
            (&in_tier, &[("tier", "c")], false),
            (&LabelSelector::default(), &[("app", "x")], false),
        ];
        for (selector, l, expected) in table {
            assert_eq!(workload_selects(selector, Some(&labels(l))), *expected, "{l:?}");
        }
    }

    #[test]
    fn hashes_are_stable_and_safe() {
        let t = PodTemplateSpec::default();
        let a = template_hash(&t, None);
        assert_eq!(a, template_hash(&t, None));
        assert_ne!(a, template_hash(&t, Some(1)));
        assert!(a.chars().all(|c| "bcdfghjklmnpqrstvwxz2456789".contains(c)));
    }
}
