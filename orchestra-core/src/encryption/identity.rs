//! The `identity` provider: values stored as they are.

use super::{ENCRYPTED_PREFIX, EncryptionError, Provider};

/// Stores values unencrypted and reads unencrypted values (upstream's
/// `identity: {}`). First in a resource's list it turns encryption off for
/// writes; later in the list it lets values written before encryption was
/// turned on be read.
///
/// ```
/// use orchestra_core::encryption::{Identity, Provider};
///
/// assert_eq!(Identity.encrypt(b"{}", b"/k").unwrap(), b"{}");
/// assert!(Identity.decrypt(b"k8s:enc:aesgcm:v1:k:...", b"/k").is_err());
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct Identity;

impl Provider for Identity {
    fn prefix(&self) -> &str {
        ""
    }

    fn encrypt(&self, plaintext: &[u8], _context: &[u8]) -> Result<Vec<u8>, EncryptionError> {
        Ok(plaintext.to_vec())
    }

    /// Refuses encrypted values: identity reading one means its provider is
    /// missing from the configuration.
    fn decrypt(&self, ciphertext: &[u8], _context: &[u8]) -> Result<Vec<u8>, String> {
        if ciphertext.starts_with(ENCRYPTED_PREFIX.as_bytes()) {
            return Err("identity read an encrypted value".into());
        }
        Ok(ciphertext.to_vec())
    }
}
