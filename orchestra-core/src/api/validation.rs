//! Validation of built-in kinds beyond what their types enforce.

use serde_json::Value;

use super::LabelSelector;
use super::error::FieldError;

mod webhooks;

pub use webhooks::{mutating_webhook_configuration, validating_webhook_configuration};

fn containers(value: &Value, path: &str, out: &mut Vec<FieldError>) {
    let Some(list) = value.as_array() else { return };
    for (i, container) in list.iter().enumerate() {
        for field in ["name", "image"] {
            if container.get(field).and_then(Value::as_str).is_none_or(str::is_empty) {
                out.push(FieldError::required(format!("{path}[{i}].{field}")));
            }
        }
    }
}

fn pod_spec(spec: Option<&Value>, path: &str, out: &mut Vec<FieldError>) {
    let Some(spec) = spec else {
        out.push(FieldError::required(path.to_owned()));
        return;
    };
    match spec.get("containers").and_then(Value::as_array) {
        Some(list) if !list.is_empty() => containers(&spec["containers"], &format!("{path}.containers"), out),
        _ => out.push(FieldError::required(format!("{path}.containers"))),
    }
    if let Some(init) = spec.get("initContainers") {
        containers(init, &format!("{path}.initContainers"), out);
    }
}

/// Pods: containers present, each with a name and an image.
pub fn pod(object: &Value) -> Vec<FieldError> {
    let mut errors = Vec::new();
    pod_spec(object.get("spec"), "spec", &mut errors);
    errors
}

/// Workloads with a selector and a pod template (Deployment, ReplicaSet,
/// StatefulSet, DaemonSet): the selector is required and must match the
/// template's labels.
pub fn workload(object: &Value) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let spec = object.get("spec");
    let selector = spec.and_then(|s| s.get("selector"));
    let template = spec.and_then(|s| s.get("template")).unwrap_or(&Value::Null);
    if selector.is_none_or(|s| s.get("matchLabels").is_none() && s.get("matchExpressions").is_none()) {
        errors.push(FieldError::required("spec.selector"));
    } else {
        match LabelSelector::from_json(selector) {
            Err(e) => errors.push(FieldError::invalid(
                "spec.selector",
                &selector.map(Value::to_string).unwrap_or_default(),
                e.to_string(),
            )),
            Ok(s) if !s.matches_object(template) => {
                let labels = template.pointer("/metadata/labels").filter(|l| l.is_object());
                errors.push(FieldError::invalid(
                    "spec.template.metadata.labels",
                    &labels.map(Value::to_string).unwrap_or_default(),
                    "`selector` does not match template `labels`",
                ))
            }
            Ok(_) => {}
        }
    }
    pod_spec(spec.and_then(|s| s.pointer("/template/spec")), "spec.template.spec", &mut errors);
    errors
}

/// Jobs: a pod template.
pub fn job(object: &Value) -> Vec<FieldError> {
    let mut errors = Vec::new();
    pod_spec(object.pointer("/spec/template/spec"), "spec.template.spec", &mut errors);
    errors
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn pods_need_images() {
        let errors = pod(&json!({"spec": {"containers": [{"name": "c"}]}}));
        assert_eq!(errors, vec![FieldError::required("spec.containers[0].image")]);
        assert_eq!(pod(&json!({"spec": {}})), vec![FieldError::required("spec.containers")]);
        assert!(pod(&json!({"spec": {"containers": [{"name": "c", "image": "nginx"}]}})).is_empty());
    }

    #[test]
    fn workloads_need_matching_selectors() {
        let template =
            json!({"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": "i"}]}});
        assert!(
            workload(&json!({"spec": {"selector": {"matchLabels": {"app": "web"}}, "template": template}})).is_empty()
        );
        assert_eq!(workload(&json!({"spec": {"template": template}})), vec![FieldError::required("spec.selector")]);
        assert_eq!(
            workload(&json!({"spec": {"selector": {"matchLabels": {"app": "db"}}, "template": template}})).len(),
            1
        );
        let expressions = |operator: &str| {
            let selector = json!({"matchExpressions": [{"key": "app", "operator": operator, "values": ["web"]}]});
            json!({"spec": {"selector": selector, "template": template}})
        };
        assert!(workload(&expressions("In")).is_empty());
        assert_eq!(workload(&expressions("NotIn"))[0].field, "spec.template.metadata.labels");
        assert_eq!(workload(&expressions("Equals"))[0].field, "spec.selector");
    }
}
