//! Object-meta helpers on JSON objects, and name validation.

use serde_json::{Map, Value};

use super::error::FieldError;

/// `metadata.<field>` as a string, if present.
pub fn meta_str<'a>(object: &'a Value, field: &str) -> Option<&'a str> {
    meta_value(object, field)?.as_str()
}

/// `metadata.<field>` of an object: `object.pointer("/metadata/<field>")`
/// without the pointer's parsing (which allocates for every segment).
pub fn meta_value<'a>(object: &'a Value, field: &str) -> Option<&'a Value> {
    object.get("metadata")?.get(field)
}

/// The object's `metadata`, created if missing.
pub fn metadata_mut(object: &mut Value) -> &mut Map<String, Value> {
    if !object.get("metadata").is_some_and(Value::is_object) {
        object["metadata"] = Value::Object(Map::new());
    }
    match object.get_mut("metadata") {
        Some(Value::Object(metadata)) => metadata,
        _ => unreachable!("just ensured"),
    }
}

/// Checks a DNS-1123 subdomain name (most kinds): at most 253 characters of
/// lowercase alphanumerics, `-` and `.`, starting and ending alphanumeric.
pub fn validate_subdomain(field: &str, name: &str) -> Vec<FieldError> {
    let mut errors = Vec::new();
    if name.len() > 253 {
        errors.push(FieldError::invalid(field, name, "must be no more than 253 characters"));
    }
    let ok = !name.is_empty()
        && name.split('.').all(|part| {
            !part.is_empty()
                && part.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                && !part.starts_with('-')
                && !part.ends_with('-')
        });
    if !ok {
        errors.push(FieldError::invalid(
            field,
            name,
            "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')",
        ));
    }
    errors
}

/// Checks a DNS-1123 label (namespaces, services): at most 63 characters of
/// lowercase alphanumerics and `-`, starting and ending alphanumeric.
pub fn validate_label(field: &str, name: &str) -> Vec<FieldError> {
    let ok = !name.is_empty()
        && name.len() <= 63
        && name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !name.starts_with('-')
        && !name.ends_with('-');
    if ok {
        return Vec::new();
    }
    vec![FieldError::invalid(
        field,
        name,
        "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')",
    )]
}

/// Checks a path segment name (RBAC's kinds, whose names such as
/// `system:node` are not DNS names): anything but `.`, `..`, `/` and `%`.
pub fn validate_path_segment(field: &str, name: &str) -> Vec<FieldError> {
    let problem = match name {
        "." => Some("may not be '.'"),
        ".." => Some("may not be '..'"),
        _ if name.contains('/') => Some("may not contain '/'"),
        _ if name.contains('%') => Some("may not contain '%'"),
        _ => None,
    };
    problem.map(|detail| vec![FieldError::invalid(field, name, detail)]).unwrap_or_default()
}

/// Checks the name of an object of `group`/`plural` by its kind's rule:
/// DNS labels for namespaces and services, path segments for RBAC's kinds,
/// DNS subdomains for every other kind.
pub fn validate_name(group: &str, plural: &str, field: &str, name: &str) -> Vec<FieldError> {
    match (group, plural) {
        ("", "namespaces" | "services") => validate_label(field, name),
        ("rbac.authorization.k8s.io", "roles" | "clusterroles" | "rolebindings" | "clusterrolebindings") => {
            validate_path_segment(field, name)
        }
        _ => validate_subdomain(field, name),
    }
}

/// Label and annotation maps: keys are `[prefix/]name`, values at most 63
/// characters for labels.
pub fn validate_labels(object: &Value) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let Some(labels) = meta_value(object, "labels") else {
        return errors;
    };
    let Some(labels) = labels.as_object() else {
        errors.push(FieldError::invalid("metadata.labels", &labels.to_string(), "must be a map of strings"));
        return errors;
    };
    for (key, value) in labels {
        let Some(value) = value.as_str() else {
            errors.push(FieldError::invalid(format!("metadata.labels[{key}]"), &value.to_string(), "must be a string"));
            continue;
        };
        let name = key.rsplit('/').next().unwrap_or(key);
        let name_ok = !name.is_empty()
            && name.len() <= 63
            && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
            && name.starts_with(|c: char| c.is_ascii_alphanumeric())
            && name.ends_with(|c: char| c.is_ascii_alphanumeric());
        if !name_ok {
            errors.push(FieldError::invalid("metadata.labels", key, "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character"));
        }
        let value_ok = value.is_empty()
            || (value.len() <= 63
                && value.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
                && value.starts_with(|c: char| c.is_ascii_alphanumeric())
                && value.ends_with(|c: char| c.is_ascii_alphanumeric()));
        if !value_ok {
            errors.push(FieldError::invalid("metadata.labels", value, "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character"));
        }
    }
    errors
}

/// The current time as Kubernetes writes timestamps (RFC 3339, seconds).
pub fn now_rfc3339() -> String {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_secs() as i64;
    // Every write stamps the time, often several times a second: each
    // thread formats a second once.
    thread_local! {
        static LAST: std::cell::RefCell<(i64, String)> = const { std::cell::RefCell::new((i64::MIN, String::new())) };
    }
    LAST.with_borrow_mut(|(second, text)| {
        if *second != now {
            *second = now;
            *text = rfc3339(now);
        }
        text.clone()
    })
}

/// A Unix time in seconds as Kubernetes writes timestamps (`2026-11-30T20:40:01Z`).
fn rfc3339(second: i64) -> String {
    let time = k8s_openapi::jiff::Timestamp::from_second(second).unwrap_or_default();
    serde_json::to_value(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(time))
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn timestamps_are_rfc3339_seconds() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(1_796_071_201), "2026-11-30T20:40:01Z");
        let now = now_rfc3339();
        assert_eq!(now.len(), 20, "{now}");
        assert!(now.ends_with('Z') && now.as_bytes()[10] == b'T', "{now}");
        assert!(now_rfc3339() >= now, "the cached second moves on");
    }

    #[test]
    fn names() {
        assert!(validate_subdomain("metadata.name", "web-0.example").is_empty());
        assert!(!validate_subdomain("metadata.name", "Web").is_empty());
        assert!(!validate_subdomain("metadata.name", "-x").is_empty());
        assert!(!validate_subdomain("metadata.name", "a..b").is_empty());
        let rbac = "rbac.authorization.k8s.io";
        assert!(validate_name(rbac, "clusterroles", "metadata.name", "system:node").is_empty());
        assert!(!validate_name(rbac, "roles", "metadata.name", "a/b").is_empty());
        assert!(!validate_name(rbac, "roles", "metadata.name", "..").is_empty());
        assert!(!validate_name("", "configmaps", "metadata.name", "system:node").is_empty());
        assert!(!validate_name("", "services", "metadata.name", "a.b").is_empty());
        assert!(validate_label("metadata.name", "kube-system").is_empty());
        assert!(!validate_label("metadata.name", "a.b").is_empty());
        assert!(!validate_label("metadata.name", &"x".repeat(64)).is_empty());
    }

    #[test]
    fn labels_and_time() {
        assert!(validate_labels(&json!({"metadata": {"labels": {"app.kubernetes.io/name": "web"}}})).is_empty());
        assert_eq!(validate_labels(&json!({"metadata": {"labels": {"app": "bad value"}}})).len(), 1);
        let now = now_rfc3339();
        assert!(now.ends_with('Z') && now.len() == 20, "{now}");
    }
}
