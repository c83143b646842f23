//! ResourceQuota: refuses a write that would take a namespace's usage above
//! one of its quotas, and charges the quotas with what it admits.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, Weak};

use async_trait::async_trait;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod, ResourceQuota as Quota, ResourceQuotaStatus, Service};
use k8s_openapi::jiff::Timestamp;
use serde_json::Value;

use super::{AdmissionPlugin, AdmissionRequest, Operation};
use crate::api::quota::{self as usage, Counted, Evaluator, ResourceList};
use crate::api::{ApiError, ErrorTarget};

/// Why [`QuotaAccessor::update_status`] did not write.
#[derive(Debug, thiserror::Error)]
pub enum QuotaUpdateError {
    /// The stored quota is no longer the version given (or is gone): read
    /// the quotas again.
    #[error("the quota changed since it was read")]
    Conflict,
    /// The write failed; the error fails the admitted write.
    #[error(transparent)]
    Failed(#[from] ApiError),
}

/// Where [`ResourceQuota`] reads a namespace's quotas and writes their
/// `status.used`.
///
/// The status is written with a compare-and-swap on the quota's resource
/// version: the quota object is the lock that keeps concurrent writes,
/// through one server or several, from using more than it allows.
/// [`ApiServerBuilder::resource_quota`](crate::server::ApiServerBuilder::resource_quota)
/// gives the plugin an accessor over the server's store; [`MemoryQuotas`]
/// holds quotas in memory.
///
/// ```
/// use async_trait::async_trait;
/// use k8s_openapi::api::core::v1::ResourceQuota;
/// use orchestra_core::api::ApiError;
/// use orchestra_core::auth::admission::{QuotaAccessor, QuotaUpdateError};
///
/// /// A cluster without quotas.
/// struct NoQuotas;
///
/// #[async_trait]
/// impl QuotaAccessor for NoQuotas {
///     async fn list(&self, _namespace: &str) -> Result<Vec<ResourceQuota>, ApiError> {
///         Ok(Vec::new())
///     }
///
///     async fn update_status(&self, _quota: &ResourceQuota) -> Result<(), QuotaUpdateError> {
///         Err(QuotaUpdateError::Conflict)
///     }
/// }
/// ```
#[async_trait]
pub trait QuotaAccessor: Send + Sync {
    /// The quotas of `namespace`, each with its `metadata.resourceVersion`.
    async fn list(&self, namespace: &str) -> Result<Vec<Quota>, ApiError>;

    /// Stores `quota` (its new `status`) if the stored quota still has the
    /// resource version `quota.metadata.resourceVersion`.
    async fn update_status(&self, quota: &Quota) -> Result<(), QuotaUpdateError>;
}

/// Quotas held in memory, with resource versions of their own: a
/// [`QuotaAccessor`] for tests and for embedders that keep quotas
/// themselves.
#[derive(Debug, Default)]
pub struct MemoryQuotas {
    held: Mutex<Held>,
}

#[derive(Debug, Default)]
struct Held {
    /// (namespace, name) → quota.
    quotas: BTreeMap<(String, String), Quota>,
    /// The last resource version given.
    version: u64,
}

impl MemoryQuotas {
    /// No quotas.
    pub fn new() -> MemoryQuotas {
        MemoryQuotas::default()
    }

    /// Adds (or replaces) `quota`, keyed by its namespace and name, with a
    /// new resource version.
    pub fn insert(&self, mut quota: Quota) {
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        held.version += 1;
        quota.metadata.resource_version = Some(held.version.to_string());
        let key =
            (quota.metadata.namespace.clone().unwrap_or_default(), quota.metadata.name.clone().unwrap_or_default());
        held.quotas.insert(key, quota);
    }

    /// The quota `name` of `namespace`.
    pub fn get(&self, namespace: &str, name: &str) -> Option<Quota> {
        let held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        held.quotas.get(&(namespace.to_owned(), name.to_owned())).cloned()
    }
}

#[async_trait]
impl QuotaAccessor for MemoryQuotas {
    async fn list(&self, namespace: &str) -> Result<Vec<Quota>, ApiError> {
        let held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        Ok(held.quotas.iter().filter(|((ns, _), _)| ns == namespace).map(|(_, quota)| quota.clone()).collect())
    }

    async fn update_status(&self, quota: &Quota) -> Result<(), QuotaUpdateError> {
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        let key =
            (quota.metadata.namespace.clone().unwrap_or_default(), quota.metadata.name.clone().unwrap_or_default());
        let version = held.version + 1;
        let Some(stored) = held.quotas.get_mut(&key) else { return Err(QuotaUpdateError::Conflict) };
        if stored.metadata.resource_version != quota.metadata.resource_version {
            return Err(QuotaUpdateError::Conflict);
        }
        stored.status = quota.status.clone();
        stored.metadata.resource_version = Some(version.to_string());
        held.version = version;
        Ok(())
    }
}

/// How often a charge is tried again when a quota changed under it.
const ATTEMPTS: usize = 10;

/// The admission plugin that enforces ResourceQuotas, like upstream's
/// plugin of the same name.
///
/// For a create (or an update that may change usage: a service's type, a
/// claim's size, a pod entering or leaving the `Terminating` scope) of a
/// namespaced object, every quota of the namespace whose `status.hard`
/// names a resource the object uses and whose scopes hold the object is
/// checked, with the evaluators of [`crate::api::quota`]:
///
/// * a pod that does not state the CPU or memory a quota tracks is refused
///   (`failed quota: q: must specify limits.cpu for: app`);
/// * a quota whose `status.used` lacks a resource it limits (the quota
///   controller has not seen it yet) refuses (`status unknown for quota`);
///   a quota without `status.hard` limits nothing yet;
/// * a write that takes usage above `hard` is refused: `exceeded quota: q,
///   requested: pods=1, used: pods=2, limited: pods=2`.
///
/// Otherwise the plugin charges the quotas: it writes their new
/// `status.used` before the object is written, with a compare-and-swap
/// that it tries again on conflict, so that concurrent writes never use
/// more than a quota allows. Writes to one namespace through one plugin are
/// checked one at a time. A dry run is checked and charges nothing. The
/// quota controller gives back what deleted objects (and terminated pods)
/// used, and corrects a charge for a write that failed after admission.
///
/// It acts in the validating phase; subresources, cluster-scoped kinds and
/// the [ignored](crate::api::quota::IGNORED) resources pass it untouched.
///
/// ```
/// # futures::executor::block_on(async {
/// use k8s_openapi::api::core::v1::ResourceQuota as Quota;
/// use orchestra_core::api::ResourceInfo;
/// use orchestra_core::auth::UserInfo;
/// use orchestra_core::auth::admission::{
///     AdmissionChain, AdmissionRequest, MemoryQuotas, Operation, ResourceQuota,
/// };
/// use serde_json::json;
/// use std::sync::Arc;
///
/// let quotas = Arc::new(MemoryQuotas::new());
/// quotas.insert(serde_json::from_value::<Quota>(json!({
///     "metadata": {"name": "q", "namespace": "team"},
///     "spec": {"hard": {"configmaps": "1"}},
///     "status": {"hard": {"configmaps": "1"}, "used": {"configmaps": "0"}},
/// })).unwrap());
/// let chain = AdmissionChain::new().with(ResourceQuota::new(quotas.clone()));
/// let config_maps = ResourceInfo::new("", "v1", "ConfigMap", "configmaps", true);
/// let user = UserInfo::anonymous();
/// let create = |name| AdmissionRequest {
///     operation: Operation::Create,
///     resource: &config_maps,
///     subresource: None,
///     namespace: Some("team"),
///     name,
///     object: Some(json!({"metadata": {"name": name, "namespace": "team"}})),
///     old_object: None,
///     user: &user,
///     dry_run: false,
/// };
/// chain.admit(&mut create("first")).await.unwrap();
/// let refused = chain.admit(&mut create("second")).await.unwrap_err();
/// assert_eq!(
///     refused.message,
///     "configmaps \"second\" is forbidden: exceeded quota: q, requested: configmaps=1, used: configmaps=1, limited: configmaps=1"
/// );
/// let used = quotas.get("team", "q").unwrap().status.unwrap().used.unwrap();
/// assert_eq!(used["configmaps"].0, "1");
/// # });
/// ```
#[derive(Clone)]
pub struct ResourceQuota {
    quotas: Arc<dyn QuotaAccessor>,
    /// One lock per namespace being admitted.
    namespaces: Arc<Mutex<HashMap<String, Weak<tokio::sync::Mutex<()>>>>>,
}

impl ResourceQuota {
    /// The plugin's name.
    pub const NAME: &'static str = "ResourceQuota";

    /// The plugin, reading and charging quotas through `quotas`.
    pub fn new(quotas: Arc<dyn QuotaAccessor>) -> ResourceQuota {
        ResourceQuota { quotas, namespaces: Arc::default() }
    }

    /// Waits for the namespace's lock; locks of namespaces no one holds
    /// are dropped whenever a new one is made.
    async fn lock(&self, namespace: &str) -> tokio::sync::OwnedMutexGuard<()> {
        let lock = {
            let mut locks = self.namespaces.lock().unwrap_or_else(|e| e.into_inner());
            match locks.get(namespace).and_then(Weak::upgrade) {
                Some(lock) => lock,
                None => {
                    locks.retain(|_, lock| lock.strong_count() > 0);
                    let lock = Arc::new(tokio::sync::Mutex::new(()));
                    locks.insert(namespace.to_owned(), Arc::downgrade(&lock));
                    lock
                }
            }
        };
        lock.lock_owned().await
    }
}

/// An admitted object, decoded for its evaluator.
enum Decoded {
    Pod(Box<Pod>),
    Service(Box<Service>),
    Claim(Box<PersistentVolumeClaim>),
    Other,
}

impl Decoded {
    fn of(evaluator: &Evaluator, object: &Value) -> Result<Decoded, ApiError> {
        fn decode<T: serde::de::DeserializeOwned>(object: &Value) -> Result<Box<T>, ApiError> {
            T::deserialize(object)
                .map(Box::new)
                .map_err(|e| ApiError::bad_request(format!("unable to decode the object: {e}")))
        }
        Ok(match evaluator {
            Evaluator::Pods => Decoded::Pod(decode(object)?),
            Evaluator::Services => Decoded::Service(decode(object)?),
            Evaluator::PersistentVolumeClaims => Decoded::Claim(decode(object)?),
            Evaluator::Objects { .. } => Decoded::Other,
        })
    }

    fn counted(&self) -> Counted<'_> {
        match self {
            Decoded::Pod(pod) => Counted::Pod(pod),
            Decoded::Service(service) => Counted::Service(service),
            Decoded::Claim(claim) => Counted::Claim(claim),
            Decoded::Other => Counted::Other,
        }
    }
}

fn name_of(quota: &Quota) -> &str {
    quota.metadata.name.as_deref().unwrap_or_default()
}

/// The quotas `request` charges, with their new `status.used`, or the
/// error refusing it (upstream's `CheckRequest`).
fn charge(
    evaluator: &Evaluator,
    quotas: &[Quota],
    request: &AdmissionRequest<'_>,
    (new, old): (&Counted<'_>, Option<&Counted<'_>>),
    now: Timestamp,
) -> Result<Vec<Quota>, ApiError> {
    let mut applying = Vec::new();
    for quota in quotas {
        let matched = evaluator.matches(quota, new);
        let matched =
            matched.map_err(|e| request.forbidden(format!("error matching quota {}, err: {e}", name_of(quota))))?;
        if !matched {
            continue;
        }
        let status = quota.status.as_ref();
        let hard = status.and_then(|s| s.hard.as_ref());
        let mut restricted = evaluator.matching_resources(hard.into_iter().flat_map(BTreeMap::keys));
        restricted.sort_unstable();
        evaluator
            .constraints(&restricted, new)
            .map_err(|e| request.forbidden(format!("failed quota: {}: {e}", name_of(quota))))?;
        let used = status.and_then(|s| s.used.as_ref());
        if restricted.iter().any(|r| !used.is_some_and(|u| u.contains_key(*r))) {
            return Err(request.forbidden(format!(
                "status unknown for quota: {}, resources: {}",
                name_of(quota),
                restricted.join(",")
            )));
        }
        applying.push(quota);
    }
    if applying.is_empty() {
        return Ok(Vec::new());
    }
    let input = evaluator.usage(new, now);
    let negative: Vec<_> = input.iter().filter(|(_, a)| a.quantity.is_negative()).map(|(n, _)| n.as_str()).collect();
    if !negative.is_empty() {
        return Err(request.forbidden(format!("quota usage is negative for resource(s): {}", negative.join(","))));
    }
    // An update is charged what it adds to what the old object used, for
    // each quota that charged the old object too.
    let previous = old.map(|old| (old, evaluator.usage(old, now)));
    let mut charged = Vec::new();
    for quota in applying {
        let delta = match &previous {
            Some((old, before)) if matches!(evaluator.matches(quota, old), Ok(true)) => {
                usage::subtract_non_negative(&input, before)
            }
            _ => input.clone(),
        };
        let status = quota.status.clone().unwrap_or_default();
        let hard = usage::resource_list(status.hard.as_ref());
        let used = usage::resource_list(status.used.as_ref());
        let requested = usage::remove_zeros(usage::mask(&delta, hard.keys().map(String::as_str)));
        if requested.is_empty() {
            continue;
        }
        let new_used = usage::add(&used, &requested);
        let exceeded = usage::exceeded(&usage::mask(&new_used, requested.keys().map(String::as_str)), &hard);
        if !exceeded.is_empty() {
            let only = |list: &ResourceList| usage::pretty(&usage::mask(list, exceeded.iter().map(String::as_str)));
            return Err(request.forbidden(format!(
                "exceeded quota: {}, requested: {}, used: {}, limited: {}",
                name_of(quota),
                only(&requested),
                only(&used),
                only(&hard)
            )));
        }
        let mut quota = quota.clone();
        quota.status = Some(ResourceQuotaStatus { used: Some(usage::to_quantities(&new_used)), ..status });
        charged.push(quota);
    }
    Ok(charged)
}

#[async_trait]
impl AdmissionPlugin for ResourceQuota {
    fn name(&self) -> &str {
        Self::NAME
    }

    fn handles(&self, operation: Operation) -> bool {
        matches!(operation, Operation::Create | Operation::Update)
    }

    async fn validate(&self, request: &AdmissionRequest<'_>) -> Result<(), ApiError> {
        let Some(namespace) =
            request.namespace.filter(|_| request.resource.namespaced && request.subresource.is_none())
        else {
            return Ok(());
        };
        let (Some(object), Some(evaluator)) =
            (request.object.as_ref(), Evaluator::of(&request.resource.group, &request.resource.plural))
        else {
            return Ok(());
        };
        if request.operation == Operation::Update && matches!(evaluator, Evaluator::Objects { .. }) {
            return Ok(());
        }
        // Writes in a namespace without quotas are not made to wait for one
        // another: the lock only orders the charges of quotas that exist.
        if self.quotas.list(namespace).await?.is_empty() {
            return Ok(());
        }
        let _one_at_a_time = self.lock(namespace).await;
        let mut quotas = self.quotas.list(namespace).await?;
        if quotas.is_empty() {
            return Ok(());
        }
        let new = Decoded::of(&evaluator, object)?;
        let old = match (request.operation, request.old_object) {
            (Operation::Update, Some(old)) => Some(Decoded::of(&evaluator, old)?),
            (Operation::Update, None) => {
                return Err(
                    request.forbidden("unable to get previous usage since prior version of object was not found")
                );
            }
            _ => None,
        };
        let old = old.as_ref().map(Decoded::counted);
        let new = new.counted();
        if let Some(old) = &old
            && !evaluator.handles_update(old, &new)
        {
            return Ok(());
        }
        let now = Timestamp::now();
        for _ in 0..ATTEMPTS {
            let charged = charge(&evaluator, &quotas, request, (&new, old.as_ref()), now)?;
            if request.dry_run || charged.is_empty() {
                return Ok(());
            }
            let mut conflicted = Vec::new();
            for quota in &charged {
                match self.quotas.update_status(quota).await {
                    Ok(()) => {}
                    Err(QuotaUpdateError::Conflict) => conflicted.push(name_of(quota).to_owned()),
                    Err(QuotaUpdateError::Failed(error)) => return Err(error),
                }
            }
            if conflicted.is_empty() {
                return Ok(());
            }
            // Only the quotas not charged yet are charged again, as read now.
            quotas = self.quotas.list(namespace).await?;
            quotas.retain(|quota| conflicted.iter().any(|name| name == name_of(quota)));
        }
        let target = ErrorTarget {
            resource: "resourcequotas".into(),
            kind: "ResourceQuota".into(),
            name: quotas.first().map(name_of).unwrap_or_default().to_owned(),
            ..Default::default()
        };
        Err(ApiError::conflict(&target))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::api::ResourceInfo;
    use crate::auth::UserInfo;

    fn quota(name: &str, spec: Value, status: Value) -> Quota {
        serde_json::from_value(json!({"metadata": {"name": name, "namespace": "ns"}, "spec": spec, "status": status}))
            .unwrap()
    }

    fn counting(name: &str, hard: Value, used: Value) -> Quota {
        quota(name, json!({"hard": hard}), json!({"hard": hard, "used": used}))
    }

    fn pod(name: &str, resources: Value) -> Value {
        json!({"metadata": {"name": name, "namespace": "ns"}, "spec": {"containers": [{"name": "app", "resources": resources}]}})
    }

    /// What admission of one write answers: `Ok`, or the error's code and message.
    type Outcome = Result<(), (u16, String)>;

    struct Case {
        name: &'static str,
        quotas: Vec<Quota>,
        operation: Operation,
        resource: ResourceInfo,
        object: Value,
        old: Option<Value>,
        dry_run: bool,
        expected: Outcome,
        /// Each quota's `status.used` after admission.
        used: Vec<Value>,
    }

    fn pods() -> ResourceInfo {
        ResourceInfo::new("", "v1", "Pod", "pods", true)
    }

    fn refused(message: &str) -> Outcome {
        Err((403, message.to_owned()))
    }

    fn create(name: &'static str, quotas: Vec<Quota>, object: Value, expected: Outcome, used: Vec<Value>) -> Case {
        Case {
            name,
            quotas,
            operation: Operation::Create,
            resource: pods(),
            object,
            old: None,
            dry_run: false,
            expected,
            used,
        }
    }

    fn cases() -> Vec<Case> {
        let cpu = json!({"requests": {"cpu": "500m"}, "limits": {"cpu": "1"}});
        let services = ResourceInfo::new("", "v1", "Service", "services", true);
        let claims = ResourceInfo::new("", "v1", "PersistentVolumeClaim", "persistentvolumeclaims", true);
        let deployments = ResourceInfo::new("apps", "v1", "Deployment", "deployments", true);
        let service =
            |type_: &str| json!({"metadata": {"name": "svc"}, "spec": {"type": type_, "ports": [{"port": 80}]}});
        let claim =
            |size: &str| json!({"metadata": {"name": "data"}, "spec": {"resources": {"requests": {"storage": size}}}});
        vec![
            create(
                "a pod within quota is charged",
                vec![counting("q", json!({"pods": "2"}), json!({"pods": "1"}))],
                pod("p", json!({})),
                Ok(()),
                vec![json!({"pods": "2"})],
            ),
            create(
                "a pod over quota is refused",
                vec![counting("q", json!({"pods": "2"}), json!({"pods": "2"}))],
                pod("p", json!({})),
                refused(
                    r#"pods "p" is forbidden: exceeded quota: q, requested: pods=1, used: pods=2, limited: pods=2"#,
                ),
                vec![json!({"pods": "2"})],
            ),
            create(
                "only exceeded resources are named",
                vec![counting(
                    "compute",
                    json!({"pods": "5", "requests.cpu": "1", "limits.cpu": "4"}),
                    json!({"pods": "1", "requests.cpu": "750m", "limits.cpu": "1"}),
                )],
                pod("p", cpu.clone()),
                refused(
                    r#"pods "p" is forbidden: exceeded quota: compute, requested: requests.cpu=500m, used: requests.cpu=750m, limited: requests.cpu=1"#,
                ),
                vec![json!({"pods": "1", "requests.cpu": "750m", "limits.cpu": "1"})],
            ),
            create(
                "compute resources add up",
                vec![counting(
                    "compute",
                    json!({"pods": "5", "requests.cpu": "2", "limits.cpu": "4"}),
                    json!({"pods": "1", "requests.cpu": "500m", "limits.cpu": "1"}),
                )],
                pod("p", cpu.clone()),
                Ok(()),
                vec![json!({"pods": "2", "requests.cpu": "1", "limits.cpu": "2"})],
            ),
            create(
                "a tracked compute resource must be stated",
                vec![counting("compute", json!({"limits.cpu": "4"}), json!({"limits.cpu": "0"}))],
                pod("p", json!({"requests": {"cpu": "1"}})),
                refused(r#"pods "p" is forbidden: failed quota: compute: must specify limits.cpu for: app"#),
                vec![json!({"limits.cpu": "0"})],
            ),
            create(
                "a quota whose usage is unknown refuses",
                vec![quota("new", json!({"hard": {"pods": "2"}}), json!({"hard": {"pods": "2"}}))],
                pod("p", json!({})),
                refused(r#"pods "p" is forbidden: status unknown for quota: new, resources: pods"#),
                vec![Value::Null],
            ),
            create(
                "a quota the controller has not seen limits nothing",
                vec![quota("new", json!({"hard": {"pods": "0"}}), json!({}))],
                pod("p", json!({})),
                Ok(()),
                vec![Value::Null],
            ),
            create(
                "quotas of other resources are not charged",
                vec![counting("q", json!({"services": "1"}), json!({"services": "1"}))],
                pod("p", json!({})),
                Ok(()),
                vec![json!({"services": "1"})],
            ),
            create(
                "every matching quota is charged, scoped ones if in scope",
                vec![
                    counting("all", json!({"pods": "5"}), json!({"pods": "0"})),
                    quota(
                        "best-effort",
                        json!({"hard": {"pods": "5"}, "scopes": ["BestEffort"]}),
                        json!({"hard": {"pods": "5"}, "used": {"pods": "0"}}),
                    ),
                    quota(
                        "terminating",
                        json!({"hard": {"pods": "5"}, "scopes": ["Terminating"]}),
                        json!({"hard": {"pods": "5"}, "used": {"pods": "0"}}),
                    ),
                ],
                pod("p", json!({})),
                Ok(()),
                vec![json!({"pods": "1"}), json!({"pods": "1"}), json!({"pods": "0"})],
            ),
            create(
                "one exceeded quota refuses and charges none",
                vec![
                    counting("loose", json!({"pods": "5"}), json!({"pods": "0"})),
                    counting("tight", json!({"count/pods": "1"}), json!({"count/pods": "1"})),
                ],
                pod("p", json!({})),
                refused(
                    r#"pods "p" is forbidden: exceeded quota: tight, requested: count/pods=1, used: count/pods=1, limited: count/pods=1"#,
                ),
                vec![json!({"pods": "0"}), json!({"count/pods": "1"})],
            ),
            Case {
                dry_run: true,
                ..create(
                    "a dry run is checked and charges nothing",
                    vec![counting("q", json!({"pods": "2"}), json!({"pods": "1"}))],
                    pod("p", json!({})),
                    Ok(()),
                    vec![json!({"pods": "1"})],
                )
            },
            Case {
                dry_run: true,
                ..create(
                    "a dry run over quota is refused",
                    vec![counting("q", json!({"pods": "1"}), json!({"pods": "1"}))],
                    pod("p", json!({})),
                    refused(
                        r#"pods "p" is forbidden: exceeded quota: q, requested: pods=1, used: pods=1, limited: pods=1"#,
                    ),
                    vec![json!({"pods": "1"})],
                )
            },
            Case {
                resource: services.clone(),
                ..create(
                    "a load balancer",
                    vec![counting(
                        "svc",
                        json!({"services": "5", "services.loadbalancers": "1", "services.nodeports": "1"}),
                        json!({"services": "0", "services.loadbalancers": "0", "services.nodeports": "0"}),
                    )],
                    service("LoadBalancer"),
                    Ok(()),
                    vec![json!({"services": "1", "services.loadbalancers": "1", "services.nodeports": "1"})],
                )
            },
            Case {
                resource: services.clone(),
                operation: Operation::Update,
                old: Some(service("ClusterIP")),
                ..create(
                    "an update to a load balancer is charged the difference",
                    vec![counting(
                        "svc",
                        json!({"services": "1", "services.loadbalancers": "0"}),
                        json!({"services": "1", "services.loadbalancers": "0"}),
                    )],
                    service("LoadBalancer"),
                    refused(
                        r#"services "svc" is forbidden: exceeded quota: svc, requested: services.loadbalancers=1, used: services.loadbalancers=0, limited: services.loadbalancers=0"#,
                    ),
                    vec![json!({"services": "1", "services.loadbalancers": "0"})],
                )
            },
            Case {
                resource: claims.clone(),
                operation: Operation::Update,
                old: Some(claim("1Gi")),
                ..create(
                    "a claim resize is charged the difference",
                    vec![counting(
                        "storage",
                        json!({"persistentvolumeclaims": "1", "requests.storage": "10Gi"}),
                        json!({"persistentvolumeclaims": "1", "requests.storage": "1Gi"}),
                    )],
                    claim("3Gi"),
                    Ok(()),
                    vec![json!({"persistentvolumeclaims": "1", "requests.storage": "3Gi"})],
                )
            },
            Case {
                resource: claims,
                operation: Operation::Update,
                old: Some(claim("3Gi")),
                ..create(
                    "a smaller claim gives nothing back at admission",
                    vec![counting("storage", json!({"requests.storage": "10Gi"}), json!({"requests.storage": "3Gi"}))],
                    claim("1Gi"),
                    Ok(()),
                    vec![json!({"requests.storage": "3Gi"})],
                )
            },
            Case {
                operation: Operation::Update,
                old: Some(pod("p", json!({}))),
                ..create(
                    "a pod update that changes no scope is not charged",
                    vec![counting("q", json!({"pods": "1"}), json!({"pods": "1"}))],
                    pod("p", json!({})),
                    Ok(()),
                    vec![json!({"pods": "1"})],
                )
            },
            Case {
                operation: Operation::Update,
                old: Some(pod("p", json!({}))),
                ..create(
                    "a pod entering the Terminating scope is charged by its quotas",
                    vec![
                        counting("all", json!({"pods": "1"}), json!({"pods": "1"})),
                        quota(
                            "terminating",
                            json!({"hard": {"pods": "1"}, "scopes": ["Terminating"]}),
                            json!({"hard": {"pods": "1"}, "used": {"pods": "0"}}),
                        ),
                    ],
                    {
                        let mut p = pod("p", json!({}));
                        p["spec"]["activeDeadlineSeconds"] = json!(30);
                        p
                    },
                    Ok(()),
                    vec![json!({"pods": "1"}), json!({"pods": "1"})],
                )
            },
            Case {
                resource: deployments.clone(),
                ..create(
                    "object counts of any group",
                    vec![counting(
                        "objects",
                        json!({"count/deployments.apps": "1"}),
                        json!({"count/deployments.apps": "1"}),
                    )],
                    json!({"metadata": {"name": "web"}}),
                    refused(
                        r#"deployments.apps "web" is forbidden: exceeded quota: objects, requested: count/deployments.apps=1, used: count/deployments.apps=1, limited: count/deployments.apps=1"#,
                    ),
                    vec![json!({"count/deployments.apps": "1"})],
                )
            },
            Case {
                resource: deployments,
                operation: Operation::Update,
                old: Some(json!({"metadata": {"name": "web"}})),
                ..create(
                    "updates of counted objects are not charged",
                    vec![counting(
                        "objects",
                        json!({"count/deployments.apps": "0"}),
                        json!({"count/deployments.apps": "1"}),
                    )],
                    json!({"metadata": {"name": "web"}}),
                    Ok(()),
                    vec![json!({"count/deployments.apps": "1"})],
                )
            },
            Case {
                resource: ResourceInfo::new("", "v1", "Event", "events", true),
                ..create(
                    "events are never counted",
                    vec![counting("objects", json!({"count/events": "0"}), json!({"count/events": "0"}))],
                    json!({"metadata": {"name": "e"}}),
                    Ok(()),
                    vec![json!({"count/events": "0"})],
                )
            },
        ]
    }

    #[tokio::test]
    async fn admission_table() {
        let user = UserInfo::anonymous();
        for case in cases() {
            let accessor = Arc::new(MemoryQuotas::new());
            for quota in &case.quotas {
                accessor.insert(quota.clone());
            }
            let chain = super::super::AdmissionChain::new().with(ResourceQuota::new(accessor.clone()));
            let name = case.object["metadata"]["name"].as_str().unwrap().to_owned();
            let mut request = AdmissionRequest {
                operation: case.operation,
                resource: &case.resource,
                subresource: None,
                namespace: Some("ns"),
                name: &name,
                object: Some(case.object.clone()),
                old_object: case.old.as_ref(),
                user: &user,
                dry_run: case.dry_run,
            };
            let outcome = chain.admit(&mut request).await.map_err(|e| (e.code, e.message));
            assert_eq!(outcome, case.expected, "{}", case.name);
            for (quota, used) in case.quotas.iter().zip(&case.used) {
                let stored = accessor.get("ns", name_of(quota)).unwrap();
                let stored = serde_json::to_value(stored.status.and_then(|s| s.used)).unwrap();
                assert_eq!(&stored, used, "{}: status.used of {}", case.name, name_of(quota));
            }
        }
    }

    #[tokio::test]
    async fn subresources_and_cluster_kinds_pass() {
        let accessor = Arc::new(MemoryQuotas::new());
        accessor.insert(counting(
            "q",
            json!({"pods": "0", "count/nodes": "0"}),
            json!({"pods": "0", "count/nodes": "0"}),
        ));
        let plugin = ResourceQuota::new(accessor);
        let user = UserInfo::anonymous();
        let (pods, nodes) = (pods(), ResourceInfo::new("", "v1", "Node", "nodes", false));
        let cases = [(&pods, Some("status"), Some("ns")), (&nodes, None, Some("ns")), (&pods, None, None)];
        for (resource, subresource, namespace) in cases {
            let request = AdmissionRequest {
                operation: Operation::Create,
                resource,
                subresource,
                namespace,
                name: "p",
                object: Some(pod("p", json!({}))),
                old_object: None,
                user: &user,
                dry_run: false,
            };
            assert_eq!(plugin.validate(&request).await, Ok(()), "{} {subresource:?}", resource.plural);
        }
        assert!(!plugin.handles(Operation::Delete));
    }

    /// An accessor whose first `conflicts` status writes conflict, as if
    /// another server had charged the quota meanwhile.
    struct Contended {
        quotas: MemoryQuotas,
        conflicts: Mutex<usize>,
    }

    #[async_trait]
    impl QuotaAccessor for Contended {
        async fn list(&self, namespace: &str) -> Result<Vec<Quota>, ApiError> {
            self.quotas.list(namespace).await
        }

        async fn update_status(&self, quota: &Quota) -> Result<(), QuotaUpdateError> {
            let conflict = {
                let mut conflicts = self.conflicts.lock().unwrap();
                let conflict = *conflicts > 0;
                *conflicts = conflicts.saturating_sub(1);
                conflict
            };
            if conflict {
                // Someone else took one pod meanwhile.
                let mut taken = self.quotas.get("ns", name_of(quota)).unwrap();
                let used = &mut taken.status.as_mut().unwrap().used.as_mut().unwrap();
                let pods = crate::api::quantity::value(&used["pods"]);
                used.insert(
                    "pods".into(),
                    k8s_openapi::apimachinery::pkg::api::resource::Quantity((pods + 1).to_string()),
                );
                self.quotas.insert(taken);
                return Err(QuotaUpdateError::Conflict);
            }
            self.quotas.update_status(quota).await
        }
    }

    #[tokio::test]
    async fn a_conflict_is_charged_again_on_the_new_usage() {
        let user = UserInfo::anonymous();
        let pods = pods();
        let object = pod("p", json!({}));
        let request = AdmissionRequest {
            operation: Operation::Create,
            resource: &pods,
            subresource: None,
            namespace: Some("ns"),
            name: "p",
            object: Some(object),
            old_object: None,
            user: &user,
            dry_run: false,
        };
        // (conflicts, used before, outcome, used after)
        let cases: [(usize, &str, Result<(), u16>, &str); 3] =
            [(2, "0", Ok(()), "3"), (1, "2", Err(403), "3"), (ATTEMPTS, "0", Err(409), "10")];
        for (conflicts, before, expected, after) in cases {
            let accessor = Arc::new(Contended { quotas: MemoryQuotas::new(), conflicts: Mutex::new(conflicts) });
            accessor.quotas.insert(counting("q", json!({"pods": "10"}), json!({"pods": before})));
            if conflicts == 1 {
                accessor.quotas.insert(counting("q", json!({"pods": "3"}), json!({"pods": before})));
            }
            let plugin = ResourceQuota::new(accessor.clone());
            assert_eq!(plugin.validate(&request).await.map_err(|e| e.code), expected, "{conflicts} conflicts");
            let used = accessor.quotas.get("ns", "q").unwrap().status.unwrap().used.unwrap();
            assert_eq!(used["pods"].0, after, "{conflicts} conflicts");
        }
    }
}
