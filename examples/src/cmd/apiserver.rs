//! `orchestra apiserver`: the embedded RocksDB store and the API server over
//! HTTPS, with the cluster CA, certificates and admin kubeconfig created in
//! the data directory on first start.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use orchestra_core::auth::service_account::{DEFAULT_ISSUER, TokenSigner};
use orchestra_core::auth::{
    AllowAuthenticated, AuthenticatorChain, AuthorizerChain, ClientCertAuthenticator, PublicInfoViewer, TokenFile,
};
use orchestra_core::server::pki::Pki;
use orchestra_core::server::{ApiServer, KubeletClient, ListenOptions};
use orchestra_store::RocksStore;

/// Options of `orchestra apiserver`.
#[derive(clap::Args)]
pub struct Args {
    /// Directory of the store (`store/`), the certificates (`pki/`) and, by
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
}

/// Runs the API server until SIGTERM or Ctrl-C.
pub async fn run(args: Args) -> Result<(), Box<dyn std::error::Error>> {
    let mut hosts = args.tls_sans.clone();
    if !args.listen.ip().is_unspecified() {
        hosts.push(args.listen.ip().to_string());
    }
    let pki = Pki::load_or_create(&args.data_dir.join("pki"), &hosts)?;
    let store = RocksStore::open(args.data_dir.join("store")).await?;

    let mut authenticator = AuthenticatorChain::new().with(ClientCertAuthenticator);
    if let Some(path) = &args.token_auth_file {
        authenticator = authenticator.with(TokenFile::read(path)?);
    }
    // Anonymous requests get in only as far as the authorizers let them:
    // health and version. Every authenticated user may do anything until
    // RBAC exists.
    let authenticator = authenticator.allow_anonymous(true);
    let authorizer = AuthorizerChain::new().with(PublicInfoViewer).with(AllowAuthenticated);
    // `pods/log` and `pods/exec` reach node agents with a client certificate
    // of the cluster CA; nodes started on their own (`orchestra node`) sign
    // their serving certificate themselves, which is not verified — as
    // upstream without `--kubelet-certificate-authority`.
    let kubelet_identity = pki.issue_client("kube-apiserver-kubelet-client", Some("system:masters"))?;
    let server = ApiServer::builder(Arc::new(store))
        .authenticator(authenticator)
        .authorizer(authorizer)
        .kubelet_client(KubeletClient::without_server_verification(&kubelet_identity)?)
        // Service account tokens (`kubectl create token`), signed by a key
        // kept with the certificates.
        .service_account_tokens(TokenSigner::load_or_create(&pki.dir().join("sa.key"), DEFAULT_ISSUER)?)
        .build()
        .await?;

    let listener = tokio::net::TcpListener::bind(args.listen).await?;
    let address = listener.local_addr()?;
    let host = if address.ip().is_unspecified() { "127.0.0.1".to_owned() } else { address.ip().to_string() };
    let url = if address.is_ipv6() {
        format!("https://[{host}]:{}", address.port())
    } else {
        format!("https://{host}:{}", address.port())
    };
    let kubeconfig = args.kubeconfig.clone().unwrap_or_else(|| args.data_dir.join("admin.kubeconfig"));
    pki.write_admin_kubeconfig(&kubeconfig, &url)?;

    let options = ListenOptions::default().with_tls(pki.server_tls_config()?);
    let serving =
        tokio::spawn(orchestra_core::server::serve(listener, server.router(), options, super::shutdown_signal()));
    println!("orchestra apiserver ready on {url} (kubeconfig {})", kubeconfig.display());
    serving.await??;
    println!("orchestra apiserver stopped");
    Ok(())
}
