//! gnostic's protobuf encoding of a Swagger 2.0 document (package
//! `openapi.v2`, `openapiv2/OpenAPIv2.proto`): what kubectl asks
//! `/openapi/v2` for.
//!
//! Only the messages on the way from `Document` to its definitions' schemas
//! are declared; their field numbers are gnostic's. Values that gnostic keeps
//! as `Any` (vendor extensions, `enum`, `default`, `example`) travel as YAML
//! text, which is how kubectl reads `x-kubernetes-group-version-kind`.
//!
//! ```
//! use orchestra_core::api::openapi_v2::protobuf::{Document, encode};
//! use prost::Message;
//! use serde_json::json;
//!
//! let document = json!({
//!     "swagger": "2.0",
//!     "info": {"title": "Kubernetes", "version": "v1.33.0"},
//!     "paths": {},
//!     "definitions": {"Pod": {"type": "object", "properties": {"spec": {"type": "string"}}}},
//! });
//! let decoded = Document::decode(encode(&document).as_slice()).unwrap();
//! assert_eq!(decoded.swagger, "2.0");
//! assert_eq!(decoded.definitions.unwrap().additional_properties[0].name, "Pod");
//! ```

use prost::Message;
use serde_json::{Map, Value};

/// `openapi.v2.Document`.
#[derive(Clone, PartialEq, Message)]
pub struct Document {
    /// The Swagger version: `2.0`.
    #[prost(string, tag = "1")]
    pub swagger: String,
    /// Title and version.
    #[prost(message, optional, tag = "2")]
    pub info: Option<Info>,
    /// The operations (left empty: see the parent module).
    #[prost(message, optional, tag = "8")]
    pub paths: Option<Paths>,
    /// The schemas, by name.
    #[prost(message, optional, tag = "9")]
    pub definitions: Option<Definitions>,
}

/// `openapi.v2.Info`.
#[derive(Clone, PartialEq, Message)]
pub struct Info {
    /// The API's title.
    #[prost(string, tag = "1")]
    pub title: String,
    /// The API's version.
    #[prost(string, tag = "2")]
    pub version: String,
}

/// `openapi.v2.Paths`, without its path items.
#[derive(Clone, PartialEq, Message)]
pub struct Paths {
    /// `x-` extensions of the paths object.
    #[prost(message, repeated, tag = "1")]
    pub vendor_extension: Vec<NamedAny>,
}

/// `openapi.v2.Definitions`: named schemas, in order.
#[derive(Clone, PartialEq, Message)]
pub struct Definitions {
    /// The schemas.
    #[prost(message, repeated, tag = "1")]
    pub additional_properties: Vec<NamedSchema>,
}

/// `openapi.v2.Properties`: named schemas, in order.
#[derive(Clone, PartialEq, Message)]
pub struct Properties {
    /// The fields.
    #[prost(message, repeated, tag = "1")]
    pub additional_properties: Vec<NamedSchema>,
}

/// `openapi.v2.NamedSchema`.
#[derive(Clone, PartialEq, Message)]
pub struct NamedSchema {
    /// The name.
    #[prost(string, tag = "1")]
    pub name: String,
    /// The schema.
    #[prost(message, optional, tag = "2")]
    pub value: Option<Schema>,
}

/// `openapi.v2.NamedAny`: a vendor extension.
#[derive(Clone, PartialEq, Message)]
pub struct NamedAny {
    /// The extension's name (`x-...`).
    #[prost(string, tag = "1")]
    pub name: String,
    /// Its value.
    #[prost(message, optional, tag = "2")]
    pub value: Option<Any>,
}

/// `openapi.v2.Any`: a value as YAML text (field 1, a
/// `google.protobuf.Any`, is not used).
#[derive(Clone, PartialEq, Message)]
pub struct Any {
    /// The value, as YAML.
    #[prost(string, tag = "2")]
    pub yaml: String,
}

/// `openapi.v2.TypeItem`.
#[derive(Clone, PartialEq, Message)]
pub struct TypeItem {
    /// The type names (one at most here).
    #[prost(string, repeated, tag = "1")]
    pub value: Vec<String>,
}

/// `openapi.v2.ItemsItem`.
#[derive(Clone, PartialEq, Message)]
pub struct ItemsItem {
    /// The schema of the items.
    #[prost(message, repeated, tag = "1")]
    pub schema: Vec<Schema>,
}

/// `openapi.v2.AdditionalPropertiesItem`: a schema or a boolean.
#[derive(Clone, PartialEq, Message)]
pub struct AdditionalPropertiesItem {
    /// Which of the two.
    #[prost(oneof = "AdditionalProperties", tags = "1, 2")]
    pub oneof: Option<AdditionalProperties>,
}

/// The `oneof` of [`AdditionalPropertiesItem`].
#[derive(Clone, PartialEq, prost::Oneof)]
pub enum AdditionalProperties {
    /// The schema of every value.
    #[prost(message, boxed, tag = "1")]
    Schema(Box<Schema>),
    /// Whether other properties are allowed.
    #[prost(bool, tag = "2")]
    Boolean(bool),
}

/// `openapi.v2.Schema`, without `xml` and `externalDocs`.
#[derive(Clone, PartialEq, Message)]
pub struct Schema {
    /// `$ref`.
    #[prost(string, tag = "1")]
    pub r#ref: String,
    /// `format`.
    #[prost(string, tag = "2")]
    pub format: String,
    /// `title`.
    #[prost(string, tag = "3")]
    pub title: String,
    /// `description`.
    #[prost(string, tag = "4")]
    pub description: String,
    /// `default`.
    #[prost(message, optional, tag = "5")]
    pub default: Option<Any>,
    /// `multipleOf`.
    #[prost(double, tag = "6")]
    pub multiple_of: f64,
    /// `maximum`.
    #[prost(double, tag = "7")]
    pub maximum: f64,
    /// `exclusiveMaximum`.
    #[prost(bool, tag = "8")]
    pub exclusive_maximum: bool,
    /// `minimum`.
    #[prost(double, tag = "9")]
    pub minimum: f64,
    /// `exclusiveMinimum`.
    #[prost(bool, tag = "10")]
    pub exclusive_minimum: bool,
    /// `maxLength`.
    #[prost(int64, tag = "11")]
    pub max_length: i64,
    /// `minLength`.
    #[prost(int64, tag = "12")]
    pub min_length: i64,
    /// `pattern`.
    #[prost(string, tag = "13")]
    pub pattern: String,
    /// `maxItems`.
    #[prost(int64, tag = "14")]
    pub max_items: i64,
    /// `minItems`.
    #[prost(int64, tag = "15")]
    pub min_items: i64,
    /// `uniqueItems`.
    #[prost(bool, tag = "16")]
    pub unique_items: bool,
    /// `maxProperties`.
    #[prost(int64, tag = "17")]
    pub max_properties: i64,
    /// `minProperties`.
    #[prost(int64, tag = "18")]
    pub min_properties: i64,
    /// `required`.
    #[prost(string, repeated, tag = "19")]
    pub required: Vec<String>,
    /// `enum`.
    #[prost(message, repeated, tag = "20")]
    pub r#enum: Vec<Any>,
    /// `additionalProperties`.
    #[prost(message, optional, boxed, tag = "21")]
    pub additional_properties: Option<Box<AdditionalPropertiesItem>>,
    /// `type`.
    #[prost(message, optional, tag = "22")]
    pub r#type: Option<TypeItem>,
    /// `items`.
    #[prost(message, optional, tag = "23")]
    pub items: Option<ItemsItem>,
    /// `allOf`.
    #[prost(message, repeated, tag = "24")]
    pub all_of: Vec<Schema>,
    /// `properties`.
    #[prost(message, optional, tag = "25")]
    pub properties: Option<Properties>,
    /// `discriminator`.
    #[prost(string, tag = "26")]
    pub discriminator: String,
    /// `readOnly`.
    #[prost(bool, tag = "27")]
    pub read_only: bool,
    /// `example`.
    #[prost(message, optional, tag = "30")]
    pub example: Option<Any>,
    /// The `x-` extensions.
    #[prost(message, repeated, tag = "31")]
    pub vendor_extension: Vec<NamedAny>,
}

fn any(value: &Value) -> Any {
    // Every JSON value has a YAML form.
    Any { yaml: serde_yaml::to_string(value).unwrap_or_default() }
}

fn vendor_extensions(map: &Map<String, Value>) -> Vec<NamedAny> {
    map.iter()
        .filter(|(key, _)| key.starts_with("x-"))
        .map(|(key, value)| NamedAny { name: key.clone(), value: Some(any(value)) })
        .collect()
}

fn named_schemas(map: &Map<String, Value>) -> Vec<NamedSchema> {
    map.iter().map(|(name, schema)| NamedSchema { name: name.clone(), value: Some(schema_message(schema)) }).collect()
}

/// The message of one Swagger 2.0 schema (as [`super::convert_schema`]
/// makes them).
pub fn schema_message(schema: &Value) -> Schema {
    let Some(map) = schema.as_object() else {
        return Schema::default();
    };
    let string = |key: &str| map.get(key).and_then(Value::as_str).unwrap_or_default().to_owned();
    let float = |key: &str| map.get(key).and_then(Value::as_f64).unwrap_or_default();
    let int = |key: &str| map.get(key).and_then(Value::as_i64).unwrap_or_default();
    let flag = |key: &str| map.get(key).and_then(Value::as_bool).unwrap_or_default();
    Schema {
        r#ref: string("$ref"),
        format: string("format"),
        title: string("title"),
        description: string("description"),
        default: map.get("default").map(any),
        multiple_of: float("multipleOf"),
        maximum: float("maximum"),
        exclusive_maximum: flag("exclusiveMaximum"),
        minimum: float("minimum"),
        exclusive_minimum: flag("exclusiveMinimum"),
        max_length: int("maxLength"),
        min_length: int("minLength"),
        pattern: string("pattern"),
        max_items: int("maxItems"),
        min_items: int("minItems"),
        unique_items: flag("uniqueItems"),
        max_properties: int("maxProperties"),
        min_properties: int("minProperties"),
        required: map
            .get("required")
            .and_then(Value::as_array)
            .map(|r| r.iter().filter_map(Value::as_str).map(str::to_owned).collect())
            .unwrap_or_default(),
        r#enum: map.get("enum").and_then(Value::as_array).map(|e| e.iter().map(any).collect()).unwrap_or_default(),
        additional_properties: match map.get("additionalProperties") {
            Some(Value::Bool(allowed)) => {
                Some(Box::new(AdditionalPropertiesItem { oneof: Some(AdditionalProperties::Boolean(*allowed)) }))
            }
            Some(schema @ Value::Object(_)) => Some(Box::new(AdditionalPropertiesItem {
                oneof: Some(AdditionalProperties::Schema(Box::new(schema_message(schema)))),
            })),
            _ => None,
        },
        r#type: map.get("type").and_then(Value::as_str).map(|t| TypeItem { value: vec![t.to_owned()] }),
        items: map.get("items").map(|items| ItemsItem { schema: vec![schema_message(items)] }),
        all_of: map
            .get("allOf")
            .and_then(Value::as_array)
            .map(|a| a.iter().map(schema_message).collect())
            .unwrap_or_default(),
        properties: map
            .get("properties")
            .and_then(Value::as_object)
            .map(|p| Properties { additional_properties: named_schemas(p) }),
        discriminator: string("discriminator"),
        read_only: flag("readOnly"),
        example: map.get("example").map(any),
        vendor_extension: vendor_extensions(map),
    }
}

/// The message of a Swagger 2.0 document (as [`super::document`] makes it).
pub fn document_message(document: &Value) -> Document {
    let info = &document["info"];
    Document {
        swagger: document["swagger"].as_str().unwrap_or("2.0").to_owned(),
        info: Some(Info {
            title: info["title"].as_str().unwrap_or_default().to_owned(),
            version: info["version"].as_str().unwrap_or_default().to_owned(),
        }),
        paths: Some(Paths::default()),
        definitions: Some(Definitions {
            additional_properties: document["definitions"].as_object().map(named_schemas).unwrap_or_default(),
        }),
    }
}

/// The protobuf encoding of a Swagger 2.0 document.
pub fn encode(document: &Value) -> Vec<u8> {
    document_message(document).encode_to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::openapi::OpenApi;
    use serde_json::json;

    fn extension<'a>(schema: &'a Schema, name: &str) -> Option<&'a str> {
        schema.vendor_extension.iter().find(|e| e.name == name).and_then(|e| e.value.as_ref()).map(|v| v.yaml.as_str())
    }

    #[test]
    fn schemas_encode() {
        let cases = [
            (
                json!({"$ref": "#/definitions/X", "description": "d"}),
                Schema { r#ref: "#/definitions/X".into(), description: "d".into(), ..Default::default() },
            ),
            (
                json!({"type": "object", "additionalProperties": {"type": "string"}}),
                Schema {
                    r#type: Some(TypeItem { value: vec!["object".into()] }),
                    additional_properties: Some(Box::new(AdditionalPropertiesItem {
                        oneof: Some(AdditionalProperties::Schema(Box::new(Schema {
                            r#type: Some(TypeItem { value: vec!["string".into()] }),
                            ..Default::default()
                        }))),
                    })),
                    ..Default::default()
                },
            ),
            (
                json!({"type": "object", "additionalProperties": false}),
                Schema {
                    r#type: Some(TypeItem { value: vec!["object".into()] }),
                    additional_properties: Some(Box::new(AdditionalPropertiesItem {
                        oneof: Some(AdditionalProperties::Boolean(false)),
                    })),
                    ..Default::default()
                },
            ),
            (
                json!({"type": "array", "items": {"type": "integer", "format": "int32"}, "maxItems": 3, "uniqueItems": true}),
                Schema {
                    r#type: Some(TypeItem { value: vec!["array".into()] }),
                    items: Some(ItemsItem {
                        schema: vec![Schema {
                            r#type: Some(TypeItem { value: vec!["integer".into()] }),
                            format: "int32".into(),
                            ..Default::default()
                        }],
                    }),
                    max_items: 3,
                    unique_items: true,
                    ..Default::default()
                },
            ),
            (
                json!({"type": "string", "enum": ["a"], "default": "a", "x-kubernetes-list-type": "set", "minimum": 1.5}),
                Schema {
                    r#type: Some(TypeItem { value: vec!["string".into()] }),
                    r#enum: vec![Any { yaml: "a\n".into() }],
                    default: Some(Any { yaml: "a\n".into() }),
                    minimum: 1.5,
                    vendor_extension: vec![NamedAny {
                        name: "x-kubernetes-list-type".into(),
                        value: Some(Any { yaml: "set\n".into() }),
                    }],
                    ..Default::default()
                },
            ),
        ];
        for (json, expected) in cases {
            let message = schema_message(&json);
            assert_eq!(message, expected, "{json}");
            assert_eq!(Schema::decode(message.encode_to_vec().as_slice()).unwrap(), expected, "{json}");
        }
    }

    /// The served document decodes with the same messages into what kubectl
    /// needs: a kind's type, fields and group/version/kind.
    #[test]
    fn document_round_trips() {
        let openapi = OpenApi::build(&crate::api::Registry::builtin(), "v1.33.0");
        let json = super::super::document(&openapi);
        let bytes = encode(&json);
        let document = Document::decode(bytes.as_slice()).unwrap();
        assert_eq!(document.swagger, "2.0");
        assert_eq!(document.info, Some(Info { title: "Kubernetes".into(), version: "v1.33.0".into() }));
        assert!(document.paths.is_some());
        let definitions = document.definitions.unwrap().additional_properties;
        assert_eq!(definitions.len(), openapi.schemas().len());
        let config_map = definitions.iter().find(|d| d.name == "io.k8s.api.core.v1.ConfigMap").unwrap();
        let config_map = config_map.value.as_ref().unwrap();
        assert_eq!(config_map.r#type.as_ref().unwrap().value, ["object"]);
        let fields = &config_map.properties.as_ref().unwrap().additional_properties;
        let names: Vec<&str> = fields.iter().map(|f| f.name.as_str()).collect();
        for name in ["apiVersion", "binaryData", "data", "immutable", "kind", "metadata"] {
            assert!(names.contains(&name), "{names:?}");
        }
        let data = fields.iter().find(|f| f.name == "data").unwrap().value.as_ref().unwrap();
        assert_eq!(data.r#type.as_ref().unwrap().value, ["object"]);
        let metadata = fields.iter().find(|f| f.name == "metadata").unwrap().value.as_ref().unwrap();
        assert_eq!(metadata.r#ref, "#/definitions/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta");
        let gvk: serde_yaml::Value =
            serde_yaml::from_str(extension(config_map, "x-kubernetes-group-version-kind").unwrap()).unwrap();
        assert_eq!(
            gvk,
            serde_yaml::from_str::<serde_yaml::Value>("[{group: '', version: v1, kind: ConfigMap}]").unwrap()
        );
    }
}
