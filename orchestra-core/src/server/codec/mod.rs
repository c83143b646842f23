//! The storage codec: how objects become the bytes the store holds, and
//! back.
//!
//! The store holds each object as compact JSON in its stored form (that of
//! another kind, for kinds kept in another kind's storage) without
//! `metadata.resourceVersion`: the store's revision of the key is that.
//! [`encode`] writes those bytes; [`decode_stored`] and [`decode_served`]
//! read them back into a [`Value`] with the resource version stamped.
//!
//! Where a kind's stored form is its served form, its objects are also
//! served straight from the stored bytes with the resource version spliced
//! in ([`raw`]); [`encode_with_splice`] records where, so that a create's
//! answer needs no parse at all.

pub(crate) mod raw;

use bytes::Bytes;
use orchestra_store::KeyValue;
use serde_json::Value;

use crate::api::meta::metadata_mut;
use crate::api::{ApiError, ResourceInfo};

/// Decodes a stored object and stamps its resource version.
pub(crate) fn decode_stored(kv: &KeyValue) -> Result<Value, ApiError> {
    let mut object: Value =
        serde_json::from_slice(&kv.value).map_err(|e| ApiError::internal(format!("stored object is corrupt: {e}")))?;
    metadata_mut(&mut object).insert("resourceVersion".into(), kv.mod_revision.to_string().into());
    Ok(object)
}

/// Decodes a stored object as the resource serves it: converted from the
/// storing kind, custom resource defaults applied, resource version stamped.
pub(crate) fn decode_served(resource: &ResourceInfo, kv: &KeyValue) -> Result<Value, ApiError> {
    let mut object = decode_stored(kv)?;
    resource.from_storage(&mut object);
    super::crd::served(resource, &mut object);
    Ok(object)
}

/// Encodes an object for storage: in its stored form, without its resource
/// version, which the store's revision provides.
pub(crate) fn encode(resource: &ResourceInfo, object: &Value) -> Bytes {
    encode_with_splice(resource, object).0
}

/// [`encode`], and the offset in the bytes where `metadata.resourceVersion`
/// belongs when the stored form is the served form (see [`raw::spliced`]);
/// `None` for kinds stored in another form.
pub(crate) fn encode_with_splice(resource: &ResourceInfo, object: &Value) -> (Bytes, Option<usize>) {
    if resource.storage.is_some() {
        let mut object = resource.to_storage(object.clone());
        metadata_mut(&mut object).remove("resourceVersion");
        let bytes = serde_json::to_vec(&object).expect("JSON values serialize");
        return (Bytes::from(bytes), None);
    }
    let mut out = Vec::with_capacity(512);
    let splice = write_without_resource_version(object, &mut out);
    (Bytes::from(out), splice)
}

/// Writes `object` as `serde_json::to_vec` would, but for
/// `metadata.resourceVersion`, and returns the offset where that field
/// belongs: after the metadata fields that sort before it (maps are sorted).
/// `None` if `metadata` is not an object.
fn write_without_resource_version(object: &Value, out: &mut Vec<u8>) -> Option<usize> {
    let Value::Object(map) = object else {
        write(out, object);
        return None;
    };
    let mut splice = None;
    out.push(b'{');
    for (i, (key, value)) in map.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        write(out, key);
        out.push(b':');
        let Value::Object(metadata) = value else {
            write(out, value);
            continue;
        };
        if key != "metadata" {
            write(out, value);
            continue;
        }
        out.push(b'{');
        let mut first = true;
        for (field, value) in metadata {
            if field == "resourceVersion" {
                continue;
            }
            if splice.is_none() && field.as_str() > "resourceVersion" {
                splice = Some(out.len());
            }
            if !first {
                out.push(b',');
            }
            first = false;
            write(out, field);
            out.push(b':');
            write(out, value);
        }
        splice.get_or_insert(out.len());
        out.push(b'}');
    }
    out.push(b'}');
    splice
}

/// Appends the compact JSON of a key or a value.
fn write<T: serde::Serialize + ?Sized>(out: &mut Vec<u8>, value: &T) {
    serde_json::to_writer(out, value).expect("strings and JSON values serialize");
}

#[cfg(test)]
mod tests {
    use serde_json::{Map, json};

    use super::*;

    /// Every subset of metadata fields around `resourceVersion`, with
    /// escapes, nesting and other top-level keys: the stored bytes are the
    /// object's without its resource version, and the splice gives the
    /// object's with it.
    #[test]
    fn stored_bytes_and_spliced_version_match_serde_json() {
        let fields = [
            ("annotations", json!({"a\"b": "line\nbreak", "é": "ü"})),
            ("creationTimestamp", json!("2026-11-30T00:00:00Z")),
            ("name", json!("x")),
            ("resourceVersion", json!("stale")),
            ("uid", json!("u-1")),
            ("zzz", json!([1, {"b": null}])),
        ];
        let resource = ResourceInfo::new("", "v1", "Thing", "things", true);
        for mask in 0..(1u32 << fields.len()) {
            let metadata: Map<String, Value> = fields
                .iter()
                .enumerate()
                .filter(|(i, _)| mask & (1 << i) != 0)
                .map(|(_, (k, v))| (k.to_string(), v.clone()))
                .collect();
            let object = json!({"apiVersion": "v1", "data": {"k": "v"}, "kind": "Thing", "metadata": metadata, "z": 1});
            let (bytes, splice) = encode_with_splice(&resource, &object);
            let mut without = object.clone();
            metadata_mut(&mut without).remove("resourceVersion");
            assert_eq!(bytes, serde_json::to_vec(&without).unwrap(), "mask {mask:b}");
            let mut with = without.clone();
            metadata_mut(&mut with).insert("resourceVersion".into(), "42".into());
            let kv = KeyValue {
                key: "k".into(),
                value: bytes.clone(),
                create_revision: 42,
                mod_revision: 42,
                version: 1,
                expires_at_ms: None,
            };
            let spliced = raw::spliced(&kv, splice.expect("metadata is a map"));
            assert_eq!(String::from_utf8(spliced).unwrap(), serde_json::to_string(&with).unwrap(), "mask {mask:b}");
        }
    }

    #[test]
    fn objects_without_metadata_maps_have_no_splice() {
        let resource = ResourceInfo::new("", "v1", "Thing", "things", true);
        for object in [json!({"kind": "Thing"}), json!({"metadata": "odd"}), json!([1, 2])] {
            let (bytes, splice) = encode_with_splice(&resource, &object);
            assert_eq!(bytes, serde_json::to_vec(&object).unwrap());
            assert_eq!(splice, None);
        }
    }
}
