//! `kube::Client` constructors: over the in-process API server, or from a
//! kubeconfig file.

use std::path::Path;

#[cfg(feature = "tls")]
pub mod bootstrap;

/// A client that sends every request straight into `server`'s tower service,
/// with no socket in between, as the server's own loopback identity
/// ([`loopback_user`]: `system:apiserver` in `system:masters`, which may do
/// anything). The same pipeline runs as for remote clients.
#[cfg(feature = "server")]
pub fn in_process(server: &crate::server::ApiServer, default_namespace: &str) -> kube::Client {
    in_process_as(server, loopback_user(), default_namespace)
}

/// The identity of [`in_process`] clients: `system:apiserver` in
/// `system:masters`, as upstream's loopback client.
#[cfg(feature = "server")]
pub fn loopback_user() -> crate::auth::UserInfo {
    crate::auth::UserInfo::new("system:apiserver", &["system:masters"])
}

/// Like [`in_process`], acting as `user`: every request carries the user as
/// an [`Identity`](crate::auth::Identity), which the server's default
/// authenticator chain recognises. How in-process components (scheduler,
/// controllers) talk to an embedded API server under their own names.
#[cfg(feature = "server")]
pub fn in_process_as(
    server: &crate::server::ApiServer,
    user: crate::auth::UserInfo,
    default_namespace: &str,
) -> kube::Client {
    let service = tower::Layer::layer(&crate::auth::IdentityLayer(user), server.router());
    kube::Client::new(service, default_namespace)
}

/// A client for the cluster a kubeconfig file describes (its current context).
pub async fn from_kubeconfig(path: impl AsRef<Path>) -> Result<kube::Client, kube::Error> {
    kube::Client::try_from(config_from_kubeconfig(path).await?)
}

/// The client configuration of a kubeconfig file's current context.
pub async fn config_from_kubeconfig(path: impl AsRef<Path>) -> Result<kube::Config, kube::Error> {
    let kubeconfig = kube::config::Kubeconfig::read_from(path.as_ref()).map_err(kube::Error::InferKubeconfig)?;
    kube::Config::from_custom_kubeconfig(kubeconfig, &kube::config::KubeConfigOptions::default())
        .await
        .map_err(kube::Error::InferKubeconfig)
}
