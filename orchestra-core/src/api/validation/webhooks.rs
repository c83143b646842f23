//! `admissionregistration.k8s.io/v1` MutatingWebhookConfigurations and
//! ValidatingWebhookConfigurations, checked as upstream's
//! `ValidateMutatingWebhookConfiguration` and
//! `ValidateValidatingWebhookConfiguration` check them, with two refusals
//! of this server's own: `admissionReviewVersions` must contain `v1` (the
//! only version of AdmissionReview it sends) and `matchConditions` (CEL
//! expressions, which it cannot evaluate) may not be set.

use std::collections::BTreeSet;

use serde_json::Value;

use super::super::LabelSelector;
use super::super::error::FieldError;

/// The longest `timeoutSeconds` upstream accepts.
const MAX_TIMEOUT_SECONDS: i64 = 30;

/// MutatingWebhookConfigurations: every webhook valid, names unique.
///
/// ```
/// use orchestra_core::api::validation::mutating_webhook_configuration;
/// use serde_json::json;
///
/// let webhook = json!({
///     "name": "label.example.com",
///     "clientConfig": {"url": "https://hooks.example.com/label"},
///     "sideEffects": "None",
///     "admissionReviewVersions": ["v1"],
///     "reinvocationPolicy": "IfNeeded",
/// });
/// assert!(mutating_webhook_configuration(&json!({"webhooks": [webhook]})).is_empty());
/// let errors = mutating_webhook_configuration(&json!({"webhooks": [{"name": "short"}]}));
/// assert!(errors.iter().any(|e| e.field == "webhooks[0].sideEffects"));
/// ```
pub fn mutating_webhook_configuration(object: &Value) -> Vec<FieldError> {
    configuration(object, true)
}

/// ValidatingWebhookConfigurations: every webhook valid, names unique.
///
/// ```
/// use orchestra_core::api::validation::validating_webhook_configuration;
/// use serde_json::json;
///
/// let webhook = json!({
///     "name": "deny.example.com",
///     "clientConfig": {"url": "http://hooks.example.com/deny"},
///     "sideEffects": "None",
///     "admissionReviewVersions": ["v1"],
/// });
/// let errors = validating_webhook_configuration(&json!({"webhooks": [webhook]}));
/// assert_eq!(errors[0].field, "webhooks[0].clientConfig.url");
/// ```
pub fn validating_webhook_configuration(object: &Value) -> Vec<FieldError> {
    configuration(object, false)
}

fn configuration(object: &Value, mutating: bool) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let webhooks = object.get("webhooks").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
    let mut names = BTreeSet::new();
    for (i, webhook) in webhooks.iter().enumerate() {
        let path = format!("webhooks[{i}]");
        let name = webhook.get("name").and_then(Value::as_str).unwrap_or_default();
        if !name.is_empty() && !names.insert(name) {
            errors.push(duplicate(format!("{path}.name"), name));
        }
        validate_webhook(webhook, &path, mutating, &mut errors);
    }
    errors
}

fn duplicate(field: String, value: &str) -> FieldError {
    FieldError { reason: "FieldValueDuplicate", field, message: format!("Duplicate value: {value:?}") }
}

fn unsupported(field: String, value: &str, supported: &[&str]) -> FieldError {
    let supported = supported.iter().map(|s| format!("{s:?}")).collect::<Vec<_>>().join(", ");
    FieldError {
        reason: "FieldValueNotSupported",
        field,
        message: format!("Unsupported value: {value:?}: supported values: {supported}"),
    }
}

fn forbidden(field: String, detail: &str) -> FieldError {
    FieldError { reason: "FieldValueForbidden", field, message: format!("Forbidden: {detail}") }
}

/// An optional string field that must hold one of `supported` (`required`:
/// it must be set).
fn one_of(webhook: &Value, path: &str, field: &str, supported: &[&str], required: bool, out: &mut Vec<FieldError>) {
    match webhook.get(field) {
        None | Some(Value::Null) if required => out.push(FieldError::required(format!("{path}.{field}"))),
        None | Some(Value::Null) => {}
        Some(value) => {
            let text = value.as_str().unwrap_or_default();
            if !supported.contains(&text) {
                out.push(unsupported(format!("{path}.{field}"), text, supported));
            }
        }
    }
}

fn validate_webhook(webhook: &Value, path: &str, mutating: bool, out: &mut Vec<FieldError>) {
    let name = webhook.get("name").and_then(Value::as_str).unwrap_or_default();
    if name.is_empty() {
        out.push(FieldError::required(format!("{path}.name")));
    } else {
        out.extend(fully_qualified_name(&format!("{path}.name"), name));
    }
    let rules = webhook.get("rules").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
    for (i, rule) in rules.iter().enumerate() {
        validate_rule(rule, &format!("{path}.rules[{i}]"), out);
    }
    one_of(webhook, path, "failurePolicy", &["Fail", "Ignore"], false, out);
    one_of(webhook, path, "matchPolicy", &["Exact", "Equivalent"], false, out);
    one_of(webhook, path, "sideEffects", &["None", "NoneOnDryRun"], true, out);
    if mutating {
        one_of(webhook, path, "reinvocationPolicy", &["Never", "IfNeeded"], false, out);
    }
    match webhook.get("admissionReviewVersions").and_then(Value::as_array) {
        None => out.push(FieldError::required(format!("{path}.admissionReviewVersions"))),
        Some(versions) if !versions.iter().any(|v| v == "v1") => out.push(FieldError::invalid(
            format!("{path}.admissionReviewVersions"),
            &Value::Array(versions.clone()).to_string(),
            "must include v1, the only AdmissionReview version this server sends",
        )),
        Some(_) => {}
    }
    if let Some(timeout) = webhook.get("timeoutSeconds").filter(|t| !t.is_null()) {
        match timeout.as_i64() {
            Some(seconds) if (1..=MAX_TIMEOUT_SECONDS).contains(&seconds) => {}
            _ => out.push(FieldError::invalid(
                format!("{path}.timeoutSeconds"),
                &timeout.to_string(),
                "the timeout value must be between 1 and 30 seconds",
            )),
        }
    }
    for selector in ["namespaceSelector", "objectSelector"] {
        if let Some(value) = webhook.get(selector).filter(|s| !s.is_null())
            && let Err(error) = LabelSelector::from_json(Some(value))
        {
            out.push(FieldError::invalid(format!("{path}.{selector}"), &value.to_string(), error.to_string()));
        }
    }
    if webhook.get("matchConditions").and_then(Value::as_array).is_some_and(|c| !c.is_empty()) {
        out.push(forbidden(
            format!("{path}.matchConditions"),
            "matchConditions (CEL expressions) are not supported by this server",
        ));
    }
    validate_client_config(webhook.get("clientConfig"), &format!("{path}.clientConfig"), out);
}

/// Upstream's `IsFullyQualifiedName`: a DNS subdomain of at least three
/// segments.
fn fully_qualified_name(field: &str, name: &str) -> Vec<FieldError> {
    let errors = crate::api::meta::validate_subdomain(field, name);
    if !errors.is_empty() {
        return errors;
    }
    if name.split('.').count() < 3 {
        return vec![FieldError::invalid(
            field,
            name,
            "should be a domain with at least three segments separated by dots",
        )];
    }
    Vec::new()
}

fn validate_rule(rule: &Value, path: &str, out: &mut Vec<FieldError>) {
    let list = |field: &str| -> Vec<String> {
        rule.get(field)
            .and_then(Value::as_array)
            .map(|l| l.iter().map(|v| v.as_str().unwrap_or_default().to_owned()).collect())
            .unwrap_or_default()
    };
    let operations = list("operations");
    if operations.is_empty() {
        out.push(FieldError::required(format!("{path}.operations")));
    }
    for (i, operation) in operations.iter().enumerate() {
        let supported = ["*", "CREATE", "UPDATE", "DELETE", "CONNECT"];
        if !supported.contains(&operation.as_str()) {
            out.push(unsupported(format!("{path}.operations[{i}]"), operation, &supported));
        }
    }
    for field in ["operations", "apiGroups", "apiVersions"] {
        let values = list(field);
        if field != "operations" && values.is_empty() {
            out.push(FieldError::required(format!("{path}.{field}")));
        }
        if values.len() > 1 && values.iter().any(|v| v == "*") {
            out.push(FieldError::invalid(
                format!("{path}.{field}"),
                &values.join(","),
                "if '*' is present, must not specify other values",
            ));
        }
    }
    for (i, version) in list("apiVersions").iter().enumerate() {
        if version.is_empty() {
            out.push(FieldError::required(format!("{path}.apiVersions[{i}]")));
        }
    }
    let resources = list("resources");
    if resources.is_empty() {
        out.push(FieldError::required(format!("{path}.resources")));
    }
    let mut seen = BTreeSet::new();
    for (i, resource) in resources.iter().enumerate() {
        let field = format!("{path}.resources[{i}]");
        if resource.is_empty() {
            out.push(FieldError::required(field));
            continue;
        }
        let (main, sub) = resource.split_once('/').unwrap_or((resource, ""));
        if main.is_empty() || resource.matches('/').count() > 1 || (resource.contains('/') && sub.is_empty()) {
            out.push(FieldError::invalid(field, resource, "must be of the form 'resource' or 'resource/subresource'"));
            continue;
        }
        if !seen.insert(resource.as_str()) {
            out.push(duplicate(field, resource));
        }
    }
    // '*' and '*/*' overlap every other entry of their kind.
    let overlaps = |all: &str, is_covered: &dyn Fn(&str) -> bool| {
        seen.contains(all) && seen.iter().any(|r| *r != all && is_covered(r))
    };
    if overlaps("*/*", &|_| true) {
        out.push(FieldError::invalid(
            format!("{path}.resources"),
            &resources.join(","),
            "if '*/*' is present, must not specify other resources",
        ));
    } else if overlaps("*", &|r| !r.contains('/')) {
        out.push(FieldError::invalid(
            format!("{path}.resources"),
            &resources.join(","),
            "if '*' is present, must not specify other resources without subresources",
        ));
    }
    one_of(rule, path, "scope", &["Cluster", "Namespaced", "*"], false, out);
}

fn validate_client_config(config: Option<&Value>, path: &str, out: &mut Vec<FieldError>) {
    let config = config.filter(|c| c.is_object());
    let url = config.and_then(|c| c.get("url")).and_then(Value::as_str);
    let service = config.and_then(|c| c.get("service")).filter(|s| s.is_object());
    match (url, service) {
        (Some(_), Some(_)) | (None, None) => {
            out.push(
                FieldError::required(path.to_owned())
                    .with_message("Required value: exactly one of url or service is required"),
            );
        }
        (Some(url), None) => validate_url(url, &format!("{path}.url"), out),
        (None, Some(service)) => validate_service(service, &format!("{path}.service"), out),
    }
}

fn validate_url(url: &str, field: &str, out: &mut Vec<FieldError>) {
    let problem = match url.parse::<http::Uri>() {
        Err(error) => Some(format!("url must be a valid URL: {error}")),
        Ok(uri) if uri.scheme_str() != Some("https") => Some("'https' is the only allowed URL scheme".to_owned()),
        Ok(uri) if uri.host().is_none_or(str::is_empty) => Some("host must be specified".to_owned()),
        Ok(uri) if uri.authority().is_some_and(|a| a.as_str().contains('@')) => {
            Some("user information is not permitted in the URL".to_owned())
        }
        Ok(_) if url.contains('#') => Some("fragments are not permitted in the URL".to_owned()),
        Ok(uri) if uri.query().is_some() => Some("query parameters are not permitted in the URL".to_owned()),
        Ok(_) => None,
    };
    if let Some(problem) = problem {
        out.push(FieldError::invalid(field, url, problem));
    }
}

fn validate_service(service: &Value, path: &str, out: &mut Vec<FieldError>) {
    for field in ["name", "namespace"] {
        if service.get(field).and_then(Value::as_str).is_none_or(str::is_empty) {
            out.push(FieldError::required(format!("{path}.{field}")));
        }
    }
    if let Some(service_path) = service.get("path").and_then(Value::as_str)
        && !service_path.starts_with('/')
    {
        out.push(FieldError::invalid(format!("{path}.path"), service_path, "must start with a '/'"));
    }
    if let Some(port) = service.get("port").filter(|p| !p.is_null())
        && !port.as_i64().is_some_and(|p| (1..=65535).contains(&p))
    {
        out.push(FieldError::invalid(
            format!("{path}.port"),
            &port.to_string(),
            "port is not valid: must be between 1 and 65535, inclusive",
        ));
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    fn webhook() -> Value {
        json!({
            "name": "check.example.com",
            "clientConfig": {"url": "https://127.0.0.1:8443/check"},
            "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods", "pods/status"]}],
            "sideEffects": "None",
            "admissionReviewVersions": ["v1", "v1beta1"],
        })
    }

    #[test]
    fn configurations_are_checked_field_by_field() {
        // (name, change to one valid webhook, the field of the single error; None: valid)
        type Change = fn(&mut Value);
        let cases: Vec<(&str, Change, Option<&str>)> = vec![
            ("valid", |_| {}, None),
            (
                "service reference",
                |w| w["clientConfig"] = json!({"service": {"name": "s", "namespace": "n", "path": "/p", "port": 443}}),
                None,
            ),
            ("name with two segments", |w| w["name"] = "check.example".into(), Some("webhooks[0].name")),
            ("name not a DNS name", |w| w["name"] = "Check.example.com".into(), Some("webhooks[0].name")),
            (
                "no side effects",
                |w| {
                    w.as_object_mut().unwrap().remove("sideEffects");
                },
                Some("webhooks[0].sideEffects"),
            ),
            ("side effects Some", |w| w["sideEffects"] = "Some".into(), Some("webhooks[0].sideEffects")),
            (
                "no review versions",
                |w| {
                    w.as_object_mut().unwrap().remove("admissionReviewVersions");
                },
                Some("webhooks[0].admissionReviewVersions"),
            ),
            (
                "only v1beta1 reviews",
                |w| w["admissionReviewVersions"] = json!(["v1beta1"]),
                Some("webhooks[0].admissionReviewVersions"),
            ),
            ("timeout too long", |w| w["timeoutSeconds"] = 31.into(), Some("webhooks[0].timeoutSeconds")),
            ("timeout zero", |w| w["timeoutSeconds"] = 0.into(), Some("webhooks[0].timeoutSeconds")),
            ("timeout in range", |w| w["timeoutSeconds"] = 30.into(), None),
            ("plain http", |w| w["clientConfig"]["url"] = "http://h/x".into(), Some("webhooks[0].clientConfig.url")),
            (
                "query in url",
                |w| w["clientConfig"]["url"] = "https://h/x?a=b".into(),
                Some("webhooks[0].clientConfig.url"),
            ),
            (
                "url and service",
                |w| w["clientConfig"]["service"] = json!({"name": "s", "namespace": "n"}),
                Some("webhooks[0].clientConfig"),
            ),
            (
                "no client config",
                |w| {
                    w.as_object_mut().unwrap().remove("clientConfig");
                },
                Some("webhooks[0].clientConfig"),
            ),
            (
                "service without namespace",
                |w| w["clientConfig"] = json!({"service": {"name": "s"}}),
                Some("webhooks[0].clientConfig.service.namespace"),
            ),
            (
                "service port",
                |w| w["clientConfig"] = json!({"service": {"name": "s", "namespace": "n", "port": 70000}}),
                Some("webhooks[0].clientConfig.service.port"),
            ),
            ("failure policy", |w| w["failurePolicy"] = "Sometimes".into(), Some("webhooks[0].failurePolicy")),
            ("match policy", |w| w["matchPolicy"] = "Close".into(), Some("webhooks[0].matchPolicy")),
            (
                "bad operation",
                |w| w["rules"][0]["operations"] = json!(["PATCH"]),
                Some("webhooks[0].rules[0].operations[0]"),
            ),
            (
                "star and more",
                |w| w["rules"][0]["apiGroups"] = json!(["*", "apps"]),
                Some("webhooks[0].rules[0].apiGroups"),
            ),
            (
                "star resources overlap",
                |w| w["rules"][0]["resources"] = json!(["*", "pods"]),
                Some("webhooks[0].rules[0].resources"),
            ),
            ("star with subresources", |w| w["rules"][0]["resources"] = json!(["*", "pods/status"]), None),
            (
                "bad resource",
                |w| w["rules"][0]["resources"] = json!(["pods/"]),
                Some("webhooks[0].rules[0].resources[0]"),
            ),
            ("bad scope", |w| w["rules"][0]["scope"] = "Everywhere".into(), Some("webhooks[0].rules[0].scope")),
            (
                "bad selector",
                |w| w["objectSelector"] = json!({"matchExpressions": [{"key": "a", "operator": "Near"}]}),
                Some("webhooks[0].objectSelector"),
            ),
            (
                "match conditions",
                |w| w["matchConditions"] = json!([{"name": "c", "expression": "true"}]),
                Some("webhooks[0].matchConditions"),
            ),
        ];
        for (name, change, field) in cases {
            let mut hook = webhook();
            change(&mut hook);
            let errors = validating_webhook_configuration(&json!({"webhooks": [hook]}));
            match field {
                None => assert!(errors.is_empty(), "{name}: {errors:?}"),
                Some(field) => {
                    assert_eq!(errors.len(), 1, "{name}: {errors:?}");
                    assert_eq!(errors[0].field, field, "{name}: {errors:?}");
                }
            }
        }
    }

    #[test]
    fn names_are_unique_and_reinvocation_is_for_mutating_webhooks() {
        let errors = mutating_webhook_configuration(&json!({"webhooks": [webhook(), webhook()]}));
        assert_eq!(errors.len(), 1);
        assert_eq!(errors[0].reason, "FieldValueDuplicate");
        let mut hook = webhook();
        hook["reinvocationPolicy"] = "Always".into();
        assert_eq!(
            mutating_webhook_configuration(&json!({"webhooks": [hook.clone()]}))[0].field,
            "webhooks[0].reinvocationPolicy"
        );
        assert!(validating_webhook_configuration(&json!({"webhooks": [hook]})).is_empty());
        assert!(validating_webhook_configuration(&json!({})).is_empty(), "a configuration without webhooks is valid");
    }
}
