//! The `aesgcm` provider: AES-GCM with a 16, 24 or 32-byte key, upstream's
//! layout: a random 12-byte nonce, then the ciphertext and its 16-byte tag,
//! the store key as additional authenticated data.

use aes_gcm::aead::{Aead, KeyInit, Payload};
use aes_gcm::aes::Aes192;
use aes_gcm::{Aes128Gcm, Aes256Gcm, Nonce};

use super::{EncryptionError, Provider, random};

const NONCE_LEN: usize = 12;

/// The cipher for the key's length.
enum Cipher {
    Aes128(Box<Aes128Gcm>),
    Aes192(Box<aes_gcm::AesGcm<Aes192, aes_gcm::aead::consts::U12>>),
    Aes256(Box<Aes256Gcm>),
}

/// AES-GCM under one named key (`k8s:enc:aesgcm:v1:<name>:`).
pub struct AesGcm {
    prefix: String,
    cipher: Cipher,
}

impl std::fmt::Debug for AesGcm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AesGcm").field("prefix", &self.prefix).finish_non_exhaustive()
    }
}

impl AesGcm {
    /// The provider for key `name`; `None` unless the key is 16, 24 or 32
    /// bytes long.
    ///
    /// ```
    /// use orchestra_core::encryption::{AesGcm, Provider};
    ///
    /// let provider = AesGcm::new("key1", &[7; 32]).unwrap();
    /// assert_eq!(provider.prefix(), "k8s:enc:aesgcm:v1:key1:");
    /// assert!(AesGcm::new("short", &[7; 10]).is_none());
    /// ```
    pub fn new(name: &str, key: &[u8]) -> Option<AesGcm> {
        let cipher = match key.len() {
            16 => Cipher::Aes128(Box::new(Aes128Gcm::new_from_slice(key).ok()?)),
            24 => Cipher::Aes192(Box::new(aes_gcm::AesGcm::new_from_slice(key).ok()?)),
            32 => Cipher::Aes256(Box::new(Aes256Gcm::new_from_slice(key).ok()?)),
            _ => return None,
        };
        Some(AesGcm { prefix: format!("k8s:enc:aesgcm:v1:{name}:"), cipher })
    }

    fn seal(&self, nonce: &Nonce<aes_gcm::aead::consts::U12>, payload: Payload<'_, '_>) -> Result<Vec<u8>, aes_gcm::Error> {
        match &self.cipher {
            Cipher::Aes128(c) => c.encrypt(nonce, payload),
            Cipher::Aes192(c) => c.encrypt(nonce, payload),
            Cipher::Aes256(c) => c.encrypt(nonce, payload),
        }
    }

    fn open(&self, nonce: &Nonce<aes_gcm::aead::consts::U12>, payload: Payload<'_, '_>) -> Result<Vec<u8>, aes_gcm::Error> {
        match &self.cipher {
            Cipher::Aes128(c) => c.decrypt(nonce, payload),
            Cipher::Aes192(c) => c.decrypt(nonce, payload),
            Cipher::Aes256(c) => c.decrypt(nonce, payload),
        }
    }
}

impl Provider for AesGcm {
    fn prefix(&self) -> &str {
        &self.prefix
    }

    fn encrypt(&self, plaintext: &[u8], context: &[u8]) -> Result<Vec<u8>, EncryptionError> {
        let mut nonce = [0u8; NONCE_LEN];
        random(&mut nonce, &self.prefix)?;
        let sealed = self
            .seal(Nonce::from_slice(&nonce), Payload { msg: plaintext, aad: context })
            .map_err(|e| EncryptionError::Encrypt { provider: self.prefix.clone(), reason: e.to_string() })?;
        let mut out = Vec::with_capacity(NONCE_LEN + sealed.len());
        out.extend_from_slice(&nonce);
        out.extend_from_slice(&sealed);
        Ok(out)
    }

    fn decrypt(&self, ciphertext: &[u8], context: &[u8]) -> Result<Vec<u8>, String> {
        if ciphertext.len() < NONCE_LEN {
            return Err("the value is shorter than a nonce".into());
        }
        let (nonce, sealed) = ciphertext.split_at(NONCE_LEN);
        self.open(Nonce::from_slice(nonce), Payload { msg: sealed, aad: context })
            .map_err(|_| "the ciphertext does not authenticate under this key".to_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_for_every_key_length_and_binds_the_context() {
        for len in [16, 24, 32] {
            let provider = AesGcm::new("k", &vec![3; len]).unwrap();
            let stored = provider.encrypt(b"plain", b"/registry/secrets/ns/a").unwrap();
            assert_eq!(stored.len(), NONCE_LEN + 5 + 16, "nonce, ciphertext, tag for a {len}-byte key");
            assert_eq!(provider.decrypt(&stored, b"/registry/secrets/ns/a").unwrap(), b"plain");
            assert!(provider.decrypt(&stored, b"/registry/secrets/ns/b").is_err(), "moved to another key");
            let other = AesGcm::new("k", &vec![4; len]).unwrap();
            assert!(other.decrypt(&stored, b"/registry/secrets/ns/a").is_err(), "another secret");
            assert!(provider.decrypt(&stored[..5], b"/registry/secrets/ns/a").is_err(), "truncated");
            assert_ne!(stored, provider.encrypt(b"plain", b"/registry/secrets/ns/a").unwrap(), "fresh nonces");
        }
    }
}
