//! The subcommands of the `orchestra` binary.

pub mod apiserver;
pub mod audit;
pub mod controller_manager;
pub mod image;
pub mod images;
pub mod node;
pub mod scheduler;
pub mod store_demo;
pub mod token;
pub mod up;

/// Pods' address space in the reference assembly: inside 127.0.0.0/8, so
/// every pod address is a loopback address a process can bind on Linux
/// without any set-up (see `orchestra_node::network`).
pub const CLUSTER_CIDR: &str = "127.64.0.0/10";

/// Completes on SIGTERM or SIGINT.
pub async fn shutdown_signal() {
    let mut terminate =
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).expect("SIGTERM handler");
    tokio::select! {
        _ = terminate.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}

pub use orchestra::control_plane::default_identity;

/// The API server's authentication and authorization flags, as
/// kube-apiserver's.
#[derive(clap::Args)]
pub struct AuthArgs {
    /// Let requests without credentials in as `system:anonymous` (group
    /// `system:unauthenticated`), limited by the authorizers like anyone.
    #[arg(long, default_value_t = false, action = clap::ArgAction::Set)]
    pub anonymous_auth: bool,
    /// The authorizers, in order: `Node`, `RBAC`, `AlwaysAllow`, `AlwaysDeny`.
    #[arg(long, default_value = "Node,RBAC", value_parser = parse_modes)]
    pub authorization_mode: std::vec::Vec<orchestra::core::auth::AuthorizationMode>,
    /// Accept bootstrap tokens (Secrets of type
    /// `bootstrap.kubernetes.io/token` in `kube-system`, made by `orchestra
    /// token create`), with which nodes join (`orchestra node
    /// --bootstrap-token`).
    #[arg(long, default_value_t = false, action = clap::ArgAction::Set)]
    pub enable_bootstrap_token_auth: bool,
}

impl AuthArgs {
    /// The control plane with these flags applied.
    pub fn apply(
        &self,
        cluster: orchestra::control_plane::ControlPlaneBuilder,
    ) -> orchestra::control_plane::ControlPlaneBuilder {
        let cluster = cluster.allow_anonymous(self.anonymous_auth).authorization_modes(&self.authorization_mode);
        if self.enable_bootstrap_token_auth {
            cluster.configure_api_server(|api| api.bootstrap_tokens())
        } else {
            cluster
        }
    }
}

fn parse_modes(list: &str) -> Result<Vec<orchestra::core::auth::AuthorizationMode>, String> {
    orchestra::core::auth::AuthorizationMode::parse_list(list).map_err(|e| e.to_string())
}
