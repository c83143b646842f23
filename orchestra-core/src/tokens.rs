//! Service account tokens: JWTs (ES256) signed with a key of the cluster's
//! own, as upstream's `--service-account-signing-key-file` and
//! `--service-account-private-key-file` configure.
//!
//! Two kinds, told apart by their issuer:
//! - bound tokens ([`Claims`]): what `serviceaccounts/<name>/token` answers
//!   (`kubectl create token`) and kubelets project into pods: an audience,
//!   an expiry, the service account's name and UID, and optionally the Pod
//!   or Secret they are bound to;
//! - legacy tokens ([`LegacyClaims`], issuer `kubernetes/serviceaccount`):
//!   what the token controller writes into Secrets of type
//!   `kubernetes.io/service-account-token`; no expiry, valid while the
//!   Secret holds them and the service account exists.
//!
//! This module signs and checks signatures; the API server's
//! `ServiceAccountAuthenticator` (feature `server`) also checks that the
//! objects a token names still exist.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use ring::rand::SystemRandom;
use ring::signature::{
    ECDSA_P256_SHA256_FIXED, ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, KeyPair as _, UnparsedPublicKey,
};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The issuer of legacy (Secret) tokens, whatever the cluster's issuer.
pub const LEGACY_ISSUER: &str = "kubernetes/serviceaccount";
/// The issuer of tokens unless configured (upstream's default for clusters
/// whose issuer is the in-cluster API server).
pub const DEFAULT_ISSUER: &str = "https://kubernetes.default.svc.cluster.local";
/// The key file's PEM label.
const PEM_LABEL: &str = "PRIVATE KEY";

/// Why a key could not be made or read.
#[derive(Debug, thiserror::Error)]
#[error("service account key: {0}")]
pub struct KeyError(String);

/// An object a token is bound to: it is valid only while that object exists
/// with this UID.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BoundObject {
    /// `Pod` or `Secret`.
    pub kind: String,
    /// Its name (in the service account's namespace).
    pub name: String,
    /// Its UID.
    pub uid: String,
}

/// The claims of a token (upstream's private claims under `kubernetes.io`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Claims {
    /// Issuer.
    pub iss: String,
    /// `system:serviceaccount:<namespace>:<name>`.
    pub sub: String,
    /// Audiences.
    pub aud: Vec<String>,
    /// Expiry (seconds since the epoch).
    pub exp: i64,
    /// Issued at.
    pub iat: i64,
    /// Not before.
    pub nbf: i64,
    /// The service account and what the token is bound to.
    #[serde(rename = "kubernetes.io")]
    pub kubernetes: KubernetesClaims,
}

/// The `kubernetes.io` claim.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KubernetesClaims {
    /// The service account's namespace.
    pub namespace: String,
    /// The service account.
    pub serviceaccount: ObjectRef,
    /// The Pod the token is bound to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<ObjectRef>,
    /// The Secret the token is bound to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<ObjectRef>,
}

/// The claims of a legacy token (upstream's `legacyPrivateClaims`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LegacyClaims {
    /// Always [`LEGACY_ISSUER`].
    pub iss: String,
    /// `system:serviceaccount:<namespace>:<name>`.
    pub sub: String,
    /// The service account's namespace.
    #[serde(rename = "kubernetes.io/serviceaccount/namespace")]
    pub namespace: String,
    /// The Secret that holds the token.
    #[serde(rename = "kubernetes.io/serviceaccount/secret.name")]
    pub secret_name: String,
    /// The service account.
    #[serde(rename = "kubernetes.io/serviceaccount/service-account.name")]
    pub service_account_name: String,
    /// Its UID.
    #[serde(rename = "kubernetes.io/serviceaccount/service-account.uid")]
    pub service_account_uid: String,
}

/// A token whose signature checked out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VerifiedToken {
    /// A bound token.
    Bound(Claims),
    /// A legacy (Secret) token.
    Legacy(LegacyClaims),
}

/// Why a token of this key was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct TokenError(pub String);

/// A name and UID.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObjectRef {
    /// Name.
    pub name: String,
    /// UID.
    pub uid: String,
}

/// The signing key and issuer: issues tokens and verifies their signature.
pub struct TokenSigner {
    key: EcdsaKeyPair,
    pkcs8: Vec<u8>,
    kid: String,
    issuer: String,
    rng: SystemRandom,
}

impl std::fmt::Debug for TokenSigner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenSigner").field("kid", &self.kid).field("issuer", &self.issuer).finish_non_exhaustive()
    }
}

/// Seconds since the Unix epoch.
pub(crate) fn now_secs() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs() as i64).unwrap_or(0)
}

impl TokenSigner {
    /// A new P-256 key.
    pub fn generate(issuer: impl Into<String>) -> Result<TokenSigner, KeyError> {
        let rng = SystemRandom::new();
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng)
            .map_err(|e| KeyError(format!("cannot generate: {e}")))?;
        TokenSigner::from_pkcs8(pkcs8.as_ref(), issuer)
    }

    /// The key in `path` (PEM, PKCS#8), created there first if missing,
    /// readable by its owner only (mode 0600).
    pub fn load_or_create(path: &std::path::Path, issuer: impl Into<String>) -> Result<TokenSigner, KeyError> {
        if path.exists() {
            return TokenSigner::load_existing(path, issuer);
        }
        let signer = TokenSigner::generate(issuer)?;
        write_owner_only(path, signer.pem().as_bytes()).map_err(|e| KeyError(format!("{}: {e}", path.display())))?;
        Ok(signer)
    }

    /// The key in `path` (PEM, PKCS#8), which must exist.
    pub fn load_existing(path: &std::path::Path, issuer: impl Into<String>) -> Result<TokenSigner, KeyError> {
        let pem = std::fs::read_to_string(path).map_err(|e| KeyError(format!("{}: {e}", path.display())))?;
        let der = pem.lines().filter(|l| !l.starts_with("-----")).collect::<String>();
        let der = base64::engine::general_purpose::STANDARD
            .decode(der.trim())
            .map_err(|e| KeyError(format!("{}: not PEM: {e}", path.display())))?;
        TokenSigner::from_pkcs8(&der, issuer)
    }

    fn from_pkcs8(pkcs8: &[u8], issuer: impl Into<String>) -> Result<TokenSigner, KeyError> {
        let rng = SystemRandom::new();
        let key = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8, &rng)
            .map_err(|e| KeyError(format!("not a P-256 PKCS#8 key: {e}")))?;
        let digest = ring::digest::digest(&ring::digest::SHA256, key.public_key().as_ref());
        let kid = B64.encode(&digest.as_ref()[..20]);
        Ok(TokenSigner { key, pkcs8: pkcs8.to_vec(), kid, issuer: issuer.into(), rng })
    }

    /// The private key as PEM (PKCS#8).
    pub fn pem(&self) -> String {
        let body = base64::engine::general_purpose::STANDARD.encode(&self.pkcs8);
        let lines: Vec<&str> =
            body.as_bytes().chunks(64).map(|c| std::str::from_utf8(c).expect("base64 is ASCII")).collect();
        format!("-----BEGIN {PEM_LABEL}-----\n{}\n-----END {PEM_LABEL}-----\n", lines.join("\n"))
    }

    /// The issuer (`iss`).
    pub fn issuer(&self) -> &str {
        &self.issuer
    }

    /// Signs `claims` ([`Claims`] or [`LegacyClaims`]) into a compact JWS.
    pub fn sign(&self, claims: &impl Serialize) -> String {
        let header = serde_json::json!({"alg": "ES256", "kid": self.kid});
        let input = format!(
            "{}.{}",
            B64.encode(header.to_string()),
            B64.encode(serde_json::to_vec(claims).expect("claims serialize"))
        );
        let signature = self.key.sign(&self.rng, input.as_bytes()).expect("ECDSA signing does not fail");
        format!("{input}.{}", B64.encode(signature.as_ref()))
    }

    /// Claims for a token of service account `namespace/name` (UID `uid`)
    /// valid for `expiration_seconds` from now.
    pub fn claims(
        &self,
        namespace: &str,
        name: &str,
        uid: &str,
        audiences: Vec<String>,
        expiration_seconds: i64,
        bound: Option<&BoundObject>,
    ) -> Claims {
        let now = now_secs();
        let reference = |kind: &str| {
            bound.filter(|b| b.kind == kind).map(|b| ObjectRef { name: b.name.clone(), uid: b.uid.clone() })
        };
        Claims {
            iss: self.issuer.clone(),
            sub: format!("system:serviceaccount:{namespace}:{name}"),
            aud: audiences,
            exp: now + expiration_seconds,
            iat: now,
            nbf: now,
            kubernetes: KubernetesClaims {
                namespace: namespace.into(),
                serviceaccount: ObjectRef { name: name.into(), uid: uid.into() },
                pod: reference("Pod"),
                secret: reference("Secret"),
            },
        }
    }

    /// Claims for the legacy token that Secret `secret` holds for service
    /// account `namespace/name` (UID `uid`).
    pub fn legacy_claims(&self, namespace: &str, name: &str, uid: &str, secret: &str) -> LegacyClaims {
        LegacyClaims {
            iss: LEGACY_ISSUER.into(),
            sub: format!("system:serviceaccount:{namespace}:{name}"),
            namespace: namespace.into(),
            secret_name: secret.into(),
            service_account_name: name.into(),
            service_account_uid: uid.into(),
        }
    }

    /// The claims of `token` if this key signed it: `Ok(None)` when the
    /// token is not one of ours (another key, not a JWT), `Err` when it is
    /// ours but altered or malformed.
    pub fn verify(&self, token: &str) -> Result<Option<VerifiedToken>, TokenError> {
        let mut parts = token.split('.');
        let (Some(header), Some(payload), Some(signature), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Ok(None);
        };
        let Some(header) = B64.decode(header).ok().and_then(|h| serde_json::from_slice::<Value>(&h).ok()) else {
            return Ok(None);
        };
        if header["kid"] != self.kid.as_str() || header["alg"] != "ES256" {
            return Ok(None);
        }
        let signature = B64.decode(signature).map_err(|_| TokenError("malformed token signature".into()))?;
        let public = UnparsedPublicKey::new(&ECDSA_P256_SHA256_FIXED, self.key.public_key().as_ref());
        let signed = &token[..header_and_payload_len(token)];
        public.verify(signed.as_bytes(), &signature).map_err(|_| TokenError("token signature is invalid".into()))?;
        let payload = B64.decode(payload).map_err(|_| TokenError("malformed token payload".into()))?;
        let claims: Value =
            serde_json::from_slice(&payload).map_err(|e| TokenError(format!("malformed token claims: {e}")))?;
        let verified = if claims["iss"] == LEGACY_ISSUER {
            serde_json::from_value(claims).map(VerifiedToken::Legacy)
        } else {
            serde_json::from_value(claims).map(VerifiedToken::Bound)
        };
        verified.map(Some).map_err(|e| TokenError(format!("malformed token claims: {e}")))
    }
}

fn header_and_payload_len(token: &str) -> usize {
    token.rfind('.').unwrap_or(token.len())
}

/// Writes a new file of mode 0600 (refusing to replace one: a key is
/// written once).
fn write_owner_only(path: &std::path::Path, contents: &[u8]) -> std::io::Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut file = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(path)?;
    file.write_all(contents)?;
    file.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_persist_as_pem() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sa.key");
        let first = TokenSigner::load_or_create(&path, DEFAULT_ISSUER).unwrap();
        let again = TokenSigner::load_or_create(&path, DEFAULT_ISSUER).unwrap();
        let token = first.sign(&first.claims("a", "b", "c", vec![DEFAULT_ISSUER.into()], 60, None));
        assert!(again.verify(&token).unwrap().is_some(), "the reloaded key verifies what the first signed");
        assert!(std::fs::read_to_string(&path).unwrap().starts_with("-----BEGIN PRIVATE KEY-----"));
        use std::os::unix::fs::PermissionsExt as _;
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600, "a private key");
    }

    #[test]
    fn both_kinds_verify_as_what_they_are() {
        let signer = TokenSigner::generate(DEFAULT_ISSUER).unwrap();
        let bound = signer.sign(&signer.claims("ci", "robot", "u-1", vec![DEFAULT_ISSUER.into()], 60, None));
        let legacy = signer.sign(&signer.legacy_claims("ci", "robot", "u-1", "robot-token"));
        assert!(
            matches!(signer.verify(&bound), Ok(Some(VerifiedToken::Bound(c))) if c.kubernetes.serviceaccount.uid == "u-1")
        );
        let Ok(Some(VerifiedToken::Legacy(claims))) = signer.verify(&legacy) else { panic!("a legacy token") };
        assert_eq!(claims, signer.legacy_claims("ci", "robot", "u-1", "robot-token"));
        // The claim names are upstream's.
        let payload = legacy.split('.').nth(1).unwrap();
        let json: Value = serde_json::from_slice(&B64.decode(payload).unwrap()).unwrap();
        assert_eq!(json["iss"], LEGACY_ISSUER);
        assert_eq!(json["kubernetes.io/serviceaccount/secret.name"], "robot-token");
        assert_eq!(json["kubernetes.io/serviceaccount/service-account.uid"], "u-1");
        // Another key's token is not ours; an altered one is refused.
        let stranger = TokenSigner::generate(DEFAULT_ISSUER).unwrap();
        assert_eq!(stranger.verify(&legacy), Ok(None));
        let mut altered = legacy.clone();
        altered.replace_range(altered.len() - 4.., "AAAA");
        assert!(signer.verify(&altered).is_err());
    }
}
