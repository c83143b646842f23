//! The Node authorizer's decisions as vectors, after the cases of
//! upstream's node authorizer tests.

use orchestra_store::EventKind;
use serde_json::json;

use super::*;
use crate::server::Follower;

fn kv(key: &str, value: Value) -> orchestra_store::KeyValue {
    orchestra_store::KeyValue {
        key: key.into(),
        value: serde_json::to_vec(&value).unwrap().into(),
        create_revision: 1,
        mod_revision: 1,
        version: 1,
        expires_at_ms: None,
    }
}

/// Node n1 runs pod `ns/web`, which uses secret `s1`, configmap `cm1`,
/// claim `pvc1` (bound to `pv1`) and service account `sa1`; node n0 runs
/// nothing. VolumeAttachment `va1` is for n1.
fn graph() -> Arc<NodeGraph> {
    let graph = Arc::new(NodeGraph::default());
    let web = json!({
        "metadata": {"name": "web", "namespace": "ns"},
        "spec": {
            "nodeName": "n1",
            "serviceAccountName": "sa1",
            "containers": [{"name": "c", "envFrom": [{"configMapRef": {"name": "cm1"}}]}],
            "volumes": [
                {"name": "s", "secret": {"secretName": "s1"}},
                {"name": "d", "persistentVolumeClaim": {"claimName": "pvc1"}},
            ],
        },
    });
    let unbound = json!({"metadata": {"name": "wait", "namespace": "ns"}, "spec": {"serviceAccountName": "sa2"}});
    graph.reset("/registry/pods/", vec![kv("/registry/pods/ns/web", web), kv("/registry/pods/ns/wait", unbound)]);
    let claim = json!({"metadata": {"name": "pvc1", "namespace": "ns"}, "spec": {"volumeName": "pv1"}});
    graph.reset("/registry/persistentvolumeclaims/", vec![kv("/registry/persistentvolumeclaims/ns/pvc1", claim)]);
    let attachment = json!({"metadata": {"name": "va1"}, "spec": {"nodeName": "n1"}});
    graph.reset(
        "/registry/storage.k8s.io/volumeattachments/",
        vec![kv("/registry/storage.k8s.io/volumeattachments/va1", attachment)],
    );
    graph
}

fn request(user: &UserInfo, verb: &str, resource: &str, namespace: &str, name: &str) -> Attributes {
    let (group, resource) = match resource.split_once('.') {
        Some((resource, group)) => (group, resource),
        None => ("", resource),
    };
    let (resource, subresource) = resource.split_once('/').unwrap_or((resource, ""));
    Attributes {
        user: user.clone(),
        verb: verb.into(),
        resource_request: true,
        api_group: group.into(),
        resource: resource.into(),
        subresource: subresource.into(),
        namespace: namespace.into(),
        name: name.into(),
        path: String::new(),
    }
}

#[tokio::test]
async fn decisions() {
    let authorizer = NodeAuthorizer::new(graph());
    let n1 = UserInfo::new("system:node:n1", &["system:nodes", "system:authenticated"]);
    let n0 = UserInfo::new("system:node:n0", &["system:nodes"]);
    let not_in_group = UserInfo::new("system:node:n1", &["system:authenticated"]);
    let not_a_node = UserInfo::new("alice", &["system:nodes"]);
    let (allow, none) = (true, false);
    #[rustfmt::skip]
    let cases: &[(&UserInfo, &str, &str, &str, &str, bool)] = &[
        // Objects its pods use, and no others.
        (&n1, "get", "secrets", "ns", "s1", allow),
        (&n1, "list", "secrets", "ns", "s1", allow),
        (&n1, "watch", "secrets", "ns", "s1", allow),
        (&n0, "get", "secrets", "ns", "s1", none),
        (&n1, "get", "secrets", "other", "s1", none),
        (&n1, "get", "secrets", "ns", "s2", none),
        (&n1, "list", "secrets", "ns", "", none),
        (&n1, "update", "secrets", "ns", "s1", none),
        (&n1, "delete", "secrets", "ns", "s1", none),
        (&n1, "get", "configmaps", "ns", "cm1", allow),
        (&n0, "get", "configmaps", "ns", "cm1", none),
        (&n1, "watch", "configmaps", "ns", "", none),
        (&n1, "get", "persistentvolumeclaims", "ns", "pvc1", allow),
        (&n1, "list", "persistentvolumeclaims", "ns", "pvc1", none),
        (&n1, "update", "persistentvolumeclaims", "ns", "pvc1", none),
        (&n1, "update", "persistentvolumeclaims/status", "ns", "pvc1", allow),
        (&n0, "update", "persistentvolumeclaims/status", "ns", "pvc1", none),
        (&n1, "get", "persistentvolumes", "", "pv1", allow),
        (&n0, "get", "persistentvolumes", "", "pv1", none),
        (&n1, "get", "persistentvolumes", "", "pv2", none),
        (&n1, "list", "persistentvolumes", "", "", none),
        (&n1, "create", "serviceaccounts/token", "ns", "sa1", allow),
        (&n1, "create", "serviceaccounts/token", "ns", "sa2", none),
        (&n0, "create", "serviceaccounts/token", "ns", "sa1", none),
        (&n1, "get", "volumeattachments.storage.k8s.io", "", "va1", allow),
        (&n0, "get", "volumeattachments.storage.k8s.io", "", "va1", none),
        // Its own Lease and CSINode only.
        (&n1, "get", "leases.coordination.k8s.io", "kube-node-lease", "n1", allow),
        (&n1, "update", "leases.coordination.k8s.io", "kube-node-lease", "n1", allow),
        (&n1, "create", "leases.coordination.k8s.io", "kube-node-lease", "", allow),
        (&n1, "update", "leases.coordination.k8s.io", "kube-node-lease", "n0", none),
        (&n1, "get", "leases.coordination.k8s.io", "kube-system", "n1", none),
        (&n1, "list", "leases.coordination.k8s.io", "kube-node-lease", "", none),
        (&n1, "patch", "csinodes.storage.k8s.io", "", "n1", allow),
        (&n1, "patch", "csinodes.storage.k8s.io", "", "n0", none),
        // The rest: the system:node role's rules.
        (&n1, "get", "pods", "ns", "web", allow),
        (&n1, "watch", "pods", "", "", allow),
        (&n1, "create", "pods", "ns", "", allow),
        (&n1, "update", "pods/status", "ns", "web", allow),
        (&n1, "create", "nodes", "", "", allow),
        (&n1, "patch", "nodes/status", "", "n1", allow),
        (&n1, "list", "services", "", "", allow),
        (&n1, "create", "events", "ns", "", allow),
        (&n1, "create", "certificatesigningrequests.certificates.k8s.io", "", "", allow),
        (&n1, "create", "pods/exec", "ns", "web", none),
        (&n1, "list", "deployments.apps", "", "", none),
        (&n1, "delete", "nodes", "", "n0", none),
        // Only node agents.
        (&not_in_group, "get", "pods", "ns", "web", none),
        (&not_a_node, "get", "pods", "ns", "web", none),
    ];
    for (user, verb, resource, namespace, name, allowed) in cases {
        let attributes = request(user, verb, resource, namespace, name);
        let decision = authorizer.authorize(&attributes).await;
        let what = format!("{} {verb} {resource} {namespace}/{name}: {decision:?}", user.name);
        match allowed {
            true => assert_eq!(decision, Decision::Allow, "{what}"),
            false => assert!(decision.is_no_opinion(), "{what}"),
        }
    }
    let healthz = Attributes { user: n1.clone(), verb: "get".into(), path: "/healthz".into(), ..Default::default() };
    assert_eq!(authorizer.authorize(&healthz).await, Decision::no_opinion());
}

/// Why a node is not allowed: upstream's reasons, which the 403 carries
/// after the request's description.
#[tokio::test]
async fn reasons() {
    let authorizer = NodeAuthorizer::new(graph());
    let n1 = UserInfo::new("system:node:n1", &["system:nodes"]);
    let nameless = UserInfo::new("system:node:", &["system:nodes"]);
    let alice = UserInfo::new("alice", &["system:nodes"]);
    let unrelated = "no relationship found between node \"n1\" and this object";
    #[rustfmt::skip]
    let cases: &[(&UserInfo, &str, &str, &str, &str, &str)] = &[
        (&n1, "get", "secrets", "ns", "s2", unrelated),
        (&n1, "get", "configmaps", "other", "cm1", unrelated),
        (&n1, "get", "persistentvolumes", "", "pv2", unrelated),
        (&n1, "create", "serviceaccounts/token", "ns", "sa2", unrelated),
        (&n1, "update", "secrets", "ns", "s1", "can only read resources of this type"),
        (&n1, "get", "secrets/status", "ns", "s1", "cannot read subresource"),
        (&n1, "list", "configmaps", "", "", "can only read namespaced object of this type"),
        (&n1, "list", "secrets", "ns", "", "No Object name found"),
        (&n1, "list", "persistentvolumeclaims", "ns", "pvc1", "can only get individual resources of this type"),
        (&n1, "get", "persistentvolumes/status", "", "pv1", "cannot get subresource"),
        (&n1, "delete", "persistentvolumeclaims/status", "ns", "pvc1", "can only get/update/patch this type"),
        (&n1, "get", "serviceaccounts/token", "ns", "sa1", "can only create tokens for individual service accounts"),
        (&n1, "list", "leases.coordination.k8s.io", "kube-node-lease", "",
         "can only get, create, update, patch, or delete a node lease"),
        (&n1, "get", "leases.coordination.k8s.io", "kube-system", "n1",
         "can only access leases in the \"kube-node-lease\" system namespace"),
        (&n1, "update", "leases.coordination.k8s.io", "kube-node-lease", "n0",
         "can only access node lease with the same name as the requesting node"),
        (&n1, "watch", "csinodes.storage.k8s.io", "", "", "can only get, create, update, patch, or delete a CSINode"),
        (&n1, "get", "csinodes/status.storage.k8s.io", "", "n1", "cannot authorize CSINode subresources"),
        (&n1, "delete", "csinodes.storage.k8s.io", "", "n0",
         "can only access CSINode with the same name as the requesting node"),
        // What the system:node role does not grant has no reason: RBAC may.
        (&n1, "list", "deployments.apps", "", "", ""),
        (&nameless, "get", "pods", "ns", "web", "unknown node for user \"system:node:\""),
        (&alice, "get", "secrets", "ns", "s1", ""),
    ];
    for (user, verb, resource, namespace, name, reason) in cases {
        let attributes = request(user, verb, resource, namespace, name);
        assert_eq!(
            authorizer.authorize(&attributes).await,
            Decision::NoOpinion((*reason).into()),
            "{} {verb} {resource} {namespace}/{name}",
            user.name
        );
    }
}

#[tokio::test]
async fn a_relation_the_graph_has_not_seen_is_read_from_the_store() {
    let store: Arc<dyn Store> = Arc::new(orchestra_store::MemStore::new());
    let lookup = Lookup {
        store: store.clone(),
        pods: "/registry/pods/".into(),
        volumes: "/registry/persistentvolumes/".into(),
        attachments: "/registry/storage.k8s.io/volumeattachments/".into(),
    };
    let authorizer = NodeAuthorizer::with_lookup(Arc::new(NodeGraph::default()), lookup);
    let n1 = UserInfo::new("system:node:n1", &["system:nodes"]);
    let secret = request(&n1, "get", "secrets", "ns", "s1");
    assert!(authorizer.authorize(&secret).await.is_no_opinion());
    let pod = json!({
        "metadata": {"name": "web", "namespace": "ns"},
        "spec": {"nodeName": "n1", "volumes": [
            {"name": "s", "secret": {"secretName": "s1"}},
            {"name": "d", "persistentVolumeClaim": {"claimName": "pvc1"}},
        ]},
    });
    let bytes = |v: &Value| serde_json::to_vec(v).unwrap().into();
    store.put("/registry/pods/ns/web", bytes(&pod), None).await.unwrap();
    assert_eq!(authorizer.authorize(&secret).await, Decision::Allow);
    let volume = request(&n1, "get", "persistentvolumes", "", "pv1");
    assert!(authorizer.authorize(&volume).await.is_no_opinion());
    let pv = json!({"metadata": {"name": "pv1"}, "spec": {"claimRef": {"namespace": "ns", "name": "pvc1"}}});
    store.put("/registry/persistentvolumes/pv1", bytes(&pv), None).await.unwrap();
    assert_eq!(authorizer.authorize(&volume).await, Decision::Allow);
    let other = UserInfo::new("system:node:n2", &["system:nodes"]);
    assert!(authorizer.authorize(&request(&other, "get", "secrets", "ns", "s1")).await.is_no_opinion());
}

#[tokio::test]
async fn a_nodes_rules_are_the_system_node_roles() {
    let authorizer = NodeAuthorizer::new(graph());
    let n1 = UserInfo::new("system:node:n1", &["system:nodes"]);
    let rules = authorizer.rules_for(&n1, "ns").await.unwrap();
    assert!(rules.resource_rules.iter().any(|r| r.resources.as_deref() == Some(&["nodes/status".to_owned()][..])));
    let alice = UserInfo::new("alice", &[]);
    assert_eq!(authorizer.rules_for(&alice, "ns").await, Some(Rules::default()));
}

/// The graph's watch of pods leaves out what cannot change it: writes and
/// deletes of pods that are not and were not bound.
#[test]
fn the_pod_watch_skips_unbound_pods() {
    let unbound = || kv("/registry/pods/ns/p", json!({"metadata": {"name": "p"}, "spec": {}}));
    let bound = || kv("/registry/pods/ns/p", json!({"metadata": {"name": "p"}, "spec": {"nodeName": "n1"}}));
    let event = |kind, kv, prev_kv| orchestra_store::Event { kind, kv, prev_kv };
    let (put, delete) = (EventKind::Put, EventKind::Delete);
    #[rustfmt::skip]
    let cases = [
        ("create of an unbound pod", event(put, unbound(), None), false),
        ("update of an unbound pod", event(put, unbound(), Some(unbound())), false),
        ("binding", event(put, bound(), Some(unbound())), true),
        ("create of a bound pod", event(put, bound(), None), true),
        ("update of a bound pod", event(put, bound(), Some(bound())), true),
        ("a bound pod that stops decoding", event(put, unbound(), Some(bound())), true),
        ("delete of an unbound pod", event(delete, kv("/registry/pods/ns/p", Value::Null), Some(unbound())), false),
        ("delete of a bound pod", event(delete, kv("/registry/pods/ns/p", Value::Null), Some(bound())), true),
        ("delete without its last value", event(delete, kv("/registry/pods/ns/p", Value::Null), None), true),
    ];
    let filter = graph().filter("/registry/pods/").expect("pods are filtered");
    for (name, event, kept) in cases {
        assert_eq!(filter.accepts(&event), kept, "{name}");
    }
    assert!(graph().filter("/registry/persistentvolumeclaims/").is_none(), "claims are not");
}
