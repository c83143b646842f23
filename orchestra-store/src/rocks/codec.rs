//! On-disk encodings of [`RocksStore`](super::RocksStore).
//!
//! Column families and their records (integers big-endian so that byte order
//! is numeric order):
//!
//! | family | key | value |
//! |---|---|---|
//! | `kv`   | user key | the current [`KeyValue`] (see [`encode_kv`]) |
//! | `hist` | user key, `0x00`, revision | `1` + key-value, or `0` for a delete |
//! | `log`  | revision | the revision's changes: (kind, key, previous mod revision) |
//! | `ttl`  | deadline (ms), user key | mod revision the deadline belongs to |
//! | `meta` | name | `revision`, `compact_revision` |
//!
//! User keys never hold `0x00` (see [`validate_key`](crate::limits::validate_key)),
//! so `hist` keys sort by user key first, then by revision.

use bytes::Bytes;

use crate::error::{Error, Result};
use crate::kv::{EventKind, KeyValue, Revision};

/// Meta key of the current revision.
pub(super) const META_REVISION: &[u8] = b"revision";
/// Meta key of the compaction revision.
pub(super) const META_COMPACT: &[u8] = b"compact_revision";

const KV_HEADER: usize = 8 * 3 + 1 + 8;

fn corrupt(what: &str) -> Error {
    Error::Storage(format!("corrupt {what} record"))
}

fn read_i64(bytes: &[u8], at: usize) -> i64 {
    let mut buf = [0; 8];
    buf.copy_from_slice(&bytes[at..at + 8]);
    i64::from_be_bytes(buf)
}

/// Encodes a key-value's metadata and value (the key is stored in the record's key).
pub(super) fn encode_kv(kv: &KeyValue, out: &mut Vec<u8>) {
    out.reserve(KV_HEADER + kv.value.len());
    out.extend_from_slice(&kv.create_revision.to_be_bytes());
    out.extend_from_slice(&kv.mod_revision.to_be_bytes());
    out.extend_from_slice(&kv.version.to_be_bytes());
    out.push(kv.expires_at_ms.is_some() as u8);
    out.extend_from_slice(&kv.expires_at_ms.unwrap_or(0).to_be_bytes());
    out.extend_from_slice(&kv.value);
}

/// Decodes what [`encode_kv`] wrote.
pub(super) fn decode_kv(key: &str, bytes: &[u8]) -> Result<KeyValue> {
    if bytes.len() < KV_HEADER {
        return Err(corrupt("key-value"));
    }
    Ok(KeyValue {
        key: key.to_owned(),
        create_revision: read_i64(bytes, 0),
        mod_revision: read_i64(bytes, 8),
        version: read_i64(bytes, 16),
        expires_at_ms: (bytes[24] == 1).then(|| read_i64(bytes, 25)),
        value: Bytes::copy_from_slice(&bytes[KV_HEADER..]),
    })
}

/// The `hist` key of `key` at `revision`.
pub(super) fn hist_key(key: &str, revision: Revision) -> Vec<u8> {
    let mut out = Vec::with_capacity(key.len() + 9);
    out.extend_from_slice(key.as_bytes());
    out.push(0);
    out.extend_from_slice(&revision.to_be_bytes());
    out
}

/// Splits a `hist` key into user key and revision.
pub(super) fn split_hist_key(bytes: &[u8]) -> Result<(&str, Revision)> {
    if bytes.len() < 9 || bytes[bytes.len() - 9] != 0 {
        return Err(corrupt("history key"));
    }
    let key = std::str::from_utf8(&bytes[..bytes.len() - 9]).map_err(|_| corrupt("history key"))?;
    Ok((key, read_i64(bytes, bytes.len() - 8)))
}

/// A `hist` value: the key-value written, or `None` for a delete.
pub(super) fn encode_hist(kv: Option<&KeyValue>) -> Vec<u8> {
    match kv {
        None => vec![0],
        Some(kv) => {
            let mut out = vec![1];
            encode_kv(kv, &mut out);
            out
        }
    }
}

/// Decodes a `hist` value.
pub(super) fn decode_hist(key: &str, bytes: &[u8]) -> Result<Option<KeyValue>> {
    match bytes.first() {
        Some(0) => Ok(None),
        Some(1) => decode_kv(key, &bytes[1..]).map(Some),
        _ => Err(corrupt("history")),
    }
}

/// A revision as a `log` key.
pub(super) fn log_key(revision: Revision) -> [u8; 8] {
    revision.to_be_bytes()
}

/// One change recorded in the `log`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct LogEntry {
    pub kind: EventKind,
    pub key: String,
    /// Mod revision of the value before the change; 0 if the key was absent.
    pub prev_revision: Revision,
}

/// Encodes a revision's changes.
pub(super) fn encode_log(entries: &[LogEntry]) -> Vec<u8> {
    let mut out = Vec::with_capacity(entries.iter().map(|e| e.key.len() + 13).sum());
    for entry in entries {
        out.push(matches!(entry.kind, EventKind::Delete) as u8);
        out.extend_from_slice(&(entry.key.len() as u32).to_be_bytes());
        out.extend_from_slice(entry.key.as_bytes());
        out.extend_from_slice(&entry.prev_revision.to_be_bytes());
    }
    out
}

/// Decodes what [`encode_log`] wrote.
pub(super) fn decode_log(mut bytes: &[u8]) -> Result<Vec<LogEntry>> {
    let mut entries = Vec::new();
    while !bytes.is_empty() {
        if bytes.len() < 5 {
            return Err(corrupt("log"));
        }
        let kind = if bytes[0] == 1 { EventKind::Delete } else { EventKind::Put };
        let len = u32::from_be_bytes([bytes[1], bytes[2], bytes[3], bytes[4]]) as usize;
        if bytes.len() < 5 + len + 8 {
            return Err(corrupt("log"));
        }
        let key = std::str::from_utf8(&bytes[5..5 + len]).map_err(|_| corrupt("log"))?.to_owned();
        let prev_revision = read_i64(bytes, 5 + len);
        entries.push(LogEntry { kind, key, prev_revision });
        bytes = &bytes[5 + len + 8..];
    }
    Ok(entries)
}

/// The `ttl` key of `key` expiring at `deadline_ms`.
pub(super) fn ttl_key(deadline_ms: i64, key: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(8 + key.len());
    out.extend_from_slice(&deadline_ms.max(0).to_be_bytes());
    out.extend_from_slice(key.as_bytes());
    out
}

/// Splits a `ttl` key into deadline and user key.
pub(super) fn split_ttl_key(bytes: &[u8]) -> Result<(i64, &str)> {
    if bytes.len() < 9 {
        return Err(corrupt("ttl key"));
    }
    let key = std::str::from_utf8(&bytes[8..]).map_err(|_| corrupt("ttl key"))?;
    Ok((read_i64(bytes, 0), key))
}

/// Decodes an i64 stored as 8 big-endian bytes.
pub(super) fn decode_i64(bytes: &[u8]) -> Result<i64> {
    if bytes.len() != 8 {
        return Err(corrupt("integer"));
    }
    Ok(read_i64(bytes, 0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips() {
        let kv = KeyValue {
            key: "/a/b".into(),
            value: Bytes::from_static(b"hello"),
            create_revision: 3,
            mod_revision: 9,
            version: 4,
            expires_at_ms: Some(1_700_000_000_000),
        };
        let mut buf = Vec::new();
        encode_kv(&kv, &mut buf);
        assert_eq!(decode_kv("/a/b", &buf).unwrap(), kv);
        assert_eq!(decode_hist("/a/b", &encode_hist(Some(&kv))).unwrap(), Some(kv.clone()));
        assert_eq!(decode_hist("/a/b", &encode_hist(None)).unwrap(), None);
        assert_eq!(split_hist_key(&hist_key("/a/b", 77)).unwrap(), ("/a/b", 77));
        assert_eq!(split_ttl_key(&ttl_key(5, "/x")).unwrap(), (5, "/x"));
        let entries = vec![
            LogEntry { kind: EventKind::Put, key: "/a".into(), prev_revision: 0 },
            LogEntry { kind: EventKind::Delete, key: "/bé".into(), prev_revision: 12 },
        ];
        assert_eq!(decode_log(&encode_log(&entries)).unwrap(), entries);
        assert!(decode_kv("/k", b"short").is_err());
        assert!(decode_log(&[0, 0, 0, 0, 9, b'/']).is_err());
    }

    #[test]
    fn history_keys_sort_by_key_then_revision() {
        let mut keys = [hist_key("/a/b", 1), hist_key("/a", 10), hist_key("/a", 2), hist_key("/a0", 1)];
        keys.sort();
        let order: Vec<_> = keys.iter().map(|k| split_hist_key(k).unwrap()).collect();
        assert_eq!(order, [("/a", 2), ("/a", 10), ("/a/b", 1), ("/a0", 1)]);
    }
}
