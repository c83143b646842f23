//! The roles and bindings RBAC decides from, kept from a list and a watch of
//! the store (upstream's authorizer reads informers the same way), indexed
//! so that a decision reads only the bindings naming the user or one of its
//! groups, and the roles those bindings refer to by name.

use std::sync::{Arc, RwLock};

use foldhash::{HashMap, HashSet};
use k8s_openapi::api::rbac::v1::{PolicyRule, RoleRef, Subject};
use orchestra_store::{Event, EventKind, KeyValue};
use serde::Deserialize;

use super::rules::{SubjectKey, subject_key};
use crate::auth::UserInfo;

/// The four kinds RBAC reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Kind {
    Role,
    ClusterRole,
    RoleBinding,
    ClusterRoleBinding,
}

impl Kind {
    pub(crate) const ALL: [Kind; 4] = [Kind::Role, Kind::ClusterRole, Kind::RoleBinding, Kind::ClusterRoleBinding];
}

/// A RoleBinding or ClusterRoleBinding as RBAC reads it.
#[derive(Debug)]
pub(crate) struct Binding {
    /// `""` for a ClusterRoleBinding.
    pub namespace: String,
    pub name: String,
    pub role_ref: RoleRef,
    pub subjects: Vec<Subject>,
}

/// The bindings of one scope (the cluster, or one namespace) by the
/// subjects they name.
#[derive(Default)]
struct SubjectIndex {
    users: HashMap<String, HashSet<String>>,
    groups: HashMap<String, HashSet<String>>,
}

impl SubjectIndex {
    fn set(&mut self, key: &SubjectKey) -> &mut HashSet<String> {
        match key {
            SubjectKey::User(name) => self.users.entry(name.clone()).or_default(),
            SubjectKey::Group(name) => self.groups.entry(name.clone()).or_default(),
        }
    }

    fn remove(&mut self, key: &SubjectKey, binding: &str) {
        let map = match key {
            SubjectKey::User(_) => &mut self.users,
            SubjectKey::Group(_) => &mut self.groups,
        };
        let (SubjectKey::User(name) | SubjectKey::Group(name)) = key;
        if let Some(set) = map.get_mut(name) {
            set.remove(binding);
            if set.is_empty() {
                map.remove(name);
            }
        }
    }

    /// The store keys of the bindings naming `user` or one of its groups.
    fn for_user<'a>(&'a self, user: &'a UserInfo) -> impl Iterator<Item = &'a String> + 'a {
        let by_name = self.users.get(&user.name).into_iter().flatten();
        let by_group = user.groups.iter().filter_map(|g| self.groups.get(g)).flatten();
        by_name.chain(by_group)
    }
}

/// What the cache holds. Its maps hash with foldhash (seeded per map):
/// every authorized request looks up several of them, and SipHash costs
/// several times as much on short names.
#[derive(Default)]
struct Index {
    /// Roles by (namespace, name).
    roles: HashMap<String, HashMap<String, Arc<[PolicyRule]>>>,
    /// ClusterRoles by name.
    cluster_roles: HashMap<String, Arc<[PolicyRule]>>,
    /// Bindings by store key.
    bindings: HashMap<String, Arc<Binding>>,
    /// ClusterRoleBindings by subject.
    cluster_subjects: SubjectIndex,
    /// RoleBindings by namespace, then subject.
    namespace_subjects: HashMap<String, SubjectIndex>,
    /// The store keys of each kind's objects, with the namespace and name
    /// they were decoded with, to forget them on delete.
    names: HashMap<String, (Kind, String, String)>,
}

impl Index {
    fn insert(&mut self, kind: Kind, key: &str, value: &[u8]) {
        self.remove(key);
        let Ok(object) = serde_json::from_slice::<Stored>(value) else {
            tracing::warn!(key, "stored RBAC object does not decode; ignored");
            return;
        };
        let namespace = object.metadata.namespace.unwrap_or_default();
        let name = object.metadata.name;
        match kind {
            Kind::Role => {
                let rules: Arc<[PolicyRule]> = object.rules.unwrap_or_default().into();
                self.roles.entry(namespace.clone()).or_default().insert(name.clone(), rules);
            }
            Kind::ClusterRole => {
                self.cluster_roles.insert(name.clone(), object.rules.unwrap_or_default().into());
            }
            Kind::RoleBinding | Kind::ClusterRoleBinding => {
                let Some(role_ref) = object.role_ref else { return };
                let binding_namespace = if kind == Kind::RoleBinding { namespace.as_str() } else { "" };
                let binding = Binding {
                    namespace: binding_namespace.to_owned(),
                    name: name.clone(),
                    role_ref,
                    subjects: object.subjects.unwrap_or_default(),
                };
                let index = if kind == Kind::RoleBinding {
                    self.namespace_subjects.entry(namespace.clone()).or_default()
                } else {
                    &mut self.cluster_subjects
                };
                for subject in &binding.subjects {
                    if let Some(subject) = subject_key(subject, binding_namespace) {
                        index.set(&subject).insert(key.to_owned());
                    }
                }
                self.bindings.insert(key.to_owned(), Arc::new(binding));
            }
        }
        self.names.insert(key.to_owned(), (kind, namespace, name));
    }

    fn remove(&mut self, key: &str) {
        let Some((kind, namespace, name)) = self.names.remove(key) else { return };
        match kind {
            Kind::Role => {
                if let Some(roles) = self.roles.get_mut(&namespace) {
                    roles.remove(&name);
                    if roles.is_empty() {
                        self.roles.remove(&namespace);
                    }
                }
            }
            Kind::ClusterRole => {
                self.cluster_roles.remove(&name);
            }
            Kind::RoleBinding | Kind::ClusterRoleBinding => {
                let Some(binding) = self.bindings.remove(key) else { return };
                let index = if kind == Kind::RoleBinding {
                    self.namespace_subjects.get_mut(&namespace)
                } else {
                    Some(&mut self.cluster_subjects)
                };
                let Some(index) = index else { return };
                for subject in &binding.subjects {
                    if let Some(subject) = subject_key(subject, &binding.namespace) {
                        index.remove(&subject, key);
                    }
                }
                if kind == Kind::RoleBinding && index.users.is_empty() && index.groups.is_empty() {
                    self.namespace_subjects.remove(&namespace);
                }
            }
        }
    }

    fn forget(&mut self, kind: Kind) {
        let keys: Vec<String> =
            self.names.iter().filter(|(_, (k, _, _))| *k == kind).map(|(key, _)| key.clone()).collect();
        for key in keys {
            self.remove(&key);
        }
    }
}

/// The fields of a stored role or binding RBAC reads.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Stored {
    metadata: Metadata,
    rules: Option<Vec<PolicyRule>>,
    role_ref: Option<RoleRef>,
    subjects: Option<Vec<Subject>>,
}

#[derive(Deserialize)]
struct Metadata {
    name: String,
    namespace: Option<String>,
}

/// Roles, ClusterRoles, RoleBindings and ClusterRoleBindings, indexed for
/// [`RbacAuthorizer`](super::RbacAuthorizer).
#[derive(Default)]
pub struct RbacCache {
    index: RwLock<Index>,
}

impl std::fmt::Debug for RbacCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let index = self.read();
        f.debug_struct("RbacCache")
            .field("cluster_roles", &index.cluster_roles.len())
            .field("bindings", &index.bindings.len())
            .finish_non_exhaustive()
    }
}

/// Where a rule a user holds comes from: the binding and its role.
pub(crate) struct Grant<'a> {
    pub binding: &'a Binding,
    pub rules: &'a [PolicyRule],
}

impl RbacCache {
    fn read(&self) -> std::sync::RwLockReadGuard<'_, Index> {
        self.index.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Index> {
        self.index.write().unwrap_or_else(|e| e.into_inner())
    }

    /// Records a stored object of `kind` under store key `key`.
    pub(crate) fn put(&self, kind: Kind, key: &str, value: &[u8]) {
        self.write().insert(kind, key, value);
    }

    /// Forgets the object stored under `key`.
    pub(crate) fn delete(&self, key: &str) {
        self.write().remove(key);
    }

    /// Replaces every object of `kind` with `kvs`.
    fn replace(&self, kind: Kind, kvs: &[KeyValue]) {
        let mut index = self.write();
        index.forget(kind);
        for kv in kvs {
            index.insert(kind, &kv.key, &kv.value);
        }
    }

    /// Calls `visit` with each grant `user` holds in `namespace` (`""`: the
    /// ClusterRoleBindings alone), ClusterRoleBindings first, until it
    /// returns `true`; returns whether one did. A binding whose role does not
    /// exist grants nothing. A binding naming the user through several
    /// subjects (its name and a group) is visited once per subject.
    pub(crate) fn visit(&self, user: &UserInfo, namespace: &str, mut visit: impl FnMut(Grant<'_>) -> bool) -> bool {
        let index = self.read();
        // RoleBindings grant in their namespace only: never to a request
        // without one (cluster-scoped, or a path), even one stored without
        // a namespace.
        let namespaced = index
            .namespace_subjects
            .get(namespace)
            .filter(|_| !namespace.is_empty())
            .into_iter()
            .flat_map(|s| s.for_user(user));
        for key in index.cluster_subjects.for_user(user).chain(namespaced) {
            let Some(binding) = index.bindings.get(key) else { continue };
            let Some(rules) = role_rules(&index, &binding.role_ref, &binding.namespace) else { continue };
            if visit(Grant { binding, rules }) {
                return true;
            }
        }
        false
    }
}

impl RbacCache {
    /// The rules of the role `role_ref` names from a binding in `namespace`
    /// (`""` for a ClusterRoleBinding), if it exists.
    pub(crate) fn role_rules(&self, role_ref: &RoleRef, namespace: &str) -> Option<Vec<PolicyRule>> {
        role_rules(&self.read(), role_ref, namespace).map(<[PolicyRule]>::to_vec)
    }
}

/// The rules of the role `role_ref` names from a binding in `namespace`
/// (`""` for a ClusterRoleBinding, which can only refer to ClusterRoles).
fn role_rules<'a>(index: &'a Index, role_ref: &RoleRef, namespace: &str) -> Option<&'a [PolicyRule]> {
    match role_ref.kind.as_str() {
        "ClusterRole" => index.cluster_roles.get(&role_ref.name).map(|r| &**r),
        "Role" if !namespace.is_empty() => index.roles.get(namespace)?.get(&role_ref.name).map(|r| &**r),
        _ => None,
    }
}

impl Kind {
    /// The kind whose objects a store prefix holds: its last segment is the
    /// plural (`/registry/rbac.authorization.k8s.io/roles/`).
    fn of_prefix(prefix: &str) -> Option<Kind> {
        match prefix.trim_end_matches('/').rsplit('/').next()? {
            "roles" => Some(Kind::Role),
            "clusterroles" => Some(Kind::ClusterRole),
            "rolebindings" => Some(Kind::RoleBinding),
            "clusterrolebindings" => Some(Kind::ClusterRoleBinding),
            _ => None,
        }
    }
}

impl crate::server::Follower for RbacCache {
    fn reset(&self, prefix: &str, listed: Vec<KeyValue>) {
        if let Some(kind) = Kind::of_prefix(prefix) {
            self.replace(kind, &listed);
        }
    }

    fn apply(&self, prefix: &str, event: &Event) {
        match (event.kind, Kind::of_prefix(prefix)) {
            (EventKind::Delete, _) => self.delete(&event.kv.key),
            (_, Some(kind)) => self.put(kind, &event.kv.key, &event.kv.value),
            (_, None) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn put(cache: &RbacCache, kind: Kind, key: &str, value: serde_json::Value) {
        cache.put(kind, key, &serde_json::to_vec(&value).unwrap());
    }

    /// The names of the bindings `user` holds grants through in `namespace`.
    fn grants(cache: &RbacCache, user: &UserInfo, namespace: &str) -> Vec<String> {
        let mut names = Vec::new();
        cache.visit(user, namespace, |grant| {
            names.push(format!("{}/{}", grant.binding.namespace, grant.binding.name));
            false
        });
        names.sort();
        names.dedup();
        names
    }

    fn binding(
        namespace: Option<&str>,
        name: &str,
        role: (&str, &str),
        subjects: serde_json::Value,
    ) -> serde_json::Value {
        json!({
            "metadata": {"name": name, "namespace": namespace},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role.0, "name": role.1},
            "subjects": subjects,
        })
    }

    #[test]
    fn grants_follow_bindings_by_subject_and_scope() {
        let cache = RbacCache::default();
        let rules = json!([{"verbs": ["get"], "apiGroups": [""], "resources": ["pods"]}]);
        put(&cache, Kind::ClusterRole, "/cr/view", json!({"metadata": {"name": "view"}, "rules": rules}));
        put(&cache, Kind::Role, "/r/a/local", json!({"metadata": {"name": "local", "namespace": "a"}, "rules": rules}));
        put(&cache, Kind::Role, "/r/b/local", json!({"metadata": {"name": "local", "namespace": "b"}, "rules": rules}));
        let user = |name: &str| json!([{"kind": "User", "name": name}]);
        let bindings = [
            (
                Kind::ClusterRoleBinding,
                "/crb/all",
                binding(None, "all", ("ClusterRole", "view"), json!([{"kind": "Group", "name": "ops"}])),
            ),
            (Kind::RoleBinding, "/rb/a/view", binding(Some("a"), "view", ("ClusterRole", "view"), user("alice"))),
            (Kind::RoleBinding, "/rb/a/local", binding(Some("a"), "local", ("Role", "local"), user("alice"))),
            (Kind::RoleBinding, "/rb/a/missing", binding(Some("a"), "missing", ("Role", "nope"), user("alice"))),
            (
                Kind::RoleBinding,
                "/rb/a/sa",
                binding(Some("a"), "sa", ("Role", "local"), json!([{"kind": "ServiceAccount", "name": "robot"}])),
            ),
            (
                Kind::RoleBinding,
                "/rb/a/twice",
                binding(
                    Some("a"),
                    "twice",
                    ("Role", "local"),
                    json!([{"kind": "User", "name": "alice"}, {"kind": "Group", "name": "dev"}]),
                ),
            ),
            // A ClusterRoleBinding cannot refer to a Role.
            (Kind::ClusterRoleBinding, "/crb/role", binding(None, "role", ("Role", "local"), user("alice"))),
        ];
        for (kind, key, value) in bindings {
            put(&cache, kind, key, value);
        }
        let alice = UserInfo::new("alice", &["dev"]);
        let bob = UserInfo::new("bob", &["ops"]);
        let robot = UserInfo::new("system:serviceaccount:a:robot", &[]);
        let cases: [(&UserInfo, &str, &[&str]); 7] = [
            (&alice, "a", &["a/local", "a/twice", "a/view"]),
            (&alice, "b", &[]),
            (&alice, "", &[]),
            (&bob, "a", &["/all"]),
            (&bob, "", &["/all"]),
            (&robot, "a", &["a/sa"]),
            (&robot, "b", &[]),
        ];
        for (user, namespace, expected) in cases {
            assert_eq!(grants(&cache, user, namespace), expected, "{} in {namespace:?}", user.name);
        }

        // Deletes and updates are followed; a relist replaces a kind.
        cache.delete("/rb/a/view");
        cache.delete("/rb/a/twice");
        assert_eq!(grants(&cache, &alice, "a"), ["a/local"]);
        cache.delete("/r/a/local");
        assert_eq!(grants(&cache, &alice, "a"), Vec::<String>::new());
        put(&cache, Kind::RoleBinding, "/rb/a/sa", binding(Some("a"), "sa", ("ClusterRole", "view"), user("alice")));
        assert_eq!(grants(&cache, &alice, "a"), ["a/sa"]);
        assert_eq!(grants(&cache, &robot, "a"), Vec::<String>::new());
        cache.replace(Kind::RoleBinding, &[]);
        assert_eq!(grants(&cache, &alice, "a"), Vec::<String>::new());
        assert_eq!(grants(&cache, &bob, "a"), ["/all"]);
        // A RoleBinding stored without a namespace grants nowhere: not to
        // requests without a namespace either.
        let nowhere = json!({
            "metadata": {"name": "nowhere"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
            "subjects": [{"kind": "User", "name": "carol"}],
        });
        put(&cache, Kind::RoleBinding, "/rb/nowhere", nowhere);
        assert_eq!(grants(&cache, &UserInfo::new("carol", &[]), ""), Vec::<String>::new());
        // What does not decode is ignored.
        cache.put(Kind::ClusterRoleBinding, "/crb/bad", b"not json");
        assert_eq!(grants(&cache, &bob, "a"), ["/all"]);
    }

    #[tokio::test]
    async fn the_cache_follows_the_store() {
        use std::time::Duration;

        use orchestra_store::Store;

        let store: Arc<dyn Store> = Arc::new(orchestra_store::MemStore::new());
        let cache = Arc::new(RbacCache::default());
        let value = |v: serde_json::Value| serde_json::to_vec(&v).unwrap().into();
        let rules = json!([{"verbs": ["get"], "apiGroups": [""], "resources": ["pods"]}]);
        store
            .put("/rbac/clusterroles/view", value(json!({"metadata": {"name": "view"}, "rules": rules})), None)
            .await
            .unwrap();
        for prefix in ["/rbac/clusterroles/", "/rbac/clusterrolebindings/"] {
            crate::server::follow(&cache, &store, prefix.into(), "RBAC").await.unwrap();
        }
        let alice = UserInfo::new("alice", &[]);
        assert!(grants(&cache, &alice, "").is_empty());
        let crb = binding(None, "b", ("ClusterRole", "view"), json!([{"kind": "User", "name": "alice"}]));
        store.put("/rbac/clusterrolebindings/b", value(crb), None).await.unwrap();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while grants(&cache, &alice, "").is_empty() {
            assert!(tokio::time::Instant::now() < deadline, "the watch delivers the binding");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        store.delete("/rbac/clusterroles/view", None).await.unwrap();
        while !grants(&cache, &alice, "").is_empty() {
            assert!(tokio::time::Instant::now() < deadline, "the watch delivers the delete");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}
