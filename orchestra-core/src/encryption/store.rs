//! [`EncryptedStore`]: the store decorator that applies an
//! [`EncryptionConfig`].

use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use futures::StreamExt as _;
use orchestra_store::{
    CompareTarget, Error, Event, EventFilter, KeyValue, Op, OpResponse, RangeRequest, RangeResponse, Result, Revision,
    Store, StoreStatus, Txn, TxnResponse, WatchRequest, WatchStream,
};

use super::{ENCRYPTED_PREFIX, EncryptionConfig, EncryptionError};

/// A [`Store`] that encrypts the values of the resources an
/// [`EncryptionConfig`] names on every write and decrypts them on every
/// read; other keys pass through unchanged.
///
/// A value that does not decrypt fails the read that met it with
/// [`Error::Storage`] naming the key and the reason (the API server
/// answers 500 for that object or list); a watch that meets one ends with
/// that error. Transactions may not compare the value of an encrypted key
/// (the stored bytes differ at every write).
///
/// ```
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// use std::sync::Arc;
/// use orchestra_core::encryption::{EncryptedStore, EncryptionConfig, ProviderConfig, ProviderKey};
/// use orchestra_store::{MemStore, Store};
///
/// let config = EncryptionConfig::new()
///     .with_rule(&["secrets"], vec![ProviderConfig::AesGcm { keys: vec![ProviderKey::new("k1", [1u8; 32])] }])?;
/// let raw = Arc::new(MemStore::new());
/// let store = EncryptedStore::new(raw.clone(), &config);
/// store.put("/registry/secrets/default/s", "{}".into(), None).await?;
/// assert_eq!(store.get("/registry/secrets/default/s").await?.unwrap().value, "{}");
/// let stored = raw.get("/registry/secrets/default/s").await?.unwrap().value;
/// assert!(stored.starts_with(b"k8s:enc:aesgcm:v1:k1:"));
/// # Ok(()) }
/// # tokio::runtime::Runtime::new().unwrap().block_on(demo()).unwrap();
/// ```
pub struct EncryptedStore {
    inner: Arc<dyn Store>,
    config: Arc<EncryptionConfig>,
}

impl std::fmt::Debug for EncryptedStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EncryptedStore").field("config", &self.config).finish_non_exhaustive()
    }
}

impl EncryptedStore {
    /// Encrypts `inner`'s values as `config` says.
    pub fn new(inner: Arc<dyn Store>, config: &EncryptionConfig) -> EncryptedStore {
        EncryptedStore { inner, config: Arc::new(config.clone()) }
    }
}

/// What a value's provider prefix is: up to the fifth `:` of a `k8s:enc:`
/// value (`k8s:enc:<scheme>:v1:<key>:`).
fn value_prefix(value: &[u8]) -> String {
    let end = value.iter().enumerate().filter(|(_, b)| **b == b':').nth(4).map_or(value.len().min(40), |(i, _)| i + 1);
    String::from_utf8_lossy(&value[..end]).into_owned()
}

fn storage_error(error: EncryptionError) -> Error {
    Error::Storage(error.to_string())
}

/// The encrypted form of `value`, written to `key`.
fn encrypt(config: &EncryptionConfig, key: &str, value: Bytes) -> Result<Bytes> {
    let Some(providers) = config.providers(key) else {
        return Ok(value);
    };
    let writer = &providers[0];
    if writer.prefix().is_empty() {
        return Ok(value);
    }
    let sealed = writer.encrypt(&value, key.as_bytes()).map_err(storage_error)?;
    let mut out = Vec::with_capacity(writer.prefix().len() + sealed.len());
    out.extend_from_slice(writer.prefix().as_bytes());
    out.extend_from_slice(&sealed);
    Ok(out.into())
}

/// The plaintext of the value stored under `key`.
fn decrypt(config: &EncryptionConfig, key: &str, value: Bytes) -> Result<Bytes> {
    // Delete events carry an empty value; nothing is ever encrypted to it.
    if value.is_empty() {
        return Ok(value);
    }
    let Some(providers) = config.providers(key) else {
        if value.starts_with(ENCRYPTED_PREFIX.as_bytes()) {
            let prefix = value_prefix(&value);
            return Err(storage_error(EncryptionError::NotConfigured { key: key.to_owned(), prefix }));
        }
        return Ok(value);
    };
    let encrypted = value.starts_with(ENCRYPTED_PREFIX.as_bytes());
    let provider = providers.iter().find(|p| match p.prefix() {
        "" => !encrypted,
        prefix => value.starts_with(prefix.as_bytes()),
    });
    let Some(provider) = provider else {
        let prefix = if encrypted { value_prefix(&value) } else { String::new() };
        return Err(storage_error(EncryptionError::UnknownPrefix { key: key.to_owned(), prefix }));
    };
    if provider.prefix().is_empty() {
        return Ok(value);
    }
    provider.decrypt(&value[provider.prefix().len()..], key.as_bytes()).map(Bytes::from).map_err(|reason| {
        storage_error(EncryptionError::Decrypt { key: key.to_owned(), provider: provider.prefix().to_owned(), reason })
    })
}

/// True if `value`, stored under `key`, is not what writing its plaintext
/// now would store: another provider than the first wrote it.
fn is_stale(config: &EncryptionConfig, key: &str, value: &[u8]) -> bool {
    let Some(providers) = config.providers(key) else {
        return false;
    };
    match providers[0].prefix() {
        "" => value.starts_with(ENCRYPTED_PREFIX.as_bytes()),
        prefix => !value.starts_with(prefix.as_bytes()),
    }
}

fn decrypt_kv(config: &EncryptionConfig, mut kv: KeyValue) -> Result<KeyValue> {
    kv.value = decrypt(config, &kv.key, std::mem::take(&mut kv.value))?;
    Ok(kv)
}

fn decrypt_opt(config: &EncryptionConfig, kv: Option<KeyValue>) -> Result<Option<KeyValue>> {
    kv.map(|kv| decrypt_kv(config, kv)).transpose()
}

fn encrypt_ops(config: &EncryptionConfig, ops: Vec<Op>) -> Result<Vec<Op>> {
    ops.into_iter()
        .map(|op| match op {
            Op::Put { key, value, ttl } => {
                let value = encrypt(config, &key, value)?;
                Ok(Op::Put { key, value, ttl })
            }
            other => Ok(other),
        })
        .collect()
}

#[async_trait]
impl Store for EncryptedStore {
    async fn range(&self, request: RangeRequest) -> Result<RangeResponse> {
        let mut response = self.inner.range(request).await?;
        response.kvs = std::mem::take(&mut response.kvs)
            .into_iter()
            .map(|kv| decrypt_kv(&self.config, kv))
            .collect::<Result<_>>()?;
        Ok(response)
    }

    async fn txn(&self, mut txn: Txn) -> Result<TxnResponse> {
        if let Some(compare) = txn
            .compares
            .iter()
            .find(|c| matches!(c.target, CompareTarget::Value(_)) && self.config.providers(&c.key).is_some())
        {
            return Err(Error::Storage(format!("cannot compare the value of the encrypted key {:?}", compare.key)));
        }
        txn.success = encrypt_ops(&self.config, std::mem::take(&mut txn.success))?;
        txn.failure = encrypt_ops(&self.config, std::mem::take(&mut txn.failure))?;
        let mut response = self.inner.txn(txn).await?;
        response.responses = std::mem::take(&mut response.responses)
            .into_iter()
            .map(|op| {
                Ok(match op {
                    OpResponse::Put { kv, prev_kv } => OpResponse::Put {
                        kv: decrypt_kv(&self.config, kv)?,
                        prev_kv: decrypt_opt(&self.config, prev_kv)?,
                    },
                    OpResponse::Delete { prev_kv } => {
                        OpResponse::Delete { prev_kv: decrypt_opt(&self.config, prev_kv)? }
                    }
                    OpResponse::Get { kv } => OpResponse::Get { kv: decrypt_opt(&self.config, kv)? },
                })
            })
            .collect::<Result<_>>()?;
        Ok(response)
    }

    async fn watch(&self, mut request: WatchRequest) -> Result<WatchStream> {
        // The inner store's events hold ciphertext where a key is
        // encrypted: a filter would judge those wrongly, so they pass it
        // (and the watcher, which sees them decrypted, decides).
        if let Some(filter) = request.filter.take() {
            let config = self.config.clone();
            request.filter = Some(EventFilter::new(move |event: &Event| {
                let encrypted = |kv: &KeyValue| kv.value.starts_with(ENCRYPTED_PREFIX.as_bytes());
                config.providers(&event.kv.key).is_some()
                    || encrypted(&event.kv)
                    || event.prev_kv.as_ref().is_some_and(encrypted)
                    || filter.accepts(event)
            }));
        }
        let stream = self.inner.watch(request).await?;
        let config = self.config.clone();
        let decrypted = stream.map(move |item| {
            let mut response = item?;
            response.events = std::mem::take(&mut response.events)
                .into_iter()
                .map(|mut event| {
                    event.kv = decrypt_kv(&config, event.kv)?;
                    event.prev_kv = decrypt_opt(&config, event.prev_kv)?;
                    Ok(event)
                })
                .collect::<Result<_>>()?;
            Ok(response)
        });
        // A watch ends right after its first error, as the trait says,
        // without waiting for another event.
        let mut decrypted = Box::pin(decrypted);
        let mut failed = false;
        Ok(Box::pin(futures::stream::poll_fn(move |cx| {
            if failed {
                return std::task::Poll::Ready(None);
            }
            let item = futures::ready!(decrypted.poll_next_unpin(cx));
            failed = matches!(item, Some(Err(_)));
            std::task::Poll::Ready(item)
        })))
    }

    async fn compact(&self, revision: Revision) -> Result<()> {
        self.inner.compact(revision).await
    }

    async fn status(&self) -> Result<StoreStatus> {
        self.inner.status().await
    }

    async fn stale(&self, key: &str, revision: Revision) -> Result<bool> {
        if self.config.providers(key).is_none() {
            return Ok(false);
        }
        let stored = self.inner.get(key).await?;
        Ok(stored.is_some_and(|kv| kv.mod_revision == revision && is_stale(&self.config, key, &kv.value)))
    }
}

#[cfg(test)]
mod tests {
    use orchestra_store::{KeyRange, MemStore};

    use super::super::{ProviderConfig, ProviderKey};
    use super::*;

    fn config(providers: Vec<ProviderConfig>) -> EncryptionConfig {
        EncryptionConfig::new().with_rule(&["secrets"], providers).unwrap()
    }

    fn aes(name: &str, byte: u8) -> ProviderConfig {
        ProviderConfig::AesGcm { keys: vec![ProviderKey::new(name, [byte; 32])] }
    }

    fn sbox(name: &str, byte: u8) -> ProviderConfig {
        ProviderConfig::Secretbox { keys: vec![ProviderKey::new(name, [byte; 32])] }
    }

    const KEY: &str = "/registry/secrets/default/s";

    #[tokio::test]
    async fn every_read_path_decrypts_and_only_configured_keys_are_encrypted() {
        let raw = Arc::new(MemStore::new());
        let store = EncryptedStore::new(raw.clone(), &config(vec![aes("k1", 1)]));
        let mut watch = store.watch(WatchRequest::new(KeyRange::prefix("/registry/"))).await.unwrap();
        let created = store.create(KEY, "v1".into(), None).await.unwrap();
        assert_eq!(created.value, "v1", "the put's response");
        store.put("/registry/pods/default/p", "pod".into(), None).await.unwrap();
        assert_eq!(raw.get("/registry/pods/default/p").await.unwrap().unwrap().value, "pod");
        let stored = raw.get(KEY).await.unwrap().unwrap().value;
        assert!(stored.starts_with(b"k8s:enc:aesgcm:v1:k1:"));
        store.update(KEY, "v2".into(), created.mod_revision, None).await.unwrap();
        let listed = store.range(RangeRequest::new(KeyRange::prefix("/registry/"))).await.unwrap();
        let values: Vec<&[u8]> = listed.kvs.iter().map(|kv| kv.value.as_ref()).collect();
        assert_eq!(values, [&b"pod"[..], b"v2"]);
        let deleted = store.delete(KEY, None).await.unwrap();
        assert_eq!(deleted.value, "v2", "the delete's previous value");
        let txn = Txn::new().and_then([Op::put(KEY, "v3"), Op::get(KEY)]);
        let response = store.txn(txn).await.unwrap();
        assert!(matches!(&response.responses[1], OpResponse::Get { kv: Some(kv) } if kv.value == "v3"));

        let mut seen = Vec::new();
        while seen.len() < 5 {
            for event in watch.next().await.unwrap().unwrap().events {
                let prev = event.prev_kv.map(|kv| kv.value);
                seen.push((event.kv.value, prev));
            }
        }
        let v = |s: &'static str| Bytes::from(s);
        assert_eq!(
            seen,
            [(v("v1"), None), (v("pod"), None), (v("v2"), Some(v("v1"))), (v(""), Some(v("v2"))), (v("v3"), None)]
        );
        let compare = Txn::new().when([orchestra_store::Compare::value(KEY, orchestra_store::CompareOp::Equal, "v3")]);
        assert!(matches!(store.txn(compare).await, Err(Error::Storage(_))));
    }

    #[tokio::test]
    async fn rotation_reads_every_key_and_writes_with_the_first() {
        // (writes with, then reads with, readable and stale?)
        type Case = (Vec<ProviderConfig>, Vec<ProviderConfig>, Result<(&'static str, bool), &'static str>);
        let cases: Vec<Case> = vec![
            (vec![aes("old", 1)], vec![aes("new", 2), aes("old", 1)], Ok(("k8s:enc:aesgcm:v1:new:", true))),
            (vec![sbox("old", 1)], vec![aes("new", 2), sbox("old", 1)], Ok(("k8s:enc:aesgcm:v1:new:", true))),
            (
                vec![ProviderConfig::Identity],
                vec![sbox("new", 2), ProviderConfig::Identity],
                Ok(("k8s:enc:secretbox:v1:new:", true)),
            ),
            (vec![aes("old", 1)], vec![ProviderConfig::Identity, aes("old", 1)], Ok(("", true))),
            (vec![aes("old", 1)], vec![aes("old", 1), aes("new", 2)], Ok(("k8s:enc:aesgcm:v1:old:", false))),
            (vec![ProviderConfig::Identity], vec![ProviderConfig::Identity, aes("new", 2)], Ok(("", false))),
            (vec![aes("old", 1)], vec![aes("new", 2)], Err("no configured encryption provider")),
            (vec![aes("old", 1)], vec![aes("old", 2)], Err("does not authenticate")),
            (vec![ProviderConfig::Identity], vec![aes("new", 2)], Err("no configured encryption provider")),
            (vec![aes("old", 1)], vec![ProviderConfig::Identity], Err("no configured encryption provider")),
        ];
        for (i, (before, after, expected)) in cases.into_iter().enumerate() {
            let raw: Arc<dyn Store> = Arc::new(MemStore::new());
            EncryptedStore::new(raw.clone(), &config(before)).put(KEY, "secret".into(), None).await.unwrap();
            let rotated = EncryptedStore::new(raw.clone(), &config(after));
            match (rotated.get(KEY).await, expected) {
                (Ok(kv), Ok((prefix, stale))) => {
                    let kv = kv.unwrap();
                    assert_eq!(kv.value, "secret", "case {i}");
                    assert_eq!(rotated.stale(KEY, kv.mod_revision).await.unwrap(), stale, "case {i}");
                    let written = rotated.put(KEY, "secret".into(), None).await.unwrap();
                    // Neither the value written now nor the one it replaced is stale.
                    assert!(!rotated.stale(KEY, written.mod_revision).await.unwrap(), "case {i}");
                    assert!(!rotated.stale(KEY, kv.mod_revision).await.unwrap(), "case {i}");
                    let stored = raw.get(KEY).await.unwrap().unwrap().value;
                    assert!(stored.starts_with(prefix.as_bytes()), "case {i}: {stored:?}");
                    if !prefix.is_empty() {
                        assert!(!stored.ends_with(b"secret"), "case {i}");
                    }
                }
                (Err(Error::Storage(message)), Err(expected)) => {
                    assert!(message.contains(expected) && message.contains(KEY), "case {i}: {message}")
                }
                (other, _) => panic!("case {i}: {other:?}"),
            }
        }
        // A key no rule names is stored as written: never stale.
        let raw: Arc<dyn Store> = Arc::new(MemStore::new());
        let other = raw.put("/registry/configmaps/default/c", "plain".into(), None).await.unwrap();
        let store = EncryptedStore::new(raw, &config(vec![aes("new", 2)]));
        assert!(!store.stale(&other.key, other.mod_revision).await.unwrap());
    }

    #[tokio::test]
    async fn an_encrypted_value_outside_the_configuration_is_an_error_and_ends_a_watch() {
        let raw: Arc<dyn Store> = Arc::new(MemStore::new());
        let none = EncryptedStore::new(raw.clone(), &EncryptionConfig::new());
        let mut watch = none.watch(WatchRequest::new(KeyRange::prefix("/registry/"))).await.unwrap();
        EncryptedStore::new(raw.clone(), &config(vec![sbox("k", 1)])).put(KEY, "x".into(), None).await.unwrap();
        match none.get(KEY).await {
            Err(Error::Storage(message)) => assert!(message.contains("k8s:enc:secretbox:v1:k:"), "{message}"),
            other => panic!("{other:?}"),
        }
        assert!(matches!(watch.next().await, Some(Err(Error::Storage(_)))));
        assert!(watch.next().await.is_none(), "the watch ended after its error");
    }

    /// A watch's filter judges plain values, and lets encrypted ones through
    /// to be decrypted: in the inner store it would see only ciphertext.
    #[tokio::test]
    async fn a_watch_filter_sees_encrypted_keys_through() {
        let store = EncryptedStore::new(Arc::new(MemStore::new()), &config(vec![sbox("k", 1)]));
        let keep = EventFilter::new(|event: &Event| event.kv.value.starts_with(b"keep"));
        let request = WatchRequest::new(KeyRange::prefix("/registry/")).with_filter(keep);
        let mut watch = store.watch(request).await.unwrap();
        store.put("/registry/configmaps/default/a", "drop".into(), None).await.unwrap();
        store.put(KEY, "keep".into(), None).await.unwrap();
        store.put("/registry/configmaps/default/b", "keep".into(), None).await.unwrap();
        let mut delivered = Vec::new();
        while delivered.len() < 2 {
            let response = watch.next().await.unwrap().unwrap();
            delivered.extend(response.events.into_iter().map(|e| (e.kv.key, e.kv.value)));
        }
        assert_eq!(
            delivered,
            [(KEY.to_owned(), "keep".into()), ("/registry/configmaps/default/b".to_owned(), "keep".into())]
        );
    }
}
