//! Matching helpers shared by plugins: node selectors, pod and volume
//! accessors. Label selectors match with
//! [`orchestra_core::api::selector_matches`].

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Node, NodeSelectorRequirement, NodeSelectorTerm, PersistentVolume, PersistentVolumeClaim, Pod, TopologySelectorTerm,
};

/// Whether a node selector requirement matches `labels` (In, NotIn, Exists,
/// DoesNotExist, Gt, Lt).
pub fn requirement_matches(r: &NodeSelectorRequirement, labels: Option<&BTreeMap<String, String>>) -> bool {
    let value = labels.and_then(|l| l.get(&r.key));
    let values = r.values.as_deref().unwrap_or_default();
    match r.operator.as_str() {
        "In" => value.is_some_and(|v| values.contains(v)),
        "NotIn" => value.is_none_or(|v| !values.contains(v)),
        "Exists" => value.is_some(),
        "DoesNotExist" => value.is_none(),
        "Gt" | "Lt" => {
            let (Some(v), Some(bound)) =
                (value.and_then(|v| v.parse::<i64>().ok()), values.first().and_then(|b| b.parse::<i64>().ok()))
            else {
                return false;
            };
            if r.operator == "Gt" { v > bound } else { v < bound }
        }
        _ => false,
    }
}

/// Whether a node selector term matches the node (expressions on labels,
/// fields on `metadata.name`); an empty term matches nothing.
pub fn term_matches(term: &NodeSelectorTerm, node: &Node) -> bool {
    let exprs = term.match_expressions.as_deref().unwrap_or_default();
    let fields = term.match_fields.as_deref().unwrap_or_default();
    if exprs.is_empty() && fields.is_empty() {
        return false;
    }
    let labels = node.metadata.labels.as_ref();
    if !exprs.iter().all(|r| requirement_matches(r, labels)) {
        return false;
    }
    let name_labels: BTreeMap<String, String> =
        [("metadata.name".to_owned(), node.metadata.name.clone().unwrap_or_default())].into();
    fields.iter().all(|r| r.key == "metadata.name" && requirement_matches(r, Some(&name_labels)))
}

/// The pod's labels.
pub fn pod_labels(pod: &Pod) -> Option<&BTreeMap<String, String>> {
    pod.metadata.labels.as_ref()
}

/// The pod's priority (0 when unset).
pub fn pod_priority(pod: &Pod) -> i32 {
    pod.spec.as_ref().and_then(|s| s.priority).unwrap_or(0)
}

/// The beta annotation that overrides `storageClassName` on claims and volumes.
pub const ANN_STORAGE_CLASS: &str = "volume.beta.kubernetes.io/storage-class";

/// The PVCs a pod uses, in volume order: `(volume name, claim name, ephemeral)`;
/// an ephemeral volume's claim is `<pod>-<volume>`.
pub fn pod_claims(pod: &Pod) -> Vec<(String, String, bool)> {
    let pod_name = pod.metadata.name.as_deref().unwrap_or("");
    let mut out = Vec::new();
    for v in pod.spec.as_ref().and_then(|s| s.volumes.as_ref()).into_iter().flatten() {
        if let Some(c) = &v.persistent_volume_claim {
            out.push((v.name.clone(), c.claim_name.clone(), false));
        } else if v.ephemeral.is_some() {
            out.push((v.name.clone(), format!("{pod_name}-{}", v.name), true));
        }
    }
    out
}

/// The claim's storage class (beta annotation first, then `spec.storageClassName`; "" when none).
pub fn claim_class(pvc: &PersistentVolumeClaim) -> &str {
    if let Some(c) = pvc.metadata.annotations.as_ref().and_then(|a| a.get(ANN_STORAGE_CLASS)) {
        return c;
    }
    pvc.spec.as_ref().and_then(|s| s.storage_class_name.as_deref()).unwrap_or("")
}

/// The volume's storage class (beta annotation first, then `spec.storageClassName`; "" when none).
pub fn volume_class(pv: &PersistentVolume) -> &str {
    if let Some(c) = pv.metadata.annotations.as_ref().and_then(|a| a.get(ANN_STORAGE_CLASS)) {
        return c;
    }
    pv.spec.as_ref().and_then(|s| s.storage_class_name.as_deref()).unwrap_or("")
}

/// The claim's access modes.
pub fn claim_access_modes(pvc: &PersistentVolumeClaim) -> &[String] {
    pvc.spec.as_ref().and_then(|s| s.access_modes.as_deref()).unwrap_or_default()
}

/// Whether the volume's required node affinity admits `node` (no affinity admits every node).
pub fn volume_node_affinity_matches(pv: &PersistentVolume, node: &Node) -> bool {
    match pv.spec.as_ref().and_then(|s| s.node_affinity.as_ref()).and_then(|a| a.required.as_ref()) {
        None => true,
        Some(sel) => sel.node_selector_terms.iter().any(|t| term_matches(t, node)),
    }
}

/// Whether topology selector terms (a StorageClass's `allowedTopologies`)
/// admit `labels`; no terms admit everything.
pub fn topology_terms_match(terms: &[TopologySelectorTerm], labels: Option<&BTreeMap<String, String>>) -> bool {
    terms.is_empty()
        || terms.iter().any(|t| {
            t.match_label_expressions
                .iter()
                .flatten()
                .all(|e| labels.and_then(|l| l.get(&e.key)).is_some_and(|v| e.values.contains(v)))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operators() {
        let labels: BTreeMap<String, String> =
            [("zone".to_owned(), "a".to_owned()), ("gen".to_owned(), "5".to_owned())].into();
        let r = |key: &str, op: &str, values: &[&str]| NodeSelectorRequirement {
            key: key.into(),
            operator: op.into(),
            values: Some(values.iter().map(|s| s.to_string()).collect()),
        };
        for (req, want) in [
            (r("zone", "In", &["a", "b"]), true),
            (r("zone", "In", &["b"]), false),
            (r("zone", "NotIn", &["b"]), true),
            (r("missing", "NotIn", &["b"]), true),
            (r("zone", "Exists", &[]), true),
            (r("zone", "DoesNotExist", &[]), false),
            (r("gen", "Gt", &["4"]), true),
            (r("gen", "Lt", &["4"]), false),
            (r("zone", "Gt", &["4"]), false),
        ] {
            assert_eq!(requirement_matches(&req, Some(&labels)), want, "{req:?}");
        }
    }
}
