//! Service account tokens: JWTs (ES256) that the API server signs with a
//! key of its own and accepts as bearer tokens, as upstream's
//! `--service-account-signing-key-file` and `--service-account-key-file` do.
//!
//! - [`TokenSigner`] issues bound tokens (what `serviceaccounts/<name>/token`
//!   answers, `kubectl create token`): an audience, an expiry, the service
//!   account's name and UID, and optionally the Pod or Secret it is bound to.
//! - [`ServiceAccountAuthenticator`] verifies them: signature, issuer,
//!   audience, time window, and that the service account (and the bound
//!   object) still exist with the UIDs in the token. The user is
//!   `system:serviceaccount:<namespace>:<name>` in the groups
//!   `system:serviceaccounts` and `system:serviceaccounts:<namespace>`.

use std::sync::Arc;

use async_trait::async_trait;
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use http::request::Parts;
use orchestra_store::Store;
use ring::rand::SystemRandom;
use ring::signature::{ECDSA_P256_SHA256_FIXED, ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, KeyPair as _, UnparsedPublicKey};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{AuthError, Authenticator, UserInfo};

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

fn now_secs() -> i64 {
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

    /// The key in `path` (PEM, PKCS#8), created there first if missing.
    pub fn load_or_create(path: &std::path::Path, issuer: impl Into<String>) -> Result<TokenSigner, KeyError> {
        let issuer = issuer.into();
        match std::fs::read_to_string(path) {
            Ok(pem) => {
                let der = pem
                    .lines()
                    .filter(|l| !l.starts_with("-----"))
                    .collect::<String>();
                let der = base64::engine::general_purpose::STANDARD
                    .decode(der.trim())
                    .map_err(|e| KeyError(format!("{}: not PEM: {e}", path.display())))?;
                TokenSigner::from_pkcs8(&der, issuer)
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let signer = TokenSigner::generate(issuer)?;
                std::fs::write(path, signer.pem()).map_err(|e| KeyError(format!("{}: {e}", path.display())))?;
                Ok(signer)
            }
            Err(e) => Err(KeyError(format!("{}: {e}", path.display()))),
        }
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
        let lines: Vec<&str> = body.as_bytes().chunks(64).map(|c| std::str::from_utf8(c).expect("base64 is ASCII")).collect();
        format!("-----BEGIN {PEM_LABEL}-----\n{}\n-----END {PEM_LABEL}-----\n", lines.join("\n"))
    }

    /// The issuer (`iss`).
    pub fn issuer(&self) -> &str {
        &self.issuer
    }

    /// Signs `claims` into a compact JWS.
    pub fn sign(&self, claims: &Claims) -> String {
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
            bound
                .filter(|b| b.kind == kind)
                .map(|b| ObjectRef { name: b.name.clone(), uid: b.uid.clone() })
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

    /// The claims of `token` if this key signed it: `Ok(None)` when the
    /// token is not one of ours (another key, not a JWT), `Err` when it is
    /// ours but altered.
    pub fn verify(&self, token: &str) -> Result<Option<Claims>, AuthError> {
        let mut parts = token.split('.');
        let (Some(header), Some(payload), Some(signature), None) = (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Ok(None);
        };
        let Some(header) = B64.decode(header).ok().and_then(|h| serde_json::from_slice::<Value>(&h).ok()) else {
            return Ok(None);
        };
        if header["kid"] != self.kid.as_str() || header["alg"] != "ES256" {
            return Ok(None);
        }
        let signature = B64.decode(signature).map_err(|_| AuthError("malformed token signature".into()))?;
        let public = UnparsedPublicKey::new(&ECDSA_P256_SHA256_FIXED, self.key.public_key().as_ref());
        let signed = &token[..header_and_payload_len(token)];
        public
            .verify(signed.as_bytes(), &signature)
            .map_err(|_| AuthError("token signature is invalid".into()))?;
        let payload = B64.decode(payload).map_err(|_| AuthError("malformed token payload".into()))?;
        serde_json::from_slice(&payload).map(Some).map_err(|e| AuthError(format!("malformed token claims: {e}")))
    }
}

fn header_and_payload_len(token: &str) -> usize {
    token.rfind('.').unwrap_or(token.len())
}

/// Accepts the tokens of a [`TokenSigner`] whose service account (and bound
/// object) still exist.
pub struct ServiceAccountAuthenticator {
    signer: Arc<TokenSigner>,
    store: Arc<dyn Store>,
    audiences: Vec<String>,
}

impl ServiceAccountAuthenticator {
    /// Verifies with `signer`'s key, looks objects up in `store` and accepts
    /// tokens for any of `audiences` (the API server's own: the issuer).
    pub fn new(signer: Arc<TokenSigner>, store: Arc<dyn Store>, audiences: Vec<String>) -> ServiceAccountAuthenticator {
        ServiceAccountAuthenticator { signer, store, audiences }
    }

    /// The UID of the stored object at `key`, if it exists.
    async fn uid_at(&self, key: &str) -> Result<Option<String>, AuthError> {
        let kv = self.store.get(key).await.map_err(|e| AuthError(format!("cannot check the token's objects: {e}")))?;
        Ok(kv.and_then(|kv| {
            serde_json::from_slice::<Value>(&kv.value)
                .ok()
                .and_then(|v| v.pointer("/metadata/uid").and_then(Value::as_str).map(str::to_owned))
        }))
    }

    async fn check_exists(&self, plural: &str, namespace: &str, object: &ObjectRef) -> Result<(), AuthError> {
        let key = format!("/registry/{plural}/{namespace}/{}", object.name);
        match self.uid_at(&key).await? {
            Some(uid) if uid == object.uid => Ok(()),
            Some(_) => Err(AuthError(format!("{plural} {namespace}/{} has been deleted and created again", object.name))),
            None => Err(AuthError(format!("{plural} {namespace}/{} has been deleted", object.name))),
        }
    }
}

#[async_trait]
impl Authenticator for ServiceAccountAuthenticator {
    async fn authenticate(&self, request: &Parts) -> Result<Option<UserInfo>, AuthError> {
        let Some(token) = request
            .headers
            .get(http::header::AUTHORIZATION)
            .and_then(|h| h.to_str().ok())
            .and_then(|h| h.strip_prefix("Bearer "))
        else {
            return Ok(None);
        };
        let Some(claims) = self.signer.verify(token.trim())? else {
            return Ok(None);
        };
        if claims.iss != self.signer.issuer() {
            return Err(AuthError("token issuer is not this cluster".into()));
        }
        if !claims.aud.iter().any(|a| self.audiences.contains(a)) {
            return Err(AuthError("token audiences are not this API server's".into()));
        }
        let now = now_secs();
        if now >= claims.exp || now < claims.nbf {
            return Err(AuthError("token has expired".into()));
        }
        let k = &claims.kubernetes;
        self.check_exists("serviceaccounts", &k.namespace, &k.serviceaccount).await?;
        if let Some(pod) = &k.pod {
            self.check_exists("pods", &k.namespace, pod).await?;
        }
        if let Some(secret) = &k.secret {
            self.check_exists("secrets", &k.namespace, secret).await?;
        }
        let mut user = UserInfo::new(
            format!("system:serviceaccount:{}:{}", k.namespace, k.serviceaccount.name),
            &["system:serviceaccounts", &format!("system:serviceaccounts:{}", k.namespace)],
        );
        user.uid = k.serviceaccount.uid.clone();
        if let Some(pod) = &k.pod {
            user.extra.insert("authentication.kubernetes.io/pod-name".into(), vec![pod.name.clone()]);
            user.extra.insert("authentication.kubernetes.io/pod-uid".into(), vec![pod.uid.clone()]);
        }
        Ok(Some(user))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use orchestra_store::MemStore;

    fn parts(token: &str) -> Parts {
        http::Request::get("/api").header("authorization", format!("Bearer {token}")).body(()).unwrap().into_parts().0
    }

    async fn store_with_sa(uid: &str) -> Arc<dyn Store> {
        let store: Arc<dyn Store> = Arc::new(MemStore::new());
        let sa = serde_json::json!({"metadata": {"name": "robot", "namespace": "ci", "uid": uid}});
        store.put("/registry/serviceaccounts/ci/robot", serde_json::to_vec(&sa).unwrap().into(), None).await.unwrap();
        store
    }

    #[tokio::test]
    async fn tokens_authenticate_their_service_account_while_it_exists() {
        let signer = Arc::new(TokenSigner::generate(DEFAULT_ISSUER).unwrap());
        let store = store_with_sa("u-1").await;
        let authn = ServiceAccountAuthenticator::new(signer.clone(), store.clone(), vec![DEFAULT_ISSUER.into()]);
        let token = signer.sign(&signer.claims("ci", "robot", "u-1", vec![DEFAULT_ISSUER.into()], 3600, None));
        let user = authn.authenticate(&parts(&token)).await.unwrap().unwrap();
        assert_eq!(user.name, "system:serviceaccount:ci:robot");
        assert_eq!(user.groups, ["system:serviceaccounts", "system:serviceaccounts:ci"]);
        assert_eq!(user.uid, "u-1");

        // Another audience, expired, altered, or from another key.
        let other_audience = signer.sign(&signer.claims("ci", "robot", "u-1", vec!["vault".into()], 3600, None));
        assert!(authn.authenticate(&parts(&other_audience)).await.is_err());
        let expired = signer.sign(&signer.claims("ci", "robot", "u-1", vec![DEFAULT_ISSUER.into()], -1, None));
        assert!(authn.authenticate(&parts(&expired)).await.unwrap_err().0.contains("expired"));
        let mut altered = token.clone();
        altered.replace_range(altered.len() - 4.., "AAAA");
        assert!(authn.authenticate(&parts(&altered)).await.is_err());
        let stranger = TokenSigner::generate(DEFAULT_ISSUER).unwrap();
        let foreign = stranger.sign(&stranger.claims("ci", "robot", "u-1", vec![DEFAULT_ISSUER.into()], 3600, None));
        assert_eq!(authn.authenticate(&parts(&foreign)).await.unwrap(), None, "not ours: another authenticator's");
        assert_eq!(authn.authenticate(&parts("static-token")).await.unwrap(), None);

        // Bound to a pod that is gone; then the account itself is recreated.
        let pod = BoundObject { kind: "Pod".into(), name: "web".into(), uid: "p-1".into() };
        let bound = signer.sign(&signer.claims("ci", "robot", "u-1", vec![DEFAULT_ISSUER.into()], 3600, Some(&pod)));
        assert!(authn.authenticate(&parts(&bound)).await.unwrap_err().0.contains("pods ci/web has been deleted"));
        let sa = serde_json::json!({"metadata": {"name": "robot", "namespace": "ci", "uid": "u-2"}});
        store.put("/registry/serviceaccounts/ci/robot", serde_json::to_vec(&sa).unwrap().into(), None).await.unwrap();
        assert!(authn.authenticate(&parts(&token)).await.unwrap_err().0.contains("created again"));
    }

    #[test]
    fn keys_persist_as_pem() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sa.key");
        let first = TokenSigner::load_or_create(&path, DEFAULT_ISSUER).unwrap();
        let again = TokenSigner::load_or_create(&path, DEFAULT_ISSUER).unwrap();
        let token = first.sign(&first.claims("a", "b", "c", vec![DEFAULT_ISSUER.into()], 60, None));
        assert!(again.verify(&token).unwrap().is_some(), "the reloaded key verifies what the first signed");
        assert!(std::fs::read_to_string(&path).unwrap().starts_with("-----BEGIN PRIVATE KEY-----"));
    }
}
