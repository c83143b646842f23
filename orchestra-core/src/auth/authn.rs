//! Authentication: who is making the request.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use async_trait::async_trait;
use http::request::Parts;

/// The authenticated user (upstream `user.Info`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UserInfo {
    /// User name, e.g. `admin` or `system:kube-scheduler`.
    pub name: String,
    /// Unique id, if known.
    pub uid: String,
    /// Groups, e.g. `system:masters`, `system:authenticated`.
    pub groups: Vec<String>,
    /// Extra attributes.
    pub extra: BTreeMap<String, Vec<String>>,
}

impl UserInfo {
    /// A user with a name and groups.
    pub fn new(name: impl Into<String>, groups: &[&str]) -> UserInfo {
        UserInfo { name: name.into(), groups: groups.iter().map(|g| g.to_string()).collect(), ..Default::default() }
    }

    /// The anonymous user.
    pub fn anonymous() -> UserInfo {
        UserInfo::new("system:anonymous", &["system:unauthenticated"])
    }
}

/// A credential was presented but is not valid: the request fails with 401
/// and is never retried as anonymous.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid credential: {0}")]
pub struct AuthError(pub String);

/// Recognises one kind of credential.
///
/// Authenticators run in an [`AuthenticatorChain`], which an
/// [`ApiServerBuilder`](crate::server::ApiServerBuilder::authenticator)
/// takes:
///
/// ```
/// use async_trait::async_trait;
/// use http::request::Parts;
/// use orchestra_core::auth::{AuthError, Authenticator, AuthenticatorChain, UserInfo};
///
/// /// Trusts an `X-Remote-User` header set by a proxy in front.
/// struct RemoteUser;
///
/// #[async_trait]
/// impl Authenticator for RemoteUser {
///     async fn authenticate(&self, request: &Parts) -> Result<Option<UserInfo>, AuthError> {
///         let Some(value) = request.headers.get("x-remote-user") else {
///             return Ok(None);
///         };
///         let name = value.to_str().map_err(|_| AuthError("X-Remote-User is not text".into()))?;
///         Ok(Some(UserInfo::new(name, &["proxied"])))
///     }
/// }
///
/// # futures::executor::block_on(async {
/// let chain = AuthenticatorChain::new().with(RemoteUser);
/// let (parts, ()) = http::Request::get("/api").header("x-remote-user", "alice").body(()).unwrap().into_parts();
/// let user = chain.authenticate(&parts).await.unwrap();
/// assert_eq!(user.name, "alice");
/// assert_eq!(user.groups, ["proxied", "system:authenticated"]);
/// # });
/// ```
#[async_trait]
pub trait Authenticator: Send + Sync {
    /// `Ok(Some(user))` if the request carries a valid credential of this
    /// kind, `Ok(None)` if it carries none, `Err` if it carries an invalid one.
    async fn authenticate(&self, request: &Parts) -> Result<Option<UserInfo>, AuthError>;
}

/// Runs authenticators in order: the first that recognises the request wins;
/// an invalid credential fails the request at once.
#[derive(Clone, Default)]
pub struct AuthenticatorChain {
    authenticators: Vec<Arc<dyn Authenticator>>,
    anonymous: bool,
}

impl AuthenticatorChain {
    /// An empty chain that refuses requests without credentials.
    pub fn new() -> AuthenticatorChain {
        AuthenticatorChain::default()
    }

    /// Adds an authenticator at the end.
    pub fn with(mut self, authenticator: impl Authenticator + 'static) -> AuthenticatorChain {
        self.authenticators.push(Arc::new(authenticator));
        self
    }

    /// Adds an authenticator at the front (it sees requests first).
    pub fn first(mut self, authenticator: impl Authenticator + 'static) -> AuthenticatorChain {
        self.authenticators.insert(0, Arc::new(authenticator));
        self
    }

    /// Lets requests without any credential in as `system:anonymous`.
    pub fn allow_anonymous(mut self, allow: bool) -> AuthenticatorChain {
        self.anonymous = allow;
        self
    }

    /// Authenticates a request. Recognised users also get the
    /// `system:authenticated` group.
    pub async fn authenticate(&self, request: &Parts) -> Result<UserInfo, AuthError> {
        for authenticator in &self.authenticators {
            if let Some(mut user) = authenticator.authenticate(request).await? {
                if !user.groups.iter().any(|g| g == "system:authenticated") {
                    user.groups.push("system:authenticated".into());
                }
                return Ok(user);
            }
        }
        // A credential nobody recognises is refused, never taken as
        // anonymous (upstream answers 401 to an unknown bearer token).
        if request.headers.contains_key(http::header::AUTHORIZATION) {
            return Err(AuthError("the credential in the Authorization header is not valid".into()));
        }
        if self.anonymous { Ok(UserInfo::anonymous()) } else { Err(AuthError("no credentials".into())) }
    }
}

/// The identity of an in-process caller, carried as a request extension.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity(pub UserInfo);

/// Recognises [`Identity`] extensions (in-process components).
#[derive(Debug, Clone, Copy, Default)]
pub struct ExtensionAuthenticator;

#[async_trait]
impl Authenticator for ExtensionAuthenticator {
    async fn authenticate(&self, request: &Parts) -> Result<Option<UserInfo>, AuthError> {
        Ok(request.extensions.get::<Identity>().map(|identity| identity.0.clone()))
    }
}

/// A tower layer that stamps every request with an [`Identity`]: wrap the API
/// server's service with it to build an in-process client acting as a user.
#[derive(Debug, Clone)]
pub struct IdentityLayer(pub UserInfo);

impl<S> tower::Layer<S> for IdentityLayer {
    type Service = IdentityService<S>;

    fn layer(&self, inner: S) -> IdentityService<S> {
        IdentityService { inner, user: self.0.clone() }
    }
}

/// The service [`IdentityLayer`] builds.
#[derive(Debug, Clone)]
pub struct IdentityService<S> {
    inner: S,
    user: UserInfo,
}

impl<S, B> tower::Service<http::Request<B>> for IdentityService<S>
where
    S: tower::Service<http::Request<B>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut std::task::Context<'_>) -> std::task::Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: http::Request<B>) -> Self::Future {
        request.extensions_mut().insert(Identity(self.user.clone()));
        self.inner.call(request)
    }
}

/// Bearer tokens from a static token file (upstream `--token-auth-file`):
/// CSV lines `token,user,uid[,"group1,group2"]`. Tokens not in the file are
/// left to the next authenticator.
#[derive(Debug, Clone, Default)]
pub struct TokenFile {
    tokens: BTreeMap<String, UserInfo>,
}

impl TokenFile {
    /// Parses the file's contents.
    pub fn parse(contents: &str) -> Result<TokenFile, AuthError> {
        let mut tokens = BTreeMap::new();
        for (number, line) in contents.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let fields = split_csv(line);
            if fields.len() < 3 || fields[0].is_empty() || fields[1].is_empty() {
                return Err(AuthError(format!("token file line {}: expected token,user,uid[,groups]", number + 1)));
            }
            let groups = fields
                .get(3)
                .map(|g| g.split(',').map(str::trim).filter(|g| !g.is_empty()).map(String::from).collect())
                .unwrap_or_default();
            tokens.insert(
                fields[0].clone(),
                UserInfo { name: fields[1].clone(), uid: fields[2].clone(), groups, extra: BTreeMap::new() },
            );
        }
        Ok(TokenFile { tokens })
    }

    /// Reads and parses a token file.
    pub fn read(path: impl AsRef<Path>) -> Result<TokenFile, AuthError> {
        let contents = std::fs::read_to_string(path.as_ref())
            .map_err(|e| AuthError(format!("cannot read {}: {e}", path.as_ref().display())))?;
        TokenFile::parse(&contents)
    }

    /// Adds one token.
    pub fn insert(&mut self, token: impl Into<String>, user: UserInfo) {
        self.tokens.insert(token.into(), user);
    }
}

/// Splits one CSV line, honouring double quotes.
fn split_csv(line: &str) -> Vec<String> {
    let mut fields = vec![String::new()];
    let mut quoted = false;
    for c in line.chars() {
        match c {
            '"' => quoted = !quoted,
            ',' if !quoted => fields.push(String::new()),
            c => fields.last_mut().expect("never empty").push(c),
        }
    }
    fields.into_iter().map(|f| f.trim().to_owned()).collect()
}

/// The bearer token of a request's `Authorization` header, trimmed; `None`
/// without one.
pub(crate) fn bearer_token(request: &Parts) -> Option<&str> {
    let header = request.headers.get(http::header::AUTHORIZATION)?;
    header.to_str().ok()?.strip_prefix("Bearer ").map(str::trim)
}

#[async_trait]
impl Authenticator for TokenFile {
    async fn authenticate(&self, request: &Parts) -> Result<Option<UserInfo>, AuthError> {
        let Some(token) = bearer_token(request) else {
            return Ok(None);
        };
        // A token not in the file may be another authenticator's (OIDC, a
        // webhook); if none recognises it the chain refuses it.
        Ok(self.tokens.get(token).cloned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(auth: Option<&str>, identity: Option<UserInfo>) -> Parts {
        let mut builder = http::Request::get("/api");
        if let Some(auth) = auth {
            builder = builder.header("authorization", auth);
        }
        let mut request = builder.body(()).unwrap();
        if let Some(user) = identity {
            request.extensions_mut().insert(Identity(user));
        }
        request.into_parts().0
    }

    #[tokio::test]
    async fn chain_order_and_no_anonymous_fallback() {
        let tokens = TokenFile::parse("# comment\nsecret,admin,1,\"system:masters,ops\"\n").unwrap();
        let chain = AuthenticatorChain::new().with(ExtensionAuthenticator).with(tokens).allow_anonymous(true);
        let admin = chain.authenticate(&parts(Some("Bearer secret"), None)).await.unwrap();
        assert_eq!(admin.name, "admin");
        assert_eq!(admin.groups, ["system:masters", "ops", "system:authenticated"]);
        let scheduler = UserInfo::new("system:kube-scheduler", &[]);
        let user = chain.authenticate(&parts(None, Some(scheduler))).await.unwrap();
        assert_eq!(user.name, "system:kube-scheduler");
        assert!(
            chain.authenticate(&parts(Some("Bearer wrong"), None)).await.is_err(),
            "invalid never becomes anonymous"
        );
        assert_eq!(chain.authenticate(&parts(None, None)).await.unwrap(), UserInfo::anonymous());
        let strict = AuthenticatorChain::new().with(ExtensionAuthenticator);
        assert!(strict.authenticate(&parts(None, None)).await.is_err());
        assert!(TokenFile::parse("only-token").is_err());
        let file = TokenFile::parse("secret,admin,1\n").unwrap();
        assert_eq!(file.authenticate(&parts(Some("Bearer other"), None)).await, Ok(None), "left to others");
    }
}
