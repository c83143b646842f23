//! Upstream's default ClusterRoles and ClusterRoleBindings, and [`ensure`],
//! which creates them when the API server starts and reconciles them as
//! upstream does.
//!
//! Reconciling never removes anything: a default whose stored copy lacks
//! some of its rules, subjects, labels or annotations gets them added,
//! unless the stored copy is annotated [`AUTOUPDATE_ANNOTATION`]`: "false"`.
//! A binding whose `roleRef` changed is created again.
//!
//! `admin`, `edit` and `view` aggregate the roles labelled
//! `rbac.authorization.k8s.io/aggregate-to-<name>: "true"`; here they are
//! written with the rules of the default roles so labelled (`view` into
//! `edit`, `edit` into `admin`), which is what upstream's aggregation
//! controller makes of them.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::rbac::v1::{AggregationRule, ClusterRole, ClusterRoleBinding, PolicyRule, RoleRef, Subject};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use orchestra_store::{Error as StoreError, Store};
use serde_json::Value;

pub mod certificates;
pub mod controllers;

use super::GROUP;
use crate::api::{ApiError, Registry};

/// The annotation whose value `"false"` keeps [`ensure`] from changing a
/// default role or binding; the defaults carry it as `"true"`.
pub const AUTOUPDATE_ANNOTATION: &str = "rbac.authorization.kubernetes.io/autoupdate";

/// The label every default role and binding carries.
pub const BOOTSTRAPPING_LABEL: (&str, &str) = ("kubernetes.io/bootstrapping", "rbac-defaults");

const READ: &[&str] = &["get", "list", "watch"];
const WRITE: &[&str] = &["create", "delete", "deletecollection", "patch", "update"];
const READ_WRITE: &[&str] = &["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"];
const EVENTS: &[&str] = &["create", "patch", "update"];

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| (*s).to_owned()).collect()
}

/// `verbs` on `resources` of `groups`.
fn rule(verbs: &[&str], groups: &[&str], resources: &[&str]) -> PolicyRule {
    PolicyRule {
        verbs: strings(verbs),
        api_groups: Some(strings(groups)),
        resources: Some(strings(resources)),
        ..Default::default()
    }
}

/// `verbs` on the objects `names` of `resources` of `groups`.
fn named(verbs: &[&str], groups: &[&str], resources: &[&str], names: &[&str]) -> PolicyRule {
    PolicyRule { resource_names: Some(strings(names)), ..rule(verbs, groups, resources) }
}

/// `verbs` on the non-resource `urls`.
fn urls(verbs: &[&str], urls: &[&str]) -> PolicyRule {
    PolicyRule { verbs: strings(verbs), non_resource_urls: Some(strings(urls)), ..Default::default() }
}

fn metadata(name: &str, labels: &[(&str, &str)]) -> ObjectMeta {
    let mut all: BTreeMap<String, String> =
        BTreeMap::from([(BOOTSTRAPPING_LABEL.0.into(), BOOTSTRAPPING_LABEL.1.into())]);
    all.extend(labels.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())));
    ObjectMeta {
        name: Some(name.into()),
        labels: Some(all),
        annotations: Some(BTreeMap::from([(AUTOUPDATE_ANNOTATION.into(), "true".into())])),
        ..Default::default()
    }
}

fn role(name: &str, labels: &[(&str, &str)], rules: Vec<PolicyRule>) -> ClusterRole {
    ClusterRole { metadata: metadata(name, labels), rules: Some(rules), aggregation_rule: None }
}

/// A role aggregating those labelled `rbac.authorization.k8s.io/aggregate-to-<name>: "true"`.
fn aggregated(name: &str, labels: &[(&str, &str)]) -> ClusterRole {
    let selector = LabelSelector {
        match_labels: Some(BTreeMap::from([(format!("{GROUP}/aggregate-to-{name}"), "true".to_owned())])),
        ..Default::default()
    };
    ClusterRole {
        metadata: metadata(name, labels),
        rules: None,
        aggregation_rule: Some(AggregationRule { cluster_role_selectors: Some(vec![selector]) }),
    }
}

const TO_ADMIN: (&str, &str) = ("rbac.authorization.k8s.io/aggregate-to-admin", "true");
const TO_EDIT: (&str, &str) = ("rbac.authorization.k8s.io/aggregate-to-edit", "true");
const TO_VIEW: (&str, &str) = ("rbac.authorization.k8s.io/aggregate-to-view", "true");

/// Upstream's default ClusterRoles, as stored: `admin`, `edit` and `view`
/// with their aggregation rules and no rules of their own; the
/// controllers' roles ([`controllers`]) last.
pub fn cluster_roles() -> Vec<ClusterRole> {
    let mut roles = vec![
        aggregated("admin", &[]),
        role("cluster-admin", &[], vec![rule(&["*"], &["*"], &["*"]), urls(&["*"], &["*"])]),
        aggregated("edit", &[TO_ADMIN]),
        role(
            "system:aggregate-to-admin",
            &[TO_ADMIN],
            vec![
                rule(&["create"], &["authorization.k8s.io"], &["localsubjectaccessreviews"]),
                rule(READ_WRITE, &[GROUP], &["rolebindings", "roles"]),
            ],
        ),
        role(
            "system:aggregate-to-edit",
            &[TO_EDIT],
            vec![
                rule(
                    READ,
                    &[""],
                    &["pods/attach", "pods/exec", "pods/portforward", "pods/proxy", "secrets", "services/proxy"],
                ),
                rule(&["impersonate"], &[""], &["serviceaccounts"]),
                rule(WRITE, &[""], &["pods", "pods/attach", "pods/exec", "pods/portforward", "pods/proxy"]),
                rule(&["create"], &[""], &["pods/eviction"]),
                rule(
                    WRITE,
                    &[""],
                    &[
                        "configmaps",
                        "events",
                        "persistentvolumeclaims",
                        "replicationcontrollers",
                        "replicationcontrollers/scale",
                        "secrets",
                        "serviceaccounts",
                        "services",
                        "services/proxy",
                    ],
                ),
                rule(&["create"], &[""], &["serviceaccounts/token"]),
                rule(
                    WRITE,
                    &["apps"],
                    &[
                        "daemonsets",
                        "deployments",
                        "deployments/rollback",
                        "deployments/scale",
                        "replicasets",
                        "replicasets/scale",
                        "statefulsets",
                        "statefulsets/scale",
                    ],
                ),
                rule(WRITE, &["autoscaling"], &["horizontalpodautoscalers"]),
                rule(WRITE, &["batch"], &["cronjobs", "jobs"]),
                rule(
                    WRITE,
                    &["extensions"],
                    &[
                        "daemonsets",
                        "deployments",
                        "deployments/rollback",
                        "deployments/scale",
                        "ingresses",
                        "networkpolicies",
                        "replicasets",
                        "replicasets/scale",
                        "replicationcontrollers/scale",
                    ],
                ),
                rule(WRITE, &["policy"], &["poddisruptionbudgets"]),
                rule(WRITE, &["networking.k8s.io"], &["ingresses", "networkpolicies"]),
                rule(READ_WRITE, &["coordination.k8s.io"], &["leases"]),
            ],
        ),
        role(
            "system:aggregate-to-view",
            &[TO_VIEW],
            vec![
                rule(
                    READ,
                    &[""],
                    &[
                        "configmaps",
                        "endpoints",
                        "persistentvolumeclaims",
                        "persistentvolumeclaims/status",
                        "pods",
                        "replicationcontrollers",
                        "replicationcontrollers/scale",
                        "serviceaccounts",
                        "services",
                        "services/status",
                    ],
                ),
                rule(
                    READ,
                    &[""],
                    &[
                        "bindings",
                        "events",
                        "limitranges",
                        "namespaces/status",
                        "pods/log",
                        "pods/status",
                        "replicationcontrollers/status",
                        "resourcequotas",
                        "resourcequotas/status",
                    ],
                ),
                rule(READ, &[""], &["namespaces"]),
                rule(READ, &["discovery.k8s.io"], &["endpointslices"]),
                rule(
                    READ,
                    &["apps"],
                    &[
                        "controllerrevisions",
                        "daemonsets",
                        "daemonsets/status",
                        "deployments",
                        "deployments/scale",
                        "deployments/status",
                        "replicasets",
                        "replicasets/scale",
                        "replicasets/status",
                        "statefulsets",
                        "statefulsets/scale",
                        "statefulsets/status",
                    ],
                ),
                rule(READ, &["autoscaling"], &["horizontalpodautoscalers", "horizontalpodautoscalers/status"]),
                rule(READ, &["batch"], &["cronjobs", "cronjobs/status", "jobs", "jobs/status"]),
                rule(
                    READ,
                    &["extensions"],
                    &[
                        "daemonsets",
                        "daemonsets/status",
                        "deployments",
                        "deployments/scale",
                        "deployments/status",
                        "ingresses",
                        "ingresses/status",
                        "networkpolicies",
                        "replicasets",
                        "replicasets/scale",
                        "replicasets/status",
                        "replicationcontrollers/scale",
                    ],
                ),
                rule(READ, &["policy"], &["poddisruptionbudgets", "poddisruptionbudgets/status"]),
                rule(READ, &["networking.k8s.io"], &["ingresses", "ingresses/status", "networkpolicies"]),
            ],
        ),
        role(
            "system:basic-user",
            &[],
            vec![
                rule(&["create"], &["authorization.k8s.io"], &["selfsubjectaccessreviews", "selfsubjectrulesreviews"]),
                rule(&["create"], &["authentication.k8s.io"], &["selfsubjectreviews"]),
            ],
        ),
        role(
            "system:discovery",
            &[],
            vec![urls(
                &["get"],
                &[
                    "/api",
                    "/api/*",
                    "/apis",
                    "/apis/*",
                    "/healthz",
                    "/livez",
                    "/openapi",
                    "/openapi/*",
                    "/readyz",
                    "/version",
                    "/version/",
                ],
            )],
        ),
        role(
            "system:kube-controller-manager",
            &[],
            vec![
                rule(EVENTS, &["", "events.k8s.io"], &["events"]),
                rule(&["create"], &["coordination.k8s.io"], &["leases"]),
                named(&["get", "update"], &["coordination.k8s.io"], &["leases"], &["kube-controller-manager"]),
                rule(&["create"], &[""], &["secrets", "serviceaccounts"]),
                rule(&["delete"], &[""], &["secrets"]),
                rule(&["get"], &[""], &["configmaps", "namespaces", "secrets", "serviceaccounts"]),
                rule(&["update"], &[""], &["secrets", "serviceaccounts"]),
                rule(&["create"], &["authentication.k8s.io"], &["tokenreviews"]),
                rule(&["create"], &["authorization.k8s.io"], &["subjectaccessreviews"]),
                rule(&["list", "watch"], &["*"], &["*"]),
                rule(&["create"], &[""], &["serviceaccounts/token"]),
            ],
        ),
        role(
            "system:kube-scheduler",
            &[],
            vec![
                rule(EVENTS, &["", "events.k8s.io"], &["events"]),
                rule(&["create"], &["coordination.k8s.io"], &["leases"]),
                named(&["get", "update"], &["coordination.k8s.io"], &["leases"], &["kube-scheduler"]),
                rule(READ, &[""], &["nodes"]),
                rule(&["delete", "get", "list", "watch"], &[""], &["pods"]),
                rule(&["create"], &[""], &["bindings", "pods/binding"]),
                rule(&["patch", "update"], &[""], &["pods/status"]),
                rule(READ, &[""], &["replicationcontrollers", "services"]),
                rule(READ, &["apps", "extensions"], &["replicasets"]),
                rule(READ, &["apps"], &["statefulsets"]),
                rule(READ, &["policy"], &["poddisruptionbudgets"]),
                rule(READ, &[""], &["persistentvolumeclaims", "persistentvolumes"]),
                rule(&["create"], &["authentication.k8s.io"], &["tokenreviews"]),
                rule(&["create"], &["authorization.k8s.io"], &["subjectaccessreviews"]),
                rule(READ, &["storage.k8s.io"], &["csinodes"]),
                rule(READ, &[""], &["namespaces"]),
                rule(READ, &["storage.k8s.io"], &["csidrivers"]),
                rule(READ, &["storage.k8s.io"], &["csistoragecapacities"]),
            ],
        ),
        role(
            "system:monitoring",
            &[],
            vec![urls(
                &["get"],
                &["/healthz", "/healthz/*", "/livez", "/livez/*", "/metrics", "/metrics/slis", "/readyz", "/readyz/*"],
            )],
        ),
        role(
            "system:node",
            &[],
            vec![
                rule(&["create"], &["authentication.k8s.io"], &["tokenreviews"]),
                rule(&["create"], &["authorization.k8s.io"], &["localsubjectaccessreviews", "subjectaccessreviews"]),
                rule(READ, &[""], &["services"]),
                rule(&["create", "get", "list", "watch"], &[""], &["nodes"]),
                rule(&["patch", "update"], &[""], &["nodes/status"]),
                rule(&["patch", "update"], &[""], &["nodes"]),
                rule(EVENTS, &[""], &["events"]),
                rule(READ, &[""], &["pods"]),
                rule(&["create", "delete"], &[""], &["pods"]),
                rule(&["patch", "update"], &[""], &["pods/status"]),
                rule(&["create"], &[""], &["pods/eviction"]),
                rule(READ, &[""], &["configmaps", "secrets"]),
                rule(&["get"], &[""], &["persistentvolumeclaims", "persistentvolumes"]),
                rule(&["get"], &[""], &["endpoints"]),
                rule(&["create", "get", "list", "watch"], &["certificates.k8s.io"], &["certificatesigningrequests"]),
                rule(&["create", "delete", "get", "patch", "update"], &["coordination.k8s.io"], &["leases"]),
                rule(&["get"], &["storage.k8s.io"], &["volumeattachments"]),
                rule(&["create"], &[""], &["serviceaccounts/token"]),
                rule(&["get", "patch", "update"], &[""], &["persistentvolumeclaims/status"]),
                rule(READ, &["storage.k8s.io"], &["csidrivers"]),
                rule(&["create", "delete", "get", "patch", "update"], &["storage.k8s.io"], &["csinodes"]),
                rule(READ, &["node.k8s.io"], &["runtimeclasses"]),
            ],
        ),
        role(
            "system:node-proxier",
            &[],
            vec![
                rule(&["list", "watch"], &[""], &["endpoints", "services"]),
                rule(READ, &[""], &["nodes"]),
                rule(EVENTS, &["", "events.k8s.io"], &["events"]),
                rule(&["list", "watch"], &["discovery.k8s.io"], &["endpointslices"]),
            ],
        ),
        role(
            "system:public-info-viewer",
            &[],
            vec![urls(&["get"], &["/healthz", "/livez", "/readyz", "/version", "/version/"])],
        ),
        aggregated("view", &[TO_EDIT]),
    ];
    roles.extend(certificates::cluster_roles());
    roles.extend(controllers::cluster_roles());
    roles
}

fn subject(kind: &str, name: &str) -> Subject {
    Subject { api_group: Some(GROUP.into()), kind: kind.into(), name: name.into(), namespace: None }
}

fn binding(name: &str, subjects: Vec<Subject>) -> ClusterRoleBinding {
    ClusterRoleBinding {
        metadata: metadata(name, &[]),
        role_ref: RoleRef { api_group: GROUP.into(), kind: "ClusterRole".into(), name: name.into() },
        subjects: Some(subjects),
    }
}

/// Upstream's default ClusterRoleBindings of [`cluster_roles`], each named
/// after its role. `system:node` names nobody (upstream's Node authorizer
/// authorizes node agents).
pub fn cluster_role_bindings() -> Vec<ClusterRoleBinding> {
    let authenticated = || subject("Group", "system:authenticated");
    let mut bindings = vec![
        binding("cluster-admin", vec![subject("Group", "system:masters")]),
        binding("system:basic-user", vec![authenticated()]),
        binding("system:discovery", vec![authenticated()]),
        binding("system:kube-controller-manager", vec![subject("User", "system:kube-controller-manager")]),
        binding("system:kube-scheduler", vec![subject("User", "system:kube-scheduler")]),
        binding("system:monitoring", vec![subject("Group", "system:monitoring")]),
        binding("system:node", vec![]),
        binding("system:node-proxier", vec![subject("User", "system:kube-proxy")]),
        binding("system:public-info-viewer", vec![authenticated(), subject("Group", "system:unauthenticated")]),
    ];
    bindings.extend(certificates::cluster_role_bindings());
    bindings.extend(controllers::cluster_role_bindings());
    bindings
}

/// [`cluster_roles`] with the rules of each aggregating role filled in from
/// the roles its selectors match, transitively.
pub fn aggregated_cluster_roles() -> Vec<ClusterRole> {
    let roles = cluster_roles();
    let mut filled = roles.clone();
    for role in &mut filled {
        if role.aggregation_rule.is_some() {
            let mut rules = Vec::new();
            collect_rules(&roles, role, &mut rules, 0);
            role.rules = Some(rules);
        }
    }
    filled
}

fn collect_rules(roles: &[ClusterRole], role: &ClusterRole, into: &mut Vec<PolicyRule>, depth: usize) {
    let Some(aggregation) = &role.aggregation_rule else {
        for rule in role.rules.iter().flatten() {
            if !into.contains(rule) {
                into.push(rule.clone());
            }
        }
        return;
    };
    // Aggregation rules of the defaults nest three deep; the bound keeps a
    // cycle from recursing forever.
    if depth > roles.len() {
        return;
    }
    for selector in aggregation.cluster_role_selectors.iter().flatten() {
        let wanted = selector.match_labels.clone().unwrap_or_default();
        for other in roles {
            let labels = other.metadata.labels.clone().unwrap_or_default();
            if other.metadata.name != role.metadata.name && wanted.iter().all(|(k, v)| labels.get(k) == Some(v)) {
                collect_rules(roles, other, into, depth + 1);
            }
        }
    }
}

/// Creates the default ClusterRoles ([`aggregated_cluster_roles`]) and
/// ClusterRoleBindings ([`cluster_role_bindings`]) that `store` lacks and
/// reconciles the others (see the [module](self) documentation), at the
/// keys `registry` gives them (nothing if it does not serve RBAC's kinds).
/// [`ApiServerBuilder::rbac_bootstrap`](crate::server::ApiServerBuilder::rbac_bootstrap)
/// runs it when the server starts.
///
/// # Errors
/// When the store fails, or holds a default that does not decode.
pub async fn ensure(store: &Arc<dyn Store>, registry: &Registry) -> Result<(), ApiError> {
    let (Some(roles), Some(bindings)) =
        (registry.get(GROUP, "v1", "clusterroles"), registry.get(GROUP, "v1", "clusterrolebindings"))
    else {
        return Ok(());
    };
    for role in aggregated_cluster_roles() {
        let name = role.metadata.name.clone().unwrap_or_default();
        let expected = serde_json::to_value(&role).map_err(ApiError::internal)?;
        reconcile(store, &roles.storage_key(None, &name), expected, reconcile_role).await?;
    }
    for binding in cluster_role_bindings() {
        let name = binding.metadata.name.clone().unwrap_or_default();
        let expected = serde_json::to_value(&binding).map_err(ApiError::internal)?;
        reconcile(store, &bindings.storage_key(None, &name), expected, reconcile_binding).await?;
    }
    Ok(())
}

/// What reconciling a stored default comes to.
#[derive(Debug, PartialEq)]
enum Outcome {
    /// Nothing to change.
    Keep,
    /// Write this object instead.
    Update(Value),
    /// Delete the stored object and create the expected one.
    Recreate,
}

/// Creates `expected` at `key`, or reconciles what is stored there with
/// `merge`; retries on a concurrent write.
async fn reconcile(
    store: &Arc<dyn Store>,
    key: &str,
    expected: Value,
    merge: fn(&Value, &Value) -> Outcome,
) -> Result<(), ApiError> {
    for _ in 0..5 {
        let Some(kv) = store.get(key).await.map_err(ApiError::internal)? else {
            match store.create(key, new_object(&expected)?, None).await {
                Ok(_) => return Ok(()),
                Err(StoreError::AlreadyExists { .. }) => continue,
                Err(e) => return Err(ApiError::internal(e)),
            }
        };
        let existing: Value = serde_json::from_slice(&kv.value).map_err(ApiError::internal)?;
        let written = match merge(&existing, &expected) {
            Outcome::Keep => return Ok(()),
            Outcome::Update(object) => {
                let bytes = serde_json::to_vec(&object).map_err(ApiError::internal)?.into();
                store.update(key, bytes, kv.mod_revision, None).await.map(drop)
            }
            Outcome::Recreate => match store.delete(key, Some(kv.mod_revision)).await {
                Ok(_) => continue,
                Err(e) => Err(e),
            },
        };
        match written {
            Ok(()) => return Ok(()),
            Err(StoreError::Conflict { .. } | StoreError::NotFound { .. }) => continue,
            Err(e) => return Err(ApiError::internal(e)),
        }
    }
    Err(ApiError::internal(format!("{key} kept changing while the default RBAC policy was being reconciled")))
}

/// `expected` as stored: with a UID and a creation time.
fn new_object(expected: &Value) -> Result<bytes::Bytes, ApiError> {
    let mut object = expected.clone();
    object["metadata"]["uid"] = uuid::Uuid::new_v4().to_string().into();
    object["metadata"]["creationTimestamp"] = crate::api::meta::now_rfc3339().into();
    Ok(serde_json::to_vec(&object).map_err(ApiError::internal)?.into())
}

/// Whether `existing` is protected from reconciling.
fn protected(existing: &Value) -> bool {
    existing.pointer("/metadata/annotations").and_then(|a| a.get(AUTOUPDATE_ANNOTATION)).and_then(Value::as_str)
        == Some("false")
}

/// Adds to the array `existing[field]` the items of `expected[field]` it
/// lacks; returns whether it added any.
fn add_missing(existing: &mut Value, expected: &Value, field: &str) -> bool {
    let wanted = expected.get(field).and_then(Value::as_array).cloned().unwrap_or_default();
    if wanted.is_empty() {
        return false;
    }
    let have = existing[field].as_array().cloned().unwrap_or_default();
    let missing: Vec<Value> = wanted.into_iter().filter(|item| !have.contains(item)).collect();
    if missing.is_empty() {
        return false;
    }
    existing[field] = Value::Array(have.into_iter().chain(missing).collect());
    true
}

/// Adds the labels and annotations of `expected` that `existing` lacks
/// (those it has keep their values); returns whether it added any.
fn add_missing_metadata(existing: &mut Value, expected: &Value) -> bool {
    let mut changed = false;
    for field in ["labels", "annotations"] {
        let Some(wanted) = expected["metadata"].get(field).and_then(Value::as_object) else { continue };
        for (key, value) in wanted {
            let have = &mut existing["metadata"][field];
            if have.get(key).is_none() {
                have[key] = value.clone();
                changed = true;
            }
        }
    }
    changed
}

/// A role: the missing rules, aggregation selectors and metadata added.
/// Rules are compared whole: a stored rule that grants more than a default
/// one but differs from it leaves the default one added alongside.
fn reconcile_role(existing: &Value, expected: &Value) -> Outcome {
    if protected(existing) {
        return Outcome::Keep;
    }
    let mut object = existing.clone();
    let mut changed = add_missing_metadata(&mut object, expected);
    changed |= add_missing(&mut object, expected, "rules");
    if let Some(wanted) = expected.get("aggregationRule") {
        let selectors = &mut object["aggregationRule"];
        changed |= add_missing(selectors, wanted, "clusterRoleSelectors");
    }
    if changed { Outcome::Update(object) } else { Outcome::Keep }
}

/// A binding: created again when its `roleRef` changed, else the missing
/// subjects and metadata added.
fn reconcile_binding(existing: &Value, expected: &Value) -> Outcome {
    if protected(existing) {
        return Outcome::Keep;
    }
    if existing.get("roleRef") != expected.get("roleRef") {
        return Outcome::Recreate;
    }
    let mut object = existing.clone();
    let mut changed = add_missing_metadata(&mut object, expected);
    changed |= add_missing(&mut object, expected, "subjects");
    if changed { Outcome::Update(object) } else { Outcome::Keep }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::auth::rbac::rules::rule_allows;
    use crate::auth::rbac::rules::tests::request;

    fn role_named(roles: &[ClusterRole], name: &str) -> ClusterRole {
        roles.iter().find(|r| r.metadata.name.as_deref() == Some(name)).cloned().unwrap()
    }

    #[test]
    fn defaults_are_labelled_annotated_and_bound() {
        let roles = cluster_roles();
        let names: Vec<_> = roles.iter().map(|r| r.metadata.name.clone().unwrap()).collect();
        for name in [
            "cluster-admin",
            "admin",
            "edit",
            "view",
            "system:basic-user",
            "system:discovery",
            "system:public-info-viewer",
            "system:kube-scheduler",
            "system:kube-controller-manager",
            "system:node",
            "system:node-proxier",
            "system:monitoring",
        ] {
            assert!(names.iter().any(|n| n == name), "{name}");
        }
        for role in &roles {
            let metadata = &role.metadata;
            assert_eq!(metadata.annotations.as_ref().unwrap()[AUTOUPDATE_ANNOTATION], "true");
            assert_eq!(metadata.labels.as_ref().unwrap()[BOOTSTRAPPING_LABEL.0], BOOTSTRAPPING_LABEL.1);
        }
        assert_eq!(role_named(&roles, "view").metadata.labels.unwrap()[TO_EDIT.0], "true");
        assert_eq!(role_named(&roles, "edit").metadata.labels.unwrap()[TO_ADMIN.0], "true");
        // Every binding refers to a default role.
        for binding in cluster_role_bindings() {
            assert!(names.contains(&binding.role_ref.name), "{}", binding.role_ref.name);
        }
        let admin = cluster_role_bindings().into_iter().find(|b| b.role_ref.name == "cluster-admin").unwrap();
        assert_eq!(admin.subjects.unwrap(), [subject("Group", "system:masters")]);
    }

    #[test]
    fn aggregated_roles_hold_what_they_select() {
        let roles = aggregated_cluster_roles();
        let allows = |name: &str, verb: &str, group: &str, resource: &str| {
            let role = role_named(&roles, name);
            let attributes = request(verb, group, resource, "");
            role.rules.unwrap().iter().any(|rule| rule_allows(rule, &attributes))
        };
        let cases = [
            ("view", "list", "", "pods", true),
            ("view", "list", "", "secrets", false),
            ("view", "create", "", "pods", false),
            ("view", "get", "", "pods/log", true),
            ("edit", "list", "", "pods", true),
            ("edit", "list", "", "secrets", true),
            ("edit", "create", "apps", "deployments", true),
            ("edit", "create", GROUP, "rolebindings", false),
            ("admin", "create", GROUP, "rolebindings", true),
            ("admin", "delete", "batch", "jobs", true),
            ("admin", "create", "authorization.k8s.io", "localsubjectaccessreviews", true),
            ("admin", "list", "", "nodes", false),
            ("system:node-proxier", "watch", "discovery.k8s.io", "endpointslices", true),
            ("system:kube-scheduler", "create", "", "pods/binding", true),
            ("system:node-bootstrapper", "create", "certificates.k8s.io", "certificatesigningrequests", true),
            ("system:node-bootstrapper", "update", "certificates.k8s.io", "certificatesigningrequests", false),
            (certificates::NODE_CLIENT, "create", "certificates.k8s.io", "certificatesigningrequests/nodeclient", true),
            (
                certificates::SELF_NODE_CLIENT,
                "create",
                "certificates.k8s.io",
                "certificatesigningrequests/selfnodeclient",
                true,
            ),
            (
                certificates::SELF_NODE_CLIENT,
                "create",
                "certificates.k8s.io",
                "certificatesigningrequests/nodeclient",
                false,
            ),
        ];
        for (role, verb, group, resource, allowed) in cases {
            assert_eq!(allows(role, verb, group, resource), allowed, "{role}: {verb} {group}/{resource}");
        }
        // Roles without aggregation rules are unchanged.
        assert_eq!(role_named(&roles, "cluster-admin"), role_named(&cluster_roles(), "cluster-admin"));
    }

    #[test]
    fn reconciling_adds_what_is_missing_unless_protected() {
        let expected = serde_json::to_value(role_named(&aggregated_cluster_roles(), "system:basic-user")).unwrap();
        let cases = [
            // Identical: nothing to do.
            (expected.clone(), false),
            // A rule removed: added back, the extra rule kept.
            (
                json!({"metadata": {"name": "system:basic-user", "labels": {"mine": "yes"}, "annotations": {AUTOUPDATE_ANNOTATION: "true"}},
                       "rules": [{"verbs": ["get"], "apiGroups": [""], "resources": ["pods"]}]}),
                true,
            ),
            // Protected.
            (
                json!({"metadata": {"name": "system:basic-user", "annotations": {AUTOUPDATE_ANNOTATION: "false"}}, "rules": []}),
                false,
            ),
        ];
        for (existing, changes) in cases {
            match reconcile_role(&existing, &expected) {
                Outcome::Keep => assert!(!changes, "{existing}"),
                Outcome::Update(object) => {
                    assert!(changes, "{existing}");
                    let rules = object["rules"].as_array().unwrap();
                    assert_eq!(rules.len(), 3);
                    assert_eq!(rules[0]["resources"], json!(["pods"]));
                    assert_eq!(object["metadata"]["labels"]["mine"], "yes");
                    assert_eq!(object["metadata"]["labels"][BOOTSTRAPPING_LABEL.0], BOOTSTRAPPING_LABEL.1);
                }
                Outcome::Recreate => panic!("roles are not recreated"),
            }
        }

        let expected = serde_json::to_value(&cluster_role_bindings()[0]).unwrap();
        assert_eq!(reconcile_binding(&expected, &expected), Outcome::Keep);
        let mut other_role = expected.clone();
        other_role["roleRef"]["name"] = "view".into();
        assert_eq!(reconcile_binding(&other_role, &expected), Outcome::Recreate);
        let mut no_subjects = expected.clone();
        no_subjects["subjects"] = json!([{"kind": "User", "name": "me"}]);
        let Outcome::Update(object) = reconcile_binding(&no_subjects, &expected) else { panic!("subjects added") };
        assert_eq!(object["subjects"].as_array().unwrap().len(), 2);
        no_subjects["metadata"]["annotations"][AUTOUPDATE_ANNOTATION] = "false".into();
        assert_eq!(reconcile_binding(&no_subjects, &expected), Outcome::Keep);
    }

    #[tokio::test]
    async fn ensure_creates_then_reconciles() {
        let store: Arc<dyn Store> = Arc::new(orchestra_store::MemStore::new());
        let registry = Registry::builtin();
        ensure(&store, &registry).await.unwrap();
        let key = registry.get(GROUP, "v1", "clusterroles").unwrap().storage_key(None, "view");
        let stored = store.get(&key).await.unwrap().unwrap();
        let view: Value = serde_json::from_slice(&stored.value).unwrap();
        assert!(view["metadata"]["uid"].is_string());
        assert!(!view["rules"].as_array().unwrap().is_empty());
        // Unchanged defaults are not written again.
        ensure(&store, &registry).await.unwrap();
        assert_eq!(store.get(&key).await.unwrap().unwrap().mod_revision, stored.mod_revision);
        // A rule removed by hand comes back.
        let mut trimmed = view.clone();
        trimmed["rules"] = json!([]);
        store.put(&key, serde_json::to_vec(&trimmed).unwrap().into(), None).await.unwrap();
        ensure(&store, &registry).await.unwrap();
        let again: Value = serde_json::from_slice(&store.get(&key).await.unwrap().unwrap().value).unwrap();
        assert_eq!(again["rules"], view["rules"]);
        // A binding to another role is made again.
        let key = registry.get(GROUP, "v1", "clusterrolebindings").unwrap().storage_key(None, "cluster-admin");
        let mut binding: Value = serde_json::from_slice(&store.get(&key).await.unwrap().unwrap().value).unwrap();
        binding["roleRef"]["name"] = "view".into();
        store.put(&key, serde_json::to_vec(&binding).unwrap().into(), None).await.unwrap();
        ensure(&store, &registry).await.unwrap();
        let binding: Value = serde_json::from_slice(&store.get(&key).await.unwrap().unwrap().value).unwrap();
        assert_eq!(binding["roleRef"]["name"], "cluster-admin");
    }
}
