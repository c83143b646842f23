//! Protobuf request bodies (`application/vnd.kubernetes.protobuf`), decoded
//! into the Kubernetes JSON every handler works on.
//!
//! kubectl 1.31+ sends protobuf for `create namespace|deployment|…`, `auth
//! can-i` and other typed-client commands. The wire format is the magic
//! `k8s\0` followed by a `runtime.Unknown` envelope:
//!
//! ```text
//! message Unknown { TypeMeta typeMeta = 1; bytes raw = 2; string contentEncoding = 3; string contentType = 4; }
//! message TypeMeta { string apiVersion = 1; string kind = 2; }
//! ```
//!
//! `raw` is the kind's own message. The transcoder is generic and driven by
//! descriptors: the Kubernetes `.proto` files (shipped in the `k8s-rs-pb`
//! crate package) are compiled by `build.rs` into a `FileDescriptorSet`
//! embedded here, and any kind's message is walked with `prost-reflect`.
//! Kubernetes proto field names are the JSON names; the exceptions are a
//! handful of apimachinery types with their own JSON form (`Time`,
//! `MicroTime`, `Duration`, `IntOrString`, `Quantity`, `RawExtension`,
//! `FieldsV1`, the `items` wrappers such as `ExtraValue`, and the
//! apiextensions `JSON`/`JSONSchemaProps*` types), handled by message name.
//!
//! Like Go's encoder, protobuf carries non-pointer fields even when empty;
//! empty strings, lists, maps and zero timestamps are left out of the JSON
//! (Go's `omitempty`), numbers and booleans are kept.

use std::collections::HashMap;
use std::sync::OnceLock;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, Time};
use prost_reflect::{
    DescriptorPool, DynamicMessage, FieldDescriptor, MapKey, MessageDescriptor, ReflectMessage, Value as PbValue,
};
use serde_json::{Map, Value};

use crate::api::ApiError;

/// The media type of Kubernetes protobuf bodies.
pub(crate) const MEDIA_TYPE: &str = "application/vnd.kubernetes.protobuf";

/// The four bytes every Kubernetes protobuf body starts with.
pub(crate) const MAGIC: &[u8; 4] = b"k8s\0";

/// The descriptor set compiled by `build.rs`.
static DESCRIPTORS: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/kubernetes.fds"));

/// Full names of the apimachinery messages with their own JSON form.
const UNKNOWN: &str = "apimachinery.pkg.runtime.Unknown";
const TIME: &str = "apimachinery.pkg.apis.meta.v1.Time";
const MICRO_TIME: &str = "apimachinery.pkg.apis.meta.v1.MicroTime";
const DURATION: &str = "apimachinery.pkg.apis.meta.v1.Duration";
const FIELDS_V1: &str = "apimachinery.pkg.apis.meta.v1.FieldsV1";
const VERBS: &str = "apimachinery.pkg.apis.meta.v1.Verbs";
const INT_OR_STRING: &str = "apimachinery.pkg.util.intstr.IntOrString";
const QUANTITY: &str = "apimachinery.pkg.api.resource.Quantity";
const QUANTITY_VALUE: &str = "apimachinery.pkg.api.resource.QuantityValue";
const RAW_EXTENSION: &str = "apimachinery.pkg.runtime.RawExtension";

/// Go structs embedded with `json:",inline"`: a message field in protobuf,
/// its fields flattened into the parent in JSON. Complete for every
/// built-in kind: the test `proto_field_names_are_the_json_names_of_every_builtin_kind`
/// walks them all against the `k8s-openapi` schemas.
const INLINE_FIELDS: [(&str, &str); 11] = [
    ("api.core.v1.Volume", "volumeSource"),
    ("api.core.v1.PersistentVolumeSpec", "persistentVolumeSource"),
    ("api.core.v1.Probe", "handler"),
    ("api.core.v1.EphemeralContainer", "ephemeralContainerCommon"),
    ("api.core.v1.ConfigMapKeySelector", "localObjectReference"),
    ("api.core.v1.SecretKeySelector", "localObjectReference"),
    ("api.core.v1.ConfigMapEnvSource", "localObjectReference"),
    ("api.core.v1.SecretEnvSource", "localObjectReference"),
    ("api.core.v1.ConfigMapVolumeSource", "localObjectReference"),
    ("api.core.v1.ConfigMapProjection", "localObjectReference"),
    ("api.core.v1.SecretProjection", "localObjectReference"),
];

/// Inline fields beyond the core group's.
const INLINE_OTHER: [(&str, &str); 1] = [("api.admissionregistration.v1.RuleWithOperations", "rule")];

/// Fields whose proto name is not their JSON name (both spellings occur:
/// `DaemonEndpoint.Port` is `Port` in JSON too).
const RENAMED_FIELDS: [(&str, &str, &str); 2] = [
    ("api.admissionregistration.v1.MutatingWebhookConfiguration", "Webhooks", "webhooks"),
    ("api.admissionregistration.v1.ValidatingWebhookConfiguration", "Webhooks", "webhooks"),
];

fn is_inline(message: &str, field: &str) -> bool {
    INLINE_FIELDS.contains(&(message, field)) || INLINE_OTHER.contains(&(message, field))
}

/// The JSON name of a field: its proto name, but for [`RENAMED_FIELDS`] and
/// the `JSONSchemaProps` spellings (`$ref`, `x-kubernetes-…`).
fn json_name(message: &MessageDescriptor, field: &FieldDescriptor) -> String {
    if message.name() == "JSONSchemaProps" {
        return json_schema_name(field.name());
    }
    RENAMED_FIELDS
        .iter()
        .find(|(m, f, _)| *m == message.full_name() && *f == field.name())
        .map(|(_, _, json)| (*json).to_owned())
        .unwrap_or_else(|| field.name().to_owned())
}

/// The descriptors, and the messages by `(version, kind)`.
struct Schema {
    pool: DescriptorPool,
    kinds: HashMap<(String, String), Vec<MessageDescriptor>>,
}

fn schema() -> Result<&'static Schema, ApiError> {
    static SCHEMA: OnceLock<Result<Schema, String>> = OnceLock::new();
    SCHEMA
        .get_or_init(|| {
            let pool = DescriptorPool::decode(DESCRIPTORS).map_err(|e| e.to_string())?;
            let mut kinds: HashMap<(String, String), Vec<MessageDescriptor>> = HashMap::new();
            for message in pool.all_messages() {
                let package = message.package_name();
                let Some(version) = package.rsplit('.').next() else {
                    continue;
                };
                kinds.entry((version.to_owned(), message.name().to_owned())).or_default().push(message);
            }
            Ok(Schema { pool, kinds })
        })
        .as_ref()
        .map_err(|e| ApiError::internal(format!("the protobuf descriptors are unusable: {e}")))
}

/// The message of a kind: `apps/v1` + `Deployment` → `api.apps.v1.Deployment`.
///
/// Packages are named after the group's first label (`rbac` for
/// `rbac.authorization.k8s.io`, `core` for the core group); a version and
/// kind served by only one package needs no group match.
fn message_for(api_version: &str, kind: &str) -> Option<MessageDescriptor> {
    let schema = schema().ok()?;
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    let candidates = schema.kinds.get(&(version.to_owned(), kind.to_owned()))?;
    let group_key = |message: &MessageDescriptor| {
        let package = message.package_name();
        let mut labels = package.rsplit('.');
        labels.next();
        labels.next().unwrap_or("").to_owned()
    };
    let wanted = match group {
        "" => "core".to_owned(),
        "meta.k8s.io" => "meta".to_owned(),
        group => group.split('.').next().unwrap_or(group).to_owned(),
    };
    candidates
        .iter()
        .find(|m| group_key(m) == wanted)
        .or_else(|| {
            let underscored = group.replace('.', "_");
            candidates.iter().find(|m| !group.is_empty() && underscored.starts_with(&group_key(m)))
        })
        .or_else(|| (candidates.len() == 1).then(|| &candidates[0]))
        .cloned()
}

/// Decodes a Kubernetes protobuf body (magic, envelope, message) into its
/// JSON object, `apiVersion` and `kind` included. Errors are 400s.
pub(crate) fn decode(bytes: &[u8]) -> Result<Value, ApiError> {
    let bad = |why: String| {
        ApiError::bad_request(format!("the body of the request could not be decoded as {MEDIA_TYPE}: {why}"))
    };
    let body = bytes.strip_prefix(MAGIC).ok_or_else(|| bad("it does not start with the magic \"k8s\\0\"".into()))?;
    let schema = schema()?;
    let envelope =
        schema.pool.get_message_by_name(UNKNOWN).ok_or_else(|| ApiError::internal("no runtime.Unknown descriptor"))?;
    let envelope = DynamicMessage::decode(envelope, body).map_err(|e| bad(e.to_string()))?;
    let type_meta = match envelope.get_field_by_name("typeMeta").as_deref() {
        Some(PbValue::Message(m)) => m.clone(),
        _ => return Err(bad("the envelope has no typeMeta".into())),
    };
    let string = |m: &DynamicMessage, name: &str| match m.get_field_by_name(name).as_deref() {
        Some(PbValue::String(s)) => s.clone(),
        _ => String::new(),
    };
    let api_version = string(&type_meta, "apiVersion");
    let kind = string(&type_meta, "kind");
    let raw = match envelope.get_field_by_name("raw").as_deref() {
        Some(PbValue::Bytes(b)) => b.clone(),
        _ => Default::default(),
    };
    let encoding = string(&envelope, "contentEncoding");
    if !encoding.is_empty() {
        return Err(bad(format!("unsupported contentEncoding {encoding:?}")));
    }
    let content_type = string(&envelope, "contentType");
    let mut object = match content_type.split(';').next().unwrap_or("").trim() {
        "" | MEDIA_TYPE => {
            if api_version.is_empty() || kind.is_empty() {
                return Err(bad("the envelope has no apiVersion or kind".into()));
            }
            let descriptor = message_for(&api_version, &kind)
                .ok_or_else(|| bad(format!("no protobuf schema for {api_version}, Kind={kind}")))?;
            let message = DynamicMessage::decode(descriptor, raw).map_err(|e| bad(e.to_string()))?;
            message_to_json(&message)
        }
        "application/json" => serde_json::from_slice(&raw).map_err(|e| bad(format!("embedded JSON: {e}")))?,
        other => return Err(bad(format!("unsupported embedded content type {other:?}"))),
    };
    let Some(fields) = object.as_object_mut() else {
        return Err(bad("the object is not a message".into()));
    };
    if !api_version.is_empty() {
        fields.insert("apiVersion".into(), api_version.into());
    }
    if !kind.is_empty() {
        fields.insert("kind".into(), kind.into());
    }
    Ok(object)
}

/// A message as JSON: its special form, or an object of its present fields.
fn message_to_json(message: &DynamicMessage) -> Value {
    let descriptor = message.descriptor();
    let name = descriptor.full_name();
    let get = |field: &str| message.get_field_by_name(field);
    let int = |field: &str| match get(field).as_deref() {
        Some(PbValue::I64(n)) => *n,
        Some(PbValue::I32(n)) => i64::from(*n),
        _ => 0,
    };
    let string = |field: &str| match get(field).as_deref() {
        Some(PbValue::String(s)) => s.clone(),
        _ => String::new(),
    };
    let raw_json = |field: &str| match get(field).as_deref() {
        Some(PbValue::Bytes(raw)) if !raw.is_empty() => embedded(raw),
        _ => Value::Null,
    };
    match name {
        TIME | MICRO_TIME => {
            let (seconds, nanos) = (int("seconds"), int("nanos"));
            if seconds == 0 && nanos == 0 {
                return Value::Null;
            }
            let Ok(at) = k8s_openapi::jiff::Timestamp::new(seconds, nanos as i32) else {
                return Value::Null;
            };
            let value = if name == TIME { serde_json::to_value(Time(at)) } else { serde_json::to_value(MicroTime(at)) };
            value.unwrap_or(Value::Null)
        }
        DURATION => go_duration(int("duration")).into(),
        INT_OR_STRING => {
            if int("type") == 1 {
                string("strVal").into()
            } else {
                int("intVal").into()
            }
        }
        QUANTITY | QUANTITY_VALUE => string("string").into(),
        RAW_EXTENSION => raw_json("raw"),
        FIELDS_V1 => raw_json("Raw"),
        _ if is_items_wrapper(&descriptor) => match get("items").as_deref() {
            Some(PbValue::List(items)) => Value::Array(items.iter().map(scalar).collect()),
            _ => Value::Array(Vec::new()),
        },
        _ if name.starts_with("apiextensions_apiserver.") => {
            apiextensions(message).unwrap_or_else(|| fields_to_json(message))
        }
        _ => fields_to_json(message),
    }
}

/// `ExtraValue`, `Verbs` and the like: a message that only wraps
/// `repeated string items = 1`, which JSON writes as the bare list.
fn is_items_wrapper(descriptor: &MessageDescriptor) -> bool {
    let mut fields = descriptor.fields();
    let (Some(items), None) = (fields.next(), fields.next()) else {
        return false;
    };
    (descriptor.full_name() == VERBS || descriptor.name() == "ExtraValue") && items.name() == "items" && items.is_list()
}

/// The apiextensions types whose JSON is not a plain object.
fn apiextensions(message: &DynamicMessage) -> Option<Value> {
    let present = |field: &str| {
        message
            .descriptor()
            .get_field_by_name(field)
            .filter(|f| message.has_field(f))
            .map(|f| convert_field(&message.get_field(&f)))
    };
    match message.descriptor().name() {
        "JSON" => Some(match message.get_field_by_name("raw").as_deref() {
            Some(PbValue::Bytes(raw)) => embedded(raw),
            _ => Value::Null,
        }),
        "JSONSchemaPropsOrArray" => present("schema").or_else(|| present("jSONSchemas")).or(Some(Value::Null)),
        "JSONSchemaPropsOrBool" => present("schema").or_else(|| present("allows")).or(Some(Value::Bool(false))),
        "JSONSchemaPropsOrStringArray" => present("schema").or_else(|| present("property")).or(Some(Value::Null)),
        _ => None,
    }
}

/// JSON embedded in a bytes field (`RawExtension`, `FieldsV1`, `JSON`); a
/// nested protobuf object is decoded too; anything else stays a string.
fn embedded(raw: &[u8]) -> Value {
    if raw.starts_with(MAGIC) {
        return decode(raw).unwrap_or(Value::Null);
    }
    serde_json::from_slice(raw).unwrap_or_else(|_| String::from_utf8_lossy(raw).into())
}

/// An object of the message's present, non-empty fields.
fn fields_to_json(message: &DynamicMessage) -> Value {
    let descriptor = message.descriptor();
    let mut object = Map::new();
    for (field, value) in message.fields() {
        let value = convert_field(value);
        if is_inline(descriptor.full_name(), field.name()) {
            if let Value::Object(inlined) = value {
                object.extend(inlined);
            }
            continue;
        }
        let empty = match &value {
            Value::Null => true,
            Value::String(s) => s.is_empty(),
            Value::Array(a) => a.is_empty(),
            Value::Object(o) => o.is_empty() && (field.is_map() || field.is_list()),
            _ => false,
        };
        if empty {
            continue;
        }
        object.insert(json_name(&descriptor, &field), value);
    }
    Value::Object(object)
}

/// `JSONSchemaProps` field names that differ from their JSON names.
fn json_schema_name(name: &str) -> String {
    match name {
        "ref" => "$ref".into(),
        "schema" => "$schema".into(),
        _ => match name.strip_prefix("xKubernetes") {
            Some(rest) => {
                let mut out = String::from("x-kubernetes");
                for c in rest.chars() {
                    if c.is_ascii_uppercase() {
                        out.push('-');
                        out.push(c.to_ascii_lowercase());
                    } else {
                        out.push(c);
                    }
                }
                out
            }
            None => name.to_owned(),
        },
    }
}

/// A field's value: lists and maps as JSON arrays and objects.
fn convert_field(value: &PbValue) -> Value {
    match value {
        PbValue::List(items) => Value::Array(items.iter().map(scalar).collect()),
        PbValue::Map(entries) => {
            let mut object = Map::new();
            for (key, value) in entries {
                let key = match key {
                    MapKey::String(s) => s.clone(),
                    MapKey::Bool(b) => b.to_string(),
                    MapKey::I32(n) => n.to_string(),
                    MapKey::I64(n) => n.to_string(),
                    MapKey::U32(n) => n.to_string(),
                    MapKey::U64(n) => n.to_string(),
                };
                object.insert(key, scalar(value));
            }
            Value::Object(object)
        }
        other => scalar(other),
    }
}

/// One value; bytes are base64 like Go's `[]byte` in JSON.
fn scalar(value: &PbValue) -> Value {
    match value {
        PbValue::Bool(b) => (*b).into(),
        PbValue::I32(n) => (*n).into(),
        PbValue::I64(n) => (*n).into(),
        PbValue::U32(n) => (*n).into(),
        PbValue::U64(n) => (*n).into(),
        PbValue::F32(n) => serde_json::Number::from_f64(f64::from(*n)).map(Value::Number).unwrap_or(Value::Null),
        PbValue::F64(n) => serde_json::Number::from_f64(*n).map(Value::Number).unwrap_or(Value::Null),
        PbValue::String(s) => s.clone().into(),
        PbValue::Bytes(b) => base64(b).into(),
        PbValue::EnumNumber(n) => (*n).into(),
        PbValue::Message(m) => message_to_json(m),
        PbValue::List(_) | PbValue::Map(_) => convert_field(value),
    }
}

/// Standard base64 with padding.
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [chunk[0], chunk.get(1).copied().unwrap_or(0), chunk.get(2).copied().unwrap_or(0)];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for (i, shift) in [18, 12, 6, 0].into_iter().enumerate() {
            if i <= chunk.len() {
                out.push(ALPHABET[((n >> shift) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// A duration in nanoseconds as Go's `time.Duration.String()` writes it
/// (`1h2m3.5s`, `150ms`, `0s`), the JSON form of `metav1.Duration`.
fn go_duration(nanos: i64) -> String {
    if nanos == 0 {
        return "0s".into();
    }
    let sign = if nanos < 0 { "-" } else { "" };
    let n = nanos.unsigned_abs();
    let fraction = |value: u64, unit: u64, digits: usize| {
        let whole = value / unit;
        let rest = value % unit;
        if rest == 0 {
            whole.to_string()
        } else {
            let frac = format!("{rest:0digits$}");
            format!("{whole}.{}", frac.trim_end_matches('0'))
        }
    };
    if n < 1_000 {
        return format!("{sign}{n}ns");
    }
    if n < 1_000_000 {
        return format!("{sign}{}µs", fraction(n, 1_000, 3));
    }
    if n < 1_000_000_000 {
        return format!("{sign}{}ms", fraction(n, 1_000_000, 6));
    }
    let hours = n / 3_600_000_000_000;
    let minutes = (n / 60_000_000_000) % 60;
    let seconds = fraction(n % 60_000_000_000, 1_000_000_000, 9);
    match (hours, minutes) {
        (0, 0) => format!("{sign}{seconds}s"),
        (0, m) => format!("{sign}{m}m{seconds}s"),
        (h, m) => format!("{sign}{h}h{m}m{seconds}s"),
    }
}

/// Encodes a JSON object as a Kubernetes protobuf body: the inverse of
/// [`decode`] for plain fields (tests and tools; no special types).
#[cfg(test)]
pub(crate) fn encode_for_test(api_version: &str, kind: &str, object: &Value) -> Vec<u8> {
    use prost::Message;
    let descriptor = message_for(api_version, kind).expect("known kind");
    let message = json_to_message(descriptor, object);
    let schema = schema().expect("descriptors");
    let envelope_descriptor = schema.pool.get_message_by_name(UNKNOWN).expect("Unknown");
    let type_meta_descriptor = envelope_descriptor
        .get_field_by_name("typeMeta")
        .and_then(|f| f.kind().as_message().cloned())
        .expect("TypeMeta");
    let mut type_meta = DynamicMessage::new(type_meta_descriptor);
    type_meta.set_field_by_name("apiVersion", PbValue::String(api_version.into()));
    type_meta.set_field_by_name("kind", PbValue::String(kind.into()));
    let mut envelope = DynamicMessage::new(envelope_descriptor);
    envelope.set_field_by_name("typeMeta", PbValue::Message(type_meta));
    envelope.set_field_by_name("raw", PbValue::Bytes(message.encode_to_vec().into()));
    let mut out = MAGIC.to_vec();
    out.extend(envelope.encode_to_vec());
    out
}

#[cfg(test)]
fn json_to_message(descriptor: MessageDescriptor, object: &Value) -> DynamicMessage {
    use prost_reflect::Kind;
    let mut message = DynamicMessage::new(descriptor.clone());
    let Some(fields) = object.as_object() else {
        return message;
    };
    let one = |kind: &Kind, value: &Value| -> PbValue {
        match (kind, value) {
            (Kind::Message(m), v) if m.full_name() == INT_OR_STRING => {
                let mut ios = DynamicMessage::new(m.clone());
                match v {
                    Value::String(s) => {
                        ios.set_field_by_name("type", PbValue::I64(1));
                        ios.set_field_by_name("strVal", PbValue::String(s.clone()));
                    }
                    v => {
                        ios.set_field_by_name("type", PbValue::I64(0));
                        ios.set_field_by_name("intVal", PbValue::I32(v.as_i64().unwrap_or(0) as i32));
                    }
                }
                PbValue::Message(ios)
            }
            (Kind::Message(m), v) if m.full_name() == QUANTITY => {
                let mut q = DynamicMessage::new(m.clone());
                q.set_field_by_name("string", PbValue::String(v.as_str().unwrap_or("").into()));
                PbValue::Message(q)
            }
            (Kind::Message(m), v) => PbValue::Message(json_to_message(m.clone(), v)),
            (Kind::String, v) => PbValue::String(v.as_str().unwrap_or("").into()),
            (Kind::Bool, v) => PbValue::Bool(v.as_bool().unwrap_or(false)),
            (Kind::Int32, v) => PbValue::I32(v.as_i64().unwrap_or(0) as i32),
            (Kind::Int64, v) => PbValue::I64(v.as_i64().unwrap_or(0)),
            (Kind::Bytes, v) => PbValue::Bytes(v.as_str().unwrap_or("").as_bytes().to_vec().into()),
            (kind, v) => panic!("test encoder: unsupported {kind:?} for {v}"),
        }
    };
    for field in descriptor.fields() {
        if is_inline(descriptor.full_name(), field.name()) {
            let inlined = json_to_message(field.kind().as_message().cloned().expect("message"), object);
            if inlined.fields().next().is_some() {
                message.set_field(&field, PbValue::Message(inlined));
            }
        }
    }
    for (name, value) in fields {
        let renamed = RENAMED_FIELDS
            .iter()
            .find(|(m, _, json)| *m == descriptor.full_name() && json == name)
            .map(|(_, proto, _)| *proto);
        let Some(field) = descriptor.get_field_by_name(renamed.unwrap_or(name)) else {
            continue;
        };
        let kind = field.kind();
        let value = if field.is_map() {
            let entry = kind.as_message().expect("map entry").map_entry_value_field();
            PbValue::Map(
                value
                    .as_object()
                    .into_iter()
                    .flatten()
                    .map(|(k, v)| (MapKey::String(k.clone()), one(&entry.kind(), v)))
                    .collect(),
            )
        } else if field.is_list() {
            PbValue::List(value.as_array().into_iter().flatten().map(|v| one(&kind, v)).collect())
        } else {
            one(&kind, value)
        };
        message.set_field(&field, value);
    }
    message
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn finds_messages_by_group_version_kind() {
        let name = |v, k| message_for(v, k).map(|m| m.full_name().to_owned());
        assert_eq!(name("v1", "Namespace").as_deref(), Some("api.core.v1.Namespace"));
        assert_eq!(name("apps/v1", "Deployment").as_deref(), Some("api.apps.v1.Deployment"));
        assert_eq!(name("rbac.authorization.k8s.io/v1", "Role").as_deref(), Some("api.rbac.v1.Role"));
        assert_eq!(
            name("authorization.k8s.io/v1", "SelfSubjectAccessReview").as_deref(),
            Some("api.authorization.v1.SelfSubjectAccessReview")
        );
        assert_eq!(name("events.k8s.io/v1", "Event").as_deref(), Some("api.events.v1.Event"));
        assert_eq!(name("v1", "Event").as_deref(), Some("api.core.v1.Event"));
        assert_eq!(
            name("apiextensions.k8s.io/v1", "CustomResourceDefinition").as_deref(),
            Some("apiextensions_apiserver.pkg.apis.apiextensions.v1.CustomResourceDefinition")
        );
        assert_eq!(
            name("meta.k8s.io/v1", "DeleteOptions").as_deref(),
            Some("apimachinery.pkg.apis.meta.v1.DeleteOptions")
        );
        assert_eq!(name("v1", "NoSuchKind"), None);
    }

    #[test]
    fn round_trips_a_deployment() {
        let deployment = json!({
            "metadata": {"name": "web", "namespace": "default", "labels": {"app": "web"}},
            "spec": {
                "replicas": 0,
                "selector": {"matchLabels": {"app": "web"}},
                "template": {
                    "metadata": {"labels": {"app": "web"}},
                    "spec": {
                        "containers": [{
                            "name": "nginx", "image": "nginx",
                            "ports": [{"containerPort": 80}],
                            "resources": {"limits": {"cpu": "500m"}},
                            "livenessProbe": {"httpGet": {"path": "/", "port": "http"}, "periodSeconds": 5},
                            "env": [{"name": "A", "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "a"}}}],
                            "volumeMounts": [{"name": "config", "mountPath": "/etc/x"}]
                        }],
                        "volumes": [{"name": "config", "configMap": {"name": "cm"}}]
                    }
                },
                "strategy": {"rollingUpdate": {"maxSurge": "25%", "maxUnavailable": 1}}
            }
        });
        let bytes = encode_for_test("apps/v1", "Deployment", &deployment);
        let decoded = decode(&bytes).unwrap();
        let mut expected = deployment.clone();
        expected["apiVersion"] = "apps/v1".into();
        expected["kind"] = "Deployment".into();
        assert_eq!(decoded, expected);
    }

    #[test]
    fn special_types() {
        let schema = schema().unwrap();
        let time = schema.pool.get_message_by_name(TIME).unwrap();
        let mut t = DynamicMessage::new(time.clone());
        t.set_field_by_name("seconds", PbValue::I64(1_700_000_000));
        assert_eq!(message_to_json(&t), json!("2023-11-14T22:13:20Z"));
        assert_eq!(message_to_json(&DynamicMessage::new(time)), Value::Null);
        let micro = schema.pool.get_message_by_name(MICRO_TIME).unwrap();
        let mut m = DynamicMessage::new(micro);
        m.set_field_by_name("seconds", PbValue::I64(1_700_000_000));
        m.set_field_by_name("nanos", PbValue::I32(123_456_000));
        assert_eq!(message_to_json(&m), json!("2023-11-14T22:13:20.123456Z"));
        let raw = schema.pool.get_message_by_name(RAW_EXTENSION).unwrap();
        let mut r = DynamicMessage::new(raw);
        r.set_field_by_name("raw", PbValue::Bytes(br#"{"a":1}"#.to_vec().into()));
        assert_eq!(message_to_json(&r), json!({"a": 1}));
        assert_eq!(go_duration(0), "0s");
        assert_eq!(go_duration(1_500_000_000), "1.5s");
        assert_eq!(go_duration(3_600_000_000_000), "1h0m0s");
        assert_eq!(go_duration(150_000_000), "150ms");
        assert_eq!(go_duration(61_000_000_000), "1m1s");
        assert_eq!(base64(b"hello"), "aGVsbG8=");
        assert_eq!(base64(b"hi!"), "aGkh");
        assert_eq!(json_schema_name("xKubernetesPreserveUnknownFields"), "x-kubernetes-preserve-unknown-fields");
    }

    #[test]
    fn secret_bytes_and_extra_values() {
        let bytes = encode_for_test(
            "v1",
            "Secret",
            &json!({"metadata": {"name": "s"}, "data": {"k": "hello"}, "type": "Opaque"}),
        );
        let secret = decode(&bytes).unwrap();
        assert_eq!(secret["data"]["k"], "aGVsbG8=");
        let bytes = encode_for_test(
            "authorization.k8s.io/v1",
            "SubjectAccessReview",
            &json!({"spec": {"user": "u", "extra": {"scopes": {"items": ["a", "b"]}},
                     "resourceAttributes": {"verb": "get", "resource": "pods"}}}),
        );
        let review = decode(&bytes).unwrap();
        assert_eq!(review["spec"]["extra"]["scopes"], json!(["a", "b"]));
        assert_eq!(review["spec"]["resourceAttributes"]["verb"], "get");
    }

    /// The schema a property or `$ref` points to.
    fn resolve<'a>(schema: &'a Value, definitions: &'a Map<String, Value>) -> &'a Value {
        let reference = schema["$ref"].as_str().or_else(|| schema["allOf"][0]["$ref"].as_str());
        match reference.and_then(|r| r.rsplit('/').next()) {
            Some(name) => definitions.get(name).unwrap_or(&Value::Null),
            None => schema,
        }
    }

    fn is_special(message: &MessageDescriptor) -> bool {
        matches!(
            message.full_name(),
            TIME | MICRO_TIME | DURATION | INT_OR_STRING | QUANTITY | QUANTITY_VALUE | RAW_EXTENSION | FIELDS_V1
        ) || is_items_wrapper(message)
            || (message.full_name().starts_with("apiextensions_apiserver.")
                && message.name().starts_with("JSON")
                && message.name() != "JSONSchemaProps")
    }

    /// Checks that every field of `message` is a property of `schema`,
    /// recursively; collects the mismatches.
    fn walk(
        message: &MessageDescriptor,
        schema: &Value,
        definitions: &Map<String, Value>,
        visited: &mut std::collections::HashSet<String>,
        mismatches: &mut Vec<String>,
    ) {
        if is_special(message) || !visited.insert(message.full_name().to_owned()) {
            return;
        }
        let schema = resolve(schema, definitions);
        let Some(properties) = schema["properties"].as_object() else {
            return;
        };
        for field in message.fields() {
            if is_inline(message.full_name(), field.name()) {
                // Its fields belong to this schema.
                let inlined = field.kind().as_message().cloned().expect("a message");
                walk_inline(&inlined, schema, definitions, visited, mismatches);
                continue;
            }
            let name = json_name(message, &field);
            let Some(property) = properties.get(&name) else {
                mismatches.push(format!("{}.{}", message.full_name(), field.name()));
                continue;
            };
            let (nested, property) = if field.is_map() {
                let value = field.kind().as_message().expect("map entry").map_entry_value_field();
                (value.kind().as_message().cloned(), resolve(property, definitions)["additionalProperties"].clone())
            } else if field.is_list() {
                (field.kind().as_message().cloned(), resolve(property, definitions)["items"].clone())
            } else {
                (field.kind().as_message().cloned(), property.clone())
            };
            if let Some(nested) = nested {
                walk(&nested, &property, definitions, visited, mismatches);
            }
        }
    }

    /// An inline message checked against its parent's schema (it may be
    /// visited elsewhere as a message of its own, so not marked visited).
    fn walk_inline(
        message: &MessageDescriptor,
        parent: &Value,
        definitions: &Map<String, Value>,
        visited: &mut std::collections::HashSet<String>,
        mismatches: &mut Vec<String>,
    ) {
        let was_visited = visited.remove(message.full_name());
        walk(message, parent, definitions, visited, mismatches);
        if !was_visited {
            visited.remove(message.full_name());
        }
    }

    /// The transcoder writes proto field names as JSON names: check that
    /// they are the names of the `k8s-openapi` schemas, through every
    /// nested type of every built-in kind.
    #[test]
    fn proto_field_names_are_the_json_names_of_every_builtin_kind() {
        use crate::api::KindSchema;
        let registry = crate::api::Registry::builtin();
        let mut generator = k8s_openapi::schemars::SchemaGenerator::default();
        let mut roots = Vec::new();
        for group in registry.groups() {
            for version in registry.versions(group) {
                for info in registry.resources(group, &version) {
                    if let Some(KindSchema::Typed(schema)) = &info.schema {
                        let root = serde_json::to_value(schema(&mut generator)).unwrap();
                        roots.push((info.api_version(), info.kind.clone(), root));
                    }
                }
            }
        }
        let definitions: Map<String, Value> =
            generator.definitions().iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        let mut visited = std::collections::HashSet::new();
        let mut mismatches = Vec::new();
        for (api_version, kind, root) in &roots {
            let message =
                message_for(api_version, kind).unwrap_or_else(|| panic!("no message for {api_version} {kind}"));
            walk(&message, root, &definitions, &mut visited, &mut mismatches);
        }
        assert!(roots.len() > 30, "{}", roots.len());
        assert!(visited.len() > 150, "walked only {} messages", visited.len());
        assert_eq!(mismatches, Vec::<String>::new());
    }

    #[test]
    fn renamed_fields() {
        let bytes = encode_for_test(
            "admissionregistration.k8s.io/v1",
            "ValidatingWebhookConfiguration",
            &json!({"metadata": {"name": "v"}, "webhooks": [{"name": "w.example.com",
                    "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}]}]}),
        );
        let decoded = decode(&bytes).unwrap();
        assert_eq!(decoded["webhooks"][0]["name"], "w.example.com");
        assert_eq!(decoded["webhooks"][0]["rules"][0]["resources"], json!(["pods"]));
        assert_eq!(decoded["webhooks"][0]["rules"][0]["operations"], json!(["CREATE"]));
    }

    #[test]
    fn delete_options() {
        let bytes = encode_for_test(
            "meta.k8s.io/v1",
            "DeleteOptions",
            &json!({"gracePeriodSeconds": 0, "propagationPolicy": "Foreground"}),
        );
        assert_eq!(
            decode(&bytes).unwrap(),
            json!({"apiVersion": "meta.k8s.io/v1", "kind": "DeleteOptions",
                   "gracePeriodSeconds": 0, "propagationPolicy": "Foreground"})
        );
    }

    #[test]
    fn scale() {
        let scale = json!({"metadata": {"name": "web", "namespace": "default", "resourceVersion": "7"},
                           "spec": {"replicas": 4}});
        let bytes = encode_for_test("autoscaling/v1", "Scale", &scale);
        let decoded = decode(&bytes).unwrap();
        assert_eq!(decoded["kind"], "Scale");
        assert_eq!(decoded["spec"]["replicas"], 4);
        assert_eq!(decoded["metadata"]["resourceVersion"], "7");
    }

    #[test]
    fn malformed_bodies_are_bad_requests() {
        assert_eq!(decode(b"{}").unwrap_err().code, 400);
        assert_eq!(decode(b"k8s\0\xff\xff\xff").unwrap_err().code, 400);
        let mut bytes = encode_for_test("v1", "Namespace", &json!({"metadata": {"name": "x"}}));
        bytes.truncate(bytes.len() - 2);
        assert_eq!(decode(&bytes).unwrap_err().code, 400);
    }
}
