//! Upstream's `--authorization-mode`: which authorizers run, in order.

use std::fmt;
use std::str::FromStr;

/// One entry of `--authorization-mode` (upstream's names).
///
/// [`ApiServerBuilder::authorization_modes`](crate::server::ApiServerBuilder::authorization_modes)
/// builds the authorizer chain from a list of them; the default is
/// `Node,RBAC`.
///
/// ```
/// use orchestra_core::auth::AuthorizationMode;
///
/// let modes = AuthorizationMode::parse_list("Node,RBAC").unwrap();
/// assert_eq!(modes, [AuthorizationMode::Node, AuthorizationMode::Rbac]);
/// assert!(AuthorizationMode::parse_list("RBAC,RBAC").is_err());
/// assert!(AuthorizationMode::parse_list("Magic").is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum AuthorizationMode {
    /// Every request is allowed ([`AllowAll`](super::AllowAll)).
    AlwaysAllow,
    /// Every request is denied ([`DenyAll`](super::DenyAll)).
    AlwaysDeny,
    /// Node agents, by the pods bound to them
    /// ([`NodeAuthorizer`](super::node::NodeAuthorizer)).
    Node,
    /// Roles and bindings ([`RbacAuthorizer`](super::rbac::RbacAuthorizer));
    /// the default roles are created at start.
    Rbac,
    /// A remote service asked with SubjectAccessReviews
    /// ([`WebhookAuthorizer`](super::WebhookAuthorizer)), which must be
    /// configured (upstream's `--authorization-webhook-config-file`).
    Webhook,
    /// The policies of a policy file
    /// ([`AbacAuthorizer`](super::AbacAuthorizer)), which must be given
    /// (upstream's `--authorization-policy-file`).
    Abac,
}

/// A `--authorization-mode` value that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ModeError {
    /// A name upstream does not have.
    #[error("unknown authorization mode {0:?} (known: AlwaysAllow, AlwaysDeny, Node, RBAC, ABAC, Webhook)")]
    Unknown(String),
    /// A mode upstream has that this server cannot run yet.
    #[error(
        "authorization mode {0} is not supported yet (supported: AlwaysAllow, AlwaysDeny, Node, RBAC, Webhook, ABAC)"
    )]
    Unsupported(String),
    /// A mode named without the configuration it needs.
    #[error("authorization mode {0} needs its configuration ({flag})", flag = config_flag(*.0))]
    Unconfigured(AuthorizationMode),
    /// A mode named twice.
    #[error("authorization mode {0} is given more than once")]
    Repeated(AuthorizationMode),
    /// No mode at all.
    #[error("at least one authorization mode is required")]
    Empty,
}

impl AuthorizationMode {
    /// The modes of a comma-separated list, e.g. `Node,RBAC`, in order.
    pub fn parse_list(list: &str) -> Result<Vec<AuthorizationMode>, ModeError> {
        let mut modes = Vec::new();
        for name in list.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            let mode: AuthorizationMode = name.parse()?;
            if modes.contains(&mode) {
                return Err(ModeError::Repeated(mode));
            }
            modes.push(mode);
        }
        if modes.is_empty() {
            return Err(ModeError::Empty);
        }
        Ok(modes)
    }
}

impl FromStr for AuthorizationMode {
    type Err = ModeError;

    fn from_str(name: &str) -> Result<AuthorizationMode, ModeError> {
        match name {
            "AlwaysAllow" => Ok(AuthorizationMode::AlwaysAllow),
            "AlwaysDeny" => Ok(AuthorizationMode::AlwaysDeny),
            "Node" => Ok(AuthorizationMode::Node),
            "RBAC" => Ok(AuthorizationMode::Rbac),
            "Webhook" => Ok(AuthorizationMode::Webhook),
            "ABAC" => Ok(AuthorizationMode::Abac),
            other => Err(ModeError::Unknown(other.to_owned())),
        }
    }
}

impl fmt::Display for AuthorizationMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            AuthorizationMode::AlwaysAllow => "AlwaysAllow",
            AuthorizationMode::AlwaysDeny => "AlwaysDeny",
            AuthorizationMode::Node => "Node",
            AuthorizationMode::Rbac => "RBAC",
            AuthorizationMode::Webhook => "Webhook",
            AuthorizationMode::Abac => "ABAC",
        })
    }
}

/// The kube-apiserver flag that configures `mode`.
fn config_flag(mode: AuthorizationMode) -> &'static str {
    match mode {
        AuthorizationMode::Webhook => "--authorization-webhook-config-file",
        AuthorizationMode::Abac => "--authorization-policy-file",
        _ => "none needed",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_parse_as_upstreams_flag() {
        use AuthorizationMode::*;
        let cases: &[(&str, Result<Vec<AuthorizationMode>, ModeError>)] = &[
            ("Node,RBAC", Ok(vec![Node, Rbac])),
            (" RBAC , AlwaysAllow ", Ok(vec![Rbac, AlwaysAllow])),
            ("AlwaysDeny", Ok(vec![AlwaysDeny])),
            ("", Err(ModeError::Empty)),
            ("rbac", Err(ModeError::Unknown("rbac".into()))),
            ("Node,ABAC", Ok(vec![Node, Abac])),
            ("Node,Node", Err(ModeError::Repeated(Node))),
            ("Node,Webhook,RBAC", Ok(vec![Node, Webhook, Rbac])),
        ];
        for (list, expected) in cases {
            assert_eq!(&AuthorizationMode::parse_list(list), expected, "{list:?}");
        }
        for mode in [AlwaysAllow, AlwaysDeny, Node, Rbac, Webhook, Abac] {
            assert_eq!(mode.to_string().parse::<AuthorizationMode>(), Ok(mode));
        }
    }
}
