//! LimitRanger: the namespace's LimitRanges default the resources of new
//! pods' containers and bound pods and PersistentVolumeClaims.

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{Map, Value};

use super::{AdmissionPlugin, AdmissionRequest, ObjectReader, Operation, ResourceRef};
use crate::api::ApiError;
use crate::api::quantity::{ParsedQuantity, QuantityFormat};

const LIMIT_RANGES: ResourceRef<'static> = ResourceRef::new("", "v1", "limitranges");

/// The annotation that says which resources the plugin filled in.
const ANNOTATION: &str = "kubernetes.io/limit-ranger";

/// The admission plugin that applies the LimitRanges of a namespace, like
/// upstream's plugin of the same name:
///
/// - mutating, on pod creates: each container (and init container) that
///   lacks a request or limit for a resource gets the `defaultRequest` or
///   `default` of the LimitRange items of type `Container`, and the pod the
///   annotation `kubernetes.io/limit-ranger` saying what was set;
/// - validating, on pod creates and on PersistentVolumeClaim creates and
///   updates: `min`, `max` and `maxLimitRequestRatio` of items of type
///   `Container` (each container), `Pod` (the sums over the containers,
///   init containers counted as the scheduler counts them) and
///   `PersistentVolumeClaim` (`spec.resources.requests`), refused with
///   403 and upstream's texts, e.g. `maximum cpu usage per Container is 1,
///   but limit is 2`.
///
/// Pod updates are not checked: containers' resources cannot change
/// through an update. Items are read as upstream defaults them when they
/// are stored: a `Container` item's `default` falls back to its `max`, its
/// `defaultRequest` to its `default`, then to its `min`.
///
/// ```
/// use std::sync::Arc;
/// use orchestra_core::auth::admission::{AdmissionChain, LimitRanger, StaticObjects};
///
/// let chain = AdmissionChain::new().with(LimitRanger::new(Arc::new(StaticObjects::new())));
/// assert_eq!(chain.names().collect::<Vec<_>>(), [LimitRanger::NAME]);
/// ```
#[derive(Clone)]
pub struct LimitRanger {
    objects: Arc<dyn ObjectReader>,
}

impl LimitRanger {
    /// The plugin's name.
    pub const NAME: &'static str = "LimitRanger";

    /// The plugin, reading LimitRanges from `objects`.
    pub fn new(objects: Arc<dyn ObjectReader>) -> LimitRanger {
        LimitRanger { objects }
    }

    /// What the request writes and the items of each LimitRange of its
    /// namespace, if the plugin applies to it (pod creates, PVC writes) and
    /// the namespace has LimitRanges.
    async fn applicable(&self, request: &AdmissionRequest<'_>) -> Result<Option<(Kind, Vec<Vec<Item>>)>, ApiError> {
        let kind = if request.writes("", "pods") && request.operation == Operation::Create {
            Kind::Pod
        } else if request.writes("", "persistentvolumeclaims") {
            Kind::Claim
        } else {
            return Ok(None);
        };
        let (Some(namespace), Some(_)) = (request.namespace, request.object.as_ref()) else { return Ok(None) };
        let ranges = self.objects.list(LIMIT_RANGES, Some(namespace)).await?;
        let ranges: Vec<Vec<Item>> =
            ranges.iter().map(|range| items(range)).filter(|items| !items.is_empty()).collect();
        Ok((!ranges.is_empty()).then_some((kind, ranges)))
    }
}

/// What a request the plugin applies to writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Pod,
    Claim,
}

#[async_trait]
impl AdmissionPlugin for LimitRanger {
    fn name(&self) -> &str {
        Self::NAME
    }

    fn handles(&self, operation: Operation) -> bool {
        matches!(operation, Operation::Create | Operation::Update)
    }

    async fn mutate(&self, request: &mut AdmissionRequest<'_>) -> Result<(), ApiError> {
        let Some((Kind::Pod, ranges)) = self.applicable(request).await? else { return Ok(()) };
        let pod = request.object.as_mut().expect("applicable writes have an object");
        for items in &ranges {
            set_defaults(pod, items);
        }
        Ok(())
    }

    async fn validate(&self, request: &AdmissionRequest<'_>) -> Result<(), ApiError> {
        let Some((kind, ranges)) = self.applicable(request).await? else { return Ok(()) };
        let object = request.object.as_ref().expect("applicable writes have an object");
        for items in &ranges {
            let errors = match kind {
                Kind::Pod => check_pod(object, items),
                Kind::Claim => check_claim(object, items),
            };
            if !errors.is_empty() {
                return Err(request.forbidden(aggregate(errors)));
            }
        }
        Ok(())
    }
}

/// A quantity with the format it is written in, shown as upstream shows it.
#[derive(Debug, Clone, Copy)]
struct Amount {
    quantity: ParsedQuantity,
    format: QuantityFormat,
}

impl std::fmt::Display for Amount {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.quantity.canonical(self.format))
    }
}

/// Resource name → amount; entries that are not quantities are left out
/// (validation refuses them).
type Resources = BTreeMap<String, Amount>;

fn resources(list: &Value) -> Resources {
    let Some(list) = list.as_object() else { return Resources::new() };
    list.iter()
        .filter_map(|(name, value)| {
            let text = value.as_str().map(str::to_owned).or_else(|| value.as_number().map(|n| n.to_string()))?;
            let quantity = ParsedQuantity::parse(&text).ok()?;
            Some((name.clone(), Amount { quantity, format: QuantityFormat::of(&text) }))
        })
        .collect()
}

/// One item of a LimitRange's `spec.limits`, defaulted as upstream stores it.
#[derive(Debug, Default)]
struct Item {
    kind: String,
    min: Resources,
    max: Resources,
    default: Map<String, Value>,
    default_request: Map<String, Value>,
    ratio: Resources,
}

fn items(range: &Value) -> Vec<Item> {
    let Some(limits) = range.pointer("/spec/limits").and_then(Value::as_array) else { return Vec::new() };
    let map = |item: &Value, field: &str| item[field].as_object().cloned().unwrap_or_default();
    limits
        .iter()
        .map(|item| {
            let mut default = map(item, "default");
            let mut default_request = map(item, "defaultRequest");
            let kind = item["type"].as_str().unwrap_or_default().to_owned();
            if kind == "Container" {
                for (name, max) in map(item, "max") {
                    default.entry(name).or_insert(max);
                }
                for (name, limit) in &default {
                    default_request.entry(name.clone()).or_insert_with(|| limit.clone());
                }
                for (name, min) in map(item, "min") {
                    default_request.entry(name).or_insert(min);
                }
            }
            Item {
                kind,
                min: resources(&item["min"]),
                max: resources(&item["max"]),
                default,
                default_request,
                ratio: resources(&item["maxLimitRequestRatio"]),
            }
        })
        .collect()
}

/// Fills the missing requests and limits of `pod`'s containers from the
/// `Container` items of one LimitRange, and records what it set.
fn set_defaults(pod: &mut Value, items: &[Item]) {
    let (mut requests, mut limits) = (Map::new(), Map::new());
    for item in items.iter().filter(|item| item.kind == "Container") {
        requests.extend(item.default_request.clone());
        limits.extend(item.default.clone());
    }
    if requests.is_empty() && limits.is_empty() {
        return;
    }
    // Per container, upstream notes the requests it set before the limits.
    let mut notes = Vec::new();
    for (field, label) in [("containers", "container"), ("initContainers", "init container")] {
        let Some(containers) = pod.pointer_mut(&format!("/spec/{field}")).and_then(Value::as_array_mut) else {
            continue;
        };
        for container in containers {
            let name = container["name"].as_str().unwrap_or_default().to_owned();
            for (kind, field, defaults) in [("request", "requests", &requests), ("limit", "limits", &limits)] {
                if defaults.is_empty() {
                    continue;
                }
                let resources = &mut container["resources"];
                if !resources.is_object() {
                    *resources = Value::Object(Map::new());
                }
                let current = &mut resources[field];
                if !current.is_object() {
                    *current = Value::Object(Map::new());
                }
                let current = current.as_object_mut().expect("made an object");
                let mut set = Vec::new();
                for (resource, value) in defaults {
                    if !current.contains_key(resource) {
                        current.insert(resource.clone(), value.clone());
                        set.push(resource.as_str());
                    }
                }
                if !set.is_empty() {
                    notes.push(format!("{} {kind} for {label} {name}", set.join(", ")));
                }
            }
        }
    }
    if !notes.is_empty() {
        pod["metadata"]["annotations"][ANNOTATION] = format!("LimitRanger plugin set: {}", notes.join("; ")).into();
    }
}

/// The constraint failures of a pod against one LimitRange.
fn check_pod(pod: &Value, items: &[Item]) -> Vec<String> {
    let containers = |field: &str| pod.pointer(&format!("/spec/{field}")).and_then(Value::as_array).cloned();
    let (containers, init) = (containers("containers").unwrap_or_default(), containers("initContainers"));
    let all: Vec<&Value> = containers.iter().chain(init.iter().flatten()).collect();
    let mut errors = Vec::new();
    for item in items {
        match item.kind.as_str() {
            "Container" => {
                for container in &all {
                    let requests = resources(&container["resources"]["requests"]);
                    let limits = resources(&container["resources"]["limits"]);
                    check(item, &requests, &limits, &mut errors);
                }
            }
            "Pod" => {
                let (requests, limits) = pod_totals(&containers, init.as_deref().unwrap_or_default());
                check(item, &requests, &limits, &mut errors);
            }
            _ => {}
        }
    }
    errors
}

/// `min`, `max` and `maxLimitRequestRatio` of `item` on one set of requests and limits.
fn check(item: &Item, requests: &Resources, limits: &Resources, errors: &mut Vec<String>) {
    let kind = &item.kind;
    for (resource, enforced) in &item.min {
        errors.extend(min_constraint(kind, resource, enforced, requests, Some(limits)));
    }
    for (resource, enforced) in &item.max {
        errors.extend(max_constraint(kind, resource, enforced, requests, limits));
    }
    for (resource, enforced) in &item.ratio {
        errors.extend(ratio_constraint(kind, resource, enforced, requests, limits));
    }
}

/// The constraint failures of a PersistentVolumeClaim against one
/// LimitRange: its requests against `min` and `max` (limits of a claim are
/// not user input).
fn check_claim(claim: &Value, items: &[Item]) -> Vec<String> {
    let requests = resources(&claim["spec"]["resources"]["requests"]);
    let mut errors = Vec::new();
    for item in items.iter().filter(|item| item.kind == "PersistentVolumeClaim") {
        for (resource, enforced) in &item.min {
            errors.extend(min_constraint(&item.kind, resource, enforced, &requests, None));
        }
        for (resource, enforced) in &item.max {
            let request = requests.get(resource);
            let (request_value, _, enforced_value) = comparable(request, None, enforced);
            errors.extend(match request {
                None => {
                    Some(format!("maximum {resource} usage per {} is {enforced}.  No request is specified", item.kind))
                }
                Some(request) if request_value > enforced_value => {
                    Some(format!("maximum {resource} usage per {} is {enforced}, but request is {request}", item.kind))
                }
                Some(_) => None,
            });
        }
    }
    errors
}

/// The requests and limits of a pod (upstream's `podRequests`, without
/// overhead): the sum over its containers and its restartable (sidecar)
/// init containers, or, when larger, what an init container needs while it
/// runs beside the sidecars started before it.
fn pod_totals(containers: &[Value], init: &[Value]) -> (Resources, Resources) {
    let total = |field: &str| {
        let mut sum = Resources::new();
        for container in containers {
            add(&mut sum, &resources(&container["resources"][field]));
        }
        let (mut sidecars, mut peak) = (Resources::new(), Resources::new());
        for container in init {
            let own = resources(&container["resources"][field]);
            let running = if container["restartPolicy"] == "Always" {
                add(&mut sum, &own);
                add(&mut sidecars, &own);
                sidecars.clone()
            } else {
                let mut running = own;
                add(&mut running, &sidecars);
                running
            };
            max_into(&mut peak, &running);
        }
        max_into(&mut sum, &peak);
        sum
    };
    (total("requests"), total("limits"))
}

fn add(into: &mut Resources, other: &Resources) {
    for (name, amount) in other {
        into.entry(name.clone()).and_modify(|sum| sum.quantity += amount.quantity).or_insert(*amount);
    }
}

fn max_into(into: &mut Resources, other: &Resources) {
    for (name, amount) in other {
        match into.get(name) {
            Some(current) if current.quantity >= amount.quantity => {}
            _ => {
                into.insert(name.clone(), *amount);
            }
        }
    }
}

/// Request, limit and enforced value at a common precision: thousandths
/// unless one would overflow, whole units then (upstream's
/// `requestLimitEnforcedValues`).
fn comparable(request: Option<&Amount>, limit: Option<&Amount>, enforced: &Amount) -> (i64, i64, i64) {
    let units = |amount: Option<&Amount>| amount.map_or(0, |a| a.quantity.value());
    let millis = |amount: Option<&Amount>| amount.map_or(0, |a| a.quantity.milli_value());
    const MAX_MILLI_VALUE: i64 = i64::MAX / 1000;
    let (r, l, e) = (units(request), units(limit), units(Some(enforced)));
    if r <= MAX_MILLI_VALUE && l <= MAX_MILLI_VALUE && e <= MAX_MILLI_VALUE {
        (millis(request), millis(limit), millis(Some(enforced)))
    } else {
        (r, l, e)
    }
}

fn min_constraint(
    kind: &str,
    resource: &str,
    enforced: &Amount,
    requests: &Resources,
    limits: Option<&Resources>,
) -> Option<String> {
    let (request, limit) = (requests.get(resource), limits.and_then(|l| l.get(resource)));
    let (request_value, limit_value, enforced_value) = comparable(request, limit, enforced);
    let Some(request) = request else {
        return Some(format!("minimum {resource} usage per {kind} is {enforced}.  No request is specified"));
    };
    if request_value < enforced_value {
        return Some(format!("minimum {resource} usage per {kind} is {enforced}, but request is {request}"));
    }
    match limit {
        Some(limit) if limit_value < enforced_value => {
            Some(format!("minimum {resource} usage per {kind} is {enforced}, but limit is {limit}"))
        }
        _ => None,
    }
}

fn max_constraint(
    kind: &str,
    resource: &str,
    enforced: &Amount,
    requests: &Resources,
    limits: &Resources,
) -> Option<String> {
    let (request, limit) = (requests.get(resource), limits.get(resource));
    let (request_value, limit_value, enforced_value) = comparable(request, limit, enforced);
    let Some(limit) = limit else {
        return Some(format!("maximum {resource} usage per {kind} is {enforced}.  No limit is specified"));
    };
    if limit_value > enforced_value {
        return Some(format!("maximum {resource} usage per {kind} is {enforced}, but limit is {limit}"));
    }
    match request {
        Some(request) if request_value > enforced_value => {
            Some(format!("maximum {resource} usage per {kind} is {enforced}, but request is {request}"))
        }
        _ => None,
    }
}

fn ratio_constraint(
    kind: &str,
    resource: &str,
    enforced: &Amount,
    requests: &Resources,
    limits: &Resources,
) -> Option<String> {
    let (request, limit) = (requests.get(resource), limits.get(resource));
    let (request_value, limit_value, _) = comparable(request, limit, enforced);
    if request.is_none() || request_value == 0 {
        return Some(format!(
            "{resource} max limit to request ratio per {kind} is {enforced}, but no request is specified or request is 0"
        ));
    }
    if limit.is_none() || limit_value == 0 {
        return Some(format!(
            "{resource} max limit to request ratio per {kind} is {enforced}, but no limit is specified or limit is 0"
        ));
    }
    let shown = limit_value as f64 / request_value as f64;
    let (observed, allowed) = if enforced.quantity.value() <= i64::MAX / 1000 {
        (shown * 1000.0, enforced.quantity.milli_value() as f64)
    } else {
        (shown, enforced.quantity.value() as f64)
    };
    (observed > allowed).then(|| {
        format!("{resource} max limit to request ratio per {kind} is {enforced}, but provided ratio is {shown:.6}")
    })
}

/// Several failures as upstream aggregates them: one alone, or `[a, b]`,
/// each distinct message once.
fn aggregate(errors: Vec<String>) -> String {
    let mut distinct: Vec<String> = Vec::with_capacity(errors.len());
    for error in errors {
        if !distinct.contains(&error) {
            distinct.push(error);
        }
    }
    match distinct.as_slice() {
        [one] => one.clone(),
        _ => format!("[{}]", distinct.join(", ")),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::api::ResourceInfo;
    use crate::auth::UserInfo;
    use crate::auth::admission::StaticObjects;
    use crate::auth::admission::testing::{admit, pods};

    fn plugin(limits: Value) -> LimitRanger {
        let objects = StaticObjects::new();
        objects.insert(
            LIMIT_RANGES,
            json!({"metadata": {"name": "limits", "namespace": "team"}, "spec": {"limits": limits}}),
        );
        LimitRanger::new(Arc::new(objects))
    }

    fn pod(containers: Value) -> Value {
        json!({"metadata": {"name": "web", "namespace": "team"}, "spec": {"containers": containers}})
    }

    #[test]
    fn containers_get_the_defaults_they_lack() {
        let ranger = plugin(json!([{
            "type": "Container",
            "default": {"cpu": "500m", "memory": "256Mi"},
            "defaultRequest": {"cpu": "100m"},
        }]));
        let user = UserInfo::anonymous();
        #[rustfmt::skip]
        let cases = [
            // Nothing set: every default, requests of memory from its default limit.
            (json!([{"name": "a"}]),
             json!([{"name": "a", "resources": {"limits": {"cpu": "500m", "memory": "256Mi"}, "requests": {"cpu": "100m", "memory": "256Mi"}}}]),
             Some("LimitRanger plugin set: cpu, memory request for container a; cpu, memory limit for container a")),
            // What a container sets is kept.
            (json!([{"name": "a", "resources": {"limits": {"cpu": "1"}, "requests": {"cpu": "1", "memory": "1Gi"}}}]),
             json!([{"name": "a", "resources": {"limits": {"cpu": "1", "memory": "256Mi"}, "requests": {"cpu": "1", "memory": "1Gi"}}}]),
             Some("LimitRanger plugin set: memory limit for container a")),
            (json!([{"name": "a", "resources": {"limits": {"cpu": "1", "memory": "1Gi"}, "requests": {"cpu": "1", "memory": "1Gi"}}}]),
             json!([{"name": "a", "resources": {"limits": {"cpu": "1", "memory": "1Gi"}, "requests": {"cpu": "1", "memory": "1Gi"}}}]),
             None),
        ];
        for (containers, expected, annotation) in cases {
            let (admitted, _) =
                admit(&ranger, Operation::Create, &pods(), Some("team"), &user, Some(pod(containers.clone())), None);
            let admitted = admitted.unwrap().unwrap();
            assert_eq!(admitted["spec"]["containers"], expected, "{containers}");
            assert_eq!(admitted["metadata"]["annotations"][ANNOTATION].as_str(), annotation, "{containers}");
        }
    }

    #[test]
    fn defaults_come_from_max_and_min_as_upstream_stores_them() {
        let ranger = plugin(json!([{"type": "Container", "max": {"cpu": "2"}, "min": {"memory": "64Mi"}}]));
        let user = UserInfo::anonymous();
        let init = json!({"metadata": {"name": "web"}, "spec": {"containers": [{"name": "a"}], "initContainers": [{"name": "i"}]}});
        let (admitted, _) = admit(&ranger, Operation::Create, &pods(), Some("team"), &user, Some(init), None);
        let admitted = admitted.unwrap().unwrap();
        let expected = json!({"limits": {"cpu": "2"}, "requests": {"cpu": "2", "memory": "64Mi"}});
        assert_eq!(admitted["spec"]["containers"][0]["resources"], expected);
        assert_eq!(admitted["spec"]["initContainers"][0]["resources"], expected);
        assert_eq!(
            admitted["metadata"]["annotations"][ANNOTATION],
            "LimitRanger plugin set: cpu, memory request for container a; cpu limit for container a; \
             cpu, memory request for init container i; cpu limit for init container i"
        );
    }

    #[test]
    fn min_max_and_ratio_are_enforced() {
        let user = UserInfo::anonymous();
        let container = |requests: Value, limits: Value| json!({"name": "c", "resources": {"requests": requests, "limits": limits}});
        #[rustfmt::skip]
        let cases: [(Value, Value, Result<(), &str>); 12] = [
            (json!({"type": "Container", "max": {"cpu": "1"}}), json!([container(json!({"cpu": "500m"}), json!({"cpu": "2"}))]),
             Err("maximum cpu usage per Container is 1, but limit is 2")),
            (json!({"type": "Container", "max": {"cpu": "1"}}), json!([container(json!({"cpu": "500m"}), json!({"cpu": "1"}))]),
             Ok(())),
            (json!({"type": "Container", "max": {"cpu": "1"}}), json!([container(json!({"cpu": "2"}), json!({"cpu": "1"}))]),
             Err("maximum cpu usage per Container is 1, but request is 2")),
            (json!({"type": "Container", "min": {"memory": "1Gi"}}), json!([container(json!({"memory": "512Mi"}), json!({}))]),
             Err("minimum memory usage per Container is 1Gi, but request is 512Mi")),
            (json!({"type": "Container", "min": {"memory": "1Gi"}}), json!([container(json!({"memory": "2Gi"}), json!({"memory": "1000Mi"}))]),
             Err("minimum memory usage per Container is 1Gi, but limit is 1000Mi")),
            (json!({"type": "Container", "maxLimitRequestRatio": {"cpu": "2"}}), json!([container(json!({"cpu": "100m"}), json!({"cpu": "500m"}))]),
             Err("cpu max limit to request ratio per Container is 2, but provided ratio is 5.000000")),
            (json!({"type": "Container", "maxLimitRequestRatio": {"cpu": "2"}}), json!([container(json!({"cpu": "250m"}), json!({"cpu": "500m"}))]),
             Ok(())),
            // Pod items bound the sums of the containers.
            (json!({"type": "Pod", "max": {"cpu": "1"}}),
             json!([container(json!({"cpu": "300m"}), json!({"cpu": "600m"})), container(json!({"cpu": "300m"}), json!({"cpu": "600m"}))]),
             Err("maximum cpu usage per Pod is 1, but limit is 1200m")),
            (json!({"type": "Pod", "max": {"cpu": "2"}}),
             json!([container(json!({"cpu": "300m"}), json!({"cpu": "1"})), container(json!({"cpu": "300m"}), json!({"cpu": "1"}))]),
             Ok(())),
            (json!({"type": "Pod", "min": {"memory": "1Gi"}}), json!([container(json!({}), json!({}))]),
             Err("minimum memory usage per Pod is 1Gi.  No request is specified")),
            // Several failures are listed together.
            (json!({"type": "Container", "max": {"cpu": "1", "memory": "1Gi"}}), json!([container(json!({}), json!({"cpu": "2", "memory": "2Gi"}))]),
             Err("[maximum cpu usage per Container is 1, but limit is 2, maximum memory usage per Container is 1Gi, but limit is 2Gi]")),
            // Items of other types do not apply to pods.
            (json!({"type": "PersistentVolumeClaim", "max": {"storage": "1Gi"}}), json!([container(json!({}), json!({}))]),
             Ok(())),
        ];
        for (item, containers, expected) in cases {
            let ranger = plugin(json!([item]));
            let (admitted, _) =
                admit(&ranger, Operation::Create, &pods(), Some("team"), &user, Some(pod(containers)), None);
            let outcome = admitted.map(|_| ()).map_err(|e| {
                assert_eq!(e.code, 403);
                e.message.strip_prefix(r#"pods "web" is forbidden: "#).unwrap_or(&e.message).to_owned()
            });
            assert_eq!(outcome, expected.map_err(str::to_owned), "{item}");
        }
    }

    #[test]
    fn claims_are_bounded_and_other_writes_pass() {
        let ranger =
            plugin(json!([{"type": "PersistentVolumeClaim", "min": {"storage": "1Gi"}, "max": {"storage": "10Gi"}}]));
        let claims = ResourceInfo::new("", "v1", "PersistentVolumeClaim", "persistentvolumeclaims", true);
        let user = UserInfo::anonymous();
        let claim =
            |size: &str| json!({"metadata": {"name": "data"}, "spec": {"resources": {"requests": {"storage": size}}}});
        let forbidden = |m: &str| Err(format!(r#"persistentvolumeclaims "data" is forbidden: {m}"#));
        #[rustfmt::skip]
        let cases = [
            (Operation::Create, &claims, claim("5Gi"), Ok(())),
            (Operation::Create, &claims, claim("20Gi"), forbidden("maximum storage usage per PersistentVolumeClaim is 10Gi, but request is 20Gi")),
            (Operation::Update, &claims, claim("500Mi"), forbidden("minimum storage usage per PersistentVolumeClaim is 1Gi, but request is 500Mi")),
            (Operation::Create, &claims, json!({"metadata": {"name": "data"}}),
             forbidden("[minimum storage usage per PersistentVolumeClaim is 1Gi.  No request is specified, maximum storage usage per PersistentVolumeClaim is 10Gi.  No request is specified]")),
            // Pod updates are not checked.
            (Operation::Update, &pods(), json!({"metadata": {"name": "web"}, "spec": {"containers": [{"name": "c"}]}}), Ok(())),
        ];
        for (operation, resource, object, expected) in cases {
            let (admitted, _) =
                admit(&ranger, operation, resource, Some("team"), &user, Some(object.clone()), Some(&object));
            let outcome = admitted.map(|_| ()).map_err(|e| e.message);
            assert_eq!(outcome, expected, "{operation:?} {object}");
        }
        let elsewhere = admit(&ranger, Operation::Create, &claims, Some("other"), &user, Some(claim("20Gi")), None);
        assert!(elsewhere.0.is_ok(), "LimitRanges apply in their own namespace only");
    }

    #[test]
    fn init_containers_and_sidecars_count_as_the_scheduler_counts_them() {
        let with = |cpu: &str, sidecar: bool| {
            let mut c = json!({"name": cpu, "resources": {"requests": {"cpu": cpu}}});
            if sidecar {
                c["restartPolicy"] = "Always".into();
            }
            c
        };
        #[rustfmt::skip]
        let cases = [
            (vec![with("1", false)], vec![with("3", false)], "3"),
            (vec![with("1", false)], vec![with("500m", false)], "1"),
            (vec![with("1", false)], vec![with("1", true), with("2", false)], "3"),
            (vec![with("1", false), with("1", false)], vec![with("500m", true)], "2500m"),
        ];
        for (containers, init, expected) in cases {
            let (requests, _) = pod_totals(&containers, &init);
            assert_eq!(requests["cpu"].to_string(), expected, "{containers:?} {init:?}");
        }
    }
}
