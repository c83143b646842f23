//! The `secretbox` provider: XSalsa20-Poly1305 (NaCl's secretbox) with a
//! 32-byte key, upstream's layout: a random 24-byte nonce, then the 16-byte
//! tag and the ciphertext.

use crypto_secretbox::aead::{Aead, KeyInit};
use crypto_secretbox::{Nonce, XSalsa20Poly1305};

use super::{EncryptionError, Provider, random};

const NONCE_LEN: usize = 24;

/// XSalsa20-Poly1305 under one named key (`k8s:enc:secretbox:v1:<name>:`).
pub struct Secretbox {
    prefix: String,
    cipher: XSalsa20Poly1305,
}

impl std::fmt::Debug for Secretbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Secretbox").field("prefix", &self.prefix).finish_non_exhaustive()
    }
}

impl Secretbox {
    /// The provider for key `name`; `None` unless the key is 32 bytes long.
    ///
    /// ```
    /// use orchestra_core::encryption::{Provider, Secretbox};
    ///
    /// let provider = Secretbox::new("key1", &[7; 32]).unwrap();
    /// assert_eq!(provider.prefix(), "k8s:enc:secretbox:v1:key1:");
    /// assert!(Secretbox::new("short", &[7; 16]).is_none());
    /// ```
    pub fn new(name: &str, key: &[u8]) -> Option<Secretbox> {
        let cipher = XSalsa20Poly1305::new_from_slice(key).ok().filter(|_| key.len() == 32)?;
        Some(Secretbox { prefix: format!("k8s:enc:secretbox:v1:{name}:"), cipher })
    }
}

impl Provider for Secretbox {
    fn prefix(&self) -> &str {
        &self.prefix
    }

    /// Secretbox authenticates no additional data: `context` is unused, as
    /// upstream's.
    fn encrypt(&self, plaintext: &[u8], _context: &[u8]) -> Result<Vec<u8>, EncryptionError> {
        let mut nonce = [0u8; NONCE_LEN];
        random(&mut nonce, &self.prefix)?;
        let sealed = self
            .cipher
            .encrypt(Nonce::from_slice(&nonce), plaintext)
            .map_err(|e| EncryptionError::Encrypt { provider: self.prefix.clone(), reason: e.to_string() })?;
        let mut out = Vec::with_capacity(NONCE_LEN + sealed.len());
        out.extend_from_slice(&nonce);
        out.extend_from_slice(&sealed);
        Ok(out)
    }

    fn decrypt(&self, ciphertext: &[u8], _context: &[u8]) -> Result<Vec<u8>, String> {
        if ciphertext.len() < NONCE_LEN {
            return Err("the value is shorter than a nonce".into());
        }
        let (nonce, sealed) = ciphertext.split_at(NONCE_LEN);
        self.cipher
            .decrypt(Nonce::from_slice(nonce), sealed)
            .map_err(|_| "the ciphertext does not authenticate under this key".to_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_refuses_other_keys() {
        let provider = Secretbox::new("k", &[1; 32]).unwrap();
        let stored = provider.encrypt(b"plain", b"").unwrap();
        assert_eq!(stored.len(), NONCE_LEN + 16 + 5);
        assert_eq!(provider.decrypt(&stored, b"").unwrap(), b"plain");
        assert!(Secretbox::new("k", &[2; 32]).unwrap().decrypt(&stored, b"").is_err());
        let mut tampered = stored.clone();
        *tampered.last_mut().unwrap() ^= 1;
        assert!(provider.decrypt(&tampered, b"").is_err());
        assert!(provider.decrypt(&stored[..10], b"").is_err());
    }

    /// NaCl's layout: the tag before the ciphertext, as Go's
    /// `secretbox.Seal` writes it (upstream's provider), so that the
    /// ciphertext past the tag is the keystream XOR the plaintext.
    #[test]
    fn the_tag_precedes_the_ciphertext() {
        let provider = Secretbox::new("k", &[1; 32]).unwrap();
        let zeros = provider.encrypt(&[0; 8], b"").unwrap();
        let nonce = &zeros[..NONCE_LEN];
        let keystream = &zeros[NONCE_LEN + 16..];
        let sealed = provider.cipher.encrypt(Nonce::from_slice(nonce), &[0xff; 8][..]).unwrap();
        let flipped: Vec<u8> = keystream.iter().map(|b| b ^ 0xff).collect();
        assert_eq!(&sealed[16..], &flipped[..]);
    }
}
