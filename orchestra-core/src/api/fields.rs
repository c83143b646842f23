//! The field labels each built-in kind supports in field selectors
//! (upstream's field label conversion functions), and how a label reads
//! its value from an object.

use serde_json::Value;

use super::error::ApiError;

/// Groups whose kinds are built in: their field labels are checked. Kinds
/// of other groups (custom resources) accept any label.
const BUILTIN_GROUPS: &[&str] = &[
    "",
    "apps",
    "batch",
    "autoscaling",
    "policy",
    "admissionregistration.k8s.io",
    "apiextensions.k8s.io",
    "apiregistration.k8s.io",
    "certificates.k8s.io",
    "coordination.k8s.io",
    "discovery.k8s.io",
    "events.k8s.io",
    "flowcontrol.apiserver.k8s.io",
    "networking.k8s.io",
    "node.k8s.io",
    "rbac.authorization.k8s.io",
    "resource.k8s.io",
    "scheduling.k8s.io",
    "storage.k8s.io",
];

/// The labels a built-in kind supports beyond upstream's default
/// (`metadata.name`, `metadata.namespace`), or `None` for the default.
/// Upstream's lists replace the default: a Node does not accept
/// `metadata.namespace`.
pub fn supported_labels(group: &str, kind: &str) -> Option<&'static [&'static str]> {
    Some(match (group, kind) {
        ("", "Pod") => &[
            "metadata.name",
            "metadata.namespace",
            "spec.nodeName",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "spec.hostNetwork",
            "status.phase",
            "status.podIP",
            "status.podIPs",
            "status.nominatedNodeName",
            "spec.host",
        ],
        ("", "Node") => &["metadata.name", "spec.unschedulable"],
        ("", "ReplicationController") | ("apps", "ReplicaSet") => {
            &["metadata.name", "metadata.namespace", "status.replicas"]
        }
        ("", "Event") => &[
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "reason",
            "reportingComponent",
            "source",
            "type",
            "metadata.namespace",
            "metadata.name",
        ],
        ("events.k8s.io", "Event") => &[
            "regarding.kind",
            "regarding.namespace",
            "regarding.name",
            "regarding.uid",
            "regarding.apiVersion",
            "regarding.resourceVersion",
            "regarding.fieldPath",
            "reason",
            "reportingController",
            "type",
            "metadata.namespace",
            "metadata.name",
        ],
        ("", "Namespace") => &["status.phase", "metadata.name"],
        ("", "Secret") => &["type", "metadata.namespace", "metadata.name"],
        ("", "Service") => &["metadata.namespace", "metadata.name", "spec.clusterIP", "spec.type"],
        ("batch", "Job") => &["metadata.name", "metadata.namespace", "status.successful"],
        ("certificates.k8s.io", "CertificateSigningRequest") => &["metadata.name", "spec.signerName"],
        _ => return None,
    })
}

/// Checks a field label against what the kind supports, with upstream's
/// messages (400 Bad Request).
pub fn check_label(group: &str, kind: &str, label: &str) -> Result<(), ApiError> {
    if !BUILTIN_GROUPS.contains(&group) {
        return Ok(());
    }
    match supported_labels(group, kind) {
        Some(labels) if labels.contains(&label) => Ok(()),
        Some(_) => Err(ApiError::bad_request(format!("field label not supported: {label}"))),
        None if label == "metadata.name" || label == "metadata.namespace" => Ok(()),
        None => Err(ApiError::bad_request(format!(
            "{label:?} is not a known field selector: only \"metadata.name\", \"metadata.namespace\""
        ))),
    }
}

/// The value a field label reads from an object. Most labels are dotted
/// paths (a missing field reads ""); a few read like upstream's selectable
/// field sets: booleans and counters default to `false`/`0`, an event's
/// `source` falls back to its reporting component, `spec.host` is
/// `spec.nodeName`, `status.successful` is a job's `status.succeeded`.
pub fn field_value(object: &Value, label: &str) -> String {
    let read = |path: &str| {
        let mut current = object;
        for part in path.split('.') {
            current = current.get(part).unwrap_or(&Value::Null);
        }
        match current {
            Value::String(s) => Some(s.clone()),
            Value::Null => None,
            other => Some(other.to_string()),
        }
    };
    let value = match label {
        "spec.host" => read("spec.nodeName"),
        "status.successful" => read("status.succeeded"),
        "status.podIP" | "status.podIPs" => read("status.podIP")
            .or_else(|| object.pointer("/status/podIPs/0/ip").and_then(Value::as_str).map(str::to_owned)),
        "source" => read("source.component").filter(|s| !s.is_empty()).or_else(|| read("reportingComponent")),
        other => read(other),
    };
    value.unwrap_or_else(|| match label {
        "spec.hostNetwork" | "spec.unschedulable" => "false".into(),
        "status.replicas" | "status.successful" => "0".into(),
        _ => String::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn labels_per_kind() {
        let cases = [
            ("", "Pod", "spec.nodeName", Ok(())),
            ("", "Pod", "status.podIP", Ok(())),
            ("", "Pod", "spec.containers", Err("field label not supported: spec.containers")),
            ("", "Event", "involvedObject.uid", Ok(())),
            ("", "Event", "message", Err("field label not supported: message")),
            ("", "Node", "metadata.namespace", Err("field label not supported: metadata.namespace")),
            ("", "Node", "spec.unschedulable", Ok(())),
            ("", "Secret", "type", Ok(())),
            ("", "Namespace", "status.phase", Ok(())),
            ("", "ConfigMap", "metadata.namespace", Ok(())),
            (
                "apps",
                "Deployment",
                "spec.replicas",
                Err("\"spec.replicas\" is not a known field selector: only \"metadata.name\", \"metadata.namespace\""),
            ),
            ("example.com", "Widget", "spec.anything", Ok(())),
        ];
        for (group, kind, label, expected) in cases {
            let result = check_label(group, kind, label).map_err(|e| e.message);
            assert_eq!(result, expected.map_err(str::to_owned), "{kind} {label}");
        }
    }

    #[test]
    fn values() {
        let pod = json!({"spec": {"nodeName": "n1"}, "status": {"podIPs": [{"ip": "10.0.0.1"}]}});
        assert_eq!(field_value(&pod, "spec.host"), "n1");
        assert_eq!(field_value(&pod, "spec.hostNetwork"), "false");
        assert_eq!(field_value(&pod, "status.podIP"), "10.0.0.1");
        assert_eq!(field_value(&pod, "status.phase"), "");
        let event = json!({"reportingComponent": "kubelet", "source": {}});
        assert_eq!(field_value(&event, "source"), "kubelet");
        assert_eq!(field_value(&json!({"status": {"succeeded": 2}}), "status.successful"), "2");
    }
}
