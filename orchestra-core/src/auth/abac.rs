//! Attribute-based access control (kube-apiserver's
//! `--authorization-mode=ABAC` with `--authorization-policy-file`).
//!
//! The policy file holds one JSON object per line, each an
//! `abac.authorization.kubernetes.io/v1beta1` `Policy`: a subject (`user`
//! and/or `group`, `*` for any), what it may reach (`namespace`,
//! `resource`, `apiGroup`, or `nonResourcePath`, each `*` for any; a
//! non-resource path may end in `*` to match a prefix) and whether it may
//! only read (`readonly`: `get`, `list`, `watch`). A request one policy
//! matches is allowed; otherwise ABAC has no opinion.

use std::path::Path;

use async_trait::async_trait;
use k8s_openapi::api::authorization::v1::{NonResourceRule, ResourceRule};
use serde::Deserialize;

use super::{Attributes, Authorizer, Decision, Rules, UserInfo};

/// The only policy version read (upstream's unversioned v0 lines are
/// refused).
pub const ABAC_API_VERSION: &str = "abac.authorization.kubernetes.io/v1beta1";

/// A policy file that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("authorization policy file: {0}")]
pub struct PolicyFileError(pub String);

/// One line of the policy file.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Policy {
    #[serde(default)]
    api_version: String,
    #[serde(default)]
    kind: String,
    #[serde(default)]
    spec: PolicySpec,
}

/// What a policy grants.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
struct PolicySpec {
    #[serde(default)]
    user: String,
    #[serde(default)]
    group: String,
    #[serde(default)]
    readonly: bool,
    #[serde(default)]
    api_group: String,
    #[serde(default)]
    resource: String,
    #[serde(default)]
    namespace: String,
    #[serde(default)]
    non_resource_path: String,
}

impl PolicySpec {
    /// Whether the policy names `user` (by name or group; `*` any).
    fn subject_matches(&self, user: &UserInfo) -> bool {
        let mut matched = false;
        if !self.user.is_empty() {
            if self.user != "*" && self.user != user.name {
                return false;
            }
            matched = true;
        }
        if !self.group.is_empty() {
            if self.group != "*" && !user.groups.contains(&self.group) {
                return false;
            }
            matched = true;
        }
        matched
    }

    fn verb_matches(&self, verb: &str) -> bool {
        !self.readonly || matches!(verb, "get" | "list" | "watch")
    }

    fn target_matches(&self, attributes: &Attributes) -> bool {
        let any_or = |pattern: &str, value: &str| pattern == "*" || pattern == value;
        if attributes.resource_request {
            any_or(&self.namespace, &attributes.namespace)
                && any_or(&self.resource, &attributes.resource)
                && any_or(&self.api_group, &attributes.api_group)
        } else {
            let path = &self.non_resource_path;
            // A trailing `*` (or several: upstream trims them all) matches
            // the paths the rest prefixes.
            any_or(path, &attributes.path)
                || (path.ends_with('*') && attributes.path.starts_with(path.trim_end_matches('*')))
        }
    }
}

/// Allows what the policies of a policy file grant; see the module
/// documentation.
///
/// ```
/// # futures::executor::block_on(async {
/// use orchestra_core::auth::{AbacAuthorizer, Attributes, Authorizer, Decision, UserInfo};
///
/// let policies = r#"
/// {"apiVersion": "abac.authorization.kubernetes.io/v1beta1", "kind": "Policy", "spec": {"user": "alice", "namespace": "*", "resource": "*", "apiGroup": "*"}}
/// {"apiVersion": "abac.authorization.kubernetes.io/v1beta1", "kind": "Policy", "spec": {"group": "system:authenticated", "readonly": true, "nonResourcePath": "*"}}
/// "#;
/// let abac = AbacAuthorizer::parse(policies).unwrap();
/// let delete = Attributes {
///     user: UserInfo::new("alice", &[]),
///     verb: "delete".into(),
///     resource_request: true,
///     resource: "pods".into(),
///     namespace: "default".into(),
///     ..Default::default()
/// };
/// assert_eq!(abac.authorize(&delete).await, Decision::Allow);
/// let bob = Attributes { user: UserInfo::new("bob", &[]), ..delete };
/// assert_eq!(abac.authorize(&bob).await, Decision::no_opinion());
/// # });
/// ```
#[derive(Debug, Clone, Default)]
pub struct AbacAuthorizer {
    policies: Vec<PolicySpec>,
}

impl AbacAuthorizer {
    /// Parses a policy file's contents (blank lines and `#` comments are
    /// skipped).
    pub fn parse(contents: &str) -> Result<AbacAuthorizer, PolicyFileError> {
        let mut policies = Vec::new();
        for (number, line) in contents.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let error = |message: String| PolicyFileError(format!("line {}: {message}", number + 1));
            let policy: Policy = serde_json::from_str(line).map_err(|e| error(e.to_string()))?;
            if policy.api_version != ABAC_API_VERSION || policy.kind != "Policy" {
                return Err(error(format!(
                    "expected apiVersion {ABAC_API_VERSION} and kind Policy, got {:?} {:?} (unversioned policies are not supported)",
                    policy.api_version, policy.kind
                )));
            }
            if policy.spec.user.is_empty() && policy.spec.group.is_empty() {
                return Err(error("a policy needs a user or a group".into()));
            }
            policies.push(policy.spec);
        }
        Ok(AbacAuthorizer { policies })
    }

    /// Reads and parses a policy file.
    pub fn read(path: impl AsRef<Path>) -> Result<AbacAuthorizer, PolicyFileError> {
        let path = path.as_ref();
        let contents = std::fs::read_to_string(path)
            .map_err(|e| PolicyFileError(format!("cannot read {}: {e}", path.display())))?;
        AbacAuthorizer::parse(&contents)
    }
}

#[async_trait]
impl Authorizer for AbacAuthorizer {
    async fn authorize(&self, attributes: &Attributes) -> Decision {
        let allowed = self.policies.iter().any(|policy| {
            policy.subject_matches(&attributes.user)
                && policy.verb_matches(&attributes.verb)
                && policy.target_matches(attributes)
        });
        if allowed { Decision::Allow } else { Decision::no_opinion() }
    }

    async fn rules_for(&self, user: &UserInfo, namespace: &str) -> Option<Rules> {
        let mut rules = Rules::default();
        for policy in self.policies.iter().filter(|p| p.subject_matches(user)) {
            let verbs: Vec<String> =
                if policy.readonly { vec!["get".into(), "list".into(), "watch".into()] } else { vec!["*".into()] };
            if !policy.resource.is_empty() && (policy.namespace == "*" || policy.namespace == namespace) {
                rules.resource_rules.push(ResourceRule {
                    verbs: verbs.clone(),
                    api_groups: Some(vec![policy.api_group.clone()]),
                    resources: Some(vec![policy.resource.clone()]),
                    resource_names: None,
                });
            }
            if !policy.non_resource_path.is_empty() {
                rules
                    .non_resource_rules
                    .push(NonResourceRule { verbs, non_resource_urls: Some(vec![policy.non_resource_path.clone()]) });
            }
        }
        Some(rules)
    }
}

#[cfg(test)]
mod properties;

#[cfg(test)]
mod tests {
    use super::*;

    fn line(spec: serde_json::Value) -> String {
        serde_json::json!({"apiVersion": ABAC_API_VERSION, "kind": "Policy", "spec": spec}).to_string()
    }

    fn resource(user: &str, groups: &[&str], verb: &str, group: &str, plural: &str, namespace: &str) -> Attributes {
        Attributes {
            user: UserInfo::new(user, groups),
            verb: verb.into(),
            resource_request: true,
            api_group: group.into(),
            resource: plural.into(),
            namespace: namespace.into(),
            ..Default::default()
        }
    }

    fn path(user: &str, verb: &str, path: &str) -> Attributes {
        Attributes { user: UserInfo::new(user, &[]), verb: verb.into(), path: path.into(), ..Default::default() }
    }

    #[tokio::test]
    async fn policies_allow_what_they_match() {
        use serde_json::json;
        let file = [
            "# admins",
            &line(json!({"user": "admin", "namespace": "*", "resource": "*", "apiGroup": "*", "nonResourcePath": "*"})),
            &line(json!({"user": "alice", "namespace": "projectCaribou", "resource": "pods", "apiGroup": "", "readonly": true})),
            &line(json!({"group": "dev", "namespace": "dev", "resource": "*", "apiGroup": "apps"})),
            &line(json!({"user": "*", "readonly": true, "nonResourcePath": "/healthz*"})),
            &line(json!({"user": "ops", "nonResourcePath": "/metrics**"})),
            "",
        ]
        .join("\n");
        let abac = AbacAuthorizer::parse(&file).unwrap();
        let cases = [
            ("admin anything", resource("admin", &[], "delete", "apps", "deployments", "x"), true),
            ("admin a path", path("admin", "post", "/logs"), true),
            ("alice reads pods", resource("alice", &[], "list", "", "pods", "projectCaribou"), true),
            ("alice writes pods", resource("alice", &[], "create", "", "pods", "projectCaribou"), false),
            ("alice elsewhere", resource("alice", &[], "get", "", "pods", "default"), false),
            ("alice other resource", resource("alice", &[], "get", "", "secrets", "projectCaribou"), false),
            ("dev group in apps", resource("carol", &["dev"], "create", "apps", "deployments", "dev"), true),
            ("dev group, core group", resource("carol", &["dev"], "create", "", "pods", "dev"), false),
            ("anyone reads health", path("eve", "get", "/healthz/ready"), true),
            ("anyone writes health", path("eve", "post", "/healthz"), false),
            // Every trailing `*` goes, as upstream trims them all.
            ("several stars", path("ops", "post", "/metrics/cadvisor"), true),
            ("paths are not resources", resource("eve", &[], "get", "", "healthz", ""), false),
        ];
        for (name, attributes, allowed) in cases {
            let expected = if allowed { Decision::Allow } else { Decision::no_opinion() };
            assert_eq!(abac.authorize(&attributes).await, expected, "{name}");
        }

        let alice = abac.rules_for(&UserInfo::new("alice", &[]), "projectCaribou").await.unwrap();
        assert_eq!(alice.resource_rules.len(), 1);
        assert_eq!(alice.resource_rules[0].verbs, ["get", "list", "watch"]);
        assert_eq!(alice.non_resource_rules.len(), 1, "the health check policy names everyone");
        let elsewhere = abac.rules_for(&UserInfo::new("alice", &[]), "default").await.unwrap();
        assert!(elsewhere.resource_rules.is_empty());
    }

    #[test]
    fn bad_policy_files_are_refused() {
        let cases = [
            ("not json", "{", "line 1"),
            ("unversioned", r#"{"user": "alice"}"#, "unversioned policies are not supported"),
            ("no subject", &line(serde_json::json!({"resource": "*"})), "needs a user or a group"),
        ];
        for (name, contents, message) in cases {
            let error = AbacAuthorizer::parse(contents).unwrap_err();
            assert!(error.0.contains(message), "{name}: {error}");
        }
    }
}
