//! Serving stored objects without decoding them.
//!
//! The store holds each object as compact JSON without its
//! `resourceVersion` (the store's revision is that). A list, a GET or a
//! create's answer of a kind whose stored form is its served form (no
//! conversion, no custom resource defaults) only has to put
//! `metadata.resourceVersion` back: it is
//! spliced into the stored bytes, with the object's fields left unparsed
//! ([`RawValue`]), instead of building a [`Value`] tree and serializing it
//! again. The bytes are those the decoding path gives: keys stay in the
//! stored (sorted) order and the resource version goes where a sorted map
//! puts it. A create's answer skips even that parse: its encoder recorded
//! where the field goes ([`spliced`]).

use std::borrow::Cow;
use std::collections::BTreeMap;

use orchestra_store::KeyValue;
use serde::Deserialize;
use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, Visitor};
use serde_json::Value;
use serde_json::value::RawValue;

use crate::api::{ApiError, LabelSelector, ResourceInfo};

/// True if objects of `resource` are served as they are stored, so
/// [`write_stamped`] can serve them.
pub(crate) fn is_servable(resource: &ResourceInfo) -> bool {
    resource.storage.is_none() && resource.custom.is_none()
}

/// An object key, borrowed from the stored bytes unless it has escapes.
struct Key<'a>(Cow<'a, str>);

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl<'de> Visitor<'de> for KeyVisitor {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an object key")
            }
            fn visit_borrowed_str<E>(self, key: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Borrowed(key)))
            }
            fn visit_str<E>(self, key: &str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(key.to_owned())))
            }
        }
        deserializer.deserialize_str(KeyVisitor)
    }
}

/// The stored object `kv` with its resource version set (see [`write_stamped`]).
pub(crate) fn stamped(kv: &KeyValue) -> Result<Vec<u8>, ApiError> {
    let mut out = Vec::with_capacity(kv.value.len() + 32);
    write_stamped(kv, &mut out)?;
    Ok(out)
}

/// The stored object `kv` with `"resourceVersion":"<revision>"` inserted at
/// `at`, the offset its encoder recorded (where a sorted `metadata` puts the
/// field): [`stamped`] without parsing the bytes.
pub(crate) fn spliced(kv: &KeyValue, at: usize) -> Vec<u8> {
    let (before, after) = kv.value.split_at(at);
    let mut out = Vec::with_capacity(kv.value.len() + 40);
    out.extend_from_slice(before);
    // A field before it needs a comma before; one after, a comma after.
    if before.last() != Some(&b'{') {
        out.push(b',');
    }
    out.extend_from_slice(b"\"resourceVersion\":\"");
    out.extend_from_slice(kv.mod_revision.to_string().as_bytes());
    out.push(b'"');
    if before.last() == Some(&b'{') && after.first() != Some(&b'}') {
        out.push(b',');
    }
    out.extend_from_slice(after);
    out
}

/// Appends the stored object `kv` to `out` with its resource version set:
/// the bytes `serde_json::to_vec` gives for the decoded object.
pub(crate) fn write_stamped(kv: &KeyValue, out: &mut Vec<u8>) -> Result<(), ApiError> {
    let start = out.len();
    let version = kv.mod_revision.to_string();
    let mut deserializer = serde_json::Deserializer::from_slice(&kv.value);
    let streamed = deserializer
        .deserialize_map(Stamp { out: &mut *out, version: &version, metadata: false })
        .and_then(|()| deserializer.end());
    if streamed.is_err() {
        // Metadata that is not an object, or a corrupt object: the
        // decoding path replaces the one and reports the other.
        out.truncate(start);
        let object = super::decode_stored(kv)?;
        serde_json::to_writer(out, &object).expect("JSON values serialize");
    }
    Ok(())
}

/// Copies an object (the stored object, or its `metadata` if `metadata`)
/// to `out` entry by entry, values unparsed, with `metadata` and its
/// `resourceVersion` put where a sorted map has them.
struct Stamp<'o, 'v> {
    out: &'o mut Vec<u8>,
    version: &'v str,
    metadata: bool,
}

impl Stamp<'_, '_> {
    fn key(&mut self, first: &mut bool, key: &str) {
        if !std::mem::take(first) {
            self.out.push(b',');
        }
        serde_json::to_writer(&mut *self.out, key).expect("writing to a Vec cannot fail");
        self.out.push(b':');
    }

    /// Writes what goes before `next` (`None`: the end) if not yet written.
    fn stamp_before(&mut self, first: &mut bool, stamped: &mut bool, next: Option<&str>) {
        let (name, value): (&str, &[u8]) =
            if self.metadata { ("resourceVersion", b"") } else { ("metadata", b"{\"resourceVersion\":") };
        if *stamped || next.is_some_and(|next| next <= name) {
            return;
        }
        *stamped = true;
        self.key(first, name);
        self.out.extend_from_slice(value);
        serde_json::to_writer(&mut *self.out, self.version).expect("writing to a Vec cannot fail");
        if !self.metadata {
            self.out.push(b'}');
        }
    }
}

impl<'de> Visitor<'de> for Stamp<'_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(mut self, mut map: A) -> Result<(), A::Error> {
        self.out.push(b'{');
        let (mut first, mut stamped) = (true, false);
        while let Some(Key(key)) = map.next_key::<Key<'de>>()? {
            if self.metadata && key == "resourceVersion" {
                map.next_value::<IgnoredAny>()?;
                continue;
            }
            self.stamp_before(&mut first, &mut stamped, Some(&key));
            self.key(&mut first, &key);
            if !self.metadata && key == "metadata" {
                map.next_value_seed(MetadataSeed(Stamp {
                    out: &mut *self.out,
                    version: self.version,
                    metadata: true,
                }))?;
                stamped = true;
            } else {
                let value: &RawValue = map.next_value()?;
                self.out.extend_from_slice(value.get().as_bytes());
            }
        }
        self.stamp_before(&mut first, &mut stamped, None);
        self.out.push(b'}');
        Ok(())
    }
}

/// The stored `metadata`, copied by [`Stamp`].
struct MetadataSeed<'o, 'v>(Stamp<'o, 'v>);

impl<'de> DeserializeSeed<'de> for MetadataSeed<'_, '_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_map(self.0)
    }
}

fn corrupt(error: serde_json::Error) -> ApiError {
    ApiError::internal(format!("stored object is corrupt: {error}"))
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
            assert_eq!(String::from_utf8(out).unwrap(), serde_json::to_string(&decoded).unwrap(), "{object}");
        }
    }

    #[test]
    fn corrupt_objects_are_errors() {
        let mut bad = kv(&json!({}));
        bad.value = Bytes::from_static(b"{\"metadata\": {");
        assert_eq!(write_stamped(&bad, &mut Vec::new()).unwrap_err().code, 500);
        assert_eq!(labels_match(&bad, &LabelSelector::parse("a=b").unwrap()).unwrap_err().code, 500);
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
