//! Limits on keys, values and transactions, and the checks every backend runs
//! before it writes anything.
//!
//! The numbers are etcd's defaults, which the Kubernetes API server is built
//! around: 1.5 MiB per request value and 128 operations per transaction.

use std::time::Duration;

use crate::error::{Error, Result};

/// Largest value a key may hold, in bytes (etcd's `--max-request-bytes`).
pub const MAX_VALUE_BYTES: usize = 3 * 512 * 1024;

/// Most operations (compares and writes and reads together) in one transaction
/// (etcd's `--max-txn-ops`).
pub const MAX_TXN_OPS: usize = 128;

/// Longest key, in bytes.
pub const MAX_KEY_BYTES: usize = 8 * 1024;

/// Longest TTL a key may carry (ten years).
pub const MAX_TTL: Duration = Duration::from_secs(10 * 365 * 24 * 3600);

/// Checks that `key` may be stored: non-empty, at most [`MAX_KEY_BYTES`],
/// starting with `/`, and free of control characters (NUL separates keys
/// from revisions in on-disk encodings).
pub fn validate_key(key: &str) -> Result<()> {
    let reason = if key.is_empty() {
        Some("key is empty")
    } else if key.len() > MAX_KEY_BYTES {
        Some("key is longer than 8 KiB")
    } else if !key.starts_with('/') {
        Some("key must start with '/'")
    } else if key.chars().any(char::is_control) {
        Some("key contains a control character")
    } else {
        None
    };
    match reason {
        None => Ok(()),
        Some(reason) => Err(Error::InvalidKey { key: truncate(key), reason }),
    }
}

/// Checks a value's size.
pub fn validate_value(key: &str, value: &[u8]) -> Result<()> {
    if value.len() > MAX_VALUE_BYTES {
        return Err(Error::ValueTooLarge { key: truncate(key), size: value.len(), limit: MAX_VALUE_BYTES });
    }
    Ok(())
}

/// Checks a TTL: at least a millisecond, at most [`MAX_TTL`].
pub fn validate_ttl(key: &str, ttl: Duration) -> Result<()> {
    if ttl < Duration::from_millis(1) {
        return Err(Error::InvalidTtl { key: truncate(key), reason: "TTL must be at least 1ms" });
    }
    if ttl > MAX_TTL {
        return Err(Error::InvalidTtl { key: truncate(key), reason: "TTL is longer than ten years" });
    }
    Ok(())
}

/// Keys quoted in errors are cut to a readable length.
fn truncate(key: &str) -> String {
    const SHOWN: usize = 256;
    if key.len() <= SHOWN {
        return key.to_owned();
    }
    let mut end = SHOWN;
    while !key.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &key[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys() {
        assert!(validate_key("/registry/pods/default/a").is_ok());
        assert!(validate_key("/").is_ok());
        assert!(validate_key("/ünïcode/é").is_ok());
        for bad in ["", "registry/pods", "/a\0b", "/a\nb"] {
            assert!(matches!(validate_key(bad), Err(Error::InvalidKey { .. })), "{bad:?}");
        }
        let long = format!("/{}", "x".repeat(MAX_KEY_BYTES));
        match validate_key(&long) {
            Err(Error::InvalidKey { key, .. }) => assert!(key.len() < 300),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn values_and_ttls() {
        assert!(validate_value("/k", &vec![0; MAX_VALUE_BYTES]).is_ok());
        assert!(matches!(
            validate_value("/k", &vec![0; MAX_VALUE_BYTES + 1]),
            Err(Error::ValueTooLarge { size, .. }) if size == MAX_VALUE_BYTES + 1
        ));
        assert!(validate_ttl("/k", Duration::from_secs(1)).is_ok());
        assert!(validate_ttl("/k", Duration::ZERO).is_err());
        assert!(validate_ttl("/k", MAX_TTL * 2).is_err());
    }
}
