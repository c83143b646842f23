//! Which objects each node may read: the pods bound to it and what they
//! refer to (upstream's node authorizer graph), kept from a watch of pods,
//! PersistentVolumeClaims and VolumeAttachments.

use std::collections::{HashMap, HashSet};
use std::sync::RwLock;

use orchestra_store::{Event, EventFilter, EventKind, KeyValue};
use serde_json::Value;

/// A kind of object a node reaches through its pods.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Refers {
    Secret,
    ConfigMap,
    PersistentVolumeClaim,
    ServiceAccount,
}

/// One namespaced object a pod refers to.
type Reference = (Refers, String);

/// A pod bound to a node, as the graph holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BoundPod {
    pub node: String,
    pub namespace: String,
    pub references: Vec<Reference>,
}

/// The objects a pod refers to, and its node; `None` for a pod that is not
/// bound or does not decode.
pub(crate) fn bound_pod(pod: &Value) -> Option<BoundPod> {
    let node = pod["spec"]["nodeName"].as_str().filter(|n| !n.is_empty())?.to_owned();
    let namespace = pod["metadata"]["namespace"].as_str()?.to_owned();
    Some(BoundPod { node, namespace, references: references(pod) })
}

/// The objects a pod refers to (in its namespace), each once.
pub(crate) fn references(pod: &Value) -> Vec<Reference> {
    let spec = &pod["spec"];
    let pod_name = pod["metadata"]["name"].as_str().unwrap_or_default();
    let mut references = Vec::new();
    let mut add = |kind, name: &Value| {
        if let Some(name) = name.as_str().filter(|n| !n.is_empty()) {
            references.push((kind, name.to_owned()));
        }
    };
    add(Refers::ServiceAccount, &spec["serviceAccountName"]);
    for secret in spec["imagePullSecrets"].as_array().into_iter().flatten() {
        add(Refers::Secret, &secret["name"]);
    }
    let containers = ["initContainers", "containers", "ephemeralContainers"];
    for container in containers.iter().filter_map(|list| spec[list].as_array()).flatten() {
        for env in container["env"].as_array().into_iter().flatten() {
            add(Refers::Secret, &env["valueFrom"]["secretKeyRef"]["name"]);
            add(Refers::ConfigMap, &env["valueFrom"]["configMapKeyRef"]["name"]);
        }
        for from in container["envFrom"].as_array().into_iter().flatten() {
            add(Refers::Secret, &from["secretRef"]["name"]);
            add(Refers::ConfigMap, &from["configMapRef"]["name"]);
        }
    }
    for volume in spec["volumes"].as_array().into_iter().flatten() {
        add(Refers::Secret, &volume["secret"]["secretName"]);
        add(Refers::ConfigMap, &volume["configMap"]["name"]);
        add(Refers::PersistentVolumeClaim, &volume["persistentVolumeClaim"]["claimName"]);
        if volume["ephemeral"].is_object()
            && let Some(volume_name) = volume["name"].as_str()
        {
            add(Refers::PersistentVolumeClaim, &Value::String(format!("{pod_name}-{volume_name}")));
        }
        for source in volume["projected"]["sources"].as_array().into_iter().flatten() {
            add(Refers::Secret, &source["secret"]["name"]);
            add(Refers::ConfigMap, &source["configMap"]["name"]);
        }
        add(Refers::Secret, &volume["csi"]["nodePublishSecretRef"]["name"]);
        add(Refers::Secret, &volume["azureFile"]["secretName"]);
        for plugin in ["cephfs", "cinder", "flexVolume", "iscsi", "rbd", "scaleIO", "storageos"] {
            add(Refers::Secret, &volume[plugin]["secretRef"]["name"]);
        }
    }
    references.sort_unstable_by(|a, b| (a.0 as u8, &a.1).cmp(&(b.0 as u8, &b.1)));
    references.dedup();
    references
}

/// What the graph holds.
#[derive(Default)]
struct Graph {
    /// Pod store key → the pod.
    pods: HashMap<String, BoundPod>,
    /// (node, kind, namespace, name) → how many of the node's pods refer to it.
    edges: HashMap<(String, Refers, String, String), u32>,
    /// PVC store key → (namespace, name, the PersistentVolume it is bound to).
    claims: HashMap<String, (String, String, String)>,
    /// PersistentVolume → the claims bound to it.
    volumes: HashMap<String, HashSet<(String, String)>>,
    /// VolumeAttachment store key → (name, node).
    attachments: HashMap<String, (String, String)>,
}

impl Graph {
    fn edges_of(pod: &BoundPod) -> impl Iterator<Item = (String, Refers, String, String)> + '_ {
        pod.references.iter().map(|(kind, name)| (pod.node.clone(), *kind, pod.namespace.clone(), name.clone()))
    }

    fn remove_pod(&mut self, key: &str) {
        let Some(pod) = self.pods.remove(key) else { return };
        for edge in Self::edges_of(&pod) {
            if let Some(count) = self.edges.get_mut(&edge) {
                *count -= 1;
                if *count == 0 {
                    self.edges.remove(&edge);
                }
            }
        }
    }

    fn put_pod(&mut self, key: &str, pod: Option<BoundPod>) {
        if self.pods.get(key) == pod.as_ref() {
            return;
        }
        self.remove_pod(key);
        let Some(pod) = pod else { return };
        for edge in Self::edges_of(&pod) {
            *self.edges.entry(edge).or_default() += 1;
        }
        self.pods.insert(key.to_owned(), pod);
    }

    fn remove_claim(&mut self, key: &str) {
        let Some((namespace, name, volume)) = self.claims.remove(key) else { return };
        if let Some(claims) = self.volumes.get_mut(&volume) {
            claims.remove(&(namespace, name));
            if claims.is_empty() {
                self.volumes.remove(&volume);
            }
        }
    }

    fn put_claim(&mut self, key: &str, claim: &Value) {
        self.remove_claim(key);
        let meta = &claim["metadata"];
        let (Some(namespace), Some(name), Some(volume)) =
            (meta["namespace"].as_str(), meta["name"].as_str(), claim["spec"]["volumeName"].as_str())
        else {
            return;
        };
        if volume.is_empty() {
            return;
        }
        self.volumes.entry(volume.to_owned()).or_default().insert((namespace.to_owned(), name.to_owned()));
        self.claims.insert(key.to_owned(), (namespace.to_owned(), name.to_owned(), volume.to_owned()));
    }

    fn put_attachment(&mut self, key: &str, attachment: &Value) {
        self.attachments.remove(key);
        if let (Some(name), Some(node)) =
            (attachment["metadata"]["name"].as_str(), attachment["spec"]["nodeName"].as_str())
        {
            self.attachments.insert(key.to_owned(), (name.to_owned(), node.to_owned()));
        }
    }

    fn refers(&self, node: &str, kind: Refers, namespace: &str, name: &str) -> bool {
        self.edges.contains_key(&(node.to_owned(), kind, namespace.to_owned(), name.to_owned()))
    }
}

/// Which kind a followed store prefix holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Followed {
    Pods,
    Claims,
    Attachments,
}

impl Followed {
    pub(crate) fn of_prefix(prefix: &str) -> Option<Followed> {
        match prefix.trim_end_matches('/').rsplit('/').next()? {
            "pods" => Some(Followed::Pods),
            "persistentvolumeclaims" => Some(Followed::Claims),
            "volumeattachments" => Some(Followed::Attachments),
            _ => None,
        }
    }
}

/// The relations between nodes and the objects their pods use, as the
/// [`NodeAuthorizer`](super::NodeAuthorizer) reads them. The API server
/// keeps one from a watch of its store.
#[derive(Default)]
pub struct NodeGraph {
    graph: RwLock<Graph>,
}

impl std::fmt::Debug for NodeGraph {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let graph = self.read();
        f.debug_struct("NodeGraph").field("pods", &graph.pods.len()).field("edges", &graph.edges.len()).finish()
    }
}

impl NodeGraph {
    fn read(&self) -> std::sync::RwLockReadGuard<'_, Graph> {
        self.graph.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Graph> {
        self.graph.write().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether a pod bound to `node` refers to the object.
    pub(crate) fn refers(&self, node: &str, kind: Refers, namespace: &str, name: &str) -> bool {
        self.read().refers(node, kind, namespace, name)
    }

    /// Whether a claim bound to PersistentVolume `volume` is used by a pod
    /// bound to `node`.
    pub(crate) fn uses_volume(&self, node: &str, volume: &str) -> bool {
        let graph = self.read();
        graph
            .volumes
            .get(volume)
            .into_iter()
            .flatten()
            .any(|(namespace, claim)| graph.refers(node, Refers::PersistentVolumeClaim, namespace, claim))
    }

    /// Whether VolumeAttachment `name` is for `node`.
    pub(crate) fn attachment_on(&self, node: &str, name: &str) -> bool {
        self.read().attachments.values().any(|(attachment, on)| attachment == name && on == node)
    }

    fn put(&self, followed: Followed, kv: &KeyValue) {
        // A pod not bound to a node has no edges: unless the graph holds it
        // (it cannot lose its node, but may stop decoding), its JSON need
        // not be parsed. Every pod is written unbound first.
        if followed == Followed::Pods && !may_be_bound(kv) {
            if self.read().pods.contains_key(&kv.key) {
                self.delete(followed, &kv.key);
            }
            return;
        }
        let Ok(object) = serde_json::from_slice::<Value>(&kv.value) else {
            self.delete(followed, &kv.key);
            return;
        };
        let mut graph = self.write();
        match followed {
            Followed::Pods => graph.put_pod(&kv.key, bound_pod(&object)),
            Followed::Claims => graph.put_claim(&kv.key, &object),
            Followed::Attachments => graph.put_attachment(&kv.key, &object),
        }
    }

    fn delete(&self, followed: Followed, key: &str) {
        let mut graph = self.write();
        match followed {
            Followed::Pods => graph.remove_pod(key),
            Followed::Claims => graph.remove_claim(key),
            Followed::Attachments => {
                graph.attachments.remove(key);
            }
        }
    }
}

impl crate::server::Follower for NodeGraph {
    fn reset(&self, prefix: &str, listed: Vec<KeyValue>) {
        let Some(followed) = Followed::of_prefix(prefix) else { return };
        {
            let mut graph = self.write();
            match followed {
                Followed::Pods => {
                    let keys: Vec<_> = graph.pods.keys().cloned().collect();
                    keys.iter().for_each(|key| graph.remove_pod(key));
                }
                Followed::Claims => {
                    graph.claims.clear();
                    graph.volumes.clear();
                }
                Followed::Attachments => graph.attachments.clear(),
            }
        }
        for kv in &listed {
            self.put(followed, kv);
        }
    }

    fn apply(&self, prefix: &str, event: &Event) {
        let Some(followed) = Followed::of_prefix(prefix) else { return };
        match event.kind {
            EventKind::Delete => self.delete(followed, &event.kv.key),
            _ => self.put(followed, &event.kv),
        }
    }

    /// Of pods, only the changes to a bound pod or of one that was bound:
    /// the graph holds bound pods only, so an unbound pod's create, updates
    /// and delete change nothing in it, and most pod writes (every create
    /// among them) need not wake its watch.
    fn filter(&self, prefix: &str) -> Option<EventFilter> {
        (Followed::of_prefix(prefix)? == Followed::Pods).then(|| {
            EventFilter::new(|event: &Event| {
                let was_bound = event.prev_kv.as_ref().map(may_be_bound);
                match event.kind {
                    // A delete that does not say what it deleted is kept.
                    EventKind::Delete => was_bound != Some(false),
                    _ => was_bound == Some(true) || may_be_bound(&event.kv),
                }
            })
        })
    }
}

/// False when a pod's stored JSON certainly has no `nodeName`: a cheap test
/// before parsing it.
fn may_be_bound(kv: &KeyValue) -> bool {
    memchr::memmem::find(&kv.value, b"\"nodeName\"").is_some()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn kv(key: &str, value: Value) -> KeyValue {
        KeyValue {
            key: key.into(),
            value: serde_json::to_vec(&value).unwrap().into(),
            create_revision: 1,
            mod_revision: 1,
            version: 1,
            expires_at_ms: None,
        }
    }

    fn pod(name: &str, node: Option<&str>, spec: Value) -> Value {
        let mut spec = spec;
        if let Some(node) = node {
            spec["nodeName"] = node.into();
        }
        json!({"metadata": {"name": name, "namespace": "ns"}, "spec": spec})
    }

    #[test]
    fn a_pod_refers_to_what_its_spec_names() {
        let spec = json!({
            "serviceAccountName": "robot",
            "imagePullSecrets": [{"name": "pull"}],
            "initContainers": [{"name": "i", "envFrom": [{"configMapRef": {"name": "init-env"}}]}],
            "containers": [{
                "name": "c",
                "env": [
                    {"name": "A", "valueFrom": {"secretKeyRef": {"name": "env-secret", "key": "k"}}},
                    {"name": "B", "valueFrom": {"configMapKeyRef": {"name": "env-cm", "key": "k"}}},
                    {"name": "C", "value": "plain"},
                ],
                "envFrom": [{"secretRef": {"name": "all-secret"}}],
            }],
            "volumes": [
                {"name": "s", "secret": {"secretName": "vol-secret"}},
                {"name": "m", "configMap": {"name": "vol-cm"}},
                {"name": "d", "persistentVolumeClaim": {"claimName": "data"}},
                {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}},
                {"name": "p", "projected": {"sources": [
                    {"secret": {"name": "proj-secret"}},
                    {"configMap": {"name": "proj-cm"}},
                    {"serviceAccountToken": {"path": "token"}},
                ]}},
                {"name": "c", "csi": {"driver": "x", "nodePublishSecretRef": {"name": "csi-secret"}}},
                {"name": "r", "rbd": {"secretRef": {"name": "rbd-secret"}}},
                {"name": "e", "emptyDir": {}},
            ],
        });
        let bound = bound_pod(&pod("web", Some("n1"), spec)).unwrap();
        assert_eq!((bound.node.as_str(), bound.namespace.as_str()), ("n1", "ns"));
        let names = |kind| -> Vec<&str> {
            bound.references.iter().filter(|(k, _)| *k == kind).map(|(_, n)| n.as_str()).collect()
        };
        assert_eq!(
            names(Refers::Secret),
            ["all-secret", "csi-secret", "env-secret", "proj-secret", "pull", "rbd-secret", "vol-secret"]
        );
        assert_eq!(names(Refers::ConfigMap), ["env-cm", "init-env", "proj-cm", "vol-cm"]);
        assert_eq!(names(Refers::PersistentVolumeClaim), ["data", "web-scratch"]);
        assert_eq!(names(Refers::ServiceAccount), ["robot"]);
        assert_eq!(bound_pod(&pod("pending", None, json!({"serviceAccountName": "robot"}))), None);
    }

    #[test]
    fn edges_follow_pods_claims_and_attachments() {
        use crate::server::Follower;
        let graph = NodeGraph::default();
        let uses = |secret: &str| json!({"volumes": [{"name": "v", "secret": {"secretName": secret}}]});
        let event = |kind, kv| Event { kind, kv, prev_kv: None };
        let pods = "/registry/pods/";
        graph.reset(pods, vec![kv("/registry/pods/ns/a", pod("a", Some("n1"), uses("shared")))]);
        graph.apply(pods, &event(EventKind::Put, kv("/registry/pods/ns/b", pod("b", Some("n1"), uses("shared")))));
        assert!(graph.refers("n1", Refers::Secret, "ns", "shared"));
        assert!(!graph.refers("n2", Refers::Secret, "ns", "shared"));
        assert!(!graph.refers("n1", Refers::Secret, "other", "shared"));
        // One of two pods going leaves the edge; both going removes it.
        graph.apply(pods, &event(EventKind::Delete, kv("/registry/pods/ns/a", json!({}))));
        assert!(graph.refers("n1", Refers::Secret, "ns", "shared"));
        // A pod moved to a spec without the secret drops its edge.
        graph.apply(pods, &event(EventKind::Put, kv("/registry/pods/ns/b", pod("b", Some("n1"), uses("other")))));
        assert!(!graph.refers("n1", Refers::Secret, "ns", "shared"));
        assert!(graph.refers("n1", Refers::Secret, "ns", "other"));
        // A relist replaces everything.
        graph.reset(pods, vec![kv("/registry/pods/ns/c", pod("c", Some("n2"), uses("third")))]);
        assert!(!graph.refers("n1", Refers::Secret, "ns", "other"));
        assert!(graph.refers("n2", Refers::Secret, "ns", "third"));

        let claims = "/registry/persistentvolumeclaims/";
        let with_claim = json!({"volumes": [{"name": "v", "persistentVolumeClaim": {"claimName": "data"}}]});
        graph.apply(pods, &event(EventKind::Put, kv("/registry/pods/ns/d", pod("d", Some("n2"), with_claim))));
        let claim = json!({"metadata": {"name": "data", "namespace": "ns"}, "spec": {"volumeName": "pv-1"}});
        graph.reset(claims, vec![kv("/registry/persistentvolumeclaims/ns/data", claim)]);
        assert!(graph.uses_volume("n2", "pv-1"));
        assert!(!graph.uses_volume("n1", "pv-1"));
        graph.apply(claims, &event(EventKind::Delete, kv("/registry/persistentvolumeclaims/ns/data", json!({}))));
        assert!(!graph.uses_volume("n2", "pv-1"));

        let attachments = "/registry/storage.k8s.io/volumeattachments/";
        let attachment = json!({"metadata": {"name": "va"}, "spec": {"nodeName": "n1"}});
        graph.apply(
            attachments,
            &event(EventKind::Put, kv("/registry/storage.k8s.io/volumeattachments/va", attachment)),
        );
        assert!(graph.attachment_on("n1", "va"));
        assert!(!graph.attachment_on("n2", "va"));
    }
}
