//! Encryption at rest: upstream's `apiserver.config.k8s.io/v1`
//! `EncryptionConfiguration` (kube-apiserver's `--encryption-provider-config`)
//! and [`EncryptedStore`], a [`Store`](orchestra_store::Store) decorator that
//! encrypts the values of the configured resources on every write and
//! decrypts them on every read (gets, ranges, transaction results, watch
//! events and their previous values).
//!
//! Each configured resource has an ordered list of [`Provider`]s, one per key:
//! the first writes, every one of them reads. A stored value carries the
//! writing provider's prefix (`k8s:enc:aesgcm:v1:<key name>:`,
//! `k8s:enc:secretbox:v1:<key name>:`, none for `identity`) followed by the
//! provider's nonce and ciphertext laid out as upstream lays them, so a store
//! written by one reads in the other. A value whose prefix no provider of its
//! resource knows, or a ciphertext that does not authenticate, is a storage
//! error for that key (the API answers 500), never a silent fallback.
//!
//! Key rotation is upstream's: put the new key first and the old one second,
//! restart, rewrite every object with a change (an update that leaves an
//! object as it is stores nothing, so it keeps its old key), then drop the
//! old key.
//!
//! The API server encrypts when its store is wrapped before it is built:
//!
//! ```
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use std::sync::Arc;
//! use orchestra_core::encryption::{EncryptedStore, EncryptionConfig};
//! use orchestra_core::server::ApiServer;
//! use orchestra_store::{MemStore, Store};
//!
//! let config = EncryptionConfig::parse(
//!     r#"
//! apiVersion: apiserver.config.k8s.io/v1
//! kind: EncryptionConfiguration
//! resources:
//!   - resources: [secrets]
//!     providers:
//!       - aesgcm:
//!           keys:
//!             - name: key1
//!               secret: MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=
//!       - identity: {}
//! "#,
//! )?;
//! let raw: Arc<dyn Store> = Arc::new(MemStore::new());
//! let encrypted: Arc<dyn Store> = Arc::new(EncryptedStore::new(raw.clone(), &config));
//! let server = ApiServer::builder(encrypted).build().await?;
//! # let _ = server;
//! # Ok(()) }
//! # tokio::runtime::Runtime::new().unwrap().block_on(demo()).unwrap();
//! ```

mod aesgcm;
mod config;
mod identity;
mod secretbox;
mod store;

pub use aesgcm::AesGcm;
pub use config::{ConfigError, EncryptionConfig, ProviderConfig, ProviderKey};
pub use identity::Identity;
pub use secretbox::Secretbox;
pub use store::EncryptedStore;

/// Why a value could not be encrypted or decrypted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EncryptionError {
    /// No provider of the key's resource knows the value's prefix (or the
    /// value is not encrypted and `identity` is not among them).
    #[error("no configured encryption provider reads the value of {key:?} (its prefix is {prefix:?})")]
    UnknownPrefix {
        /// The store key.
        key: String,
        /// The start of the value, up to its provider prefix's last `:`.
        prefix: String,
    },
    /// The value is encrypted but its resource is not configured for
    /// encryption: the configuration lost a resource that was encrypted.
    #[error("the value of {key:?} is encrypted ({prefix:?}) but its resource has no encryption providers")]
    NotConfigured {
        /// The store key.
        key: String,
        /// The value's provider prefix.
        prefix: String,
    },
    /// The ciphertext did not authenticate, or is too short, under the
    /// provider its prefix names.
    #[error("cannot decrypt the value of {key:?} with {provider:?}: {reason}")]
    Decrypt {
        /// The store key.
        key: String,
        /// The provider's prefix.
        provider: String,
        /// What failed.
        reason: String,
    },
    /// The provider could not encrypt (no randomness for a nonce).
    #[error("cannot encrypt with {provider:?}: {reason}")]
    Encrypt {
        /// The provider's prefix.
        provider: String,
        /// What failed.
        reason: String,
    },
}

/// One key of one encryption scheme: what `EncryptionConfiguration` lists
/// under a resource's `providers`, one per key.
///
/// The prefix names the scheme and the key; the store writes it before
/// what [`encrypt`](Provider::encrypt) returns and strips it before calling
/// [`decrypt`](Provider::decrypt). `context` is the store key, which
/// authenticated schemes bind the ciphertext to (an encrypted value copied
/// under another key does not decrypt).
///
/// A provider of one's own (here, a toy one) is used through
/// [`EncryptionConfig::with_rule`]'s providers:
///
/// ```
/// use orchestra_core::encryption::{EncryptionError, Provider};
///
/// struct Reversed;
///
/// impl Provider for Reversed {
///     fn prefix(&self) -> &str {
///         "k8s:enc:reversed:v1:only:"
///     }
///     fn encrypt(&self, plaintext: &[u8], _context: &[u8]) -> Result<Vec<u8>, EncryptionError> {
///         Ok(plaintext.iter().rev().copied().collect())
///     }
///     fn decrypt(&self, ciphertext: &[u8], _context: &[u8]) -> Result<Vec<u8>, String> {
///         Ok(ciphertext.iter().rev().copied().collect())
///     }
/// }
///
/// assert_eq!(Reversed.decrypt(&Reversed.encrypt(b"abc", b"/k").unwrap(), b"/k").unwrap(), b"abc");
/// ```
pub trait Provider: Send + Sync + 'static {
    /// The prefix of the values this provider writes, e.g.
    /// `k8s:enc:aesgcm:v1:key1:`; empty for `identity`.
    fn prefix(&self) -> &str;

    /// The stored form of `plaintext`, without the prefix.
    fn encrypt(&self, plaintext: &[u8], context: &[u8]) -> Result<Vec<u8>, EncryptionError>;

    /// The plaintext of a stored value (its prefix stripped); `Err` says
    /// why it does not decrypt.
    fn decrypt(&self, ciphertext: &[u8], context: &[u8]) -> Result<Vec<u8>, String>;
}

/// The prefix every encrypting provider's values start with.
pub const ENCRYPTED_PREFIX: &str = "k8s:enc:";

/// Fills `buffer` with random bytes from the operating system (nonces).
fn random(buffer: &mut [u8], provider: &str) -> Result<(), EncryptionError> {
    getrandom::fill(buffer)
        .map_err(|e| EncryptionError::Encrypt { provider: provider.to_owned(), reason: e.to_string() })
}
