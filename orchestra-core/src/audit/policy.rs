//! Upstream's `audit.k8s.io/v1` `Policy`: rules matched in order, the first
//! that matches a request gives its level.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::{Level, Stage};
use crate::auth::Attributes;

/// Why an audit policy was refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PolicyError {
    /// The file could not be read.
    #[error("reading {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The text is not an audit `Policy` (YAML or JSON).
    #[error("parsing the audit policy: {0}")]
    Parse(String),
    /// The policy parses but says something invalid.
    #[error("invalid audit policy: {0}")]
    Invalid(String),
}

/// A group's resources a rule matches (`resources` of a rule).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[non_exhaustive]
pub struct GroupResources {
    /// The API group (`""`: core).
    #[serde(default)]
    pub group: String,
    /// Resources (`pods`, `pods/log`, `*`, `*/status`, `pods/*`); empty: all.
    #[serde(default)]
    pub resources: Vec<String>,
    /// Object names; empty: all.
    #[serde(default)]
    pub resource_names: Vec<String>,
}

/// One rule: which requests it matches, at which level they are logged.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[non_exhaustive]
pub struct PolicyRule {
    /// The level of the requests matched.
    pub level: Level,
    /// User names; empty: any.
    #[serde(default)]
    pub users: Vec<String>,
    /// Groups, one of which the user must be in; empty: any.
    #[serde(default)]
    pub user_groups: Vec<String>,
    /// Verbs (`get`, `list`, `watch`, `create`, ...); empty: any.
    #[serde(default)]
    pub verbs: Vec<String>,
    /// Resources; with [`namespaces`](Self::namespaces), the rule matches
    /// resource requests only.
    #[serde(default)]
    pub resources: Vec<GroupResources>,
    /// Namespaces (`""`: cluster-scoped); empty: any.
    #[serde(default)]
    pub namespaces: Vec<String>,
    /// Paths of non-resource requests (`/healthz`, `/version*`, `*`).
    #[serde(default, rename = "nonResourceURLs")]
    pub non_resource_urls: Vec<String>,
    /// Stages not logged for the requests matched, on top of the policy's.
    #[serde(default)]
    pub omit_stages: Vec<Stage>,
    /// Overrides the policy's `omitManagedFields`.
    #[serde(default)]
    pub omit_managed_fields: Option<bool>,
}

impl PolicyRule {
    /// A rule matching every request, at `level`; narrow it with the fields.
    pub fn new(level: Level) -> PolicyRule {
        PolicyRule {
            level,
            users: Vec::new(),
            user_groups: Vec::new(),
            verbs: Vec::new(),
            resources: Vec::new(),
            namespaces: Vec::new(),
            non_resource_urls: Vec::new(),
            omit_stages: Vec::new(),
            omit_managed_fields: None,
        }
    }

    fn matches(&self, attributes: &Attributes) -> bool {
        let user = &attributes.user;
        if !self.users.is_empty() && !self.users.contains(&user.name) {
            return false;
        }
        if !self.user_groups.is_empty() && !user.groups.iter().any(|g| self.user_groups.contains(g)) {
            return false;
        }
        if !self.verbs.is_empty() && !self.verbs.contains(&attributes.verb) {
            return false;
        }
        if !self.namespaces.is_empty() || !self.resources.is_empty() {
            return self.matches_resource(attributes);
        }
        if !self.non_resource_urls.is_empty() {
            return !attributes.resource_request
                && self.non_resource_urls.iter().any(|spec| path_matches(&attributes.path, spec));
        }
        true
    }

    fn matches_resource(&self, a: &Attributes) -> bool {
        if !a.resource_request {
            return false;
        }
        if !self.namespaces.is_empty() && !self.namespaces.contains(&a.namespace) {
            return false;
        }
        if self.resources.is_empty() {
            return true;
        }
        let combined =
            if a.subresource.is_empty() { a.resource.clone() } else { format!("{}/{}", a.resource, a.subresource) };
        self.resources.iter().filter(|gr| gr.group == a.api_group).any(|gr| {
            gr.resources.is_empty()
                || gr.resources.iter().any(|res| {
                    (gr.resource_names.is_empty() || gr.resource_names.contains(&a.name))
                        && (*res == combined
                            || res == "*"
                            || (!a.subresource.is_empty() && res.strip_prefix("*/") == Some(a.subresource.as_str()))
                            || res.strip_suffix("/*") == Some(a.resource.as_str()))
                })
        })
    }
}

fn path_matches(path: &str, spec: &str) -> bool {
    spec == "*" || spec == path || spec.strip_suffix('*').is_some_and(|prefix| path.starts_with(prefix))
}

/// What the policy says about one request.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RequestAuditConfig {
    /// The level its events are logged at.
    pub level: Level,
    /// The stages not logged.
    pub omit_stages: Vec<Stage>,
    /// Whether `metadata.managedFields` is dropped from logged objects.
    pub omit_managed_fields: bool,
}

/// An audit policy: `audit.k8s.io/v1` `Policy`.
///
/// ```
/// use orchestra_core::audit::{Level, Policy};
/// use orchestra_core::auth::{Attributes, UserInfo};
///
/// let policy = Policy::parse(
///     r#"
/// apiVersion: audit.k8s.io/v1
/// kind: Policy
/// omitStages: [RequestReceived]
/// rules:
///   - level: None
///     nonResourceURLs: ["/healthz*", "/version"]
///   - level: Metadata
///     resources: [{group: "", resources: [secrets]}]
///   - level: RequestResponse
/// "#,
/// )
/// .unwrap();
/// let request = Attributes {
///     user: UserInfo::new("alice", &["dev"]),
///     verb: "get".into(),
///     resource_request: true,
///     resource: "secrets".into(),
///     namespace: "default".into(),
///     ..Default::default()
/// };
/// assert_eq!(policy.evaluate(&request).level, Level::Metadata);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Policy {
    /// The rules, in order: the first that matches decides.
    pub rules: Vec<PolicyRule>,
    /// Stages no request logs.
    pub omit_stages: Vec<Stage>,
    /// Whether `metadata.managedFields` is dropped from logged objects,
    /// unless a rule says otherwise.
    pub omit_managed_fields: bool,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct File {
    api_version: String,
    kind: String,
    #[serde(default)]
    rules: Vec<PolicyRule>,
    #[serde(default)]
    omit_stages: Vec<Stage>,
    #[serde(default)]
    omit_managed_fields: bool,
}

impl Policy {
    /// A policy of these rules.
    pub fn new(rules: Vec<PolicyRule>) -> Policy {
        Policy { rules, ..Default::default() }
    }

    /// Reads an `audit.k8s.io/v1` `Policy` from `path`.
    pub fn from_file(path: &Path) -> Result<Policy, PolicyError> {
        let text = std::fs::read_to_string(path).map_err(|source| PolicyError::Io { path: path.to_owned(), source })?;
        Policy::parse(&text)
    }

    /// Parses an `audit.k8s.io/v1` `Policy`, YAML or JSON.
    pub fn parse(text: &str) -> Result<Policy, PolicyError> {
        let file: File = serde_yaml::from_str(text).map_err(|e| PolicyError::Parse(e.to_string()))?;
        if file.kind != "Policy" {
            return Err(PolicyError::Invalid(format!("kind is {:?}, not Policy", file.kind)));
        }
        if !matches!(file.api_version.as_str(), "audit.k8s.io/v1" | "audit.k8s.io/v1beta1") {
            return Err(PolicyError::Invalid(format!("apiVersion is {:?}, not audit.k8s.io/v1", file.api_version)));
        }
        for (i, rule) in file.rules.iter().enumerate() {
            if !rule.non_resource_urls.is_empty() && (!rule.resources.is_empty() || !rule.namespaces.is_empty()) {
                return Err(PolicyError::Invalid(format!(
                    "rules[{i}]: a rule cannot apply to both resources and non-resource URLs"
                )));
            }
            for url in &rule.non_resource_urls {
                let bad_star = url.find('*').is_some_and(|at| at != url.len() - 1);
                if (url != "*" && !url.starts_with('/')) || bad_star {
                    return Err(PolicyError::Invalid(format!(
                        "rules[{i}].nonResourceURLs: {url:?} must start with '/' and may end with '*'"
                    )));
                }
            }
        }
        Ok(Policy { rules: file.rules, omit_stages: file.omit_stages, omit_managed_fields: file.omit_managed_fields })
    }

    /// The level and stages of a request: those of the first matching
    /// rule; [`Level::None`] when none matches.
    pub fn evaluate(&self, attributes: &Attributes) -> RequestAuditConfig {
        match self.rules.iter().find(|rule| rule.matches(attributes)) {
            Some(rule) => {
                let mut omit_stages = self.omit_stages.clone();
                omit_stages.extend(rule.omit_stages.iter().copied().filter(|s| !self.omit_stages.contains(s)));
                RequestAuditConfig {
                    level: rule.level,
                    omit_stages,
                    omit_managed_fields: rule.omit_managed_fields.unwrap_or(self.omit_managed_fields),
                }
            }
            None => RequestAuditConfig { level: Level::None, omit_stages: Vec::new(), omit_managed_fields: false },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::UserInfo;

    fn resource(user: &str, groups: &[&str], verb: &str, group: &str, res: &str, sub: &str, ns: &str, name: &str) -> Attributes {
        Attributes {
            user: UserInfo::new(user, groups),
            verb: verb.into(),
            resource_request: true,
            api_group: group.into(),
            resource: res.into(),
            subresource: sub.into(),
            namespace: ns.into(),
            name: name.into(),
            path: String::new(),
        }
    }

    fn non_resource(user: &str, path: &str) -> Attributes {
        Attributes { user: UserInfo::new(user, &[]), verb: "get".into(), path: path.into(), ..Default::default() }
    }

    const POLICY: &str = r#"
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
  - level: None
    users: ["system:kube-proxy"]
    verbs: ["watch"]
  - level: None
    userGroups: ["system:nodes"]
    resources: [{group: "", resources: ["nodes", "nodes/status"]}]
  - level: None
    nonResourceURLs: ["/healthz*", "/version"]
  - level: Request
    resources: [{group: "", resources: ["pods/log", "*/exec"]}]
  - level: Metadata
    resources: [{group: "", resources: ["secrets", "configmaps"], resourceNames: ["controller-leader"]}]
  - level: RequestResponse
    omitStages: [ResponseStarted]
    omitManagedFields: true
    resources: [{group: "apps", resources: ["deployments/*"]}]
  - level: Request
    namespaces: ["kube-system"]
  - level: Metadata
    resources: [{group: "rbac.authorization.k8s.io"}]
  - level: RequestResponse
    resources: [{group: "", resources: ["configmaps"]}]
  - level: Metadata
    nonResourceURLs: ["*"]
"#;

    #[test]
    fn the_first_matching_rule_decides() {
        let policy = Policy::parse(POLICY).unwrap();
        let cases = [
            (resource("system:kube-proxy", &[], "watch", "", "endpoints", "", "", ""), Level::None),
            (resource("system:kube-proxy", &[], "list", "", "endpoints", "", "", ""), Level::None),
            (resource("system:node:a", &["system:nodes"], "update", "", "nodes", "status", "", "a"), Level::None),
            (resource("system:node:a", &["system:nodes"], "get", "", "pods", "", "x", "p"), Level::None),
            (non_resource("alice", "/healthz/ready"), Level::None),
            (non_resource("alice", "/version"), Level::None),
            (non_resource("alice", "/versions"), Level::Metadata),
            (non_resource("alice", "/metrics"), Level::Metadata),
            (resource("alice", &[], "get", "", "pods", "log", "x", "p"), Level::Request),
            (resource("alice", &[], "create", "", "pods", "exec", "x", "p"), Level::Request),
            (resource("alice", &[], "get", "", "pods", "", "x", "p"), Level::None),
            (resource("alice", &[], "update", "", "configmaps", "", "x", "controller-leader"), Level::Metadata),
            (resource("alice", &[], "update", "", "configmaps", "", "x", "other"), Level::RequestResponse),
            (resource("alice", &[], "update", "apps", "deployments", "scale", "x", "d"), Level::RequestResponse),
            (resource("alice", &[], "update", "apps", "deployments", "", "x", "d"), Level::None),
            (resource("alice", &[], "update", "apps", "deployments", "", "kube-system", "d"), Level::Request),
            (resource("alice", &[], "list", "", "secrets", "", "kube-system", ""), Level::Request),
            (resource("alice", &[], "delete", "rbac.authorization.k8s.io", "roles", "", "x", "r"), Level::Metadata),
            (resource("alice", &[], "list", "", "namespaces", "", "", ""), Level::None),
        ];
        for (attributes, level) in cases {
            assert_eq!(policy.evaluate(&attributes).level, level, "{attributes:?}");
        }
    }

    #[test]
    fn stages_and_managed_fields_combine_policy_and_rule() {
        let policy = Policy::parse(POLICY).unwrap();
        let scale = policy.evaluate(&resource("a", &[], "update", "apps", "deployments", "scale", "x", "d"));
        assert_eq!(scale.omit_stages, [Stage::RequestReceived, Stage::ResponseStarted]);
        assert!(scale.omit_managed_fields);
        let roles = policy.evaluate(&resource("a", &[], "delete", "rbac.authorization.k8s.io", "roles", "", "x", "r"));
        assert_eq!(roles.omit_stages, [Stage::RequestReceived]);
        assert!(!roles.omit_managed_fields);
    }

    #[test]
    fn refuses_invalid_policies() {
        let cases = [
            ("apiVersion: audit.k8s.io/v1\nkind: Other\n", "not Policy"),
            ("apiVersion: v1\nkind: Policy\n", "apiVersion"),
            ("apiVersion: audit.k8s.io/v1\nkind: Policy\nrules: [{level: Loud}]\n", "parsing"),
            ("apiVersion: audit.k8s.io/v1\nkind: Policy\nrules: [{level: None, colour: red}]\n", "unknown field"),
            (
                "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules: [{level: None, namespaces: [a], nonResourceURLs: [/x]}]\n",
                "both resources and non-resource",
            ),
            ("apiVersion: audit.k8s.io/v1\nkind: Policy\nrules: [{level: None, nonResourceURLs: [healthz]}]\n", "must start"),
            ("apiVersion: audit.k8s.io/v1\nkind: Policy\nrules: [{level: None, nonResourceURLs: ['/a*b']}]\n", "must start"),
        ];
        for (text, expected) in cases {
            let error = Policy::parse(text).expect_err(text).to_string();
            assert!(error.contains(expected), "{text}: {error}");
        }
    }
}
