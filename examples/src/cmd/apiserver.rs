//! `orchestra apiserver`: the embedded RocksDB store and the API server over
//! HTTPS, with the cluster CA, certificates and admin kubeconfig created in
//! the data directory on first start.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use orchestra::control_plane::{ControlPlane, Listener};
use orchestra::core::auth::TokenFile;
use orchestra::core::encryption::EncryptionConfig;
use orchestra::store::RocksStore;

/// Options of `orchestra apiserver`.
#[derive(clap::Args)]
pub struct Args {
    /// Directory of the store (`store/`), the certificates (`pki/`), the
    /// scheduler's and controller manager's kubeconfigs
    /// (`scheduler.kubeconfig`, `controller-manager.kubeconfig`) and, by
    /// default, the admin kubeconfig (`admin.kubeconfig`).
    #[arg(long, default_value = "orchestra-data")]
    data_dir: PathBuf,
    /// Address and port of the HTTPS listener.
    #[arg(long, default_value = "127.0.0.1:6443")]
    listen: SocketAddr,
    /// Where to write the admin kubeconfig.
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// Extra names or addresses the serving certificate must cover.
    #[arg(long = "tls-san")]
    tls_sans: Vec<String>,
    /// Static bearer tokens, upstream's CSV format: `token,user,uid,"group1,group2"`.
    #[arg(long)]
    token_auth_file: Option<PathBuf>,
    #[command(flatten)]
    auth: super::AuthArgs,
    #[command(flatten)]
    services: super::ServiceArgs,
    /// Encryption at rest: upstream's `EncryptionConfiguration` file.
    #[arg(long)]
    encryption_provider_config: Option<PathBuf>,
    #[command(flatten)]
    audit: super::audit::AuditArgs,
}

/// Runs the API server until SIGTERM or Ctrl-C.
pub async fn run(args: Args) -> Result<(), Box<dyn std::error::Error>> {
    let store = RocksStore::open(args.data_dir.join("store")).await?;
    let listener = Listener::tls(args.listen, args.data_dir.join("pki")).with_extra_sans(args.tls_sans.clone());
    let mut builder = ControlPlane::builder()
        .store(Arc::new(store))
        .data_dir(&args.data_dir)
        .listener(listener)
        // Nodes started on their own (`orchestra node`) sign their serving
        // certificate themselves.
        .verify_node_certificates(false)
        .without_scheduler()
        .without_controllers();
    if let Some(path) = &args.token_auth_file {
        builder = builder.authenticator(TokenFile::read(path)?);
    }
    builder = args.auth.apply(builder)?;
    builder = args.services.apply(builder);
    if let Some(path) = &args.encryption_provider_config {
        builder = builder.encryption(EncryptionConfig::from_file(path)?);
    }
    builder = args.audit.apply(builder)?;
    let server = builder.start().await?;
    let url = server.url().expect("a TLS listener has a URL");
    let kubeconfig = args.kubeconfig.clone().unwrap_or_else(|| args.data_dir.join("admin.kubeconfig"));
    server.write_admin_kubeconfig(&kubeconfig)?;
    // The scheduler's and the controller manager's own identities, bound to
    // their default roles, as kubeadm writes `scheduler.conf` and
    // `controller-manager.conf`.
    for (file, user) in [
        ("scheduler.kubeconfig", "system:kube-scheduler"),
        ("controller-manager.kubeconfig", "system:kube-controller-manager"),
    ] {
        server.write_client_kubeconfig(&args.data_dir.join(file), user, None)?;
    }
    println!("orchestra apiserver ready on {url} (kubeconfig {})", kubeconfig.display());
    super::shutdown_signal().await;
    server.shutdown().await?;
    println!("orchestra apiserver stopped");
    Ok(())
}
