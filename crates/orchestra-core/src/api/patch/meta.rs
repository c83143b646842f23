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

const fn e(
    type_name: &'static str,
    field: &'static str,
    strategy: Strategy,
    strategic_merge: bool,
) -> FieldStrategy {
    FieldStrategy {
        type_name,
        field,
        strategy,
        strategic_merge,
    }
}

/// Every non-default list or map field of the built-in kinds.
pub const FIELD_STRATEGIES: &[FieldStrategy] = &[
    e(
        "io.k8s.api.admissionregistration.v1.MutatingWebhook",
        "matchConditions",
        Strategy::ListMap(&["name"]),
        true,
    ),
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
    e(
        "io.k8s.api.admissionregistration.v1.ValidatingWebhook",
        "matchConditions",
        Strategy::ListMap(&["name"]),
        true,
    ),
    e(
        "io.k8s.api.admissionregistration.v1.ValidatingWebhookConfiguration",
        "webhooks",
        Strategy::ListMap(&["name"]),
        true,
    ),
    e(
        "io.k8s.api.apps.v1.DaemonSetStatus",
        "conditions",
        Strategy::ListMap(&["type"]),
        true,
    ),
    e(
        "io.k8s.api.apps.v1.DeploymentStatus",
        "conditions",
        Strategy::ListMap(&["type"]),
        true,
    ),
    e(
        "io.k8s.api.apps.v1.ReplicaSetStatus",
        "conditions",
        Strategy::ListMap(&["type"]),
        true,
    ),
    e(
        "io.k8s.api.apps.v1.StatefulSetStatus",
        "conditions",
        Strategy::ListMap(&["type"]),
        true,
    ),
    e(
        "io.k8s.api.autoscaling.v2.HorizontalPodAutoscalerStatus",
        "conditions",
        Strategy::ListMap(&["type"]),
        true,
    ),
    e(
        "io.k8s.api.batch.v1.JobStatus",
        "conditions",
        Strategy::ListMap(&["type"]),
        true,
    ),
    e(
        "io.k8s.api.batch.v1.PodFailurePolicyOnExitCodesRequirement",
        "values",
        Strategy::ListSet,
        false,
    ),
    e(
        "io.k8s.api.batch.v1.UncountedTerminatedPods",
        "failed",
        Strategy::ListSet,
        false,
    ),
    e(
        "io.k8s.api.batch.v1.UncountedTerminatedPods",
        "succeeded",
        Strategy::ListSet,
        false,
    ),
    e(
        "io.k8s.api.certificates.v1.CertificateSigningRequestStatus",
        "conditions",
        Strategy::ListMap(&["type"]),
        true,
    ),
    e(
        "io.k8s.api.core.v1.ComponentStatus",
        "conditions",
        Strategy::ListMap(&["type"]),
        true,
    ),
    e(
        "io.k8s.api.core.v1.Container",
        "env",
        Strategy::ListMap(&["name"]),
        true,
    ),
    e(
        "io.k8s.api.core.v1.Container",
        "ports",
        Strategy::ListMap(&["containerPort", "protocol"]),
        true,
    ),
    e(
        "io.k8s.api.core.v1.Container",
        "volumeDevices",
        Strategy::ListMap(&["devicePath"]),
        true,
    ),
    e(
        "io.k8s.api.core.v1.Container",
        "volumeMounts",
        Strategy::ListMap(&["mountPath"]),
        true,
    ),
    e(
        "io.k8s.api.core.v1.ContainerStatus",
        "allocatedResourcesStatus",
        Strategy::ListMap(&["name"]),
        false,
    ),
    e(
        "io.k8s.api.core.v1.ContainerStatus",
        "volumeMounts",
        Strategy::ListMap(&["mountPath"]),
        true,
    ),
    e(
        "io.k8s.api.core.v1.EphemeralContainer",
        "env",
        Strategy::ListMap(&["name"]),
        true,
    ),
    e(
        "io.k8s.api.core.v1.EphemeralContainer",
        "ports",
        Strategy::ListMap(&["containerPort", "protocol"]),
        true,
    ),
    e(
        "io.k8s.api.core.v1.EphemeralContainer",
        "volumeDevices",
        Strategy::ListMap(&["devicePath"]),
        true,
    ),
    e(
        "io.k8s.api.core.v1.EphemeralContainer",
        "volumeMounts",
        Strategy::ListMap(&["mountPath"]),
        true,
    ),
    e(
        "io.k8s.api.core.v1.NamespaceStatus",
        "conditions",
        Strategy::ListMap(&["type"]),
        true,
    ),
    e(
        "io.k8s.api.core.v1.NodeSpec",
        "podCIDRs",
        Strategy::ListSet,
        true,
    ),
    e(
        "io.k8s.api.core.v1.NodeStatus",
        "addresses",
        Strategy::ListMap(&["type"]),
        true,
    ),
    e(
        "io.k8s.api.core.v1.NodeStatus",
        "conditions",
        Strategy::ListMap(&["type"]),
        true,
    ),
    e(
        "io.k8s.api.core.v1.PersistentVolumeClaimStatus",
        "conditions",
        Strategy::ListMap(&["type"]),
        true,
    ),
    e(
        "io.k8s.api.core.v1.PodSpec",
        "containers",
        Strategy::ListMap(&["name"]),
        true,
    ),
    e(
        "io.k8s.api.core.v1.PodSpec",
        "ephemeralContainers",
        Strategy::ListMap(&["name"]),
        true,
    ),
    e(
        "io.k8s.api.core.v1.PodSpec",
        "hostAliases",
        Strategy::ListMap(&["ip"]),
        true,
    ),
    e(
        "io.k8s.api.core.v1.PodSpec",
        "imagePullSecrets",
        Strategy::ListMap(&["name"]),
        true,
    ),
    e(
        "io.k8s.api.core.v1.PodSpec",
        "initContainers",
        Strategy::ListMap(&["name"]),
        true,
    ),
    e(
        "io.k8s.api.core.v1.PodSpec",
        "nodeSelector",
        Strategy::AtomicMap,
        false,
    ),
    e(
        "io.k8s.api.core.v1.PodSpec",
        "resourceClaims",
        Strategy::ListMap(&["name"]),
        true,
    ),
    e(
        "io.k8s.api.core.v1.PodSpec",
        "schedulingGates",
        Strategy::ListMap(&["name"]),
        true,
    ),
    e(
        "io.k8s.api.core.v1.PodSpec",
        "topologySpreadConstraints",
        Strategy::ListMap(&["topologyKey", "whenUnsatisfiable"]),
        true,
    ),
    e(
        "io.k8s.api.core.v1.PodSpec",
        "volumes",
        Strategy::ListMap(&["name"]),
        true,
    ),
    e(
        "io.k8s.api.core.v1.PodStatus",
        "conditions",
        Strategy::ListMap(&["type"]),
        true,
    ),
    e(
        "io.k8s.api.core.v1.PodStatus",
        "hostIPs",
        Strategy::ListMap(&["ip"]),
        true,
    ),
    e(
        "io.k8s.api.core.v1.PodStatus",
        "podIPs",
        Strategy::ListMap(&["ip"]),
        true,
    ),
    e(
        "io.k8s.api.core.v1.PodStatus",
        "resourceClaimStatuses",
        Strategy::ListMap(&["name"]),
        true,
    ),
    e(
        "io.k8s.api.core.v1.ReplicationControllerSpec",
        "selector",
        Strategy::AtomicMap,
        false,
    ),
    e(
        "io.k8s.api.core.v1.ReplicationControllerStatus",
        "conditions",
        Strategy::ListMap(&["type"]),
        true,
    ),
    e(
        "io.k8s.api.core.v1.ResourceRequirements",
        "claims",
        Strategy::ListMap(&["name"]),
        false,
    ),
    e(
        "io.k8s.api.core.v1.ResourceStatus",
        "resources",
        Strategy::ListMap(&["resourceID"]),
        false,
    ),
    e(
        "io.k8s.api.core.v1.ServiceAccount",
        "secrets",
        Strategy::ListMap(&["name"]),
        true,
    ),
    e(
        "io.k8s.api.core.v1.ServiceSpec",
        "ports",
        Strategy::ListMap(&["port", "protocol"]),
        true,
    ),
    e(
        "io.k8s.api.core.v1.ServiceSpec",
        "selector",
        Strategy::AtomicMap,
        false,
    ),
    e(
        "io.k8s.api.core.v1.ServiceStatus",
        "conditions",
        Strategy::ListMap(&["type"]),
        true,
    ),
    e(
        "io.k8s.api.discovery.v1.Endpoint",
        "addresses",
        Strategy::ListSet,
        false,
    ),
    e(
        "io.k8s.api.flowcontrol.v1.FlowSchemaStatus",
        "conditions",
        Strategy::ListMap(&["type"]),
        true,
    ),
    e(
        "io.k8s.api.flowcontrol.v1.NonResourcePolicyRule",
        "nonResourceURLs",
        Strategy::ListSet,
        false,
    ),
    e(
        "io.k8s.api.flowcontrol.v1.NonResourcePolicyRule",
        "verbs",
        Strategy::ListSet,
        false,
    ),
    e(
        "io.k8s.api.flowcontrol.v1.PriorityLevelConfigurationStatus",
        "conditions",
        Strategy::ListMap(&["type"]),
        true,
    ),
    e(
        "io.k8s.api.flowcontrol.v1.ResourcePolicyRule",
        "apiGroups",
        Strategy::ListSet,
        false,
    ),
    e(
        "io.k8s.api.flowcontrol.v1.ResourcePolicyRule",
        "namespaces",
        Strategy::ListSet,
        false,
    ),
    e(
        "io.k8s.api.flowcontrol.v1.ResourcePolicyRule",
        "resources",
        Strategy::ListSet,
        false,
    ),
    e(
        "io.k8s.api.flowcontrol.v1.ResourcePolicyRule",
        "verbs",
        Strategy::ListSet,
        false,
    ),
    e(
        "io.k8s.api.networking.v1.ServiceCIDRStatus",
        "conditions",
        Strategy::ListMap(&["type"]),
        true,
    ),
    e(
        "io.k8s.api.node.v1.Scheduling",
        "nodeSelector",
        Strategy::AtomicMap,
        false,
    ),
    e(
        "io.k8s.api.policy.v1.PodDisruptionBudgetStatus",
        "conditions",
        Strategy::ListMap(&["type"]),
        true,
    ),
    e(
        "io.k8s.api.storage.v1.CSIDriverSpec",
        "volumeLifecycleModes",
        Strategy::ListSet,
        false,
    ),
    e(
        "io.k8s.api.storage.v1.CSINodeSpec",
        "drivers",
        Strategy::ListMap(&["name"]),
        true,
    ),
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
    e(
        "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta",
        "finalizers",
        Strategy::ListSet,
        true,
    ),
    e(
        "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta",
        "ownerReferences",
        Strategy::ListMap(&["uid"]),
        true,
    ),
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
    FIELD_STRATEGIES
        .iter()
        .find(|s| s.field == field && s.type_name == type_name)
}

/// True if the struct type is owned and replaced whole by server-side apply.
pub fn is_atomic_type(type_name: &str) -> bool {
    ATOMIC_TYPES.contains(&type_name)
}

/// The value a list-map key takes when an item leaves it out (upstream
/// defaults `protocol` to `TCP` before keys are compared).
pub fn key_default(key: &str) -> Option<&'static str> {
    match key {
        "protocol" => Some("TCP"),
        _ => None,
    }
}
