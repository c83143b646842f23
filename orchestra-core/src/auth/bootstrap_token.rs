//! Bootstrap tokens (upstream's `--enable-bootstrap-token-auth`): bearer
//! tokens `<id>.<secret>` held in Secrets of type
//! `bootstrap.kubernetes.io/token` named `bootstrap-token-<id>` in
//! `kube-system`, with which a new node authenticates to ask for its client
//! certificate.
//!
//! A token is accepted while its Secret holds it (`token-id`,
//! `token-secret`), allows authentication
//! (`usage-bootstrap-authentication: "true"`), has not expired
//! (`expiration`, RFC 3339) and is not being deleted. The user is
//! `system:bootstrap:<id>` in the group `system:bootstrappers` and the
//! groups of `auth-extra-groups` (comma-separated, each starting with
//! `system:bootstrappers:`).
//!
//! [`BootstrapToken`] makes new tokens and their Secrets (what
//! `kubeadm token create` does).

use std::sync::Arc;

use async_trait::async_trait;
use base64::Engine as _;
use http::request::Parts;
use serde_json::{Value, json};

use super::admission::{ObjectReader, ResourceRef};
use super::{AuthError, Authenticator, UserInfo};

/// The Secret type of bootstrap tokens.
pub const SECRET_TYPE: &str = "bootstrap.kubernetes.io/token";
/// The namespace holding bootstrap token Secrets.
pub const NAMESPACE: &str = "kube-system";
/// The prefix of a bootstrap token Secret's name, before the token id.
pub const SECRET_PREFIX: &str = "bootstrap-token-";
/// The group every bootstrap token user is in.
pub const GROUP: &str = "system:bootstrappers";
/// The prefix of a bootstrap token user's name, before the token id.
pub const USER_PREFIX: &str = "system:bootstrap:";
/// The group kubeadm puts its node-joining tokens in (`auth-extra-groups`).
pub const KUBEADM_GROUP: &str = "system:bootstrappers:kubeadm:default-node-token";

const SECRETS: ResourceRef<'static> = ResourceRef::new("", "v1", "secrets");
const ID_LEN: usize = 6;
const SECRET_LEN: usize = 16;
const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";

/// Accepts bootstrap tokens whose Secret, read through an [`ObjectReader`]
/// (the server's: [`ApiServerBuilder::bootstrap_tokens`](crate::server::ApiServerBuilder::bootstrap_tokens)),
/// holds them.
///
/// A bearer token not shaped like a bootstrap token, or whose Secret does
/// not exist, is left to the other authenticators; one whose Secret exists
/// but does not accept it (another secret, expired, not for authentication,
/// bad extra groups, being deleted) is refused (401).
///
/// ```
/// use std::sync::Arc;
/// use orchestra_core::auth::Authenticator;
/// use orchestra_core::auth::admission::{ResourceRef, StaticObjects};
/// use orchestra_core::auth::bootstrap_token::{BootstrapToken, BootstrapTokenAuthenticator};
///
/// # futures::executor::block_on(async {
/// let token = BootstrapToken::generate().unwrap();
/// let objects = StaticObjects::new();
/// objects.insert(ResourceRef::new("", "v1", "secrets"), token.secret(None, &[]));
/// let authn = BootstrapTokenAuthenticator::new(Arc::new(objects));
/// let request = http::Request::get("/api")
///     .header("authorization", format!("Bearer {token}"))
///     .body(())
///     .unwrap()
///     .into_parts()
///     .0;
/// let user = authn.authenticate(&request).await.unwrap().unwrap();
/// assert_eq!(user.name, format!("system:bootstrap:{}", token.id()));
/// assert_eq!(user.groups, ["system:bootstrappers"]);
/// # });
/// ```
pub struct BootstrapTokenAuthenticator {
    objects: Arc<dyn ObjectReader>,
}

impl BootstrapTokenAuthenticator {
    /// Reads bootstrap token Secrets from `objects`.
    pub fn new(objects: Arc<dyn ObjectReader>) -> BootstrapTokenAuthenticator {
        BootstrapTokenAuthenticator { objects }
    }
}

/// A bootstrap token: an id (public: it names the Secret) and a secret.
#[derive(Clone, PartialEq, Eq)]
pub struct BootstrapToken {
    id: String,
    secret: String,
}

impl std::fmt::Debug for BootstrapToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BootstrapToken").field("id", &self.id).field("secret", &"<redacted>").finish()
    }
}

/// The token as `<id>.<secret>`, the bearer credential.
impl std::fmt::Display for BootstrapToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.id, self.secret)
    }
}

impl BootstrapToken {
    /// A new random token.
    pub fn generate() -> Result<BootstrapToken, AuthError> {
        let mut bytes = [0u8; ID_LEN + SECRET_LEN];
        getrandom::fill(&mut bytes).map_err(|e| AuthError(format!("cannot generate a token: {e}")))?;
        // 36 symbols: the bias of `% 36` on a byte is irrelevant for a
        // 16-character secret (over 80 bits either way).
        let text: String = bytes.iter().map(|b| ALPHABET[*b as usize % ALPHABET.len()] as char).collect();
        Ok(BootstrapToken { id: text[..ID_LEN].to_owned(), secret: text[ID_LEN..].to_owned() })
    }

    /// Parses `<id>.<secret>` (id `[a-z0-9]{6}`, secret `[a-z0-9]{16}`);
    /// `None` if the text is not shaped so.
    pub fn parse(text: &str) -> Option<BootstrapToken> {
        let (id, secret) = text.split_once('.')?;
        let valid = |s: &str, len: usize| s.len() == len && s.bytes().all(|b| ALPHABET.contains(&b));
        (valid(id, ID_LEN) && valid(secret, SECRET_LEN))
            .then(|| BootstrapToken { id: id.to_owned(), secret: secret.to_owned() })
    }

    /// The token id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The name of the token's Secret, `bootstrap-token-<id>`.
    pub fn secret_name(&self) -> String {
        format!("{SECRET_PREFIX}{}", self.id)
    }

    /// The Secret to create in `kube-system` for this token, usable for
    /// authentication and signing, expiring at `expiration` (RFC 3339) if
    /// given, with `extra_groups` (each `system:bootstrappers:...`) in
    /// `auth-extra-groups`.
    pub fn secret(&self, expiration: Option<&str>, extra_groups: &[&str]) -> Value {
        let mut data = serde_json::Map::new();
        let mut put = |key: &str, value: &str| {
            data.insert(key.into(), base64::engine::general_purpose::STANDARD.encode(value).into());
        };
        put("token-id", &self.id);
        put("token-secret", &self.secret);
        put("usage-bootstrap-authentication", "true");
        put("usage-bootstrap-signing", "true");
        if let Some(expiration) = expiration {
            put("expiration", expiration);
        }
        if !extra_groups.is_empty() {
            put("auth-extra-groups", &extra_groups.join(","));
        }
        json!({
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": self.secret_name(), "namespace": NAMESPACE},
            "type": SECRET_TYPE,
            "data": data,
        })
    }
}

/// The decoded value of `key` in the Secret's `data`.
fn secret_string(secret: &Value, key: &str) -> Option<String> {
    let encoded = secret.get("data")?.get(key)?.as_str()?;
    let bytes = base64::engine::general_purpose::STANDARD.decode(encoded).ok()?;
    String::from_utf8(bytes).ok()
}

/// Compares in time independent of where the inputs differ.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Whether an `auth-extra-groups` entry is valid (upstream's
/// `^system:bootstrappers:[a-z0-9:-]{0,255}[a-z0-9]$`).
fn valid_extra_group(group: &str) -> bool {
    let Some(rest) = group.strip_prefix("system:bootstrappers:") else { return false };
    !rest.is_empty()
        && rest.len() <= 256
        && rest.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b':' || b == b'-')
        && rest.ends_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
}

/// Whether the RFC 3339 `expiration` is past; an unparsable one counts as
/// expired, as upstream's does.
fn expired(expiration: &str) -> bool {
    match expiration.parse::<k8s_openapi::jiff::Timestamp>() {
        Ok(at) => at <= k8s_openapi::jiff::Timestamp::now(),
        Err(_) => true,
    }
}

/// The user of `token` given its Secret, or why the Secret refuses it.
fn user_of(token: &BootstrapToken, secret: &Value) -> Result<UserInfo, String> {
    let name = token.secret_name();
    if secret.pointer("/metadata/deletionTimestamp").is_some() {
        return Err(format!("bootstrap token secret {name} is being deleted"));
    }
    if secret.get("type").and_then(Value::as_str) != Some(SECRET_TYPE) {
        return Err(format!("secret {name} is not of type {SECRET_TYPE}"));
    }
    let held = secret_string(secret, "token-secret").unwrap_or_default();
    if !constant_time_eq(held.as_bytes(), token.secret.as_bytes()) {
        return Err(format!("bootstrap token {} does not match its secret", token.id));
    }
    if secret_string(secret, "token-id").as_deref() != Some(token.id.as_str()) {
        return Err(format!("bootstrap token secret {name} holds another token id"));
    }
    if let Some(expiration) = secret_string(secret, "expiration")
        && expired(&expiration)
    {
        return Err(format!("bootstrap token {} has expired", token.id));
    }
    if secret_string(secret, "usage-bootstrap-authentication").as_deref() != Some("true") {
        return Err(format!("bootstrap token {} is not for authentication", token.id));
    }
    let mut groups = vec![GROUP.to_owned()];
    if let Some(extra) = secret_string(secret, "auth-extra-groups") {
        for group in extra.split(',').map(str::trim).filter(|g| !g.is_empty()) {
            if !valid_extra_group(group) {
                return Err(format!("bootstrap token secret {name} has an invalid auth-extra-groups entry {group:?}"));
            }
            if !groups.iter().any(|g| g == group) {
                groups.push(group.to_owned());
            }
        }
    }
    Ok(UserInfo { name: format!("{USER_PREFIX}{}", token.id), groups, ..Default::default() })
}

#[async_trait]
impl Authenticator for BootstrapTokenAuthenticator {
    async fn authenticate(&self, request: &Parts) -> Result<Option<UserInfo>, AuthError> {
        let Some(token) = crate::auth::authn::bearer_token(request).and_then(BootstrapToken::parse) else {
            return Ok(None);
        };
        let secret = self
            .objects
            .get(SECRETS, Some(NAMESPACE), &token.secret_name())
            .await
            .map_err(|e| AuthError(format!("cannot check the bootstrap token: {}", e.message)))?;
        let Some(secret) = secret else { return Ok(None) };
        user_of(&token, &secret).map(Some).map_err(AuthError)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::admission::StaticObjects;

    const TOKEN: &str = "abcdef.0123456789abcdef";

    fn parts(token: &str) -> Parts {
        http::Request::get("/api").header("authorization", format!("Bearer {token}")).body(()).unwrap().into_parts().0
    }

    fn encoded(value: &str) -> Value {
        base64::engine::general_purpose::STANDARD.encode(value).into()
    }

    /// The Secret of [`TOKEN`], changed by `edit`.
    fn secret(edit: impl FnOnce(&mut Value)) -> Value {
        let mut secret = BootstrapToken::parse(TOKEN).unwrap().secret(Some("2999-01-01T00:00:00Z"), &[]);
        edit(&mut secret);
        secret
    }

    #[tokio::test]
    async fn accepts_only_tokens_their_secret_accepts() {
        struct Case {
            name: &'static str,
            token: &'static str,
            secret: Option<Value>,
            /// `Ok(Some((user, groups)))`, `Ok(None)` (not ours), or `Err(text in the message)`.
            want: Result<Option<(&'static str, Vec<&'static str>)>, &'static str>,
        }
        let cases = [
            Case {
                name: "valid",
                token: TOKEN,
                secret: Some(secret(|_| {})),
                want: Ok(Some(("system:bootstrap:abcdef", vec![GROUP]))),
            },
            Case {
                name: "extra groups",
                token: TOKEN,
                secret: Some(secret(|s| {
                    s["data"]["auth-extra-groups"] = encoded(&format!("{KUBEADM_GROUP},system:bootstrappers:x"))
                })),
                want: Ok(Some(("system:bootstrap:abcdef", vec![GROUP, KUBEADM_GROUP, "system:bootstrappers:x"]))),
            },
            Case {
                name: "no expiration",
                token: TOKEN,
                secret: Some(secret(|s| {
                    s["data"].as_object_mut().unwrap().remove("expiration");
                })),
                want: Ok(Some(("system:bootstrap:abcdef", vec![GROUP]))),
            },
            Case { name: "not a bootstrap token", token: "static-token", secret: Some(secret(|_| {})), want: Ok(None) },
            Case { name: "upper case", token: "ABCDEF.0123456789abcdef", secret: None, want: Ok(None) },
            Case { name: "short secret", token: "abcdef.0123456789", secret: None, want: Ok(None) },
            Case { name: "no secret", token: TOKEN, secret: None, want: Ok(None) },
            Case {
                name: "wrong secret",
                token: "abcdef.0123456789abcdee",
                secret: Some(secret(|_| {})),
                want: Err("does not match"),
            },
            Case {
                name: "expired",
                token: TOKEN,
                secret: Some(secret(|s| s["data"]["expiration"] = encoded("2001-01-01T00:00:00Z"))),
                want: Err("expired"),
            },
            Case {
                name: "unparsable expiration",
                token: TOKEN,
                secret: Some(secret(|s| s["data"]["expiration"] = encoded("tomorrow"))),
                want: Err("expired"),
            },
            Case {
                name: "not for authentication",
                token: TOKEN,
                secret: Some(secret(|s| s["data"]["usage-bootstrap-authentication"] = encoded("false"))),
                want: Err("not for authentication"),
            },
            Case {
                name: "other type",
                token: TOKEN,
                secret: Some(secret(|s| s["type"] = "Opaque".into())),
                want: Err("not of type"),
            },
            Case {
                name: "other id",
                token: TOKEN,
                secret: Some(secret(|s| s["data"]["token-id"] = encoded("zzzzzz"))),
                want: Err("another token id"),
            },
            Case {
                name: "extra group outside system:bootstrappers",
                token: TOKEN,
                secret: Some(secret(|s| s["data"]["auth-extra-groups"] = encoded("system:masters"))),
                want: Err("auth-extra-groups"),
            },
            Case {
                name: "being deleted",
                token: TOKEN,
                secret: Some(secret(|s| s["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z".into())),
                want: Err("being deleted"),
            },
        ];
        for case in cases {
            let objects = StaticObjects::new();
            if let Some(secret) = case.secret {
                objects.insert(SECRETS, secret);
            }
            let authn = BootstrapTokenAuthenticator::new(Arc::new(objects));
            let got = authn.authenticate(&parts(case.token)).await;
            match (got, case.want) {
                (Ok(Some(user)), Ok(Some((name, groups)))) => {
                    assert_eq!(user.name, name, "{}", case.name);
                    assert_eq!(user.groups, groups, "{}", case.name);
                }
                (Ok(None), Ok(None)) => {}
                (Err(e), Err(text)) => assert!(e.0.contains(text), "{}: {e}", case.name),
                (got, want) => panic!("{}: got {got:?}, want {want:?}", case.name),
            }
        }
    }

    #[test]
    fn generated_tokens_parse_and_name_their_secret() {
        let token = BootstrapToken::generate().unwrap();
        let text = token.to_string();
        assert_eq!(BootstrapToken::parse(&text), Some(token.clone()));
        assert_eq!(token.secret_name(), format!("bootstrap-token-{}", token.id()));
        assert_ne!(BootstrapToken::generate().unwrap(), token);
        assert!(!format!("{token:?}").contains(&text[7..]), "Debug hides the secret");
        assert!(
            constant_time_eq(b"abc", b"abc") && !constant_time_eq(b"abc", b"abd") && !constant_time_eq(b"ab", b"abc")
        );
    }
}
