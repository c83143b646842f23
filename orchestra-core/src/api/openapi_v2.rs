//! The Swagger 2.0 (OpenAPI v2) document served at `/openapi/v2`, converted
//! from the OpenAPI v3 schemas of an [`OpenApi`].
//!
//! kubectl reads `/openapi/v2` for client-side validation, which it falls
//! back to when the server cannot validate a document itself: a `kind: List`
//! (such as `kubectl get secrets -A -o json | kubectl replace -f -`) is
//! checked item by item against the definitions whose
//! `x-kubernetes-group-version-kind` names each item's kind. It asks for
//! the protobuf encoding of gnostic's `openapi.v2.Document`
//! ([`protobuf`], with the server); other clients get the JSON document.
//!
//! The document carries every schema of the v3 components under
//! `definitions`, and an empty `paths`: the validator, `kubectl explain`'s
//! v2 fallback and patch computation only read definitions, and each
//! operation is described in `/openapi/v3`.
//!
//! Converting a v3 schema ([`convert_schema`]) keeps what kubectl's parser
//! (kube-openapi's `pkg/util/proto`) understands and refuses nothing it
//! accepts:
//!
//! - `$ref: #/components/schemas/X` becomes `#/definitions/X`, and a lone
//!   reference wrapped in `allOf` (how v3 puts a description beside a
//!   reference) becomes a plain `$ref`; beside a `$ref` only the
//!   description and `x-` extensions stay, as a reference may not carry a
//!   type or properties there;
//! - `x-kubernetes-int-or-string` becomes `type: string, format:
//!   int-or-string`, as upstream's v2 document spells `IntOrString`;
//! - v3-only keywords (`nullable`, `oneOf`, `anyOf`, `not`, `writeOnly`,
//!   `deprecated`, ...) are dropped, `null` leaves a list of types;
//! - like upstream's v2 publishing of custom resources, a schema that
//!   preserves unknown fields loses its `properties` and `items` (kubectl
//!   would otherwise call the extra fields unknown), and an `array` without
//!   `items` loses its type;
//! - `x-` extensions stay, `x-kubernetes-group-version-kind` among them.
//!
//! ```
//! use orchestra_core::api::openapi_v2::convert_schema;
//! use serde_json::json;
//!
//! let v3 = json!({"allOf": [{"$ref": "#/components/schemas/Meta"}], "description": "d", "nullable": true});
//! assert_eq!(convert_schema(&v3), json!({"$ref": "#/definitions/Meta", "description": "d"}));
//! ```

use serde_json::{Map, Value, json};

use super::openapi::OpenApi;
use super::schema::REF_PREFIX;

/// Where `$ref`s point in a Swagger 2.0 document: `#/definitions/<name>`.
pub const V2_REF_PREFIX: &str = "#/definitions/";

/// The media type of gnostic's protobuf encoding, as responses carry it.
pub const PROTOBUF_CONTENT_TYPE: &str = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf";

/// The same media type as kubectl asks for it: with an `@`, which is no
/// valid media type (Go's parser refuses it in a response's Content-Type).
pub const PROTOBUF_CONTENT_TYPE_AT: &str = "application/com.github.proto-openapi.spec.v2@v1.0+protobuf";

/// The types a Swagger 2.0 schema may have.
const TYPES: [&str; 6] = ["string", "number", "integer", "boolean", "object", "array"];

/// Keywords kept as they are when their value has the right JSON type.
const STRINGS: [&str; 4] = ["description", "title", "format", "pattern"];
const NUMBERS: [&str; 9] = [
    "multipleOf",
    "maximum",
    "minimum",
    "maxLength",
    "minLength",
    "maxItems",
    "minItems",
    "maxProperties",
    "minProperties",
];
const BOOLS: [&str; 4] = ["exclusiveMaximum", "exclusiveMinimum", "uniqueItems", "readOnly"];
const VALUES: [&str; 3] = ["enum", "default", "example"];

fn is_true(map: &Map<String, Value>, key: &str) -> bool {
    map.get(key).and_then(Value::as_bool).unwrap_or(false)
}

fn extensions(map: &Map<String, Value>, out: &mut Map<String, Value>) {
    for (key, value) in map {
        if key.starts_with("x-") {
            out.insert(key.clone(), value.clone());
        }
    }
}

/// The single type of a v3 `type` (a string, or a list holding `null`).
fn single_type(value: &Value) -> Option<&str> {
    let t = match value {
        Value::String(t) => t.as_str(),
        Value::Array(types) => {
            let mut types = types.iter().filter_map(Value::as_str).filter(|t| *t != "null");
            let t = types.next()?;
            if types.next().is_some() {
                return None;
            }
            t
        }
        _ => return None,
    };
    TYPES.contains(&t).then_some(t)
}

/// Converts one OpenAPI v3 schema to its Swagger 2.0 form (see the module
/// documentation for what changes).
pub fn convert_schema(v3: &Value) -> Value {
    // `true`, `false` and anything else that is not an object: any value.
    let Value::Object(map) = v3 else {
        return json!({});
    };
    // `allOf: [{$ref}]`: the reference, with this node's description.
    if let Some([only]) = map.get("allOf").and_then(Value::as_array).map(Vec::as_slice)
        && only.get("$ref").is_some()
        && map.get("type").is_none()
        && map.get("properties").is_none()
    {
        let mut merged = only.as_object().cloned().unwrap_or_default();
        for (key, value) in map {
            if key != "allOf" {
                merged.insert(key.clone(), value.clone());
            }
        }
        return convert_schema(&Value::Object(merged));
    }
    let mut out = Map::new();
    if let Some(reference) = map.get("$ref").and_then(Value::as_str) {
        let name = reference.strip_prefix(REF_PREFIX).unwrap_or(reference);
        out.insert("$ref".into(), format!("{V2_REF_PREFIX}{name}").into());
        if let Some(description) = map.get("description").filter(|d| d.is_string()) {
            out.insert("description".into(), description.clone());
        }
        extensions(map, &mut out);
        return Value::Object(out);
    }
    if is_true(map, "x-kubernetes-int-or-string") {
        out.insert("type".into(), "string".into());
        out.insert("format".into(), "int-or-string".into());
        if let Some(description) = map.get("description").filter(|d| d.is_string()) {
            out.insert("description".into(), description.clone());
        }
        extensions(map, &mut out);
        return Value::Object(out);
    }
    for (key, value) in map {
        let key = key.as_str();
        match key {
            "type" => {
                if let Some(t) = single_type(value) {
                    out.insert("type".into(), t.into());
                }
            }
            "properties" => {
                let properties: Map<String, Value> = value
                    .as_object()
                    .map(|p| p.iter().map(|(name, schema)| (name.clone(), convert_schema(schema))).collect())
                    .unwrap_or_default();
                // Empty properties would make an object that allows no field.
                if !properties.is_empty() {
                    out.insert("properties".into(), Value::Object(properties));
                }
            }
            "additionalProperties" => match value {
                Value::Bool(allowed) => {
                    out.insert(key.into(), (*allowed).into());
                }
                Value::Object(_) => {
                    out.insert(key.into(), convert_schema(value));
                }
                _ => {}
            },
            "items" => match value {
                Value::Object(_) => {
                    out.insert(key.into(), convert_schema(value));
                }
                Value::Array(items) if items.len() == 1 => {
                    out.insert(key.into(), convert_schema(&items[0]));
                }
                _ => {}
            },
            "allOf" => {
                if let Some(all) = value.as_array() {
                    out.insert(key.into(), all.iter().map(convert_schema).collect());
                }
            }
            "required" if value.as_array().is_some_and(|r| !r.is_empty() && r.iter().all(Value::is_string)) => {
                out.insert(key.into(), value.clone());
            }
            _ if STRINGS.contains(&key) && value.is_string() => {
                out.insert(key.into(), value.clone());
            }
            _ if NUMBERS.contains(&key) && value.is_number() => {
                out.insert(key.into(), value.clone());
            }
            _ if BOOLS.contains(&key) && value.is_boolean() => {
                out.insert(key.into(), value.clone());
            }
            _ if VALUES.contains(&key) => {
                out.insert(key.into(), value.clone());
            }
            _ if key.starts_with("x-") => {
                out.insert(key.into(), value.clone());
            }
            // nullable, oneOf, anyOf, not, writeOnly, deprecated,
            // discriminator, externalDocs, xml, ...: not in v2, or not
            // shaped as v2 has them.
            _ => {}
        }
    }
    if is_true(map, "x-kubernetes-preserve-unknown-fields") {
        out.remove("properties");
        out.remove("items");
    }
    match out.get("type").and_then(Value::as_str) {
        Some("array") if !out.contains_key("items") => {
            out.remove("type");
        }
        Some("object") | None => {}
        Some(_) => {
            out.remove("properties");
        }
    }
    Value::Object(out)
}

/// The Swagger 2.0 document of `openapi`'s schemas: `info` as in the v3
/// documents, empty `paths`, every schema under `definitions`.
pub fn document(openapi: &OpenApi) -> Value {
    let definitions: Map<String, Value> =
        openapi.schemas().iter().map(|(name, schema)| (name.clone(), convert_schema(schema))).collect();
    json!({
        "swagger": "2.0",
        "info": {"title": "Kubernetes", "version": openapi.server_version()},
        "paths": {},
        "definitions": definitions,
    })
}

/// An encoding of the Swagger document.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    /// `application/json`.
    Json,
    /// gnostic's protobuf ([`PROTOBUF_CONTENT_TYPE`]).
    Protobuf,
}

/// The encoding an `Accept` header asks for, as kube-openapi's handler
/// picks it: clauses by quality (`q`, 1 when absent; 0 refuses), a specific
/// type before a wildcard of the same quality, then in header order; the
/// first clause JSON or protobuf matches wins, JSON first for wildcards. No
/// header is `*/*`. `None`: nothing acceptable (406).
pub fn negotiate(accept: &str) -> Option<Encoding> {
    let accept = if accept.trim().is_empty() { "*/*" } else { accept };
    let mut clauses: Vec<(f32, u8, String)> = accept
        .split(',')
        .filter_map(|clause| {
            let mut parts = clause.split(';');
            let media = parts.next().unwrap_or("").trim().to_ascii_lowercase();
            let quality = parts
                .filter_map(|p| p.trim().strip_prefix("q=").map(|q| q.trim().parse::<f32>().unwrap_or(0.0)))
                .next_back()
                .unwrap_or(1.0);
            let wildcards = media.matches('*').count() as u8;
            (quality > 0.0 && !media.is_empty()).then_some((quality, wildcards, media))
        })
        .collect();
    // Stable: header order among equals.
    clauses.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    let served = [
        ("application/json", Encoding::Json),
        (PROTOBUF_CONTENT_TYPE, Encoding::Protobuf),
        (PROTOBUF_CONTENT_TYPE_AT, Encoding::Protobuf),
    ];
    clauses.iter().find_map(|(_, _, media)| {
        let (kind, subtype) = media.split_once('/')?;
        served.iter().find_map(|(offered, encoding)| {
            let (offered_kind, offered_subtype) = offered.split_once('/')?;
            let kind_matches = kind == "*" || kind == offered_kind;
            let subtype_matches = subtype == "*" || subtype == offered_subtype;
            (kind_matches && subtype_matches).then_some(*encoding)
        })
    })
}

#[cfg(feature = "server")]
pub mod protobuf;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schemas_convert() {
        let cases = [
            ("a reference", json!({"$ref": "#/components/schemas/X"}), json!({"$ref": "#/definitions/X"})),
            (
                "a wrapped reference keeps its description",
                json!({"allOf": [{"$ref": "#/components/schemas/X"}], "description": "d", "default": {}}),
                json!({"$ref": "#/definitions/X", "description": "d"}),
            ),
            (
                "a reference carries no type",
                json!({"$ref": "#/components/schemas/X", "type": "object", "x-kubernetes-list-type": "map"}),
                json!({"$ref": "#/definitions/X", "x-kubernetes-list-type": "map"}),
            ),
            (
                "int or string",
                json!({"x-kubernetes-int-or-string": true, "anyOf": [{"type": "integer"}, {"type": "string"}], "description": "p"}),
                json!({"type": "string", "format": "int-or-string", "description": "p", "x-kubernetes-int-or-string": true}),
            ),
            (
                "v3-only keywords go",
                json!({"type": "string", "nullable": true, "oneOf": [{"type": "string"}], "writeOnly": true, "deprecated": true, "not": {}}),
                json!({"type": "string"}),
            ),
            ("null leaves a list of types", json!({"type": ["string", "null"]}), json!({"type": "string"})),
            ("two types are none", json!({"type": ["string", "integer"]}), json!({})),
            (
                "an object",
                json!({"type": "object", "required": ["a"], "properties": {"a": {"type": "integer", "format": "int32", "minimum": 0}, "m": {"type": "object", "additionalProperties": {"type": "string"}}}}),
                json!({"type": "object", "required": ["a"], "properties": {"a": {"type": "integer", "format": "int32", "minimum": 0}, "m": {"type": "object", "additionalProperties": {"type": "string"}}}}),
            ),
            (
                "an array",
                json!({"type": "array", "items": {"$ref": "#/components/schemas/C"}, "x-kubernetes-list-map-keys": ["name"]}),
                json!({"type": "array", "items": {"$ref": "#/definitions/C"}, "x-kubernetes-list-map-keys": ["name"]}),
            ),
            ("an array without items is untyped", json!({"type": "array"}), json!({})),
            (
                "preserving unknown fields drops properties",
                json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true, "properties": {"a": {"type": "string"}}}),
                json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true}),
            ),
            (
                "empty properties go",
                json!({"type": "object", "properties": {}, "additionalProperties": false}),
                json!({"type": "object", "additionalProperties": false}),
            ),
            ("true is any value", json!(true), json!({})),
            (
                "enum, default, example stay",
                json!({"type": "string", "enum": ["a", "b"], "default": "a", "example": "b"}),
                json!({"type": "string", "enum": ["a", "b"], "default": "a", "example": "b"}),
            ),
            (
                "nested allOf wrappers in properties",
                json!({"type": "object", "properties": {"metadata": {"allOf": [{"$ref": "#/components/schemas/M"}], "description": "m"}}}),
                json!({"type": "object", "properties": {"metadata": {"$ref": "#/definitions/M", "description": "m"}}}),
            ),
        ];
        for (name, v3, v2) in cases {
            assert_eq!(convert_schema(&v3), v2, "{name}");
        }
    }

    #[test]
    fn accept_negotiation() {
        let (json, protobuf) = (Some(Encoding::Json), Some(Encoding::Protobuf));
        let cases = [
            ("", json),
            ("application/json", json),
            ("*/*", json),
            ("application/*", json),
            ("text/plain", None),
            ("text/*, image/png", None),
            (PROTOBUF_CONTENT_TYPE, protobuf),
            (PROTOBUF_CONTENT_TYPE_AT, protobuf),
            ("application/com.github.proto-openapi.spec.v2@v1.0+protobuf, application/json", protobuf),
            ("application/json, application/com.github.proto-openapi.spec.v2@v1.0+protobuf", json),
            ("application/com.github.proto-openapi.spec.v2@v1.0+protobuf;q=0, application/json", json),
            ("application/com.github.proto-openapi.spec.v2@v1.0+protobuf;q=0", None),
            ("text/html, application/com.github.proto-openapi.spec.v2@v1.0+protobuf", protobuf),
            // Quality first, then a specific type before a wildcard.
            ("application/json;q=0.5, application/com.github.proto-openapi.spec.v2@v1.0+protobuf", protobuf),
            ("application/json;q=0.9, application/com.github.proto-openapi.spec.v2@v1.0+protobuf;q=0.8", json),
            ("*/*, application/com.github.proto-openapi.spec.v2@v1.0+protobuf", protobuf),
            ("*/*;q=0.1, text/plain", json),
        ];
        for (accept, encoding) in cases {
            assert_eq!(negotiate(accept), encoding, "{accept}");
        }
    }

    /// What kubectl's parser (kube-openapi `pkg/util/proto`) refuses, so
    /// that one bad schema cannot fail the whole document.
    fn check_parses(definitions: &Map<String, Value>, path: &str, schema: &Value) -> Result<(), String> {
        let map = schema.as_object().ok_or_else(|| format!("{path}: not an object"))?;
        if let Some(reference) = map.get("$ref") {
            let name = reference.as_str().and_then(|r| r.strip_prefix(V2_REF_PREFIX));
            let name = name.ok_or_else(|| format!("{path}: reference to non-definition {reference}"))?;
            if !definitions.contains_key(name) {
                return Err(format!("{path}: unknown model in reference {name}"));
            }
            if map.contains_key("type")
                || map.get("properties").is_some_and(|p| p.as_object().is_some_and(|p| !p.is_empty()))
            {
                return Err(format!("{path}: reference with a type or properties"));
            }
            return Ok(());
        }
        let properties = |map: &Map<String, Value>| -> Result<(), String> {
            for (name, field) in map.get("properties").and_then(Value::as_object).into_iter().flatten() {
                check_parses(definitions, &format!("{path}.{name}"), field)?;
            }
            Ok(())
        };
        match map.get("type").map(|t| t.as_str().ok_or_else(|| format!("{path}: type {t}"))).transpose()? {
            None => properties(map),
            Some("object") => {
                properties(map)?;
                match map.get("additionalProperties") {
                    Some(Value::Object(_)) => check_parses(definitions, path, &map["additionalProperties"]),
                    _ => Ok(()),
                }
            }
            Some("array") => match map.get("items") {
                Some(items @ Value::Object(_)) => check_parses(definitions, path, items),
                _ => Err(format!("{path}: array should have exactly one sub-item")),
            },
            Some("string" | "number" | "integer" | "boolean") => Ok(()),
            Some(other) => Err(format!("{path}: unknown primitive type {other}")),
        }
    }

    #[test]
    fn every_definition_parses_as_kubectl_reads_it() {
        let mut registry = crate::api::Registry::builtin();
        registry.register(
            crate::api::ResourceInfo::new("example.com", "v1", "Widget", "widgets", true).with_schema(
                crate::api::KindSchema::Json(std::sync::Arc::new(json!({
                    "type": "object",
                    "properties": {"spec": {"type": "object", "properties": {
                        "size": {"type": "integer", "nullable": true},
                        "port": {"x-kubernetes-int-or-string": true, "anyOf": [{"type": "integer"}, {"type": "string"}]},
                        "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true, "properties": {"a": {"type": "string"}}},
                    }}},
                }))),
            ),
        );
        let openapi = OpenApi::build(&registry, "v1.33.0");
        let document = document(&openapi);
        assert_eq!(document["swagger"], "2.0");
        assert_eq!(document["info"], json!({"title": "Kubernetes", "version": "v1.33.0"}));
        let definitions = document["definitions"].as_object().unwrap();
        assert_eq!(definitions.len(), openapi.schemas().len());
        for (name, schema) in definitions {
            check_parses(definitions, name, schema).unwrap();
        }
        // Kinds keep their group/version/kind, by which kubectl finds them.
        let pod = &definitions["io.k8s.api.core.v1.Pod"];
        assert_eq!(pod["x-kubernetes-group-version-kind"], json!([{"group": "", "version": "v1", "kind": "Pod"}]));
        assert_eq!(pod["properties"]["spec"]["$ref"], "#/definitions/io.k8s.api.core.v1.PodSpec");
        let config_map = &definitions["io.k8s.api.core.v1.ConfigMap"];
        assert_eq!(config_map["properties"]["data"]["type"], "object");
        assert_eq!(config_map["properties"]["data"]["additionalProperties"]["type"], "string");
        let intstr = &definitions["io.k8s.apimachinery.pkg.util.intstr.IntOrString"];
        assert_eq!((&intstr["type"], &intstr["format"]), (&json!("string"), &json!("int-or-string")));
        let widget = &definitions["com.example.v1.Widget"];
        assert_eq!(widget["x-kubernetes-group-version-kind"][0]["kind"], "Widget");
        assert_eq!(widget["properties"]["spec"]["properties"]["port"]["format"], "int-or-string");
        assert!(widget["properties"]["spec"]["properties"]["free"].get("properties").is_none());
        assert!(definitions["io.k8s.api.core.v1.SecretList"]["x-kubernetes-group-version-kind"].is_array());
    }
}
