//! CustomResourceDefinitions themselves: defaulting and validation as
//! upstream's apiextensions-apiserver does them on create and update, and the
//! structural-schema rules for `openAPIV3Schema`.

use serde_json::{Value, json};

use crate::api::FieldError;

/// Upstream's v1 defaults: `singular` is the lowercased kind, `listKind` is
/// `<kind>List`, `conversion.strategy` is `None`.
pub fn default_definition(crd: &mut Value) {
    let Some(spec) = crd.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    let kind = spec.get("names").and_then(|n| n.get("kind")).and_then(Value::as_str).unwrap_or("").to_owned();
    if let Some(names) = spec.get_mut("names").and_then(Value::as_object_mut) {
        let empty = |v: Option<&Value>| v.and_then(Value::as_str).is_none_or(str::is_empty);
        if empty(names.get("singular")) && !kind.is_empty() {
            names.insert("singular".into(), kind.to_ascii_lowercase().into());
        }
        if empty(names.get("listKind")) && !kind.is_empty() {
            names.insert("listKind".into(), format!("{kind}List").into());
        }
    }
    if spec.get("conversion").is_none() {
        spec.insert("conversion".into(), json!({"strategy": "None"}));
    }
}

fn str_at<'a>(value: &'a Value, pointer: &str) -> &'a str {
    value.pointer(pointer).and_then(Value::as_str).unwrap_or("")
}

const DNS1035_MESSAGE: &str = "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')";

/// True for a DNS-1035 label: `[a-z]([-a-z0-9]*[a-z0-9])?`, at most 63 chars.
pub fn is_dns1035_label(s: &str) -> bool {
    let bytes = s.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= 63
        && bytes[0].is_ascii_lowercase()
        && bytes.iter().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
        && bytes[bytes.len() - 1] != b'-'
}

fn dns1035(field: String, value: &str, errors: &mut Vec<FieldError>) {
    if !is_dns1035_label(value) {
        errors.push(FieldError::invalid(field, value, DNS1035_MESSAGE));
    }
}

fn not_supported(field: impl Into<String>, value: &str, supported: &[&str]) -> FieldError {
    let list: Vec<String> = supported.iter().map(|s| format!("{s:?}")).collect();
    FieldError {
        reason: "FieldValueNotSupported",
        field: field.into(),
        message: format!("Unsupported value: {value:?}: supported values: {}", list.join(", ")),
    }
}

fn forbidden(field: impl Into<String>, detail: &str) -> FieldError {
    FieldError { reason: "FieldValueForbidden", field: field.into(), message: format!("Forbidden: {detail}") }
}

/// Validates a CRD (already defaulted): names, scope, versions, schemas,
/// subresources, printer columns and conversion. CEL rules
/// (`x-kubernetes-validations`) are accepted and not enforced.
pub fn validate_definition(crd: &Value) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let group = str_at(crd, "/spec/group");
    let plural = str_at(crd, "/spec/names/plural");
    let name = str_at(crd, "/metadata/name");
    if name != format!("{plural}.{group}") {
        errors.push(FieldError::invalid("metadata.name", name, "must be spec.names.plural+\".\"+spec.group"));
    }
    if group.is_empty() {
        errors.push(FieldError::required("spec.group"));
    } else if !crate::api::meta::validate_subdomain("spec.group", group).is_empty() {
        errors.extend(crate::api::meta::validate_subdomain("spec.group", group));
    } else if !group.contains('.') {
        errors.push(FieldError::invalid("spec.group", group, "should be a domain with at least one dot"));
    }
    match str_at(crd, "/spec/scope") {
        "" => errors.push(FieldError::required("spec.scope")),
        "Cluster" | "Namespaced" => {}
        other => errors.push(not_supported("spec.scope", other, &["Cluster", "Namespaced"])),
    }
    validate_names(crd, &mut errors);
    let versions = crd.pointer("/spec/versions").and_then(Value::as_array).cloned().unwrap_or_default();
    let mut storage = 0;
    let mut seen: Vec<&str> = Vec::new();
    let mut unique = true;
    for (i, version) in versions.iter().enumerate() {
        let path = format!("spec.versions[{i}]");
        let vname = str_at(version, "/name");
        if seen.contains(&vname) {
            unique = false;
        }
        seen.push(vname);
        dns1035(format!("{path}.name"), vname, &mut errors);
        if version.get("storage").and_then(Value::as_bool) == Some(true) {
            storage += 1;
        }
        validate_version(version, &path, &mut errors);
    }
    if !unique {
        errors.push(FieldError::invalid("spec.versions", "", "must contain unique version names"));
    }
    if storage != 1 {
        errors.push(
            FieldError::invalid("spec.versions", "", "")
                .with_message("Invalid value: \"\": must have exactly one version marked as storage version"),
        );
    }
    if crd.pointer("/spec/preserveUnknownFields") == Some(&Value::Bool(true)) {
        errors.push(FieldError {
            reason: "FieldValueInvalid",
            field: "spec.preserveUnknownFields".into(),
            message: "Invalid value: true: cannot set to true, set x-kubernetes-preserve-unknown-fields to true in spec.versions[*].schema instead".into(),
        });
    }
    match str_at(crd, "/spec/conversion/strategy") {
        "None" => {
            if crd.pointer("/spec/conversion/webhook").is_some() {
                errors.push(forbidden(
                    "spec.conversion.webhookClientConfig",
                    "should not be set when strategy is not set to Webhook",
                ));
            }
        }
        "Webhook" => {
            if crd.pointer("/spec/conversion/webhook/clientConfig").is_none() {
                errors.push(
                    FieldError::required("spec.conversion.webhook")
                        .with_message("Required value: required when strategy is set to Webhook"),
                );
            }
        }
        "" => errors.push(FieldError::required("spec.conversion.strategy")),
        other => errors.push(not_supported("spec.conversion.strategy", other, &["None", "Webhook"])),
    }
    errors
}

/// Validates an update: the checks of a create, plus the immutable fields.
pub fn validate_definition_update(crd: &Value, old: &Value) -> Vec<FieldError> {
    let mut errors = validate_definition(crd);
    for (pointer, field) in [("/spec/group", "spec.group"), ("/spec/names/plural", "spec.names.plural")] {
        if str_at(crd, pointer) != str_at(old, pointer) {
            errors.push(FieldError::immutable(field));
        }
    }
    let established = old
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|c| c.iter().any(|c| c["type"] == "Established" && c["status"] == "True"));
    if established {
        for (pointer, field) in [("/spec/scope", "spec.scope"), ("/spec/names/kind", "spec.names.kind")] {
            if str_at(crd, pointer) != str_at(old, pointer) {
                errors.push(FieldError::immutable(field));
            }
        }
    }
    errors
}

fn validate_names(crd: &Value, errors: &mut Vec<FieldError>) {
    let names = crd.pointer("/spec/names").cloned().unwrap_or_default();
    for field in ["plural", "singular"] {
        match str_at(&names, &format!("/{field}")) {
            "" => errors.push(FieldError::required(format!("spec.names.{field}"))),
            value => dns1035(format!("spec.names.{field}"), value, errors),
        }
    }
    let kind = str_at(&names, "/kind");
    let list_kind = str_at(&names, "/listKind");
    for (field, value) in [("kind", kind), ("listKind", list_kind)] {
        if value.is_empty() {
            errors.push(FieldError::required(format!("spec.names.{field}")));
        } else if !is_dns1035_label(&value.to_ascii_lowercase()) {
            errors.push(FieldError::invalid(
                format!("spec.names.{field}"),
                value,
                format!("may have mixed case, but should otherwise match: {DNS1035_MESSAGE}"),
            ));
        }
    }
    if !kind.is_empty() && kind == list_kind {
        errors.push(FieldError::invalid("spec.names.listKind", list_kind, "kind and listKind may not be the same"));
    }
    for list in ["shortNames", "categories"] {
        if let Some(items) = names.get(list).and_then(Value::as_array) {
            for (i, item) in items.iter().enumerate() {
                dns1035(format!("spec.names.{list}[{i}]"), item.as_str().unwrap_or(""), errors);
            }
        }
    }
}

fn validate_version(version: &Value, path: &str, errors: &mut Vec<FieldError>) {
    let status_enabled = version.pointer("/subresources/status").is_some();
    match version.pointer("/schema/openAPIV3Schema") {
        None => errors.push(
            FieldError::required(format!("{path}.schema.openAPIV3Schema"))
                .with_message("Required value: schemas are required"),
        ),
        Some(schema) => {
            let at = format!("{path}.schema.openAPIV3Schema");
            validate_structural(schema, &at, true, errors);
            if status_enabled {
                // Upstream: with the status subresource, the root schema may only
                // have properties, required, description (and the x- extensions).
                for key in ["anyOf", "oneOf", "allOf", "not"] {
                    if schema.get(key).is_some() {
                        errors.push(forbidden(
                            format!("{at}.{key}"),
                            "only properties, required, description and x-kubernetes-* are allowed at the root of the schema if the status subresource is enabled",
                        ));
                    }
                }
            }
        }
    }
    if let Some(scale) = version.pointer("/subresources/scale") {
        let at = format!("{path}.subresources.scale");
        match str_at(scale, "/specReplicasPath") {
            "" => errors.push(FieldError::required(format!("{at}.specReplicasPath"))),
            p if !p.starts_with(".spec.") => errors.push(FieldError::invalid(
                format!("{at}.specReplicasPath"),
                p,
                "should be a json path under .spec",
            )),
            _ => {}
        }
        match str_at(scale, "/statusReplicasPath") {
            "" => errors.push(FieldError::required(format!("{at}.statusReplicasPath"))),
            p if !p.starts_with(".status.") => errors.push(FieldError::invalid(
                format!("{at}.statusReplicasPath"),
                p,
                "should be a json path under .status",
            )),
            _ => {}
        }
        let selector = str_at(scale, "/labelSelectorPath");
        if !selector.is_empty() && !selector.starts_with(".spec.") && !selector.starts_with(".status.") {
            errors.push(FieldError::invalid(
                format!("{at}.labelSelectorPath"),
                selector,
                "should be a json path under either .spec or .status",
            ));
        }
    }
    if let Some(columns) = version.get("additionalPrinterColumns").and_then(Value::as_array) {
        for (i, column) in columns.iter().enumerate() {
            let at = format!("{path}.additionalPrinterColumns[{i}]");
            if str_at(column, "/name").is_empty() {
                errors.push(FieldError::required(format!("{at}.name")));
            }
            match str_at(column, "/type") {
                "" => errors.push(FieldError::required(format!("{at}.type"))),
                "integer" | "number" | "string" | "boolean" | "date" => {}
                other => errors.push(not_supported(
                    format!("{at}.type"),
                    other,
                    &["boolean", "date", "integer", "number", "string"],
                )),
            }
            match str_at(column, "/format") {
                "" | "int32" | "int64" | "float" | "double" | "byte" | "date" | "date-time" | "password" => {}
                other => errors.push(not_supported(
                    format!("{at}.format"),
                    other,
                    &["byte", "date", "date-time", "double", "float", "int32", "int64", "password"],
                )),
            }
            if str_at(column, "/jsonPath").is_empty() {
                errors.push(FieldError::required(format!("{at}.jsonPath")));
            }
        }
    }
}

/// The structural-schema rules (apiextensions v1): every specified field has
/// a type (unless int-or-string or preserve-unknown-fields), objects at the
/// root, arrays have `items`, no `$ref`, `properties` and
/// `additionalProperties` exclusive, `additionalProperties: false` and
/// `uniqueItems: true` forbidden, root `metadata` restricted to `name` and
/// `generateName`, defaults valid against their schema.
pub fn validate_structural(schema: &Value, path: &str, root: bool, errors: &mut Vec<FieldError>) {
    let Some(map) = schema.as_object() else {
        errors.push(FieldError::invalid(path, "", "must be a schema object"));
        return;
    };
    let ty = map.get("type").and_then(Value::as_str).unwrap_or("");
    let int_or_string = map.get("x-kubernetes-int-or-string").and_then(Value::as_bool).unwrap_or(false);
    let preserve = map.get("x-kubernetes-preserve-unknown-fields");
    if let Some(p) = preserve
        && p != &Value::Bool(true)
    {
        errors.push(FieldError {
            reason: "FieldValueInvalid",
            field: format!("{path}.x-kubernetes-preserve-unknown-fields"),
            message: format!("Invalid value: {p}: must be true or undefined"),
        });
    }
    if root && ty != "object" {
        errors.push(FieldError::invalid(format!("{path}.type"), ty, "must be object at the root"));
    } else if ty.is_empty() && !int_or_string && preserve.is_none() {
        let what = if path.ends_with(".items") { "array items" } else { "object fields" };
        errors.push(
            FieldError::required(format!("{path}.type"))
                .with_message(format!("Required value: must not be empty for specified {what}")),
        );
    }
    if int_or_string && !ty.is_empty() {
        errors.push(FieldError::invalid(format!("{path}.type"), ty, "must be empty to be structural"));
    }
    if !ty.is_empty() && !["object", "array", "string", "integer", "number", "boolean"].contains(&ty) {
        errors.push(not_supported(
            format!("{path}.type"),
            ty,
            &["array", "boolean", "integer", "number", "object", "string"],
        ));
    }
    if map.contains_key("$ref") {
        errors.push(forbidden(format!("{path}.$ref"), "$ref is not supported"));
    }
    if map.get("uniqueItems") == Some(&Value::Bool(true)) {
        errors.push(forbidden(
            format!("{path}.uniqueItems"),
            "uniqueItems cannot be set to true since the runtime complexity becomes quadratic",
        ));
    }
    match map.get("additionalProperties") {
        Some(Value::Bool(false)) => errors
            .push(forbidden(format!("{path}.additionalProperties"), "additionalProperties cannot be set to false")),
        Some(extra) if extra.is_object() => {
            if map.contains_key("properties") {
                errors.push(forbidden(
                    format!("{path}.additionalProperties"),
                    "additionalProperties and properties are mutual exclusive",
                ));
            }
            validate_structural(extra, &format!("{path}.additionalProperties"), false, errors);
        }
        _ => {}
    }
    if let Some(props) = map.get("properties").and_then(Value::as_object) {
        for (name, sub) in props {
            let at = format!("{path}.properties[{name}]");
            if root && name == "metadata" {
                let allowed = sub
                    .get("properties")
                    .and_then(Value::as_object)
                    .is_none_or(|p| p.keys().all(|k| k == "name" || k == "generateName"));
                let extra_keys = sub
                    .as_object()
                    .is_some_and(|m| m.keys().any(|k| !["type", "properties", "description"].contains(&k.as_str())));
                if !allowed || extra_keys {
                    errors.push(forbidden(
                        at.clone(),
                        "must not specify anything other than name and generateName, but metadata is implicitly specified",
                    ));
                }
            }
            validate_structural(sub, &at, false, errors);
        }
    }
    if ty == "array" {
        match map.get("items") {
            Some(items) if items.is_object() => validate_structural(items, &format!("{path}.items"), false, errors),
            Some(_) => {
                errors.push(forbidden(format!("{path}.items"), "items must be a schema object and not an array"))
            }
            None => errors
                .push(FieldError::required(format!("{path}.items")).with_message("Required value: must be specified")),
        }
    }
    for key in ["allOf", "anyOf", "oneOf"] {
        if let Some(list) = map.get(key).and_then(Value::as_array) {
            for (i, sub) in list.iter().enumerate() {
                if sub.get("default").is_some() {
                    errors.push(forbidden(
                        format!("{path}.{key}[{i}].default"),
                        "must not be set inside value validations",
                    ));
                }
            }
        }
    }
    if let Some(default) = map.get("default") {
        if root {
            errors.push(forbidden(format!("{path}.default"), "must not be set at the root"));
        } else {
            let mut pruned = default.clone();
            super::schema::prune_value(schema, &mut pruned);
            let at = format!("{path}.default");
            if &pruned != default {
                errors.push(FieldError::invalid(at.clone(), &default.to_string(), "must not have unknown fields"));
            }
            for e in super::schema::validate_at(schema, default, &at) {
                errors.push(e);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn crd() -> Value {
        json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": "widgets.example.com"},
            "spec": {
                "group": "example.com",
                "scope": "Namespaced",
                "names": {"plural": "widgets", "kind": "Widget", "shortNames": ["wd"]},
                "versions": [{
                    "name": "v1", "served": true, "storage": true,
                    "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                        "spec": {"type": "object", "properties": {"replicas": {"type": "integer", "default": 1}}},
                        "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                    }}},
                    "subresources": {"status": {}, "scale": {"specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.replicas"}},
                }],
            }
        })
    }

    fn errors(mutate: impl FnOnce(&mut Value)) -> Vec<(String, String)> {
        let mut c = crd();
        mutate(&mut c);
        default_definition(&mut c);
        validate_definition(&c).into_iter().map(|e| (e.field, e.message)).collect()
    }

    #[test]
    fn defaults_names_and_conversion() {
        let mut c = crd();
        default_definition(&mut c);
        assert_eq!(c["spec"]["names"]["singular"], "widget");
        assert_eq!(c["spec"]["names"]["listKind"], "WidgetList");
        assert_eq!(c["spec"]["conversion"]["strategy"], "None");
        assert_eq!(validate_definition(&c), vec![]);
    }

    #[test]
    fn rejects_invalid_definitions() {
        type Case = (fn(&mut Value), &'static str, &'static str);
        let cases: Vec<Case> = vec![
            (
                |c| c["metadata"]["name"] = "widgets".into(),
                "metadata.name",
                "Invalid value: \"widgets\": must be spec.names.plural+\".\"+spec.group",
            ),
            (
                |c| {
                    c["spec"]["group"] = "example".into();
                    c["metadata"]["name"] = "widgets.example".into();
                },
                "spec.group",
                "Invalid value: \"example\": should be a domain with at least one dot",
            ),
            (
                |c| c["spec"]["scope"] = "Global".into(),
                "spec.scope",
                "Unsupported value: \"Global\": supported values: \"Cluster\", \"Namespaced\"",
            ),
            (|c| c["spec"]["names"]["kind"] = "".into(), "spec.names.kind", "Required value"),
            (
                |c| c["spec"]["versions"][0]["storage"] = false.into(),
                "spec.versions",
                "Invalid value: \"\": must have exactly one version marked as storage version",
            ),
            (
                |c| c["spec"]["versions"] = json!([]),
                "spec.versions",
                "Invalid value: \"\": must have exactly one version marked as storage version",
            ),
            (
                |c| {
                    c["spec"]["versions"][0]["schema"] = json!({});
                },
                "spec.versions[0].schema.openAPIV3Schema",
                "Required value: schemas are required",
            ),
            (
                |c| {
                    c["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["x"] =
                        json!({});
                },
                "spec.versions[0].schema.openAPIV3Schema.properties[spec].properties[x].type",
                "Required value: must not be empty for specified object fields",
            ),
            (
                |c| {
                    c["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["type"] = "string".into();
                },
                "spec.versions[0].schema.openAPIV3Schema.type",
                "Invalid value: \"string\": must be object at the root",
            ),
            (
                |c| {
                    c["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["l"] =
                        json!({"type": "array"});
                },
                "spec.versions[0].schema.openAPIV3Schema.properties[spec].properties[l].items",
                "Required value: must be specified",
            ),
            (
                |c| {
                    c["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["replicas"]
                        ["default"] = "one".into();
                },
                "spec.versions[0].schema.openAPIV3Schema.properties[spec].properties[replicas].default",
                "Invalid value: \"string\": spec.versions[0].schema.openAPIV3Schema.properties[spec].properties[replicas].default in body must be of type integer: \"string\"",
            ),
            (
                |c| {
                    c["spec"]["versions"][0]["subresources"]["scale"]["specReplicasPath"] = ".replicas".into();
                },
                "spec.versions[0].subresources.scale.specReplicasPath",
                "Invalid value: \".replicas\": should be a json path under .spec",
            ),
            (
                |c| {
                    c["spec"]["versions"][0]["additionalPrinterColumns"] =
                        json!([{"name": "R", "type": "float", "jsonPath": ".spec.replicas"}]);
                },
                "spec.versions[0].additionalPrinterColumns[0].type",
                "Unsupported value: \"float\": supported values: \"boolean\", \"date\", \"integer\", \"number\", \"string\"",
            ),
            (|c| c["spec"]["names"]["plural"] = "Widgets".into(), "spec.names.plural", ""),
            (
                |c| c["spec"]["preserveUnknownFields"] = true.into(),
                "spec.preserveUnknownFields",
                "Invalid value: true: cannot set to true, set x-kubernetes-preserve-unknown-fields to true in spec.versions[*].schema instead",
            ),
            (
                |c| {
                    c["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["l"] =
                        json!({"type": "array", "items": {}});
                },
                "spec.versions[0].schema.openAPIV3Schema.properties[spec].properties[l].items.type",
                "Required value: must not be empty for specified array items",
            ),
            (
                |c| {
                    c["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["metadata"] =
                        json!({"type": "object", "properties": {"labels": {"type": "object"}}});
                },
                "spec.versions[0].schema.openAPIV3Schema.properties[metadata]",
                "Forbidden: must not specify anything other than name and generateName, but metadata is implicitly specified",
            ),
        ];
        for (mutate, field, message) in cases {
            let found = errors(mutate);
            assert!(
                found.iter().any(|(f, m)| f == field && (message.is_empty() || m == message)),
                "expected {field}: {message}, got {found:?}"
            );
        }
    }

    #[test]
    fn immutable_fields() {
        let mut old = crd();
        default_definition(&mut old);
        old["status"] = json!({"conditions": [{"type": "Established", "status": "True"}]});
        let mut new = old.clone();
        new["spec"]["scope"] = "Cluster".into();
        new["spec"]["names"]["kind"] = "Gadget".into();
        new["spec"]["names"]["listKind"] = "GadgetList".into();
        let fields: Vec<String> = validate_definition_update(&new, &old).into_iter().map(|e| e.field).collect();
        assert_eq!(fields, ["spec.scope", "spec.names.kind"]);
    }
}
