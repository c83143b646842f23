//! One identity per controller (upstream kube-controller-manager's
//! `--use-service-account-credentials`): each built-in controller writes as
//! its own service account in `kube-system`, to which the default RBAC
//! roles `system:controller:<account>` are bound, while the manager's own
//! identity reads the shared informers and holds the leader lease.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

/// The namespace of the controllers' service accounts.
pub const NAMESPACE: &str = "kube-system";

/// The user name of a controller's service account, e.g.
/// `system:serviceaccount:kube-system:replicaset-controller`.
pub fn user_name(service_account: &str) -> String {
    format!("system:serviceaccount:{NAMESPACE}:{service_account}")
}

/// The groups of a controller's service account.
pub const GROUPS: [&str; 2] = ["system:serviceaccounts", "system:serviceaccounts:kube-system"];

/// The future [`ControllerCredentials::client`] returns.
pub type ClientFuture = Pin<Box<dyn Future<Output = Result<kube::Client, kube::Error>> + Send>>;

/// Gives a controller a client acting as its service account.
///
/// A closure from the account's name to a client is one (an embedded API
/// server's in-process clients carry any identity):
///
/// ```
/// use std::sync::Arc;
/// use orchestra_ctrl::controllers::ControllerManagerConfig;
/// use orchestra_ctrl::credentials::{ClientFuture, ControllerCredentials};
///
/// # fn client_for(user: String) -> kube::Client { unimplemented!() }
/// let credentials = |account: &str| -> ClientFuture {
///     let client = client_for(orchestra_ctrl::credentials::user_name(account));
///     Box::pin(async move { Ok(client) })
/// };
/// let config = ControllerManagerConfig::default().with_credentials(Arc::new(credentials));
/// # let _ = config;
/// ```
pub trait ControllerCredentials: Send + Sync + 'static {
    /// A client acting as service account `kube-system/<service_account>`.
    fn client(&self, service_account: &str) -> ClientFuture;
}

impl<F> ControllerCredentials for F
where
    F: Fn(&str) -> ClientFuture + Send + Sync + 'static,
{
    fn client(&self, service_account: &str) -> ClientFuture {
        self(service_account)
    }
}

/// Shared credentials, as [`ControllerManagerConfig`](crate::controllers::ControllerManagerConfig) holds them.
#[derive(Clone)]
pub struct Credentials(pub Arc<dyn ControllerCredentials>);

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Credentials(..)")
    }
}

mod token_request;
pub use token_request::TokenRequestCredentials;
