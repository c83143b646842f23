//! OpenID Connect ID tokens as bearer credentials (kube-apiserver's
//! `--oidc-*` flags).
//!
//! The issuer's discovery document (`<issuer>/.well-known/openid-configuration`)
//! names its key set (`jwks_uri`); both are fetched over HTTPS on the first
//! token of the issuer, and the keys again whenever a token names a key id
//! the cached set lacks (at most once per
//! [`OidcOptions::min_refresh_interval`]), so that the issuer may rotate its
//! keys. A token is accepted when its signature verifies with one of the
//! issuer's keys under an allowed algorithm, its `iss` is the issuer, its
//! `aud` holds the client id, it has not expired, it is valid already (with
//! five minutes of clock skew, as upstream), and it carries the required
//! claims. The user is the username claim with its prefix, in the groups of
//! the groups claim with theirs.
//!
//! A bearer token that is not a JWT of this issuer is left to the next
//! authenticator; a JWT of this issuer that fails any check is refused (401).

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use http::request::Parts;
use ring::signature::{self, UnparsedPublicKey, VerificationAlgorithm};
use serde_json::Value;

use super::https::HttpsClient;
use super::{AuthError, Authenticator, UserInfo};
use crate::tokens::now_secs;

/// How far in the future `nbf` may be (go-oidc's allowed clock skew).
const NOT_BEFORE_SKEW_SECS: i64 = 5 * 60;

/// The signing algorithms an issuer's tokens may use (JOSE names).
pub const SUPPORTED_ALGORITHMS: [&str; 8] = ["RS256", "RS384", "RS512", "ES256", "ES384", "PS256", "PS384", "PS512"];

/// The settings of an [`OidcAuthenticator`], named after kube-apiserver's
/// flags.
///
/// ```
/// use orchestra_core::auth::{OidcAuthenticator, OidcOptions};
///
/// let mut options = OidcOptions::new("https://accounts.example.com", "kubernetes");
/// options.username_claim = "email".into();
/// options.groups_claim = Some("groups".into());
/// options.groups_prefix = "oidc:".into();
/// options.required_claims.insert("hd".into(), "example.com".into());
/// assert_eq!(options.effective_username_prefix(), "");
/// let authenticator = OidcAuthenticator::new(options);
/// # let _ = authenticator;
///
/// let insecure = OidcOptions::new("http://accounts.example.com", "kubernetes");
/// assert!(OidcAuthenticator::new(insecure).is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OidcOptions {
    /// `--oidc-issuer-url`: an `https` URL, equal to the tokens' `iss`.
    pub issuer_url: String,
    /// `--oidc-client-id`: the audience tokens must name.
    pub client_id: String,
    /// `--oidc-username-claim` (default `sub`).
    pub username_claim: String,
    /// `--oidc-username-prefix`: `None` is upstream's default (`<issuer>#`
    /// unless the username claim is `email`); `-` means no prefix.
    pub username_prefix: Option<String>,
    /// `--oidc-groups-claim`: a string or a list of strings; `None`, no groups.
    pub groups_claim: Option<String>,
    /// `--oidc-groups-prefix` (default none).
    pub groups_prefix: String,
    /// `--oidc-ca-file`'s contents: the CAs the issuer's certificate is
    /// checked against; `None`, the system's.
    pub ca_pem: Option<String>,
    /// `--oidc-required-claim`: claims that must be present with these
    /// string values.
    pub required_claims: BTreeMap<String, String>,
    /// `--oidc-signing-algs` (default `RS256`).
    pub signing_algs: Vec<String>,
    /// The least time between two fetches of the issuer's keys (when tokens
    /// name unknown key ids, or the issuer cannot be reached).
    pub min_refresh_interval: Duration,
}

impl OidcOptions {
    /// Upstream's defaults for `issuer_url` and `client_id`.
    pub fn new(issuer_url: impl Into<String>, client_id: impl Into<String>) -> OidcOptions {
        OidcOptions {
            issuer_url: issuer_url.into(),
            client_id: client_id.into(),
            username_claim: "sub".into(),
            username_prefix: None,
            groups_claim: None,
            groups_prefix: String::new(),
            ca_pem: None,
            required_claims: BTreeMap::new(),
            signing_algs: vec!["RS256".into()],
            min_refresh_interval: Duration::from_secs(10),
        }
    }

    /// The prefix user names get: as given (`-`: none), else `<issuer>#`
    /// for claims other than `email`.
    pub fn effective_username_prefix(&self) -> String {
        match self.username_prefix.as_deref() {
            Some("-") => String::new(),
            Some(prefix) => prefix.to_owned(),
            None if self.username_claim == "email" => String::new(),
            None => format!("{}#", self.issuer_url),
        }
    }
}

/// One of the issuer's public keys (a JWK).
#[derive(Debug, Clone)]
struct Key {
    kid: Option<String>,
    alg: Option<String>,
    material: KeyMaterial,
}

#[derive(Debug, Clone)]
enum KeyMaterial {
    /// Modulus and exponent, big-endian.
    Rsa { n: Vec<u8>, e: Vec<u8> },
    /// The uncompressed point `04 || x || y` on `crv`.
    Ec { crv: String, point: Vec<u8> },
}

impl Key {
    /// The key of one JWK, or `None` for keys that cannot verify signatures
    /// (encryption keys, other key types).
    fn from_jwk(jwk: &Value) -> Option<Key> {
        if jwk.get("use").and_then(Value::as_str).is_some_and(|u| u != "sig") {
            return None;
        }
        let field = |name: &str| jwk.get(name).and_then(Value::as_str).and_then(|v| B64.decode(v).ok());
        let material = match jwk.get("kty").and_then(Value::as_str)? {
            "RSA" => KeyMaterial::Rsa { n: field("n")?, e: field("e")? },
            "EC" => {
                let (x, y) = (field("x")?, field("y")?);
                let mut point = vec![4u8];
                point.extend(x);
                point.extend(y);
                KeyMaterial::Ec { crv: jwk.get("crv").and_then(Value::as_str)?.to_owned(), point }
            }
            _ => return None,
        };
        Some(Key {
            kid: jwk.get("kid").and_then(Value::as_str).map(String::from),
            alg: jwk.get("alg").and_then(Value::as_str).map(String::from),
            material,
        })
    }

    /// Whether this key may verify a signature of `alg`.
    fn fits(&self, alg: &str) -> bool {
        if self.alg.as_deref().is_some_and(|a| a != alg) {
            return false;
        }
        match (&self.material, alg) {
            (KeyMaterial::Rsa { .. }, "RS256" | "RS384" | "RS512" | "PS256" | "PS384" | "PS512") => true,
            (KeyMaterial::Ec { crv, .. }, "ES256") => crv == "P-256",
            (KeyMaterial::Ec { crv, .. }, "ES384") => crv == "P-384",
            _ => false,
        }
    }

    /// Whether `signature` over `message` verifies under `alg`.
    fn verify(&self, alg: &str, message: &[u8], signature: &[u8]) -> bool {
        let rsa: Option<&'static signature::RsaParameters> = match alg {
            "RS256" => Some(&signature::RSA_PKCS1_2048_8192_SHA256),
            "RS384" => Some(&signature::RSA_PKCS1_2048_8192_SHA384),
            "RS512" => Some(&signature::RSA_PKCS1_2048_8192_SHA512),
            "PS256" => Some(&signature::RSA_PSS_2048_8192_SHA256),
            "PS384" => Some(&signature::RSA_PSS_2048_8192_SHA384),
            "PS512" => Some(&signature::RSA_PSS_2048_8192_SHA512),
            _ => None,
        };
        match (&self.material, rsa) {
            (KeyMaterial::Rsa { n, e }, Some(parameters)) => {
                signature::RsaPublicKeyComponents { n, e }.verify(parameters, message, signature).is_ok()
            }
            (KeyMaterial::Ec { point, .. }, None) => {
                let algorithm: &'static dyn VerificationAlgorithm = match alg {
                    "ES256" => &signature::ECDSA_P256_SHA256_FIXED,
                    "ES384" => &signature::ECDSA_P384_SHA384_FIXED,
                    _ => return false,
                };
                UnparsedPublicKey::new(algorithm, point).verify(message, signature).is_ok()
            }
            _ => false,
        }
    }
}

/// The issuer's keys as last fetched.
#[derive(Debug, Default)]
struct KeySet {
    keys: Vec<Key>,
}

/// What the last fetch of the issuer's keys left.
#[derive(Debug, Default)]
struct Refresh {
    /// When keys were last fetched (or a fetch last failed).
    last: Option<Instant>,
    /// The discovery document's `jwks_uri`, once known.
    jwks_uri: Option<String>,
}

/// Authenticates OpenID Connect ID tokens of one issuer; see the module
/// documentation.
///
/// ```no_run
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// use std::sync::Arc;
/// use orchestra_core::auth::{AuthenticatorChain, ExtensionAuthenticator, OidcAuthenticator, OidcOptions};
/// use orchestra_core::server::ApiServer;
/// use orchestra_store::MemStore;
///
/// let mut options = OidcOptions::new("https://issuer.example.com", "kubernetes");
/// options.ca_pem = Some(std::fs::read_to_string("/etc/orchestra/oidc-ca.pem")?);
/// options.groups_claim = Some("groups".into());
/// let chain = AuthenticatorChain::new().with(ExtensionAuthenticator).with(OidcAuthenticator::new(options)?);
/// let server = ApiServer::builder(Arc::new(MemStore::new())).authenticator(chain).build().await?;
/// # let _ = server;
/// # Ok(()) }
/// ```
pub struct OidcAuthenticator {
    options: OidcOptions,
    /// `issuer_url` without a trailing `/`, to build the discovery URL.
    base: String,
    client: HttpsClient,
    keys: RwLock<Arc<KeySet>>,
    refresh: tokio::sync::Mutex<Refresh>,
}

impl std::fmt::Debug for OidcAuthenticator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OidcAuthenticator").field("options", &self.options).finish_non_exhaustive()
    }
}

impl OidcAuthenticator {
    /// Checks `options` (an `https` issuer, a client id, known algorithms,
    /// a readable CA bundle); nothing is fetched until the first token.
    pub fn new(options: OidcOptions) -> Result<OidcAuthenticator, AuthError> {
        let issuer: http::Uri =
            options.issuer_url.parse().map_err(|e| AuthError(format!("oidc-issuer-url: not a URL: {e}")))?;
        if issuer.scheme_str() != Some("https") || issuer.host().is_none() {
            return Err(AuthError(format!("oidc-issuer-url {:?} must be an https URL", options.issuer_url)));
        }
        if issuer.query().is_some() {
            return Err(AuthError(format!("oidc-issuer-url {:?} must not have a query", options.issuer_url)));
        }
        if options.client_id.is_empty() {
            return Err(AuthError("oidc-client-id is required with oidc-issuer-url".into()));
        }
        if options.username_claim.is_empty() {
            return Err(AuthError("oidc-username-claim must not be empty".into()));
        }
        if options.signing_algs.is_empty() {
            return Err(AuthError("oidc-signing-algs must name at least one algorithm".into()));
        }
        for alg in &options.signing_algs {
            if !SUPPORTED_ALGORITHMS.contains(&alg.as_str()) {
                return Err(AuthError(format!(
                    "oidc-signing-algs: unsupported signing algorithm {alg:?} (supported: {})",
                    SUPPORTED_ALGORITHMS.join(", ")
                )));
            }
        }
        let client =
            HttpsClient::new(options.ca_pem.as_deref(), None).map_err(|e| AuthError(format!("oidc-ca-file: {e}")))?;
        let base = options.issuer_url.trim_end_matches('/').to_owned();
        Ok(OidcAuthenticator {
            options,
            base,
            client,
            keys: RwLock::new(Arc::default()),
            refresh: tokio::sync::Mutex::new(Refresh::default()),
        })
    }

    /// The settings.
    pub fn options(&self) -> &OidcOptions {
        &self.options
    }

    /// The user of `token`: `Ok(None)` if it is not a JWT of this issuer.
    pub async fn authenticate_token(&self, token: &str) -> Result<Option<UserInfo>, AuthError> {
        let Some(jwt) = Jwt::parse(token) else { return Ok(None) };
        if jwt.claims.get("iss").and_then(Value::as_str) != Some(self.options.issuer_url.as_str()) {
            return Ok(None);
        }
        let fail = |message: String| AuthError(format!("oidc: verify token: {message}"));
        let alg = jwt.header.get("alg").and_then(Value::as_str).unwrap_or_default();
        if !self.options.signing_algs.iter().any(|a| a == alg) {
            return Err(fail(format!(
                "oidc: id token signed with unsupported algorithm, expected {:?} got {alg:?}",
                self.options.signing_algs
            )));
        }
        let kid = jwt.header.get("kid").and_then(Value::as_str);
        self.verify_signature(&jwt, alg, kid).await.map_err(fail)?;
        self.check_claims(&jwt.claims).map_err(fail)?;
        self.user(&jwt.claims).map(Some)
    }

    /// Verifies the signature with a cached key, fetching the keys again
    /// when none of them is the token's.
    async fn verify_signature(&self, jwt: &Jwt, alg: &str, kid: Option<&str>) -> Result<(), String> {
        let candidates = |set: &KeySet| -> Vec<Key> {
            set.keys.iter().filter(|k| k.fits(alg) && (kid.is_none() || k.kid.as_deref() == kid)).cloned().collect()
        };
        let verify = |keys: &[Key]| keys.iter().any(|k| k.verify(alg, jwt.signed.as_bytes(), &jwt.signature));
        let cached = candidates(&self.current_keys());
        if !cached.is_empty() {
            return if verify(&cached) { Ok(()) } else { Err("failed to verify signature".into()) };
        }
        // No key of the token's: the issuer may have rotated its keys.
        let mut refresh = self.refresh.lock().await;
        let mut keys = candidates(&self.current_keys());
        if keys.is_empty() {
            let due = refresh.last.is_none_or(|last| last.elapsed() >= self.options.min_refresh_interval);
            if !due {
                return Err(format!("failed to verify signature: no key with id {:?} (keys fetched recently)", kid));
            }
            refresh.last = Some(Instant::now());
            let fetched = self.fetch_keys(&mut refresh).await?;
            *self.keys.write().expect("key lock") = Arc::new(KeySet { keys: fetched });
            keys = candidates(&self.current_keys());
        }
        drop(refresh);
        if keys.is_empty() {
            return Err(format!("failed to verify signature: the issuer has no {alg} key with id {kid:?}"));
        }
        if verify(&keys) { Ok(()) } else { Err("failed to verify signature".into()) }
    }

    fn current_keys(&self) -> Arc<KeySet> {
        self.keys.read().expect("key lock").clone()
    }

    /// Fetches the discovery document (once) and the key set.
    async fn fetch_keys(&self, refresh: &mut Refresh) -> Result<Vec<Key>, String> {
        let jwks_uri = match &refresh.jwks_uri {
            Some(uri) => uri.clone(),
            None => {
                let url = format!("{}/.well-known/openid-configuration", self.base);
                let discovery = self.client.get_json(&url).await.map_err(|e| format!("oidc: discovery: {e}"))?;
                let issuer = discovery.get("issuer").and_then(Value::as_str).unwrap_or_default();
                if issuer != self.options.issuer_url {
                    return Err(format!(
                        "oidc: issuer did not match the issuer returned by provider, expected {:?} got {issuer:?}",
                        self.options.issuer_url
                    ));
                }
                let uri = discovery
                    .get("jwks_uri")
                    .and_then(Value::as_str)
                    .filter(|u| u.starts_with("https://"))
                    .ok_or("oidc: discovery: jwks_uri is missing or not https")?
                    .to_owned();
                refresh.jwks_uri = Some(uri.clone());
                uri
            }
        };
        let jwks = self.client.get_json(&jwks_uri).await.map_err(|e| format!("oidc: fetching keys: {e}"))?;
        let keys = jwks.get("keys").and_then(Value::as_array).ok_or("oidc: the key set has no keys")?;
        Ok(keys.iter().filter_map(Key::from_jwk).collect())
    }

    /// Audience, time window and required claims.
    fn check_claims(&self, claims: &Value) -> Result<(), String> {
        let audiences: Vec<&str> = match claims.get("aud") {
            Some(Value::String(aud)) => vec![aud.as_str()],
            Some(Value::Array(list)) => list.iter().filter_map(Value::as_str).collect(),
            _ => Vec::new(),
        };
        if !audiences.contains(&self.options.client_id.as_str()) {
            return Err(format!("oidc: expected audience {:?} got {audiences:?}", self.options.client_id));
        }
        let now = now_secs();
        let time = |name: &str| claims.get(name).and_then(Value::as_f64).map(|t| t as i64);
        match time("exp") {
            None => return Err("oidc: token has no expiry (exp)".into()),
            Some(exp) if now > exp => return Err(format!("oidc: token is expired (Token Expiry: {exp})")),
            Some(_) => {}
        }
        if let Some(nbf) = time("nbf")
            && now + NOT_BEFORE_SKEW_SECS < nbf
        {
            return Err(format!("oidc: current time {now} before the nbf (not before) time: {nbf}"));
        }
        for (claim, want) in &self.options.required_claims {
            match claims.get(claim) {
                None => return Err(format!("oidc: required claim {claim} not present in ID token")),
                Some(Value::String(got)) if got == want => {}
                Some(got) => {
                    let got = got.as_str().map(String::from).unwrap_or_else(|| got.to_string());
                    return Err(format!(
                        "oidc: required claim {claim} value does not match. Got = {got}, want = {want}"
                    ));
                }
            }
        }
        Ok(())
    }

    /// The user the claims name.
    fn user(&self, claims: &Value) -> Result<UserInfo, AuthError> {
        let options = &self.options;
        let claim = &options.username_claim;
        let name = match claims.get(claim) {
            Some(Value::String(name)) => name,
            Some(_) => return Err(AuthError(format!("oidc: parse username claims {claim:?}: not a string"))),
            None => return Err(AuthError(format!("oidc: parse username claims {claim:?}: claim not present"))),
        };
        if claim == "email"
            && let Some(verified) = claims.get("email_verified")
        {
            match verified.as_bool() {
                Some(true) => {}
                Some(false) => return Err(AuthError("oidc: email not verified".into())),
                None => return Err(AuthError("oidc: parse 'email_verified' claim: not a boolean".into())),
            }
        }
        let mut groups = Vec::new();
        if let Some(groups_claim) = &options.groups_claim {
            let values: Vec<&str> = match claims.get(groups_claim) {
                None | Some(Value::Null) => Vec::new(),
                Some(Value::String(group)) => vec![group.as_str()],
                Some(Value::Array(list)) => list
                    .iter()
                    .map(|g| g.as_str())
                    .collect::<Option<Vec<_>>>()
                    .ok_or_else(|| AuthError(format!("oidc: parse groups claim {groups_claim:?}: not strings")))?,
                Some(_) => {
                    return Err(AuthError(format!(
                        "oidc: parse groups claim {groups_claim:?}: not a string or a list of strings"
                    )));
                }
            };
            groups = values.into_iter().map(|g| format!("{}{g}", options.groups_prefix)).collect();
        }
        Ok(UserInfo { name: format!("{}{name}", options.effective_username_prefix()), groups, ..Default::default() })
    }
}

#[async_trait]
impl Authenticator for OidcAuthenticator {
    async fn authenticate(&self, request: &Parts) -> Result<Option<UserInfo>, AuthError> {
        let Some(token) = crate::auth::authn::bearer_token(request) else {
            return Ok(None);
        };
        self.authenticate_token(token).await
    }
}

/// A compact JWS, decoded but not verified.
struct Jwt {
    header: Value,
    claims: Value,
    /// `<header>.<payload>`, what the signature covers.
    signed: String,
    signature: Vec<u8>,
}

impl Jwt {
    /// `None` when `token` is not a JWS with JSON header and claims.
    fn parse(token: &str) -> Option<Jwt> {
        let mut parts = token.split('.');
        let (Some(header), Some(payload), Some(signature), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return None;
        };
        let decode = |part: &str| B64.decode(part).ok().and_then(|bytes| serde_json::from_slice::<Value>(&bytes).ok());
        let (header_json, claims) = (decode(header)?, decode(payload)?);
        if !header_json.is_object() || !claims.is_object() {
            return None;
        }
        Some(Jwt {
            header: header_json,
            claims,
            signed: format!("{header}.{payload}"),
            signature: B64.decode(signature).ok()?,
        })
    }
}

#[cfg(test)]
mod properties;

#[cfg(test)]
pub(crate) mod tests {
    use std::net::SocketAddr;

    use ring::rand::SystemRandom;
    use ring::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, KeyPair as _, RsaKeyPair};
    use serde_json::json;

    use super::*;
    use crate::tls::pki::Pki;

    /// A fixed RSA key: ring signs with RSA keys but does not make them.
    const RSA_KEY: &str = include_str!("testdata/oidc-rsa.pem");

    /// A signing key of the test issuer.
    pub(crate) enum Signer {
        Rsa(RsaKeyPair),
        Ec(EcdsaKeyPair),
    }

    impl Signer {
        pub(crate) fn rsa() -> Signer {
            use rustls::pki_types::pem::PemObject as _;
            let der = rustls::pki_types::PrivatePkcs8KeyDer::from_pem_slice(RSA_KEY.as_bytes()).unwrap();
            Signer::Rsa(RsaKeyPair::from_pkcs8(der.secret_pkcs8_der()).expect("the test RSA key"))
        }

        pub(crate) fn ec() -> Signer {
            let rng = SystemRandom::new();
            let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng).unwrap();
            Signer::Ec(EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref(), &rng).unwrap())
        }

        pub(crate) fn alg(&self) -> &'static str {
            match self {
                Signer::Rsa(_) => "RS256",
                Signer::Ec(_) => "ES256",
            }
        }

        pub(crate) fn jwk(&self, kid: &str) -> Value {
            match self {
                Signer::Rsa(key) => {
                    let public = signature::RsaPublicKeyComponents::<Vec<u8>>::from(key.public());
                    json!({"kty": "RSA", "use": "sig", "alg": "RS256", "kid": kid, "n": B64.encode(&public.n), "e": B64.encode(&public.e)})
                }
                Signer::Ec(key) => {
                    let point = key.public_key().as_ref();
                    json!({"kty": "EC", "crv": "P-256", "kid": kid, "x": B64.encode(&point[1..33]), "y": B64.encode(&point[33..])})
                }
            }
        }

        pub(crate) fn sign(&self, kid: &str, claims: &Value) -> String {
            let header = json!({"alg": self.alg(), "kid": kid, "typ": "JWT"});
            let input = format!("{}.{}", B64.encode(header.to_string()), B64.encode(claims.to_string()));
            let rng = SystemRandom::new();
            let signature = match self {
                Signer::Rsa(key) => {
                    let mut out = vec![0; key.public().modulus_len()];
                    key.sign(&signature::RSA_PKCS1_SHA256, &rng, input.as_bytes(), &mut out).unwrap();
                    out
                }
                Signer::Ec(key) => key.sign(&rng, input.as_bytes()).unwrap().as_ref().to_vec(),
            };
            format!("{input}.{}", B64.encode(signature))
        }
    }

    /// An OIDC issuer on loopback over HTTPS: discovery, keys, tokens.
    pub(crate) struct TestIssuer {
        pub(crate) url: String,
        pub(crate) ca_pem: String,
        keys: Arc<RwLock<Vec<(String, Signer)>>>,
        pub(crate) key_fetches: Arc<std::sync::atomic::AtomicUsize>,
        _dir: tempfile::TempDir,
    }

    impl TestIssuer {
        pub(crate) async fn start(signer: Signer, kid: &str) -> TestIssuer {
            let dir = tempfile::tempdir().unwrap();
            let pki = Pki::load_or_create(dir.path(), &[]).unwrap();
            let serving = pki.issue_serving("issuer", &["127.0.0.1".to_owned()]).unwrap();
            let tls = crate::tls::server_config(&serving, pki.ca_pem(), crate::tls::ClientAuth::Optional).unwrap();
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let address: SocketAddr = listener.local_addr().unwrap();
            let url = format!("https://127.0.0.1:{}", address.port());
            let keys = Arc::new(RwLock::new(vec![(kid.to_owned(), signer)]));
            let key_fetches = Arc::new(std::sync::atomic::AtomicUsize::new(0));
            let discovery = json!({"issuer": url, "jwks_uri": format!("{url}/keys"), "id_token_signing_alg_values_supported": ["RS256", "ES256"]});
            let (served, fetches) = (keys.clone(), key_fetches.clone());
            let router = axum::Router::new()
                .route(
                    "/.well-known/openid-configuration",
                    axum::routing::get(move || async move { axum::Json(discovery) }),
                )
                .route(
                    "/keys",
                    axum::routing::get(move || async move {
                        fetches.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        let keys: Vec<Value> = served.read().unwrap().iter().map(|(kid, s)| s.jwk(kid)).collect();
                        axum::Json(json!({"keys": keys}))
                    }),
                );
            let options = crate::tls::ListenOptions::default().with_tls(tls);
            tokio::spawn(crate::tls::serve(listener, router, options, std::future::pending()));
            TestIssuer { url, ca_pem: pki.ca_pem().to_owned(), keys, key_fetches, _dir: dir }
        }

        /// Replaces the issuer's keys by `signer` under `kid`.
        pub(crate) fn rotate(&self, signer: Signer, kid: &str) {
            *self.keys.write().unwrap() = vec![(kid.to_owned(), signer)];
        }

        /// A token with `claims` over the issuer's defaults (`iss`, `aud`
        /// `kubernetes`, `sub` `alice`, valid for an hour), signed by the
        /// current key; `Null` values remove a claim.
        pub(crate) fn token(&self, claims: Value) -> String {
            let now = now_secs();
            let mut all = json!({"iss": self.url, "aud": "kubernetes", "sub": "alice", "iat": now, "exp": now + 3600});
            for (name, value) in claims.as_object().unwrap() {
                if value.is_null() {
                    all.as_object_mut().unwrap().remove(name);
                } else {
                    all[name] = value.clone();
                }
            }
            let keys = self.keys.read().unwrap();
            let (kid, signer) = &keys[0];
            signer.sign(kid, &all)
        }

        pub(crate) fn options(&self) -> OidcOptions {
            let mut options = OidcOptions::new(&self.url, "kubernetes");
            options.ca_pem = Some(self.ca_pem.clone());
            options.signing_algs = vec!["RS256".into(), "ES256".into()];
            options.min_refresh_interval = Duration::ZERO;
            options
        }
    }

    fn request(token: &str) -> Parts {
        http::Request::get("/api").header("authorization", format!("Bearer {token}")).body(()).unwrap().into_parts().0
    }

    /// What one token comes to: a user, left to others, or refused.
    #[derive(Debug, PartialEq)]
    enum Outcome {
        User(&'static str, &'static [&'static str]),
        Ignored,
        Refused(&'static str),
    }

    #[tokio::test]
    async fn tokens_of_the_issuer_are_verified_and_mapped() {
        let issuer = TestIssuer::start(Signer::rsa(), "rsa-1").await;
        let now = now_secs();
        let prefix = format!("{}#", issuer.url);
        let with = |f: &dyn Fn(&mut OidcOptions)| {
            let mut options = issuer.options();
            f(&mut options);
            options
        };
        let forged = {
            let token = issuer.token(json!({}));
            let (signed, _) = token.rsplit_once('.').unwrap();
            format!("{signed}.{}", B64.encode([7u8; 256]))
        };
        let altered = {
            let token = issuer.token(json!({}));
            let parts: Vec<&str> = token.split('.').collect();
            let claims = json!({"iss": issuer.url, "aud": "kubernetes", "sub": "root", "exp": now + 60});
            format!("{}.{}.{}", parts[0], B64.encode(claims.to_string()), parts[2])
        };
        let other_issuer =
            Signer::ec().sign("k", &json!({"iss": "https://elsewhere", "aud": "kubernetes", "sub": "x"}));
        let cases: Vec<(&str, OidcOptions, String, Outcome)> = vec![
            ("valid, default prefix", issuer.options(), issuer.token(json!({})), Outcome::User("alice", &[])),
            (
                "audience list",
                issuer.options(),
                issuer.token(json!({"aud": ["x", "kubernetes"]})),
                Outcome::User("alice", &[]),
            ),
            (
                "wrong audience",
                issuer.options(),
                issuer.token(json!({"aud": "other"})),
                Outcome::Refused("expected audience"),
            ),
            ("expired", issuer.options(), issuer.token(json!({"exp": now - 60})), Outcome::Refused("token is expired")),
            ("no expiry", issuer.options(), issuer.token(json!({"exp": null})), Outcome::Refused("no expiry")),
            (
                "not yet valid",
                issuer.options(),
                issuer.token(json!({"nbf": now + 3600})),
                Outcome::Refused("before the nbf"),
            ),
            ("nbf within skew", issuer.options(), issuer.token(json!({"nbf": now + 60})), Outcome::User("alice", &[])),
            ("bad signature", issuer.options(), forged, Outcome::Refused("failed to verify signature")),
            ("altered claims", issuer.options(), altered, Outcome::Refused("failed to verify signature")),
            ("another issuer", issuer.options(), other_issuer, Outcome::Ignored),
            ("not a JWT", issuer.options(), "opaque-token".into(), Outcome::Ignored),
            (
                "algorithm not allowed",
                with(&|o| o.signing_algs = vec!["ES256".into()]),
                issuer.token(json!({})),
                Outcome::Refused("unsupported algorithm"),
            ),
            (
                "groups as a list, prefixed",
                with(&|o| {
                    o.groups_claim = Some("groups".into());
                    o.groups_prefix = "oidc:".into();
                }),
                issuer.token(json!({"groups": ["dev", "ops"]})),
                Outcome::User("alice", &["oidc:dev", "oidc:ops"]),
            ),
            (
                "groups as a string",
                with(&|o| o.groups_claim = Some("groups".into())),
                issuer.token(json!({"groups": "dev"})),
                Outcome::User("alice", &["dev"]),
            ),
            (
                "groups of another type",
                with(&|o| o.groups_claim = Some("groups".into())),
                issuer.token(json!({"groups": 3})),
                Outcome::Refused("groups claim"),
            ),
            (
                "email claim: no default prefix",
                with(&|o| o.username_claim = "email".into()),
                issuer.token(json!({"email": "a@example.com", "email_verified": true})),
                Outcome::User("a@example.com", &[]),
            ),
            (
                "email not verified",
                with(&|o| o.username_claim = "email".into()),
                issuer.token(json!({"email": "a@example.com", "email_verified": false})),
                Outcome::Refused("email not verified"),
            ),
            (
                "explicit username prefix",
                with(&|o| o.username_prefix = Some("oidc:".into())),
                issuer.token(json!({})),
                Outcome::User("alice", &[]),
            ),
            (
                "username claim missing",
                with(&|o| o.username_claim = "preferred_username".into()),
                issuer.token(json!({})),
                Outcome::Refused("claim not present"),
            ),
            (
                "required claim present",
                with(&|o| {
                    o.required_claims.insert("hd".into(), "example.com".into());
                }),
                issuer.token(json!({"hd": "example.com"})),
                Outcome::User("alice", &[]),
            ),
            (
                "required claim differs",
                with(&|o| {
                    o.required_claims.insert("hd".into(), "example.com".into());
                }),
                issuer.token(json!({"hd": "evil.com"})),
                Outcome::Refused("required claim hd value does not match"),
            ),
        ];
        for (name, options, token, expected) in cases {
            let explicit_prefix = options.username_prefix.clone();
            let email = options.username_claim == "email";
            let authenticator = OidcAuthenticator::new(options).unwrap();
            let outcome = authenticator.authenticate(&request(&token)).await;
            match (expected, outcome) {
                (Outcome::User(user, groups), Ok(Some(got))) => {
                    let want_prefix = match (&explicit_prefix, email) {
                        (Some(p), _) => p.clone(),
                        (None, true) => String::new(),
                        (None, false) => prefix.clone(),
                    };
                    assert_eq!(got.name, format!("{want_prefix}{user}"), "{name}");
                    assert_eq!(got.groups, groups, "{name}");
                }
                (Outcome::Ignored, Ok(None)) => {}
                (Outcome::Refused(message), Err(AuthError(got))) => assert!(got.contains(message), "{name}: {got}"),
                (expected, got) => panic!("{name}: expected {expected:?}, got {got:?}"),
            }
        }
    }

    #[tokio::test]
    async fn rotated_keys_are_fetched_again_within_the_rate_limit() {
        let issuer = TestIssuer::start(Signer::rsa(), "old").await;
        let authenticator = OidcAuthenticator::new(issuer.options()).unwrap();
        let before = issuer.token(json!({}));
        assert!(authenticator.authenticate(&request(&before)).await.unwrap().is_some());
        assert!(authenticator.authenticate(&request(&before)).await.unwrap().is_some());
        assert_eq!(issuer.key_fetches.load(std::sync::atomic::Ordering::SeqCst), 1, "keys are cached");

        issuer.rotate(Signer::ec(), "new");
        let after = issuer.token(json!({}));
        let user = authenticator.authenticate(&request(&after)).await.unwrap().unwrap();
        assert_eq!(user.name, format!("{}#alice", issuer.url));
        assert_eq!(issuer.key_fetches.load(std::sync::atomic::Ordering::SeqCst), 2);
        let gone = authenticator.authenticate(&request(&before)).await.unwrap_err();
        assert!(gone.0.contains("no RS256 key with id Some(\"old\")"), "{gone}");

        // Within the rate limit an unknown key id is refused without a fetch.
        let mut options = issuer.options();
        options.min_refresh_interval = Duration::from_secs(3600);
        let limited = OidcAuthenticator::new(options).unwrap();
        assert!(limited.authenticate(&request(&after)).await.unwrap().is_some());
        issuer.rotate(Signer::ec(), "newer");
        let newest = issuer.token(json!({}));
        let fetches = issuer.key_fetches.load(std::sync::atomic::Ordering::SeqCst);
        let refused = limited.authenticate(&request(&newest)).await.unwrap_err();
        assert!(refused.0.contains("fetched recently"), "{refused}");
        assert_eq!(issuer.key_fetches.load(std::sync::atomic::Ordering::SeqCst), fetches);
    }

    #[tokio::test]
    async fn settings_and_unreachable_issuers_are_refused() {
        let bad = [
            OidcOptions::new("http://issuer", "k"),
            OidcOptions::new("https://issuer", ""),
            OidcOptions { signing_algs: vec!["HS256".into()], ..OidcOptions::new("https://issuer", "k") },
            OidcOptions { ca_pem: Some("not a pem".into()), ..OidcOptions::new("https://issuer", "k") },
        ];
        for options in bad {
            assert!(OidcAuthenticator::new(options.clone()).is_err(), "{options:?}");
        }
        // An issuer nobody serves: its tokens are refused, never let through.
        let issuer = TestIssuer::start(Signer::ec(), "k").await;
        let mut options = issuer.options();
        let port = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap().local_addr().unwrap().port();
        options.issuer_url = format!("https://127.0.0.1:{port}");
        let authenticator = OidcAuthenticator::new(options.clone()).unwrap();
        let token = Signer::ec()
            .sign("k", &json!({"iss": options.issuer_url, "aud": "kubernetes", "sub": "x", "exp": now_secs() + 60}));
        let error = authenticator.authenticate(&request(&token)).await.unwrap_err();
        assert!(error.0.contains("discovery"), "{error}");
    }
}
