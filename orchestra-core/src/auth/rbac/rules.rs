//! Rule evaluation with upstream RBAC's semantics: whether one
//! [`PolicyRule`] allows a request, and whether one [`Subject`] of a binding
//! names a user.

use k8s_openapi::api::authorization::v1::{NonResourceRule, ResourceRule};
use k8s_openapi::api::rbac::v1::{PolicyRule, Subject};

use crate::auth::{Attributes, Rules};

/// Whether `rule` allows the request `attributes` describes: for resource
/// requests its verbs, API groups, resources and resource names all match;
/// for other requests its verbs and non-resource URLs do.
pub(crate) fn rule_allows(rule: &PolicyRule, attributes: &Attributes) -> bool {
    if !verb_matches(rule, &attributes.verb) {
        return false;
    }
    if attributes.resource_request {
        api_group_matches(rule, &attributes.api_group)
            && resource_matches(rule, &attributes.resource, &attributes.subresource)
            && resource_name_matches(rule, &attributes.name)
    } else {
        non_resource_url_matches(rule, &attributes.path)
    }
}

fn verb_matches(rule: &PolicyRule, verb: &str) -> bool {
    rule.verbs.iter().any(|v| v == "*" || v == verb)
}

fn api_group_matches(rule: &PolicyRule, group: &str) -> bool {
    rule.api_groups.iter().flatten().any(|g| g == "*" || g == group)
}

/// `*` matches everything, subresources included; `resource` matches the
/// resource alone; `resource/subresource` that subresource; `*/subresource`
/// that subresource of every resource. (`resource/*` is not a wildcard in
/// upstream RBAC: it matches only a subresource literally named `*`.)
fn resource_matches(rule: &PolicyRule, resource: &str, subresource: &str) -> bool {
    rule.resources.iter().flatten().any(|r| {
        if r == "*" {
            return true;
        }
        if subresource.is_empty() {
            return r == resource;
        }
        match r.split_once('/') {
            Some((res, sub)) => sub == subresource && (res == resource || res == "*"),
            None => false,
        }
    })
}

/// No resource names: any object, and requests without a name (`list`,
/// `create`, `deletecollection`). Otherwise only requests naming one of them.
fn resource_name_matches(rule: &PolicyRule, name: &str) -> bool {
    match rule.resource_names.as_deref() {
        None | Some([]) => true,
        Some(names) => names.iter().any(|n| n == name),
    }
}

/// `*` matches every path; a URL ending in `*` matches the paths its part
/// before the trailing `*`s prefixes (`/api**` as `/api*`, as upstream
/// trims them all); any other URL the path itself.
fn non_resource_url_matches(rule: &PolicyRule, path: &str) -> bool {
    rule.non_resource_urls
        .iter()
        .flatten()
        .any(|url| url == "*" || url == path || (url.ends_with('*') && path.starts_with(url.trim_end_matches('*'))))
}

/// The user name of service account `name` in `namespace`.
pub(crate) fn service_account_user(namespace: &str, name: &str) -> String {
    format!("system:serviceaccount:{namespace}:{name}")
}

/// What a subject is matched on: a user name (service accounts included) or
/// a group name.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum SubjectKey {
    User(String),
    Group(String),
}

/// The [`SubjectKey`] of `subject` in a binding in `binding_namespace`, or
/// `None` for a subject naming nobody (an unknown kind, a service account
/// without a namespace in a ClusterRoleBinding). A `User` names the user of
/// that name, a `Group` its members, a `ServiceAccount` its user, the
/// namespace defaulting to the binding's.
pub(crate) fn subject_key(subject: &Subject, binding_namespace: &str) -> Option<SubjectKey> {
    match subject.kind.as_str() {
        "User" => Some(SubjectKey::User(subject.name.clone())),
        "Group" => Some(SubjectKey::Group(subject.name.clone())),
        "ServiceAccount" => {
            let namespace = match subject.namespace.as_deref() {
                Some(ns) if !ns.is_empty() => ns,
                _ => binding_namespace,
            };
            (!namespace.is_empty()).then(|| SubjectKey::User(service_account_user(namespace, &subject.name)))
        }
        _ => None,
    }
}

/// Adds `rule` to `rules` in a rules review's shape: a rule with resources
/// becomes a [`ResourceRule`], one with non-resource URLs a
/// [`NonResourceRule`].
pub(crate) fn push_review_rule(rules: &mut Rules, rule: &PolicyRule) {
    if rule.resources.as_ref().is_some_and(|r| !r.is_empty()) {
        rules.resource_rules.push(ResourceRule {
            verbs: rule.verbs.clone(),
            api_groups: rule.api_groups.clone(),
            resources: rule.resources.clone(),
            resource_names: rule.resource_names.clone().filter(|n| !n.is_empty()),
        });
    }
    if rule.non_resource_urls.as_ref().is_some_and(|u| !u.is_empty()) {
        rules
            .non_resource_rules
            .push(NonResourceRule { verbs: rule.verbs.clone(), non_resource_urls: rule.non_resource_urls.clone() });
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    fn list(items: &[&str]) -> Option<Vec<String>> {
        Some(items.iter().map(|s| (*s).to_owned()).collect())
    }

    /// A resource rule.
    pub(crate) fn rule(verbs: &[&str], groups: &[&str], resources: &[&str], names: &[&str]) -> PolicyRule {
        PolicyRule {
            verbs: verbs.iter().map(|s| (*s).to_owned()).collect(),
            api_groups: list(groups),
            resources: list(resources),
            resource_names: if names.is_empty() { None } else { list(names) },
            non_resource_urls: None,
        }
    }

    /// A non-resource rule.
    pub(crate) fn urls(verbs: &[&str], urls: &[&str]) -> PolicyRule {
        PolicyRule {
            verbs: verbs.iter().map(|s| (*s).to_owned()).collect(),
            non_resource_urls: list(urls),
            ..Default::default()
        }
    }

    /// A resource request: `verb` on `group`/`resource[/subresource]`, named `name`.
    pub(crate) fn request(verb: &str, group: &str, resource: &str, name: &str) -> Attributes {
        let (resource, subresource) = resource.split_once('/').unwrap_or((resource, ""));
        Attributes {
            verb: verb.into(),
            resource_request: true,
            api_group: group.into(),
            resource: resource.into(),
            subresource: subresource.into(),
            name: name.into(),
            namespace: "ns".into(),
            ..Default::default()
        }
    }

    fn path(verb: &str, path: &str) -> Attributes {
        Attributes { verb: verb.into(), path: path.into(), ..Default::default() }
    }

    #[test]
    fn resource_rules_match_as_upstream() {
        let cases: &[(PolicyRule, Attributes, bool)] = &[
            // Verbs.
            (rule(&["get"], &[""], &["pods"], &[]), request("get", "", "pods", "p"), true),
            (rule(&["get"], &[""], &["pods"], &[]), request("list", "", "pods", ""), false),
            (rule(&["*"], &[""], &["pods"], &[]), request("deletecollection", "", "pods", ""), true),
            // API groups.
            (rule(&["get"], &["apps"], &["deployments"], &[]), request("get", "apps", "deployments", "d"), true),
            (rule(&["get"], &[""], &["deployments"], &[]), request("get", "apps", "deployments", "d"), false),
            (rule(&["get"], &["*"], &["deployments"], &[]), request("get", "apps", "deployments", "d"), true),
            (rule(&["get"], &[], &["pods"], &[]), request("get", "", "pods", "p"), false),
            // Resources and subresources.
            (rule(&["get"], &[""], &["*"], &[]), request("get", "", "pods/log", "p"), true),
            (rule(&["get"], &[""], &["pods"], &[]), request("get", "", "pods/log", "p"), false),
            (rule(&["get"], &[""], &["pods/log"], &[]), request("get", "", "pods/log", "p"), true),
            (rule(&["get"], &[""], &["pods/log"], &[]), request("get", "", "pods", "p"), false),
            (rule(&["get"], &[""], &["pods/log"], &[]), request("get", "", "pods/status", "p"), false),
            (rule(&["get"], &[""], &["*/log"], &[]), request("get", "", "pods/log", "p"), true),
            (rule(&["get"], &[""], &["*/log"], &[]), request("get", "", "nodes/log", "n"), true),
            (rule(&["get"], &[""], &["*/log"], &[]), request("get", "", "pods", "p"), false),
            (rule(&["get"], &[""], &["*/status"], &[]), request("get", "", "pods/log", "p"), false),
            (rule(&["get"], &[""], &["pods/*"], &[]), request("get", "", "pods/log", "p"), false),
            (rule(&["get"], &[""], &["pods/*"], &[]), request("get", "", "pods", "p"), false),
            (rule(&["get"], &[""], &["services"], &[]), request("get", "", "pods", "p"), false),
            // Resource names.
            (rule(&["get"], &[""], &["configmaps"], &["a"]), request("get", "", "configmaps", "a"), true),
            (rule(&["get"], &[""], &["configmaps"], &["a"]), request("get", "", "configmaps", "b"), false),
            (rule(&["list"], &[""], &["configmaps"], &["a"]), request("list", "", "configmaps", ""), false),
            (rule(&["create"], &[""], &["configmaps"], &["a"]), request("create", "", "configmaps", ""), false),
            (
                rule(&["deletecollection"], &[""], &["configmaps"], &["a"]),
                request("deletecollection", "", "configmaps", ""),
                false,
            ),
            (rule(&["get"], &[""], &["pods/log"], &["p"]), request("get", "", "pods/log", "p"), true),
            // A non-resource rule allows no resource request.
            (urls(&["*"], &["*"]), request("get", "", "pods", "p"), false),
        ];
        for (rule, attributes, allowed) in cases {
            assert_eq!(rule_allows(rule, attributes), *allowed, "{rule:?} on {attributes:?}");
        }
    }

    #[test]
    fn non_resource_rules_match_as_upstream() {
        let cases: &[(PolicyRule, Attributes, bool)] = &[
            (urls(&["get"], &["/healthz"]), path("get", "/healthz"), true),
            (urls(&["get"], &["/healthz"]), path("get", "/healthz/etcd"), false),
            (urls(&["get"], &["/healthz"]), path("post", "/healthz"), false),
            (urls(&["get"], &["/healthz/*"]), path("get", "/healthz/etcd"), true),
            (urls(&["get"], &["/healthz/*"]), path("get", "/healthz"), false),
            (urls(&["get"], &["/api*"]), path("get", "/apis/apps"), true),
            // Every trailing `*` goes, as upstream trims them all.
            (urls(&["get"], &["/api**"]), path("get", "/apis/apps"), true),
            (urls(&["get"], &["/api**"]), path("get", "/api"), true),
            (urls(&["get"], &["/api**"]), path("get", "/ap"), false),
            (urls(&["get"], &["*"]), path("get", "/anything"), true),
            (urls(&["*"], &["/metrics"]), path("get", "/metrics"), true),
            (urls(&["get"], &["/version"]), path("get", "/version/"), false),
            // A resource rule allows no non-resource request.
            (rule(&["*"], &["*"], &["*"], &[]), path("get", "/healthz"), false),
        ];
        for (rule, attributes, allowed) in cases {
            assert_eq!(rule_allows(rule, attributes), *allowed, "{rule:?} on {attributes:?}");
        }
    }

    #[test]
    fn subjects_resolve_to_users_and_groups() {
        let subject = |kind: &str, name: &str, namespace: Option<&str>| Subject {
            kind: kind.into(),
            name: name.into(),
            namespace: namespace.map(Into::into),
            api_group: None,
        };
        let user = |name: &str| Some(SubjectKey::User(name.into()));
        let robot = user("system:serviceaccount:ci:robot");
        let cases = [
            (subject("User", "alice", None), "", user("alice")),
            (subject("User", "alice", None), "ns", user("alice")),
            (subject("Group", "dev", None), "", Some(SubjectKey::Group("dev".into()))),
            (subject("ServiceAccount", "robot", Some("ci")), "", robot.clone()),
            (subject("ServiceAccount", "robot", Some("ci")), "other", robot.clone()),
            (subject("ServiceAccount", "robot", Some("")), "ci", robot.clone()),
            (subject("ServiceAccount", "robot", None), "ci", robot),
            (subject("ServiceAccount", "robot", None), "other", user("system:serviceaccount:other:robot")),
            (subject("ServiceAccount", "robot", None), "", None),
            (subject("Robot", "alice", None), "", None),
        ];
        for (subject, namespace, expected) in cases {
            assert_eq!(subject_key(&subject, namespace), expected, "{subject:?} in {namespace:?}");
        }
    }

    #[test]
    fn review_rules_split_resource_and_non_resource_rules() {
        let mut rules = Rules::default();
        push_review_rule(&mut rules, &rule(&["get"], &[""], &["pods"], &[]));
        push_review_rule(&mut rules, &rule(&["get"], &[""], &["configmaps"], &["a"]));
        push_review_rule(&mut rules, &urls(&["get"], &["/healthz"]));
        push_review_rule(&mut rules, &rule(&["get"], &[""], &[], &[]));
        assert_eq!(rules.resource_rules.len(), 2);
        assert_eq!(rules.resource_rules[0].resource_names, None);
        assert_eq!(rules.resource_rules[1].resource_names, Some(vec!["a".to_owned()]));
        assert_eq!(rules.non_resource_rules.len(), 1);
        assert_eq!(rules.non_resource_rules[0].non_resource_urls, Some(vec!["/healthz".to_owned()]));
    }
}
