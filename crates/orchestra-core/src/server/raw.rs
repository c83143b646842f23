//! Serving stored objects without decoding them.
//!
//! The store holds each object as compact JSON without its
//! `resourceVersion` (the store's revision is that). A list or watch of a
//! kind whose stored form is its served form (no conversion, no custom
//! resource defaults) only has to put `metadata.resourceVersion` back: it is
//! spliced into the stored bytes, with the object's fields left unparsed
//! ([`RawValue`]), instead of building a [`Value`] tree and serializing it
//! again. The bytes are those the decoding path gives: keys stay in the
//! stored (sorted) order and the resource version goes where a sorted map
//! puts it.

use std::collections::BTreeMap;

use orchestra_store::KeyValue;
use serde::de::{Deserializer, MapAccess, Visitor};
use serde_json::Value;
use serde_json::value::RawValue;

use crate::api::{ApiError, LabelSelector, ResourceInfo};

/// True if objects of `resource` are served as they are stored, so
/// [`write_stamped`] can serve them.
pub(crate) fn is_servable(resource: &ResourceInfo) -> bool {
    resource.storage.is_none() && resource.custom.is_none()
}

/// The entries of a JSON object in their order, values unparsed.
struct Entries<'a>(Vec<(String, &'a RawValue)>);

impl<'de> serde::Deserialize<'de> for Entries<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct EntriesVisitor;
        impl<'de> Visitor<'de> for EntriesVisitor {
            type Value = Entries<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Entries<'de>, A::Error> {
                let mut entries = Vec::with_capacity(map.size_hint().unwrap_or(8));
                while let Some(entry) = map.next_entry::<String, &'de RawValue>()? {
                    entries.push(entry);
                }
                Ok(Entries(entries))
            }
        }
        deserializer.deserialize_map(EntriesVisitor)
    }
}

fn corrupt(error: serde_json::Error) -> ApiError {
    ApiError::internal(format!("stored object is corrupt: {error}"))
}

fn write_key(out: &mut Vec<u8>, key: &str) {
    serde_json::to_writer(&mut *out, key).expect("writing to a Vec cannot fail");
    out.push(b':');
}

/// Appends the stored object `kv` to `out` with its resource version set:
/// the bytes `serde_json::to_vec` gives for the decoded object.
pub(crate) fn write_stamped(kv: &KeyValue, out: &mut Vec<u8>) -> Result<(), ApiError> {
    let Entries(top) = serde_json::from_slice(&kv.value).map_err(corrupt)?;
    let version = kv.mod_revision.to_string();
    out.push(b'{');
    let mut first = true;
    let mut stamped = false;
    let mut separate = |out: &mut Vec<u8>| {
        if !std::mem::take(&mut first) {
            out.push(b',');
        }
    };
    for (key, value) in &top {
        if key == "metadata" {
            separate(out);
            write_key(out, key);
            if value.get().starts_with('{') {
                write_metadata(value, &version, out)?;
            } else {
                // Decoding replaces metadata that is not an object.
                write_metadata_of(&[], &version, out);
            }
            stamped = true;
        } else {
            if !stamped && key.as_str() > "metadata" {
                // No metadata stored: decoding creates it here.
                separate(out);
                write_key(out, "metadata");
                write_metadata_of(&[], &version, out);
                stamped = true;
            }
            separate(out);
            write_key(out, key);
            out.extend_from_slice(value.get().as_bytes());
        }
    }
    if !stamped {
        separate(out);
        write_key(out, "metadata");
        write_metadata_of(&[], &version, out);
    }
    out.push(b'}');
    Ok(())
}

fn write_metadata(metadata: &RawValue, version: &str, out: &mut Vec<u8>) -> Result<(), ApiError> {
    let Entries(fields) = serde_json::from_str(metadata.get()).map_err(corrupt)?;
    write_metadata_of(&fields, version, out);
    Ok(())
}

/// Writes metadata `fields` with `resourceVersion` in its sorted place
/// (replacing any stored one).
fn write_metadata_of(fields: &[(String, &RawValue)], version: &str, out: &mut Vec<u8>) {
    out.push(b'{');
    let mut first = true;
    let mut stamped = false;
    for (key, value) in fields {
        if key == "resourceVersion" {
            continue;
        }
        if !stamped && key.as_str() > "resourceVersion" {
            if !std::mem::take(&mut first) {
                out.push(b',');
            }
            write_key(out, "resourceVersion");
            serde_json::to_writer(&mut *out, version).expect("writing to a Vec cannot fail");
            stamped = true;
        }
        if !std::mem::take(&mut first) {
            out.push(b',');
        }
        write_key(out, key);
        out.extend_from_slice(value.get().as_bytes());
    }
    if !stamped {
        if !first {
            out.push(b',');
        }
        write_key(out, "resourceVersion");
        serde_json::to_writer(&mut *out, version).expect("writing to a Vec cannot fail");
    }
    out.push(b'}');
}

/// True if the stored object's labels satisfy `selector` (read from its
/// metadata alone).
pub(crate) fn labels_match(kv: &KeyValue, selector: &LabelSelector) -> Result<bool, ApiError> {
    if selector.is_empty() {
        return Ok(true);
    }
    #[derive(serde::Deserialize)]
    struct Object {
        #[serde(default)]
        metadata: Option<Metadata>,
    }
    #[derive(serde::Deserialize)]
    struct Metadata {
        #[serde(default)]
        labels: Option<BTreeMap<String, Value>>,
    }
    let object: Object = serde_json::from_slice(&kv.value).map_err(corrupt)?;
    let labels = object
        .metadata
        .and_then(|m| m.labels)
        .unwrap_or_default()
        .into_iter()
        .filter_map(|(k, v)| match v {
            Value::String(v) => Some((k, v)),
            _ => None,
        })
        .collect();
    Ok(selector.matches(&labels))
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use serde_json::json;

    fn kv(value: &Value) -> KeyValue {
        KeyValue {
            key: "/registry/x".into(),
            value: Bytes::from(serde_json::to_vec(value).unwrap()),
            create_revision: 3,
            mod_revision: 42,
            version: 1,
            expires_at_ms: None,
        }
    }

    #[test]
    fn stamped_bytes_are_the_decoded_objects() {
        let objects = [
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"name": "c", "namespace": "d", "labels": {"a": "b"}, "uid": "u"},
                   "data": {"k": "v\n\"q\" ü"}}),
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"annotations": {}, "name": "p"},
                   "spec": {"template": {"metadata": {"name": "inner"}}}, "status": {"phase": "Pending"}}),
            json!({"apiVersion": "v1", "kind": "X", "metadata": {"resourceVersion": "7", "zzz": 1}}),
            json!({"metadata": {}}),
            json!({"kind": "K", "metadata": "not an object", "spec": 1}),
            json!({"apiVersion": "v1", "spec": {"x": 1.5e300, "y": -0.0, "z": [null, true]}}),
            json!({"apiVersion": "v1", "kind": "K", "\u{1}weird \\ key": 1, "zeta": 2}),
            json!({}),
        ];
        for object in &objects {
            let kv = kv(object);
            let mut decoded = object.clone();
            crate::api::meta::metadata_mut(&mut decoded).insert("resourceVersion".into(), "42".into());
            let mut out = Vec::new();
            write_stamped(&kv, &mut out).unwrap();
            assert_eq!(
                String::from_utf8(out).unwrap(),
                serde_json::to_string(&decoded).unwrap(),
                "{object}"
            );
        }
    }

    #[test]
    fn corrupt_objects_are_errors() {
        let mut bad = kv(&json!({}));
        bad.value = Bytes::from_static(b"{\"metadata\": {");
        assert_eq!(write_stamped(&bad, &mut Vec::new()).unwrap_err().code, 500);
        assert_eq!(
            labels_match(&bad, &LabelSelector::parse("a=b").unwrap()).unwrap_err().code,
            500
        );
    }

    #[test]
    fn labels_are_read_from_the_metadata() {
        let object = kv(&json!({"metadata": {"labels": {"app": "web", "n": 1}}, "spec": {"labels": {"app": "db"}}}));
        let matches = |selector: &str| labels_match(&object, &LabelSelector::parse(selector).unwrap()).unwrap();
        assert!(matches(""));
        assert!(matches("app=web"));
        assert!(!matches("app=db"));
        assert!(matches("!n"), "non-string labels are not labels");
        assert!(!matches("tier"));
        let bare = kv(&json!({"kind": "K"}));
        assert!(labels_match(&bare, &LabelSelector::parse("!app").unwrap()).unwrap());
    }
}
