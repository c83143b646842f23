//! Privilege escalation prevention (upstream's RBAC storage checks): a user
//! may write a Role or ClusterRole only with permissions the user already
//! holds, and may bind a role only if the user holds its permissions too —
//! unless explicitly allowed to `escalate` (roles) or `bind` (bindings).
//!
//! Members of `system:masters` are never checked: they hold everything.

use async_trait::async_trait;
use k8s_openapi::api::rbac::v1::{AggregationRule, PolicyRule, RoleRef, Subject};
use serde::Deserialize;
use serde_json::Value;

use super::{GROUP, RbacAuthorizer, rules};
use crate::api::{ApiError, ErrorTarget};
use crate::auth::admission::{AdmissionPlugin, AdmissionRequest, Operation};
use crate::auth::{Attributes, AuthorizerChain, Decision, UserInfo};

use crate::tls::pki::ADMIN_GROUP as MASTERS;

/// Refuses Role, ClusterRole, RoleBinding and ClusterRoleBinding writes
/// that would grant permissions the writer does not hold, as upstream's
/// RBAC storage does:
///
/// - A role's rules must each be covered by the rules bound to the writer
///   (in the role's namespace for a Role, cluster-wide for a ClusterRole),
///   unless the authorizer allows the writer to `escalate` that role.
///   An `aggregationRule` requires every permission (`*` on `*.*`).
/// - A binding's role must be held the same way, unless the authorizer
///   allows the writer to `bind` that role.
///
/// Refusals are 403 `... is attempting to grant RBAC permissions not
/// currently held:` followed by the missing rules. Updates that change
/// neither rules nor role reference and subjects are not checked.
/// [`ApiServerBuilder::build`](crate::server::ApiServerBuilder::build) puts
/// it first in the admission chain whenever RBAC authorizes.
///
/// ```
/// use orchestra_core::auth::AuthorizerChain;
/// use orchestra_core::auth::admission::AdmissionChain;
/// use orchestra_core::auth::rbac::{RbacAuthorizer, RbacEscalation};
///
/// let rbac = RbacAuthorizer::default();
/// let guard = RbacEscalation::new(rbac.clone(), AuthorizerChain::new().with(rbac));
/// let chain = AdmissionChain::new().with(guard);
/// assert_eq!(chain.names().collect::<Vec<_>>(), [RbacEscalation::NAME]);
/// ```
#[derive(Clone)]
pub struct RbacEscalation {
    rbac: RbacAuthorizer,
    authorizer: AuthorizerChain,
}

impl RbacEscalation {
    /// The plugin's name.
    pub const NAME: &'static str = "RBACEscalation";

    /// The guard: users' own rules from `rbac`, `escalate` and `bind`
    /// permissions from `authorizer` (the server's whole chain).
    pub fn new(rbac: RbacAuthorizer, authorizer: AuthorizerChain) -> RbacEscalation {
        RbacEscalation { rbac, authorizer }
    }

    /// Whether `authorizer` allows `user` to `verb` the role `name`.
    async fn authorized(&self, user: &UserInfo, verb: &str, kind: &str, namespace: &str, name: &str) -> bool {
        let resource = if kind == "Role" { "roles" } else { "clusterroles" };
        let attributes = Attributes {
            user: user.clone(),
            verb: verb.into(),
            resource_request: true,
            api_group: GROUP.into(),
            resource: resource.into(),
            namespace: namespace.into(),
            name: name.into(),
            ..Default::default()
        };
        self.authorizer.authorize(&attributes).await == Decision::Allow
    }

    /// The rules of `user` that are not covered: empty if `user` holds all
    /// of `wanted` in `namespace` (`""`: cluster-wide).
    fn missing(&self, user: &UserInfo, namespace: &str, wanted: &[PolicyRule]) -> Vec<PolicyRule> {
        let mut held = Vec::new();
        self.rbac.cache().visit(user, namespace, |grant| {
            held.extend_from_slice(grant.rules);
            false
        });
        let mut missing: Vec<PolicyRule> =
            wanted.iter().flat_map(breakdown).filter(|rule| !held.iter().any(|owner| covers(owner, rule))).collect();
        missing.sort_by_key(compact);
        missing.dedup();
        missing
    }

    /// The rules of the role a binding in `namespace` refers to.
    fn referenced_rules(&self, role_ref: &RoleRef, namespace: &str) -> Result<Vec<PolicyRule>, ApiError> {
        self.rbac.cache().role_rules(role_ref, namespace).ok_or_else(|| {
            let resource = if role_ref.kind == "Role" { "roles" } else { "clusterroles" };
            ApiError::not_found(&ErrorTarget {
                group: GROUP.into(),
                resource: resource.into(),
                kind: role_ref.kind.clone(),
                name: role_ref.name.clone(),
            })
        })
    }
}

/// The parts of a role a check reads.
#[derive(Deserialize, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
struct RoleParts {
    #[serde(default)]
    rules: Option<Vec<PolicyRule>>,
    #[serde(default)]
    aggregation_rule: Option<AggregationRule>,
}

/// The parts of a binding a check reads.
#[derive(Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
struct BindingParts {
    role_ref: RoleRef,
    #[serde(default)]
    subjects: Option<Vec<Subject>>,
}

fn parse<T: for<'de> Deserialize<'de>>(object: &Value) -> Result<T, ApiError> {
    T::deserialize(object).map_err(|e| ApiError::bad_request(format!("the object is not a valid RBAC object: {e}")))
}

#[async_trait]
impl AdmissionPlugin for RbacEscalation {
    fn name(&self) -> &str {
        Self::NAME
    }

    fn handles(&self, operation: Operation) -> bool {
        operation != Operation::Delete
    }

    async fn validate(&self, request: &AdmissionRequest<'_>) -> Result<(), ApiError> {
        if request.resource.group != GROUP || request.subresource.is_some() {
            return Ok(());
        }
        let Some(object) = &request.object else { return Ok(()) };
        if request.user.groups.iter().any(|group| group == MASTERS) {
            return Ok(());
        }
        let namespace = request.namespace.unwrap_or_default();
        let user = request.user;
        let (kind, role_name, wanted) = match request.resource.plural.as_str() {
            plural @ ("roles" | "clusterroles") => {
                let role: RoleParts = parse(object)?;
                if let Some(old) = request.old_object {
                    if parse::<RoleParts>(old)? == role {
                        return Ok(());
                    }
                }
                let kind = if plural == "roles" { "Role" } else { "ClusterRole" };
                if self.authorized(user, "escalate", kind, namespace, request.name).await {
                    return Ok(());
                }
                if role.aggregation_rule.is_some() && !self.missing(user, namespace, &[full_authority()]).is_empty() {
                    return Err(request.forbidden("must have cluster-admin privileges to use the aggregationRule"));
                }
                (kind, request.name, role.rules.unwrap_or_default())
            }
            "rolebindings" | "clusterrolebindings" => {
                let binding: BindingParts = parse(object)?;
                if let Some(old) = request.old_object {
                    if parse::<BindingParts>(old)? == binding {
                        return Ok(());
                    }
                }
                let role_ref = &binding.role_ref;
                if self.authorized(user, "bind", &role_ref.kind, namespace, &role_ref.name).await {
                    return Ok(());
                }
                let rules = self.referenced_rules(role_ref, namespace)?;
                ("binding", request.name, rules)
            }
            _ => return Ok(()),
        };
        let missing = self.missing(user, namespace, &wanted);
        if missing.is_empty() {
            return Ok(());
        }
        tracing::debug!(user = %user.name, kind, name = role_name, missing = missing.len(), "RBAC escalation refused");
        let groups: Vec<String> = user.groups.iter().map(|group| format!("{group:?}")).collect();
        let rules: Vec<String> = missing.iter().map(compact).collect();
        Err(request.forbidden(format!(
            "user {:?} (groups=[{}]) is attempting to grant RBAC permissions not currently held:\n{}",
            user.name,
            groups.join(" "),
            rules.join("\n")
        )))
    }
}

/// `*` on every resource of every group, and every non-resource URL.
fn full_authority() -> PolicyRule {
    let all = || Some(vec!["*".to_owned()]);
    PolicyRule { verbs: vec!["*".into()], api_groups: all(), resources: all(), ..Default::default() }
}

/// One rule per verb, group, resource and resource name (or URL and verb),
/// as upstream's `BreakdownRule`.
fn breakdown(rule: &PolicyRule) -> Vec<PolicyRule> {
    let one = |value: &String| Some(vec![value.clone()]);
    let mut rules = Vec::new();
    for group in rule.api_groups.iter().flatten() {
        for resource in rule.resources.iter().flatten() {
            for verb in &rule.verbs {
                let simple = PolicyRule {
                    verbs: vec![verb.clone()],
                    api_groups: one(group),
                    resources: one(resource),
                    ..Default::default()
                };
                match rule.resource_names.as_deref() {
                    None | Some([]) => rules.push(simple),
                    Some(names) => rules.extend(
                        names.iter().map(|name| PolicyRule { resource_names: one(name), ..simple.clone() }),
                    ),
                }
            }
        }
    }
    for url in rule.non_resource_urls.iter().flatten() {
        for verb in &rule.verbs {
            rules.push(PolicyRule { verbs: vec![verb.clone()], non_resource_urls: one(url), ..Default::default() });
        }
    }
    rules
}

/// Whether `owner` grants everything the simple rule `wanted` (one of
/// [`breakdown`]'s) does: wildcards are covered only by wildcards.
fn covers(owner: &PolicyRule, wanted: &PolicyRule) -> bool {
    let first = |list: &Option<Vec<String>>| list.as_ref().and_then(|l| l.first().cloned());
    let verb = &wanted.verbs[0];
    if !owner.verbs.iter().any(|v| v == "*" || v == verb) {
        return false;
    }
    if let Some(url) = first(&wanted.non_resource_urls) {
        let attributes = Attributes { verb: verb.clone(), path: url, ..Default::default() };
        return rules::rule_allows(owner, &attributes);
    }
    let (Some(group), Some(resource)) = (first(&wanted.api_groups), first(&wanted.resources)) else { return false };
    let group_covered = owner.api_groups.iter().flatten().any(|g| g == "*" || *g == group);
    let resource_covered = owner.resources.iter().flatten().any(|r| {
        r == "*"
            || *r == resource
            || resource.split_once('/').is_some_and(|(_, sub)| r.strip_prefix("*/").is_some_and(|s| s == sub))
    });
    let names_covered = match owner.resource_names.as_deref() {
        None | Some([]) => true,
        Some(names) => first(&wanted.resource_names).is_some_and(|name| names.contains(&name)),
    };
    group_covered && resource_covered && names_covered
}

/// A rule as upstream prints it: `{APIGroups:["apps"], Resources:["deployments"], Verbs:["create"]}`.
fn compact(rule: &PolicyRule) -> String {
    let quoted = |list: &[String]| format!("[{}]", list.iter().map(|s| format!("{s:?}")).collect::<Vec<_>>().join(" "));
    let mut parts = Vec::new();
    for (label, list) in [
        ("APIGroups", rule.api_groups.as_deref()),
        ("Resources", rule.resources.as_deref()),
        ("NonResourceURLs", rule.non_resource_urls.as_deref()),
        ("ResourceNames", rule.resource_names.as_deref()),
        ("Verbs", Some(rule.verbs.as_slice())),
    ] {
        if let Some(list) = list.filter(|list| !list.is_empty()) {
            parts.push(format!("{label}:{}", quoted(list)));
        }
    }
    format!("{{{}}}", parts.join(", "))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::json;

    use super::super::cache::{Kind, RbacCache};
    use super::*;
    use crate::api::ResourceInfo;
    use crate::auth::AllowAll;

    fn rule(verbs: &[&str], groups: &[&str], resources: &[&str], names: &[&str]) -> PolicyRule {
        super::super::rules::tests::rule(verbs, groups, resources, names)
    }

    /// Alice may read and create pods in `a` and get nodes cluster-wide;
    /// `dev` may bind `edit` in `a` without holding it.
    fn guard() -> RbacEscalation {
        let cache = RbacCache::default();
        let put = |kind, key: &str, value: Value| cache.put(kind, key, &serde_json::to_vec(&value).unwrap());
        put(
            Kind::ClusterRole,
            "/cr/pods",
            json!({"metadata": {"name": "pods"}, "rules": [
                {"verbs": ["get", "list", "create"], "apiGroups": [""], "resources": ["pods", "pods/log"]},
            ]}),
        );
        put(
            Kind::ClusterRole,
            "/cr/nodes",
            json!({"metadata": {"name": "nodes"}, "rules": [
                {"verbs": ["get"], "apiGroups": [""], "resources": ["nodes"], "resourceNames": ["n1"]},
                {"verbs": ["get"], "nonResourceURLs": ["/metrics*"]},
            ]}),
        );
        put(
            Kind::ClusterRole,
            "/cr/edit",
            json!({"metadata": {"name": "edit"}, "rules": [
                {"verbs": ["*"], "apiGroups": ["apps"], "resources": ["deployments"]},
            ]}),
        );
        put(
            Kind::ClusterRole,
            "/cr/binder",
            json!({"metadata": {"name": "binder"}, "rules": [
                {"verbs": ["bind"], "apiGroups": [GROUP], "resources": ["clusterroles"], "resourceNames": ["edit"]},
            ]}),
        );
        let binding = |namespace: Option<&str>, role: &str, subject: Value| {
            json!({
                "metadata": {"name": role, "namespace": namespace},
                "roleRef": {"apiGroup": GROUP, "kind": "ClusterRole", "name": role},
                "subjects": [subject],
            })
        };
        let alice = json!({"kind": "User", "name": "alice"});
        put(Kind::RoleBinding, "/rb/a/pods", binding(Some("a"), "pods", alice.clone()));
        put(Kind::ClusterRoleBinding, "/crb/nodes", binding(None, "nodes", alice));
        put(Kind::RoleBinding, "/rb/a/binder", binding(Some("a"), "binder", json!({"kind": "Group", "name": "dev"})));
        let rbac = RbacAuthorizer::new(Arc::new(cache));
        RbacEscalation::new(rbac.clone(), AuthorizerChain::new().with(rbac))
    }

    fn role(rules: &[PolicyRule]) -> Value {
        json!({"metadata": {"name": "r"}, "rules": rules})
    }

    fn binding_to(role: &str) -> Value {
        json!({
            "metadata": {"name": "b"},
            "roleRef": {"apiGroup": GROUP, "kind": "ClusterRole", "name": role},
            "subjects": [{"kind": "User", "name": "mallory"}],
        })
    }

    async fn check(
        guard: &RbacEscalation,
        user: &UserInfo,
        plural: &str,
        namespace: Option<&str>,
        object: Value,
        old: Option<&Value>,
    ) -> Result<(), ApiError> {
        let kind = match plural {
            "roles" => "Role",
            "clusterroles" => "ClusterRole",
            "rolebindings" => "RoleBinding",
            _ => "ClusterRoleBinding",
        };
        let resource = ResourceInfo::new(GROUP, "v1", kind, plural, namespace.is_some());
        let request = AdmissionRequest {
            operation: if old.is_some() { Operation::Update } else { Operation::Create },
            resource: &resource,
            subresource: None,
            namespace,
            name: "r",
            object: Some(object),
            old_object: old,
            user,
            dry_run: false,
        };
        guard.validate(&request).await
    }

    #[tokio::test]
    async fn roles_grant_only_what_their_writer_holds() {
        let guard = guard();
        let alice = UserInfo::new("alice", &["system:authenticated"]);
        let root = UserInfo::new("root", &[MASTERS]);
        let in_a = Some("a");
        #[rustfmt::skip]
        let cases: Vec<(&UserInfo, &str, Option<&str>, Vec<PolicyRule>, bool)> = vec![
            (&alice, "roles", in_a, vec![rule(&["get", "create"], &[""], &["pods"], &[])], true),
            (&alice, "roles", in_a, vec![rule(&["get"], &[""], &["pods/log"], &["p"])], true),
            (&alice, "roles", in_a, vec![rule(&["get"], &[""], &["nodes"], &["n1"])], true),
            (&alice, "roles", in_a, vec![rule(&["delete"], &[""], &["pods"], &[])], false),
            (&alice, "roles", in_a, vec![rule(&["*"], &[""], &["pods"], &[])], false),
            (&alice, "roles", in_a, vec![rule(&["get"], &["*"], &["pods"], &[])], false),
            (&alice, "roles", in_a, vec![rule(&["get"], &[""], &["pods/exec"], &[])], false),
            (&alice, "roles", in_a, vec![rule(&["get"], &[""], &["nodes"], &[])], false),
            // The pods rules are bound in `a` only.
            (&alice, "roles", Some("b"), vec![rule(&["get"], &[""], &["pods"], &[])], false),
            (&alice, "clusterroles", None, vec![rule(&["get"], &[""], &["pods"], &[])], false),
            (&alice, "clusterroles", None, vec![super::super::rules::tests::urls(&["get"], &["/metrics/x"])], true),
            (&alice, "clusterroles", None, vec![super::super::rules::tests::urls(&["get"], &["/healthz"])], false),
            (&root, "clusterroles", None, vec![full_authority()], true),
        ];
        for (user, plural, namespace, rules, allowed) in cases {
            let result = check(&guard, user, plural, namespace, role(&rules), None).await;
            assert_eq!(result.is_ok(), allowed, "{} {plural} in {namespace:?}: {rules:?}: {result:?}", user.name);
        }
        let error = check(&guard, &alice, "roles", in_a, role(&[rule(&["delete"], &[""], &["pods"], &[])]), None)
            .await
            .unwrap_err();
        assert_eq!(error.code, 403);
        assert_eq!(
            error.message,
            "roles.rbac.authorization.k8s.io \"r\" is forbidden: user \"alice\" (groups=[\"system:authenticated\"]) \
             is attempting to grant RBAC permissions not currently held:\n\
             {APIGroups:[\"\"], Resources:[\"pods\"], Verbs:[\"delete\"]}"
        );
        // An unchanged role is not checked again; an aggregation rule needs everything.
        let held_nothing = role(&[rule(&["delete"], &[""], &["secrets"], &[])]);
        assert!(check(&guard, &alice, "roles", in_a, held_nothing.clone(), Some(&held_nothing)).await.is_ok());
        let aggregated = json!({"metadata": {"name": "r"}, "aggregationRule": {"clusterRoleSelectors": [{}]}});
        let error = check(&guard, &alice, "clusterroles", None, aggregated, None).await.unwrap_err();
        assert!(error.message.contains("must have cluster-admin privileges to use the aggregationRule"), "{error:?}");
    }

    #[tokio::test]
    async fn bindings_need_the_role_held_or_bind() {
        let guard = guard();
        let alice = UserInfo::new("alice", &[]);
        let dev = UserInfo::new("dan", &["dev"]);
        let cases = [
            (&alice, "rolebindings", Some("a"), "pods", Ok(())),
            (&alice, "rolebindings", Some("b"), "pods", Err(403)),
            (&alice, "rolebindings", Some("a"), "edit", Err(403)),
            (&alice, "rolebindings", Some("a"), "missing", Err(404)),
            (&dev, "rolebindings", Some("a"), "edit", Ok(())),
            (&dev, "rolebindings", Some("b"), "edit", Err(403)),
            (&dev, "clusterrolebindings", None, "edit", Err(403)),
        ];
        for (user, plural, namespace, role, expected) in cases {
            let result = check(&guard, user, plural, namespace, binding_to(role), None).await.map_err(|e| e.code);
            assert_eq!(result, expected, "{} binds {role} with {plural} in {namespace:?}", user.name);
        }
    }

    #[tokio::test]
    async fn escalate_lets_a_writer_grant_more() {
        let guard = RbacEscalation::new(guard().rbac, AuthorizerChain::new().with(AllowAll));
        let alice = UserInfo::new("alice", &[]);
        let everything = role(&[full_authority()]);
        assert!(check(&guard, &alice, "clusterroles", None, everything, None).await.is_ok());
    }

    #[test]
    fn rules_break_down_and_print_like_upstream() {
        let rule = PolicyRule {
            resource_names: Some(vec!["x".into(), "y".into()]),
            ..rule(&["get", "list"], &["", "apps"], &["pods"], &[])
        };
        assert_eq!(breakdown(&rule).len(), 8);
        assert_eq!(
            compact(&breakdown(&rule)[0]),
            r#"{APIGroups:[""], Resources:["pods"], ResourceNames:["x"], Verbs:["get"]}"#
        );
        let urls = super::super::rules::tests::urls(&["get"], &["/a", "/b*"]);
        assert_eq!(compact(&urls), r#"{NonResourceURLs:["/a" "/b*"], Verbs:["get"]}"#);
    }
}
