//! Resource quota: the arithmetic of resource lists and the evaluators that
//! measure what an object uses, as upstream's `pkg/quota/v1` measures it.
//! The ResourceQuota admission plugin charges a quota with them before an
//! object is written; the quota controller recomputes `status.used` with
//! them from the objects of a namespace.
//!
//! | evaluator | charges |
//! |---|---|
//! | [`Evaluator::Pods`] | `pods`, `count/pods`, `cpu`/`requests.cpu`, `memory`/`requests.memory`, `limits.cpu`, `limits.memory`, `ephemeral-storage`/`requests.ephemeral-storage`, `limits.ephemeral-storage`, `hugepages-*`/`requests.hugepages-*`, `requests.<extended resource>` |
//! | [`Evaluator::Services`] | `services`, `count/services`, `services.loadbalancers`, `services.nodeports` |
//! | [`Evaluator::PersistentVolumeClaims`] | `persistentvolumeclaims`, `count/persistentvolumeclaims`, `requests.storage`, `<class>.storageclass.storage.k8s.io/requests.storage` and `/persistentvolumeclaims` |
//! | [`Evaluator::Objects`] | `count/<resource>[.<group>]` of every other kind, and the legacy `configmaps`, `secrets`, `resourcequotas`, `replicationcontrollers` |
//!
//! ```
//! use k8s_openapi::api::core::v1::Pod;
//! use k8s_openapi::jiff::Timestamp;
//! use orchestra_core::api::quota::{Counted, Evaluator, pretty};
//!
//! let pod: Pod = serde_json::from_value(serde_json::json!({
//!     "metadata": {"name": "web"},
//!     "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "250m"}, "limits": {"cpu": "1"}}}]},
//! }))
//! .unwrap();
//! let evaluator = Evaluator::of("", "pods").unwrap();
//! let usage = evaluator.usage(&Counted::Pod(&pod), Timestamp::now());
//! assert_eq!(pretty(&usage), "count/pods=1,cpu=250m,limits.cpu=1,pods=1,requests.cpu=250m");
//! ```

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use k8s_openapi::api::core::v1::{
    Container, PersistentVolumeClaim, Pod, PodAffinityTerm, ResourceQuota, ScopedResourceSelectorRequirement, Service,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::jiff::Timestamp;

use super::quantity::{ParsedQuantity, QuantityFormat};

/// An amount of a resource: a quantity and the format it is written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Amount {
    /// The amount.
    pub quantity: ParsedQuantity,
    /// How it is written ([`Display`](fmt::Display) writes it canonically).
    pub format: QuantityFormat,
}

impl Amount {
    /// `units` whole units, e.g. a count of objects.
    pub fn units(units: i64) -> Amount {
        Amount { quantity: ParsedQuantity::from_units(units), format: QuantityFormat::DecimalSI }
    }

    /// A quantity of an object; `None` if it does not parse.
    pub fn of(quantity: &Quantity) -> Option<Amount> {
        let parsed = ParsedQuantity::parse(&quantity.0).ok()?;
        Some(Amount { quantity: parsed, format: QuantityFormat::of(&quantity.0) })
    }

    /// The amount as an object's quantity, written canonically.
    pub fn to_quantity(self) -> Quantity {
        Quantity(self.to_string())
    }

    /// The sum, written in this amount's format, or in the other's if this
    /// one is zero (as upstream's `Add`).
    fn plus(self, other: Amount) -> Amount {
        let format = if self.quantity.is_zero() { other.format } else { self.format };
        Amount { quantity: self.quantity + other.quantity, format }
    }
}

impl fmt::Display for Amount {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.quantity.canonical(self.format))
    }
}

/// Amounts by resource name (upstream's `ResourceList`).
pub type ResourceList = BTreeMap<String, Amount>;

/// The resource list of an object's quantities; quantities that do not
/// parse are left out (the API server refuses them in objects it stores).
pub fn resource_list(quantities: Option<&BTreeMap<String, Quantity>>) -> ResourceList {
    quantities.into_iter().flatten().filter_map(|(name, q)| Some((name.clone(), Amount::of(q)?))).collect()
}

/// A resource list as an object's quantities.
pub fn to_quantities(list: &ResourceList) -> BTreeMap<String, Quantity> {
    list.iter().map(|(name, amount)| (name.clone(), amount.to_quantity())).collect()
}

/// `a + b`, resource by resource; a resource of one only is copied.
pub fn add(a: &ResourceList, b: &ResourceList) -> ResourceList {
    let mut sum = a.clone();
    for (name, amount) in b {
        sum.entry(name.clone()).and_modify(|have| *have = have.plus(*amount)).or_insert(*amount);
    }
    sum
}

/// `a - b` for the resources of `a`, never below zero (upstream's
/// `SubtractWithNonNegativeResult`).
pub fn subtract_non_negative(a: &ResourceList, b: &ResourceList) -> ResourceList {
    a.iter()
        .map(|(name, amount)| {
            let mut left = amount.quantity;
            if let Some(taken) = b.get(name) {
                left = left - taken.quantity;
            }
            if left.is_negative() {
                left = ParsedQuantity::default();
            }
            (name.clone(), Amount { quantity: left, format: amount.format })
        })
        .collect()
}

/// The entries of `list` named in `names`.
pub fn mask<'n>(list: &ResourceList, names: impl IntoIterator<Item = &'n str>) -> ResourceList {
    names.into_iter().filter_map(|name| Some((name.to_owned(), *list.get(name)?))).collect()
}

/// `list` without its zero amounts.
pub fn remove_zeros(list: ResourceList) -> ResourceList {
    list.into_iter().filter(|(_, amount)| !amount.quantity.is_zero()).collect()
}

/// The resources of `usage` above their amount in `hard`, sorted (upstream's
/// `LessThanOrEqual`, whose result is allowed when this is empty). A
/// resource `hard` does not name is not limited.
pub fn exceeded(usage: &ResourceList, hard: &ResourceList) -> Vec<String> {
    usage
        .iter()
        .filter(|(name, amount)| hard.get(*name).is_some_and(|limit| amount.quantity > limit.quantity))
        .map(|(name, _)| name.clone())
        .collect()
}

/// `a=1,b=2Gi`: a resource list as upstream's quota errors print one,
/// sorted by name.
pub fn pretty(list: &ResourceList) -> String {
    list.iter().map(|(name, amount)| format!("{name}={amount}")).collect::<Vec<_>>().join(",")
}

/// A scope selector of a quota that cannot be evaluated.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum QuotaError {
    /// A `scopeSelector` requirement that is no label requirement.
    #[error("failed to parse and convert selector: {0}")]
    Selector(String),
}

/// The object an [`Evaluator`] measures.
#[derive(Debug, Clone, Copy)]
pub enum Counted<'a> {
    /// A pod.
    Pod(&'a Pod),
    /// A service.
    Service(&'a Service),
    /// A persistent volume claim.
    Claim(&'a PersistentVolumeClaim),
    /// An object only counted.
    Other,
}

/// Measures the quota usage of one resource's objects (upstream's
/// `quota.Evaluator`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Evaluator {
    /// Pods: compute resources of pods that are not terminal, and counts.
    Pods,
    /// Services: counts, load balancers and node ports.
    Services,
    /// PersistentVolumeClaims: counts and storage, also by storage class.
    PersistentVolumeClaims,
    /// Any other resource: object counts, under these names.
    Objects {
        /// `count/<resource>[.<group>]`, and the legacy name if there is one.
        names: Vec<String>,
    },
}

/// Resources quota never counts: virtual resources that are not stored, and
/// events (upstream's default ignored resources).
pub const IGNORED: [(&str, &str); 10] = [
    ("", "bindings"),
    ("", "componentstatuses"),
    ("authentication.k8s.io", "tokenreviews"),
    ("authentication.k8s.io", "selfsubjectreviews"),
    ("authorization.k8s.io", "subjectaccessreviews"),
    ("authorization.k8s.io", "selfsubjectaccessreviews"),
    ("authorization.k8s.io", "localsubjectaccessreviews"),
    ("authorization.k8s.io", "selfsubjectrulesreviews"),
    ("", "events"),
    ("events.k8s.io", "events"),
];

/// The core resources counted under a name of their own as well.
const LEGACY_COUNTS: [&str; 4] = ["configmaps", "resourcequotas", "replicationcontrollers", "secrets"];

const POD_RESOURCES: [&str; 11] = [
    "count/pods",
    "cpu",
    "memory",
    "ephemeral-storage",
    "requests.cpu",
    "requests.memory",
    "requests.ephemeral-storage",
    "limits.cpu",
    "limits.memory",
    "limits.ephemeral-storage",
    "pods",
];

/// The pod resources a quota cannot track unless every container states
/// them (upstream's validation set, kept for compatibility).
const MUST_SPECIFY: [&str; 6] = ["cpu", "memory", "requests.cpu", "requests.memory", "limits.cpu", "limits.memory"];

const SERVICE_RESOURCES: [&str; 4] = ["count/services", "services", "services.loadbalancers", "services.nodeports"];

const CLAIM_RESOURCES: [&str; 3] = ["count/persistentvolumeclaims", "persistentvolumeclaims", "requests.storage"];

/// What follows the class name in a quota resource by storage class.
const STORAGE_CLASS_SUFFIX: &str = ".storageclass.storage.k8s.io/";

/// The object-count name of a resource: `count/<resource>[.<group>]`.
pub fn count_name(group: &str, plural: &str) -> String {
    if group.is_empty() { format!("count/{plural}") } else { format!("count/{plural}.{group}") }
}

/// The resource (group, plural) whose objects use the quota resource
/// `name`, e.g. `("", "pods")` for `limits.cpu`, `("apps", "deployments")`
/// for `count/deployments.apps`; `None` for a name nothing uses.
pub fn counted_resource(name: &str) -> Option<(String, String)> {
    let core = |plural: &str| Some((String::new(), plural.to_owned()));
    if Evaluator::Pods.charges(name) {
        return core("pods");
    }
    if Evaluator::Services.charges(name) {
        return core("services");
    }
    if Evaluator::PersistentVolumeClaims.charges(name) {
        return core("persistentvolumeclaims");
    }
    if LEGACY_COUNTS.contains(&name) {
        return core(name);
    }
    let counted = name.strip_prefix("count/")?;
    match counted.split_once('.') {
        Some((plural, group)) => Some((group.to_owned(), plural.to_owned())),
        None => core(counted),
    }
}

/// Whether a resource name is native to Kubernetes: unqualified, or
/// qualified by a `kubernetes.io` domain.
fn is_native(name: &str) -> bool {
    !name.contains('/') || name.contains("kubernetes.io/")
}

impl Evaluator {
    /// The evaluator of resource `group`/`plural`; `None` for the
    /// [ignored](IGNORED) resources.
    pub fn of(group: &str, plural: &str) -> Option<Evaluator> {
        if IGNORED.contains(&(group, plural)) {
            return None;
        }
        Some(match (group, plural) {
            ("", "pods") => Evaluator::Pods,
            ("", "services") => Evaluator::Services,
            ("", "persistentvolumeclaims") => Evaluator::PersistentVolumeClaims,
            _ => {
                let mut names = vec![count_name(group, plural)];
                if group.is_empty() && LEGACY_COUNTS.contains(&plural) {
                    names.push(plural.to_owned());
                }
                Evaluator::Objects { names }
            }
        })
    }

    /// Whether this evaluator charges the quota resource `name`.
    pub fn charges(&self, name: &str) -> bool {
        match self {
            Evaluator::Pods => {
                POD_RESOURCES.contains(&name)
                    || name.starts_with("hugepages-")
                    || name.starts_with("requests.hugepages-")
                    || (name.starts_with("requests.") && !is_native(name))
            }
            Evaluator::Services => SERVICE_RESOURCES.contains(&name),
            Evaluator::PersistentVolumeClaims => {
                CLAIM_RESOURCES.contains(&name)
                    || ["persistentvolumeclaims", "requests.storage"]
                        .iter()
                        .any(|r| name.strip_suffix(r).is_some_and(|rest| rest.ends_with(STORAGE_CLASS_SUFFIX)))
            }
            Evaluator::Objects { names } => names.iter().any(|n| n == name),
        }
    }

    /// The names of `names` this evaluator charges (upstream's
    /// `MatchingResources`).
    pub fn matching_resources<'n>(&self, names: impl IntoIterator<Item = &'n String>) -> Vec<&'n str> {
        names.into_iter().map(String::as_str).filter(|name| self.charges(name)).collect()
    }

    /// Whether `object` is in the scope `requirement` names. Only pods
    /// have scopes: every other object is in none, so that a quota with
    /// scopes never charges it.
    pub fn matches_scope(
        &self,
        requirement: &ScopedResourceSelectorRequirement,
        object: &Counted<'_>,
    ) -> Result<bool, QuotaError> {
        let (Evaluator::Pods, Counted::Pod(pod)) = (self, object) else { return Ok(false) };
        let spec = pod.spec.as_ref();
        Ok(match requirement.scope_name.as_str() {
            "Terminating" => is_terminating(pod),
            "NotTerminating" => !is_terminating(pod),
            "BestEffort" => is_best_effort(pod),
            "NotBestEffort" => !is_best_effort(pod),
            "PriorityClass" => {
                let class = spec.and_then(|s| s.priority_class_name.as_deref()).filter(|c| !c.is_empty());
                priority_class_selects(requirement, class)?
            }
            "CrossNamespacePodAffinity" => uses_cross_namespace_affinity(pod),
            _ => false,
        })
    }

    /// Whether `quota` applies to `object`: its `status.hard` names a
    /// resource this evaluator charges and the object is in each of its
    /// scopes (upstream's `Matches`).
    pub fn matches(&self, quota: &ResourceQuota, object: &Counted<'_>) -> Result<bool, QuotaError> {
        let hard = quota.status.as_ref().and_then(|s| s.hard.as_ref());
        if self.matching_resources(hard.into_iter().flat_map(BTreeMap::keys)).is_empty() {
            return Ok(false);
        }
        for requirement in scope_requirements(quota) {
            if !self.matches_scope(&requirement, object)? {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Checks that `object` states what a quota tracking `required`
    /// needs: a pod whose quota tracks CPU or memory must state it for
    /// every container. The error is upstream's (`must specify limits.cpu
    /// for: app; requests.memory for: app,init`).
    pub fn constraints(&self, required: &[&str], object: &Counted<'_>) -> Result<(), String> {
        let (Evaluator::Pods, Counted::Pod(pod)) = (self, object) else { return Ok(()) };
        let required: BTreeSet<&str> = required.iter().copied().filter(|r| MUST_SPECIFY.contains(r)).collect();
        let mut missing: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
        let spec = pod.spec.as_ref();
        let containers = spec.iter().flat_map(|s| s.containers.iter().chain(s.init_containers.iter().flatten()));
        for container in containers {
            let (requests, limits) = container_resources(container);
            let stated = compute_usage(&requests, &limits);
            for resource in required.iter().filter(|r| !stated.contains_key(**r)) {
                missing.entry(resource).or_default().insert(&container.name);
            }
        }
        if missing.is_empty() {
            return Ok(());
        }
        let parts: Vec<_> = missing
            .iter()
            .map(|(resource, containers)| {
                format!("{resource} for: {}", containers.iter().copied().collect::<Vec<_>>().join(","))
            })
            .collect();
        Err(format!("must specify {}", parts.join("; ")))
    }

    /// What `object` uses of the resources this evaluator charges, at time
    /// `now` (a pod past its deletion grace period no longer uses compute
    /// resources).
    pub fn usage(&self, object: &Counted<'_>, now: Timestamp) -> ResourceList {
        let one = || Amount::units(1);
        match (self, object) {
            (Evaluator::Pods, Counted::Pod(pod)) => pod_usage(pod, now),
            (Evaluator::Services, Counted::Service(service)) => service_usage(service),
            (Evaluator::PersistentVolumeClaims, Counted::Claim(claim)) => claim_usage(claim),
            (Evaluator::Objects { names }, _) => names.iter().map(|name| (name.clone(), one())).collect(),
            // An object of another kind than the evaluator's is counted only.
            (Evaluator::Pods, _) => [("count/pods".to_owned(), one())].into(),
            (Evaluator::Services, _) => [("count/services".to_owned(), one())].into(),
            (Evaluator::PersistentVolumeClaims, _) => [("count/persistentvolumeclaims".to_owned(), one())].into(),
        }
    }

    /// Whether an update from `old` to `new` may change what the object
    /// uses, so that admission must charge the difference (upstream's
    /// `Handles` for updates): a pod's scope `Terminating` changing, any
    /// service or claim update (a type or a size changes); never for kinds
    /// only counted.
    pub fn handles_update(&self, old: &Counted<'_>, new: &Counted<'_>) -> bool {
        match (self, old, new) {
            (Evaluator::Pods, Counted::Pod(old), Counted::Pod(new)) => is_terminating(old) != is_terminating(new),
            (Evaluator::Services | Evaluator::PersistentVolumeClaims, _, _) => true,
            _ => false,
        }
    }

    /// What the objects `objects` of a namespace use of the resources of
    /// `quota`'s `spec.hard` this evaluator charges, counting those in
    /// every scope of the quota; each such resource is present, zero if
    /// nothing uses it (upstream's `UsageStats`).
    pub fn usage_of<'a>(
        &self,
        quota: &ResourceQuota,
        objects: impl IntoIterator<Item = Counted<'a>>,
        now: Timestamp,
    ) -> Result<ResourceList, QuotaError> {
        let hard = quota.spec.as_ref().and_then(|s| s.hard.as_ref());
        let charged = self.matching_resources(hard.into_iter().flat_map(BTreeMap::keys));
        let mut used: ResourceList = charged.iter().map(|name| ((*name).to_owned(), Amount::units(0))).collect();
        if charged.is_empty() {
            return Ok(used);
        }
        let requirements = scope_requirements(quota);
        for object in objects {
            let mut in_scope = true;
            for requirement in &requirements {
                in_scope &= self.matches_scope(requirement, &object)?;
            }
            if in_scope {
                used = add(&used, &mask(&self.usage(&object, now), charged.iter().copied()));
            }
        }
        Ok(used)
    }
}

/// The scope requirements of a quota: each of `spec.scopes` (as `Exists`),
/// then `spec.scopeSelector`'s.
pub fn scope_requirements(quota: &ResourceQuota) -> Vec<ScopedResourceSelectorRequirement> {
    let Some(spec) = quota.spec.as_ref() else { return Vec::new() };
    let scopes = spec.scopes.iter().flatten().map(|scope| ScopedResourceSelectorRequirement {
        scope_name: scope.clone(),
        operator: "Exists".into(),
        values: None,
    });
    let selected = spec.scope_selector.iter().flat_map(|s| s.match_expressions.iter().flatten().cloned());
    scopes.chain(selected).collect()
}

/// Whether a pod of priority class `class` (`None`: none) is selected by a
/// `PriorityClass` requirement, read as a label requirement on the key
/// `PriorityClass`.
fn priority_class_selects(
    requirement: &ScopedResourceSelectorRequirement,
    class: Option<&str>,
) -> Result<bool, QuotaError> {
    let values = requirement.values.as_deref().unwrap_or_default();
    let listed = |c: &str| values.iter().any(|v| v == c);
    let invalid = |why: &str| Err(QuotaError::Selector(format!("{why} (operator {:?})", requirement.operator)));
    match requirement.operator.as_str() {
        "In" | "NotIn" if values.is_empty() => invalid("values set can't be empty"),
        "Exists" | "DoesNotExist" if !values.is_empty() => invalid("values set must be empty"),
        "In" => Ok(class.is_some_and(listed)),
        "NotIn" => Ok(class.is_none_or(|c| !listed(c))),
        "Exists" => Ok(class.is_some()),
        "DoesNotExist" => Ok(class.is_none()),
        _ => invalid("not a valid scope selector operator"),
    }
}

/// A pod with an active deadline: in the `Terminating` scope.
fn is_terminating(pod: &Pod) -> bool {
    pod.spec.as_ref().and_then(|s| s.active_deadline_seconds).is_some_and(|d| d >= 0)
}

/// A pod of QoS class BestEffort: no container states a CPU or memory
/// request or limit (the QoS class in its status decides when present).
fn is_best_effort(pod: &Pod) -> bool {
    if let Some(class) = pod.status.as_ref().and_then(|s| s.qos_class.as_deref()).filter(|c| !c.is_empty()) {
        return class == "BestEffort";
    }
    let states = |list: Option<&BTreeMap<String, Quantity>>| {
        list.into_iter().flatten().any(|(name, q)| {
            (name == "cpu" || name == "memory") && Amount::of(q).is_some_and(|a| a.quantity > ParsedQuantity::default())
        })
    };
    let spec = pod.spec.as_ref();
    !spec.iter().flat_map(|s| s.containers.iter().chain(s.init_containers.iter().flatten())).any(|c| {
        let resources = c.resources.as_ref();
        states(resources.and_then(|r| r.requests.as_ref())) || states(resources.and_then(|r| r.limits.as_ref()))
    })
}

fn uses_cross_namespace_affinity(pod: &Pod) -> bool {
    let cross = |term: &PodAffinityTerm| {
        term.namespaces.as_ref().is_some_and(|n| !n.is_empty()) || term.namespace_selector.is_some()
    };
    let Some(affinity) = pod.spec.as_ref().and_then(|s| s.affinity.as_ref()) else { return false };
    let affinity_terms = affinity.pod_affinity.iter().flat_map(|a| {
        let required = a.required_during_scheduling_ignored_during_execution.iter().flatten();
        let preferred = a.preferred_during_scheduling_ignored_during_execution.iter().flatten();
        required.chain(preferred.map(|w| &w.pod_affinity_term))
    });
    let anti_terms = affinity.pod_anti_affinity.iter().flat_map(|a| {
        let required = a.required_during_scheduling_ignored_during_execution.iter().flatten();
        let preferred = a.preferred_during_scheduling_ignored_during_execution.iter().flatten();
        required.chain(preferred.map(|w| &w.pod_affinity_term))
    });
    affinity_terms.chain(anti_terms).any(cross)
}

/// A container's requests and limits; a limit without a request also
/// stands for the request, as upstream's pod defaulting sets it.
fn container_resources(container: &Container) -> (ResourceList, ResourceList) {
    let resources = container.resources.as_ref();
    let limits = resource_list(resources.and_then(|r| r.limits.as_ref()));
    let mut requests = resource_list(resources.and_then(|r| r.requests.as_ref()));
    for (name, limit) in &limits {
        requests.entry(name.clone()).or_insert(*limit);
    }
    (requests, limits)
}

/// The quota resources of requests and limits (upstream's
/// `podComputeUsageHelper`): `pods` is one, `cpu` and `requests.cpu` the
/// CPU request, `limits.cpu` the CPU limit, and so on; hugepages and
/// extended resources are charged by request.
fn compute_usage(requests: &ResourceList, limits: &ResourceList) -> ResourceList {
    let mut usage: ResourceList = [("pods".to_owned(), Amount::units(1))].into();
    for resource in ["cpu", "memory", "ephemeral-storage"] {
        if let Some(request) = requests.get(resource) {
            usage.insert(resource.to_owned(), *request);
            usage.insert(format!("requests.{resource}"), *request);
        }
        if let Some(limit) = limits.get(resource) {
            usage.insert(format!("limits.{resource}"), *limit);
        }
    }
    for (resource, request) in requests {
        if resource.starts_with("hugepages-") {
            usage.insert(resource.clone(), *request);
            usage.insert(format!("requests.{resource}"), *request);
        } else if !is_native(resource) && !resource.starts_with("requests.") {
            usage.insert(format!("requests.{resource}"), *request);
        }
    }
    usage
}

/// The larger of each resource of `a` and `b`, into `a`.
fn keep_max(a: &mut ResourceList, b: &ResourceList) {
    for (name, amount) in b {
        match a.get_mut(name) {
            Some(have) if have.quantity >= amount.quantity => {}
            Some(have) => *have = *amount,
            None => {
                a.insert(name.clone(), *amount);
            }
        }
    }
}

/// A pod's effective requests or limits (upstream's `PodRequests` and
/// `PodLimits`): the sum over its containers and sidecars, or the largest
/// an init container needs while it runs (itself plus the sidecars started
/// before it) if that is larger, plus the pod's overhead (for limits, only
/// of the resources limited).
fn pod_resources(pod: &Pod, limits: bool) -> ResourceList {
    let Some(spec) = pod.spec.as_ref() else { return ResourceList::new() };
    let pick = |c: &Container| {
        let (requests, limited) = container_resources(c);
        if limits { limited } else { requests }
    };
    let mut total = ResourceList::new();
    for container in &spec.containers {
        total = add(&total, &pick(container));
    }
    let mut sidecars = ResourceList::new();
    let mut init_peak = ResourceList::new();
    for container in spec.init_containers.iter().flatten() {
        let own = pick(container);
        let running = if container.restart_policy.as_deref() == Some("Always") {
            total = add(&total, &own);
            sidecars = add(&sidecars, &own);
            sidecars.clone()
        } else {
            add(&own, &sidecars)
        };
        keep_max(&mut init_peak, &running);
    }
    keep_max(&mut total, &init_peak);
    let overhead = resource_list(spec.overhead.as_ref());
    if limits {
        for (name, amount) in total.iter_mut() {
            if let Some(extra) = overhead.get(name) {
                *amount = amount.plus(*extra);
            }
        }
        total
    } else {
        add(&total, &overhead)
    }
}

/// Whether a pod is charged for compute resources: not terminal, and not
/// past the grace period of its deletion (upstream's `QuotaV1Pod`).
pub fn pod_is_charged(pod: &Pod, now: Timestamp) -> bool {
    if matches!(pod.status.as_ref().and_then(|s| s.phase.as_deref()), Some("Failed" | "Succeeded")) {
        return false;
    }
    let deletion = pod.metadata.deletion_timestamp.as_ref();
    match (deletion, pod.metadata.deletion_grace_period_seconds) {
        (Some(at), Some(grace)) => now.as_second() <= at.0.as_second().saturating_add(grace),
        _ => true,
    }
}

fn pod_usage(pod: &Pod, now: Timestamp) -> ResourceList {
    let count: ResourceList = [("count/pods".to_owned(), Amount::units(1))].into();
    if !pod_is_charged(pod, now) {
        return count;
    }
    add(&count, &compute_usage(&pod_resources(pod, false), &pod_resources(pod, true)))
}

fn service_usage(service: &Service) -> ResourceList {
    let spec = service.spec.as_ref();
    let ports = spec.and_then(|s| s.ports.as_ref()).map_or(0, Vec::len) as i64;
    let (node_ports, load_balancers) = match spec.and_then(|s| s.type_.as_deref()) {
        Some("NodePort") => (ports, 0),
        // Without node port allocation only the ports that name one count.
        Some("LoadBalancer") if spec.and_then(|s| s.allocate_load_balancer_node_ports) == Some(false) => {
            let named = spec.and_then(|s| s.ports.as_ref()).into_iter().flatten();
            (named.filter(|p| p.node_port.is_some_and(|n| n != 0)).count() as i64, 1)
        }
        Some("LoadBalancer") => (ports, 1),
        _ => (0, 0),
    };
    [
        ("count/services".to_owned(), Amount::units(1)),
        ("services".to_owned(), Amount::units(1)),
        ("services.loadbalancers".to_owned(), Amount::units(load_balancers)),
        ("services.nodeports".to_owned(), Amount::units(node_ports)),
    ]
    .into()
}

/// A claim's storage class: the beta annotation, else `spec.storageClassName`.
fn claim_class(claim: &PersistentVolumeClaim) -> Option<&str> {
    let annotated = claim.metadata.annotations.as_ref().and_then(|a| a.get("volume.beta.kubernetes.io/storage-class"));
    annotated
        .map(String::as_str)
        .or_else(|| claim.spec.as_ref()?.storage_class_name.as_deref())
        .filter(|c| !c.is_empty())
}

fn claim_usage(claim: &PersistentVolumeClaim) -> ResourceList {
    let one = Amount::units(1);
    let mut usage: ResourceList =
        [("persistentvolumeclaims".to_owned(), one), ("count/persistentvolumeclaims".to_owned(), one)].into();
    let class = claim_class(claim);
    if let Some(class) = class {
        usage.insert(format!("{class}{STORAGE_CLASS_SUFFIX}persistentvolumeclaims"), one);
    }
    let requested = claim.spec.as_ref().and_then(|s| s.resources.as_ref()).and_then(|r| r.requests.as_ref());
    let Some(mut storage) = requested.and_then(|r| r.get("storage")).and_then(Amount::of) else {
        return usage;
    };
    // Storage is counted in whole bytes; a larger allocation (an expansion
    // in progress or failed) counts instead of the request.
    storage.quantity = ParsedQuantity::from_units(storage.quantity.value());
    let allocated = claim.status.as_ref().and_then(|s| s.allocated_resources.as_ref());
    if let Some(allocated) = allocated.and_then(|a| a.get("storage")).and_then(Amount::of)
        && allocated.quantity > storage.quantity
    {
        storage = Amount { quantity: ParsedQuantity::from_units(allocated.quantity.value()), ..allocated };
    }
    usage.insert("requests.storage".to_owned(), storage);
    if let Some(class) = class {
        usage.insert(format!("{class}{STORAGE_CLASS_SUFFIX}requests.storage"), storage);
    }
    usage
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    fn pod(spec: Value) -> Pod {
        serde_json::from_value(json!({"metadata": {"name": "p", "namespace": "ns"}, "spec": spec})).unwrap()
    }

    fn container(name: &str, requests: Value, limits: Value) -> Value {
        json!({"name": name, "resources": {"requests": requests, "limits": limits}})
    }

    fn list(pairs: &[(&str, &str)]) -> ResourceList {
        pairs.iter().map(|(n, q)| ((*n).to_owned(), Amount::of(&Quantity((*q).into())).unwrap())).collect()
    }

    fn now() -> Timestamp {
        Timestamp::from_second(1_000_000).unwrap()
    }

    #[test]
    fn pod_usage_table() {
        let cases: Vec<(&str, Pod, &str)> = vec![
            ("no resources", pod(json!({"containers": [{"name": "a"}]})), "count/pods=1,pods=1"),
            (
                "requests and limits",
                pod(
                    json!({"containers": [container("a", json!({"cpu": "100m", "memory": "1Gi"}), json!({"cpu": "1"}))]}),
                ),
                "count/pods=1,cpu=100m,limits.cpu=1,memory=1Gi,pods=1,requests.cpu=100m,requests.memory=1Gi",
            ),
            (
                "containers add up",
                pod(json!({"containers": [
                    container("a", json!({"cpu": "250m"}), json!({})),
                    container("b", json!({"cpu": "250m"}), json!({})),
                ]})),
                "count/pods=1,cpu=500m,pods=1,requests.cpu=500m",
            ),
            (
                "a limit alone is also the request",
                pod(json!({"containers": [container("a", json!({}), json!({"memory": "512Mi"}))]})),
                "count/pods=1,limits.memory=512Mi,memory=512Mi,pods=1,requests.memory=512Mi",
            ),
            (
                "an init container larger than the sum wins",
                pod(json!({
                    "initContainers": [container("init", json!({"cpu": "2"}), json!({}))],
                    "containers": [container("a", json!({"cpu": "500m"}), json!({})), container("b", json!({"cpu": "500m"}), json!({}))],
                })),
                "count/pods=1,cpu=2,pods=1,requests.cpu=2",
            ),
            (
                "a smaller init container does not count",
                pod(json!({
                    "initContainers": [container("init", json!({"cpu": "100m"}), json!({}))],
                    "containers": [container("a", json!({"cpu": "500m"}), json!({}))],
                })),
                "count/pods=1,cpu=500m,pods=1,requests.cpu=500m",
            ),
            (
                "sidecars add up and run beside later init containers",
                pod(json!({
                    "initContainers": [
                        {"name": "side", "restartPolicy": "Always", "resources": {"requests": {"cpu": "300m"}}},
                        container("init", json!({"cpu": "1"}), json!({})),
                    ],
                    "containers": [container("a", json!({"cpu": "500m"}), json!({}))],
                })),
                "count/pods=1,cpu=1300m,pods=1,requests.cpu=1300m",
            ),
            (
                "overhead adds to requests and to stated limits",
                pod(json!({
                    "overhead": {"cpu": "100m", "memory": "10Mi"},
                    "containers": [container("a", json!({"cpu": "1", "memory": "100Mi"}), json!({"cpu": "2"}))],
                })),
                "count/pods=1,cpu=1100m,limits.cpu=2100m,memory=110Mi,pods=1,requests.cpu=1100m,requests.memory=110Mi",
            ),
            (
                "extended resources and hugepages by request",
                pod(json!({"containers": [container(
                    "a",
                    json!({"example.com/gpu": "2", "hugepages-2Mi": "4Mi"}),
                    json!({"example.com/gpu": "2", "hugepages-2Mi": "4Mi"}),
                )]})),
                "count/pods=1,hugepages-2Mi=4Mi,pods=1,requests.example.com/gpu=2,requests.hugepages-2Mi=4Mi",
            ),
            (
                "ephemeral storage",
                pod(
                    json!({"containers": [container("a", json!({"ephemeral-storage": "1Gi"}), json!({"ephemeral-storage": "2Gi"}))]}),
                ),
                "count/pods=1,ephemeral-storage=1Gi,limits.ephemeral-storage=2Gi,pods=1,requests.ephemeral-storage=1Gi",
            ),
        ];
        for (name, pod, expected) in cases {
            assert_eq!(pretty(&Evaluator::Pods.usage(&Counted::Pod(&pod), now())), expected, "{name}");
        }
    }

    #[test]
    fn terminal_and_long_deleted_pods_only_count() {
        let base = || pod(json!({"containers": [container("a", json!({"cpu": "1"}), json!({}))]}));
        let mut succeeded = base();
        succeeded.status = Some(serde_json::from_value(json!({"phase": "Succeeded"})).unwrap());
        let mut failed = base();
        failed.status = Some(serde_json::from_value(json!({"phase": "Failed"})).unwrap());
        let deleted = |seconds_ago: i64, grace: i64| {
            let mut p = base();
            p.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                Timestamp::from_second(now().as_second() - seconds_ago).unwrap(),
            ));
            p.metadata.deletion_grace_period_seconds = Some(grace);
            p
        };
        let charged = "count/pods=1,cpu=1,pods=1,requests.cpu=1";
        let cases = [
            ("running", base(), charged),
            ("succeeded", succeeded, "count/pods=1"),
            ("failed", failed, "count/pods=1"),
            ("deleted within its grace period", deleted(10, 30), charged),
            ("deleted past its grace period", deleted(40, 30), "count/pods=1"),
        ];
        for (name, pod, expected) in cases {
            assert_eq!(pretty(&Evaluator::Pods.usage(&Counted::Pod(&pod), now())), expected, "{name}");
        }
    }

    #[test]
    fn service_and_claim_usage_table() {
        let service = |spec: Value| -> Service { serde_json::from_value(json!({"spec": spec})).unwrap() };
        let ports = json!([{"port": 80}, {"port": 443, "nodePort": 30443}]);
        let services = [
            (service(json!({"ports": ports})), "0", "0"),
            (service(json!({"type": "NodePort", "ports": ports})), "0", "2"),
            (service(json!({"type": "LoadBalancer", "ports": ports})), "1", "2"),
            (
                service(json!({"type": "LoadBalancer", "allocateLoadBalancerNodePorts": false, "ports": ports})),
                "1",
                "1",
            ),
        ];
        for (service, load_balancers, node_ports) in services {
            let expected = format!(
                "count/services=1,services=1,services.loadbalancers={load_balancers},services.nodeports={node_ports}"
            );
            assert_eq!(pretty(&Evaluator::Services.usage(&Counted::Service(&service), now())), expected);
        }
        let claim = |object: Value| -> PersistentVolumeClaim { serde_json::from_value(object).unwrap() };
        let gold = "gold.storageclass.storage.k8s.io";
        let claims = [
            (claim(json!({"spec": {}})), "count/persistentvolumeclaims=1,persistentvolumeclaims=1".to_owned()),
            (
                claim(json!({"spec": {"resources": {"requests": {"storage": "1Gi"}}}})),
                "count/persistentvolumeclaims=1,persistentvolumeclaims=1,requests.storage=1Gi".to_owned(),
            ),
            (
                claim(json!({"spec": {"storageClassName": "gold", "resources": {"requests": {"storage": "1500m"}}}})),
                format!(
                    "count/persistentvolumeclaims=1,{gold}/persistentvolumeclaims=1,{gold}/requests.storage=2,persistentvolumeclaims=1,requests.storage=2"
                ),
            ),
            (
                claim(json!({
                    "metadata": {"annotations": {"volume.beta.kubernetes.io/storage-class": "gold"}},
                    "spec": {"storageClassName": "silver", "resources": {"requests": {"storage": "1Gi"}}},
                    "status": {"allocatedResources": {"storage": "2Gi"}},
                })),
                format!(
                    "count/persistentvolumeclaims=1,{gold}/persistentvolumeclaims=1,{gold}/requests.storage=2Gi,persistentvolumeclaims=1,requests.storage=2Gi"
                ),
            ),
        ];
        for (claim, expected) in claims {
            assert_eq!(pretty(&Evaluator::PersistentVolumeClaims.usage(&Counted::Claim(&claim), now())), expected);
        }
    }

    #[test]
    fn evaluators_and_the_names_they_charge() {
        let objects = |names: &[&str]| Evaluator::Objects { names: names.iter().map(|n| (*n).to_owned()).collect() };
        assert_eq!(Evaluator::of("", "pods"), Some(Evaluator::Pods));
        assert_eq!(Evaluator::of("", "secrets"), Some(objects(&["count/secrets", "secrets"])));
        assert_eq!(Evaluator::of("apps", "deployments"), Some(objects(&["count/deployments.apps"])));
        assert_eq!(Evaluator::of("example.com", "widgets"), Some(objects(&["count/widgets.example.com"])));
        assert_eq!(Evaluator::of("", "events"), None);
        assert_eq!(Evaluator::of("authorization.k8s.io", "selfsubjectaccessreviews"), None);
        let cases: &[(&str, Option<(&str, &str)>)] = &[
            ("pods", Some(("", "pods"))),
            ("limits.memory", Some(("", "pods"))),
            ("requests.nvidia.com/gpu", Some(("", "pods"))),
            ("requests.hugepages-1Gi", Some(("", "pods"))),
            ("services.nodeports", Some(("", "services"))),
            ("count/services", Some(("", "services"))),
            ("requests.storage", Some(("", "persistentvolumeclaims"))),
            ("gold.storageclass.storage.k8s.io/requests.storage", Some(("", "persistentvolumeclaims"))),
            ("configmaps", Some(("", "configmaps"))),
            ("count/secrets", Some(("", "secrets"))),
            ("count/deployments.apps", Some(("apps", "deployments"))),
            ("count/widgets.example.com", Some(("example.com", "widgets"))),
            // A native name that is no pod resource.
            ("requests.kubernetes.io/x", None),
            ("storage", None),
        ];
        for (name, expected) in cases {
            let expected = expected.map(|(g, p)| (g.to_owned(), p.to_owned()));
            assert_eq!(counted_resource(name), expected, "{name}");
        }
    }

    fn quota(spec: Value, hard: Value) -> ResourceQuota {
        serde_json::from_value(json!({"metadata": {"name": "q"}, "spec": spec, "status": {"hard": hard}})).unwrap()
    }

    #[test]
    fn scopes_table() {
        let best_effort = pod(json!({"containers": [{"name": "a"}]}));
        let burstable = pod(
            json!({"containers": [container("a", json!({"cpu": "1"}), json!({}))], "activeDeadlineSeconds": 5, "priorityClassName": "high"}),
        );
        let cross = pod(json!({"containers": [{"name": "a"}], "affinity": {"podAntiAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 1, "podAffinityTerm": {"topologyKey": "k", "namespaces": ["other"]}}]
        }}}));
        let scoped = |scopes: Value| quota(json!({"scopes": scopes}), json!({"pods": "1"}));
        let selected = |operator: &str, values: Value| {
            quota(
                json!({"scopeSelector": {"matchExpressions": [{"scopeName": "PriorityClass", "operator": operator, "values": values}]}}),
                json!({"pods": "1"}),
            )
        };
        // (quota, best effort pod, burstable pod, cross-namespace pod)
        let cases: Vec<(&str, ResourceQuota, [bool; 3])> = vec![
            ("no scope", scoped(json!([])), [true, true, true]),
            ("Terminating", scoped(json!(["Terminating"])), [false, true, false]),
            ("NotTerminating", scoped(json!(["NotTerminating"])), [true, false, true]),
            ("BestEffort", scoped(json!(["BestEffort"])), [true, false, true]),
            ("NotBestEffort", scoped(json!(["NotBestEffort"])), [false, true, false]),
            ("two scopes", scoped(json!(["NotBestEffort", "Terminating"])), [false, true, false]),
            ("CrossNamespacePodAffinity", scoped(json!(["CrossNamespacePodAffinity"])), [false, false, true]),
            ("PriorityClass In", selected("In", json!(["high", "low"])), [false, true, false]),
            ("PriorityClass NotIn", selected("NotIn", json!(["high"])), [true, false, true]),
            ("PriorityClass Exists", selected("Exists", json!([])), [false, true, false]),
            ("PriorityClass DoesNotExist", selected("DoesNotExist", Value::Null), [true, false, true]),
            ("no matching hard resource", quota(json!({}), json!({"services": "1"})), [false, false, false]),
        ];
        for (name, quota, expected) in cases {
            let got =
                [&best_effort, &burstable, &cross].map(|p| Evaluator::Pods.matches(&quota, &Counted::Pod(p)).unwrap());
            assert_eq!(got, expected, "{name}");
        }
        // Scoped quotas never charge other kinds.
        let secrets = Evaluator::of("", "secrets").unwrap();
        assert!(
            !secrets
                .matches(&quota(json!({"scopes": ["BestEffort"]}), json!({"secrets": "1"})), &Counted::Other)
                .unwrap()
        );
        assert!(secrets.matches(&quota(json!({}), json!({"secrets": "1"})), &Counted::Other).unwrap());
        let bad = selected("In", json!([]));
        assert!(Evaluator::Pods.matches(&bad, &Counted::Pod(&best_effort)).is_err());
        let bad = selected("Gt", json!(["1"]));
        assert!(Evaluator::Pods.matches(&bad, &Counted::Pod(&best_effort)).is_err());
    }

    #[test]
    fn constraints_name_what_each_container_lacks() {
        let pod = pod(json!({
            "initContainers": [container("init", json!({"cpu": "1", "memory": "1Gi"}), json!({"cpu": "1"}))],
            "containers": [container("app", json!({"cpu": "1"}), json!({})), container("side", json!({}), json!({}))],
        }));
        let counted = Counted::Pod(&pod);
        let cases: &[(&[&str], Result<(), &str>)] = &[
            (&["pods", "count/pods"], Ok(())),
            (&["requests.cpu"], Err("must specify requests.cpu for: side")),
            (
                &["limits.cpu", "requests.memory", "pods"],
                Err("must specify limits.cpu for: app,side; requests.memory for: app,side"),
            ),
            // Not in the set that must be stated.
            (&["requests.ephemeral-storage"], Ok(())),
        ];
        for (required, expected) in cases {
            assert_eq!(
                Evaluator::Pods.constraints(required, &counted),
                expected.map_err(str::to_owned),
                "{required:?}"
            );
        }
        assert_eq!(Evaluator::Services.constraints(&["cpu"], &counted), Ok(()));
    }

    #[test]
    fn usage_of_a_namespace() {
        let pods = [
            pod(json!({"containers": [container("a", json!({"cpu": "500m"}), json!({}))]})),
            pod(
                json!({"containers": [container("a", json!({"cpu": "250m"}), json!({}))], "activeDeadlineSeconds": 10}),
            ),
        ];
        let quota = quota(json!({"hard": {"pods": "10", "requests.cpu": "4", "services": "3"}}), json!({}));
        let used = Evaluator::Pods.usage_of(&quota, pods.iter().map(Counted::Pod), now()).unwrap();
        assert_eq!(pretty(&used), "pods=2,requests.cpu=750m");
        let mut terminating = quota.clone();
        terminating.spec.as_mut().unwrap().scopes = Some(vec!["Terminating".into()]);
        let used = Evaluator::Pods.usage_of(&terminating, pods.iter().map(Counted::Pod), now()).unwrap();
        assert_eq!(pretty(&used), "pods=1,requests.cpu=250m");
        let used = Evaluator::Services.usage_of(&quota, [], now()).unwrap();
        assert_eq!(pretty(&used), "services=0");
    }

    #[test]
    fn resource_list_arithmetic() {
        let a = list(&[("cpu", "500m"), ("memory", "1Gi"), ("pods", "2")]);
        let b = list(&[("cpu", "1"), ("pods", "1"), ("secrets", "3")]);
        assert_eq!(pretty(&add(&a, &b)), "cpu=1500m,memory=1Gi,pods=3,secrets=3");
        assert_eq!(pretty(&subtract_non_negative(&a, &b)), "cpu=0,memory=1Gi,pods=1");
        assert_eq!(pretty(&mask(&a, ["pods", "services"])), "pods=2");
        assert_eq!(pretty(&remove_zeros(subtract_non_negative(&a, &b))), "memory=1Gi,pods=1");
        let hard = list(&[("cpu", "1"), ("pods", "1")]);
        assert_eq!(exceeded(&a, &hard), ["pods"]);
        assert!(exceeded(&list(&[("cpu", "1"), ("other", "9")]), &hard).is_empty());
        assert_eq!(to_quantities(&list(&[("memory", "1024Mi")]))["memory"], Quantity("1Gi".into()));
        let quantities =
            BTreeMap::from([("a".to_owned(), Quantity("1".into())), ("b".to_owned(), Quantity("x".into()))]);
        assert_eq!(pretty(&resource_list(Some(&quantities))), "a=1");
    }
}
