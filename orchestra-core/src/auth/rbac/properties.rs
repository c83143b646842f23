//! Property tests of RBAC: roles and bindings of any shape never panic the
//! cache, and for generated roles, bindings and requests (verbs, API
//! groups, resources and subresources, resource names, non-resource URLs,
//! `*` and trailing `*` wildcards, every kind of subject) the authorizer
//! allows exactly what a naive reading of upstream's rules allows, after
//! any sequence of writes and deletes.

use std::collections::BTreeMap;

use proptest::prelude::*;
use serde_json::{Value, json};

use super::*;
use crate::properties::config;

const NAMESPACES: [&str; 2] = ["a", "b"];

fn subset(items: &[&'static str], max: usize) -> impl Strategy<Value = Vec<String>> + Clone + use<> {
    proptest::sample::subsequence(items.to_vec(), 0..=max.min(items.len()))
        .prop_map(|items| items.into_iter().map(String::from).collect())
}

/// A rule as stored: any mix of the fields, wildcards included.
fn rule() -> impl Strategy<Value = Value> + Clone {
    (
        subset(&["get", "list", "create", "delete", "*"], 3),
        proptest::option::of(subset(&["", "apps", "*"], 2)),
        proptest::option::of(subset(&["pods", "deployments", "*", "pods/log", "*/status", "pods/*", "*/log"], 3)),
        proptest::option::of(subset(&["x", "y", ""], 2)),
        proptest::option::weighted(0.5, subset(&["/healthz", "/healthz/*", "/api**", "*", "/ap*", "/metrics"], 2)),
    )
        .prop_map(|(verbs, groups, resources, names, urls)| {
            let mut rule = json!({"verbs": verbs});
            for (field, value) in
                [("apiGroups", groups), ("resources", resources), ("resourceNames", names), ("nonResourceURLs", urls)]
            {
                if let Some(value) = value {
                    rule[field] = json!(value);
                }
            }
            rule
        })
}

fn subject() -> impl Strategy<Value = Value> + Clone {
    let kinds = proptest::sample::select(vec!["User", "User", "Group", "ServiceAccount", "Robot"]);
    let names = proptest::sample::select(vec!["alice", "bob", "dev", "robot", "system:serviceaccount:a:robot"]);
    let namespaces = proptest::option::of(proptest::sample::select(vec!["", "a", "b"]));
    (kinds, names, namespaces).prop_map(|(kind, name, namespace)| {
        let mut subject = json!({"kind": kind, "name": name});
        if let Some(namespace) = namespace {
            subject["namespace"] = json!(namespace);
        }
        subject
    })
}

/// One object as written: its kind, its store key, and its JSON.
#[derive(Debug, Clone)]
struct Object {
    kind: Kind,
    key: String,
    value: Value,
}

fn object() -> impl Strategy<Value = Object> {
    let namespace = proptest::sample::select(NAMESPACES.to_vec());
    let rules = proptest::collection::vec(rule(), 0..3);
    let role = (namespace.clone(), proptest::sample::select(vec!["r1", "r2"]), rules.clone()).prop_map(
        |(namespace, name, rules)| Object {
            kind: Kind::Role,
            key: format!("/roles/{namespace}/{name}"),
            value: json!({"metadata": {"name": name, "namespace": namespace}, "rules": rules}),
        },
    );
    let cluster_role =
        (proptest::sample::select(vec!["c1", "c2", "r1"]), rules.clone()).prop_map(|(name, rules)| Object {
            kind: Kind::ClusterRole,
            key: format!("/clusterroles/{name}"),
            value: json!({"metadata": {"name": name}, "rules": rules}),
        });
    let role_ref = (
        proptest::sample::select(vec!["Role", "ClusterRole", "ClusterRole", "Other"]),
        proptest::sample::select(vec!["r1", "r2", "c1", "c2"]),
    )
        .prop_map(|(kind, name)| json!({"apiGroup": GROUP, "kind": kind, "name": name}));
    let subjects = proptest::collection::vec(subject(), 0..3);
    // Now and then a RoleBinding stored without a namespace: it must grant
    // nowhere.
    let binding_namespace = proptest::option::weighted(0.8, namespace);
    let binding = (binding_namespace, proptest::sample::select(vec!["b1", "b2"]), role_ref.clone(), subjects.clone())
        .prop_map(|(namespace, name, role_ref, subjects)| Object {
            kind: Kind::RoleBinding,
            key: format!("/rolebindings/{}/{name}", namespace.unwrap_or("-")),
            value: json!({"metadata": {"name": name, "namespace": namespace}, "roleRef": role_ref, "subjects": subjects}),
        });
    let cluster_binding =
        (proptest::sample::select(vec!["b1", "b2"]), role_ref, subjects).prop_map(|(name, role_ref, subjects)| {
            Object {
                kind: Kind::ClusterRoleBinding,
                key: format!("/clusterrolebindings/{name}"),
                value: json!({"metadata": {"name": name}, "roleRef": role_ref, "subjects": subjects}),
            }
        });
    prop_oneof![role, cluster_role, binding, cluster_binding]
}

/// A write or a delete of an object (deletes name a key that may hold
/// nothing).
#[derive(Debug, Clone)]
enum Op {
    Put(Object),
    Delete(Object),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![4 => object().prop_map(Op::Put), 1 => object().prop_map(Op::Delete)]
}

/// Every request of a small universe: four users (by name, group and
/// service account), each verb on each resource, subresource and name in
/// each namespace (none included), and each path. Checking all of them
/// against every generated set of objects finds a wrong decision whenever
/// the objects grant something the authorizer reads differently.
fn requests() -> Vec<Attributes> {
    let users = [
        UserInfo::new("alice", &["dev"]),
        UserInfo::new("bob", &["ops"]),
        UserInfo::new("system:serviceaccount:a:robot", &["system:serviceaccounts"]),
        UserInfo::new("system:serviceaccount:b:robot", &[]),
    ];
    let verbs = ["get", "create", "delete"];
    let mut requests = Vec::new();
    for user in &users {
        for verb in verbs {
            for path in ["/healthz", "/healthz/etcd", "/api", "/apis/apps", "/ap", "/metrics", "/api*x"] {
                requests.push(Attributes {
                    user: user.clone(),
                    verb: verb.into(),
                    path: path.into(),
                    ..Default::default()
                });
            }
            for namespace in ["", "a", "b"] {
                for api_group in ["", "apps"] {
                    for resource in ["pods", "deployments"] {
                        for subresource in ["", "log"] {
                            for name in ["", "x"] {
                                requests.push(Attributes {
                                    user: user.clone(),
                                    verb: verb.into(),
                                    resource_request: true,
                                    api_group: api_group.into(),
                                    resource: resource.into(),
                                    subresource: subresource.into(),
                                    name: name.into(),
                                    namespace: namespace.into(),
                                    path: String::new(),
                                });
                            }
                        }
                    }
                }
            }
        }
    }
    requests
}

/// Reads a list of strings of a JSON object (absent: empty).
fn strings(value: &Value, field: &str) -> Vec<String> {
    value[field].as_array().map(|a| a.iter().filter_map(|s| s.as_str().map(String::from)).collect()).unwrap_or_default()
}

/// Upstream's `RuleAllows`, written out from its description.
fn reference_rule_allows(rule: &Value, a: &Attributes) -> bool {
    let verbs = strings(rule, "verbs");
    if !verbs.iter().any(|v| v == "*" || *v == a.verb) {
        return false;
    }
    if !a.resource_request {
        return strings(rule, "nonResourceURLs").iter().any(|url| {
            url == "*" || *url == a.path || (url.ends_with('*') && a.path.starts_with(url.trim_end_matches('*')))
        });
    }
    let combined =
        if a.subresource.is_empty() { a.resource.clone() } else { format!("{}/{}", a.resource, a.subresource) };
    let group = strings(rule, "apiGroups").iter().any(|g| g == "*" || *g == a.api_group);
    let resource = strings(rule, "resources")
        .iter()
        .any(|r| r == "*" || *r == combined || (!a.subresource.is_empty() && *r == format!("*/{}", a.subresource)));
    let names = strings(rule, "resourceNames");
    group && resource && (names.is_empty() || names.contains(&a.name))
}

/// Whether `subject` of a binding in `namespace` (`""` for a
/// ClusterRoleBinding) names `user`.
fn reference_subject(subject: &Value, namespace: &str, user: &UserInfo) -> bool {
    let name = subject["name"].as_str().unwrap_or_default();
    match subject["kind"].as_str() {
        Some("User") => user.name == name,
        Some("Group") => user.groups.iter().any(|g| g == name),
        Some("ServiceAccount") => {
            let sa_namespace = subject["namespace"].as_str().filter(|n| !n.is_empty()).unwrap_or(namespace);
            !sa_namespace.is_empty() && user.name == format!("system:serviceaccount:{sa_namespace}:{name}")
        }
        _ => false,
    }
}

/// Whether the objects in `store` allow `a`: some binding that applies
/// (a ClusterRoleBinding anywhere, a RoleBinding in its own, non-empty
/// namespace) names the user and refers to an existing role with a rule
/// allowing it.
fn reference_allows(store: &BTreeMap<String, Object>, a: &Attributes) -> bool {
    let find = |kind: Kind, namespace: Option<&str>, name: &str| {
        store.values().find(|o| {
            o.kind == kind
                && o.value["metadata"]["name"] == name
                && namespace.is_none_or(|ns| o.value["metadata"]["namespace"] == ns)
        })
    };
    store.values().any(|binding| {
        let namespace = match binding.kind {
            Kind::ClusterRoleBinding => "",
            Kind::RoleBinding => match binding.value["metadata"]["namespace"].as_str() {
                Some(ns) if !ns.is_empty() && ns == a.namespace => ns,
                _ => return false,
            },
            _ => return false,
        };
        let subjects = binding.value["subjects"].as_array().map(Vec::as_slice).unwrap_or_default();
        if !subjects.iter().any(|s| reference_subject(s, namespace, &a.user)) {
            return false;
        }
        let role_ref = &binding.value["roleRef"];
        let name = role_ref["name"].as_str().unwrap_or_default();
        let role = match role_ref["kind"].as_str() {
            Some("ClusterRole") => find(Kind::ClusterRole, None, name),
            Some("Role") if !namespace.is_empty() => find(Kind::Role, Some(namespace), name),
            _ => None,
        };
        role.is_some_and(|role| {
            role.value["rules"].as_array().is_some_and(|rules| rules.iter().any(|r| reference_rule_allows(r, a)))
        })
    })
}

/// A value that is not a role or binding RBAC can read: no metadata name,
/// or fields of other types.
fn junk() -> impl Strategy<Value = Vec<u8>> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<i64>().prop_map(Value::from),
        "\\PC{0,8}".prop_map(Value::from),
        Just(json!({"name": 3})),
        Just(json!([{"verbs": "get"}])),
    ];
    let value = leaf.prop_recursive(3, 16, 4, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::from),
            proptest::collection::btree_map(
                proptest::sample::select(vec!["rules", "roleRef", "subjects", "kind", "name", "verbs", "namespace"]),
                inner,
                0..4,
            )
            .prop_map(|m| Value::Object(m.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())),
        ]
    });
    prop_oneof![
        value.prop_map(|mut v| {
            // Never a readable metadata name.
            if let Value::Object(map) = &mut v {
                map.insert("metadata".into(), json!({"name": 7}));
            }
            serde_json::to_vec(&v).unwrap()
        }),
        any::<Vec<u8>>(),
    ]
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn decisions_agree_with_the_reference(
        ops in proptest::collection::vec(op(), 0..16),
    ) {
        let cache = Arc::new(RbacCache::default());
        let rbac = RbacAuthorizer::new(cache.clone());
        let mut store = BTreeMap::new();
        for op in &ops {
            match op {
                Op::Put(object) => {
                    cache.put(object.kind, &object.key, &serde_json::to_vec(&object.value).unwrap());
                    store.insert(object.key.clone(), object.clone());
                }
                Op::Delete(object) => {
                    cache.delete(&object.key);
                    store.remove(&object.key);
                }
            }
        }
        for attributes in &requests() {
            let expected = reference_allows(&store, attributes);
            prop_assert_eq!(rbac.allows(attributes), expected, "{:?}\nwith {:#?}", attributes, store);
        }
    }

    #[test]
    fn objects_of_any_shape_never_panic_or_grant(
        ops in proptest::collection::vec(op(), 0..8),
        junk in proptest::collection::vec((0..4usize, "[a-z]{1,3}", junk()), 0..8),
    ) {
        let cache = Arc::new(RbacCache::default());
        let rbac = RbacAuthorizer::new(cache.clone());
        let mut store = BTreeMap::new();
        for op in ops {
            if let Op::Put(object) = op {
                cache.put(object.kind, &object.key, &serde_json::to_vec(&object.value).unwrap());
                store.insert(object.key.clone(), object);
            }
        }
        for (kind, name, bytes) in &junk {
            let kind = Kind::ALL[*kind];
            let key = format!("/junk/{kind:?}/{name}");
            cache.put(kind, &key, bytes);
            cache.delete(&format!("/junk/never/{name}"));
        }
        for attributes in &requests() {
            prop_assert_eq!(rbac.allows(attributes), reference_allows(&store, attributes));
            let _ = rbac.rules(&attributes.user, &attributes.namespace);
        }
    }
}
