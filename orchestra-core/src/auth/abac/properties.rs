//! Property tests of ABAC policy files: no line panics the parser, what
//! parses prints back, and for generated policies the decision agrees with
//! a reference reading of upstream's matching rules.

use proptest::prelude::*;
use serde_json::{Value, json};

use super::*;
use crate::properties::config;

/// A field of a policy: absent, `*`, or one of the names requests use.
fn field(names: &'static [&'static str]) -> impl Strategy<Value = Option<String>> {
    let mut choices: Vec<&'static str> = vec!["*"];
    choices.extend_from_slice(names);
    proptest::option::weighted(0.7, proptest::sample::select(choices).prop_map(String::from))
}

#[derive(Debug, Clone)]
struct Generated {
    user: Option<String>,
    group: Option<String>,
    readonly: bool,
    api_group: Option<String>,
    resource: Option<String>,
    namespace: Option<String>,
    path: Option<String>,
}

impl Generated {
    fn line(&self) -> String {
        let mut spec = serde_json::Map::new();
        let mut set = |name: &str, value: &Option<String>| {
            if let Some(value) = value {
                spec.insert(name.into(), Value::from(value.as_str()));
            }
        };
        set("user", &self.user);
        set("group", &self.group);
        set("apiGroup", &self.api_group);
        set("resource", &self.resource);
        set("namespace", &self.namespace);
        set("nonResourcePath", &self.path);
        spec.insert("readonly".into(), Value::from(self.readonly));
        json!({"apiVersion": ABAC_API_VERSION, "kind": "Policy", "spec": spec}).to_string()
    }

    /// Upstream's matching, written out: the subject (user and group, each
    /// `*` or equal, at least one given), read-only verbs for read-only
    /// policies, then resource fields or the path (`*`, equal, or a prefix
    /// before trailing `*`s).
    fn allows(&self, a: &Attributes) -> bool {
        let user_ok = self.user.as_deref().is_none_or(|u| u == "*" || u == a.user.name);
        let group_ok = self.group.as_deref().is_none_or(|g| g == "*" || a.user.groups.iter().any(|x| x == g));
        let subject = (self.user.is_some() || self.group.is_some()) && user_ok && group_ok;
        let read = ["get", "list", "watch"].contains(&a.verb.as_str());
        let verb = read || !self.readonly;
        let field = |pattern: &Option<String>, value: &str| {
            let pattern = pattern.as_deref().unwrap_or_default();
            pattern == "*" || pattern == value
        };
        let target = if a.resource_request {
            field(&self.namespace, &a.namespace)
                && field(&self.resource, &a.resource)
                && field(&self.api_group, &a.api_group)
        } else {
            let path = self.path.as_deref().unwrap_or_default();
            path == "*" || path == a.path || (path.ends_with('*') && a.path.starts_with(path.trim_end_matches('*')))
        };
        subject && verb && target
    }
}

fn policy() -> impl Strategy<Value = Generated> {
    (
        field(&["alice", "bob"]),
        field(&["dev", "ops"]),
        any::<bool>(),
        field(&["", "apps"]),
        field(&["pods", "deployments"]),
        field(&["", "a", "b"]),
        field(&["/healthz", "/healthz*", "/healthz/*", "/api**", "/ap*", "", "/metrics"]),
    )
        .prop_map(|(user, group, readonly, api_group, resource, namespace, path)| Generated {
            user,
            group,
            readonly,
            api_group,
            resource,
            namespace,
            path,
        })
}

fn request() -> impl Strategy<Value = Attributes> {
    let users = proptest::sample::select(vec!["alice", "bob", "carol"]);
    let groups = proptest::sample::subsequence(vec!["dev", "ops", "system:authenticated"], 0..=3);
    let verbs = proptest::sample::select(vec!["get", "list", "watch", "create", "delete", "post"]);
    let resource = (
        proptest::sample::select(vec!["", "apps"]),
        proptest::sample::select(vec!["pods", "deployments", "secrets"]),
        proptest::sample::select(vec!["", "a", "b"]),
    );
    let path = proptest::sample::select(vec!["/healthz", "/healthz/etcd", "/api", "/apis/apps", "/ap", "/metrics", ""]);
    (users, groups, verbs, any::<bool>(), resource, path).prop_map(
        |(user, groups, verb, resource_request, (api_group, resource, namespace), path)| {
            let user = UserInfo::new(user, &groups);
            if resource_request {
                Attributes {
                    user,
                    verb: verb.into(),
                    resource_request,
                    api_group: api_group.into(),
                    resource: resource.into(),
                    namespace: namespace.into(),
                    ..Default::default()
                }
            } else {
                Attributes { user, verb: verb.into(), path: path.into(), ..Default::default() }
            }
        },
    )
}

/// A line that is nearly a policy: fields of the wrong type, unknown
/// fields, a wrong version, or text.
fn odd_line() -> impl Strategy<Value = String> {
    let scalar = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        "\\PC{0,6}".prop_map(Value::from),
        Just(json!([1, "x"])),
        Just(json!({"a": 1})),
    ];
    let names = proptest::sample::select(vec![
        "user",
        "group",
        "readonly",
        "apiGroup",
        "resource",
        "namespace",
        "nonResourcePath",
        "x",
    ]);
    let spec = proptest::collection::btree_map(names, scalar.clone(), 0..5);
    let version = proptest::sample::select(vec![ABAC_API_VERSION, "v1", ""]);
    prop_oneof![
        (version, scalar, spec).prop_map(|(version, kind, spec)| {
            let kind = if kind.is_null() { Value::from("Policy") } else { kind };
            json!({"apiVersion": version, "kind": kind, "spec": spec}).to_string()
        }),
        "\\PC{0,60}",
    ]
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn no_line_panics_the_parser(lines in proptest::collection::vec(odd_line(), 0..6)) {
        let file = lines.join("\n");
        if let Ok(abac) = AbacAuthorizer::parse(&file) {
            // Every policy kept names a subject.
            prop_assert!(abac.policies.iter().all(|p| !p.user.is_empty() || !p.group.is_empty()));
        }
    }

    #[test]
    fn decisions_agree_with_the_reference(
        policies in proptest::collection::vec(policy(), 0..6),
        requests in proptest::collection::vec(request(), 1..10),
    ) {
        let file: Vec<String> = policies.iter().map(Generated::line).collect();
        let parsed = AbacAuthorizer::parse(&file.join("\n"));
        let named = |p: &Generated| p.user.as_deref().is_some_and(|u| !u.is_empty()) || p.group.as_deref().is_some_and(|g| !g.is_empty());
        if !policies.iter().all(named) {
            prop_assert!(parsed.is_err(), "a policy without a subject is refused");
            return Ok(());
        }
        let abac = parsed.unwrap();
        for attributes in requests {
            let expected = policies.iter().any(|p| p.allows(&attributes));
            let decision = futures::executor::block_on(abac.authorize(&attributes));
            prop_assert_eq!(decision == Decision::Allow, expected, "{:?}\n{}", attributes, file.join("\n"));
        }
    }
}
