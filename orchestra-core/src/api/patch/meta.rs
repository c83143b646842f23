//! Patch metadata of the built-in kinds: how each list and map merges.
//!
//! The `k8s-openapi` schemas carry no `x-kubernetes-patch-merge-key`,
//! `x-kubernetes-list-type` or `x-kubernetes-map-type`, so this curated table
//! holds what upstream's Go types say with their `patchStrategy` /
//! `patchMergeKey` tags and `+listType` / `+listMapKey` / `+mapType` markers
//! (Kubernetes 1.33, stable API versions). A list not named here is atomic
//! (replaced whole by strategic merge patch, owned whole by server-side
//! apply); a map or struct not named here merges field by field.

/// How one list or map field merges.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Strategy {
    /// `+listType=map`: items are identified by these key fields. The first
    /// key is the strategic-merge-patch `patchMergeKey`; server-side apply
    /// uses all of them (`k:{"containerPort":80,"protocol":"TCP"}`).
    ListMap(&'static [&'static str]),
    /// `+listType=set`: a list of distinct scalars (`v:"x"` items).
    ListSet,
    /// `+listType=atomic`: replaced and owned as a whole (the default).
    AtomicList,
    /// `+mapType=atomic` (or `+structType=atomic`): replaced and owned whole
    /// by server-side apply. Strategic merge patch still merges it by key.
    AtomicMap,
}

/// The patch metadata of one field of one schema type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FieldStrategy {
    /// The schema type holding the field, e.g. `io.k8s.api.core.v1.PodSpec`.
    pub type_name: &'static str,
    /// The JSON field name, e.g. `containers`.
    pub field: &'static str,
    /// How server-side apply treats the field (and the list keys).
    pub strategy: Strategy,
    /// True if strategic merge patch merges the list (`patchStrategy:"merge"`);
    /// false if it replaces it.
    pub strategic_merge: bool,
}

const fn e(type_name: &'static str, field: &'static str, strategy: Strategy, strategic_merge: bool) -> FieldStrategy {
    FieldStrategy { type_name, field, strategy, strategic_merge }
}

/// Every non-default list or map field of the built-in kinds.
pub const FIELD_STRATEGIES: &[FieldStrategy] = &[
    e("io.k8s.api.admissionregistration.v1.MutatingWebhook", "matchConditions", Strategy::ListMap(&["name"]), true),
    e(
        "io.k8s.api.admissionregistration.v1.MutatingWebhookConfiguration",
        "webhooks",
        Strategy::ListMap(&["name"]),
        true,
    ),
    e(
        "io.k8s.api.admissionregistration.v1.ValidatingAdmissionPolicyBindingSpec",
        "validationActions",
        Strategy::ListSet,
        false,
    ),
    e(
        "io.k8s.api.admissionregistration.v1.ValidatingAdmissionPolicySpec",
        "matchConditions",
        Strategy::ListMap(&["name"]),
        true,
    ),
    e(
        "io.k8s.api.admissionregistration.v1.ValidatingAdmissionPolicySpec",
        "variables",
        Strategy::ListMap(&["name"]),
        true,
    ),
    e(
        "io.k8s.api.admissionregistration.v1.ValidatingAdmissionPolicyStatus",
        "conditions",
        Strategy::ListMap(&["type"]),
        true,
    ),
    e("io.k8s.api.admissionregistration.v1.ValidatingWebhook", "matchConditions", Strategy::ListMap(&["name"]), true),
    e(
        "io.k8s.api.admissionregistration.v1.ValidatingWebhookConfiguration",
        "webhooks",
        Strategy::ListMap(&["name"]),
        true,
    ),
    e("io.k8s.api.apps.v1.DaemonSetStatus", "conditions", Strategy::ListMap(&["type"]), true),
    e("io.k8s.api.apps.v1.DeploymentStatus", "conditions", Strategy::ListMap(&["type"]), true),
    e("io.k8s.api.apps.v1.ReplicaSetStatus", "conditions", Strategy::ListMap(&["type"]), true),
    e("io.k8s.api.apps.v1.StatefulSetStatus", "conditions", Strategy::ListMap(&["type"]), true),
    e("io.k8s.api.autoscaling.v2.HorizontalPodAutoscalerStatus", "conditions", Strategy::ListMap(&["type"]), true),
    e("io.k8s.api.batch.v1.JobStatus", "conditions", Strategy::ListMap(&["type"]), true),
    e("io.k8s.api.batch.v1.PodFailurePolicyOnExitCodesRequirement", "values", Strategy::ListSet, false),
    e("io.k8s.api.batch.v1.UncountedTerminatedPods", "failed", Strategy::ListSet, false),
    e("io.k8s.api.batch.v1.UncountedTerminatedPods", "succeeded", Strategy::ListSet, false),
    e("io.k8s.api.certificates.v1.CertificateSigningRequestStatus", "conditions", Strategy::ListMap(&["type"]), true),
    e("io.k8s.api.core.v1.ComponentStatus", "conditions", Strategy::ListMap(&["type"]), true),
    e("io.k8s.api.core.v1.Container", "env", Strategy::ListMap(&["name"]), true),
    e("io.k8s.api.core.v1.Container", "ports", Strategy::ListMap(&["containerPort", "protocol"]), true),
    e("io.k8s.api.core.v1.Container", "volumeDevices", Strategy::ListMap(&["devicePath"]), true),
    e("io.k8s.api.core.v1.Container", "volumeMounts", Strategy::ListMap(&["mountPath"]), true),
    e("io.k8s.api.core.v1.ContainerStatus", "allocatedResourcesStatus", Strategy::ListMap(&["name"]), false),
    e("io.k8s.api.core.v1.ContainerStatus", "volumeMounts", Strategy::ListMap(&["mountPath"]), true),
    e("io.k8s.api.core.v1.EphemeralContainer", "env", Strategy::ListMap(&["name"]), true),
    e("io.k8s.api.core.v1.EphemeralContainer", "ports", Strategy::ListMap(&["containerPort", "protocol"]), true),
    e("io.k8s.api.core.v1.EphemeralContainer", "volumeDevices", Strategy::ListMap(&["devicePath"]), true),
    e("io.k8s.api.core.v1.EphemeralContainer", "volumeMounts", Strategy::ListMap(&["mountPath"]), true),
    e("io.k8s.api.core.v1.NamespaceStatus", "conditions", Strategy::ListMap(&["type"]), true),
    e("io.k8s.api.core.v1.NodeSpec", "podCIDRs", Strategy::ListSet, true),
    e("io.k8s.api.core.v1.NodeStatus", "addresses", Strategy::ListMap(&["type"]), true),
    e("io.k8s.api.core.v1.NodeStatus", "conditions", Strategy::ListMap(&["type"]), true),
    e("io.k8s.api.core.v1.PersistentVolumeClaimStatus", "conditions", Strategy::ListMap(&["type"]), true),
    e("io.k8s.api.core.v1.PodSpec", "containers", Strategy::ListMap(&["name"]), true),
    e("io.k8s.api.core.v1.PodSpec", "ephemeralContainers", Strategy::ListMap(&["name"]), true),
    e("io.k8s.api.core.v1.PodSpec", "hostAliases", Strategy::ListMap(&["ip"]), true),
    e("io.k8s.api.core.v1.PodSpec", "imagePullSecrets", Strategy::ListMap(&["name"]), true),
    e("io.k8s.api.core.v1.PodSpec", "initContainers", Strategy::ListMap(&["name"]), true),
    e("io.k8s.api.core.v1.PodSpec", "nodeSelector", Strategy::AtomicMap, false),
    e("io.k8s.api.core.v1.PodSpec", "resourceClaims", Strategy::ListMap(&["name"]), true),
    e("io.k8s.api.core.v1.PodSpec", "schedulingGates", Strategy::ListMap(&["name"]), true),
    e(
        "io.k8s.api.core.v1.PodSpec",
        "topologySpreadConstraints",
        Strategy::ListMap(&["topologyKey", "whenUnsatisfiable"]),
        true,
    ),
    e("io.k8s.api.core.v1.PodSpec", "volumes", Strategy::ListMap(&["name"]), true),
    e("io.k8s.api.core.v1.PodStatus", "conditions", Strategy::ListMap(&["type"]), true),
    e("io.k8s.api.core.v1.PodStatus", "hostIPs", Strategy::ListMap(&["ip"]), true),
    e("io.k8s.api.core.v1.PodStatus", "podIPs", Strategy::ListMap(&["ip"]), true),
    e("io.k8s.api.core.v1.PodStatus", "resourceClaimStatuses", Strategy::ListMap(&["name"]), true),
    e("io.k8s.api.core.v1.ReplicationControllerSpec", "selector", Strategy::AtomicMap, false),
    e("io.k8s.api.core.v1.ReplicationControllerStatus", "conditions", Strategy::ListMap(&["type"]), true),
    e("io.k8s.api.core.v1.ResourceRequirements", "claims", Strategy::ListMap(&["name"]), false),
    e("io.k8s.api.core.v1.ResourceStatus", "resources", Strategy::ListMap(&["resourceID"]), false),
    e("io.k8s.api.core.v1.ServiceAccount", "secrets", Strategy::ListMap(&["name"]), true),
    e("io.k8s.api.core.v1.ServiceSpec", "ports", Strategy::ListMap(&["port", "protocol"]), true),
    e("io.k8s.api.core.v1.ServiceSpec", "selector", Strategy::AtomicMap, false),
    e("io.k8s.api.core.v1.ServiceStatus", "conditions", Strategy::ListMap(&["type"]), true),
    e("io.k8s.api.discovery.v1.Endpoint", "addresses", Strategy::ListSet, false),
    e("io.k8s.api.flowcontrol.v1.FlowSchemaStatus", "conditions", Strategy::ListMap(&["type"]), true),
    e("io.k8s.api.flowcontrol.v1.NonResourcePolicyRule", "nonResourceURLs", Strategy::ListSet, false),
    e("io.k8s.api.flowcontrol.v1.NonResourcePolicyRule", "verbs", Strategy::ListSet, false),
    e("io.k8s.api.flowcontrol.v1.PriorityLevelConfigurationStatus", "conditions", Strategy::ListMap(&["type"]), true),
    e("io.k8s.api.flowcontrol.v1.ResourcePolicyRule", "apiGroups", Strategy::ListSet, false),
    e("io.k8s.api.flowcontrol.v1.ResourcePolicyRule", "namespaces", Strategy::ListSet, false),
    e("io.k8s.api.flowcontrol.v1.ResourcePolicyRule", "resources", Strategy::ListSet, false),
    e("io.k8s.api.flowcontrol.v1.ResourcePolicyRule", "verbs", Strategy::ListSet, false),
    e("io.k8s.api.networking.v1.ServiceCIDRStatus", "conditions", Strategy::ListMap(&["type"]), true),
    e("io.k8s.api.node.v1.Scheduling", "nodeSelector", Strategy::AtomicMap, false),
    e("io.k8s.api.policy.v1.PodDisruptionBudgetStatus", "conditions", Strategy::ListMap(&["type"]), true),
    e("io.k8s.api.storage.v1.CSIDriverSpec", "volumeLifecycleModes", Strategy::ListSet, false),
    e("io.k8s.api.storage.v1.CSINodeSpec", "drivers", Strategy::ListMap(&["name"]), true),
    e(
        "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.CustomResourceDefinitionStatus",
        "conditions",
        Strategy::ListMap(&["type"]),
        true,
    ),
    e(
        "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.JSONSchemaProps",
        "x-kubernetes-validations",
        Strategy::ListMap(&["rule"]),
        true,
    ),
    e("io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta", "finalizers", Strategy::ListSet, true),
    e("io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta", "ownerReferences", Strategy::ListMap(&["uid"]), true),
    e(
        "io.k8s.kube-aggregator.pkg.apis.apiregistration.v1.APIServiceStatus",
        "conditions",
        Strategy::ListMap(&["type"]),
        true,
    ),
];

/// Struct types that are `+structType=atomic` upstream: server-side apply
/// owns them whole wherever they appear.
pub const ATOMIC_TYPES: &[&str] = &[
    "io.k8s.apimachinery.pkg.apis.meta.v1.LabelSelector",
    "io.k8s.api.core.v1.LocalObjectReference",
    "io.k8s.api.core.v1.ObjectReference",
];

/// The patch metadata of `field` in the schema type `type_name`, if it is
/// not the default (atomic lists, granular maps).
pub fn field_strategy(type_name: &str, field: &str) -> Option<&'static FieldStrategy> {
    // Looked up for every field a write touches: indexed once by type.
    type ByType = foldhash::HashMap<&'static str, Vec<&'static FieldStrategy>>;
    static BY_TYPE: std::sync::LazyLock<ByType> = std::sync::LazyLock::new(|| {
        let mut by_type = ByType::default();
        for strategy in FIELD_STRATEGIES {
            by_type.entry(strategy.type_name).or_default().push(strategy);
        }
        by_type
    });
    BY_TYPE.get(type_name)?.iter().copied().find(|s| s.field == field)
}

/// True if the struct type is owned and replaced whole by server-side apply.
pub fn is_atomic_type(type_name: &str) -> bool {
    ATOMIC_TYPES.contains(&type_name)
}

/// Fields whose strategic patch strategy includes `retainKeys` (the patch
/// may carry `$retainKeys`: a union type whose other members are cleared).
pub const RETAIN_KEYS_FIELDS: &[(&str, &str)] = &[
    ("io.k8s.api.core.v1.PodSpec", "volumes"),
    ("io.k8s.api.core.v1.PodSpec", "resourceClaims"),
    ("io.k8s.api.core.v1.PodStatus", "resourceClaimStatuses"),
    ("io.k8s.api.apps.v1.DeploymentSpec", "strategy"),
    ("io.k8s.api.apps.v1.DaemonSetSpec", "updateStrategy"),
];

/// The OpenAPI extensions upstream publishes for a field
/// (`x-kubernetes-list-type`, `x-kubernetes-list-map-keys`,
/// `x-kubernetes-map-type`, `x-kubernetes-patch-strategy`,
/// `x-kubernetes-patch-merge-key`); empty for default fields.
pub fn openapi_extensions(type_name: &str, field: &str) -> serde_json::Map<String, serde_json::Value> {
    let mut extensions = serde_json::Map::new();
    let retain_keys = RETAIN_KEYS_FIELDS.contains(&(type_name, field));
    let mut strategy = Vec::new();
    if let Some(entry) = field_strategy(type_name, field) {
        match entry.strategy {
            Strategy::ListMap(keys) => {
                extensions.insert("x-kubernetes-list-type".into(), "map".into());
                extensions.insert("x-kubernetes-list-map-keys".into(), keys.to_vec().into());
                if entry.strategic_merge {
                    extensions.insert("x-kubernetes-patch-merge-key".into(), keys[0].into());
                    strategy.push("merge");
                }
            }
            Strategy::ListSet => {
                extensions.insert("x-kubernetes-list-type".into(), "set".into());
                if entry.strategic_merge {
                    strategy.push("merge");
                }
            }
            Strategy::AtomicList => {
                extensions.insert("x-kubernetes-list-type".into(), "atomic".into());
            }
            Strategy::AtomicMap => {
                extensions.insert("x-kubernetes-map-type".into(), "atomic".into());
            }
        }
    }
    if retain_keys {
        strategy.push("retainKeys");
    }
    if !strategy.is_empty() {
        extensions.insert("x-kubernetes-patch-strategy".into(), strategy.join(",").into());
    }
    extensions
}

/// Adds [`openapi_extensions`] to the properties of schema definitions
/// named like upstream (`io.k8s.api.core.v1.PodSpec`), and
/// `x-kubernetes-map-type: atomic` to the [`ATOMIC_TYPES`]: what OpenAPI
/// documents need for clients (kubectl's client-side apply) to compute
/// strategic merge patches.
pub fn annotate_definitions(definitions: &mut serde_json::Map<String, serde_json::Value>) {
    let fields = FIELD_STRATEGIES.iter().map(|e| (e.type_name, e.field)).chain(RETAIN_KEYS_FIELDS.iter().copied());
    for (type_name, field) in fields {
        if let Some(property) = definitions
            .get_mut(type_name)
            .and_then(|d| d.get_mut("properties"))
            .and_then(|p| p.get_mut(field))
            .and_then(serde_json::Value::as_object_mut)
        {
            property.extend(openapi_extensions(type_name, field));
        }
    }
    for type_name in ATOMIC_TYPES {
        if let Some(definition) = definitions.get_mut(*type_name).and_then(serde_json::Value::as_object_mut) {
            definition.insert("x-kubernetes-map-type".into(), "atomic".into());
        }
    }
}

/// The value a list-map key takes when an item leaves it out (upstream
/// defaults `protocol` to `TCP` before keys are compared).
pub fn key_default(key: &str) -> Option<&'static str> {
    match key {
        "protocol" => Some("TCP"),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::schemars::SchemaGenerator;
    use serde_json::json;

    #[test]
    fn openapi_extensions_like_upstream() {
        assert_eq!(
            serde_json::Value::Object(openapi_extensions("io.k8s.api.core.v1.PodSpec", "volumes")),
            json!({"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"],
                   "x-kubernetes-patch-merge-key": "name", "x-kubernetes-patch-strategy": "merge,retainKeys"})
        );
        assert_eq!(
            serde_json::Value::Object(openapi_extensions("io.k8s.api.core.v1.Container", "ports")),
            json!({"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["containerPort", "protocol"],
                   "x-kubernetes-patch-merge-key": "containerPort", "x-kubernetes-patch-strategy": "merge"})
        );
        assert_eq!(
            serde_json::Value::Object(openapi_extensions(
                "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta",
                "finalizers"
            )),
            json!({"x-kubernetes-list-type": "set", "x-kubernetes-patch-strategy": "merge"})
        );
        assert!(openapi_extensions("io.k8s.api.core.v1.PodSpec", "tolerations").is_empty());

        let mut generator = SchemaGenerator::default();
        generator.subschema_for::<k8s_openapi::api::apps::v1::Deployment>();
        let mut definitions = generator.definitions().clone();
        annotate_definitions(&mut definitions);
        let containers = &definitions["io.k8s.api.core.v1.PodSpec"]["properties"]["containers"];
        assert_eq!(containers["x-kubernetes-patch-merge-key"], "name");
        assert_eq!(containers["type"], "array");
        let strategy = &definitions["io.k8s.api.apps.v1.DeploymentSpec"]["properties"]["strategy"];
        assert_eq!(strategy["x-kubernetes-patch-strategy"], "retainKeys");
        assert!(strategy.get("$ref").is_some());
        assert_eq!(
            definitions["io.k8s.apimachinery.pkg.apis.meta.v1.LabelSelector"]["x-kubernetes-map-type"],
            "atomic"
        );
    }
}
