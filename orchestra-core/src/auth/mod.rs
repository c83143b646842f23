//! Authentication, authorization and admission: the traits every request
//! passes through, the chains that run them, and simple built-ins.
//!
//! The pipeline is authenticate → authorize → admit (mutating, then
//! validating; writes only) → validate → store. The one admission plugin
//! an API server runs by default is
//! [`NamespaceLifecycle`](admission::NamespaceLifecycle); the other
//! built-in plugins are in [`admission`], to assemble a chain with. In-process
//! components carry their identity as an [`Identity`] request extension,
//! which [`ExtensionAuthenticator`] recognises like any other credential.

mod abac;
pub mod admission;
mod authn;
mod authz;
pub mod bootstrap_token;
mod client_cert;
mod https;
mod mode;
pub mod node;
mod oidc;
mod public;
pub mod rbac;
pub mod service_account;
mod webhook;
mod webhook_authz;
mod webhook_token;

pub use abac::{ABAC_API_VERSION, AbacAuthorizer, PolicyFileError};
pub use authn::{
    AuthError, Authenticator, AuthenticatorChain, ExtensionAuthenticator, Identity, IdentityLayer, TokenFile, UserInfo,
};
pub use authz::{AllowAll, Attributes, Authorizer, AuthorizerChain, Decision, DenyAll, Rules};
pub use client_cert::{ClientCertAuthenticator, PeerCertificates, user_of as certificate_user};
pub use mode::{AuthorizationMode, ModeError};
pub use oidc::{OidcAuthenticator, OidcOptions, SUPPORTED_ALGORITHMS as OIDC_SIGNING_ALGORITHMS};
pub use public::{AllowAuthenticated, PUBLIC_PATHS, PublicInfoViewer};
pub use webhook::{ReviewVersion, WebhookConfig, WebhookConfigError};
pub use webhook_authz::{DEFAULT_AUTHORIZED_TTL, DEFAULT_UNAUTHORIZED_TTL, WebhookAuthorizer};
pub use webhook_token::{DEFAULT_TOKEN_CACHE_TTL, WebhookTokenAuthenticator};
