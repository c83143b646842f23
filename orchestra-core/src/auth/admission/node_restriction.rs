//! NodeRestriction: a node agent writes only its own Node, its own Lease
//! and CSINode, the status of the pods bound to it, and mirror pods of its
//! static pods; it requests tokens only for pods bound to it.

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::Value;

use super::{AdmissionPlugin, AdmissionRequest, ObjectReader, Operation, ResourceRef};
use crate::api::ApiError;
use crate::auth::node::node_of;

/// The annotation that marks a mirror pod.
const MIRROR_ANNOTATION: &str = "kubernetes.io/config.mirror";

/// Labels a node agent may set on its Node in the `kubernetes.io` and
/// `k8s.io` domains, beside the domains of [`KUBELET_LABEL_DOMAINS`].
const KUBELET_LABELS: &[&str] = &[
    "kubernetes.io/hostname",
    "kubernetes.io/arch",
    "kubernetes.io/os",
    "beta.kubernetes.io/arch",
    "beta.kubernetes.io/os",
    "beta.kubernetes.io/instance-type",
    "failure-domain.beta.kubernetes.io/region",
    "failure-domain.beta.kubernetes.io/zone",
    "topology.kubernetes.io/region",
    "topology.kubernetes.io/zone",
    "node.kubernetes.io/instance-type",
];

/// Label domains (and their subdomains) a node agent may use freely.
const KUBELET_LABEL_DOMAINS: &[&str] = &["kubelet.kubernetes.io", "node.kubernetes.io"];

/// The label domain no node agent may touch.
const RESTRICTED_DOMAIN: &str = "node-restriction.kubernetes.io";

const PODS: ResourceRef<'static> = ResourceRef::new("", "v1", "pods");

/// The admission plugin that limits what node agents (`system:node:<name>`
/// in `system:nodes`) write, as upstream's plugin of the same name; the
/// Node authorizer limits what they read. Other users pass untouched.
///
/// - Pods: a node creates only mirror pods bound to itself that use no
///   secrets, config maps, claims or service accounts; deletes (and
///   evicts) only pods bound to itself; updates only the status of those.
/// - Nodes: a node writes only its own Node, and neither sets labels of the
///   `node-restriction.kubernetes.io` domain or of the `kubernetes.io` and
///   `k8s.io` domains beyond the kubelet's own, nor changes its taints
///   after creating itself.
/// - Leases and CSINodes: only those named after the node.
/// - Service account tokens: only bound to a pod bound to the node.
///
/// ```
/// use std::sync::Arc;
/// use orchestra_core::auth::admission::{AdmissionChain, NodeRestriction, StaticObjects};
///
/// let chain = AdmissionChain::new().with(NodeRestriction::new(Arc::new(StaticObjects::new())));
/// assert_eq!(chain.names().collect::<Vec<_>>(), [NodeRestriction::NAME]);
/// ```
#[derive(Clone)]
pub struct NodeRestriction {
    objects: Arc<dyn ObjectReader>,
}

impl NodeRestriction {
    /// The plugin's name.
    pub const NAME: &'static str = "NodeRestriction";

    /// The plugin, reading pods (for token requests) from `objects`.
    pub fn new(objects: Arc<dyn ObjectReader>) -> NodeRestriction {
        NodeRestriction { objects }
    }

    /// Whether a node agent may not set or change its Node's label `key`:
    /// labels of the `node-restriction.kubernetes.io` domain, and of the
    /// `kubernetes.io` and `k8s.io` domains other than the kubelet's own
    /// (`kubernetes.io/hostname`, `topology.kubernetes.io/zone`,
    /// `node.kubernetes.io/*`, ...). An administrator sets those.
    ///
    /// ```
    /// use orchestra_core::auth::admission::NodeRestriction;
    ///
    /// assert!(NodeRestriction::restricts_label("node-role.kubernetes.io/control-plane"));
    /// assert!(!NodeRestriction::restricts_label("topology.kubernetes.io/zone"));
    /// assert!(!NodeRestriction::restricts_label("example.com/pool"));
    /// ```
    pub fn restricts_label(key: &str) -> bool {
        restricted_label(key)
    }
}

#[async_trait]
impl AdmissionPlugin for NodeRestriction {
    fn name(&self) -> &str {
        Self::NAME
    }

    async fn validate(&self, request: &AdmissionRequest<'_>) -> Result<(), ApiError> {
        let Some(node) = node_of(request.user) else { return Ok(()) };
        let refuse = |reason: String| Err(request.forbidden(&reason));
        let subresource = request.subresource.unwrap_or_default();
        match (request.resource.group.as_str(), request.resource.plural.as_str(), subresource) {
            ("", "pods", "") => match request.operation {
                Operation::Create => self.mirror_pod(node, request),
                Operation::Delete => match bound_node(request.old_object) == Some(node) {
                    true => Ok(()),
                    false => refuse(format!("node {node:?} can only delete pods with spec.nodeName set to itself")),
                },
                Operation::Update => refuse(format!(
                    "unexpected operation \"UPDATE\", node {node:?} can only create and delete mirror pods"
                )),
            },
            ("", "pods", "status") => match bound_node(request.old_object) == Some(node) {
                true => Ok(()),
                false => refuse(format!(
                    "node {node:?} can only update pod status for pods with spec.nodeName set to itself"
                )),
            },
            ("", "pods", _) => refuse(format!("node {node:?} may not write pods/{subresource}")),
            ("", "nodes", _) => self.node(node, request),
            ("coordination.k8s.io", "leases", _) => match request.name == node {
                true => Ok(()),
                false => refuse("can only access node lease with the same name as the requesting node".into()),
            },
            ("storage.k8s.io", "csinodes", _) => match request.name == node {
                true => Ok(()),
                false => refuse("can only access CSINode with the same name as the requesting node".into()),
            },
            ("", "serviceaccounts", "token") => self.token(node, request).await,
            _ => Ok(()),
        }
    }
}

impl NodeRestriction {
    fn mirror_pod(&self, node: &str, request: &AdmissionRequest<'_>) -> Result<(), ApiError> {
        let pod = request.object.as_ref().unwrap_or(&Value::Null);
        let refuse = |reason: String| Err(request.forbidden(&reason));
        if pod["metadata"]["annotations"][MIRROR_ANNOTATION].is_null() {
            return refuse(format!(
                "pod does not have {MIRROR_ANNOTATION:?} annotation, node {node:?} can only create mirror pods"
            ));
        }
        if bound_node(Some(pod)) != Some(node) {
            return refuse(format!("node {node:?} can only create pods with spec.nodeName set to itself"));
        }
        let owners = pod["metadata"]["ownerReferences"].as_array().map(Vec::as_slice).unwrap_or_default();
        let owned_by_node = |owner: &Value| {
            owner["apiVersion"] == "v1" && owner["kind"] == "Node" && owner["name"].as_str() == Some(node)
        };
        if owners.len() > 1 || !owners.iter().all(owned_by_node) {
            return refuse(format!("node {node:?} can only create pods with an owner reference set to itself"));
        }
        if let Some(kind) = crate::auth::node::referenced_kinds(pod).first() {
            return refuse(format!("node {node:?} can not create pods that reference {kind}"));
        }
        Ok(())
    }

    fn node(&self, node: &str, request: &AdmissionRequest<'_>) -> Result<(), ApiError> {
        let refuse = |reason: String| Err(request.forbidden(&reason));
        if request.name != node {
            return refuse(format!("node {node:?} is not allowed to modify node {:?}", request.name));
        }
        let (Some(new), old) = (request.object.as_ref(), request.old_object) else { return Ok(()) };
        let labels = |object: Option<&Value>| object.and_then(|o| o["metadata"]["labels"].as_object().cloned());
        let (new_labels, old_labels) = (labels(Some(new)).unwrap_or_default(), labels(old).unwrap_or_default());
        let mut changed: Vec<&String> = new_labels
            .iter()
            .filter(|(key, value)| old_labels.get(*key) != Some(value))
            .map(|(key, _)| key)
            .chain(old_labels.keys().filter(|key| !new_labels.contains_key(*key)))
            .filter(|key| restricted_label(key))
            .collect();
        changed.sort();
        if !changed.is_empty() {
            let changed: Vec<&str> = changed.iter().map(|s| s.as_str()).collect();
            let verb = if old.is_some() { "modify" } else { "set" };
            return refuse(format!("is not allowed to {verb} labels: {}", changed.join(", ")));
        }
        if let Some(old) = old
            && old["spec"]["taints"] != new["spec"]["taints"]
        {
            return refuse(format!("node {node:?} is not allowed to modify taints"));
        }
        Ok(())
    }

    async fn token(&self, node: &str, request: &AdmissionRequest<'_>) -> Result<(), ApiError> {
        let refuse = |reason: String| Err(request.forbidden(&reason));
        let reference = request.object.as_ref().map(|o| &o["spec"]["boundObjectRef"]).unwrap_or(&Value::Null);
        if reference["kind"] != "Pod" {
            return refuse("node requested token not bound to a pod".into());
        }
        let name = reference["name"].as_str().unwrap_or_default();
        let pod = self.objects.get(PODS, request.namespace, name).await?;
        let Some(pod) = pod else {
            return refuse(format!("node requested token bound to a pod that does not exist: {name:?}"));
        };
        if bound_node(Some(&pod)) != Some(node) {
            return refuse("node requested token bound to a pod scheduled on a different node".into());
        }
        match (reference["uid"].as_str(), pod["metadata"]["uid"].as_str()) {
            (Some(wanted), Some(uid)) if wanted != uid => refuse(format!(
                "the UID in the bound object reference ({wanted}) does not match the UID in record. The object might have been deleted and then recreated"
            )),
            _ => Ok(()),
        }
    }
}

/// The node a pod is bound to.
fn bound_node(pod: Option<&Value>) -> Option<&str> {
    pod?["spec"]["nodeName"].as_str().filter(|n| !n.is_empty())
}

/// Whether a node agent may not set or change label `key`.
fn restricted_label(key: &str) -> bool {
    let Some((domain, _)) = key.split_once('/') else { return false };
    let in_domain = |d: &str| domain == d || domain.ends_with(&format!(".{d}"));
    if in_domain(RESTRICTED_DOMAIN) {
        return true;
    }
    if !in_domain("kubernetes.io") && !in_domain("k8s.io") {
        return false;
    }
    !KUBELET_LABELS.contains(&key) && !KUBELET_LABEL_DOMAINS.iter().any(|d| in_domain(d))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::StaticObjects;
    use super::*;
    use crate::api::ResourceInfo;
    use crate::auth::UserInfo;

    struct Case {
        user: &'static str,
        operation: Operation,
        resource: (&'static str, &'static str),
        subresource: Option<&'static str>,
        name: &'static str,
        object: Option<Value>,
        old: Option<Value>,
        /// `None`: admitted; otherwise a part of the refusal's message.
        refused: Option<&'static str>,
    }

    fn pod(node: &str, extra: Value) -> Value {
        let mut pod = json!({"metadata": {"name": "p", "namespace": "ns", "uid": "u1"}, "spec": {"nodeName": node}});
        json_patch_merge(&mut pod, extra);
        pod
    }

    fn json_patch_merge(target: &mut Value, patch: Value) {
        match (target, patch) {
            (Value::Object(target), Value::Object(patch)) => {
                for (key, value) in patch {
                    json_patch_merge(target.entry(key).or_insert(Value::Null), value);
                }
            }
            (target, patch) => *target = patch,
        }
    }

    fn mirror(node: &str) -> Value {
        pod(node, json!({"metadata": {"annotations": {MIRROR_ANNOTATION: "hash"}}}))
    }

    fn node_object(labels: Value, taints: Value) -> Value {
        json!({"metadata": {"name": "n1", "labels": labels}, "spec": {"taints": taints}})
    }

    #[tokio::test]
    async fn what_nodes_may_write() {
        use Operation::{Create, Delete, Update};
        let objects = StaticObjects::new();
        objects.insert(PODS, pod("n1", json!({})));
        let plugin = NodeRestriction::new(Arc::new(objects));
        let with_secret = {
            let mut pod = mirror("n1");
            pod["spec"]["volumes"] = json!([{"name": "s", "secret": {"secretName": "s"}}]);
            pod
        };
        let owned = |name: &str| {
            let mut pod = mirror("n1");
            pod["metadata"]["ownerReferences"] =
                json!([{"apiVersion": "v1", "kind": "Node", "name": name, "uid": "x"}]);
            pod
        };
        let labels = |extra: Value| {
            let mut labels = json!({"kubernetes.io/hostname": "n1", "example.com/team": "a"});
            json_patch_merge(&mut labels, extra);
            labels
        };
        let token = |pod: &str| json!({"spec": {"boundObjectRef": {"kind": "Pod", "name": pod, "uid": "u1"}}});
        let n1 = "system:node:n1";
        let case = |operation, resource, subresource, name, object, old, refused| Case {
            user: n1,
            operation,
            resource,
            subresource,
            name,
            object,
            old,
            refused,
        };
        let pods = ("", "pods");
        let nodes = ("", "nodes");
        let cases = vec![
            case(Create, pods, None, "p", Some(mirror("n1")), None, None),
            case(Create, pods, None, "p", Some(owned("n1")), None, None),
            case(Create, pods, None, "p", Some(pod("n1", json!({}))), None, Some("can only create mirror pods")),
            case(Create, pods, None, "p", Some(mirror("n2")), None, Some("spec.nodeName set to itself")),
            case(Create, pods, None, "p", Some(with_secret), None, Some("can not create pods that reference secrets")),
            case(Create, pods, None, "p", Some(owned("n2")), None, Some("owner reference set to itself")),
            case(Delete, pods, None, "p", None, Some(pod("n1", json!({}))), None),
            case(Delete, pods, None, "p", None, Some(pod("n2", json!({}))), Some("can only delete pods")),
            case(Update, pods, None, "p", Some(mirror("n1")), Some(mirror("n1")), Some("unexpected operation")),
            case(Update, pods, Some("status"), "p", Some(pod("n1", json!({}))), Some(pod("n1", json!({}))), None),
            case(
                Update,
                pods,
                Some("status"),
                "p",
                Some(pod("n2", json!({}))),
                Some(pod("n2", json!({}))),
                Some("can only update pod status"),
            ),
            case(Create, nodes, None, "n1", Some(node_object(labels(json!({})), json!(null))), None, None),
            case(
                Create,
                nodes,
                None,
                "n1",
                Some(node_object(
                    labels(json!({"node.kubernetes.io/exclude-from-external-load-balancers": "true"})),
                    json!(null),
                )),
                None,
                None,
            ),
            case(
                Create,
                nodes,
                None,
                "n1",
                Some(node_object(labels(json!({"node-role.kubernetes.io/control-plane": ""})), json!(null))),
                None,
                Some("not allowed to set labels: node-role.kubernetes.io/control-plane"),
            ),
            case(
                Create,
                nodes,
                None,
                "n1",
                Some(node_object(labels(json!({"node-restriction.kubernetes.io/pool": "a"})), json!(null))),
                None,
                Some("node-restriction.kubernetes.io/pool"),
            ),
            case(
                Create,
                nodes,
                None,
                "n2",
                Some(node_object(labels(json!({})), json!(null))),
                None,
                Some("not allowed to modify node \"n2\""),
            ),
            case(
                Update,
                nodes,
                Some("status"),
                "n1",
                Some(node_object(labels(json!({})), json!(null))),
                Some(node_object(labels(json!({})), json!(null))),
                None,
            ),
            case(
                Update,
                nodes,
                None,
                "n1",
                Some(node_object(labels(json!({"example.com/team": "b"})), json!(null))),
                Some(node_object(labels(json!({})), json!(null))),
                None,
            ),
            case(
                Update,
                nodes,
                None,
                "n1",
                Some(node_object(labels(json!({})), json!(null))),
                Some(node_object(labels(json!({"foo.k8s.io/x": "1"})), json!(null))),
                Some("not allowed to modify labels: foo.k8s.io/x"),
            ),
            case(
                Update,
                nodes,
                None,
                "n1",
                Some(node_object(labels(json!({})), json!([{"key": "k", "effect": "NoSchedule"}]))),
                Some(node_object(labels(json!({})), json!(null))),
                Some("not allowed to modify taints"),
            ),
            case(
                Delete,
                nodes,
                None,
                "n2",
                None,
                Some(node_object(labels(json!({})), json!(null))),
                Some("not allowed to modify node"),
            ),
            case(Update, ("coordination.k8s.io", "leases"), None, "n1", Some(json!({})), Some(json!({})), None),
            case(
                Create,
                ("coordination.k8s.io", "leases"),
                None,
                "n2",
                Some(json!({})),
                None,
                Some("node lease with the same name"),
            ),
            case(
                Create,
                ("storage.k8s.io", "csinodes"),
                None,
                "n2",
                Some(json!({})),
                None,
                Some("CSINode with the same name"),
            ),
            case(Create, ("", "serviceaccounts"), Some("token"), "sa", Some(token("p")), None, None),
            case(
                Create,
                ("", "serviceaccounts"),
                Some("token"),
                "sa",
                Some(json!({"spec": {}})),
                None,
                Some("not bound to a pod"),
            ),
            case(
                Create,
                ("", "serviceaccounts"),
                Some("token"),
                "sa",
                Some(token("gone")),
                None,
                Some("does not exist"),
            ),
            case(Create, ("", "configmaps"), None, "c", Some(json!({})), None, None),
            Case { user: "alice", ..case(Create, pods, None, "p", Some(pod("n1", json!({}))), None, None) },
        ];
        for case in cases {
            let (group, plural) = case.resource;
            let resource = ResourceInfo::new(group, "v1", "Thing", plural, true);
            let user = UserInfo::new(case.user, &["system:nodes"]);
            let request = AdmissionRequest {
                operation: case.operation,
                resource: &resource,
                subresource: case.subresource,
                namespace: Some("ns"),
                name: case.name,
                object: case.object.clone(),
                old_object: case.old.as_ref(),
                user: &user,
                dry_run: false,
            };
            let outcome = plugin.validate(&request).await;
            let what = format!("{:?} {plural}/{:?} {}", case.operation, case.subresource, case.name);
            match (outcome, case.refused) {
                (Ok(()), None) => {}
                (Err(error), Some(part)) => {
                    assert_eq!(error.code, 403, "{what}");
                    assert!(error.message.contains(part), "{what}: {}", error.message);
                }
                (outcome, expected) => panic!("{what}: {outcome:?}, expected refusal {expected:?}"),
            }
        }
    }

    #[test]
    fn restricted_labels() {
        for (key, restricted) in [
            ("kubernetes.io/hostname", false),
            ("topology.kubernetes.io/zone", false),
            ("kubelet.kubernetes.io/x", false),
            ("foo.node.kubernetes.io/x", false),
            ("node-role.kubernetes.io/worker", true),
            ("kubernetes.io/role", true),
            ("x.k8s.io/y", true),
            ("node-restriction.kubernetes.io/pool", true),
            ("example.com/kubernetes.io", false),
            ("plain", false),
        ] {
            assert_eq!(restricted_label(key), restricted, "{key}");
        }
    }
}
