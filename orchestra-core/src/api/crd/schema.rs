//! A CRD version's structural `openAPIV3Schema` applied to objects, as
//! upstream's apiextensions-apiserver does on every write: unknown fields
//! are pruned, `default`s are filled in, then the object is validated.
//!
//! All functions are pure, over `serde_json::Value`s. Error texts follow
//! kube-openapi's (`spec.replicas in body must be of type integer: "string"`)
//! wrapped in the `field.Error` shapes upstream converts them to.
//!
//! `x-kubernetes-validations` (CEL rules) are accepted in schemas and ignored.

use serde_json::{Map, Value};

use crate::api::FieldError;

/// The keys every object keeps at its root whatever its schema says.
const ROOT_KEPT: [&str; 3] = ["apiVersion", "kind", "metadata"];

fn child(path: &str, name: &str) -> String {
    if path.is_empty() { name.to_owned() } else { format!("{path}.{name}") }
}

fn flag(schema: &Value, name: &str) -> bool {
    schema.get(name).and_then(Value::as_bool).unwrap_or(false)
}

fn properties(schema: &Value) -> Option<&Map<String, Value>> {
    schema.get("properties").and_then(Value::as_object)
}

/// `additionalProperties` as a schema, if it is one (`true` means "anything").
fn additional(schema: &Value) -> Option<&Value> {
    schema.get("additionalProperties").filter(|a| a.is_object())
}

/// Removes the fields the schema does not specify (structural pruning).
///
/// `apiVersion`, `kind` and `metadata` are always kept at the root and in
/// `x-kubernetes-embedded-resource` objects; `x-kubernetes-preserve-unknown-fields`
/// keeps unknown fields of its object (its specified fields are still pruned
/// inside).
pub fn prune(schema: &Value, object: &mut Value) {
    prune_node(schema, object, true);
}

/// Prunes a value that is not an object's root (a `default`, a field).
pub fn prune_value(schema: &Value, value: &mut Value) {
    prune_node(schema, value, false);
}

fn prune_node(schema: &Value, value: &mut Value, root: bool) {
    match value {
        Value::Object(map) => {
            let preserve = flag(schema, "x-kubernetes-preserve-unknown-fields");
            let embedded = root || flag(schema, "x-kubernetes-embedded-resource");
            let props = properties(schema);
            let extra = additional(schema);
            let allow_any_extra = schema.get("additionalProperties") == Some(&Value::Bool(true));
            map.retain(|key, _| {
                preserve
                    || allow_any_extra
                    || extra.is_some()
                    || props.is_some_and(|p| p.contains_key(key))
                    || (embedded && ROOT_KEPT.contains(&key.as_str()))
            });
            for (key, field) in map.iter_mut() {
                if embedded && key == "metadata" {
                    continue;
                }
                if let Some(sub) = props.and_then(|p| p.get(key)) {
                    prune_node(sub, field, false);
                } else if let Some(sub) = extra {
                    prune_node(sub, field, false);
                }
            }
        }
        Value::Array(items) => {
            if let Some(sub) = schema.get("items").filter(|i| i.is_object()) {
                for item in items {
                    prune_node(sub, item, false);
                }
            }
        }
        _ => {}
    }
}

/// Fills in `default`s of absent fields (and of `null`s in non-nullable
/// fields), and drops other `null`s in non-nullable fields, like upstream.
/// Defaults apply inside objects that exist; they do not create parents.
pub fn apply_defaults(schema: &Value, object: &mut Value) {
    default_node(schema, object, true);
}

fn default_node(schema: &Value, value: &mut Value, root: bool) {
    match value {
        Value::Object(map) => {
            if let Some(props) = properties(schema) {
                for (key, sub) in props {
                    if root && key == "metadata" {
                        continue;
                    }
                    let nullable = flag(sub, "nullable");
                    match (map.get(key), sub.get("default")) {
                        (None, Some(default)) => {
                            map.insert(key.clone(), default.clone());
                        }
                        (Some(Value::Null), Some(default)) if !nullable => {
                            map.insert(key.clone(), default.clone());
                        }
                        (Some(Value::Null), None) if !nullable => {
                            map.remove(key);
                        }
                        _ => {}
                    }
                }
                for (key, field) in map.iter_mut() {
                    if root && key == "metadata" {
                        continue;
                    }
                    if let Some(sub) = props.get(key) {
                        default_node(sub, field, false);
                    }
                }
            } else if let Some(sub) = additional(schema) {
                for field in map.values_mut() {
                    default_node(sub, field, false);
                }
            }
        }
        Value::Array(items) => {
            if let Some(sub) = schema.get("items").filter(|i| i.is_object()) {
                for item in items {
                    default_node(sub, item, false);
                }
            }
        }
        _ => {}
    }
}

/// Validates an object against a schema. `metadata` at the root is left to
/// the generic object-meta validation.
pub fn validate(schema: &Value, object: &Value) -> Vec<FieldError> {
    let mut errors = Vec::new();
    validate_node(schema, object, "", &mut errors);
    errors
}

/// Validates `value` against `schema` at `path` (used for defaults too).
pub fn validate_at(schema: &Value, value: &Value, path: &str) -> Vec<FieldError> {
    let mut errors = Vec::new();
    validate_node(schema, value, path, &mut errors);
    errors
}

/// The JSON type name of a value, `integer` for whole numbers.
fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if is_integer(n) => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn is_integer(n: &serde_json::Number) -> bool {
    n.is_i64() || n.is_u64() || n.as_f64().is_some_and(|f| f.fract() == 0.0 && f.is_finite())
}

fn type_matches(expected: &str, value: &Value) -> bool {
    match (expected, value) {
        ("object", Value::Object(_))
        | ("array", Value::Array(_))
        | ("string", Value::String(_))
        | ("boolean", Value::Bool(_))
        | ("number", Value::Number(_)) => true,
        ("integer", Value::Number(n)) => is_integer(n),
        _ => false,
    }
}

/// How `field.Invalid` prints a value: strings quoted, numbers and booleans
/// bare, anything else as JSON.
fn show(value: &Value) -> String {
    match value {
        Value::String(s) => format!("{s:?}"),
        Value::Null => "null".into(),
        Value::Number(_) | Value::Bool(_) => value.to_string(),
        other => format!("{:?}", other.to_string()),
    }
}

fn invalid(path: &str, value: &Value, detail: String) -> FieldError {
    FieldError {
        reason: "FieldValueInvalid",
        field: path.to_owned(),
        message: format!("Invalid value: {}: {detail}", show(value)),
    }
}

fn type_invalid(path: &str, expected: &str, value: &Value) -> FieldError {
    let actual = type_name(value);
    FieldError {
        reason: "FieldValueTypeInvalid",
        field: path.to_owned(),
        message: format!(
            "Invalid value: {actual:?}: {} in body must be of type {expected}: {actual:?}",
            body_path(path)
        ),
    }
}

/// kube-openapi names the root `body`; deeper fields by their path.
fn body_path(path: &str) -> &str {
    if path.is_empty() { "body" } else { path }
}

fn number(value: &Value, key: &str) -> Option<f64> {
    value.get(key).and_then(Value::as_f64)
}

fn count(value: &Value, key: &str) -> Option<u64> {
    value.get(key).and_then(Value::as_u64)
}

/// `3` rather than `3.0` in messages about whole bounds.
fn show_number(n: f64) -> String {
    if n.fract() == 0.0 && n.abs() < 1e15 { format!("{}", n as i64) } else { n.to_string() }
}

fn validate_node(schema: &Value, value: &Value, path: &str, errors: &mut Vec<FieldError>) {
    if !schema.is_object() {
        return;
    }
    let at = body_path(path);
    if value.is_null() {
        if flag(schema, "nullable") {
            return;
        }
        if let Some(expected) = schema.get("type").and_then(Value::as_str) {
            errors.push(type_invalid(path, expected, value));
        }
        return;
    }
    if flag(schema, "x-kubernetes-int-or-string") {
        if !matches!(value, Value::String(_)) && !type_matches("integer", value) {
            errors.push(type_invalid(path, "integer,string", value));
            return;
        }
    } else if let Some(expected) = schema.get("type").and_then(Value::as_str)
        && !type_matches(expected, value)
    {
        errors.push(type_invalid(path, expected, value));
        return;
    }
    if let Some(allowed) = schema.get("enum").and_then(Value::as_array)
        && !allowed.iter().any(|a| json_equal(a, value))
    {
        let supported: Vec<String> = allowed
            .iter()
            .map(|a| match a {
                Value::String(s) => format!("{s:?}"),
                other => other.to_string(),
            })
            .collect();
        errors.push(FieldError {
            reason: "FieldValueNotSupported",
            field: path.to_owned(),
            message: format!("Unsupported value: {}: supported values: {}", show(value), supported.join(", ")),
        });
    }
    match value {
        Value::Number(n) => validate_number(schema, value, n, path, errors),
        Value::String(s) => validate_string(schema, value, s, path, errors),
        Value::Array(items) => {
            if let Some(min) = count(schema, "minItems")
                && (items.len() as u64) < min
            {
                errors.push(invalid(path, value, format!("{at} in body should have at least {min} items")));
            }
            if let Some(max) = count(schema, "maxItems")
                && (items.len() as u64) > max
            {
                errors.push(FieldError {
                    reason: "FieldValueTooMany",
                    field: path.to_owned(),
                    message: format!("Too many: {}: must have at most {max} items", items.len()),
                });
            }
            if flag(schema, "uniqueItems") {
                let duplicate = items.iter().enumerate().any(|(i, a)| items[..i].iter().any(|b| json_equal(a, b)));
                if duplicate {
                    errors.push(invalid(path, value, format!("{at} in body shouldn't contain duplicates")));
                }
            }
            if let Some(sub) = schema.get("items").filter(|i| i.is_object()) {
                for (i, item) in items.iter().enumerate() {
                    validate_node(sub, item, &format!("{path}[{i}]"), errors);
                }
            }
            validate_list_type(schema, items, path, errors);
        }
        Value::Object(map) => validate_object(schema, value, map, path, errors),
        _ => {}
    }
    validate_combinators(schema, value, path, errors);
}

fn validate_number(schema: &Value, value: &Value, n: &serde_json::Number, path: &str, errors: &mut Vec<FieldError>) {
    let at = body_path(path);
    let x = n.as_f64().unwrap_or(0.0);
    if let Some(min) = number(schema, "minimum") {
        if flag(schema, "exclusiveMinimum") && x <= min {
            errors.push(invalid(path, value, format!("{at} in body should be greater than {}", show_number(min))));
        } else if x < min {
            errors.push(invalid(
                path,
                value,
                format!("{at} in body should be greater than or equal to {}", show_number(min)),
            ));
        }
    }
    if let Some(max) = number(schema, "maximum") {
        if flag(schema, "exclusiveMaximum") && x >= max {
            errors.push(invalid(path, value, format!("{at} in body should be less than {}", show_number(max))));
        } else if x > max {
            errors.push(invalid(
                path,
                value,
                format!("{at} in body should be less than or equal to {}", show_number(max)),
            ));
        }
    }
    if let Some(factor) = number(schema, "multipleOf").filter(|f| *f > 0.0) {
        let q = x / factor;
        if (q - q.round()).abs() > 1e-9 {
            errors.push(invalid(path, value, format!("{at} in body should be a multiple of {}", show_number(factor))));
        }
    }
    let format = schema.get("format").and_then(Value::as_str);
    let out_of_range = match format {
        Some("int32") => n.as_i64().is_none_or(|i| i32::try_from(i).is_err()),
        Some("int64") => n.as_i64().is_none() && is_integer(n),
        _ => false,
    };
    if out_of_range {
        errors.push(FieldError {
            reason: "FieldValueTypeInvalid",
            field: path.to_owned(),
            message: format!(
                "Invalid value: {}: {at} in body must be of type {}: {}",
                show(value),
                format.unwrap_or_default(),
                show(value)
            ),
        });
    }
}

fn validate_string(schema: &Value, value: &Value, s: &str, path: &str, errors: &mut Vec<FieldError>) {
    let at = body_path(path);
    let length = s.chars().count() as u64;
    if let Some(min) = count(schema, "minLength")
        && length < min
    {
        errors.push(invalid(path, value, format!("{at} in body should be at least {min} chars long")));
    }
    if let Some(max) = count(schema, "maxLength")
        && length > max
    {
        errors.push(FieldError {
            reason: "FieldValueTooLong",
            field: path.to_owned(),
            message: format!("Too long: may not be more than {max} {}", if max == 1 { "byte" } else { "bytes" }),
        });
    }
    if let Some(pattern) = schema.get("pattern").and_then(Value::as_str) {
        match regex::Regex::new(pattern) {
            Ok(re) if !re.is_match(s) => {
                errors.push(invalid(path, value, format!("{at} in body should match '{pattern}'")))
            }
            _ => {}
        }
    }
    if let Some(format) = schema.get("format").and_then(Value::as_str)
        && !super::format::string_matches(format, s)
    {
        errors.push(FieldError {
            reason: "FieldValueTypeInvalid",
            field: path.to_owned(),
            message: format!("Invalid value: {}: {at} in body must be of type {format}: {}", show(value), show(value)),
        });
    }
}

fn validate_object(schema: &Value, value: &Value, map: &Map<String, Value>, path: &str, errors: &mut Vec<FieldError>) {
    let at = body_path(path);
    let root = path.is_empty();
    if let Some(min) = count(schema, "minProperties")
        && (map.len() as u64) < min
    {
        errors.push(invalid(path, value, format!("{at} in body should have at least {min} properties")));
    }
    if let Some(max) = count(schema, "maxProperties")
        && (map.len() as u64) > max
    {
        errors.push(FieldError {
            reason: "FieldValueTooMany",
            field: path.to_owned(),
            message: format!("Too many: {}: must have at most {max} items", map.len()),
        });
    }
    if flag(schema, "x-kubernetes-embedded-resource") {
        for field in ["apiVersion", "kind"] {
            if map.get(field).and_then(Value::as_str).is_none_or(str::is_empty) {
                errors.push(FieldError::required(child(path, field)).with_message("Required value: must not be empty"));
            }
        }
    }
    if let Some(required) = schema.get("required").and_then(Value::as_array) {
        for name in required.iter().filter_map(Value::as_str) {
            if !map.contains_key(name) {
                errors.push(FieldError::required(child(path, name)));
            }
        }
    }
    let props = properties(schema);
    for (key, field) in map {
        if root && key == "metadata" {
            continue;
        }
        let sub = props.and_then(|p| p.get(key)).or_else(|| additional(schema));
        if let Some(sub) = sub {
            validate_node(sub, field, &child(path, key), errors);
        }
    }
}

/// `x-kubernetes-list-type`: `set` items are unique, `map` items are unique
/// by their `x-kubernetes-list-map-keys`.
fn validate_list_type(schema: &Value, items: &[Value], path: &str, errors: &mut Vec<FieldError>) {
    match schema.get("x-kubernetes-list-type").and_then(Value::as_str) {
        Some("set") => {
            for (i, item) in items.iter().enumerate() {
                if items[..i].iter().any(|other| json_equal(other, item)) {
                    errors.push(FieldError {
                        reason: "FieldValueDuplicate",
                        field: format!("{path}[{i}]"),
                        message: format!("Duplicate value: {}", show(item)),
                    });
                }
            }
        }
        Some("map") => {
            let keys: Vec<&str> = schema
                .get("x-kubernetes-list-map-keys")
                .and_then(Value::as_array)
                .map(|k| k.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            let key_of = |item: &Value| -> Vec<Value> {
                keys.iter().map(|k| item.get(*k).cloned().unwrap_or(Value::Null)).collect()
            };
            for (i, item) in items.iter().enumerate() {
                let key = key_of(item);
                if items[..i].iter().any(|other| key_of(other) == key) {
                    let shown: Vec<String> = keys.iter().zip(&key).map(|(k, v)| format!("\"{k}\":{v}")).collect();
                    errors.push(FieldError {
                        reason: "FieldValueDuplicate",
                        field: format!("{path}[{i}]"),
                        message: format!("Duplicate value: map[string]interface {{}}{{{}}}", shown.join(", ")),
                    });
                }
            }
        }
        _ => {}
    }
}

/// `allOf`, `anyOf`, `oneOf` and `not` (value validations in structural schemas).
fn validate_combinators(schema: &Value, value: &Value, path: &str, errors: &mut Vec<FieldError>) {
    let at = body_path(path);
    let passes = |sub: &Value| validate_at(sub, value, path).is_empty();
    if let Some(all) = schema.get("allOf").and_then(Value::as_array) {
        for sub in all {
            validate_node(sub, value, path, errors);
        }
    }
    if let Some(any) = schema.get("anyOf").and_then(Value::as_array)
        && !any.iter().any(passes)
    {
        errors.push(invalid(path, value, format!("{at} in body must validate at least one schema (anyOf)")));
    }
    if let Some(one) = schema.get("oneOf").and_then(Value::as_array)
        && one.iter().filter(|s| passes(s)).count() != 1
    {
        errors.push(invalid(path, value, format!("{at} in body must validate one and only one schema (oneOf)")));
    }
    if let Some(not) = schema.get("not")
        && passes(not)
    {
        errors.push(invalid(path, value, format!("{at} in body must not validate the schema (not)")));
    }
}

/// JSON equality with numbers compared by value (`1` equals `1.0`).
fn json_equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        (Value::Array(x), Value::Array(y)) => x.len() == y.len() && x.iter().zip(y).all(|(a, b)| json_equal(a, b)),
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| json_equal(v, w)))
        }
        _ => a == b,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Value {
        json!({
            "type": "object",
            "properties": {
                "apiVersion": {"type": "string"},
                "kind": {"type": "string"},
                "metadata": {"type": "object"},
                "spec": {
                    "type": "object",
                    "required": ["size"],
                    "properties": {
                        "size": {"type": "string", "enum": ["small", "large"]},
                        "replicas": {"type": "integer", "format": "int32", "minimum": 0, "maximum": 10, "default": 1},
                        "count": {"type": "integer", "format": "int32"},
                        "ratio": {"type": "number", "exclusiveMinimum": true, "minimum": 0},
                        "name": {"type": "string", "minLength": 2, "maxLength": 5, "pattern": "^[a-z]+$"},
                        "when": {"type": "string", "format": "date-time"},
                        "day": {"type": "string", "format": "date"},
                        "tags": {"type": "array", "minItems": 1, "maxItems": 2, "uniqueItems": true, "items": {"type": "string"}},
                        "ports": {"type": "array", "items": {"type": "object", "required": ["port"], "properties": {"port": {"type": "integer"}, "protocol": {"type": "string", "default": "TCP"}}}},
                        "labels": {"type": "object", "maxProperties": 1, "minProperties": 1, "additionalProperties": {"type": "string"}},
                        "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                        "port": {"x-kubernetes-int-or-string": true},
                        "note": {"type": "string", "nullable": true},
                        "template": {"type": "object", "x-kubernetes-embedded-resource": true, "properties": {"spec": {"type": "object"}}},
                        "set": {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}},
                        "map": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"], "items": {"type": "object", "properties": {"name": {"type": "string"}}}},
                    }
                },
                "status": {"type": "object", "properties": {"ready": {"type": "boolean"}}}
            }
        })
    }

    fn errors_of(spec: Value) -> Vec<(String, String)> {
        validate(&schema(), &json!({"apiVersion": "x/v1", "kind": "W", "metadata": {"name": "a"}, "spec": spec}))
            .into_iter()
            .map(|e| (e.field, e.message))
            .collect()
    }

    #[test]
    fn each_keyword() {
        let cases: Vec<(Value, &str, &str)> = vec![
            (
                json!({"size": "small", "replicas": "3"}),
                "spec.replicas",
                "Invalid value: \"string\": spec.replicas in body must be of type integer: \"string\"",
            ),
            (json!({}), "spec.size", "Required value"),
            (
                json!({"size": "medium"}),
                "spec.size",
                "Unsupported value: \"medium\": supported values: \"small\", \"large\"",
            ),
            (
                json!({"size": "small", "replicas": -1}),
                "spec.replicas",
                "Invalid value: -1: spec.replicas in body should be greater than or equal to 0",
            ),
            (
                json!({"size": "small", "replicas": 11}),
                "spec.replicas",
                "Invalid value: 11: spec.replicas in body should be less than or equal to 10",
            ),
            (
                json!({"size": "small", "replicas": 1.5}),
                "spec.replicas",
                "Invalid value: \"number\": spec.replicas in body must be of type integer: \"number\"",
            ),
            (
                json!({"size": "small", "count": 3_000_000_000i64}),
                "spec.count",
                "Invalid value: 3000000000: spec.count in body must be of type int32: 3000000000",
            ),
            (
                json!({"size": "small", "ratio": 0}),
                "spec.ratio",
                "Invalid value: 0: spec.ratio in body should be greater than 0",
            ),
            (
                json!({"size": "small", "name": "a"}),
                "spec.name",
                "Invalid value: \"a\": spec.name in body should be at least 2 chars long",
            ),
            (json!({"size": "small", "name": "abcdef"}), "spec.name", "Too long: may not be more than 5 bytes"),
            (
                json!({"size": "small", "name": "AB"}),
                "spec.name",
                "Invalid value: \"AB\": spec.name in body should match '^[a-z]+$'",
            ),
            (
                json!({"size": "small", "when": "yesterday"}),
                "spec.when",
                "Invalid value: \"yesterday\": spec.when in body must be of type date-time: \"yesterday\"",
            ),
            (
                json!({"size": "small", "day": "2024-13-01"}),
                "spec.day",
                "Invalid value: \"2024-13-01\": spec.day in body must be of type date: \"2024-13-01\"",
            ),
            (
                json!({"size": "small", "tags": []}),
                "spec.tags",
                "Invalid value: \"[]\": spec.tags in body should have at least 1 items",
            ),
            (json!({"size": "small", "tags": ["a", "b", "c"]}), "spec.tags", "Too many: 3: must have at most 2 items"),
            (
                json!({"size": "small", "tags": ["a", "a"]}),
                "spec.tags",
                "Invalid value: \"[\\\"a\\\",\\\"a\\\"]\": spec.tags in body shouldn't contain duplicates",
            ),
            (
                json!({"size": "small", "tags": [1]}),
                "spec.tags[0]",
                "Invalid value: \"integer\": spec.tags[0] in body must be of type string: \"integer\"",
            ),
            (json!({"size": "small", "ports": [{"port": 1}, {}]}), "spec.ports[1].port", "Required value"),
            (
                json!({"size": "small", "labels": {"a": 1}}),
                "spec.labels.a",
                "Invalid value: \"integer\": spec.labels.a in body must be of type string: \"integer\"",
            ),
            (
                json!({"size": "small", "labels": {}}),
                "spec.labels",
                "Invalid value: \"{}\": spec.labels in body should have at least 1 properties",
            ),
            (
                json!({"size": "small", "labels": {"a": "x", "b": "y"}}),
                "spec.labels",
                "Too many: 2: must have at most 1 items",
            ),
            (
                json!({"size": "small", "port": true}),
                "spec.port",
                "Invalid value: \"boolean\": spec.port in body must be of type integer,string: \"boolean\"",
            ),
            (
                json!({"size": "small", "template": {"kind": "Pod"}}),
                "spec.template.apiVersion",
                "Required value: must not be empty",
            ),
            (json!({"size": "small", "set": ["a", "b", "a"]}), "spec.set[2]", "Duplicate value: \"a\""),
            (
                json!({"size": "small", "map": [{"name": "a"}, {"name": "a"}]}),
                "spec.map[1]",
                "Duplicate value: map[string]interface {}{\"name\":\"a\"}",
            ),
            (
                json!({"size": "small", "replicas": null}),
                "spec.replicas",
                "Invalid value: \"null\": spec.replicas in body must be of type integer: \"null\"",
            ),
        ];
        for (spec, field, message) in cases {
            let errors = errors_of(spec.clone());
            assert_eq!(errors, vec![(field.to_owned(), message.to_owned())], "for {spec}");
        }
    }

    #[test]
    fn valid_objects_pass() {
        let ok = json!({
            "size": "large", "replicas": 10, "ratio": 0.5, "name": "abc",
            "when": "2024-01-02T03:04:05Z", "day": "2024-02-29", "tags": ["a", "b"],
            "ports": [{"port": 80}], "labels": {"a": "b"}, "free": {"x": {"y": 1}},
            "port": "http", "note": null, "template": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {}},
        });
        assert_eq!(errors_of(ok), vec![]);
        assert_eq!(errors_of(json!({"size": "small", "port": 8080})), vec![]);
        assert_eq!(
            validate(&schema(), &json!({"spec": {"size": "small"}, "status": {"ready": "yes"}}))[0].field,
            "status.ready"
        );
    }

    #[test]
    fn combinators() {
        let s = json!({"type": "object", "properties": {"v": {"type": "integer", "anyOf": [{"minimum": 10}, {"maximum": 0}], "not": {"enum": [20]}}}});
        assert!(validate(&s, &json!({"v": 11})).is_empty());
        assert_eq!(
            validate(&s, &json!({"v": 5}))[0].message,
            "Invalid value: 5: v in body must validate at least one schema (anyOf)"
        );
        assert_eq!(
            validate(&s, &json!({"v": 20}))[0].message,
            "Invalid value: 20: v in body must not validate the schema (not)"
        );
    }

    #[test]
    fn pruning() {
        let mut object = json!({
            "apiVersion": "x/v1", "kind": "W", "metadata": {"name": "a", "labels": {"k": "v"}},
            "unknown": 1,
            "spec": {
                "size": "small", "extra": true,
                "ports": [{"port": 1, "junk": 2}],
                "labels": {"any": "thing"},
                "free": {"kept": {"deep": 1}},
                "template": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"x": 1}, "junk": 1},
            },
            "status": {"ready": true, "other": 1},
        });
        prune(&schema(), &mut object);
        assert_eq!(
            object,
            json!({
                "apiVersion": "x/v1", "kind": "W", "metadata": {"name": "a", "labels": {"k": "v"}},
                "spec": {
                    "size": "small",
                    "ports": [{"port": 1}],
                    "labels": {"any": "thing"},
                    "free": {"kept": {"deep": 1}},
                    "template": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {}},
                },
                "status": {"ready": true},
            })
        );
        let mut anything = json!({"a": {"b": 1}});
        prune(&json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true}), &mut anything);
        assert_eq!(anything, json!({"a": {"b": 1}}));
    }

    #[test]
    fn defaults() {
        let mut object =
            json!({"spec": {"size": "small", "ports": [{"port": 1}, {"port": 2, "protocol": "UDP"}], "note": null}});
        apply_defaults(&schema(), &mut object);
        assert_eq!(
            object,
            json!({"spec": {"size": "small", "replicas": 1, "ports": [{"port": 1, "protocol": "TCP"}, {"port": 2, "protocol": "UDP"}], "note": null}})
        );
        // A null in a non-nullable field takes the default, or is dropped.
        let mut object = json!({"spec": {"size": "small", "replicas": null, "name": null}});
        apply_defaults(&schema(), &mut object);
        assert_eq!(object, json!({"spec": {"size": "small", "replicas": 1}}));
        // Defaults do not create missing parents.
        let mut object = json!({"metadata": {"name": "x"}});
        apply_defaults(&schema(), &mut object);
        assert_eq!(object, json!({"metadata": {"name": "x"}}));
    }
}
