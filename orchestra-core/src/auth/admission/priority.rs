//! Priority: pods get the integer priority of their PriorityClass.

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{Value, json};

use super::{AdmissionPlugin, AdmissionRequest, ObjectReader, Operation, ResourceRef};
use crate::api::{ApiError, ErrorTarget, FieldError};

const PRIORITY_CLASSES: ResourceRef<'static> = ResourceRef::new("scheduling.k8s.io", "v1", "priorityclasses");

/// The prefix of the names reserved for the built-in classes.
const SYSTEM_PREFIX: &str = "system-";

/// The namespace whose pods may use the built-in classes.
const SYSTEM_NAMESPACE: &str = "kube-system";

/// The highest value a class that is not built in may have.
const HIGHEST_USER_DEFINABLE_PRIORITY: i64 = 1_000_000_000;

/// The policy a pod gets when its class names none.
const DEFAULT_PREEMPTION_POLICY: &str = "PreemptLowerPriority";

/// The built-in classes: name, value, description.
const SYSTEM_CLASSES: [(&str, i64, &str); 2] = [
    (
        "system-node-critical",
        2_000_001_000,
        "Used for system critical pods that must not be moved from their current node.",
    ),
    (
        "system-cluster-critical",
        2_000_000_000,
        "Used for system critical pods that must run in the cluster, but can be moved to another node if necessary.",
    ),
];

/// The admission plugin that resolves pods' priorities, like upstream's
/// plugin of the same name.
///
/// - Pod creates get `spec.priority` and `spec.preemptionPolicy` from the
///   PriorityClass named by `spec.priorityClassName`; without a name, from
///   the class marked `globalDefault: true` (whose name they get too), else
///   priority 0. An unknown class, or a pod that sets a different priority
///   or preemption policy itself, is refused with 403. The built-in classes
///   `system-node-critical` and `system-cluster-critical` are known even when
///   not stored, and only pods in `kube-system` may use them.
/// - Pod updates keep the priority the create set.
/// - PriorityClass creates and updates: only one class may be the global
///   default (403); names starting with `system-` are reserved to the
///   built-in classes with their values, and other classes may not exceed
///   1000000000 (422, as upstream's validation).
///
/// The [`ApiServer`](crate::server::ApiServer) stores the built-in classes
/// ([`Priority::system_classes`]) when it starts.
///
/// ```
/// use std::sync::Arc;
/// use orchestra_core::auth::admission::{AdmissionChain, Priority, StaticObjects};
///
/// let chain = AdmissionChain::new().with(Priority::new(Arc::new(StaticObjects::new())));
/// assert_eq!(chain.names().collect::<Vec<_>>(), [Priority::NAME]);
/// assert_eq!(Priority::system_classes()[0]["value"], 2_000_001_000);
/// ```
#[derive(Clone)]
pub struct Priority {
    objects: Arc<dyn ObjectReader>,
}

impl Priority {
    /// The plugin's name.
    pub const NAME: &'static str = "Priority";

    /// The plugin, reading PriorityClasses from `objects`.
    pub fn new(objects: Arc<dyn ObjectReader>) -> Priority {
        Priority { objects }
    }

    /// The built-in PriorityClasses, as the server stores them.
    pub fn system_classes() -> Vec<Value> {
        SYSTEM_CLASSES.iter().map(|(name, value, description)| system_class(name, *value, description)).collect()
    }

    /// The class `name`: stored, or built in.
    async fn class(&self, name: &str) -> Result<Option<Arc<Value>>, ApiError> {
        if let Some(class) = self.objects.get(PRIORITY_CLASSES, None, name).await? {
            return Ok(Some(class));
        }
        Ok(SYSTEM_CLASSES
            .iter()
            .find(|(system, ..)| *system == name)
            .map(|(name, value, description)| Arc::new(system_class(name, *value, description))))
    }

    /// The class marked as the global default; of several, the lowest.
    async fn default_class(&self) -> Result<Option<Arc<Value>>, ApiError> {
        let classes = self.objects.list(PRIORITY_CLASSES, None).await?;
        Ok(classes.into_iter().filter(|c| c["globalDefault"] == true).min_by_key(|c| c["value"].as_i64()))
    }

    async fn admit_pod_create(&self, request: &mut AdmissionRequest<'_>) -> Result<(), ApiError> {
        let Some(pod) = request.object.as_ref() else { return Ok(()) };
        // The spec is looked up once: every lookup in a pod's JSON compares
        // keys along its map.
        let spec = &pod["spec"];
        let class_name = spec.get("priorityClassName").and_then(Value::as_str).unwrap_or_default().to_owned();
        let set_priority = spec.get("priority").and_then(Value::as_i64);
        let set_policy = spec.get("preemptionPolicy").and_then(Value::as_str).map(str::to_owned);
        let class = if class_name.is_empty() {
            self.default_class().await?
        } else {
            let Some(class) = self.class(&class_name).await? else {
                return Err(request.forbidden(format!("no PriorityClass with name {class_name} was found")));
            };
            let namespace = request.namespace.unwrap_or_default();
            if is_system_class(&class_name) && namespace != SYSTEM_NAMESPACE {
                return Err(request.forbidden(format!(
                    "pods with {class_name} priorityClass is not permitted in {namespace} namespace"
                )));
            }
            Some(class)
        };
        let priority = class.as_ref().and_then(|c| c["value"].as_i64()).unwrap_or(0);
        let policy = match &class {
            Some(class) => class["preemptionPolicy"].as_str().unwrap_or(DEFAULT_PREEMPTION_POLICY),
            None => set_policy.as_deref().unwrap_or(DEFAULT_PREEMPTION_POLICY),
        }
        .to_owned();
        if let Some(set) = set_priority.filter(|set| *set != priority) {
            return Err(request.forbidden(format!(
                "the integer value of priority ({set}) must not be provided in pod spec; \
                 priority admission controller computed {priority} from the given PriorityClass name"
            )));
        }
        if let Some(set) = set_policy.filter(|set| *set != policy) {
            return Err(request.forbidden(format!(
                "the string value of PreemptionPolicy ({set}) must not be provided in pod spec; \
                 priority admission controller computed {policy} from the given PriorityClass name"
            )));
        }
        let pod = request.object.as_mut().expect("checked above");
        let Some(spec) = pod.get_mut("spec").and_then(Value::as_object_mut) else { return Ok(()) };
        if let Some(class) = class.as_ref().filter(|_| class_name.is_empty()) {
            spec.insert("priorityClassName".into(), class["metadata"]["name"].clone());
        }
        spec.insert("priority".into(), priority.into());
        spec.insert("preemptionPolicy".into(), policy.into());
        Ok(())
    }

    async fn validate_class(&self, request: &AdmissionRequest<'_>) -> Result<(), ApiError> {
        let Some(class) = request.object.as_ref() else { return Ok(()) };
        let name = request.name;
        let value = class["value"].as_i64().unwrap_or(0);
        let global_default = class["globalDefault"] == true;
        let reserved = if name.starts_with(SYSTEM_PREFIX) {
            match SYSTEM_CLASSES.iter().find(|(system, ..)| *system == name) {
                None => Some(format!("{name} is not a known system priority class")),
                Some((_, system_value, _)) if *system_value != value => {
                    Some(format!("value of {name} PriorityClass must be {system_value}"))
                }
                Some(_) if global_default => Some(format!("{name} PriorityClass is not allowed to be global default")),
                Some(_) => None,
            }
            .map(|error| {
                forbidden_field(
                    "metadata.name",
                    format!(
                        "priority class names with '{SYSTEM_PREFIX}' prefix are reserved for system use only. \
                         error: {error}"
                    ),
                )
            })
        } else {
            (value > HIGHEST_USER_DEFINABLE_PRIORITY).then(|| {
                forbidden_field(
                    "value",
                    format!("maximum allowed value of a user defined priority is {HIGHEST_USER_DEFINABLE_PRIORITY}"),
                )
            })
        };
        if let Some(error) = reserved {
            let target = ErrorTarget {
                group: request.resource.group.clone(),
                resource: request.resource.plural.clone(),
                kind: request.resource.kind.clone(),
                name: name.to_owned(),
            };
            return Err(ApiError::invalid(&target, vec![error]));
        }
        if global_default && let Some(existing) = self.default_class().await? {
            let existing = existing["metadata"]["name"].as_str().unwrap_or_default();
            if request.operation == Operation::Create || existing != name {
                return Err(request.forbidden(format!(
                    "PriorityClass {existing} is already marked as default. Only one default can exist"
                )));
            }
        }
        Ok(())
    }
}

/// Upstream's `field.Forbidden`.
fn forbidden_field(field: &str, detail: String) -> FieldError {
    FieldError { reason: "FieldValueForbidden", field: field.to_owned(), message: format!("Forbidden: {detail}") }
}

fn is_system_class(name: &str) -> bool {
    SYSTEM_CLASSES.iter().any(|(system, ..)| *system == name)
}

fn system_class(name: &str, value: i64, description: &str) -> Value {
    json!({
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": name},
        "value": value,
        "globalDefault": false,
        "description": description,
        "preemptionPolicy": DEFAULT_PREEMPTION_POLICY,
    })
}

#[async_trait]
impl AdmissionPlugin for Priority {
    fn name(&self) -> &str {
        Self::NAME
    }

    fn handles(&self, operation: Operation) -> bool {
        matches!(operation, Operation::Create | Operation::Update)
    }

    async fn mutate(&self, request: &mut AdmissionRequest<'_>) -> Result<(), ApiError> {
        if !request.writes("", "pods") {
            return Ok(());
        }
        if request.operation == Operation::Create {
            return self.admit_pod_create(request).await;
        }
        // An update keeps what the create set (validation refuses changes).
        let (Some(pod), Some(old)) = (request.object.as_mut(), request.old_object) else { return Ok(()) };
        super::keep_unset_spec_fields(pod, old, &["priority", "preemptionPolicy"]);
        Ok(())
    }

    async fn validate(&self, request: &AdmissionRequest<'_>) -> Result<(), ApiError> {
        match request.writes("scheduling.k8s.io", "priorityclasses") {
            true => self.validate_class(request).await,
            false => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::ResourceInfo;
    use crate::auth::UserInfo;
    use crate::auth::admission::StaticObjects;
    use crate::auth::admission::testing::{admit, pods};

    fn class(name: &str, value: i64, global_default: bool, policy: Option<&str>) -> Value {
        let mut class = json!({"metadata": {"name": name}, "value": value, "globalDefault": global_default});
        if let Some(policy) = policy {
            class["preemptionPolicy"] = policy.into();
        }
        class
    }

    fn plugin(classes: &[Value]) -> Priority {
        let objects = StaticObjects::new();
        for class in classes {
            objects.insert(PRIORITY_CLASSES, class.clone());
        }
        Priority::new(Arc::new(objects))
    }

    /// What a pod create ends up with: (class name, priority, policy), or the refusal.
    type Resolved = Result<(Option<&'static str>, i64, &'static str), String>;

    #[test]
    fn pod_creates_get_the_priority_of_their_class() {
        let high = [class("high", 1000, false, Some("Never"))];
        let high_and_low_default = [high[0].clone(), class("low", 10, true, None)];
        let forbidden = |m: &str| Err(format!(r#"pods "p" is forbidden: {m}"#));
        #[rustfmt::skip]
        let cases: [(&[Value], &str, Value, Resolved); 10] = [
            (&[], "default", json!({}), Ok((None, 0, "PreemptLowerPriority"))),
            (&high, "default", json!({"priorityClassName": "high"}), Ok((Some("high"), 1000, "Never"))),
            (&high_and_low_default, "default", json!({}), Ok((Some("low"), 10, "PreemptLowerPriority"))),
            (&high, "default", json!({"priorityClassName": "high", "priority": 1000}), Ok((Some("high"), 1000, "Never"))),
            (&[], "default", json!({"priorityClassName": "missing"}), forbidden("no PriorityClass with name missing was found")),
            (&high, "default", json!({"priorityClassName": "high", "priority": 5}),
             forbidden("the integer value of priority (5) must not be provided in pod spec; priority admission controller computed 1000 from the given PriorityClass name")),
            (&high, "default", json!({"priorityClassName": "high", "preemptionPolicy": "PreemptLowerPriority"}),
             forbidden("the string value of PreemptionPolicy (PreemptLowerPriority) must not be provided in pod spec; priority admission controller computed Never from the given PriorityClass name")),
            // The built-in classes are known unstored, in kube-system only.
            (&[], "kube-system", json!({"priorityClassName": "system-node-critical"}), Ok((Some("system-node-critical"), 2_000_001_000, "PreemptLowerPriority"))),
            (&[], "kube-system", json!({"priorityClassName": "system-cluster-critical"}), Ok((Some("system-cluster-critical"), 2_000_000_000, "PreemptLowerPriority"))),
            (&[], "default", json!({"priorityClassName": "system-cluster-critical"}),
             forbidden("pods with system-cluster-critical priorityClass is not permitted in default namespace")),
        ];
        let user = UserInfo::anonymous();
        for (classes, namespace, spec, expected) in cases {
            let pod = json!({"metadata": {"name": "p"}, "spec": spec});
            let (admitted, _) =
                admit(&plugin(classes), Operation::Create, &pods(), Some(namespace), &user, Some(pod), None);
            let outcome = admitted.map_err(|e| e.message).map(|pod| {
                let spec = pod.unwrap()["spec"].clone();
                (
                    spec["priorityClassName"].as_str().map(str::to_owned),
                    spec["priority"].as_i64().unwrap(),
                    spec["preemptionPolicy"].as_str().unwrap().to_owned(),
                )
            });
            let expected =
                expected.map(|(name, priority, policy)| (name.map(str::to_owned), priority, policy.to_owned()));
            assert_eq!(outcome, expected, "{spec} in {namespace}");
        }
    }

    #[test]
    fn pod_updates_keep_their_priority() {
        let old = json!({"metadata": {"name": "p"}, "spec": {"priority": 7, "preemptionPolicy": "Never"}});
        let new = json!({"metadata": {"name": "p", "labels": {"a": "b"}}, "spec": {}});
        let user = UserInfo::anonymous();
        let (admitted, _) =
            admit(&plugin(&[]), Operation::Update, &pods(), Some("default"), &user, Some(new), Some(&old));
        let spec = admitted.unwrap().unwrap()["spec"].clone();
        assert_eq!(spec, json!({"priority": 7, "preemptionPolicy": "Never"}));
    }

    /// What admission of one write answers: `Ok`, or the error's code and message.
    type Outcome = Result<(), (u16, &'static str)>;

    #[test]
    fn priority_classes_are_validated() {
        let classes = ResourceInfo::new("scheduling.k8s.io", "v1", "PriorityClass", "priorityclasses", false);
        let existing_default = [class("base", 1, true, None)];
        #[rustfmt::skip]
        let cases: [(Operation, &[Value], Value, Outcome); 8] = [
            (Operation::Create, &[], class("high", 1000, true, None), Ok(())),
            (Operation::Create, &existing_default, class("high", 1000, false, None), Ok(())),
            (Operation::Create, &existing_default, class("high", 1000, true, None),
             Err((403, r#"priorityclasses.scheduling.k8s.io "high" is forbidden: PriorityClass base is already marked as default. Only one default can exist"#))),
            // The default itself may be updated.
            (Operation::Update, &existing_default, class("base", 2, true, None), Ok(())),
            (Operation::Create, &[], class("system-mine", 10, false, None),
             Err((422, r#"PriorityClass "system-mine" is invalid: metadata.name: Forbidden: priority class names with 'system-' prefix are reserved for system use only. error: system-mine is not a known system priority class"#))),
            (Operation::Update, &[], class("system-node-critical", 10, false, None),
             Err((422, r#"PriorityClass "system-node-critical" is invalid: metadata.name: Forbidden: priority class names with 'system-' prefix are reserved for system use only. error: value of system-node-critical PriorityClass must be 2000001000"#))),
            (Operation::Update, &[], class("system-node-critical", 2_000_001_000, false, None), Ok(())),
            (Operation::Create, &[], class("huge", 2_000_000_000, false, None),
             Err((422, r#"PriorityClass "huge" is invalid: value: Forbidden: maximum allowed value of a user defined priority is 1000000000"#))),
        ];
        let user = UserInfo::anonymous();
        for (operation, stored, object, expected) in cases {
            let (admitted, _) =
                admit(&plugin(stored), operation, &classes, None, &user, Some(object.clone()), Some(&object));
            let outcome = admitted.as_ref().map(|_| ()).map_err(|e| (e.code, e.message.as_str()));
            assert_eq!(outcome, expected, "{operation:?} {object}");
        }
    }
}
